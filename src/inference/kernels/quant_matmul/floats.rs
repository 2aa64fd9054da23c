//! F16 and BF16 weight matrices ([`FloatMatrix`]), held as the file's 16-bit values (2 bytes
//! per weight; candle 0.11 dequantises such a matrix to f32 and holds 4), multiplied the way
//! llama.cpp's CPU backend does on x86. Gemma 4's `per_layer_model_proj` (`[10752, 2560]`, F16
//! in real Q4_K_M files) is the matrix that asked for it: through candle its decode step ran
//! at a quarter of llama.cpp's speed (benches/RESULTS.md).
//!
//! The arithmetic is llama.cpp's (ggml-cpu's `mul_mat` with `llamafile_sgemm`, `tinyBLAS`,
//! on an AVX-512 build): each activation row is first rounded to the weight's type
//! (`vec_dot_type` of F16 is F16, of BF16 is BF16; round to nearest even) and kept here as f32,
//! which holds it exactly ([`HalfType::arrange`]). A dot product then runs in 16 f32 lanes:
//! - F16: value `i` of every 16 goes to lane `i mod 16`, `lane += w·x` in order (tinyBLAS's
//!   `_mm512_fmadd_ps` over `_mm512_cvtph_ps` loads; the product of two f16 values is exact
//!   in f32, so fused or not is the same);
//! - BF16: of every 32 values, lane `l` takes the pair `2l + 1`, then `2l` (`lane = (lane +
//!   w₂ₗ₊₁·x₂ₗ₊₁) + w₂ₗ·x₂ₗ`, the order of `_mm512_dpbf16_ps` on AVX512-BF16 CPUs, checked on
//!   Zen 4), each step one fused multiply-add; unlike `vdpbf16ps` no denormal is flushed;
//!
//! and the 16 lanes are summed as a tree: lanes `l + 8`, then `l + 4`, `l + 2`, `l + 1`
//! (GCC's `_mm512_reduce_add_ps`, tinyBLAS's `hsum`). Rows are padded with zeros to whole
//! steps (16 or 32 values), which adds exact zeros. Every path (portable, AVX2 with two 8-lane
//! halves per lane set, AVX-512) runs exactly these operations for every (weight row,
//! activation row) pair whatever the tile, so the paths give the same bits and a row's result
//! never depends on the rows multiplied with it. llama.cpp takes this route for a weight of
//! whole 16-value (BF16: 32-value) rows and a multiple of 4 rows, which the roster's F16
//! matrices are; its other shapes go through `ggml_vec_dot_f16`, another summation order.

use std::fmt::Debug;
use std::marker::PhantomData;

use anyhow::{bail, Result};

use super::source::{for_row_pieces, RowSource, Slots};
use super::{Acts, ActsForm, Simd};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Lanes of a dot product (one 512-bit register of f32).
pub const LANES: usize = 16;

/// A 16-bit float weight type: its conversions and its order of a dot product.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // items only the x86 kernels read
pub trait HalfType: Copy + Debug + Send + Sync + 'static {
    /// GGUF's name of the type (for errors and debug output).
    const NAME: &'static str;
    /// Values per step of the dot product (F16: 16, one per lane; BF16: 32, two per lane).
    const CHUNK: usize;
    /// The activations' form.
    const FORM: ActsForm;
    /// A stored value as f32 (exact).
    fn to_f32(bits: u16) -> f32;
    /// `x` rounded to the type (to nearest even), as f32.
    fn round(x: f32) -> f32;
    /// `k` rounded up to whole steps: the stride of the stored rows and activations.
    fn padded(k: usize) -> usize {
        k.div_ceil(Self::CHUNK) * Self::CHUNK
    }
    /// Write the activation row `x` rounded to the type into `out` (`padded(x.len())`
    /// values) in the order the dot product reads it, zeros after `x`.
    fn arrange(x: &[f32], out: &mut [f32]);
    /// The activations of this form in `a` and their row stride.
    fn acts(a: &Acts) -> (&[f32], usize);
    /// The dot product of a stored weight row with an arranged activation row (both
    /// `padded(k)` long): the reference every SIMD path equals bit for bit.
    fn dot_portable(w: &[u16], x: &[f32]) -> f32;
    /// Lane steps per chunk (F16: 1; BF16: 2, the odd values then the even ones).
    const STEPS: usize;
    /// Where step `s`'s activations for lanes `8h .. 8h + 8` start in an arranged chunk.
    fn x_offset(s: usize, h: usize) -> usize;
    /// The chunk of stored values at `p` as each step's 16 lanes of weights (F16: step 0
    /// only; the unused entry is zero).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F (the caller is compiled with it); `p` points to
    /// [`Self::CHUNK`] readable values.
    #[cfg(target_arch = "x86_64")]
    unsafe fn w512(p: *const u16) -> [__m512; 2];
    /// Lanes `8h .. 8h + 8` of [`Self::w512`].
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C (the caller is compiled with them); as
    /// [`Self::w512`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn w256(p: *const u16, h: usize) -> [__m256; 2];
}

