//! The AVX-512 VNNI tile: two blocks per 512-bit register.

use std::arch::x86_64::*;

use super::super::{Acts, GroupScales, Payload, Q8Ints, QuantMatrix, WeightBlock, GROUP};
use super::PREFETCH;

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
pub(crate) unsafe fn dot_tile_512<B: WeightBlock, const W: usize, const N: usize>(
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
                let sa = _mm256_loadu_ps(
                    acts.sums(<B::Scales as GroupScales>::OWN_M)
                        .as_ptr()
                        .add(rows[i] * kbp + g),
                );
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
