//! Gemma 4 text model (GGUF arch `gemma4`; Gemma-4-E4B, agent 1 of the
//! Energy Society): a Gemma-3-like decoder with per-layer input embeddings
//! (PLE), sliding-window and global layers that differ in head size and
//! rotary settings, and key/value sharing in its last layers.
//!
//! - Embeddings × √n_embd. Per-layer inputs, computed once per token:
//!   `(norm(per_layer_model_proj(x) / √n_embd) + per_layer_token_embd[id] ·
//!   √d_ple) / √2`, one `d_ple` slice per layer (`per_layer_proj_norm` is
//!   the norm).
//! - Block `i`: `x += post_attention_norm(attn(attn_norm(x)))`;
//!   `x += post_ffw_norm(mlp(ffn_norm(x)))` (GELU-tanh gated MLP); with PLE
//!   `x += post_norm(proj(gelu(inp_gate(x)) ⊙ ple_i))`; then `x *=
//!   layer_output_scale` when the file has it.
//! - Attention: q/k RMS norms per head, v RMS-normed without weight
//!   (`attn_v` may be absent: v is then the raw k projection), score scale
//!   1, optional `attn_logit_softcapping`. Sliding layers
//!   (`attention.sliding_window_pattern`, true = sliding) have head size
//!   `attention.key_length_swa`, rotary base `rope.freq_base_swa` and the
//!   window; global layers `attention.key_length` and `rope.freq_base`,
//!   with llama.cpp's `rope_freqs.weight` dividing the frequencies (Gemma's
//!   "proportional" rotary: the converter writes 1 for the rotated pairs and
//!   1e30 for the rest, so those pairs stay still). Neox pairing over
//!   `rope.dimension_count[_swa]` dimensions.
//! - KV sharing: the last `attention.shared_kv_layers` layers compute no
//!   keys or values; each attends over those of the last earlier non-shared
//!   layer of its own kind (transformers' `kv_sharing_modes`; llama.cpp's
//!   "n − 2 for sliding, n − 1 for global" is the same rule for the real
//!   models, whose last non-shared layer is global). Their state slot is
//!   empty. Since they write nothing, only the rows whose logits are wanted
//!   run through them (transformers does the same slicing).
//! - Final norm, output (tied to the embeddings), final soft-capping.
//!
//! Ollama's files bundle the vision and audio towers (`v.*`, `a.*`, `mm.*`):
//! they are not loaded and do not count towards the parameters.

use super::decoder::check_steps;
use super::nn::{
    apply_rope, attention, model_info, pick_rows, rms_norm_plain, softcap, split_logits, to_heads,
    Activation, GatedMlp, InfoDims, Loader, Proj, RmsNorm, Rope, RopeStyle, Rows,
};
use super::qwen35::per_layer;
use crate::inference::engine::model::{CausalLm, Logits, ModelInfo, SeqState, SeqStep, SlotKind};
use crate::inference::files::gguf_weights::{GgufFile, LoadError};
use crate::inference::kernels::AttnParams;
use anyhow::{bail, Result};
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

const ARCH: &str = "gemma4";

/// Tensor-name prefixes of the towers bundled in Ollama's files (vision,
/// audio, their projectors): not loaded, not counted.
const SKIP: &[&str] = &["v.", "a.", "mm."];

/// Where a layer's keys and values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KvSource {
    /// Computed here and kept in this layer's slot.
    Own,
    /// Read from an earlier layer's slot.
    Shared(usize),
}

/// Key/value projections of a layer that computes its own.
#[derive(Debug)]
struct KvProj {
    wk: Proj,
    /// `None`: values are the raw key projection (`attention_k_eq_v`).
    wv: Option<Proj>,
    k_norm: RmsNorm,
}

#[derive(Debug)]
struct PleBlock {
    gate: Proj,
    proj: Proj,
    post_norm: RmsNorm,
}

#[derive(Debug)]
struct Block {
    sliding: bool,
    n_head: usize,
    /// Key/value heads (of the source layer for shared layers).
    n_kv_head: usize,
    head_dim: usize,
    source: KvSource,
    attn_norm: RmsNorm,
    wq: Proj,
    q_norm: RmsNorm,
    kv: Option<KvProj>,
    wo: Proj,
    post_attn_norm: RmsNorm,
    ffn_norm: RmsNorm,
    mlp: GatedMlp,
    post_ffn_norm: RmsNorm,
    ple: Option<PleBlock>,
    out_scale: Option<f64>,
}

