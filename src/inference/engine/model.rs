//! The architecture-independent model interface: [`CausalLm`] (a batch of
//! sequences in, one logits row per sequence out). Loading a GGUF file is the
//! registry's job ([`crate::inference::models::load_model`], dispatching on
//! `general.architecture` to one file per family).
//!
//! Weights are shared: a loaded model is an `Arc<dyn CausalLm>` that every
//! agent's sequence borrows, while each sequence owns its own [`SeqState`]
//! (per layer: keys/values, or a recurrent state, or nothing; plus the
//! tokens it encodes). Five agents on one model cost one copy of the weights
//! and five states.

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use std::path::PathBuf;
use std::sync::Arc;

pub use crate::inference::engine::state::{KvCache, SeqState, SlotKind, SnapshotPolicy};

/// Facts about a loaded model that callers need (context limits, sizes).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// `general.architecture` (one of [`ARCHITECTURES`]).
    pub arch: String,
    /// `general.name`, or the file stem when absent.
    pub name: String,
    pub path: PathBuf,
    /// Training context length (`{arch}.context_length`).
    pub context_length: usize,
    pub vocab_size: usize,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// Number of weight parameters (elements of all tensors).
    pub n_params: u64,
    /// Bytes the weights occupy in the file.
    pub weight_bytes: u64,
}

impl ModelInfo {
    /// Size in billions of parameters (the `S` of the energy formula).
    pub fn size_billions(&self) -> f64 {
        self.n_params as f64 / 1e9
    }
}

/// Which logits a step wants back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Only the last position: a `[vocab]` tensor.
    Last,
    /// Every position of the step: a `[tokens, vocab]` tensor.
    All,
}

/// One sequence's part of a batched forward pass: its new tokens, its own
/// state (whose length is the position of the first new token), and which
/// logits it wants.
pub struct SeqStep<'a> {
    pub tokens: &'a [u32],
    pub state: &'a mut SeqState,
    pub logits: Logits,
}

impl<'a> SeqStep<'a> {
    pub fn new(tokens: &'a [u32], state: &'a mut SeqState) -> Self {
        Self {
            tokens,
            state,
            logits: Logits::Last,
        }
    }

    /// Absolute position of the first token of this step.
    pub fn position(&self) -> usize {
        self.state.len()
    }
}

/// A causal language model whose weights are shared by every sequence.
pub trait CausalLm: Send + Sync {
    fn info(&self) -> &ModelInfo;

    fn device(&self) -> &Device;

    /// What each layer keeps per sequence (default: keys and values everywhere).
    fn state_layout(&self) -> Vec<SlotKind> {
        vec![SlotKind::Kv; self.info().n_layer]
    }

    /// A fresh, empty sequence state for this model.
    fn new_state(&self) -> SeqState {
        SeqState::new(&self.state_layout(), self.info().context_length)
    }

    /// Run every sequence's new tokens through the model, advancing each
    /// sequence's own state, and return its logits (f32, see [`Logits`]) in
    /// batch order. Sequences may have different lengths and positions.
    /// On error no sequence's committed state has changed.
    fn forward(&self, batch: &mut [SeqStep<'_>]) -> Result<Vec<Tensor>>;
}

/// A model shared between sequences.
pub type SharedModel = Arc<dyn CausalLm>;

/// Copy a logits tensor (any shape) to a `Vec<f32>` on the host.
pub fn logits_to_vec(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}
