//! Model calls watched on their way through a backend, and the round, cell
//! and race lines made from them.
//!
//! [`Watched`] wraps any [`Backend`] (and its [`StepBackend`] when it has
//! one) and tells a [`Tracker`] each request asked and each answer given;
//! it forwards every call unchanged, in the same order, so what is played
//! and recorded is what the bare backend would give. The [`Tracker`] counts
//! calls and generated tokens per phase (the request's `tag`) and per unit
//! of work (a round of one run, a cell of a sweep, a race), and shows them:
//! a bar with the phase, its calls done of asked, tokens, tokens/s and the
//! time left on a terminal; one [`format::UnitLine`] per finished unit
//! otherwise, and a line at least every [`HEARTBEAT`] from the moment play
//! starts (a background ticker, so also while the first call runs).
//!
//! The time left goes by the measured pace: the units done in this process
//! plus the share of the unit under way that its answered calls make (by
//! the calls a finished unit took on average), over the time since play
//! started; once half the work is done the estimate never grows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
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
    /// Units done before this process (a resumed run's kept rounds): not
    /// part of the measured pace.
    base: u64,
    running: u64,
    ends: Ends,
    /// Plain lines for units closer together than this are left out (races
    /// finish by the hundred); the last unit always has its line.
    every: Duration,
    /// The longest a plain line waits while play goes on.
    heartbeat: Duration,
    bar: Option<ProgressBar>,
    /// When the work started: when the tracker was made, or when the
    /// backend's memory plan (which loads the models) returned.
    started: Instant,
    /// Play started (the ticker's lines are due from here).
    playing: bool,
    /// The tracker finished (the ticker stops).
    finished: bool,
    unit_started: Option<Instant>,
    unit_calls: u64,
    unit_tokens: u64,
    all_calls: u64,
    all_tokens: u64,
    /// Model calls asked so far (the bar shows tokens from the first).
    all_asked: u64,
    /// Tokens sampled so far by the calls under way.
    live_tokens: u64,
    /// Calls of the units finished in this process, and how many units.
    finished_calls: u64,
    finished_units: u64,
    /// The latest estimate of the time left, once half the work was done.
    cap: Option<Duration>,
    /// The latest phase asked for, and per phase (asked, answered) in this unit.
    phase: String,
    phases: BTreeMap<String, (u64, u64)>,
    last_line: Instant,
    /// When the latest unit ended (the start of the next, for rounds).
    previous_end: Instant,
    /// Lines kept instead of printed (tests).
    captured: Option<Vec<String>>,
    /// The signal that interrupted the process, if one did
    /// ([`crate::interrupt::requested`]; tests give their own).
    interrupted: fn() -> Option<i32>,
}

/// Counts calls, tokens and finished units, and shows them. Cheap to clone;
/// the clones share one count (a run's round callback and its backend
/// wrapper hold one each; a sweep's worker threads share one).
#[derive(Clone)]
pub struct Tracker(Arc<Mutex<State>>);

impl Tracker {
    fn new(mode: Mode, unit: &'static str, total: u64, ends: Ends, every: Duration) -> Tracker {
        Tracker::with_heartbeat(mode, unit, total, ends, every, HEARTBEAT, false)
    }

