//! CPU matrix products for the GGUF weight types of the roster's files:
//! the 32-value types `Q4_0`, `Q4_1` (the default SmolLM2 model's type),
//! `Q5_0`, `Q5_1`, `Q8_0`, and the 256-value k-quants `Q4_K`, `Q5_K`, `Q6_K`
//! (Ollama's Q4_K_M files are Q4_K with Q6_K for part of `ffn_down`/`attn_v`
//! and the output; a Q4_K_M file whose rows are not a multiple of 256 values,
//! SmolLM2's, falls back to Q5_0/Q8_0). candle 0.11 computes Q4_1/Q5_0/Q5_1
//! dot products with scalar loops, which made prefill three times and decode
//! 1.4 times slower than llama.cpp here. Which types these kernels take is
//! [`DEFAULT_TYPES`] (those where they beat candle in
//! `benches/quant_matmul.rs`; candle's repacked Q4_K and Q6_K kernels are
//! faster on an AVX-512 CPU) unless `JOULE_CPU_KERNEL_TYPES` names others.
//!
//! A k-quant super-block is one group of eight 32-value blocks here: Q4_K and
//! Q5_K blocks are Q4_1/Q5_1 blocks whose `d = d·sc` and `m = −dmin·mn` come
//! from the super-block's 6-bit scales (exact in f32, computed per group in
//! the kernel), and Q6_K blocks are signed bytes `q − 32` with one scale per
//! 16 values (a block's two halves are scaled separately).
//!
//! [`QuantMatrix`] holds a `[n, k]` weight as the file's bytes regrouped: each
//! 32-value block's integer payload (nibbles, fifth bits, bytes) in one array,
//! and the scales of each group of [`GROUP`] blocks of a row ([`GroupScales`]:
//! eight f16 `d` (and `m`), or a k-quant's super-block scales) in another,
//! rows padded to whole groups, so the scales of eight blocks are one vector
//! load and one conversion. The matrix takes the bytes of the file (plus that
//! padding; Q6_K's six-bit values take a byte each): decode reads every weight
//! once per step. A weight is either `d·u + m` with `u` unsigned
//! ([`WeightBlock::SIGNED`] false: Q4_0/Q5_0 as `m = −8d`/`−16d`, Q4_1/Q5_1
//! with their own `m`, Q4_K/Q5_K) or `d·s` with `s` a signed byte (Q8_0, Q6_K).
//!
//! [`QuantMatrix::matmul`] computes `y = x · Wᵀ` for `m` activation rows the
//! way llama.cpp does: each activation row is quantised once to 8-bit blocks
//! ([`Acts`]: `x ≈ d₈·q₈`, with `s = d₈·Σq₈` kept), and a block's contribution
//! is `d·d₈·Σ u·q₈ + m·s`. The integer sums use AVX-512 VNNI (two blocks per
//! 512-bit register), AVX-VNNI or AVX2 when the CPU has them (checked at run
//! time; `JOULE_SIMD` picks another to compare) and a portable loop otherwise;
//! all give the same integer sums, so the paths differ only by float
//! summation order. The SIMD paths multiply the scales of eight blocks at once
//! (`d·d₈` for eight blocks in one product, the `m·s` terms of eight blocks in
//! one fused multiply-add), leaving per block (AVX-512: per pair of blocks)
//! and row only the integer product, its conversion, the scale's broadcast
//! and one fused multiply-add.
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

use crate::inference::gguf::ggml_name;
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

/// The environment variable naming the GGUF types this module multiplies
/// (a comma-separated list of names such as `Q4_K,Q6_K`, or `all`); unset,
/// [`DEFAULT_TYPES`].
pub const TYPES_ENV: &str = "JOULE_CPU_KERNEL_TYPES";

/// The types this module takes by default, unless candle repacks the
/// matrix ([`candle_repacks`]): those whose products it computes faster than
/// candle 0.11 (`benches/quant_matmul.rs`, both columns). candle's repacked
/// 16-row kernels for Q4_K and Q6_K were faster on the AVX-512 Xeon measured
/// (prefill 1.1–2.4×, decode 1.0–1.7×: they keep 256-value activation blocks
/// and sum a super-block's sub-blocks in integers), so those two stay on
/// candle unless [`TYPES_ENV`] names them.
pub const DEFAULT_TYPES: [GgmlDType; 6] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q5K,
];

/// Whether candle 0.11.1 multiplies a `[n, k]` matrix of `dtype` with its
/// repacked x86 kernels (its `repack_x86::select`: `k` whole 256-value
/// super-blocks, `n` whole tiles of 16 rows, and for Q8_0 a CPU with
/// AVX-512 VNNI or AVX-VNNI). A default Q8_0 matrix of that shape goes to
/// candle: its repacked Q8_0 was 2× faster than this module's at the 4B FFN
/// and 1536-wide shapes (prefill and decode), while at SmolLM2's 576-wide
/// output head, which candle does not repack, this module's prefill was 2.3×
/// candle's.
pub fn candle_repacks(dtype: GgmlDType, n: usize, k: usize) -> bool {
    const TILE_N: usize = 16;
    const QK_K: usize = 256;
    if k == 0 || n % TILE_N != 0 || k % QK_K != 0 {
        return false;
    }
    match dtype {
        GgmlDType::Q4K | GgmlDType::Q6K => true,
        #[cfg(target_arch = "x86_64")]
        GgmlDType::Q8_0 => {
            is_x86_feature_detected!("avxvnni")
                || (is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni"))
        }
        _ => false,
    }
}

/// Every type this module can multiply.
pub const ALL_TYPES: [GgmlDType; 8] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// The types a [`TYPES_ENV`] value names, or `None` when it names none
/// (unset or empty: [`DEFAULT_TYPES`], less what [`candle_repacks`]).
pub fn kernel_types(spec: Option<&str>) -> Result<Option<Vec<GgmlDType>>> {
    let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if spec.eq_ignore_ascii_case("all") {
        return Ok(Some(ALL_TYPES.to_vec()));
    }
    spec.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            ALL_TYPES
                .into_iter()
                .find(|&d| ggml_name(d).is_some_and(|n| n.eq_ignore_ascii_case(t)))
                .ok_or_else(|| {
                    let names: Vec<&str> = ALL_TYPES.iter().filter_map(|&d| ggml_name(d)).collect();
                    anyhow::anyhow!(
                        "{TYPES_ENV}={spec:?}: {t:?} is not a type Joule's CPU kernels have \
                         (expected `all` or a comma-separated list of {})",
                        names.join(", ")
                    )
                })
        })
        .collect::<Result<_>>()
        .map(Some)
}

