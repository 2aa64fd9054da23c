//! CPU matrix products for the 32-value GGUF weight types candle runs with a
//! scalar loop or without row blocking: `Q4_0`, `Q4_1` (the default SmolLM2
//! model's type), `Q5_0`, `Q5_1` (most matrices of a Q4_K_M file whose rows are
//! not a multiple of 256 values, SmolLM2's among them) and `Q8_0`. candle 0.11
//! computes Q4_1/Q5_0/Q5_1 dot products with scalar loops, which made prefill
//! three times and decode 1.4 times slower than llama.cpp here. The 256-value
//! k-quants (Q4_K, Q5_K, Q6_K) stay on candle's own kernels, which already
//! repack them for AVX2, AVX-VNNI and AVX-512 VNNI (chosen at run time).
//!
//! [`QuantMatrix`] holds a `[n, k]` weight in blocks of 32 (each block's f16
//! scales widened to f32 once at load). A weight is either `d·u + m` with `u`
//! unsigned ([`WeightBlock::SIGNED`] false: Q4_0/Q5_0 as `m = −8d`/`−16d`,
//! Q4_1/Q5_1 with their own `m`) or `d·s` with `s` a signed byte (Q8_0).
//! [`QuantMatrix::matmul`] computes `y = x · Wᵀ` for `m` activation rows the
//! way llama.cpp does: each activation row is quantised once to 8-bit blocks
//! (`Q8_1`: `x ≈ d₈·q₈`, with the block's `d₈·Σq₈` kept), and a block's
//! contribution is `d·d₈·Σ u·q₈ + m·d₈·Σq₈`. The integer sums use AVX-VNNI or
//! AVX2 when the CPU has them (checked at run time) and a portable loop
//! otherwise; all give the same integer sums, so the paths differ only by
//! float summation order.
//!
//! Work is split over weight rows across candle's CPU worker pool. Each weight
//! block is unpacked once and multiplied with up to [`ROW_TILE`] activation
//! rows, so a batch of decode rows (several agents' next tokens) reads the
//! weights once: that is what makes batched decoding pay on a CPU.
//! [`matmul_many`] multiplies one input with several matrices (a layer's
//! q/k/v, or gate/up) after quantising it once, in one pass of the pool.

use anyhow::{bail, Result};
use candle_core::quantized::GgmlDType;
use std::fmt::Debug;
use std::ops::Range;

/// Values per quantisation block (GGUF's QK4_0 … QK8_0 and QK8_1).
pub const BLOCK: usize = 32;
/// Activation rows multiplied with one unpacked weight block.
pub const ROW_TILE: usize = 4;
/// Activation rows per work item (their 8-bit blocks stay in L2).
const ROW_BLOCK: usize = 64;
/// Weight rows per work item (their blocks stay in L1).
const WEIGHT_CHUNK: usize = 16;

/// A `[n, k]` weight matrix this module multiplies, whatever its block type.
pub trait CpuMatmul: Debug + Send + Sync {
    /// Output features (rows of the weight).
    fn n(&self) -> usize;
    /// Input features (columns of the weight).
    fn k(&self) -> usize;
    /// The weight as f32, row major (for tests and reference checks).
    fn dequantize(&self) -> Vec<f32>;
    /// `y[r·n + j]` for activation rows `rows` of `acts` (`k / 32` blocks a
    /// row) and weight rows `js`.
    ///
    /// # Safety
    /// `y` must point to `m·n` writable floats (`m` the rows of `acts`), and
    /// no other thread may write the same `(r, j)` while this runs.
    unsafe fn run_chunk(
        &self,
        acts: &[BlockQ81],
        rows: Range<usize>,
        js: Range<usize>,
        y: *mut f32,
    );
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
    if x.len() % k != 0 {
        bail!(
            "activations of {} values are not rows of {k} for a [{}, {k}] weight",
            x.len(),
            first.n()
        );
    }
    let m = x.len() / k;
    let acts: Vec<BlockQ81> = x.chunks_exact(BLOCK).map(quantize_block).collect();
    let mut ys: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; m * w.n()]).collect();
    let ptrs: Vec<SendPtr> = ys.iter_mut().map(|y| SendPtr(y.as_mut_ptr())).collect();
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
            // SAFETY: `ys[wi]` holds m·n floats and outlives the pass; item
            // (wi, rb, wc) is the only writer of its rows and weight rows.
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

