//! Fused attention on the CPU over the `SeqState` caches read in place
//! (`[n_kv, len, d]` views of `[n_kv, capacity, d]` buffers), run over
//! candle's worker pool:
//!
//! - [`decode`]: one new query per sequence for every sequence of a step,
//!   each against its own keys and values (work items: (sequence, key/value
//!   head) pairs);
//! - [`prefill`]: `t ≥ 1` new queries of one sequence (a prompt or a block of
//!   one) with the causal mask (work items: (key/value head, tile of
//!   queries) pairs).
//!
//! Both hand their query rows to one routine (`attend_rows`) that reads each
//! key and value row once for all the rows of a work item (the query heads
//! sharing a key/value head, and in a prompt the tile's queries that see that
//! key). It is flash-style: keys go in blocks of 256 (at absolute positions)
//! with an online softmax, so a worker holds one block of scores per row and
//! the rows' running maxima, sums and weighted sums of values in its cache,
//! whatever the context length, and allocates nothing per key. The arithmetic
//! of one query row (its dot products, its blocks, their maxima, exponentials,
//! sums and rescalings, and the order values are added in) depends only on
//! that row and the keys it sees, never on the other rows, the tile or the
//! work item: a query at position `p` gets bit-for-bit the same
//! output in a prompt of any length, chunked at any block boundary, or as a
//! one-token decode step. The prefix cache (prompts fed in blocks) and
//! continuous batching rely on that. The same function as
//! `nn::attention_candle` (softcap and sliding window included), which the
//! tests compare against.
//!
//! Keys and values are f32, or f16 (`[llm] kv_cache = "f16"`): a work item
//! converts each block of f16 rows it reads into f32 in its own buffer
//! (exactly), then runs the same f32 arithmetic, so the rules above hold for
//! f16 caches too and an f16 cache gives the f32 result of its rounded keys
//! and values.

use crate::inference::kernels::AttnParams;
use anyhow::{bail, Result};
use candle_core::{CpuStorage, DType, Storage, Tensor};
use half::{f16, slice::HalfFloatSliceExt};

/// One sequence's keys and values (`[n_kv, len, head_dim]` and `[n_kv, len,
/// v_dim]`, this step's included; rows of one head contiguous).
pub struct SeqKv<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
}

/// The elements of a borrowed key or value storage: f32, or f16 (`[llm]
/// kv_cache = "f16"`).
#[derive(Clone, Copy)]
enum Elems<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

/// A borrowed `[n, len, d]` key or value storage: element (h, i, j) at
/// `off + h·hs + i·d + j`.
struct KvView<'a> {
    data: Elems<'a>,
    off: usize,
    head_stride: usize,
    len: usize,
}

impl KvView<'_> {
    /// Rows `lo..hi` of head `h` as f32 (rows of `d`): the storage itself
    /// when it is f32; f16 rows converted into `buf` (exactly: every f16 is
    /// an f32), so a row's arithmetic is the same whichever way it came.
    fn rows_f32<'b>(
        &'b self,
        h: usize,
        (lo, hi): (usize, usize),
        d: usize,
        buf: &'b mut Vec<f32>,
    ) -> HeadView<'b> {
        match self.data {
            Elems::F32(data) => HeadView {
                data,
                off: self.off,
                head_stride: self.head_stride,
                first: 0,
            },
            Elems::F16(data) => {
                let s = self.off + h * self.head_stride + lo * d;
                let n = hi.saturating_sub(lo) * d;
                buf.resize(n, 0.0);
                f16_to_f32(&data[s..s + n], &mut buf[..n]);
                HeadView {
                    data: &buf[..n],
                    off: 0,
                    head_stride: 0,
                    first: lo,
                }
            }
        }
    }
}

/// `dst[i] = src[i]` as f32 (exact): eight values per F16C instruction
/// where the build has it, `half`'s conversion for the rest.
#[inline]
fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len());
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "f16c",
        target_feature = "avx"
    ))]
    {
        use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
        while done + 8 <= src.len() {
            // SAFETY: `done + 8 ≤ len` for both slices (the assert); f16 is 2 bytes.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(done) as *const __m128i);
                _mm256_storeu_ps(dst.as_mut_ptr().add(done), _mm256_cvtph_ps(h));
            }
            done += 8;
        }
    }
    src[done..].convert_to_f32_slice(&mut dst[done..]);
}

/// f32 rows of one head: row `i` (`i ≥ first`) of head `h` at `off + h·hs +
/// (i − first)·d`.
struct HeadView<'a> {
    data: &'a [f32],
    off: usize,
    head_stride: usize,
    first: usize,
}

impl HeadView<'_> {
    fn row(&self, h: usize, i: usize, d: usize) -> &[f32] {
        self.rows(h, i, 1, d)
    }

    /// Rows `i..` of head `h`, as one slice of `m` rows.
    fn rows(&self, h: usize, i: usize, m: usize, d: usize) -> &[f32] {
        let s = self.off + h * self.head_stride + (i - self.first) * d;
        &self.data[s..s + m * d]
    }
}

/// Lanes of the vectorised loops (one AVX2 register of f32).
const LANES: usize = 8;

/// Sum of eight lanes in a fixed tree order (the halves of an AVX register,
/// then adjacent pairs, as the SIMD path's `hadd`s do).
#[inline(always)]
fn reduce_sum(a: [f32; LANES]) -> f32 {
    let s4 = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let s2 = [s4[0] + s4[1], s4[2] + s4[3]];
    s2[0] + s2[1]
}

