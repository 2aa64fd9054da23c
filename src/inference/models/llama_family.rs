//! The llama-like dense decoders, one spec with the differences as data: pre-norm
//! blocks, SiLU-gated MLP, one rotary table, full attention in every layer.
//!
//! | variant | `general.architecture` | rotary layout | q/k/v bias | q/k RMSNorm | rotary frequency factors |
//! |---|---|---|---|---|---|
//! | [`Variant::Llama`] (Llama 2/3, SmolLM, Mistral-style) | `llama` | interleaved (llama.cpp stores llama q/k weights permuted for it) | no | no | optional `rope_freqs.weight` |
//! | [`Variant::Qwen2`] (Qwen2 / Qwen2.5) | `qwen2` | neox | yes | no | none |
//! | [`Variant::Qwen3`] (Qwen3 dense) | `qwen3` | neox | no | per head, before the rotation | none |
//!
//! The head size is read from `attention.key_length` where the file has it (Qwen3
//! sets it apart from `embedding_length / head_count`). Tied embeddings (no
//! `output.weight`, the output projection reusing `token_embd.weight`) are the
//! tensor loader's concern (`nn.rs`) and work for every variant. Llama mixture-of-experts
//! files are refused.

use super::decoder::{
    rope_freq_factors, Activation, ArchSpec, DecoderModel, HyperParams, LayerKind, Rope, RopeStyle,
};
use crate::inference::files::gguf_weights::GgufFile;
use anyhow::Result;
use candle_core::Device;

/// A member of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Llama,
    Qwen2,
    Qwen3,
}

impl Variant {
    /// The variant of a `general.architecture`, if it is one.
    pub fn of(arch: &str) -> Option<Self> {
        match arch {
            "llama" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            _ => None,
        }
    }

    /// The GGUF metadata prefix (`<arch>.block_count`, …).
    pub fn arch(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }

    /// How the shared decoder runs this variant.
    fn spec(self) -> ArchSpec {
        ArchSpec {
            rope_style: match self {
                Self::Llama => RopeStyle::Interleaved,
                Self::Qwen2 | Self::Qwen3 => RopeStyle::Neox,
            },
            qkv_bias: self == Self::Qwen2,
            qk_norm: self == Self::Qwen3,
            sandwich_norms: false,
            activation: Activation::Silu,
            scale_embeddings: false,
            attn_scale: None,
            attn_softcap: None,
            final_softcap: None,
        }
    }
}

pub fn load(g: &mut GgufFile, variant: Variant, device: &Device) -> Result<DecoderModel> {
    let hp = HyperParams::read(g, variant.arch())?;
    let factors = if variant == Variant::Llama {
        if g.has_tensor("blk.0.ffn_gate_inp.weight") {
            return Err(g
                .invalid("llama mixture-of-experts models are not implemented")
                .into());
        }
        rope_freq_factors(g, hp.head_dim, device)?
    } else {
        None
    };
    let rope = Rope::new(
        hp.head_dim,
        hp.rope_base,
        hp.rope_pos_scale,
        factors.as_deref(),
    );
    let kinds = vec![
        LayerKind {
            rope: 0,
            window: None
        };
        hp.n_layer
    ];
    DecoderModel::load(g, hp, variant.spec(), vec![rope], kinds, device)
}
