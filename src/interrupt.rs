//! Interruption by SIGINT (Ctrl-C) or SIGTERM: the commands that keep
//! records (`joule run`, `joule sweep`, `joule race run|sweep`) call
//! [`install`] before they play. The first signal only sets a flag; the
//! [`crate::agency::Driver`] sees it before its next batch or step, abandons
//! the calls still to come and fails every unfinished scenario with
//! [`Interrupted`], so each run keeps what it recorded and no COMPLETE
//! marker. A second signal ends the process at once. Commands that never
//! call [`install`] keep the default (the signal ends them).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The error an interrupted scenario ends with.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {}", signal_name(self.signal))]
pub struct Interrupted {
    pub signal: i32,
}

struct Flags {
    any: Arc<AtomicBool>,
    which: Arc<AtomicUsize>,
}

static FLAGS: OnceLock<Flags> = OnceLock::new();

/// Catch SIGINT and SIGTERM from now on (idempotent). A failure to install
/// the handlers is reported on standard error and leaves the default.
pub fn install() {
    FLAGS.get_or_init(|| {
        let flags = Flags {
            any: Arc::new(AtomicBool::new(false)),
            which: Arc::new(AtomicUsize::new(0)),
        };
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // Registered first, so it sees the flag as it was before this
            // signal: the second signal exits at once.
            let r = signal_hook::flag::register_conditional_shutdown(
                sig,
                exit_status(sig) as i32,
                Arc::clone(&flags.any),
            )
            .and_then(|_| {
                signal_hook::flag::register_usize(sig, Arc::clone(&flags.which), sig as usize)
            })
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&flags.any)));
            if let Err(e) = r {
                crate::errln!("warning: cannot catch {}: {e}", signal_name(sig));
            }
        }
        flags
    });
}

/// The signal received since [`install`], if any.
pub fn requested() -> Option<i32> {
    let f = FLAGS.get()?;
    if !f.any.load(Ordering::SeqCst) {
        return None;
    }
    match f.which.load(Ordering::SeqCst) {
        0 => Some(signal_hook::consts::SIGINT),
        s => Some(s as i32),
    }
}

/// [`requested`] as the error an interrupted scenario ends with.
pub fn check() -> Result<(), Interrupted> {
    match requested() {
        Some(signal) => Err(Interrupted { signal }),
        None => Ok(()),
    }
}

/// The exit status of a command stopped by `signal`: 128 + its number, as a
/// shell reports it (130 for SIGINT, 143 for SIGTERM).
pub fn exit_status(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

/// `SIGINT` / `SIGTERM` / `signal N`.
pub fn signal_name(signal: i32) -> String {
    match signal {
        signal_hook::consts::SIGINT => "SIGINT (Ctrl-C)".into(),
        signal_hook::consts::SIGTERM => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}