/// Dot products of `N` query rows (`q`: `N` consecutive rows of `k.len()`)
/// with one key row: eight fused multiply-add lanes per row, then
/// [`reduce_sum`] and the tail. Each row's result depends on that row and the
/// key only, whatever `N` is.
#[inline(always)]
fn dots<const N: usize>(q: &[f32], k: &[f32]) -> [f32; N] {
    let d = k.len();
    let full = d / LANES * LANES;
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    if N == 4 {
        assert!(q.len() >= 4 * d);
        // SAFETY: the assert and `full ≤ d` keep every load inside `q` and `k`.
        let body = unsafe { simd::dots4(q.as_ptr(), d, k.as_ptr(), full) };
        let mut out = [0f32; N];
        for (n, o) in out.iter_mut().enumerate() {
            let mut tail = 0f32;
            for j in full..d {
                tail = q[n * d + j].mul_add(k[j], tail);
            }
            *o = body[n] + tail;
        }
        return out;
    }
    let mut acc = [[0f32; LANES]; N];
    for c in (0..full).step_by(LANES) {
        let kc: &[f32; LANES] = k[c..c + LANES].try_into().expect("lane chunk");
        for (n, a) in acc.iter_mut().enumerate() {
            let qc: &[f32; LANES] = q[n * d + c..n * d + c + LANES]
                .try_into()
                .expect("lane chunk");
            for l in 0..LANES {
                a[l] = qc[l].mul_add(kc[l], a[l]);
            }
        }
    }
    let mut out = [0f32; N];
    for (n, o) in out.iter_mut().enumerate() {
        let mut tail = 0f32;
        for j in full..d {
            tail = q[n * d + j].mul_add(k[j], tail);
        }
        *o = reduce_sum(acc[n]) + tail;
    }
    out
}

/// [`dots`] of four rows in AVX2: the same fused multiply-adds per lane and
/// the same [`reduce_sum`] tree, so each row's result equals the portable one.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "avx2",
    target_feature = "fma"
))]
mod simd {
    use std::arch::x86_64::*;

    /// The reduced lane sums (tail excluded) of rows `q`, `q + d`, `q + 2d`,
    /// `q + 3d` with `k` over the first `full` (a multiple of 8) values.
    ///
    /// # Safety
    /// `q` must hold `4·d` values, `k` `d`, and `full ≤ d`.
    #[inline(always)]
    pub unsafe fn dots4(q: *const f32, d: usize, k: *const f32, full: usize) -> [f32; 4] {
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut c = 0;
        while c < full {
            let kc = _mm256_loadu_ps(k.add(c));
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(c)), kc, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(d + c)), kc, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(2 * d + c)), kc, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(3 * d + c)), kc, a3);
            c += 8;
        }
        let halves = |a: __m256| _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        let r = _mm_hadd_ps(
            _mm_hadd_ps(halves(a0), halves(a1)),
            _mm_hadd_ps(halves(a2), halves(a3)),
        );
        let mut out = [0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), r);
        out
    }

    /// `super::exp_neg(x − mx)` of each chunk's eight values in place, and
    /// their lane-wise sums (the portable loop's operations, lane for lane).
    ///
    /// # Safety
    /// Every chunk must hold eight values.
    #[inline(always)]
    pub unsafe fn exp_sum(chunks: &mut std::slice::ChunksExactMut<'_, f32>, mx: f32) -> [f32; 8] {
        use super::{EXP_MIN, EXP_POLY, LN2_HI, LN2_LO, ROUND};
        let m = _mm256_set1_ps(mx);
        let lo = _mm256_set1_ps(EXP_MIN);
        let l2e = _mm256_set1_ps(std::f32::consts::LOG2_E);
        let round = _mm256_set1_ps(ROUND);
        let round_bits = _mm256_set1_epi32(ROUND.to_bits() as i32);
        let bias = _mm256_set1_epi32(127);
        let (hi2, lo2) = (_mm256_set1_ps(LN2_HI), _mm256_set1_ps(LN2_LO));
        let mut sum = _mm256_setzero_ps();
        for c in chunks {
            let x = _mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m);
            // max(EXP_MIN, x) keeps x when either is NaN, as the portable test does.
            let x = _mm256_max_ps(lo, x);
            let t = _mm256_add_ps(_mm256_mul_ps(x, l2e), round);
            let n = _mm256_sub_ps(t, round);
            let r = _mm256_fnmadd_ps(n, lo2, _mm256_fnmadd_ps(n, hi2, x));
            let mut p = _mm256_set1_ps(EXP_POLY[0]);
            for k in &EXP_POLY[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*k));
            }
            let ni = _mm256_sub_epi32(_mm256_castps_si256(t), round_bits);
            let scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, bias), 23));
            let e = _mm256_mul_ps(p, scale);
            _mm256_storeu_ps(c.as_mut_ptr(), e);
            sum = _mm256_add_ps(sum, e);
        }
        let mut out = [0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), sum);
        out
    }

    /// [`super::dots`] of four rows with two keys `k0`, `k1` of `d` (a multiple of 8).
    ///
    /// # Safety
    /// `q` must hold `4·d` values, `k0` and `k1` `d` each.
    #[inline(always)]
    pub unsafe fn dots4x2(
        q: *const f32,
        d: usize,
        k0: *const f32,
        k1: *const f32,
    ) -> [[f32; 2]; 4] {
        let z = _mm256_setzero_ps();
        let mut a = [z; 4];
        let mut b = [z; 4];
        let mut c = 0;
        while c < d {
            let x0 = _mm256_loadu_ps(k0.add(c));
            let x1 = _mm256_loadu_ps(k1.add(c));
            for r in 0..4 {
                let qr = _mm256_loadu_ps(q.add(r * d + c));
                a[r] = _mm256_fmadd_ps(qr, x0, a[r]);
                b[r] = _mm256_fmadd_ps(qr, x1, b[r]);
            }
            c += 8;
        }
        let halves = |a: __m256| _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        let ra = _mm_hadd_ps(
            _mm_hadd_ps(halves(a[0]), halves(a[1])),
            _mm_hadd_ps(halves(a[2]), halves(a[3])),
        );
        let rb = _mm_hadd_ps(
            _mm_hadd_ps(halves(b[0]), halves(b[1])),
            _mm_hadd_ps(halves(b[2]), halves(b[3])),
        );
        let (mut oa, mut ob) = ([0f32; 4], [0f32; 4]);
        _mm_storeu_ps(oa.as_mut_ptr(), ra);
        _mm_storeu_ps(ob.as_mut_ptr(), rb);
        [
            [oa[0], ob[0]],
            [oa[1], ob[1]],
            [oa[2], ob[2]],
            [oa[3], ob[3]],
        ]
    }

    /// Sixteen columns of `super::add4`: accumulators of four rows (row `r`
    /// at `acc + r·vd`) held in registers over the `m` value rows.
    ///
    /// # Safety
    /// `acc` must hold `3·vd + 16` values, `vs` `(m − 1)·vd + 16`, `ws` `3·stride + m`.
    #[inline(always)]
    pub unsafe fn add4_slab(
        acc: *mut f32,
        vd: usize,
        ws: *const f32,
        stride: usize,
        vs: *const f32,
        m: usize,
    ) {
        let mut lo = [_mm256_setzero_ps(); 4];
        let mut hi = [_mm256_setzero_ps(); 4];
        for r in 0..4 {
            lo[r] = _mm256_loadu_ps(acc.add(r * vd));
            hi[r] = _mm256_loadu_ps(acc.add(r * vd + 8));
        }
        for j in 0..m {
            let v0 = _mm256_loadu_ps(vs.add(j * vd));
            let v1 = _mm256_loadu_ps(vs.add(j * vd + 8));
            for r in 0..4 {
                let w = _mm256_broadcast_ss(&*ws.add(r * stride + j));
                lo[r] = _mm256_fmadd_ps(w, v0, lo[r]);
                hi[r] = _mm256_fmadd_ps(w, v1, hi[r]);
            }
        }
        for r in 0..4 {
            _mm256_storeu_ps(acc.add(r * vd), lo[r]);
            _mm256_storeu_ps(acc.add(r * vd + 8), hi[r]);
        }
    }
}

