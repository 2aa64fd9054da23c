//! Building blocks every architecture file uses: weight matrices
//! ([`Proj`], [`Linear`]), RMS norms, rotary tables (full or partial),
//! causal/sliding attention over one sequence's keys and values
//! ([`attention`]), the [`Loader`] that reads tensors with their shapes
//! checked, and the [`ModelInfo`] facts common to every file.

use crate::inference::engine::model::{ModelInfo, SeqStep};
use crate::inference::files::gguf_weights::{GgufFile, LoadError};
use crate::inference::kernels::quant_matmul::{self, Choice, CpuMatmul, SplitMatmul};
use crate::inference::kernels::AttnParams;
use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use std::sync::Arc;

/// How rotary position embeddings pair up the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (llama.cpp "normal"; llama GGUFs store q/k permuted for it).
    Interleaved,
    /// First half with second half (llama.cpp "neox"; qwen2/qwen3/gemma/qwen35).
    Neox,
}

/// Rotary frequencies of one table. With `rot_dim < head_dim` (partial
/// rotary) only the first `rot_dim` dimensions of each head rotate.
#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f64>,
    pos_scale: f64,
}

impl Rope {
    /// `freq_factors`: llama.cpp's optional `rope_freqs.weight` (divides each frequency).
    pub fn new(head_dim: usize, base: f32, pos_scale: f32, freq_factors: Option<&[f32]>) -> Self {
        Self::partial(head_dim, head_dim, base, pos_scale, freq_factors)
    }

    /// A table rotating the first `rot_dim` dimensions, with frequencies
    /// `base^(-2i / freq_dim)`: `freq_dim` is `rot_dim` for ordinary partial
    /// rotary and the head size for Gemma 4's "proportional" rotary.
    pub fn partial(
        rot_dim: usize,
        freq_dim: usize,
        base: f32,
        pos_scale: f32,
        freq_factors: Option<&[f32]>,
    ) -> Self {
        let half = rot_dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = 1.0 / (base as f64).powf(2.0 * i as f64 / freq_dim as f64);
                match freq_factors.and_then(|ff| ff.get(i)) {
                    Some(&d) => f / d as f64,
                    None => f,
                }
            })
            .collect();
        Self {
            inv_freq,
            pos_scale: pos_scale as f64,
        }
    }

    /// `cos`, `sin` tables `[t, rot_dim/2]` for positions `start..start+t`.
    pub fn tables(
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

/// Apply rotary tables (from [`Rope::tables`]) to `x` = `[heads, t, head_dim]`;
/// only the first `rot_dim` dimensions rotate when the table is partial.
pub fn apply_rope(
    x: &Tensor,
    (cos, sin): &(Tensor, Tensor),
    style: RopeStyle,
) -> candle_core::Result<Tensor> {
    let hd = x.dim(2)?;
    let rot = cos.dim(1)? * 2;
    let rotate = |y: &Tensor| -> candle_core::Result<Tensor> {
        let y = y.unsqueeze(0)?;
        let y = match style {
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&y, cos, sin)?,
            RopeStyle::Neox => candle_nn::rotary_emb::rope(&y, cos, sin)?,
        };
        y.squeeze(0)
    };
    if rot == hd {
        return rotate(&x.contiguous()?);
    }
    let head = x.narrow(2, 0, rot)?.contiguous()?;
    let tail = x.narrow(2, rot, hd - rot)?;
    Tensor::cat(&[rotate(&head)?, tail], 2)
}

/// RMSNorm over the last dimension (`x / rms(x) * w`). GGUF files store the
/// effective weight (llama.cpp's converters add gemma's and Qwen3.5's `1 +`).
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::rms_norm(&x.contiguous()?, &self.weight, self.eps)
    }
}

/// RMS normalisation without a weight (Gemma 4's value norm).
pub fn rms_norm_plain(x: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    let ones = Tensor::ones(x.dim(x.rank() - 1)?, x.dtype(), x.device())?;
    candle_nn::ops::rms_norm(&x, &ones, eps)
}

/// A weight matrix `W` (`[out, in]`) applied as `x @ W^T`: candle's
/// quantised matmul (every GGML type candle knows: F32, F16, BF16, Q4_K,
/// Q6_K, ...), on the CPU Joule's own SIMD kernels for the types they compute
/// faster (`quant_matmul::DEFAULT_TYPES`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q5_K;
/// F16 and BF16 held as 16-bit, where candle holds f32: `quant_matmul::floats`),
/// or both for Q4_K/Q6_K (`quant_matmul::split`: Joule's for decode-sized
/// segments of the rows, candle's for prompts); `JOULE_CPU_KERNEL_TYPES`
/// names others (`quant_matmul::choose`).
#[derive(Debug, Clone)]
pub enum Proj {
    Candle(QMatMul),
    Cpu(Arc<dyn CpuMatmul>),
    Split(Arc<SplitMatmul>),
}

impl Proj {
    pub fn new(q: Arc<QTensor>, device: &Device) -> candle_core::Result<Self> {
        Self::with_split(q, device, true)
    }