/// The model-level part of the per-layer embeddings.
#[derive(Debug)]
struct PerLayerInput {
    /// `[ple_vocab, n_layer · dim]`.
    table: Arc<QTensor>,
    ple_vocab: usize,
    model_proj: Proj,
    proj_norm: RmsNorm,
    dim: usize,
}

/// A loaded Gemma 4 text model; immutable, shared by all sequences.
#[derive(Debug)]
pub struct Gemma4 {
    info: ModelInfo,
    device: Device,
    embed: Arc<QTensor>,
    ple: Option<PerLayerInput>,
    blocks: Vec<Block>,
    out_norm: RmsNorm,
    output: Proj,
    rope_swa: Rope,
    rope_global: Rope,
    window: Option<usize>,
    attn_softcap: Option<f32>,
    final_softcap: Option<f32>,
    first_shared: usize,
    eps: f32,
}

/// Which layers slide: `attention.sliding_window_pattern` as a per-layer
/// flag array (true = sliding) or a period (`i % p < p − 1` slides).
fn sliding_layers(g: &GgufFile, n_layer: usize) -> Result<Vec<bool>, LoadError> {
    let key = format!("{ARCH}.attention.sliding_window_pattern");
    match g.raw(&key) {
        None => Err(LoadError::MissingKey {
            path: g.path().to_path_buf(),
            key,
        }),
        Some(Value::Array(flags)) => {
            if flags.len() != n_layer {
                return Err(g.invalid(format!(
                    "{key} has {} entries for {n_layer} layers",
                    flags.len()
                )));
            }
            flags
                .iter()
                .map(|v| {
                    v.to_bool()
                        .or_else(|_| v.to_u8().map(|x| x != 0))
                        .or_else(|_| v.to_i32().map(|x| x != 0))
                        .map_err(|e| g.invalid(format!("{key}: {e}")))
                })
                .collect()
        }
        Some(_) => {
            let p = g.usize(&key)?;
            if p == 0 {
                return Err(g.invalid(format!("{key} is 0")));
            }
            Ok((0..n_layer).map(|i| i % p < p - 1).collect())
        }
    }
}

/// The layer whose keys and values layer `i` reads (itself when it has its own).
fn kv_sources(sliding: &[bool], first_shared: usize) -> Vec<Option<KvSource>> {
    (0..sliding.len())
        .map(|i| {
            if i < first_shared {
                Some(KvSource::Own)
            } else {
                (0..first_shared)
                    .rev()
                    .find(|&j| sliding[j] == sliding[i])
                    .map(KvSource::Shared)
            }
        })
        .collect()
}

/// The metadata key `gemma4.{s}`.
fn key(s: &str) -> String {
    format!("{ARCH}.{s}")
}

/// Gemma 4's hyper-parameters, read from the `gemma4.*` metadata.
struct Hparams {
    n_embd: usize,
    n_layer: usize,
    /// Per layer: feed-forward width, attention heads, key/value heads.
    n_ff: Vec<usize>,
    n_heads: Vec<usize>,
    n_kv_heads: Vec<usize>,
    dims: HeadDims,
    eps: f32,
    base_global: f32,
    base_swa: f32,
    kinds: LayerKinds,
    /// Width of each layer's per-layer input (0: no PLE).
    d_ple: usize,
    attn_softcap: Option<f32>,
    final_softcap: Option<f32>,
    context_length: usize,
}

/// Head and rotary sizes of global and sliding layers.
struct HeadDims {
    hd_global: usize,
    hd_swa: usize,
    rot_global: usize,
    rot_swa: usize,
}

/// Which layers slide and where each layer's keys and values come from.
struct LayerKinds {
    window: Option<usize>,
    sliding: Vec<bool>,
    /// The first layer that shares keys and values (`n_layer` when none does).
    first_shared: usize,
    sources: Vec<Option<KvSource>>,
}

/// What one layer is: its kind, heads, head size and key/value source.
struct LayerSpec {
    sliding: bool,
    n_head: usize,
    /// Key/value heads (of the source layer for shared layers).
    n_kv: usize,
    head_dim: usize,
    source: KvSource,
}