/// Constants of [`exp_neg`].
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// `1.5 · 2^23`: adding it rounds to an integer (nearest, even) held in the
/// low bits of the float.
const ROUND: f32 = 12_582_912.0;
/// The lowest argument (so that `2^n` stays a normal float).
const EXP_MIN: f32 = -87.0;
/// Taylor coefficients of `e^r`, highest degree first.
const EXP_POLY: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// `exp(x)` for the softmax (`x ≤ 0`, the score minus its row's maximum):
/// `2^n · e^r` with `n = round(x·log2 e)`, `|r| ≤ ln 2 / 2` and `e^r` by its
/// Taylor series to degree 7 (relative error about 1e-7). Plain arithmetic,
/// the same operations as the SIMD path's `simd::exp8`, so every element gets
/// the same result in either.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    let x = if EXP_MIN > x { EXP_MIN } else { x };
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    // 2^n (n ≥ −126) in the exponent bits; n is in t's low bits.
    let ni = t.to_bits().wrapping_sub(ROUND.to_bits());
    p * f32::from_bits(ni.wrapping_add(127) << 23)
}

/// Online softmax over one block of a row's scores, in place: soft-caps
/// them, takes the new running maximum `m = max(m_prev, max of the block)`,
/// replaces each score `s` by `exp(s − m)` and returns `(m, Σ exp(s − m))`.
/// Maximum and sum run in eight lanes from the row's first key in the block.
#[inline(always)]
fn exp_block(sc: &mut [f32], softcap: Option<f32>, m_prev: f32) -> (f32, f32) {
    if let Some(cap) = softcap {
        sc.iter_mut().for_each(|x| *x = (*x / cap).tanh() * cap);
    }
    let mut mx = [f32::NEG_INFINITY; LANES];
    let mut chunks = sc.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            mx[l] = mx[l].max(c[l]);
        }
    }
    let mx = chunks
        .remainder()
        .iter()
        .fold(mx.iter().fold(m_prev, |a, &b| a.max(b)), |a, &b| a.max(b));
    let mut chunks = sc.chunks_exact_mut(LANES);
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    // SAFETY: each chunk holds LANES values.
    let sum = unsafe { simd::exp_sum(&mut chunks, mx) };
    #[cfg(not(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    )))]
    let sum = {
        let mut sum = [0f32; LANES];
        for c in &mut chunks {
            for l in 0..LANES {
                c[l] = exp_neg(c[l] - mx);
                sum[l] += c[l];
            }
        }
        sum
    };
    let mut tail = 0f32;
    for x in chunks.into_remainder() {
        *x = exp_neg(*x - mx);
        tail += *x;
    }
    (mx, reduce_sum(sum) + tail)
}

/// Keys per block of the online softmax. Blocks start at multiples of
/// `KEY_BLOCK` in absolute key positions, so a row meets the same blocks
/// however its work item is formed.
const KEY_BLOCK: usize = 256;

/// Reusable buffers of one worker.
#[derive(Default)]
struct Scratch {
    /// One block of scores per row.
    scores: Vec<f32>,
    /// Per row: the running weighted sum of values, maximum and sum of weights.
    acc: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    /// Query rows of a prompt tile.
    q: Vec<f32>,
    /// One block of f16 keys and values as f32.
    kbuf: Vec<f32>,
    vbuf: Vec<f32>,
}

