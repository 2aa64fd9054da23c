//! The words and numbers of a progress line: durations (`4m10s`), counts
//! with thousands separators (`4,210`), byte sizes (`1.2 GiB`), rates
//! (`38.2 tok/s`) and the estimated time left. Pure functions, so the
//! lines are tested without a terminal or a clock.

use std::time::Duration;

/// A duration as a person reads it: `850ms`, `7.3s`, `4m10s`, `2h05m`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        return format!("{secs:.1}s");
    }
    let s = d.as_secs();
    if s < 3600 {
        return format!("{}m{:02}s", s / 60, s % 60);
    }
    format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
}

/// A count with a comma every three digits: `4,210`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A byte size in binary units: `512 B`, `3.0 KiB`, `1.2 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Bytes per second as a size (`83.2 MiB`; the caller adds `/s`), `-`
/// before any time passed.
pub fn bytes_per_sec(n: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return "-".to_string();
    }
    bytes((n as f64 / secs) as u64)
}

/// `amount / elapsed` with one decimal and `unit`: `38.2 tok/s`. Nothing
/// measurable yet (no time passed): `-`.
pub fn rate(amount: f64, elapsed: Duration, unit: &str) -> String {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 || !amount.is_finite() {
        return format!("- {unit}/s");
    }
    format!("{:.1} {unit}/s", amount / secs)
}

/// The time left when `done` of `total` units took `elapsed`, assuming the
/// rest go at the same pace; `None` before the first unit is done (no pace
/// to go by). Zero when everything is done.
pub fn eta(done: u64, total: u64, elapsed: Duration) -> Option<Duration> {
    if done >= total {
        return Some(Duration::ZERO);
    }
    if done == 0 {
        return None;
    }
    let per_unit = elapsed.as_secs_f64() / done as f64;
    Duration::try_from_secs_f64(per_unit * (total - done) as f64).ok()
}

/// [`eta`] as the words of a line: `eta 4m10s`, `eta <1s` (never a bogus
/// `0ms` while work remains), `eta ?` without a pace, `done` when all is.
pub fn eta_words(done: u64, total: u64, elapsed: Duration) -> String {
    if done >= total {
        return "done".to_string();
    }
    left_words(eta(done, total, elapsed))
}

/// The time left as words: `eta 4m10s`, `eta <1s`, or `eta ?` (unknown).
pub fn left_words(left: Option<Duration>) -> String {
    match left {
        Some(d) if d < Duration::from_secs(1) => "eta <1s".to_string(),
        Some(d) => format!("eta {}", duration(d)),
        None => "eta ?".to_string(),
    }
}

/// The time left when `worked` units of work (fractions of a unit under
/// way included) took `elapsed` and `remaining` are left, at the same pace;
/// `None` before any work was measured.
pub fn eta_at_pace(worked: f64, remaining: f64, elapsed: Duration) -> Option<Duration> {
    if worked.is_nan() || worked <= 0.0 || !remaining.is_finite() {
        return None;
    }
    let secs = elapsed.as_secs_f64() / worked * remaining.max(0.0);
    // Past what a Duration holds (a pace of almost nothing): unknown.
    Duration::try_from_secs_f64(secs).ok()
}

/// Model calls, generated tokens and the time they took, in one scope
/// (`this round`, `in all`): `this round 75 calls, 4,210 tokens, 38.2 tok/s`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    pub calls: u64,
    pub tokens: u64,
    pub took: Duration,
}

impl Tally {
    pub fn render(&self, scope: &str) -> String {
        format!(
            "{scope} {} calls, {} tokens, {}",
            count(self.calls),
            count(self.tokens),
            rate(self.tokens as f64, self.took, "tok")
        )
    }
}

/// The plain line of one finished unit (a round, a cell, a race):
/// `round 3/30: this round 75 calls, 4,210 tokens, 38.2 tok/s; in all 225
/// calls, 12,630 tokens, 35.0 tok/s; eta 4m10s`. Every count says its
/// scope: `this round` (the unit just finished) or `in all` (since play
/// started); `tokens` are always generated tokens.
#[derive(Debug, Clone, Default)]
pub struct UnitLine<'a> {
    /// `round`, `cell`, `race`.
    pub unit: &'a str,
    pub done: u64,
    pub total: u64,
    /// What finished, when it has a name (a cell's folder).
    pub name: Option<&'a str>,
    /// This unit's model calls and tokens (rounds only: cells and races
    /// overlap, so theirs are not told apart), and the time it took.
    pub this: Option<Tally>,
    /// Every model call and token since play started, and that time.
    pub all: Tally,
    /// The time this unit took (said when no model was called).
    pub took: Duration,
    /// Units under way and not started yet, when several run at once.
    pub running_pending: Option<(u64, u64)>,
    /// The time left (`None`: not known yet); unused once all are done.
    pub left: Option<Duration>,
}

