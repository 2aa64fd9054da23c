//! The k-quant matrices (Q4_K, Q5_K, Q6_K) stored for AVX-512 VNNI with weight rows in
//! vector lanes: [`KLanes`]. Each group of 16 weight rows keeps, per super-block, the
//! values of all 16 rows interleaved so that one 64-byte line holds four consecutive
//! values (a quad) of every row (lane `l`, bytes `4l .. 4l + 4`), then the integer scales
//! of all 16 rows per sub-block, the mins as pairs (Q4_K, Q5_K) and `d`, `dmin` as 16
//! floats. Q4_K and Q5_K keep two quads per line as low and high nibbles, followed by
//! Q5_K's fifth bits; Q6_K keeps the four quads of each 16-value sub-block in three lines
//! of six-bit values, the fourth quad's bits spread over the three lines' spare bits
//! ([`sixes`]: one `and`, three `vgf2p8affineqb` and two `vpternlogd` unpack them, so
//! Q6_K in lanes needs GFNI). llama.cpp's CPU backend repacks its k-quants the same way
//! (rows in lanes) for its gemv/gemm kernels.
//!
//! Why: with one activation row (decode), [`super::kquants512::dot_tile_k512`] spends most
//! of its instructions per super-block on what is not a product (the permuted scales, the
//! horizontal sums of each super-block's integer lanes, the scalar float steps): on the
//! 2-vCPU AVX-512 EPYC a Q4_K matrix ran at 7 GB/s of weights per core against a
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
//! (Q6_K's offset term starts each sub-block's sum at `−32·bsum_b`, so a sub-block costs
//! one `vpmulld` and one add per activation row besides its four `vpdpbusd`; the integer
//! is the same whatever order its exact parts are added in.)

use std::arch::x86_64::*;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::Range;

use anyhow::{bail, Result};

use super::super::kquants::{KBlock, KMatrix, Q8K, QK};
use super::super::source::{for_row_groups, RowSource, Slots};
use super::super::{Acts, CpuMatmul, Simd};

/// Weight rows per group (lanes of a 512-bit register of i32).
pub(super) const ROWS: usize = 16;
// Decode's guided shares come in units of `WEIGHT_CHUNK` rows: whole groups.
const _: () = assert!(super::super::WEIGHT_CHUNK % ROWS == 0);
/// Activation rows a group's accumulators hold at once (on the stack).
const ACC_ROWS: usize = 64;
/// Quads (four values) per super-block.
const QUADS: usize = QK / 4;

/// One 64-byte line of a group's super-block.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Where each part of a group's super-block lies, in lines, for type `B`.
struct Layout<B: KBlock>(PhantomData<B>);

impl<B: KBlock> Layout<B> {
    /// Whether `B` is Q6_K (six-bit values: [`Self::SIXES`]).
    const SIX: bool = B::BYTES == 210;
    /// Q4_K, Q5_K: lines of the low four bits: quad `t` in line `t % 32` (`t < 32` low
    /// nibbles).
    const NIB: usize = 0;
    /// Q6_K: the 16-value sub-block `b` (quads `4b .. 4b + 4`) in lines `3b .. 3b + 3`.
    /// Byte `4l + c` of each line is value `c` of its quad for row `l`: line `3b` holds
    /// quad `4b` in bits 0–5, line `3b + 1` quad `4b + 1` in bits 0, 1, 4–7, line `3b + 2`
    /// quad `4b + 2` in bits 0–3, 6, 7; quad `4b + 3`'s bits 0, 1 are bits 6, 7 of line
    /// `3b`, its bits 2, 3 and 4, 5 lie in place in lines `3b + 1` and `3b + 2`.
    const SIXES: usize = 0;
    /// Lines of the high bits: Q5_K's fifth bit (quads `8h .. 8h + 8` in line `h`, bit
    /// `t % 8` of each byte); none for Q4_K and Q6_K.
    const HI: usize = 32;
    const HI_LINES: usize = if B::BYTES == 176 { 8 } else { 0 };
    /// Lines of the integer scales: sub-block `b` of [`KBlock::SUB`] values at bytes
    /// `16b .. 16b + 16` (one per lane; Q6_K's signed).
    const SC: usize = if Self::SIX {
        Self::SIXES + 48
    } else {
        Self::HI + Self::HI_LINES
    };
    const SC_LINES: usize = (QK / B::SUB) * ROWS / 64;
    /// Lines of the mins (Q4_K, Q5_K): pair `q` (32-value sub-blocks `2q`, `2q + 1`) at
    /// bytes `32q .. 32q + 32`, lane `l`'s two bytes at `2l`.
    const MN: usize = Self::SC + Self::SC_LINES;
    const MN_LINES: usize = if B::WITH_MIN { 2 } else { 0 };
    /// `d` of the 16 rows as f32, then `dmin` (Q4_K, Q5_K).
    const D: usize = Self::MN + Self::MN_LINES;
    const LINES: usize = Self::D + if B::WITH_MIN { 2 } else { 1 };
}

