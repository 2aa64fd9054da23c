//! The Energy Society scenario: the round loop R0–R7 of spec §1 as an
//! `async fn` over an [`Agency`]. It never calls a model; it builds
//! requests, asks the agency, and decides every state change, charge, grade
//! and payoff itself, logging each one. Faithful mode reproduces the quirks
//! of spec §10; corrected mode fixes them (see `rules.rs`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use serde_json::json;

use crate::agency::Agency;
use crate::backend::OutputFormat;

use super::config::{Mode, SocietyConfig};
use super::invoke::{call_seed, invoke_all, CallRecord, Invocation, InvokeSpec, InvokeStatus};
use super::job::{Job, JobSource};
use super::layout::{
    AgentRecord, AgentSpec, ErrorRecord, JobRecord, MemoryEntry, ReceivedDonation, RunConfig,
    RunFolder, TokenUsageRecord, TranscriptEntry,
};
use super::ledger::Ledger;
use super::prompts::{self, AgentView, View};
use super::recorder::Recorder;
use super::rules;
use super::schema::{self, Action, AgentDecision, AgentJobSolution, AgentVote};
use super::state::Agent;

/// A decision taken in R2 and what happened to it.
#[derive(Debug, Clone)]
struct Decided {
    decision: AgentDecision,
    energy_after_deciding: f64,
    spent_deciding: f64,
}