/// Attention of `n` query rows that share one key/value head (`q`: `n`
/// consecutive rows of `hd`), row `r` seeing keys `lo(r)..hi(r)` of `h` in
/// `k`, `v`; both bounds must be non-decreasing in `r` and every range
/// non-empty. Writes row `r`'s output (`vd` values) to `out[r·vd..]`.
///
/// Flash-style: keys go in blocks of [`KEY_BLOCK`] with an online softmax
/// (per row a running maximum, sum of weights and weighted sum of values,
/// rescaled when the maximum grows), so the scores held are one block per
/// row whatever the prompt's length, and an f16 cache is converted one block
/// at a time. Within a block rows go in groups of four: the keys all four
/// see (most of them) are read once for the group, each key row for two
/// keys' scores at a time and each value row into accumulators held in
/// registers; the few keys only some of them see go row by row. Either way a
/// row's scores are [`dots`] of its query and a key, its blocks are those of
/// its own key range, and its values are added in key order, so each row's
/// arithmetic depends on its query and its keys only (see the file's doc
/// comment).
#[allow(clippy::too_many_arguments)]
fn attend_rows(
    q: &[f32],
    n: usize,
    range: impl Fn(usize) -> (usize, usize),
    (k, v, h): (&KvView<'_>, &KvView<'_>, usize),
    (hd, vd): (usize, usize),
    p: AttnParams,
    s: &mut Scratch,
    out: &mut [f32],
) {
    let (kmin, _) = range(0);
    let (_, kmax) = range(n - 1);
    let Scratch {
        scores,
        acc,
        max,
        sum,
        kbuf,
        vbuf,
        ..
    } = s;
    // Every score a row reads is written first (pass 1): no clearing.
    if scores.len() < n * KEY_BLOCK {
        scores.resize(n * KEY_BLOCK, 0.0);
    }
    acc.clear();
    acc.resize(n * vd, 0.0);
    max.clear();
    max.resize(n, f32::NEG_INFINITY);
    sum.clear();
    sum.resize(n, 0.0);
    let mut b0 = kmin / KEY_BLOCK * KEY_BLOCK;
    while b0 < kmax {
        let b1 = b0 + KEY_BLOCK;
        // Row r's keys in this block (empty for rows that see none of it).
        let range = |r: usize| {
            let (lo, hi) = range(r);
            (lo.max(b0), hi.min(b1).max(lo.max(b0)))
        };
        let keys = (kmin.max(b0), kmax.min(b1));
        let kb = k.rows_f32(h, keys, hd, kbuf);
        let vb = v.rows_f32(h, keys, vd, vbuf);
        attend_block(
            q,
            n,
            &range,
            b0,
            (&kb, &vb, h),
            (hd, vd),
            p,
            (&mut scores[..n * KEY_BLOCK], acc, max, sum),
        );
        b0 = b1;
    }
    for r in 0..n {
        let inv = 1.0 / sum[r];
        out[r * vd..(r + 1) * vd]
            .iter_mut()
            .zip(&acc[r * vd..(r + 1) * vd])
            .for_each(|(o, &a)| *o = a * inv);
    }
}

/// One key block of [`attend_rows`]: row `r` sees keys `range(r)` (inside
/// the block starting at `b0`; empty ranges allowed), scored into
/// `sc[r·KEY_BLOCK + j − b0]`, then folded into the row's running maximum,
/// sum and values.
#[allow(clippy::too_many_arguments)]
fn attend_block(
    q: &[f32],
    n: usize,
    range: &dyn Fn(usize) -> (usize, usize),
    b0: usize,
    (k, v, h): (&HeadView<'_>, &HeadView<'_>, usize),
    (hd, vd): (usize, usize),
    p: AttnParams,
    (sc, acc, max, sum): (&mut [f32], &mut [f32], &mut [f32], &mut [f32]),
) {
    const S: usize = KEY_BLOCK;
    // The keys every row of the group at `g` sees (`lo ≥ hi` when none).
    let common = |g: usize| (range(g + 3).0, range(g).1);
    // Pass 1: scores.
    let one_row = |sc: &mut [f32], r: usize, keys: std::ops::Range<usize>| {
        for j in keys {
            let [d] = dots::<1>(&q[r * hd..(r + 1) * hd], k.row(h, j, hd));
            sc[r * S + j - b0] = d * p.scale;
        }
    };
    for g in (0..n).step_by(4) {
        if g + 4 > n || common(g).0 >= common(g).1 {
            for r in g..n.min(g + 4) {
                let (lo, hi) = range(r);
                one_row(sc, r, lo..hi);
            }
            continue;
        }
        let (clo, chi) = common(g);
        for r in g..g + 4 {
            let (lo, hi) = range(r);
            one_row(sc, r, lo..clo);
            one_row(sc, r, chi..hi);
        }
        let qg = &q[g * hd..(g + 4) * hd];
        let mut j = clo;
        while j + 2 <= chi {
            let d = dots4x2(qg, k.row(h, j, hd), k.row(h, j + 1, hd));
            for (i, pair) in d.iter().enumerate() {
                sc[(g + i) * S + j - b0] = pair[0] * p.scale;
                sc[(g + i) * S + j + 1 - b0] = pair[1] * p.scale;
            }
            j += 2;
        }
        if j < chi {
            let d = dots::<4>(qg, k.row(h, j, hd));
            for (i, x) in d.iter().enumerate() {
                sc[(g + i) * S + j - b0] = x * p.scale;
            }
        }
    }
    // Pass 2: each row's online softmax over its keys of the block; what
    // the row had so far is rescaled to the new maximum.
    for r in 0..n {
        let (lo, hi) = range(r);
        if lo >= hi {
            continue;
        }
        let row = &mut sc[r * S + lo - b0..r * S + hi - b0];
        let (m, block_sum) = exp_block(row, p.softcap, max[r]);
        if m != max[r] && max[r] != f32::NEG_INFINITY {
            let c = exp_neg(max[r] - m);
            sum[r] *= c;
            acc[r * vd..(r + 1) * vd].iter_mut().for_each(|a| *a *= c);
        }
        max[r] = m;
        sum[r] += block_sum;
    }
    // Pass 3: weighted sums of values, each row's in key order.
    let add_row = |acc: &mut [f32], r: usize, keys: std::ops::Range<usize>| {
        let a = &mut acc[r * vd..(r + 1) * vd];
        for j in keys {
            let w = sc[r * S + j - b0];
            a.iter_mut()
                .zip(v.row(h, j, vd))
                .for_each(|(a, &x)| *a = w.mul_add(x, *a));
        }
    };
    for g in (0..n).step_by(4) {
        if g + 4 > n || common(g).0 >= common(g).1 {
            for r in g..n.min(g + 4) {
                let (lo, hi) = range(r);
                add_row(acc, r, lo..hi);
            }
            continue;
        }
        let (clo, chi) = common(g);
        for r in g..g + 4 {
            add_row(acc, r, range(r).0..clo);
        }
        let w0 = g * S + clo - b0;
        let ws = &sc[w0..w0 + 3 * S + (chi - clo)];
        let vs = v.rows(h, clo, chi - clo, vd);
        add4(&mut acc[g * vd..(g + 4) * vd], vd, ws, S, vs, chi - clo);
        for r in g..g + 4 {
            add_row(acc, r, chi..range(r).1);
        }
    }
}

