//! The AVX2 and AVX-VNNI tiles of the k-quant matrices ([`super::super::kquants`]): 32
//! values of a super-block per 256-bit register, integer sums over the whole super-block.

use std::arch::x86_64::*;

use super::super::kquants::{KBlock, KMatrix, Q8K};
use super::super::Acts;
use super::PREFETCH;

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
            let mut acc = [[0f32; N]; W];
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
                // Per activation row: the per-16 sums as i16 (the offset term) and the
                // per-32 sums as i16 (the min term), shared by the weight rows.
                let bs: [[__m256i; 2]; N] = std::array::from_fn(|i| {
                    let bp = (*xs[i].add(s)).bsums.as_ptr();
                    [
                        _mm256_load_si256(bp as *const _),
                        _mm256_load_si256(bp.add(8) as *const _),
                    ]
                });
                let bs16: [__m256i; N] = std::array::from_fn(|i| {
                    _mm256_permute4x64_epi64::<0xd8>(_mm256_packs_epi32(bs[i][0], bs[i][1]))
                });
                let bs32: [__m128i; N] = std::array::from_fn(|i| {
                    let v = _mm256_permute4x64_epi64::<0xd8>(_mm256_hadd_epi32(bs[i][0], bs[i][1]));
                    _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
                });
                for w in 0..W {
                    let m = &*meta[w].add(s);
                    let (d, dmin) = B::d_dmin(m);
                    let offsc = B::offset_scales_i16(m);
                    let mins = B::mins8_i16(m);
                    for i in 0..N {
                        let d8 = *acts.dk.get_unchecked(rows[i] * kbs + s);
                        // The super-block's exact integer sums (main: eight lanes, less
                        // `OFFSET·Σ sc·bsum`; min: `Σ mn·bsum`, four lanes), added across
                        // lanes together, then one fused multiply-add each: what the
                        // prompt path ([`run_prompt_k256`]) does in its lanes.
                        let mut main8 = isum[w][i];
                        if B::OFFSET != 0 {
                            main8 = _mm256_sub_epi32(main8, _mm256_madd_epi16(offsc, bs16[i]));
                        }
                        let main4 = _mm_add_epi32(
                            _mm256_castsi256_si128(main8),
                            _mm256_extracti128_si256::<1>(main8),
                        );
                        let min4 = if B::WITH_MIN {
                            _mm_madd_epi16(mins, bs32[i])
                        } else {
                            main4
                        };
                        let h = _mm_hadd_epi32(main4, min4);
                        let both = _mm_cvtepi32_ps(_mm_hadd_epi32(h, h));
                        let main = _mm_cvtss_f32(both);
                        acc[w][i] = main.mul_add(d * d8, acc[w][i]);
                        if B::WITH_MIN {
                            let min = _mm_cvtss_f32(_mm_movehdup_ps(both));
                            acc[w][i] = min.mul_add(-(dmin * d8), acc[w][i]);
                        }
                    }
                }
            }
            acc
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

/// Eight i32 lanes, 32-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Lanes([i32; 8]);

/// One super-block of up to 8 weight rows, repacked for the prompt path: lane `l` of every
/// vector belongs to weight row `l`. `w[t]` holds values `4t .. 4t + 4` of each row (one
/// i32 lane of bytes), `sc[b]` the integer scale of each row's `b`-th group of
/// [`KBlock::SUB`] values, `pair[q]` two i16 per lane (Q6_K: the scales of 16-value
/// sub-blocks `2q`, `2q + 1`; Q4_K, Q5_K: the mins of 32-value sub-blocks `2q`, `2q + 1`),
/// `d` and `dmin` as f32.
#[repr(C, align(64))]
struct Pack {
    w: [Lanes; 64],
    sc: [Lanes; 16],
    pair: [Lanes; 8],
    d: [f32; 8],
    dmin: [f32; 8],
}

