//! The quant mix: which GGML type each tensor gets for a file type, as llama.cpp's
//! `llama-quantize` chooses it (`src/llama-quant.cpp`: `tensor_allows_quantization`,
//! `llama_tensor_get_type_impl`, `tensor_type_fallback`; llama.cpp de3ff81). A test holds
//! this against what `llama-quantize` writes for the same shapes.
//!
//! What is reproduced, for the types Joule synthesizes (Q4_K_M, Q5_K_M, Q6_K, Q8_0, F16,
//! BF16): only 2-D tensors whose name ends in `weight` are quantized, never `*_norm.weight`,
//! `ssm_conv1d`, `per_layer_model_proj` (they keep the converter's float type); `output.weight`
//! (or, when the model has none, `token_embd.weight` and `per_layer_token_embd.weight`) is
//! Q6_K unless the mix is Q8_0, and Q8_0 when its rows are not a multiple of 256; in Q4_K_M
//! and Q5_K_M, `attn_v`/`attn_qkv` and `ffn_down` get Q6_K on llama.cpp's "more bits" layers
//! (counted in llama.cpp's tensor order: by layer, then by name); a row length that the chosen
//! type's block does not divide falls back (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0, else F16).

use candle_core::quantized::GgmlDType;
use std::cmp::Ordering;

/// A file type `joule models synth --quant` writes (GGUF `general.file_type` in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Q4KM,
    Q5KM,
    Q6K,
    Q8_0,
    F16,
    BF16,
}

impl FileType {
    pub const NAMES: &'static [&'static str] = &["q4_k_m", "q5_k_m", "q6_k", "q8_0", "f16", "bf16"];

    pub fn parse(s: &str) -> Option<FileType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "q4_k_m" => FileType::Q4KM,
            "q5_k_m" => FileType::Q5KM,
            "q6_k" => FileType::Q6K,
            "q8_0" => FileType::Q8_0,
            "f16" => FileType::F16,
            "bf16" => FileType::BF16,
            _ => return None,
        })
    }

    /// `general.file_type` (llama.cpp's `llama_ftype`).
    pub fn ftype(self) -> u32 {
        match self {
            FileType::Q4KM => 15,
            FileType::Q5KM => 17,
            FileType::Q6K => 18,
            FileType::Q8_0 => 7,
            FileType::F16 => 1,
            FileType::BF16 => 32,
        }
    }

    /// The converter's float type for tensors that are never quantized (2-D norms, conv
    /// weights, ...): what `convert_hf_to_gguf.py --outtype f16` leaves and llama-quantize keeps.
    pub fn float_type(self) -> GgmlDType {
        match self {
            FileType::BF16 => GgmlDType::BF16,
            _ => GgmlDType::F16,
        }
    }

    fn default_type(self) -> GgmlDType {
        match self {
            FileType::Q4KM => GgmlDType::Q4K,
            FileType::Q5KM => GgmlDType::Q5K,
            FileType::Q6K => GgmlDType::Q6K,
            FileType::Q8_0 => GgmlDType::Q8_0,
            FileType::F16 => GgmlDType::F16,
            FileType::BF16 => GgmlDType::BF16,
        }
    }

    fn quantized(self) -> bool {
        !matches!(self, FileType::F16 | FileType::BF16)
    }
}

