//! The AVX2 and AVX-VNNI tiles of the k-quant matrices ([`super::super::kquants`]): 32
//! values of a super-block per 256-bit register, integer sums over the whole super-block.

use std::arch::x86_64::*;

use super::super::kquants::{KBlock, KMatrix, Q8K};
use super::super::Acts;
use super::PREFETCH;

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// For piece `p % 4` of a half super-block (values `32p .. 32p + 32`), which of the half's
/// eight 16-value scales each i32 lane takes (lane `l` sums values `32p + 4l .. + 4`).
static PIECE: [[i32; 8]; 4] = [
    [0, 0, 0, 0, 1, 1, 1, 1],
    [2, 2, 2, 2, 3, 3, 3, 3],
    [4, 4, 4, 4, 5, 5, 5, 5],
    [6, 6, 6, 6, 7, 7, 7, 7],
];

/// One body for both paths: `$scale(sc)` puts a lane's 16-value scale where `$isum`
/// wants it, and `$isum(acc, u, x, scale)` adds `scale · Σ u·x` over each lane's four
/// values to the i32 lanes of `acc`. Both give the same i32 lanes, so the two paths give
/// the same bits. Each (weight row, activation row) pair runs the same operations
/// whatever `W` and `N`.
macro_rules! dot_tile_k_fn {
    ($(#[$doc:meta])* $name:ident, $features:literal, $scale:expr, $isum:expr) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name<B: KBlock, const W: usize, const N: usize>(
            mat: &KMatrix<B>,
            js: [usize; W],
            acts: &Acts,
            rows: [usize; N],
        ) -> [[f32; N]; W] {
            let kbs = mat.kbs;
            let mut acc = [[_mm256_setzero_ps(); N]; W];
            let qs: [*const B::Qs; W] =
                std::array::from_fn(|w| mat.qs.as_ptr().add(js[w] * kbs));
            let meta: [*const B::Meta; W] =
                std::array::from_fn(|w| mat.meta.as_ptr().add(js[w] * kbs));
            let xs: [*const Q8K; N] =
                std::array::from_fn(|i| acts.qk.as_ptr().add(rows[i] * kbs));
            for s in 0..kbs {
                for w in 0..W {
                    let ahead = (qs[w].add(s) as *const i8).wrapping_add(PREFETCH);
                    _mm_prefetch::<_MM_HINT_T0>(ahead);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128));
                }
                let sc: [[__m256i; 2]; W] = std::array::from_fn(|w| {
                    B::scales256(&*meta[w].add(s)).map($scale)
                });
                let mut isum = [[_mm256_setzero_si256(); N]; W];
                for p in 0..8 {
                    let index = _mm256_loadu_si256(PIECE[p % 4].as_ptr() as *const _);
                    let scp: [__m256i; W] = std::array::from_fn(|w| {
                        _mm256_permutevar8x32_epi32(sc[w][p / 4], index)
                    });
                    let u: [__m256i; W] = std::array::from_fn(|w| {
                        B::piece256(&*qs[w].add(s), &*meta[w].add(s), p)
                    });
                    for i in 0..N {
                        let x = _mm256_load_si256(
                            (*xs[i].add(s)).qs.as_ptr().add(32 * p) as *const _,
                        );
                        for w in 0..W {
                            isum[w][i] = $isum(isum[w][i], u[w], x, scp[w]);
                        }
                    }
                }
                for w in 0..W {
                    let m = &*meta[w].add(s);
                    let (d, dmin) = B::d_dmin(m);
                    for i in 0..N {
                        let bp = (*xs[i].add(s)).bsums.as_ptr();
                        let bs = [
                            _mm256_load_si256(bp as *const _),
                            _mm256_load_si256(bp.add(8) as *const _),
                        ];
                        let d8 = *acts.dk.get_unchecked(rows[i] * kbs + s);
                        let dot = |v: [__m256i; 2]| {
                            _mm256_add_epi32(
                                _mm256_mullo_epi32(v[0], bs[0]),
                                _mm256_mullo_epi32(v[1], bs[1]),
                            )
                        };
                        let mut sum = isum[w][i];
                        if B::OFFSET != 0 {
                            let off = _mm256_mullo_epi32(
                                dot(B::scales256(m)),
                                _mm256_set1_epi32(B::OFFSET),
                            );
                            sum = _mm256_sub_epi32(sum, off);
                        }
                        acc[w][i] = _mm256_fmadd_ps(
                            _mm256_cvtepi32_ps(sum),
                            _mm256_set1_ps(d * d8),
                            acc[w][i],
                        );
                        if B::WITH_MIN {
                            acc[w][i] = _mm256_fmadd_ps(
                                _mm256_cvtepi32_ps(dot(B::mins256(m))),
                                _mm256_set1_ps(-(dmin * d8)),
                                acc[w][i],
                            );
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

dot_tile_k_fn!(
    /// See [`super::super::Tiles::dot_tiles`]: `vpmaddubsw` (pairs, at most
    /// 2·63·127 in 16 bits) then `vpmaddwd` with the scale in both 16-bit halves.
    /// Caller guarantees AVX2, FMA and F16C, and that the rows exist.
    dot_tile_k,
    "avx2,fma,f16c",
    |v: __m256i| {
        let low = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
        _mm256_or_si256(low, _mm256_slli_epi32::<16>(low))
    },
    |acc, u, x, sc| _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), sc))
);

dot_tile_k_fn!(
    /// [`dot_tile_k`] with AVX-VNNI: `vpdpbusd` (four values, at most 4·63·127 in 16
    /// bits) then `vpdpwssd` with the scale in the low 16 bits. Caller guarantees AVX2,
    /// FMA, F16C and AVX-VNNI, and that the rows exist.
    dot_tile_k_vnni,
    "avx2,fma,f16c,avxvnni",
    |v: __m256i| _mm256_and_si256(v, _mm256_set1_epi32(0xffff)),
    |acc, u, x, sc| {
        _mm256_dpwssd_avx_epi32(acc, _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x), sc)
    }
);
