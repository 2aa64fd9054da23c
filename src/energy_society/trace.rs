//! The recorded workload of reference runs, replayed through a real model
//! backend (`joule bench trace`).
//!
//! A [`TraceBackend`] sits between the faithful engine replaying reference
//! runs ([`super::replay`]) and a real backend (Joule's engine or a server).
//! Every call the engine makes is answered with what the reference recorded,
//! so each run goes on exactly as it was recorded and every later prompt is
//! the recorded run's. Before that answer is delivered, the same request
//! goes to the real backend under the agent's roster model, changed only in
//! what makes it generate exactly the recorded number of tokens:
//! `max_tokens` = the recorded count (times `token_scale`, at least 1),
//! end-of-generation never sampled (`ignore_eos`), no stop strings, and free
//! text (the constrained-JSON grammar is off: it would end the answer where
//! its JSON closes, before the recorded length). Where the run's config sets
//! no truncation, the call samples as the reference's server did: Ollama's
//! default top-k 40 and top-p 0.9 ([`SERVED_TOP_K`], [`SERVED_TOP_P`]), sent
//! to every backend alike (llama-server would otherwise apply its own
//! top-k 40 while Joule's engine drew from the whole vocabulary, which on a
//! random-weight model's flat distribution means sorting all of it at every
//! token). The real answer's text is dropped; its counts and times are kept
//! ([`TraceCall`]).
//!
//! Concurrency is the engine's: the five agents of a phase ask together,
//! rounds follow in order, several runs share the driver. A backend with
//! continuous batching gets each call as soon as it is asked for
//! ([`StepBackend`]); others get each wave, all at once ([`Pace::Together`])
//! or one call at a time in run then roster order ([`Pace::OneAtATime`], the
//! reference's own pattern).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde::Serialize;

use crate::backend::{
    Answer, Backend, FinishReason, ModelRequest, ModelResult, OutputFormat, StepBackend,
};

use super::replay::ReplayBackend;

/// How a backend without continuous batching gets the calls of a wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pace {
    /// Every call of the wave at once (the server keeps every slot busy).
    Together,
    /// One call at a time, in run then roster order (the reference's way).
    OneAtATime,
}

/// One call sent to the real backend.
#[derive(Debug, Clone, Serialize)]
pub struct TraceCall {
    /// Index of the run (in the order the runs were added).
    pub run: usize,
    pub round: u32,
    pub phase: String,
    pub agent: String,
    pub model: String,
    /// Tokens asked for (`max_tokens`: the recorded count, scaled).
    pub requested: u32,
    /// Tokens the backend generated (0 for a failed call).
    pub generated: u32,
    pub prompt_tokens: u32,
    pub finish: Option<FinishReason>,
    /// Seconds from the start of the trace.
    pub start_s: f64,
    pub end_s: f64,
    pub error: Option<String>,
}

/// Calls waiting for the real backend (continuous batching).
struct Pending {
    request: ModelRequest,
    answer: ModelResult,
    call: usize,
}

/// Answers the engine from the record after the real backend generated the
/// recorded length (module doc).
pub struct TraceBackend<'a> {
    inner: &'a mut dyn Backend,
    /// Session → (run index, the run's recorded answers).
    runs: BTreeMap<u64, (usize, ReplayBackend)>,
    token_scale: f64,
    /// Calls of earlier rounds are answered from the record alone.
    first_round: u32,
    pace: Pace,
    t0: Instant,
    calls: Vec<TraceCall>,
    /// The requests sent to the real backend, kept when asked for (tests).
    sent: Option<Vec<ModelRequest>>,
    pending: HashMap<u64, Pending>,
    ready: Vec<Answer>,
    /// Past this instant the backend reports itself unavailable, so the
    /// driver stops every run (`bench trace --time-limit`).
    deadline: Option<Instant>,
}

