//! The k-quant matrices (Q4_K, Q5_K, Q6_K) stored for AVX-512 VNNI with weight rows in
//! vector lanes: [`KLanes`]. Each group of 16 weight rows keeps, per super-block, the
//! values of all 16 rows interleaved so that one 64-byte line holds four consecutive
//! values of every row (lane `l`, bytes `4l .. 4l + 4`), two such quads per line as low
//! and high nibbles, followed by the quads' fifth (Q5_K) or fifth and sixth bits (Q6_K),
//! the integer scales of all 16 rows per sub-block, the mins as pairs (Q4_K, Q5_K) and
//! `d`, `dmin` as 16 floats. llama.cpp's CPU backend repacks its k-quants the same way
//! (rows in lanes) for its gemv/gemm kernels.
//!
//! Why: with one activation row (decode), [`super::kquants512::dot_tile_k512`] spends most
//! of its instructions per super-block on what is not a product (the permuted scales, the
//! horizontal sums of each super-block's integer lanes, the scalar float steps): on the
//! AVX-512 EPYC of session 14 a Q4_K matrix ran at 7 GB/s of weights per core against a
//! 25 GB/s read. With rows in lanes every instruction serves 16 weight rows: per four
//! values one `vpdpbusd` per activation row, per sub-block one `vpmulld`, per super-block
//! one conversion and fused multiply-add, and nothing is summed across lanes.
//!
//! The arithmetic of each (weight row, activation row) pair is that of
//! [`super::kquants512::run_prompt_k512`] and [`super::kquants512::dot_tile_k512`]: the
//! super-block's exact integer sums (main: `Σ_b sc_b·(Σ u·q₈ − OFFSET·bsum_b)`; min:
//! `Σ mn·bsum`), then `acc = fma(main, d·d₈, acc)` and `acc = fma(min, −dmin·d₈, acc)` in
//! super-block order. So a row's result is the same bits as in [`KMatrix`]'s paths (and
//! the portable one's integers), whatever the tile of activation rows it is computed in.

use std::arch::x86_64::*;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::Range;

use anyhow::Result;

use super::super::kquants::{KBlock, KMatrix, Q8K, QK};
use super::super::source::Slots;
use super::super::{Acts, CpuMatmul, Simd};

/// Weight rows per group (lanes of a 512-bit register of i32).
const ROWS: usize = 16;
/// Quads (four values) per super-block.
const QUADS: usize = QK / 4;

/// One 64-byte line of a group's super-block.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Where each part of a group's super-block lies, in lines, for type `B`.
struct Layout<B: KBlock>(PhantomData<B>);

impl<B: KBlock> Layout<B> {
    /// Lines of the low four bits: quad `t` in line `t % 32` (`t < 32` low nibbles).
    const NIB: usize = 0;
    /// Lines of the high bits: Q5_K's fifth bit (quads `8h .. 8h + 8` in line `h`, bit
    /// `t % 8` of each byte), Q6_K's fifth and sixth (quads `4h .. 4h + 4`, bits
    /// `2(t % 4)`, `2(t % 4) + 1`); none for Q4_K.
    const HI: usize = 32;
    const HI_LINES: usize = match B::BYTES {
        176 => 8,
        210 => 16,
        _ => 0,
    };
    /// Lines of the integer scales: sub-block `b` of [`KBlock::SUB`] values at bytes
    /// `16b .. 16b + 16` (one per lane; Q6_K's signed).
    const SC: usize = Self::HI + Self::HI_LINES;
    const SC_LINES: usize = (QK / B::SUB) * ROWS / 64;
    /// Lines of the mins (Q4_K, Q5_K): pair `q` (32-value sub-blocks `2q`, `2q + 1`) at
    /// bytes `32q .. 32q + 32`, lane `l`'s two bytes at `2l`.
    const MN: usize = Self::SC + Self::SC_LINES;
    const MN_LINES: usize = if B::WITH_MIN { 2 } else { 0 };
    /// `d` of the 16 rows as f32, then `dmin` (Q4_K, Q5_K).
    const D: usize = Self::MN + Self::MN_LINES;
    const LINES: usize = Self::D + if B::WITH_MIN { 2 } else { 1 };
}

