//! CPU matrix products for the 32-value GGUF weight types candle runs with a
//! scalar loop or without row blocking: `Q4_0`, `Q4_1` (the default SmolLM2
//! model's type), `Q5_0`, `Q5_1` (most matrices of a Q4_K_M file whose rows are
//! not a multiple of 256 values, SmolLM2's among them) and `Q8_0`. candle 0.11
//! computes Q4_1/Q5_0/Q5_1 dot products with scalar loops, which made prefill
//! three times and decode 1.4 times slower than llama.cpp here. The 256-value
//! k-quants (Q4_K, Q5_K, Q6_K) stay on candle's own kernels, which already
//! repack them for AVX2, AVX-VNNI and AVX-512 VNNI (chosen at run time).
//!
//! [`QuantMatrix`] holds a `[n, k]` weight as the file's bytes regrouped: each
//! block's integer payload (nibbles, fifth bits, bytes) in one array, and its
//! f16 scales `d` (and offsets `m`) in separate per-row arrays padded to a
//! multiple of [`GROUP`] blocks, so the scales of eight blocks are one vector
//! load and one F16C conversion. The matrix takes exactly the bytes of the
//! file (plus that padding): decode reads every weight once per step. A weight
//! is either `d·u + m` with `u` unsigned ([`WeightBlock::SIGNED`] false:
//! Q4_0/Q5_0 as `m = −8d`/`−16d`, Q4_1/Q5_1 with their own `m`) or `d·s` with
//! `s` a signed byte (Q8_0).
//!
//! [`QuantMatrix::matmul`] computes `y = x · Wᵀ` for `m` activation rows the
//! way llama.cpp does: each activation row is quantised once to 8-bit blocks
//! ([`Acts`]: `x ≈ d₈·q₈`, with `s = d₈·Σq₈` kept), and a block's contribution
//! is `d·d₈·Σ u·q₈ + m·s`. The integer sums use AVX-VNNI or AVX2 when the CPU
//! has them (checked at run time) and a portable loop otherwise; all give the
//! same integer sums, so the paths differ only by float summation order. The
//! SIMD paths multiply the scales of eight blocks at once (`d·d₈` for eight
//! blocks in one product, the `m·s` terms of eight blocks in one fused
//! multiply-add), leaving per block and row only the integer product, its
//! conversion and one fused multiply-add with a broadcast scale.
//!
//! Work is split over weight rows across candle's CPU worker pool. Each weight
//! block is unpacked once and multiplied with up to [`ROW_TILE`] activation
//! rows, so a batch of decode rows (several agents' next tokens) reads the
//! weights once: that is what makes batched decoding pay on a CPU. A row's
//! result does not depend on the tile it was computed in (the same operations
//! in the same order for every `(weight row, activation row)` pair), so a
//! sequence's logits do not depend on what it is batched with.
//! [`matmul_many`] multiplies one input with several matrices (a layer's
//! q/k/v, or gate/up) after quantising it once, in one pass of the pool.

use anyhow::{bail, Result};
use candle_core::quantized::GgmlDType;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::Range;

/// Values per quantisation block (GGUF's QK4_0 … QK8_0 and QK8_1).
pub const BLOCK: usize = 32;
/// Blocks whose scales are read, converted and multiplied as one vector.
pub const GROUP: usize = 8;
/// Activation rows multiplied with one unpacked weight block.
pub const ROW_TILE: usize = 4;
/// Activation rows per work item (their 8-bit blocks stay in L2).
const ROW_BLOCK: usize = 64;
/// Weight rows per work item (their blocks stay in L1).
const WEIGHT_CHUNK: usize = 16;
/// Activation rows from which quantising them is split over the worker pool.
const PARALLEL_QUANTISE_ROWS: usize = 16;

/// A `[n, k]` weight matrix this module multiplies, whatever its block type.
pub trait CpuMatmul: Debug + Send + Sync {
    /// Output features (rows of the weight).
    fn n(&self) -> usize;
    /// Input features (columns of the weight).
    fn k(&self) -> usize;
    /// The weight as f32, row major (for tests and reference checks).
    fn dequantize(&self) -> Vec<f32>;
    /// `y[r·n + j]` for activation rows `rows` of `acts` and weight rows `js`.
    ///
    /// # Safety
    /// `acts` must have rows of `k` values, `y` must point to `m·n` writable
    /// floats (`m` the rows of `acts`), and no other thread may write the same
    /// `(r, j)` while this runs.
    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32);
}

/// `y = x · Wᵀ` for `x` of `m = x.len() / k` rows; `y` row major (`[m, n]`).
pub fn matmul(w: &dyn CpuMatmul, x: &[f32]) -> Result<Vec<f32>> {
    matmul_many(&[w], x).map(|mut ys| ys.remove(0))
}