/// This module's matrix for a GGUF tensor of `dtype`, or `None` for a matrix
/// it leaves to candle: a type not among [`kernel_types`] of [`TYPES_ENV`],
/// or with [`TYPES_ENV`] unset one that [`candle_repacks`].
pub fn cpu_matrix(
    dtype: GgmlDType,
    bytes: &[u8],
    n: usize,
    k: usize,
) -> Option<Result<Box<dyn CpuMatmul>>> {
    let taken = match kernel_types(std::env::var(TYPES_ENV).ok().as_deref()) {
        // Named explicitly, a type is taken whatever its shape.
        Ok(Some(types)) => types.contains(&dtype),
        Ok(None) => DEFAULT_TYPES.contains(&dtype) && !candle_repacks(dtype, n, k),
        Err(e) => return Some(Err(e)),
    };
    if taken {
        cpu_matrix_of(dtype, bytes, n, k)
    } else {
        None
    }
}

/// [`cpu_matrix`] for any type this module has, whatever [`TYPES_ENV`] says.
pub fn cpu_matrix_of(
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
        GgmlDType::Q4K => boxed::<BlockQ4K>(bytes, n, k),
        GgmlDType::Q5K => boxed::<BlockQ5K>(bytes, n, k),
        GgmlDType::Q6K => boxed::<BlockQ6K>(bytes, n, k),
        _ => return None,
    })
}

/// One GGUF block type: how its bytes split into the scales of 32-value
/// blocks and their integer payloads.
pub trait WeightBlock: Copy + Debug + Send + Sync + 'static {
    /// GGUF's name of the type (for errors).
    const NAME: &'static str;
    /// Values of one GGUF block: 32, or 256 for a k-quant super-block (one
    /// group of eight 32-value blocks here).
    const VALUES: usize;
    /// Bytes of one GGUF block.
    const BYTES: usize;
    /// `d·s` with signed bytes `s` (true) or `d·u + m` with unsigned `u`.
    const SIGNED: bool;
    /// The integer payload of one 32-value block.
    type Ints: Payload;
    /// The scales of a group of [`GROUP`] 32-value blocks.
    type Scales: GroupScales;
    /// Split GGUF block `c` ([`Self::BYTES`] bytes): push its `VALUES / 32`
    /// payloads onto `ints` and set their scales in `group`, starting at
    /// position `at` of the group.
    fn parse(c: &[u8], at: usize, group: &mut Self::Scales, ints: &mut Vec<Self::Ints>);
}

/// The scales of [`GROUP`] consecutive 32-value blocks of a weight row: each
/// block's value is `d·u + m` (or `d·s` when signed), `d` and `m` exact in f32.
/// Unused positions (a row's last group) are zero.
pub trait GroupScales: Copy + Default + Debug + Send + Sync + 'static {
    /// Whether the `m` terms exist (Q8_0 and Q6_K have none).
    const WITH_M: bool;
    /// Whether a block's values 16..32 have their own `d` (Q6_K's 16-value
    /// scales); otherwise one `d` serves all 32.
    const SPLIT: bool = false;
    /// `(d, m)` of block `i` of the group (`d` of values 0..16 when split).
    fn block(&self, i: usize) -> (f32, f32);
    /// `d` of values 16..32 of block `i`.
    fn high_d(&self, i: usize) -> f32 {
        self.block(i).0
    }
    /// The eight `d` and the eight `m` as two vectors.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C (the caller is compiled with them).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256);
    /// The eight [`GroupScales::high_d`] as a vector.
    ///
    /// # Safety
    /// As [`GroupScales::load`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_high(&self) -> std::arch::x86_64::__m256 {
        self.load().0
    }
}

/// f16 `d` per block and `m = OFF·d` (Q4_0: −8, Q5_0: −16, Q8_0: 0).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(16))]
pub struct ScalesD<const OFF: i32> {
    d: [u16; GROUP],
}

impl<const OFF: i32> GroupScales for ScalesD<OFF> {
    const WITH_M: bool = OFF != 0;
    fn block(&self, i: usize) -> (f32, f32) {
        let d = f16_bits(self.d[i]);
        (d, OFF as f32 * d)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        let d = _mm256_cvtph_ps(_mm_load_si128(self.d.as_ptr() as *const __m128i));
        (d, _mm256_mul_ps(d, _mm256_set1_ps(OFF as f32)))
    }
}

/// f16 `d` and `m` per block (Q4_1, Q5_1).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
pub struct ScalesDM {
    d: [u16; GROUP],
    m: [u16; GROUP],
}

impl GroupScales for ScalesDM {
    const WITH_M: bool = true;
    fn block(&self, i: usize) -> (f32, f32) {
        (f16_bits(self.d[i]), f16_bits(self.m[i]))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        (
            _mm256_cvtph_ps(_mm_load_si128(self.d.as_ptr() as *const __m128i)),
            _mm256_cvtph_ps(_mm_load_si128(self.m.as_ptr() as *const __m128i)),
        )
    }
}

/// A k-quant super-block's scales (Q4_K, Q5_K): f16 `d` and `dmin` and a
/// 6-bit scale and min per 32-value block; block `i` is `d·sc[i]·u −
/// dmin·mn[i]` (the products are exact in f32).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
pub struct ScalesK {
    sc: [u8; GROUP],
    mn: [u8; GROUP],
    d: u16,
    dmin: u16,
}

