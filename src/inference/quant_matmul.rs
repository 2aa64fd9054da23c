//! CPU matrix products for quantised weight types that candle leaves without
//! a SIMD kernel. Today that is `Q4_1` (the default SmolLM2 model's type):
//! candle 0.11 computes its dot products with a scalar loop, which made
//! prefill three times and decode 1.4 times slower than llama.cpp here.
//!
//! [`Q41Matrix`] holds a `[n, k]` weight in blocks of 32 (`x = d·q + m`,
//! `q` in 0..16, as GGUF stores it, with `d` and `m` widened to f32 once at
//! load). [`Q41Matrix::matmul`] computes `y = x · Wᵀ` for `m` activation rows
//! the way llama.cpp does: each activation row is quantised to 8-bit blocks
//! (`Q8_1`: `x ≈ d₈·q₈`, with the block's `d₈·Σq₈` kept), and a block's
//! contribution is `d·d₈·Σ q·q₈ + m·d₈·Σq₈`. The integer sums use AVX2 when
//! the CPU has it (checked at run time) and a portable loop otherwise; both
//! give the same integer sums, so the two paths differ only by float
//! summation order.
//!
//! Work is split over weight rows across candle's CPU worker pool. Each weight block is
//! unpacked once and multiplied with up to [`ROW_TILE`] activation rows, so
//! a batch of decode rows (several agents' next tokens) reads the weights
//! once: that is what makes batched decoding pay on a CPU.

use anyhow::{bail, Result};

/// Values per quantisation block (GGUF's QK4_1 and QK8_1).
pub const BLOCK: usize = 32;
/// Bytes of one GGUF `block_q4_1`: f16 d, f16 m, 16 bytes of nibbles.
const Q4_1_BYTES: usize = 20;
/// Activation rows multiplied with one unpacked weight block.
pub const ROW_TILE: usize = 4;
/// Activation rows per work item (their 8-bit blocks stay in L2).
const ROW_BLOCK: usize = 64;
/// Weight rows per work item (their blocks stay in L1).
const WEIGHT_CHUNK: usize = 16;

/// One weight block: `x[j] = d·q[j] + m`; nibble `j` of byte `i` is value
/// `i` (low) or `i + 16` (high), as in GGUF.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct BlockQ41 {
    d: f32,
    m: f32,
    qs: [u8; 16],
}

/// One quantised activation block: `x[j] ≈ d·q[j]`, `s = d·Σq`.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct BlockQ81 {
    qs: [i8; 32],
    d: f32,
    s: f32,
}

impl Default for BlockQ81 {
    fn default() -> Self {
        Self {
            qs: [0; 32],
            d: 0.0,
            s: 0.0,
        }
    }
}

/// A `[n, k]` Q4_1 weight ready for [`Self::matmul`].
#[derive(Debug, Clone)]
pub struct Q41Matrix {
    n: usize,
    k: usize,
    blocks: Vec<BlockQ41>,
    /// The dot-product implementation, chosen for this CPU at load.
    simd: Simd,
}

impl Q41Matrix {
    /// Build from GGUF `block_q4_1` bytes of a `[n, k]` tensor (row major).
    pub fn from_gguf_bytes(bytes: &[u8], n: usize, k: usize) -> Result<Self> {
        if k == 0 || k % BLOCK != 0 {
            bail!("Q4_1 rows of {k} values are not whole blocks of {BLOCK}");
        }
        let nb = n * (k / BLOCK);
        if bytes.len() != nb * Q4_1_BYTES {
            bail!(
                "Q4_1 tensor [{n}, {k}] needs {} bytes, got {}",
                nb * Q4_1_BYTES,
                bytes.len()
            );
        }
        let blocks = bytes
            .chunks_exact(Q4_1_BYTES)
            .map(|c| {
                let d = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                let m = half::f16::from_le_bytes([c[2], c[3]]).to_f32();
                let mut qs = [0u8; 16];
                qs.copy_from_slice(&c[4..20]);
                BlockQ41 { d, m, qs }
            })
            .collect();
        Ok(Self {
            n,
            k,
            blocks,
            simd: Simd::detect(),
        })
    }