/// [`dots`] of four rows with two keys.
#[inline(always)]
fn dots4x2(q: &[f32], k0: &[f32], k1: &[f32]) -> [[f32; 2]; 4] {
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    if k0.len() % LANES == 0 && k1.len() == k0.len() {
        assert!(q.len() >= 4 * k0.len());
        // SAFETY: the assert and the equal lengths keep every load inside the slices.
        return unsafe { simd::dots4x2(q.as_ptr(), k0.len(), k0.as_ptr(), k1.as_ptr()) };
    }
    let (a, b) = (dots::<4>(q, k0), dots::<4>(q, k1));
    [[a[0], b[0]], [a[1], b[1]], [a[2], b[2]], [a[3], b[3]]]
}

/// Adds `Σ_j w[r][j] · v_j` to four rows of accumulators (`acc`: 4 rows of
/// `vd`) over `m` value rows (`vs`: `m` rows of `vd`), weights of row `r` at
/// `ws[r·stride..]`: per element the same fused multiply-adds in key order
/// as one row at a time.
fn add4(acc: &mut [f32], vd: usize, ws: &[f32], stride: usize, vs: &[f32], m: usize) {
    assert!(acc.len() >= 4 * vd && vs.len() >= m * vd && ws.len() >= 3 * stride + m);
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    while done + 16 <= vd {
        // SAFETY: the assert bounds every row; `done + 16 ≤ vd`.
        unsafe {
            simd::add4_slab(
                acc.as_mut_ptr().add(done),
                vd,
                ws.as_ptr(),
                stride,
                vs.as_ptr().add(done),
                m,
            )
        };
        done += 16;
    }
    if done < vd {
        for r in 0..4 {
            let a = &mut acc[r * vd + done..(r + 1) * vd];
            for j in 0..m {
                let w = ws[r * stride + j];
                a.iter_mut()
                    .zip(&vs[j * vd + done..(j + 1) * vd])
                    .for_each(|(a, &x)| *a = w.mul_add(x, *a));
            }
        }
    }
}

/// The layout of one borrowed key or value tensor: (start offset, head
/// stride, len, row length).
type Shape = (usize, usize, usize, usize);

/// Whether `t` is an f32 or f16 `[n, len, d]` tensor with each head's rows contiguous.
fn heads_contiguous(t: &Tensor) -> bool {
    let st = t.stride();
    matches!(t.dtype(), DType::F32 | DType::F16)
        && t.rank() == 3
        && st[2] == 1
        && st[1] == t.dims()[2]
}

/// Borrow `t`'s storage (f32 or f16 on the CPU, each head's rows contiguous).
fn borrow_heads<'a>(
    t: &'a Tensor,
    what: &str,
) -> Result<(impl std::ops::Deref<Target = Storage> + 'a, Shape)> {
    if !matches!(t.dtype(), DType::F32 | DType::F16) {
        bail!(
            "CPU {what} attention needs f32 or f16 keys and values, got {:?}",
            t.dtype()
        );
    }
    let (_, len, d) = t.dims3()?;
    let (guard, layout) = t.storage_and_layout();
    let st = layout.stride();
    if st[2] != 1 || st[1] != d {
        bail!("{what} attention: keys/values of one head must be contiguous (strides {st:?})");
    }
    if !matches!(
        &*guard,
        Storage::Cpu(CpuStorage::F32(_)) | Storage::Cpu(CpuStorage::F16(_))
    ) {
        bail!("CPU {what} attention: keys/values are not f32 or f16 CPU tensors");
    }
    Ok((guard, (layout.start_offset(), st[0], len, d)))
}

/// Views of borrowed storages, each checked to lie inside its storage.
fn views<'a, G: std::ops::Deref<Target = Storage>>(
    guards: &'a [G],
    shapes: &[Shape],
    n_kv: usize,
    what: &str,
) -> Result<Vec<KvView<'a>>> {
    let mut out = Vec::with_capacity(guards.len());
    for (g, &(off, head_stride, len, d)) in guards.iter().zip(shapes) {
        let (data, n) = match &**g {
            Storage::Cpu(CpuStorage::F32(v)) => (Elems::F32(v), v.len()),
            Storage::Cpu(CpuStorage::F16(v)) => (Elems::F16(v), v.len()),
            _ => bail!("{what} attention: keys/values are not f32 or f16 CPU tensors"),
        };
        if n < off + (n_kv - 1) * head_stride + len * d {
            bail!("{what} attention: a key/value view reaches past its storage");
        }
        out.push(KvView {
            data,
            off,
            head_stride,
            len,
        });
    }
    Ok(out)
}

