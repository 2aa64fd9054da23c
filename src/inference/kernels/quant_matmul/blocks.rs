//! The weight block formats a [`super::QuantMatrix`] is built from: each GGUF type's
//! block ([`WeightBlock`]: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), its integer payload
//! ([`Payload`]: nibbles, nibbles with fifth bits, bytes) and its scales per group of eight
//! blocks ([`GroupScales`]), parsed from the file's bytes; and for the types stored with
//! rows in lanes (Q4_0, Q5_0, Q8_0: `x86::qlanes512`), each block's values as stored there
//! ([`LaneBlock`]).

use std::fmt::Debug;

#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{BLOCK, GROUP};

/// One GGUF block type: how its bytes split into the scales of 32-value
/// blocks and their integer payloads.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // items only the x86 kernels read
pub trait WeightBlock: Copy + Debug + Send + Sync + 'static {
    /// GGUF's name of the type (for errors).
    const NAME: &'static str;
    /// Values of one GGUF block: 32, or 256 for a k-quant super-block (one
    /// group of eight 32-value blocks here).
    const VALUES: usize;
    /// Bytes of one GGUF block.
    const BYTES: usize;
    /// `d·s` with signed bytes `s` (true) or `d·u + m` with unsigned `u`.
    const SIGNED: bool;
    /// The integer payload of one 32-value block.
    type Ints: Payload;
    /// The scales of a group of [`GROUP`] 32-value blocks.
    type Scales: GroupScales;
    /// Split GGUF block `c` ([`Self::BYTES`] bytes): push its `VALUES / 32`
    /// payloads onto `ints` and set their scales in `group`, starting at
    /// position `at` of the group.
    fn parse(c: &[u8], at: usize, group: &mut Self::Scales, ints: &mut Vec<Self::Ints>);
}

/// The scales of [`GROUP`] consecutive 32-value blocks of a weight row: each
/// block's value is `d·u + m` (or `d·s` when signed), `d` and `m` exact in f32.
/// Unused positions (a row's last group) are zero.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // items only the x86 kernels read
pub trait GroupScales: Copy + Default + Debug + Send + Sync + 'static {
    /// Whether the `m` terms exist (Q8_0 and Q6_K have none).
    const WITH_M: bool;
    /// Whether a block's values 16..32 have their own `d` (Q6_K's 16-value
    /// scales); otherwise one `d` serves all 32.
    const SPLIT: bool = false;
    /// Whether the `m` term is the weight's own (Q4_1, Q5_1): llama.cpp pairs those types
    /// with `q8_1` activations, whose sum `s` is rounded to f16 ([`super::acts::Acts::sums`]);
    /// the offset types (Q4_0, Q5_0) pair with `q8_0`, whose sum is exact.
    const OWN_M: bool = false;
    /// `(d, m)` of block `i` of the group (`d` of values 0..16 when split).
    fn block(&self, i: usize) -> (f32, f32);
    /// `d` of values 16..32 of block `i`.
    fn high_d(&self, i: usize) -> f32 {
        self.block(i).0
    }
    /// The eight `d` and the eight `m` as two vectors.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C (the caller is compiled with them).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256);
    /// The eight [`GroupScales::high_d`] as a vector.
    ///
    /// # Safety
    /// As [`GroupScales::load`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_high(&self) -> std::arch::x86_64::__m256 {
        self.load().0
    }
}

/// f16 `d` per block and `m = OFF·d` (Q4_0: −8, Q5_0: −16, Q8_0: 0).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(16))]
pub struct ScalesD<const OFF: i32> {
    pub(crate) d: [u16; GROUP],
}

impl<const OFF: i32> GroupScales for ScalesD<OFF> {
    const WITH_M: bool = OFF != 0;
    fn block(&self, i: usize) -> (f32, f32) {
        let d = f16_bits(self.d[i]);
        (d, OFF as f32 * d)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        let d = _mm256_cvtph_ps(_mm_load_si128(self.d.as_ptr() as *const __m128i));
        (d, _mm256_mul_ps(d, _mm256_set1_ps(OFF as f32)))
    }
}

/// f16 `d` and `m` per block (Q4_1, Q5_1).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
pub struct ScalesDM {
    pub(crate) d: [u16; GROUP],
    pub(crate) m: [u16; GROUP],
}

impl GroupScales for ScalesDM {
    const WITH_M: bool = true;
    const OWN_M: bool = true;
    fn block(&self, i: usize) -> (f32, f32) {
        (f16_bits(self.d[i]), f16_bits(self.m[i]))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        (
            _mm256_cvtph_ps(_mm_load_si128(self.d.as_ptr() as *const __m128i)),
            _mm256_cvtph_ps(_mm_load_si128(self.m.as_ptr() as *const __m128i)),
        )
    }
}

