//! The architecture-independent model interface: [`CausalLm`] (a batch of
//! sequences in, one logits row per sequence out), the per-sequence
//! [`KvCache`], and [`load_model`], which dispatches on the GGUF
//! `general.architecture` to one file per family under `models/`.
//!
//! Weights are shared: a loaded model is an `Arc<dyn CausalLm>` that every
//! agent's sequence borrows, while each sequence owns its own `KvCache`
//! (per-layer keys/values plus the tokens they encode). Five agents on one
//! model cost one copy of the weights and five caches.

use super::gguf::{GgufFile, LoadError};
use super::models;
use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Facts about a loaded model that callers need (context limits, sizes).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// `general.architecture` (`llama`, `qwen2`, `qwen3`, `gemma3`).
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

/// The keys and values one sequence has computed so far, layer by layer,
/// with the tokens they encode (so a later call that extends the same
/// conversation only runs the new tokens).
///
/// Per layer the cache holds `[n_kv_head, capacity, head_dim]` tensors that
/// grow by doubling; appending writes in place, no per-token concatenation.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    tokens: Vec<u32>,
    max_len: usize,
}

impl KvCache {
    /// An empty cache for a model with `n_layer` layers that holds at most
    /// `max_len` positions (the model's context length).
    pub fn new(n_layer: usize, max_len: usize) -> Self {
        Self {
            layers: vec![None; n_layer],
            tokens: Vec::new(),
            max_len,
        }
    }

    /// Number of positions cached (the position of the next token).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokens whose keys/values are cached, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn n_layer(&self) -> usize {
        self.layers.len()
    }

    /// Forget everything after the first `len` positions.
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.tokens.clear();
    }

    /// How many leading tokens of `prompt` are already cached.
    pub fn common_prefix(&self, prompt: &[u32]) -> usize {
        self.tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Append `k`, `v` (`[n_kv_head, t, head_dim]`) for `layer` at the
    /// current position and return all cached keys and values of that layer
    /// (`[n_kv_head, len + t, head_dim]`). Positions are committed by
    /// [`Self::commit`] once every layer has appended.
    pub fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let pos = self.tokens.len();
        let (n_kv, t, hd) = k.dims3()?;
        let needed = pos + t;
        let slot = self
            .layers
            .get_mut(layer)
            .ok_or_else(|| candle_core::Error::Msg(format!("kv cache has no layer {layer}")))?;
        let cap = slot.as_ref().map(|(kc, _)| kc.dims()[1]).unwrap_or(0);
        if needed > cap {
            let new_cap = needed.max(cap * 2).max(64);
            let grow = |old: Option<&Tensor>| -> candle_core::Result<Tensor> {
                let fresh = Tensor::zeros((n_kv, new_cap, hd), k.dtype(), k.device())?;
                if let Some(old) = old {
                    if pos > 0 {
                        fresh.slice_set(&old.narrow(1, 0, pos)?.contiguous()?, 1, 0)?;
                    }
                }
                Ok(fresh)
            };
            let nk = grow(slot.as_ref().map(|(kc, _)| kc))?;
            let nv = grow(slot.as_ref().map(|(_, vc)| vc))?;
            *slot = Some((nk, nv));
        }
        let (kc, vc) = slot.as_ref().expect("slot filled above");
        kc.slice_set(&k.contiguous()?, 1, pos)?;
        vc.slice_set(&v.contiguous()?, 1, pos)?;
        Ok((kc.narrow(1, 0, needed)?, vc.narrow(1, 0, needed)?))
    }

    /// Record that `tokens` were appended to every layer.
    pub fn commit(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
    }

    /// Bytes held by the cache tensors.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes())
            .sum()
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
/// cache (whose length is the position of the first new token), and which
/// logits it wants.
pub struct SeqStep<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
    pub logits: Logits,
}

impl<'a> SeqStep<'a> {
    pub fn new(tokens: &'a [u32], cache: &'a mut KvCache) -> Self {
        Self {
            tokens,
            cache,
            logits: Logits::Last,
        }
    }

    /// Absolute position of the first token of this step.
    pub fn position(&self) -> usize {
        self.cache.len()
    }
}

/// A causal language model whose weights are shared by every sequence.
pub trait CausalLm: Send + Sync {
    fn info(&self) -> &ModelInfo;

    fn device(&self) -> &Device;

    /// A fresh cache sized for this model.
    fn new_cache(&self) -> KvCache {
        let info = self.info();
        KvCache::new(info.n_layer, info.context_length)
    }

    /// Run every sequence's new tokens through the model, appending to each
    /// sequence's own cache, and return its logits (f32, see [`Logits`]) in
    /// batch order. Sequences may have different lengths and positions.
    fn forward(&self, batch: &mut [SeqStep<'_>]) -> Result<Vec<Tensor>>;
}

/// A model shared between sequences.
pub type SharedModel = Arc<dyn CausalLm>;

/// Architectures [`load_model`] implements.
pub const ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3", "gemma3"];

/// Load the GGUF model at `path` onto `device`.
pub fn load_model(path: impl AsRef<Path>, device: &Device) -> Result<SharedModel> {
    let mut gguf = GgufFile::open(path)?;
    let arch = gguf.architecture()?;
    let model: SharedModel = match arch.as_str() {
        "llama" => Arc::new(models::llama::load(&mut gguf, device)?),
        "qwen2" => Arc::new(models::qwen2::load(&mut gguf, device)?),
        "qwen3" => Arc::new(models::qwen3::load(&mut gguf, device)?),
        "gemma3" => Arc::new(models::gemma3::load(&mut gguf, device)?),
        _ => {
            return Err(LoadError::UnsupportedArchitecture {
                path: gguf.path().to_path_buf(),
                arch,
                known: ARCHITECTURES.join(", "),
            }
            .into())
        }
    };
    Ok(model)
}

/// Copy a logits tensor (any shape) to a `Vec<f32>` on the host.
pub fn logits_to_vec(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}