/// A `[n, k]` k-quant weight of type `B` with its rows in lanes (see the module's text).
pub(crate) struct KLanes<B: KBlock> {
    n: usize,
    k: usize,
    kbs: usize,
    /// Group `g`'s super-block `s` at lines `(g·kbs + s)·LINES ..`.
    lines: Vec<Line>,
    _b: PhantomData<B>,
}

impl<B: KBlock> Debug for KLanes<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KLanes<{}>[{}, {}]", B::NAME, self.n, self.k)
    }
}

impl<B: KBlock> KLanes<B> {
    /// The same weights as `m`, rows in lanes (on candle's worker pool, a group of rows
    /// per item). Rows past `n` in the last group are zeros.
    pub(crate) fn from_kmatrix(m: &KMatrix<B>) -> Result<Self> {
        let (n, kbs) = (m.n, m.kbs);
        let groups = n.div_ceil(ROWS);
        let per_group = kbs * Layout::<B>::LINES;
        let mut lines: Vec<Line> = Vec::with_capacity(groups * per_group);
        let slots = Slots::of(&mut lines);
        candle_core::utils::barrier_pool().execute_chunked(groups, |range| {
            for g in range {
                for s in 0..kbs {
                    let at = (g * kbs + s) * Layout::<B>::LINES;
                    // SAFETY: group g's super-block s owns these lines, below the capacity.
                    let out = unsafe { slots.bytes(at * 64..(at + Layout::<B>::LINES) * 64) };
                    Self::pack(m, g, s, out);
                }
            }
        });
        // SAFETY: every group's every super-block was written above.
        unsafe { lines.set_len(groups * per_group) };
        Ok(Self {
            n,
            k: m.k,
            kbs,
            lines,
            _b: PhantomData,
        })
    }

    /// Write group `g`'s super-block `s` of `m` into `out` (`LINES · 64` bytes).
    fn pack(m: &KMatrix<B>, g: usize, s: usize, out: &mut [u8]) {
        out.fill(0);
        let line = |i: usize| 64 * i;
        for l in 0..ROWS {
            let j = g * ROWS + l;
            if j >= m.n {
                break;
            }
            let (qs, meta) = (&m.qs[j * m.kbs + s], &m.meta[j * m.kbs + s]);
            let u = B::values(qs, meta);
            for t in 0..QUADS {
                for c in 0..4 {
                    let v = u[4 * t + c];
                    let byte = line(Layout::<B>::NIB + t % 32) + 4 * l + c;
                    out[byte] |= (v & 0x0f) << (4 * (t / 32));
                    match Layout::<B>::HI_LINES {
                        8 => {
                            let hb = line(Layout::<B>::HI + t / 8) + 4 * l + c;
                            out[hb] |= ((v >> 4) & 1) << (t % 8);
                        }
                        16 => {
                            let hb = line(Layout::<B>::HI + t / 4) + 4 * l + c;
                            out[hb] |= ((v >> 4) & 3) << (2 * (t % 4));
                        }
                        _ => {}
                    }
                }
            }
            for b in 0..QK / B::SUB {
                // The scale of 16-value sub-block b·SUB/16 is the sub-block's (Q6_K:
                // signed, kept as its byte).
                let sc = B::scale16(meta, b * B::SUB / 16);
                out[line(Layout::<B>::SC) + 16 * b + l] = sc as i8 as u8;
            }
            if B::WITH_MIN {
                for q in 0..4 {
                    let at = line(Layout::<B>::MN) + 32 * q + 2 * l;
                    out[at] = B::min16(meta, 4 * q) as u8;
                    out[at + 1] = B::min16(meta, 4 * q + 2) as u8;
                }
            }
            let (d, dmin) = B::d_dmin(meta);
            let at = line(Layout::<B>::D) + 4 * l;
            out[at..at + 4].copy_from_slice(&d.to_ne_bytes());
            if B::WITH_MIN {
                out[at + 64..at + 68].copy_from_slice(&dmin.to_ne_bytes());
            }
        }
    }