/// A k-quant super-block's scales (Q4_K, Q5_K): f16 `d` and `dmin` and a
/// 6-bit scale and min per 32-value block; block `i` is `d·sc[i]·u −
/// dmin·mn[i]` (the products are exact in f32).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
pub struct ScalesK {
    pub(crate) sc: [u8; GROUP],
    pub(crate) mn: [u8; GROUP],
    pub(crate) d: u16,
    pub(crate) dmin: u16,
}

impl ScalesK {
    /// From a super-block's f16 `d`, `dmin` and its 12 packed scale bytes
    /// (GGUF's `get_scale_min_k4`: eight 6-bit scales and eight 6-bit mins).
    pub(super) fn unpack(d: u16, dmin: u16, q: &[u8]) -> Self {
        let mut s = ScalesK {
            d,
            dmin,
            ..Default::default()
        };
        for j in 0..GROUP {
            let (sc, mn) = if j < 4 {
                (q[j] & 63, q[j + 4] & 63)
            } else {
                (
                    (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
                    (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
                )
            };
            s.sc[j] = sc;
            s.mn[j] = mn;
        }
        s
    }
}

impl GroupScales for ScalesK {
    const WITH_M: bool = true;
    fn block(&self, i: usize) -> (f32, f32) {
        (
            f16_bits(self.d) * f32::from(self.sc[i]),
            -(f16_bits(self.dmin) * f32::from(self.mn[i])),
        )
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        let bytes = |p: &[u8; GROUP]| {
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                p.as_ptr() as *const __m128i
            )))
        };
        (
            _mm256_mul_ps(bytes(&self.sc), _mm256_set1_ps(f16_bits(self.d))),
            _mm256_mul_ps(bytes(&self.mn), _mm256_set1_ps(-f16_bits(self.dmin))),
        )
    }
}

/// A block's integer payload: 16 bytes of nibbles (Q4_0, Q4_1), nibbles and
/// fifth bits (Q5_0, Q5_1) or 32 signed bytes (Q8_0).
pub trait Payload: Copy + Debug + Send + Sync + 'static {
    /// The 32 integer values (`u` or `s`).
    fn ints(&self) -> [i32; BLOCK];
    /// The 32 integer values as bytes in one AVX register (value `j` in byte `j`).
    ///
    /// # Safety
    /// The CPU must have AVX2 (the caller is compiled with it enabled).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i;
    /// The values of this block and the next one (value `j` of the second in
    /// byte `32 + j`) in one AVX-512 register.
    ///
    /// # Safety
    /// `pair` and `pair + 1` must be payloads, and the CPU must have
    /// AVX-512 F and BW (the caller is compiled with them enabled).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i;
    /// [`Payload::load`] in the low half of an AVX-512 register, zeros above.
    ///
    /// # Safety
    /// As [`Payload::load2`] for this block alone.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_zext(&self) -> std::arch::x86_64::__m512i {
        std::arch::x86_64::_mm512_zextsi256_si512(self.load())
    }
}

