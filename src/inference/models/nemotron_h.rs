//! Nemotron-H (GGUF arch `nemotron_h`; NVIDIA Nemotron-3-Nano-4B, agent 2 of
//! the Energy Society): a dense hybrid whose layers each hold ONE mixer,
//! a Mamba-2 state-space layer, an attention layer or an MLP, in any order:
//! `x += mixer(attn_norm(x))` for every layer, then `output_norm` and
//! `output`.
//!
//! Which mixer a layer has comes from the per-layer arrays
//! `attention.head_count_kv` and `feed_forward_length` (as llama.cpp reads
//! them): Mamba-2 when both are 0, attention when only the FFN length is 0,
//! MLP otherwise.
//! - **Mamba-2**: `ssm_in` projects to `z` (gate, `inner` wide), `xBC`
//!   (`x` `inner`, `B` and `C` `n_group · d_state` each) and `dt` (one per
//!   head), in that order; causal depthwise conv over `xBC` (kernel
//!   `ssm.conv_kernel`, with `ssm_conv1d.bias`; state = the last `kernel − 1`
//!   inputs) then SiLU; the scan of [`super::mamba2`] with `dt =
//!   softplus(dt + ssm_dt.bias)`, `A = ssm_a` (the converter stores
//!   `−exp(A_log)`) and the `ssm_d` skip; then `norm(y · silu(z))`, an RMS
//!   norm per group of `inner / n_group` channels weighted by `ssm_norm`
//!   (transformers' `NemotronHRMSNormGated`: gate first, then norm); `ssm_out`.
//!   Like llama.cpp, `dt` is not clamped to the config's `time_step_min`
//!   (the GGUF file does not keep it).
//! - **Attention**: grouped-query attention with its own number of
//!   key/value heads, **no rotary embedding**, scale `1/√head_dim`.
//! - **MLP**: `ffn_down(relu(ffn_up x)²)`, no gate; each layer its own width.
//!
//! The Mixture-of-Experts variant (`nemotron_h_moe`, Nemotron 3 Nano 30B-A3B
//! and larger) is a different architecture and is not implemented.

use super::decoder::check_steps;
use super::mamba2::{self, Dims};
use super::nn::{
    attention, host_f32, model_info, pick_rows, rms_norm_plain, split_logits, to_heads,
    with_host_f32, InfoDims, Linear, Loader, Proj, RmsNorm, Rows,
};
use super::qwen35::per_layer;
use crate::inference::engine::model::{CausalLm, Logits, ModelInfo, SeqState, SeqStep, SlotKind};
use crate::inference::files::gguf_weights::GgufFile;
use crate::inference::kernels::AttnParams;
use anyhow::Result;
use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

const ARCH: &str = "nemotron_h";

/// The Mamba-2 mixer of one layer.
#[derive(Debug)]
struct Mamba {
    in_proj: Proj,
    /// `[conv_dim · kernel]`, channel-major.
    conv: Vec<f32>,
    conv_bias: Vec<f32>,
    dt_bias: Vec<f32>,
    a: Vec<f32>,
    d: Vec<f32>,
    /// `[n_group, inner / n_group]`.
    norm: Tensor,
    out: Proj,
}

/// The attention mixer of one layer (no rotary embedding).
#[derive(Debug)]
struct Attention {
    n_head: usize,
    n_kv_head: usize,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
}

/// The squared-ReLU MLP of one layer.
#[derive(Debug)]
struct Mlp {
    up: Linear,
    down: Linear,
}

#[derive(Debug)]
enum Mixer {
    Mamba(Mamba),
    Attn(Attention),
    Mlp(Mlp),
}

#[derive(Debug)]
struct Block {
    norm: RmsNorm,
    mixer: Mixer,
}

/// A loaded Nemotron-H model; immutable, shared by all sequences.
#[derive(Debug)]
pub struct NemotronH {
    info: ModelInfo,
    device: Device,
    embed: Arc<QTensor>,
    blocks: Vec<Block>,
    out_norm: RmsNorm,
    output: Proj,
    head_dim: usize,
    conv_kernel: usize,
    dims: Dims,
    eps: f32,
    layout: Vec<SlotKind>,
}

impl NemotronH {
    fn conv_dim(&self) -> usize {
        self.dims.inner() + 2 * self.dims.n_group * self.dims.d_state
    }
}

/// `{prefix}.weight` (`[out, inp]`) with `{prefix}.bias` when the file has one.
fn linear(ld: &mut Loader<'_>, prefix: &str, out: usize, inp: usize) -> Result<Linear> {
    let bias = ld.has(&format!("{prefix}.bias"));
    Ok(ld.linear(prefix, out, inp, bias)?)
}