/// Top-k of a traced call whose config sets none: Ollama's default, which
/// the reference runs were sampled with.
pub const SERVED_TOP_K: usize = 40;
/// Top-p of a traced call whose config sets none (Ollama's default).
pub const SERVED_TOP_P: f32 = 0.9;

/// `tokens` scaled by `scale`, at least 1 where `tokens` is not 0.
pub fn scaled(tokens: u32, scale: f64) -> u32 {
    if tokens == 0 {
        return 0;
    }
    ((tokens as f64 * scale).round() as u32).max(1)
}

impl<'a> TraceBackend<'a> {
    pub fn new(inner: &'a mut dyn Backend, token_scale: f64, first_round: u32, pace: Pace) -> Self {
        TraceBackend {
            inner,
            runs: BTreeMap::new(),
            token_scale,
            first_round,
            pace,
            t0: Instant::now(),
            calls: Vec::new(),
            sent: None,
            pending: HashMap::new(),
            ready: Vec::new(),
            deadline: None,
        }
    }

    /// Stop the runs at `deadline`: from then on the backend reports itself
    /// unavailable, the driver ends every run, and the calls in flight are
    /// left unanswered ([`Self::cut_calls`]).
    pub fn stop_at(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Whether the deadline of [`Self::stop_at`] passed.
    pub fn past_deadline(&self) -> bool {
        crate::backend::time_limit_passed(self.deadline).is_some()
    }

    /// Take out the calls sent to the real backend that it never answered
    /// (in flight when the runs stopped), leaving the answered ones.
    pub fn cut_calls(&mut self) -> Vec<TraceCall> {
        let (cut, kept): (Vec<TraceCall>, Vec<TraceCall>) = std::mem::take(&mut self.calls)
            .into_iter()
            .partition(|c| c.finish.is_none() && c.error.is_none());
        self.calls = kept;
        cut
    }

    /// The recorded answers of the run the driver runs as `session`.
    pub fn add_run(&mut self, session: u64, backend: ReplayBackend) {
        let index = self.runs.len();
        self.runs.insert(session, (index, backend));
    }

    /// Keep every request sent to the real backend ([`Self::sent`]).
    pub fn keep_requests(&mut self) {
        self.sent = Some(Vec::new());
    }

    /// Start the clock of the calls' times.
    pub fn start_clock(&mut self) {
        self.t0 = Instant::now();
    }

    pub fn calls(&self) -> &[TraceCall] {
        &self.calls
    }

    pub fn sent(&self) -> &[ModelRequest] {
        self.sent.as_deref().unwrap_or(&[])
    }

    /// Give back the runs' replay backends (session → backend), to report on.
    pub fn into_runs(self) -> BTreeMap<u64, ReplayBackend> {
        self.runs.into_iter().map(|(s, (_, b))| (s, b)).collect()
    }

    /// The recorded answer of `req` and, where the real backend must generate
    /// first, the request it gets and the index of its [`TraceCall`].
    fn prepare(&mut self, req: &ModelRequest) -> (ModelResult, Option<(ModelRequest, usize)>) {
        let Some((run, replay)) = self.runs.get_mut(&req.session) else {
            return (
                Err(crate::backend::BackendError {
                    model: req.model.clone(),
                    message: format!("no recorded run for session {}", req.session),
                    partial_usage: None,
                }),
                None,
            );
        };
        let run = *run;
        let answer = replay.answer(req);
        let round = req
            .observation
            .get("round")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0) as u32;
        let tokens = match &answer {
            Ok(a) if round >= self.first_round => {
                scaled(a.usage.generated_tokens, self.token_scale)
            }
            _ => 0,
        };
        if tokens == 0 {
            return (answer, None);
        }
        let mut fwd = req.clone();
        fwd.params.max_tokens = tokens;
        fwd.params.ignore_eos = true;
        fwd.params.top_k = fwd.params.top_k.or(Some(SERVED_TOP_K));
        fwd.params.top_p = fwd.params.top_p.or(Some(SERVED_TOP_P));
        fwd.params.stop.clear();
        fwd.format = OutputFormat::Text;
        if let Some(s) = self.sent.as_mut() {
            s.push(fwd.clone());
        }
        self.calls.push(TraceCall {
            run,
            round,
            phase: req.tag.clone(),
            agent: req.agent_id.clone(),
            model: req.model.clone(),
            requested: tokens,
            generated: 0,
            prompt_tokens: 0,
            finish: None,
            start_s: self.t0.elapsed().as_secs_f64(),
            end_s: 0.0,
            error: None,
        });
        (answer, Some((fwd, self.calls.len() - 1)))
    }

