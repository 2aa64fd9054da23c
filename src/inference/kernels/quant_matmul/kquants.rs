//! The k-quant matrices (Q4_K, Q5_K, Q6_K) multiplied a whole 256-value super-block at a
//! time, the way llama.cpp's `ggml_vec_dot_q*_K_q8_K` does: the activations are 256-value
//! 8-bit blocks with one scale and per-16 sums ([`Q8K`], `bsums`), each super-block's
//! sixteen 16-value integer dot products are multiplied by their integer scales and summed
//! in integers, and only then converted and multiplied once by `d·d₈` (a Q4_K/Q5_K min term
//! is one more integer dot, `Σ mn·bsum`, times `dmin·d₈`; Q6_K's `q − 32` offset is
//! `32·Σ sc·bsum` subtracted in integers).
//!
//! [`KMatrix`] keeps a row's super-blocks as two streams read once per step in row order:
//! the payloads ([`KBlock::Qs`], 64-byte aligned so no vector load spans two cache lines;
//! the bytes of the file, rearranged so a 64-byte load's low nibbles are 64 consecutive
//! values and its high nibbles the next 64) and the scales ([`KBlock::Meta`], f16 scales
//! converted to f32). Q4_K takes 152 bytes per 256 values (the file: 144), Q5_K 184 (176),
//! Q6_K 212 (210).

use std::fmt::Debug;
use std::ops::Range;

use anyhow::{bail, Result};

use super::blocks::{f16_bits, u16_at, ScalesK};
use super::source::{for_row_pieces, RowSource, Slots};
use super::{Acts, Simd};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Values per super-block (GGUF's QK_K).
pub const QK: usize = 256;

/// One k-quant type's super-block as [`KMatrix`] stores it.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // items only the x86 kernels read
pub trait KBlock: Copy + Debug + Send + Sync + 'static {
    /// GGUF's name of the type (for errors).
    const NAME: &'static str;
    /// Bytes of one GGUF super-block.
    const BYTES: usize;
    /// The integer subtracted from every stored value (Q6_K: 32).
    const OFFSET: i32;
    /// Whether a `dmin·mn` term exists (Q4_K, Q5_K).
    const WITH_MIN: bool;
    /// Values sharing one integer scale (Q4_K, Q5_K: 32; Q6_K: 16).
    const SUB: usize;
    /// The integer payload of one super-block (64-byte aligned).
    type Qs: Copy + Debug + Send + Sync + 'static;
    /// The scales of one super-block.
    type Meta: Copy + Debug + Default + Send + Sync + 'static;
    /// Split GGUF super-block `c` ([`Self::BYTES`] bytes).
    fn parse(c: &[u8]) -> (Self::Qs, Self::Meta);
    /// The 256 stored values `u` (before [`Self::OFFSET`]).
    fn values(qs: &Self::Qs, meta: &Self::Meta) -> [u8; QK];
    /// The integer scale of 16-value sub-block `s` (Q4_K, Q5_K: `sc[s / 2]`).
    fn scale16(meta: &Self::Meta, s: usize) -> i32;
    /// The integer min of 16-value sub-block `s` (Q4_K, Q5_K: `mn[s / 2]`; Q6_K: 0).
    fn min16(meta: &Self::Meta, s: usize) -> i32;
    /// `d` and `dmin` (Q6_K: 0) in f32.
    fn d_dmin(meta: &Self::Meta) -> (f32, f32);
    /// Values `64g .. 64g + 64` as bytes.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and BW (the caller is compiled with them).
    #[cfg(target_arch = "x86_64")]
    unsafe fn quarter512(qs: &Self::Qs, meta: &Self::Meta, g: usize) -> __m512i;
    /// Values `32p .. 32p + 32` as bytes.
    ///
    /// # Safety
    /// The CPU must have AVX2 (the caller is compiled with it).
    #[cfg(target_arch = "x86_64")]
    unsafe fn piece256(qs: &Self::Qs, meta: &Self::Meta, p: usize) -> __m256i;
    /// [`Self::scale16`] of sub-blocks 0..8 and 8..16 as i32 lanes.
    ///
    /// # Safety
    /// As [`Self::piece256`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn scales256(meta: &Self::Meta) -> [__m256i; 2];
    /// The mins of the eight 32-value sub-blocks as i16 (Q6_K: zeros).
    ///
    /// # Safety
    /// As [`Self::piece256`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn mins8_i16(meta: &Self::Meta) -> __m128i;
    /// `OFFSET·sc` of the sixteen 16-value sub-blocks as i16 (zeros without an offset).
    ///
    /// # Safety
    /// As [`Self::piece256`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn offset_scales_i16(meta: &Self::Meta) -> __m256i;
}