    /// [`Self::new`]; with `split` false a matrix [`Choice::Split`] would split
    /// is Joule's alone (the output head: its products take each sequence's
    /// last row, one-row segments that never reach candle's half, whose file
    /// blocks and repacked copies would be held for nothing).
    pub fn with_split(q: Arc<QTensor>, device: &Device, split: bool) -> candle_core::Result<Self> {
        let dims = q.shape().dims().to_vec();
        if device.is_cpu() && dims.len() == 2 && !crate::knobs::candle_kernels_only() {
            let err = |e: anyhow::Error| candle_core::Error::Msg(format!("{e:#}"));
            let (dtype, n, k) = (q.dtype(), dims[0], dims[1]);
            let choice = quant_matmul::choice(dtype, n, k).map_err(err)?;
            if choice != Choice::Candle {
                if let Some(m) = quant_matmul::cpu_matrix_of(dtype, &q.data()?, n, k) {
                    let joule: Arc<dyn CpuMatmul> = Arc::from(m.map_err(err)?);
                    if choice == Choice::Joule || !split {
                        return Ok(Proj::Cpu(joule));
                    }
                    let candle = QMatMul::from_arc(q)?;
                    return Ok(Proj::Split(Arc::new(SplitMatmul { joule, candle })));
                }
            }
        }
        QMatMul::from_arc(q).map(Proj::Candle)
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Proj::Candle(m) => m.forward(&x.contiguous()?),
            Proj::Cpu(_) | Proj::Split(_) => Ok(Self::forward_many(&[self], x)?.remove(0)),
        }
    }

    /// `[p.forward(x) for p in ps]`; when every projection runs on Joule's
    /// CPU kernels (and they share `k`), `x` is quantised once and all of
    /// them run in one pass of the worker pool (a layer's q/k/v, gate/up);
    /// when every one is split, the same for the rows Joule's kernels take.
    pub fn forward_many(ps: &[&Proj], x: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        let same_k = |ks: &[usize]| ks.windows(2).all(|p| p[0] == p[1]);
        let split: Option<Vec<&SplitMatmul>> = ps
            .iter()
            .map(|p| match p {
                Proj::Split(s) => Some(s.as_ref()),
                _ => None,
            })
            .collect();
        if let Some(ws) = split.filter(|ws| {
            let ks: Vec<usize> = ws.iter().map(|w| w.joule.k()).collect();
            same_k(&ks)
        }) {
            return quant_matmul::split_forward_many(&ws, x);
        }
        let cpu: Option<Vec<&dyn CpuMatmul>> = ps
            .iter()
            .map(|p| match p {
                Proj::Cpu(w) => Some(w.as_ref()),
                _ => None,
            })
            .collect();
        let Some(ws) = cpu.filter(|ws| {
            let ks: Vec<usize> = ws.iter().map(|w| w.k()).collect();
            same_k(&ks)
        }) else {
            return ps.iter().map(|p| p.forward(x)).collect();
        };
        let dims = x.dims().to_vec();
        let flat = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let ys = quant_matmul::matmul_many(&ws, &flat)
            .map_err(|e| candle_core::Error::Msg(format!("{e:#}")))?;
        ys.into_iter()
            .zip(&ws)
            .map(|(y, w)| {
                let mut d = dims.clone();
                if let Some(last) = d.last_mut() {
                    *last = w.n();
                }
                Tensor::from_vec(y, d, x.device())
            })
            .collect()
    }
}

/// A projection `x @ W^T (+ b)`.
#[derive(Debug, Clone)]
pub struct Linear {
    w: Proj,
    b: Option<Tensor>,
}

impl Linear {
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.w.forward(x)?;
        match &self.b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }

    /// `[l.forward(x) for l in ls]`, the products in one pass where they can
    /// be ([`Proj::forward_many`]).
    pub fn forward_many(ls: &[&Linear], x: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        let ps: Vec<&Proj> = ls.iter().map(|l| &l.w).collect();
        Proj::forward_many(&ps, x)?
            .into_iter()
            .zip(ls)
            .map(|(y, l)| match &l.b {
                Some(b) => y.broadcast_add(b),
                None => Ok(y),
            })
            .collect()
    }
}

/// The gate activation of a gated MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// GELU with the tanh approximation (gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

impl Activation {
    pub fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Activation::Silu => candle_nn::ops::silu(x),
            Activation::GeluTanh => gelu_tanh(x),
        }
    }
}

/// GELU (tanh approximation): on the CPU, f32 values through Joule's vectorised
/// [`crate::inference::kernels::activation::gelu_tanh`]; elsewhere candle's `gelu`.
fn gelu_tanh(x: &Tensor) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return x.gelu();
    }
    let mut v = x.flatten_all()?.to_vec1::<f32>()?;
    crate::inference::kernels::activation::gelu_tanh(&mut v);
    Tensor::from_vec(v, x.shape(), x.device())
}

/// `down(act(gate(x)) ⊙ up(x))` (`blk.N.ffn_{gate,up,down}.weight`).
#[derive(Debug, Clone)]
pub struct GatedMlp {
    gate: Proj,
    up: Proj,
    down: Proj,
    act: Activation,
}

impl GatedMlp {
    /// Load `{prefix}.ffn_gate/up/down.weight` for `n_embd → n_ff → n_embd`.
    pub fn load(
        ld: &mut Loader<'_>,
        prefix: &str,
        n_embd: usize,
        n_ff: usize,
        act: Activation,
    ) -> Result<Self, LoadError> {
        Ok(Self {
            gate: ld.matmul(&format!("{prefix}.ffn_gate.weight"), &[n_ff, n_embd])?,
            up: ld.matmul(&format!("{prefix}.ffn_up.weight"), &[n_ff, n_embd])?,
            down: ld.matmul(&format!("{prefix}.ffn_down.weight"), &[n_embd, n_ff])?,
            act,
        })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut gu = Proj::forward_many(&[&self.gate, &self.up], x)?;
        let u = gu.pop();
        let g = gu.pop();
        match (g, u) {
            (Some(g), Some(u)) => self.down.forward(&(self.act.apply(&g)? * u)?),
            _ => Err(candle_core::Error::Msg("gate/up products missing".into())),
        }
    }
}

