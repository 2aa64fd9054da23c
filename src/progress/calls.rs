//! Model calls watched on their way through a backend, and the round, cell
//! and race lines made from them.
//!
//! [`Watched`] wraps any [`Backend`] (and its [`StepBackend`] when it has
//! one) and tells a [`Tracker`] each request asked and each answer given;
//! it forwards every call unchanged, in the same order, so what is played
//! and recorded is what the bare backend would give. The [`Tracker`] counts
//! calls and generated tokens per phase (the request's `tag`) and per unit
//! of work (a round of one run, a cell of a sweep, a race), and shows them:
//! a bar with the phase, its calls done of asked, tokens/s and the time left
//! on a terminal; one [`format::UnitLine`] per finished unit otherwise, and
//! a line at least every [`HEARTBEAT`] while a long unit runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::{format, line, Mode, HEARTBEAT};
use crate::backend::{
    Answer, Backend, KernelRecord, MemoryDemand, MemoryReport, ModelRequest, ModelResult,
    StepBackend, SCRIPTED_PREFIX,
};

/// What the tracker counts as one unit of work, and what ends one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// The caller says ([`Tracker::unit_done`]): a round, a sweep cell.
    Caller,
    /// Each finished run on the driver ([`Backend::end_session`]): a race.
    Session,
}

struct State {
    mode: Mode,
    unit: &'static str,
    total: u64,
    done: u64,
    running: u64,
    ends: Ends,
    /// Plain lines for units closer together than this are left out (races
    /// finish by the hundred); the last unit always has its line.
    every: Duration,
    bar: Option<ProgressBar>,
    /// When the work started: when the tracker was made, or when the
    /// backend's memory plan (which loads the models) returned.
    started: Instant,
    unit_started: Option<Instant>,
    unit_calls: u64,
    unit_tokens: u64,
    all_calls: u64,
    all_tokens: u64,
    /// The latest phase asked for, and per phase (asked, answered) in this unit.
    phase: String,
    phases: BTreeMap<String, (u64, u64)>,
    last_line: Instant,
    /// When the latest unit ended (the start of the next, for rounds).
    previous_end: Instant,
}

/// Counts calls, tokens and finished units, and shows them. Cheap to clone;
/// the clones share one count (a run's round callback and its backend
/// wrapper hold one each; a sweep's worker threads share one).
#[derive(Clone)]
pub struct Tracker(Arc<Mutex<State>>);

impl Tracker {
    fn new(mode: Mode, unit: &'static str, total: u64, ends: Ends, every: Duration) -> Tracker {
        Tracker(Arc::new(Mutex::new(State {
            mode,
            unit,
            total,
            done: 0,
            running: 0,
            ends,
            every,
            bar: None,
            started: Instant::now(),
            unit_started: None,
            unit_calls: 0,
            unit_tokens: 0,
            all_calls: 0,
            all_tokens: 0,
            phase: String::new(),
            phases: BTreeMap::new(),
            last_line: Instant::now(),
            previous_end: Instant::now(),
        })))
    }

    /// The rounds of one run (at most `max_rounds`), each ended by
    /// [`Tracker::unit_done`] from the society's round callback.
    pub fn rounds(mode: Mode, max_rounds: u32) -> Tracker {
        Tracker::new(
            mode,
            "round",
            max_rounds as u64,
            Ends::Caller,
            Duration::ZERO,
        )
    }

    /// The cells of a sweep, each started and ended by the sweep.
    pub fn cells(mode: Mode, cells: usize) -> Tracker {
        Tracker::new(mode, "cell", cells as u64, Ends::Caller, Duration::ZERO)
    }

    /// `total` runs on one driver (races, audit probes): a unit ends when the
    /// driver ends its session; plain lines at most one per `every`.
    pub fn sessions(mode: Mode, unit: &'static str, total: usize, every: Duration) -> Tracker {
        Tracker::new(mode, unit, total as u64, Ends::Session, every)
    }

