//! Attribution: which call consumed which measured joules.
//!
//! The meter is read before and after every batched forward step
//! ([`StepObserver`], the hook `inference::generate::generate_batch_observed`
//! calls), at the start and at the end of every batch, and nowhere else. The
//! readings cut the meter's count into intervals, each counted once:
//!
//! - **a step** (from just before a forward pass to just after it): split among
//!   the step's sequences in proportion to the tokens each processed in it (a
//!   prompt piece of n tokens counts n, a decode step 1); a sequence's share
//!   is its call's *prefill* joules when it fed prompt tokens, its *decode*
//!   joules when it fed its last sampled token. Prompt tokens reused from the
//!   sequence's state are not processed and get nothing; the first generated
//!   token's logits come from the last prefill step, so they are prefill energy;
//! - **engine overhead**: inside a batch but between steps (model loading,
//!   chat template, tokenising, constraints, sampling, masks);
//! - **idle**: between batches (the scenario's own work, waiting);
//! - **unaccounted**: an interval whose start or end reading failed: the energy
//!   is known (the next good reading has it) but not where it went.
//!
//! A call gets a [`MeasuredEnergy`] only when every step of its batch was
//! measured; when a read failed during a batch its calls record none (never a
//! partial number), the failure is counted in [`MeterTotals`], and the meter
//! is tried again at the next read. The meters are machine-wide, so other
//! processes' consumption lands in these intervals too.

use serde::{Deserialize, Serialize};

use super::EnergyMeter;

/// What one sequence fed in one forward step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepWork {
    /// The sequence's index in the batch.
    pub seq: usize,
    /// Tokens it processed in this step.
    pub tokens: usize,
    /// Prompt tokens (true) or its last sampled token (false).
    pub prefill: bool,
}

/// Sees every forward step of a batched generation.
pub trait StepObserver {
    /// Just before a forward pass.
    fn before_step(&mut self);
    /// Just after it, with what each sequence fed and the pass's wall time
    /// in milliseconds.
    fn after_step(&mut self, work: &[StepWork], ms: f64);
}

/// Observes nothing (generation without a meter).
pub struct NoObserver;

impl StepObserver for NoObserver {
    fn before_step(&mut self) {}
    fn after_step(&mut self, _: &[StepWork], _: f64) {}
}

/// The measured energy of one call, recorded beside its formula charge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredEnergy {
    /// The meter (`rapl`, `nvml`, `nvml+rapl`, `fake-…` for test meters).
    pub meter: String,
    /// Joules of the steps in which the call processed prompt tokens (its share).
    pub prefill_j: f64,
    /// Joules of its decode steps (its share).
    pub decode_j: f64,
    /// Prompt tokens it processed (reused ones excluded).
    pub prefill_tokens: u64,
    /// Decode steps it took (tokens fed back).
    pub decode_tokens: u64,
}

impl MeasuredEnergy {
    pub fn joules(&self) -> f64 {
        self.prefill_j + self.decode_j
    }
}

/// Everything a meter measured, by interval kind (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MeterTotals {
    pub meter: String,
    /// Attributed to calls, prefill and decode.
    pub prefill_j: f64,
    pub decode_j: f64,
    pub overhead_j: f64,
    pub idle_j: f64,
    pub unaccounted_j: f64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub steps: u64,
    pub batches: u64,
    pub failed_reads: u64,
    /// The last failed read's message.
    pub last_error: Option<String>,
}

impl MeterTotals {
    /// Every joule the meter counted between its first and last good readings.
    pub fn total_j(&self) -> f64 {
        self.prefill_j + self.decode_j + self.overhead_j + self.idle_j + self.unaccounted_j
    }
}

/// What a backend's meter measured so far, or why it measures nothing
/// (`meter.json` of a run; `joule run` prints it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum MeterStatus {
    Measured(MeterTotals),
    NotMeasured { reason: String },
}

