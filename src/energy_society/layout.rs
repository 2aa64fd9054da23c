//! The reference implementation's run-folder layout (spec §8): `config.json`,
//! `agents.json`, `token_usage.json` and `transcript.json`. Joule reads these
//! to replay and analyse the published runs, and writes them beside its own
//! `events.jsonl` so the reference's analysis scripts can read Joule's runs.
//!
//! Numbers in the reference files mix integers and floats (`10` vs `10.0`);
//! they are all read as `f64`. Optional keys (the sabotage keys, and
//! `prompt_mode`/`use_votes`/`enable_sabotage` in configs) are `Option`s.

use std::path::Path;

use anyhow::Context;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// The most rounds a run folder may say it has (`max_rounds`, any
/// `round_num`): far more than any experiment's (the paper's 30), and few
/// enough that a table per round fits in memory.
pub const MAX_ROUNDS: u32 = 100_000;

/// The most jobs of one difficulty per round (the paper's 4).
pub const MAX_JOBS_PER_DIFFICULTY: u32 = 1_000;

/// The most generated tokens one `token_usage.json` entry (one agent's calls
/// in one phase of a round) can hold: far above the paper's (at most 10,181,
/// under a `max_tokens` of 8,000 a call), and small enough that matching a
/// count to its calls (`replay`) ends in moments.
pub const MAX_TOKENS_PER_ENTRY: u64 = 1_000_000;

/// `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub experiment: String,
    pub run_number: u32,
    pub max_rounds: u32,
    pub num_jobs: u32,
    pub model_size_exponent: f64,
    pub seed: u64,
    pub difficulty_distribution: DifficultyCounts,
    pub agents: Vec<AgentSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_votes: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_sabotage: Option<bool>,
}

/// Jobs per difficulty per round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DifficultyCounts {
    pub easy: u32,
    pub medium: u32,
    pub hard: u32,
}

/// One agent of the roster, as `config.json` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    pub agent_id: String,
    pub model_name: String,
    pub model_size: f64,
    pub init_energy: f64,
    /// The model that answered, when it is not `model_name` (a stand-in,
    /// a served model, a scripted policy): Joule's addition to the
    /// reference layout, absent when the paper's model answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
}

/// One element of `agents.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub agent_id: String,
    pub model_name: String,
    pub model_size: f64,
    pub init_energy: f64,
    pub final_energy: f64,
    pub rounds_active: u32,
    pub deactivated_at_round: Option<u32>,
    pub memory: Vec<MemoryEntry>,
    #[serde(default)]
    pub errors: Vec<ErrorRecord>,
    /// The model that answered, when it is not `model_name` (a stand-in,
    /// a served model, a scripted policy): Joule's addition to the
    /// reference layout, absent when the paper's model answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
}

/// A job as stored in memory entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job_id: String,
    pub category: String,
    pub difficulty: String,
    pub reward: f64,
    pub description: String,
    pub options: Vec<String>,
    pub correct_answer: String,
}

/// `{from_agent, amount}` in `received_donations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReceivedDonation {
    pub from_agent: String,
    pub amount: f64,
}

/// One memory entry (spec §4.1), written in R5 for each decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    pub round_num: u32,
    pub action: String,
    pub energy_spent_voting: Option<f64>,
    pub energy_spent_deciding: Option<f64>,
    pub energy_spent_on_action: Option<f64>,
    pub energy_at_start_of_round: Option<f64>,
    #[serde(default)]
    pub attempted_job: Option<JobRecord>,
    #[serde(default)]
    pub succeeded: Option<bool>,
    #[serde(default)]
    pub energy_rewarded: Option<f64>,
    #[serde(default)]
    pub agent_answer: Option<String>,
    #[serde(default)]
    pub target_agent: Option<String>,
    #[serde(default)]
    pub donated_amount: Option<f64>,
    #[serde(default)]
    pub received_donations: Option<Vec<ReceivedDonation>>,
    /// Only in the sabotage conditions: `None` when the key is absent,
    /// `Some(None)` when it is present and null (so the key's presence, which
    /// marks a sabotage-enabled run, survives a read).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub sabotaged_job: Option<Option<JobRecord>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub sabotage_successful: Option<Option<bool>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub sabotage_hit_agents: Option<Option<Vec<String>>>,
}

