//! Which of the `joule` binary's memory may be backed by transparent huge pages: the
//! weights, not the heap.
//!
//! mimalloc asks the kernel for transparent huge pages on its arenas (`madvise(MADV_HUGEPAGE)`,
//! the `hg` flag in `/proc/PID/smaps`), and the kernel then counts resident memory in 2 MiB
//! pieces: a huge page is resident as a whole once one byte of it is written, and `khugepaged`
//! may later collapse a mostly empty 2 MiB range (a freed conversion buffer beside a live one)
//! into a whole huge page again. What the process holds then exceeds what it uses by an amount
//! that depends on the allocation order (and, through `khugepaged`, on time), which no plan
//! predicts: measured with `joule models inspect F --memory --measure`,
//! huge pages made SmolLM2 at 5 × 4,096 tokens hold 1.13 GiB against 1.01 GiB without them
//! (plan −10.8 % against −1.3 %), and full-size Qwen3.5-4B's load 0.13 GiB beyond its weights
//! against 0.01 GiB.
//!
//! The weights are the other case: each matrix is one block written end to end, and decode
//! streams all of them every step, where 2 MiB pages read faster than 4 KiB ones
//! (`kernels::weight_memory`). So [`set_for_process`] keeps the heap off huge pages and lets
//! the weights have them ([`Pages::WeightsOnly`]):
//!
//! - mimalloc is told not to advise the memory it takes from the system from now on
//!   (`mi_option_allow_thp` = 0), and the arenas it advised before `main` are advised back;
//! - where the kernel has `PR_THP_DISABLE_EXCEPT_ADVISED` (Linux 6.18+), the process turns
//!   huge pages off except for advised ranges, which also holds when the system's mode is
//!   `always`;
//! - on an older kernel, a system mode of `madvise` already means exactly that; under `always`
//!   the process turns huge pages off altogether ([`Pages::Nowhere`]: the plan holds, the
//!   weights read at 4 KiB pages), and under `never` nothing gets them.
//!
//! `JOULE_HUGE_PAGES=1` leaves everything as the system and mimalloc decide
//! ([`Pages::Everywhere`]), where the memory plan is a lower bound.

use std::sync::atomic::{AtomicU8, Ordering};

/// What [`set_for_process`] left this process with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// Not set (not the `joule` binary, or not Linux): as the system decides.
    System,
    /// Only advised ranges, i.e. the weights (`kernels::weight_memory::WeightVec`).
    WeightsOnly,
    /// None at all.
    Nowhere,
    /// The heap too (`JOULE_HUGE_PAGES=1`).
    Everywhere,
}

impl Pages {
    /// How `joule models inspect --measure` names it.
    pub fn describe(self) -> &'static str {
        match self {
            Pages::System => "as the system decides (not set by this process)",
            Pages::WeightsOnly => "the weights only",
            Pages::Nowhere => {
                "off (the system's mode is `always` and this kernel cannot except the weights)"
            }
            Pages::Everywhere => {
                "on for the heap too (JOULE_HUGE_PAGES: the plan is then a lower bound)"
            }
        }
    }
}

static SET: AtomicU8 = AtomicU8::new(0);

/// What the process was left with by [`set_for_process`] ([`Pages::System`] if never called).
pub fn for_process() -> Pages {
    match SET.load(Ordering::Relaxed) {
        1 => Pages::WeightsOnly,
        2 => Pages::Nowhere,
        3 => Pages::Everywhere,
        _ => Pages::System,
    }
}

/// `mi_option_allow_thp` of mimalloc v3's `mimalloc.h`, the version libmimalloc-sys builds by
/// default (it does not name the option).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// `PR_THP_DISABLE_EXCEPT_ADVISED` of Linux 6.18's `prctl.h` (the libc crate does not name it).
#[cfg(target_os = "linux")]
const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// Set which memory of this process (and the programs it starts) may be on huge pages: the
/// weights only, unless `heap_too` (see the module's text). Call once, before threads start.
pub fn set_for_process(heap_too: bool) -> Pages {
    let pages = if heap_too {
        Pages::Everywhere
    } else {
        // SAFETY: sets a process-wide allocator option (an atomic in mimalloc); mimalloc reads
        // it each time it takes memory from the system.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
        unadvise_existing();
        weights_only()
    };
    SET.store(
        match pages {
            Pages::System => 0,
            Pages::WeightsOnly => 1,
            Pages::Nowhere => 2,
            Pages::Everywhere => 3,
        },
        Ordering::Relaxed,
    );
    pages
}

/// Advise back to ordinary pages every range already advised for huge pages: at start-up
/// these are the arenas mimalloc took from the system before [`set_for_process`] told it
/// not to advise (the first allocations run before `main`), and nothing of Joule's yet.
#[cfg(target_os = "linux")]
fn unadvise_existing() {
    for m in crate::inference::kernels::weight_memory::mappings() {
        if m.advised_huge {
            // SAFETY: the advice changes only how the kernel backs a mapping of this
            // process's, never its contents.
            unsafe {
                libc::madvise(
                    m.start as *mut libc::c_void,
                    m.end - m.start,
                    libc::MADV_NOHUGEPAGE,
                )
            };
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn unadvise_existing() {}

#[cfg(target_os = "linux")]
fn weights_only() -> Pages {
    // SAFETY: PR_SET_THP_DISABLE takes two integer arguments and the rest zero; it changes a
    // flag of this process's memory descriptor and touches no memory of ours.
    let except_advised = unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            1,
            PR_THP_DISABLE_EXCEPT_ADVISED,
            0,
            0,
        )
    };
    if except_advised == 0 {
        return Pages::WeightsOnly;
    }
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if mode.contains("[madvise]") {
        Pages::WeightsOnly
    } else if mode.contains("[always]") {
        // SAFETY: as above, with one integer argument.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        Pages::Nowhere
    } else {
        Pages::Nowhere
    }
}

#[cfg(not(target_os = "linux"))]
fn weights_only() -> Pages {
    Pages::System
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mimalloc_names_the_option_where_we_set_it() {
        // The option's index is hard-coded: mimalloc's default for `allow_thp` is on, and the
        // option before it (`page_cross_thread_max_reclaim`) defaults to 32.
        // SAFETY: reads a process-wide allocator option.
        assert_eq!(
            unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP - 1) },
            32
        );
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            // SAFETY: as above.
            assert_eq!(
                unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) },
                1
            );
        }
    }
}