/// The transpose of eight rows of eight i32 lanes: lane `l` of result `e` is lane `e` of
/// row `l`.
#[inline(always)]
unsafe fn transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
    // Per 128-bit lane L: t[2p] = rows 2p, 2p+1 elements 4L, 4L+1 interleaved, t[2p+1] the
    // elements 4L+2, 4L+3.
    let t: [__m256i; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_epi32(a, b)
        } else {
            _mm256_unpackhi_epi32(a, b)
        }
    });
    // u[4Q + c]: rows 4Q .. 4Q+4, element 4L + c in 128-bit lane L.
    let u: [__m256i; 8] = std::array::from_fn(|i| {
        let (q, c) = (i / 4, i % 4);
        let (a, b) = (t[4 * q + c / 2], t[4 * q + 2 + c / 2]);
        if c % 2 == 0 {
            _mm256_unpacklo_epi64(a, b)
        } else {
            _mm256_unpackhi_epi64(a, b)
        }
    });
    std::array::from_fn(|e| {
        let (c, hi) = (e % 4, e / 4);
        if hi == 0 {
            _mm256_permute2x128_si256::<0x20>(u[c], u[4 + c])
        } else {
            _mm256_permute2x128_si256::<0x31>(u[c], u[4 + c])
        }
    })
}

/// Values per super-block.
const QK_VALUES: usize = 256;

/// Repack super-block `s` of weight rows `js` (the last repeated up to 8) into `p`.
#[inline(always)]
unsafe fn pack<B: KBlock>(mat: &KMatrix<B>, js: &[usize; 8], s: usize, p: &mut Pack) {
    let kbs = mat.kbs;
    let at = |l: usize| js[l] * kbs + s;
    for l in 0..8 {
        // The next super-block of each row, while this one is multiplied.
        let ahead = mat.qs.as_ptr().add(at(l)).wrapping_add(1) as *const i8;
        _mm_prefetch::<_MM_HINT_T0>(ahead);
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128));
    }
    for piece in 0..8 {
        let u: [__m256i; 8] = std::array::from_fn(|l| {
            B::piece256(
                mat.qs.get_unchecked(at(l)),
                mat.meta.get_unchecked(at(l)),
                piece,
            )
        });
        for (e, v) in transpose8(u).into_iter().enumerate() {
            _mm256_store_si256(p.w[8 * piece + e].0.as_mut_ptr() as *mut _, v);
        }
    }
    let subs = QK_VALUES / B::SUB;
    for l in 0..8 {
        let m = mat.meta.get_unchecked(at(l));
        for b in 0..subs {
            p.sc[b].0[l] = B::scale16(m, b * B::SUB / 16);
        }
        let pair = |a: i32, b: i32| (a as u16 as u32 | (b as u16 as u32) << 16) as i32;
        if B::OFFSET != 0 {
            for q in 0..8 {
                p.pair[q].0[l] = pair(B::scale16(m, 2 * q), B::scale16(m, 2 * q + 1));
            }
        }
        if B::WITH_MIN {
            for q in 0..4 {
                p.pair[q].0[l] = pair(B::min16(m, 4 * q), B::min16(m, 4 * q + 2));
            }
        }
        let (d, dmin) = B::d_dmin(m);
        p.d[l] = d;
        p.dmin[l] = dmin;
    }
}

/// Two i16 per i32 lane from the low 16 bits of i32 lanes `2q` and `2q + 1` of `v`, in
/// lanes `0, 2, 4, 6` of the result.
#[inline(always)]
unsafe fn pairs_i16(v: __m256i) -> [i32; 8] {
    let low = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    let both = _mm256_or_si256(low, _mm256_srli_epi64::<16>(low));
    let mut out = [0i32; 8];
    _mm256_storeu_si256(out.as_mut_ptr() as *mut _, both);
    out
}

