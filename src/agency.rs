//! Running many scenarios at once on one backend, batching their calls per model.
//!
//! A scenario is ordinary `async` game logic. When it needs a model it awaits
//! [`Agency::call`] (or [`Agency::call_all`] for a parallel phase). The
//! [`Driver`] polls every scenario future on one thread until each is either
//! finished or waiting for model answers, gathers all waiting requests,
//! groups them by model, hands each group to the backend as one batch, and
//! delivers the answers. Nothing here is random and the polling order is
//! fixed, so a run is reproducible however many scenarios share the driver.
//!
//! Each spawned scenario is one run (session) with an id unique in the
//! process ([`next_session`]); the driver stamps it on every request the
//! scenario sends ([`ModelRequest::session`]) and tells the backend when
//! the run is over ([`Backend::end_session`]), so backends keep caches per
//! (run, agent) and drop them when the run ends.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use crate::backend::{Backend, ModelRequest, ModelResult};

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// A fresh run (session) id, never handed out before in this process (never 0).
pub fn next_session() -> u64 {
    NEXT_SESSION.fetch_add(1, Ordering::Relaxed)
}

#[derive(Default)]
struct Inbox {
    next_id: u64,
    /// Requests issued but not yet sent to a backend.
    queued: Vec<(u64, ModelRequest)>,
    /// Answers delivered, with their requests, but not yet taken by their future.
    answered: BTreeMap<u64, (ModelRequest, ModelResult)>,
    /// Ids sent to a backend and not yet answered.
    in_flight: usize,
    /// Why the backend stopped answering while this scenario was running.
    stopped: Option<String>,
}

/// A scenario's handle for asking model calls. Cheap to clone; all clones of
/// one agency share one queue.
#[derive(Clone, Default)]
pub struct Agency {
    inbox: Rc<RefCell<Inbox>>,
}

impl Agency {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask for one model call and wait for its answer.
    pub fn call(&self, request: ModelRequest) -> CallFuture {
        CallFuture(self.exchange(request))
    }

    /// Ask for one model call and wait for its answer, getting the request
    /// back too (a retry can amend and resend it without copying it).
    pub fn exchange(&self, request: ModelRequest) -> Exchange {
        Exchange {
            inbox: self.inbox.clone(),
            request: Some(request),
            id: None,
        }
    }

    /// Ask for several calls at once (a parallel phase) and wait for all of
    /// them. Answers come back in the order of `requests`.
    pub async fn call_all(&self, requests: Vec<ModelRequest>) -> Vec<ModelResult> {
        futures::future::join_all(requests.into_iter().map(|r| self.call(r))).await
    }

    /// `Some(reason)` when the backend stopped answering (its server went
    /// away) while this scenario ran: some of its calls failed for that
    /// reason, so a scenario that records runs should stop, incomplete,
    /// rather than mark its records complete.
    pub fn stopped(&self) -> Option<String> {
        self.inbox.borrow().stopped.clone()
    }

    fn take_queued(&self) -> Vec<(u64, ModelRequest)> {
        let mut inbox = self.inbox.borrow_mut();
        let queued = std::mem::take(&mut inbox.queued);
        inbox.in_flight += queued.len();
        queued
    }

    fn deliver(&self, id: u64, request: ModelRequest, result: ModelResult) {
        let mut inbox = self.inbox.borrow_mut();
        inbox.in_flight -= 1;
        inbox.answered.insert(id, (request, result));
    }
}

/// The future returned by [`Agency::call`].
pub struct CallFuture(Exchange);

impl Future for CallFuture {
    type Output = ModelResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ModelResult> {
        Pin::new(&mut self.0).poll(cx).map(|(_, result)| result)
    }
}

/// The future returned by [`Agency::exchange`].
pub struct Exchange {
    inbox: Rc<RefCell<Inbox>>,
    request: Option<ModelRequest>,
    id: Option<u64>,
}

impl Future for Exchange {
    type Output = (ModelRequest, ModelResult);

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut inbox = this.inbox.borrow_mut();
        match this.id {
            None => {
                let id = inbox.next_id;
                inbox.next_id += 1;
                let request = this
                    .request
                    .take()
                    .expect("CallFuture polled after completion");
                inbox.queued.push((id, request));
                this.id = Some(id);
                Poll::Pending
            }
            Some(id) => match inbox.answered.remove(&id) {
                Some(result) => Poll::Ready(result),
                None => Poll::Pending,
            },
        }
    }
}

