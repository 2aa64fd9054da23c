//! The 32-value offset types (Q4_0, Q5_0) and Q8_0 stored for AVX-512 VNNI with weight rows
//! in vector lanes: [`QLanes`], the 32-value counterpart of [`super::klanes512::KLanes`].
//! These are the types llama-quantize falls back to in a Q4_K_M file where a row is not a
//! whole number of 256-value super-blocks (Nemotron-3-Nano-4B's 3,136-wide rows, most of
//! SmolLM2's file), so they decide those models' decode.
//!
//! Layout: each group of 16 weight rows keeps, per pair of consecutive 32-value blocks, the
//! values of all 16 rows interleaved so that one 64-byte line holds four consecutive values
//! (a quad) of every row (lane `l`, bytes `4l .. 4l + 4`), stored unsigned as `u = q +
//! OFFSET` ([`LaneBlock::OFFSET`]: 8 for Q4_0, 16 for Q5_0, 128 for Q8_0's signed bytes):
//! Q8_0 one line per quad (eight per block), Q4_0 and Q5_0 quads `t` and `t + 4` as the low
//! and high nibbles of line `t`, then Q5_0's fifth bits in one line (bit `t` of byte `4l +
//! c` is the fifth bit of value `4t + c` of row `l`). The pair ends with one line of `d`:
//! the 16 rows' f16 of the first block, then of the second. So a group takes exactly the
//! file's bytes (one zero block where a row has an odd number of blocks, zero rows in a
//! last partial group).
//!
//! Why: the row-major tile ([`super::avx512::dot_tile_512`]) spends, per block and row,
//! a permutation of the scales and a fused multiply-add per 16 products and a horizontal
//! sum per dot product; Nemotron's decode ran at 0.93× llama.cpp and SmolLM2's Q4_K_M file
//! at 0.82× on those types while the k-quants in lanes ran faster than llama.cpp. With
//! rows in lanes every instruction serves 16 weight rows: per quad one `vpdpbusd` per
//! activation row (its broadcast a memory operand), per block one conversion and one fused
//! multiply-add, and nothing is summed across lanes.
//!
//! Arithmetic of each (weight row, activation row) pair: a block's exact integer
//! `Σ (u − OFFSET)·q₈ = Σ u·q₈ − OFFSET·Σ q₈` (the sum starts at `−OFFSET·Σ q₈`, computed
//! once per activation block), then `acc = fma(sum, d·d₈, acc)` in block order: the
//! integer llama.cpp's `vec_dot_q*_0_q8_0` forms, with one float step per block. A row's
//! result is the same bits whatever activation rows it is computed with and whatever
//! weight-row range a work item takes; it differs from the row-major paths only in float
//! summation order (those fold `−OFFSET·d` in as a float term).

use std::arch::x86_64::*;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::Range;

use anyhow::{bail, Result};

use super::super::source::{for_row_groups, RowSource, Slots};
use super::super::{Acts, CpuMatmul, LaneBlock, Simd, BLOCK};
// Weight rows per group (ROWS, lanes of a 512-bit register of i32) as in `KLanes`.
use super::klanes512::{group_masks, lanes_chunk_rows, ROWS};

/// Activation rows a group's accumulators hold at once (on the stack).
const ACC_ROWS: usize = 64;

/// One 64-byte line of a group's pair of blocks.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Where each part of a group's pair of blocks lies, in lines, for type `B`.
struct Layout<B: LaneBlock>(PhantomData<B>);

impl<B: LaneBlock> Layout<B> {
    /// Lines of values per block: a quad each (Q8_0), or two quads as nibbles.
    const VALS: usize = if B::BITS == 8 { 8 } else { 4 };
    /// Lines of fifth bits per block (Q5_0).
    const HI: usize = if B::BITS == 5 { 1 } else { 0 };
    /// Lines of block `h` (0, 1) of the pair start at `h·PER_BLOCK`.
    const PER_BLOCK: usize = Self::VALS + Self::HI;
    /// The line of both blocks' `d` (f16: block 0 at bytes 0..32, block 1 at 32..64).
    const D: usize = 2 * Self::PER_BLOCK;
    const LINES: usize = Self::D + 1;
}

