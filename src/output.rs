//! Writing to standard output and standard error without ever failing:
//! [`outln!`](crate::outln), [`out!`](crate::out), [`errln!`](crate::errln)
//! and [`err!`](crate::err) are `println!`, `print!`, `eprintln!` and
//! `eprint!` that ignore a write error. The standard macros panic when the
//! reader went away (`joule run | head -1`: a closed pipe, EPIPE), which
//! would stop a run before its records are complete; a run's results are its
//! files, so what it prints is never worth stopping it. (Rust ignores
//! SIGPIPE, so a closed pipe is an error on the write, never a signal.)
//! Numbers in messages are written by [`num`], so a huge or tiny one never
//! fills a line with digits.

use std::io::Write;

/// A number for a message: in full when that is short, else in scientific
/// notation (`1e-300`, not 300 digits).
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && a.is_finite() && !(1e-4..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Write `args` to standard output, ignoring any error.
pub fn out(args: std::fmt::Arguments) {
    let _ = std::io::stdout().lock().write_fmt(args);
}

/// Write `args` to standard error, ignoring any error.
pub fn err(args: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `print!` that never panics.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::out(format_args!($($arg)*)) };
}

/// `println!` that never panics.
#[macro_export]
macro_rules! outln {
    () => { $crate::output::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that never panics.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::output::err(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics.
#[macro_export]
macro_rules! errln {
    () => { $crate::output::err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::err(format_args!("{}\n", format_args!($($arg)*))) };
}