pub fn load(g: &mut GgufFile, device: &Device) -> Result<NemotronH> {
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
    if g.opt(&k("expert_count"), GgufFile::usize)?.unwrap_or(0) > 0
        || (0..n_layer).any(|i| g.has_tensor(&format!("blk.{i}.ffn_gate_inp.weight")))
    {
        return Err(g
            .invalid(
                "this nemotron_h file has Mixture-of-Experts layers, which are not implemented \
                 (only dense Nemotron-H is)",
            )
            .into());
    }
    let ff_key = k("feed_forward_length");
    let kv_key = k("attention.head_count_kv");
    let n_ff =
        per_layer(g, &ff_key, n_layer)?.ok_or_else(|| g.invalid(format!("{ff_key} is missing")))?;
    let kv_heads =
        per_layer(g, &kv_key, n_layer)?.ok_or_else(|| g.invalid(format!("{kv_key} is missing")))?;
    let heads = per_layer(g, &k("attention.head_count"), n_layer)?
        .ok_or_else(|| g.invalid(format!("{} is missing", k("attention.head_count"))))?;
    let eps = match g.opt(&k("attention.layer_norm_rms_epsilon"), GgufFile::f32)? {
        Some(e) => e,
        None => g.f32(&k("attention.layer_norm_epsilon"))?,
    };
    let conv_kernel = g.usize(&k("ssm.conv_kernel"))?;
    let d_inner = g.usize(&k("ssm.inner_size"))?;
    let d_state = g.usize(&k("ssm.state_size"))?;
    let n_ssm_head = g.usize(&k("ssm.time_step_rank"))?;
    let n_group = g.usize(&k("ssm.group_count"))?;
    let n_mamba = (0..n_layer)
        .filter(|&i| kv_heads[i] == 0 && n_ff[i] == 0)
        .count();
    if n_mamba > 0
        && (conv_kernel < 1
            || n_ssm_head == 0
            || n_group == 0
            || d_state == 0
            || n_ssm_head % n_group != 0
            || d_inner % n_ssm_head != 0)
    {
        return Err(g
            .invalid(format!(
                "Mamba-2 dims: conv kernel {conv_kernel}, {n_ssm_head} heads in {n_group} groups, \
                 inner size {d_inner}, state size {d_state}"
            ))
            .into());
    }
    let dims = Dims {
        n_head: n_ssm_head,
        head_dim: d_inner / n_ssm_head.max(1),
        d_state,
        n_group,
    };
    let first_attn = (0..n_layer).find(|&i| kv_heads[i] > 0 && n_ff[i] == 0);
    let head_dim = match g.opt(&k("attention.key_length"), GgufFile::usize)? {
        Some(d) => d,
        None => match first_attn {
            Some(i) if heads[i] > 0 => n_embd / heads[i],
            _ => 0,
        },
    };
    if let Some(vl) = g.opt(&k("attention.value_length"), GgufFile::usize)? {
        if vl != head_dim {
            return Err(g
                .invalid(format!(
                    "value length {vl} differs from key length {head_dim}"
                ))
                .into());
        }
    }
    for i in 0..n_layer {
        let (nh, kv) = (heads[i], kv_heads[i]);
        if kv > 0 && n_ff[i] == 0 && (nh == 0 || nh % kv != 0 || head_dim == 0) {
            return Err(g
                .invalid(format!(
                    "layer {i}: {nh} attention heads of size {head_dim} do not group over {kv} \
                     key/value heads"
                ))
                .into());
        }
    }
    let context_length = g.usize(&k("context_length"))?;

    let mut ld = Loader { g, device, eps };
    let (embed, vocab) = ld.embedding(n_embd)?;
    let output = ld.output(&embed, vocab, n_embd)?;
    let out_norm = ld.norm("output_norm.weight", n_embd)?;
    let conv_dim = d_inner + 2 * n_group * d_state;
    let d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_ssm_head;
    let mut blocks = Vec::with_capacity(n_layer);
    let mut layout = Vec::with_capacity(n_layer);
    for i in 0..n_layer {
        let p = format!("blk.{i}");
        let (mixer, slot) = if kv_heads[i] == 0 && n_ff[i] == 0 {
            let conv_bias_name = format!("{p}.ssm_conv1d.bias");
            let conv_bias = if ld.has(&conv_bias_name) {
                ld.host(&conv_bias_name, &[conv_dim])?
            } else {
                vec![0f32; conv_dim]
            };
            let m = Mamba {
                in_proj: ld.matmul(&format!("{p}.ssm_in.weight"), &[d_in_proj, n_embd])?,
                conv: ld.host(&format!("{p}.ssm_conv1d.weight"), &[conv_dim, conv_kernel])?,
                conv_bias,
                dt_bias: ld.host(&format!("{p}.ssm_dt.bias"), &[n_ssm_head])?,
                a: ld.host(&format!("{p}.ssm_a"), &[n_ssm_head, 1])?,
                d: ld.host(&format!("{p}.ssm_d"), &[n_ssm_head, 1])?,
                norm: ld.dense(
                    &format!("{p}.ssm_norm.weight"),
                    &[n_group, d_inner / n_group],
                )?,
                out: ld.matmul(&format!("{p}.ssm_out.weight"), &[n_embd, d_inner])?,
            };
            (Mixer::Mamba(m), SlotKind::Recurrent)
        } else if n_ff[i] == 0 {
            let (nh, kv) = (heads[i], kv_heads[i]);
            let a = Attention {
                n_head: nh,
                n_kv_head: kv,
                wq: linear(&mut ld, &format!("{p}.attn_q"), nh * head_dim, n_embd)?,
                wk: linear(&mut ld, &format!("{p}.attn_k"), kv * head_dim, n_embd)?,
                wv: linear(&mut ld, &format!("{p}.attn_v"), kv * head_dim, n_embd)?,
                wo: linear(&mut ld, &format!("{p}.attn_output"), n_embd, nh * head_dim)?,
            };
            (Mixer::Attn(a), SlotKind::Kv)
        } else {
            let m = Mlp {
                up: linear(&mut ld, &format!("{p}.ffn_up"), n_ff[i], n_embd)?,
                down: linear(&mut ld, &format!("{p}.ffn_down"), n_embd, n_ff[i])?,
            };
            (Mixer::Mlp(m), SlotKind::None)
        };
        blocks.push(Block {
            norm: ld.norm(&format!("{p}.attn_norm.weight"), n_embd)?,
            mixer,
        });
        layout.push(slot);
    }
    let nextn_prefixes: Vec<String> = (n_layer..block_count)
        .map(|i| format!("blk.{i}."))
        .collect();
    let skip: Vec<&str> = nextn_prefixes.iter().map(|s| s.as_str()).collect();
    let info = model_info(
        ld.g,
        ARCH,
        InfoDims {
            context_length,
            vocab_size: vocab,
            n_layer,
            n_embd,
            n_head: first_attn.map(|i| heads[i]).unwrap_or(0),
            n_kv_head: first_attn.map(|i| kv_heads[i]).unwrap_or(0),
            head_dim,
        },
        &skip,
    )?;
    Ok(NemotronH {
        info,
        device: device.clone(),
        embed,
        blocks,
        out_norm,
        output,
        head_dim,
        conv_kernel,
        dims,
        eps,
        layout,
    })
}

