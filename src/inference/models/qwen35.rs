//! Qwen3.5 text model (GGUF arch `qwen35`; Qwen3.5-4B and -9B, agents 3 and
//! 5 of the Energy Society): a hybrid of gated delta-net layers (linear
//! attention with a recurrent state per sequence) and gated full-attention
//! layers, every layer followed by a SiLU-gated MLP.
//!
//! Block `i`: `x += mixer(attn_norm(x))`, `x += mlp(post_attention_norm(x))`,
//! where the mixer is
//! - **gated delta-net** (layers `i` with `(i + 1) % full_attention_interval
//!   != 0`, or as `attention.recurrent_layers` says): `attn_qkv` → causal
//!   depthwise conv (kernel `ssm.conv_kernel`, state = the last `kernel − 1`
//!   inputs) → SiLU → split q, k (`ssm.group_count` heads of
//!   `ssm.state_size`) and v (`ssm.time_step_rank` heads); q, k
//!   L2-normalised; β = sigmoid(`ssm_beta` x); decay g = `ssm_a` ·
//!   softplus(`ssm_alpha` x + `ssm_dt.bias`) (`ssm_a` = −exp(A_log) as the
//!   converter stores it); the delta rule ([`super::delta_net`]); output
//!   RMS-normed per head by `ssm_norm` and gated by SiLU(`attn_gate` x);
//!   `ssm_out`.
//! - **gated attention**: `attn_q` gives per head the query and an output
//!   gate (interleaved per head); q/k RMS norms; partial neox rotary on the
//!   first `rope.dimension_count` dimensions (the MRoPE sections reduce to
//!   this for text, where all position streams are the token position);
//!   grouped-query attention; output × sigmoid(gate); `attn_output`.
//!
//! Layouts: llama.cpp's converter stores value heads in tiled order (value
//! head `h` reads key head `h mod n_k`) and adds 1 to every RMS-norm weight
//! but `ssm_norm`. Ollama's (`convert_qwen3next.go`) does too, but differs in keys
//! and names: per-layer `attention.head_count_kv` arrays, 3-entry rope
//! sections, `ssm_dt` without `.bias`, vision (`v.*`) and MTP (`mtp.*`)
//! tensors in the same file, and `ssm.v_head_reordered` (true: the value heads
//! are in the same tiled order as llama.cpp's). Ollama writes no
//! `attention.recurrent_layers`: a layer whose KV head count is 0 is a
//! delta-net layer. Both load; tensors generation does not use (vision tower,
//! MTP/nextn heads) are skipped.

use super::decoder::check_steps;
use super::delta_net::{self, Dims};
use super::nn::{
    apply_rope, attention, model_info, pick_rows, split_logits, to_heads, Activation, GatedMlp,
    InfoDims, Loader, Proj, RmsNorm, Rope, RopeStyle, Rows,
};
use crate::inference::engine::dump;
use crate::inference::engine::model::{CausalLm, Logits, ModelInfo, SeqState, SeqStep, SlotKind};
use crate::inference::files::gguf_weights::{GgufFile, LoadError};
use crate::inference::kernels::AttnParams;
use anyhow::Result;
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

const ARCH: &str = "qwen35";

/// Tensor-name prefixes of parts of a Qwen3.5 file that text generation
/// does not use (and that do not count towards its parameters).
const SKIP: &[&str] = &["v.", "mm.", "mtp.", "a."];

