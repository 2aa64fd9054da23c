//! Joule's own compute kernels: quantised matrix products and attention on the CPU, and the
//! host side of the CUDA kernels in the top-level `kernels/*.cu`.
//!
//! - [`quant_matmul`]: CPU matrix products over the file's quantised blocks (AVX-512 VNNI,
//!   AVX-VNNI, AVX2, portable; chosen at run time).
//! - [`activation`]: element-wise activations candle computes through libm (GELU, tanh
//!   soft-capping).
//! - [`memory_read`]: a plain streaming read over the worker pool, the read bandwidth decode
//!   is held against (`joule bench`, `benches/quant_matmul.rs`).
//! - [`cpu_attention`]: fused flash-style attention on the CPU (decode steps and prompt tiles).
//! - `cuda` (with the `cuda` feature): loading and launching the CUDA kernels.
//! - `cuda_quant_types` (tests): CUDA against the CPU for every type of the real quant mixes.
//! - [`weight_memory`]: the vector a matrix's weights live in, advised onto huge pages.

pub mod activation;
pub(crate) mod cpu_attention;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod cuda_quant_types;
pub mod memory_read;
pub mod quant_matmul;
pub mod weight_memory;

/// How attention scores are formed: the parameters every attention path takes (the CPU
/// kernels here, the CUDA kernel, and candle's reference in `models::nn`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnParams {
    pub scale: f32,
    /// `tanh` soft-capping of the scores.
    pub softcap: Option<f32>,
    /// Sliding window (keys at distance `< window` are visible).
    pub window: Option<usize>,
}