/// Loads tensors of one file, checking each shape (candle order: `[rows,
/// cols]` for a matrix applied as `x @ W^T`) and naming the file and tensor
/// in every error.
pub struct Loader<'a> {
    pub g: &'a mut GgufFile,
    pub device: &'a Device,
    pub eps: f32,
}

impl Loader<'_> {
    fn bad(&self, name: &str, e: impl std::fmt::Display) -> LoadError {
        LoadError::BadTensor {
            path: self.g.path().to_path_buf(),
            name: name.to_string(),
            message: e.to_string(),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.g.has_tensor(name)
    }

    pub fn q(&mut self, name: &str, shape: &[usize]) -> Result<QTensor, LoadError> {
        self.g.tensor(name, shape, self.device)
    }

    /// A tensor dequantised to f32.
    pub fn dense(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, LoadError> {
        let q = self.q(name, shape)?;
        let t = q
            .dequantize(self.device)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| self.bad(name, e))?;
        self.g.set_held(name, t.elem_count() as u64 * 4);
        Ok(t)
    }

    /// A tensor dequantised to f32 and copied to the host.
    pub fn host(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        let t = self.dense(name, shape)?;
        t.flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| self.bad(name, e))
    }

    /// The weight matrix `name` behind a [`Proj`]. One that Joule's kernels take alone
    /// ([`Proj::new`]'s rule) and whose type converts as it is read is built straight from
    /// the file (`quant_matmul::source`: no tensor read whole beside it); others are read
    /// as tensors first.
    pub fn matmul(&mut self, name: &str, shape: &[usize]) -> Result<Proj, LoadError> {
        self.matmul_split(name, shape, true)
    }

    /// [`Self::matmul`], split or not as [`Proj::with_split`].
    fn matmul_split(
        &mut self,
        name: &str,
        shape: &[usize],
        split: bool,
    ) -> Result<Proj, LoadError> {
        if let Some(p) = self.matmul_read(name, shape)? {
            self.note(&p, name, false);
            return Ok(p);
        }
        let q = self.q(name, shape)?;
        let p = Proj::with_split(Arc::new(q), self.device, split).map_err(|e| self.bad(name, e))?;
        self.note(&p, name, false);
        Ok(p)
    }

    /// [`Self::matmul`]'s matrix built as it is read, or `None` where it is not.
    fn matmul_read(&mut self, name: &str, shape: &[usize]) -> Result<Option<Proj>, LoadError> {
        let (&[n, k], Some(dtype)) = (shape, self.g.tensor_dtype(name)) else {
            return Ok(None);
        };
        if !self.device.is_cpu() || crate::knobs::candle_kernels_only() {
            return Ok(None);
        }
        match quant_matmul::choice(dtype, n, k) {
            Ok(Choice::Joule) => {}
            Ok(_) => return Ok(None),
            Err(e) => return Err(self.bad(name, format!("{e:#}"))),
        }
        let m = self.g.read_tensor_with(name, shape, |dtype, read| {
            quant_matmul::cpu_matrix_read(dtype, read, n, k)
        })?;
        Ok(m.map(|m| Proj::Cpu(Arc::from(m))))
    }

    /// Note in the file which kernel multiplies the matrix `name` (for the
    /// run's record of kernels, `engine::kernel_record`).
    /// What the model holds for it: Joule's matrix instead of the tensor
    /// (besides it when `shared`, the tied embedding), or the tensor plus
    /// candle's repacked copies on the CPU
    /// ([`quant_matmul::candle_repack_bytes`]).
    fn note(&mut self, p: &Proj, name: &str, shared: bool) {
        let (n, k) = match self.g.tensor_shape(name).as_deref() {
            Some(&[n, k]) => (n, k),
            _ => (0, 0),
        };
        match p {
            Proj::Cpu(m) if shared => self.g.add_held(name, m.resident_bytes()),
            Proj::Cpu(m) => self.g.set_held(name, m.resident_bytes()),
            Proj::Candle(QMatMul::QTensor(_)) if self.device.is_cpu() => {
                if let Some(dtype) = self.g.tensor_dtype(name) {
                    self.g
                        .add_held(name, quant_matmul::candle_repack_bytes(dtype, n, k));
                }
            }
            Proj::Split(m) => {
                self.g.add_held(name, m.joule.resident_bytes());
                if let Some(dtype) = self.g.tensor_dtype(name) {
                    self.g
                        .add_held(name, quant_matmul::candle_split_repack_bytes(dtype, n, k));
                }
            }
            Proj::Candle(_) => {}
        }
        if let Some(dtype) = self.g.tensor_dtype(name) {
            self.g
                .note_matmul(crate::inference::files::gguf_weights::MatmulUse {
                    dtype,
                    n,
                    k,
                    joule: matches!(p, Proj::Cpu(_)),
                    split: matches!(p, Proj::Split(_)),
                });
        }
    }

    pub fn norm(&mut self, name: &str, n: usize) -> Result<RmsNorm, LoadError> {
        Ok(RmsNorm {
            weight: self.dense(name, &[n])?,
            eps: self.eps,
        })
    }

    /// `{prefix}.weight` (`[out, inp]`) and, with `bias`, `{prefix}.bias`.
    pub fn linear(
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

    /// The token embedding table (`token_embd.weight`, `[vocab, n_embd]`);
    /// returns it with the vocabulary size read from its shape.
    pub fn embedding(&mut self, n_embd: usize) -> Result<(Arc<QTensor>, usize), LoadError> {
        let name = "token_embd.weight";
        let vocab = match self.g.tensor_shape(name) {
            Some(s) if s.len() == 2 && s[1] == n_embd => s[0],
            Some(s) => {
                return Err(LoadError::BadShape {
                    path: self.g.path().to_path_buf(),
                    name: name.into(),
                    got: s,
                    expected: vec![0, n_embd],
                })
            }
            None => {
                return Err(LoadError::MissingTensor {
                    path: self.g.path().to_path_buf(),
                    name: name.into(),
                })
            }
        };
        Ok((Arc::new(self.q(name, &[vocab, n_embd])?), vocab))
    }

    /// `output.weight`, or the embedding table when the output is tied.
    pub fn output(
        &mut self,
        embed: &Arc<QTensor>,
        vocab: usize,
        n_embd: usize,
    ) -> Result<Proj, LoadError> {
        if self.has("output.weight") {
            self.matmul_split("output.weight", &[vocab, n_embd], false)
        } else {
            let p = Proj::with_split(embed.clone(), self.device, false)
                .map_err(|e| self.bad("token_embd.weight (tied output)", e))?;
            self.note(&p, "token_embd.weight", true);
            Ok(p)
        }
    }
}

