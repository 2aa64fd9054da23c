//! The AVX-512 and AVX2 tiles of the F16/BF16 matrices (`super::super::floats`): `W` weight
//! rows by `N` activation rows, each pair's 16 lanes in one 512-bit register (AVX-512) or two
//! 256-bit halves (AVX2: lanes 0..8 and 8..16), every step one fused multiply-add per pair in
//! the order of [`HalfType::dot_portable`], and the lanes summed by [`hsum`] as
//! `floats::reduce` does: so every tile shape and both ISAs give the portable path's bits.

use std::arch::x86_64::*;
use std::ops::Range;

use super::super::floats::{FloatMatrix, HalfType};

/// How many values ahead of the current step each weight row is prefetched.
const PREFETCH: usize = 512;

/// `l[i] + l[i + 8]`, then `+ 4`, `+ 2`, `+ 1` of the lanes `s8` already summed to eight.
#[inline(always)]
unsafe fn hsum8(s8: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    // Lanes 0, 1: s4[0] + s4[2], s4[1] + s4[3].
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2)))
}

/// The 16 lanes of `v` summed as `floats::reduce`.
#[inline(always)]
unsafe fn hsum(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    hsum8(_mm256_add_ps(lo, hi))
}

/// Dot products of weight rows `w` with activation rows `x` over `chunks` steps: AVX-512.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F; every pointer has `chunks · H::CHUNK` readable values.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn tile512<H: HalfType, const W: usize, const N: usize, const PF: bool>(
    w: [*const u16; W],
    x: [*const f32; N],
    chunks: usize,
) -> [[f32; N]; W] {
    let mut acc = [[_mm512_setzero_ps(); N]; W];
    for c in 0..chunks {
        let at = c * H::CHUNK;
        if PF {
            for &wi in &w {
                _mm_prefetch::<_MM_HINT_T0>(wi.wrapping_add(at + PREFETCH) as *const i8);
            }
        }
        let wv: [[__m512; 2]; W] = std::array::from_fn(|i| H::w512(w[i].add(at)));
        for s in 0..H::STEPS {
            for r in 0..N {
                let xv = _mm512_loadu_ps(x[r].add(at + H::x_offset(s, 0)));
                for i in 0..W {
                    acc[i][r] = _mm512_fmadd_ps(wv[i][s], xv, acc[i][r]);
                }
            }
        }
    }
    std::array::from_fn(|i| std::array::from_fn(|r| hsum(acc[i][r])))
}

/// [`tile512`] with each weight row prefetched [`PREFETCH`] values ahead: the prompt tiles.
///
/// # Safety
/// As [`tile512`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn tile512_prefetched<H: HalfType, const W: usize, const N: usize>(
    w: [*const u16; W],
    x: [*const f32; N],
    chunks: usize,
) -> [[f32; N]; W] {
    tile512::<H, W, N, true>(w, x, chunks)
}

/// [`tile512`] on AVX2: each pair's lanes in two 256-bit halves.
///
/// # Safety
/// AVX2, FMA and F16C; as [`tile512`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile256<H: HalfType, const W: usize, const N: usize>(
    w: [*const u16; W],
    x: [*const f32; N],
    chunks: usize,
) -> [[f32; N]; W] {
    let mut acc = [[[_mm256_setzero_ps(); 2]; N]; W];
    for c in 0..chunks {
        let at = c * H::CHUNK;
        for h in 0..2 {
            let wv: [[__m256; 2]; W] = std::array::from_fn(|i| H::w256(w[i].add(at), h));
            for s in 0..H::STEPS {
                for r in 0..N {
                    let xv = _mm256_loadu_ps(x[r].add(at + H::x_offset(s, h)));
                    for i in 0..W {
                        acc[i][r][h] = _mm256_fmadd_ps(wv[i][s], xv, acc[i][r][h]);
                    }
                }
            }
        }
    }
    std::array::from_fn(|i| {
        std::array::from_fn(|r| hsum8(_mm256_add_ps(acc[i][r][0], acc[i][r][1])))
    })
}

