//! The `joule` binary: parses the command line and reports errors with context.

/// mimalloc instead of the system allocator: an Energy Society run builds and
/// drops many small strings and JSON values (prompts, observations, records),
/// and glibc's malloc took about a third of a scripted run's time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    joule::cli::main()
}