/// A `[n, k]` weight of type `B` with its rows in lanes (see the module's text).
pub(crate) struct QLanes<B: LaneBlock> {
    n: usize,
    k: usize,
    /// 32-value blocks per row, and pairs of them (the last may hold one).
    kb: usize,
    pairs: usize,
    /// Group `g`'s pair `p` at lines `(g·pairs + p)·LINES ..`.
    lines: crate::inference::kernels::weight_memory::WeightVec<Line>,
    _b: PhantomData<B>,
}

impl<B: LaneBlock> Debug for QLanes<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QLanes<{}>[{}, {}]", B::NAME, self.n, self.k)
    }
}

impl<B: LaneBlock> QLanes<B> {
    /// The matrix straight from its GGUF bytes (a `[n, k]` tensor, row major, in `src`):
    /// each piece of whole groups of rows is packed into its groups' lines on its worker,
    /// so the tensor is never whole in memory beside the lanes.
    pub(crate) fn from_source(src: &RowSource<'_>, n: usize, k: usize, simd: Simd) -> Result<Self> {
        if !available(simd) {
            bail!(
                "{} rows in lanes need AVX-512 VNNI (this CPU runs {simd:?})",
                B::NAME
            );
        }
        if k == 0 || !k.is_multiple_of(BLOCK) {
            bail!(
                "{} rows of {k} values are not whole blocks of {BLOCK}",
                B::NAME
            );
        }
        let kb = k / BLOCK;
        let pairs = kb.div_ceil(2);
        let row_bytes = kb * B::BYTES;
        let groups = n.div_ceil(ROWS);
        let per_group = pairs * Layout::<B>::LINES;
        let mut lines = crate::inference::kernels::weight_memory::WeightVec::<Line>::with_capacity(
            groups * per_group,
        );
        let slots = Slots::of(&mut lines);
        for_row_groups(src, n, row_bytes, ROWS, |r0, bytes| {
            let rows = bytes.len() / row_bytes;
            let (g0, g1) = (r0 / ROWS, (r0 + rows).div_ceil(ROWS));
            // SAFETY: the piece starts at a whole group (`for_row_groups`), so its groups'
            // lines are its own; they lie below the capacity.
            let out = unsafe { slots.bytes(g0 * per_group * 64..g1 * per_group * 64) };
            // Every lane of a whole group's pairs is written below; zeros are left only in
            // a partial last group's missing rows and an odd row's last half pair.
            if rows % ROWS != 0 || kb % 2 == 1 {
                out.fill(0);
            }
            for (i, row) in bytes.chunks_exact(row_bytes).enumerate() {
                let (g, l) = ((r0 + i) / ROWS - g0, (r0 + i) % ROWS);
                for (b, block) in row.chunks_exact(B::BYTES).enumerate() {
                    let at = (g * pairs + b / 2) * Layout::<B>::LINES;
                    let lines = &mut out[at * 64..(at + Layout::<B>::LINES) * 64];
                    Self::put(lines, b % 2, l, block);
                }
            }
        })?;
        // SAFETY: `for_row_groups` returned Ok: every group's lines were written.
        unsafe { lines.set_len(groups * per_group) };
        Ok(Self {
            n,
            k,
            kb,
            pairs,
            lines,
            _b: PhantomData,
        })
    }

    /// Write GGUF block `c` as block `h` (0, 1) of a pair for lane `l` into the pair's
    /// lines `out` (four bytes per line: [`LaneBlock::lane_bytes`]).
    fn put(out: &mut [u8], h: usize, l: usize, c: &[u8]) {
        let (d, bytes, hi) = B::lane_bytes(c);
        let base = 64 * h * Layout::<B>::PER_BLOCK + 4 * l;
        for (t, quad) in bytes.chunks_exact(4).take(Layout::<B>::VALS).enumerate() {
            out[base + 64 * t..base + 64 * t + 4].copy_from_slice(quad);
        }
        if Layout::<B>::HI == 1 {
            let at = base + 64 * Layout::<B>::VALS;
            out[at..at + 4].copy_from_slice(&hi);
        }
        let at = 64 * Layout::<B>::D + 32 * h + 2 * l;
        out[at..at + 2].copy_from_slice(&d.to_ne_bytes());
    }

