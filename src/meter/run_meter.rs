//! A run folder's `meter.json`: what the energy meter measured in each
//! session that played the run (a run interrupted and resumed has several).
//! Each session adds its totals when it ends, completed or stopped by a
//! signal or an error, so the energy of every session is kept; a session
//! killed outright (`kill -9`, a power cut) cannot write its totals, and the
//! folder's `provenance.json`, which lists every session, tells how many are
//! missing (the callers count them: `provenance::sessions_in`). The totals
//! of a session include rounds that an interruption dropped and a resume
//! played again: the meter measured them.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::attribution::{MeterStatus, MeterTotals};

/// The file name in a run folder.
pub const FILE: &str = "meter.json";

/// What the meter measured in one session of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeter {
    /// The round the session played from (as in `provenance.json`).
    pub from_round: u32,
    #[serde(flatten)]
    pub status: MeterStatus,
}

/// Every session's meter record of one run, in the order they ran.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunMeter {
    pub sessions: Vec<SessionMeter>,
}

impl RunMeter {
    /// The `meter.json` of the run folder `dir`; `None` when there is none.
    /// A file an earlier build wrote (one session's status) reads as one
    /// session from round 1.
    pub fn read(dir: &Path) -> anyhow::Result<Option<RunMeter>> {
        let path = dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if let Ok(m) = serde_json::from_str::<RunMeter>(&text) {
            return Ok(Some(m));
        }
        let status = serde_json::from_str::<MeterStatus>(&text).with_context(|| {
            format!(
                "{}: expected the meter's record of each session (`sessions`)",
                path.display()
            )
        })?;
        Ok(Some(RunMeter {
            sessions: vec![SessionMeter {
                from_round: 1,
                status,
            }],
        }))
    }

    /// Add the session that played from `from_round` to the `meter.json` of
    /// `dir` (written atomically) and return the whole record. A file that
    /// cannot be read is replaced, with a warning saying what was lost.
    pub fn record(dir: &Path, from_round: u32, status: MeterStatus) -> anyhow::Result<RunMeter> {
        let mut m = match RunMeter::read(dir) {
            Ok(m) => m.unwrap_or_default(),
            Err(e) => {
                crate::errln!(
                    "warning: {e:#}; it is replaced by this session's record (earlier sessions' energy is not in it)"
                );
                RunMeter::default()
            }
        };
        m.sessions.push(SessionMeter { from_round, status });
        crate::record::write_json_atomic(dir.join(FILE), &m)?;
        Ok(m)
    }

    /// The sum over the sessions that measured; when none did, why the last
    /// one did not.
    pub fn total(&self) -> MeterStatus {
        let mut sum: Option<MeterTotals> = None;
        for s in &self.sessions {
            let MeterStatus::Measured(t) = &s.status else {
                continue;
            };
            let Some(acc) = sum.as_mut() else {
                sum = Some(t.clone());
                continue;
            };
            if !acc.meter.split(", ").any(|m| m == t.meter) {
                acc.meter = format!("{}, {}", acc.meter, t.meter);
            }
            acc.prefill_j += t.prefill_j;
            acc.decode_j += t.decode_j;
            acc.overhead_j += t.overhead_j;
            acc.idle_j += t.idle_j;
            acc.unaccounted_j += t.unaccounted_j;
            acc.prefill_tokens += t.prefill_tokens;
            acc.decode_tokens += t.decode_tokens;
            acc.steps += t.steps;
            acc.batches += t.batches;
            acc.failed_reads += t.failed_reads;
            if t.last_error.is_some() {
                acc.last_error = t.last_error.clone();
            }
        }
        match (sum, self.sessions.last()) {
            (Some(t), _) => MeterStatus::Measured(t),
            (None, Some(s)) => s.status.clone(),
            (None, None) => MeterStatus::NotMeasured {
                reason: "no session recorded the meter".into(),
            },
        }
    }

    /// Of the `played` sessions of the run (its `provenance.json` lists
    /// them), those that recorded no meter totals here: killed before they could.
    pub fn missing_sessions(&self, played: usize) -> usize {
        played.saturating_sub(self.sessions.len())
    }

    /// One line for the terminal: [`MeterStatus::summary`] of the total,
    /// with the sessions it sums and, of the `played` sessions, those missing.
    pub fn summary(&self, played: usize) -> String {
        let mut s = self.total().summary();
        if self.sessions.len() > 1 {
            s += &format!(" (the sum of the run's {} sessions)", self.sessions.len());
        }
        match self.missing_sessions(played) {
            0 => {}
            n => {
                s += &format!(
                    "; {n} earlier session(s) ended without recording their energy (killed), so their joules are not included"
                )
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(j: f64) -> MeterStatus {
        MeterStatus::Measured(MeterTotals {
            meter: "fake-power:100".into(),
            prefill_j: j,
            decode_j: 2.0 * j,
            overhead_j: 0.5 * j,
            idle_j: 0.25 * j,
            decode_tokens: 10,
            ..Default::default()
        })
    }

    #[test]
    fn sessions_are_added_and_summed() {
        let dir = tempfile::tempdir().unwrap();
        RunMeter::record(dir.path(), 1, measured(4.0)).unwrap();
        let m = RunMeter::record(dir.path(), 3, measured(8.0)).unwrap();
        assert_eq!(RunMeter::read(dir.path()).unwrap().unwrap(), m);
        assert_eq!(
            m.sessions.iter().map(|s| s.from_round).collect::<Vec<_>>(),
            [1, 3]
        );
        let MeterStatus::Measured(t) = m.total() else {
            panic!("measured")
        };
        assert_eq!(
            (
                t.prefill_j,
                t.decode_j,
                t.overhead_j,
                t.idle_j,
                t.decode_tokens
            ),
            (12.0, 24.0, 6.0, 3.0, 20)
        );
        assert_eq!(t.meter, "fake-power:100");
        assert!(m.summary(2).contains("sum of the run's 2 sessions"));
        assert!(m
            .summary(3)
            .contains("1 earlier session(s) ended without recording"));
    }

    #[test]
    fn an_earlier_builds_file_is_one_session() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE),
            serde_json::to_string(&measured(1.0)).unwrap(),
        )
        .unwrap();
        let m = RunMeter::read(dir.path()).unwrap().unwrap();
        assert_eq!(m.sessions.len(), 1);
        assert_eq!(m.sessions[0].from_round, 1);
        assert_eq!(m.total(), measured(1.0));
        // Another session is added to it.
        let m = RunMeter::record(dir.path(), 2, measured(1.0)).unwrap();
        assert_eq!(m.sessions.len(), 2);
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_it_and_replaced_when_recording() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "{\"sessions\": [").unwrap();
        let e = format!("{:#}", RunMeter::read(dir.path()).unwrap_err());
        assert!(e.contains("meter.json") && e.contains("sessions"), "{e}");
        let m = RunMeter::record(dir.path(), 2, measured(1.0)).unwrap();
        assert_eq!(m.sessions.len(), 1);
    }

    #[test]
    fn nothing_measured_keeps_the_reason() {
        let m = RunMeter {
            sessions: vec![SessionMeter {
                from_round: 1,
                status: MeterStatus::NotMeasured {
                    reason: "no meter".into(),
                },
            }],
        };
        assert_eq!(
            m.total(),
            MeterStatus::NotMeasured {
                reason: "no meter".into()
            }
        );
    }
}