impl Payload for [u8; 16] {
    fn ints(&self) -> [i32; BLOCK] {
        nibbles(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        x86::nibbles(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i {
        // Two blocks' nibbles are 32 contiguous bytes.
        x86::nibbles_pair(std::arch::x86_64::_mm256_loadu_si256(pair as *const _))
    }
}

impl Payload for Q5Ints {
    fn ints(&self) -> [i32; BLOCK] {
        nibbles5(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        x86::nibbles5(&self.qs, u32::from_le_bytes(self.qh))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i {
        let (a, b) = (&*pair, &*pair.add(1));
        let qh = u64::from(u32::from_le_bytes(a.qh)) | u64::from(u32::from_le_bytes(b.qh)) << 32;
        x86::nibbles5_pair(&a.qs, &b.qs, qh)
    }
}

impl Payload for Q8Ints {
    fn ints(&self) -> [i32; BLOCK] {
        self.0.map(i32::from)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_load_si256(self.0.as_ptr() as *const __m256i)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load2(pair: *const Self) -> std::arch::x86_64::__m512i {
        // Two 32-byte payloads are 64 contiguous bytes.
        std::arch::x86_64::_mm512_loadu_si512(pair as *const _)
    }
}

pub(super) fn f16_bits(b: u16) -> f32 {
    half::f16::from_bits(b).to_f32()
}

pub(super) fn u16_at(c: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([c[i], c[i + 1]])
}

/// 32 unsigned 4-bit values: low nibbles are values 0..16, high 16..32 (GGUF).
pub(super) fn nibbles(qs: &[u8; 16]) -> [i32; BLOCK] {
    let mut v = [0i32; BLOCK];
    for (i, &q) in qs.iter().enumerate() {
        v[i] = i32::from(q & 0x0f);
        v[i + 16] = i32::from(q >> 4);
    }
    v
}

/// Nibbles with a fifth bit: bit `j` of `qh` is bit 4 of value `j` (GGUF Q5).
pub(super) fn nibbles5(q: &Q5Ints) -> [i32; BLOCK] {
    let qh = u32::from_le_bytes(q.qh);
    let mut v = nibbles(&q.qs);
    for (j, x) in v.iter_mut().enumerate() {
        *x |= (((qh >> j) & 1) as i32) << 4;
    }
    v
}

pub(super) fn qs16(c: &[u8]) -> [u8; 16] {
    let mut qs = [0u8; 16];
    qs.copy_from_slice(&c[..16]);
    qs
}

/// The payload of a Q5 block: 32 fifth bits and 16 bytes of nibbles.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Q5Ints {
    pub(crate) qh: [u8; 4],
    pub(crate) qs: [u8; 16],
}

pub(super) fn q5_ints(c: &[u8]) -> Q5Ints {
    Q5Ints {
        qh: [c[0], c[1], c[2], c[3]],
        qs: qs16(&c[4..]),
    }
}

/// A Q6_K super-block's scales: f16 `d` and a signed 8-bit scale per 16
/// values; block `i`'s values 0..16 are `d·lo[i]·s`, 16..32 `d·hi[i]·s`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
#[cfg(test)]
pub struct ScalesQ6K {
    pub(crate) lo: [i8; GROUP],
    pub(crate) hi: [i8; GROUP],
    pub(crate) d: u16,
}

#[cfg(test)]
impl GroupScales for ScalesQ6K {
    const WITH_M: bool = false;
    const SPLIT: bool = true;
    fn block(&self, i: usize) -> (f32, f32) {
        (f16_bits(self.d) * f32::from(self.lo[i]), 0.0)
    }
    fn high_d(&self, i: usize) -> f32 {
        f16_bits(self.d) * f32::from(self.hi[i])
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        (i8_scales(&self.lo, self.d), _mm256_setzero_ps())
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_high(&self) -> std::arch::x86_64::__m256 {
        i8_scales(&self.hi, self.d)
    }
}

/// Eight signed 8-bit scales times the f16 `d`, as f32 (exact).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[cfg(test)]
pub(super) unsafe fn i8_scales(sc: &[i8; GROUP], d: u16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
        sc.as_ptr() as *const __m128i
    )));
    _mm256_mul_ps(v, _mm256_set1_ps(f16_bits(d)))
}

/// GGUF `block_q4_0`: f16 d, 16 bytes of nibbles; `x = d·(u − 8)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ40;

impl WeightBlock for BlockQ40 {
    const NAME: &'static str = "Q4_0";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 18;
    const SIGNED: bool = false;
    type Ints = [u8; 16];
    type Scales = ScalesD<-8>;
    fn parse(c: &[u8], at: usize, group: &mut ScalesD<-8>, ints: &mut Vec<[u8; 16]>) {
        group.d[at] = u16_at(c, 0);
        ints.push(qs16(&c[2..]));
    }
}

/// GGUF `block_q4_1`: f16 d, f16 m, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ41;

impl WeightBlock for BlockQ41 {
    const NAME: &'static str = "Q4_1";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 20;
    const SIGNED: bool = false;
    type Ints = [u8; 16];
    type Scales = ScalesDM;
    fn parse(c: &[u8], at: usize, group: &mut ScalesDM, ints: &mut Vec<[u8; 16]>) {
        group.d[at] = u16_at(c, 0);
        group.m[at] = u16_at(c, 2);
        ints.push(qs16(&c[4..]));
    }
}

/// GGUF `block_q5_0`: f16 d, 32 high bits, 16 bytes of nibbles; `x = d·(u − 16)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ50;

impl WeightBlock for BlockQ50 {
    const NAME: &'static str = "Q5_0";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 22;
    const SIGNED: bool = false;
    type Ints = Q5Ints;
    type Scales = ScalesD<-16>;
    fn parse(c: &[u8], at: usize, group: &mut ScalesD<-16>, ints: &mut Vec<Q5Ints>) {
        group.d[at] = u16_at(c, 0);
        ints.push(q5_ints(&c[2..]));
    }
}

/// GGUF `block_q5_1`: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; `x = d·u + m`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ51;

impl WeightBlock for BlockQ51 {
    const NAME: &'static str = "Q5_1";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 24;
    const SIGNED: bool = false;
    type Ints = Q5Ints;
    type Scales = ScalesDM;
    fn parse(c: &[u8], at: usize, group: &mut ScalesDM, ints: &mut Vec<Q5Ints>) {
        group.d[at] = u16_at(c, 0);
        group.m[at] = u16_at(c, 2);
        ints.push(q5_ints(&c[4..]));
    }
}

/// 32 signed bytes aligned to 32, so a vector load never spans two cache
/// lines (unaligned 32-byte loads of a weight streamed from memory halved
/// Q8_0's decode speed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(32))]
pub struct Q8Ints(pub [i8; 32]);

/// GGUF `block_q8_0`: f16 d, 32 signed bytes; `x = d·s`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ80;

impl WeightBlock for BlockQ80 {
    const NAME: &'static str = "Q8_0";
    const VALUES: usize = BLOCK;
    const BYTES: usize = 34;
    const SIGNED: bool = true;
    type Ints = Q8Ints;
    type Scales = ScalesD<0>;
    fn parse(c: &[u8], at: usize, group: &mut ScalesD<0>, ints: &mut Vec<Q8Ints>) {
        let mut qs = [0i8; 32];
        for (q, &b) in qs.iter_mut().zip(&c[2..34]) {
            *q = b as i8;
        }
        group.d[at] = u16_at(c, 0);
        ints.push(Q8Ints(qs));
    }
}

/// GGUF `block_q4_K`: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins,
/// 128 bytes of nibbles for 256 values. Each 64 values share 32 bytes: the
/// low nibbles are the first 32-value block, the high nibbles the second;
/// block `i` is `x = d·sc[i]·u − dmin·mn[i]`, the layout of Q4_1 with exact
/// f32 scales.
#[derive(Debug, Clone, Copy)]
#[cfg(test)]
pub struct BlockQ4K;

/// 32-value block `i` of a Q4_K/Q5_K super-block's 128 nibble bytes `qs`
/// (each 64 values share 32 bytes: low nibbles the first block, high the
/// second) in this module's order: value `j` in the low nibble of byte `j`,
/// value `16 + j` in its high nibble.
#[cfg(test)]
pub(super) fn k_nibbles(qs: &[u8], i: usize) -> [u8; 16] {
    let (chunk, shift) = (&qs[32 * (i / 2)..32 * (i / 2) + 32], 4 * (i % 2));
    let v = |l: usize| (chunk[l] >> shift) & 0x0f;
    std::array::from_fn(|j| v(j) | v(j + 16) << 4)
}

#[cfg(test)]
impl WeightBlock for BlockQ4K {
    const NAME: &'static str = "Q4_K";
    const VALUES: usize = GROUP * BLOCK;
    const BYTES: usize = 144;
    const SIGNED: bool = false;
    type Ints = [u8; 16];
    type Scales = ScalesK;
    fn parse(c: &[u8], _at: usize, group: &mut ScalesK, ints: &mut Vec<[u8; 16]>) {
        *group = ScalesK::unpack(u16_at(c, 0), u16_at(c, 2), &c[4..16]);
        ints.extend((0..GROUP).map(|i| k_nibbles(&c[16..144], i)));
    }
}

/// GGUF `block_q5_K`: [`BlockQ4K`] with 32 bytes of fifth bits: bit `i` of
/// byte `l` is bit 4 of value `l` of 32-value block `i`.
#[derive(Debug, Clone, Copy)]
#[cfg(test)]
pub struct BlockQ5K;

#[cfg(test)]
impl WeightBlock for BlockQ5K {
    const NAME: &'static str = "Q5_K";
    const VALUES: usize = GROUP * BLOCK;
    const BYTES: usize = 176;
    const SIGNED: bool = false;
    type Ints = Q5Ints;
    type Scales = ScalesK;
    fn parse(c: &[u8], _at: usize, group: &mut ScalesK, ints: &mut Vec<Q5Ints>) {
        *group = ScalesK::unpack(u16_at(c, 0), u16_at(c, 2), &c[4..16]);
        let (qh, qs) = (&c[16..48], &c[48..176]);
        for i in 0..GROUP {
            let high = (0..32).fold(0u32, |h, l| h | u32::from((qh[l] >> i) & 1) << l);
            ints.push(Q5Ints {
                qh: high.to_le_bytes(),
                qs: k_nibbles(qs, i),
            });
        }
    }
}

/// GGUF `block_q6_K`: 128 bytes of low nibbles, 64 bytes of high bit pairs,
/// 16 signed 8-bit scales (one per 16 values) and f16 d for 256 values of
/// `x = d·sc·(q − 32)`, `q` six bits. Each 32-value block keeps `q − 32` as
/// signed bytes (Q8_0's payload) and its two scales.
#[derive(Debug, Clone, Copy)]
#[cfg(test)]
pub struct BlockQ6K;

#[cfg(test)]
impl WeightBlock for BlockQ6K {
    const NAME: &'static str = "Q6_K";
    const VALUES: usize = GROUP * BLOCK;
    const BYTES: usize = 210;
    const SIGNED: bool = true;
    type Ints = Q8Ints;
    type Scales = ScalesQ6K;
    fn parse(c: &[u8], _at: usize, group: &mut ScalesQ6K, ints: &mut Vec<Q8Ints>) {
        group.d = u16_at(c, 208);
        for i in 0..GROUP {
            group.lo[i] = c[192 + 2 * i] as i8;
            group.hi[i] = c[192 + 2 * i + 1] as i8;
            // Values 128·h + 32·t + l come from ql[64h + l + 32(t%2)]'s
            // nibble t/2 and bits 2t, 2t+1 of qh[32h + l].
            let (h, t) = (i / 4, i % 4);
            let (ql, qh) = (&c[64 * h..64 * h + 64], &c[128 + 32 * h..128 + 32 * h + 32]);
            ints.push(Q8Ints(std::array::from_fn(|l| {
                let low = (ql[l + 32 * (t % 2)] >> (4 * (t / 2))) & 0x0f;
                let high = (qh[l] >> (2 * t)) & 3;
                (low | high << 4) as i8 - 32
            })));
        }
    }
}

/// A 32-value type whose values are `d·(u − OFFSET)` with one `d` per block: what
/// `x86::qlanes512::QLanes` stores (rows in lanes), as the bytes each 64-byte line takes
/// from one row's block (four per line, one line per four values).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // items only the x86 kernels read
pub(crate) trait LaneBlock: WeightBlock {
    /// Bits per stored value: 4 (Q4_0), 5 (Q5_0) or 8 (Q8_0).
    const BITS: u32;
    /// What is subtracted from the stored unsigned value.
    const OFFSET: i32;
    /// Block `c`'s `d` (f16 bits); its value lines' bytes, four per line: Q8_0 line `t`
    /// holds values `4t .. 4t + 4` as `q + 128` (bytes `4t .. 4t + 4` of the 32), Q4_0 and
    /// Q5_0 line `t < 4` holds values `4t + c` as low nibbles and `16 + 4t + c` as high ones,
    /// which is GGUF's own `qs` (the first 16 bytes); and Q5_0's line of fifth bits (byte
    /// `c`: bit `t` is the fifth bit of value `4t + c`; zeros for the others).
    fn lane_bytes(c: &[u8]) -> (u16, [u8; BLOCK], [u8; 4]);
}

impl LaneBlock for BlockQ40 {
    const BITS: u32 = 4;
    const OFFSET: i32 = 8;
    fn lane_bytes(c: &[u8]) -> (u16, [u8; BLOCK], [u8; 4]) {
        let mut lines = [0u8; BLOCK];
        lines[..16].copy_from_slice(&c[2..18]);
        (u16::from_le_bytes([c[0], c[1]]), lines, [0; 4])
    }
}

impl LaneBlock for BlockQ50 {
    const BITS: u32 = 5;
    const OFFSET: i32 = 16;
    fn lane_bytes(c: &[u8]) -> (u16, [u8; BLOCK], [u8; 4]) {
        let qh = u32::from_le_bytes([c[2], c[3], c[4], c[5]]);
        let mut lines = [0u8; BLOCK];
        lines[..16].copy_from_slice(&c[6..22]);
        // Byte c gathers bits c, c + 4, …, c + 28 of qh.
        let hi = std::array::from_fn(|c| {
            (0..8).fold(0u8, |b, t| b | (((qh >> (4 * t + c)) & 1) as u8) << t)
        });
        (u16::from_le_bytes([c[0], c[1]]), lines, hi)
    }
}

impl LaneBlock for BlockQ80 {
    const BITS: u32 = 8;
    const OFFSET: i32 = 128;
    fn lane_bytes(c: &[u8]) -> (u16, [u8; BLOCK], [u8; 4]) {
        // q + 128 of a signed byte is its bits with the top one flipped.
        let lines = std::array::from_fn(|j| c[2 + j] ^ 0x80);
        (u16::from_le_bytes([c[0], c[1]]), lines, [0; 4])
    }
}
