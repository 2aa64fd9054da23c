//! The Energy Society scenario: the run loop of spec §1 (rounds until R7
//! termination, then the records) as an `async fn` over an [`Agency`], and
//! what every phase shares: the society's state, the prompt views, the
//! invocation specs and `settle`. One round, one function per phase R0–R6,
//! is in `society/round.rs`. It never calls a model; it builds requests,
//! asks the agency, and decides every state change, charge, grade and
//! payoff itself, logging each one. Faithful mode reproduces the quirks of
//! spec §10; corrected mode fixes them (see `rules.rs`).

mod round;

use serde_json::json;

use crate::agency::Agency;
use crate::backend::OutputFormat;

use super::config::{Mode, SocietyConfig};
use super::invoke::{call_seed, CallRecord, Invocation, InvokeSpec, InvokeStatus};
use super::job::{Job, JobSource};
use super::layout::{
    AgentRecord, AgentSpec, ErrorRecord, JobRecord, RunConfig, RunFolder, TokenUsageRecord,
    TranscriptEntry,
};
use super::ledger::Ledger;
use super::prompts::{AgentView, View};
use super::recorder::Recorder;
use super::state::Agent;

/// The result of a finished run.
#[derive(Debug, Clone)]
pub struct SocietyResult {
    pub folder: RunFolder,
    pub rounds_played: u32,
    /// Per agent: (attempts executed, successes, donations made).
    pub stats: Vec<(u32, u32, u32)>,
}

/// One society: configuration, agents, job source and records.
pub struct Society {
    cfg: SocietyConfig,
    agents: Vec<Agent>,
    /// Every agent's energy: the only code that changes it.
    ledger: Ledger,
    jobs: Box<dyn JobSource>,
    rec: Recorder,
    stats: Vec<(u32, u32, u32)>,
    /// Called with the round number after each round (progress bars).
    on_round: Option<Box<dyn FnMut(u32)>>,
}

fn job_record(j: &Job) -> JobRecord {
    JobRecord {
        job_id: j.id.clone(),
        category: j.category.clone(),
        difficulty: j.difficulty.as_str().into(),
        reward: j.reward as f64,
        description: j.description.clone(),
        options: j.options.clone(),
        correct_answer: j.correct_answer().into(),
    }
}

impl Society {
    pub fn new(cfg: SocietyConfig, jobs: Box<dyn JobSource>, rec: Recorder) -> Self {
        let agents: Vec<Agent> = cfg
            .roster
            .iter()
            .map(|r| Agent::new(r.clone(), cfg.cost.per_token(r.size)))
            .collect();
        let n = agents.len();
        let ledger = Ledger::new(cfg.roster.iter().map(|r| r.init_energy).collect());
        Society {
            cfg,
            agents,
            ledger,
            jobs,
            rec,
            stats: vec![(0, 0, 0); n],
            on_round: None,
        }
    }

    pub fn on_round(mut self, f: impl FnMut(u32) + 'static) -> Self {
        self.on_round = Some(Box::new(f));
        self
    }

    pub fn mode(&self) -> Mode {
        self.cfg.mode
    }