/// Load a Gemma 4 text model (the bundled towers of [`SKIP`] are left out).
pub fn load(g: &mut GgufFile, device: &Device) -> Result<Gemma4> {
    let hp = read_hparams(g)?;
    let n_embd = hp.n_embd;
    let mut ld = Loader {
        g,
        device,
        eps: hp.eps,
    };
    let (embed, vocab) = ld.embedding(n_embd)?;
    let output = ld.output(&embed, vocab, n_embd)?;
    let out_norm = ld.norm("output_norm.weight", n_embd)?;
    let ple = load_per_layer_input(&mut ld, &hp, vocab)?;
    let freq_factors = rope_freq_factors(&mut ld, hp.dims.rot_global)?;
    let mut blocks = Vec::with_capacity(hp.n_layer);
    for i in 0..hp.n_layer {
        let spec = layer_spec(ld.g, &hp, i)?;
        blocks.push(load_block(&mut ld, &hp, &spec, i)?);
    }
    let info = model_info(
        ld.g,
        ARCH,
        InfoDims {
            context_length: hp.context_length,
            vocab_size: vocab,
            n_layer: hp.n_layer,
            n_embd,
            n_head: hp.n_heads[0],
            n_kv_head: hp.n_kv_heads[0],
            head_dim: hp.dims.hd_global,
        },
        SKIP,
    )?;
    let (rot_global, rot_swa) = (hp.dims.rot_global, hp.dims.rot_swa);
    Ok(Gemma4 {
        info,
        device: device.clone(),
        embed,
        ple,
        blocks,
        out_norm,
        output,
        rope_swa: Rope::partial(rot_swa, rot_swa, hp.base_swa, 1.0, None),
        rope_global: Rope::partial(
            rot_global,
            rot_global,
            hp.base_global,
            1.0,
            freq_factors.as_deref(),
        ),
        window: hp.kinds.window,
        attn_softcap: hp.attn_softcap,
        final_softcap: hp.final_softcap,
        first_shared: hp.kinds.first_shared,
        eps: hp.eps,
    })
}

/// The hyper-parameters: sizes (per layer where the file says so), head
/// dimensions, norm epsilon, rotary bases, layer kinds, PLE width,
/// soft-capping and context length.
fn read_hparams(g: &GgufFile) -> Result<Hparams> {
    let n_embd = g.usize(&key("embedding_length"))?;
    let n_layer = g.usize(&key("block_count"))?;
    if n_layer == 0 || n_embd == 0 {
        return Err(g
            .invalid(format!("{n_layer} layers of width {n_embd}"))
            .into());
    }
    let n_ff = per_layer(g, &key("feed_forward_length"), n_layer)?.ok_or_else(|| {
        LoadError::MissingKey {
            path: g.path().to_path_buf(),
            key: key("feed_forward_length"),
        }
    })?;
    let n_heads = per_layer(g, &key("attention.head_count"), n_layer)?.ok_or_else(|| {
        LoadError::MissingKey {
            path: g.path().to_path_buf(),
            key: key("attention.head_count"),
        }
    })?;
    let n_kv_heads =
        per_layer(g, &key("attention.head_count_kv"), n_layer)?.unwrap_or_else(|| n_heads.clone());
    let dims = read_head_dims(g)?;
    let eps = g.f32(&key("attention.layer_norm_rms_epsilon"))?;
    let base_global = g.opt(&key("rope.freq_base"), GgufFile::f32)?.unwrap_or(1e6);
    let base_swa = g
        .opt(&key("rope.freq_base_swa"), GgufFile::f32)?
        .unwrap_or(10_000.0);
    let kinds = read_layer_kinds(g, n_layer)?;
    let d_ple = g
        .opt(&key("embedding_length_per_layer_input"), GgufFile::usize)?
        .unwrap_or(0);
    let attn_softcap = g
        .opt(&key("attn_logit_softcapping"), GgufFile::f32)?
        .filter(|&c| c > 0.0);
    let final_softcap = g
        .opt(&key("final_logit_softcapping"), GgufFile::f32)?
        .filter(|&c| c > 0.0);
    let context_length = g.usize(&key("context_length"))?;
    Ok(Hparams {
        n_embd,
        n_layer,
        n_ff,
        n_heads,
        n_kv_heads,
        dims,
        eps,
        base_global,
        base_swa,
        kinds,
        d_ple,
        attn_softcap,
        final_softcap,
        context_length,
    })
}

