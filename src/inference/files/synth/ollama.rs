//! `joule models synth --layout ollama`: the file Ollama itself makes of a model, with its own
//! converter (`convert/convert_*.go` in ollama/ollama) and quantizer (`server/quantization.go`),
//! as Ollama v0.17 to v0.24 write them (Gemma 4 from v0.20; read at v0.24.0): the Go converter
//! and quantizer of the months the roster's library files were made. From v0.25 Ollama quantizes
//! with llama.cpp's `llama-quantize` and its qwen35 converter moved towards llama.cpp's keys. The plan is derived from llama.cpp's
//! ([`super::layout`]): every tensor holds the values of its llama.cpp counterpart for the same
//! seed ([`super::layout::PlannedTensor::seed_name`]), so the two files hold the same model.
//!
//! Both converters store the same numbers for a checkpoint: RMS-norm weights +1 for Qwen3.5
//! (not `ssm_norm`), none for Gemma 4; `ssm_a` = −exp(A_log) (Qwen3.5, Nemotron-H); Qwen3.5's
//! value heads reordered from the checkpoint's grouped order to the tiled order (value head `h`
//! reads key head `h mod n_k`), which Ollama flags with `ssm.v_head_reordered = true`; Llama's
//! q/k rows permuted for interleaved RoPE. What differs:
//!
//! - every architecture: metadata keys sorted by name and tensors by layer then name (non-layer
//!   tensors last), as Ollama's GGUF writer orders them; no `general.name`/`general.type`;
//!   `general.file_type` 1 for a conversion (f16, bf16); 2-D float tensors in the checkpoint's
//!   type (`--quant bf16` and the quantized files: BF16, the type of all seven checkpoints;
//!   `--quant f16`: F16, as from an F16 checkpoint); Ollama's quant mix ([`assign`]), which has
//!   Q4_K_M and Q8_0 only (`--quant q5_k_m`/`q6_k` are refused); a `--vocab` padded with
//!   `[PAD0]`, `[PAD1]`, … of score −1 and type user-defined.
//! - `llama` (SmolLM2), `qwen2` (Qwen2.5), `gemma4`: the same keys and tensors as llama.cpp's.
//!   Gemma 4's Q4_K_M keeps `per_layer_token_embd` BF16 and quantizes `per_layer_model_proj`.
//! - `qwen35`: `attention.head_count_kv` one u32 per layer (0 on delta-net layers: Ollama's
//!   runtime reads the layer kinds from it, and writes no `attention.recurrent_layers`); the
//!   three MRoPE sections as `mrope_sections`, `rope.mrope_section` and
//!   `rope.dimension_sections`, with `rope.mrope_interleaved`; `ssm.v_head_reordered`;
//!   `ssm_dt` (no `.bias`); no MTP block in `block_count` and no `nextn_predict_layers`.
//!   Q4_K_M: Ollama's fixed types for the attention and delta-net matrices (`attn_v` Q6_K,
//!   the others Q4_K).
//! - `nemotron_h`: `attention.head_count_kv` and `feed_forward_length` as u32 arrays (i32 in
//!   llama.cpp's), both `attention.layer_norm_epsilon` and `…_rms_epsilon`, `rope.freq_base`;
//!   no `rope.dimension_count`, `vocab_size` or `rope.scaling.finetuned`. `ssm_a`, `ssm_d`
//!   (`[1, heads]`) and `ssm_norm` (`[inner/groups, groups]`) are 2-D, so Ollama stores them in
//!   the float type (F32 in llama.cpp's file), and its quantizer leaves them there.
//! - `qwen3` (Qwen3-8B): refused. Ollama's converter has no case for `Qwen3ForCausalLM` (its
//!   qwen3 code serves only Qwen3-VL), so no Ollama-made qwen3 file exists to copy.
//!
//! Not written: the vision (`v.*`, `mm.*`) and audio (`a.*`) towers and Qwen3.5's MTP head
//! (`mtp.*`) that Ollama's files of Qwen3.5 and Gemma 4 carry, with their `vision.*`/`audio.*`
//! keys; Joule's loaders skip them, and text generation does not read them.

use super::gguf_writer::Value;
use super::layout::{self, Plan};
use super::recipe::{self, FileType, Shape};
use super::SynthConfig;
use anyhow::{bail, Result};
use candle_core::quantized::GgmlDType;