/// The products of one input with several weights of the same `k` (a
/// layer's q/k/v, or gate/up): the input is quantised once and every
/// matrix's work goes to the worker pool in one pass.
pub fn matmul_many(ws: &[&dyn CpuMatmul], x: &[f32]) -> Result<Vec<Vec<f32>>> {
    let Some(first) = ws.first() else {
        return Ok(Vec::new());
    };
    let k = first.k();
    if let Some(w) = ws.iter().find(|w| w.k() != k) {
        bail!(
            "weights of {} and {k} columns multiplied with one input",
            w.k()
        );
    }
    if k == 0 || k % BLOCK != 0 || x.len() % k != 0 {
        bail!(
            "activations of {} values are not rows of {k} for a [{}, {k}] weight",
            x.len(),
            first.n()
        );
    }
    let m = x.len() / k;
    let acts = Acts::quantize(x, k);
    let mut ys: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; m * w.n()]).collect();
    let ptrs: Vec<SendPtr<f32>> = ys.iter_mut().map(|y| SendPtr(y.as_mut_ptr())).collect();
    // Work items are (matrix, block of activation rows, chunk of weight
    // rows): a block of activations stays in L2 and a chunk of weights in L1
    // while every pair is multiplied. Run on candle's own worker pool, so
    // its threads are not left spinning while another pool works.
    let row_blocks = m.div_ceil(ROW_BLOCK);
    let chunks: Vec<usize> = ws.iter().map(|w| w.n().div_ceil(WEIGHT_CHUNK)).collect();
    let mut starts = Vec::with_capacity(ws.len() + 1);
    starts.push(0usize);
    for c in &chunks {
        starts.push(starts[starts.len() - 1] + row_blocks * c);
    }
    let total = starts[ws.len()];
    candle_core::utils::barrier_pool().execute_chunked(total, |items| {
        for item in items {
            let wi = starts.partition_point(|&s| s <= item) - 1;
            let local = item - starts[wi];
            let (rb, wc) = (local / chunks[wi], local % chunks[wi]);
            let w = ws[wi];
            let rows = rb * ROW_BLOCK..m.min((rb + 1) * ROW_BLOCK);
            let js = wc * WEIGHT_CHUNK..w.n().min((wc + 1) * WEIGHT_CHUNK);
            // SAFETY: `acts` has rows of k values; `ys[wi]` holds m·n floats
            // and outlives the pass; item (wi, rb, wc) is the only writer of
            // its rows and weight rows.
            unsafe { w.run_chunk(&acts, rows, js, ptrs[wi].get()) };
        }
    });
    Ok(ys)
}

/// This module's matrix for a GGUF tensor of `dtype`, or `None` for a type it
/// leaves to candle.
pub fn cpu_matrix(
    dtype: GgmlDType,
    bytes: &[u8],
    n: usize,
    k: usize,
) -> Option<Result<Box<dyn CpuMatmul>>> {
    fn boxed<B: WeightBlock>(bytes: &[u8], n: usize, k: usize) -> Result<Box<dyn CpuMatmul>> {
        Ok(Box::new(QuantMatrix::<B>::from_gguf_bytes(bytes, n, k)?))
    }
    Some(match dtype {
        GgmlDType::Q4_0 => boxed::<BlockQ40>(bytes, n, k),
        GgmlDType::Q4_1 => boxed::<BlockQ41>(bytes, n, k),
        GgmlDType::Q5_0 => boxed::<BlockQ50>(bytes, n, k),
        GgmlDType::Q5_1 => boxed::<BlockQ51>(bytes, n, k),
        GgmlDType::Q8_0 => boxed::<BlockQ80>(bytes, n, k),
        _ => return None,
    })
}

/// One GGUF 32-value block type: how its bytes split into scales and an
/// integer payload, and how the payload becomes 32 integers.
pub trait WeightBlock: Copy + Debug + Send + Sync + 'static {
    /// GGUF's name of the type (for errors).
    const NAME: &'static str;
    /// Bytes of one GGUF block.
    const BYTES: usize;
    /// `d·s` with signed bytes `s` (true) or `d·u + m` with unsigned `u`.
    const SIGNED: bool;
    /// Each block stores its own offset `m` (Q4_1, Q5_1); otherwise
    /// `m = OFFSET·d` (Q4_0: −8, Q5_0: −16, Q8_0: 0).
    const OWN_M: bool;
    const OFFSET: f32;
    /// The integer payload of one block as the file stores it.
    type Ints: Payload;
    /// `(d, m, payload)` of one GGUF block of [`Self::BYTES`] bytes (`d` and
    /// `m` as f16 bits; `m` 0 unless [`Self::OWN_M`]).
    fn parse(c: &[u8]) -> (u16, u16, Self::Ints);
}

/// A block's integer payload: 16 bytes of nibbles (Q4_0, Q4_1), nibbles and
/// fifth bits (Q5_0, Q5_1) or 32 signed bytes (Q8_0).
pub trait Payload: Copy + Debug + Send + Sync + 'static {
    /// The 32 integer values (`u` or `s`).
    fn ints(&self) -> [i32; BLOCK];
    /// The 32 integer values as bytes in one AVX register (value `j` in byte `j`).
    ///
    /// # Safety
    /// The CPU must have AVX2 (the caller is compiled with it enabled).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i;
}