/// One 32-value weight block as this module keeps it.
pub trait WeightBlock: Copy + Debug + Send + Sync + 'static {
    /// GGUF's name of the type (for errors).
    const NAME: &'static str;
    /// Bytes of one GGUF block.
    const BYTES: usize;
    /// `d·s` with signed bytes `s` (true) or `d·u + m` with unsigned `u`.
    const SIGNED: bool;
    /// Parse one GGUF block of [`Self::BYTES`] bytes.
    fn parse(c: &[u8]) -> Self;
    fn d(&self) -> f32;
    /// The offset `m` (0 for signed types).
    fn m(&self) -> f32;
    /// The 32 integer values (`u` or `s`).
    fn ints(&self) -> [i32; BLOCK];
    /// The 32 integer values as bytes in one AVX register (value `j` in byte `j`).
    ///
    /// # Safety
    /// The CPU must have AVX2 (the caller is compiled with it enabled).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i;
}

fn f16_at(c: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([c[i], c[i + 1]]).to_f32()
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
fn nibbles5(qs: &[u8; 16], qh: u32) -> [i32; BLOCK] {
    let mut v = nibbles(qs);
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

/// GGUF `block_q4_0`: f16 d, 16 bytes of nibbles; `x = d·(u − 8)`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct BlockQ40 {
    d: f32,
    qs: [u8; 16],
}

impl WeightBlock for BlockQ40 {
    const NAME: &'static str = "Q4_0";
    const BYTES: usize = 18;
    const SIGNED: bool = false;
    fn parse(c: &[u8]) -> Self {
        Self {
            d: f16_at(c, 0),
            qs: qs16(&c[2..]),
        }
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn m(&self) -> f32 {
        -8.0 * self.d
    }
    fn ints(&self) -> [i32; BLOCK] {
        nibbles(&self.qs)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        simd::nibbles(&self.qs)
    }
}

/// GGUF `block_q4_1`: f16 d, f16 m, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct BlockQ41 {
    d: f32,
    m: f32,
    qs: [u8; 16],
}

impl WeightBlock for BlockQ41 {
    const NAME: &'static str = "Q4_1";
    const BYTES: usize = 20;
    const SIGNED: bool = false;
    fn parse(c: &[u8]) -> Self {
        Self {
            d: f16_at(c, 0),
            m: f16_at(c, 2),
            qs: qs16(&c[4..]),
        }
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn m(&self) -> f32 {
        self.m
    }
    fn ints(&self) -> [i32; BLOCK] {
        nibbles(&self.qs)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        simd::nibbles(&self.qs)
    }
}

/// GGUF `block_q5_0`: f16 d, 32 high bits, 16 bytes of nibbles; `x = d·(u − 16)`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct BlockQ50 {
    d: f32,
    qh: u32,
    qs: [u8; 16],
}

impl WeightBlock for BlockQ50 {
    const NAME: &'static str = "Q5_0";
    const BYTES: usize = 22;
    const SIGNED: bool = false;
    fn parse(c: &[u8]) -> Self {
        Self {
            d: f16_at(c, 0),
            qh: u32::from_le_bytes([c[2], c[3], c[4], c[5]]),
            qs: qs16(&c[6..]),
        }
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn m(&self) -> f32 {
        -16.0 * self.d
    }
    fn ints(&self) -> [i32; BLOCK] {
        nibbles5(&self.qs, self.qh)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        simd::nibbles5(&self.qs, self.qh)
    }
}

/// GGUF `block_q5_1`: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct BlockQ51 {
    d: f32,
    m: f32,
    qh: u32,
    qs: [u8; 16],
}

impl WeightBlock for BlockQ51 {
    const NAME: &'static str = "Q5_1";
    const BYTES: usize = 24;
    const SIGNED: bool = false;
    fn parse(c: &[u8]) -> Self {
        Self {
            d: f16_at(c, 0),
            m: f16_at(c, 2),
            qh: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            qs: qs16(&c[8..]),
        }
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn m(&self) -> f32 {
        self.m
    }
    fn ints(&self) -> [i32; BLOCK] {
        nibbles5(&self.qs, self.qh)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        simd::nibbles5(&self.qs, self.qh)
    }
}

/// GGUF `block_q8_0`: f16 d, 32 signed bytes; `x = d·s`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct BlockQ80 {
    d: f32,
    qs: [i8; 32],
}

impl WeightBlock for BlockQ80 {
    const NAME: &'static str = "Q8_0";
    const BYTES: usize = 34;
    const SIGNED: bool = true;
    fn parse(c: &[u8]) -> Self {
        let mut qs = [0i8; 32];
        for (q, &b) in qs.iter_mut().zip(&c[2..34]) {
            *q = b as i8;
        }
        Self {
            d: f16_at(c, 0),
            qs,
        }
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn m(&self) -> f32 {
        0.0
    }
    fn ints(&self) -> [i32; BLOCK] {
        self.qs.map(i32::from)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_loadu_si256(self.qs.as_ptr() as *const __m256i)
    }
}

/// One quantised activation block: `x[j] ≈ d·q[j]`, `s = d·Σq`.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
pub struct BlockQ81 {
    qs: [i8; 32],
    d: f32,
    s: f32,
}

impl Default for BlockQ81 {
    fn default() -> Self {
        Self {
            qs: [0; 32],
            d: 0.0,
            s: 0.0,
        }
    }
}

/// A `[n, k]` weight of block type `B` ready for [`CpuMatmul::matmul`].
#[derive(Debug, Clone)]
pub struct QuantMatrix<B: WeightBlock> {
    n: usize,
    k: usize,
    blocks: Vec<B>,
    /// The dot-product implementation, chosen for this CPU at load.
    simd: Simd,
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
        let nb = n * (k / BLOCK);
        if bytes.len() != nb * B::BYTES {
            bail!(
                "{} tensor [{n}, {k}] needs {} bytes, got {}",
                B::NAME,
                nb * B::BYTES,
                bytes.len()
            );
        }
        let blocks = bytes.chunks_exact(B::BYTES).map(B::parse).collect();
        Ok(Self {
            n,
            k,
            blocks,
            simd: Simd::detect(),
        })
    }

    #[cfg(test)]
    fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd;
        self
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
        for b in &self.blocks {
            let (d, m) = (b.d(), b.m());
            out.extend(b.ints().iter().map(|&q| d * q as f32 + m));
        }
        out
    }

    unsafe fn run_chunk(
        &self,
        acts: &[BlockQ81],
        rows: Range<usize>,
        js: Range<usize>,
        y: *mut f32,
    ) {
        let (n, kb, simd) = (self.n, self.k / BLOCK, self.simd);
        let act = |r: usize| &acts[r * kb..(r + 1) * kb];
        let wrow = |j: usize| &self.blocks[j * kb..(j + 1) * kb];
        // SAFETY: the caller owns y[r, j] for these rows and weight rows.
        let put = |r: usize, j: usize, v: f32| unsafe { *y.add(r * n + j) = v };
        // Two weight rows at a time (each activation block loaded once for
        // both), each against up to ROW_TILE activation rows.
        let mut j = js.start;
        while j < js.end {
            let two = j + 1 < js.end;
            let mut r = rows.start;
            while r + ROW_TILE <= rows.end {
                let a: [&[BlockQ81]; ROW_TILE] = std::array::from_fn(|i| act(r + i));
                if two {
                    let d = simd.dot_tiles::<B, 2, ROW_TILE>([wrow(j), wrow(j + 1)], a);
                    for (w, dw) in d.iter().enumerate() {
                        dw.iter()
                            .enumerate()
                            .for_each(|(i, &v)| put(r + i, j + w, v));
                    }
                } else {
                    let d = simd.dot_tile::<B, ROW_TILE>(wrow(j), a);
                    d.iter().enumerate().for_each(|(i, &v)| put(r + i, j, v));
                }
                r += ROW_TILE;
            }
            while r + 2 <= rows.end {
                let a = [act(r), act(r + 1)];
                if two {
                    let d = simd.dot_tiles::<B, 2, 2>([wrow(j), wrow(j + 1)], a);
                    for (w, dw) in d.iter().enumerate() {
                        put(r, j + w, dw[0]);
                        put(r + 1, j + w, dw[1]);
                    }
                } else {
                    let d = simd.dot_tile::<B, 2>(wrow(j), a);
                    put(r, j, d[0]);
                    put(r + 1, j, d[1]);
                }
                r += 2;
            }
            if r < rows.end {
                if two {
                    let d = simd.dot_tiles::<B, 2, 1>([wrow(j), wrow(j + 1)], [act(r)]);
                    put(r, j, d[0][0]);
                    put(r, j + 1, d[1][0]);
                } else {
                    put(r, j, simd.dot_tile::<B, 1>(wrow(j), [act(r)])[0]);
                }
            }
            j += if two { 2 } else { 1 };
        }
    }
}