/// The architectures Ollama's converter imports, of those Joule synthesizes.
pub const ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen35", "nemotron_h", "gemma4"];

/// Why `--layout ollama` cannot be written for `arch`, if it cannot.
pub fn check(model: &str, arch: &str, ft: FileType) -> Result<()> {
    if arch == "qwen3" {
        bail!(
            "--layout ollama: {model} is {arch:?} (Qwen3ForCausalLM), which Ollama's converter \
             does not import (convert/convert.go has no case for it; its qwen3 code serves only \
             Qwen3-VL), so there is no Ollama-made layout to copy: use --layout llama.cpp"
        );
    }
    if !ARCHITECTURES.contains(&arch) {
        bail!(
            "--layout ollama: architecture {arch:?} of {model} is not written in Ollama's layout"
        );
    }
    if matches!(ft, FileType::Q5KM | FileType::Q6K) {
        bail!(
            "--layout ollama: Ollama quantizes to q4_k_m and q8_0 only (and converts to f16 or \
             bf16); expected one of q4_k_m, q8_0, f16, bf16"
        );
    }
    Ok(())
}

/// `general.file_type` of an Ollama file: 1 for a conversion (whatever its float type), the
/// quantizer's type otherwise.
pub fn file_type(ft: FileType) -> u32 {
    match ft {
        FileType::F16 | FileType::BF16 => 1,
        other => other.ftype(),
    }
}

/// Ollama's plan for `cfg` at `layers` layers: llama.cpp's, with Ollama's keys, names and order.
pub fn plan(model: &str, arch: &str, cfg: &SynthConfig, layers: u64) -> Result<Plan> {
    let mut p = layout::plan(model, arch, cfg, layers)?;
    p.metadata
        .retain(|(k, _)| k != "general.name" && k != "general.type");
    match arch {
        "llama" => {
            let key = "llama.rope.dimension_count";
            for (k, v) in p.metadata.iter_mut() {
                if k == key {
                    *v = Value::U32((cfg.hidden / cfg.heads.max(1)) as u32);
                }
            }
        }
        "qwen35" => qwen35(&mut p, model, cfg)?,
        "nemotron_h" => nemotron_h(&mut p, cfg),
        _ => {}
    }
    p.tensors.sort_by(|a, b| tensor_order(&a.name, &b.name));
    Ok(p)
}

/// Ollama's GGUF writer's tensor order: by layer (tensors of no layer last), then by name.
fn tensor_order(a: &str, b: &str) -> std::cmp::Ordering {
    let layer = |n: &str| -> u64 {
        n.strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|i| i.parse().ok())
            .unwrap_or(u64::MAX)
    };
    layer(a).cmp(&layer(b)).then_with(|| a.cmp(b))
}

/// Sorts the keys as Ollama's writer does: by the name the converter used, which for
/// `qwen35` and `nemotron_h` conversions lacks the architecture prefix (the writer adds it);
/// a quantized file is rewritten from the decoded keys, which have it.
pub fn sort_metadata(meta: &mut [(String, Value)], arch: &str, ft: FileType) {
    let unprefixed =
        matches!(ft, FileType::F16 | FileType::BF16) && matches!(arch, "qwen35" | "nemotron_h");
    let prefix = format!("{arch}.");
    meta.sort_by(|(a, _), (b, _)| {
        let name = |k: &'_ str| -> String {
            match k.strip_prefix(&prefix) {
                Some(rest) if unprefixed => rest.to_string(),
                _ => k.to_string(),
            }
        };
        name(a).cmp(&name(b))
    });
}

fn u32_array(xs: impl Iterator<Item = u64>) -> Value {
    Value::Array(xs.map(|x| Value::U32(x as u32)).collect())
}