impl Payload for [u8; 16] {
    fn ints(&self) -> [i32; BLOCK] {
        nibbles(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        simd::nibbles(self)
    }
}

impl Payload for Q5Ints {
    fn ints(&self) -> [i32; BLOCK] {
        nibbles5(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        simd::nibbles5(&self.qs, u32::from_le_bytes(self.qh))
    }
}

impl Payload for Q8Ints {
    fn ints(&self) -> [i32; BLOCK] {
        self.0.map(i32::from)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_load_si256(self.0.as_ptr() as *const __m256i)
    }
}

fn f16_bits(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}

fn u16_at(c: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([c[i], c[i + 1]])
}

/// 32 unsigned 4-bit values: low nibbles are values 0..16, high 16..32 (GGUF).
fn nibbles(qs: &[u8; 16]) -> [i32; BLOCK] {
    let mut v = [0i32; BLOCK];
    for (i, &q) in qs.iter().enumerate() {
        v[i] = i32::from(q & 0x0f);
        v[i + 16] = i32::from(q >> 4);
    }
    v
}

/// Nibbles with a fifth bit: bit `j` of `qh` is bit 4 of value `j` (GGUF Q5).
fn nibbles5(q: &Q5Ints) -> [i32; BLOCK] {
    let qh = u32::from_le_bytes(q.qh);
    let mut v = nibbles(&q.qs);
    for (j, x) in v.iter_mut().enumerate() {
        *x |= (((qh >> j) & 1) as i32) << 4;
    }
    v
}

fn qs16(c: &[u8]) -> [u8; 16] {
    let mut qs = [0u8; 16];
    qs.copy_from_slice(&c[..16]);
    qs
}

/// The payload of a Q5 block: 32 fifth bits and 16 bytes of nibbles.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Q5Ints {
    qh: [u8; 4],
    qs: [u8; 16],
}

fn q5_ints(c: &[u8]) -> Q5Ints {
    Q5Ints {
        qh: [c[0], c[1], c[2], c[3]],
        qs: qs16(&c[4..]),
    }
}

/// GGUF `block_q4_0`: f16 d, 16 bytes of nibbles; `x = d·(u − 8)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ40;

impl WeightBlock for BlockQ40 {
    const NAME: &'static str = "Q4_0";
    const BYTES: usize = 18;
    const SIGNED: bool = false;
    const OWN_M: bool = false;
    const OFFSET: f32 = -8.0;
    type Ints = [u8; 16];
    fn parse(c: &[u8]) -> (u16, u16, [u8; 16]) {
        (u16_at(c, 0), 0, qs16(&c[2..]))
    }
}

/// GGUF `block_q4_1`: f16 d, f16 m, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ41;

impl WeightBlock for BlockQ41 {
    const NAME: &'static str = "Q4_1";
    const BYTES: usize = 20;
    const SIGNED: bool = false;
    const OWN_M: bool = true;
    const OFFSET: f32 = 0.0;
    type Ints = [u8; 16];
    fn parse(c: &[u8]) -> (u16, u16, [u8; 16]) {
        (u16_at(c, 0), u16_at(c, 2), qs16(&c[4..]))
    }
}

/// GGUF `block_q5_0`: f16 d, 32 high bits, 16 bytes of nibbles; `x = d·(u − 16)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ50;

impl WeightBlock for BlockQ50 {
    const NAME: &'static str = "Q5_0";
    const BYTES: usize = 22;
    const SIGNED: bool = false;
    const OWN_M: bool = false;
    const OFFSET: f32 = -16.0;
    type Ints = Q5Ints;
    fn parse(c: &[u8]) -> (u16, u16, Q5Ints) {
        (u16_at(c, 0), 0, q5_ints(&c[2..]))
    }
}

/// GGUF `block_q5_1`: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ51;

impl WeightBlock for BlockQ51 {
    const NAME: &'static str = "Q5_1";
    const BYTES: usize = 24;
    const SIGNED: bool = false;
    const OWN_M: bool = true;
    const OFFSET: f32 = 0.0;
    type Ints = Q5Ints;
    fn parse(c: &[u8]) -> (u16, u16, Q5Ints) {
        (u16_at(c, 0), u16_at(c, 2), q5_ints(&c[4..]))
    }
}

/// 32 signed bytes aligned to 32, so a vector load never spans two cache
/// lines (unaligned 32-byte loads of a weight streamed from memory halved
/// Q8_0's decode speed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(32))]
pub struct Q8Ints(pub [i8; 32]);

/// GGUF `block_q8_0`: f16 d, 32 signed bytes; `x = d·s`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ80;

impl WeightBlock for BlockQ80 {
    const NAME: &'static str = "Q8_0";
    const BYTES: usize = 34;
    const SIGNED: bool = true;
    const OWN_M: bool = false;
    const OFFSET: f32 = 0.0;
    type Ints = Q8Ints;
    fn parse(c: &[u8]) -> (u16, u16, Q8Ints) {
        let mut qs = [0i8; 32];
        for (q, &b) in qs.iter_mut().zip(&c[2..34]) {
            *q = b as i8;
        }
        (u16_at(c, 0), 0, Q8Ints(qs))
    }
}

/// Blocks of a row rounded up to whole groups (the stride of the scale arrays).
fn padded(kb: usize) -> usize {
    kb.div_ceil(GROUP) * GROUP
}

/// Activation rows quantised to 8 bits the way llama.cpp's
/// `quantize_row_q8_1` does (round to nearest, `d = max|x| / 127`), `d` and
/// `s = d·Σq` kept in f32 in per-row arrays padded with zeros to whole groups.
#[derive(Debug, Clone)]
pub struct Acts {
    /// Blocks per row, and the padded stride of `d` and `s`.
    kb: usize,
    kbp: usize,
    qs: Vec<Q8Ints>,
    d: Vec<f32>,
    s: Vec<f32>,
}

impl Acts {
    /// Quantise `x` (rows of `k` values, `k` a multiple of 32); rows are split
    /// over the worker pool when there are many.
    pub fn quantize(x: &[f32], k: usize) -> Self {
        let kb = k / BLOCK;
        let kbp = padded(kb);
        let m = x.len().checked_div(k).unwrap_or(0);
        let mut acts = Acts {
            kb,
            kbp,
            qs: vec![Q8Ints([0i8; BLOCK]); m * kb],
            d: vec![0f32; m * kbp],
            s: vec![0f32; m * kbp],
        };
        let (qp, dp, sp) = (
            SendPtr(acts.qs.as_mut_ptr()),
            SendPtr(acts.d.as_mut_ptr()),
            SendPtr(acts.s.as_mut_ptr()),
        );
        let row = |r: usize| {
            for b in 0..kb {
                let (q, d, s) = quantize_block(&x[(r * kb + b) * BLOCK..(r * kb + b + 1) * BLOCK]);
                // SAFETY: row r's entries are written by this call alone, and
                // every index is inside the vectors sized above.
                unsafe {
                    *qp.get().add(r * kb + b) = Q8Ints(q);
                    *dp.get().add(r * kbp + b) = d;
                    *sp.get().add(r * kbp + b) = s;
                }
            }
        };
        if m >= PARALLEL_QUANTISE_ROWS {
            candle_core::utils::barrier_pool().execute_chunked(m, |rows| rows.for_each(row));
        } else {
            (0..m).for_each(row);
        }
        acts
    }