/// A per-layer count stored either as one integer or as an array with one
/// entry per layer (Ollama writes arrays).
pub fn per_layer(g: &GgufFile, key: &str, n_layer: usize) -> Result<Option<Vec<usize>>, LoadError> {
    match g.raw(key) {
        None => Ok(None),
        Some(Value::Array(vals)) => {
            if vals.len() < n_layer {
                return Err(g.invalid(format!(
                    "{key} has {} entries for {n_layer} layers",
                    vals.len()
                )));
            }
            vals.iter()
                .take(n_layer)
                .map(|v| {
                    v.to_u32()
                        .map(|x| x as usize)
                        .or_else(|_| v.to_i32().map(|x| x.max(0) as usize))
                        .or_else(|_| v.to_u64().map(|x| x as usize))
                        .map_err(|e| g.invalid(format!("{key}: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        }
        Some(_) => Ok(Some(vec![g.usize(key)?; n_layer])),
    }
}

/// A per-layer flag array (`attention.recurrent_layers`), if present.
fn bool_array(g: &GgufFile, key: &str, n_layer: usize) -> Result<Option<Vec<bool>>, LoadError> {
    match g.raw(key) {
        None => Ok(None),
        Some(Value::Array(vals)) if vals.len() >= n_layer => vals
            .iter()
            .take(n_layer)
            .map(|v| {
                v.to_bool()
                    .or_else(|_| v.to_u8().map(|x| x != 0))
                    .or_else(|_| v.to_i32().map(|x| x != 0))
                    .map_err(|e| g.invalid(format!("{key}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(g.invalid(format!("{key}: expected an array of {n_layer} flags"))),
    }
}

/// The gated delta-net mixer of one layer.
#[derive(Debug)]
struct DeltaNet {
    qkv: Proj,
    gate: Proj,
    beta: Proj,
    alpha: Proj,
    /// `[conv_dim · kernel]`, channel-major.
    conv: Vec<f32>,
    dt_bias: Vec<f32>,
    a: Vec<f32>,
    norm: RmsNorm,
    out: Proj,
    /// `conv`, `a`, `dt_bias` on the device, for Joule's CUDA kernels
    /// (`None` on other devices).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    on_device: Option<[Tensor; 3]>,
}

/// The gated full-attention mixer of one layer.
#[derive(Debug)]
struct GatedAttention {
    n_kv_head: usize,
    wq: Proj,
    wk: Proj,
    wv: Proj,
    wo: Proj,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
}

#[derive(Debug)]
enum Mixer {
    Delta(DeltaNet),
    Attn(GatedAttention),
}

#[derive(Debug)]
struct Block {
    attn_norm: RmsNorm,
    mixer: Mixer,
    post_norm: RmsNorm,
    mlp: GatedMlp,
}

/// A loaded Qwen3.5 model; immutable, shared by all sequences.
#[derive(Debug)]
pub struct Qwen35 {
    info: ModelInfo,
    device: Device,
    embed: Arc<QTensor>,
    blocks: Vec<Block>,
    out_norm: RmsNorm,
    output: Proj,
    rope: Rope,
    n_head: usize,
    head_dim: usize,
    conv_kernel: usize,
    dims: Dims,
}

impl Qwen35 {
    fn conv_dim(&self) -> usize {
        2 * self.dims.n_k * self.dims.d_k + self.dims.n_v * self.dims.d_v
    }
}

pub fn load(g: &mut GgufFile, device: &Device) -> Result<Qwen35> {
    let k = |s: &str| format!("{ARCH}.{s}");
    let n_embd = g.usize(&k("embedding_length"))?;
    let block_count = g.usize(&k("block_count"))?;
    let nextn = g
        .opt(&k("nextn_predict_layers"), GgufFile::usize)?
        .unwrap_or(0);
    let n_layer = block_count
        .checked_sub(nextn)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            g.invalid(format!(
                "{} {block_count} leaves no layer besides {nextn} nextn layers",
                k("block_count")
            ))
        })?;
    let n_ff = g.usize(&k("feed_forward_length"))?;
    let n_head = g.usize(&k("attention.head_count"))?;
    let kv_heads = per_layer(g, &k("attention.head_count_kv"), n_layer)?
        .unwrap_or_else(|| vec![n_head; n_layer]);
    let head_dim = g
        .opt(&k("attention.key_length"), GgufFile::usize)?
        .unwrap_or(n_embd / n_head.max(1));
    if let Some(vl) = g.opt(&k("attention.value_length"), GgufFile::usize)? {
        if vl != head_dim {
            return Err(g
                .invalid(format!(
                    "value length {vl} differs from key length {head_dim}"
                ))
                .into());
        }
    }
    let n_rot = g
        .opt(&k("rope.dimension_count"), GgufFile::usize)?
        .unwrap_or(head_dim);
    if n_head == 0 || n_rot == 0 || n_rot % 2 != 0 || n_rot > head_dim {
        return Err(g
            .invalid(format!(
                "{n_head} heads with rotary dimension {n_rot} of head size {head_dim}"
            ))
            .into());
    }
    let eps = g.f32(&k("attention.layer_norm_rms_epsilon"))?;
    let rope_base = g.opt(&k("rope.freq_base"), GgufFile::f32)?.unwrap_or(1e7);
    let conv_kernel = g.usize(&k("ssm.conv_kernel"))?;
    let d_inner = g.usize(&k("ssm.inner_size"))?;
    let d_k = g.usize(&k("ssm.state_size"))?;
    let n_v = g.usize(&k("ssm.time_step_rank"))?;
    let n_k = g.usize(&k("ssm.group_count"))?;
    if conv_kernel < 1 || n_v == 0 || n_k == 0 || n_v % n_k != 0 || d_inner % n_v != 0 {
        return Err(g
            .invalid(format!(
                "delta-net dims: conv kernel {conv_kernel}, {n_k} key heads, {n_v} value heads, inner size {d_inner}"
            ))
            .into());
    }
    let d_v = d_inner / n_v;
    // Value heads: tiled order in llama.cpp's files; Ollama's say so with
    // `ssm.v_head_reordered` (grouped order when it is present and false).
    let tiled = match g.raw(&k("ssm.v_head_reordered")) {
        Some(v) => v.to_bool().unwrap_or(true),
        None => true,
    };
    let dims = Dims {
        n_k,
        n_v,
        d_k,
        d_v,
        tiled,
    };
    let recurrent: Vec<bool> = match bool_array(g, &k("attention.recurrent_layers"), n_layer)? {
        Some(r) => r,
        // Ollama's files: no flags, but a KV head count of 0 on each delta-net layer (its
        // runtime reads the layer kinds from that array, as here)
        None if kv_heads.contains(&0) && kv_heads.iter().any(|&h| h > 0) => {
            kv_heads.iter().map(|&h| h == 0).collect()
        }
        None => {
            let interval = g
                .opt(&k("full_attention_interval"), GgufFile::usize)?
                .unwrap_or(4)
                .max(1);
            (0..n_layer).map(|i| (i + 1) % interval != 0).collect()
        }
    };
    for (i, (&rec, &kv)) in recurrent.iter().zip(&kv_heads).enumerate() {
        if !rec && (kv == 0 || n_head % kv != 0) {
            return Err(g
                .invalid(format!(
                    "layer {i}: {n_head} attention heads are not a multiple of {kv} key/value heads"
                ))
                .into());
        }
    }
    let context_length = g.usize(&k("context_length"))?;

    let mut ld = Loader { g, device, eps };
    let (embed, vocab) = ld.embedding(n_embd)?;
    let output = ld.output(&embed, vocab, n_embd)?;
    let out_norm = ld.norm("output_norm.weight", n_embd)?;
    let conv_dim = 2 * n_k * d_k + n_v * d_v;
    let mut blocks = Vec::with_capacity(n_layer);
    for (i, &rec) in recurrent.iter().enumerate() {
        let p = format!("blk.{i}");
        let mixer = if rec {
            let conv = ld.host(&format!("{p}.ssm_conv1d.weight"), &[conv_dim, conv_kernel])?;
            let dt_name = if ld.has(&format!("{p}.ssm_dt.bias")) {
                format!("{p}.ssm_dt.bias")
            } else {
                format!("{p}.ssm_dt")
            };
            let dt_bias = ld.host(&dt_name, &[n_v])?;
            let a = ld.host(&format!("{p}.ssm_a"), &[n_v])?;
            let on_device = if device.is_cuda() {
                Some([
                    Tensor::from_slice(&conv, (conv_dim, conv_kernel), device)?,
                    Tensor::from_slice(&a, n_v, device)?,
                    Tensor::from_slice(&dt_bias, n_v, device)?,
                ])
            } else {
                None
            };
            Mixer::Delta(DeltaNet {
                qkv: ld.matmul(&format!("{p}.attn_qkv.weight"), &[conv_dim, n_embd])?,
                gate: ld.matmul(&format!("{p}.attn_gate.weight"), &[n_v * d_v, n_embd])?,
                beta: ld.matmul(&format!("{p}.ssm_beta.weight"), &[n_v, n_embd])?,
                alpha: ld.matmul(&format!("{p}.ssm_alpha.weight"), &[n_v, n_embd])?,
                conv,
                dt_bias,
                a,
                norm: ld.norm(&format!("{p}.ssm_norm.weight"), d_v)?,
                out: ld.matmul(&format!("{p}.ssm_out.weight"), &[n_embd, n_v * d_v])?,
                on_device,
            })
        } else {
            let n_kv = kv_heads[i];
            Mixer::Attn(GatedAttention {
                n_kv_head: n_kv,
                wq: ld.matmul(
                    &format!("{p}.attn_q.weight"),
                    &[2 * n_head * head_dim, n_embd],
                )?,
                wk: ld.matmul(&format!("{p}.attn_k.weight"), &[n_kv * head_dim, n_embd])?,
                wv: ld.matmul(&format!("{p}.attn_v.weight"), &[n_kv * head_dim, n_embd])?,
                wo: ld.matmul(
                    &format!("{p}.attn_output.weight"),
                    &[n_embd, n_head * head_dim],
                )?,
                q_norm: ld.norm(&format!("{p}.attn_q_norm.weight"), head_dim)?,
                k_norm: ld.norm(&format!("{p}.attn_k_norm.weight"), head_dim)?,
            })
        };
        blocks.push(Block {
            attn_norm: ld.norm(&format!("{p}.attn_norm.weight"), n_embd)?,
            mixer,
            post_norm: ld.norm(&format!("{p}.post_attention_norm.weight"), n_embd)?,
            mlp: GatedMlp::load(&mut ld, &p, n_embd, n_ff, Activation::Silu)?,
        });
    }
    // Parameters of the text model only: skip the vision tower, MTP heads
    // and nextn blocks stored after the main layers.
    let nextn_prefixes: Vec<String> = (n_layer..block_count)
        .map(|i| format!("blk.{i}."))
        .collect();
    let mut skip: Vec<&str> = SKIP.to_vec();
    skip.extend(nextn_prefixes.iter().map(|s| s.as_str()));
    let first_attn = recurrent.iter().position(|r| !r);
    let info = model_info(
        ld.g,
        ARCH,
        InfoDims {
            context_length,
            vocab_size: vocab,
            n_layer,
            n_embd,
            n_head,
            n_kv_head: first_attn.map(|i| kv_heads[i]).unwrap_or(n_head),
            head_dim,
        },
        &skip,
    )?;
    Ok(Qwen35 {
        info,
        device: device.clone(),
        embed,
        blocks,
        out_norm,
        output,
        rope: Rope::partial(n_rot, n_rot, rope_base, 1.0, None),
        n_head,
        head_dim,
        conv_kernel,
        dims,
    })
}

/// `ln(1 + e^x)`, stable for large |x|.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// A delta-net layer's host-side weights, for [`host_core`].
pub(crate) struct HostMixer<'a> {
    /// `[conv_dim · kernel]`, channel-major.
    pub conv: &'a [f32],
    pub a: &'a [f32],
    pub dt_bias: &'a [f32],
    pub kc: usize,
    pub dims: Dims,
}

/// The delta rule's inputs for one sequence's rows, and the new conv state.
struct Prepared {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    b: Vec<f32>,
    new_conv: Vec<f32>,
}

impl Prepared {
    fn inputs(&self) -> delta_net::Inputs<'_> {
        delta_net::Inputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.b,
        }
    }
}

/// Causal depthwise conv + SiLU over the conv state and `qkv`, q/k split
/// and normalised, decay `g` and `β` from `alpha`/`beta`.
fn prepare(
    m: &HostMixer<'_>,
    qkv: &[f32],
    alpha: &[f32],
    beta: &[f32],
    conv_state: &[f32],
) -> Prepared {
    let d = &m.dims;
    let kc = m.kc;
    let conv_dim = 2 * d.n_k * d.d_k + d.n_v * d.d_v;
    let t = qkv.len() / conv_dim;
    let (kd, vd) = (d.n_k * d.d_k, d.n_v * d.d_v);
    let mut q = Vec::with_capacity(t * kd);
    let mut k = Vec::with_capacity(t * kd);
    let mut v = Vec::with_capacity(t * vd);
    let new_conv = super::nn::causal_conv(
        m.conv,
        None,
        kc,
        conv_dim,
        conv_state,
        qkv,
        (t, conv_dim, 0),
        |row| {
            row.iter_mut().for_each(|x| *x = silu(*x));
            q.extend_from_slice(&row[..kd]);
            k.extend_from_slice(&row[kd..2 * kd]);
            v.extend_from_slice(&row[2 * kd..]);
        },
    );
    delta_net::normalize_qk(&mut q, &mut k, d.d_k);
    let mut g = Vec::with_capacity(t * d.n_v);
    let mut b = Vec::with_capacity(t * d.n_v);
    for ti in 0..t {
        for hh in 0..d.n_v {
            let idx = ti * d.n_v + hh;
            g.push(m.a[hh] * softplus(alpha[idx] + m.dt_bias[hh]));
            b.push(sigmoid(beta[idx]));
        }
    }
    Prepared {
        q,
        k,
        v,
        g,
        b,
        new_conv,
    }
}

/// One sequence's delta-net core on the host, for its `t` rows: causal
/// depthwise conv + SiLU over the conv state (`[kernel − 1, conv_dim]`,
/// oldest first) and `qkv` (`[t, conv_dim]`), q/k split and normalised,
/// decay `g` and `β` from `alpha`/`beta` (`[t, n_v]`), the delta rule from
/// `ssm` (updated in place). Returns the outputs `[t, n_v, d_v]` and the new
/// conv state. The CUDA kernels (`cuda_kernels::delta_net`) are tested
/// against this; the model runs [`host_core_from`], which gives the same
/// results.
///
/// The recurrent form runs prompts too, as llama.cpp's fused CPU op: at
/// Qwen3.5's head sizes (128 x 128 state, chunks of 64) the chunked form
/// does as many multiply-adds per token as the recurrent one, and its two
/// passes per token over a state that stays in cache ran a 512-token
/// prompt in 60 ms of CPU against the chunked form's 220
/// (`benches/layer-kinds.sh`).
// Only tests call it (the reference the kernels are checked against), in
// every build.
#[allow(dead_code)]
pub(crate) fn host_core(
    m: &HostMixer<'_>,
    qkv: &[f32],
    alpha: &[f32],
    beta: &[f32],
    conv_state: &[f32],
    ssm: &mut [f32],
) -> (Vec<f32>, Vec<f32>) {
    let pr = prepare(m, qkv, alpha, beta, conv_state);
    let o = delta_net::run(&m.dims, &pr.inputs(), ssm, false);
    (o, pr.new_conv)
}

/// [`host_core`] from the committed states read in place (borrowed from
/// the sequence's tensors) into new ones ([`delta_net::run_from`]: no copy
/// of the state before or after the step). Returns the outputs, the new
/// conv state and the new delta state.
pub(crate) fn host_core_from(
    m: &HostMixer<'_>,
    qkv: &[f32],
    alpha: &[f32],
    beta: &[f32],
    conv_state: &[f32],
    ssm: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let pr = prepare(m, qkv, alpha, beta, conv_state);
    let (o, new_ssm) = delta_net::run_from(&m.dims, &pr.inputs(), ssm, false);
    (o, pr.new_conv, new_ssm)
}

impl Qwen35 {
    /// Delta-net mixer over the batch: projections for all rows at once,
    /// then conv and delta rule per sequence from its own state.
    fn delta_net(
        &self,
        li: usize,
        m: &DeltaNet,
        h: &Tensor,
        rows: &[(Rows, bool)],
        batch: &mut [SeqStep<'_>],
    ) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(w) = &m.on_device {
            if crate::inference::kernels::cuda::delta_net::supported(&self.dims, self.conv_kernel) {
                return self.delta_net_cuda(li, m, w, h, rows, batch);
            }
        }
        let d = &self.dims;
        let conv_dim = self.conv_dim();
        let kc = self.conv_kernel;
        let keep = kc - 1;
        let qkv = super::nn::host_f32(&m.qkv.forward(h)?)?;
        let beta = super::nn::host_f32(&m.beta.forward(h)?)?;
        let alpha = super::nn::host_f32(&m.alpha.forward(h)?)?;
        let n_total = rows.iter().map(|(r, _)| r.t).sum::<usize>();
        let mut core = vec![0f32; n_total * d.n_v * d.d_v];
        let hm = HostMixer {
            conv: &m.conv,
            a: &m.a,
            dt_bias: &m.dt_bias,
            kc,
            dims: *d,
        };
        for ((r, _), step) in rows.iter().zip(batch.iter_mut()) {
            let t = r.t;
            let (qkv_r, alpha_r, beta_r) = (
                &qkv[r.off * conv_dim..(r.off + t) * conv_dim],
                &alpha[r.off * d.n_v..(r.off + t) * d.n_v],
                &beta[r.off * d.n_v..(r.off + t) * d.n_v],
            );
            // Conv state: the previous `kc − 1` inputs, oldest first. The
            // committed states are read where they are (shared tensors,
            // never written: the new ones are staged).
            let (o, new_conv, new_ssm) = match step.state.recurrent(li)? {
                Some([conv, ssm])
                    if conv.elem_count() == keep * conv_dim
                        && ssm.elem_count() == d.state_len() =>
                {
                    super::nn::with_host_f32(conv, |cs| {
                        super::nn::with_host_f32(ssm, |ss| {
                            host_core_from(&hm, qkv_r, alpha_r, beta_r, cs, ss)
                        })
                    })??
                }
                Some(_) => anyhow::bail!(
                    "model `{}`: layer {li}'s recurrent state has the wrong shape",
                    self.info.name
                ),
                None => host_core_from(
                    &hm,
                    qkv_r,
                    alpha_r,
                    beta_r,
                    &vec![0f32; keep * conv_dim],
                    &vec![0f32; d.state_len()],
                ),
            };
            let vd = d.n_v * d.d_v;
            core[r.off * vd..(r.off + t) * vd].copy_from_slice(&o);
            let conv_t = Tensor::from_vec(new_conv, (keep, conv_dim), &self.device)?;
            let ssm_t = Tensor::from_vec(new_ssm, (d.n_v, d.d_k, d.d_v), &self.device)?;
            step.state.stage_recurrent(li, vec![conv_t, ssm_t])?;
        }
        let core = Tensor::from_vec(core, (n_total, d.n_v, d.d_v), &self.device)?;
        self.delta_out(m, h, &core)
    }

    /// The mixer's output from the core `[n_total, n_v, d_v]`: per-head RMS
    /// norm, SiLU gate, `ssm_out`.
    fn delta_out(&self, m: &DeltaNet, h: &Tensor, core: &Tensor) -> Result<Tensor> {
        let d = &self.dims;
        let n_total = core.dim(0)?;
        let z = m.gate.forward(h)?.reshape((n_total, d.n_v, d.d_v))?;
        let y = (m.norm.forward(core)? * candle_nn::ops::silu(&z)?)?;
        Ok(m.out.forward(&y.reshape((n_total, d.n_v * d.d_v))?)?)
    }

    /// The delta-net mixer on a CUDA device: conv and delta rule for the
    /// whole batch in Joule's kernels, states kept on the device.
    #[cfg(feature = "cuda")]
    fn delta_net_cuda(
        &self,
        li: usize,
        m: &DeltaNet,
        w: &[Tensor; 3],
        h: &Tensor,
        rows: &[(Rows, bool)],
        batch: &mut [SeqStep<'_>],
    ) -> Result<Tensor> {
        use crate::inference::kernels::cuda::delta_net as gpu;
        let qkv = m.qkv.forward(h)?.to_dtype(DType::F32)?;
        let alpha = m.alpha.forward(h)?.to_dtype(DType::F32)?;
        let beta = m.beta.forward(h)?.to_dtype(DType::F32)?;
        let mut committed: Vec<Option<[Tensor; 2]>> = Vec::with_capacity(batch.len());
        for step in batch.iter() {
            committed.push(match step.state.recurrent(li)? {
                Some([c, s]) => Some([c.to_device(&self.device)?, s.to_device(&self.device)?]),
                _ => None,
            });
        }
        let seqs: Vec<gpu::SeqIn<'_>> = rows
            .iter()
            .zip(&committed)
            .map(|((r, _), c)| gpu::SeqIn {
                t: r.t,
                conv: c.as_ref().map(|[c, _]| c),
                ssm: c.as_ref().map(|[_, s]| s),
            })
            .collect();
        let weights = gpu::Weights {
            conv: &w[0],
            a: &w[1],
            dt_bias: &w[2],
            conv_kernel: self.conv_kernel,
        };
        let (core, outs) = gpu::forward(&self.dims, &weights, &qkv, &alpha, &beta, &seqs)?;
        for (step, o) in batch.iter_mut().zip(outs) {
            step.state.stage_recurrent(li, vec![o.conv, o.ssm])?;
        }
        self.delta_out(m, h, &core)
    }

    /// Gated full attention over the batch.
    fn attention(
        &self,
        li: usize,
        m: &GatedAttention,
        h: &Tensor,
        rows: &[(Rows, bool)],
        tables: &[(Tensor, Tensor)],
        batch: &mut [SeqStep<'_>],
    ) -> Result<Tensor> {
        let (nh, hd) = (self.n_head, self.head_dim);
        let n_total = h.dim(0)?;
        let qg = m.wq.forward(h)?.reshape((n_total, nh, 2 * hd))?;
        let q = qg.narrow(2, 0, hd)?.contiguous()?;
        let gate = qg
            .narrow(2, hd, hd)?
            .contiguous()?
            .reshape((n_total, nh * hd))?;
        let k = m.wk.forward(h)?;
        let v = m.wv.forward(h)?;
        let mut outs = Vec::with_capacity(rows.len());
        for (((r, _), tb), step) in rows.iter().zip(tables).zip(batch.iter_mut()) {
            let qs = to_heads(
                &q.narrow(0, r.off, r.t)?.reshape((r.t, nh * hd))?,
                nh,
                hd,
                Some(&m.q_norm),
            )?;
            let ks = to_heads(&k.narrow(0, r.off, r.t)?, m.n_kv_head, hd, Some(&m.k_norm))?;
            let vs = to_heads(&v.narrow(0, r.off, r.t)?, m.n_kv_head, hd, None)?;
            let qs = apply_rope(&qs, tb, RopeStyle::Neox)?;
            let ks = apply_rope(&ks, tb, RopeStyle::Neox)?;
            let (k_all, v_all) = step.state.append_kv(li, &ks, &vs)?;
            outs.push(attention(
                &qs,
                &k_all,
                &v_all,
                AttnParams {
                    scale: 1.0 / (hd as f32).sqrt(),
                    softcap: None,
                    window: None,
                },
            )?);
        }
        let att = if outs.len() == 1 {
            outs.remove(0)
        } else {
            Tensor::cat(&outs, 0)?
        };
        let att = (att * candle_nn::ops::sigmoid(&gate)?)?;
        Ok(m.wo.forward(&att)?)
    }
}

impl CausalLm for Qwen35 {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn state_layout(&self) -> Vec<SlotKind> {
        self.blocks
            .iter()
            .map(|b| match b.mixer {
                Mixer::Delta(_) => SlotKind::Recurrent,
                Mixer::Attn(_) => SlotKind::Kv,
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
            anyhow::bail!(
                "model `{}`: a sequence state was made for another model",
                self.info.name
            );
        }
        let mut rows = Vec::with_capacity(batch.len());
        let mut tables = Vec::with_capacity(batch.len());
        let mut ids = Vec::new();
        for step in batch.iter() {
            let t = step.tokens.len();
            tables.push(self.rope.tables(step.state.len(), t, &self.device)?);
            rows.push((Rows { off: ids.len(), t }, step.logits == Logits::All));
            ids.extend_from_slice(step.tokens);
        }
        let ids_t = Tensor::new(ids.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids_t)?.to_dtype(DType::F32)?;
        for (li, b) in self.blocks.iter().enumerate() {
            let h = b.attn_norm.forward(&x)?;
            let a = match &b.mixer {
                Mixer::Delta(m) => self.delta_net(li, m, &h, &rows, batch)?,
                Mixer::Attn(m) => self.attention(li, m, &h, &rows, &tables, batch)?,
            };
            if let Mixer::Delta(_) = &b.mixer {
                dump::tensor(format_args!("linear_attn_out-{li}"), &a)?;
            }
            x = (x + a)?;
            dump::tensor(format_args!("attn_residual-{li}"), &x)?;
            let h = b.post_norm.forward(&x)?;
            let f = b.mlp.forward(&h)?;
            dump::tensor(format_args!("ffn_out-{li}"), &f)?;
            x = (x + f)?;
            dump::tensor(format_args!("l_out-{li}"), &x)?;
        }
        for step in batch.iter_mut() {
            step.state.commit(step.tokens);
        }
        let _head = super::nn::picked_segments(&rows);
        let x = self.out_norm.forward(&pick_rows(&x, &rows)?)?;
        dump::tensor(format_args!("result_norm"), &x)?;
        let logits = self.output.forward(&x)?;
        Ok(split_logits(&logits, &rows)?)
    }
}
