//! Replay of a reference run folder through the engine (faithful mode).
//!
//! A [`ReplayBackend`] answers every call of the engine with what the
//! reference recorded for that (round, phase, agent): the structured
//! response of `transcript.json` and the tokens of `token_usage.json`.
//! Jobs come from the recorded memory entries (options and correct answer),
//! so no data set is needed. The engine then plays the game by its own
//! rules, and [`compare`] checks every recorded value of `agents.json`
//! against the engine's: start energy per round, per-phase spend, grading,
//! rewards and splits, donations and receipts, rounds_active,
//! deactivated_at_round, errors and final energy.
//!
//! Charges. `token_usage.json` keeps only the tokens summed over an
//! invocation's calls, but the reference charged `round(T_i · c, 2)` after
//! each call i, clamped at 0. When the phase's recorded spend equals the
//! formula applied to the summed tokens (the spec measured 97.4% of phase
//! records), the backend answers in one call and the equality is counted as
//! a check of the cost formula. Otherwise the invocation must have spanned
//! several calls (rounding per call, or a clamp at 0): the backend splits
//! the recorded tokens over two calls (a retry after an unusable answer,
//! exactly as a multi-call invocation happened) at the first split point
//! that reproduces the recorded spend. Either way the tokens charged sum to
//! the recorded tokens, and the energy path goes through the engine's own
//! charging code. A phase with no split that reproduces it is a mismatch.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;

use anyhow::Context;
use serde_json::Value;

use crate::agency::run_one;
use crate::backend::{
    Backend, BackendError, FinishReason, ModelRequest, ModelResponse, ModelResult, TokenUsage,
};
use crate::energy::{py_round, CostModel};

use super::condition::{infer, Condition, Overrides};
use super::config::{JobsConfig, Mode, RosterEntry, ScriptedConfig, SocietyConfig};
use super::job::{Difficulty, Job};
use super::layout::{MemoryEntry, RunFolder};
use super::ledger::Tab;
use super::listed_jobs::ListedJobs;
use super::recorder::Recorder;
use super::society::Society;

/// One value the engine did not reproduce.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub round: Option<u32>,
    pub agent: String,
    pub field: String,
    pub expected: String,
    pub got: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.round {
            Some(r) => write!(f, "round {r}, {}: {}", self.agent, self.field)?,
            None => write!(f, "{}: {}", self.agent, self.field)?,
        }
        write!(f, ": recorded {}, engine {}", self.expected, self.got)
    }
}

/// Counts of how each recorded phase charge was reproduced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChargeStats {
    /// Spend == round(T · c, 2) (with the clamp) in one call.
    pub single_call: usize,
    /// Reproduced only by splitting the tokens over two calls.
    pub split_calls: usize,
    /// Phases without a recorded spend (agent died while voting, QUIRK-8).
    pub unrecorded: usize,
    /// INVOKE_ERROR phases (nothing charged).
    pub invoke_errors: usize,
}

/// The result of replaying one run.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    pub run: String,
    /// The condition replayed, and where each switch came from.
    pub condition: Condition,
    pub rounds: u32,
    pub charges: ChargeStats,
    pub values_checked: usize,
    pub mismatches: Vec<Mismatch>,
}

type Key = (u32, String, String);

struct Recorded {
    structured: Value,
    tokens: u64,
    error: Option<String>,
    spent: Option<f64>,
}

struct Plan {
    calls: Vec<(u64, bool)>,
    error: Option<String>,
    text: String,
}

#[derive(Default)]
struct Shared {
    mismatches: Vec<Mismatch>,
    charges: ChargeStats,
    used: BTreeSet<Key>,
}

/// Answers engine calls from a recorded run.
pub struct ReplayBackend {
    recorded: BTreeMap<Key, Recorded>,
    per_token: BTreeMap<String, f64>,
    plans: BTreeMap<Key, Plan>,
    shared: Rc<RefCell<Shared>>,
}

