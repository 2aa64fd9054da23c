//! Where Joule's kernels keep a matrix's weights: a vector whose memory the kernel is asked
//! to back with 2 MiB transparent huge pages ([`WeightVec`]).
//!
//! Decode reads every weight once per step, front to back, and on 4 KiB pages that stream
//! crosses a page every 64 cache lines: each crossing is a TLB miss, and the hardware
//! prefetchers stop at page boundaries and start again behind them. Measured on a 2-vCPU AMD EPYC
//! (Zen 4; one process, the same 1 GiB read alternately from two buffers, 8 rounds,
//! `memory_read::read_pass`): 2 MiB pages read 1.06–1.17× faster than 4 KiB pages on two
//! threads and 1.33–1.39× on one.
//!
//! Only the weights get them: a huge page is resident as a whole once one byte of it is
//! written, which costs nothing for a matrix filled once from end to end but is what made the
//! heap as a whole hold more than the memory plan (`inference::engine::huge_pages`). Only
//! whole 2 MiB pieces inside the vector's capacity are advised, so the pages around it (the
//! allocator's other blocks) keep their 4 KiB pages, and the process holds exactly the
//! weights' bytes. Whether the kernel grants the advice is the process's setting
//! (`huge_pages::set_for_process`); elsewhere than Linux the advice is not given.

use std::ops::{Deref, DerefMut};

/// The size of a transparent huge page on x86-64 and most aarch64 kernels.
const HUGE: usize = 2 << 20;

/// A matrix's weights: a `Vec<T>` whose capacity, advised before it is written, sits on huge
/// pages where the kernel allows them, and is advised back to ordinary pages when dropped (so
/// an allocator that reuses the range for small blocks does not get huge pages with it).
///
/// It derefs to the `Vec` it holds; growing past [`WeightVec::with_capacity`]'s capacity
/// moves the contents to memory that was never advised (correct, only slower to read).
pub struct WeightVec<T>(Vec<T>);

impl<T> Default for WeightVec<T> {
    fn default() -> Self {
        WeightVec(Vec::new())
    }
}

impl<T: Clone> Clone for WeightVec<T> {
    /// A copy in memory of its own, advised as [`WeightVec::with_capacity`]'s.
    fn clone(&self) -> Self {
        let mut v = WeightVec::with_capacity(self.0.len());
        v.0.extend_from_slice(&self.0);
        v
    }
}

impl<T: PartialEq> PartialEq for WeightVec<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<T> Extend<T> for WeightVec<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        self.0.extend(items);
    }
}

impl<'a, T> IntoIterator for &'a WeightVec<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> WeightVec<T> {
    /// An empty vector with room for `n` elements, that room advised for huge pages (its
    /// contents are unspecified until written: the advice drops any pages already behind it).
    pub fn with_capacity(n: usize) -> Self {
        let v: Vec<T> = Vec::with_capacity(n);
        advise(v.as_ptr().cast(), v.capacity() * size_of::<T>(), true);
        WeightVec(v)
    }

    /// The bytes of this vector's capacity that lie on whole 2 MiB pieces (the most that
    /// can be on huge pages).
    pub fn huge_capacity_bytes(&self) -> usize {
        aligned_interior(self.0.as_ptr().cast(), self.0.capacity() * size_of::<T>())
            .map_or(0, |(_, len)| len)
    }
}