/// A key that is present deserializes to `Some`, even when its value is null
/// (an absent key takes the field's `default`, `None`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// One element of an agent's `errors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub round_num: u32,
    pub phase: String,
    pub error_type: String,
    pub error_message: String,
}

/// One element of `token_usage.json`: one (round, phase, agent) invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenUsageRecord {
    pub round_num: u32,
    pub phase: String,
    pub agent_id: String,
    pub output_tokens: u64,
}

/// One element of `transcript.json`. `structured_response` depends on the
/// phase; see [`VoteResponse`], [`DecisionResponse`] and [`SolutionResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    pub round_num: u32,
    pub phase: String,
    pub agent_id: String,
    #[serde(default)]
    pub reasoning_content: String,
    pub structured_response: serde_json::Value,
}

/// All four files of one run folder.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFolder {
    pub config: RunConfig,
    pub agents: Vec<AgentRecord>,
    pub token_usage: Vec<TokenUsageRecord>,
    pub transcript: Vec<TranscriptEntry>,
}

fn read_json<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // serde_json's error names the line, column and the field that failed.
    serde_json::from_str(&text).with_context(|| format!("{}: unexpected content", path.display()))
}

/// Each agent of a roster listed once, with a positive size and a finite
/// positive initial energy; `list` names the array in `file` (empty: the file
/// is the array).
fn check_roster<'a>(
    file: &'static str,
    list: &str,
    agents: impl Iterator<Item = (&'a String, f64, f64)>,
) -> Result<(), (&'static str, String)> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, (id, size, energy)) in agents.enumerate() {
        if !seen.insert(id) {
            return Err((
                file,
                format!("field `{list}[{i}].agent_id`: `{id}` is listed twice"),
            ));
        }
        if !(size > 0.0 && size.is_finite()) {
            return Err((
                file,
                format!("field `{list}[{i}].model_size`: expected a positive number, got {size}"),
            ));
        }
        if !(energy > 0.0 && energy.is_finite()) {
            return Err((
                file,
                format!(
                    "field `{list}[{i}].init_energy`: expected a positive number, got {energy}"
                ),
            ));
        }
    }
    Ok(())
}

impl RunFolder {
    /// Read a run folder in the reference layout, refused when it holds a
    /// value no run can ([`Self::check`]).
    pub fn read(dir: impl AsRef<Path>) -> anyhow::Result<Self> {
        let dir = dir.as_ref();
        let run = Self {
            config: read_json(&dir.join("config.json"))?,
            agents: read_json(&dir.join("agents.json"))?,
            token_usage: read_json(&dir.join("token_usage.json"))?,
            transcript: read_json(&dir.join("transcript.json"))?,
        };
        run.check()
            .map_err(|(file, msg)| anyhow::anyhow!("{}: {msg}", dir.join(file).display()))?;
        Ok(run)
    }