impl MeterStatus {
    /// One line for the terminal.
    pub fn summary(&self) -> String {
        match self {
            MeterStatus::NotMeasured { reason } => {
                format!("energy: nothing was measured: {reason}")
            }
            MeterStatus::Measured(t) => {
                let mut s = format!(
                    "energy measured by `{}`: calls {:.3} J (prefill {:.3} J, decode {:.3} J), engine overhead {:.3} J, idle {:.3} J",
                    t.meter,
                    t.prefill_j + t.decode_j,
                    t.prefill_j,
                    t.decode_j,
                    t.overhead_j,
                    t.idle_j
                );
                if t.unaccounted_j > 0.0 || t.failed_reads > 0 {
                    s += &format!(
                        ", unaccounted {:.3} J ({} failed reads; last: {})",
                        t.unaccounted_j,
                        t.failed_reads,
                        t.last_error.as_deref().unwrap_or("-")
                    );
                }
                if t.meter.starts_with("fake-") {
                    s += " [a test meter: not a measurement]";
                }
                s
            }
        }
    }
}

/// A meter and the running account of what it measured; owned by a backend.
pub struct Metering {
    meter: Box<dyn EnergyMeter>,
    last: Option<f64>,
    /// A read failed since `last`: the next interval is unaccounted.
    broken: bool,
    pub totals: MeterTotals,
}

impl Metering {
    /// Start metering (the first reading is the zero of every interval).
    pub fn new(meter: Box<dyn EnergyMeter>) -> Self {
        let mut m = Metering {
            totals: MeterTotals {
                meter: meter.name(),
                ..Default::default()
            },
            meter,
            last: None,
            broken: false,
        };
        let _ = m.tick();
        m
    }

    pub fn name(&self) -> String {
        self.totals.meter.clone()
    }

    /// Read the meter: `Some(joules since the last reading)` when both
    /// readings are good, `None` otherwise (a failed read is counted, and the
    /// interval after it is added to `unaccounted_j` once a read succeeds).
    fn tick(&mut self) -> Option<f64> {
        match self.meter.joules() {
            Ok(now) => {
                let d = match self.last {
                    Some(l) if !self.broken => Some((now - l).max(0.0)),
                    Some(l) => {
                        self.totals.unaccounted_j += (now - l).max(0.0);
                        None
                    }
                    None => None,
                };
                self.last = Some(now);
                self.broken = false;
                d
            }
            Err(e) => {
                self.broken = true;
                self.totals.failed_reads += 1;
                self.totals.last_error = Some(e.to_string());
                None
            }
        }
    }

    /// Start a batch of `n` sequences: the time since the last batch was idle.
    pub fn begin_batch(&mut self, n: usize) -> BatchMeter<'_> {
        if let Some(d) = self.tick() {
            self.totals.idle_j += d;
        }
        self.totals.batches += 1;
        BatchMeter {
            m: self,
            seqs: vec![Default::default(); n],
            complete: true,
        }
    }
}

impl Metering {
    /// Start one step of a continuous batch of `n` running sequences (each
    /// call's energy is the sum over its steps). The time since the last
    /// reading is the engine's own work between steps (overhead) when
    /// `continuing` (sequences were running before this step), else idle;
    /// a step that continues the running batch does not count as a batch.
    pub fn begin_step(&mut self, n: usize, continuing: bool) -> BatchMeter<'_> {
        if !continuing {
            return self.begin_batch(n);
        }
        if let Some(d) = self.tick() {
            self.totals.overhead_j += d;
        }
        BatchMeter {
            m: self,
            seqs: vec![Default::default(); n],
            complete: true,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SeqAccount {
    prefill_j: f64,
    decode_j: f64,
    prefill_tokens: u64,
    decode_tokens: u64,
}

/// The [`StepObserver`] of one batch.
pub struct BatchMeter<'a> {
    m: &'a mut Metering,
    seqs: Vec<SeqAccount>,
    /// Every step so far was measured.
    complete: bool,
}

impl StepObserver for BatchMeter<'_> {
    fn before_step(&mut self) {
        if let Some(d) = self.m.tick() {
            self.m.totals.overhead_j += d;
        }
    }