    fn rows(&self) -> usize {
        self.qs.len().checked_div(self.kb).unwrap_or(0)
    }
}

/// One block of 32 activations: 8-bit values, `d`, and `s = d·Σq`.
fn quantize_block(x: &[f32]) -> ([i8; BLOCK], f32, f32) {
    // max |x| in eight lanes (vectorised; a plain fold stays scalar).
    let mut lanes = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v.abs());
        }
    }
    let amax = lanes.iter().fold(0f32, |a, &v| a.max(v));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; BLOCK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let r = (v * id).round() as i32;
        *q = r as i8;
        sum += r;
    }
    (qs, d, d * sum as f32)
}

/// A `[n, k]` weight of block type `B` ready for [`CpuMatmul::matmul`].
#[derive(Clone)]
pub struct QuantMatrix<B: WeightBlock> {
    n: usize,
    k: usize,
    /// Blocks per row, and the padded stride of `d` and `m`.
    kb: usize,
    kbp: usize,
    /// `n·kb` payloads, row major.
    ints: Vec<B::Ints>,
    /// `n·kbp` f16 scales (zero in the padding).
    d: Vec<u16>,
    /// `n·kbp` f16 offsets when `B::OWN_M`, else empty.
    m: Vec<u16>,
    /// The dot-product implementation, chosen for this CPU at load.
    simd: Simd,
    _block: PhantomData<B>,
}

impl<B: WeightBlock> Debug for QuantMatrix<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "QuantMatrix<{}>[{}, {}] ({:?})",
            B::NAME,
            self.n,
            self.k,
            self.simd
        )
    }
}

/// The default model's type, by its old name.
pub type Q41Matrix = QuantMatrix<BlockQ41>;

impl<B: WeightBlock> QuantMatrix<B> {
    /// Build from GGUF block bytes of a `[n, k]` tensor (row major).
    pub fn from_gguf_bytes(bytes: &[u8], n: usize, k: usize) -> Result<Self> {
        if k == 0 || k % BLOCK != 0 {
            bail!(
                "{} rows of {k} values are not whole blocks of {BLOCK}",
                B::NAME
            );
        }
        let kb = k / BLOCK;
        let kbp = padded(kb);
        if bytes.len() != n * kb * B::BYTES {
            bail!(
                "{} tensor [{n}, {k}] needs {} bytes, got {}",
                B::NAME,
                n * kb * B::BYTES,
                bytes.len()
            );
        }
        let mut ints = Vec::with_capacity(n * kb);
        let mut d = vec![0u16; n * kbp];
        let mut m = if B::OWN_M {
            vec![0u16; n * kbp]
        } else {
            Vec::new()
        };
        for (i, c) in bytes.chunks_exact(B::BYTES).enumerate() {
            let (db, mb, q) = B::parse(c);
            let at = (i / kb) * kbp + i % kb;
            d[at] = db;
            if B::OWN_M {
                m[at] = mb;
            }
            ints.push(q);
        }
        Ok(Self {
            n,
            k,
            kb,
            kbp,
            ints,
            d,
            m,
            simd: Simd::detect(),
            _block: PhantomData,
        })
    }

    #[cfg(test)]
    fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd;
        self
    }

    /// `m` of block `b` of row `j`, given its `d`.
    fn m_at(&self, j: usize, b: usize, d: f32) -> f32 {
        if B::OWN_M {
            f16_bits(self.m[j * self.kbp + b])
        } else {
            B::OFFSET * d
        }
    }

    /// `y = x · Wᵀ` (see [`matmul`]).
    pub fn matmul(&self, x: &[f32]) -> Result<Vec<f32>> {
        matmul(self, x)
    }

    /// Dot products of weight rows `js` with activation rows `rows` of `acts`.
    fn dot_tiles<const W: usize, const N: usize>(
        &self,
        js: [usize; W],
        acts: &Acts,
        rows: [usize; N],
    ) -> [[f32; N]; W] {
        match self.simd {
            Simd::Portable => std::array::from_fn(|w| {
                std::array::from_fn(|i| self.dot_portable(js[w], acts, rows[i]))
            }),
            // SAFETY: `detect` checked that the CPU has AVX2, FMA and F16C;
            // `run_chunk`'s caller guarantees the rows exist.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { simd::dot_tile(self, js, acts, rows) },
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::AvxVnni => unsafe { simd::dot_tile_vnni(self, js, acts, rows) },
        }
    }

    fn dot_portable(&self, j: usize, a: &Acts, r: usize) -> f32 {
        let mut acc = 0f32;
        for b in 0..self.kb {
            let q = &self.ints[j * self.kb + b];
            let x = &a.qs[r * a.kb + b].0;
            let isum: i32 = q
                .ints()
                .iter()
                .zip(x)
                .map(|(&q, &x)| q * i32::from(x))
                .sum();
            let d = f16_bits(self.d[j * self.kbp + b]);
            acc += d * a.d[r * a.kbp + b] * isum as f32 + self.m_at(j, b, d) * a.s[r * a.kbp + b];
        }
        acc
    }
}

