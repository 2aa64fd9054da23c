//! Whether the `joule` binary's heap may be backed by transparent huge pages.
//!
//! mimalloc asks the kernel for transparent huge pages on its arenas (`madvise(MADV_HUGEPAGE)`,
//! the `hg` flag in `/proc/PID/smaps`), and the kernel then counts resident memory in 2 MiB
//! pieces: a huge page is resident as a whole once one byte of it is written, and `khugepaged`
//! may later collapse a mostly empty 2 MiB range (a freed conversion buffer beside a live one)
//! into a whole huge page again. What the process holds then exceeds what it uses by an amount
//! that depends on the allocation order (and, through `khugepaged`, on time), which no plan
//! predicts: measured with `joule models inspect F --memory --measure` (issue #26 item 3),
//! huge pages made SmolLM2 at 5 × 4,096 tokens hold 1.13 GiB against 1.01 GiB without them
//! (plan −10.8 % against −1.3 %), and full-size Qwen3.5-4B's load 0.13 GiB beyond its weights
//! against 0.01 GiB. Decode gained about 2 % from them on the EPYC of session 17 (inside that
//! machine's noise; benches/README "Memory at 5 × 4,096 without transparent huge pages"). So
//! the binary turns them off for itself at start-up ([`set_for_process`], `prctl(PR_SET_THP_DISABLE)`), and
//! `JOULE_HUGE_PAGES=1` leaves them on, where the memory plan is a lower bound.
//!
//! Linux only; elsewhere there is nothing to set.

/// Turn transparent huge pages off for this process and the programs it starts, unless
/// `allowed`. Returns whether they are off after the call (`false` where the kernel has
/// no such switch or refused it: the process then runs as the system decides).
pub fn set_for_process(allowed: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes one integer argument and the rest zero; it
        // changes a flag of this process's memory descriptor and touches no memory of ours.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, u64::from(!allowed), 0, 0, 0) };
        rc == 0 && !allowed
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = allowed;
        false
    }
}

/// Whether transparent huge pages are off for this process (`THP_enabled: 0` in
/// `/proc/self/status`); `None` where that line cannot be read.
pub fn off_for_process() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_switch_is_what_the_kernel_reports() {
        // A test process of its own would be cleaner; the flag is per process and the other
        // tests of this binary do not read it, so it is set back at the end.
        let was_off = off_for_process();
        assert!(set_for_process(false));
        if was_off.is_some() {
            assert_eq!(off_for_process(), Some(true));
        }
        assert!(!set_for_process(true));
        if was_off.is_some() {
            assert_eq!(off_for_process(), Some(false));
        }
    }
}