/// Facts of a model file: name, and parameter count and bytes over the
/// tensors generation uses (`skip` names prefixes of tensors that it does
/// not, e.g. vision towers bundled in the same file).
pub fn model_info(
    g: &GgufFile,
    arch: &str,
    dims: InfoDims,
    skip: &[&str],
) -> Result<ModelInfo, LoadError> {
    let c = g.content();
    let mut n_params = 0u64;
    let mut weight_bytes = 0u64;
    for (name, info) in &c.tensor_infos {
        if skip.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let e = info.shape.elem_count() as u64;
        n_params += e;
        weight_bytes +=
            e / info.ggml_dtype.block_size() as u64 * info.ggml_dtype.type_size() as u64;
    }
    let name = g.opt("general.name", GgufFile::string)?.unwrap_or_else(|| {
        g.path()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    Ok(ModelInfo {
        arch: arch.to_string(),
        name,
        path: g.path().to_path_buf(),
        context_length: dims.context_length,
        vocab_size: dims.vocab_size,
        n_layer: dims.n_layer,
        n_embd: dims.n_embd,
        n_head: dims.n_head,
        n_kv_head: dims.n_kv_head,
        head_dim: dims.head_dim,
        n_params,
        weight_bytes,
    })
}

/// The dimensions [`model_info`] records.
#[derive(Debug, Clone, Copy)]
pub struct InfoDims {
    pub context_length: usize,
    pub vocab_size: usize,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
}

/// Query positions per attention chunk: a long prompt's attention runs in
/// chunks of this many queries, each against the keys it can see.
pub const ATTENTION_CHUNK: usize = 128;

/// Causal (and sliding-window) mask `[t, start + t]` of 0 / -inf, or `None`
/// when every key is visible (one new token, no window cut).
pub fn causal_mask(
    start: usize,
    t: usize,
    window: Option<usize>,
    device: &Device,
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
    Tensor::from_vec(m, (t, l), device).map(Some)
}

/// Causal attention of one sequence's `t` new queries `q` (`[n_head, t,
/// head_dim]`, already normed and rotated) over all its keys and values
/// `k`, `v` (`[n_kv_head, start + t, head_dim | v_dim]`, this step's
/// included). Query heads sharing a key/value head are consecutive. Returns
/// `[t, n_head · v_dim]`. On the CPU (f32 queries; f32 or f16 keys and
/// values, `[llm] kv_cache`) Joule's fused pass runs (`cpu_attention::prefill`:
/// caches read in place, and each query row's result independent of how its
/// prompt was split into steps); other devices and dtypes, and
/// `JOULE_CANDLE_KERNELS_ONLY`, run [`attention_candle`].
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, p: AttnParams) -> candle_core::Result<Tensor> {
    let cpu = |x: &Tensor, f16: bool| {
        x.device().is_cpu() && (x.dtype() == DType::F32 || (f16 && x.dtype() == DType::F16))
    };
    if cpu(q, false) && cpu(k, true) && cpu(v, true) && !crate::knobs::candle_kernels_only() {
        return crate::inference::kernels::cpu_attention::prefill(q, k, v, p)
            .map_err(|e| candle_core::Error::Msg(format!("CPU attention: {e:#}")));
    }
    attention_candle(q, k, v, p)
}

/// [`attention`] in candle's operations: long steps run in chunks of
/// [`ATTENTION_CHUNK`] queries, each against only the keys it can see (the
/// reference the fused CPU pass is tested against). Keys and values of
/// another type than the queries' (an f16 cache) are converted to it.
pub fn attention_candle(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: AttnParams,
) -> candle_core::Result<Tensor> {
    let (n_head, t, hd) = q.dims3()?;
    let (n_kv, l_all, _) = k.dims3()?;
    let vd = v.dim(2)?;
    if n_kv == 0 || n_head % n_kv != 0 {
        return Err(candle_core::Error::Msg(format!(
            "{n_head} query heads do not group over {n_kv} key/value heads"
        )));
    }
    let rep = n_head / n_kv;
    let start = l_all - t;
    let q = q.contiguous()?.reshape((n_kv, rep, t, hd))?;
    let mut outs = Vec::new();
    for first in (0..t).step_by(ATTENTION_CHUNK) {
        let len = ATTENTION_CHUNK.min(t - first);
        let l = start + first + len;
        let qc = if len == t {
            q.reshape((n_kv, rep * t, hd))?
        } else {
            q.narrow(2, first, len)?
                .contiguous()?
                .reshape((n_kv, rep * len, hd))?
        };
        // Keys beyond the window of the chunk's first query are never seen.
        let k0 = match p.window {
            Some(w) => (start + first + 1).saturating_sub(w),
            None => 0,
        };
        // f16 caches (`[llm] kv_cache`): the keys and values read, in the queries' type.
        let kc = k.narrow(1, k0, l - k0)?.to_dtype(q.dtype())?;
        let vc = v.narrow(1, k0, l - k0)?.to_dtype(q.dtype())?;
        let mut scores = (qc.matmul(&kc.t()?)? * p.scale as f64)?;
        if let Some(cap) = p.softcap {
            scores = ((scores / cap as f64)?.tanh()? * cap as f64)?;
        }
        if let Some(m) = causal_mask(start + first, len, p.window, q.device())? {
            let m = m.narrow(1, k0, l - k0)?;
            scores = scores
                .reshape((n_kv, rep, len, l - k0))?
                .broadcast_add(&m)?
                .reshape((n_kv, rep * len, l - k0))?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let out = probs.matmul(&vc.contiguous()?)?; // [n_kv, rep*len, vd]
        outs.push(
            out.reshape((n_head, len, vd))?
                .transpose(0, 1)?
                .reshape((len, n_head * vd))?,
        );
    }
    if outs.len() == 1 {
        Ok(outs.remove(0))
    } else {
        Tensor::cat(&outs, 0)
    }
}

/// `[t, n·d]` rows → `[n, t, d]` heads (contiguous), optionally RMS-normed per head.
pub fn to_heads(
    y: &Tensor,
    n: usize,
    d: usize,
    norm: Option<&RmsNorm>,
) -> candle_core::Result<Tensor> {
    let t = y.dim(0)?;
    let y = y.contiguous()?.reshape((t, n, d))?;
    let y = match norm {
        Some(nm) => nm.forward(&y)?,
        None => y,
    };
    y.transpose(0, 1)?.contiguous()
}

/// The rows of each sequence of a batch (`[Σt, ...]` stacked in batch order).
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    pub off: usize,
    pub t: usize,
}

/// Stack the batch's rows of interest for the output head: the last row of
/// each `Logits::Last` sequence, every row of each `Logits::All` one; and
/// split the logits back per sequence.
pub fn pick_rows(x: &Tensor, rows: &[(Rows, bool)]) -> candle_core::Result<Tensor> {
    let mut pick: Vec<u32> = Vec::new();
    for (r, all) in rows {
        if *all {
            pick.extend((r.off..r.off + r.t).map(|i| i as u32));
        } else {
            pick.push((r.off + r.t - 1) as u32);
        }
    }
    if pick.len() == x.dim(0)? {
        return Ok(x.clone());
    }
    x.index_select(&Tensor::new(pick.as_slice(), x.device())?, 0)
}

/// Declare the rows of a step's stacked products as one segment per sequence
/// (its new tokens), for the kernels that choose by a sequence's rows
/// (`quant_matmul::split`); held until the guard drops.
pub fn step_segments(batch: &[SeqStep<'_>]) -> quant_matmul::split::Segments {
    quant_matmul::segments(batch.iter().map(|s| s.tokens.len()))
}

/// Declare the rows [`pick_rows`] keeps as one segment per sequence (its
/// last row, or all its rows), for the output head's product.
pub fn picked_segments(rows: &[(Rows, bool)]) -> quant_matmul::split::Segments {
    quant_matmul::segments(rows.iter().map(|(r, all)| if *all { r.t } else { 1 }))
}

/// Split `[Σ picked, vocab]` logits (from [`pick_rows`]) per sequence:
/// `[vocab]` for a last-row sequence, `[t, vocab]` for an all-rows one.
pub fn split_logits(logits: &Tensor, rows: &[(Rows, bool)]) -> candle_core::Result<Vec<Tensor>> {
    let mut out = Vec::with_capacity(rows.len());
    let mut row = 0;
    for (r, all) in rows {
        if *all {
            out.push(logits.narrow(0, row, r.t)?);
            row += r.t;
        } else {
            out.push(logits.get(row)?);
            row += 1;
        }
    }
    Ok(out)
}

/// `tanh` soft-capping: `cap · tanh(x / cap)`; on the CPU, f32 values through Joule's
/// vectorised [`crate::inference::kernels::activation::softcap`] (candle's `tanh` calls libm
/// once per value: Gemma 4's 262,144 logits per token), elsewhere candle's.
pub fn softcap(x: &Tensor, cap: f32) -> candle_core::Result<Tensor> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return (x / cap as f64)?.tanh()? * cap as f64;
    }
    let mut v = x.flatten_all()?.to_vec1::<f32>()?;
    crate::inference::kernels::activation::softcap(&mut v, cap);
    Tensor::from_vec(v, x.shape(), x.device())
}