/// Values `64g .. 64g + 64` of [`Nibbles256`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn nib512(q: &Nibbles256, g: usize) -> __m512i {
    let v = _mm512_load_si512(q.0.as_ptr().add(64 * (g / 2)) as *const _);
    let v = if g % 2 == 0 {
        v
    } else {
        _mm512_srli_epi16::<4>(v)
    };
    _mm512_and_si512(v, _mm512_set1_epi8(0x0f))
}

/// Values `32p .. 32p + 32` of [`Nibbles256`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn nib256(q: &Nibbles256, p: usize) -> __m256i {
    let v = _mm256_load_si256(q.0.as_ptr().add(64 * (p / 4) + 32 * (p % 2)) as *const _);
    let v = if (p / 2) % 2 == 0 {
        v
    } else {
        _mm256_srli_epi16::<4>(v)
    };
    _mm256_and_si256(v, _mm256_set1_epi8(0x0f))
}

/// Eight unsigned 6-bit scales as the i32 lanes of sub-blocks 0..8 and 8..16 (each
/// scale serves two 16-value sub-blocks).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pairs256(b: &[u8; 8]) -> [__m256i; 2] {
    let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.as_ptr() as *const __m128i));
    [
        _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)),
        _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)),
    ]
}

/// Byte `j` is 0x10 where bit `j` of `bits` is set, else 0.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn fifth256(bits: u32) -> __m256i {
    // Byte j takes byte j/8 of bits, then keeps bit j%8.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// 256 nibbles rearranged: byte `64h + l`'s low nibble is value `128h + l`, its high
/// nibble value `128h + 64 + l`.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub struct Nibbles256(pub [u8; 128]);

/// From a Q4_K/Q5_K super-block's 128 nibble bytes (each 64 values share 32 bytes: low
/// nibbles the first 32, high the next 32): byte `64h + l` takes nibble `l / 32` of bytes
/// `64h + l % 32` (low) and `64h + 32 + l % 32` (high).
fn k_nibbles256(ql: &[u8]) -> Nibbles256 {
    let mut out = [0u8; 128];
    for h in 0..2 {
        let (a, b) = (&ql[64 * h..64 * h + 32], &ql[64 * h + 32..64 * h + 64]);
        let (lo, hi) = out[64 * h..64 * h + 64].split_at_mut(32);
        for l in 0..32 {
            lo[l] = (a[l] & 0x0f) | (b[l] << 4);
            hi[l] = (a[l] >> 4) | (b[l] & 0xf0);
        }
    }
    Nibbles256(out)
}

