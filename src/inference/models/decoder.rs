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

use crate::inference::gguf::{GgufFile, LoadError};
use crate::inference::model::{CausalLm, KvCache, Logits, ModelInfo, SeqStep};
use crate::inference::quant_matmul::Q41Matrix;
use anyhow::{bail, Context, Result};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use std::sync::Arc;

/// How rotary position embeddings pair up the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (llama.cpp "normal"; llama GGUFs store q/k permuted for it).
    Interleaved,
    /// First half with second half (llama.cpp "neox"; qwen2/qwen3/gemma3).
    Neox,
}

/// The MLP's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// GELU with the tanh approximation (gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

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

/// Rotary frequencies of one table.
#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f64>,
    pos_scale: f64,
}

impl Rope {
    /// `freq_factors`: llama.cpp's optional `rope_freqs.weight` (divides each frequency).
    pub fn new(head_dim: usize, base: f32, pos_scale: f32, freq_factors: Option<&[f32]>) -> Self {
        let half = head_dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = 1.0 / (base as f64).powf(2.0 * i as f64 / head_dim as f64);
                match freq_factors {
                    Some(ff) => f / ff[i] as f64,
                    None => f,
                }
            })
            .collect();
        Self {
            inv_freq,
            pos_scale: pos_scale as f64,
        }
    }

    /// `cos`, `sin` tables `[t, head_dim/2]` for positions `start..start+t`.
    fn tables(
        &self,
        start: usize,
        t: usize,
        device: &Device,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(t * half);
        let mut sin = Vec::with_capacity(t * half);
        for p in start..start + t {
            let p = p as f64 * self.pos_scale;
            for f in &self.inv_freq {
                let a = (p * f) as f32;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Ok((
            Tensor::from_vec(cos, (t, half), device)?,
            Tensor::from_vec(sin, (t, half), device)?,
        ))
    }
}

/// RMSNorm over the last dimension (`x / rms(x) * w`; gemma GGUFs store `1 + w`).
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::rms_norm(&x.contiguous()?, &self.weight, self.eps)
    }
}

/// Set to any value to run every projection through candle's own kernels
/// (for comparing speed and numerics with Joule's CPU kernels).
pub const CANDLE_ONLY_ENV: &str = "JOULE_CANDLE_KERNELS_ONLY";

/// A weight matrix `W` (`[out, in]`) applied as `x @ W^T`: candle's
/// quantised matmul, or on the CPU for `Q4_1` (which candle runs with a
/// scalar loop) Joule's own SIMD kernel.
#[derive(Debug, Clone)]
pub enum Proj {
    Candle(QMatMul),
    CpuQ41(Arc<Q41Matrix>),
}

impl Proj {
    fn new(q: Arc<QTensor>, device: &Device) -> candle_core::Result<Self> {
        let dims = q.shape().dims().to_vec();
        if device.is_cpu()
            && q.dtype() == GgmlDType::Q4_1
            && dims.len() == 2
            && std::env::var_os(CANDLE_ONLY_ENV).is_none()
        {
            let m = Q41Matrix::from_gguf_bytes(&q.data()?, dims[0], dims[1])
                .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
            return Ok(Proj::CpuQ41(Arc::new(m)));
        }
        QMatMul::from_arc(q).map(Proj::Candle)
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Proj::Candle(m) => m.forward(x),
            Proj::CpuQ41(w) => {
                let mut dims = x.dims().to_vec();
                let flat = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                let y = w
                    .matmul(&flat)
                    .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
                if let Some(last) = dims.last_mut() {
                    *last = w.n();
                }
                Tensor::from_vec(y, dims, x.device())
            }
        }
    }
}

/// A projection `x @ W^T (+ b)`.
#[derive(Debug, Clone)]
pub struct Linear {
    w: Proj,
    b: Option<Tensor>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.w.forward(x)?;
        match &self.b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
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
    gate: Proj,
    up: Proj,
    down: Proj,
    post_ffn_norm: Option<RmsNorm>,
}

/// Query positions per attention chunk: a long prompt's attention runs in
/// chunks of this many queries, each against the keys it can see.
const ATTENTION_CHUNK: usize = 128;

/// One chunk of a step's queries (positions `first..first + len` of the
/// step) and its causal/sliding masks, one per window size.
struct QueryChunk {
    first: usize,
    len: usize,
    masks: Vec<(Option<usize>, Option<Tensor>)>,
}

impl QueryChunk {
    fn mask(&self, window: Option<usize>) -> Option<&Tensor> {
        self.masks
            .iter()
            .find(|(w, _)| *w == window)
            .and_then(|(_, m)| m.as_ref())
    }
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

/// Loads tensors of one file with the shapes `hp` implies.
struct Loader<'a> {
    g: &'a mut GgufFile,
    device: &'a Device,
    eps: f32,
}