    /// Group `g`'s super-block `s`.
    #[inline(always)]
    fn block(&self, g: usize, s: usize) -> &[Line] {
        let at = (g * self.kbs + s) * Layout::<B>::LINES;
        &self.lines[at..at + Layout::<B>::LINES]
    }

    /// The 256 stored values, the 16-value sub-blocks' scales and mins, `d` and `dmin` of
    /// row `j`'s super-block `s`, read back from the lanes.
    fn row_block(&self, j: usize, s: usize) -> ([u8; QK], [i32; 16], [i32; 16], f32, f32) {
        let blk = self.block(j / ROWS, s);
        let l = j % ROWS;
        let byte = |i: usize, b: usize| blk[i].0[b];
        let u = std::array::from_fn(|v| {
            let (t, c) = (v / 4, v % 4);
            let low = (byte(Layout::<B>::NIB + t % 32, 4 * l + c) >> (4 * (t / 32))) & 0x0f;
            let high = match Layout::<B>::HI_LINES {
                8 => ((byte(Layout::<B>::HI + t / 8, 4 * l + c) >> (t % 8)) & 1) << 4,
                16 => ((byte(Layout::<B>::HI + t / 4, 4 * l + c) >> (2 * (t % 4))) & 3) << 4,
                _ => 0,
            };
            low | high
        });
        let sc_byte = |b: usize| {
            let at = 16 * b + l;
            blk[Layout::<B>::SC + at / 64].0[at % 64]
        };
        let sc: [i32; 16] = std::array::from_fn(|t| {
            let v = sc_byte(t * 16 / B::SUB);
            if B::OFFSET != 0 {
                i32::from(v as i8)
            } else {
                i32::from(v)
            }
        });
        let mn: [i32; 16] = std::array::from_fn(|t| {
            if !B::WITH_MIN {
                return 0;
            }
            let sub32 = t / 2;
            let at = 32 * (sub32 / 2) + 2 * l + sub32 % 2;
            i32::from(blk[Layout::<B>::MN + at / 64].0[at % 64])
        });
        let f = |i: usize| {
            let b = &blk[i].0[4 * l..4 * l + 4];
            f32::from_ne_bytes([b[0], b[1], b[2], b[3]])
        };
        let dmin = if B::WITH_MIN {
            f(Layout::<B>::D + 1)
        } else {
            0.0
        };
        (u, sc, mn, f(Layout::<B>::D), dmin)
    }
}

/// Quad `t` (values `4t .. 4t + 4` of all 16 rows) of a group's super-block `blk`.
#[inline(always)]
unsafe fn quad<B: KBlock>(blk: *const Line, t: usize) -> __m512i {
    let v = _mm512_load_si512(blk.add(Layout::<B>::NIB + t % 32) as *const _);
    let v = if t < 32 { v } else { _mm512_srli_epi16::<4>(v) };
    let mut w = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
    match Layout::<B>::HI_LINES {
        8 => {
            let h = _mm512_load_si512(blk.add(Layout::<B>::HI + t / 8) as *const _);
            let set = _mm512_test_epi8_mask(h, _mm512_set1_epi8(1 << (t % 8)));
            // (a nibble is below 16, so adding 16 sets bit 4)
            w = _mm512_mask_add_epi8(w, set, w, _mm512_set1_epi8(0x10));
        }
        16 => {
            let h = _mm512_load_si512(blk.add(Layout::<B>::HI + t / 4) as *const _);
            // Bits 2i, 2i + 1 of each byte to bits 4, 5 (the mask drops what a 16-bit
            // shift carries in from the neighbouring byte).
            let h = match t % 4 {
                0 => _mm512_slli_epi16::<4>(h),
                1 => _mm512_slli_epi16::<2>(h),
                2 => h,
                _ => _mm512_srli_epi16::<2>(h),
            };
            w = _mm512_or_si512(w, _mm512_and_si512(h, _mm512_set1_epi8(0x30)));
        }
        _ => {}
    }
    w
}

