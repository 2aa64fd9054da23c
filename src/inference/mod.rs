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
//! Between the rooms: `text` uses `files`; `engine` uses `files` and the registry in
//! `models`; `models` uses `engine`, `kernels` and `files`; `kernels` uses `files`, `engine`'s
//! state and device names (for its record), and the CUDA host side takes its shapes (`Dims`)
//! from the model files it accelerates; `files::manifest` reads the registry's list of
//! architectures. No file-level cycle (`scripts/import_cycles.py`). `llm_backend` uses all of
//! them. Nothing here imports a scenario, the CLI or `served`.

pub mod engine;
pub mod files;
pub mod kernels;
pub mod llm_backend;
pub mod models;
pub mod text;