impl ScalesK {
    /// From a super-block's f16 `d`, `dmin` and its 12 packed scale bytes
    /// (GGUF's `get_scale_min_k4`: eight 6-bit scales and eight 6-bit mins).
    fn unpack(d: u16, dmin: u16, q: &[u8]) -> Self {
        let mut s = ScalesK {
            d,
            dmin,
            ..Default::default()
        };
        for j in 0..GROUP {
            let (sc, mn) = if j < 4 {
                (q[j] & 63, q[j + 4] & 63)
            } else {
                (
                    (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
                    (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
                )
            };
            s.sc[j] = sc;
            s.mn[j] = mn;
        }
        s
    }
}

impl GroupScales for ScalesK {
    const WITH_M: bool = true;
    fn block(&self, i: usize) -> (f32, f32) {
        (
            f16_bits(self.d) * f32::from(self.sc[i]),
            -(f16_bits(self.dmin) * f32::from(self.mn[i])),
        )
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        let bytes = |p: &[u8; GROUP]| {
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                p.as_ptr() as *const __m128i
            )))
        };
        (
            _mm256_mul_ps(bytes(&self.sc), _mm256_set1_ps(f16_bits(self.d))),
            _mm256_mul_ps(bytes(&self.mn), _mm256_set1_ps(-f16_bits(self.dmin))),
        )
    }
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
    /// The values of this block and the next one (value `j` of the second in
    /// byte `32 + j`) in one AVX-512 register.
    ///
    /// # Safety
    /// `pair` and `pair + 1` must be payloads, and the CPU must have
    /// AVX-512 F and BW (the caller is compiled with them enabled).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i;
    /// [`Payload::load`] in the low half of an AVX-512 register, zeros above.
    ///
    /// # Safety
    /// As [`Payload::load2`] for this block alone.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_zext(&self) -> std::arch::x86_64::__m512i {
        std::arch::x86_64::_mm512_zextsi256_si512(self.load())
    }
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
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i {
        // Two blocks' nibbles are 32 contiguous bytes.
        simd::nibbles_pair(std::arch::x86_64::_mm256_loadu_si256(pair as *const _))
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
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i {
        let (a, b) = (&*pair, &*pair.add(1));
        let qh = u64::from(u32::from_le_bytes(a.qh)) | u64::from(u32::from_le_bytes(b.qh)) << 32;
        simd::nibbles5_pair(&a.qs, &b.qs, qh)
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
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i {
        // Two 32-byte payloads are 64 contiguous bytes.
        std::arch::x86_64::_mm512_loadu_si512(pair as *const _)
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

/// A Q6_K super-block's scales: f16 `d` and a signed 8-bit scale per 16
/// values; block `i`'s values 0..16 are `d·lo[i]·s`, 16..32 `d·hi[i]·s`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
pub struct ScalesQ6K {
    lo: [i8; GROUP],
    hi: [i8; GROUP],
    d: u16,
}

impl GroupScales for ScalesQ6K {
    const WITH_M: bool = false;
    const SPLIT: bool = true;
    fn block(&self, i: usize) -> (f32, f32) {
        (f16_bits(self.d) * f32::from(self.lo[i]), 0.0)
    }
    fn high_d(&self, i: usize) -> f32 {
        f16_bits(self.d) * f32::from(self.hi[i])
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        (i8_scales(&self.lo, self.d), _mm256_setzero_ps())
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_high(&self) -> std::arch::x86_64::__m256 {
        i8_scales(&self.hi, self.d)
    }
}

/// Eight signed 8-bit scales times the f16 `d`, as f32 (exact).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn i8_scales(sc: &[i8; GROUP], d: u16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
        sc.as_ptr() as *const __m128i
    )));
    _mm256_mul_ps(v, _mm256_set1_ps(f16_bits(d)))
}

/// GGUF `block_q4_0`: f16 d, 16 bytes of nibbles; `x = d·(u − 8)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ40;

impl WeightBlock for BlockQ40 {
    const NAME: &'static str = "Q4_0";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 18;
    const SIGNED: bool = false;
    type Ints = [u8; 16];
    type Scales = ScalesD<-8>;
    fn parse(c: &[u8], at: usize, group: &mut ScalesD<-8>, ints: &mut Vec<[u8; 16]>) {
        group.d[at] = u16_at(c, 0);
        ints.push(qs16(&c[2..]));
    }
}

/// GGUF `block_q4_1`: f16 d, f16 m, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ41;

impl WeightBlock for BlockQ41 {
    const NAME: &'static str = "Q4_1";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 20;
    const SIGNED: bool = false;
    type Ints = [u8; 16];
    type Scales = ScalesDM;
    fn parse(c: &[u8], at: usize, group: &mut ScalesDM, ints: &mut Vec<[u8; 16]>) {
        group.d[at] = u16_at(c, 0);
        group.m[at] = u16_at(c, 2);
        ints.push(qs16(&c[4..]));
    }
}

/// GGUF `block_q5_0`: f16 d, 32 high bits, 16 bytes of nibbles; `x = d·(u − 16)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ50;

impl WeightBlock for BlockQ50 {
    const NAME: &'static str = "Q5_0";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 22;
    const SIGNED: bool = false;
    type Ints = Q5Ints;
    type Scales = ScalesD<-16>;
    fn parse(c: &[u8], at: usize, group: &mut ScalesD<-16>, ints: &mut Vec<Q5Ints>) {
        group.d[at] = u16_at(c, 0);
        ints.push(q5_ints(&c[2..]));
    }
}

/// GGUF `block_q5_1`: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ51;