/// A causal depthwise convolution (kernel `kc`, weights `w` `[conv_dim ·
/// kc]` channel-major, optional `bias`) over `t` rows: the conv state
/// `state` (`[kc − 1, conv_dim]`, oldest first), then row `i` of `x` at
/// `x[i · stride + offset..][..conv_dim]`. Hands each output row (before any
/// activation) to `each`, and returns the new conv state (the last `kc − 1`
/// input rows). Reads the input rows in place, one vector pass per tap,
/// rather than gathering a copy of state and rows first.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv(
    w: &[f32],
    bias: Option<&[f32]>,
    kc: usize,
    conv_dim: usize,
    state: &[f32],
    x: &[f32],
    (t, stride, offset): (usize, usize, usize),
    mut each: impl FnMut(&mut [f32]),
) -> Vec<f32> {
    let keep = kc.saturating_sub(1);
    let mut wt = vec![0f32; kc * conv_dim];
    for (c, taps) in w.chunks_exact(kc).enumerate().take(conv_dim) {
        for (j, &wj) in taps.iter().enumerate() {
            wt[j * conv_dim + c] = wj;
        }
    }
    let row = |r: usize| -> &[f32] {
        if r < keep {
            &state[r * conv_dim..(r + 1) * conv_dim]
        } else {
            let o = (r - keep) * stride + offset;
            &x[o..o + conv_dim]
        }
    };
    let mut acc = vec![0f32; conv_dim];
    for ti in 0..t {
        match bias {
            Some(b) => acc.copy_from_slice(&b[..conv_dim]),
            None => acc.iter_mut().for_each(|a| *a = 0.0),
        }
        for j in 0..kc {
            let wj = &wt[j * conv_dim..(j + 1) * conv_dim];
            for ((a, &wv), &xv) in acc.iter_mut().zip(wj).zip(row(ti + j)) {
                *a += wv * xv;
            }
        }
        each(&mut acc);
    }
    let mut new_state = Vec::with_capacity(keep * conv_dim);
    for r in t..t + keep {
        new_state.extend_from_slice(row(r));
    }
    new_state
}

