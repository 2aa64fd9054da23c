//! The AVX-512 VNNI paths of the k-quant matrices ([`super::super::kquants`]): the 2×4 tile
//! ([`dot_tile_k512`], decode: 64 values of a super-block per 512-bit register) and the
//! prompt path ([`run_prompt_k512`]: 16 weight rows per register, each super-block unpacked
//! and transposed once for all activation rows). Both compute each (weight row, activation
//! row) pair's exact integer sums per super-block and then the same float steps
//! (`acc = fma(main, d·d₈, acc)`, `acc = fma(min, −dmin·d₈, acc)`), so a row's result is the
//! same bits in either.

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
    let mut acc = [[0f32; N]; W];
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
        // Per activation row: the per-16 sums as i16 (the offset term) and the per-32
        // sums as i16 (the min term), shared by the weight rows.
        let bs16: [__m256i; N] = std::array::from_fn(|i| {
            let bs = _mm512_load_si512((*xs[i].add(s)).bsums.as_ptr() as *const _);
            _mm512_cvtepi32_epi16(bs)
        });
        let bs32: [__m128i; N] = std::array::from_fn(|i| {
            let bs = _mm512_load_si512((*xs[i].add(s)).bsums.as_ptr() as *const _);
            _mm512_cvtepi64_epi16(_mm512_add_epi32(bs, _mm512_srli_epi64::<32>(bs)))
        });
        for w in 0..W {
            let m = &*meta[w].add(s);
            let (d, dmin) = B::d_dmin(m);
            let offsc = B::offset_scales_i16(m);
            let mins = B::mins8_i16(m);
            for i in 0..N {
                let d8 = *acts.dk.get_unchecked(rows[i] * kbs + s);
                // The super-block's exact integer sums (main: eight lanes, less
                // `OFFSET·Σ sc·bsum`; min: `Σ mn·bsum`, four lanes), added across lanes
                // together, then one fused multiply-add each (what the prompt path does
                // in its lanes).
                let t = isum[w][i];
                let mut main8 =
                    _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64::<1>(t));
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

/// Sixteen i32 lanes, 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Lanes([i32; 16]);

/// One super-block of up to 16 weight rows, repacked for [`run_prompt_k512`]: lane `l` of
/// every vector belongs to weight row `l`. `w[t]` holds values `4t .. 4t + 4` of each row
/// (one i32 lane of bytes), `sc[b]` the integer scale of each row's `b`-th group of
/// [`KBlock::SUB`] values, `pair[q]` two i16 per lane (Q6_K: the scales of 16-value
/// sub-blocks `2q`, `2q + 1`; Q4_K, Q5_K: the mins of 32-value sub-blocks `2q`, `2q + 1`),
/// `d` and `dmin` as f32.
#[repr(C, align(64))]
struct Pack {
    w: [Lanes; 64],
    sc: [Lanes; 16],
    pair: [Lanes; 8],
    d: [f32; 16],
    dmin: [f32; 16],
}

/// The transpose of sixteen rows of sixteen i32 lanes: lane `l` of result `e` is lane `e`
/// of row `l`.
#[inline(always)]
unsafe fn transpose16(r: [__m512i; 16]) -> [__m512i; 16] {
    // Per 128-bit lane L: t[2p] = rows 2p, 2p+1 elements 4L, 4L+1 interleaved, t[2p+1] the
    // elements 4L+2, 4L+3.
    let t: [__m512i; 16] = std::array::from_fn(|i| {
        let (a, b) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    // u[4Q + c]: rows 4Q .. 4Q+4, element 4L + c in 128-bit lane L.
    let u: [__m512i; 16] = std::array::from_fn(|i| {
        let (q, c) = (i / 4, i % 4);
        let (a, b) = (t[4 * q + c / 2], t[4 * q + 2 + c / 2]);
        if c % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    let mut o = [_mm512_setzero_si512(); 16];
    for c in 0..4 {
        let (a, b, cc, d) = (u[c], u[4 + c], u[8 + c], u[12 + c]);
        let x0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(a, b);
        let x1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(a, b);
        let y0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(cc, d);
        let y1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(cc, d);
        o[c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(x0, y0);
        o[4 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(x0, y0);
        o[8 + c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(x1, y1);
        o[12 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(x1, y1);
    }
    o
}

/// Repack super-block `s` of weight rows `js` (the last repeated up to 16) into `p`.
#[inline(always)]
unsafe fn pack<B: KBlock>(mat: &KMatrix<B>, js: &[usize; 16], s: usize, p: &mut Pack) {
    let kbs = mat.kbs;
    let at = |l: usize| js[l] * kbs + s;
    for l in 0..16 {
        // The next super-block of each row, while this one is multiplied.
        let ahead = mat.qs.as_ptr().add(at(l)).wrapping_add(1) as *const i8;
        _mm_prefetch::<_MM_HINT_T0>(ahead);
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128));
    }
    for g in 0..4 {
        let u: [__m512i; 16] = std::array::from_fn(|l| {
            B::quarter512(
                mat.qs.get_unchecked(at(l)),
                mat.meta.get_unchecked(at(l)),
                g,
            )
        });
        let o = transpose16(u);
        for (e, v) in o.into_iter().enumerate() {
            _mm512_store_si512(p.w[16 * g + e].0.as_mut_ptr() as *mut _, v);
        }
    }
    let subs = QK_VALUES / B::SUB;
    for l in 0..16 {
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

/// Values per super-block.
const QK_VALUES: usize = 256;

/// `R` activation rows from `r0` against the 16 weight rows of `p` (super-block `s`),
/// added to `acc[i]` (lane `l`: weight row `l`).
#[inline(always)]
unsafe fn prompt_rows<B: KBlock, const R: usize>(
    p: &Pack,
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
    for b in 0..QK_VALUES / B::SUB {
        let mut part = [_mm512_setzero_si512(); R];
        for t in per * b..per * (b + 1) {
            let w = _mm512_load_si512(p.w[t].0.as_ptr() as *const _);
            for i in 0..R {
                part[i] = _mm512_dpbusd_epi32(part[i], w, _mm512_set1_epi32(*xq[i].add(t)));
            }
        }
        let sc = _mm512_load_si512(p.sc[b].0.as_ptr() as *const _);
        for i in 0..R {
            main[i] = _mm512_add_epi32(main[i], _mm512_mullo_epi32(part[i], sc));
        }
    }
    let d = _mm512_load_ps(p.d.as_ptr());
    let dmin = _mm512_load_ps(p.dmin.as_ptr());
    for i in 0..R {
        let bs = _mm512_load_si512(xs[i].bsums.as_ptr() as *const _);
        if B::OFFSET != 0 {
            // Σ sc·bsum over the 16-value sub-blocks, two per vpdpwssd.
            let mut b16 = [0i32; 8];
            _mm256_storeu_si256(b16.as_mut_ptr() as *mut _, _mm512_cvtepi32_epi16(bs));
            let mut off = _mm512_setzero_si512();
            for (q, &b) in b16.iter().enumerate() {
                let sc = _mm512_load_si512(p.pair[q].0.as_ptr() as *const _);
                off = _mm512_dpwssd_epi32(off, sc, _mm512_set1_epi32(b));
            }
            let off = _mm512_mullo_epi32(off, _mm512_set1_epi32(B::OFFSET));
            main[i] = _mm512_sub_epi32(main[i], off);
        }
        let d8 = *acts.dk.get_unchecked((r0 + i) * kbs + s);
        let a = &mut acc[i];
        *a = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(main[i]),
            _mm512_mul_ps(d, _mm512_set1_ps(d8)),
            *a,
        );
        if B::WITH_MIN {
            // The sums of each 32 values (each fits 16 bits), two per vpdpwssd.
            let b32 = _mm512_add_epi32(bs, _mm512_srli_epi64::<32>(bs));
            let mut b32s = [0i32; 4];
            _mm_storeu_si128(b32s.as_mut_ptr() as *mut _, _mm512_cvtepi64_epi16(b32));
            let mut mins = _mm512_setzero_si512();
            for (q, &b) in b32s.iter().enumerate() {
                let mn = _mm512_load_si512(p.pair[q].0.as_ptr() as *const _);
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

/// Activation rows from which [`super::super::kquants::KMatrix`] takes the prompt path
/// (fewer go through [`dot_tile_k512`]).
pub(crate) const PROMPT_MIN_ROWS: usize = 8;

/// Activation rows of a prompt tile step (the rest go one at a time).
const PROMPT_TILE_ROWS: usize = 8;

/// The prompt path: weight rows `js` (at most 16) against activation rows `rows`, lanes
/// over weight rows (as llama.cpp's repacked gemm). Each super-block of the 16 rows is
/// unpacked and transposed once ([`Pack`]) and multiplied with every activation row in
/// turn, [`PROMPT_TILE_ROWS`] at a time: per 4 values one `vpdpbusd` for 16 weight rows,
/// the integer scale per [`KBlock::SUB`] values in one `vpmulld`, the offset or min term
/// in `vpdpwssd`, and per super-block one conversion and fused multiply-add by `d·d₈`
/// (and `−dmin·d₈`). The integers of each (weight row, activation row) pair are
/// [`dot_tile_k512`]'s exact super-block sums and the float steps are its steps, so a
/// row's result is the same bits in either. Caller guarantees AVX2, FMA, F16C,
/// AVX-512 F, BW and VNNI, that the rows exist, that `js` is 1 to 16 rows, and that it
/// owns `y[r, j]` for them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn run_prompt_k512<B: KBlock>(
    mat: &KMatrix<B>,
    acts: &Acts,
    rows: std::ops::Range<usize>,
    js: std::ops::Range<usize>,
    y: *mut f32,
) {
    debug_assert!(!js.is_empty() && js.len() <= 16);
    let last = js.end - 1;
    let jrows: [usize; 16] = std::array::from_fn(|l| (js.start + l).min(last));
    let mut acc = vec![_mm512_setzero_ps(); rows.len()];
    let mut p = Box::new(Pack {
        w: [Lanes([0; 16]); 64],
        sc: [Lanes([0; 16]); 16],
        pair: [Lanes([0; 16]); 8],
        d: [0.0; 16],
        dmin: [0.0; 16],
    });
    for s in 0..mat.kbs {
        pack(mat, &jrows, s, &mut p);
        let mut r = rows.start;
        while r + PROMPT_TILE_ROWS <= rows.end {
            let a = &mut acc[r - rows.start..];
            prompt_rows::<B, PROMPT_TILE_ROWS>(&p, acts, r, s, a);
            r += PROMPT_TILE_ROWS;
        }
        while r < rows.end {
            prompt_rows::<B, 1>(&p, acts, r, s, &mut acc[r - rows.start..]);
            r += 1;
        }
    }
    let mask: __mmask16 = if js.len() == 16 {
        0xffff
    } else {
        (1u16 << js.len()) - 1
    };
    for (i, a) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(y.add((rows.start + i) * mat.n + js.start), mask, *a);
    }
}