/// The integer scale of sub-block `b` ([`KBlock::SUB`] values) of the 16 rows.
#[inline(always)]
unsafe fn scales<B: KBlock>(blk: *const Line, b: usize) -> __m512i {
    let p = (blk.add(Layout::<B>::SC) as *const u8).add(16 * b) as *const __m128i;
    let v = _mm_load_si128(p);
    if B::OFFSET != 0 {
        _mm512_cvtepi8_epi32(v)
    } else {
        _mm512_cvtepu8_epi32(v)
    }
}

/// `R` activation rows from `r0` against group super-block `blk` (super-block `s`), added
/// to `acc[i]` (lane `l`: the group's weight row `l`). The integer and float steps are
/// [`super::kquants512::run_prompt_k512`]'s.
#[inline(always)]
unsafe fn rows_block<B: KBlock, const R: usize>(
    blk: *const Line,
    acts: &Acts,
    r0: usize,
    s: usize,
    acc: &mut [__m512],
) {
    let kbs = acts.kbs;
    let xs: [&Q8K; R] = std::array::from_fn(|i| acts.qk.get_unchecked((r0 + i) * kbs + s));
    let xq: [*const i32; R] = std::array::from_fn(|i| xs[i].qs.as_ptr() as *const i32);
    let per = B::SUB / 4;
    let mut main = [_mm512_setzero_si512(); R];
    for b in 0..QK / B::SUB {
        // Two chains of vpdpbusd per row (exact integers: the split changes nothing).
        let mut part = [_mm512_setzero_si512(); R];
        let mut part2 = [_mm512_setzero_si512(); R];
        for t in (per * b..per * (b + 1)).step_by(2) {
            let w = quad::<B>(blk, t);
            let w2 = quad::<B>(blk, t + 1);
            for i in 0..R {
                part[i] = _mm512_dpbusd_epi32(part[i], w, _mm512_set1_epi32(*xq[i].add(t)));
                part2[i] = _mm512_dpbusd_epi32(part2[i], w2, _mm512_set1_epi32(*xq[i].add(t + 1)));
            }
        }
        for i in 0..R {
            part[i] = _mm512_add_epi32(part[i], part2[i]);
        }
        let sc = scales::<B>(blk, b);
        for i in 0..R {
            // Q6_K: the offset of its stored values, `OFFSET·bsum` of the sub-block
            // (SUB = 16: one bsum), taken off before the scale: the same integer as
            // `Σ sc·part − OFFSET·Σ sc·bsum`.
            let p = if B::OFFSET != 0 {
                let bsum = *xs[i].bsums.get_unchecked(b);
                _mm512_sub_epi32(part[i], _mm512_set1_epi32(B::OFFSET * bsum))
            } else {
                part[i]
            };
            main[i] = _mm512_add_epi32(main[i], _mm512_mullo_epi32(p, sc));
        }
    }
    let d = _mm512_load_ps(blk.add(Layout::<B>::D) as *const f32);
    for i in 0..R {
        let d8 = *acts.dk.get_unchecked((r0 + i) * kbs + s);
        let a = acc.get_unchecked_mut(i);
        *a = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(main[i]),
            _mm512_mul_ps(d, _mm512_set1_ps(d8)),
            *a,
        );
        if B::WITH_MIN {
            let dmin = _mm512_load_ps(blk.add(Layout::<B>::D + 1) as *const f32);
            // The sums of each 32 activations (each fits 16 bits), two per vpdpwssd.
            let bs = _mm512_load_si512(xs[i].bsums.as_ptr() as *const _);
            let b32 = _mm512_add_epi32(bs, _mm512_srli_epi64::<32>(bs));
            let mut b32s = [0i32; 4];
            _mm_storeu_si128(b32s.as_mut_ptr() as *mut _, _mm512_cvtepi64_epi16(b32));
            let mut mins = _mm512_setzero_si512();
            for (q, &b) in b32s.iter().enumerate() {
                let p = (blk.add(Layout::<B>::MN) as *const u8).add(32 * q) as *const __m256i;
                let mn = _mm512_cvtepu8_epi16(_mm256_load_si256(p));
                mins = _mm512_dpwssd_epi32(mins, mn, _mm512_set1_epi32(b));
            }
            *a = _mm512_fnmadd_ps(
                _mm512_cvtepi32_ps(mins),
                _mm512_mul_ps(dmin, _mm512_set1_ps(d8)),
                *a,
            );
        }
    }
}

