//! Progress of long operations, on standard error only: what a person
//! watching a terminal, or reading a Slurm log afterwards, sees while a run,
//! a sweep, a race, a fetch or a benchmark works.
//!
//! [`Mode`] says how: animated `indicatif` bars when standard error is a
//! terminal, one plain line per round, cell or stage when it is not (CI,
//! Slurm logs), nothing when `JOULE_PROGRESS=off` (`crate::knobs::progress`).
//! The pieces:
//!
//! - [`Progress`]: a counter of items or bytes with a total
//!   ([`Progress::bytes`] for fetches, extraction, verification, synthesis);
//! - [`Stage`]: one step without a count (loading a model), a line when it
//!   starts and one with the time it took when it ends;
//! - [`calls`]: [`calls::Watched`], a backend wrapper that counts the model
//!   calls and tokens going through it, and [`calls::Tracker`], which turns
//!   those counts into round, cell and race lines (`run.rs`, `sweep/`,
//!   `race/run.rs` use it).
//!
//! **Invariant:** progress only watches. Nothing here changes a request, an
//! answer, the order of calls or anything recorded; standard output and
//! every file written are the same whatever the mode.

pub mod calls;
pub mod format;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nothing.
    Off,
    /// Plain lines, one per round, cell or stage (and a line at least every
    /// [`HEARTBEAT`] while something runs).
    Plain,
    /// `indicatif` bars, redrawn in place.
    Bars,
}

/// The longest a plain-lines mode stays silent while work goes on.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

impl Mode {
    /// The mode `JOULE_PROGRESS` asks for (`off`, `plain`, `bars`), or by
    /// default bars on a terminal and plain lines elsewhere. An unknown
    /// value counts as unset (progress is never worth an error).
    pub fn from_env() -> Mode {
        Mode::choose(
            crate::knobs::progress().as_deref(),
            std::io::stderr().is_terminal(),
        )
    }

    /// The mode for a `JOULE_PROGRESS` value and whether standard error is a
    /// terminal.
    pub fn choose(setting: Option<&str>, terminal: bool) -> Mode {
        match setting.map(str::trim) {
            Some("off") => Mode::Off,
            Some("plain") => Mode::Plain,
            Some("bars") => Mode::Bars,
            _ if terminal => Mode::Bars,
            _ => Mode::Plain,
        }
    }

    /// Progress from the environment, or none when the caller was asked to
    /// be quiet (a `--quiet` flag).
    pub fn unless_quiet(quiet: bool) -> Mode {
        if quiet {
            Mode::Off
        } else {
            Mode::from_env()
        }
    }
}

/// Print one line on standard error in `mode`, above `bar` when a bar is
/// drawn (so the bar is not torn).
pub(crate) fn line(mode: Mode, bar: Option<&ProgressBar>, text: &str) {
    match (mode, bar) {
        (Mode::Off, _) => {}
        (Mode::Bars, Some(b)) => b.println(text),
        _ => crate::errln!("{text}"),
    }
}