fn spent_of(m: &MemoryEntry, phase: &str) -> Option<f64> {
    match phase {
        "vote" => m.energy_spent_voting,
        "decide" => m.energy_spent_deciding,
        _ => m.energy_spent_on_action,
    }
}

/// What `parts` tokens charged call by call (on a ledger tab, exactly as the
/// engine charges) spend from `before`, as memory records it.
fn spend(before: f64, c: f64, parts: &[u64]) -> f64 {
    let mut tab = Tab::open(c, before);
    for &t in parts {
        tab.charge(t);
    }
    py_round(before - tab.energy(), 2)
}

/// The per-call token counts that reproduce `spent` from `before`: one call
/// if the formula holds on the sum, else the first two-call split that does.
fn split_tokens(before: f64, c: f64, total: u64, spent: f64) -> Option<Vec<u64>> {
    if spend(before, c, &[total]) == spent {
        return Some(vec![total]);
    }
    for t1 in 1..total {
        if spend(before, c, &[t1, total - t1]) == spent {
            return Some(vec![t1, total - t1]);
        }
    }
    // Three to five calls (the budget): k − 1 equal short calls and the
    // rest, each short call rounding by at most half a cent.
    for k in 3..=5u64 {
        for t in 1..=total / k {
            let mut v = vec![t; (k - 1) as usize];
            v.push(total - (k - 1) * t);
            if spend(before, c, &v) == spent {
                return Some(v);
            }
        }
    }
    None
}

impl ReplayBackend {
    fn new(run: &RunFolder, cost: CostModel, shared: Rc<RefCell<Shared>>) -> Self {
        let mut recorded = BTreeMap::new();
        let usage: BTreeMap<Key, u64> = run
            .token_usage
            .iter()
            .map(|u| {
                (
                    (u.round_num, u.phase.clone(), u.agent_id.clone()),
                    u.output_tokens,
                )
            })
            .collect();
        for t in &run.transcript {
            let key = (t.round_num, t.phase.clone(), t.agent_id.clone());
            let agent = run.agents.iter().find(|a| a.agent_id == t.agent_id);
            let error = agent.and_then(|a| {
                a.errors
                    .iter()
                    .find(|e| e.round_num == t.round_num && e.phase == t.phase)
                    .map(|e| (e.error_type.clone(), e.error_message.clone()))
            });
            let spent = agent.and_then(|a| {
                a.memory
                    .iter()
                    .find(|m| m.round_num == t.round_num && m.action != "INACTIVE")
                    .and_then(|m| spent_of(m, &t.phase))
            });
            recorded.insert(
                key.clone(),
                Recorded {
                    structured: t.structured_response.clone(),
                    tokens: usage.get(&key).copied().unwrap_or(0),
                    error: error.map(|(t, m)| format!("{t}: {m}")),
                    spent,
                },
            );
        }
        let per_token = run
            .config
            .agents
            .iter()
            .map(|a| (a.agent_id.clone(), cost.per_token(a.model_size)))
            .collect();
        ReplayBackend {
            recorded,
            per_token,
            plans: BTreeMap::new(),
            shared,
        }
    }