    /// One audit: a single run of many probe calls (the bar and the
    /// heartbeat show the calls done of asked).
    pub fn audit(mode: Mode) -> Tracker {
        Tracker::sessions(mode, "audit", 1, Duration::ZERO)
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        self.0.lock().ok().map(|mut s| f(&mut s))
    }

    /// A request was sent to the backend. Scripted agents' calls are not
    /// model calls and are not counted.
    pub fn asked(&self, request: &ModelRequest) {
        if request.model.starts_with(SCRIPTED_PREFIX) {
            return;
        }
        self.with(|s| {
            if s.phase != request.tag {
                s.phase = request.tag.clone();
            }
            s.phases.entry(request.tag.clone()).or_default().0 += 1;
            s.redraw();
        });
    }

    /// A request came back (answered or failed).
    pub fn answered(&self, request: &ModelRequest, result: &ModelResult) {
        if request.model.starts_with(SCRIPTED_PREFIX) {
            return;
        }
        let tag = request.tag.as_str();
        let tokens = match result {
            Ok(r) => r.usage.generated_tokens,
            Err(e) => e.partial_usage.map_or(0, |u| u.generated_tokens),
        } as u64;
        self.with(|s| {
            s.unit_calls += 1;
            s.all_calls += 1;
            s.unit_tokens += tokens;
            s.all_tokens += tokens;
            if let Some(p) = s.phases.get_mut(tag) {
                p.1 += 1;
            }
            s.redraw();
            if s.mode == Mode::Plain && s.last_line.elapsed() >= HEARTBEAT {
                s.last_line = Instant::now();
                eprintln!("{}", s.heartbeat());
            }
        });
    }

    /// A unit (a sweep cell) started; several may run at once.
    pub fn unit_started(&self) {
        self.with(|s| {
            s.unit_started.get_or_insert_with(Instant::now);
            s.running += 1;
            s.redraw();
        });
    }

    /// A unit finished: its line (plain) or the bar moves. `name` says which
    /// (a cell's folder); `took` is its own time when the caller measured it
    /// (a cell on a worker thread), else the time since the previous unit.
    pub fn unit_done(&self, name: Option<&str>, took: Option<Duration>) {
        self.with(|s| s.close_unit(name, took));
    }

    /// Print a line above the bar (or plainly), e.g. a meter's summary.
    pub fn note(&self, text: &str) {
        self.with(|s| line(s.mode, s.bar.as_ref(), text));
    }

    /// Everything finished: the bar goes.
    pub fn finish(&self) {
        self.with(|s| {
            if let Some(b) = s.bar.take() {
                b.finish_and_clear();
            }
        });
    }

    /// The models are loaded and play starts: the clock of the estimate
    /// starts here, so loading is not taken for the pace of play.
    fn play_starts(&self) {
        self.with(|s| {
            if s.done == 0 && s.all_calls == 0 {
                s.started = Instant::now();
                s.previous_end = s.started;
            }
        });
    }

    fn session_ended(&self) {
        self.with(|s| {
            if s.ends == Ends::Session {
                s.close_unit(None, None);
            }
        });
    }
}

impl State {
    fn close_unit(&mut self, name: Option<&str>, took: Option<Duration>) {
        let now = Instant::now();
        self.done += 1;
        self.running = self.running.saturating_sub(1);
        let started = self.started;
        // A round or a race: since the previous one ended; a cell: since it
        // started (cells overlap).
        let since = match self.unit {
            "cell" => self.unit_started.unwrap_or(self.previous_end),
            _ => self.previous_end,
        };
        let took = took.unwrap_or(now - since);
        let pending = self.total.saturating_sub(self.done + self.running);
        let text = format::UnitLine {
            unit: self.unit,
            done: self.done,
            total: self.total,
            name,
            calls: self.unit_calls,
            tokens: self.unit_tokens,
            took,
            elapsed: now - started,
            running_pending: (self.unit == "cell").then_some((self.running, pending)),
        }
        .render();
        match self.mode {
            Mode::Plain => {
                if self.done >= self.total || self.last_line.elapsed() >= self.every {
                    self.last_line = now;
                    eprintln!("{text}");
                }
            }
            Mode::Bars => {
                self.redraw();
                if let Some(b) = &self.bar {
                    b.set_position(self.done);
                }
            }
            Mode::Off => {}
        }
        self.previous_end = now;
        self.unit_started = (self.running > 0).then_some(now);
        self.unit_calls = 0;
        self.unit_tokens = 0;
        // A round's calls are all answered when it ends; races and cells
        // overlap, so their phases keep counting.
        if self.unit == "round" {
            self.phases.clear();
        }
    }

