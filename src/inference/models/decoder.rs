//! The decoder-only transformer shared by the llama, qwen2, qwen3 and gemma3
//! families: token embedding, `n_layer` blocks of (norm → attention with
//! rotary positions and grouped-query heads → residual, norm → gated MLP →
//! residual), final norm and output projection.
//!
//! What differs between families is described by [`ArchSpec`] (rotary
//! layout, q/k norms, sandwich norms, activation, embedding scale, sliding
//! windows, soft-capping) and filled in by each family's file; tensor names
//! are llama.cpp's (`blk.N.attn_q.weight`, ...). Architectures that are not
//! plain attention stacks (gated delta-net, Mamba-2) get files of their own.

use super::nn::{
    apply_rope, attention, model_info, pick_rows, softcap, split_logits, to_heads, GatedMlp,
    InfoDims, Linear, Loader, Proj, RmsNorm, Rows,
};
pub use super::nn::{Activation, Rope, RopeStyle};
use crate::inference::engine::model::{CausalLm, Logits, ModelInfo, SeqStep};
use crate::inference::files::gguf_weights::{GgufFile, LoadError};
use crate::inference::kernels::AttnParams;
use anyhow::{bail, Context, Result};
use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

/// What a family's architecture uses.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchSpec {
    pub rope_style: RopeStyle,
    /// Biases on q, k, v projections (qwen2).
    pub qkv_bias: bool,
    /// RMSNorm of each q and k head before rotary (qwen3, gemma3).
    pub qk_norm: bool,
    /// Norms after attention and after the MLP too (gemma3's sandwich norms).
    pub sandwich_norms: bool,
    pub activation: Activation,
    /// Multiply embeddings by `sqrt(n_embd)` (gemma).
    pub scale_embeddings: bool,
    /// Query scale; `None` means `1/sqrt(head_dim)`.
    pub attn_scale: Option<f32>,
    /// `tanh` soft-capping of attention scores and of final logits.
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
}

/// Hyperparameters read from `{arch}.*` metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct HyperParams {
    pub arch: String,
    pub context_length: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    /// Position multiplier of linear rope scaling (1 / factor).
    pub rope_pos_scale: f32,
}

impl HyperParams {
    /// Read the keys every family shares.
    pub fn read(g: &GgufFile, arch: &str) -> Result<Self, LoadError> {
        let k = |s: &str| format!("{arch}.{s}");
        let n_embd = g.usize(&k("embedding_length"))?;
        let n_head = g.usize(&k("attention.head_count"))?;
        if n_head == 0 {
            return Err(g.invalid(format!("{} is 0", k("attention.head_count"))));
        }
        let n_kv_head = g
            .opt(&k("attention.head_count_kv"), GgufFile::usize)?
            .unwrap_or(n_head);
        if n_kv_head == 0 || n_head % n_kv_head != 0 {
            return Err(g.invalid(format!(
                "{n_head} attention heads are not a multiple of {n_kv_head} key/value heads"
            )));
        }
        let head_dim = g
            .opt(&k("attention.key_length"), GgufFile::usize)?
            .unwrap_or(n_embd / n_head);
        if let Some(vl) = g.opt(&k("attention.value_length"), GgufFile::usize)? {
            if vl != head_dim {
                return Err(g.invalid(format!(
                    "value length {vl} differs from key length {head_dim} (not implemented)"
                )));
            }
        }
        if let Some(rot) = g.opt(&k("rope.dimension_count"), GgufFile::usize)? {
            if rot != head_dim {
                return Err(g.invalid(format!(
                    "rope.dimension_count {rot} differs from head size {head_dim} (partial rotary is not implemented)"
                )));
            }
        }
        if head_dim % 2 != 0 || head_dim == 0 {
            return Err(g.invalid(format!("head size {head_dim} must be even")));
        }
        let rope_pos_scale = match g.opt(&k("rope.scaling.type"), GgufFile::string)? {
            None => 1.0,
            Some(t) if t == "none" => 1.0,
            Some(t) if t == "linear" => {
                let f = g.f32(&k("rope.scaling.factor"))?;
                if f <= 0.0 {
                    return Err(g.invalid(format!("rope.scaling.factor {f} must be > 0")));
                }
                1.0 / f
            }
            Some(t) => {
                return Err(g.invalid(format!(
                    "rope scaling `{t}` is not implemented (only linear)"
                )))
            }
        };
        Ok(Self {
            arch: arch.to_string(),
            context_length: g.usize(&k("context_length"))?,
            n_embd,
            n_layer: g.usize(&k("block_count"))?,
            n_ff: g.usize(&k("feed_forward_length"))?,
            n_head,
            n_kv_head,
            head_dim,
            rms_eps: g.f32(&k("attention.layer_norm_rms_epsilon"))?,
            rope_base: g
                .opt(&k("rope.freq_base"), GgufFile::f32)?
                .unwrap_or(10_000.0),
            rope_pos_scale,
        })
    }
}