/// Head sizes (`attention.key_length[_swa]`; value lengths, when given,
/// must equal them) and rotary dimensions (`rope.dimension_count[_swa]`,
/// default the head size): all even, rotary ≤ head.
fn read_head_dims(g: &GgufFile) -> Result<HeadDims> {
    let hd_global = g.usize(&key("attention.key_length"))?;
    let hd_swa = g
        .opt(&key("attention.key_length_swa"), GgufFile::usize)?
        .unwrap_or(hd_global);
    for (k, want) in [
        ("attention.value_length", hd_global),
        ("attention.value_length_swa", hd_swa),
    ] {
        if let Some(v) = g.opt(&key(k), GgufFile::usize)? {
            if v != want {
                return Err(g
                    .invalid(format!(
                        "{} {v} differs from the key length {want} (Gemma 4 needs them equal)",
                        key(k)
                    ))
                    .into());
            }
        }
    }
    let rot_global = g
        .opt(&key("rope.dimension_count"), GgufFile::usize)?
        .unwrap_or(hd_global);
    let rot_swa = g
        .opt(&key("rope.dimension_count_swa"), GgufFile::usize)?
        .unwrap_or(hd_swa);
    for (rot, hd) in [(rot_global, hd_global), (rot_swa, hd_swa)] {
        if hd == 0 || hd % 2 != 0 || rot == 0 || rot % 2 != 0 || rot > hd {
            return Err(g
                .invalid(format!(
                    "rotary dimension {rot} over head size {hd}: both must be even, rotary ≤ head"
                ))
                .into());
        }
    }
    Ok(HeadDims {
        hd_global,
        hd_swa,
        rot_global,
        rot_swa,
    })
}

/// The sliding window (none, and no sliding layer, without
/// `attention.sliding_window`), which layers slide, and key/value sharing:
/// the last `attention.shared_kv_layers` layers (fewer than all) read the
/// keys and values of an earlier layer.
fn read_layer_kinds(g: &GgufFile, n_layer: usize) -> Result<LayerKinds> {
    let window = g
        .opt(&key("attention.sliding_window"), GgufFile::usize)?
        .filter(|&w| w > 0);
    let sliding = match window {
        Some(_) => sliding_layers(g, n_layer)?,
        None => vec![false; n_layer],
    };
    let n_shared = g
        .opt(&key("attention.shared_kv_layers"), GgufFile::usize)?
        .unwrap_or(0);
    if n_shared >= n_layer {
        return Err(g
            .invalid(format!(
                "{} {n_shared} leaves no layer of {n_layer} computing keys and values",
                key("attention.shared_kv_layers")
            ))
            .into());
    }
    let first_shared = n_layer - n_shared;
    let sources = kv_sources(&sliding, first_shared);
    Ok(LayerKinds {
        window,
        sliding,
        first_shared,
        sources,
    })
}

/// The model-level per-layer-embedding tensors when the file has PLE
/// (`per_layer_token_embd` `[ple_vocab, n_layer · d_ple]`, the model
/// projection and its norm).
fn load_per_layer_input(
    ld: &mut Loader<'_>,
    hp: &Hparams,
    vocab: usize,
) -> Result<Option<PerLayerInput>> {
    let d_ple = hp.d_ple;
    if d_ple == 0 {
        return Ok(None);
    }
    let name = "per_layer_token_embd.weight";
    let width = hp.n_layer * d_ple;
    let ple_vocab = match ld.g.tensor_shape(name) {
        Some(s) if s.len() == 2 && s[1] == width => s[0],
        Some(s) => {
            return Err(LoadError::BadShape {
                path: ld.g.path().to_path_buf(),
                name: name.into(),
                got: s,
                expected: vec![vocab, width],
            }
            .into())
        }
        None => {
            return Err(LoadError::MissingTensor {
                path: ld.g.path().to_path_buf(),
                name: name.into(),
            }
            .into())
        }
    };
    Ok(Some(PerLayerInput {
        table: Arc::new(ld.q(name, &[ple_vocab, width])?),
        ple_vocab,
        model_proj: ld.matmul("per_layer_model_proj.weight", &[width, hp.n_embd])?,
        proj_norm: ld.norm("per_layer_proj_norm.weight", d_ple)?,
        dim: d_ple,
    }))
}