/// `ln(1 + e^x)`, stable for large |x| (llama.cpp's threshold of 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// A Mamba-2 layer's host-side weights, for [`host_core`].
pub(crate) struct HostMixer<'a> {
    /// `[conv_dim · kernel]`, channel-major.
    pub conv: &'a [f32],
    pub conv_bias: &'a [f32],
    pub dt_bias: &'a [f32],
    pub a: &'a [f32],
    pub d: &'a [f32],
    pub kc: usize,
    pub dims: Dims,
}

/// The scan's inputs for one sequence's rows, and the new conv state.
struct Prepared {
    xs: Vec<f32>,
    bs: Vec<f32>,
    cs: Vec<f32>,
    dt: Vec<f32>,
    new_conv: Vec<f32>,
    t: usize,
}

/// Causal depthwise conv + bias + SiLU over the conv state and xBC, split
/// into x, B, C; `dt = softplus(dt + dt_bias)`.
fn prepare(m: &HostMixer<'_>, zxbcdt: &[f32], conv_state: &[f32]) -> Prepared {
    let d = &m.dims;
    let kc = m.kc;
    let inner = d.inner();
    let gs = d.n_group * d.d_state;
    let conv_dim = inner + 2 * gs;
    let width = inner + conv_dim + d.n_head;
    let t = zxbcdt.len() / width;
    let mut xs = Vec::with_capacity(t * inner);
    let mut bs = Vec::with_capacity(t * gs);
    let mut cs = Vec::with_capacity(t * gs);
    let new_conv = super::nn::causal_conv(
        m.conv,
        Some(m.conv_bias),
        kc,
        conv_dim,
        conv_state,
        zxbcdt,
        (t, width, inner),
        |row| {
            row.iter_mut().for_each(|x| *x = silu(*x));
            xs.extend_from_slice(&row[..inner]);
            bs.extend_from_slice(&row[inner..inner + gs]);
            cs.extend_from_slice(&row[inner + gs..]);
        },
    );
    let mut dt = Vec::with_capacity(t * d.n_head);
    for row in zxbcdt.chunks_exact(width) {
        for (hh, &raw) in row[inner + conv_dim..].iter().enumerate() {
            dt.push(softplus(raw + m.dt_bias[hh]));
        }
    }
    Prepared {
        xs,
        bs,
        cs,
        dt,
        new_conv,
        t,
    }
}