    /// Output features (rows of the weight).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input features (columns of the weight).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The weight as f32, row major (for tests and reference checks).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n * self.k);
        for b in &self.blocks {
            let mut vals = [0f32; BLOCK];
            for (i, &q) in b.qs.iter().enumerate() {
                vals[i] = b.d * f32::from(q & 0x0f) + b.m;
                vals[i + 16] = b.d * f32::from(q >> 4) + b.m;
            }
            out.extend_from_slice(&vals);
        }
        out
    }

    /// `y[r, j] = Σᵢ x[r, i]·W[j, i]` for `x` of `m = x.len() / k` rows;
    /// returns `y` row major (`[m, n]`).
    pub fn matmul(&self, x: &[f32]) -> Result<Vec<f32>> {
        let (n, k) = (self.n, self.k);
        if x.len() % k != 0 {
            bail!(
                "activations of {} values are not rows of {k} for a [{n}, {k}] Q4_1 weight",
                x.len()
            );
        }
        let m = x.len() / k;
        let kb = k / BLOCK;
        let acts: Vec<BlockQ81> = x.chunks_exact(BLOCK).map(quantize_block).collect();
        let mut y = vec![0f32; m * n];
        let simd = self.simd;
        let out_ptr = SendPtr(y.as_mut_ptr());
        // Work items are (block of activation rows, chunk of weight rows): a
        // block of activations stays in L2 and a chunk of weights in L1
        // while every pair is multiplied. Run on candle's own worker pool, so
        // its threads are not left spinning while another pool works.
        let row_blocks = m.div_ceil(ROW_BLOCK);
        let weight_chunks = n.div_ceil(WEIGHT_CHUNK);
        candle_core::utils::barrier_pool().execute_chunked(row_blocks * weight_chunks, |items| {
            for item in items {
                let (rb, wc) = (item / weight_chunks, item % weight_chunks);
                let rows = rb * ROW_BLOCK..m.min((rb + 1) * ROW_BLOCK);
                let act = |r: usize| &acts[r * kb..(r + 1) * kb];
                for j in wc * WEIGHT_CHUNK..n.min((wc + 1) * WEIGHT_CHUNK) {
                    let w = &self.blocks[j * kb..(j + 1) * kb];
                    // SAFETY: item (rb, wc) is the only writer of y[r, j] for its
                    // rows r and weight rows j; every index is < m·n and `y`
                    // outlives the call.
                    let put = |r: usize, v: f32| unsafe { *out_ptr.get().add(r * n + j) = v };
                    let mut r = rows.start;
                    while r + ROW_TILE <= rows.end {
                        let d = simd.dot_tile::<ROW_TILE>(w, std::array::from_fn(|i| act(r + i)));
                        d.iter().enumerate().for_each(|(i, &v)| put(r + i, v));
                        r += ROW_TILE;
                    }
                    while r + 2 <= rows.end {
                        let d = simd.dot_tile::<2>(w, [act(r), act(r + 1)]);
                        put(r, d[0]);
                        put(r + 1, d[1]);
                        r += 2;
                    }
                    if r < rows.end {
                        put(r, simd.dot_tile::<1>(w, [act(r)])[0]);
                    }
                }
            }
        });
        Ok(y)
    }
}

/// Quantise 32 activations to 8 bits the way llama.cpp's `quantize_row_q8_1`
/// does (round to nearest, scale = max|x| / 127), keeping d and s in f32.
fn quantize_block(x: &[f32]) -> BlockQ81 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ81 {
        d,
        ..BlockQ81::default()
    };
    let mut sum = 0i32;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        let r = (v * id).round() as i32;
        *q = r as i8;
        sum += r;
    }
    b.s = d * sum as f32;
    b
}

/// A raw output pointer shared by the pool's workers (each writes its own rows).
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: workers write disjoint ranges; see `Q41Matrix::matmul`.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Which dot-product implementation the CPU supports.
#[derive(Debug, Clone, Copy)]
enum Simd {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
}