    /// Where the work stands, for the bar and the heartbeat line.
    fn status(&self) -> String {
        let elapsed = self.started.elapsed();
        let mut parts = Vec::new();
        if let Some((asked, answered)) = self.phases.get(&self.phase) {
            parts.push(format!("{} {answered}/{asked} calls", self.phase));
        }
        if self.all_calls > 0 {
            parts.push(format!(
                "{} tokens, {}",
                format::count(self.all_tokens),
                format::rate(self.all_tokens as f64, elapsed, "tok")
            ));
        }
        if self.unit == "cell" {
            let pending = self.total.saturating_sub(self.done + self.running);
            parts.push(format!("{} running, {pending} pending", self.running));
        }
        parts.push(format::eta_words(self.done, self.total, elapsed));
        parts.join(", ")
    }

    /// The plain line while a long unit runs: `round 2/30 under way: vote
    /// 12/20 calls, 4,210 tokens, 38.2 tok/s, eta ?`.
    fn heartbeat(&self) -> String {
        format!(
            "{} {}/{} under way: {}",
            self.unit,
            (self.done + 1).min(self.total.max(1)),
            self.total,
            self.status()
        )
    }

    fn redraw(&mut self) {
        if self.mode != Mode::Bars {
            return;
        }
        if self.bar.is_none() {
            let b = super::bar_with(
                "{spinner} {prefix} {pos}/{len} [{bar:20}] {elapsed} {msg}",
                self.total,
            );
            b.set_prefix(format!("{}s", self.unit));
            b.enable_steady_tick(Duration::from_millis(200));
            self.bar = Some(b);
        }
        let status = self.status();
        if let Some(b) = &self.bar {
            b.set_message(status);
        }
    }
}

/// A backend that tells a [`Tracker`] about every request and answer going
/// through it and changes nothing: same calls, same order, same answers.
pub struct Watched<'b> {
    inner: &'b mut dyn Backend,
    tracker: Tracker,
    /// Requests submitted to the inner stepper and not yet handed back.
    in_flight: usize,
}