    fn plan(&self, key: &Key, before: f64) -> Result<Plan, String> {
        let rec = self
            .recorded
            .get(key)
            .ok_or_else(|| "the engine asked for a call the reference never made".to_string())?;
        let mut sh = self.shared.borrow_mut();
        if let Some(e) = &rec.error {
            if e.starts_with("invoke_error") {
                sh.charges.invoke_errors += 1;
                return Ok(Plan {
                    calls: vec![],
                    error: Some(e.clone()),
                    text: String::new(),
                });
            }
        }
        let format_error = rec.error.is_some();
        let c = self.per_token.get(&key.2).copied().unwrap_or(0.0);
        let tokens = match rec.spent {
            None => {
                sh.charges.unrecorded += 1;
                vec![rec.tokens]
            }
            Some(spent) => match split_tokens(before, c, rec.tokens, spent) {
                Some(t) => {
                    if t.len() == 1 {
                        sh.charges.single_call += 1;
                    } else {
                        sh.charges.split_calls += 1;
                    }
                    t
                }
                None => {
                    sh.mismatches.push(Mismatch {
                        round: Some(key.0),
                        agent: key.2.clone(),
                        field: format!("{} charge", key.1),
                        expected: format!("{spent}"),
                        got: format!(
                            "no split of {} tokens at c={c} from {before} reproduces it",
                            rec.tokens
                        ),
                    });
                    vec![rec.tokens]
                }
            },
        };
        let last = tokens.len() - 1;
        Ok(Plan {
            calls: tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| (t, i == last && !format_error))
                .collect(),
            error: None,
            text: rec.structured.to_string(),
        })
    }

    /// The recorded answer to one engine call (what [`Backend::generate`]
    /// answers it with).
    pub fn answer(&mut self, req: &ModelRequest) -> ModelResult {
        let obs = &req.observation;
        let round = obs.get("round").and_then(Value::as_u64).unwrap_or(0) as u32;
        let call = obs.get("call").and_then(Value::as_u64).unwrap_or(0) as usize;
        let before = obs
            .get("self")
            .and_then(|s| s.get("energy"))
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let key: Key = (round, req.tag.clone(), req.agent_id.clone());
        let err = |message: String| BackendError {
            model: req.model.clone(),
            message,
            partial_usage: None,
        };
        if call == 0 {
            match self.plan(&key, before) {
                Ok(p) => {
                    self.plans.insert(key.clone(), p);
                    self.shared.borrow_mut().used.insert(key.clone());
                }
                Err(m) => {
                    self.shared.borrow_mut().mismatches.push(Mismatch {
                        round: Some(round),
                        agent: req.agent_id.clone(),
                        field: format!("{} call", req.tag),
                        expected: "no call".into(),
                        got: "a call".into(),
                    });
                    return Err(err(m));
                }
            }
        }
        let plan = self
            .plans
            .get(&key)
            .ok_or_else(|| err("no replay plan".into()))?;
        if let Some(e) = &plan.error {
            return Err(err(e.clone()));
        }
        let (tokens, valid) = plan.calls.get(call).copied().unwrap_or((0, false));
        let tokens = u32::try_from(tokens).map_err(|_| err("token count overflows".into()))?;
        Ok(ModelResponse {
            text: if valid {
                plan.text.clone()
            } else {
                "(replayed call without a usable structured answer)".into()
            },
            thinking: String::new(),
            usage: TokenUsage {
                prompt_tokens: 0,
                generated_tokens: tokens,
                thinking_tokens: 0,
                charged_tokens: tokens,
                eos_counted: false,
            },
            finish: FinishReason::Scripted,
            rendered_prompt: None,
            latency_ms: 0.0,
            measured: None,
            count_source: Some(crate::backend::CountSource {
                charged: "recorded tokens".into(),
                counted_by: "replay".into(),
                thinking: None,
            }),
        })
    }
}

impl Backend for ReplayBackend {
    fn name(&self) -> String {
        "replay".into()
    }
    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        batch.iter().map(|r| self.answer(r)).collect()
    }
}

fn difficulty(s: &str) -> anyhow::Result<Difficulty> {
    Ok(match s {
        "easy" => Difficulty::Easy,
        "medium" => Difficulty::Medium,
        "hard" => Difficulty::Hard,
        other => anyhow::bail!("unknown difficulty `{other}` in a recorded job"),
    })
}

