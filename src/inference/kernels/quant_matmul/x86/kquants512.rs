//! The AVX-512 VNNI tiles of the k-quant matrices ([`super::super::kquants`]): 64 values of
//! a super-block per 512-bit register, integer sums over the whole super-block; the 2×4 tile
//! ([`dot_tile_k512`]) and the 1×16 prompt tile ([`dot_rows16_k512`]), the same bits per pair.

use std::arch::x86_64::*;

use super::super::kquants::{KBlock, KMatrix, Q8K};
use super::super::Acts;
use super::PREFETCH;

/// For quarter `g` of a super-block (values `64g .. 64g + 64`), which of the sixteen
/// 16-value scales each i32 lane of a `vpdpbusd` result takes (lane `l` sums values
/// `64g + 4l .. 64g + 4l + 4`).
static QUARTER: [[i32; 16]; 4] = {
    let mut t = [[0i32; 16]; 4];
    let mut g = 0;
    while g < 4 {
        let mut l = 0;
        while l < 16 {
            t[g][l] = (4 * g + l / 4) as i32;
            l += 1;
        }
        g += 1;
    }
    t
};

/// The sixteen 16-value scales or mins of a super-block as i32 lanes.
#[inline(always)]
unsafe fn lanes16(v: [__m256i; 2]) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(v[0]), v[1])
}

/// See [`super::super::Tiles::dot_tiles`]: per super-block, weight row and activation
/// row, four `vpdpbusd` (64 values each) whose 4-value sums go through one `vpdpwssd`
/// each with their 16-value scales (an i32 sum of 4 products fits 16 bits), so the
/// super-block's scaled sum stays in integers; then `32·Σ sc·bsum` (Q6_K) or
/// `Σ mn·bsum` (Q4_K, Q5_K) in one `vpmulld`, and one conversion and fused multiply-add
/// by `d·d₈` (and `−dmin·d₈`). Each (weight row, activation row) pair runs the same
/// operations whatever `W` and `N`. Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW and
/// VNNI, and that the rows exist.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn dot_tile_k512<B: KBlock, const W: usize, const N: usize>(
    mat: &KMatrix<B>,
    js: [usize; W],
    acts: &Acts,
    rows: [usize; N],
) -> [[f32; N]; W] {
    let kbs = mat.kbs;
    let mut acc = [[_mm512_setzero_ps(); N]; W];
    let qs: [*const B::Qs; W] = std::array::from_fn(|w| mat.qs.as_ptr().add(js[w] * kbs));
    let meta: [*const B::Meta; W] = std::array::from_fn(|w| mat.meta.as_ptr().add(js[w] * kbs));
    let xs: [*const Q8K; N] = std::array::from_fn(|i| acts.qk.as_ptr().add(rows[i] * kbs));
    let low16 = _mm512_set1_epi32(0xffff);
    for s in 0..kbs {
        for w in 0..W {
            // The weights stream from memory once per step in decode.
            let ahead = (qs[w].add(s) as *const i8).wrapping_add(PREFETCH);
            _mm_prefetch::<_MM_HINT_T0>(ahead);
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128));
        }
        // Scales in the low 16 bits of each lane (vpdpwssd multiplies both halves).
        let sc: [__m512i; W] = std::array::from_fn(|w| {
            _mm512_and_si512(lanes16(B::scales256(&*meta[w].add(s))), low16)
        });
        let mut isum = [[_mm512_setzero_si512(); N]; W];
        for g in 0..4 {
            let index = _mm512_loadu_si512(QUARTER[g].as_ptr() as *const _);
            let scq: [__m512i; W] = std::array::from_fn(|w| _mm512_permutexvar_epi32(index, sc[w]));
            let u: [__m512i; W] =
                std::array::from_fn(|w| B::quarter512(&*qs[w].add(s), &*meta[w].add(s), g));
            for i in 0..N {
                let x = _mm512_load_si512((*xs[i].add(s)).qs.as_ptr().add(64 * g) as *const _);
                for w in 0..W {
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[w], x);
                    isum[w][i] = _mm512_dpwssd_epi32(isum[w][i], p, scq[w]);
                }
            }
        }
        for w in 0..W {
            let m = &*meta[w].add(s);
            let (d, dmin) = B::d_dmin(m);
            for i in 0..N {
                let bs = _mm512_load_si512((*xs[i].add(s)).bsums.as_ptr() as *const _);
                let d8 = *acts.dk.get_unchecked(rows[i] * kbs + s);
                let mut sum = isum[w][i];
                if B::OFFSET != 0 {
                    let off = _mm512_mullo_epi32(lanes16(B::scales256(m)), bs);
                    let off = _mm512_mullo_epi32(off, _mm512_set1_epi32(B::OFFSET));
                    sum = _mm512_sub_epi32(sum, off);
                }
                acc[w][i] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(d * d8), acc[w][i]);
                if B::WITH_MIN {
                    let mins = _mm512_mullo_epi32(lanes16(B::mins256(m)), bs);
                    acc[w][i] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(mins),
                        _mm512_set1_ps(-(dmin * d8)),
                        acc[w][i],
                    );
                }
            }
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

