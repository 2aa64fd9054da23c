//! Local inference: model manifests, model files and where they come from, GGUF headers.

pub mod gguf_info;
pub mod manifest;
pub mod sources;
pub mod wheel;
