//! Llama family (Llama 2/3, SmolLM, Mistral-style dense models): pre-norm
//! blocks, SiLU-gated MLP, interleaved rotary positions (llama.cpp stores
//! llama q/k weights permuted for that layout), optional `rope_freqs.weight`.

use super::decoder::{
    rope_freq_factors, Activation, ArchSpec, DecoderModel, HyperParams, LayerKind, Rope, RopeStyle,
};
use crate::inference::files::gguf_weights::GgufFile;
use anyhow::Result;
use candle_core::Device;

pub fn load(g: &mut GgufFile, device: &Device) -> Result<DecoderModel> {
    let hp = HyperParams::read(g, "llama")?;
    if g.has_tensor("blk.0.ffn_gate_inp.weight") {
        return Err(g
            .invalid("llama mixture-of-experts models are not implemented")
            .into());
    }
    let factors = rope_freq_factors(g, hp.head_dim, device)?;
    let rope = Rope::new(
        hp.head_dim,
        hp.rope_base,
        hp.rope_pos_scale,
        factors.as_deref(),
    );
    let spec = ArchSpec {
        rope_style: RopeStyle::Interleaved,
        qkv_bias: false,
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