type BoxedScenario<'a, T> = Pin<Box<dyn Future<Output = anyhow::Result<T>> + 'a>>;

/// Drives scenario futures to completion against one backend.
pub struct Driver<'a, T> {
    scenarios: Vec<(Agency, Option<BoxedScenario<'a, T>>)>,
    /// The run (session) id of each scenario, stamped on its requests.
    sessions: Vec<u64>,
    results: Vec<Option<anyhow::Result<T>>>,
    /// Number of backend batches sent so far (for statistics and tests).
    pub batches_sent: usize,
    /// Largest batch sent so far.
    pub largest_batch: usize,
}

impl<'a, T> Default for Driver<'a, T> {
    fn default() -> Self {
        Self {
            scenarios: Vec::new(),
            sessions: Vec::new(),
            results: Vec::new(),
            batches_sent: 0,
            largest_batch: 0,
        }
    }
}

impl<'a, T> Driver<'a, T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a scenario. `make` receives the scenario's own [`Agency`].
    pub fn spawn<F, Fut>(&mut self, make: F)
    where
        F: FnOnce(Agency) -> Fut,
        Fut: Future<Output = anyhow::Result<T>> + 'a,
    {
        let agency = Agency::new();
        let fut = make(agency.clone());
        self.scenarios.push((agency, Some(Box::pin(fut))));
        self.sessions.push(next_session());
        self.results.push(None);
    }

    /// The run (session) ids of the scenarios spawned so far, in spawn order.
    pub fn sessions(&self) -> &[u64] {
        &self.sessions
    }

    /// Run every scenario to completion. Returns each scenario's result in
    /// spawn order. `on_batch` is called after each backend batch (or step,
    /// with a stepwise backend) with the number of requests answered (for
    /// progress bars).
    ///
    /// A backend with continuous batching ([`Backend::stepwise`]) gets each
    /// request as soon as its scenario asks for it: after every backend
    /// step, the answers that finished go to their scenarios, which are
    /// polled again, and their next requests join the running batch. Other
    /// backends get one batch per batch key of everything queued, and the
    /// next batch only once all are answered.
    pub fn run(
        self,
        backend: &mut dyn Backend,
        on_batch: impl FnMut(usize),
    ) -> Vec<anyhow::Result<T>> {
        if backend.stepwise().is_some() {
            self.run_stepwise(backend, on_batch)
        } else {
            self.run_waves(backend, on_batch)
        }
    }

    /// Poll every live scenario until none can make progress without answers.
    fn poll_scenarios(&mut self, backend: &mut dyn Backend, cx: &mut Context<'_>) {
        let mut progressed = true;
        while progressed {
            progressed = false;
            for (i, (agency, slot)) in self.scenarios.iter_mut().enumerate() {
                let Some(fut) = slot.as_mut() else { continue };
                let before = agency.inbox.borrow().answered.len();
                match fut.as_mut().poll(cx) {
                    Poll::Ready(result) => {
                        self.results[i] = Some(result);
                        *slot = None;
                        backend.end_session(self.sessions[i]);
                        progressed = true;
                    }
                    Poll::Pending => {
                        // Answers were consumed: poll again in case more
                        // work is ready without a backend round trip.
                        if agency.inbox.borrow().answered.len() < before {
                            progressed = true;
                        }
                    }
                }
            }
        }
    }

    /// Fail every unfinished scenario with `why` (their runs stay incomplete).
    fn fail_unfinished(&mut self, backend: &mut dyn Backend, why: impl Fn(usize) -> String) {
        self.fail_unfinished_with(backend, |i| anyhow::anyhow!("{}", why(i)));
    }

    fn fail_unfinished_with(
        &mut self,
        backend: &mut dyn Backend,
        why: impl Fn(usize) -> anyhow::Error,
    ) {
        for (i, (_, slot)) in self.scenarios.iter_mut().enumerate() {
            if slot.take().is_some() {
                self.results[i] = Some(Err(why(i)));
                backend.end_session(self.sessions[i]);
            }
        }
    }

    /// SIGINT or SIGTERM came (`crate::interrupt`): every unfinished
    /// scenario ends with [`crate::interrupt::Interrupted`] before another
    /// call is sent (the calls not yet answered are abandoned), so each run
    /// keeps what it recorded and stays incomplete. True when it did.
    fn interrupted(&mut self, backend: &mut dyn Backend) -> bool {
        match crate::interrupt::check() {
            Ok(()) => false,
            Err(e) => {
                let signal = e.signal;
                self.fail_unfinished_with(backend, |_| {
                    anyhow::Error::new(crate::interrupt::Interrupted { signal })
                });
                true
            }
        }
    }

    /// Tell every live scenario that the backend stopped answering.
    fn mark_stopped(&self, backend: &dyn Backend) {
        if let Some(why) = backend.unavailable() {
            for (agency, slot) in &self.scenarios {
                if slot.is_some() {
                    agency.inbox.borrow_mut().stopped.get_or_insert(why.clone());
                }
            }
        }
    }

    fn finish(self) -> Vec<anyhow::Result<T>> {
        self.results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("scenario never ran"))))
            .collect()
    }

    fn run_waves(
        mut self,
        backend: &mut dyn Backend,
        mut on_batch: impl FnMut(usize),
    ) -> Vec<anyhow::Result<T>> {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            self.poll_scenarios(backend, &mut cx);
            if self.interrupted(backend) {
                break;
            }

            // A backend that can answer nothing more (its server stopped):
            // the scenarios have recorded the failed calls; stop each
            // unfinished one here so its run stays incomplete.
            if let Some(why) = backend.unavailable() {
                self.fail_unfinished(backend, |_| format!("stopped before its end: {why}"));
                break;
            }

            // Gather queued requests from every scenario, grouped by the
            // backend's batch key (normally the model).
            let mut by_model: BTreeMap<String, Vec<(usize, u64, ModelRequest)>> = BTreeMap::new();
            for (i, (agency, slot)) in self.scenarios.iter().enumerate() {
                if slot.is_none() {
                    continue;
                }
                for (id, mut req) in agency.take_queued() {
                    req.session = self.sessions[i];
                    by_model
                        .entry(backend.batch_key(&req.model))
                        .or_default()
                        .push((i, id, req));
                }
            }

            if by_model.is_empty() {
                // Nothing to send: either everything finished, or a scenario
                // waits on an answer that will never come.
                self.fail_unfinished(backend, |i| {
                    format!("scenario {i} is waiting but asked for no model call (deadlock)")
                });
                break;
            }

            for (_model, items) in by_model {
                let (to, batch): (Vec<(usize, u64)>, Vec<ModelRequest>) =
                    items.into_iter().map(|(i, id, r)| ((i, id), r)).unzip();
                let answers = backend.generate(&batch);
                self.batches_sent += 1;
                self.largest_batch = self.largest_batch.max(batch.len());
                let n = batch.len();
                let mut answers = answers.into_iter();
                for ((i, id), req) in to.into_iter().zip(batch) {
                    let result = answers.next().unwrap_or_else(|| {
                        Err(crate::backend::BackendError {
                            model: req.model.clone(),
                            message: "backend returned fewer results than requests".into(),
                            partial_usage: None,
                        })
                    });
                    self.scenarios[i].0.deliver(id, req, result);
                }
                self.mark_stopped(backend);
                on_batch(n);
            }
        }
        self.finish()
    }

    /// Continuous batching: submit each request as soon as it is asked for;
    /// after each backend step deliver what finished and poll again. Which
    /// requests join at which step depends only on the answers so far
    /// (fixed polling order, tickets in submission order), never on time.
    fn run_stepwise(
        mut self,
        backend: &mut dyn Backend,
        mut on_batch: impl FnMut(usize),
    ) -> Vec<anyhow::Result<T>> {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        // Ticket → (scenario, the request's id in its agency).
        let mut tickets: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
        let mut next_ticket = 0u64;
        let mut answered = true;
        loop {
            if answered {
                self.poll_scenarios(backend, &mut cx);
            }
            if self.interrupted(backend) {
                break;
            }
            if let Some(why) = backend.unavailable() {
                self.fail_unfinished(backend, |_| format!("stopped before its end: {why}"));
                break;
            }
            let mut queued = Vec::new();
            for (i, (agency, slot)) in self.scenarios.iter().enumerate() {
                if slot.is_none() {
                    continue;
                }
                for (id, mut req) in agency.take_queued() {
                    req.session = self.sessions[i];
                    tickets.insert(next_ticket, (i, id));
                    queued.push((next_ticket, req));
                    next_ticket += 1;
                }
            }
            let Some(stepper) = backend.stepwise() else {
                break;
            };
            for (t, req) in queued {
                stepper.submit(t, req);
            }
            let running = stepper.in_flight();
            if running == 0 {
                self.fail_unfinished(backend, |i| {
                    format!("scenario {i} is waiting but asked for no model call (deadlock)")
                });
                break;
            }
            let answers = stepper.step();
            self.batches_sent += 1;
            self.largest_batch = self.largest_batch.max(running);
            let n = answers.len();
            for a in answers {
                if let Some((i, id)) = tickets.remove(&a.ticket) {
                    self.scenarios[i].0.deliver(id, a.request, a.result);
                }
            }
            if n > 0 {
                self.mark_stopped(backend);
                on_batch(n);
            }
            answered = n > 0;
        }
        // Anything still waiting (a backend that lost its stepper) fails.
        self.fail_unfinished(backend, |i| format!("scenario {i} never got its answers"));
        self.finish()
    }
}