impl WeightBlock for BlockQ51 {
    const NAME: &'static str = "Q5_1";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 24;
    const SIGNED: bool = false;
    type Ints = Q5Ints;
    type Scales = ScalesDM;
    fn parse(c: &[u8], at: usize, group: &mut ScalesDM, ints: &mut Vec<Q5Ints>) {
        group.d[at] = u16_at(c, 0);
        group.m[at] = u16_at(c, 2);
        ints.push(q5_ints(&c[4..]));
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
    const VALUES: usize = BLOCK;
    const BYTES: usize = 34;
    const SIGNED: bool = true;
    type Ints = Q8Ints;
    type Scales = ScalesD<0>;
    fn parse(c: &[u8], at: usize, group: &mut ScalesD<0>, ints: &mut Vec<Q8Ints>) {
        let mut qs = [0i8; 32];
        for (q, &b) in qs.iter_mut().zip(&c[2..34]) {
            *q = b as i8;
        }
        group.d[at] = u16_at(c, 0);
        ints.push(Q8Ints(qs));
    }
}

/// GGUF `block_q4_K`: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins,
/// 128 bytes of nibbles for 256 values. Each 64 values share 32 bytes: the
/// low nibbles are the first 32-value block, the high nibbles the second;
/// block `i` is `x = d·sc[i]·u − dmin·mn[i]`, the layout of Q4_1 with exact
/// f32 scales.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4K;

/// 32-value block `i` of a Q4_K/Q5_K super-block's 128 nibble bytes `qs`
/// (each 64 values share 32 bytes: low nibbles the first block, high the
/// second) in this module's order: value `j` in the low nibble of byte `j`,
/// value `16 + j` in its high nibble.
fn k_nibbles(qs: &[u8], i: usize) -> [u8; 16] {
    let (chunk, shift) = (&qs[32 * (i / 2)..32 * (i / 2) + 32], 4 * (i % 2));
    let v = |l: usize| (chunk[l] >> shift) & 0x0f;
    std::array::from_fn(|j| v(j) | v(j + 16) << 4)
}

impl WeightBlock for BlockQ4K {
    const NAME: &'static str = "Q4_K";
    const VALUES: usize = GROUP * BLOCK;
    const BYTES: usize = 144;
    const SIGNED: bool = false;
    type Ints = [u8; 16];
    type Scales = ScalesK;
    fn parse(c: &[u8], _at: usize, group: &mut ScalesK, ints: &mut Vec<[u8; 16]>) {
        *group = ScalesK::unpack(u16_at(c, 0), u16_at(c, 2), &c[4..16]);
        ints.extend((0..GROUP).map(|i| k_nibbles(&c[16..144], i)));
    }
}

/// GGUF `block_q5_K`: [`BlockQ4K`] with 32 bytes of fifth bits: bit `i` of
/// byte `l` is bit 4 of value `l` of 32-value block `i`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ5K;

impl WeightBlock for BlockQ5K {
    const NAME: &'static str = "Q5_K";
    const VALUES: usize = GROUP * BLOCK;
    const BYTES: usize = 176;
    const SIGNED: bool = false;
    type Ints = Q5Ints;
    type Scales = ScalesK;
    fn parse(c: &[u8], _at: usize, group: &mut ScalesK, ints: &mut Vec<Q5Ints>) {
        *group = ScalesK::unpack(u16_at(c, 0), u16_at(c, 2), &c[4..16]);
        let (qh, qs) = (&c[16..48], &c[48..176]);
        for i in 0..GROUP {
            let high = (0..32).fold(0u32, |h, l| h | u32::from((qh[l] >> i) & 1) << l);
            ints.push(Q5Ints {
                qh: high.to_le_bytes(),
                qs: k_nibbles(qs, i),
            });
        }
    }
}

/// GGUF `block_q6_K`: 128 bytes of low nibbles, 64 bytes of high bit pairs,
/// 16 signed 8-bit scales (one per 16 values) and f16 d for 256 values of
/// `x = d·sc·(q − 32)`, `q` six bits. Each 32-value block keeps `q − 32` as
/// signed bytes (Q8_0's payload) and its two scales.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ6K;

impl WeightBlock for BlockQ6K {
    const NAME: &'static str = "Q6_K";
    const VALUES: usize = GROUP * BLOCK;
    const BYTES: usize = 210;
    const SIGNED: bool = true;
    type Ints = Q8Ints;
    type Scales = ScalesQ6K;
    fn parse(c: &[u8], _at: usize, group: &mut ScalesQ6K, ints: &mut Vec<Q8Ints>) {
        group.d = u16_at(c, 208);
        for i in 0..GROUP {
            group.lo[i] = c[192 + 2 * i] as i8;
            group.hi[i] = c[192 + 2 * i + 1] as i8;
            // Values 128·h + 32·t + l come from ql[64h + l + 32(t%2)]'s
            // nibble t/2 and bits 2t, 2t+1 of qh[32h + l].
            let (h, t) = (i / 4, i % 4);
            let (ql, qh) = (&c[64 * h..64 * h + 64], &c[128 + 32 * h..128 + 32 * h + 32]);
            ints.push(Q8Ints(std::array::from_fn(|l| {
                let low = (ql[l + 32 * (t % 2)] >> (4 * (t / 2))) & 0x0f;
                let high = (qh[l] >> (2 * t)) & 3;
                (low | high << 4) as i8 - 32
            })));
        }
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
    /// 32-value blocks per row, and that rounded up to whole groups.
    kb: usize,
    kbp: usize,
    /// `n·kb` payloads, row major.
    ints: Vec<B::Ints>,
    /// `n·kbp/GROUP` group scales, row major (zero in the padding).
    scales: Vec<B::Scales>,
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
        if k == 0 || k % B::VALUES != 0 {
            bail!(
                "{} rows of {k} values are not whole blocks of {}",
                B::NAME,
                B::VALUES
            );
        }
        let kb = k / BLOCK;
        let kbp = padded(kb);
        let per_row = k / B::VALUES;
        if bytes.len() != n * per_row * B::BYTES {
            bail!(
                "{} tensor [{n}, {k}] needs {} bytes, got {}",
                B::NAME,
                n * per_row * B::BYTES,
                bytes.len()
            );
        }
        let groups = kbp / GROUP;
        let mut ints = Vec::with_capacity(n * kb);
        let mut scales = vec![B::Scales::default(); n * groups];
        let sub = B::VALUES / BLOCK;
        for (i, c) in bytes.chunks_exact(B::BYTES).enumerate() {
            // The first 32-value block of GGUF block i, within its row.
            let b = (i % per_row) * sub;
            let group = &mut scales[(i / per_row) * groups + b / GROUP];
            B::parse(c, b % GROUP, group, &mut ints);
        }
        Ok(Self {
            n,
            k,
            kb,
            kbp,
            ints,
            scales,
            simd: Simd::detect()?,
            _block: PhantomData,
        })
    }