impl<B: WeightBlock> QuantMatrix<B> {
    /// `y = x · Wᵀ` (see [`matmul`]).
    pub fn matmul(&self, x: &[f32]) -> Result<Vec<f32>> {
        matmul(self, x)
    }
}

/// Quantise 32 activations to 8 bits the way llama.cpp's `quantize_row_q8_1`
/// does (round to nearest, scale = max|x| / 127), keeping d and s in f32.
fn quantize_block(x: &[f32]) -> BlockQ81 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ81 {
        d,
        ..BlockQ81::default()
    };
    let mut sum = 0i32;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        let r = (v * id).round() as i32;
        *q = r as i8;
        sum += r;
    }
    b.s = d * sum as f32;
    b
}

/// A raw output pointer shared by the pool's workers (each writes its own rows).
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: workers write disjoint ranges; see `matmul_many`.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
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
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
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

    /// Dot products of one weight row with `N` activation rows.
    fn dot_tile<B: WeightBlock, const N: usize>(self, w: &[B], rows: [&[BlockQ81]; N]) -> [f32; N] {
        self.dot_tiles::<B, 1, N>([w], rows)[0]
    }

    /// Dot products of `W` weight rows (of equal length) with `N` activation rows.
    fn dot_tiles<B: WeightBlock, const W: usize, const N: usize>(
        self,
        ws: [&[B]; W],
        rows: [&[BlockQ81]; N],
    ) -> [[f32; N]; W] {
        match self {
            Simd::Portable => {
                std::array::from_fn(|w| std::array::from_fn(|i| dot_portable(ws[w], rows[i])))
            }
            // SAFETY: `detect` checked that the CPU has AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { simd::dot_tile(ws, rows) },
            // SAFETY: `detect` checked AVX2, FMA and AVX-VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::AvxVnni => unsafe { simd::dot_tile_vnni(ws, rows) },
        }
    }
}