/// The 16 lanes summed as llama.cpp's `hsum` does (`_mm512_reduce_add_ps`).
#[inline(always)]
pub fn reduce(l: [f32; LANES]) -> f32 {
    let s8: [f32; 8] = std::array::from_fn(|i| l[i] + l[i + 8]);
    let s4: [f32; 4] = std::array::from_fn(|i| s8[i] + s8[i + 4]);
    let s2: [f32; 2] = std::array::from_fn(|i| s4[i] + s4[i + 2]);
    s2[0] + s2[1]
}

/// IEEE half precision (GGUF F16).
#[derive(Debug, Clone, Copy)]
pub struct F16;

impl HalfType for F16 {
    const NAME: &'static str = "F16";
    const CHUNK: usize = 16;
    const FORM: ActsForm = ActsForm::F16;

    fn to_f32(bits: u16) -> f32 {
        half::f16::from_bits(bits).to_f32()
    }

    fn round(x: f32) -> f32 {
        half::f16::from_f32(x).to_f32()
    }

    fn arrange(x: &[f32], out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        let mut h = vec![half::f16::ZERO; x.len()];
        h.convert_from_f32_slice(x);
        h.convert_to_f32_slice(&mut out[..x.len()]);
        out[x.len()..].fill(0.0);
    }

    fn acts(a: &Acts) -> (&[f32], usize) {
        (&a.f16s, a.kf16)
    }

    fn dot_portable(w: &[u16], x: &[f32]) -> f32 {
        let mut l = [0f32; LANES];
        for (wc, xc) in w.chunks_exact(LANES).zip(x.chunks_exact(LANES)) {
            for i in 0..LANES {
                // The product of two f16 values is exact in f32: this is the fused
                // multiply-add of the SIMD paths.
                l[i] += Self::to_f32(wc[i]) * xc[i];
            }
        }
        reduce(l)
    }

    const STEPS: usize = 1;

