//! The `joule` binary: parses the command line and reports errors with context.

/// mimalloc instead of the system allocator: an Energy Society run builds and
/// drops many small strings and JSON values (prompts, observations, records),
/// and glibc's malloc took about a third of a scripted run's time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use joule::inference::engine::load_purge::{KEEP_FREED_MS, MI_OPTION_PURGE_DELAY};

fn main() -> std::process::ExitCode {
    // Keep freed memory committed instead of handing it back to the system
    // after mimalloc's default 10 ms: inference allocates and frees the same
    // large activation buffers every forward step, and handing them back made
    // each step fault in (and the kernel zero) fresh pages again — about
    // 30,000 page faults and 7 % of a `joule bench -p 512` run's time. It is
    // handed back after each prompt step and while a model loads instead
    // (`inference::engine::load_purge`, which says why the delay is an hour
    // and not -1, never).
    let delay = joule::knobs::purge_delay().unwrap_or(KEEP_FREED_MS) as std::os::raw::c_long;
    // SAFETY: sets a process-wide allocator option; called before any thread starts.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay) };
    // Transparent huge pages off unless asked for: with them the process holds more than it
    // uses, by an amount no memory plan can predict (`inference::engine::huge_pages`).
    joule::inference::engine::huge_pages::set_for_process(joule::knobs::huge_pages());
    joule::cli::main()
}