    /// Note the real backend's answer to call `i`.
    fn finish(&mut self, i: usize, result: &ModelResult) {
        let now = self.t0.elapsed().as_secs_f64();
        let Some(c) = self.calls.get_mut(i) else {
            return;
        };
        c.end_s = now;
        match result {
            Ok(r) => {
                c.generated = r.usage.generated_tokens;
                c.prompt_tokens = r.usage.prompt_tokens;
                c.finish = Some(r.finish);
            }
            Err(e) => c.error = Some(e.message.clone()),
        }
    }
}

impl Backend for TraceBackend<'_> {
    fn name(&self) -> String {
        format!("trace on {}", self.inner.name())
    }

    fn batch_key(&self, model: &str) -> String {
        match self.pace {
            // One batch per wave, so the calls go one at a time in run and roster order.
            Pace::OneAtATime => "trace".into(),
            Pace::Together => self.inner.batch_key(model),
        }
    }

    fn unavailable(&self) -> Option<String> {
        self.inner
            .unavailable()
            .or_else(|| crate::backend::time_limit_passed(self.deadline))
    }

    fn end_session(&mut self, session: u64) {
        self.inner.end_session(session)
    }

    fn plan_memory(
        &mut self,
        demand: &crate::backend::MemoryDemand,
    ) -> anyhow::Result<Option<Box<dyn crate::backend::MemoryReport>>> {
        self.inner.plan_memory(demand)
    }

    fn kernels(&self, models: &[&str]) -> Option<crate::backend::KernelRecord> {
        self.inner.kernels(models)
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        let mut answers = Vec::with_capacity(batch.len());
        let mut work: Vec<(usize, ModelRequest, usize)> = Vec::new();
        for (k, req) in batch.iter().enumerate() {
            let (answer, fwd) = self.prepare(req);
            answers.push(answer);
            if let Some((f, i)) = fwd {
                work.push((k, f, i));
            }
        }
        match self.pace {
            Pace::Together => {
                let reqs: Vec<ModelRequest> = work.iter().map(|(_, f, _)| f.clone()).collect();
                if !reqs.is_empty() {
                    let out = self.inner.generate(&reqs);
                    for ((_, _, i), r) in work.iter().zip(&out) {
                        self.finish(*i, r);
                    }
                }
            }
            Pace::OneAtATime => {
                work.sort_by(|a, b| {
                    (a.1.session, &a.1.agent_id, a.0).cmp(&(b.1.session, &b.1.agent_id, b.0))
                });
                for (_, f, i) in work {
                    let start = self.t0.elapsed().as_secs_f64();
                    if let Some(c) = self.calls.get_mut(i) {
                        c.start_s = start;
                    }
                    let out = self.inner.generate(std::slice::from_ref(&f));
                    if let Some(r) = out.first() {
                        self.finish(i, r);
                    }
                }
            }
        }
        answers
    }

    fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
        if self.pace == Pace::Together && self.inner.stepwise().is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl StepBackend for TraceBackend<'_> {
    fn submit(&mut self, ticket: u64, request: ModelRequest) {
        let (answer, fwd) = self.prepare(&request);
        match fwd {
            Some((f, call)) => match self.inner.stepwise() {
                Some(s) => {
                    s.submit(ticket, f);
                    self.pending.insert(
                        ticket,
                        Pending {
                            request,
                            answer,
                            call,
                        },
                    );
                }
                None => self.ready.push(Answer {
                    ticket,
                    request,
                    result: answer,
                }),
            },
            None => self.ready.push(Answer {
                ticket,
                request,
                result: answer,
            }),
        }
    }

    fn step(&mut self) -> Vec<Answer> {
        let mut out = std::mem::take(&mut self.ready);
        if self.pending.is_empty() {
            return out;
        }
        let done = match self.inner.stepwise() {
            Some(s) => s.step(),
            None => Vec::new(),
        };
        for a in done {
            if let Some(p) = self.pending.remove(&a.ticket) {
                self.finish(p.call, &a.result);
                out.push(Answer {
                    ticket: a.ticket,
                    request: p.request,
                    result: p.answer,
                });
            }
        }
        out
    }

    fn in_flight(&self) -> usize {
        self.ready.len() + self.pending.len()
    }
}

