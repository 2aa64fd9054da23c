//! Text around the model: tokenizers from GGUF metadata, chat templates, thinking markers and
//! structured (constrained JSON) output.
//!
//! - [`tokenizer`]: BPE and SentencePiece tokenizers built from a GGUF's metadata.
//! - [`chat_template`]: HF-compatible chat templates on minijinja.
//! - [`thinking`]: thinking-token markers and splitting thinking from the answer.
//! - [`constrain`]: JSON-schema constrained decoding (llguidance) and free-mode parsing.

pub mod chat_template;
pub mod constrain;
pub(crate) mod thinking;
pub mod tokenizer;
