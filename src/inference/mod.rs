//! Local inference pieces that do not depend on a particular model
//! architecture: tokenizers read from GGUF metadata, chat templates, and the
//! accounting of thinking tokens.

pub mod chat_template;
pub mod thinking;
pub mod tokenizer;
//! Local inference: GGUF loading, model architectures, sampling and generation.

pub mod device;
pub mod generate;
pub mod gguf;
pub mod model;
pub mod models;
pub mod sampler;
//! Local inference: model manifests, model files and where they come from, GGUF headers.

pub mod gguf_info;
pub mod manifest;
pub mod sources;
pub mod wheel;
//! Local inference: everything between a loaded model and a `ModelResponse`.
//! - [`constrain`]: structured output (constrained JSON decoding, free-mode parsing).

pub mod constrain;
