//! A plain streaming read of memory over candle's worker pool: the machine's read bandwidth,
//! the physical limit of decode (a step reads every weight once). `joule bench` prints decode
//! against it and `benches/quant_matmul.rs` (`stream`) puts each kernel beside it; both read
//! through [`read_pass`], so the two figures are the same measurement.

use std::sync::atomic::{AtomicU64, Ordering};

/// A buffer of `words` 64-bit words to read with [`read_pass`], on the pages the weights get
/// (`weight_memory::WeightVec`: huge pages where the kernel allows), every page written once
/// so that it is mapped before a timed read.
pub fn read_buffer(words: usize) -> crate::inference::kernels::weight_memory::WeightVec<u64> {
    let mut buf = crate::inference::kernels::weight_memory::WeightVec::with_capacity(words);
    buf.extend(0..words as u64);
    buf
}

/// Words per work item of [`read_pass`] (256 KiB).
const CHUNK: usize = 1 << 15;

/// One read of every word of `buf` (but a tail of fewer than 32), split over candle's worker
/// pool in items of 256 KiB as the matrix products are; returns their wrapping sum (so the
/// reads cannot be left out).
pub fn read_pass(buf: &[u64]) -> u64 {
    let total = AtomicU64::new(0);
    candle_core::utils::barrier_pool().execute_chunked(buf.len().div_ceil(CHUNK), |range| {
        let mut sum = 0u64;
        for item in range {
            let end = buf.len().min((item + 1) * CHUNK);
            sum = sum.wrapping_add(sum_words(&buf[item * CHUNK..end]));
        }
        total.fetch_add(sum, Ordering::Relaxed);
    });
    total.load(Ordering::Relaxed)
}

/// The wrapping sum of `words` (whole groups of 32; a tail of fewer than 32 is left out),
/// with the widest vector loads this CPU has, written with intrinsics: left to the
/// compiler, the 32-lane loop was vectorised across groups with gathers (`vpgatherdq`),
/// which read 4.9–9.7 GB/s on a 2-vCPU AVX-512 EPYC against 17–46 GB/s read by
/// plain 64-byte loads, and the bandwidth figure was wrong there.
fn sum_words(words: &[u64]) -> u64 {
    let whole = &words[..words.len() / 32 * 32];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F.
            return unsafe { sum512(whole) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { sum256(whole) };
        }
    }
    whole.iter().fold(0u64, |a, &v| a.wrapping_add(v))
}

/// Four 512-bit accumulators of 64-bit lanes, one 64-byte unaligned load each per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum512(words: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    for c in words.chunks_exact(32) {
        let p = c.as_ptr();
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 32 words; each load reads 8 of them.
            *a = _mm512_add_epi64(*a, unsafe { _mm512_loadu_si512(p.add(8 * j).cast()) });
        }
    }
    let s = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    _mm512_reduce_add_epi64(s) as u64
}

/// Four 256-bit accumulators, two per 64 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum256(words: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    for c in words.chunks_exact(16) {
        let p = c.as_ptr();
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 words; each load reads 4 of them.
            *a = _mm256_add_epi64(*a, unsafe { _mm256_loadu_si256(p.add(4 * j).cast()) });
        }
    }
    let mut lanes = [0u64; 16];
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: `lanes[4j..4j+4]` is 32 bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().add(4 * j).cast(), *a) };
    }
    lanes.iter().fold(0u64, |a, &v| a.wrapping_add(v))
}

#[cfg(test)]
mod tests {
    use super::{read_pass, sum_words, CHUNK};

    #[test]
    fn the_bandwidth_read_sums_every_word() {
        let words: Vec<u64> = (0..4096u64).map(|i| i * 7 + 1).collect();
        let want = words.iter().fold(0u64, |a, &v| a.wrapping_add(v));
        assert_eq!(sum_words(&words), want);
        assert_eq!(sum_words(&[u64::MAX; 64]), 0u64.wrapping_sub(64));
        // a tail of fewer than 32 words is left out
        let mut tailed = words.clone();
        tailed.extend([5u64; 31]);
        assert_eq!(sum_words(&tailed), want);
        // Over the pool, several items: every word but the buffer's own short tail.
        let long: Vec<u64> = (0..(3 * CHUNK + 64) as u64).map(|i| i ^ 0x5555).collect();
        let all = long.iter().fold(0u64, |a, &v| a.wrapping_add(v));
        assert_eq!(read_pass(&long), all);
        assert_eq!(read_pass(&tailed), want);
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512 F.
                assert_eq!(unsafe { super::sum512(&words) }, want);
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2.
                assert_eq!(unsafe { super::sum256(&words) }, want);
            }
        }
    }
}