impl<T> Deref for WeightVec<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> DerefMut for WeightVec<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T> From<Vec<T>> for WeightVec<T> {
    /// Wraps `v` as it is (its memory already written: not advised).
    fn from(v: Vec<T>) -> Self {
        WeightVec(v)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for WeightVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<T> Drop for WeightVec<T> {
    fn drop(&mut self) {
        advise(
            self.0.as_ptr().cast(),
            self.0.capacity() * size_of::<T>(),
            false,
        );
    }
}

/// The whole 2 MiB pieces of `[start, start + len)`: their start and length, if any.
fn aligned_interior(start: *const u8, len: usize) -> Option<(usize, usize)> {
    let (a, end) = (start as usize, start as usize + len);
    let first = a.checked_next_multiple_of(HUGE)?;
    let last = end / HUGE * HUGE;
    (last > first).then(|| (first, last - first))
}

/// Advise the whole 2 MiB pieces of `[start, start + len)` for huge pages (`huge`: their
/// current pages dropped first, so that the next write faults in a huge page) or back to
/// ordinary pages. Failures are ignored: the advice changes speed, never contents that
/// matter (the range is unwritten capacity when `huge`).
fn advise(start: *const u8, len: usize, huge: bool) {
    let Some((first, bytes)) = aligned_interior(start, len) else {
        return;
    };
    #[cfg(target_os = "linux")]
    {
        let p = first as *mut libc::c_void;
        // SAFETY: `[first, first + bytes)` lies inside a live allocation of this vector's
        // (its capacity); with `huge` that capacity holds nothing yet, so dropping its pages
        // loses nothing, and the advice changes only how the kernel backs the range.
        unsafe {
            if huge {
                libc::madvise(p, bytes, libc::MADV_DONTNEED);
                libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
            } else {
                libc::madvise(p, bytes, libc::MADV_NOHUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (first, bytes, huge);
}

/// One mapping of `/proc/self/smaps`: its address range, whether it is advised for huge
/// pages (the `hg` flag) and how many of its bytes are on them (`AnonHugePages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub advised_huge: bool,
    pub huge_bytes: u64,
}

/// This process's mappings (`/proc/self/smaps`); empty where that cannot be read.
pub fn mappings() -> Vec<Mapping> {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return Vec::new();
    };
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = head.split_once('-') {
            if let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                out.push(Mapping {
                    start,
                    end,
                    advised_huge: false,
                    huge_bytes: 0,
                });
                continue;
            }
        }
        let Some(m) = out.last_mut() else { continue };
        if let Some(kb) = line.strip_prefix("AnonHugePages:") {
            m.huge_bytes = kb
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
                * 1024;
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            m.advised_huge = flags.split_whitespace().any(|f| f == "hg");
        }
    }
    out
}

/// Bytes of this process's memory on transparent huge pages (`AnonHugePages` of
/// `/proc/self/smaps_rollup`); `None` where that cannot be read.
pub fn process_huge_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interior_is_the_whole_pieces_inside() {
        assert_eq!(
            aligned_interior(HUGE as *const u8, HUGE),
            Some((HUGE, HUGE))
        );
        assert_eq!(
            aligned_interior((HUGE + 1) as *const u8, 3 * HUGE),
            Some((2 * HUGE, 2 * HUGE))
        );
        assert_eq!(aligned_interior(1 as *const u8, HUGE), None);
        assert_eq!(aligned_interior(4096 as *const u8, 100), None);
    }

    #[test]
    fn a_weight_vector_holds_what_is_written() {
        let mut v = WeightVec::<u64>::with_capacity(3 * HUGE / 8);
        assert!(v.huge_capacity_bytes() >= HUGE);
        v.extend((0..3 * HUGE as u64 / 8).map(|i| i * 3));
        assert!(v.iter().enumerate().all(|(i, &x)| x == 3 * i as u64));
        v.push(1); // past the capacity: moved, still correct
        assert_eq!(v.len(), 3 * HUGE / 8 + 1);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn written_weights_sit_on_huge_pages_where_the_system_allows_them() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        let mut v = WeightVec::<u64>::with_capacity(16 * HUGE / 8);
        v.extend(0..16 * HUGE as u64 / 8);
        let (first, bytes) = aligned_interior(v.as_ptr().cast(), v.capacity() * 8).unwrap();
        let huge = mappings()
            .into_iter()
            .find(|m| (m.start..m.end).contains(&first))
            .expect("the vector's mapping in /proc/self/smaps")
            .huge_bytes;
        if mode.contains("[never]") || mode.is_empty() {
            assert_eq!(huge, 0);
        } else {
            // The kernel may fail to find free 2 MiB frames for a few pieces; most it finds.
            assert!(
                huge as usize >= bytes / 2,
                "{huge} of {bytes} bytes on huge pages ({mode})"
            );
        }
    }
}