/// Attention of one new query per sequence: `q` `[n_seq, n_head, head_dim]`
/// (normed and rotated) against each sequence's keys and values. Returns
/// `[n_seq, n_head · v_dim]` on the CPU.
pub fn decode(q: &Tensor, kv: &[SeqKv<'_>], p: AttnParams) -> Result<Tensor> {
    let (n_seq, n_head, hd) = q.dims3()?;
    if kv.len() != n_seq || n_seq == 0 {
        bail!(
            "decode attention: {n_seq} queries for {} sequences",
            kv.len()
        );
    }
    let (n_kv, _, khd) = kv[0].k.dims3()?;
    let vd = kv[0].v.dim(2)?;
    if n_kv == 0 || n_head % n_kv != 0 || khd != hd {
        bail!("decode attention: {n_head} heads of {hd} over {n_kv} key/value heads of {khd}/{vd}");
    }
    let rep = n_head / n_kv;
    let qv = q.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    // The guards keep every cache's storage borrowed until the pass ends.
    let mut guards = Vec::with_capacity(2 * n_seq);
    let mut shapes = Vec::with_capacity(2 * n_seq);
    for s in kv {
        let (kn, kl, kd) = s.k.dims3()?;
        let (vn, vl, vdd) = s.v.dims3()?;
        if kn != n_kv || vn != n_kv || kd != hd || vdd != vd || kl != vl || kl == 0 {
            bail!("decode attention: a sequence's keys/values do not match the batch's sizes");
        }
        for t in [s.k, s.v] {
            let (guard, shape) = borrow_heads(t, "decode")?;
            shapes.push(shape);
            guards.push(guard);
        }
    }
    let views = views(&guards, &shapes, n_kv, "decode")?;
    let mut out = vec![0f32; n_seq * n_head * vd];
    let out_ptr = SendPtr(out.as_mut_ptr());
    let items = n_seq * n_kv;
    candle_core::utils::barrier_pool().execute_chunked(items, |range| {
        let mut scratch = Scratch::default();
        let mut o = vec![0f32; rep * vd];
        for item in range {
            let (s, h) = (item / n_kv, item % n_kv);
            let len = views[2 * s].len;
            // Keys at distance < window from the query (at position len − 1).
            let k0 = p.window.map_or(0, |w| len.saturating_sub(w));
            let q0 = (s * n_head + h * rep) * hd;
            attend_rows(
                &qv[q0..q0 + rep * hd],
                rep,
                |_| (k0, len),
                (&views[2 * s], &views[2 * s + 1], h),
                (hd, vd),
                p,
                &mut scratch,
                &mut o,
            );
            let at = (s * n_head + h * rep) * vd;
            // SAFETY: item (s, h) is the only writer of its rep heads of
            // sequence s (rep·vd consecutive values); every index is <
            // n_seq·n_head·vd and `out` outlives the pass.
            unsafe {
                std::ptr::copy_nonoverlapping(o.as_ptr(), out_ptr.get().add(at), rep * vd);
            }
        }
    });
    drop(views);
    drop(guards);
    Ok(Tensor::from_vec(out, (n_seq, n_head * vd), q.device())?)
}

/// Query rows per prompt work item (the tile's queries times the query heads
/// sharing a key/value head): their queries, accumulators and a key or value
/// row stay in the worker's first-level cache.
const TILE_ROWS: usize = 48;

/// Causal attention of one sequence's `t ≥ 1` new queries `q` (`[n_head, t,
/// head_dim]`, normed and rotated; the queries at the last `t` positions of
/// the keys) over its keys and values `k`, `v` (`[n_kv, len, head_dim |
/// v_dim]`, this step's included, read in place when each head's rows are
/// contiguous, as the caches' views are). Query heads sharing a key/value head
/// are consecutive. The semantics of `nn::attention_candle`; returns `[t,
/// n_head · v_dim]` on the CPU.
pub fn prefill(q: &Tensor, k: &Tensor, v: &Tensor, p: AttnParams) -> Result<Tensor> {
    let (n_head, t, hd) = q.dims3()?;
    let (n_kv, len, khd) = k.dims3()?;
    let (vn, vl, vd) = v.dims3()?;
    if n_kv == 0 || n_head % n_kv != 0 || khd != hd || vn != n_kv || vl != len {
        bail!(
            "prompt attention: {n_head} heads of {hd} over {n_kv}/{vn} key/value heads of {khd}/{vd} \
             ({len}/{vl} keys/values)"
        );
    }
    if t > len {
        bail!("prompt attention: {t} queries over only {len} keys");
    }
    if t == 0 {
        return Ok(Tensor::zeros((0, n_head * vd), DType::F32, q.device())?);
    }
    let rep = n_head / n_kv;
    let start = len - t;
    let qv = q.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    // Views whose heads are not row-contiguous are copied once; the caches' are not.
    let (k, v) = (
        if heads_contiguous(k) {
            k.clone()
        } else {
            k.to_dtype(DType::F32)?.contiguous()?
        },
        if heads_contiguous(v) {
            v.clone()
        } else {
            v.to_dtype(DType::F32)?.contiguous()?
        },
    );
    let mut guards = Vec::with_capacity(2);
    let mut shapes = Vec::with_capacity(2);
    for x in [&k, &v] {
        let (guard, shape) = borrow_heads(x, "prompt")?;
        shapes.push(shape);
        guards.push(guard);
    }
    let views = views(&guards, &shapes, n_kv, "prompt")?;
    let tile = (TILE_ROWS / rep).max(1);
    let n_tiles = t.div_ceil(tile);
    let mut out = vec![0f32; t * n_head * vd];
    let out_ptr = SendPtr(out.as_mut_ptr());
    candle_core::utils::barrier_pool().execute_chunked(n_kv * n_tiles, |items| {
        let mut scratch = Scratch::default();
        let mut o = Vec::new();
        for item in items {
            let (h, i0) = (item / n_tiles, item % n_tiles * tile);
            let tl = tile.min(t - i0);
            let n = tl * rep;
            // Rows in (query, head) order, so the bounds grow with the row.
            let mut qt = std::mem::take(&mut scratch.q);
            qt.clear();
            for i in 0..tl {
                for r in 0..rep {
                    let at = ((h * rep + r) * t + i0 + i) * hd;
                    qt.extend_from_slice(&qv[at..at + hd]);
                }
            }
            o.resize(n * vd, 0.0);
            let range = |row: usize| {
                let hi = start + i0 + row / rep + 1;
                (p.window.map_or(0, |w| hi.saturating_sub(w)), hi)
            };
            attend_rows(
                &qt,
                n,
                range,
                (&views[0], &views[1], h),
                (hd, vd),
                p,
                &mut scratch,
                &mut o,
            );
            scratch.q = qt;
            for i in 0..tl {
                let at = (i0 + i) * n_head * vd + h * rep * vd;
                // SAFETY: item (h, tile) is the only writer of its rep heads
                // of its queries (rep·vd consecutive values per query); every
                // index is < t·n_head·vd and `out` outlives the pass.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        o[i * rep * vd..].as_ptr(),
                        out_ptr.get().add(at),
                        rep * vd,
                    );
                }
            }
        }
    });
    drop(views);
    drop(guards);
    Ok(Tensor::from_vec(out, (t, n_head * vd), q.device())?)
}