/// Per round, the jobs recorded in memory entries (attempted or sabotaged).
fn recorded_jobs(run: &RunFolder) -> anyhow::Result<Vec<Vec<Job>>> {
    let mut per_round: BTreeMap<u32, BTreeMap<String, Job>> = BTreeMap::new();
    for a in &run.agents {
        for m in &a.memory {
            let jobs = m
                .attempted_job
                .iter()
                .chain(m.sabotaged_job.iter().flatten());
            for j in jobs {
                let answer_index = j
                    .options
                    .iter()
                    .position(|o| *o == j.correct_answer)
                    .with_context(|| {
                        format!(
                            "round {} job {}: correct answer is not among the options",
                            m.round_num, j.job_id
                        )
                    })?;
                per_round.entry(m.round_num).or_default().insert(
                    j.job_id.clone(),
                    Job {
                        id: j.job_id.clone(),
                        question_id: -1,
                        category: j.category.clone(),
                        difficulty: difficulty(&j.difficulty)?,
                        reward: j.reward as u32,
                        description: j.description.clone(),
                        options: j.options.clone(),
                        answer_index,
                    },
                );
            }
        }
    }
    let last = run
        .config
        .max_rounds
        .max(per_round.keys().copied().max().unwrap_or(0));
    Ok((1..=last)
        .map(|r| {
            per_round
                .remove(&r)
                .map(|m| m.into_values().collect())
                .unwrap_or_default()
        })
        .collect())
}

/// The faithful engine configuration of a recorded run in `condition`.
pub fn config_of(run: &RunFolder, condition: &Condition) -> SocietyConfig {
    let c = &run.config;
    SocietyConfig {
        name: c.experiment.clone(),
        mode: Mode::Faithful,
        objective: condition.objective.value,
        use_votes: condition.use_votes.value,
        enable_sabotage: condition.enable_sabotage.value,
        memory: condition.memory.value,
        max_rounds: c.max_rounds,
        difficulty: condition.difficulty.value,
        cost: CostModel {
            k: 0.015,
            alpha: condition.alpha.value,
            ..Default::default()
        },
        seed: c.seed,
        max_calls: 5,
        idle_fee: 10.0,
        sabotage_fee: 10.0,
        jobs: JobsConfig::Procedural,
        scripted: ScriptedConfig::default(),
        generation: Default::default(),
        llm: Default::default(),
        roster: c
            .agents
            .iter()
            .map(|a| RosterEntry {
                agent_id: a.agent_id.clone(),
                model: "replay".into(),
                model_name: a.model_name.clone(),
                size: a.model_size,
                init_energy: a.init_energy,
            })
            .collect(),
        kernels: None,
    }
}

struct Cmp<'a> {
    out: &'a mut Vec<Mismatch>,
    checked: usize,
}

/// Energies are compared to within this. The reference recorded only the
/// summed tokens of a multi-call invocation, so the exact sequence of
/// per-call subtractions (and hence the last bits of the double) cannot be
/// recovered when an invocation spanned several calls; cents always agree,
/// and single-call paths agree to the bit.
pub const ENERGY_TOLERANCE: f64 = 1e-6;

impl Cmp<'_> {
    fn near(
        &mut self,
        round: Option<u32>,
        agent: &str,
        field: &str,
        expected: Option<f64>,
        got: Option<f64>,
    ) {
        self.checked += 1;
        let ok = match (expected, got) {
            (Some(a), Some(b)) => (a - b).abs() <= ENERGY_TOLERANCE,
            (a, b) => a == b,
        };
        if !ok {
            self.out.push(Mismatch {
                round,
                agent: agent.into(),
                field: field.into(),
                expected: format!("{expected:?}"),
                got: format!("{got:?}"),
            });
        }
    }

    fn eq<T: PartialEq + std::fmt::Debug>(
        &mut self,
        round: Option<u32>,
        agent: &str,
        field: &str,
        expected: &T,
        got: &T,
    ) {
        self.checked += 1;
        if expected != got {
            self.out.push(Mismatch {
                round,
                agent: agent.into(),
                field: field.into(),
                expected: format!("{expected:?}"),
                got: format!("{got:?}"),
            });
        }
    }
}

