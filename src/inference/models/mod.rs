//! Model architectures, one file per family. `nn` holds the building blocks
//! every file uses (projections, norms, rotary tables, attention, the tensor
//! loader); `decoder` the standard decoder-only transformer that the llama,
//! qwen2, qwen3 and gemma3 files configure; hybrids have files of their own
//! (`qwen35` over the gated delta rule in `delta_net`, `nemotron_h` over the
//! Mamba-2 scan in `mamba2`).

pub mod decoder;
pub mod delta_net;
pub mod gemma3;
pub mod llama;
pub mod mamba2;
pub mod nemotron_h;
pub mod nn;
pub mod qwen2;
pub mod qwen3;
pub mod qwen35;