    /// Row `j`'s block `b`: its `d` and its stored values, read back from the lanes.
    fn row_block(&self, j: usize, b: usize) -> (f32, [u8; BLOCK]) {
        let at = ((j / ROWS) * self.pairs + b / 2) * Layout::<B>::LINES;
        let blk = &self.lines[at..at + Layout::<B>::LINES];
        let (h, l) = (b % 2, j % ROWS);
        let byte = |line: usize, i: usize| blk[h * Layout::<B>::PER_BLOCK + line].0[i];
        let u = std::array::from_fn(|v| {
            let (t, c) = (v / 4, v % 4);
            if B::BITS == 8 {
                return byte(t, 4 * l + c);
            }
            let low = (byte(t % 4, 4 * l + c) >> (4 * (t / 4))) & 0x0f;
            let high = if B::BITS == 5 {
                ((byte(Layout::<B>::VALS, 4 * l + c) >> t) & 1) << 4
            } else {
                0
            };
            low | high
        });
        let d = &blk[Layout::<B>::D].0[32 * h + 2 * l..32 * h + 2 * l + 2];
        (half::f16::from_ne_bytes([d[0], d[1]]).to_f32(), u)
    }
}

/// Quads `t` and `t + 4` (`t < 4`) of block `h` of a Q4_0/Q5_0 group's pair `blk`: the low
/// and high nibbles of one line, with Q5_0's fifth bits added.
#[inline(always)]
unsafe fn nibble_quads<B: LaneBlock>(blk: *const Line, h: usize, t: usize) -> (__m512i, __m512i) {
    let base = blk.add(h * Layout::<B>::PER_BLOCK);
    let v = _mm512_load_si512(base.add(t) as *const _);
    let nib = _mm512_set1_epi8(0x0f);
    let lo = _mm512_and_si512(v, nib);
    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), nib);
    if B::BITS != 5 {
        return (lo, hi);
    }
    let bits = _mm512_load_si512(base.add(Layout::<B>::VALS) as *const _);
    let sixteen = _mm512_set1_epi8(0x10);
    let set_lo = _mm512_test_epi8_mask(bits, _mm512_set1_epi8(1 << t));
    let set_hi = _mm512_test_epi8_mask(bits, _mm512_set1_epi8(1 << (t + 4)));
    // (a nibble is below 16, so adding 16 sets bit 4)
    (
        _mm512_mask_add_epi8(lo, set_lo, lo, sixteen),
        _mm512_mask_add_epi8(hi, set_hi, hi, sixteen),
    )
}

/// `R` activation rows from `r0` against block `b` (block `b % 2` of the group's pair
/// `blk`), added to `acc[i]` (lane `l`: the group's weight row `l`). `starts[i·kb + b]`
/// is row `r0 + i`'s `−OFFSET·Σ q₈` of block `b`. Two chains of `vpdpbusd` per row (exact
/// integers: how they are split changes nothing).
#[inline(always)]
unsafe fn rows_block<B: LaneBlock, const R: usize>(
    blk: *const Line,
    acts: &Acts,
    starts: &[i32],
    r0: usize,
    b: usize,
    acc: &mut [__m512],
) {
    let (kb, h) = (acts.kb, b % 2);
    let xq: [*const i32; R] =
        std::array::from_fn(|i| acts.qs.get_unchecked((r0 + i) * kb + b).0.as_ptr() as *const i32);
    let mut part = [[_mm512_setzero_si512(); 2]; R];
    for (i, p) in part.iter_mut().enumerate() {
        p[0] = _mm512_set1_epi32(*starts.get_unchecked(i * kb + b));
    }
    if B::BITS == 8 {
        let base = blk.add(h * Layout::<B>::PER_BLOCK);
        for t in 0..8 {
            let w = _mm512_load_si512(base.add(t) as *const _);
            for i in 0..R {
                part[i][t % 2] =
                    _mm512_dpbusd_epi32(part[i][t % 2], w, _mm512_set1_epi32(*xq[i].add(t)));
            }
        }
    } else {
        for t in 0..4 {
            let (lo, hi) = nibble_quads::<B>(blk, h, t);
            for i in 0..R {
                part[i][0] = _mm512_dpbusd_epi32(part[i][0], lo, _mm512_set1_epi32(*xq[i].add(t)));
                part[i][1] =
                    _mm512_dpbusd_epi32(part[i][1], hi, _mm512_set1_epi32(*xq[i].add(t + 4)));
            }
        }
    }
    let d = _mm512_cvtph_ps(_mm256_load_si256(
        (blk.add(Layout::<B>::D) as *const __m256i).add(h),
    ));
    for (i, p) in part.iter().enumerate() {
        let d8 = *acts.d.get_unchecked((r0 + i) * acts.kbp + b);
        let a = acc.get_unchecked_mut(i);
        *a = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(_mm512_add_epi32(p[0], p[1])),
            _mm512_mul_ps(d, _mm512_set1_ps(d8)),
            *a,
        );
    }
}