/// What R3/R4 did for one decision, for its memory entry.
#[derive(Debug, Clone, Default)]
struct Outcome {
    action_cost: f64,
    attempted_job: Option<JobRecord>,
    executed: bool,
    answer: Option<String>,
    succeeded: Option<bool>,
    rewarded: Option<f64>,
    donated: Option<f64>,
    sabotaged_job: Option<JobRecord>,
    sabotage_hits: Vec<String>,
}

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
                       "energy": e, "per_token": a.per_token})).collect::<Vec<_>>()}),
        )?;
        let mut round: u32 = 1;
        let played = loop {
            self.play_round(&agency, round).await?;
            // The model server stopped answering during the round: its failed
            // calls are recorded; the run ends here, incomplete, to be rerun.
            if let Some(why) = agency.stopped() {
                anyhow::bail!("stopped after round {round}: {why}");
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

    /// One round, R0–R6.
    async fn play_round(&mut self, agency: &Agency, round: u32) -> anyhow::Result<()> {
        let mode = self.cfg.mode;
        let n = self.agents.len();
        self.ledger.begin_round(round);

        // R0 start_round: jobs, start energies, cleared round state.
        let jobs = self
            .jobs
            .next_round()
            .with_context(|| format!("drawing the jobs of round {round}"))?;
        let start: Vec<f64> = self.ledger.start().to_vec();
        self.rec.event(
            "round_start",
            json!({"round": round, "energy": start,
                   "jobs": jobs.iter().map(|j| json!({"id": j.id, "question_id": j.question_id,
                       "difficulty": j.difficulty, "reward": j.reward, "category": j.category,
                       "answer_index": j.answer_index})).collect::<Vec<_>>()}),
        )?;
        let job_by_id: BTreeMap<&str, &Job> = jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        // Ids a strict output schema may name (constrained decoding only).
        let job_ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
        let agent_ids: Vec<String> = self
            .agents
            .iter()
            .map(|a| a.spec.agent_id.clone())
            .collect();
        let others = |i: usize| -> Vec<String> {
            let mut v = agent_ids.clone();
            v.remove(i);
            v
        };

        // R1 vote (in parallel) when discussion is on and more than one agent is active.
        let mut votes: Vec<Option<AgentVote>> = vec![None; n];
        let mut vote_spent: Vec<Option<f64>> = vec![None; n];
        let voters: Vec<usize> = (0..n).filter(|&i| self.ledger.active(i)).collect();
        if self.cfg.use_votes && voters.len() > 1 {
            let views = self.views();
            let sabotage = self.cfg.enable_sabotage;
            // The same for every voter of the round.
            let format = OutputFormat::Json {
                name: "AgentVote".into(),
                schema: schema::vote_schema(sabotage, n),
                strict: Some(schema::vote_schema_strict(sabotage, &job_ids, &agent_ids)),
            };
            let specs: Vec<InvokeSpec> = voters
                .iter()
                .map(|&i| {
                    let v = self.view(round, i, &views, &jobs);
                    self.spec(
                        round,
                        i,
                        "vote",
                        prompts::vote_messages(&v),
                        format.clone(),
                        prompts::observation(&v, "vote", &[], None),
                    )
                })
                .collect();
            let results =
                invoke_all(agency, specs, |t| schema::parse_vote(t, sabotage, mode)).await;
            for inv in results {
                let i = inv.agent;
                let vote = inv
                    .value
                    .clone()
                    .unwrap_or_else(|| AgentVote::fallback(self.agents[i].id()));
                let sr = serde_json::to_value(&vote)?;
                self.settle(round, "vote", &inv, sr)?;
                vote_spent[i] = Some(inv.spent());
                votes[i] = Some(vote);
            }
        }

        // R2 decide (in parallel): agents still active after voting; every
        // non-empty vote of this round is shown, in roster order.
        let shown_votes: Vec<AgentVote> = votes.iter().flatten().cloned().collect();
        let mut decided: Vec<Option<Decided>> = vec![None; n];
        let deciders: Vec<usize> = (0..n).filter(|&i| self.ledger.active(i)).collect();
        if !deciders.is_empty() {
            let views = self.views();
            let sabotage = self.cfg.enable_sabotage;
            let specs: Vec<InvokeSpec> = deciders
                .iter()
                .map(|&i| {
                    let v = self.view(round, i, &views, &jobs);
                    self.spec(
                        round,
                        i,
                        "decide",
                        prompts::decide_messages(&v, &shown_votes),
                        OutputFormat::Json {
                            name: "AgentDecision".into(),
                            schema: schema::decision_schema(sabotage),
                            strict: Some(schema::decision_schema_strict(
                                sabotage,
                                &job_ids,
                                &others(i),
                            )),
                        },
                        prompts::observation(&v, "decide", &shown_votes, None),
                    )
                })
                .collect();
            let results =
                invoke_all(agency, specs, |t| schema::parse_decision(t, sabotage, mode)).await;
            for inv in results {
                let i = inv.agent;
                let mut d = inv.value.clone().unwrap_or_else(|| {
                    AgentDecision::fallback(matches!(inv.status, InvokeStatus::InvokeError(_)))
                });
                // The transcript keeps the decision as the model gave it; the
                // game uses the normalised job id (spec §6).
                let sr = serde_json::to_value(&d)?;
                if let Some(j) = &d.job_id {
                    d.job_id = Some(schema::normalise_job_id(j, mode));
                }
                self.settle(round, "decide", &inv, sr)?;
                decided[i] = Some(Decided {
                    decision: d,
                    energy_after_deciding: inv.energy_after(),
                    spent_deciding: inv.spent(),
                });
            }
        }

        // R3 idle/donate/sabotage, sequential in roster order.
        let pre_r3: Vec<f64> = self.ledger.energies().to_vec();
        let eligible = |ledger: &Ledger, i: usize| match mode {
            // QUIRK-9: the owner's energy right now (a donation earlier in
            // this loop can revive it).
            Mode::Faithful => ledger.active(i),
            Mode::Corrected => pre_r3[i] > 0.0,
        };
        let mut outcomes: Vec<Outcome> = vec![Outcome::default(); n];
        let mut received: Vec<Vec<ReceivedDonation>> = vec![vec![]; n];
        let mut sabotaged: BTreeSet<String> = BTreeSet::new();
        for i in 0..n {
            let Some(dd) = decided[i].clone() else {
                continue;
            };
            let d = &dd.decision;
            let ok = eligible(&self.ledger, i);
            let before = self.ledger.energy(i);
            match d.action {
                Action::Idle | Action::SabotageJob => {
                    let fee = if d.action == Action::Idle {
                        self.cfg.idle_fee
                    } else {
                        self.cfg.sabotage_fee
                    };
                    let recorded = if ok {
                        let deducted = self.ledger.fee(i, fee)?;
                        let recorded = rules::recorded_fee(fee, deducted, mode);
                        if d.action == Action::SabotageJob {
                            if let Some(j) = d.job_id.as_deref().and_then(|j| job_by_id.get(j)) {
                                sabotaged.insert(j.id.clone());
                            }
                        }
                        recorded
                    } else {
                        // QUIRK-4: skipped, yet memory records the fee.
                        match mode {
                            Mode::Faithful => fee,
                            Mode::Corrected => 0.0,
                        }
                    };
                    outcomes[i].action_cost = recorded;
                    self.rec.event(
                        "fee",
                        json!({"round": round, "phase": "action", "agent": self.agents[i].id(),
                               "action": d.action, "job_id": d.job_id, "executed": ok, "fee": fee,
                               "recorded": recorded, "energy_before": before,
                               "energy_after": self.ledger.energy(i)}),
                    )?;
                }
                Action::Donate => {
                    let amount = d.amount.unwrap_or(0.0);
                    let target = d
                        .target_agent
                        .as_deref()
                        .and_then(|t| self.agents.iter().position(|a| a.id() == t));
                    let mut moved = None;
                    let mut revived = false;
                    if ok {
                        if let Some(t) = target {
                            if let Some(x) = rules::donation_transfer(amount, before, mode) {
                                revived = self.ledger.donate(i, t, x)?;
                                moved = Some(x);
                            }
                        }
                    }
                    let recorded =
                        rules::recorded_donation(amount, dd.energy_after_deciding, moved, mode);
                    outcomes[i].action_cost = recorded;
                    outcomes[i].donated = Some(recorded);
                    if let Some(t) = target {
                        // Faithful: the target's memory shows every donation
                        // naming it, moved or not; corrected: transfers only.
                        if mode == Mode::Faithful || moved.is_some() {
                            received[t].push(ReceivedDonation {
                                from_agent: self.agents[i].id().into(),
                                amount: recorded,
                            });
                        }
                    }
                    if moved.is_some() {
                        self.stats[i].2 += 1;
                    }
                    self.rec.event(
                        "donation",
                        json!({"round": round, "phase": "action", "agent": self.agents[i].id(),
                               "target": d.target_agent, "amount": d.amount, "moved": moved,
                               "recorded": recorded, "executed": ok, "known_target": target.is_some(),
                               "revived": revived, "energy_before": before, "energy_after": self.ledger.energy(i),
                               "target_energy_after": target.map(|t| self.ledger.energy(t))}),
                    )?;
                }
                Action::AttemptJob => {}
            }
        }

        // R4 attempts, in parallel: owner active after R3 (corrected: before
        // R3) and a job id of this round.
        let mut attempters: Vec<(usize, Job)> = vec![];
        for i in 0..n {
            let Some(dd) = &decided[i] else { continue };
            if dd.decision.action != Action::AttemptJob {
                continue;
            }
            let job = dd.decision.job_id.as_deref().and_then(|j| job_by_id.get(j));
            if let Some(j) = job {
                outcomes[i].attempted_job = Some(job_record(j));
                let alive = match mode {
                    Mode::Faithful => self.ledger.active(i),
                    Mode::Corrected => pre_r3[i] > 0.0 && self.ledger.active(i),
                };
                if alive {
                    attempters.push((i, (*j).clone()));
                }
            }
        }
        let mut solved: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut act_spent: Vec<f64> = vec![0.0; n];
        if !attempters.is_empty() {
            let views = self.views();
            let specs: Vec<InvokeSpec> = attempters
                .iter()
                .map(|(i, job)| {
                    let v = self.view(round, *i, &views, &jobs);
                    self.spec(
                        round,
                        *i,
                        "act",
                        prompts::solve_messages(&v, job),
                        OutputFormat::Json {
                            name: "AgentJobSolution".into(),
                            schema: schema::solution_schema(),
                            strict: Some(schema::solution_schema_strict(job.options.len())),
                        },
                        prompts::observation(&v, "act", &[], Some(job)),
                    )
                })
                .collect();
            let results = invoke_all(agency, specs, schema::parse_solution).await;
            for (inv, (i, job)) in results.into_iter().zip(&attempters) {
                let i = *i;
                let answer = inv.value.clone().unwrap_or(AgentJobSolution {
                    answer: String::new(),
                });
                let sr = serde_json::to_value(&answer)?;
                self.settle(round, "act", &inv, sr)?;
                act_spent[i] = inv.spent();
                let ok = rules::grade(
                    &answer.answer,
                    &job.options,
                    job.correct_answer(),
                    job.answer_index,
                    mode,
                );
                self.rec.event(
                    "grade",
                    json!({"round": round, "phase": "act", "agent": self.agents[i].id(), "job_id": job.id,
                           "answer": answer.answer, "answer_index": job.answer_index, "succeeded": ok}),
                )?;
                self.stats[i].0 += 1;
                if ok {
                    self.stats[i].1 += 1;
                    solved.entry(job.id.clone()).or_default().push(i);
                }
                outcomes[i].executed = true;
                outcomes[i].answer = Some(answer.answer);
                outcomes[i].succeeded = Some(ok);
                outcomes[i].rewarded = Some(0.0);
                outcomes[i].action_cost = act_spent[i];
            }
        }

        // R5 rewards: split among solvers, zero when sabotaged.
        for (job_id, solvers) in &solved {
            let reward = job_by_id[job_id.as_str()].reward as f64;
            let splits = rules::split_reward(reward, solvers.len(), mode);
            for (&i, &split) in solvers.iter().zip(&splits) {
                let paid = if sabotaged.contains(job_id) {
                    0.0
                } else if mode == Mode::Corrected && !self.ledger.active(i) {
                    // QUIRK-10 corrected: an agent that hit 0 while solving forfeits.
                    0.0
                } else {
                    split
                };
                let before = self.ledger.energy(i);
                self.ledger.reward(i, paid)?;
                outcomes[i].rewarded = Some(paid);
                self.rec.event(
                    "reward",
                    json!({"round": round, "phase": "rewards", "agent": self.agents[i].id(), "job_id": job_id,
                           "solvers": solvers.len(), "split": split, "paid": paid,
                           "sabotaged": sabotaged.contains(job_id), "energy_before": before,
                           "energy_after": self.ledger.energy(i)}),
                )?;
            }
        }
        // Sabotage outcomes: hit agents are everyone who attempted the job.
        // In both modes they show in the saboteur's memory from the next
        // round (QUIRK-12; corrected prompts say so, see prompts.rs).
        for i in 0..n {
            let Some(dd) = &decided[i] else { continue };
            if dd.decision.action != Action::SabotageJob {
                continue;
            }
            if let Some(j) = dd.decision.job_id.as_deref().and_then(|j| job_by_id.get(j)) {
                outcomes[i].sabotaged_job = Some(job_record(j));
                if sabotaged.contains(&j.id) {
                    outcomes[i].sabotage_hits = attempters
                        .iter()
                        .filter(|(_, aj)| aj.id == j.id)
                        .map(|(a, _)| self.agents[*a].id().to_string())
                        .collect();
                }
            }
        }

        // R5 memory: one entry per decision, then INACTIVE entries.
        let sab = self.cfg.enable_sabotage;
        for i in 0..n {
            let recv = if received[i].is_empty() {
                None
            } else {
                Some(received[i].clone())
            };
            let entry = match &decided[i] {
                Some(dd) => {
                    let d = &dd.decision;
                    let o = &outcomes[i];
                    let is_sab = d.action == Action::SabotageJob;
                    MemoryEntry {
                        round_num: round,
                        action: d.action.as_str().into(),
                        energy_spent_voting: vote_spent[i],
                        energy_spent_deciding: Some(dd.spent_deciding),
                        energy_spent_on_action: Some(o.action_cost),
                        energy_at_start_of_round: Some(start[i]),
                        attempted_job: o.attempted_job.clone(),
                        succeeded: o.succeeded,
                        energy_rewarded: o.rewarded,
                        agent_answer: o.answer.clone(),
                        target_agent: if d.action == Action::Donate {
                            d.target_agent.clone()
                        } else {
                            None
                        },
                        donated_amount: o.donated,
                        received_donations: recv,
                        sabotaged_job: sab.then(|| o.sabotaged_job.clone()),
                        sabotage_successful: sab
                            .then(|| is_sab.then(|| !o.sabotage_hits.is_empty())),
                        sabotage_hit_agents: sab.then(|| is_sab.then(|| o.sabotage_hits.clone())),
                    }
                }
                None => {
                    // Faithful: only agents that received a donation get a row
                    // (QUIRK-8); corrected: every agent gets one.
                    if recv.is_none() && mode == Mode::Faithful {
                        continue;
                    }
                    MemoryEntry {
                        round_num: round,
                        action: "INACTIVE".into(),
                        energy_spent_voting: match mode {
                            Mode::Faithful => None,
                            Mode::Corrected => vote_spent[i],
                        },
                        energy_spent_deciding: Some(0.0),
                        energy_spent_on_action: Some(0.0),
                        energy_at_start_of_round: Some(start[i]),
                        attempted_job: None,
                        succeeded: None,
                        energy_rewarded: None,
                        agent_answer: None,
                        target_agent: None,
                        donated_amount: None,
                        received_donations: recv,
                        sabotaged_job: sab.then_some(None),
                        sabotage_successful: sab.then_some(None),
                        sabotage_hit_agents: sab.then_some(None),
                    }
                }
            };
            self.rec.event(
                "memory",
                json!({"round": round, "phase": "memory", "agent": self.agents[i].id(), "entry": entry}),
            )?;
            self.agents[i].remember(entry);
        }

        // Conservation: every account moved exactly by its ledger lines.
        let end: Vec<f64> = self.ledger.energies().to_vec();
        let ledger = self.ledger.close_round()?;

        // R6 end_round bookkeeping.
        for i in 0..n {
            let a = &mut self.agents[i];
            rules::end_of_round(
                mode,
                round,
                end[i],
                start[i] > 0.0,
                decided[i].is_some(),
                &mut a.rounds_active,
                &mut a.deactivated_at_round,
            );
        }
        self.rec.event(
            "round_end",
            json!({"round": round, "energy": end,
                   "rounds_active": self.agents.iter().map(|a| a.rounds_active).collect::<Vec<_>>(),
                   "deactivated_at_round": self.agents.iter().map(|a| a.deactivated_at_round).collect::<Vec<_>>(),
                   "ledger": ledger}),
        )?;
        Ok(())
    }
}