fn bar_with(template: &str, len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// What a [`Progress`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Bytes,
    Items(&'static str),
}

impl Unit {
    fn amount(self, n: u64) -> String {
        match self {
            Unit::Bytes => format::bytes(n),
            Unit::Items(what) => format!("{} {what}", format::count(n)),
        }
    }
}

/// A counter with a total: a bar on a terminal; in plain mode a line when
/// it starts, one at most every [`HEARTBEAT`] (with the rate and the time
/// left) and one when it finishes.
///
/// ```no_run
/// let p = joule::progress::Progress::bytes("writing model.gguf", 1 << 30);
/// p.inc(4096);
/// p.finish(); // plain mode: "writing model.gguf: done, 1.0 GiB in 12.3s (83.2 MiB/s)"
/// ```
pub struct Progress {
    mode: Mode,
    label: String,
    unit: Unit,
    total: u64,
    bar: Option<ProgressBar>,
    state: std::sync::Mutex<PlainState>,
}

struct PlainState {
    done: u64,
    started: Instant,
    last_line: Instant,
    finished: bool,
}

impl Progress {
    /// Bytes of `total` (a download, an extraction, a checksum, a file
    /// written), shown in the mode the environment asks for.
    pub fn bytes(label: impl Into<String>, total: u64) -> Progress {
        Progress::new(Mode::from_env(), label.into(), Unit::Bytes, total)
    }

    /// Items of `total`, each called `what` (`races`, `probes`, `reps`).
    pub fn items(label: impl Into<String>, total: u64, what: &'static str) -> Progress {
        Progress::new(Mode::from_env(), label.into(), Unit::Items(what), total)
    }

    /// [`Progress::bytes`] in a given mode (`Mode::Off` for a quiet caller).
    pub fn bytes_in(mode: Mode, label: impl Into<String>, total: u64) -> Progress {
        Progress::new(mode, label.into(), Unit::Bytes, total)
    }

    /// [`Progress::items`] in a given mode.
    pub fn items_in(
        mode: Mode,
        label: impl Into<String>,
        total: u64,
        what: &'static str,
    ) -> Progress {
        Progress::new(mode, label.into(), Unit::Items(what), total)
    }

    fn new(mode: Mode, label: String, unit: Unit, total: u64) -> Progress {
        let bar = match mode {
            Mode::Bars => {
                let bar = match unit {
                    Unit::Bytes => bar_with(
                        "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
                        total,
                    ),
                    Unit::Items(_) => {
                        bar_with("{msg} [{bar:30}] {pos}/{len} ({elapsed}, eta {eta})", total)
                    }
                };
                bar.set_message(label.clone());
                Some(bar)
            }
            Mode::Plain => {
                crate::errln!("{label}: {} to go", unit.amount(total));
                None
            }
            Mode::Off => None,
        };
        let now = Instant::now();
        Progress {
            mode,
            label,
            unit,
            total,
            bar,
            state: std::sync::Mutex::new(PlainState {
                done: 0,
                started: now,
                last_line: now,
                finished: false,
            }),
        }
    }

    /// `n` more done.
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
        let Ok(mut s) = self.state.lock() else { return };
        s.done = s.done.saturating_add(n);
        if self.mode == Mode::Plain && s.last_line.elapsed() >= HEARTBEAT {
            s.last_line = Instant::now();
            crate::errln!("{}", self.plain_line(&s));
        }
    }

    /// How much is done so far.
    pub fn position(&self) -> u64 {
        self.state.lock().map(|s| s.done).unwrap_or(0)
    }

    fn plain_line(&self, s: &PlainState) -> String {
        let elapsed = s.started.elapsed();
        let rate = match self.unit {
            Unit::Bytes => format!("{}/s", format::bytes_per_sec(s.done, elapsed)),
            Unit::Items(what) => format::rate(s.done as f64, elapsed, what),
        };
        format!(
            "{}: {} of {}, {rate}, {}",
            self.label,
            self.unit.amount(s.done),
            self.unit.amount(self.total),
            format::eta_words(s.done, self.total, elapsed)
        )
    }

    /// Done: the bar goes; plain mode says how much, how long and how fast.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        let Ok(mut s) = self.state.lock() else { return };
        if s.finished {
            return;
        }
        s.finished = true;
        if self.mode == Mode::Plain {
            let took = s.started.elapsed();
            let rate = match self.unit {
                Unit::Bytes => format!("{}/s", format::bytes_per_sec(s.done, took)),
                Unit::Items(what) => format::rate(s.done as f64, took, what),
            };
            crate::errln!(
                "{}: done, {} in {} ({rate})",
                self.label,
                self.unit.amount(s.done),
                format::duration(took)
            );
        }
    }
}

impl Drop for Progress {
    /// A counter dropped unfinished (an error) clears its bar and says nothing.
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// One step without a count, such as loading a model: a line (or a spinner)
/// when it starts, a line with the time it took when it is [`Stage::done`].
pub struct Stage {
    mode: Mode,
    label: String,
    started: Instant,
    spinner: Option<ProgressBar>,
}

impl Stage {
    /// Start `label` (`loading model smollm2-135m`) in the environment's mode.
    pub fn start(label: impl Into<String>) -> Stage {
        Stage::start_in(Mode::from_env(), label)
    }

    /// Start `label` in `mode`.
    pub fn start_in(mode: Mode, label: impl Into<String>) -> Stage {
        let label = label.into();
        let spinner = match mode {
            Mode::Bars => {
                let s = ProgressBar::new_spinner();
                if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
                    s.set_style(style);
                }
                s.set_message(label.clone());
                s.enable_steady_tick(Duration::from_millis(120));
                Some(s)
            }
            Mode::Plain => {
                crate::errln!("{label} ...");
                None
            }
            Mode::Off => None,
        };
        Stage {
            mode,
            label,
            started: Instant::now(),
            spinner,
        }
    }

    /// Finished: `<label>: done in 2.3s` (on a terminal too, so the time
    /// stays on screen).
    pub fn done(self) {
        let took = self.started.elapsed();
        if let Some(s) = &self.spinner {
            s.finish_and_clear();
        }
        if self.mode != Mode::Off {
            crate::errln!("{}: done in {}", self.label, format::duration(took));
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if let Some(s) = &self.spinner {
            s.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_follows_the_setting_then_the_terminal() {
        assert_eq!(Mode::choose(Some("off"), true), Mode::Off);
        assert_eq!(Mode::choose(Some("plain"), true), Mode::Plain);
        assert_eq!(Mode::choose(Some("bars"), false), Mode::Bars);
        assert_eq!(Mode::choose(Some(" off "), false), Mode::Off);
        assert_eq!(Mode::choose(None, true), Mode::Bars);
        assert_eq!(Mode::choose(None, false), Mode::Plain);
        assert_eq!(Mode::choose(Some("loud"), false), Mode::Plain);
        assert_eq!(Mode::choose(Some(""), true), Mode::Bars);
        assert_eq!(Mode::unless_quiet(true), Mode::Off);
    }

    #[test]
    fn a_counter_counts_in_every_mode() {
        for mode in [Mode::Off, Mode::Plain] {
            let p = Progress::bytes_in(mode, "test bytes", 100);
            p.inc(40);
            p.inc(60);
            assert_eq!(p.position(), 100);
            p.finish();
            p.finish();
        }
        let p = Progress::items_in(Mode::Off, "test items", 3, "races");
        p.inc(1);
        assert_eq!(p.position(), 1);
    }
}