impl<B: WeightBlock> CpuMatmul for QuantMatrix<B> {
    fn n(&self) -> usize {
        self.n
    }

    fn k(&self) -> usize {
        self.k
    }

    fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n * self.k);
        for j in 0..self.n {
            for b in 0..self.kb {
                let d = f16_bits(self.d[j * self.kbp + b]);
                let m = self.m_at(j, b, d);
                out.extend(
                    self.ints[j * self.kb + b]
                        .ints()
                        .iter()
                        .map(|&q| d * q as f32 + m),
                );
            }
        }
        out
    }

    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32) {
        let n = self.n;
        debug_assert!(acts.kb == self.kb && rows.end <= acts.rows());
        // SAFETY: the caller owns y[r, j] for these rows and weight rows.
        let put = |r: usize, j: usize, v: f32| unsafe { *y.add(r * n + j) = v };
        // Two weight rows at a time (each activation block loaded once for
        // both), each against up to ROW_TILE activation rows.
        let mut j = js.start;
        while j < js.end {
            let two = j + 1 < js.end;
            let mut r = rows.start;
            while r + ROW_TILE <= rows.end {
                let a: [usize; ROW_TILE] = std::array::from_fn(|i| r + i);
                if two {
                    let d = self.dot_tiles::<2, ROW_TILE>([j, j + 1], acts, a);
                    for (w, dw) in d.iter().enumerate() {
                        dw.iter()
                            .enumerate()
                            .for_each(|(i, &v)| put(r + i, j + w, v));
                    }
                } else {
                    let d = self.dot_tiles::<1, ROW_TILE>([j], acts, a);
                    d[0].iter().enumerate().for_each(|(i, &v)| put(r + i, j, v));
                }
                r += ROW_TILE;
            }
            while r + 2 <= rows.end {
                if two {
                    let d = self.dot_tiles::<2, 2>([j, j + 1], acts, [r, r + 1]);
                    for (w, dw) in d.iter().enumerate() {
                        put(r, j + w, dw[0]);
                        put(r + 1, j + w, dw[1]);
                    }
                } else {
                    let d = self.dot_tiles::<1, 2>([j], acts, [r, r + 1]);
                    put(r, j, d[0][0]);
                    put(r + 1, j, d[0][1]);
                }
                r += 2;
            }
            if r < rows.end {
                if two {
                    let d = self.dot_tiles::<2, 1>([j, j + 1], acts, [r]);
                    put(r, j, d[0][0]);
                    put(r, j + 1, d[1][0]);
                } else {
                    put(r, j, self.dot_tiles::<1, 1>([j], acts, [r])[0][0]);
                }
            }
            j += if two { 2 } else { 1 };
        }
    }
}

/// A raw output pointer shared by the pool's workers (each writes its own rows).
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: workers write disjoint ranges; see `matmul_many` and `Acts::quantize`.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// Which dot-product implementation the CPU supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
}