/// Which rotary table and attention window one layer uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerKind {
    /// Index into [`DecoderModel`]'s rotary tables.
    pub rope: usize,
    /// Sliding attention window (keys at distance `< window` are visible).
    pub window: Option<usize>,
}

/// One transformer block.
#[derive(Debug, Clone)]
pub struct Layer {
    kind: LayerKind,
    attn_norm: RmsNorm,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    post_attn_norm: Option<RmsNorm>,
    ffn_norm: RmsNorm,
    mlp: GatedMlp,
    post_ffn_norm: Option<RmsNorm>,
}

/// A loaded decoder model; immutable, shared by all sequences.
#[derive(Debug)]
pub struct DecoderModel {
    info: ModelInfo,
    spec: ArchSpec,
    hp: HyperParams,
    device: Device,
    embed: Arc<QTensor>,
    layers: Vec<Layer>,
    out_norm: RmsNorm,
    output: Proj,
    ropes: Vec<Rope>,
}

impl DecoderModel {
    /// Load every tensor of a decoder model: `kinds` gives each layer's rotary
    /// table (an index into `ropes`) and attention window.
    pub fn load(
        g: &mut GgufFile,
        hp: HyperParams,
        spec: ArchSpec,
        ropes: Vec<Rope>,
        kinds: Vec<LayerKind>,
        device: &Device,
    ) -> Result<Self> {
        if kinds.len() != hp.n_layer {
            bail!(
                "{}: {} layer kinds for {} layers",
                g.path().display(),
                kinds.len(),
                hp.n_layer
            );
        }
        if let Some(k) = kinds.iter().find(|k| k.rope >= ropes.len()) {
            bail!(
                "{}: layer uses rotary table {} of {}",
                g.path().display(),
                k.rope,
                ropes.len()
            );
        }
        let HyperParams {
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            n_ff,
            ..
        } = hp;
        let mut ld = Loader {
            g,
            device,
            eps: hp.rms_eps,
        };
        let (embed, vocab) = ld.embedding(n_embd)?;
        let info = model_info(
            ld.g,
            &hp.arch,
            InfoDims {
                context_length: hp.context_length,
                vocab_size: vocab,
                n_layer: hp.n_layer,
                n_embd,
                n_head,
                n_kv_head,
                head_dim,
            },
            &[],
        )?;
        let output = ld
            .output(&embed, vocab, n_embd)
            .with_context(|| format!("{}: output projection", info.path.display()))?;
        let out_norm = ld.norm("output_norm.weight", n_embd)?;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for (i, kind) in kinds.into_iter().enumerate() {
            let p = format!("blk.{i}");
            let qk = |ld: &mut Loader, s: &str| -> Result<Option<RmsNorm>, LoadError> {
                if spec.qk_norm {
                    ld.norm(&format!("{p}.{s}.weight"), head_dim).map(Some)
                } else {
                    Ok(None)
                }
            };
            let sandwich = |ld: &mut Loader, s: &str| -> Result<Option<RmsNorm>, LoadError> {
                if spec.sandwich_norms {
                    ld.norm(&format!("{p}.{s}.weight"), n_embd).map(Some)
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                kind,
                attn_norm: ld.norm(&format!("{p}.attn_norm.weight"), n_embd)?,
                wq: ld.linear(
                    &format!("{p}.attn_q"),
                    n_head * head_dim,
                    n_embd,
                    spec.qkv_bias,
                )?,
                wk: ld.linear(
                    &format!("{p}.attn_k"),
                    n_kv_head * head_dim,
                    n_embd,
                    spec.qkv_bias,
                )?,
                wv: ld.linear(
                    &format!("{p}.attn_v"),
                    n_kv_head * head_dim,
                    n_embd,
                    spec.qkv_bias,
                )?,
                wo: ld.linear(
                    &format!("{p}.attn_output"),
                    n_embd,
                    n_head * head_dim,
                    false,
                )?,
                q_norm: qk(&mut ld, "attn_q_norm")?,
                k_norm: qk(&mut ld, "attn_k_norm")?,
                post_attn_norm: sandwich(&mut ld, "post_attention_norm")?,
                ffn_norm: ld.norm(&format!("{p}.ffn_norm.weight"), n_embd)?,
                mlp: GatedMlp::load(&mut ld, &p, n_embd, n_ff, spec.activation)?,
                post_ffn_norm: sandwich(&mut ld, "post_ffw_norm")?,
            });
        }
        Ok(Self {
            info,
            spec,
            hp,
            device: device.clone(),
            embed,
            layers,
            out_norm,
            output,
            ropes,
        })
    }

