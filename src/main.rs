//! The `joule` binary: parses the command line and reports errors with context.

fn main() -> std::process::ExitCode {
    joule::cli::main()
}
