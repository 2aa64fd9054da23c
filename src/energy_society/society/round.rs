//! One round of the Energy Society, R0–R6 of spec §1, as one function per
//! phase, in the spec's order:
//!
//! | phase | spec | function |
//! |---|---|---|
//! | R0 start_round | §1 R0, §3 | `Society::start_round` |
//! | R1 vote | §1 R1, §4.4 | `Society::vote` |
//! | R2 decide | §1 R2, §4.4, §6 | `Society::decide` |
//! | R3 idle/donate/sabotage | §1 R3, §2, §3 | `Society::act` (`pay_fee`, `donate`) |
//! | R4 attempt | §1 R4, §3 | `Society::attempt` (`choose_attempts`, `grade_attempt`) |
//! | R5 rewards + memory | §1 R5, §3, §4.1 | `Society::pay_rewards`, `Society::sabotage_hits`, `Society::write_memory` |
//! | R6 end_round | §1 R6 | `Society::end_round` |
//!
//! R7 (termination) is in `Society::run`. What R0 fixes for the whole round
//! is a [`RoundPlan`], read-only afterwards; what a phase hands on to the
//! later ones is in a [`RoundState`], each field written by one phase.
//! Agents' energies change only through the ledger, and every change,
//! charge, grade and payoff is logged as an event of the run.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use serde_json::json;

use crate::agency::Agency;
use crate::backend::OutputFormat;
use crate::energy_society::config::Mode;
use crate::energy_society::invoke::{invoke_all, Invocation, InvokeSpec, InvokeStatus};
use crate::energy_society::job::Job;
use crate::energy_society::layout::{JobRecord, MemoryEntry, ReceivedDonation};
use crate::energy_society::prompts;
use crate::energy_society::rules;
use crate::energy_society::schema::{self, Action, AgentDecision, AgentJobSolution, AgentVote};

use super::{job_record, Society};

/// What R0 fixes for the round; the later phases only read it.
struct RoundPlan {
    round: u32,
    /// The round's jobs (§3), `job_0…job_{n−1}`.
    jobs: Vec<Job>,
    /// Where each job id is in `jobs`.
    job_at: BTreeMap<String, usize>,
    /// Ids a strict output schema may name (constrained decoding only).
    job_ids: Vec<String>,
    /// Every agent's id, in roster order (strict output schemas).
    agent_ids: Vec<String>,
    /// `energy_at_round_start` of every agent, active or not.
    start: Vec<f64>,
}

impl RoundPlan {
    /// This round's job named `id`, if any (a job id means something only
    /// inside its round, §3).
    fn job(&self, id: Option<&str>) -> Option<&Job> {
        id.and_then(|id| self.job_at.get(id))
            .map(|&k| &self.jobs[k])
    }

    /// Every agent id but agent `i`'s (donation targets a strict schema
    /// may name).
    fn others(&self, i: usize) -> Vec<String> {
        let mut v = self.agent_ids.clone();
        v.remove(i);
        v
    }
}

/// A decision taken in R2 and what it cost.
#[derive(Debug, Clone)]
struct Decided {
    decision: AgentDecision,
    energy_after_deciding: f64,
    spent_deciding: f64,
}

/// What R3/R4/R5 did for one decision, for its memory entry.
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

/// What the phases of one round hand on to the later ones, per agent in
/// roster order. Each field names the phase that writes it.
struct RoundState {
    /// R1: each voter's vote (the fallback vote after a failed invocation).
    votes: Vec<Option<AgentVote>>,
    /// R1: each voter's `energy_spent_voting`.
    vote_spent: Vec<Option<f64>>,
    /// R2: each decider's decision, job id normalised.
    decided: Vec<Option<Decided>>,
    /// R3: every energy as R3 began (corrected mode's eligibility).
    pre_r3: Vec<f64>,
    /// R3–R5: what happened to each decision.
    outcomes: Vec<Outcome>,
    /// R3: the donations naming each agent, in roster order of the donors.
    received: Vec<Vec<ReceivedDonation>>,
    /// R3: the ids of the jobs sabotaged this round.
    sabotaged: BTreeSet<String>,
    /// R4: the attempts executed, `(agent, job)`, in roster order.
    attempters: Vec<(usize, Job)>,
    /// R4: per job id, the agents that solved it, in roster order.
    solved: BTreeMap<String, Vec<usize>>,
}