/// `rope_freqs.weight` (the divisors of the global layers' rotary
/// frequencies), when the file has it.
fn rope_freq_factors(ld: &mut Loader<'_>, rot_global: usize) -> Result<Option<Vec<f32>>> {
    let name = "rope_freqs.weight";
    Ok(if ld.has(name) {
        Some(ld.host(name, &[rot_global / 2])?)
    } else {
        None
    })
}

/// Layer `i`'s kind, head size, heads and key/value source; a shared layer
/// needs an earlier layer of its kind, and the heads must be a multiple of
/// the key/value heads.
fn layer_spec(g: &GgufFile, hp: &Hparams, i: usize) -> Result<LayerSpec> {
    let sliding = hp.kinds.sliding[i];
    let head_dim = if sliding {
        hp.dims.hd_swa
    } else {
        hp.dims.hd_global
    };
    let n_head = hp.n_heads[i];
    let source = hp.kinds.sources[i].ok_or_else(|| {
        g.invalid(format!(
            "layer {i} shares keys and values, but no earlier layer of its kind ({}) computes them",
            if sliding { "sliding" } else { "global" }
        ))
    })?;
    let n_kv = match source {
        KvSource::Own => hp.n_kv_heads[i],
        KvSource::Shared(j) => hp.n_kv_heads[j],
    };
    if n_head == 0 || n_kv == 0 || n_head % n_kv != 0 {
        return Err(g
            .invalid(format!(
                "layer {i}: {n_head} attention heads are not a multiple of {n_kv} key/value heads"
            ))
            .into());
    }
    Ok(LayerSpec {
        sliding,
        n_head,
        n_kv,
        head_dim,
        source,
    })
}

/// Layer `i`'s tensors: key/value projections (own layers only), the PLE
/// block, the output scale, then attention, MLP and their norms.
fn load_block(ld: &mut Loader<'_>, hp: &Hparams, spec: &LayerSpec, i: usize) -> Result<Block> {
    let p = format!("blk.{i}");
    let n_embd = hp.n_embd;
    let (n_head, hd) = (spec.n_head, spec.head_dim);
    let kv = match spec.source {
        KvSource::Own => Some(load_kv_proj(ld, &p, spec.n_kv * hd, hd, n_embd)?),
        KvSource::Shared(_) => None,
    };
    let ple = if hp.d_ple > 0 {
        Some(load_ple_block(ld, &p, hp.d_ple, n_embd)?)
    } else {
        None
    };
    let out_scale = {
        let name = format!("{p}.layer_output_scale.weight");
        if ld.has(&name) {
            Some(ld.host(&name, &[1])?[0] as f64)
        } else {
            None
        }
    };
    Ok(Block {
        sliding: spec.sliding,
        n_head,
        n_kv_head: spec.n_kv,
        head_dim: hd,
        source: spec.source,
        attn_norm: ld.norm(&format!("{p}.attn_norm.weight"), n_embd)?,
        wq: ld.matmul(&format!("{p}.attn_q.weight"), &[n_head * hd, n_embd])?,
        q_norm: ld.norm(&format!("{p}.attn_q_norm.weight"), hd)?,
        kv,
        wo: ld.matmul(&format!("{p}.attn_output.weight"), &[n_embd, n_head * hd])?,
        post_attn_norm: ld.norm(&format!("{p}.post_attention_norm.weight"), n_embd)?,
        ffn_norm: ld.norm(&format!("{p}.ffn_norm.weight"), n_embd)?,
        mlp: GatedMlp::load(ld, &p, n_embd, hp.n_ff[i], Activation::GeluTanh)?,
        post_ffn_norm: ld.norm(&format!("{p}.post_ffw_norm.weight"), n_embd)?,
        ple,
        out_scale,
    })
}

/// The key/value projections of layer prefix `p` (`kv_width` = key/value
/// heads × head size `hd`); without `attn_v` values are the raw keys.
fn load_kv_proj(
    ld: &mut Loader<'_>,
    p: &str,
    kv_width: usize,
    hd: usize,
    n_embd: usize,
) -> Result<KvProj> {
    Ok(KvProj {
        wk: ld.matmul(&format!("{p}.attn_k.weight"), &[kv_width, n_embd])?,
        wv: {
            let name = format!("{p}.attn_v.weight");
            if ld.has(&name) {
                Some(ld.matmul(&name, &[kv_width, n_embd])?)
            } else {
                None
            }
        },
        k_norm: ld.norm(&format!("{p}.attn_k_norm.weight"), hd)?,
    })
}

