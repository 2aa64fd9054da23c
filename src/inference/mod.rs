//! Local inference on candle: everything between a model manifest and a `ModelResponse`.
//! Five rooms, each a folder, and the backend that ties them together:
//!
//! - [`files`]: manifests, where model files come from, sha256 checks, the GGUF format.
//! - [`text`]: tokenizers, chat templates, thinking markers, constrained JSON output.
//! - [`engine`]: the model interface, sequence state, the prefix cache, sampling, batched
//!   generation, the memory plan, device choice.
//! - [`kernels`]: Joule's CPU kernels (quantised matrix products, attention) and the host side
//!   of its CUDA kernels.
//! - [`models`]: one file per architecture and the registry that loads a GGUF by its
//!   `general.architecture`.
//! - [`llm_backend`]: [`llm_backend::LlmBackend`], the `Backend` that answers scenario requests
//!   with these models.
//!
//! The rooms are layered, bottom first: `files`, `text`, `kernels`, `engine`, `models`; a room
//! imports only the rooms below it, with two declared exceptions (`files::manifest` checks
//! manifests against the registry's list of architectures; the CUDA host side takes its
//! shapes, `Dims`, from the model files it accelerates). `llm_backend` uses all of them.
//! Nothing here imports a scenario, the CLI or `served`. `scripts/import_cycles.py` checks
//! all of this.

pub mod engine;
pub mod files;
pub mod kernels;
pub mod llm_backend;
pub mod models;
pub mod text;