/// Weight rows `js` against activation rows `rows` (arranged, stride `m.kp`) in tiles of
/// `WT` weight rows by up to `NT` activation rows (the last ones one by one, or two), each
/// tile computed by `$tile`.
macro_rules! run_tiles {
    ($tile:ident, $m:expr, $x:expr, $rows:expr, $js:expr, $y:expr, $wt:literal, $nt:literal) => {{
        let (m, x, y) = ($m, $x, $y);
        let (n, kp) = (m.n, m.kp);
        let chunks = kp / H::CHUNK;
        let wp = |j: usize| m.w.as_ptr().add(j * kp);
        let xp = |r: usize| x.as_ptr().add(r * kp);
        let put = |r: usize, j: usize, v: f32| *y.add(r * n + j) = v;
        let (rows, js): (Range<usize>, Range<usize>) = ($rows, $js);
        let mut j = js.start;
        while j < js.end {
            let wide = j + $wt <= js.end;
            let mut r = rows.start;
            while r < rows.end {
                let left = rows.end - r;
                macro_rules! go {
                    ($w:literal, $n:literal) => {{
                        let t = $tile::<H, $w, $n>(
                            std::array::from_fn(|i| wp(j + i)),
                            std::array::from_fn(|i| xp(r + i)),
                            chunks,
                        );
                        for (i, ti) in t.iter().enumerate() {
                            for (b, &v) in ti.iter().enumerate() {
                                put(r + b, j + i, v);
                            }
                        }
                        $n
                    }};
                }
                r += match (wide, left) {
                    (true, l) if l >= $nt => go!($wt, $nt),
                    (true, l) if l >= 2 => go!($wt, 2),
                    (true, _) => go!($wt, 1),
                    (false, l) if l >= $nt => go!(1, $nt),
                    (false, l) if l >= 2 => go!(1, 2),
                    (false, _) => go!(1, 1),
                };
            }
            j += if wide { $wt } else { 1 };
        }
    }};
}

/// `y[r·n + j]` for activation rows `rows` of `x` (arranged rows of stride `m.kp`) and weight
/// rows `js`: AVX-512, tiles of 4 weight rows by 4 activation rows (5 for exactly five rows,
/// one row in [`one_row_in_pairs`]).
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F; `x` has the rows; the caller owns `y[r, j]` for them.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(crate) unsafe fn run_avx512<H: HalfType>(
    m: &FloatMatrix<H>,
    x: &[f32],
    rows: Range<usize>,
    js: Range<usize>,
    y: *mut f32,
) {
    match rows.len() {
        1 => one_row_in_pairs(m, x, rows.start, js, y),
        // A society phase's five agents: one pass of 4 × 5 tiles (29 of the 32 registers)
        // converts each weight vector once for the five rows, where 4 × 4 then 4 × 1 converted
        // it twice.
        5 => run_tiles!(tile512_prefetched, m, x, rows, js, y, 4, 5),
        _ => run_tiles!(tile512_prefetched, m, x, rows, js, y, 4, 4),
    }
}

/// One activation row `r` against weight rows `js`: row `i` of the first half of `js` beside
/// row `i` of the second half, each a stream of its own (a row's 16 lanes are one chain of
/// fused multiply-adds, so one row alone waits on that chain, and neighbouring rows taken
/// together read the memory in a stride the prefetchers follow badly), without software
/// prefetch. Each row's sums are [`tile512`]'s, so the bits are every tile's. Gemma 4's F16
/// per-layer projection (10,752 × 2,560) at one row on a 2-vCPU AMD EPYC: 15.9 GB/s
/// in 4 × 1 tiles of neighbouring rows with prefetch, 26 GB/s one row at a time, 39 GB/s in
/// pairs (three and four streams 38 and 35).
///
/// # Safety
/// As [`run_avx512`], for the one row `r`.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn one_row_in_pairs<H: HalfType>(
    m: &FloatMatrix<H>,
    x: &[f32],
    r: usize,
    js: Range<usize>,
    y: *mut f32,
) {
    let (n, kp) = (m.n, m.kp);
    let chunks = kp / H::CHUNK;
    let wp = |j: usize| m.w.as_ptr().add(j * kp);
    let xr = [x.as_ptr().add(r * kp)];
    let half = js.len() / 2;
    for j in js.start..js.start + half {
        let [a, b] = tile512::<H, 2, 1, false>([wp(j), wp(j + half)], xr, chunks);
        *y.add(r * n + j) = a[0];
        *y.add(r * n + j + half) = b[0];
    }
    if js.len() % 2 == 1 {
        let j = js.end - 1;
        *y.add(r * n + j) = tile512::<H, 1, 1, false>([wp(j)], xr, chunks)[0][0];
    }
}

/// [`run_avx512`] on AVX2: tiles of 2 weight rows by 2 activation rows (16 registers).
///
/// # Safety
/// AVX2, FMA and F16C; as [`run_avx512`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn run_avx2<H: HalfType>(
    m: &FloatMatrix<H>,
    x: &[f32],
    rows: Range<usize>,
    js: Range<usize>,
    y: *mut f32,
) {
    run_tiles!(tile256, m, x, rows, js, y, 2, 2)
}