/// Below this log factor a chunked recurrence's decay counts as zero.
const DECAY_FLOOR: f32 = -60.0;

/// `e^x` for a log decay `x ≤ 0` of a chunked recurrence, 0 below
/// [`DECAY_FLOOR`] (`e^-60 ≈ 9e-27`, far below anything the f32 sums it
/// scales can resolve). Strong decays over a chunk reach `e^-1000`; the
/// factors on the way there, and their products with the state, are
/// subnormal floats, which the CPU multiplies and adds tens of times more
/// slowly than normal ones: at real width they made the chunked forms
/// several times slower than their arithmetic.
#[inline]
pub fn decay(x: f32) -> f32 {
    if x < DECAY_FLOOR {
        0.0
    } else {
        x.exp()
    }
}

/// Lanes of [`dot`]'s independent partial sums.
const DOT_LANES: usize = 16;

/// `Σ a_i b_i` over the shorter of the two, in [`DOT_LANES`] independent
/// partial sums (a plain `iter().sum()` is one serial chain of adds, bound
/// by their latency: the recurrences' inner products at head sizes of
/// 80–128 ran several times slower that way), summed pairwise at the end.
/// The lanes run as one AVX-512 register where the build has AVX-512 (the
/// compiler vectorised the portable loop only two lanes wide when `dot`
/// was not inlined); both give the same bits (a multiply, then an add, per
/// lane, in the same order).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let full = n - n % DOT_LANES;
    let mut acc = [0f32; DOT_LANES];
    dot_lanes(&a[..full], &b[..full], &mut acc);
    let mut tail = 0f32;
    for (x, y) in a[full..].iter().zip(&b[full..]) {
        tail += x * y;
    }
    // Pairwise, so the result does not depend on the order of the lanes' sums.
    let mut w = DOT_LANES;
    while w > 1 {
        w /= 2;
        for k in 0..w {
            acc[k] += acc[k + w];
        }
    }
    acc[0] + tail
}

