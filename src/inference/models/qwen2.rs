//! Qwen2 / Qwen2.5 family: llama-like blocks with biases on the q, k and v
//! projections and neox-style rotary positions.

use super::decoder::{Activation, ArchSpec, DecoderModel, HyperParams, LayerKind, Rope, RopeStyle};
use crate::inference::files::gguf_weights::GgufFile;
use anyhow::Result;
use candle_core::Device;

pub fn load(g: &mut GgufFile, device: &Device) -> Result<DecoderModel> {
    let hp = HyperParams::read(g, "qwen2")?;
    let rope = Rope::new(hp.head_dim, hp.rope_base, hp.rope_pos_scale, None);
    let spec = ArchSpec {
        rope_style: RopeStyle::Neox,
        qkv_bias: true,
        qk_norm: false,
        sandwich_norms: false,
        activation: Activation::Silu,
        scale_embeddings: false,
        attn_scale: None,
        attn_softcap: None,
        final_softcap: None,
    };
    let kinds = vec![
        LayerKind {
            rope: 0,
            window: None
        };
        hp.n_layer
    ];
    DecoderModel::load(g, hp, spec, vec![rope], kinds, device)
}