impl Simd {
    /// Every implementation this CPU can run, slowest first.
    fn available() -> Vec<Self> {
        #[allow(unused_mut)]
        let mut paths = vec![Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                paths.push(Simd::Avx2);
                if is_x86_feature_detected!("avxvnni") {
                    paths.push(Simd::AvxVnni);
                }
            }
        }
        paths
    }

    /// The fastest implementation this CPU can run.
    fn detect() -> Self {
        Self::available().pop().unwrap_or(Simd::Portable)
    }

    /// Dot products of one weight row with `N` activation rows.
    fn dot_tile<const N: usize>(self, w: &[BlockQ41], rows: [&[BlockQ81]; N]) -> [f32; N] {
        match self {
            Simd::Portable => std::array::from_fn(|i| dot_portable(w, rows[i])),
            // SAFETY: `detect` checked that the CPU has AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { avx2::dot_tile(w, rows) },
            // SAFETY: `detect` checked AVX2, FMA and AVX-VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::AvxVnni => unsafe { avx2::dot_tile_vnni(w, rows) },
        }
    }
}

fn dot_portable(w: &[BlockQ41], a: &[BlockQ81]) -> f32 {
    let mut acc = 0f32;
    for (wb, ab) in w.iter().zip(a) {
        let mut isum = 0i32;
        for (i, &q) in wb.qs.iter().enumerate() {
            isum += i32::from(q & 0x0f) * i32::from(ab.qs[i]);
            isum += i32::from(q >> 4) * i32::from(ab.qs[i + 16]);
        }
        acc += wb.d * ab.d * isum as f32 + wb.m * ab.s;
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BlockQ41, BlockQ81};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// One body for both integer paths: `$isum(q4, q8)` gives eight i32
    /// lanes whose sum is `Σ q4·q8` over the 32 values of a block.
    macro_rules! dot_tile_fn {
        ($(#[$doc:meta])* $name:ident, $features:literal, $isum:expr) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name<const N: usize>(
                w: &[BlockQ41],
                rows: [&[BlockQ81]; N],
            ) -> [f32; N] {
                let low_mask = _mm_set1_epi8(0x0f);
                let mut acc = [_mm256_setzero_ps(); N];
                let mut macc = [0f32; N];
                for (b, wb) in w.iter().enumerate() {
                    // 32 unsigned 4-bit values: low nibbles (values 0..16), then high (16..32).
                    let packed = _mm_loadu_si128(wb.qs.as_ptr() as *const __m128i);
                    let lo = _mm_and_si128(packed, low_mask);
                    let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);
                    let q4 = _mm256_set_m128i(hi, lo);
                    for i in 0..N {
                        let ab = rows[i].get_unchecked(b);
                        let q8 = _mm256_loadu_si256(ab.qs.as_ptr() as *const __m256i);
                        let p32: __m256i = $isum(q4, q8);
                        let scale = _mm256_set1_ps(wb.d * ab.d);
                        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, acc[i]);
                        macc[i] += wb.m * ab.s;
                    }
                }
                let mut out = [0f32; N];
                for i in 0..N {
                    out[i] = hsum(acc[i]) + macc[i];
                }
                out
            }
        };
    }

    dot_tile_fn!(
        /// See [`super::Simd::dot_tile`]. Caller guarantees AVX2 and FMA.
        dot_tile,
        "avx2,fma",
        |q4, q8| _mm256_madd_epi16(_mm256_maddubs_epi16(q4, q8), _mm256_set1_epi16(1))
    );

    dot_tile_fn!(
        /// [`dot_tile`] with one AVX-VNNI instruction per block and row.
        /// Caller guarantees AVX2, FMA and AVX-VNNI.
        dot_tile_vnni,
        "avx2,fma,avxvnni",
        |q4, q8| _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q4, q8)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A random Q4_1 tensor in GGUF bytes.
    fn random_q41(rng: &mut impl Rng, n: usize, k: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..n * k / BLOCK {
            let d = half::f16::from_f32(rng.gen_range(0.001..0.05));
            let m = half::f16::from_f32(rng.gen_range(-0.2..0.0));
            bytes.extend_from_slice(&d.to_le_bytes());
            bytes.extend_from_slice(&m.to_le_bytes());
            for _ in 0..16 {
                bytes.push(rng.gen());
            }
        }
        bytes
    }

    fn reference(wf: &[f32], x: &[f32], n: usize, k: usize) -> Vec<f32> {
        let m = x.len() / k;
        let mut y = vec![0f32; m * n];
        for r in 0..m {
            for j in 0..n {
                y[r * n + j] = (0..k)
                    .map(|i| f64::from(x[r * k + i]) * f64::from(wf[j * k + i]))
                    .sum::<f64>() as f32;
            }
        }
        y
    }

    #[test]
    fn matmul_matches_dequantized_product_within_q8_error() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (n, k) = (37, 96);
        let w = Q41Matrix::from_gguf_bytes(&random_q41(&mut rng, n, k), n, k).unwrap();
        let wf = w.dequantize();
        for m in [1usize, 3, 4, 5, 9] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let got = w.matmul(&x).unwrap();
            let want = reference(&wf, &x, n, k);
            assert_eq!(got.len(), m * n);
            for (g, w) in got.iter().zip(&want) {
                // 8-bit activations: error about |x|·|w|·k / 254.
                assert!((g - w).abs() < 0.02 * (1.0 + w.abs()), "m={m}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn simd_and_portable_paths_agree_and_rows_are_independent() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (n, k) = (20, 64);
        let w = Q41Matrix::from_gguf_bytes(&random_q41(&mut rng, n, k), n, k).unwrap();
        let x: Vec<f32> = (0..6 * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let acts: Vec<BlockQ81> = x.chunks_exact(BLOCK).map(quantize_block).collect();
        let kb = k / BLOCK;
        let batch = w.matmul(&x).unwrap();
        for r in 0..6 {
            // A row computed alone equals the same row computed in a batch.
            let alone = w.matmul(&x[r * k..(r + 1) * k]).unwrap();
            assert_eq!(alone, batch[r * n..(r + 1) * n].to_vec());
            for j in 0..n {
                let p = dot_portable(&w.blocks[j * kb..(j + 1) * kb], &acts[r * kb..(r + 1) * kb]);
                let s = batch[r * n + j];
                assert!((p - s).abs() <= 1e-4 * (1.0 + p.abs()), "{p} vs {s}");
            }
        }
    }

    #[test]
    fn every_simd_path_the_cpu_has_gives_the_same_result() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let (n, k) = (3, 256);
        let w = Q41Matrix::from_gguf_bytes(&random_q41(&mut rng, n, k), n, k).unwrap();
        let x: Vec<f32> = (0..4 * k).map(|_| rng.gen_range(-3.0..3.0)).collect();
        let acts: Vec<BlockQ81> = x.chunks_exact(BLOCK).map(quantize_block).collect();
        let kb = k / BLOCK;
        let rows: [&[BlockQ81]; 4] = std::array::from_fn(|r| &acts[r * kb..(r + 1) * kb]);
        let paths = Simd::available();
        for j in 0..n {
            let wj = &w.blocks[j * kb..(j + 1) * kb];
            let want = Simd::Portable.dot_tile::<4>(wj, rows);
            for p in &paths {
                let got = p.dot_tile::<4>(wj, rows);
                for (g, e) in got.iter().zip(&want) {
                    assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{p:?}: {g} vs {e}");
                }
            }
            if paths.len() == 3 {
                // Same integer sums, same float operations: bit-identical.
                assert_eq!(
                    paths[1].dot_tile::<4>(wj, rows),
                    paths[2].dot_tile::<4>(wj, rows)
                );
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(Q41Matrix::from_gguf_bytes(&[0u8; 20], 1, 30).is_err());
        assert!(Q41Matrix::from_gguf_bytes(&[0u8; 19], 1, 32).is_err());
        let w = Q41Matrix::from_gguf_bytes(&[0u8; 40], 2, 32).unwrap();
        assert!(w.matmul(&[0f32; 33]).is_err());
    }
}