/// Compare the engine's folder with the recorded one, value by value.
pub fn compare(recorded: &RunFolder, engine: &RunFolder, out: &mut Vec<Mismatch>) -> usize {
    let mut c = Cmp { out, checked: 0 };
    c.eq(
        None,
        "run",
        "agents",
        &recorded.agents.len(),
        &engine.agents.len(),
    );
    for (r, e) in recorded.agents.iter().zip(&engine.agents) {
        let id = r.agent_id.as_str();
        c.near(
            None,
            id,
            "final_energy",
            Some(r.final_energy),
            Some(e.final_energy),
        );
        c.eq(
            None,
            id,
            "rounds_active",
            &r.rounds_active,
            &e.rounds_active,
        );
        c.eq(
            None,
            id,
            "deactivated_at_round",
            &r.deactivated_at_round,
            &e.deactivated_at_round,
        );
        let errs = |v: &Vec<super::layout::ErrorRecord>| {
            v.iter()
                .map(|x| (x.round_num, x.phase.clone(), x.error_type.clone()))
                .collect::<Vec<_>>()
        };
        c.eq(None, id, "errors", &errs(&r.errors), &errs(&e.errors));
        let rounds: BTreeSet<u32> = r
            .memory
            .iter()
            .chain(&e.memory)
            .map(|m| m.round_num)
            .collect();
        for round in rounds {
            let rm = r.memory.iter().find(|m| m.round_num == round);
            let em = e.memory.iter().find(|m| m.round_num == round);
            let (Some(rm), Some(em)) = (rm, em) else {
                c.eq(
                    Some(round),
                    id,
                    "memory entry present",
                    &rm.is_some(),
                    &em.is_some(),
                );
                continue;
            };
            let rd = Some(round);
            c.eq(rd, id, "action", &rm.action, &em.action);
            c.near(
                rd,
                id,
                "energy_at_start_of_round",
                rm.energy_at_start_of_round,
                em.energy_at_start_of_round,
            );
            c.eq(
                rd,
                id,
                "energy_spent_voting",
                &rm.energy_spent_voting,
                &em.energy_spent_voting,
            );
            c.eq(
                rd,
                id,
                "energy_spent_deciding",
                &rm.energy_spent_deciding,
                &em.energy_spent_deciding,
            );
            c.eq(
                rd,
                id,
                "energy_spent_on_action",
                &rm.energy_spent_on_action,
                &em.energy_spent_on_action,
            );
            let jid = |m: &MemoryEntry| m.attempted_job.as_ref().map(|j| j.job_id.clone());
            c.eq(rd, id, "attempted_job", &jid(rm), &jid(em));
            c.eq(rd, id, "succeeded", &rm.succeeded, &em.succeeded);
            c.eq(
                rd,
                id,
                "energy_rewarded",
                &rm.energy_rewarded,
                &em.energy_rewarded,
            );
            c.eq(rd, id, "agent_answer", &rm.agent_answer, &em.agent_answer);
            c.eq(rd, id, "target_agent", &rm.target_agent, &em.target_agent);
            c.near(
                rd,
                id,
                "donated_amount",
                rm.donated_amount,
                em.donated_amount,
            );
            c.eq(
                rd,
                id,
                "received_donations",
                &rm.received_donations,
                &em.received_donations,
            );
            let sab = |m: &MemoryEntry| {
                (
                    m.sabotaged_job.clone().flatten().map(|j| j.job_id),
                    m.sabotage_successful.flatten(),
                    m.sabotage_hit_agents.clone().flatten(),
                )
            };
            c.eq(rd, id, "sabotage", &sab(rm), &sab(em));
        }
    }
    let usage = |f: &RunFolder| {
        f.token_usage
            .iter()
            .map(|u| {
                (
                    u.round_num,
                    u.phase.clone(),
                    u.agent_id.clone(),
                    u.output_tokens,
                )
            })
            .collect::<Vec<_>>()
    };
    c.eq(None, "run", "token_usage", &usage(recorded), &usage(engine));
    c.checked
}

/// Replay one reference run folder in the condition inferred from it and
/// compare everything.
pub fn replay_run(dir: &Path) -> anyhow::Result<ReplayReport> {
    replay_run_with(dir, &Overrides::default())
}

/// [`replay_run`] with some switches of the condition set by hand.
pub fn replay_run_with(dir: &Path, flags: &Overrides) -> anyhow::Result<ReplayReport> {
    let (replay, mut backend) = Replay::prepare(dir, flags)?;
    let society = replay.society(None);
    let result = run_one(&mut backend, |agency| society.run(agency))
        .with_context(|| format!("replaying {}", dir.display()))?;
    Ok(replay.report(&backend, Some(&result), None))
}