/// `R` activation rows from `r0` against the 8 weight rows of `p` (super-block `s`), added
/// to `acc[i]` (lane `l`: weight row `l`). With `VNNI`, per 4 values one `vpdpbusd` and
/// per [`KBlock::SUB`] values one `vpmulld` by the scales; without, per 8 values two
/// `vpmaddubsw` added in 16 bits (at most 2·2·63·127 = 32004) and one `vpmaddwd` with the
/// scales in both 16-bit halves. Both give the exact super-block sums.
#[inline(always)]
unsafe fn prompt_rows<B: KBlock, const R: usize, const VNNI: bool>(
    p: &Pack,
    acts: &Acts,
    r0: usize,
    s: usize,
    acc: &mut [__m256],
) {
    let kbs = acts.kbs;
    let xs: [&Q8K; R] = std::array::from_fn(|i| acts.qk.get_unchecked((r0 + i) * kbs + s));
    let xq: [*const i32; R] = std::array::from_fn(|i| xs[i].qs.as_ptr() as *const i32);
    let per = B::SUB / 4;
    let mut main = [_mm256_setzero_si256(); R];
    for b in 0..QK_VALUES / B::SUB {
        let sc = _mm256_load_si256(p.sc[b].0.as_ptr() as *const _);
        if VNNI {
            let mut part = [_mm256_setzero_si256(); R];
            for t in per * b..per * (b + 1) {
                let w = _mm256_load_si256(p.w[t].0.as_ptr() as *const _);
                for i in 0..R {
                    let x = _mm256_set1_epi32(*xq[i].add(t));
                    part[i] = _mm256_dpbusd_avx_epi32(part[i], w, x);
                }
            }
            for i in 0..R {
                main[i] = _mm256_add_epi32(main[i], _mm256_mullo_epi32(part[i], sc));
            }
        } else {
            let low = _mm256_and_si256(sc, _mm256_set1_epi32(0xffff));
            let sc2 = _mm256_or_si256(low, _mm256_slli_epi32::<16>(low));
            for t in (per * b..per * (b + 1)).step_by(2) {
                let w0 = _mm256_load_si256(p.w[t].0.as_ptr() as *const _);
                let w1 = _mm256_load_si256(p.w[t + 1].0.as_ptr() as *const _);
                for i in 0..R {
                    let x0 = _mm256_set1_epi32(*xq[i].add(t));
                    let x1 = _mm256_set1_epi32(*xq[i].add(t + 1));
                    let pr = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w0, x0),
                        _mm256_maddubs_epi16(w1, x1),
                    );
                    main[i] = _mm256_add_epi32(main[i], _mm256_madd_epi16(pr, sc2));
                }
            }
        }
    }
    let d = _mm256_load_ps(p.d.as_ptr());
    let dmin = _mm256_load_ps(p.dmin.as_ptr());
    for i in 0..R {
        let bp = xs[i].bsums.as_ptr();
        let bs = [
            _mm256_load_si256(bp as *const _),
            _mm256_load_si256(bp.add(8) as *const _),
        ];
        if B::OFFSET != 0 {
            // Σ sc·bsum over the 16-value sub-blocks, two per vpmaddwd.
            let (lo, hi) = (pairs_i16(bs[0]), pairs_i16(bs[1]));
            let mut off = _mm256_setzero_si256();
            for q in 0..8 {
                let b = if q < 4 { lo[2 * q] } else { hi[2 * (q - 4)] };
                let sc = _mm256_load_si256(p.pair[q].0.as_ptr() as *const _);
                off = _mm256_add_epi32(off, _mm256_madd_epi16(sc, _mm256_set1_epi32(b)));
            }
            let off = _mm256_mullo_epi32(off, _mm256_set1_epi32(B::OFFSET));
            main[i] = _mm256_sub_epi32(main[i], off);
        }
        let d8 = *acts.dk.get_unchecked((r0 + i) * kbs + s);
        let a = &mut acc[i];
        *a = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(main[i]),
            _mm256_mul_ps(d, _mm256_set1_ps(d8)),
            *a,
        );
        if B::WITH_MIN {
            // The sums of each 32 values (each fits 16 bits), two per vpmaddwd.
            let b32 = _mm256_permute4x64_epi64::<0xd8>(_mm256_hadd_epi32(bs[0], bs[1]));
            let b32s = pairs_i16(b32);
            let mut mins = _mm256_setzero_si256();
            for q in 0..4 {
                let mn = _mm256_load_si256(p.pair[q].0.as_ptr() as *const _);
                mins =
                    _mm256_add_epi32(mins, _mm256_madd_epi16(mn, _mm256_set1_epi32(b32s[2 * q])));
            }
            *a = _mm256_fnmadd_ps(
                _mm256_cvtepi32_ps(mins),
                _mm256_mul_ps(dmin, _mm256_set1_ps(d8)),
                *a,
            );
        }
    }
}