/// Run a single scenario future against a backend.
pub fn run_one<'a, T, F, Fut>(backend: &mut dyn Backend, make: F) -> anyhow::Result<T>
where
    F: FnOnce(Agency) -> Fut,
    Fut: Future<Output = anyhow::Result<T>> + 'a,
{
    let mut driver = Driver::new();
    driver.spawn(make);
    driver
        .run(backend, |_| {})
        .pop()
        .unwrap_or_else(|| Err(anyhow::anyhow!("no scenario result")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Answer, FinishReason, ModelResponse, StepBackend, TokenUsage};

    struct Echo {
        batches: Vec<Vec<String>>,
        /// Run every model on one (like an LLM backend with a stand-in).
        one_key: bool,
        /// (agent, session) of every request, and the sessions ended.
        sessions: Vec<(String, u64)>,
        ended: Vec<u64>,
    }

    impl Echo {
        fn new(one_key: bool) -> Self {
            Self {
                batches: vec![],
                one_key,
                sessions: vec![],
                ended: vec![],
            }
        }
    }

    impl Backend for Echo {
        fn name(&self) -> String {
            "echo".into()
        }
        fn batch_key(&self, model: &str) -> String {
            if self.one_key {
                "all".into()
            } else {
                model.into()
            }
        }
        fn end_session(&mut self, session: u64) {
            self.ended.push(session);
        }
        fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
            self.batches
                .push(batch.iter().map(|r| r.agent_id.clone()).collect());
            self.sessions
                .extend(batch.iter().map(|r| (r.agent_id.clone(), r.session)));
            batch
                .iter()
                .map(|r| {
                    Ok(ModelResponse {
                        text: format!("{}:{}", r.agent_id, r.tag),
                        thinking: String::new(),
                        usage: TokenUsage {
                            generated_tokens: 1,
                            charged_tokens: 1,
                            ..Default::default()
                        },
                        finish: FinishReason::Scripted,
                        rendered_prompt: None,
                        latency_ms: 0.0,
                        measured: None,
                        count_source: None,
                    })
                })
                .collect()
        }
    }

    fn req(model: &str, agent: &str, tag: &str) -> ModelRequest {
        ModelRequest {
            model: model.into(),
            session: 0,
            agent_id: agent.into(),
            tag: tag.into(),
            messages: vec![],
            format: Default::default(),
            params: Default::default(),
            observation: serde_json::Value::Null,
        }
    }

    fn two_model_driver() -> Driver<'static, Vec<String>> {
        let mut driver = Driver::new();
        for s in 0..3 {
            driver.spawn(move |agency: Agency| async move {
                let mut out = Vec::new();
                for round in 0..2 {
                    let answers = agency
                        .call_all(vec![
                            req("m1", &format!("s{s}a"), &format!("r{round}")),
                            req("m2", &format!("s{s}b"), &format!("r{round}")),
                        ])
                        .await;
                    for a in answers {
                        out.push(a.map_err(anyhow::Error::from)?.text);
                    }
                }
                Ok(out)
            });
        }
        driver
    }

    #[test]
    fn parallel_calls_of_many_scenarios_share_batches_per_model() {
        let driver = two_model_driver();
        let mut backend = Echo::new(false);
        let results = driver.run(&mut backend, |_| {});
        assert_eq!(results.len(), 3);
        let first = results[0].as_ref().unwrap();
        assert_eq!(first, &vec!["s0a:r0", "s0b:r0", "s0a:r1", "s0b:r1"]);
        // Two rounds x two models = 4 batches, each holding all 3 scenarios.
        assert_eq!(backend.batches.len(), 4);
        assert!(backend.batches.iter().all(|b| b.len() == 3));
        assert_eq!(backend.batches[0], vec!["s0a", "s1a", "s2a"]);
    }

    #[test]
    fn models_with_one_batch_key_share_a_batch() {
        let driver = two_model_driver();
        let mut backend = Echo::new(true);
        let results = driver.run(&mut backend, |_| {});
        assert_eq!(
            results[2].as_ref().unwrap(),
            &vec!["s2a:r0", "s2b:r0", "s2a:r1", "s2b:r1"]
        );
        // Two rounds, each one batch of both models' calls from 3 scenarios.
        assert_eq!(backend.batches.len(), 2);
        assert_eq!(
            backend.batches[0],
            vec!["s0a", "s0b", "s1a", "s1b", "s2a", "s2b"]
        );
    }

    /// Two drivers, each with two scenarios whose agents have the same ids:
    /// every scenario's requests carry its own session, never another's,
    /// and the backend hears when each run ends.
    #[test]
    fn every_run_has_its_own_session() {
        let mut backend = Echo::new(false);
        let mut all = Vec::new();
        for _ in 0..2 {
            let mut driver: Driver<'static, ()> = Driver::new();
            for _ in 0..2 {
                driver.spawn(|agency: Agency| async move {
                    for round in 0..2 {
                        let r = agency
                            .call_all(vec![
                                req("m", "agent_1", &format!("r{round}")),
                                req("m", "agent_2", &format!("r{round}")),
                            ])
                            .await;
                        assert!(r.iter().all(|x| x.is_ok()));
                    }
                    Ok(())
                });
            }
            let sessions = driver.sessions().to_vec();
            assert!(driver.run(&mut backend, |_| {}).iter().all(|r| r.is_ok()));
            all.extend(sessions);
        }
        let distinct: std::collections::BTreeSet<u64> = all.iter().copied().collect();
        assert_eq!(distinct.len(), 4, "sessions {all:?} are not distinct");
        assert!(!distinct.contains(&0));
        // Each batch holds both scenarios of a driver: in spawn order, the
        // first scenario's two agents, then the second's.
        assert_eq!(backend.sessions.len(), 16);
        for (k, (agent, s)) in backend.sessions.iter().enumerate() {
            let driver = k / 8;
            let scenario = (k % 4) / 2;
            assert_eq!(*s, all[driver * 2 + scenario], "request {k} of {agent}");
        }
        let mut ended = backend.ended.clone();
        ended.sort_unstable();
        assert_eq!(ended, all, "every run ends exactly once");
    }

    /// Fails every call and reports itself unavailable after its first batch.
    struct Dies {
        batches: usize,
    }

    impl Backend for Dies {
        fn name(&self) -> String {
            "dies".into()
        }
        fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
            self.batches += 1;
            batch
                .iter()
                .map(|r| {
                    Err(crate::backend::BackendError {
                        model: r.model.clone(),
                        message: "connection refused".into(),
                        partial_usage: None,
                    })
                })
                .collect()
        }
        fn unavailable(&self) -> Option<String> {
            (self.batches > 0).then(|| "the server is gone".to_string())
        }
    }

    #[test]
    fn an_unavailable_backend_stops_scenarios_after_they_record_the_failure() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let mut driver: Driver<'static, ()> = Driver::new();
        for s in 0..2 {
            let seen = seen.clone();
            driver.spawn(move |agency: Agency| async move {
                for round in 0..3 {
                    let r = agency
                        .call(req("m", &format!("a{s}"), &format!("r{round}")))
                        .await;
                    // What a scenario records after each call.
                    seen.borrow_mut().push(format!(
                        "a{s} r{round} ok={} stopped={}",
                        r.is_ok(),
                        agency.stopped().is_some()
                    ));
                }
                Ok(())
            });
        }
        let mut backend = Dies { batches: 0 };
        let results = driver.run(&mut backend, |_| {});
        assert_eq!(
            backend.batches, 1,
            "nothing is sent once the backend is unavailable"
        );
        assert_eq!(
            *seen.borrow(),
            vec!["a0 r0 ok=false stopped=true", "a1 r0 ok=false stopped=true"]
        );
        for r in results {
            let e = r.expect_err("an unfinished scenario is an error");
            assert!(format!("{e}").contains("the server is gone"), "{e}");
        }
    }

    /// A stepwise backend: a request tagged `len:K` finishes K steps after
    /// it joins. It logs each step's running agents.
    struct Steps {
        running: Vec<(u64, ModelRequest, u32)>,
        log: Vec<Vec<String>>,
        ended: Vec<u64>,
    }

    impl Backend for Steps {
        fn name(&self) -> String {
            "steps".into()
        }
        fn generate(&mut self, _batch: &[ModelRequest]) -> Vec<ModelResult> {
            panic!("a stepwise backend gets no whole batches")
        }
        fn end_session(&mut self, session: u64) {
            self.ended.push(session);
        }
        fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
            Some(self)
        }
    }

    impl StepBackend for Steps {
        fn submit(&mut self, ticket: u64, request: ModelRequest) {
            let k = request
                .tag
                .strip_prefix("len:")
                .and_then(|k| k.parse().ok())
                .unwrap_or(1);
            self.running.push((ticket, request, k));
        }
        fn step(&mut self) -> Vec<Answer> {
            self.log.push(
                self.running
                    .iter()
                    .map(|(_, r, _)| format!("{}:{}", r.agent_id, r.tag))
                    .collect(),
            );
            let mut out = Vec::new();
            let mut keep = Vec::new();
            for (t, r, k) in std::mem::take(&mut self.running) {
                if k <= 1 {
                    let text = format!("{}:{}", r.agent_id, r.tag);
                    out.push(Answer {
                        ticket: t,
                        request: r,
                        result: Ok(ModelResponse {
                            text,
                            thinking: String::new(),
                            usage: TokenUsage::default(),
                            finish: FinishReason::Scripted,
                            rendered_prompt: None,
                            latency_ms: 0.0,
                            measured: None,
                            count_source: None,
                        }),
                    });
                } else {
                    keep.push((t, r, k - 1));
                }
            }
            self.running = keep;
            out
        }
        fn in_flight(&self) -> usize {
            self.running.len()
        }
    }

    /// Answers reach their scenarios as they finish: a scenario of short
    /// calls makes three in turn, each joining the running batch, while
    /// another scenario's one long call is still decoding.
    #[test]
    fn a_stepwise_backend_gets_each_call_as_soon_as_it_is_asked() {
        let order = Rc::new(RefCell::new(Vec::new()));
        let mut driver: Driver<'static, Vec<String>> = Driver::new();
        let o = order.clone();
        driver.spawn(move |agency: Agency| async move {
            let r = agency.call(req("m", "long", "len:5")).await;
            o.borrow_mut().push("long done".to_string());
            Ok(vec![r.map_err(anyhow::Error::from)?.text])
        });
        let o = order.clone();
        driver.spawn(move |agency: Agency| async move {
            let mut out = Vec::new();
            for i in 0..3 {
                let r = agency
                    .call(req("m", "short", &format!("len:{}", 1 + i % 2)))
                    .await;
                o.borrow_mut().push(format!("short {i} done"));
                out.push(r.map_err(anyhow::Error::from)?.text);
            }
            // A parallel phase after: both calls join together.
            let both = agency
                .call_all(vec![req("m", "x", "len:1"), req("m", "y", "len:2")])
                .await;
            o.borrow_mut().push("pair done".to_string());
            out.extend(
                both.into_iter()
                    .map(|r| r.map(|r| r.text).unwrap_or_default()),
            );
            Ok(out)
        });
        let sessions = driver.sessions().to_vec();
        let mut backend = Steps {
            running: Vec::new(),
            log: Vec::new(),
            ended: Vec::new(),
        };
        let mut answered = Vec::new();
        let results = driver.run(&mut backend, |n| answered.push(n));
        assert_eq!(results[0].as_ref().unwrap(), &vec!["long:len:5"]);
        assert_eq!(
            results[1].as_ref().unwrap(),
            &vec![
                "short:len:1",
                "short:len:2",
                "short:len:1",
                "x:len:1",
                "y:len:2"
            ]
        );
        assert_eq!(
            backend.log,
            vec![
                vec!["long:len:5", "short:len:1"],
                vec!["long:len:5", "short:len:2"],
                vec!["long:len:5", "short:len:2"],
                vec!["long:len:5", "short:len:1"],
                vec!["long:len:5", "x:len:1", "y:len:2"],
                vec!["y:len:2"],
            ],
            "each call joins at the step after its scenario asked for it"
        );
        assert_eq!(
            *order.borrow(),
            vec![
                "short 0 done",
                "short 1 done",
                "short 2 done",
                "long done",
                "pair done"
            ]
        );
        assert_eq!(answered, vec![1, 1, 1, 2, 1]);
        let mut ended = backend.ended.clone();
        ended.sort_unstable();
        assert_eq!(ended, sessions, "every run ends exactly once");
    }
}