/// The per-layer-input block of layer prefix `p`: input gate, projection
/// and post-norm.
fn load_ple_block(ld: &mut Loader<'_>, p: &str, d_ple: usize, n_embd: usize) -> Result<PleBlock> {
    Ok(PleBlock {
        gate: ld.matmul(&format!("{p}.inp_gate.weight"), &[d_ple, n_embd])?,
        proj: ld.matmul(&format!("{p}.proj.weight"), &[n_embd, d_ple])?,
        post_norm: ld.norm(&format!("{p}.post_norm.weight"), n_embd)?,
    })
}

/// One sequence's rows of the batch in the layer being run.
struct SeqRows {
    rows: Rows,
    /// Rotary tables (sliding, global) for those rows' positions.
    swa: (Tensor, Tensor),
    global: (Tensor, Tensor),
}

/// Per-layer inputs `[n_layer, N, d_ple]` for the tokens `ids_t` (checked
/// against the table by the caller) and their scaled embeddings `x`
/// (`[N, n_embd]`): the table's rows, the model projection, its norm.
fn per_layer_inputs(
    p: &PerLayerInput,
    n_layer: usize,
    n_embd: usize,
    ids_t: &Tensor,
    x: &Tensor,
) -> Result<Tensor> {
    let n = ids_t.dim(0)?;
    let tok = (p.table.embedding(ids_t)?.to_dtype(DType::F32)? * (p.dim as f64).sqrt())?
        .reshape((n, n_layer, p.dim))?;
    let proj = (p.model_proj.forward(x)? / (n_embd as f64).sqrt())?.reshape((n, n_layer, p.dim))?;
    let proj = p.proj_norm.forward(&proj)?;
    let both = ((proj + tok)? * std::f64::consts::FRAC_1_SQRT_2)?;
    Ok(both.transpose(0, 1)?.contiguous()?)
}

/// A Gemma 4 file's model-level per-layer-embedding path alone (the table,
/// the model projection and its norm, read from the file), for `joule bench
/// layers`: the same code the model runs, without the rest of the model.
pub(crate) struct PerLayerProbe {
    p: PerLayerInput,
    n_layer: usize,
    pub n_embd: usize,
}

impl PerLayerProbe {
    pub(crate) fn load(g: &mut GgufFile, device: &Device) -> Result<Self> {
        let hp = read_hparams(g)?;
        let path = g.path().display().to_string();
        let mut ld = Loader {
            g,
            device,
            eps: hp.eps,
        };
        let p = load_per_layer_input(&mut ld, &hp, 0)?.ok_or_else(|| {
            anyhow::anyhow!(
                "{path}: no per-layer embeddings (embedding_length_per_layer_input is 0)"
            )
        })?;
        Ok(Self {
            p,
            n_layer: hp.n_layer,
            n_embd: hp.n_embd,
        })
    }

    /// Rows in the per-layer table.
    pub(crate) fn vocab(&self) -> usize {
        self.p.ple_vocab
    }

    /// Per-layer inputs `[n_layer, N, d_ple]` for token ids `ids_t` (`[N]`,
    /// below [`Self::vocab`]) and embeddings `x` (`[N, n_embd]`).
    pub(crate) fn run(&self, ids_t: &Tensor, x: &Tensor) -> Result<Tensor> {
        per_layer_inputs(&self.p, self.n_layer, self.n_embd, ids_t, x)
    }
}