/// A raw output pointer shared by the pool's workers (each writes its own heads).
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: workers write disjoint ranges; see `decode` and `prefill`.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::models::nn::attention_candle;
    use candle_core::{Device, IndexOp};

    /// Caches as `SeqState` keeps them: `[n_kv, cap, d]` buffers viewed to `len`.
    fn cache(n_kv: usize, cap: usize, len: usize, d: usize) -> Tensor {
        let dev = Device::Cpu;
        let full = Tensor::randn(0f32, 1.0, (n_kv, cap, d), &dev).unwrap();
        full.narrow(1, 0, len).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    const PLAIN: AttnParams = AttnParams {
        scale: 0.125,
        softcap: None,
        window: None,
    };
    const CAPPED: AttnParams = AttnParams {
        scale: 0.2,
        softcap: Some(5.0),
        window: Some(8),
    };

    fn check(p: AttnParams, lens: &[usize], n_head: usize, n_kv: usize, hd: usize) {
        let dev = Device::Cpu;
        let n_seq = lens.len();
        let q = Tensor::randn(0f32, 1.0, (n_seq, n_head, hd), &dev).unwrap();
        let ks: Vec<Tensor> = lens.iter().map(|&l| cache(n_kv, l + 7, l, hd)).collect();
        let vs: Vec<Tensor> = lens.iter().map(|&l| cache(n_kv, l + 7, l, hd)).collect();
        let seqs: Vec<SeqKv<'_>> = ks.iter().zip(&vs).map(|(k, v)| SeqKv { k, v }).collect();
        let got = decode(&q, &seqs, p).unwrap();
        assert_eq!(got.dims(), &[n_seq, n_head * hd]);
        for s in 0..n_seq {
            let qs = q.i(s).unwrap().reshape((n_head, 1, hd)).unwrap();
            let want = attention_candle(&qs, &ks[s], &vs[s], p).unwrap();
            let d = max_diff(&got.i(s).unwrap(), &want.reshape(n_head * hd).unwrap());
            assert!(d < 1e-4, "{p:?} lens {lens:?} seq {s}: max abs diff {d}");
        }
    }

    #[test]
    fn matches_the_per_sequence_path_for_every_length() {
        check(PLAIN, &[1, 5, 37, 130], 9, 3, 64);
        check(PLAIN, &[300], 4, 4, 32);
        check(PLAIN, &[3, 17], 6, 1, 20);
    }

    #[test]
    fn softcap_and_sliding_window_match_the_per_sequence_path() {
        check(CAPPED, &[1, 8, 9, 40], 4, 2, 16);
        let w1 = AttnParams {
            window: Some(1),
            ..CAPPED
        };
        check(w1, &[2, 10], 2, 1, 8);
    }

    /// A prompt's queries, keys and values: `q` `[n_head, len, hd]`, `k`/`v`
    /// cache views `[n_kv, len, hd | vd]` of larger buffers.
    fn prompt(n_head: usize, n_kv: usize, len: usize, hd: usize, vd: usize) -> [Tensor; 3] {
        let dev = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (n_head, len, hd), &dev).unwrap();
        [
            q,
            cache(n_kv, len + 5, len, hd),
            cache(n_kv, len + 5, len, vd),
        ]
    }

    /// `t` queries at the end of `len` keys: the last `t` rows of `q`.
    fn tail(q: &Tensor, k: &Tensor, v: &Tensor, a: usize, b: usize) -> [Tensor; 3] {
        [
            q.narrow(1, a, b - a).unwrap().contiguous().unwrap(),
            k.narrow(1, 0, b).unwrap(),
            v.narrow(1, 0, b).unwrap(),
        ]
    }

    #[test]
    fn prompts_match_the_candle_path() {
        let window = AttnParams {
            window: Some(50),
            ..PLAIN
        };
        let configs = [
            (PLAIN, 9, 3, 64, 64),
            (PLAIN, 4, 4, 32, 32),
            (PLAIN, 6, 1, 20, 12),
            (CAPPED, 4, 2, 16, 16),
            (window, 8, 2, 64, 64),
        ];
        for (p, n_head, n_kv, hd, vd) in configs {
            for len in [1, 2, 7, 63, 64, 65, 129, 130, 200, 300] {
                let [q, k, v] = prompt(n_head, n_kv, len, hd, vd);
                for t in [1, 7, 64, 130] {
                    if t > len {
                        continue;
                    }
                    let [qt, kt, vt] = tail(&q, &k, &v, len - t, len);
                    let got = prefill(&qt, &kt, &vt, p).unwrap();
                    let want = attention_candle(&qt, &kt, &vt, p).unwrap();
                    assert_eq!(got.dims(), want.dims());
                    let d = max_diff(&got, &want);
                    assert!(
                        d < 1e-4,
                        "{p:?} {n_head}/{n_kv} heads, len {len}, t {t}: {d}"
                    );
                }
            }
        }
    }

    /// Rows of `x` as bit patterns, for exact comparisons.
    fn bits(x: &Tensor) -> Vec<Vec<u32>> {
        x.to_vec2::<f32>()
            .unwrap()
            .into_iter()
            .map(|r| r.into_iter().map(f32::to_bits).collect())
            .collect()
    }

    #[test]
    fn a_row_is_bit_identical_however_its_prompt_is_split_and_in_decode() {
        let window = AttnParams {
            window: Some(40),
            ..PLAIN
        };
        for (p, n_head, n_kv, hd) in [(PLAIN, 9, 3, 64), (CAPPED, 4, 2, 20), (window, 6, 6, 32)] {
            // Past two key blocks of the online softmax.
            let len = 603;
            let [q, k, v] = prompt(n_head, n_kv, len, hd, hd);
            let whole = bits(&prefill(&q, &k, &v, p).unwrap());
            for block in [1, 7, 64, 130] {
                let mut rows = Vec::new();
                for a in (0..len).step_by(block) {
                    let b = (a + block).min(len);
                    let [qt, kt, vt] = tail(&q, &k, &v, a, b);
                    rows.extend(bits(&prefill(&qt, &kt, &vt, p).unwrap()));
                }
                assert!(
                    rows == whole,
                    "{p:?}: blocks of {block} differ from the whole prompt"
                );
            }
            // One-token decode steps, several sequences batched.
            for pos in [
                0, 1, 39, 40, 41, 63, 64, 150, 255, 256, 257, 295, 296, 511, 512, 602,
            ] {
                let [qt, kt, vt] = tail(&q, &k, &v, pos, pos + 1);
                let q1 = qt.reshape((1, n_head, hd)).unwrap();
                let [q2, k2, v2] = tail(&q, &k, &v, 3, 4);
                let q2 = q2.reshape((1, n_head, hd)).unwrap();
                let qs = Tensor::cat(&[&q2, &q1], 0).unwrap();
                let seqs = [SeqKv { k: &k2, v: &v2 }, SeqKv { k: &kt, v: &vt }];
                let got = bits(&decode(&qs, &seqs, p).unwrap());
                assert!(got[1] == whole[pos], "{p:?}: decode at {pos} differs");
                assert!(got[0] == whole[3], "{p:?}: decode at 3 differs");
            }
        }
    }

    /// An f16 cache as `SeqState` keeps one: an `[n_kv, cap, d]` f16 buffer viewed to `len`.
    fn cache16(n_kv: usize, cap: usize, len: usize, d: usize) -> Tensor {
        let full = cache(n_kv, cap, cap, d).to_dtype(DType::F16).unwrap();
        full.narrow(1, 0, len).unwrap()
    }

    #[test]
    fn f16_caches_give_the_f32_result_of_their_values_bit_for_bit() {
        let window = AttnParams {
            window: Some(30),
            ..PLAIN
        };
        for (p, n_head, n_kv, hd) in [(PLAIN, 9, 3, 64), (CAPPED, 4, 2, 20), (window, 6, 6, 32)] {
            let len = 300;
            let q = Tensor::randn(0f32, 1.0, (n_head, len, hd), &Device::Cpu).unwrap();
            let (k16, v16) = (
                cache16(n_kv, len + 9, len, hd),
                cache16(n_kv, len + 9, len, hd),
            );
            let up = |x: &Tensor| x.to_dtype(DType::F32).unwrap();
            let (k32, v32) = (up(&k16), up(&v16));
            for t in [1, 7, 64, 300] {
                let [qt, kt, vt] = tail(&q, &k16, &v16, len - t, len);
                let [_, kf, vf] = tail(&q, &k32, &v32, len - t, len);
                let got = prefill(&qt, &kt, &vt, p).unwrap();
                assert!(
                    bits(&got) == bits(&prefill(&qt, &kf, &vf, p).unwrap()),
                    "{p:?} t {t}: an f16 prompt differs from its f32 values"
                );
                // `nn::attention` takes the same pass; candle's agrees.
                let via = crate::inference::models::nn::attention(&qt, &kt, &vt, p).unwrap();
                assert!(bits(&via) == bits(&got), "{p:?} t {t}: nn::attention");
                let d = max_diff(&got, &attention_candle(&qt, &kt, &vt, p).unwrap());
                assert!(d < 1e-4, "{p:?} t {t}: against candle's path, {d}");
            }
            // Decode: two sequences of different lengths, f16 against f32.
            let at = |pos: usize| tail(&q, &k16, &v16, pos, pos + 1);
            let [q1, k1, v1] = at(299);
            let [q2, k2, v2] = at(20);
            let qs = Tensor::cat(
                &[
                    q1.reshape((1, n_head, hd)).unwrap(),
                    q2.reshape((1, n_head, hd)).unwrap(),
                ],
                0,
            )
            .unwrap();
            let got = decode(
                &qs,
                &[SeqKv { k: &k1, v: &v1 }, SeqKv { k: &k2, v: &v2 }],
                p,
            )
            .unwrap();
            let (k1f, v1f, k2f, v2f) = (up(&k1), up(&v1), up(&k2), up(&v2));
            let want = decode(
                &qs,
                &[SeqKv { k: &k1f, v: &v1f }, SeqKv { k: &k2f, v: &v2f }],
                p,
            )
            .unwrap();
            assert!(bits(&got) == bits(&want), "{p:?}: f16 decode differs");
            // And a decode row equals the prompt's row at that position.
            let whole = bits(&prefill(&q, &k16, &v16, p).unwrap());
            assert!(bits(&got)[0] == whole[299], "{p:?}: decode against prompt");
        }
    }

    #[test]
    fn the_softmax_exponential_is_accurate_and_the_same_in_every_lane() {
        let xs: Vec<f32> = (0..4003)
            .map(|i| -(i as f32) * 0.0231 - 1e-3 * (i % 7) as f32)
            .collect();
        for &x in &xs {
            let (got, want) = (exp_neg(x), (x as f64).exp());
            assert!(
                ((got as f64) - want).abs() <= 3e-7 * want + 1e-37,
                "exp({x}) = {got}, not {want}"
            );
        }
        // A row of these scores (maximum 0): the lanes of whole chunks
        // against the one-by-one tail, at every offset.
        for start in 0..8 {
            let mut row = xs[start..start + 803].to_vec();
            row[0] = 0.0;
            let mut alone = row.clone();
            let (m, sum) = exp_block(&mut row, None, f32::NEG_INFINITY);
            assert_eq!(m, 0.0);
            alone.iter_mut().for_each(|x| *x = exp_neg(*x));
            assert!(row
                .iter()
                .zip(&alone)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            assert!(sum >= 1.0 && sum.is_finite());
            // A running maximum above the block's: exponentials against it.
            let mut again = xs[start..start + 803].to_vec();
            let (m2, _) = exp_block(&mut again, None, 0.5);
            assert_eq!(m2, 0.5);
            let want = (xs[start + 1] as f64 - 0.5).exp();
            assert!(((again[1] as f64) - want).abs() <= 3e-7 * want);
        }
    }

    #[test]
    fn mismatched_batches_are_errors() {
        let dev = Device::Cpu;
        let q = Tensor::zeros((2, 4, 8), DType::F32, &dev).unwrap();
        let k = Tensor::zeros((2, 3, 8), DType::F32, &dev).unwrap();
        let one = [SeqKv { k: &k, v: &k }];
        assert!(decode(&q, &one, PLAIN).is_err());
        let kb = k.to_dtype(DType::BF16).unwrap();
        let q1 = q.narrow(0, 0, 1).unwrap();
        assert!(decode(&q1, &[SeqKv { k: &kb, v: &kb }], PLAIN).is_err());
        // Prompts: more queries than keys, heads that do not group.
        let q5 = Tensor::zeros((4, 5, 8), DType::F32, &dev).unwrap();
        assert!(prefill(&q5, &k, &k, PLAIN).is_err());
        let q3 = Tensor::zeros((3, 2, 8), DType::F32, &dev).unwrap();
        assert!(prefill(&q3, &k, &k, PLAIN).is_err());
    }
}