/// Calls, tokens and busy time of a group of calls (a model, a phase).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Rates {
    pub calls: usize,
    pub requested_tokens: u64,
    pub generated_tokens: u64,
    pub prompt_tokens: u64,
    /// Seconds during which at least one call of the group was in flight.
    pub busy_s: f64,
    /// Generated tokens per busy second.
    pub generated_tps: f64,
    /// Prompt tokens per busy second.
    pub prompt_tps: f64,
}

/// The length of the union of `[start, end]` intervals.
pub fn union_seconds(mut spans: Vec<(f64, f64)>) -> f64 {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, e) in spans {
        let e = e.max(s);
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// [`Rates`] of the calls grouped by `key`.
pub fn rates_by(
    calls: &[TraceCall],
    key: impl Fn(&TraceCall) -> String,
) -> BTreeMap<String, Rates> {
    let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut out: BTreeMap<String, Rates> = BTreeMap::new();
    for c in calls {
        let k = key(c);
        let r = out.entry(k.clone()).or_default();
        r.calls += 1;
        r.requested_tokens += c.requested as u64;
        r.generated_tokens += c.generated as u64;
        r.prompt_tokens += c.prompt_tokens as u64;
        spans.entry(k).or_default().push((c.start_s, c.end_s));
    }
    for (k, r) in out.iter_mut() {
        r.busy_s = union_seconds(spans.remove(k).unwrap_or_default());
        if r.busy_s > 0.0 {
            r.generated_tps = r.generated_tokens as f64 / r.busy_s;
            r.prompt_tps = r.prompt_tokens as f64 / r.busy_s;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_counts_keep_at_least_one_token() {
        assert_eq!(scaled(0, 0.01), 0);
        assert_eq!(scaled(1393, 1.0), 1393);
        assert_eq!(scaled(1393, 0.01), 14);
        assert_eq!(scaled(20, 0.01), 1);
    }

    #[test]
    fn busy_time_is_the_union_of_the_calls_spans() {
        assert_eq!(union_seconds(vec![]), 0.0);
        assert_eq!(union_seconds(vec![(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]), 4.0);
        let call = |phase: &str, s: f64, e: f64, g: u32| TraceCall {
            run: 0,
            round: 1,
            phase: phase.into(),
            agent: "agent_1".into(),
            model: "m".into(),
            requested: g,
            generated: g,
            prompt_tokens: 10,
            finish: None,
            start_s: s,
            end_s: e,
            error: None,
        };
        let calls = vec![
            call("vote", 0.0, 2.0, 10),
            call("vote", 1.0, 2.0, 10),
            call("act", 4.0, 5.0, 5),
        ];
        let r = rates_by(&calls, |c| c.phase.clone());
        assert_eq!(r["vote"].busy_s, 2.0);
        assert_eq!(r["vote"].generated_tps, 10.0);
        assert_eq!(r["act"].prompt_tps, 10.0);
    }
}