    /// Attention of one sequence: `q`, `k`, `v` are its rows of the batch's
    /// projections (`[t, heads·head_dim]`); appends to its state and returns
    /// `[t, n_head·head_dim]` (before the output projection). On the CPU
    /// `nn::attention` runs the fused `cpu_attention::prefill`, whose rows
    /// equal `cpu_attention::decode`'s bit for bit.
    fn attend(
        &self,
        layer: &Layer,
        li: usize,
        (q, k, v): (Tensor, Tensor, Tensor),
        state: &mut crate::inference::engine::model::SeqState,
        cos_sin: &(Tensor, Tensor),
    ) -> candle_core::Result<Tensor> {
        let HyperParams {
            n_head,
            n_kv_head,
            head_dim,
            ..
        } = self.hp;
        let q = to_heads(&q, n_head, head_dim, layer.q_norm.as_ref())?;
        let k = to_heads(&k, n_kv_head, head_dim, layer.k_norm.as_ref())?;
        let v = to_heads(&v, n_kv_head, head_dim, None)?;
        let q = apply_rope(&q, cos_sin, self.spec.rope_style)?;
        let k = apply_rope(&k, cos_sin, self.spec.rope_style)?;
        let (k_all, v_all) = state.append_kv(li, &k, &v)?;
        attention(&q, &k_all, &v_all, self.attn_params(layer))
    }

    /// The attention parameters of `layer`.
    fn attn_params(&self, layer: &Layer) -> AttnParams {
        AttnParams {
            scale: self
                .spec
                .attn_scale
                .unwrap_or(1.0 / (self.hp.head_dim as f32).sqrt()),
            softcap: self.spec.attn_softcap,
            window: layer.kind.window,
        }
    }

    /// The fused decode paths' inputs: for every one-token sequence of the
    /// batch, in order, its query (heads, rotary applied) stacked into one
    /// `[n, n_head, head_dim]` tensor, and its keys and values after this
    /// token was appended to its cache.
    #[allow(clippy::type_complexity)]
    fn decode_rows(
        &self,
        layer: &Layer,
        li: usize,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        rows: &[(Rows, bool)],
        tables: &[Vec<(Tensor, Tensor)>],
        batch: &mut [SeqStep<'_>],
    ) -> candle_core::Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        let HyperParams {
            n_head,
            n_kv_head,
            head_dim,
            ..
        } = self.hp;
        let mut qs = Vec::with_capacity(rows.len());
        let mut kv = Vec::with_capacity(rows.len());
        for (((r, _), tb), step) in rows.iter().zip(tables).zip(batch.iter_mut()) {
            if r.t != 1 {
                continue;
            }
            let sel = |y: &Tensor| y.narrow(0, r.off, 1);
            let cs = &tb[layer.kind.rope];
            let qh = to_heads(&sel(q)?, n_head, head_dim, layer.q_norm.as_ref())?;
            let kh = to_heads(&sel(k)?, n_kv_head, head_dim, layer.k_norm.as_ref())?;
            let vh = to_heads(&sel(v)?, n_kv_head, head_dim, None)?;
            qs.push(apply_rope(&qh, cs, self.spec.rope_style)?.reshape((1, n_head, head_dim))?);
            let kr = apply_rope(&kh, cs, self.spec.rope_style)?;
            kv.push(step.state.append_kv(li, &kr, &vh)?);
        }
        Ok((Tensor::cat(&qs, 0)?, kv))
    }

