//! The AVX2 and AVX-VNNI tiles: one block per 256-bit register.

use std::arch::x86_64::*;

use super::super::{Acts, GroupScales, Payload, Q8Ints, QuantMatrix, WeightBlock, GROUP};
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
        pub(crate) unsafe fn $name<B: WeightBlock, const W: usize, const N: usize>(
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
                        let sa = _mm256_loadu_ps(
                            acts.sums(<B::Scales as GroupScales>::OWN_M)
                                .as_ptr()
                                .add(rows[i] * kbp + g),
                        );
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