fn dot_portable<B: WeightBlock>(w: &[B], a: &[BlockQ81]) -> f32 {
    let mut acc = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let isum: i32 = wb
            .ints()
            .iter()
            .zip(&ab.qs)
            .map(|(&q, &x)| q * i32::from(x))
            .sum();
        acc += wb.d() * ab.d * isum as f32 + wb.m() * ab.s;
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{BlockQ81, WeightBlock};
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

    /// One body for both integer paths: `$isum(u, q8)` gives eight i32
    /// lanes whose sum is `Σ u·q8` over the 32 values of a block for
    /// unsigned weight bytes `u`; signed weights go through `|w|` and the
    /// activation with `w`'s sign.
    macro_rules! dot_tile_fn {
        ($(#[$doc:meta])* $name:ident, $features:literal, $isum:expr) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name<B: WeightBlock, const W: usize, const N: usize>(
                ws: [&[B]; W],
                rows: [&[BlockQ81]; N],
            ) -> [[f32; N]; W] {
                let mut acc = [[_mm256_setzero_ps(); N]; W];
                let mut macc = [[0f32; N]; W];
                for b in 0..ws[0].len() {
                    // Each weight block is unpacked once for the N rows, each
                    // activation block loaded once for the W weight rows.
                    let wb: [&B; W] = std::array::from_fn(|w| ws[w].get_unchecked(b));
                    let q: [__m256i; W] = std::array::from_fn(|w| wb[w].load());
                    let u: [__m256i; W] = std::array::from_fn(|w| {
                        if B::SIGNED { _mm256_sign_epi8(q[w], q[w]) } else { q[w] }
                    });
                    for i in 0..N {
                        let ab = rows[i].get_unchecked(b);
                        let q8 = _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i);
                        for w in 0..W {
                            let q8w = if B::SIGNED { _mm256_sign_epi8(q8, q[w]) } else { q8 };
                            let p32: __m256i = $isum(u[w], q8w);
                            let scale = _mm256_set1_ps(wb[w].d() * ab.d);
                            acc[w][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, acc[w][i]);
                            if !B::SIGNED {
                                macc[w][i] += wb[w].m() * ab.s;
                            }
                        }
                    }
                }
                let mut out = [[0f32; N]; W];
                for w in 0..W {
                    for i in 0..N {
                        out[w][i] = hsum(acc[w][i]) + macc[w][i];
                    }
                }
                out
            }
        };
    }

    dot_tile_fn!(
        /// See [`super::Simd::dot_tile`]. Caller guarantees AVX2 and FMA.
        dot_tile,
        "avx2,fma",
        |u, q8| _mm256_madd_epi16(_mm256_maddubs_epi16(u, q8), _mm256_set1_epi16(1))
    );

    dot_tile_fn!(
        /// [`dot_tile`] with one AVX-VNNI instruction per block and row.
        /// Caller guarantees AVX2, FMA and AVX-VNNI.
        dot_tile_vnni,
        "avx2,fma,avxvnni",
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
        let (n, k) = (37, 96);
        let bytes = random_blocks::<B>(&mut rng, n, k);
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
    /// to float rounding, and a row computed alone equals the same row in a batch.
    fn check_paths_agree<B: WeightBlock>(seed: u64) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (n, k) = (20, 256);
        let w =
            QuantMatrix::<B>::from_gguf_bytes(&random_blocks::<B>(&mut rng, n, k), n, k).unwrap();
        let x: Vec<f32> = (0..6 * k).map(|_| rng.gen_range(-3.0..3.0)).collect();
        let acts: Vec<BlockQ81> = x.chunks_exact(BLOCK).map(quantize_block).collect();
        let kb = k / BLOCK;
        let batch = w.matmul(&x).unwrap();
        for r in 0..6 {
            let alone = w.matmul(&x[r * k..(r + 1) * k]).unwrap();
            assert_eq!(alone, batch[r * n..(r + 1) * n].to_vec(), "{}", B::NAME);
        }
        let paths = Simd::available();
        for j in 0..n {
            let wj = &w.blocks[j * kb..(j + 1) * kb];
            let rows: [&[BlockQ81]; 4] = std::array::from_fn(|r| &acts[r * kb..(r + 1) * kb]);
            let want = Simd::Portable.dot_tile::<B, 4>(wj, rows);
            for p in &paths {
                let got = p.dot_tile::<B, 4>(wj, rows);
                for (g, e) in got.iter().zip(&want) {
                    assert!(
                        (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "{} {p:?}: {g} vs {e}",
                        B::NAME
                    );
                }
            }
            if j + 1 < n {
                // Two weight rows at once: each row's sums as when alone.
                let wk = &w.blocks[(j + 1) * kb..(j + 2) * kb];
                for p in &paths {
                    let two = p.dot_tiles::<B, 2, 4>([wj, wk], rows);
                    assert_eq!(two[0], p.dot_tile::<B, 4>(wj, rows), "{} {p:?}", B::NAME);
                    assert_eq!(two[1], p.dot_tile::<B, 4>(wk, rows), "{} {p:?}", B::NAME);
                }
            }
            if paths.len() == 3 {
                // Same integer sums, same float operations: bit-identical.
                assert_eq!(
                    paths[1].dot_tile::<B, 4>(wj, rows),
                    paths[2].dot_tile::<B, 4>(wj, rows)
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