    fn after_step(&mut self, work: &[StepWork], _ms: f64) {
        let t = &mut self.m.totals;
        t.steps += 1;
        for w in work {
            if w.prefill {
                t.prefill_tokens += w.tokens as u64;
            } else {
                t.decode_tokens += w.tokens as u64;
            }
            if let Some(s) = self.seqs.get_mut(w.seq) {
                if w.prefill {
                    s.prefill_tokens += w.tokens as u64;
                } else {
                    s.decode_tokens += w.tokens as u64;
                }
            }
        }
        let Some(d) = self.m.tick() else {
            self.complete = false;
            return;
        };
        let tokens: usize = work.iter().map(|w| w.tokens).sum();
        if tokens == 0 {
            self.m.totals.overhead_j += d;
            return;
        }
        for w in work {
            let share = d * w.tokens as f64 / tokens as f64;
            if w.prefill {
                self.m.totals.prefill_j += share;
            } else {
                self.m.totals.decode_j += share;
            }
            if let Some(s) = self.seqs.get_mut(w.seq) {
                if w.prefill {
                    s.prefill_j += share;
                } else {
                    s.decode_j += share;
                }
            }
        }
    }
}

impl BatchMeter<'_> {
    /// End the batch: each sequence's measured energy, or `None` for every
    /// sequence when a step of the batch was not measured.
    pub fn finish(self) -> Vec<Option<MeasuredEnergy>> {
        if let Some(d) = self.m.tick() {
            self.m.totals.overhead_j += d;
        }
        let meter = self.m.name();
        self.seqs
            .iter()
            .map(|s| {
                self.complete.then(|| MeasuredEnergy {
                    meter: meter.clone(),
                    prefill_j: s.prefill_j,
                    decode_j: s.decode_j,
                    prefill_tokens: s.prefill_tokens,
                    decode_tokens: s.decode_tokens,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::MeterError;
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A meter whose readings a test scripts: each read pops the next one
    /// (`Err` = a failed read).
    struct Scripted(Arc<Mutex<Vec<Result<f64, &'static str>>>>);

    impl EnergyMeter for Scripted {
        fn name(&self) -> String {
            "scripted".into()
        }
        fn joules(&mut self) -> Result<f64, MeterError> {
            let mut v = self.0.lock().unwrap();
            assert!(!v.is_empty(), "more reads than scripted");
            v.remove(0).map_err(|m| MeterError {
                meter: "scripted".into(),
                message: m.into(),
            })
        }
    }

    fn metering(readings: Vec<Result<f64, &'static str>>) -> Metering {
        Metering::new(Box::new(Scripted(Arc::new(Mutex::new(readings)))))
    }

    fn w(seq: usize, tokens: usize, prefill: bool) -> StepWork {
        StepWork {
            seq,
            tokens,
            prefill,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn uneven_batch_is_split_by_tokens_prefill_and_decode_apart() {
        // Reads: open 0; batch start 10 (idle 10); step 1 before 11 (overhead 1),
        // after 111 (100 J); step 2 before 112, after 142 (30 J);
        // step 3 before 143, after 153 (10 J); finish 160 (overhead 7).
        let mut m = metering(vec![
            Ok(0.0),
            Ok(10.0),
            Ok(11.0),
            Ok(111.0),
            Ok(112.0),
            Ok(142.0),
            Ok(143.0),
            Ok(153.0),
            Ok(160.0),
        ]);
        let mut b = m.begin_batch(3);
        // Step 1: seq 0 prefills 30 tokens, seq 1 prefills 50, seq 2 prefills 20.
        b.before_step();
        b.after_step(&[w(0, 30, true), w(1, 50, true), w(2, 20, true)], 0.0);
        // Step 2: seq 0 decodes, seq 1 feeds a second prompt piece of 4, seq 2 decodes.
        b.before_step();
        b.after_step(&[w(0, 1, false), w(1, 4, true), w(2, 1, false)], 0.0);
        // Step 3: seq 1 alone decodes.
        b.before_step();
        b.after_step(&[w(1, 1, false)], 0.0);
        let e = b.finish();
        let e: Vec<MeasuredEnergy> = e.into_iter().map(|x| x.unwrap()).collect();
        assert!(close(e[0].prefill_j, 30.0) && close(e[0].decode_j, 5.0));
        assert!(close(e[1].prefill_j, 50.0 + 20.0) && close(e[1].decode_j, 10.0));
        assert!(close(e[2].prefill_j, 20.0) && close(e[2].decode_j, 5.0));
        assert_eq!((e[1].prefill_tokens, e[1].decode_tokens), (54, 1));
        assert_eq!((e[0].prefill_tokens, e[0].decode_tokens), (30, 1));
        assert_eq!(e[0].meter, "scripted");
        let t = &m.totals;
        assert!(close(t.idle_j, 10.0));
        assert!(close(t.overhead_j, 1.0 + 1.0 + 1.0 + 7.0));
        assert!(close(t.prefill_j, 120.0) && close(t.decode_j, 20.0));
        assert!(close(t.total_j(), 160.0));
        assert_eq!((t.steps, t.batches, t.failed_reads), (3, 1, 0));
        assert_eq!((t.prefill_tokens, t.decode_tokens), (104, 3));
        // The calls' joules add up to what the steps measured.
        let calls: f64 = e.iter().map(|x| x.joules()).sum();
        assert!(close(calls, t.prefill_j + t.decode_j));
    }

    #[test]
    fn a_read_failing_mid_batch_leaves_its_calls_unmeasured_and_the_next_batch_measured() {
        let mut m = metering(vec![
            Ok(0.0),
            // Batch 1: start, step 1 (good), step 2 after-read fails, finish.
            Ok(5.0),
            Ok(5.0),
            Ok(25.0),
            Ok(26.0),
            Err("counter gone"),
            Ok(40.0),
            // Batch 2: all good.
            Ok(41.0),
            Ok(41.0),
            Ok(51.0),
            Ok(52.0),
        ]);
        let mut b = m.begin_batch(2);
        b.before_step();
        b.after_step(&[w(0, 1, true), w(1, 3, true)], 0.0);
        b.before_step();
        b.after_step(&[w(0, 1, false), w(1, 1, false)], 0.0);
        let e = b.finish();
        assert_eq!(e, vec![None, None]);
        assert_eq!(m.totals.failed_reads, 1);
        assert_eq!(
            m.totals.last_error.as_deref(),
            Some("energy meter `scripted`: counter gone")
        );
        // 26 → 40 spans the failed read: unaccounted, not attributed.
        assert!(close(m.totals.unaccounted_j, 14.0));
        let mut b = m.begin_batch(1);
        b.before_step();
        b.after_step(&[w(0, 7, true)], 0.0);
        let e = b.finish();
        let e = e[0].as_ref().unwrap();
        assert!(close(e.prefill_j, 10.0) && close(e.decode_j, 0.0));
        let t = &m.totals;
        assert!(close(t.idle_j, 5.0 + 1.0));
        assert!(close(t.prefill_j, 20.0 + 10.0));
        assert!(close(t.total_j(), 52.0), "{}", t.total_j());
    }

    #[test]
    fn a_meter_that_never_reads_measures_nothing() {
        let mut m = metering(vec![Err("no"), Err("no"), Err("no"), Err("no"), Err("no")]);
        let mut b = m.begin_batch(1);
        b.before_step();
        b.after_step(&[w(0, 3, true)], 0.0);
        assert_eq!(b.finish(), vec![None]);
        assert_eq!(m.totals.total_j(), 0.0);
        assert_eq!(m.totals.failed_reads, 5);
    }

    #[test]
    fn wrapping_rapl_counter_attributes_across_the_wrap() {
        // A RAPL zone that wraps at 1 000 000 µJ mid-step: the step still
        // gets the 0.3 J it consumed.
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("intel-rapl:0");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("name"), "package-0\n").unwrap();
        std::fs::write(d.join("max_energy_range_uj"), "1000000\n").unwrap();
        std::fs::write(d.join("energy_uj"), "800000\n").unwrap();
        let meter = super::super::rapl::RaplMeter::open(t.path()).unwrap();
        let mut m = Metering::new(Box::new(meter));
        let mut b = m.begin_batch(2);
        b.before_step();
        std::fs::write(d.join("energy_uj"), "100000\n").unwrap();
        b.after_step(&[w(0, 1, false), w(1, 2, false)], 0.0);
        let e = b.finish();
        let e0 = e[0].as_ref().unwrap();
        let e1 = e[1].as_ref().unwrap();
        assert!(close(e0.decode_j, 0.1) && close(e1.decode_j, 0.2), "{e:?}");
        assert_eq!(e0.meter, "rapl");
    }
}