/// Group `g` against activation rows `rows`, results for the group's lanes in `mask`
/// (weight rows `16g + l`). Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW and VNNI,
/// that the rows exist, and that it owns `y[r, 16g + l]` for the lanes of `mask`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn run_group<B: KBlock>(
    mat: &KLanes<B>,
    acts: &Acts,
    rows: Range<usize>,
    g: usize,
    mask: __mmask16,
    y: *mut f32,
) {
    let mut acc = vec![_mm512_setzero_ps(); rows.len()];
    for s in 0..mat.kbs {
        let blk = mat.block(g, s).as_ptr();
        let mut r = rows.start;
        while r < rows.end {
            let a = &mut acc[r - rows.start..];
            let left = rows.end - r;
            let step = if left >= 8 {
                rows_block::<B, 8>(blk, acts, r, s, a);
                8
            } else if left >= 4 {
                rows_block::<B, 4>(blk, acts, r, s, a);
                4
            } else if left >= 2 {
                rows_block::<B, 2>(blk, acts, r, s, a);
                2
            } else {
                rows_block::<B, 1>(blk, acts, r, s, a);
                1
            };
            r += step;
        }
    }
    for (i, a) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(y.add((rows.start + i) * mat.n + ROWS * g), mask, *a);
    }
}

impl<B: KBlock> CpuMatmul for KLanes<B> {
    fn n(&self) -> usize {
        self.n
    }

    fn k(&self) -> usize {
        self.k
    }

    fn acts_form(&self) -> super::super::ActsForm {
        super::super::ActsForm::Supers
    }

    fn resident_bytes(&self) -> u64 {
        (self.lines.capacity() * std::mem::size_of::<Line>()) as u64
    }

    fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n * self.k);
        for j in 0..self.n {
            for s in 0..self.kbs {
                let (u, sc, mn, d, dmin) = self.row_block(j, s);
                out.extend(u.iter().enumerate().map(|(v, &u)| {
                    // ggml's order: (d·sc)·q − dmin·mn.
                    let scale = d * sc[v / 16] as f32;
                    let min = dmin * mn[v / 16] as f32;
                    scale * (i32::from(u) - B::OFFSET) as f32 - min
                }));
            }
        }
        out
    }

    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32) {
        debug_assert!(acts.kbs == self.kbs && rows.end <= acts.rows() && js.end <= self.n);
        if js.is_empty() || rows.is_empty() {
            return;
        }
        for g in js.start / ROWS..js.end.div_ceil(ROWS) {
            let lo = js.start.max(ROWS * g) - ROWS * g;
            let hi = js.end.min(ROWS * (g + 1)) - ROWS * g;
            let mask = (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16;
            // SAFETY: a KLanes is only built where `Simd::detect` found AVX-512 VNNI (and
            // AVX2, FMA, F16C); the caller guarantees the rows and owns y for `js`.
            unsafe { run_group(self, acts, rows.clone(), g, mask, y) };
        }
    }
}

/// Whether this CPU runs [`KLanes`] (the SIMD level [`Simd::detect`] chose).
pub(crate) fn available(simd: Simd) -> bool {
    simd == Simd::Avx512Vnni
}
