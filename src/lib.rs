//! Joule: societies of local LLM agents where every generated token costs energy.
//!
//! Module map (see ARCHITECTURE.md for the flow of one round):
//! - [`backend`]: requests, responses and the `Backend` trait (scenario ↔ inference boundary).
//! - [`agency`]: the driver that runs many scenarios at once and batches their calls per model.
//! - [`scripted`]: non-LLM policies behind the backend interface.
//! - [`energy`]: cost model and Python-exact rounding.
//! - [`record`]: append-only JSONL event logs and atomic JSON files.
//! - [`nprand`]: a bit-exact port of numpy's seeding, PCG64 and the draws the job sampler uses.
//! - [`report`]: `joule report`, the Energy Society's aggregate metrics, tables and plots.
//! - [`inference`]: local models on candle: manifests and sources, GGUF, tokenizers, chat
//!   templates, architectures with per-agent KV caches, sampling, constrained JSON, generation.
//! - [`served`]: model-backed agents on an OpenAI-compatible server (Ollama, vLLM, llama-server).
//! - [`race`]: the AI development race, its audit and the evolutionary benchmark.
//! - [`cli`]: the `joule` command line.
//! - [`progress`]: progress of long operations on standard error (bars, plain lines, off).
//! - [`output`]: printing that never fails on a closed pipe; [`interrupt`]: SIGINT/SIGTERM.
//! - [`names`]: the nearest known names for a misspelled one.
//! - [`shown`]: outside text made safe for a terminal or a Markdown table cell.
//! - [`knobs`]: every `JOULE_*` environment variable, and the only place they are read.

pub mod agency;
pub mod backend;
pub mod cli;
pub mod csv;
pub mod energy;
pub mod energy_society;
pub mod figure;
pub mod inference;
pub mod interrupt;
pub mod knobs;
pub mod llm;
pub mod meter;
pub mod names;
pub(crate) mod nprand;
pub mod npy;
pub mod output;
pub mod progress;
pub mod provenance;
pub mod race;
pub mod record;
pub mod report;
pub(crate) mod scripted;
pub(crate) mod served;
pub mod shown;
pub mod stats;
pub mod sweep;
pub mod threads;