/// Activation rows from which [`super::super::kquants::KMatrix`] takes the prompt path on
/// AVX2 and AVX-VNNI (fewer go through the tiles).
pub(crate) const PROMPT_MIN_ROWS: usize = 8;

/// The prompt path's body: weight rows `js` (at most 8) against activation rows `rows`,
/// `R` activation rows a step (the rest one at a time).
#[inline(always)]
unsafe fn prompt_body<B: KBlock, const R: usize, const VNNI: bool>(
    mat: &KMatrix<B>,
    acts: &Acts,
    rows: std::ops::Range<usize>,
    js: std::ops::Range<usize>,
    y: *mut f32,
) {
    debug_assert!(!js.is_empty() && js.len() <= 8);
    let last = js.end - 1;
    let jrows: [usize; 8] = std::array::from_fn(|l| (js.start + l).min(last));
    let mut acc = vec![_mm256_setzero_ps(); rows.len()];
    let mut p = Pack {
        w: [Lanes([0; 8]); 64],
        sc: [Lanes([0; 8]); 16],
        pair: [Lanes([0; 8]); 8],
        d: [0.0; 8],
        dmin: [0.0; 8],
    };
    for s in 0..mat.kbs {
        pack(mat, &jrows, s, &mut p);
        let mut r = rows.start;
        while r + R <= rows.end {
            prompt_rows::<B, R, VNNI>(&p, acts, r, s, &mut acc[r - rows.start..]);
            r += R;
        }
        while r < rows.end {
            prompt_rows::<B, 1, VNNI>(&p, acts, r, s, &mut acc[r - rows.start..]);
            r += 1;
        }
    }
    for (i, a) in acc.iter().enumerate() {
        let mut out = [0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), *a);
        let at = y.add((rows.start + i) * mat.n + js.start);
        std::ptr::copy_nonoverlapping(out.as_ptr(), at, js.len());
    }
}

/// The AVX2 prompt path: weight rows `js` (at most 8) against activation rows `rows`,
/// lanes over weight rows. Each super-block of the 8 rows is unpacked and transposed once
/// ([`Pack`]) and multiplied with every activation row in turn, 8 at a time: per 8 values
/// two `vpmaddubsw` and one `vpmaddwd` with the scales for 8 weight rows, the offset or
/// min term in `vpmaddwd`, and per super-block one conversion and fused multiply-add by
/// `d·d₈` (and `−dmin·d₈`). The integers of each (weight row, activation row) pair are
/// [`dot_tile_k`]'s exact super-block sums and the float steps are its steps, so a row's
/// result is the same bits in either. Caller guarantees AVX2, FMA and F16C, that the rows
/// exist, that `js` is 1 to 8 rows, and that it owns `y[r, j]` for them.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn run_prompt_k256<B: KBlock>(
    mat: &KMatrix<B>,
    acts: &Acts,
    rows: std::ops::Range<usize>,
    js: std::ops::Range<usize>,
    y: *mut f32,
) {
    prompt_body::<B, 8, false>(mat, acts, rows, js, y)
}

/// [`run_prompt_k256`] with AVX-VNNI: per 4 values one `vpdpbusd` for 8 weight rows, per
/// [`KBlock::SUB`] values one `vpmulld` by the scales, 4 activation rows a step (two i32
/// accumulators per row in 16 registers). The same integers and float steps as
/// [`dot_tile_k_vnni`] and [`run_prompt_k256`]. Caller guarantees AVX2, FMA, F16C and
/// AVX-VNNI, and as [`run_prompt_k256`].
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn run_prompt_k256_vnni<B: KBlock>(
    mat: &KMatrix<B>,
    acts: &Acts,
    rows: std::ops::Range<usize>,
    js: std::ops::Range<usize>,
    y: *mut f32,
) {
    prompt_body::<B, 4, true>(mat, acts, rows, js, y)
}