impl RoundState {
    fn new(n: usize) -> Self {
        RoundState {
            votes: vec![None; n],
            vote_spent: vec![None; n],
            decided: vec![None; n],
            pre_r3: vec![],
            outcomes: vec![Outcome::default(); n],
            received: vec![vec![]; n],
            sabotaged: BTreeSet::new(),
            attempters: vec![],
            solved: BTreeMap::new(),
        }
    }
}

impl Society {
    /// One round, R0–R6 of spec §1, one call per phase in the spec's order.
    /// R0's clearing of the round's votes, decisions, attempts and
    /// sabotaged jobs is the fresh [`RoundState`].
    pub(super) async fn play_round(&mut self, agency: &Agency, round: u32) -> anyhow::Result<()> {
        let plan = self.start_round(round)?;
        let mut st = RoundState::new(self.agents.len());
        self.vote(agency, &plan, &mut st).await?;
        self.decide(agency, &plan, &mut st).await?;
        self.act(&plan, &mut st)?;
        self.attempt(agency, &plan, &mut st).await?;
        self.pay_rewards(&plan, &mut st)?;
        self.sabotage_hits(&plan, &mut st);
        self.write_memory(&plan, &st)?;
        self.end_round(&plan, &st)
    }

    /// **R0 start_round** (spec §1 R0; the draw is §3).
    ///
    /// Reads: the job source, the ledger's energies.
    /// Changes: opens the round on the ledger; draws the round's jobs.
    /// Logs: `round_start` (start energies; the jobs with their answer index).
    fn start_round(&mut self, round: u32) -> anyhow::Result<RoundPlan> {
        self.ledger.begin_round(round);
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
        Ok(RoundPlan {
            round,
            job_at: jobs
                .iter()
                .enumerate()
                .map(|(k, j)| (j.id.clone(), k))
                .collect(),
            job_ids: jobs.iter().map(|j| j.id.clone()).collect(),
            agent_ids: self
                .agents
                .iter()
                .map(|a| a.spec.agent_id.clone())
                .collect(),
            jobs,
            start,
        })
    }