/// `acc[k] += Σ_j a[16j + k] · b[16j + k]` over whole lanes of equally long
/// `a` and `b`.
#[inline]
fn dot_lanes(a: &[f32], b: &[f32], acc: &mut [f32; DOT_LANES]) {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx512f"))]
    {
        use std::arch::x86_64::{_mm512_add_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_storeu_ps};
        // SAFETY: AVX-512F is enabled for this build (`target_feature`);
        // every load reads one whole 16-float chunk of `a`, `b` or `acc`,
        // and the store writes `acc`'s 16 floats (unaligned accesses).
        unsafe {
            let mut v = _mm512_loadu_ps(acc.as_ptr());
            for (x, y) in a.chunks_exact(DOT_LANES).zip(b.chunks_exact(DOT_LANES)) {
                let p = _mm512_mul_ps(_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(y.as_ptr()));
                v = _mm512_add_ps(v, p);
            }
            _mm512_storeu_ps(acc.as_mut_ptr(), v);
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx512f")))]
    for (x, y) in a.chunks_exact(DOT_LANES).zip(b.chunks_exact(DOT_LANES)) {
        for k in 0..DOT_LANES {
            acc[k] += x[k] * y[k];
        }
    }
}

/// `c += a · b` for row-major `a` `[m, k]`, `b` `[k, n]` and `c` `[m, n]`,
/// in register tiles of 4 rows by 16 columns (each `b` row loaded once per
/// four rows of `a`): the chunked recurrences' products of a chunk with a
/// head's state, which as one row update at a time streamed the whole state
/// once per token.
pub fn gemm_acc(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    const MR: usize = 4;
    const NR: usize = 16;
    let (a, b, c) = (&a[..m * k], &b[..k * n], &mut c[..m * n]);
    let n_full = n - n % NR;
    let mut i0 = 0;
    while i0 < m {
        let mr = MR.min(m - i0);
        let mut j_edge = 0;
        if mr == MR {
            for j0 in (0..n_full).step_by(NR) {
                let mut acc = [[0f32; NR]; MR];
                for p in 0..k {
                    let brow = &b[p * n + j0..p * n + j0 + NR];
                    for (ii, acc_row) in acc.iter_mut().enumerate() {
                        let av = a[(i0 + ii) * k + p];
                        for (x, &bv) in acc_row.iter_mut().zip(brow) {
                            *x += av * bv;
                        }
                    }
                }
                for (ii, acc_row) in acc.iter().enumerate() {
                    let crow = &mut c[(i0 + ii) * n + j0..(i0 + ii) * n + j0 + NR];
                    for (cv, &x) in crow.iter_mut().zip(acc_row) {
                        *cv += x;
                    }
                }
            }
            j_edge = n_full;
        }
        if j_edge < n {
            for ii in i0..i0 + mr {
                let crow = &mut c[ii * n + j_edge..(ii + 1) * n];
                for p in 0..k {
                    let av = a[ii * k + p];
                    let brow = &b[p * n + j_edge..(p + 1) * n];
                    for (cv, &bv) in crow.iter_mut().zip(brow) {
                        *cv += av * bv;
                    }
                }
            }
        }
        i0 += mr;
    }
}

/// The flat f32 contents of a tensor on the host (no copy for contiguous
/// f32 CPU tensors beyond the one `to_vec1` makes).
pub fn host_f32(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}

/// Below this many state updates (tokens × state elements) a recurrence
/// runs its heads on the calling thread: waking the worker pool costs more
/// than a small step's arithmetic.
const PARALLEL_MIN_WORK: usize = 1 << 18;

/// Run a per-head recurrence over `t` tokens: `state` holds every head's
/// state (`n_heads` blocks), `head(h, state_h)` updates head `h`'s block and
/// returns its outputs `[t, out_dim]`. Heads run in parallel on candle's CPU
/// worker pool (`RAYON_NUM_THREADS` threads) when the step is large enough.
/// Which thread runs a head does not change its arithmetic, so the result
/// does not depend on the thread count. Returns `[t, n_heads, out_dim]`.
pub fn run_heads<T: Send>(
    state: &mut [T],
    n_heads: usize,
    t: usize,
    out_dim: usize,
    head: impl Fn(usize, &mut [T]) -> Vec<f32> + Sync,
) -> Vec<f32> {
    let total = state.len();
    let hs = total / n_heads.max(1);
    let heads: Vec<std::sync::Mutex<(&mut [T], Vec<f32>)>> = state
        .chunks_exact_mut(hs.max(1))
        .map(|s| std::sync::Mutex::new((s, Vec::new())))
        .collect();
    let work = |range: std::ops::Range<usize>| {
        for h in range {
            if let Ok(mut g) = heads[h].lock() {
                let (s, out) = &mut *g;
                *out = head(h, s);
            }
        }
    };
    if t * total >= PARALLEL_MIN_WORK {
        candle_core::utils::barrier_pool().execute_chunked(heads.len(), work);
    } else {
        work(0..heads.len());
    }
    let mut out = vec![0f32; t * n_heads * out_dim];
    for (h, m) in heads.into_iter().enumerate() {
        let (_, o) = m.into_inner().unwrap_or_else(|e| e.into_inner());
        for ti in 0..t.min(o.len() / out_dim.max(1)) {
            let dst = (ti * n_heads + h) * out_dim;
            out[dst..dst + out_dim].copy_from_slice(&o[ti * out_dim..(ti + 1) * out_dim]);
        }
    }
    out
}

/// [`run_heads`] from a state that stays where it is: `old` (every head's
/// block, read only: a sequence's committed state, borrowed from its tensor
/// by [`with_host_f32`]) and a new state that each head writes on its first
/// sweep over its block. A decode step thus reads the old state once and
/// writes the new one once, spread over the heads, with no copy before or
/// after (the recurrent states are immutable values once committed:
/// `engine::state`). `head(h, old_h, new_h)` must write every element of
/// `new_h` ([`Fresh`] turns the block into a plain slice once it has);
/// `old.len()` must be a multiple of `n_heads`. Returns the outputs `[t,
/// n_heads, out_dim]` and the new state.
pub fn run_heads_from(
    old: &[f32],
    n_heads: usize,
    t: usize,
    out_dim: usize,
    head: impl Fn(usize, &[f32], Fresh<'_>) -> Vec<f32> + Sync,
) -> (Vec<f32>, Vec<f32>) {
    let len = old.len();
    let n_heads = n_heads.max(1);
    assert_eq!(len % n_heads, 0, "state of {len} over {n_heads} heads");
    let hs = len / n_heads;
    let mut new = Vec::<f32>::with_capacity(len);
    let filled = std::sync::atomic::AtomicUsize::new(0);
    let out = run_heads(
        &mut new.spare_capacity_mut()[..len],
        n_heads,
        t,
        out_dim,
        |h, dst| {
            let fresh = Fresh {
                block: dst,
                filled: &filled,
            };
            head(h, &old[h * hs..(h + 1) * hs], fresh)
        },
    );
    // Every head's block is written once [`Fresh::written`] counted it
    // (the blocks cover `new` exactly: `len` is `n_heads · hs`).
    assert_eq!(
        filled.load(std::sync::atomic::Ordering::Acquire),
        len,
        "a head left its new state unwritten"
    );
    // SAFETY: the `len` elements are initialised (each of the `n_heads`
    // disjoint blocks of `hs` was counted by `Fresh::written` after being
    // written in full, and the counts add up to `len`).
    unsafe { new.set_len(len) };
    (out, new)
}

/// One head's block of a new state for [`run_heads_from`], not yet written.
pub struct Fresh<'a> {
    block: &'a mut [std::mem::MaybeUninit<f32>],
    filled: &'a std::sync::atomic::AtomicUsize,
}

impl<'a> Fresh<'a> {
    /// Write the block row by row: `row(i, new_row)` must write every
    /// element of `new_row` (`width` of them; the block holds a whole
    /// number of rows); returns the block, now plain `f32`.
    pub(crate) fn write_rows(
        self,
        width: usize,
        mut row: impl FnMut(usize, &mut [std::mem::MaybeUninit<f32>]),
    ) -> &'a mut [f32] {
        assert!(width > 0 && self.block.len() % width == 0);
        for (i, r) in self.block.chunks_exact_mut(width).enumerate() {
            row(i, r);
        }
        self.written()
    }

    /// Copy `src` (the block's length) into the block; returns it as plain `f32`.
    pub fn copy_from(self, src: &[f32]) -> &'a mut [f32] {
        assert_eq!(src.len(), self.block.len());
        for (d, &s) in self.block.iter_mut().zip(src) {
            d.write(s);
        }
        self.written()
    }

    fn written(self) -> &'a mut [f32] {
        let n = self.block.len();
        self.filled
            .fetch_add(n, std::sync::atomic::Ordering::Release);
        // SAFETY: every caller wrote each element of the block first
        // (`copy_from` itself; `write_rows` through its contract, which only
        // this module's recurrences rely on, each writing a whole row);
        // `MaybeUninit<f32>` and `f32` have the same layout.
        unsafe { &mut *(self.block as *mut [std::mem::MaybeUninit<f32>] as *mut [f32]) }
    }
}

