//! Local inference: GGUF loading, model architectures, sampling and generation.

pub mod device;
pub mod generate;
pub mod gguf;
pub mod model;
pub mod models;
pub mod sampler;