impl<'b> Watched<'b> {
    pub fn new(inner: &'b mut dyn Backend, tracker: Tracker) -> Watched<'b> {
        Watched {
            inner,
            tracker,
            in_flight: 0,
        }
    }
}

impl Backend for Watched<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        for r in batch {
            self.tracker.asked(r);
        }
        let answers = self.inner.generate(batch);
        for (r, a) in batch.iter().zip(&answers) {
            self.tracker.answered(r, a);
        }
        answers
    }

    fn batch_key(&self, model: &str) -> String {
        self.inner.batch_key(model)
    }

    fn unavailable(&self) -> Option<String> {
        self.inner.unavailable()
    }

    fn end_session(&mut self, session: u64) {
        self.inner.end_session(session);
        self.tracker.session_ended();
    }

    fn plan_memory(
        &mut self,
        demand: &MemoryDemand,
    ) -> anyhow::Result<Option<Box<dyn MemoryReport>>> {
        let plan = self.inner.plan_memory(demand);
        self.tracker.play_starts();
        plan
    }

    fn metering(&self) -> Option<crate::meter::attribution::MeterStatus> {
        self.inner.metering()
    }

    fn kernels(&self, models: &[&str]) -> Option<KernelRecord> {
        self.inner.kernels(models)
    }

    fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
        if self.inner.stepwise().is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl StepBackend for Watched<'_> {
    fn submit(&mut self, ticket: u64, request: ModelRequest) {
        if let Some(s) = self.inner.stepwise() {
            self.tracker.asked(&request);
            self.in_flight += 1;
            s.submit(ticket, request);
        }
    }

    fn step(&mut self) -> Vec<Answer> {
        let Some(s) = self.inner.stepwise() else {
            return Vec::new();
        };
        let answers = s.step();
        self.in_flight = self.in_flight.saturating_sub(answers.len());
        for a in &answers {
            self.tracker.answered(&a.request, &a.result);
        }
        answers
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agency::Driver;

    /// Answers `{}` at 7 generated tokens a call.
    struct Echo;
    impl Backend for Echo {
        fn name(&self) -> String {
            "echo".into()
        }
        fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
            batch
                .iter()
                .map(|_| {
                    Ok(crate::backend::ModelResponse {
                        text: "{}".into(),
                        thinking: String::new(),
                        usage: crate::backend::TokenUsage {
                            generated_tokens: 7,
                            charged_tokens: 7,
                            ..Default::default()
                        },
                        finish: crate::backend::FinishReason::Eos,
                        rendered_prompt: None,
                        latency_ms: 0.0,
                        count_source: None,
                        measured: None,
                    })
                })
                .collect()
        }
    }

    fn request(model: &str, tag: &str, agent: &str) -> ModelRequest {
        ModelRequest {
            model: model.into(),
            agent_id: agent.into(),
            session: 0,
            tag: tag.into(),
            messages: vec![],
            format: Default::default(),
            params: Default::default(),
            observation: serde_json::json!({}),
        }
    }

    #[test]
    fn a_watched_backend_answers_as_the_bare_one_and_counts_each_call() {
        let batch = vec![
            request("m", "vote", "a"),
            request("m", "vote", "b"),
            request("m", "decide", "a"),
            request("scripted:greedy", "decide", "c"),
        ];
        let want = Echo.generate(&batch);
        let mut inner = Echo;
        let tracker = Tracker::rounds(Mode::Off, 2);
        let mut watched = Watched::new(&mut inner, tracker.clone());
        assert_eq!(watched.generate(&batch), want);
        let tokens = 21;
        tracker.with(|s| {
            assert_eq!((s.unit_calls, s.unit_tokens), (3, tokens));
            assert_eq!(s.phase, "decide");
            assert_eq!(s.phases["vote"], (2, 2));
            assert!(
                s.status().starts_with("decide 1/1 calls, "),
                "{}",
                s.status()
            );
        });
        tracker.unit_done(None, None);
        tracker.with(|s| {
            assert_eq!((s.done, s.unit_calls, s.all_calls), (1, 0, 3));
            assert!(s.phases.is_empty());
        });
    }

    #[test]
    fn sessions_end_units_only_for_a_session_tracker() {
        let mut inner = Echo;
        let races = Tracker::sessions(Mode::Off, "race", 2, Duration::ZERO);
        let mut watched = Watched::new(&mut inner, races.clone());
        let mut driver: Driver<'_, ()> = Driver::new();
        for _ in 0..2 {
            driver.spawn(|agency| async move {
                agency
                    .call(request("m", "race.decide", "p1"))
                    .await
                    .map(|_| ())
                    .map_err(|e| anyhow::anyhow!("{}", e.message))
            });
        }
        let results = driver.run(&mut watched, |_| {});
        assert!(results.iter().all(|r| r.is_ok()));
        races.with(|s| assert_eq!((s.done, s.all_calls), (2, 2)));
        let rounds = Tracker::rounds(Mode::Off, 3);
        Watched::new(&mut inner, rounds.clone()).end_session(7);
        rounds.with(|s| assert_eq!(s.done, 0));
    }
}