impl Prepared {
    fn inputs(&self) -> mamba2::Inputs<'_> {
        mamba2::Inputs {
            x: &self.xs,
            b: &self.bs,
            c: &self.cs,
            dt: &self.dt,
        }
    }
}

/// One sequence's Mamba-2 core on the host, for its `t` rows of the
/// in-projection `zxbcdt` (`[t, inner + conv_dim + n_head]`: z, xBC, dt):
/// causal depthwise conv + bias + SiLU over the conv state (`[kernel − 1,
/// conv_dim]`, oldest first) and xBC, `dt = softplus(dt + dt_bias)`, the
/// scan ([`mamba2::run`], the `D` skip included) from `ssm` (updated in
/// place). Returns `y` `[t, inner]` and the new conv state. The model runs
/// [`host_core_from`], which gives the same results.
// Only tests call it (the reference the kernels are checked against), in
// every build.
#[allow(dead_code)]
pub(crate) fn host_core(
    m: &HostMixer<'_>,
    zxbcdt: &[f32],
    conv_state: &[f32],
    ssm: &mut [f32],
) -> (Vec<f32>, Vec<f32>) {
    let pr = prepare(m, zxbcdt, conv_state);
    let params = mamba2::Params { a: m.a, d: m.d };
    let out = mamba2::run(&m.dims, &params, &pr.inputs(), ssm, pr.t > 1);
    (out, pr.new_conv)
}

/// [`host_core`] from the committed states read in place (`conv_state`,
/// `ssm`: borrowed from the sequence's tensors) into new ones
/// ([`mamba2::run_from`]: a decode step passes over the SSM state once, on
/// the worker pool). Returns `y`, the new conv state and the new SSM state.
pub(crate) fn host_core_from(
    m: &HostMixer<'_>,
    zxbcdt: &[f32],
    conv_state: &[f32],
    ssm: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let pr = prepare(m, zxbcdt, conv_state);
    let params = mamba2::Params { a: m.a, d: m.d };
    let (out, new_ssm) = mamba2::run_from(&m.dims, &params, &pr.inputs(), ssm, pr.t > 1);
    (out, pr.new_conv, new_ssm)
}

