//! When the `joule` binary hands freed memory back to the system.
//!
//! The binary runs on mimalloc (`src/main.rs`), told to keep freed memory committed for
//! [`KEEP_FREED_MS`] instead of its default 10 ms: inference frees and reallocates the same
//! large buffers every layer of every step, and handing them back after 10 ms made each step
//! fault in (and the kernel zero) fresh pages again, about 7 % of a prompt's time. Kept for
//! good (a purge delay of -1, as the binary once had), though, those buffers are never handed back at
//! all: mimalloc then marks every segment it creates as never to be purged, so what a prompt
//! step's layers freed and the next allocations did not fit into (a buffer split around one
//! that stays: a recurrent snapshot, candle's repacked weights) stayed resident and grew with
//! the layer count (Qwen3.5-4B, 32 layers: 0.4 GiB beyond the planned states and scratch
//! after 5 × 1,024 tokens; `tests/full/memory_measure.rs`). So memory is handed back at two
//! points instead, where the cost is one refault of a step's buffers per step:
//!
//! - while a model loads ([`PurgeWhileLoading`]): each weight's file blocks are freed once
//!   Joule's kernels have their own copy of the matrix, and purging them at once keeps the load
//!   at the weights' size;
//! - after each batch step that ran prompt tokens ([`release_freed`], called by
//!   `generate::DecodeBatch::step`): what that step's layers freed goes back, so the process
//!   holds its weights and states, and at its peak one step's scratch beside them.
//!
//! Under another global allocator these calls change nothing.

/// `mi_option_purge_delay` of mimalloc's `mimalloc.h` (v2 and v3; libmimalloc-sys does not
/// name it).
pub const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The `joule` binary's purge delay (milliseconds) unless `JOULE_PURGE_DELAY` says otherwise:
/// an hour, i.e. nothing freed is handed back by time while inference runs, only at
/// [`release_freed`]. It must not be negative: mimalloc never purges a segment made while
/// the delay is negative, not even when asked to ([`release_freed`] would do nothing).
pub const KEEP_FREED_MS: i64 = 3_600_000;

/// Hand back what this thread's heap and the shared arenas hold freed (mimalloc's
/// `mi_collect(true)`: purges at once what was scheduled to be purged later).
pub fn release_freed() {
    // SAFETY: mimalloc's collection of the calling thread's heap, of abandoned segments and
    // of the arenas; no pointers are passed.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

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
        release_freed();
        // SAFETY: as in `start`.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, self.before) };
    }
}
