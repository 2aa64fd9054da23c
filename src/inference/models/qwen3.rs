//! Qwen3 dense family: no q/k/v biases, RMSNorm of every q and k head before
//! the (neox-style) rotary positions, head size from `attention.key_length`.

use super::decoder::{Activation, ArchSpec, DecoderModel, HyperParams, LayerKind, Rope, RopeStyle};
use crate::inference::files::gguf_weights::GgufFile;
use anyhow::Result;
use candle_core::Device;

pub fn load(g: &mut GgufFile, device: &Device) -> Result<DecoderModel> {
    let hp = HyperParams::read(g, "qwen3")?;
    let rope = Rope::new(hp.head_dim, hp.rope_base, hp.rope_pos_scale, None);
    let spec = ArchSpec {
        rope_style: RopeStyle::Neox,
        qkv_bias: false,
        qk_norm: true,
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
