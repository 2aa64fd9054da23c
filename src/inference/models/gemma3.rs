//! Gemma 3 (text) family: embeddings scaled by `sqrt(n_embd)`, sandwich
//! norms (after attention and after the MLP as well as before), q/k head
//! norms, GELU-tanh gated MLP, neox rotary positions, and sliding-window
//! layers alternating with global ones.
//!
//! Conventions follow llama.cpp's gemma3 graph:
//! - RMSNorm weights in GGUF already hold gemma's `1 + w` (the converter adds 1).
//! - Layer `i` slides when `i % pattern < pattern - 1`; `pattern` is
//!   `gemma3.attention.sliding_window_pattern` (a count, or a per-layer bool
//!   array), default 6. Sliding layers use `rope.freq_base_swa` (default
//!   10000) without rope scaling, global layers `rope.freq_base` with it.
//! - Query scale `1/sqrt(head_dim)`, except the 62-layer (27B) model, which
//!   uses `1/sqrt(n_embd / n_head)` (gemma's `query_pre_attn_scalar`).
//! - Final-logit soft-capping when `gemma3.final_logit_softcapping` is set.

use super::decoder::{Activation, ArchSpec, DecoderModel, HyperParams, LayerKind, Rope, RopeStyle};
use crate::inference::files::gguf_weights::GgufFile;
use anyhow::Result;
use candle_core::quantized::gguf_file::Value;
use candle_core::Device;

pub fn load(g: &mut GgufFile, device: &Device) -> Result<DecoderModel> {
    let hp = HyperParams::read(g, "gemma3")?;
    let window = g
        .opt("gemma3.attention.sliding_window", GgufFile::usize)?
        .filter(|&w| w > 0);
    let sliding: Vec<bool> = match (window, g.raw("gemma3.attention.sliding_window_pattern")) {
        (None, _) => vec![false; hp.n_layer],
        (Some(_), Some(Value::Array(flags))) => {
            if flags.len() != hp.n_layer {
                return Err(g
                    .invalid(format!(
                        "gemma3.attention.sliding_window_pattern has {} entries for {} layers",
                        flags.len(),
                        hp.n_layer
                    ))
                    .into());
            }
            flags
                .iter()
                .map(|v| v.to_bool())
                .collect::<candle_core::Result<Vec<bool>>>()
                .map_err(|e| g.invalid(format!("gemma3.attention.sliding_window_pattern: {e}")))?
        }
        (Some(_), _) => {
            let pattern = g
                .opt("gemma3.attention.sliding_window_pattern", GgufFile::usize)?
                .unwrap_or(6);
            if pattern == 0 {
                return Err(g
                    .invalid("gemma3.attention.sliding_window_pattern is 0")
                    .into());
            }
            (0..hp.n_layer).map(|i| i % pattern < pattern - 1).collect()
        }
    };
    let swa_base = g
        .opt("gemma3.rope.freq_base_swa", GgufFile::f32)?
        .unwrap_or(10_000.0);
    let global = Rope::new(hp.head_dim, hp.rope_base, hp.rope_pos_scale, None);
    let local = Rope::new(hp.head_dim, swa_base, 1.0, None);
    let kinds = sliding
        .iter()
        .map(|&s| {
            if s {
                LayerKind { rope: 1, window }
            } else {
                LayerKind {
                    rope: 0,
                    window: None,
                }
            }
        })
        .collect();
    let attn_scale = if hp.n_layer == 62 {
        1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt()
    } else {
        1.0 / (hp.head_dim as f32).sqrt()
    };
    let spec = ArchSpec {
        rope_style: RopeStyle::Neox,
        qkv_bias: false,
        qk_norm: true,
        sandwich_norms: true,
        activation: Activation::GeluTanh,
        scale_embeddings: true,
        attn_scale: Some(attn_scale),
        attn_softcap: g.opt("gemma3.attn_logit_softcapping", GgufFile::f32)?,
        final_softcap: g.opt("gemma3.final_logit_softcapping", GgufFile::f32)?,
    };
    DecoderModel::load(g, hp, spec, vec![global, local], kinds, device)
}