    /// Decode attention for a batch of one-token steps on a CUDA device in
    /// one launch of Joule's kernel (`cuda_kernels::attention`), each
    /// sequence against its own cache; `None` (the caller runs [`Self::attend`]
    /// per sequence) for prompts, single sequences and other devices.
    #[cfg(feature = "cuda")]
    #[allow(clippy::type_complexity)]
    fn decode_attention_cuda(
        &self,
        layer: &Layer,
        li: usize,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        rows: &[(Rows, bool)],
        tables: &[Vec<(Tensor, Tensor)>],
        batch: &mut [SeqStep<'_>],
    ) -> candle_core::Result<Option<Tensor>> {
        use crate::inference::kernels::cuda::attention as gpu;
        if !self.device.is_cuda()
            || rows.len() < 2
            || rows.iter().any(|(r, _)| r.t != 1)
            || !gpu::supported(self.hp.head_dim)
            // One launch reads one cache type (`[llm] kv_cache`).
            || batch
                .windows(2)
                .any(|w| w[0].state.kv_cache() != w[1].state.kv_cache())
        {
            return Ok(None);
        }
        let (q, kv) = self.decode_rows(layer, li, (q, k, v), rows, tables, batch)?;
        let seqs: Vec<gpu::SeqKv<'_>> = kv.iter().map(|(k, v)| gpu::SeqKv { k, v }).collect();
        let params = self.attn_params(layer);
        gpu::decode(&q, &seqs, params)
            .map(Some)
            .map_err(|e| candle_core::Error::Msg(format!("CUDA decode attention: {e:#}")))
    }

    /// Attention of a batch on the CPU with every one-token sequence in one
    /// fused pass (`cpu_attention::decode`, each sequence against its own
    /// cache) and the others (prompts) per sequence through [`Self::attend`].
    /// A one-token sequence takes the fused pass whatever it is batched with
    /// (alone too), so its logits do not depend on the other sequences.
    /// `None` (the caller runs [`Self::attend`] for all) when no sequence
    /// takes one token, on other devices and with `JOULE_CANDLE_KERNELS_ONLY`.
    #[allow(clippy::type_complexity)]
    fn decode_attention_cpu(
        &self,
        layer: &Layer,
        li: usize,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        rows: &[(Rows, bool)],
        tables: &[Vec<(Tensor, Tensor)>],
        batch: &mut [SeqStep<'_>],
    ) -> candle_core::Result<Option<Tensor>> {
        use crate::inference::kernels::cpu_attention as cpu;
        if !self.device.is_cpu()
            || !rows.iter().any(|(r, _)| r.t == 1)
            || crate::knobs::candle_kernels_only()
        {
            return Ok(None);
        }
        let (q1, kv) = self.decode_rows(layer, li, (q, k, v), rows, tables, batch)?;
        let seqs: Vec<cpu::SeqKv<'_>> = kv.iter().map(|(k, v)| cpu::SeqKv { k, v }).collect();
        let params = self.attn_params(layer);
        let fused = cpu::decode(&q1, &seqs, params)
            .map_err(|e| candle_core::Error::Msg(format!("CPU decode attention: {e:#}")))?;
        if seqs.len() == rows.len() {
            return Ok(Some(fused));
        }
        let mut outs = Vec::with_capacity(rows.len());
        let mut next = 0;
        for (((r, _), tb), step) in rows.iter().zip(tables).zip(batch.iter_mut()) {
            if r.t == 1 {
                outs.push(fused.narrow(0, next, 1)?);
                next += 1;
            } else {
                let sel = |y: &Tensor| y.narrow(0, r.off, r.t);
                outs.push(self.attend(
                    layer,
                    li,
                    (sel(q)?, sel(k)?, sel(v)?),
                    step.state,
                    &tb[layer.kind.rope],
                )?);
            }
        }
        Tensor::cat(&outs, 0).map(Some)
    }

    /// The batched forward pass. Every sequence's new tokens are stacked
    /// into one `[Σt, n_embd]` matrix, so each projection and MLP reads its
    /// weights once for the whole batch; only attention (own positions, own
    /// keys and values, own mask) runs per sequence. Each row's result is the
    /// same as when its sequence runs alone.
    fn forward_batch(&self, batch: &mut [SeqStep<'_>]) -> Result<Vec<Tensor>> {
        check_steps(&self.info, batch)?;
        let _segments = super::nn::step_segments(batch);
        // Per-sequence row ranges and rotary tables.
        let mut rows = Vec::with_capacity(batch.len());
        let mut tables = Vec::with_capacity(batch.len());
        let mut ids = Vec::new();
        for step in batch.iter() {
            let (t, start) = (step.tokens.len(), step.state.len());
            tables.push(
                self.ropes
                    .iter()
                    .map(|r| r.tables(start, t, &self.device))
                    .collect::<candle_core::Result<Vec<_>>>()?,
            );
            rows.push((Rows { off: ids.len(), t }, step.logits == Logits::All));
            ids.extend_from_slice(step.tokens);
        }
        let ids = Tensor::new(ids.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids)?.to_dtype(DType::F32)?;
        if self.spec.scale_embeddings {
            x = (x * (self.hp.n_embd as f64).sqrt())?;
        }
        for (li, layer) in self.layers.iter().enumerate() {
            let h = layer.attn_norm.forward(&x)?;
            let [q, k, v]: [Tensor; 3] =
                Linear::forward_many(&[&layer.wq, &layer.wk, &layer.wv], &h)?
                    .try_into()
                    .map_err(|_| anyhow::anyhow!("q/k/v products missing"))?;
            #[cfg(feature = "cuda")]
            let fused =
                self.decode_attention_cuda(layer, li, (&q, &k, &v), &rows, &tables, batch)?;
            #[cfg(not(feature = "cuda"))]
            let fused: Option<Tensor> = None;
            let fused = match fused {
                Some(f) => Some(f),
                None => {
                    self.decode_attention_cpu(layer, li, (&q, &k, &v), &rows, &tables, batch)?
                }
            };
            let att = match fused {
                Some(att) => att,
                None => {
                    let mut outs = Vec::with_capacity(rows.len());
                    for (((r, _), tb), step) in rows.iter().zip(&tables).zip(batch.iter_mut()) {
                        let sel = |y: &Tensor| y.narrow(0, r.off, r.t);
                        outs.push(self.attend(
                            layer,
                            li,
                            (sel(&q)?, sel(&k)?, sel(&v)?),
                            step.state,
                            &tb[layer.kind.rope],
                        )?);
                    }
                    if outs.len() == 1 {
                        outs.remove(0)
                    } else {
                        Tensor::cat(&outs, 0)?
                    }
                }
            };
            let mut a = layer.wo.forward(&att)?;
            if let Some(n) = &layer.post_attn_norm {
                a = n.forward(&a)?;
            }
            x = (x + a)?;
            let h = layer.ffn_norm.forward(&x)?;
            let mut m = layer.mlp.forward(&h)?;
            if let Some(n) = &layer.post_ffn_norm {
                m = n.forward(&m)?;
            }
            x = (x + m)?;
        }
        for step in batch.iter_mut() {
            step.state.commit(step.tokens);
        }
        let _head = super::nn::picked_segments(&rows);
        let x = self.out_norm.forward(&pick_rows(&x, &rows)?)?;
        let mut logits = self.output.forward(&x)?;
        if let Some(cap) = self.spec.final_softcap {
            logits = softcap(&logits, cap)?;
        }
        Ok(split_logits(&logits, &rows)?)
    }
}

/// Reject a batch the model cannot run, before anything is computed: empty
/// steps, steps past the context length, states made for another layout,
/// token ids outside the vocabulary. Also drops anything a failed earlier
/// step left staged. Every architecture's `forward` starts with this.
pub fn check_steps(info: &ModelInfo, batch: &mut [SeqStep<'_>]) -> Result<()> {
    for step in batch.iter_mut() {
        step.state.discard_staged();
        let t = step.tokens.len();
        let start = step.state.len();
        if t == 0 {
            bail!("model `{}`: a step needs at least one token", info.name);
        }
        if start + t > step.state.max_len() {
            bail!(
                "model `{}`: {} cached + {} new tokens exceed the context length {}",
                info.name,
                start,
                t,
                step.state.max_len()
            );
        }
        if step.state.n_layer() != info.n_layer {
            bail!(
                "model `{}`: sequence state has {} layers, the model {}",
                info.name,
                step.state.n_layer(),
                info.n_layer
            );
        }
        if let Some(bad) = step
            .tokens
            .iter()
            .find(|&&id| id as usize >= info.vocab_size)
        {
            bail!(
                "model `{}`: token id {bad} is outside the vocabulary of {}",
                info.name,
                info.vocab_size
            );
        }
    }
    Ok(())
}

impl CausalLm for DecoderModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn forward(&self, batch: &mut [SeqStep<'_>]) -> Result<Vec<Tensor>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.forward_batch(batch)
    }
}

/// Load llama.cpp's optional `rope_freqs.weight` (per-frequency divisors).
pub fn rope_freq_factors(
    g: &mut GgufFile,
    head_dim: usize,
    device: &Device,
) -> Result<Option<Vec<f32>>> {
    let Some(q) = g.opt_tensor("rope_freqs.weight", &[head_dim / 2], device)? else {
        return Ok(None);
    };
    let v = q
        .dequantize(device)?
        .to_dtype(DType::F32)?
        .to_vec1::<f32>()
        .with_context(|| format!("{}: reading rope_freqs.weight", g.path().display()))?;
    Ok(Some(v))
}