/// Qwen3.5: keys rebuilt as `convert_qwen3next.go` writes them; MTP block dropped; `ssm_dt`.
fn qwen35(p: &mut Plan, model: &str, cfg: &SynthConfig) -> Result<()> {
    let n = p.kinds.chars().count() as u64;
    let kinds: Vec<char> = p.kinds.chars().collect();
    // the MTP block (llama.cpp's blk.n..) is Ollama's `mtp.*` tower, not written
    p.tensors.retain(|t| {
        t.name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|i| i.parse::<u64>().ok())
            .is_none_or(|l| l < n)
    });
    for t in p.tensors.iter_mut() {
        if let Some(stem) = t.name.strip_suffix(".ssm_dt.bias") {
            t.name = format!("{stem}.ssm_dt");
        }
    }
    p.block_count = n;
    let need = |v: Option<u64>, key: &str| {
        v.ok_or_else(|| anyhow::anyhow!("models/{model}.toml: [synth] needs `{key}` for qwen35"))
    };
    let (dk, nk, nv) = (
        need(cfg.ssm_state, "ssm_state")?,
        need(cfg.ssm_groups, "ssm_groups")?,
        need(cfg.ssm_heads, "ssm_heads")?,
    );
    let mut sections = cfg.rope_sections.clone().unwrap_or_default();
    // the checkpoint's `mrope_section` has three entries; llama.cpp pads it to four
    while sections.len() > 3 && sections.last() == Some(&0) {
        sections.pop();
    }
    let sections = Value::Array(sections.iter().map(|&s| Value::I32(s)).collect());
    let theta = cfg
        .rope_theta
        .ok_or_else(|| anyhow::anyhow!("models/{model}.toml: [synth] needs `rope_theta`"))?;
    let a = "qwen35";
    let mut m = vec![("general.architecture".to_string(), Value::Str(a.into()))];
    let mut kv = |k: &str, v: Value| m.push((format!("{a}.{k}"), v));
    kv("block_count", Value::U32(n as u32));
    kv("context_length", Value::U32(cfg.context as u32));
    kv("embedding_length", Value::U32(cfg.hidden as u32));
    kv("feed_forward_length", Value::U32(cfg.ffn as u32));
    kv("attention.head_count", Value::U32(cfg.heads as u32));
    kv("attention.key_length", Value::U32(cfg.head_dim as u32));
    kv("attention.value_length", Value::U32(cfg.head_dim as u32));
    kv("attention.layer_norm_rms_epsilon", Value::F32(cfg.norm_eps));
    kv("rope.freq_base", Value::F32(theta));
    kv(
        "rope.dimension_count",
        Value::U32(need(cfg.rope_dims, "rope_dims")? as u32),
    );
    kv("mrope_sections", sections.clone());
    kv("rope.mrope_section", sections.clone());
    kv("rope.dimension_sections", sections);
    kv("rope.mrope_interleaved", Value::Bool(true));
    kv("ssm.inner_size", Value::U32((dk * nv) as u32));
    kv("ssm.state_size", Value::U32(dk as u32));
    kv("ssm.group_count", Value::U32(nk as u32));
    kv("ssm.time_step_rank", Value::U32(nv as u32));
    kv(
        "ssm.conv_kernel",
        Value::U32(need(cfg.ssm_conv, "ssm_conv")? as u32),
    );
    kv("ssm.v_head_reordered", Value::Bool(true));
    kv(
        "full_attention_interval",
        Value::U32(need(cfg.full_attention_interval, "full_attention_interval")? as u32),
    );
    kv(
        "attention.head_count_kv",
        u32_array(
            kinds
                .iter()
                .map(|&k| if k == 'A' { cfg.kv_heads } else { 0 }),
        ),
    );
    p.metadata = m;
    Ok(())
}

/// Nemotron-H: keys rebuilt as `convert_nemotron_h.go` writes them (tensors as llama.cpp's).
fn nemotron_h(p: &mut Plan, cfg: &SynthConfig) {
    let kinds: Vec<char> = p.kinds.chars().collect();
    let get = |key: &str| -> Option<Value> {
        p.metadata
            .iter()
            .find(|(k, _)| k == &format!("nemotron_h.{key}"))
            .map(|(_, v)| v.clone())
    };
    let copy = [
        "block_count",
        "context_length",
        "embedding_length",
        "attention.head_count",
        "attention.key_length",
        "attention.value_length",
        "ssm.conv_kernel",
        "ssm.inner_size",
        "ssm.state_size",
        "ssm.group_count",
        "ssm.time_step_rank",
    ];
    let mut m = vec![(
        "general.architecture".to_string(),
        Value::Str("nemotron_h".into()),
    )];
    for key in copy {
        if let Some(v) = get(key) {
            m.push((format!("nemotron_h.{key}"), v));
        }
    }
    for key in [
        "attention.layer_norm_epsilon",
        "attention.layer_norm_rms_epsilon",
    ] {
        m.push((format!("nemotron_h.{key}"), Value::F32(cfg.norm_eps)));
    }
    m.push((
        "nemotron_h.rope.freq_base".into(),
        Value::F32(cfg.rope_theta.unwrap_or(10_000.0)),
    ));
    m.push((
        "nemotron_h.attention.head_count_kv".into(),
        u32_array(
            kinds
                .iter()
                .map(|&k| if k == '*' { cfg.kv_heads } else { 0 }),
        ),
    ));
    m.push((
        "nemotron_h.feed_forward_length".into(),
        u32_array(kinds.iter().map(|&k| if k == '-' { cfg.ffn } else { 0 })),
    ));
    p.metadata = m;
}