impl NemotronH {
    /// The Mamba-2 mixer over the batch: the in-projection for all rows at
    /// once, then conv and scan per sequence from its own state (staged),
    /// then the gated group norm and out-projection for all rows.
    fn mamba(
        &self,
        li: usize,
        m: &Mamba,
        h: &Tensor,
        rows: &[(Rows, bool)],
        batch: &mut [SeqStep<'_>],
    ) -> Result<Tensor> {
        let d = &self.dims;
        let inner = d.inner();
        let conv_dim = self.conv_dim();
        let width = inner + conv_dim + d.n_head;
        let kc = self.conv_kernel;
        let keep = kc - 1;
        let n_total = h.dim(0)?;
        let proj = m.in_proj.forward(h)?;
        let zxbcdt = host_f32(&proj)?;
        let mut y = vec![0f32; n_total * inner];
        let hm = HostMixer {
            conv: &m.conv,
            conv_bias: &m.conv_bias,
            dt_bias: &m.dt_bias,
            a: &m.a,
            d: &m.d,
            kc,
            dims: *d,
        };
        for ((r, _), step) in rows.iter().zip(batch.iter_mut()) {
            let t = r.t;
            let rows_in = &zxbcdt[r.off * width..(r.off + t) * width];
            // The committed states are read where they are (shared tensors,
            // never written: the new ones are staged).
            let (out, new_conv, new_ssm) = match step.state.recurrent(li)? {
                Some([conv, ssm]) => {
                    if conv.elem_count() != keep * conv_dim || ssm.elem_count() != d.state_len() {
                        anyhow::bail!(
                            "model `{}`: layer {li}'s recurrent state has the wrong size",
                            self.info.name
                        );
                    }
                    with_host_f32(conv, |cs| {
                        with_host_f32(ssm, |ss| host_core_from(&hm, rows_in, cs, ss))
                    })??
                }
                Some(s) => anyhow::bail!(
                    "model `{}`: layer {li} has a recurrent state of {} tensors, expected 2",
                    self.info.name,
                    s.len()
                ),
                None => host_core_from(
                    &hm,
                    rows_in,
                    &vec![0f32; keep * conv_dim],
                    &vec![0f32; d.state_len()],
                ),
            };
            y[r.off * inner..(r.off + t) * inner].copy_from_slice(&out);
            let conv_t = Tensor::from_vec(new_conv, (keep, conv_dim), &self.device)?;
            let ssm_t = Tensor::from_vec(new_ssm, (d.n_head, d.head_dim, d.d_state), &self.device)?;
            step.state.stage_recurrent(li, vec![conv_t, ssm_t])?;
        }
        let y = Tensor::from_vec(y, (n_total, inner), &self.device)?;
        let z = proj.narrow(1, 0, inner)?.to_dtype(DType::F32)?;
        let gated = (y * candle_nn::ops::silu(&z.contiguous()?)?)?;
        let gs_norm = inner / d.n_group;
        let normed = rms_norm_plain(&gated.reshape((n_total, d.n_group, gs_norm))?, self.eps)?
            .broadcast_mul(&m.norm)?
            .reshape((n_total, inner))?;
        Ok(m.out.forward(&normed)?)
    }

    /// Attention (no rotary embedding) over the batch.
    fn attention(
        &self,
        li: usize,
        m: &Attention,
        h: &Tensor,
        rows: &[(Rows, bool)],
        batch: &mut [SeqStep<'_>],
    ) -> Result<Tensor> {
        let hd = self.head_dim;
        let q = m.wq.forward(h)?;
        let k = m.wk.forward(h)?;
        let v = m.wv.forward(h)?;
        let mut outs = Vec::with_capacity(rows.len());
        for ((r, _), step) in rows.iter().zip(batch.iter_mut()) {
            let qs = to_heads(&q.narrow(0, r.off, r.t)?, m.n_head, hd, None)?;
            let ks = to_heads(&k.narrow(0, r.off, r.t)?, m.n_kv_head, hd, None)?;
            let vs = to_heads(&v.narrow(0, r.off, r.t)?, m.n_kv_head, hd, None)?;
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
        Ok(m.wo.forward(&att)?)
    }
}

impl CausalLm for NemotronH {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn state_layout(&self) -> Vec<SlotKind> {
        self.layout.clone()
    }

    fn new_state(&self) -> SeqState {
        SeqState::new(&self.layout, self.info.context_length)
    }

    fn forward(&self, batch: &mut [SeqStep<'_>]) -> Result<Vec<Tensor>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        check_steps(&self.info, batch)?;
        let _segments = super::nn::step_segments(batch);
        if batch.iter().any(|s| s.state.kinds() != self.layout) {
            anyhow::bail!(
                "model `{}`: a sequence state was made for another model",
                self.info.name
            );
        }
        let mut rows = Vec::with_capacity(batch.len());
        let mut ids = Vec::new();
        for step in batch.iter() {
            let t = step.tokens.len();
            rows.push((Rows { off: ids.len(), t }, step.logits == Logits::All));
            ids.extend_from_slice(step.tokens);
        }
        let ids_t = Tensor::new(ids.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids_t)?.to_dtype(DType::F32)?;
        for (li, b) in self.blocks.iter().enumerate() {
            let h = b.norm.forward(&x)?;
            let y = match &b.mixer {
                Mixer::Mamba(m) => self.mamba(li, m, &h, &rows, batch)?,
                Mixer::Attn(m) => self.attention(li, m, &h, &rows, batch)?,
                Mixer::Mlp(m) => {
                    let u = m.up.forward(&h)?.relu()?;
                    m.down.forward(&u.sqr()?)?
                }
            };
            x = (x + y)?;
        }
        for step in batch.iter_mut() {
            step.state.commit(step.tokens);
        }
        let _head = super::nn::picked_segments(&rows);
        let x = self.out_norm.forward(&pick_rows(&x, &rows)?)?;
        let logits = self.output.forward(&x)?;
        Ok(split_logits(&logits, &rows)?)
    }
}