    fn with_heartbeat(
        mode: Mode,
        unit: &'static str,
        total: u64,
        ends: Ends,
        every: Duration,
        heartbeat: Duration,
        capture: bool,
    ) -> Tracker {
        let t = Tracker(Arc::new(Mutex::new(State {
            mode,
            unit,
            total,
            done: 0,
            base: 0,
            running: 0,
            ends,
            every,
            heartbeat,
            bar: None,
            started: Instant::now(),
            playing: false,
            finished: false,
            unit_started: None,
            unit_calls: 0,
            unit_tokens: 0,
            all_calls: 0,
            all_tokens: 0,
            all_asked: 0,
            live_tokens: 0,
            finished_calls: 0,
            finished_units: 0,
            interrupted: crate::interrupt::requested,
            cap: None,
            phase: String::new(),
            phases: BTreeMap::new(),
            last_line: Instant::now(),
            previous_end: Instant::now(),
            captured: capture.then(Vec::new),
        })));
        if mode != Mode::Off {
            ticker(Arc::downgrade(&t.0));
        }
        t
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
            s.all_asked += 1;
            s.playing = true;
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
        });
    }

    /// The calls under way sampled `tokens` so far (a stepwise backend
    /// says so after each step): counted with the tokens from now, until
    /// the calls return with their own counts.
    pub fn sampling(&self, tokens: u64) {
        self.with(|s| {
            if s.live_tokens != tokens {
                s.live_tokens = tokens;
                s.redraw();
            }
        });
    }

    /// A unit (a sweep cell) started; several may run at once.
    pub fn unit_started(&self) {
        self.with(|s| {
            s.unit_started.get_or_insert_with(Instant::now);
            s.running += 1;
            s.playing = true;
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
        self.with(|s| s.print(text));
    }

    /// A resumed run: `kept` rounds were done before this process; the
    /// count starts there and the pace is measured from here.
    pub fn resumed(&self, kept: u64) {
        self.with(|s| {
            s.done = kept;
            s.base = kept;
            s.started = Instant::now();
            s.previous_end = s.started;
        });
    }

    /// Everything finished: the bar goes, the ticker stops.
    pub fn finish(&self) {
        self.with(|s| {
            s.finished = true;
            if let Some(b) = s.bar.take() {
                b.finish_and_clear();
            }
        });
    }

    /// The models are loaded and play starts: the clock of the estimate
    /// starts here, so loading is not taken for the pace of play.
    fn play_starts(&self) {
        self.with(|s| {
            if s.done == s.base && s.all_calls == 0 {
                s.started = Instant::now();
                s.previous_end = s.started;
                s.last_line = s.started;
            }
            s.playing = true;
        });
    }

    /// A run on the driver ended. After SIGINT or SIGTERM the driver ends
    /// every unfinished run unplayed: those are not units done (the line
    /// would say "all done").
    fn session_ended(&self) {
        self.with(|s| {
            if s.ends == Ends::Session && (s.interrupted)().is_none() {
                s.close_unit(None, None);
            }
        });
    }
}

/// Every second, while the tracker lives and is not finished: a plain line
/// when none came for a heartbeat since play started, or a fresh bar.
fn ticker(state: Weak<Mutex<State>>) {
    let spawned = std::thread::Builder::new()
        .name("progress".into())
        .spawn(move || loop {
            let period = match state.upgrade() {
                Some(s) => match s.lock() {
                    Ok(s) => {
                        (s.heartbeat / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
                    }
                    Err(_) => return,
                },
                None => return,
            };
            std::thread::sleep(period);
            let Some(s) = state.upgrade() else { return };
            let Ok(mut s) = s.lock() else { return };
            if s.finished {
                return;
            }
            s.tick();
        });
    // Without a thread there are still the units' own lines.
    let _ = spawned;
}

impl State {
    /// Print a line: plainly, above the bar, kept (tests) or not at all.
    fn print(&mut self, text: &str) {
        if let Some(c) = &mut self.captured {
            c.push(text.to_string());
            return;
        }
        line(self.mode, self.bar.as_ref(), text);
    }

    fn tick(&mut self) {
        match self.mode {
            Mode::Plain if self.playing && self.last_line.elapsed() >= self.heartbeat => {
                self.last_line = Instant::now();
                let h = self.heartbeat_line();
                self.print(&h);
            }
            Mode::Bars => self.redraw(),
            _ => {}
        }
    }

    /// The share of the unit under way its answered calls make, by the
    /// calls a unit finished here took on average (rounds only; at most 0.9).
    fn partial(&self) -> f64 {
        if self.unit != "round" || self.finished_units == 0 || self.finished_calls == 0 {
            return 0.0;
        }
        let per_unit = self.finished_calls as f64 / self.finished_units as f64;
        (self.unit_calls as f64 / per_unit).min(0.9)
    }

    /// The time left at the measured pace; never more than the estimate
    /// before once half the work is done.
    fn left(&mut self) -> Option<Duration> {
        let partial = self.partial();
        let worked = (self.done - self.base.min(self.done)) as f64 + partial;
        let remaining = self.total.saturating_sub(self.done) as f64 - partial;
        let left = format::eta_at_pace(worked, remaining, self.started.elapsed())?;
        if (self.done as f64 + partial) * 2.0 < self.total as f64 {
            return Some(left);
        }
        let left = self.cap.map_or(left, |c| c.min(left));
        self.cap = Some(left);
        Some(left)
    }

    fn all(&self) -> format::Tally {
        format::Tally {
            calls: self.all_calls,
            tokens: self.all_tokens + self.live_tokens,
            took: self.started.elapsed(),
        }
    }

    fn close_unit(&mut self, name: Option<&str>, took: Option<Duration>) {
        let now = Instant::now();
        self.done += 1;
        self.running = self.running.saturating_sub(1);
        // A round or a race: since the previous one ended; a cell: since it
        // started (cells overlap).
        let since = match self.unit {
            "cell" => self.unit_started.unwrap_or(self.previous_end),
            _ => self.previous_end,
        };
        let took = took.unwrap_or(now - since);
        let pending = self.total.saturating_sub(self.done + self.running);
        self.finished_units += 1;
        self.finished_calls += self.unit_calls;
        // The unit's calls are now counted among the finished ones.
        let (unit_calls, unit_tokens) = (self.unit_calls, self.unit_tokens);
        self.unit_calls = 0;
        let left = self.left();
        let text = format::UnitLine {
            unit: self.unit,
            done: self.done,
            total: self.total,
            name,
            this: (self.unit == "round").then_some(format::Tally {
                calls: unit_calls,
                tokens: unit_tokens,
                took,
            }),
            all: self.all(),
            took,
            running_pending: (self.unit == "cell").then_some((self.running, pending)),
            left,
        }
        .render();
        match self.mode {
            Mode::Plain => {
                if self.done >= self.total || self.last_line.elapsed() >= self.every {
                    self.last_line = now;
                    self.print(&text);
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
        self.unit_tokens = 0;
        // A round's calls are all answered when it ends; races and cells
        // overlap, so their phases keep counting.
        if self.unit == "round" {
            self.phases.clear();
        }
    }

    /// Where the work stands, for the bar and the heartbeat line: the
    /// phase's calls, this round's and every call's counts from the first
    /// call asked, the units running, the time left.
    fn status(&mut self) -> String {
        let mut parts = Vec::new();
        if let Some((asked, answered)) = self.phases.get(&self.phase) {
            parts.push(format!("{} {answered}/{asked} calls", self.phase));
        }
        if self.all_asked > 0 {
            if self.unit == "round" {
                let this = format::Tally {
                    calls: self.unit_calls,
                    tokens: self.unit_tokens + self.live_tokens,
                    took: self.previous_end.elapsed(),
                };
                parts.push(this.render("this round"));
            }
            parts.push(self.all().render("in all"));
        }
        if self.unit == "cell" {
            let pending = self.total.saturating_sub(self.done + self.running);
            parts.push(format!("{} running, {pending} pending", self.running));
        }
        let left = self.left();
        parts.push(format::left_words(left));
        parts.join("; ")
    }

    /// The plain line while a unit runs: `round 2/30 under way: vote 12/20
    /// calls; this round 12 calls, 410 tokens, 38.2 tok/s; in all 42 calls,
    /// 1,610 tokens, 36.0 tok/s; eta 4m10s`.
    fn heartbeat_line(&mut self) -> String {
        let status = self.status();
        format!(
            "{} {}/{} under way: {status}",
            self.unit,
            (self.done + 1).min(self.total.max(1)),
            self.total,
        )
    }

    fn redraw(&mut self) {
        if self.mode != Mode::Bars || self.captured.is_some() {
            return;
        }
        if self.bar.is_none() {
            let b = super::bar_with(
                "{spinner} {prefix} {pos}/{len} [{bar:20}] {elapsed} {msg}",
                self.total,
            );
            b.set_prefix(format!("{}s", self.unit));
            b.set_position(self.done);
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

    fn model_origins(&self, models: &[&str]) -> Vec<crate::backend::ModelOrigin> {
        self.inner.model_origins(models)
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
        // The calls that returned are no longer under way: their tokens
        // count once, as answered.
        let sampling = s.sampling();
        self.tracker.sampling(sampling);
        for a in &answers {
            self.tracker.answered(&a.request, &a.result);
        }
        answers
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn sampling(&mut self) -> u64 {
        self.inner.stepwise().map_or(0, |s| s.sampling())
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
                s.status()
                    .starts_with("decide 1/1 calls; this round 3 calls, 21 tokens, "),
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

    #[test]
    fn sessions_ended_by_an_interruption_are_not_units_done() {
        let mut inner = Echo;
        let races = Tracker::sessions(Mode::Off, "race", 2, Duration::ZERO);
        races.with(|s| s.interrupted = || Some(15));
        let mut watched = Watched::new(&mut inner, races.clone());
        watched.end_session(1);
        watched.end_session(2);
        races.with(|s| assert_eq!(s.done, 0));
    }

    /// Answers like [`Echo`] after `0` of sleep.
    struct Slow(Duration);
    impl Backend for Slow {
        fn name(&self) -> String {
            "slow".into()
        }
        fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
            std::thread::sleep(self.0);
            Echo.generate(batch)
        }
    }

    fn captured(t: &Tracker) -> Vec<String> {
        t.with(|s| s.captured.clone().unwrap_or_default())
            .unwrap_or_default()
    }

    #[test]
    fn a_plain_line_comes_every_heartbeat_while_the_first_call_runs() {
        let heartbeat = Duration::from_millis(40);
        let t = Tracker::with_heartbeat(
            Mode::Plain,
            "round",
            3,
            Ends::Caller,
            Duration::ZERO,
            heartbeat,
            true,
        );
        let mut inner = Slow(Duration::from_millis(400));
        let mut watched = Watched::new(&mut inner, t.clone());
        // The memory plan (model loading) is over: play starts.
        watched.plan_memory(&MemoryDemand::default()).unwrap();
        watched.generate(&[request("m", "vote", "a")]);
        let lines = captured(&t);
        // One a heartbeat, give or take a loaded machine's scheduling.
        assert!(lines.len() >= 3, "{lines:?}");
        for l in &lines {
            assert!(
                l.starts_with(
                    "round 1/3 under way: vote 0/1 calls; this round 0 calls, 0 tokens, "
                ),
                "{l}"
            );
            assert!(
                l.contains("; in all 0 calls, 0 tokens, ") && l.ends_with("; eta ?"),
                "{l}"
            );
        }
        t.finish();
    }

    #[test]
    fn the_time_left_goes_by_the_calls_answered_and_never_grows_past_half_way() {
        let t = Tracker::with_heartbeat(
            Mode::Plain,
            "round",
            4,
            Ends::Caller,
            Duration::ZERO,
            Duration::from_secs(3600),
            true,
        );
        let mut inner = Echo;
        let mut watched = Watched::new(&mut inner, t.clone());
        let calls = |w: &mut Watched, n: usize| {
            for _ in 0..n {
                w.generate(&[request("m", "vote", "a")]);
            }
        };
        // Round 1: 4 calls; then half of round 2's.
        calls(&mut watched, 4);
        t.with(|s| s.started = Instant::now() - Duration::from_secs(10));
        t.unit_done(None, None);
        calls(&mut watched, 2);
        t.with(|s| {
            s.started = Instant::now() - Duration::from_secs(15);
            // 1.5 rounds in 15 s: 2.5 rounds left at 10 s each.
            let left = s.left().unwrap().as_secs_f64();
            assert!((left - 25.0).abs() < 0.5, "{left}");
        });
        // Half way and beyond: a slower pace does not make it grow.
        calls(&mut watched, 2);
        t.with(|s| {
            s.started = Instant::now() - Duration::from_secs(20);
            s.done = 2;
            s.unit_calls = 0;
            let first = s.left().unwrap();
            s.started = Instant::now() - Duration::from_secs(60);
            assert!(s.left().unwrap() <= first);
        });
        let last = captured(&t).pop().unwrap_or_default();
        assert!(
            last.starts_with("round 1/4: this round 4 calls, 28 tokens, "),
            "{last}"
        );
        assert!(last.contains("; in all 4 calls, 28 tokens, "), "{last}");
        t.finish();
    }

    #[test]
    fn tokens_and_their_rate_show_from_the_first_call_asked() {
        let t = Tracker::rounds(Mode::Off, 2);
        t.asked(&request("m", "vote", "a"));
        t.with(|s| {
            let status = s.status();
            assert!(
                status.starts_with("vote 0/1 calls; this round 0 calls, 0 tokens, "),
                "{status}"
            );
        });
        // A stepwise backend says what the call under way sampled so far.
        t.sampling(12);
        t.with(|s| {
            let status = s.status();
            assert!(status.contains("; in all 0 calls, 12 tokens, "), "{status}");
            assert!(!status.contains("- tok/s"), "{status}");
        });
        // Answered: its own count replaces what was sampled.
        t.sampling(0);
        let mut echo = Echo;
        let answer = echo.generate(&[request("m", "vote", "a")]).remove(0);
        t.answered(&request("m", "vote", "a"), &answer);
        t.with(|s| assert!(s.status().contains("; in all 1 calls, 7 tokens, ")));
    }
}