/// The type Ollama's converter gives a tensor (`convert/reader.go`, `reader_safetensors.go`):
/// F32 for 1-D tensors, biases, `ssm_conv1d` and `ffn_gate_inp`; the checkpoint's float type
/// for the rest.
fn converter_type(ft: FileType, t: &Shape<'_>) -> GgmlDType {
    if t.ne.len() <= 1
        || t.name.ends_with(".bias")
        || t.name.ends_with(".ssm_conv1d.weight")
        || t.name.ends_with(".ffn_gate_inp.weight")
    {
        GgmlDType::F32
    } else if ft == FileType::F16 {
        GgmlDType::F16
    } else {
        GgmlDType::BF16
    }
}

/// Whether Ollama's quantizer quantizes this tensor at all (`newType` in
/// `server/quantization.go`): 2-D or more, a name ending in `weight`, none of the towers, no
/// norm, router, conv kernel or per-layer token embedding.
fn quantizable(t: &Shape<'_>) -> bool {
    let n = t.name;
    n.ends_with("weight")
        && !n.starts_with("v.")
        && !n.starts_with("a.")
        && !n.contains("mm.")
        && t.ne.len() >= 2
        && !n.contains("_norm.weight")
        && !n.contains("ffn_gate_inp.weight")
        && !n.contains("ffn_gate_inp_shexp.weight")
        && n != "position_embd.weight"
        && n != "token_types.weight"
        && !n.contains("ssm_conv1d.weight")
        && !n.contains("shortconv.conv.weight")
        && !n.contains("attn_rel_b.weight")
        && !n.contains("per_layer_token_embd.weight")
}

/// Ollama's fixed Q4_K_M types for Qwen3.5's attention and delta-net matrices.
fn qwen35_q4_type(name: &str) -> Option<GgmlDType> {
    const Q4: &[&str] = &[
        ".attn_q.weight",
        ".attn_k.weight",
        ".attn_output.weight",
        ".attn_qkv.weight",
        ".attn_gate.weight",
        ".ssm_ba.weight",
        ".ssm_beta.weight",
        ".ssm_alpha.weight",
        ".ssm_out.weight",
    ];
    if name.ends_with(".attn_v.weight") {
        Some(GgmlDType::Q6K)
    } else if Q4.iter().any(|s| name.ends_with(s)) {
        Some(GgmlDType::Q4K)
    } else {
        None
    }
}