/// The layer number of `blk.N.*`, or -1 (llama.cpp's `weight_name_comparer`).
fn layer_of(name: &str) -> i64 {
    name.strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

/// llama.cpp's order of tensors when quantizing: by layer (non-layer tensors first), then name.
pub fn quantize_order(a: &str, b: &str) -> Ordering {
    layer_of(a).cmp(&layer_of(b)).then_with(|| a.cmp(b))
}

/// Whether llama-quantize would quantize this tensor at all.
fn allows_quantization(name: &str, n_dims: usize) -> bool {
    n_dims >= 2
        && name.ends_with("weight")
        && !name.contains("_norm.weight")
        && !name.contains("ffn_gate_inp.weight")
        && !name.contains("altup")
        && !name.contains("laurel")
        && !name.contains("per_layer_model_proj")
        && !name.contains("ssm_conv1d")
}

#[derive(PartialEq)]
enum Category {
    Output,
    TokenEmbd,
    AttnV, // attn_v, attn_qkv
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    if name == "output.weight" {
        Category::Output
    } else if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        Category::TokenEmbd
    } else if name.contains("attn_qkv.weight") || name.contains("attn_v.weight") {
        Category::AttnV
    } else if name.contains("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

pub(super) fn use_more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

pub(super) fn fallback(t: GgmlDType, ncols: u64) -> GgmlDType {
    if ncols % t.block_size() as u64 == 0 {
        return t;
    }
    let f = match t {
        GgmlDType::Q4K => GgmlDType::Q5_0,
        GgmlDType::Q5K => GgmlDType::Q5_1,
        GgmlDType::Q6K => GgmlDType::Q8_0,
        other => other,
    };
    if ncols % f.block_size() as u64 == 0 {
        f
    } else {
        GgmlDType::F16
    }
}

/// One tensor as the recipe sees it: its name and ggml shape (`ne[0]` first).
pub struct Shape<'a> {
    pub name: &'a str,
    pub ne: &'a [u64],
}

/// The type `convert_hf_to_gguf.py` gives a tensor in an f16/bf16 file (conversion/base.py):
/// F32 for 1-D tensors, `*_norm.weight`, `ssm_conv1d` and names not ending in `.weight`.
pub fn converter_type(ft: FileType, t: &Shape<'_>) -> GgmlDType {
    if t.ne.len() <= 1
        || t.name.ends_with("_norm.weight")
        || t.name.contains("ssm_conv1d")
        || !t.name.ends_with(".weight")
    {
        GgmlDType::F32
    } else {
        ft.float_type()
    }
}

/// The type of every tensor (in the order given) for `ft`. `n_layer_all` is the GGUF's
/// `block_count` (MTP layers included). Tensors that are never quantized keep the type the
/// converter gave them ([`converter_type`]).
pub fn assign(ft: FileType, tensors: &[Shape<'_>], n_layer_all: u64) -> Vec<GgmlDType> {
    let tied = !tensors.iter().any(|t| t.name == "output.weight");
    let n_attn_v = tensors
        .iter()
        .filter(|t| category(t.name) == Category::AttnV)
        .count() as i64;
    let n_layer = n_layer_all as i64;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| quantize_order(tensors[a].name, tensors[b].name));
    let mut out = vec![GgmlDType::F32; tensors.len()];
    let (mut i_attn_v, mut i_ffn_down) = (0i64, 0i64);
    for idx in order {
        let t = &tensors[idx];
        let n_dims = t.ne.iter().rposition(|&d| d != 1).map_or(1, |p| p + 1);
        if !allows_quantization(t.name, n_dims) {
            out[idx] = converter_type(ft, t);
            continue;
        }
        let mut ty = ft.default_type();
        if !ft.quantized() {
            out[idx] = converter_type(ft, t);
            continue;
        }
        let cat = category(t.name);
        let ncols = t.ne[0];
        if cat == Category::Output || (tied && cat == Category::TokenEmbd) {
            if ncols % ty.block_size() as u64 != 0 {
                ty = GgmlDType::Q8_0;
            } else if ty != GgmlDType::Q8_0 {
                ty = GgmlDType::Q6K;
            }
        } else if cat == Category::AttnV {
            if matches!(ft, FileType::Q4KM | FileType::Q5KM) && use_more_bits(i_attn_v, n_attn_v) {
                ty = GgmlDType::Q6K;
            }
            i_attn_v += 1;
        } else if cat == Category::FfnDown {
            if matches!(ft, FileType::Q4KM | FileType::Q5KM) && use_more_bits(i_ffn_down, n_layer) {
                ty = GgmlDType::Q6K;
            }
            i_ffn_down += 1;
        }
        out[idx] = fallback(ty, ncols);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_fallbacks() {
        let shapes = [
            Shape {
                name: "token_embd.weight",
                ne: &[576, 1000],
            },
            Shape {
                name: "blk.0.attn_q.weight",
                ne: &[576, 576],
            },
            Shape {
                name: "blk.0.attn_norm.weight",
                ne: &[576],
            },
            Shape {
                name: "blk.0.ffn_down.weight",
                ne: &[1536, 576],
            },
        ];
        let t = assign(FileType::Q4KM, &shapes, 1);
        // tied, 576 % 256 != 0: Q8_0; Q4_K falls back to Q5_0; norms F32; first ffn_down Q6_K.
        assert_eq!(
            t,
            vec![
                GgmlDType::Q8_0,
                GgmlDType::Q5_0,
                GgmlDType::F32,
                GgmlDType::Q6K
            ]
        );
        let t = assign(FileType::Q8_0, &shapes, 1);
        assert_eq!(
            t,
            vec![
                GgmlDType::Q8_0,
                GgmlDType::Q8_0,
                GgmlDType::F32,
                GgmlDType::Q8_0
            ]
        );
    }

    #[test]
    fn order_is_by_layer_then_name() {
        let mut names = vec![
            "blk.10.a",
            "blk.2.b",
            "output.weight",
            "blk.2.a",
            "token_embd.weight",
        ];
        names.sort_by(|a, b| quantize_order(a, b));
        assert_eq!(
            names,
            vec![
                "output.weight",
                "token_embd.weight",
                "blk.2.a",
                "blk.2.b",
                "blk.10.a"
            ]
        );
    }
}