    fn x_offset(_: usize, h: usize) -> usize {
        8 * h
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn w512(p: *const u16) -> [__m512; 2] {
        let v = _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
        [v, _mm512_setzero_ps()]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn w256(p: *const u16, h: usize) -> [__m256; 2] {
        let v = _mm256_cvtph_ps(_mm_loadu_si128(p.add(8 * h) as *const __m128i));
        [v, _mm256_setzero_ps()]
    }
}

/// bfloat16 (GGUF BF16).
#[derive(Debug, Clone, Copy)]
pub struct Bf16;

impl HalfType for Bf16 {
    const NAME: &'static str = "BF16";
    const CHUNK: usize = 32;
    const FORM: ActsForm = ActsForm::Bf16;

    fn to_f32(bits: u16) -> f32 {
        f32::from_bits(u32::from(bits) << 16)
    }

    fn round(x: f32) -> f32 {
        half::bf16::from_f32(x).to_f32()
    }

    /// Per 32 values: the odd ones (`x₂ₗ₊₁`, lane `l`) first, then the even ones.
    fn arrange(x: &[f32], out: &mut [f32]) {
        let at = |i: usize| x.get(i).map_or(0.0, |&v| Self::round(v));
        for (c, o) in out.chunks_exact_mut(Self::CHUNK).enumerate() {
            for l in 0..LANES {
                o[l] = at(c * Self::CHUNK + 2 * l + 1);
                o[LANES + l] = at(c * Self::CHUNK + 2 * l);
            }
        }
    }

    fn acts(a: &Acts) -> (&[f32], usize) {
        (&a.bf16s, a.kbf16)
    }

    fn dot_portable(w: &[u16], x: &[f32]) -> f32 {
        let mut l = [0f32; LANES];
        for (wc, xc) in w.chunks_exact(Self::CHUNK).zip(x.chunks_exact(Self::CHUNK)) {
            for i in 0..LANES {
                // Fused, as the SIMD paths (a product of two bf16 values can be below
                // f32's normal range, where rounding it first would differ).
                l[i] = Self::to_f32(wc[2 * i + 1]).mul_add(xc[i], l[i]);
                l[i] = Self::to_f32(wc[2 * i]).mul_add(xc[LANES + i], l[i]);
            }
        }
        reduce(l)
    }

    const STEPS: usize = 2;

    fn x_offset(s: usize, h: usize) -> usize {
        LANES * s + 8 * h
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn w512(p: *const u16) -> [__m512; 2] {
        // Lane l holds values 2l (low half) and 2l + 1 (high half).
        let v = _mm512_loadu_si512(p as *const __m512i);
        let odd = _mm512_and_si512(v, _mm512_set1_epi32(0xffff_0000u32 as i32));
        let even = _mm512_slli_epi32::<16>(v);
        [_mm512_castsi512_ps(odd), _mm512_castsi512_ps(even)]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn w256(p: *const u16, h: usize) -> [__m256; 2] {
        let v = _mm256_loadu_si256(p.add(16 * h) as *const __m256i);
        let odd = _mm256_and_si256(v, _mm256_set1_epi32(0xffff_0000u32 as i32));
        let even = _mm256_slli_epi32::<16>(v);
        [_mm256_castsi256_ps(odd), _mm256_castsi256_ps(even)]
    }
}

/// A `[n, k]` F16 or BF16 weight, its rows of the file's 16-bit values padded with zeros
/// to [`HalfType::padded`] values.
#[derive(Clone)]
pub struct FloatMatrix<H: HalfType> {
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// The row stride (`k` rounded up to whole steps).
    pub(crate) kp: usize,
    pub(crate) w: crate::inference::kernels::weight_memory::WeightVec<u16>,
    pub(crate) simd: Simd,
    _h: PhantomData<H>,
}

impl<H: HalfType> Debug for FloatMatrix<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FloatMatrix<{}>[{}, {}] ({:?})",
            H::NAME,
            self.n,
            self.k,
            self.simd
        )
    }
}

impl<H: HalfType> FloatMatrix<H> {
    /// Build from the GGUF bytes of a `[n, k]` tensor (row major, little-endian values).
    #[cfg(test)]
    pub fn from_gguf_bytes(bytes: &[u8], n: usize, k: usize) -> Result<Self> {
        Self::from_source(&RowSource::Bytes(bytes), n, k)
    }

    /// Build from the GGUF bytes of a `[n, k]` tensor in `src`, the rows copied in
    /// parallel ([`for_row_pieces`]).
    pub fn from_source(src: &RowSource<'_>, n: usize, k: usize) -> Result<Self> {
        if k == 0 {
            bail!("{} matrix [{n}, {k}] has no columns", H::NAME);
        }
        let kp = H::padded(k);
        let simd = Simd::detect()?;
        let mut w =
            crate::inference::kernels::weight_memory::WeightVec::<u16>::with_capacity(n * kp);
        let at = Slots::of(&mut w);
        for_row_pieces(src, n, 2 * k, |r0, bytes| {
            for (i, row) in bytes.chunks_exact(2 * k).enumerate() {
                let start = (r0 + i) * kp;
                // SAFETY: the piece's rows are its own: values (r0 + i)·kp .. + kp, below
                // n·kp.
                unsafe {
                    for (v, b) in row.chunks_exact(2).enumerate() {
                        at.put(start + v, u16::from_le_bytes([b[0], b[1]]));
                    }
                    for v in k..kp {
                        at.put(start + v, 0);
                    }
                }
            }
        })?;
        // SAFETY: `for_row_pieces` returned Ok: every row's values were written.
        unsafe { w.set_len(n * kp) };
        Ok(Self {
            n,
            k,
            kp,
            w,
            simd,
            _h: PhantomData,
        })
    }

    #[cfg(test)]
    pub(crate) fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd;
        self
    }

    /// Stored row `j`.
    pub(crate) fn row(&self, j: usize) -> &[u16] {
        &self.w[j * self.kp..(j + 1) * self.kp]
    }
}