    #[cfg(test)]
    fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd;
        self
    }

    /// The scales of the group holding block `b` of row `j`.
    fn group(&self, j: usize, b: usize) -> &B::Scales {
        &self.scales[j * (self.kbp / GROUP) + b / GROUP]
    }

    /// `(d, m)` of block `b` of row `j`.
    fn dm_at(&self, j: usize, b: usize) -> (f32, f32) {
        self.group(j, b).block(b % GROUP)
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
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-512 F, BW, VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512Vnni => unsafe { simd::dot_tile_512(self, js, acts, rows) },
        }
    }

    fn dot_portable(&self, j: usize, a: &Acts, r: usize) -> f32 {
        let mut acc = 0f32;
        for b in 0..self.kb {
            let q = &self.ints[j * self.kb + b];
            let x = &a.qs[r * a.kb + b].0;
            let ints = q.ints();
            let isum = |v: Range<usize>| -> i32 { v.map(|i| ints[i] * i32::from(x[i])).sum() };
            let (d, m) = self.dm_at(j, b);
            let d8 = a.d[r * a.kbp + b];
            if <B::Scales as GroupScales>::SPLIT {
                let dh = self.group(j, b).high_d(b % GROUP);
                acc += d * d8 * isum(0..16) as f32 + dh * d8 * isum(16..32) as f32;
            } else {
                acc += d * d8 * isum(0..BLOCK) as f32 + m * a.s[r * a.kbp + b];
            }
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
                let (d, m) = self.dm_at(j, b);
                let dh = self.group(j, b).high_d(b % GROUP);
                out.extend(
                    self.ints[j * self.kb + b]
                        .ints()
                        .iter()
                        .enumerate()
                        .map(|(i, &q)| if i < 16 { d } else { dh } * q as f32 + m),
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

/// The environment variable that picks a kernel by [`Simd::name`].
pub const SIMD_ENV: &str = "JOULE_SIMD";

/// Which dot-product implementation the CPU supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// Two blocks per 512-bit register, one VNNI instruction per pair.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
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
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
                {
                    paths.push(Simd::Avx512Vnni);
                }
            }
        }
        paths
    }

    /// The name `JOULE_SIMD` takes for this implementation.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Simd::AvxVnni => "avxvnni",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512Vnni => "avx512vnni",
        }
    }

    /// The fastest implementation this CPU can run, or the one the
    /// environment variable [`SIMD_ENV`] names (to compare paths on one
    /// machine); a name this CPU cannot run is an error.
    pub fn detect() -> Result<Self> {
        Self::chosen(std::env::var(SIMD_ENV).ok().as_deref())
    }

    /// The implementation `name` names (unset or empty: the fastest).
    fn chosen(name: Option<&str>) -> Result<Self> {
        let available = Self::available();
        match name {
            Some(name) if !name.is_empty() => available
                .iter()
                .copied()
                .find(|s| s.name() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = available.iter().map(|s| s.name()).collect();
                    anyhow::anyhow!(
                        "{SIMD_ENV}={name:?}: expected one of {} (the kernels this CPU can run)",
                        names.join(", ")
                    )
                }),
            _ => Ok(available.last().copied().unwrap_or(Simd::Portable)),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{Acts, GroupScales, Payload, Q8Ints, QuantMatrix, WeightBlock, GROUP};

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

    /// Two blocks' nibbles (16 bytes each, contiguous in `packed`) as 64
    /// bytes: block 0's values in bytes 0..32, block 1's in 32..64.
    #[inline(always)]
    pub(super) unsafe fn nibbles_pair(packed: __m256i) -> __m512i {
        // 128-bit lanes [b0, b0, b1, b1]; the odd lanes shifted down by four
        // bits give the high nibbles once every byte is masked to 0x0f.
        let z = _mm512_castsi256_si512(packed);
        let z = _mm512_shuffle_i64x2::<0b01_01_00_00>(z, z);
        let z = _mm512_srlv_epi64(z, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
        _mm512_and_si512(z, _mm512_set1_epi8(0x0f))
    }

    /// [`nibbles_pair`] of two Q5 blocks, bit `j` of `qh` as bit 4 of byte `j`.
    #[inline(always)]
    pub(super) unsafe fn nibbles5_pair(qs0: &[u8; 16], qs1: &[u8; 16], qh: u64) -> __m512i {
        let packed = _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(qs0.as_ptr() as *const __m128i)),
            _mm_loadu_si128(qs1.as_ptr() as *const __m128i),
        );
        let low = nibbles_pair(packed);
        // (a nibble is below 16, so adding 16 sets bit 4)
        _mm512_mask_add_epi8(low, qh, low, _mm512_set1_epi8(0x10))
    }

    /// The permutation that puts scale `a` (of a group's eight) in lanes
    /// 0..8 and scale `b` in lanes 8..16 (both below 8: the upper half of
    /// the permuted register is never read).
    #[inline(always)]
    unsafe fn pair_index(a: usize, b: usize) -> __m512i {
        let (a, b) = (a as i32, b as i32);
        _mm512_set_epi32(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a)
    }

    /// [`pair_index`] for split scales: lanes 0..4 take scale `a`, 4..8 its
    /// high half's (`8 + a`), 8..12 scale `b`, 12..16 `8 + b`.
    #[inline(always)]
    unsafe fn split_pair_index(a: usize, b: usize) -> __m512i {
        let (a, b, ah, bh) = (a as i32, b as i32, a as i32 + 8, b as i32 + 8);
        _mm512_set_epi32(bh, bh, bh, bh, b, b, b, b, ah, ah, ah, ah, a, a, a, a)
    }

    /// See [`super::QuantMatrix::dot_tiles`]: the AVX-512 VNNI path. Two
    /// consecutive blocks are one 512-bit register, so per pair of blocks,
    /// row and weight row one `vpdpbusd`, one conversion, one permutation of
    /// the group's eight `d·d₈` (lanes 0..8 take block `b`'s, 8..16 block
    /// `b+1`'s) and one fused multiply-add remain; a group's odd last block
    /// goes alone in the low half. The `m·s` terms of a group are one fused
    /// multiply-add into the low half of the accumulator. Each (weight row,
    /// activation row) pair runs the same operations whatever `W` and `N`.
    /// Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW and VNNI, and that
    /// the rows exist.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn dot_tile_512<B: WeightBlock, const W: usize, const N: usize>(
        mat: &QuantMatrix<B>,
        js: [usize; W],
        acts: &Acts,
        rows: [usize; N],
    ) -> [[f32; N]; W] {
        let (kb, kbp) = (mat.kb, mat.kbp);
        let mut acc = [[_mm512_setzero_ps(); N]; W];
        // `d·d₈` of a group's eight blocks in lanes 0..8 and, for split
        // scales, of their values 16..32 in lanes 8..16.
        let mut dd = [[_mm512_setzero_ps(); N]; W];
        let split = <B::Scales as GroupScales>::SPLIT;
        let with_m = <B::Scales as GroupScales>::WITH_M;
        let gs: [*const B::Scales; W] =
            std::array::from_fn(|w| mat.scales.as_ptr().add(js[w] * (kbp / GROUP)));
        let ints: [*const B::Ints; W] = std::array::from_fn(|w| mat.ints.as_ptr().add(js[w] * kb));
        let q8s: [*const Q8Ints; N] = std::array::from_fn(|i| acts.qs.as_ptr().add(rows[i] * kb));
        // Negate the activation bytes where the (signed) weight is negative.
        let signed = |q8: __m512i, q: __m512i| {
            _mm512_mask_sub_epi8(q8, _mm512_movepi8_mask(q), _mm512_setzero_si512(), q8)
        };
        for g in (0..kb).step_by(GROUP) {
            let dm: [(__m256, __m256); W] = std::array::from_fn(|w| (*gs[w].add(g / GROUP)).load());
            let dh: [__m256; W] = std::array::from_fn(|w| {
                if split {
                    (*gs[w].add(g / GROUP)).load_high()
                } else {
                    dm[w].0
                }
            });
            for i in 0..N {
                let da = _mm256_loadu_ps(acts.d.as_ptr().add(rows[i] * kbp + g));
                for w in 0..W {
                    let low = _mm512_castps256_ps512(_mm256_mul_ps(dm[w].0, da));
                    dd[w][i] = if split {
                        _mm512_insertf32x8::<1>(low, _mm256_mul_ps(dh[w], da))
                    } else {
                        low
                    };
                }
                if with_m {
                    let sa = _mm256_loadu_ps(acts.s.as_ptr().add(rows[i] * kbp + g));
                    for w in 0..W {
                        acc[w][i] = _mm512_fmadd_ps(
                            _mm512_zextps256_ps512(dm[w].1),
                            _mm512_zextps256_ps512(sa),
                            acc[w][i],
                        );
                    }
                }
            }
            let end = kb.min(g + GROUP);
            let mut b = g;
            while b < end {
                let pair = b + 1 < end;
                for p in ints {
                    let ahead = (p.add(b) as *const i8).wrapping_add(PREFETCH);
                    _mm_prefetch::<_MM_HINT_T0>(ahead);
                }
                let q: [__m512i; W] = std::array::from_fn(|w| {
                    if pair {
                        B::Ints::load2(ints[w].add(b))
                    } else {
                        (*ints[w].add(b)).load_zext()
                    }
                });
                let u: [__m512i; W] = std::array::from_fn(|w| {
                    if B::SIGNED {
                        _mm512_abs_epi8(q[w])
                    } else {
                        q[w]
                    }
                });
                // A lone block's upper half is zeros: its scale is repeated.
                let second = if pair { b + 1 - g } else { b - g };
                let index = if split {
                    split_pair_index(b - g, second)
                } else {
                    pair_index(b - g, second)
                };
                for i in 0..N {
                    let q8 = if pair {
                        _mm512_loadu_si512(q8s[i].add(b) as *const _)
                    } else {
                        _mm512_zextsi256_si512(_mm256_load_si256(q8s[i].add(b) as *const __m256i))
                    };
                    for w in 0..W {
                        let q8w = if B::SIGNED { signed(q8, q[w]) } else { q8 };
                        let p32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[w], q8w);
                        let scale = _mm512_permutexvar_ps(index, dd[w][i]);
                        acc[w][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p32), scale, acc[w][i]);
                    }
                }
                b += if pair { 2 } else { 1 };
            }
        }
        let mut out = [[0f32; N]; W];
        for w in 0..W {
            for i in 0..N {
                out[w][i] = _mm512_reduce_add_ps(acc[w][i]);
            }
        }
        out
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
                // `d·d₈` of the blocks' values 16..32 when they have their own.
                let mut ddh = [[[0f32; GROUP]; N]; W];
                let split = <B::Scales as GroupScales>::SPLIT;
                let with_m = <B::Scales as GroupScales>::WITH_M;
                let gs: [*const B::Scales; W] =
                    std::array::from_fn(|w| mat.scales.as_ptr().add(js[w] * (kbp / GROUP)));
                let ints: [*const B::Ints; W] =
                    std::array::from_fn(|w| mat.ints.as_ptr().add(js[w] * kb));
                let q8s: [*const Q8Ints; N] =
                    std::array::from_fn(|i| acts.qs.as_ptr().add(rows[i] * kb));
                for g in (0..kb).step_by(GROUP) {
                    let dm: [(__m256, __m256); W] =
                        std::array::from_fn(|w| (*gs[w].add(g / GROUP)).load());
                    let dh: [__m256; W] = std::array::from_fn(|w| {
                        if split { (*gs[w].add(g / GROUP)).load_high() } else { dm[w].0 }
                    });
                    for i in 0..N {
                        let da = _mm256_loadu_ps(acts.d.as_ptr().add(rows[i] * kbp + g));
                        for w in 0..W {
                            _mm256_storeu_ps(dd[w][i].as_mut_ptr(), _mm256_mul_ps(dm[w].0, da));
                            if split {
                                _mm256_storeu_ps(ddh[w][i].as_mut_ptr(), _mm256_mul_ps(dh[w], da));
                            }
                        }
                        if with_m {
                            let sa = _mm256_loadu_ps(acts.s.as_ptr().add(rows[i] * kbp + g));
                            for w in 0..W {
                                acc[w][i] = _mm256_fmadd_ps(dm[w].1, sa, acc[w][i]);
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
                                // Lanes 0..4 sum values 0..16, lanes 4..8 values 16..32.
                                let scale = if split {
                                    _mm256_insertf128_ps::<1>(
                                        _mm256_castps128_ps256(_mm_broadcast_ss(&dd[w][i][b - g])),
                                        _mm_broadcast_ss(&ddh[w][i][b - g]),
                                    )
                                } else {
                                    _mm256_broadcast_ss(&dd[w][i][b - g])
                                };
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

    /// Random GGUF bytes of `n·k/VALUES` blocks of `B`: f16 scales in a sane
    /// range where the layout has them, every other byte random.
    fn random_blocks<B: WeightBlock>(rng: &mut impl Rng, n: usize, k: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..n * k / B::VALUES {
            let mut blk: Vec<u8> = (0..B::BYTES).map(|_| rng.gen()).collect();
            let d = half::f16::from_f32(rng.gen_range(0.001..0.05)).to_le_bytes();
            blk[..2].copy_from_slice(&d);
            if matches!(B::NAME, "Q4_1" | "Q5_1") {
                let m = half::f16::from_f32(rng.gen_range(-0.2..0.0)).to_le_bytes();
                blk[2..4].copy_from_slice(&m);
            }
            if matches!(B::NAME, "Q4_K" | "Q5_K") {
                // d is per 6-bit scale unit, dmin per 6-bit min unit.
                let d = half::f16::from_f32(rng.gen_range(0.0001..0.002)).to_le_bytes();
                let dmin = half::f16::from_f32(rng.gen_range(0.0..0.005)).to_le_bytes();
                blk[..2].copy_from_slice(&d);
                blk[2..4].copy_from_slice(&dmin);
            }
            if B::NAME == "Q6_K" {
                let d = half::f16::from_f32(rng.gen_range(0.0001..0.001)).to_le_bytes();
                // Q6_K starts with payload bytes, and keeps d at its end.
                blk[0] = rng.gen();
                blk[1] = rng.gen();
                blk[208..210].copy_from_slice(&d);
            }
            bytes.extend_from_slice(&blk);
        }
        bytes
    }

    /// GGUF's own dequantisation of one block, written from the format's
    /// definition (ggml's `dequantize_row_*`, not through this module's
    /// payloads and scales).
    fn gguf_dequant(name: &str, c: &[u8]) -> Vec<f32> {
        let f = |i: usize| half::f16::from_le_bytes([c[i], c[i + 1]]).to_f32();
        if name == "Q6_K" {
            let d = f(208);
            let mut y = vec![0f32; 256];
            for n in 0..2 {
                let (ql, qh, sc) = (&c[64 * n..], &c[128 + 32 * n..], &c[192 + 8 * n..]);
                let sc = |i: usize| f32::from(sc[i] as i8);
                for l in 0..32 {
                    let is = l / 16;
                    let q = |v: u8| f32::from(v as i8 - 32);
                    let q1 = q((ql[l] & 0xf) | ((qh[l] & 3) << 4));
                    let q2 = q((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4));
                    let q3 = q((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                    let q4 = q((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                    y[128 * n + l] = d * sc(is) * q1;
                    y[128 * n + l + 32] = d * sc(is + 2) * q2;
                    y[128 * n + l + 64] = d * sc(is + 4) * q3;
                    y[128 * n + l + 96] = d * sc(is + 6) * q4;
                }
            }
            return y;
        }
        if name == "Q4_K" || name == "Q5_K" {
            let (d, dmin, q) = (f(0), f(2), &c[4..16]);
            // ggml's get_scale_min_k4.
            let scale_min = |j: usize| {
                if j < 4 {
                    (q[j] & 63, q[j + 4] & 63)
                } else {
                    (
                        (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
                        (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
                    )
                }
            };
            let (qh, ql) = if name == "Q5_K" {
                (&c[16..48], &c[48..176])
            } else {
                (&c[0..0], &c[16..144])
            };
            let mut out = Vec::with_capacity(256);
            for chunk in 0..4 {
                let qs = &ql[32 * chunk..32 * chunk + 32];
                for half in 0..2 {
                    let is = 2 * chunk + half;
                    let (sc, m) = scale_min(is);
                    let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
                    for l in 0..32 {
                        let mut u = (qs[l] >> (4 * half)) & 0xf;
                        if !qh.is_empty() && qh[l] & (1 << is) != 0 {
                            u += 16;
                        }
                        out.push(d1 * f32::from(u) - m1);
                    }
                }
            }
            return out;
        }
        let mut out = vec![0f32; BLOCK];
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
        let shapes = if B::VALUES == BLOCK {
            [(37, 96), (9, 544)]
        } else {
            // 8 blocks (one group), 24 (three).
            [(37, 256), (9, 768)]
        };
        for (n, k) in shapes {
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
        check_type::<BlockQ4K>(5);
        check_type::<BlockQ5K>(6);
        check_type::<BlockQ6K>(8);
    }

    /// The SIMD paths give the portable path's integer sums: results agree
    /// to float rounding, and a row's result is the same bits alone, in a
    /// batch, and in every tile shape (rows of 9 blocks: a whole group of
    /// scales and a partial one).
    fn check_paths_agree<B: WeightBlock>(seed: u64) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        // Rows of 9 blocks (a whole group of scales and a partial one), or
        // for a k-quant 16 (two groups).
        let (n, k) = (20, if B::VALUES == BLOCK { 288 } else { 512 });
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
            #[cfg(target_arch = "x86_64")]
            {
                let by = |s: Simd| paths.iter().find(|p| p.simd == s);
                if let (Some(a), Some(v)) = (by(Simd::Avx2), by(Simd::AvxVnni)) {
                    // Same integer sums, same float operations: bit-identical.
                    assert_eq!(
                        a.dot_tiles::<1, 4>([j], &acts, rows),
                        v.dot_tiles::<1, 4>([j], &acts, rows)
                    );
                }
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
        check_paths_agree::<BlockQ4K>(16);
        check_paths_agree::<BlockQ5K>(17);
        check_paths_agree::<BlockQ6K>(18);
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

    /// candle's quantiser and dequantiser (an implementation of GGUF's types
    /// independent of this module's) against this module's view of the same
    /// bytes, for every type it takes.
    #[test]
    fn every_type_dequantises_as_candle_does() {
        use candle_core::quantized::QTensor;
        use candle_core::{Device, Tensor};
        let dev = Device::Cpu;
        let (n, k) = (8, 512);
        let w = Tensor::randn(0f32, 0.5, (n, k), &dev).unwrap();
        for dt in ALL_TYPES {
            let q = QTensor::quantize(&w, dt).unwrap();
            let ours = cpu_matrix_of(dt, &q.data().unwrap(), n, k)
                .unwrap()
                .unwrap()
                .dequantize();
            let theirs: Vec<f32> = q
                .dequantize(&dev)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert_eq!(ours, theirs, "{dt:?}");
        }
    }

    #[test]
    fn repacked_shapes_are_left_to_candle() {
        // Not whole 256-value super-blocks, or not whole 16-row tiles.
        assert!(!candle_repacks(GgmlDType::Q8_0, 49152, 576));
        assert!(!candle_repacks(GgmlDType::Q4K, 40, 256));
        assert!(candle_repacks(GgmlDType::Q4K, 9728, 2560));
        assert!(candle_repacks(GgmlDType::Q6K, 32, 512));
        assert!(!candle_repacks(GgmlDType::Q4_1, 9728, 2560));
        assert!(!candle_repacks(GgmlDType::Q5K, 9728, 2560));
        if std::env::var_os(TYPES_ENV).is_none() {
            let bytes = vec![0u8; 16 * 8 * 34];
            let repacked = candle_repacks(GgmlDType::Q8_0, 16, 256);
            assert_eq!(
                cpu_matrix(GgmlDType::Q8_0, &bytes, 16, 256).is_none(),
                repacked
            );
            assert!(cpu_matrix(GgmlDType::Q8_0, &bytes[..8 * 34], 1, 256).is_some());
        }
    }

    #[test]
    fn kernel_types_take_defaults_all_or_a_list_and_name_a_bad_one() {
        assert_eq!(kernel_types(None).unwrap(), None);
        assert_eq!(kernel_types(Some(" ")).unwrap(), None);
        assert_eq!(kernel_types(Some("all")).unwrap(), Some(ALL_TYPES.to_vec()));
        assert_eq!(
            kernel_types(Some("q4_k, Q6_K")).unwrap(),
            Some(vec![GgmlDType::Q4K, GgmlDType::Q6K])
        );
        let err = kernel_types(Some("Q4_K,IQ2_XS")).unwrap_err().to_string();
        assert!(
            err.contains(TYPES_ENV) && err.contains("IQ2_XS") && err.contains("Q6_K"),
            "{err}"
        );
    }

    #[test]
    fn joule_simd_names_a_kernel_this_cpu_has() {
        let fastest = *Simd::available().last().unwrap();
        assert_eq!(Simd::chosen(None).unwrap(), fastest);
        assert_eq!(Simd::chosen(Some("")).unwrap(), fastest);
        for simd in Simd::available() {
            assert_eq!(Simd::chosen(Some(simd.name())).unwrap(), simd);
        }
        let err = Simd::chosen(Some("avx9000")).unwrap_err().to_string();
        assert!(
            err.contains("JOULE_SIMD") && err.contains("avx9000") && err.contains("portable"),
            "{err}"
        );
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
        assert!(cpu_matrix(GgmlDType::F16, &[], 1, 256).is_none());
        assert!(cpu_matrix_of(GgmlDType::F16, &[], 1, 256).is_none());
        assert!(cpu_matrix_of(GgmlDType::Q4K, &[0u8; 144], 1, 256)
            .unwrap()
            .is_ok());
        // A k-quant row is whole super-blocks of 256 values.
        let err = QuantMatrix::<BlockQ4K>::from_gguf_bytes(&[0u8; 144], 1, 128).unwrap_err();
        assert!(err.to_string().contains("256"), "{err}");
        assert!(QuantMatrix::<BlockQ5K>::from_gguf_bytes(&[0u8; 175], 1, 256).is_err());
        assert!(cpu_matrix_of(GgmlDType::Q6K, &[0u8; 210], 1, 256)
            .unwrap()
            .is_ok());
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