impl Gemma4 {
    /// Per-layer inputs `[n_layer, N, d_ple]` for the batch's tokens.
    fn per_layer_inputs(
        &self,
        p: &PerLayerInput,
        ids: &[u32],
        ids_t: &Tensor,
        x: &Tensor,
    ) -> Result<Tensor> {
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= p.ple_vocab) {
            bail!(
                "model `{}`: token id {bad} is outside the per-layer embedding table of {}",
                self.info.name,
                p.ple_vocab
            );
        }
        per_layer_inputs(p, self.blocks.len(), self.info.n_embd, ids_t, x)
    }

    /// Attention of one layer over the batch (`h`: the normed rows).
    fn attention(
        &self,
        li: usize,
        b: &Block,
        h: &Tensor,
        seqs: &[SeqRows],
        batch: &mut [SeqStep<'_>],
    ) -> Result<Tensor> {
        let (nh, nkv, hd) = (b.n_head, b.n_kv_head, b.head_dim);
        // q, k and v in one pass where the layer has its own keys (the input quantised once,
        // one dispatch to the workers: `Proj::forward_many`).
        let (q, kv) = match &b.kv {
            Some(m) => {
                let mut ys = match &m.wv {
                    Some(wv) => Proj::forward_many(&[&b.wq, &m.wk, wv], h)?,
                    None => Proj::forward_many(&[&b.wq, &m.wk], h)?,
                }
                .into_iter();
                let (Some(q), Some(k)) = (ys.next(), ys.next()) else {
                    bail!("layer {li}: the q/k/v pass returned fewer outputs than weights");
                };
                let v = ys.next().unwrap_or_else(|| k.clone());
                (q, Some((k, v, &m.k_norm)))
            }
            None => (b.wq.forward(h)?, None),
        };
        let params = AttnParams {
            scale: 1.0,
            softcap: self.attn_softcap,
            window: if b.sliding { self.window } else { None },
        };
        let mut outs = Vec::with_capacity(seqs.len());
        for (s, step) in seqs.iter().zip(batch.iter_mut()) {
            let (off, t) = (s.rows.off, s.rows.t);
            let tables = if b.sliding { &s.swa } else { &s.global };
            let qs = to_heads(&q.narrow(0, off, t)?, nh, hd, Some(&b.q_norm))?;
            let qs = apply_rope(&qs, tables, RopeStyle::Neox)?;
            let (k_all, v_all) = match (&kv, b.source) {
                (Some((k, v, k_norm)), _) => {
                    let ks = to_heads(&k.narrow(0, off, t)?, nkv, hd, Some(k_norm))?;
                    let ks = apply_rope(&ks, tables, RopeStyle::Neox)?;
                    let vs = to_heads(&v.narrow(0, off, t)?, nkv, hd, None)?;
                    let vs = rms_norm_plain(&vs, self.eps)?;
                    step.state.append_kv(li, &ks, &vs)?
                }
                (None, KvSource::Shared(src)) => {
                    // This step's keys/values were appended by `src` earlier in the step.
                    let len = step.state.len() + step.tokens.len();
                    step.state.kv(src, len)?
                }
                (None, KvSource::Own) => bail!("layer {li} has no key/value projections"),
            };
            outs.push(attention(&qs, &k_all, &v_all, params)?);
        }
        let att = if outs.len() == 1 {
            outs.remove(0)
        } else {
            Tensor::cat(&outs, 0)?
        };
        Ok(b.wo.forward(&att)?)
    }
}

impl CausalLm for Gemma4 {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn state_layout(&self) -> Vec<SlotKind> {
        self.blocks
            .iter()
            .map(|b| match b.source {
                KvSource::Own => SlotKind::Kv,
                KvSource::Shared(_) => SlotKind::None,
            })
            .collect()
    }

    fn new_state(&self) -> SeqState {
        SeqState::new(&self.state_layout(), self.info.context_length)
    }