/// The type of every tensor (given in the file's order, which is the order Ollama's quantizer
/// counts them in) for `ft`, as Ollama's converter and quantizer choose them.
pub fn assign(ft: FileType, arch: &str, tensors: &[Shape<'_>]) -> Vec<GgmlDType> {
    let default = match ft {
        FileType::Q4KM => GgmlDType::Q4K,
        FileType::Q8_0 => GgmlDType::Q8_0,
        _ => return tensors.iter().map(|t| converter_type(ft, t)).collect(),
    };
    let has_output = tensors.iter().any(|t| t.name == "output.weight");
    let n_attn_v = tensors
        .iter()
        .filter(|t| {
            t.name.contains("attn_v.weight")
                || t.name.contains("attn_qkv.weight")
                || t.name.contains("attn_kv_b.weight")
        })
        .count() as i64;
    let mut layers: Vec<&str> = tensors
        .iter()
        .filter_map(|t| {
            let rest = t.name.strip_prefix("blk.")?;
            rest.split('.').next()
        })
        .collect();
    layers.sort_unstable();
    layers.dedup();
    let n_layers = layers.len() as i64;
    let q4km = ft == FileType::Q4KM;
    let (mut i_attn_v, mut i_ffn_down) = (0i64, 0i64);
    tensors
        .iter()
        .map(|t| {
            if !quantizable(t) {
                return converter_type(ft, t);
            }
            if arch == "qwen35" && q4km {
                if let Some(ty) = qwen35_q4_type(t.name) {
                    return ty;
                }
            }
            let n = t.name;
            let mut ty = default;
            if n == "output.weight" || (!has_output && n == "token_embd.weight") {
                if t.ne[0] % ty.block_size() as u64 != 0 {
                    ty = GgmlDType::Q8_0;
                } else if ty != GgmlDType::Q8_0 {
                    ty = GgmlDType::Q6K;
                }
            } else if n.contains("attn_v.weight") {
                if q4km && recipe::use_more_bits(i_attn_v, n_attn_v) {
                    ty = GgmlDType::Q6K;
                }
                i_attn_v += 1;
            } else if n.contains("ffn_down") && !n.contains("_exps") {
                if q4km && recipe::use_more_bits(i_ffn_down, n_layers) {
                    ty = GgmlDType::Q6K;
                }
                i_ffn_down += 1;
            } else if n.contains("attn_qkv.weight") && q4km {
                ty = GgmlDType::Q5K;
            }
            recipe::fallback(ty, t.ne[0])
        })
        .collect()
}

/// Ollama's vocabulary padding (`convert.LoadModelMetadata`): `[PADi]` from 0, score −1,
/// user-defined.
pub fn pad_token(i: u64) -> (String, f32, i32) {
    (format!("[PAD{i}]"), -1.0, 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::files::manifest::Catalog;
    use layout::PlannedTensor;

    fn find<'a>(p: &'a Plan, name: &str) -> Option<&'a PlannedTensor> {
        p.tensors.iter().find(|t| t.name == name)
    }

    fn cfg(model: &str) -> (String, SynthConfig) {
        let catalog = Catalog::embedded().unwrap();
        let m = catalog.get(model).unwrap();
        (m.architecture.clone(), m.synth.clone().unwrap())
    }

    /// A key's value, printed (the writer's values have no `PartialEq`).
    fn meta(p: &Plan, key: &str) -> Option<String> {
        p.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| format!("{v:?}"))
    }

    fn v(x: &Value) -> Option<String> {
        Some(format!("{x:?}"))
    }

    fn types(p: &Plan, ft: FileType, arch: &str) -> Vec<(String, GgmlDType)> {
        let shapes: Vec<Shape<'_>> = p
            .tensors
            .iter()
            .map(|t| Shape {
                name: &t.name,
                ne: &t.ne,
            })
            .collect();
        let ty = assign(ft, arch, &shapes);
        p.tensors.iter().map(|t| t.name.clone()).zip(ty).collect()
    }

    fn type_of(ts: &[(String, GgmlDType)], name: &str) -> GgmlDType {
        ts.iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
            .1
    }

    fn assert_sorted(p: &Plan) {
        let names: Vec<&str> = p.tensors.iter().map(|t| t.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_by(|a, b| tensor_order(a, b));
        assert_eq!(names, sorted);
        assert!(
            names.last().is_some_and(|n| !n.starts_with("blk.")),
            "non-layer tensors come last"
        );
        assert!(meta(p, "general.name").is_none() && meta(p, "general.type").is_none());
    }

    #[test]
    fn qwen35_has_ollamas_keys_and_names() {
        let (arch, c) = cfg("qwen3.5-4b");
        let p = plan("qwen3.5-4b", &arch, &c, 4).unwrap();
        assert_sorted(&p);
        assert_eq!(p.block_count, 4);
        assert_eq!(meta(&p, "qwen35.block_count"), v(&Value::U32(4)));
        let three = Value::Array(vec![Value::I32(11), Value::I32(11), Value::I32(10)]);
        for key in [
            "qwen35.mrope_sections",
            "qwen35.rope.mrope_section",
            "qwen35.rope.dimension_sections",
        ] {
            assert_eq!(meta(&p, key), v(&three), "{key}");
        }
        assert_eq!(
            meta(&p, "qwen35.ssm.v_head_reordered"),
            v(&Value::Bool(true))
        );
        assert_eq!(
            meta(&p, "qwen35.rope.mrope_interleaved"),
            v(&Value::Bool(true))
        );
        // one entry per layer, 0 on delta-net layers
        let kinds: Vec<char> = p.kinds.chars().collect();
        let want = Value::Array(
            kinds
                .iter()
                .map(|&k| Value::U32(if k == 'A' { 4 } else { 0 }))
                .collect(),
        );
        assert_eq!(meta(&p, "qwen35.attention.head_count_kv"), v(&want));
        for absent in [
            "qwen35.attention.recurrent_layers",
            "qwen35.nextn_predict_layers",
        ] {
            assert!(meta(&p, absent).is_none(), "{absent}");
        }
        let d = kinds.iter().position(|&k| k == 'D').unwrap();
        let dt = find(&p, &format!("blk.{d}.ssm_dt")).expect("ssm_dt without .bias");
        assert_eq!(dt.seed_name, format!("blk.{d}.ssm_dt.bias"));
        assert!(p.tensors.iter().all(|t| !t.name.ends_with(".bias")));
        assert!(
            p.tensors.iter().all(|t| !t.name.starts_with("blk.4.")),
            "no MTP block"
        );
        let ts = types(&p, FileType::Q4KM, &arch);
        let a = kinds.iter().position(|&k| k == 'A').unwrap();
        assert_eq!(
            type_of(&ts, &format!("blk.{a}.attn_v.weight")),
            GgmlDType::Q6K
        );
        assert_eq!(
            type_of(&ts, &format!("blk.{a}.attn_q.weight")),
            GgmlDType::Q4K
        );
        assert_eq!(
            type_of(&ts, &format!("blk.{d}.attn_qkv.weight")),
            GgmlDType::Q4K
        );
        assert_eq!(type_of(&ts, &format!("blk.{d}.ssm_a")), GgmlDType::F32);
        assert_eq!(
            type_of(&ts, &format!("blk.{d}.ssm_conv1d.weight")),
            GgmlDType::F32
        );
        assert_eq!(type_of(&ts, "token_embd.weight"), GgmlDType::Q6K);
        assert_eq!(type_of(&ts, "output_norm.weight"), GgmlDType::F32);
    }

    #[test]
    fn nemotron_h_has_ollamas_arrays_and_types() {
        let (arch, c) = cfg("nemotron-3-nano-4b");
        let p = plan("nemotron-3-nano-4b", &arch, &c, 3).unwrap();
        assert_sorted(&p);
        let kinds: Vec<char> = p.kinds.chars().collect();
        let kv = Value::Array(
            kinds
                .iter()
                .map(|&k| Value::U32(if k == '*' { 8 } else { 0 }))
                .collect(),
        );
        assert_eq!(meta(&p, "nemotron_h.attention.head_count_kv"), v(&kv));
        let ff = Value::Array(
            kinds
                .iter()
                .map(|&k| Value::U32(if k == '-' { 12544 } else { 0 }))
                .collect(),
        );
        assert_eq!(meta(&p, "nemotron_h.feed_forward_length"), v(&ff));
        for key in [
            "nemotron_h.attention.layer_norm_epsilon",
            "nemotron_h.attention.layer_norm_rms_epsilon",
            "nemotron_h.rope.freq_base",
        ] {
            assert!(meta(&p, key).is_some(), "{key}");
        }
        for absent in [
            "nemotron_h.vocab_size",
            "nemotron_h.rope.dimension_count",
            "nemotron_h.rope.scaling.finetuned",
        ] {
            assert!(meta(&p, absent).is_none(), "{absent}");
        }
        let m = kinds.iter().position(|&k| k == 'M').unwrap();
        assert!(find(&p, &format!("blk.{m}.ssm_dt.bias")).is_some());
        let ts = types(&p, FileType::Q4KM, &arch);
        for t in ["ssm_a", "ssm_d", "ssm_norm.weight"] {
            assert_eq!(
                type_of(&ts, &format!("blk.{m}.{t}")),
                GgmlDType::BF16,
                "{t}"
            );
        }
        assert_eq!(
            type_of(&ts, &format!("blk.{m}.ssm_dt.bias")),
            GgmlDType::F32
        );
        let ts = types(&p, FileType::F16, &arch);
        assert_eq!(type_of(&ts, &format!("blk.{m}.ssm_a")), GgmlDType::F16);
    }

    #[test]
    fn gemma4_keeps_llama_cpps_keys_with_ollamas_quant_mix() {
        let (arch, c) = cfg("gemma4-e4b");
        let p = plan("gemma4-e4b", &arch, &c, 4).unwrap();
        let l = layout::plan("gemma4-e4b", &arch, &c, 4).unwrap();
        assert_sorted(&p);
        let mut ours: Vec<&String> = p.metadata.iter().map(|(k, _)| k).collect();
        let mut theirs: Vec<&String> = l
            .metadata
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !matches!(k.as_str(), "general.name" | "general.type"))
            .collect();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs);
        assert_eq!(p.tensors.len(), l.tensors.len());
        let ts = types(&p, FileType::Q4KM, &arch);
        assert_eq!(type_of(&ts, "per_layer_token_embd.weight"), GgmlDType::BF16);
        assert_eq!(type_of(&ts, "per_layer_model_proj.weight"), GgmlDType::Q4K);
        assert_eq!(type_of(&ts, "token_embd.weight"), GgmlDType::Q6K);
        assert_eq!(type_of(&ts, "rope_freqs.weight"), GgmlDType::F32);
        // llama.cpp's "more bits" rule over 4 layers: the last one
        assert_eq!(type_of(&ts, "blk.0.ffn_down.weight"), GgmlDType::Q4K);
        assert_eq!(type_of(&ts, "blk.3.ffn_down.weight"), GgmlDType::Q6K);
    }

    #[test]
    fn dense_models_keep_their_keys_and_qwen3_is_refused() {
        for (model, untied) in [
            ("smollm2-135m-instruct", false),
            ("qwen2.5-7b-instruct", true),
        ] {
            let (arch, c) = cfg(model);
            let p = plan(model, &arch, &c, 2).unwrap();
            assert_sorted(&p);
            assert_eq!(find(&p, "output.weight").is_some(), untied, "{model}");
            let ts = types(&p, FileType::Q8_0, &arch);
            assert_eq!(type_of(&ts, "blk.0.attn_q.weight"), GgmlDType::Q8_0);
            assert_eq!(type_of(&ts, "blk.0.attn_norm.weight"), GgmlDType::F32);
            let ts = types(&p, FileType::BF16, &arch);
            assert_eq!(type_of(&ts, "blk.0.attn_q.weight"), GgmlDType::BF16);
        }
        let (arch, c) = cfg("qwen2.5-7b-instruct");
        let p = plan("qwen2.5-7b-instruct", &arch, &c, 1).unwrap();
        let ts = types(&p, FileType::Q4KM, &arch);
        assert_eq!(type_of(&ts, "blk.0.attn_q.bias"), GgmlDType::F32);
        assert_eq!(type_of(&ts, "blk.0.attn_v.weight"), GgmlDType::Q6K);
        assert_eq!(type_of(&ts, "output.weight"), GgmlDType::Q6K);
        let (arch, _) = cfg("qwen3-8b");
        let err = check("qwen3-8b", &arch, FileType::Q4KM)
            .unwrap_err()
            .to_string();
        assert!(err.contains("Qwen3ForCausalLM"), "{err}");
        let err = check("qwen2.5-7b-instruct", "qwen2", FileType::Q6K)
            .unwrap_err()
            .to_string();
        assert!(err.contains("q4_k_m"), "{err}");
    }

    #[test]
    fn keys_sort_as_ollama_writes_them() {
        let mut m = vec![
            ("qwen35.ssm.state_size".to_string(), Value::U32(1)),
            (
                "general.architecture".to_string(),
                Value::Str("qwen35".into()),
            ),
            ("qwen35.block_count".to_string(), Value::U32(1)),
            (
                "tokenizer.ggml.model".to_string(),
                Value::Str("none".into()),
            ),
        ];
        sort_metadata(&mut m, "qwen35", FileType::F16);
        let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "qwen35.block_count",
                "general.architecture",
                "qwen35.ssm.state_size",
                "tokenizer.ggml.model"
            ]
        );
        sort_metadata(&mut m, "qwen35", FileType::Q8_0);
        let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "general.architecture",
                "qwen35.block_count",
                "qwen35.ssm.state_size",
                "tokenizer.ggml.model"
            ]
        );
    }
}