    /// **R1 vote** (spec §1 R1, prompts §4.4), only when `use_votes` and
    /// more than one agent is active: every active agent votes, in parallel.
    ///
    /// Reads: who is active now; every agent's live view and memory; the jobs.
    /// Changes: the voters' energies (their invocations' charges);
    /// `st.votes`, `st.vote_spent`; the voters' error records.
    /// Logs: per voter an `invocation` event, a token-usage row and a
    /// transcript entry (`settle`).
    async fn vote(
        &mut self,
        agency: &Agency,
        plan: &RoundPlan,
        st: &mut RoundState,
    ) -> anyhow::Result<()> {
        let (mode, round, n) = (self.cfg.mode, plan.round, self.agents.len());
        let voters: Vec<usize> = (0..n).filter(|&i| self.ledger.active(i)).collect();
        if !self.cfg.use_votes || voters.len() <= 1 {
            return Ok(());
        }
        let views = self.views();
        let sabotage = self.cfg.enable_sabotage;
        // The same for every voter of the round.
        let format = OutputFormat::Json {
            name: "AgentVote".into(),
            schema: schema::vote_schema(sabotage, n),
            strict: Some(schema::vote_schema_strict(
                sabotage,
                &plan.job_ids,
                &plan.agent_ids,
            )),
        };
        let specs: Vec<InvokeSpec> = voters
            .iter()
            .map(|&i| {
                let v = self.view(round, i, &views, &plan.jobs);
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
        let results = invoke_all(agency, specs, |t| schema::parse_vote(t, sabotage, mode)).await;
        for inv in results {
            let i = inv.agent;
            let vote = inv
                .value
                .clone()
                .unwrap_or_else(|| AgentVote::fallback(self.agents[i].id()));
            let sr = serde_json::to_value(&vote)?;
            self.settle(round, "vote", &inv, sr)?;
            st.vote_spent[i] = Some(inv.spent());
            st.votes[i] = Some(vote);
        }
        Ok(())
    }

    /// **R2 decide** (spec §1 R2, prompts §4.4, parsing §6): the agents
    /// still active after voting decide, in parallel; each sees every
    /// non-empty vote of this round in roster order. Skipped if nobody is
    /// active.
    ///
    /// Reads: who is active now; `st.votes`; every agent's live view and
    /// memory; the jobs.
    /// Changes: the deciders' energies (their invocations' charges);
    /// `st.decided` (job ids normalised, §6); the deciders' error records.
    /// Logs: per decider an `invocation` event, a token-usage row and a
    /// transcript entry with the decision as the model gave it.
    async fn decide(
        &mut self,
        agency: &Agency,
        plan: &RoundPlan,
        st: &mut RoundState,
    ) -> anyhow::Result<()> {
        let (mode, round, n) = (self.cfg.mode, plan.round, self.agents.len());
        let shown_votes: Vec<AgentVote> = st.votes.iter().flatten().cloned().collect();
        let deciders: Vec<usize> = (0..n).filter(|&i| self.ledger.active(i)).collect();
        if deciders.is_empty() {
            return Ok(());
        }
        let views = self.views();
        let sabotage = self.cfg.enable_sabotage;
        let specs: Vec<InvokeSpec> = deciders
            .iter()
            .map(|&i| {
                let v = self.view(round, i, &views, &plan.jobs);
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
                            &plan.job_ids,
                            &plan.others(i),
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
            st.decided[i] = Some(Decided {
                decision: d,
                energy_after_deciding: inv.energy_after(),
                spent_deciding: inv.spent(),
            });
        }
        Ok(())
    }

    /// **R3 idle/donate/sabotage** (spec §1 R3; fees and donations §2,
    /// sabotage §3): sequential, no model calls, walking the decisions in
    /// roster order. A decision runs only if its owner may act: faithful,
    /// the owner is active right now, so a donation earlier in this loop can
    /// revive it (QUIRK-9); corrected, it was active as R3 began.
    /// ATTEMPT_JOB does nothing here.
    ///
    /// Reads: `st.decided`; the ledger's live energies.
    /// Changes: energies (fees, donations, revivals); `st.pre_r3`, the
    /// action costs and donations of `st.outcomes`, `st.received`,
    /// `st.sabotaged`; the donors' donation counts.
    /// Logs: `fee` per IDLE/SABOTAGE_JOB, `donation` per DONATE.
    fn act(&mut self, plan: &RoundPlan, st: &mut RoundState) -> anyhow::Result<()> {
        st.pre_r3 = self.ledger.energies().to_vec();
        for i in 0..self.agents.len() {
            let Some(dd) = st.decided[i].clone() else {
                continue;
            };
            let may_act = match self.cfg.mode {
                Mode::Faithful => self.ledger.active(i),
                Mode::Corrected => st.pre_r3[i] > 0.0,
            };
            match dd.decision.action {
                Action::Idle | Action::SabotageJob => {
                    self.pay_fee(plan, st, i, &dd.decision, may_act)?
                }
                Action::Donate => self.donate(plan.round, st, i, &dd, may_act)?,
                Action::AttemptJob => {}
            }
        }
        Ok(())
    }

    /// R3 for one IDLE or SABOTAGE_JOB decision `d` of agent `i`: charge
    /// the flat fee (clamped at 0) if the owner may act, and mark a
    /// sabotaged job of this round (an invalid id still pays, §3). An owner
    /// that may not act pays nothing, yet faithful memory records the fee
    /// (QUIRK-4).
    fn pay_fee(
        &mut self,
        plan: &RoundPlan,
        st: &mut RoundState,
        i: usize,
        d: &AgentDecision,
        may_act: bool,
    ) -> anyhow::Result<()> {
        let mode = self.cfg.mode;
        let before = self.ledger.energy(i);
        let fee = if d.action == Action::Idle {
            self.cfg.idle_fee
        } else {
            self.cfg.sabotage_fee
        };
        let recorded = if may_act {
            let deducted = self.ledger.fee(i, fee)?;
            let recorded = rules::recorded_fee(fee, deducted, mode);
            if d.action == Action::SabotageJob {
                if let Some(j) = plan.job(d.job_id.as_deref()) {
                    st.sabotaged.insert(j.id.clone());
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
        st.outcomes[i].action_cost = recorded;
        self.rec.event(
            "fee",
            json!({"round": plan.round, "phase": "action", "agent": self.agents[i].id(),
                   "action": d.action, "job_id": d.job_id, "executed": may_act, "fee": fee,
                   "recorded": recorded, "energy_before": before,
                   "energy_after": self.ledger.energy(i)}),
        )?;
        Ok(())
    }

    /// R3 for one DONATE decision of agent `i` (spec §2 "Donations"): move
    /// what `rules::donation_transfer` allows to a known target if the
    /// donor may act (reviving a target at 0), and record what
    /// `rules::recorded_donation` says (QUIRK-5/6/7). Faithful, the
    /// target's memory shows every donation naming it, moved or not;
    /// corrected, transfers only.
    fn donate(
        &mut self,
        round: u32,
        st: &mut RoundState,
        i: usize,
        dd: &Decided,
        may_act: bool,
    ) -> anyhow::Result<()> {
        let mode = self.cfg.mode;
        let d = &dd.decision;
        let before = self.ledger.energy(i);
        let amount = d.amount.unwrap_or(0.0);
        let target = d
            .target_agent
            .as_deref()
            .and_then(|t| self.agents.iter().position(|a| a.id() == t));
        let mut moved = None;
        let mut revived = false;
        if may_act {
            if let Some(t) = target {
                if let Some(x) = rules::donation_transfer(amount, before, mode) {
                    revived = self.ledger.donate(i, t, x)?;
                    moved = Some(x);
                }
            }
        }
        let recorded = rules::recorded_donation(amount, dd.energy_after_deciding, moved, mode);
        st.outcomes[i].action_cost = recorded;
        st.outcomes[i].donated = Some(recorded);
        if let Some(t) = target {
            if mode == Mode::Faithful || moved.is_some() {
                st.received[t].push(ReceivedDonation {
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
                   "recorded": recorded, "executed": may_act, "known_target": target.is_some(),
                   "revived": revived, "energy_before": before, "energy_after": self.ledger.energy(i),
                   "target_energy_after": target.map(|t| self.ledger.energy(t))}),
        )?;
        Ok(())
    }

    /// **R4 attempt** (spec §1 R4, grading §3): every ATTEMPT_JOB decision
    /// naming a job of this round whose owner is active (faithful: after R3;
    /// corrected: also before R3) is solved, all in parallel; agents that
    /// pick the same job solve it independently. Skipped if there are none.
    ///
    /// Reads: `st.decided`, `st.pre_r3`; the ledger's live energies; every
    /// agent's live view; the jobs with their options.
    /// Changes: the solvers' energies (their invocations' charges);
    /// `st.attempters`, `st.solved`, the attempt fields of `st.outcomes`;
    /// attempt and success counts; the solvers' error records.
    /// Logs: per attempt an `invocation` event, a token-usage row, a
    /// transcript entry and a `grade` event.
    async fn attempt(
        &mut self,
        agency: &Agency,
        plan: &RoundPlan,
        st: &mut RoundState,
    ) -> anyhow::Result<()> {
        let attempters = self.choose_attempts(plan, st);
        if !attempters.is_empty() {
            let round = plan.round;
            let views = self.views();
            let specs: Vec<InvokeSpec> = attempters
                .iter()
                .map(|(i, job)| {
                    let v = self.view(round, *i, &views, &plan.jobs);
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
                self.grade_attempt(round, st, &inv, *i, job)?;
            }
        }
        st.attempters = attempters;
        Ok(())
    }

    /// R4: the attempts to execute, `(agent, job)` in roster order, and the
    /// attempted job of every ATTEMPT_JOB decision naming a job of this
    /// round, executed or not (an invalid id leaves it null, §6).
    fn choose_attempts(&self, plan: &RoundPlan, st: &mut RoundState) -> Vec<(usize, Job)> {
        let mut attempters = vec![];
        for i in 0..self.agents.len() {
            let Some(dd) = &st.decided[i] else { continue };
            if dd.decision.action != Action::AttemptJob {
                continue;
            }
            if let Some(j) = plan.job(dd.decision.job_id.as_deref()) {
                st.outcomes[i].attempted_job = Some(job_record(j));
                let alive = match self.cfg.mode {
                    Mode::Faithful => self.ledger.active(i),
                    Mode::Corrected => st.pre_r3[i] > 0.0 && self.ledger.active(i),
                };
                if alive {
                    attempters.push((i, j.clone()));
                }
            }
        }
        attempters
    }

    /// R4 for one solve invocation of agent `i` on `job`: settle it, grade
    /// the answer (a failed invocation answers `""`, graded as a failure;
    /// QUIRK-11 faithful), count it, and note a success in `st.solved`.
    fn grade_attempt(
        &mut self,
        round: u32,
        st: &mut RoundState,
        inv: &Invocation<AgentJobSolution>,
        i: usize,
        job: &Job,
    ) -> anyhow::Result<()> {
        let answer = inv.value.clone().unwrap_or(AgentJobSolution {
            answer: String::new(),
        });
        let sr = serde_json::to_value(&answer)?;
        self.settle(round, "act", inv, sr)?;
        let ok = rules::grade(
            &answer.answer,
            &job.options,
            job.correct_answer(),
            job.answer_index,
            self.cfg.mode,
        );
        self.rec.event(
            "grade",
            json!({"round": round, "phase": "act", "agent": self.agents[i].id(), "job_id": job.id,
                   "answer": answer.answer, "answer_index": job.answer_index, "succeeded": ok}),
        )?;
        self.stats[i].0 += 1;
        if ok {
            self.stats[i].1 += 1;
            st.solved.entry(job.id.clone()).or_default().push(i);
        }
        let o = &mut st.outcomes[i];
        o.executed = true;
        o.answer = Some(answer.answer);
        o.succeeded = Some(ok);
        o.rewarded = Some(0.0);
        o.action_cost = inv.spent();
        Ok(())
    }

    /// **R5 rewards** (spec §1 R5, §3 "Rewards and collisions"): each
    /// solved job's reward is split among its solvers (QUIRK-18 faithful
    /// rounding) and added without clamping; a sabotaged job pays 0.
    /// Corrected, an agent at 0 after solving forfeits (QUIRK-10).
    ///
    /// Reads: `st.solved`, `st.sabotaged`; the jobs' rewards.
    /// Changes: the solvers' energies; `rewarded` in `st.outcomes`.
    /// Logs: `reward` per solver.
    fn pay_rewards(&mut self, plan: &RoundPlan, st: &mut RoundState) -> anyhow::Result<()> {
        let mode = self.cfg.mode;
        for (job_id, solvers) in &st.solved {
            let job = plan
                .job(Some(job_id.as_str()))
                .with_context(|| format!("round {}: solved job {job_id}", plan.round))?;
            let splits = rules::split_reward(job.reward as f64, solvers.len(), mode);
            for (&i, &split) in solvers.iter().zip(&splits) {
                let sabotaged = st.sabotaged.contains(job_id);
                let paid = if sabotaged {
                    0.0
                } else if mode == Mode::Corrected && !self.ledger.active(i) {
                    // QUIRK-10 corrected: an agent that hit 0 while solving forfeits.
                    0.0
                } else {
                    split
                };
                let before = self.ledger.energy(i);
                self.ledger.reward(i, paid)?;
                st.outcomes[i].rewarded = Some(paid);
                self.rec.event(
                    "reward",
                    json!({"round": plan.round, "phase": "rewards", "agent": self.agents[i].id(),
                           "job_id": job_id, "solvers": solvers.len(), "split": split, "paid": paid,
                           "sabotaged": sabotaged, "energy_before": before,
                           "energy_after": self.ledger.energy(i)}),
                )?;
            }
        }
        Ok(())
    }

    /// **R5 sabotage outcomes** (spec §3 "Sabotage", QUIRK-12): each
    /// SABOTAGE_JOB naming a job of this round records the job and, if it
    /// was sabotaged, the hit agents: everyone who attempted it. In both
    /// modes they show in the saboteur's memory from the next round
    /// (corrected prompts say so, see prompts.rs).
    ///
    /// Reads: `st.decided`, `st.sabotaged`, `st.attempters`.
    /// Changes: the sabotage fields of `st.outcomes`. Logs: nothing.
    fn sabotage_hits(&self, plan: &RoundPlan, st: &mut RoundState) {
        for i in 0..self.agents.len() {
            let Some(dd) = &st.decided[i] else { continue };
            if dd.decision.action != Action::SabotageJob {
                continue;
            }
            if let Some(j) = plan.job(dd.decision.job_id.as_deref()) {
                st.outcomes[i].sabotaged_job = Some(job_record(j));
                if st.sabotaged.contains(&j.id) {
                    st.outcomes[i].sabotage_hits = st
                        .attempters
                        .iter()
                        .filter(|(_, aj)| aj.id == j.id)
                        .map(|(a, _)| self.agents[*a].id().to_string())
                        .collect();
                }
            }
        }
    }

    /// **R5 memory** (spec §1 R5, entries §4.1): one entry per decision,
    /// in roster order, then an INACTIVE entry for an agent without a
    /// decision: faithful, only if it received a donation (QUIRK-8);
    /// corrected, always.
    ///
    /// Reads: `plan.start`, `st.vote_spent`, `st.decided`, `st.outcomes`,
    /// `st.received`.
    /// Changes: every agent's memory (records and rendered text).
    /// Logs: `memory` per entry.
    fn write_memory(&mut self, plan: &RoundPlan, st: &RoundState) -> anyhow::Result<()> {
        for i in 0..self.agents.len() {
            let received = (!st.received[i].is_empty()).then(|| st.received[i].clone());
            let entry = match &st.decided[i] {
                Some(dd) => self.decision_entry(plan, st, i, dd, received),
                None if received.is_none() && self.cfg.mode == Mode::Faithful => continue,
                None => self.inactive_entry(plan, st, i, received),
            };
            self.rec.event(
                "memory",
                json!({"round": plan.round, "phase": "memory", "agent": self.agents[i].id(),
                       "entry": entry}),
            )?;
            self.agents[i].remember(entry);
        }
        Ok(())
    }

    /// R5: the memory entry of agent `i`'s decision (§4.1). The sabotage
    /// keys are written only when sabotage is on, as the reference does.
    fn decision_entry(
        &self,
        plan: &RoundPlan,
        st: &RoundState,
        i: usize,
        dd: &Decided,
        received: Option<Vec<ReceivedDonation>>,
    ) -> MemoryEntry {
        let sab = self.cfg.enable_sabotage;
        let d = &dd.decision;
        let o = &st.outcomes[i];
        let is_sab = d.action == Action::SabotageJob;
        MemoryEntry {
            round_num: plan.round,
            action: d.action.as_str().into(),
            energy_spent_voting: st.vote_spent[i],
            energy_spent_deciding: Some(dd.spent_deciding),
            energy_spent_on_action: Some(o.action_cost),
            energy_at_start_of_round: Some(plan.start[i]),
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
            received_donations: received,
            sabotaged_job: sab.then(|| o.sabotaged_job.clone()),
            sabotage_successful: sab.then(|| is_sab.then(|| !o.sabotage_hits.is_empty())),
            sabotage_hit_agents: sab.then(|| is_sab.then(|| o.sabotage_hits.clone())),
        }
    }

    /// R5: the INACTIVE entry of agent `i`, which made no decision (§4.1):
    /// zero costs; the voting cost is null when faithful (QUIRK-8), what
    /// the agent spent voting when corrected.
    fn inactive_entry(
        &self,
        plan: &RoundPlan,
        st: &RoundState,
        i: usize,
        received: Option<Vec<ReceivedDonation>>,
    ) -> MemoryEntry {
        let sab = self.cfg.enable_sabotage;
        MemoryEntry {
            round_num: plan.round,
            action: "INACTIVE".into(),
            energy_spent_voting: match self.cfg.mode {
                Mode::Faithful => None,
                Mode::Corrected => st.vote_spent[i],
            },
            energy_spent_deciding: Some(0.0),
            energy_spent_on_action: Some(0.0),
            energy_at_start_of_round: Some(plan.start[i]),
            attempted_job: None,
            succeeded: None,
            energy_rewarded: None,
            agent_answer: None,
            target_agent: None,
            donated_amount: None,
            received_donations: received,
            sabotaged_job: sab.then_some(None),
            sabotage_successful: sab.then_some(None),
            sabotage_hit_agents: sab.then_some(None),
        }
    }

    /// **R6 end_round** (spec §1 R6 and "Bookkeeping"): close the round on
    /// the ledger, which checks conservation (every account moved exactly
    /// by its ledger lines) and fails the run on a mismatch; then per agent
    /// `rules::end_of_round` sets `deactivated_at_round` or counts the round
    /// in `rounds_active` (QUIRK-1).
    ///
    /// Reads: the ledger's end energies, `plan.start`, `st.decided`.
    /// Changes: every agent's `rounds_active` / `deactivated_at_round`.
    /// Logs: `round_end` (energies, bookkeeping, the round's ledger lines).
    fn end_round(&mut self, plan: &RoundPlan, st: &RoundState) -> anyhow::Result<()> {
        let end: Vec<f64> = self.ledger.energies().to_vec();
        let ledger = self.ledger.close_round()?;
        for (i, a) in self.agents.iter_mut().enumerate() {
            rules::end_of_round(
                self.cfg.mode,
                plan.round,
                end[i],
                plan.start[i] > 0.0,
                st.decided[i].is_some(),
                &mut a.rounds_active,
                &mut a.deactivated_at_round,
            );
        }
        self.rec.event(
            "round_end",
            json!({"round": plan.round, "energy": end,
                   "rounds_active": self.agents.iter().map(|a| a.rounds_active).collect::<Vec<_>>(),
                   "deactivated_at_round": self.agents.iter().map(|a| a.deactivated_at_round).collect::<Vec<_>>(),
                   "ledger": ledger}),
        )?;
        Ok(())
    }
}