impl Loader<'_> {
    fn q(&mut self, name: &str, shape: &[usize]) -> Result<QTensor, LoadError> {
        self.g.tensor(name, shape, self.device)
    }

    fn dense(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, LoadError> {
        let q = self.q(name, shape)?;
        q.dequantize(self.device)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| LoadError::BadTensor {
                path: self.g.path().to_path_buf(),
                name: name.to_string(),
                message: e.to_string(),
            })
    }

    fn matmul(&mut self, name: &str, shape: &[usize]) -> Result<Proj, LoadError> {
        let q = self.q(name, shape)?;
        Proj::new(Arc::new(q), self.device).map_err(|e| LoadError::BadTensor {
            path: self.g.path().to_path_buf(),
            name: name.to_string(),
            message: e.to_string(),
        })
    }

    fn norm(&mut self, name: &str, n: usize) -> Result<RmsNorm, LoadError> {
        Ok(RmsNorm {
            weight: self.dense(name, &[n])?,
            eps: self.eps,
        })
    }

    fn linear(
        &mut self,
        prefix: &str,
        out: usize,
        inp: usize,
        bias: bool,
    ) -> Result<Linear, LoadError> {
        let w = self.matmul(&format!("{prefix}.weight"), &[out, inp])?;
        let b = if bias {
            Some(self.dense(&format!("{prefix}.bias"), &[out])?)
        } else {
            None
        };
        Ok(Linear { w, b })
    }
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
        let vocab = match g.tensor_shape("token_embd.weight") {
            Some(s) if s.len() == 2 => s[0],
            Some(s) => {
                return Err(LoadError::BadShape {
                    path: g.path().to_path_buf(),
                    name: "token_embd.weight".into(),
                    got: s,
                    expected: vec![0, n_embd],
                }
                .into())
            }
            None => {
                return Err(LoadError::MissingTensor {
                    path: g.path().to_path_buf(),
                    name: "token_embd.weight".into(),
                }
                .into())
            }
        };
        let (n_params, weight_bytes) = {
            let c = g.content();
            let mut n = 0u64;
            let mut b = 0u64;
            for info in c.tensor_infos.values() {
                let e = info.shape.elem_count() as u64;
                n += e;
                b += e / info.ggml_dtype.block_size() as u64 * info.ggml_dtype.type_size() as u64;
            }
            (n, b)
        };
        let name = g.opt("general.name", GgufFile::string)?.unwrap_or_else(|| {
            g.path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let info = ModelInfo {
            arch: hp.arch.clone(),
            name,
            path: g.path().to_path_buf(),
            context_length: hp.context_length,
            vocab_size: vocab,
            n_layer: hp.n_layer,
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            n_params,
            weight_bytes,
        };
        let mut ld = Loader {
            g,
            device,
            eps: hp.rms_eps,
        };
        let embed = Arc::new(ld.q("token_embd.weight", &[vocab, n_embd])?);
        let output = if ld.g.has_tensor("output.weight") {
            ld.matmul("output.weight", &[vocab, n_embd])?
        } else {
            Proj::new(embed.clone(), device).with_context(|| {
                format!(
                    "{}: tied output from token_embd.weight",
                    info.path.display()
                )
            })?
        };
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
                gate: ld.matmul(&format!("{p}.ffn_gate.weight"), &[n_ff, n_embd])?,
                up: ld.matmul(&format!("{p}.ffn_up.weight"), &[n_ff, n_embd])?,
                down: ld.matmul(&format!("{p}.ffn_down.weight"), &[n_embd, n_ff])?,
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

    /// Causal (and sliding-window) mask `[t, start + t]` of 0 / -inf, or
    /// `None` when every key is visible (one new token, no window cut).
    fn mask(
        &self,
        start: usize,
        t: usize,
        window: Option<usize>,
    ) -> candle_core::Result<Option<Tensor>> {
        let l = start + t;
        let window_cuts = window.is_some_and(|w| l > w);
        if t == 1 && !window_cuts {
            return Ok(None);
        }
        let mut m = Vec::with_capacity(t * l);
        for i in 0..t {
            let qp = start + i;
            for kp in 0..l {
                let hidden = kp > qp || window.is_some_and(|w| qp - kp >= w);
                m.push(if hidden { f32::NEG_INFINITY } else { 0.0 });
            }
        }
        Tensor::from_vec(m, (t, l), &self.device).map(Some)
    }

    /// Attention of one sequence: `q`, `k`, `v` are its rows of the batch's
    /// projections (`[t, heads·head_dim]`); appends to its cache and returns
    /// `[t, n_head·head_dim]` (before the output projection).
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        layer: &Layer,
        li: usize,
        (q, k, v): (Tensor, Tensor, Tensor),
        cache: &mut KvCache,
        cos_sin: &(Tensor, Tensor),
        chunks: &[QueryChunk],
    ) -> candle_core::Result<Tensor> {
        let (t, _) = q.dims2()?;
        let HyperParams {
            n_head,
            n_kv_head,
            head_dim,
            ..
        } = self.hp;
        let rep = n_head / n_kv_head;
        let heads = |y: Tensor, n: usize, norm: Option<&RmsNorm>| -> candle_core::Result<Tensor> {
            let y = y.contiguous()?.reshape((t, n, head_dim))?;
            let y = match norm {
                Some(nm) => nm.forward(&y)?,
                None => y,
            };
            y.transpose(0, 1)?.contiguous()
        };
        let q = heads(q, n_head, layer.q_norm.as_ref())?;
        let k = heads(k, n_kv_head, layer.k_norm.as_ref())?;
        let v = heads(v, n_kv_head, None)?;
        let (cos, sin) = cos_sin;
        let rope = |y: &Tensor| -> candle_core::Result<Tensor> {
            let y = y.unsqueeze(0)?;
            let y = match self.spec.rope_style {
                RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&y, cos, sin)?,
                RopeStyle::Neox => candle_nn::rotary_emb::rope(&y, cos, sin)?,
            };
            y.squeeze(0)
        };
        let q = rope(&q)?;
        let k = rope(&k)?;
        let (k_all, v_all) = cache.append(li, &k, &v)?;
        let start = k_all.dim(1)? - t;
        let scale = self
            .spec
            .attn_scale
            .unwrap_or(1.0 / (head_dim as f32).sqrt()) as f64;
        // Query heads sharing a key/value head are stacked as extra rows.
        let q = q.reshape((n_kv_head, rep, t, head_dim))?;
        let mut outs = Vec::with_capacity(chunks.len());
        for ch in chunks {
            // A chunk of queries sees keys up to its last position (causality),
            // so the score matrix stays small and skips the masked half.
            let l = start + ch.first + ch.len;
            let qc = if ch.len == t {
                q.reshape((n_kv_head, rep * t, head_dim))?
            } else {
                q.narrow(2, ch.first, ch.len)?.contiguous()?.reshape((
                    n_kv_head,
                    rep * ch.len,
                    head_dim,
                ))?
            };
            let kc = k_all.narrow(1, 0, l)?;
            let vc = v_all.narrow(1, 0, l)?;
            let mut scores = (qc.matmul(&kc.t()?)? * scale)?;
            if let Some(cap) = self.spec.attn_softcap {
                scores = ((scores / cap as f64)?.tanh()? * cap as f64)?;
            }
            if let Some(m) = ch.mask(layer.kind.window) {
                scores = scores
                    .reshape((n_kv_head, rep, ch.len, l))?
                    .broadcast_add(m)?
                    .reshape((n_kv_head, rep * ch.len, l))?;
            }
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let out = probs.matmul(&vc)?; // [n_kv, rep*len, hd]
            outs.push(
                out.reshape((n_head, ch.len, head_dim))?
                    .transpose(0, 1)?
                    .reshape((ch.len, n_head * head_dim))?,
            );
        }
        if outs.len() == 1 {
            Ok(outs.pop().expect("one chunk"))
        } else {
            Tensor::cat(&outs, 0)
        }
    }

    fn mlp(&self, layer: &Layer, x: &Tensor) -> candle_core::Result<Tensor> {
        let g = layer.gate.forward(x)?;
        let u = layer.up.forward(x)?;
        let g = match self.spec.activation {
            Activation::Silu => candle_nn::ops::silu(&g)?,
            Activation::GeluTanh => g.gelu()?,
        };
        layer.down.forward(&(g * u)?)
    }

    /// Reject a step the model cannot run, before anything is computed.
    fn check_step(&self, step: &SeqStep<'_>) -> Result<()> {
        let t = step.tokens.len();
        let start = step.cache.len();
        if t == 0 {
            bail!(
                "model `{}`: a step needs at least one token",
                self.info.name
            );
        }
        if start + t > step.cache.max_len() {
            bail!(
                "model `{}`: {} cached + {} new tokens exceed the context length {}",
                self.info.name,
                start,
                t,
                step.cache.max_len()
            );
        }
        if step.cache.n_layer() != self.layers.len() {
            bail!(
                "model `{}`: cache has {} layers, the model {}",
                self.info.name,
                step.cache.n_layer(),
                self.layers.len()
            );
        }
        if let Some(bad) = step
            .tokens
            .iter()
            .find(|&&id| id as usize >= self.info.vocab_size)
        {
            bail!(
                "model `{}`: token id {bad} is outside the vocabulary of {}",
                self.info.name,
                self.info.vocab_size
            );
        }
        Ok(())
    }

    /// The batched forward pass. Every sequence's new tokens are stacked
    /// into one `[Σt, n_embd]` matrix, so each projection and MLP reads its
    /// weights once for the whole batch; only attention (own positions, own
    /// cache, own mask) runs per sequence. Each row's result is the same as
    /// when its sequence runs alone.
    fn forward_batch(&self, batch: &mut [SeqStep<'_>]) -> Result<Vec<Tensor>> {
        for step in batch.iter() {
            self.check_step(step)?;
        }
        // Per-sequence row ranges, rotary tables and masks.
        struct Seq {
            off: usize,
            t: usize,
            tables: Vec<(Tensor, Tensor)>,
            chunks: Vec<QueryChunk>,
        }
        let mut seqs = Vec::with_capacity(batch.len());
        let mut ids = Vec::new();
        for step in batch.iter() {
            let (t, start) = (step.tokens.len(), step.cache.len());
            let tables = self
                .ropes
                .iter()
                .map(|r| r.tables(start, t, &self.device))
                .collect::<candle_core::Result<Vec<_>>>()?;
            let mut chunks = Vec::new();
            for first in (0..t).step_by(ATTENTION_CHUNK) {
                let len = ATTENTION_CHUNK.min(t - first);
                let mut masks: Vec<(Option<usize>, Option<Tensor>)> = Vec::new();
                for layer in &self.layers {
                    let w = layer.kind.window;
                    if !masks.iter().any(|(mw, _)| *mw == w) {
                        masks.push((w, self.mask(start + first, len, w)?));
                    }
                }
                chunks.push(QueryChunk { first, len, masks });
            }
            seqs.push(Seq {
                off: ids.len(),
                t,
                tables,
                chunks,
            });
            ids.extend_from_slice(step.tokens);
        }
        let ids = Tensor::new(ids.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids)?.to_dtype(DType::F32)?;
        if self.spec.scale_embeddings {
            x = (x * (self.hp.n_embd as f64).sqrt())?;
        }
        for (li, layer) in self.layers.iter().enumerate() {
            let h = layer.attn_norm.forward(&x)?;
            let q = layer.wq.forward(&h)?;
            let k = layer.wk.forward(&h)?;
            let v = layer.wv.forward(&h)?;
            let mut outs = Vec::with_capacity(seqs.len());
            for (s, step) in seqs.iter().zip(batch.iter_mut()) {
                let rows = |y: &Tensor| y.narrow(0, s.off, s.t);
                outs.push(self.attend(
                    layer,
                    li,
                    (rows(&q)?, rows(&k)?, rows(&v)?),
                    step.cache,
                    &s.tables[layer.kind.rope],
                    &s.chunks,
                )?);
            }
            let att = if outs.len() == 1 {
                outs.pop().expect("one output")
            } else {
                Tensor::cat(&outs, 0)?
            };
            let mut a = layer.wo.forward(&att)?;
            if let Some(n) = &layer.post_attn_norm {
                a = n.forward(&a)?;
            }
            x = (x + a)?;
            let h = layer.ffn_norm.forward(&x)?;
            let mut m = self.mlp(layer, &h)?;
            if let Some(n) = &layer.post_ffn_norm {
                m = n.forward(&m)?;
            }
            x = (x + m)?;
        }
        for step in batch.iter_mut() {
            step.cache.commit(step.tokens);
        }
        // The rows whose logits are wanted, in batch order.
        let mut pick: Vec<u32> = Vec::new();
        for (s, step) in seqs.iter().zip(batch.iter()) {
            match step.logits {
                Logits::Last => pick.push((s.off + s.t - 1) as u32),
                Logits::All => pick.extend((s.off..s.off + s.t).map(|r| r as u32)),
            }
        }
        let x = if pick.len() == ids.dim(0)? {
            x
        } else {
            x.index_select(&Tensor::new(pick.as_slice(), &self.device)?, 0)?
        };
        let x = self.out_norm.forward(&x)?;
        let mut logits = self.output.forward(&x)?;
        if let Some(cap) = self.spec.final_softcap {
            logits = ((logits / cap as f64)?.tanh()? * cap as f64)?;
        }
        let mut out = Vec::with_capacity(batch.len());
        let mut row = 0;
        for (s, step) in seqs.iter().zip(batch.iter()) {
            out.push(match step.logits {
                Logits::Last => {
                    row += 1;
                    logits.get(row - 1)?
                }
                Logits::All => {
                    row += s.t;
                    logits.narrow(0, row - s.t, s.t)?
                }
            });
        }
        Ok(out)
    }
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
