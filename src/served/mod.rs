//! Served models: model-backed agents answered by an OpenAI-compatible
//! server (Ollama, vLLM, llama.cpp's llama-server) instead of the local
//! candle engine, with the same exact accounting (the server's own token
//! counts, never guessed).
//!
//! - [`config`]: `[llm] backend = "openai"` and its fields, their checks, served model names.
//! - [`api`]: the chat-completions request body and response reading (pure).
//! - [`client`]: HTTP (ureq) and the retry policy.
//! - [`openai`]: [`openai::OpenAiBackend`], the `Backend` (bounded concurrency, answers in order).

pub mod api;
pub mod client;
pub mod config;
pub mod openai;

use crate::backend::Backend;
use crate::inference::llm_backend::{LlmConfig, MixedBackend};
use crate::scripted::ScriptedBackend;

use config::{BackendKind, ServedNames};

/// The backend of a config with model-backed agents: `scripted:` keys go to
/// `scripted`, every other key to the `[llm]` section's backend (local
/// candle, or the server, whose models are checked here, before anything runs).
pub fn mixed_backend(
    llm: &LlmConfig,
    scripted: ScriptedBackend,
    names: ServedNames,
) -> anyhow::Result<Box<dyn Backend>> {
    Ok(match llm.backend {
        BackendKind::Local => Box::new(MixedBackend::new(scripted, llm.backend()?)),
        BackendKind::Openai => Box::new(MixedBackend::new(
            scripted,
            openai::OpenAiBackend::connect(llm, names)?,
        )),
    })
}
