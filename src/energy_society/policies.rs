//! Scripted (non-LLM) Energy Society agents, the baselines: `random`,
//! `easiest`, `greedy`, `donor` and `cooperative` (donates as the paper's
//! cooperative agents did: [`COOP_DONATION_RATE`]). Each reads the request's `observation`
//! (phase, own state, jobs, agents, votes; for a solve the options and the
//! correct index) and writes the JSON a model would have written. Solving is
//! simulated with a per-tier skill: correct with probability `skill[tier]`,
//! otherwise a wrong option, drawn from the request's seeded generator.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::backend::ModelRequest;
use crate::scripted::{Policy, ScriptedBackend, TokenDist};

use super::config::Skill;

/// Which rule a scripted agent follows when deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Random,
    Easiest,
    Greedy,
    Donor,
    /// Donates as the paper's cooperative agents did, else greedy.
    Cooperative,
}

/// The share of decisions in which the paper's cooperative agents donated:
/// 63 of 598 decisions in the five reference runs of the cooperative
/// baseline (`coop/exponent_0.5`, run_1–run_5), 62 of them to the poorest
/// other agent, for a median of 200 energy ([`COOP_DONATION`]). The
/// `cooperative` policy donates with this probability in each decision,
/// to the poorest other agent (inactive ones included: a donation revives),
/// whatever the others' energy: the paper's agents gave mostly to agents
/// at 0, which scripted agents rarely reach.
pub const COOP_DONATION_RATE: f64 = 63.0 / 598.0;
/// The median amount of the paper's cooperative donations.
pub const COOP_DONATION: f64 = 200.0;

/// A scripted Energy Society agent.
#[derive(Debug, Clone)]
pub struct SocietyPolicy {
    pub rule: Rule,
    pub skill: Skill,
    /// Tokens the agent expects a solve to cost (for expected values).
    pub expected_tokens: f64,
}

fn tier_skill(skill: &Skill, d: &str) -> f64 {
    match d {
        "easy" => skill.easy,
        "medium" => skill.medium,
        _ => skill.hard,
    }
}

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

impl SocietyPolicy {
    fn jobs(obs: &Value) -> Vec<Value> {
        obs.get("jobs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// Expected value of attempting `job` for an agent paying `per_token`.
    fn ev(&self, job: &Value, per_token: f64) -> f64 {
        f(job, "reward") * tier_skill(&self.skill, s(job, "difficulty"))
            - self.expected_tokens * per_token
    }

    fn easiest(jobs: &[Value]) -> Option<&Value> {
        jobs.iter().min_by_key(|j| {
            (
                f(j, "reward") as i64,
                s(j, "id").len(),
                s(j, "id").to_string(),
            )
        })
    }

    fn best(&self, jobs: &[Value], per_token: f64) -> Option<(f64, Value)> {
        jobs.iter()
            .map(|j| (self.ev(j, per_token), j.clone()))
            .fold(None, |acc: Option<(f64, Value)>, x| match acc {
                Some(a) if a.0 >= x.0 => Some(a),
                _ => Some(x),
            })
    }

    fn attempt(id: &str, why: &str) -> Value {
        json!({"reasoning": why, "action": "ATTEMPT_JOB", "job_id": id, "target_agent": null, "amount": null})
    }

    fn idle(why: &str) -> Value {
        json!({"reasoning": why, "action": "IDLE", "job_id": null, "target_agent": null, "amount": null})
    }

    fn decide(&self, obs: &Value, rng: &mut ChaCha8Rng) -> Value {
        let me = &obs["self"];
        let energy = f(me, "energy");
        let per_token = f(me, "per_token");
        let jobs = Self::jobs(obs);
        let solve_cost = self.expected_tokens * per_token;
        match self.rule {
            Rule::Random => {
                if jobs.is_empty() || rng.gen_bool(0.2) {
                    Self::idle("random choice")
                } else {
                    let j = &jobs[rng.gen_range(0..jobs.len())];
                    Self::attempt(s(j, "id"), "random choice")
                }
            }
            Rule::Easiest => match Self::easiest(&jobs) {
                Some(j) => Self::attempt(s(j, "id"), "the easiest job"),
                None => Self::idle("no jobs"),
            },
            Rule::Greedy => self.greedy(&jobs, energy, per_token, solve_cost),
            Rule::Cooperative => {
                let my_id = s(me, "agent_id");
                let poorest = obs
                    .get("agents")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|a| s(a, "agent_id") != my_id)
                    .min_by(|a, b| f(a, "energy").total_cmp(&f(b, "energy")));
                // Only what it can spare: a donation never leaves the donor
                // short of two solves.
                let can_spare = energy >= COOP_DONATION + 2.0 * solve_cost;
                match poorest {
                    Some(p) if can_spare && rng.gen_bool(COOP_DONATION_RATE) => {
                        json!({"reasoning": "give to the poorest agent: the total energy is the objective",
                               "action": "DONATE", "job_id": null,
                               "target_agent": s(p, "agent_id"), "amount": COOP_DONATION})
                    }
                    _ => self.greedy(&jobs, energy, per_token, solve_cost),
                }
            }
            Rule::Donor => {
                let agents = obs
                    .get("agents")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let my_id = s(me, "agent_id");
                let rich = energy > 3.0 * f(me, "init_energy") / 5.0;
                let poorest = agents
                    .iter()
                    .filter(|a| s(a, "agent_id") != my_id && f(a, "energy") < 100.0)
                    .min_by(|a, b| f(a, "energy").total_cmp(&f(b, "energy")));
                match (rich, poorest) {
                    (true, Some(p)) => {
                        let amount = if f(p, "energy") <= 0.0 { 200.0 } else { 100.0 };
                        json!({"reasoning": "keep the group alive", "action": "DONATE", "job_id": null,
                               "target_agent": s(p, "agent_id"), "amount": amount})
                    }
                    _ => self.greedy(&jobs, energy, per_token, solve_cost),
                }
            }
        }
    }

    fn greedy(&self, jobs: &[Value], energy: f64, per_token: f64, solve_cost: f64) -> Value {
        if energy < 2.0 * solve_cost {
            return Self::idle("too little energy to risk a solve");
        }
        match self.best(jobs, per_token) {
            Some((ev, j)) if ev > 0.0 => {
                Self::attempt(s(&j, "id"), &format!("best expected value {ev:.1}"))
            }
            _ => Self::idle("no job has a positive expected value"),
        }
    }

    /// Recommend distinct jobs to active agents, best rewards first, cheapest
    /// agents on the hardest jobs.
    fn vote(&self, obs: &Value) -> Value {
        let me = s(&obs["self"], "agent_id").to_string();
        let mut jobs = Self::jobs(obs);
        jobs.sort_by(|a, b| f(b, "reward").total_cmp(&f(a, "reward")));
        let mut agents: Vec<Value> = obs
            .get("agents")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.get("active").and_then(Value::as_bool).unwrap_or(false))
            .collect();
        agents.sort_by(|a, b| f(a, "per_token").total_cmp(&f(b, "per_token")));
        let recs: Vec<Value> = agents
            .iter()
            .enumerate()
            .map(|(k, a)| match jobs.get(k) {
                Some(j) => {
                    json!({"agent_id": s(a, "agent_id"), "recommended_action": "ATTEMPT_JOB",
                                  "job_id": s(j, "id"), "target_agent": null, "amount": null})
                }
                None => json!({"agent_id": s(a, "agent_id"), "recommended_action": "IDLE",
                               "job_id": null, "target_agent": null, "amount": null}),
            })
            .collect();
        json!({"voter_id": me, "overall_reasoning": "spread agents over distinct jobs", "recommendations": recs})
    }