    fn forward(&self, batch: &mut [SeqStep<'_>]) -> Result<Vec<Tensor>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        check_steps(&self.info, batch)?;
        let _segments = super::nn::step_segments(batch);
        if batch.iter().any(|s| s.state.kinds() != self.state_layout()) {
            bail!(
                "model `{}`: a sequence state was made for another model",
                self.info.name
            );
        }
        let dev = &self.device;
        let mut seqs = Vec::with_capacity(batch.len());
        let mut wants_all = Vec::with_capacity(batch.len());
        let mut ids = Vec::new();
        for step in batch.iter() {
            let (t, start) = (step.tokens.len(), step.state.len());
            seqs.push(SeqRows {
                rows: Rows { off: ids.len(), t },
                swa: self.rope_swa.tables(start, t, dev)?,
                global: self.rope_global.tables(start, t, dev)?,
            });
            wants_all.push(step.logits == Logits::All);
            ids.extend_from_slice(step.tokens);
        }
        let ids_t = Tensor::new(ids.as_slice(), dev)?;
        let mut x = (self.embed.embedding(&ids_t)?.to_dtype(DType::F32)?
            * (self.info.n_embd as f64).sqrt())?;
        let mut ple = match &self.ple {
            Some(p) => Some(self.per_layer_inputs(p, &ids, &ids_t, &x)?),
            None => None,
        };
        for (li, b) in self.blocks.iter().enumerate() {
            if li == self.first_shared {
                // Shared-KV layers write no state: keep only the rows whose
                // logits are wanted.
                let picked: Vec<(Rows, bool)> = seqs
                    .iter()
                    .zip(&wants_all)
                    .map(|(s, &all)| (s.rows, all))
                    .collect();
                x = pick_rows(&x, &picked)?;
                if let Some(p) = &ple {
                    let by_row = p.transpose(0, 1)?.contiguous()?;
                    ple = Some(pick_rows(&by_row, &picked)?.transpose(0, 1)?.contiguous()?);
                }
                let mut off = 0;
                for (s, &all) in seqs.iter_mut().zip(&wants_all) {
                    if !all && s.rows.t > 1 {
                        let last = s.rows.t - 1;
                        let cut = |(c, n): &(Tensor, Tensor)| -> candle_core::Result<_> {
                            Ok((c.narrow(0, last, 1)?, n.narrow(0, last, 1)?))
                        };
                        s.swa = cut(&s.swa)?;
                        s.global = cut(&s.global)?;
                        s.rows.t = 1;
                    }
                    s.rows.off = off;
                    off += s.rows.t;
                }
            }
            let h = b.attn_norm.forward(&x)?;
            let a = self.attention(li, b, &h, &seqs, batch)?;
            x = (x + b.post_attn_norm.forward(&a)?)?;
            let h = b.ffn_norm.forward(&x)?;
            x = (&x + b.post_ffn_norm.forward(&b.mlp.forward(&h)?)?)?;
            if let (Some(pb), Some(p)) = (&b.ple, &ple) {
                let g = Activation::GeluTanh.apply(&pb.gate.forward(&x)?)?;
                let g = (g * p.get(li)?)?;
                x = (&x + pb.post_norm.forward(&pb.proj.forward(&g)?)?)?;
            }
            if let Some(s) = b.out_scale {
                x = (x * s)?;
            }
        }
        for step in batch.iter_mut() {
            step.state.commit(step.tokens);
        }
        let rows: Vec<(Rows, bool)> = seqs
            .iter()
            .zip(&wants_all)
            .map(|(s, &all)| (s.rows, all))
            .collect();
        let _head = super::nn::picked_segments(&rows);
        let x = self.out_norm.forward(&pick_rows(&x, &rows)?)?;
        let mut logits = self.output.forward(&x)?;
        if let Some(cap) = self.final_softcap {
            logits = softcap(&logits, cap)?;
        }
        Ok(split_logits(&logits, &rows)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_layers_read_the_last_earlier_layer_of_their_kind() {
        // The fixture's layout: 18 layers, global every 6th, the last 8 shared.
        let sliding: Vec<bool> = (0..18).map(|i| i % 6 < 5).collect();
        let s = kv_sources(&sliding, 10);
        assert!(s[..10].iter().all(|x| *x == Some(KvSource::Own)));
        for i in [10, 12, 13, 14, 15, 16] {
            assert_eq!(s[i], Some(KvSource::Shared(9)), "layer {i}");
        }
        for i in [11, 17] {
            assert_eq!(s[i], Some(KvSource::Shared(5)), "layer {i}");
        }
        // E4B: 42 layers, the last 18 shared; layer 23 is global, 22 sliding
        // (llama.cpp's n − 1 / n − 2 rule).
        let sliding: Vec<bool> = (0..42).map(|i| i % 6 < 5).collect();
        let s = kv_sources(&sliding, 24);
        assert_eq!(s[24], Some(KvSource::Shared(22)));
        assert_eq!(s[29], Some(KvSource::Shared(23)));
        assert_eq!(s[41], Some(KvSource::Shared(23)));
        // A kind with no earlier producer has no source.
        let s = kv_sources(&[true, true, false], 2);
        assert_eq!(s[2], None);
    }
}