    /// The first value no run can hold (no rounds, an agent listed twice, a
    /// size that is not a positive number) or that is too large to size a
    /// table by ([`MAX_ROUNDS`], [`MAX_JOBS_PER_DIFFICULTY`],
    /// [`MAX_TOKENS_PER_ENTRY`]): the file and what is wrong (naming the field).
    fn check(&self) -> Result<(), (&'static str, String)> {
        let too_many = |field: String, v: u32, max: u32| {
            format!("field `{field}`: expected at most {max}, got {v}")
        };
        let c = &self.config;
        if c.max_rounds == 0 {
            return Err((
                "config.json",
                "field `max_rounds`: expected at least 1, got 0".into(),
            ));
        }
        if !(c.model_size_exponent >= 0.0 && c.model_size_exponent.is_finite()) {
            return Err((
                "config.json",
                format!(
                    "field `model_size_exponent`: expected a number >= 0, got {}",
                    c.model_size_exponent
                ),
            ));
        }
        let roster = c
            .agents
            .iter()
            .map(|a| (&a.agent_id, a.model_size, a.init_energy));
        check_roster("config.json", "agents", roster)?;
        let agents = self
            .agents
            .iter()
            .map(|a| (&a.agent_id, a.model_size, a.init_energy));
        check_roster("agents.json", "", agents)?;
        if c.max_rounds > MAX_ROUNDS {
            return Err((
                "config.json",
                too_many("max_rounds".into(), c.max_rounds, MAX_ROUNDS),
            ));
        }
        let d = c.difficulty_distribution;
        for (key, n) in [("easy", d.easy), ("medium", d.medium), ("hard", d.hard)] {
            if n > MAX_JOBS_PER_DIFFICULTY {
                let field = format!("difficulty_distribution.{key}");
                return Err(("config.json", too_many(field, n, MAX_JOBS_PER_DIFFICULTY)));
            }
        }
        for (i, a) in self.agents.iter().enumerate() {
            let rounds = a
                .memory
                .iter()
                .enumerate()
                .map(|(j, m)| (format!("[{i}].memory[{j}].round_num"), m.round_num))
                .chain(
                    a.errors
                        .iter()
                        .enumerate()
                        .map(|(j, e)| (format!("[{i}].errors[{j}].round_num"), e.round_num)),
                )
                .chain(std::iter::once((
                    format!("[{i}].rounds_active"),
                    a.rounds_active,
                )))
                .chain(
                    a.deactivated_at_round
                        .map(|r| (format!("[{i}].deactivated_at_round"), r)),
                );
            for (field, r) in rounds {
                if r > MAX_ROUNDS {
                    return Err(("agents.json", too_many(field, r, MAX_ROUNDS)));
                }
            }
        }
        for (i, t) in self.token_usage.iter().enumerate() {
            if t.round_num > MAX_ROUNDS {
                let field = format!("[{i}].round_num");
                return Err(("token_usage.json", too_many(field, t.round_num, MAX_ROUNDS)));
            }
            if t.output_tokens > MAX_TOKENS_PER_ENTRY {
                return Err((
                    "token_usage.json",
                    format!(
                        "field `[{i}].output_tokens`: expected at most {MAX_TOKENS_PER_ENTRY} \
                         (the tokens of one agent's calls in one phase), got {}",
                        t.output_tokens
                    ),
                ));
            }
        }
        for (i, t) in self.transcript.iter().enumerate() {
            if t.round_num > MAX_ROUNDS {
                let field = format!("[{i}].round_num");
                return Err(("transcript.json", too_many(field, t.round_num, MAX_ROUNDS)));
            }
        }
        Ok(())
    }

    /// Write the four files into `dir` (created if needed).
    pub fn write(&self, dir: impl AsRef<Path>) -> anyhow::Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        crate::record::write_json_atomic(dir.join("config.json"), &self.config)?;
        crate::record::write_json_atomic(dir.join("agents.json"), &self.agents)?;
        crate::record::write_json_atomic(dir.join("token_usage.json"), &self.token_usage)?;
        crate::record::write_json_atomic(dir.join("transcript.json"), &self.transcript)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/reference-runs/energy-society")
    }

    #[test]
    fn reads_every_shared_reference_run() {
        let root = reference_root();
        if !root.exists() {
            panic!("../shared is missing: the tests read the shared reference runs in place");
        }
        let mut n = 0;
        for cond in ["comp_with_discussion", "coop"] {
            for k in 1..=5 {
                let dir = root
                    .join(cond)
                    .join("exponent_0.5")
                    .join(format!("run_{k}"));
                let run = RunFolder::read(&dir).unwrap_or_else(|e| panic!("{e:#}"));
                assert_eq!(run.agents.len(), 5);
                assert_eq!(run.config.max_rounds, 30);
                n += 1;
            }
        }
        assert_eq!(n, 10);
    }
}
