//! Memory handed back to the system while a model loads.
//!
//! The `joule` binary runs on mimalloc with purging off (`src/main.rs`: freed memory stays
//! committed, because inference frees and reallocates the same large buffers every step). A
//! load, though, reads each weight's file blocks and frees them once Joule's kernels have their
//! own copy of the matrix: kept committed, those freed blocks stayed resident (a real-width
//! Q4_K_M model held about a fifth more than its weights, `tests/memory_measure.rs`). While a
//! [`PurgeWhileLoading`] guard lives, mimalloc purges what is freed at once; dropping it
//! restores the setting it found. Under another global allocator the calls change nothing.

/// `mi_option_purge_delay` of mimalloc's `mimalloc.h` (v2 and v3; libmimalloc-sys does not
/// name it).
pub const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Purging on while it lives (see the module's text).
pub struct PurgeWhileLoading {
    before: std::os::raw::c_long,
}

impl PurgeWhileLoading {
    pub fn start() -> Self {
        // SAFETY: reads and sets a process-wide allocator option (an atomic in mimalloc).
        let before = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
        PurgeWhileLoading { before }
    }
}

impl Drop for PurgeWhileLoading {
    fn drop(&mut self) {
        // SAFETY: as in `start`.
        unsafe {
            libmimalloc_sys::mi_collect(true);
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, self.before);
        }
    }
}