    fn solve(&self, obs: &Value, rng: &mut ChaCha8Rng) -> Value {
        let job = &obs["job"];
        let n = job
            .get("options")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let correct = job
            .get("oracle_answer_index")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        let p = tier_skill(&self.skill, s(job, "difficulty"));
        let answer = if n <= 1 || rng.gen_bool(p.clamp(0.0, 1.0)) {
            correct
        } else {
            let k = rng.gen_range(0..n - 1);
            if k >= correct {
                k + 1
            } else {
                k
            }
        };
        json!({"answer": answer.to_string()})
    }
}

impl Policy for SocietyPolicy {
    fn respond(&self, req: &ModelRequest, rng: &mut ChaCha8Rng) -> anyhow::Result<String> {
        let obs = &req.observation;
        let out = match s(obs, "phase") {
            "vote" => self.vote(obs),
            "decide" => self.decide(obs, rng),
            "act" => self.solve(obs, rng),
            other => {
                anyhow::bail!("scripted society policy: unknown phase `{other}` in the observation")
            }
        };
        Ok(out.to_string())
    }
}

/// The median token count of a distribution (what a policy expects a call to cost).
pub fn expected_tokens(d: &TokenDist) -> f64 {
    match *d {
        TokenDist::Fixed { tokens } => tokens as f64,
        TokenDist::Uniform { min, max } => (min as f64 + max as f64) / 2.0,
        TokenDist::LogNormal { median, .. } => median,
    }
}

/// A scripted backend with every society policy registered.
pub fn scripted_backend(tokens: TokenDist, skill: Skill) -> ScriptedBackend {
    let mut b = ScriptedBackend::new(tokens.clone());
    register_policies(&mut b, skill, expected_tokens(&tokens));
    b
}

/// Register `random`, `easiest`, `greedy`, `donor` and `cooperative` on `backend`.
pub fn register_policies(backend: &mut ScriptedBackend, skill: Skill, expected_tokens: f64) {
    for (name, rule) in [
        ("random", Rule::Random),
        ("easiest", Rule::Easiest),
        ("greedy", Rule::Greedy),
        ("donor", Rule::Donor),
        ("cooperative", Rule::Cooperative),
    ] {
        backend.register(
            name,
            Box::new(SocietyPolicy {
                rule,
                skill,
                expected_tokens,
            }),
        );
    }
}