/// The values of [`Nibbles256`].
fn nibble_values(q: &Nibbles256) -> [u8; QK] {
    std::array::from_fn(|v| {
        let (h, r) = (v / 128, v % 128);
        (q.0[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f
    })
}

/// Q4_K and Q5_K scales: eight 6-bit scales and mins per 32 values, `d` and `dmin`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct MetaK {
    pub(crate) sc: [u8; 8],
    pub(crate) mn: [u8; 8],
    pub(crate) d: f32,
    pub(crate) dmin: f32,
}

impl MetaK {
    fn parse(c: &[u8]) -> Self {
        let s = ScalesK::unpack(u16_at(c, 0), u16_at(c, 2), &c[4..16]);
        MetaK {
            sc: s.sc,
            mn: s.mn,
            d: f16_bits(s.d),
            dmin: f16_bits(s.dmin),
        }
    }
}

/// GGUF `block_q4_K` as a [`KBlock`].
#[derive(Debug, Clone, Copy)]
pub struct KQ4;

impl KBlock for KQ4 {
    const NAME: &'static str = "Q4_K";
    const BYTES: usize = 144;
    const OFFSET: i32 = 0;
    const WITH_MIN: bool = true;
    const SUB: usize = 32;
    type Qs = Nibbles256;
    type Meta = MetaK;
    fn parse(c: &[u8]) -> (Nibbles256, MetaK) {
        (k_nibbles256(&c[16..144]), MetaK::parse(c))
    }
    fn values(qs: &Nibbles256, _: &MetaK) -> [u8; QK] {
        nibble_values(qs)
    }
    fn scale16(m: &MetaK, s: usize) -> i32 {
        i32::from(m.sc[s / 2])
    }
    fn min16(m: &MetaK, s: usize) -> i32 {
        i32::from(m.mn[s / 2])
    }
    fn d_dmin(m: &MetaK) -> (f32, f32) {
        (m.d, m.dmin)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn quarter512(qs: &Nibbles256, _: &MetaK, g: usize) -> __m512i {
        nib512(qs, g)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn piece256(qs: &Nibbles256, _: &MetaK, p: usize) -> __m256i {
        nib256(qs, p)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn scales256(m: &MetaK) -> [__m256i; 2] {
        pairs256(&m.sc)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn mins8_i16(m: &MetaK) -> __m128i {
        _mm_cvtepu8_epi16(_mm_loadl_epi64(m.mn.as_ptr() as *const __m128i))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn offset_scales_i16(_: &MetaK) -> __m256i {
        _mm256_setzero_si256()
    }
}

/// Q5_K scales and fifth bits: bit `l` of `qh[g]` is bit 4 of value `64g + l`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct MetaK5 {
    pub(crate) qh: [u64; 4],
    pub(crate) k: MetaK,
}

/// GGUF `block_q5_K` as a [`KBlock`].
#[derive(Debug, Clone, Copy)]
pub struct KQ5;

impl KBlock for KQ5 {
    const NAME: &'static str = "Q5_K";
    const BYTES: usize = 176;
    const OFFSET: i32 = 0;
    const WITH_MIN: bool = true;
    const SUB: usize = 32;
    type Qs = Nibbles256;
    type Meta = MetaK5;
    fn parse(c: &[u8]) -> (Nibbles256, MetaK5) {
        // Bit i of file byte l is bit 4 of value 32i + l: value 64g + l's is bit
        // 2g + l / 32 of byte l % 32.
        let qh = &c[16..48];
        let masks = std::array::from_fn(|g| {
            qh.iter().enumerate().fold(0u64, |m, (l, &q)| {
                m | u64::from((q >> (2 * g)) & 1) << l
                    | u64::from((q >> (2 * g + 1)) & 1) << (l + 32)
            })
        });
        (
            k_nibbles256(&c[48..176]),
            MetaK5 {
                qh: masks,
                k: MetaK::parse(c),
            },
        )
    }
    fn values(qs: &Nibbles256, m: &MetaK5) -> [u8; QK] {
        let mut v = nibble_values(qs);
        for (i, x) in v.iter_mut().enumerate() {
            *x |= (((m.qh[i / 64] >> (i % 64)) & 1) as u8) << 4;
        }
        v
    }
    fn scale16(m: &MetaK5, s: usize) -> i32 {
        i32::from(m.k.sc[s / 2])
    }
    fn min16(m: &MetaK5, s: usize) -> i32 {
        i32::from(m.k.mn[s / 2])
    }
    fn d_dmin(m: &MetaK5) -> (f32, f32) {
        (m.k.d, m.k.dmin)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn quarter512(qs: &Nibbles256, m: &MetaK5, g: usize) -> __m512i {
        let u = nib512(qs, g);
        _mm512_mask_add_epi8(u, m.qh[g], u, _mm512_set1_epi8(0x10))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn piece256(qs: &Nibbles256, m: &MetaK5, p: usize) -> __m256i {
        let bits = (m.qh[p / 2] >> (32 * (p % 2))) as u32;
        _mm256_or_si256(nib256(qs, p), fifth256(bits))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn scales256(m: &MetaK5) -> [__m256i; 2] {
        pairs256(&m.k.sc)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn mins8_i16(m: &MetaK5) -> __m128i {
        KQ4::mins8_i16(&m.k)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn offset_scales_i16(_: &MetaK5) -> __m256i {
        _mm256_setzero_si256()
    }
}

/// A Q6_K payload: low nibbles as [`Nibbles256`] and the two high bits of value `64g + l`
/// in bits `2g`, `2g + 1` of `qh[l]`.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub struct Q6Payload {
    pub(crate) ql: Nibbles256,
    pub(crate) qh: [u8; 64],
}

/// Q6_K scales: a signed 8-bit scale per 16 values and `d`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct MetaQ6 {
    pub(crate) sc: [i8; 16],
    pub(crate) d: f32,
}

/// GGUF `block_q6_K` as a [`KBlock`].
#[derive(Debug, Clone, Copy)]
pub struct KQ6;

impl KBlock for KQ6 {
    const NAME: &'static str = "Q6_K";
    const BYTES: usize = 210;
    const OFFSET: i32 = 32;
    const WITH_MIN: bool = false;
    const SUB: usize = 16;
    type Qs = Q6Payload;
    type Meta = MetaQ6;
    fn parse(c: &[u8]) -> (Q6Payload, MetaQ6) {
        // Value 128n + 32t + l: nibble t/2 of ql[64n + l + 32(t%2)], bits 2t, 2t+1 of
        // qh[32n + l] (ggml's dequantize_row_q6_K). So byte 64h + m of the file's ql holds
        // values 128h + m (low nibble) and 128h + 64 + m (high): [`Nibbles256`]'s order
        // already. Value 64g + l's high bits are bits 2(2(g%2) + l/32) of
        // qh[32(g/2) + l%32]; they go to bits 2g, 2g + 1 of this qh[l].
        let mut ql = [0u8; 128];
        ql.copy_from_slice(&c[..128]);
        let (q0, q1) = (&c[128..160], &c[160..192]);
        let mut qh = [0u8; 64];
        let (lo, hi) = qh.split_at_mut(32);
        for l in 0..32 {
            let (a, b) = (q0[l], q1[l]);
            lo[l] = (a & 3) | ((a >> 4) & 3) << 2 | (b & 3) << 4 | ((b >> 4) & 3) << 6;
            hi[l] =
                ((a >> 2) & 3) | ((a >> 6) & 3) << 2 | ((b >> 2) & 3) << 4 | ((b >> 6) & 3) << 6;
        }
        let sc = std::array::from_fn(|s| c[192 + s] as i8);
        (
            Q6Payload {
                ql: Nibbles256(ql),
                qh,
            },
            MetaQ6 {
                sc,
                d: f16_bits(u16_at(c, 208)),
            },
        )
    }
    fn values(qs: &Q6Payload, _: &MetaQ6) -> [u8; QK] {
        let low = nibble_values(&qs.ql);
        std::array::from_fn(|v| low[v] | ((qs.qh[v % 64] >> (2 * (v / 64))) & 3) << 4)
    }
    fn scale16(m: &MetaQ6, s: usize) -> i32 {
        i32::from(m.sc[s])
    }
    fn min16(_: &MetaQ6, _: usize) -> i32 {
        0
    }
    fn d_dmin(m: &MetaQ6) -> (f32, f32) {
        (m.d, 0.0)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn quarter512(qs: &Q6Payload, _: &MetaQ6, g: usize) -> __m512i {
        let h = _mm512_load_si512(qs.qh.as_ptr() as *const _);
        // Bits 2g, 2g + 1 of each byte to bits 4, 5 (the mask drops what a 16-bit
        // shift carries in from the neighbouring byte).
        let h = match g {
            0 => _mm512_slli_epi16::<4>(h),
            1 => _mm512_slli_epi16::<2>(h),
            2 => h,
            _ => _mm512_srli_epi16::<2>(h),
        };
        _mm512_or_si512(
            nib512(&qs.ql, g),
            _mm512_and_si512(h, _mm512_set1_epi8(0x30)),
        )
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn piece256(qs: &Q6Payload, _: &MetaQ6, p: usize) -> __m256i {
        let h = _mm256_load_si256(qs.qh.as_ptr().add(32 * (p % 2)) as *const _);
        let h = match p / 2 {
            0 => _mm256_slli_epi16::<4>(h),
            1 => _mm256_slli_epi16::<2>(h),
            2 => h,
            _ => _mm256_srli_epi16::<2>(h),
        };
        _mm256_or_si256(
            nib256(&qs.ql, p),
            _mm256_and_si256(h, _mm256_set1_epi8(0x30)),
        )
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn scales256(m: &MetaQ6) -> [__m256i; 2] {
        let half = |i: usize| {
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(m.sc.as_ptr().add(8 * i) as *const __m128i))
        };
        [half(0), half(1)]
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn mins8_i16(_: &MetaQ6) -> __m128i {
        _mm_setzero_si128()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn offset_scales_i16(m: &MetaQ6) -> __m256i {
        // |32·sc| <= 4096 fits 16 bits.
        let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(m.sc.as_ptr() as *const __m128i));
        _mm256_mullo_epi16(sc, _mm256_set1_epi16(Self::OFFSET as i16))
    }
}

/// One activation super-block: 256 signed bytes and the sums of each 16 (`bsums`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Q8K {
    pub(crate) qs: [i8; QK],
    pub(crate) bsums: [i32; 16],
}

impl Default for Q8K {
    fn default() -> Self {
        Q8K {
            qs: [0; QK],
            bsums: [0; 16],
        }
    }
}

/// One super-block of 256 activations as llama.cpp's `quantize_row_q8_K` makes it
/// (`d = max|x| / 127`, round to nearest): the bytes and sums, and `d`.
pub(super) fn quantize_k(x: &[f32]) -> (Q8K, f32) {
    let mut lanes = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v.abs());
        }
    }
    let amax = lanes.iter().fold(0f32, |a, &v| a.max(v));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = Q8K::default();
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    for (s, sum) in b.bsums.iter_mut().enumerate() {
        *sum = b.qs[16 * s..16 * s + 16]
            .iter()
            .map(|&q| i32::from(q))
            .sum();
    }
    (b, d)
}

/// Activation rows from which the portable path unpacks each super-block once for all of
/// them ([`KMatrix::run_prompt_portable`]).
pub(super) const PORTABLE_PROMPT_MIN_ROWS: usize = 4;

/// A `[n, k]` k-quant weight of type `B`.
#[derive(Clone)]
pub(crate) struct KMatrix<B: KBlock> {
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// Super-blocks per row.
    pub(crate) kbs: usize,
    pub(crate) qs: crate::inference::kernels::weight_memory::WeightVec<B::Qs>,
    pub(crate) meta: crate::inference::kernels::weight_memory::WeightVec<B::Meta>,
    pub(crate) simd: Simd,
}

impl<B: KBlock> Debug for KMatrix<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KMatrix<{}>[{}, {}] ({:?})",
            B::NAME,
            self.n,
            self.k,
            self.simd
        )
    }
}

impl<B: KBlock> KMatrix<B> {
    /// Build from GGUF super-block bytes of a `[n, k]` tensor (row major).
    #[cfg(test)]
    pub fn from_gguf_bytes(bytes: &[u8], n: usize, k: usize) -> Result<Self> {
        if k == 0 || !k.is_multiple_of(QK) {
            bail!(
                "{} rows of {k} values are not whole blocks of {QK}",
                B::NAME
            );
        }
        let kbs = k / QK;
        if bytes.len() != n * kbs * B::BYTES {
            bail!(
                "{} tensor [{n}, {k}] needs {} bytes, got {}",
                B::NAME,
                n * kbs * B::BYTES,
                bytes.len()
            );
        }
        Self::from_source(&RowSource::Bytes(bytes), n, k)
    }

    /// Build from the GGUF super-block bytes of a `[n, k]` tensor (row major) in `src`,
    /// the rows converted in parallel ([`for_row_pieces`]).
    pub fn from_source(src: &RowSource<'_>, n: usize, k: usize) -> Result<Self> {
        if k == 0 || !k.is_multiple_of(QK) {
            bail!(
                "{} rows of {k} values are not whole blocks of {QK}",
                B::NAME
            );
        }
        let kbs = k / QK;
        let simd = Simd::detect()?;
        let mut qs =
            crate::inference::kernels::weight_memory::WeightVec::<B::Qs>::with_capacity(n * kbs);
        let mut meta =
            crate::inference::kernels::weight_memory::WeightVec::<B::Meta>::with_capacity(n * kbs);
        let (qs_at, meta_at) = (Slots::of(&mut qs), Slots::of(&mut meta));
        for_row_pieces(src, n, kbs * B::BYTES, |r0, bytes| {
            for (i, c) in bytes.chunks_exact(B::BYTES).enumerate() {
                let (q, m) = B::parse(c);
                // SAFETY: the piece's rows are its own: super-blocks r0·kbs + i, below n·kbs.
                unsafe {
                    qs_at.put(r0 * kbs + i, q);
                    meta_at.put(r0 * kbs + i, m);
                }
            }
        })?;
        // SAFETY: `for_row_pieces` returned Ok: every row's super-blocks were written.
        unsafe {
            qs.set_len(n * kbs);
            meta.set_len(n * kbs);
        }
        Ok(Self {
            n,
            k,
            kbs,
            qs,
            meta,
            simd,
        })
    }

    /// A few rows' super-blocks parsed on the calling thread (no pool): `bytes` holds `n`
    /// whole rows of `k / QK` super-blocks (`k` already checked to be whole super-blocks).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn from_piece(bytes: &[u8], n: usize, k: usize, simd: Simd) -> Self {
        let (qs, meta) = bytes.chunks_exact(B::BYTES).map(B::parse).unzip();
        Self {
            n,
            k,
            kbs: k / QK,
            qs,
            meta,
            simd,
        }
    }

    #[cfg(test)]
    pub(crate) fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd;
        self
    }

    /// Weight row `j` against activation row `r`, in exact integers per super-block.
    pub(super) fn dot_portable(&self, j: usize, a: &Acts, r: usize) -> f32 {
        let mut acc = 0f32;
        for s in 0..self.kbs {
            let meta = &self.meta[j * self.kbs + s];
            let u = B::values(&self.qs[j * self.kbs + s], meta);
            acc += Self::super_portable(&u, meta, a, r, s);
        }
        acc
    }

    /// One super-block's term of [`Self::dot_portable`]: stored values `u` with their
    /// scales `meta` against super-block `s` of activation row `r`.
    #[inline(always)]
    fn super_portable(u: &[u8; QK], meta: &B::Meta, a: &Acts, r: usize, s: usize) -> f32 {
        let x = &a.qk[r * a.kbs + s];
        let (mut main, mut min) = (0i32, 0i32);
        for t in 0..16 {
            let dot: i32 = (16 * t..16 * t + 16)
                .map(|v| i32::from(u[v]) * i32::from(x.qs[v]))
                .sum();
            main += B::scale16(meta, t) * (dot - B::OFFSET * x.bsums[t]);
            min += B::min16(meta, t) * x.bsums[t];
        }
        let (d, dmin) = B::d_dmin(meta);
        let d8 = a.dk[r * a.kbs + s];
        d * d8 * main as f32 - dmin * d8 * min as f32
    }

    /// The portable prompt path: each super-block of weight row `j` unpacked once
    /// ([`KBlock::values`]) for all activation rows `rows`; each pair's steps are
    /// [`Self::dot_portable`]'s, so a row's result is the same bits in either.
    ///
    /// # Safety
    /// The caller owns `y[r, j]` for these rows (`y` holds `m·n` floats).
    pub(super) unsafe fn run_prompt_portable(
        &self,
        a: &Acts,
        rows: Range<usize>,
        j: usize,
        y: *mut f32,
    ) {
        let mut acc = vec![0f32; rows.len()];
        for s in 0..self.kbs {
            let meta = &self.meta[j * self.kbs + s];
            let u = B::values(&self.qs[j * self.kbs + s], meta);
            for (acc, r) in acc.iter_mut().zip(rows.clone()) {
                *acc += Self::super_portable(&u, meta, a, r, s);
            }
        }
        for (v, r) in acc.into_iter().zip(rows) {
            // SAFETY: as the caller guarantees.
            unsafe { *y.add(r * self.n + j) = v };
        }
    }
}
