//! Served models: model-backed agents answered by an OpenAI-compatible
//! server (Ollama, vLLM, llama.cpp's llama-server) instead of the local
//! candle engine, with the same exact accounting (the server's own token
//! counts, never guessed).
//!
//! - [`config`]: the served backend's options (from `[llm]`, see `crate::llm`), served model names.
//! - [`api`]: the chat-completions request body and response reading (pure).
//! - [`client`]: HTTP (ureq) and the retry policy.
//! - [`openai`]: [`openai::OpenAiBackend`], the `Backend` (bounded concurrency, answers in order).

pub mod api;
pub mod client;
pub mod config;
pub mod openai;