/// Call `f` with `t`'s elements as f32 on the host: borrowed in place when
/// `t` is a contiguous f32 tensor on the CPU (a sequence's recurrent state),
/// else copied ([`host_f32`]).
pub fn with_host_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    if t.dtype() == DType::F32 && t.is_contiguous() {
        let (guard, layout) = t.storage_and_layout();
        if let candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) = &*guard {
            let (o, n) = (layout.start_offset(), layout.shape().elem_count());
            if let Some(s) = v.get(o..o + n) {
                return Ok(f(s));
            }
        }
    }
    Ok(f(&host_f32(t)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::GgmlDType;

    /// Every weight type of the roster's real files (Ollama's Q4_K_M mixes
    /// Q4_K and Q6_K; HF repos ship Q8_0, Q5_K_M, Q6_K, F16, BF16) runs
    /// through `Proj` and gives the product with its dequantised weights.
    #[test]
    fn projections_run_for_the_real_files_weight_types() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 0.5, (48, 256), &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (3, 256), &dev).unwrap();
        for dt in [
            GgmlDType::F32,
            GgmlDType::F16,
            GgmlDType::BF16,
            GgmlDType::Q8_0,
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ] {
            let q = QTensor::quantize(&w, dt).unwrap();
            let wd = q.dequantize(&dev).unwrap();
            let want = x.matmul(&wd.t().unwrap()).unwrap();
            let got = Proj::new(Arc::new(q), &dev).unwrap().forward(&x).unwrap();
            assert_eq!(got.dims(), &[3, 48], "{dt:?}");
            let err = (got - &want).unwrap().sqr().unwrap().sum_all().unwrap();
            let norm = want.sqr().unwrap().sum_all().unwrap();
            let rel = (err.to_scalar::<f32>().unwrap() / norm.to_scalar::<f32>().unwrap()).sqrt();
            // Activations are quantised to 8 bits for the integer dot products.
            assert!(rel < 0.02, "{dt:?}: relative error {rel}");
        }
    }

    /// Full 4 x 16 tiles and every kind of edge (rows past the last four,
    /// columns past the last sixteen) against the textbook triple loop, in
    /// f64; `c` starts non-zero since the product is added to it.
    #[test]
    fn gemm_acc_is_the_textbook_product_for_tiles_and_edges() {
        for (m, k, n) in [(8, 5, 32), (9, 7, 37), (3, 4, 16), (4, 1, 17), (1, 64, 128)] {
            let val =
                |i: usize, salt: usize| ((i * 7919 + salt * 104729) % 1000) as f32 / 500.0 - 1.0;
            let a: Vec<f32> = (0..m * k).map(|i| val(i, 1)).collect();
            let b: Vec<f32> = (0..k * n).map(|i| val(i, 2)).collect();
            let mut c: Vec<f32> = (0..m * n).map(|i| val(i, 3)).collect();
            let c0 = c.clone();
            gemm_acc(&mut c, &a, &b, m, k, n);
            for i in 0..m {
                for j in 0..n {
                    let want = c0[i * n + j] as f64
                        + (0..k)
                            .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                            .sum::<f64>();
                    let got = c[i * n + j] as f64;
                    assert!(
                        (got - want).abs() < 1e-4,
                        "{m}x{k}x{n} [{i}][{j}]: {got} vs {want}"
                    );
                }
            }
        }
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.1 - 1.0).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.05).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot(&a, &b) as f64 - want).abs() < 1e-4);
    }

    #[test]
    fn partial_rope_rotates_only_the_first_dimensions() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (2, 3, 8), &dev).unwrap();
        let r = Rope::partial(4, 4, 10_000.0, 1.0, None);
        let tb = r.tables(5, 3, &dev).unwrap();
        let y = apply_rope(&x, &tb, RopeStyle::Neox).unwrap();
        let tail = |t: &Tensor| {
            t.narrow(2, 4, 4)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        assert_eq!(tail(&x), tail(&y));
        let full = Rope::new(4, 10_000.0, 1.0, None);
        let head = x.narrow(2, 0, 4).unwrap().contiguous().unwrap();
        let want = apply_rope(&head, &full.tables(5, 3, &dev).unwrap(), RopeStyle::Neox).unwrap();
        let got = y.narrow(2, 0, 4).unwrap();
        let d = (want - got)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(d < 1e-6);
    }
}