    fn views(&self) -> Vec<AgentView<'_>> {
        self.agents
            .iter()
            .zip(self.ledger.energies())
            .map(|(a, &energy)| AgentView {
                agent_id: a.id(),
                model_name: &a.spec.model_name,
                energy,
                init_energy: a.spec.init_energy,
                size: a.spec.size,
                per_token: a.per_token,
                memory: &a.memory_text,
            })
            .collect()
    }

    fn view<'a>(
        &self,
        round: u32,
        me: usize,
        agents: &'a [AgentView<'a>],
        jobs: &'a [Job],
    ) -> View<'a> {
        View {
            round,
            mode: self.cfg.mode,
            objective: self.cfg.objective,
            sabotage: self.cfg.enable_sabotage,
            memory: self.cfg.memory,
            idle_fee: self.cfg.idle_fee,
            sabotage_fee: self.cfg.sabotage_fee,
            me,
            agents,
            jobs,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn spec(
        &self,
        round: u32,
        i: usize,
        tag: &str,
        (system, user): (String, String),
        format: OutputFormat,
        observation: serde_json::Value,
    ) -> InvokeSpec {
        let a = &self.agents[i];
        let mut params = self.cfg.generation.clone();
        params.seed = call_seed(self.cfg.seed, round, tag, i, 0);
        InvokeSpec {
            agent: i,
            model: a.spec.model.clone(),
            agent_id: a.id().into(),
            tag: tag.into(),
            system,
            user,
            format,
            params,
            observation,
            tab: self
                .ledger
                .tab(i, a.per_token)
                .priced_per_joule(self.cfg.cost.per_joule()),
            max_calls: self.cfg.max_calls,
            mode: self.cfg.mode,
        }
    }

    /// Have the ledger apply an invocation's charges, log it, and keep its
    /// reference records.
    fn settle<T: serde::Serialize>(
        &mut self,
        round: u32,
        phase: &str,
        inv: &Invocation<T>,
        structured: serde_json::Value,
    ) -> anyhow::Result<()> {
        let i = inv.agent;
        let id = self.agents[i].id().to_string();
        self.ledger.settle(i, &inv.tab)?;
        let (error_type, message) = match &inv.status {
            InvokeStatus::Ok => (None, String::new()),
            InvokeStatus::FormatError => (
                Some("format_error"),
                "No valid structured response returned.".to_string(),
            ),
            InvokeStatus::InvokeError(m) => (Some("invoke_error"), m.clone()),
            InvokeStatus::EnergyExhausted => (
                Some("energy_exhausted"),
                "Energy reached 0 during the invocation.".to_string(),
            ),
        };
        if let Some(t) = error_type {
            self.agents[i].errors.push(ErrorRecord {
                round_num: round,
                phase: phase.into(),
                error_type: t.into(),
                error_message: message.clone(),
            });
        }
        /// The `invocation` event.
        #[derive(serde::Serialize)]
        struct Event<'a> {
            round: u32,
            phase: &'a str,
            agent: &'a str,
            status: &'a InvokeStatus,
            retries: usize,
            fallback: bool,
            energy_before: f64,
            energy_after: f64,
            spent: f64,
            tokens: u64,
            calls: Vec<CallRecord<'a>>,
            structured_response: &'a serde_json::Value,
        }
        let calls: Vec<CallRecord> = inv.calls.iter().map(|c| c.record(&mut self.rec)).collect();
        let event = Event {
            round,
            phase,
            agent: &id,
            status: &inv.status,
            retries: inv.calls.len().saturating_sub(1),
            fallback: error_type.is_some(),
            energy_before: inv.energy_before(),
            energy_after: inv.energy_after(),
            spent: inv.spent(),
            tokens: inv.logged_tokens,
            calls,
            structured_response: &structured,
        };
        self.rec.record("invocation", &event)?;
        self.rec.token_usage.push(TokenUsageRecord {
            round_num: round,
            phase: phase.into(),
            agent_id: id.clone(),
            output_tokens: inv.logged_tokens,
        });
        self.rec.transcript.push(TranscriptEntry {
            round_num: round,
            phase: phase.into(),
            agent_id: id,
            reasoning_content: inv.reasoning.clone(),
            structured_response: structured,
        });
        Ok(())
    }

    /// Run the whole game (R0–R7 until termination) and write the records.
    pub async fn run(mut self, agency: Agency) -> anyhow::Result<SocietyResult> {
        let mode = self.cfg.mode;
        self.rec.event(
            "run_start",
            json!({"seed": self.cfg.seed, "mode": mode, "jobs": self.jobs.describe(),
                   "agents": self.agents.iter().zip(self.ledger.energies()).map(|(a, e)| json!({"agent_id": a.id(), "model": a.spec.model,
                       "model_name": a.spec.model_name, "answered_by": self.cfg.llm.answered_by(&a.spec.model, &a.spec.model_name),
                       "energy": e, "per_token": a.per_token})).collect::<Vec<_>>()}),
        )?;
        let mut round: u32 = 1;
        let played = loop {
            self.play_round(&agency, round).await?;
            // The model server stopped answering during the round: its failed
            // calls are recorded; the run ends here, incomplete, to be rerun.
            if let Some(why) = agency.stopped() {
                // Its round is not kept when the run resumes (`super::resume`).
                self.rec
                    .event("stopped", json!({"round": round, "reason": why}))?;
                anyhow::bail!(
                    "stopped during round {round}, which is not kept (a resume plays it again): {why}"
                );
            }
            let played = round;
            if let Some(f) = &mut self.on_round {
                f(round);
            }
            round += 1;
            // R7: all inactive is checked first, then the round limit.
            if (0..self.ledger.len()).all(|i| !self.ledger.active(i)) {
                self.rec.event(
                    "termination",
                    json!({"round": played, "reason": "all_inactive"}),
                )?;
                break played;
            }
            if round > self.cfg.max_rounds {
                self.rec.event(
                    "termination",
                    json!({"round": played, "reason": "max_rounds"}),
                )?;
                break played;
            }
        };
        self.finish(played)
    }

    fn finish(mut self, played: u32) -> anyhow::Result<SocietyResult> {
        self.rec.sort_reference_lists();
        let cfg = &self.cfg;
        let folder = RunFolder {
            config: RunConfig {
                experiment: if cfg.name.is_empty() {
                    cfg.objective.as_str().into()
                } else {
                    cfg.name.clone()
                },
                run_number: 1,
                max_rounds: cfg.max_rounds,
                num_jobs: cfg.num_jobs(),
                model_size_exponent: cfg.cost.alpha,
                seed: cfg.seed,
                difficulty_distribution: cfg.difficulty,
                agents: cfg
                    .roster
                    .iter()
                    .map(|r| AgentSpec {
                        agent_id: r.agent_id.clone(),
                        model_name: r.model_name.clone(),
                        model_size: r.size,
                        init_energy: r.init_energy,
                        answered_by: cfg.llm.answered_by(&r.model, &r.model_name),
                    })
                    .collect(),
                prompt_mode: Some(cfg.objective.as_str().into()),
                use_votes: Some(cfg.use_votes),
                enable_sabotage: Some(cfg.enable_sabotage),
            },
            agents: self
                .agents
                .iter()
                .zip(self.ledger.energies())
                .map(|(a, &final_energy)| AgentRecord {
                    agent_id: a.id().into(),
                    model_name: a.spec.model_name.clone(),
                    model_size: a.spec.size,
                    init_energy: a.spec.init_energy,
                    final_energy,
                    rounds_active: a.rounds_active,
                    deactivated_at_round: a.deactivated_at_round,
                    memory: a.memory.clone(),
                    errors: a.errors.clone(),
                    answered_by: cfg.llm.answered_by(&a.spec.model, &a.spec.model_name),
                })
                .collect(),
            token_usage: std::mem::take(&mut self.rec.token_usage),
            transcript: std::mem::take(&mut self.rec.transcript),
        };
        self.rec.event(
            "run_end",
            json!({"rounds": played, "final_energy": self.ledger.energies()}),
        )?;
        self.rec.finish(&folder)?;
        Ok(SocietyResult {
            folder,
            rounds_played: played,
            stats: self.stats,
        })
    }
}