impl Simd {
    /// Every implementation this CPU can run, slowest first.
    pub fn available() -> Vec<Self> {
        #[allow(unused_mut)]
        let mut paths = vec![Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                paths.push(Simd::Avx2);
                if is_x86_feature_detected!("avxvnni") {
                    paths.push(Simd::AvxVnni);
                }
            }
        }
        paths
    }

    /// The fastest implementation this CPU can run.
    pub fn detect() -> Self {
        Self::available().pop().unwrap_or(Simd::Portable)
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{Acts, Payload, Q8Ints, QuantMatrix, WeightBlock, GROUP};

    /// How far ahead of the current block the weights are prefetched.
    const PREFETCH: usize = 512;
    use std::arch::x86_64::*;

    /// Nibbles as 32 bytes: value `j` in byte `j` (low nibbles first).
    #[inline(always)]
    pub(super) unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
        let low_mask = _mm_set1_epi8(0x0f);
        let packed = _mm_loadu_si128(qs.as_ptr() as *const __m128i);
        let lo = _mm_and_si128(packed, low_mask);
        let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);
        _mm256_set_m128i(hi, lo)
    }

    /// Nibbles with bit `j` of `qh` as bit 4 of byte `j`.
    #[inline(always)]
    pub(super) unsafe fn nibbles5(qs: &[u8; 16], qh: u32) -> __m256i {
        // Byte j takes byte j/8 of qh (every 128-bit lane holds all four),
        // then keeps bit j%8: equal to its bit selector where the bit is set.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(qh as i32),
            _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            ),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
        _mm256_or_si256(nibbles(qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Eight f16 scales (bits) at `p` as f32.
    #[inline(always)]
    unsafe fn scales(p: *const u16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    /// One body for both integer paths: `$isum(u, q8)` gives eight i32
    /// lanes whose sum is `Σ u·q8` over the 32 values of a block for
    /// unsigned weight bytes `u`; signed weights go through `|w|` and the
    /// activation with `w`'s sign. Per group of eight blocks, the products
    /// `d·d₈` of all eight are one vector multiply (kept on the stack and
    /// broadcast per block) and their `m·s` terms one fused multiply-add into
    /// the accumulator; per block and pair only the integer product, its
    /// conversion and one fused multiply-add remain. Each (weight row,
    /// activation row) pair runs the same operations whatever `W` and `N`.
    macro_rules! dot_tile_fn {
        ($(#[$doc:meta])* $name:ident, $features:literal, $isum:expr) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name<B: WeightBlock, const W: usize, const N: usize>(
                mat: &QuantMatrix<B>,
                js: [usize; W],
                acts: &Acts,
                rows: [usize; N],
            ) -> [[f32; N]; W] {
                let (kb, kbp) = (mat.kb, mat.kbp);
                let mut acc = [[_mm256_setzero_ps(); N]; W];
                let mut dd = [[[0f32; GROUP]; N]; W];
                let offset = _mm256_set1_ps(B::OFFSET);
                let with_m = B::OWN_M || B::OFFSET != 0.0;
                let ints: [*const B::Ints; W] =
                    std::array::from_fn(|w| mat.ints.as_ptr().add(js[w] * kb));
                let q8s: [*const Q8Ints; N] =
                    std::array::from_fn(|i| acts.qs.as_ptr().add(rows[i] * kb));
                for g in (0..kb).step_by(GROUP) {
                    let dw: [__m256; W] =
                        std::array::from_fn(|w| scales(mat.d.as_ptr().add(js[w] * kbp + g)));
                    for i in 0..N {
                        let da = _mm256_loadu_ps(acts.d.as_ptr().add(rows[i] * kbp + g));
                        for w in 0..W {
                            _mm256_storeu_ps(dd[w][i].as_mut_ptr(), _mm256_mul_ps(dw[w], da));
                        }
                        if with_m {
                            let sa = _mm256_loadu_ps(acts.s.as_ptr().add(rows[i] * kbp + g));
                            for w in 0..W {
                                let mw = if B::OWN_M {
                                    scales(mat.m.as_ptr().add(js[w] * kbp + g))
                                } else {
                                    _mm256_mul_ps(dw[w], offset)
                                };
                                acc[w][i] = _mm256_fmadd_ps(mw, sa, acc[w][i]);
                            }
                        }
                    }
                    for b in g..kb.min(g + GROUP) {
                        // Each weight block is unpacked once for the N rows,
                        // each activation block loaded once for the W rows.
                        for p in ints {
                            // Weights stream from memory once per step in
                            // decode: ask for them PREFETCH bytes ahead.
                            let ahead = (p.add(b) as *const i8).wrapping_add(PREFETCH);
                            _mm_prefetch::<_MM_HINT_T0>(ahead);
                        }
                        let q: [__m256i; W] = std::array::from_fn(|w| (*ints[w].add(b)).load());
                        let u: [__m256i; W] = std::array::from_fn(|w| {
                            if B::SIGNED { _mm256_sign_epi8(q[w], q[w]) } else { q[w] }
                        });
                        for i in 0..N {
                            let q8 = _mm256_load_si256(q8s[i].add(b) as *const __m256i);
                            for w in 0..W {
                                let q8w = if B::SIGNED { _mm256_sign_epi8(q8, q[w]) } else { q8 };
                                let p32: __m256i = $isum(u[w], q8w);
                                let scale = _mm256_broadcast_ss(&dd[w][i][b - g]);
                                acc[w][i] =
                                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, acc[w][i]);
                            }
                        }
                    }
                }
                let mut out = [[0f32; N]; W];
                for w in 0..W {
                    for i in 0..N {
                        out[w][i] = hsum(acc[w][i]);
                    }
                }
                out
            }
        };
    }

    dot_tile_fn!(
        /// See [`super::QuantMatrix::dot_tiles`]. Caller guarantees AVX2,
        /// FMA and F16C, and that the rows exist.
        dot_tile,
        "avx2,fma,f16c",
        |u, q8| _mm256_madd_epi16(_mm256_maddubs_epi16(u, q8), _mm256_set1_epi16(1))
    );

    dot_tile_fn!(
        /// [`dot_tile`] with one AVX-VNNI instruction per block and row.
        /// Caller guarantees AVX2, FMA, F16C and AVX-VNNI.
        dot_tile_vnni,
        "avx2,fma,f16c,avxvnni",
        |u, q8| _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, q8)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Random GGUF bytes of `n·k/32` blocks of `B`: f16 scales in a sane
    /// range where the layout has them, every other byte random.
    fn random_blocks<B: WeightBlock>(rng: &mut impl Rng, n: usize, k: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..n * k / BLOCK {
            let mut blk: Vec<u8> = (0..B::BYTES).map(|_| rng.gen()).collect();
            let d = half::f16::from_f32(rng.gen_range(0.001..0.05)).to_le_bytes();
            blk[..2].copy_from_slice(&d);
            if B::NAME == "Q4_1" || B::NAME == "Q5_1" {
                let m = half::f16::from_f32(rng.gen_range(-0.2..0.0)).to_le_bytes();
                blk[2..4].copy_from_slice(&m);
            }
            bytes.extend_from_slice(&blk);
        }
        bytes
    }

    /// GGUF's own dequantisation of one block, written from the format's
    /// definition (not through [`WeightBlock::ints`]).
    fn gguf_dequant(name: &str, c: &[u8]) -> [f32; BLOCK] {
        let f = |i: usize| half::f16::from_le_bytes([c[i], c[i + 1]]).to_f32();
        let mut out = [0f32; BLOCK];
        let qs = match name {
            "Q4_0" => &c[2..],
            "Q4_1" => &c[4..],
            "Q5_0" => &c[6..],
            "Q5_1" => &c[8..],
            _ => &c[2..],
        };
        for j in 0..16 {
            let (lo, hi) = (f32::from(qs[j] & 15), f32::from(qs[j] >> 4));
            let qh = |o: usize| u32::from_le_bytes([c[o], c[o + 1], c[o + 2], c[o + 3]]);
            let h = |o: usize, bit: usize| ((qh(o) >> bit) & 1) as f32 * 16.0;
            let (a, b) = match name {
                "Q4_0" => (f(0) * (lo - 8.0), f(0) * (hi - 8.0)),
                "Q4_1" => (f(0) * lo + f(2), f(0) * hi + f(2)),
                "Q5_0" => (
                    f(0) * (lo + h(2, j) - 16.0),
                    f(0) * (hi + h(2, j + 16) - 16.0),
                ),
                "Q5_1" => (
                    f(0) * (lo + h(4, j)) + f(2),
                    f(0) * (hi + h(4, j + 16)) + f(2),
                ),
                _ => (
                    f(0) * f32::from(c[2 + j] as i8),
                    f(0) * f32::from(c[2 + j + 16] as i8),
                ),
            };
            out[j] = a;
            out[j + 16] = b;
        }
        out
    }

    fn reference(wf: &[f32], x: &[f32], n: usize, k: usize) -> Vec<f32> {
        let m = x.len() / k;
        let mut y = vec![0f32; m * n];
        for r in 0..m {
            for j in 0..n {
                y[r * n + j] = (0..k)
                    .map(|i| f64::from(x[r * k + i]) * f64::from(wf[j * k + i]))
                    .sum::<f64>() as f32;
            }
        }
        y
    }

    /// Every path this CPU has against the dequantise-then-f32 product of
    /// GGUF's own dequantisation, on random blocks and activations.
    fn check_type<B: WeightBlock>(seed: u64) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for (n, k) in [(37, 96), (9, 544)] {
            check_shape::<B>(&mut rng, n, k);
        }
    }

    /// [`check_type`] for one shape.
    fn check_shape<B: WeightBlock>(rng: &mut impl Rng, n: usize, k: usize) {
        let bytes = random_blocks::<B>(rng, n, k);
        let w = QuantMatrix::<B>::from_gguf_bytes(&bytes, n, k).unwrap();
        let wf: Vec<f32> = bytes
            .chunks_exact(B::BYTES)
            .flat_map(|c| gguf_dequant(B::NAME, c))
            .collect();
        assert_eq!(w.dequantize(), wf, "{}: dequantisation", B::NAME);
        let wmax = wf.iter().fold(0f32, |a, v| a.max(v.abs()));
        for m in [1usize, 3, 4, 5, 9] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let want = reference(&wf, &x, n, k);
            for simd in Simd::available() {
                let got = w.clone().with_simd(simd).matmul(&x).unwrap();
                assert_eq!(got.len(), m * n);
                for (g, e) in got.iter().zip(&want) {
                    // 8-bit activations: error about Σ|w|·|x|/254 ≤ k·wmax/254.
                    let tol = 0.01 * k as f32 * wmax;
                    assert!(
                        (g - e).abs() < tol,
                        "{} {simd:?} m={m}: {g} vs {e}",
                        B::NAME
                    );
                }
            }
        }
    }

    #[test]
    fn every_type_and_path_matches_the_dequantized_product() {
        check_type::<BlockQ40>(1);
        check_type::<BlockQ41>(7);
        check_type::<BlockQ50>(2);
        check_type::<BlockQ51>(3);
        check_type::<BlockQ80>(4);
    }

    /// The SIMD paths give the portable path's integer sums: results agree
    /// to float rounding, and a row's result is the same bits alone, in a
    /// batch, and in every tile shape (rows of 9 blocks: a whole group of
    /// scales and a partial one).
    fn check_paths_agree<B: WeightBlock>(seed: u64) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (n, k) = (20, 288);
        let w =
            QuantMatrix::<B>::from_gguf_bytes(&random_blocks::<B>(&mut rng, n, k), n, k).unwrap();
        let x: Vec<f32> = (0..6 * k).map(|_| rng.gen_range(-3.0..3.0)).collect();
        let acts = Acts::quantize(&x, k);
        let batch = w.matmul(&x).unwrap();
        for r in 0..6 {
            let alone = w.matmul(&x[r * k..(r + 1) * k]).unwrap();
            assert_eq!(alone, batch[r * n..(r + 1) * n].to_vec(), "{}", B::NAME);
        }
        let paths: Vec<QuantMatrix<B>> = Simd::available()
            .into_iter()
            .map(|p| w.clone().with_simd(p))
            .collect();
        let rows = [0, 1, 2, 3];
        for j in 0..n {
            let want = paths[0].dot_tiles::<1, 4>([j], &acts, rows)[0];
            for p in &paths {
                let got = p.dot_tiles::<1, 4>([j], &acts, rows)[0];
                for (g, e) in got.iter().zip(&want) {
                    assert!(
                        (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "{} {:?}: {g} vs {e}",
                        B::NAME,
                        p.simd
                    );
                }
                for (i, &g) in got.iter().enumerate() {
                    let one = p.dot_tiles::<1, 1>([j], &acts, [i])[0][0];
                    assert_eq!(one.to_bits(), g.to_bits(), "{} {:?}", B::NAME, p.simd);
                    let two = p.dot_tiles::<1, 2>([j], &acts, [i, 5])[0][0];
                    assert_eq!(two.to_bits(), g.to_bits(), "{} {:?}", B::NAME, p.simd);
                }
                if j + 1 < n {
                    // Two weight rows at once: each row's sums as when alone.
                    let two = p.dot_tiles::<2, 4>([j, j + 1], &acts, rows);
                    assert_eq!(two[0], got, "{} {:?}", B::NAME, p.simd);
                    assert_eq!(
                        two[1],
                        p.dot_tiles::<1, 4>([j + 1], &acts, rows)[0],
                        "{} {:?}",
                        B::NAME,
                        p.simd
                    );
                }
            }
            if paths.len() == 3 {
                // Same integer sums, same float operations: bit-identical.
                assert_eq!(
                    paths[1].dot_tiles::<1, 4>([j], &acts, rows),
                    paths[2].dot_tiles::<1, 4>([j], &acts, rows)
                );
            }
        }
    }

    #[test]
    fn simd_and_portable_paths_agree_for_every_type() {
        check_paths_agree::<BlockQ40>(11);
        check_paths_agree::<BlockQ41>(12);
        check_paths_agree::<BlockQ50>(13);
        check_paths_agree::<BlockQ51>(14);
        check_paths_agree::<BlockQ80>(15);
    }

    #[test]
    fn one_input_times_several_matrices_equals_each_product() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
        let k = 64;
        let a = QuantMatrix::<BlockQ50>::from_gguf_bytes(
            &random_blocks::<BlockQ50>(&mut rng, 40, k),
            40,
            k,
        )
        .unwrap();
        let b = QuantMatrix::<BlockQ80>::from_gguf_bytes(
            &random_blocks::<BlockQ80>(&mut rng, 7, k),
            7,
            k,
        )
        .unwrap();
        let c =
            Q41Matrix::from_gguf_bytes(&random_blocks::<BlockQ41>(&mut rng, 16, k), 16, k).unwrap();
        for m in [1usize, 5, 70] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let ys = matmul_many(&[&a, &b, &c], &x).unwrap();
            assert_eq!(ys[0], a.matmul(&x).unwrap());
            assert_eq!(ys[1], b.matmul(&x).unwrap());
            assert_eq!(ys[2], c.matmul(&x).unwrap());
        }
        let short =
            Q41Matrix::from_gguf_bytes(&random_blocks::<BlockQ41>(&mut rng, 2, 32), 2, 32).unwrap();
        assert!(matmul_many(&[&a, &short], &[0f32; 64]).is_err());
    }

    #[test]
    fn rows_quantised_on_the_pool_equal_rows_quantised_alone() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        let k = 96;
        let m = 2 * PARALLEL_QUANTISE_ROWS + 3;
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let all = Acts::quantize(&x, k);
        for r in [0, PARALLEL_QUANTISE_ROWS, m - 1] {
            let one = Acts::quantize(&x[r * k..(r + 1) * k], k);
            assert_eq!(one.qs[..], all.qs[r * all.kb..(r + 1) * all.kb]);
            assert_eq!(one.d[..], all.d[r * all.kbp..(r + 1) * all.kbp]);
            assert_eq!(one.s[..], all.s[r * all.kbp..(r + 1) * all.kbp]);
        }
        let w =
            Q41Matrix::from_gguf_bytes(&random_blocks::<BlockQ41>(&mut rng, 5, k), 5, k).unwrap();
        let y = w.matmul(&x).unwrap();
        assert_eq!(y[(m - 1) * 5..], w.matmul(&x[(m - 1) * k..]).unwrap()[..]);
    }

    #[test]
    fn extreme_q8_0_weights_do_not_overflow() {
        // −128 and 127 weights against ±127 activations: the sign trick must
        // neither saturate nor flip (|−128| is 128 as an unsigned byte).
        let mut bytes = half::f16::from_f32(1.0).to_le_bytes().to_vec();
        bytes.extend((0..32).map(|i| if i % 2 == 0 { 0x80u8 } else { 0x7f }));
        let w = QuantMatrix::<BlockQ80>::from_gguf_bytes(&bytes, 1, 32).unwrap();
        let x: Vec<f32> = (0..32)
            .map(|i| if i % 2 == 0 { -1.0 } else { 1.0 })
            .collect();
        for simd in Simd::available() {
            let y = w.clone().with_simd(simd).matmul(&x).unwrap();
            // 16·128 + 16·127 = 4080 (activations quantise to exactly ±127/127).
            assert!((y[0] - 4080.0).abs() < 1e-2, "{simd:?}: {}", y[0]);
        }
    }

    #[test]
    fn types_candle_keeps_are_not_taken_and_bad_shapes_are_errors() {
        assert!(cpu_matrix(GgmlDType::Q4K, &[], 1, 256).is_none());
        assert!(cpu_matrix(GgmlDType::Q6K, &[], 1, 256).is_none());
        assert!(cpu_matrix(GgmlDType::Q5_0, &[0u8; 22], 1, 32)
            .unwrap()
            .is_ok());
        assert!(Q41Matrix::from_gguf_bytes(&[0u8; 20], 1, 30).is_err());
        assert!(Q41Matrix::from_gguf_bytes(&[0u8; 19], 1, 32).is_err());
        assert!(QuantMatrix::<BlockQ50>::from_gguf_bytes(&[0u8; 21], 1, 32).is_err());
        let w = Q41Matrix::from_gguf_bytes(&[0u8; 40], 2, 32).unwrap();
        assert!(w.matmul(&[0f32; 33]).is_err());
    }
}
