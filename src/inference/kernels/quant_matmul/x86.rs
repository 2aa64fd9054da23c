//! The x86-64 SIMD paths of the integer dot products: shared unpacking of block payloads
//! here, the AVX-512 VNNI tile in [`avx512`], the AVX2 and AVX-VNNI tiles in [`avx2`]. Which
//! runs is [`super::Simd`], chosen at run time. The k-quant tiles are [`kquants512`] and
//! [`kquants256`], the F16/BF16 tiles [`floats`].

/// `$pass!(R)` for `R` the activation rows `$left` left to a lanes kernel's block, at most 8:
/// every count from 1 to 8 is one pass over the block's lines, so the weights' unpacking is
/// shared by all the rows of a pass (5 rows as a pass of 4 and one of 1 cost Q6_K 1.5× a
/// pass of 5: a society's five agents). `klanes512` and `qlanes512` run their passes
/// through it.
macro_rules! by_pass_width {
    ($left:expr, $pass:ident) => {
        match $left {
            8.. => $pass!(8),
            7 => $pass!(7),
            6 => $pass!(6),
            5 => $pass!(5),
            4 => $pass!(4),
            3 => $pass!(3),
            2 => $pass!(2),
            _ => $pass!(1),
        }
    };
}

pub(super) mod avx2;
pub(super) mod avx512;
pub(super) mod floats;
pub(super) mod klanes512;
pub(super) mod kquants256;
pub(super) mod kquants512;
pub(super) mod qlanes512;

/// How far ahead of the current block the weights are prefetched.
const PREFETCH: usize = 512;
use std::arch::x86_64::*;

/// Nibbles as 32 bytes: value `j` in byte `j` (low nibbles first).
#[inline(always)]
pub(crate) unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    let low_mask = _mm_set1_epi8(0x0f);
    let packed = _mm_loadu_si128(qs.as_ptr() as *const __m128i);
    let lo = _mm_and_si128(packed, low_mask);
    let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);
    _mm256_set_m128i(hi, lo)
}

/// Nibbles with bit `j` of `qh` as bit 4 of byte `j`.
#[inline(always)]
pub(crate) unsafe fn nibbles5(qs: &[u8; 16], qh: u32) -> __m256i {
    // Byte j takes byte j/8 of qh (every 128-bit lane holds all four),
    // then keeps bit j%8: equal to its bit selector where the bit is set.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    _mm256_or_si256(nibbles(qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

/// Two blocks' nibbles (16 bytes each, contiguous in `packed`) as 64
/// bytes: block 0's values in bytes 0..32, block 1's in 32..64.
#[inline(always)]
pub(crate) unsafe fn nibbles_pair(packed: __m256i) -> __m512i {
    // 128-bit lanes [b0, b0, b1, b1]; the odd lanes shifted down by four
    // bits give the high nibbles once every byte is masked to 0x0f.
    let z = _mm512_castsi256_si512(packed);
    let z = _mm512_shuffle_i64x2::<0b01_01_00_00>(z, z);
    let z = _mm512_srlv_epi64(z, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
    _mm512_and_si512(z, _mm512_set1_epi8(0x0f))
}

/// [`nibbles_pair`] of two Q5 blocks, bit `j` of `qh` as bit 4 of byte `j`.
#[inline(always)]
pub(crate) unsafe fn nibbles5_pair(qs0: &[u8; 16], qs1: &[u8; 16], qh: u64) -> __m512i {
    let packed = _mm256_inserti128_si256::<1>(
        _mm256_castsi128_si256(_mm_loadu_si128(qs0.as_ptr() as *const __m128i)),
        _mm_loadu_si128(qs1.as_ptr() as *const __m128i),
    );
    let low = nibbles_pair(packed);
    // (a nibble is below 16, so adding 16 sets bit 4)
    _mm512_mask_add_epi8(low, qh, low, _mm512_set1_epi8(0x10))
}