impl UnitLine<'_> {
    /// The line. Without model calls it says only the time the unit took.
    pub fn render(&self) -> String {
        let mut s = format!("{} {}/{}", self.unit, self.done, self.total);
        if let Some(n) = self.name {
            s += &format!(" ({n})");
        }
        s += ": ";
        if self.all.calls == 0 {
            s += &duration(self.took);
        } else {
            let mut parts = Vec::new();
            if let Some(t) = &self.this {
                parts.push(t.render(&format!("this {}", self.unit)));
            }
            parts.push(self.all.render("in all"));
            s += &parts.join("; ");
        }
        if let Some((running, pending)) = self.running_pending {
            s += &format!("; {running} running, {pending} pending");
        }
        s += "; ";
        if self.done >= self.total {
            s += &format!("all done in {}", duration(self.all.took));
        } else {
            s += &left_words(self.left);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(7_340)), "7.3s");
        assert_eq!(duration(Duration::from_secs(250)), "4m10s");
        assert_eq!(duration(Duration::from_secs(60)), "1m00s");
        assert_eq!(
            duration(Duration::from_secs(2 * 3600 + 5 * 60 + 59)),
            "2h05m"
        );
    }

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(4_210), "4,210");
        assert_eq!(count(1_000_000), "1,000,000");
        assert_eq!(count(12_345_678), "12,345,678");
    }

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 * 1024), "3.0 KiB");
        assert_eq!(bytes(1_288_490_189), "1.2 GiB");
        assert_eq!(bytes(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn byte_rates_are_sizes_per_second() {
        assert_eq!(
            bytes_per_sec(3 * 1024 * 1024, Duration::from_secs(2)),
            "1.5 MiB"
        );
        assert_eq!(bytes_per_sec(10, Duration::ZERO), "-");
    }

    #[test]
    fn rates_divide_by_the_time_taken() {
        assert_eq!(rate(382.0, Duration::from_secs(10), "tok"), "38.2 tok/s");
        assert_eq!(rate(5.0, Duration::ZERO, "tok"), "- tok/s");
        assert_eq!(
            rate(3.0 * 1024.0 * 1024.0, Duration::from_secs(2), "B"),
            "1572864.0 B/s"
        );
    }

    #[test]
    fn eta_goes_at_the_pace_so_far_and_never_says_0ms_while_work_remains() {
        // 3 of 30 rounds in 30 s: 27 more at 10 s each.
        assert_eq!(
            eta(3, 30, Duration::from_secs(30)),
            Some(Duration::from_secs(270))
        );
        assert_eq!(eta(0, 30, Duration::from_secs(5)), None);
        assert_eq!(eta_words(0, 4, Duration::from_secs(1)), "eta ?");
        assert_eq!(eta_words(1, 2, Duration::from_secs(90)), "eta 1m30s");
        assert_eq!(eta_words(999, 1000, Duration::from_millis(10)), "eta <1s");
        assert_eq!(eta_words(30, 30, Duration::from_secs(5)), "done");
        // 2.5 rounds worked in 50 s, 7.5 left.
        assert_eq!(
            eta_at_pace(2.5, 7.5, Duration::from_secs(50)),
            Some(Duration::from_secs(150))
        );
        assert_eq!(eta_at_pace(0.0, 3.0, Duration::from_secs(5)), None);
        // A pace too slow for any clock: unknown, not a panic.
        assert_eq!(eta_at_pace(1e-300, 3.0, Duration::from_secs(5)), None);
    }

    #[test]
    fn a_round_line_gives_every_count_its_scope() {
        let line = UnitLine {
            unit: "round",
            done: 3,
            total: 30,
            this: Some(Tally {
                calls: 75,
                tokens: 4_210,
                took: Duration::from_millis(110_209),
            }),
            all: Tally {
                calls: 225,
                tokens: 12_630,
                took: Duration::from_secs(360),
            },
            left: Some(Duration::from_secs(252)),
            ..Default::default()
        };
        assert_eq!(
            line.render(),
            "round 3/30: this round 75 calls, 4,210 tokens, 38.2 tok/s; in all 225 calls, 12,630 tokens, 35.1 tok/s; eta 4m12s"
        );
        let cell = UnitLine {
            unit: "cell",
            done: 1,
            total: 4,
            name: Some("runs/s/a/seed_1"),
            took: Duration::from_millis(1_500),
            running_pending: Some((1, 2)),
            left: Some(Duration::from_secs(6)),
            ..Default::default()
        };
        assert_eq!(
            cell.render(),
            "cell 1/4 (runs/s/a/seed_1): 1.5s; 1 running, 2 pending; eta 6.0s"
        );
        let last = UnitLine {
            unit: "race",
            done: 2,
            total: 2,
            all: Tally {
                calls: 1,
                tokens: 0,
                took: Duration::from_secs(3),
            },
            ..Default::default()
        };
        assert_eq!(
            last.render(),
            "race 2/2: in all 1 calls, 0 tokens, 0.0 tok/s; all done in 3.0s"
        );
    }
}