/// Group `g` against activation rows `rows` (at most [`ACC_ROWS`]), results for the group's
/// lanes in `mask` (weight rows `16g + l`); `starts` holds row `rows.start + i`'s block
/// starts at `i·kb ..`. Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW and VNNI, that the
/// rows exist and that it owns `y[r, 16g + l]` for the lanes of `mask`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn run_group<B: LaneBlock>(
    mat: &QLanes<B>,
    acts: &Acts,
    starts: &[i32],
    rows: Range<usize>,
    g: usize,
    mask: __mmask16,
    y: *mut f32,
) {
    debug_assert!(rows.len() <= ACC_ROWS);
    let mut store = [std::mem::MaybeUninit::<__m512>::uninit(); ACC_ROWS];
    for a in &mut store[..rows.len()] {
        a.write(_mm512_setzero_ps());
    }
    // SAFETY: the first rows.len() (≤ ACC_ROWS) accumulators were written just above.
    let acc = std::slice::from_raw_parts_mut(store.as_mut_ptr() as *mut __m512, rows.len());
    for b in 0..mat.kb {
        let at = (g * mat.pairs + b / 2) * Layout::<B>::LINES;
        let blk = mat.lines.as_ptr().add(at);
        let mut r = rows.start;
        while r < rows.end {
            let i = r - rows.start;
            let (a, st) = (&mut acc[i..], starts.get_unchecked(i * mat.kb..));
            let left = rows.end - r;
            macro_rules! pass {
                ($r:literal) => {{
                    rows_block::<B, $r>(blk, acts, st, r, b, a);
                    $r
                }};
            }
            // Up to 8 rows in one pass over the pair's lines (`by_pass_width`).
            r += by_pass_width!(left, pass);
        }
    }
    for (i, a) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(y.add((rows.start + i) * mat.n + ROWS * g), mask, *a);
    }
}

impl<B: LaneBlock> CpuMatmul for QLanes<B> {
    fn n(&self) -> usize {
        self.n
    }

    fn k(&self) -> usize {
        self.k
    }

    fn resident_bytes(&self) -> u64 {
        (self.lines.capacity() * std::mem::size_of::<Line>()) as u64
    }

    fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n * self.k);
        for j in 0..self.n {
            for b in 0..self.kb {
                let (d, u) = self.row_block(j, b);
                out.extend(u.iter().map(|&u| d * (i32::from(u) - B::OFFSET) as f32));
            }
        }
        out
    }

    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32) {
        debug_assert!(acts.kb == self.kb && rows.end <= acts.rows() && js.end <= self.n);
        if js.is_empty() || rows.is_empty() {
            return;
        }
        // Each row's block starts −OFFSET·Σq₈, computed once for all groups.
        let starts: Vec<i32> = acts.qs[rows.start * self.kb..rows.end * self.kb]
            .iter()
            .map(|q| -B::OFFSET * q.0.iter().map(|&v| i32::from(v)).sum::<i32>())
            .collect();
        for (g, mask) in group_masks(js) {
            for r0 in rows.clone().step_by(ACC_ROWS) {
                let part = r0..rows.end.min(r0 + ACC_ROWS);
                let st = &starts[(r0 - rows.start) * self.kb..];
                // SAFETY: a QLanes is only built where `available` holds (`Simd::detect`
                // found AVX-512 VNNI, BW, AVX2, FMA, F16C); the caller guarantees the rows
                // and owns y for `js`; `st` has every row's blocks from `r0`; `part` has at
                // most ACC_ROWS rows.
                unsafe { run_group(self, acts, st, part, g, mask, y) };
            }
        }
    }

    fn chunk_rows(&self, threads: usize) -> usize {
        lanes_chunk_rows(self.n, threads)
    }
}

/// Whether this CPU runs [`QLanes`] (the SIMD level [`Simd::detect`] chose).
pub(crate) fn available(simd: Simd) -> bool {
    simd == Simd::Avx512Vnni
}