/// Q6_K's quad bytes of sub-block lines `a`, `b`, `c` ([`Layout::SIXES`]) from the values
/// `q` of the four quads at one byte position.
fn six_bytes(q: [u8; 4]) -> [u8; 3] {
    [
        q[0] | (q[3] & 0x03) << 6,
        (q[1] & 0x03) | (q[3] & 0x0c) | (q[1] & 0x3c) << 2,
        (q[2] & 0x0f) | (q[3] & 0x30) | (q[2] & 0x30) << 2,
    ]
}

/// The values of the four quads at one byte position of Q6_K sub-block lines `a`, `b`,
/// `c` (the inverse of [`six_bytes`]).
fn six_values([a, b, c]: [u8; 3]) -> [u8; 4] {
    [
        a & 0x3f,
        (b & 0x03) | (b >> 4) << 2,
        (c & 0x0f) | (c >> 6) << 4,
        (a >> 6) | (b & 0x0c) | (c & 0x30),
    ]
}

/// A `[n, k]` k-quant weight of type `B` with its rows in lanes (see the module's text).
pub(crate) struct KLanes<B: KBlock> {
    n: usize,
    k: usize,
    kbs: usize,
    /// Group `g`'s super-block `s` at lines `(g·kbs + s)·LINES ..`.
    lines: crate::inference::kernels::weight_memory::WeightVec<Line>,
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
    #[cfg(test)]
    pub(crate) fn from_kmatrix(m: &KMatrix<B>) -> Result<Self> {
        if !available::<B>(m.simd) {
            bail!(
                "{} rows in lanes need AVX-512 VNNI{} (this matrix runs {:?})",
                B::NAME,
                if Layout::<B>::SIX { " and GFNI" } else { "" },
                m.simd
            );
        }
        let (n, kbs) = (m.n, m.kbs);
        let groups = n.div_ceil(ROWS);
        let per_group = kbs * Layout::<B>::LINES;
        let mut lines = crate::inference::kernels::weight_memory::WeightVec::<Line>::with_capacity(
            groups * per_group,
        );
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

    /// The matrix straight from its GGUF bytes (a `[n, k]` tensor, row major, in `src`):
    /// each piece of whole groups of rows is parsed on its worker and packed into its
    /// groups' lines, so the row-major matrix is never held whole beside the lanes (a load's
    /// peak stays at the weights: building [`KMatrix`] first held a Q6_K output head twice).
    /// The same lines as packing the row-major matrix (tested against `from_kmatrix`).
    pub(crate) fn from_source(src: &RowSource<'_>, n: usize, k: usize, simd: Simd) -> Result<Self> {
        if !available::<B>(simd) {
            bail!(
                "{} rows in lanes need AVX-512 VNNI{} (this CPU runs {simd:?})",
                B::NAME,
                if Layout::<B>::SIX { " and GFNI" } else { "" },
            );
        }
        if k == 0 || !k.is_multiple_of(QK) {
            bail!(
                "{} rows of {k} values are not whole blocks of {QK}",
                B::NAME
            );
        }
        let kbs = k / QK;
        let row_bytes = kbs * B::BYTES;
        let groups = n.div_ceil(ROWS);
        let per_group = kbs * Layout::<B>::LINES;
        let mut lines = crate::inference::kernels::weight_memory::WeightVec::<Line>::with_capacity(
            groups * per_group,
        );
        let slots = Slots::of(&mut lines);
        for_row_groups(src, n, row_bytes, ROWS, |r0, bytes| {
            let rows = bytes.len() / row_bytes;
            let m = KMatrix::<B>::from_piece(bytes, rows, k, simd);
            for gl in 0..rows.div_ceil(ROWS) {
                let g = r0 / ROWS + gl;
                for s in 0..kbs {
                    let at = (g * kbs + s) * Layout::<B>::LINES;
                    // SAFETY: the piece starts at a whole group (`for_row_groups`), so group g
                    // is this piece's alone; its lines are below the capacity.
                    let out = unsafe { slots.bytes(at * 64..(at + Layout::<B>::LINES) * 64) };
                    Self::pack(&m, gl, s, out);
                }
            }
        })?;
        // SAFETY: `for_row_groups` returned Ok: every group's every super-block was written.
        unsafe { lines.set_len(groups * per_group) };
        Ok(Self {
            n,
            k,
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
            if Layout::<B>::SIX {
                for b in 0..QK / 16 {
                    for c in 0..4 {
                        let bytes = six_bytes(std::array::from_fn(|i| u[16 * b + 4 * i + c]));
                        for (i, v) in bytes.into_iter().enumerate() {
                            out[line(Layout::<B>::SIXES + 3 * b + i) + 4 * l + c] = v;
                        }
                    }
                }
            }
            for t in 0..if Layout::<B>::SIX { 0 } else { QUADS } {
                for c in 0..4 {
                    let v = u[4 * t + c];
                    let byte = line(Layout::<B>::NIB + t % 32) + 4 * l + c;
                    out[byte] |= (v & 0x0f) << (4 * (t / 32));
                    if Layout::<B>::HI_LINES == 8 {
                        let hb = line(Layout::<B>::HI + t / 8) + 4 * l + c;
                        out[hb] |= ((v >> 4) & 1) << (t % 8);
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
            if Layout::<B>::SIX {
                let (b, i) = (t / 4, t % 4);
                let at = |j: usize| byte(Layout::<B>::SIXES + 3 * b + j, 4 * l + c);
                return six_values([at(0), at(1), at(2)])[i];
            }
            let low = (byte(Layout::<B>::NIB + t % 32, 4 * l + c) >> (4 * (t / 32))) & 0x0f;
            let high = if Layout::<B>::HI_LINES == 8 {
                ((byte(Layout::<B>::HI + t / 8, 4 * l + c) >> (t % 8)) & 1) << 4
            } else {
                0
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

/// Quads `t` and `t + 32` (`t < 32`: values `4t .. 4t + 4` and `128 + 4t ..` of all 16
/// rows) of a Q4_K group's super-block `blk`: the low and high nibbles of line `t`, so
/// each line is loaded once.
#[inline(always)]
unsafe fn quad_pair<B: KBlock>(blk: *const Line, t: usize) -> (__m512i, __m512i) {
    let v = _mm512_load_si512(blk.add(Layout::<B>::NIB + t) as *const _);
    let nib = _mm512_set1_epi8(0x0f);
    (
        _mm512_and_si512(v, nib),
        _mm512_and_si512(_mm512_srli_epi16::<4>(v), nib),
    )
}

/// Quad `t` (values `4t .. 4t + 4` of all 16 rows) of a Q5_K group's super-block `blk`:
/// its nibble and its fifth bit.
#[inline(always)]
unsafe fn quad5<B: KBlock>(blk: *const Line, t: usize) -> __m512i {
    let v = _mm512_load_si512(blk.add(Layout::<B>::NIB + t % 32) as *const _);
    let v = if t < 32 { v } else { _mm512_srli_epi16::<4>(v) };
    let w = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
    let h = _mm512_load_si512(blk.add(Layout::<B>::HI + t / 8) as *const _);
    let set = _mm512_test_epi8_mask(h, _mm512_set1_epi8(1 << (t % 8)));
    // (a nibble is below 16, so adding 16 sets bit 4)
    _mm512_mask_add_epi8(w, set, w, _mm512_set1_epi8(0x10))
}

/// The 8×8 bit matrix of `vgf2p8affineqb` (one per 64-bit lane) that sets bit `i` of each
/// byte to bit `from[i]` of the source byte (none: 0). Output bit `i` is the parity of
/// the source byte and matrix byte `7 − i`.
const fn gf_bits(from: [Option<u32>; 8]) -> i64 {
    let mut m = 0u64;
    let mut i = 0;
    while i < 8 {
        if let Some(f) = from[i] {
            m |= (1u64 << f) << (8 * (7 - i));
        }
        i += 1;
    }
    m as i64
}

/// Line `3b + 1` of [`Layout::SIXES`] to its quad: bits 0, 1, 4–7 to 0–5.
const GF_B: i64 = gf_bits([
    Some(0),
    Some(1),
    Some(4),
    Some(5),
    Some(6),
    Some(7),
    None,
    None,
]);
/// Line `3b + 2` to its quad: bits 0–3, 6, 7 to 0–5.
const GF_C: i64 = gf_bits([
    Some(0),
    Some(1),
    Some(2),
    Some(3),
    Some(6),
    Some(7),
    None,
    None,
]);
/// Line `3b`'s bits 6, 7 (the fourth quad's bits 0, 1) to bits 0, 1, the rest 0.
const GF_A: i64 = gf_bits([Some(6), Some(7), None, None, None, None, None, None]);

/// The four quads (values `16b .. 16b + 16` of all 16 rows, quad `4b + i` in `[i]`) of
/// Q6_K sub-block `b` of a group's super-block `blk` ([`Layout::SIXES`]): one `and`, three
/// affine bit maps and two bitwise selects for three lines.
#[inline(always)]
unsafe fn sixes<B: KBlock>(blk: *const Line, b: usize) -> [__m512i; 4] {
    let p = blk.add(Layout::<B>::SIXES + 3 * b);
    let a = _mm512_load_si512(p as *const _);
    let bb = _mm512_load_si512(p.add(1) as *const _);
    let c = _mm512_load_si512(p.add(2) as *const _);
    let w0 = _mm512_and_si512(a, _mm512_set1_epi8(0x3f));
    let w1 = _mm512_gf2p8affine_epi64_epi8::<0>(bb, _mm512_set1_epi64(GF_B));
    let w2 = _mm512_gf2p8affine_epi64_epi8::<0>(c, _mm512_set1_epi64(GF_C));
    let low = _mm512_gf2p8affine_epi64_epi8::<0>(a, _mm512_set1_epi64(GF_A));
    // 0xca: bitwise `first ? second : third`. Bits 2, 3 from line 3b + 1, 4, 5 from line
    // 3b + 2 (both in place), then bits 0, 1 (and the zeros of 6, 7) from `low`.
    let mid = _mm512_ternarylogic_epi32::<0xca>(_mm512_set1_epi8(0x0c), bb, c);
    let w3 = _mm512_ternarylogic_epi32::<0xca>(_mm512_set1_epi8(0x3c), mid, low);
    [w0, w1, w2, w3]
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

/// Q4_K: `R` activation rows from `r0` against group super-block `blk` (super-block `s`),
/// added to `acc[i]` (lane `l`: the group's weight row `l`). `pairs[i·kbs + s]` holds row
/// `r0 + i`'s sums of 32 activations two to an `i32` ([`min_pairs`], made once per call).
/// The integer and float steps are [`super::kquants512::run_prompt_k512`]'s.
///
/// Sub-blocks `b` and `b + 4` are taken together, so each line of nibbles is loaded once
/// for both of its quads; with one or two activation rows each half keeps two chains of
/// `vpdpbusd` (exact integers: how they are split changes nothing).
#[inline(always)]
unsafe fn rows_block<B: KBlock, const R: usize>(
    blk: *const Line,
    acts: &Acts,
    pairs: &[[i32; 16]],
    r0: usize,
    s: usize,
    acc: &mut [__m512],
) {
    let xq = act_quads::<R>(acts, r0, s);
    let per = B::SUB / 4;
    let chains = if R <= 2 { 2 } else { 1 };
    let mut main = [_mm512_setzero_si512(); R];
    for b in 0..QK / B::SUB / 2 {
        let mut lo = [[_mm512_setzero_si512(); 2]; R];
        let mut hi = [[_mm512_setzero_si512(); 2]; R];
        for u in 0..per {
            let t = per * b + u;
            let (wl, wh) = quad_pair::<B>(blk, t);
            let c = u % chains;
            for i in 0..R {
                let xl = _mm512_set1_epi32(*xq[i].add(t));
                let xh = _mm512_set1_epi32(*xq[i].add(t + QUADS / 2));
                lo[i][c] = _mm512_dpbusd_epi32(lo[i][c], wl, xl);
                hi[i][c] = _mm512_dpbusd_epi32(hi[i][c], wh, xh);
            }
        }
        let sl = scales::<B>(blk, b);
        let sh = scales::<B>(blk, b + QK / B::SUB / 2);
        for i in 0..R {
            let pl = _mm512_add_epi32(lo[i][0], lo[i][1]);
            let ph = _mm512_add_epi32(hi[i][0], hi[i][1]);
            main[i] = _mm512_add_epi32(main[i], _mm512_mullo_epi32(pl, sl));
            main[i] = _mm512_add_epi32(main[i], _mm512_mullo_epi32(ph, sh));
        }
    }
    finish_with_mins::<B, R>(blk, acts, pairs, r0, s, &main, acc);
}

/// Q5_K's [`rows_block`]: one 32-value sub-block at a time (each quad's fifth bits sit in
/// the line of its sub-block, [`quad5`]); two chains of `vpdpbusd` per row.
#[inline(always)]
unsafe fn rows_block5<B: KBlock, const R: usize>(
    blk: *const Line,
    acts: &Acts,
    pairs: &[[i32; 16]],
    r0: usize,
    s: usize,
    acc: &mut [__m512],
) {
    let xq = act_quads::<R>(acts, r0, s);
    let per = B::SUB / 4;
    let mut main = [_mm512_setzero_si512(); R];
    for b in 0..QK / B::SUB {
        let mut part = [_mm512_setzero_si512(); R];
        let mut part2 = [_mm512_setzero_si512(); R];
        for t in (per * b..per * (b + 1)).step_by(2) {
            let w = quad5::<B>(blk, t);
            let w2 = quad5::<B>(blk, t + 1);
            for i in 0..R {
                part[i] = _mm512_dpbusd_epi32(part[i], w, _mm512_set1_epi32(*xq[i].add(t)));
                part2[i] = _mm512_dpbusd_epi32(part2[i], w2, _mm512_set1_epi32(*xq[i].add(t + 1)));
            }
        }
        let sc = scales::<B>(blk, b);
        for i in 0..R {
            let p = _mm512_add_epi32(part[i], part2[i]);
            main[i] = _mm512_add_epi32(main[i], _mm512_mullo_epi32(p, sc));
        }
    }
    finish_with_mins::<B, R>(blk, acts, pairs, r0, s, &main, acc);
}

/// The activation rows `r0 ..` quantised values of super-block `s`, as quads.
#[inline(always)]
unsafe fn act_quads<const R: usize>(acts: &Acts, r0: usize, s: usize) -> [*const i32; R] {
    std::array::from_fn(|i| {
        let x = acts.qk.get_unchecked((r0 + i) * acts.kbs + s);
        x.qs.as_ptr() as *const i32
    })
}

/// Q4_K, Q5_K's float step of one super-block: `acc = fma(main, d·d₈, acc)`, then
/// `acc = fma(min, −dmin·d₈, acc)` with `min = Σ mn·bsum` (the pairs of 32-value sums of
/// [`min_pairs`], two per `vpdpwssd`).
#[inline(always)]
unsafe fn finish_with_mins<B: KBlock, const R: usize>(
    blk: *const Line,
    acts: &Acts,
    pairs: &[[i32; 16]],
    r0: usize,
    s: usize,
    main: &[__m512i; R],
    acc: &mut [__m512],
) {
    let kbs = acts.kbs;
    let d = _mm512_load_ps(blk.add(Layout::<B>::D) as *const f32);
    let dmin = _mm512_load_ps(blk.add(Layout::<B>::D + 1) as *const f32);
    for i in 0..R {
        let d8 = *acts.dk.get_unchecked((r0 + i) * kbs + s);
        let a = acc.get_unchecked_mut(i);
        *a = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(main[i]),
            _mm512_mul_ps(d, _mm512_set1_ps(d8)),
            *a,
        );
        let pr = pairs.get_unchecked(i * kbs + s);
        let mut mins = _mm512_setzero_si512();
        for (q, &p) in pr[..4].iter().enumerate() {
            let at = (blk.add(Layout::<B>::MN) as *const u8).add(32 * q) as *const __m256i;
            let mn = _mm512_cvtepu8_epi16(_mm256_load_si256(at));
            mins = _mm512_dpwssd_epi32(mins, mn, _mm512_set1_epi32(p));
        }
        *a = _mm512_fnmadd_ps(
            _mm512_cvtepi32_ps(mins),
            _mm512_mul_ps(dmin, _mm512_set1_ps(d8)),
            *a,
        );
    }
}

/// Q4_K, Q5_K's activation terms of one row's super-block `x` for [`rows_block`]: in
/// `[q]` (`q < 4`) the sums of its 32-value sub-blocks `2q` and `2q + 1` as two 16-bit
/// halves (each sum of 32 values of at most 127 in size fits), the pair a `vpdpwssd`
/// multiplies with the mins of those sub-blocks.
fn min_pairs(x: &Q8K) -> [i32; 16] {
    let sum32 = |j: usize| (x.bsums[2 * j] + x.bsums[2 * j + 1]) as i16 as u16 as u32;
    let mut out = [0i32; 16];
    for (q, o) in out[..4].iter_mut().enumerate() {
        *o = (sum32(2 * q) | sum32(2 * q + 1) << 16) as i32;
    }
    out
}

/// Q6_K's [`rows_block`]: `R` activation rows from `r0` against group super-block `blk`
/// (super-block `s`), added to `acc[i]`. `starts[i·kbs + s]` holds row `r0 + i`'s
/// `−OFFSET·bsum_b` of each 16-value sub-block `b`, where that sub-block's sum starts (so
/// the offset costs nothing per sub-block): then four `vpdpbusd` ([`sixes`]), and
/// `main += sc_b·part` in one `vpmulld` and one add. The integers are exact, so `main` is
/// [`super::kquants512::run_prompt_k512`]'s integer and the float step is its step.
#[inline(always)]
unsafe fn rows_block6<B: KBlock, const R: usize>(
    blk: *const Line,
    acts: &Acts,
    starts: &[[i32; 16]],
    r0: usize,
    s: usize,
    acc: &mut [__m512],
) {
    let kbs = acts.kbs;
    let xq = act_quads::<R>(acts, r0, s);
    let st: [*const i32; R] = std::array::from_fn(|i| starts.get_unchecked(i * kbs + s).as_ptr());
    let mut main = [_mm512_setzero_si512(); R];
    for b in 0..QK / 16 {
        let w = sixes::<B>(blk, b);
        let sc = scales::<B>(blk, b);
        for i in 0..R {
            let mut part = _mm512_set1_epi32(*st[i].add(b));
            for (q, &wq) in w.iter().enumerate() {
                part = _mm512_dpbusd_epi32(part, wq, _mm512_set1_epi32(*xq[i].add(4 * b + q)));
            }
            main[i] = _mm512_add_epi32(main[i], _mm512_mullo_epi32(part, sc));
        }
    }
    let d = _mm512_load_ps(blk.add(Layout::<B>::D) as *const f32);
    for (i, m) in main.iter().enumerate() {
        let d8 = *acts.dk.get_unchecked((r0 + i) * kbs + s);
        let a = acc.get_unchecked_mut(i);
        *a = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(*m),
            _mm512_mul_ps(d, _mm512_set1_ps(d8)),
            *a,
        );
    }
}

/// Group `g` against activation rows `rows`, results for the group's lanes in `mask`
/// (weight rows `16g + l`); each row's activation terms in `starts` (Q6_K's sub-block
/// starts for [`rows_block6`], Q4_K and Q5_K's [`min_pairs`] for [`rows_block`]; row
/// `rows.start + i`'s super-block `s` at `i·kbs + s`). At most [`ACC_ROWS`] rows (the
/// accumulators live on the stack). Caller guarantees that the rows exist and that it
/// owns `y[r, 16g + l]` for the lanes of `mask`; compiled into [`run_group`] and
/// [`run_group_gfni`].
#[inline(always)]
unsafe fn group<B: KBlock>(
    mat: &KLanes<B>,
    acts: &Acts,
    starts: &[[i32; 16]],
    rows: Range<usize>,
    g: usize,
    mask: __mmask16,
    y: *mut f32,
) {
    debug_assert!(rows.len() <= ACC_ROWS);
    // Only the rows' accumulators are zeroed (a whole array's 4 KiB memset per group was
    // 2 % of a decode step).
    let mut store = [std::mem::MaybeUninit::<__m512>::uninit(); ACC_ROWS];
    for a in &mut store[..rows.len()] {
        a.write(_mm512_setzero_ps());
    }
    // SAFETY: the first rows.len() (≤ ACC_ROWS) accumulators were written just above.
    let acc = std::slice::from_raw_parts_mut(store.as_mut_ptr() as *mut __m512, rows.len());
    for s in 0..mat.kbs {
        let blk = mat.block(g, s).as_ptr();
        let mut r = rows.start;
        while r < rows.end {
            let a = &mut acc[r - rows.start..];
            let st = starts.get((r - rows.start) * mat.kbs..).unwrap_or(&[]);
            let left = rows.end - r;
            macro_rules! step {
                ($r:literal) => {{
                    if Layout::<B>::SIX {
                        rows_block6::<B, $r>(blk, acts, st, r, s, a);
                    } else if Layout::<B>::HI_LINES == 0 {
                        rows_block::<B, $r>(blk, acts, st, r, s, a);
                    } else {
                        rows_block5::<B, $r>(blk, acts, st, r, s, a);
                    }
                    $r
                }};
            }
            // Up to 8 rows in one pass over the super-block's lines (`by_pass_width`).
            let step = by_pass_width!(left, step);
            r += step;
        }
    }
    for (i, a) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(y.add((rows.start + i) * mat.n + ROWS * g), mask, *a);
    }
}

/// Whether decode of one activation row takes a work item's groups two at a time, from
/// the two halves of the item, each super-block of one beside the same super-block of the
/// other ([`Pairing`]). The bits are the same either way (each group's sums run in its own
/// order); a benchmark turns it off to compare (`quant_matmul::set_paired_streams`).
pub(in super::super) static PAIRED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

/// Bytes of weights each of a pair's streams must hold before Q4_K and Q5_K take groups in
/// pairs. Two streams per thread lift a core's decode where its share of the memory is more
/// than it multiplies alone (Qwen2.5-7B at one thread 4.9 → 6.2 tokens/s on a 2-vCPU AMD
/// EPYC); for short streams of these types they were up to 8 % slower. Q6_K gained at every length measured.
const PAIR_MIN_STREAM_BYTES: usize = 2 << 20;

/// How [`KLanes::run_chunk_with`] orders the groups of one activation row.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in super::super) enum Pairing {
    /// One group after another.
    Off,
    /// In pairs where [`pairs_pay`] holds.
    Rule,
    /// In pairs whenever there are at least four groups (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Always,
}

/// Whether a work item of `groups` groups of `B`, `kbs` super-blocks each, is worth taking in
/// pairs (Q6_K: from four groups; Q4_K, Q5_K: from [`PAIR_MIN_STREAM_BYTES`] a stream).
fn pairs_pay<B: KBlock>(groups: usize, kbs: usize) -> bool {
    let stream = groups / 2 * kbs * Layout::<B>::LINES * std::mem::size_of::<Line>();
    groups >= 4 && (Layout::<B>::SIX || stream >= PAIR_MIN_STREAM_BYTES)
}

/// Groups `gs` against one activation row (`r`), their super-blocks taken in turn (super-block
/// `s` of each group, then `s + 1` of each) so that the thread reads `N` streams of weights at
/// once; each group's sums are [`group`]'s, in its order, so the bits are [`group`]'s. Caller
/// guarantees that row `r` exists, that `starts` begins at row `r`'s activation terms, and
/// that it owns `y[r, 16g + l]` for each group's lanes.
#[inline(always)]
unsafe fn group_multi<B: KBlock, const N: usize>(
    mat: &KLanes<B>,
    acts: &Acts,
    starts: &[[i32; 16]],
    r: usize,
    gs: [(usize, __mmask16); N],
    y: *mut f32,
) {
    let mut acc = [[_mm512_setzero_ps()]; N];
    for s in 0..mat.kbs {
        for (a, &(g, _)) in acc.iter_mut().zip(gs.iter()) {
            let blk = mat.block(g, s).as_ptr();
            if Layout::<B>::SIX {
                rows_block6::<B, 1>(blk, acts, starts, r, s, a);
            } else if Layout::<B>::HI_LINES == 0 {
                rows_block::<B, 1>(blk, acts, starts, r, s, a);
            } else {
                rows_block5::<B, 1>(blk, acts, starts, r, s, a);
            }
        }
    }
    for (a, &(g, m)) in acc.iter().zip(gs.iter()) {
        _mm512_mask_storeu_ps(y.add(r * mat.n + ROWS * g), m, a[0]);
    }
}

/// [`group_multi`] for Q4_K and Q5_K. Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW and
/// VNNI, and [`group_multi`]'s conditions.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn run_multi<B: KBlock, const N: usize>(
    mat: &KLanes<B>,
    acts: &Acts,
    starts: &[[i32; 16]],
    r: usize,
    gs: [(usize, __mmask16); N],
    y: *mut f32,
) {
    group_multi(mat, acts, starts, r, gs, y)
}

/// [`group_multi`] for Q6_K. Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW, VNNI and
/// GFNI, and [`group_multi`]'s conditions.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,gfni")]
unsafe fn run_multi_gfni<B: KBlock, const N: usize>(
    mat: &KLanes<B>,
    acts: &Acts,
    starts: &[[i32; 16]],
    r: usize,
    gs: [(usize, __mmask16); N],
    y: *mut f32,
) {
    group_multi(mat, acts, starts, r, gs, y)
}

/// [`group`] for Q4_K and Q5_K. Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW and VNNI,
/// and [`group`]'s conditions.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn run_group<B: KBlock>(
    mat: &KLanes<B>,
    acts: &Acts,
    pairs: &[[i32; 16]],
    rows: Range<usize>,
    g: usize,
    mask: __mmask16,
    y: *mut f32,
) {
    group(mat, acts, pairs, rows, g, mask, y)
}

/// [`group`] for Q6_K. Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW, VNNI and GFNI,
/// and [`group`]'s conditions.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,gfni")]
unsafe fn run_group_gfni<B: KBlock>(
    mat: &KLanes<B>,
    acts: &Acts,
    starts: &[[i32; 16]],
    rows: Range<usize>,
    g: usize,
    mask: __mmask16,
    y: *mut f32,
) {
    group(mat, acts, starts, rows, g, mask, y)
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
        let pairing = if PAIRED.load(std::sync::atomic::Ordering::Relaxed) {
            Pairing::Rule
        } else {
            Pairing::Off
        };
        // SAFETY: the caller's conditions.
        unsafe { self.run_chunk_with(acts, rows, js, y, pairing) }
    }

    fn chunk_rows(&self, threads: usize) -> usize {
        lanes_chunk_rows(self.n, threads)
    }
}

impl<B: KBlock> KLanes<B> {
    /// [`CpuMatmul::run_chunk`] with the groups of one activation row ordered by `pairing`.
    ///
    /// # Safety
    /// [`CpuMatmul::run_chunk`]'s.
    pub(in super::super) unsafe fn run_chunk_with(
        &self,
        acts: &Acts,
        rows: Range<usize>,
        js: Range<usize>,
        y: *mut f32,
        pairing: Pairing,
    ) {
        debug_assert!(acts.kbs == self.kbs && rows.end <= acts.rows() && js.end <= self.n);
        if js.is_empty() || rows.is_empty() {
            return;
        }
        // Each row's activation terms, computed once for all groups: Q6_K's sub-block
        // starts (−OFFSET·bsum), Q4_K and Q5_K's pairs of 32-value sums ([`min_pairs`]).
        let starts: Vec<[i32; 16]> = acts.qk[rows.start * self.kbs..rows.end * self.kbs]
            .iter()
            .map(|x| {
                if Layout::<B>::SIX {
                    x.bsums.map(|b| -B::OFFSET * b)
                } else {
                    min_pairs(x)
                }
            })
            .collect();
        let pairing = match (rows.len(), pairing) {
            (1, Pairing::Always) => groups_in(&js) >= 4,
            (1, Pairing::Rule) => pairs_pay::<B>(groups_in(&js), self.kbs),
            _ => false,
        };
        if pairing {
            let gs: Vec<_> = group_masks(js).collect();
            let half = gs.len() / 2;
            for i in 0..half {
                let pick = [gs[i], gs[half + i]];
                // SAFETY: as below, for one row (`rows.start`) and the two groups' lanes.
                unsafe {
                    if Layout::<B>::SIX {
                        run_multi_gfni::<B, 2>(self, acts, &starts, rows.start, pick, y)
                    } else {
                        run_multi::<B, 2>(self, acts, &starts, rows.start, pick, y)
                    }
                };
            }
            if let Some(&(g, mask)) = gs.get(2 * half) {
                // SAFETY: as below.
                unsafe {
                    if Layout::<B>::SIX {
                        run_group_gfni(self, acts, &starts, rows.clone(), g, mask, y)
                    } else {
                        run_group(self, acts, &starts, rows.clone(), g, mask, y)
                    }
                };
            }
            return;
        }
        for (g, mask) in group_masks(js) {
            for r0 in rows.clone().step_by(ACC_ROWS) {
                let part = r0..rows.end.min(r0 + ACC_ROWS);
                let st = &starts[(r0 - rows.start) * self.kbs..];
                // SAFETY: a KLanes is only built where `available` holds (`Simd::detect`
                // found AVX-512 VNNI, AVX2, FMA, F16C; GFNI for Q6_K); the caller
                // guarantees the rows and owns y for `js`; `st` has every row's
                // super-blocks from `r0`; `part` has at most ACC_ROWS rows.
                unsafe {
                    if Layout::<B>::SIX {
                        run_group_gfni(self, acts, st, part, g, mask, y)
                    } else {
                        run_group(self, acts, st, part, g, mask, y)
                    }
                };
            }
        }
    }
}

/// Groups of 16 weight rows that weight rows `js` touch.
fn groups_in(js: &Range<usize>) -> usize {
    js.end.div_ceil(ROWS) - js.start / ROWS
}

/// The groups of 16 weight rows that weight rows `js` touch, each with the mask of its lanes
/// within `js`.
pub(super) fn group_masks(js: Range<usize>) -> impl Iterator<Item = (usize, __mmask16)> {
    (js.start / ROWS..js.end.div_ceil(ROWS)).map(move |g| {
        let lo = js.start.max(ROWS * g) - ROWS * g;
        let hi = js.end.min(ROWS * (g + 1)) - ROWS * g;
        (g, (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16)
    })
}

/// [`CpuMatmul::chunk_rows`] of a matrix of `n` rows in lanes (prompts: decode takes
/// guided shares, `quant_matmul::run_guided`): whole groups, about eight items per thread,
/// from one group to 16, so a work item's fixed costs (the activation terms, the call)
/// spread over more weights. One-group items had left decode of a 65,536 × 4,096 Q4_K
/// matrix a quarter slower (profiled with perf).
pub(super) fn lanes_chunk_rows(n: usize, threads: usize) -> usize {
    let per_thread = n / (8 * threads.max(1));
    (per_thread / ROWS).clamp(1, 16) * ROWS
}

/// Whether this CPU runs [`KLanes`] of `B` (the SIMD level [`Simd::detect`] chose; Q6_K
/// also needs GFNI for [`sixes`]).
pub(crate) fn available<B: KBlock>(simd: Simd) -> bool {
    simd == Simd::Avx512Vnni && (!Layout::<B>::SIX || std::arch::is_x86_feature_detected!("gfni"))
}
