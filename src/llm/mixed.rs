//! [`MixedBackend`]: one backend for a roster that mixes scripted and
//! model-backed agents: `scripted:` keys go to the scripted policies, every
//! other key to the model backend (local or served), in one batch or one
//! continuous-batching step.

use crate::backend::{
    Answer, Backend, BackendError, MemoryDemand, MemoryReport, ModelRequest, ModelResult,
    StepBackend, SCRIPTED_PREFIX,
};
use crate::inference::llm_backend::LlmBackend;
use crate::meter::attribution::MeterStatus;
use crate::scripted::ScriptedBackend;

/// Routes `scripted:` keys to a scripted backend and every other key to the
/// model backend (local [`LlmBackend`] by default, or a served one), so one
/// roster can mix scripted and model-backed agents.
pub struct MixedBackend<L = LlmBackend> {
    pub scripted: ScriptedBackend,
    pub llm: L,
    /// Continuous batching: scripted requests waiting for the next step,
    /// calls that failed on submission, model calls running.
    pending: Vec<(u64, ModelRequest)>,
    failed: Vec<Answer>,
    llm_in_flight: usize,
}

impl<L> MixedBackend<L> {
    pub fn new(scripted: ScriptedBackend, llm: L) -> Self {
        Self {
            scripted,
            llm,
            pending: Vec::new(),
            failed: Vec::new(),
            llm_in_flight: 0,
        }
    }
}

impl<L: Backend> Backend for MixedBackend<L> {
    fn name(&self) -> String {
        format!("scripted+{}", self.llm.name())
    }

    fn batch_key(&self, model: &str) -> String {
        if model.starts_with(SCRIPTED_PREFIX) {
            self.scripted.batch_key(model)
        } else {
            self.llm.batch_key(model)
        }
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        // The driver batches per batch key, so a batch is all one kind.
        match batch.first() {
            Some(r) if r.model.starts_with(SCRIPTED_PREFIX) => self.scripted.generate(batch),
            Some(_) => self.llm.generate(batch),
            None => Vec::new(),
        }
    }

    fn unavailable(&self) -> Option<String> {
        self.llm.unavailable()
    }

    fn plan_memory(
        &mut self,
        demand: &MemoryDemand,
    ) -> anyhow::Result<Option<Box<dyn MemoryReport>>> {
        self.llm.plan_memory(demand)
    }

    fn metering(&self) -> Option<MeterStatus> {
        self.llm.metering()
    }

    fn kernels(&self, models: &[&str]) -> Option<crate::backend::KernelRecord> {
        self.llm.kernels(models)
    }

    fn model_origins(&self, models: &[&str]) -> Vec<crate::backend::ModelOrigin> {
        self.llm.model_origins(models)
    }

    fn end_session(&mut self, session: u64) {
        self.scripted.end_session(session);
        self.llm.end_session(session);
    }

    /// Continuous batching when the model backend has it (scripted calls
    /// are answered at the next step).
    fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
        if self.llm.stepwise().is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl<L: Backend> StepBackend for MixedBackend<L> {
    fn submit(&mut self, ticket: u64, request: ModelRequest) {
        if request.model.starts_with(SCRIPTED_PREFIX) {
            self.pending.push((ticket, request));
            return;
        }
        match self.llm.stepwise() {
            Some(llm) => {
                llm.submit(ticket, request);
                self.llm_in_flight += 1;
            }
            None => {
                let result = Err(BackendError {
                    model: request.model.clone(),
                    message: "the model backend has no continuous batching".into(),
                    partial_usage: None,
                });
                self.failed.push(Answer {
                    ticket,
                    request,
                    result,
                });
            }
        }
    }

    fn sampling(&mut self) -> u64 {
        self.llm.stepwise().map_or(0, |s| s.sampling())
    }

    fn step(&mut self) -> Vec<Answer> {
        let mut out = std::mem::take(&mut self.failed);
        // Scripted requests: one batch per batch key, in submission order.
        let pending = std::mem::take(&mut self.pending);
        let mut by_key: std::collections::BTreeMap<String, Vec<(u64, ModelRequest)>> =
            Default::default();
        for (t, r) in pending {
            by_key
                .entry(self.scripted.batch_key(&r.model))
                .or_default()
                .push((t, r));
        }
        for (_, items) in by_key {
            let (tickets, batch): (Vec<u64>, Vec<ModelRequest>) = items.into_iter().unzip();
            let mut results = self.scripted.generate(&batch).into_iter();
            for (ticket, request) in tickets.into_iter().zip(batch) {
                let result = results.next().unwrap_or_else(|| {
                    Err(BackendError {
                        model: request.model.clone(),
                        message: "backend returned fewer results than requests".into(),
                        partial_usage: None,
                    })
                });
                out.push(Answer {
                    ticket,
                    request,
                    result,
                });
            }
        }
        if self.llm_in_flight > 0 {
            if let Some(llm) = self.llm.stepwise() {
                let answers = llm.step();
                self.llm_in_flight = self.llm_in_flight.saturating_sub(answers.len());
                out.extend(answers);
            }
        }
        out
    }

    fn in_flight(&self) -> usize {
        self.pending.len() + self.failed.len() + self.llm_in_flight
    }
}