/// A reference run made ready to replay: the faithful engine's
/// configuration in the inferred condition and the recorded jobs. The
/// [`ReplayBackend`] made with it answers the engine's calls;
/// [`Replay::report`] then checks what the engine did against the record.
pub struct Replay {
    pub dir: std::path::PathBuf,
    pub run: RunFolder,
    pub condition: Condition,
    pub config: SocietyConfig,
    jobs: Vec<Vec<Job>>,
    shared: Rc<RefCell<Shared>>,
}

impl Replay {
    /// Read `dir` and infer its condition (`flags` set switches by hand).
    pub fn prepare(dir: &Path, flags: &Overrides) -> anyhow::Result<(Replay, ReplayBackend)> {
        let run = RunFolder::read(dir)?;
        let condition = infer(&run, dir, flags);
        let config = config_of(&run, &condition);
        let jobs = recorded_jobs(&run)?;
        let shared = Rc::new(RefCell::new(Shared::default()));
        let backend = ReplayBackend::new(&run, config.cost, shared.clone());
        let replay = Replay {
            dir: dir.to_path_buf(),
            run,
            condition,
            config,
            jobs,
            shared,
        };
        Ok((replay, backend))
    }

    /// The faithful society of the recorded run (records in memory), with
    /// `config` in place of the replay's own where given (e.g. fewer rounds,
    /// roster models that a real backend serves).
    pub fn society(&self, config: Option<SocietyConfig>) -> Society {
        let jobs = ListedJobs::new(self.jobs.clone(), self.dir.display().to_string());
        let cfg = config.unwrap_or_else(|| self.config.clone());
        Society::new(cfg, Box::new(jobs), Recorder::in_memory())
    }

    /// What the replay reproduced: every recorded call of rounds up to
    /// `last_round` (all with `None`) must have been asked for, and with a
    /// finished run of every round, every recorded value is compared.
    pub fn report(
        &self,
        backend: &ReplayBackend,
        result: Option<&super::society::SocietyResult>,
        last_round: Option<u32>,
    ) -> ReplayReport {
        let mut sh = self.shared.borrow_mut();
        let unused: Vec<Key> = backend
            .recorded
            .keys()
            .filter(|k| !sh.used.contains(*k) && last_round.is_none_or(|r| k.0 <= r))
            .cloned()
            .collect();
        for (round, phase, agent) in unused {
            sh.mismatches.push(Mismatch {
                round: Some(round),
                agent,
                field: format!("{phase} call"),
                expected: "a call".into(),
                got: "no call".into(),
            });
        }
        let mut mismatches = std::mem::take(&mut sh.mismatches);
        let checked = match (result, last_round) {
            (Some(r), None) => compare(&self.run, &r.folder, &mut mismatches),
            _ => 0,
        };
        ReplayReport {
            run: self.dir.display().to_string(),
            condition: self.condition.clone(),
            rounds: result.map(|r| r.rounds_played).unwrap_or(0),
            charges: sh.charges.clone(),
            values_checked: checked,
            mismatches,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_when_the_formula_holds_else_a_two_call_split() {
        // 1399 tokens at 0.03: 41.97 in one call.
        assert_eq!(split_tokens(1500.0, 0.03, 1399, 41.97), Some(vec![1399]));
        // At 0.045, 2 x 1 token charges 0.04 + 0.04 (ties to even) = 0.08,
        // while 2 tokens at once charge 0.09.
        let c = 0.045;
        assert_eq!(py_round(2.0 * c, 2), 0.09);
        assert_eq!(split_tokens(100.0, c, 2, 0.08), Some(vec![1, 1]));
        // A clamp at 0: 50 energy, 2000 tokens at 0.03 -> spent 50.
        assert_eq!(split_tokens(50.0, 0.03, 2000, 50.0), Some(vec![2000]));
        assert_eq!(split_tokens(100.0, 0.03, 10, 5.0), None);
    }
}