/// Activation rows of [`dot_rows16_k512`], the prompt tile.
pub(crate) const PROMPT_ROWS: usize = 16;

/// The prompt tile: one weight row against [`PROMPT_ROWS`] activation rows, each
/// super-block's weights unpacked and its scale vectors permuted once for all of them
/// (the 2×4 tile of [`dot_tile_k512`] does that once per 4 rows). Per (weight row,
/// activation row) pair the operations are [`dot_tile_k512`]'s, in its order (the
/// integer sum over the four quarters from zero, the offset or min term, the same fused
/// multiply-adds and the same final reduction), so a row's result is the same bits in
/// either tile. Caller guarantees AVX2, FMA, F16C, AVX-512 F, BW and VNNI, and that the
/// rows exist.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn dot_rows16_k512<B: KBlock>(
    mat: &KMatrix<B>,
    j: usize,
    acts: &Acts,
    rows: [usize; PROMPT_ROWS],
) -> [f32; PROMPT_ROWS] {
    let kbs = mat.kbs;
    let mut acc = [_mm512_setzero_ps(); PROMPT_ROWS];
    let qs = mat.qs.as_ptr().add(j * kbs);
    let meta = mat.meta.as_ptr().add(j * kbs);
    let xs: [*const Q8K; PROMPT_ROWS] =
        std::array::from_fn(|i| acts.qk.as_ptr().add(rows[i] * kbs));
    let low16 = _mm512_set1_epi32(0xffff);
    for s in 0..kbs {
        let ahead = (qs.add(s) as *const i8).wrapping_add(PREFETCH);
        _mm_prefetch::<_MM_HINT_T0>(ahead);
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128));
        let m = &*meta.add(s);
        let q = &*qs.add(s);
        let sc = _mm512_and_si512(lanes16(B::scales256(m)), low16);
        let scq: [__m512i; 4] = std::array::from_fn(|g| {
            let index = _mm512_loadu_si512(QUARTER[g].as_ptr() as *const _);
            _mm512_permutexvar_epi32(index, sc)
        });
        let u: [__m512i; 4] = std::array::from_fn(|g| B::quarter512(q, m, g));
        let (d, dmin) = B::d_dmin(m);
        for i in 0..PROMPT_ROWS {
            let xb = &*xs[i].add(s);
            let mut isum = _mm512_setzero_si512();
            for g in 0..4 {
                let x = _mm512_load_si512(xb.qs.as_ptr().add(64 * g) as *const _);
                let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[g], x);
                isum = _mm512_dpwssd_epi32(isum, p, scq[g]);
            }
            let bs = _mm512_load_si512(xb.bsums.as_ptr() as *const _);
            let d8 = *acts.dk.get_unchecked(rows[i] * kbs + s);
            if B::OFFSET != 0 {
                let off = _mm512_mullo_epi32(lanes16(B::scales256(m)), bs);
                let off = _mm512_mullo_epi32(off, _mm512_set1_epi32(B::OFFSET));
                isum = _mm512_sub_epi32(isum, off);
            }
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * d8), acc[i]);
            if B::WITH_MIN {
                let mins = _mm512_mullo_epi32(lanes16(B::mins256(m)), bs);
                acc[i] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(mins),
                    _mm512_set1_ps(-(dmin * d8)),
                    acc[i],
                );
            }
        }
    }
    std::array::from_fn(|i| _mm512_reduce_add_ps(acc[i]))
}
