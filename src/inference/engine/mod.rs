//! The engine: the model interface, per-sequence state, the prefix cache, sampling,
//! batched generation and the memory plan.
//!
//! - [`model`]: [`model::CausalLm`] (a batch of sequences in, logits out) and loading a model
//!   through the registry in [`crate::inference::models`].
//! - [`state`]: [`state::SeqState`], one sequence's keys/values or recurrent state.
//! - [`prefix_cache`]: computed prompt blocks shared by every call, agent and run.
//! - [`sampler`], [`generate`]: seeded sampling; batched and continuous generation with exact counts.
//! - [`memory_plan`]: measuring what models and states need against a device.
//! - [`kernel_record`]: which kernels (Joule's or candle's) a run uses, for its resolved config
//!   and `joule bench`.
//! - [`huge_pages`]: whether the binary's heap may use transparent huge pages (off: memory as planned).
//! - [`memory_measure`]: what the process really holds (`VmRSS`/`VmHWM`) after a plan's workload.
//! - [`device`]: choosing a device (`cpu`, `cuda[:N]`, `metal[:N]`).
//! - [`logits`]: the logits of a token sequence (`joule logits`, the roster tests).
//! - [`dump`]: hidden states layer by layer (`joule logits --dump DIR`), to find where two engines part.

pub mod device;
pub mod dump;
pub mod generate;
pub mod huge_pages;
pub mod kernel_record;
pub mod load_purge;
pub mod logits;
pub mod memory_measure;
pub mod memory_plan;
pub mod model;
pub mod prefix_cache;
pub(crate) mod sampler;
pub mod state;
