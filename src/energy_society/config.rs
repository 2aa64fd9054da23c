//! The experiment configuration of one Energy Society run (TOML): rules mode
//! (faithful / corrected, spec §10), objective, conditions (spec §5), cost
//! model (spec §2), roster, job source, scripted-agent settings and
//! generation parameters. Unknown keys are rejected, and every error names the
//! file, the key and what was expected.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::backend::GenParams;
use crate::energy::CostModel;
use crate::scripted::TokenDist;

use super::layout::DifficultyCounts;

/// Whether the reference's quirks (spec §10) are reproduced or fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Reproduce every quirk of the reference implementation.
    #[default]
    Faithful,
    /// Fix each quirk as spec §10 suggests.
    Corrected,
}

/// What agents are told to maximise (spec §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Objective {
    /// Own energy.
    #[default]
    #[serde(rename = "comp")]
    Competitive,
    /// Total energy of all agents.
    #[serde(rename = "coop")]
    Cooperative,
}

impl Objective {
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::Competitive => "comp",
            Objective::Cooperative => "coop",
        }
    }
}

/// One agent of the roster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RosterEntry {
    pub agent_id: String,
    /// Model key sent as `ModelRequest.model`: `scripted:<policy>` or a
    /// model manifest name.
    pub model: String,
    /// The name shown in prompts and records (`qwen3:8b`).
    pub model_name: String,
    /// Model size S in billions of parameters (drives the per-token price).
    pub size: f64,
    #[serde(default = "default_init_energy")]
    pub init_energy: f64,
}

/// The largest `init_energy`: far above any experiment's (the paper's is
/// 1500), and small enough that energies stay finite and plottable.
pub const MAX_INIT_ENERGY: f64 = 1e12;

// The most rounds of a run, and of jobs of one difficulty per round: the
// bounds a run folder is read with (the paper's 30 rounds, 4 jobs each).
use super::layout::{MAX_JOBS_PER_DIFFICULTY, MAX_ROUNDS};

pub use crate::output::num;

fn default_init_energy() -> f64 {
    1500.0
}

/// Where the jobs come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "source", rename_all = "lowercase", deny_unknown_fields)]
pub enum JobsConfig {
    /// Offline generated questions (no data set needed).
    #[default]
    Procedural,
    /// MMLU-Pro-Stratified with the reference's exact numpy draw. `path` is a
    /// local JSON, JSONL or parquet copy of the data set, or `"hub"` to fetch it.
    Mmlu { path: String },
}

/// Probability that a scripted agent answers a job of each tier correctly.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skill {
    pub easy: f64,
    pub medium: f64,
    pub hard: f64,
}

impl Default for Skill {
    fn default() -> Self {
        Skill {
            easy: 0.8,
            medium: 0.5,
            hard: 0.3,
        }
    }
}

/// Settings of the scripted (non-LLM) agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ScriptedConfig {
    /// Token counts drawn for every scripted call.
    pub tokens: TokenDist,
    /// Chance of a correct answer per tier.
    pub skill: Skill,
}

/// The whole configuration of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocietyConfig {
    /// A label for records (`baseline-comp`).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub objective: Objective,
    /// R1 (discussion) on or off.
    #[serde(default = "yes")]
    pub use_votes: bool,
    #[serde(default)]
    pub enable_sabotage: bool,
    /// Memory shown in prompts (spec §4.3: off removes own and others' memory).
    #[serde(default = "yes")]
    pub memory: bool,
    #[serde(default = "default_rounds")]
    pub max_rounds: u32,
    #[serde(default = "default_counts")]
    pub difficulty: DifficultyCounts,
    #[serde(default)]
    pub cost: CostModel,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Model calls per invocation (the reference's `run_limit = 5`).
    #[serde(default = "default_max_calls")]
    pub max_calls: u32,
    /// IDLE and SABOTAGE_JOB fees.
    #[serde(default = "default_fee")]
    pub idle_fee: f64,
    #[serde(default = "default_fee")]
    pub sabotage_fee: f64,
    #[serde(default)]
    pub jobs: JobsConfig,
    #[serde(default)]
    pub scripted: ScriptedConfig,
    #[serde(default)]
    pub generation: GenParams,
    /// How model-backed (non-scripted) agents run.
    #[serde(default)]
    pub llm: crate::llm::LlmConfig,
    pub roster: Vec<RosterEntry>,
    /// The kernels that computed the logits (`[kernels]`): written by Joule
    /// into the resolved config of a run with model-backed agents, never by a
    /// user. A config that has one (a resolved config run again) is accepted,
    /// and the run records its own in its place (`runner::society`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<crate::backend::KernelRecord>,
}

fn yes() -> bool {
    true
}
fn default_rounds() -> u32 {
    30
}
fn default_counts() -> DifficultyCounts {
    DifficultyCounts {
        easy: 4,
        medium: 4,
        hard: 4,
    }
}
fn default_seed() -> u64 {
    12345
}
/// The most model calls of one invocation: far above the reference's 5, and
/// few enough that a model that never answers validly cannot keep one turn
/// going for days (as `llm.retries`).
pub const MAX_CALLS: u32 = 100;

fn default_max_calls() -> u32 {
    5
}
fn default_fee() -> f64 {
    10.0
}

/// A configuration error: which file, which key, what was expected.
#[derive(Debug, thiserror::Error)]
#[error("{file}: key `{key}`: {message}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub message: String,
}

impl SocietyConfig {
    /// The paper's roster (spec §5) played by `policy` scripted agents.
    pub fn paper_roster(policy: &str) -> Vec<RosterEntry> {
        [
            ("agent_1", "gemma4:e4b", 4.0),
            ("agent_2", "nemotron-3-nano:4b", 4.0),
            ("agent_3", "qwen3.5:4b", 4.0),
            ("agent_4", "qwen3:8b", 8.0),
            ("agent_5", "qwen3.5:9b", 9.0),
        ]
        .into_iter()
        .map(|(id, name, size)| RosterEntry {
            agent_id: id.into(),
            model: format!("scripted:{policy}"),
            model_name: name.into(),
            size,
            init_energy: 1500.0,
        })
        .collect()
    }

    /// The baseline condition with scripted agents (for tests and defaults).
    pub fn baseline(policy: &str) -> Self {
        SocietyConfig {
            name: "baseline".into(),
            mode: Mode::Faithful,
            objective: Objective::Competitive,
            use_votes: true,
            enable_sabotage: false,
            memory: true,
            max_rounds: 30,
            difficulty: default_counts(),
            cost: CostModel::default(),
            seed: 12345,
            max_calls: 5,
            idle_fee: 10.0,
            sabotage_fee: 10.0,
            jobs: JobsConfig::Procedural,
            scripted: ScriptedConfig::default(),
            generation: GenParams::default(),
            llm: Default::default(),
            roster: Self::paper_roster(policy),
            kernels: None,
        }
    }

    /// Parse TOML text; `file` names the source in errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let cfg: SocietyConfig = toml::from_str(text).map_err(|e| {
            let key = e
                .span()
                .map(|s| key_at(text, s.start))
                .unwrap_or_else(|| "?".into());
            ConfigError {
                file: file.into(),
                key,
                message: toml_message(&e, text),
            }
        })?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Read and validate a TOML file.
    pub fn load(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read the config: {e}", path.display()))?;
        Ok(Self::from_toml_str(&text, &path.display().to_string())?)
    }

    /// Check every value a user controls.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let err = |key: String, message: String| ConfigError {
            file: file.into(),
            key,
            message,
        };
        if self.roster.is_empty() {
            return Err(err(
                "roster".into(),
                "expected at least one agent, got none".into(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, a) in self.roster.iter().enumerate() {
            if a.agent_id.trim().is_empty() {
                return Err(err(
                    format!("roster[{i}].agent_id"),
                    "expected a non-empty id".into(),
                ));
            }
            // Ids and names are written into tables and terminal lines.
            for (key, value) in [("agent_id", &a.agent_id), ("model_name", &a.model_name)] {
                crate::shown::plain_name(value)
                    .map_err(|m| err(format!("roster[{i}].{key}"), m))?;
            }
            if !seen.insert(a.agent_id.clone()) {
                return Err(err(
                    format!("roster[{i}].agent_id"),
                    format!("expected a unique id, `{}` appears twice", a.agent_id),
                ));
            }
            if a.model.trim().is_empty() {
                return Err(err(
                    format!("roster[{i}].model"),
                    "expected a model key such as `scripted:greedy` or a manifest name".into(),
                ));
            }
            if a.model_name.trim().is_empty() {
                return Err(err(
                    format!("roster[{i}].model_name"),
                    "expected the name prompts and reports show for the agent's model, such as \
                     `qwen3:8b`, got an empty name"
                        .into(),
                ));
            }
            if !(a.size > 0.0 && a.size.is_finite()) {
                return Err(err(
                    format!("roster[{i}].size"),
                    format!("expected a positive number, got {}", num(a.size)),
                ));
            }
            if !(a.init_energy > 0.0 && a.init_energy.is_finite()) {
                return Err(err(
                    format!("roster[{i}].init_energy"),
                    format!("expected a positive number, got {}", num(a.init_energy)),
                ));
            }
            if a.init_energy > MAX_INIT_ENERGY {
                return Err(err(
                    format!("roster[{i}].init_energy"),
                    format!(
                        "expected at most {} (the paper's agents start with 1500), got {}",
                        num(MAX_INIT_ENERGY),
                        num(a.init_energy)
                    ),
                ));
            }
        }
        if self.max_rounds == 0 {
            return Err(err(
                "max_rounds".into(),
                "expected at least 1, got 0".into(),
            ));
        }
        if self.max_rounds > MAX_ROUNDS {
            return Err(err(
                "max_rounds".into(),
                format!("expected at most {MAX_ROUNDS}, got {}", self.max_rounds),
            ));
        }
        if !(1..=MAX_CALLS).contains(&self.max_calls) {
            return Err(err(
                "max_calls".into(),
                format!("expected 1 to {MAX_CALLS}, got {}", self.max_calls),
            ));
        }
        // Each call's sampling seed is derived from the run's `seed` (`invoke::call_seed`), so a
        // seed given here would be silently ignored: refuse it instead.
        if self.generation.seed != 0 {
            return Err(err(
                "generation.seed".into(),
                format!(
                    "expected 0 or no key, got {}: the Energy Society derives every call's sampling seed from the run's `seed` (top level), the round, the phase, the agent and the retry",
                    self.generation.seed
                ),
            ));
        }
        let d = self.difficulty;
        for (key, n) in [("easy", d.easy), ("medium", d.medium), ("hard", d.hard)] {
            if n > MAX_JOBS_PER_DIFFICULTY {
                return Err(err(
                    format!("difficulty.{key}"),
                    format!("expected at most {MAX_JOBS_PER_DIFFICULTY} jobs per round, got {n}"),
                ));
            }
        }
        if d.easy + d.medium + d.hard == 0 {
            return Err(err(
                "difficulty".into(),
                "expected at least one job per round, got 0/0/0".into(),
            ));
        }
        if !(self.cost.k > 0.0 && self.cost.k.is_finite()) {
            return Err(err(
                "cost.k".into(),
                format!("expected a positive number, got {}", num(self.cost.k)),
            ));
        }
        if !(self.cost.alpha >= 0.0 && self.cost.alpha.is_finite()) {
            return Err(err(
                "cost.alpha".into(),
                format!(
                    "expected a number >= 0 (0: no size penalty; the paper's 0.5), got {}: a negative α makes bigger models cheaper",
                    self.cost.alpha
                ),
            ));
        }
        self.check_first_token().map_err(|(k, m)| err(k, m))?;
        self.cost.check().map_err(|(k, m)| err(k, m))?;
        if self.cost.model == crate::energy::CostKind::Measured {
            if self.llm.backend != crate::llm::BackendKind::Local {
                return Err(err(
                    "cost.model".into(),
                    "\"measured\" needs the local backend (`[llm] backend = \"local\"`): Joule cannot meter a model server's machine".into(),
                ));
            }
            if let Some((i, a)) = self
                .roster
                .iter()
                .enumerate()
                .find(|(_, a)| a.model.starts_with(crate::backend::SCRIPTED_PREFIX))
            {
                return Err(err(
                    "cost.model".into(),
                    format!("\"measured\" needs every agent on a local model; roster[{i}] is `{}`, which runs no model and consumes no energy to measure", a.model),
                ));
            }
        }
        for (key, v) in [
            ("idle_fee", self.idle_fee),
            ("sabotage_fee", self.sabotage_fee),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(err(key.into(), format!("expected a number >= 0, got {v}")));
            }
        }
        self.scripted
            .tokens
            .validate()
            .map_err(|m| err("scripted.tokens".into(), m))?;
        let s = self.scripted.skill;
        for (key, v) in [("easy", s.easy), ("medium", s.medium), ("hard", s.hard)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(err(
                    format!("scripted.skill.{key}"),
                    format!("expected a probability in [0, 1], got {v}"),
                ));
            }
        }
        self.generation
            .check()
            .map_err(|(key, m)| err(format!("generation.{key}"), m))?;
        crate::llm::validate(&self.llm).map_err(|(k, m)| err(k, m))?;
        if let JobsConfig::Mmlu { path } = &self.jobs {
            if path.trim().is_empty() {
                return Err(err(
                    "jobs.path".into(),
                    "expected a data set path (JSON, JSONL or parquet) or \"hub\"".into(),
                ));
            }
        }
        Ok(())
    }

    /// The paper's formula priced so that one generated token costs an
    /// agent more than its whole initial energy puts every such agent out
    /// at its first call, by construction: refused, with the range of
    /// `cost.k` or `cost.alpha` that keeps one token within every agent's
    /// energy. (The measured cost model prices joules, not tokens.)
    fn check_first_token(&self) -> Result<(), (String, String)> {
        if self.cost.model != crate::energy::CostKind::Formula {
            return Ok(());
        }
        let (k, alpha) = (self.cost.k, self.cost.alpha);
        let min_energy = self
            .roster
            .iter()
            .map(|a| a.init_energy)
            .fold(f64::INFINITY, f64::min);
        if k >= min_energy {
            return Err((
                "cost.k".into(),
                format!("expected a price per token below every agent's init_energy (the smallest is {}), got {}: one token would put an agent out", num(min_energy), num(k)),
            ));
        }
        for (i, a) in self.roster.iter().enumerate() {
            let price = self.cost.per_token(a.size);
            if !(price < a.init_energy) {
                // α ≤ ln(E/k) / ln(S) keeps k·S^α below E for every S > 1.
                let max_alpha = self
                    .roster
                    .iter()
                    .filter(|b| b.size > 1.0)
                    .map(|b| (b.init_energy / k).ln() / b.size.ln())
                    .fold(f64::INFINITY, f64::min);
                return Err((
                    "cost.alpha".into(),
                    format!(
                        "expected α in [0, {max_alpha:.2}) for this roster and k = {k}, got {alpha}: one generated token would cost roster[{i}] (`{}`, size {}) {price:.4e}, more than its init_energy {}, so every call would put it out",
                        a.agent_id, a.size, a.init_energy
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Resolve relative paths (the MMLU data set) against the config's folder.
    pub fn resolve_paths(&mut self, config_dir: &Path) {
        if let JobsConfig::Mmlu { path } = &mut self.jobs {
            if path != "hub" && Path::new(path.as_str()).is_relative() {
                *path = config_dir.join(&*path).display().to_string();
            }
        }
    }

    /// The resolved config's text (the measured cost model's scale filled in).
    pub fn to_toml(&self) -> anyhow::Result<String> {
        let mut c = self.clone();
        c.cost = c.cost.resolved();
        Ok(toml::to_string_pretty(&c)?)
    }

    /// Jobs per round.
    pub fn num_jobs(&self) -> u32 {
        // `validate` bounds each count, so the sum cannot overflow.
        self.difficulty.easy + self.difficulty.medium + self.difficulty.hard
    }

    pub fn folder_name(path: &Path) -> PathBuf {
        PathBuf::from(
            path.file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_else(|| "run".into()),
        )
    }
}

/// What a TOML error says, on one line, never empty, with the line and
/// column where the parser stopped (`… (line 2, column 14)`): the TOML
/// parser gives no message for some characters it refuses (a control
/// character in a comment), so those are described here.
pub fn toml_message(e: &toml::de::Error, text: &str) -> String {
    let m = e
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let before = &text.as_bytes()[..start];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let col = text.get(..start).map_or(0, |b| {
                b.rsplit('\n').next().map_or(0, |l| l.chars().count())
            }) + 1;
            let m = if m.is_empty() {
                let found = text
                    .get(span.start..)
                    .and_then(|t| t.chars().next())
                    .map_or("the end of the text".to_string(), |c| format!("{c:?}"));
                format!("TOML does not allow {found} here")
            } else {
                m
            };
            format!("{m} (line {line}, column {col})")
        }
        None if m.is_empty() => "not valid TOML".into(),
        None => m,
    }
}

/// The dotted key path (`roster[2].size`) of the TOML value at byte `pos`.
/// A best-effort reading of the text: tables, arrays of tables and the key
/// on the line.
fn key_at(text: &str, pos: usize) -> String {
    let mut table = String::new();
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    let mut key = String::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        offset += line.len();
        let t = line.trim();
        if let Some(name) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = name.trim().to_string();
            let n = counts.entry(name.clone()).or_insert(0);
            table = format!("{name}[{n}]");
            *n += 1;
            key.clear();
        } else if let Some(name) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            table = name.trim().to_string();
            key.clear();
        } else if let Some((k, _)) = t.split_once('=') {
            key = k.trim().trim_matches('"').to_string();
        }
        if pos < offset || offset >= text.len() {
            break;
        }
    }
    match (table.is_empty(), key.is_empty()) {
        (true, true) => "(top level)".into(),
        (true, false) => key,
        (false, true) => table,
        (false, false) => format!("{table}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
mode = "corrected"
objective = "coop"
max_rounds = 3
[cost]
k = 0.015
alpha = 0.0
[[roster]]
agent_id = "a"
model = "scripted:greedy"
model_name = "m"
size = 4
[[roster]]
agent_id = "b"
model = "scripted:donor"
model_name = "m"
size = 9
init_energy = 100
"#;

    #[test]
    fn parses_a_good_config_with_defaults() {
        let c = SocietyConfig::from_toml_str(GOOD, "x.toml").unwrap();
        assert_eq!(c.mode, Mode::Corrected);
        assert_eq!(c.objective, Objective::Cooperative);
        assert_eq!(c.roster[1].init_energy, 100.0);
        assert_eq!(c.roster[0].init_energy, 1500.0);
        assert_eq!(c.max_calls, 5);
        assert_eq!(c.num_jobs(), 12);
        assert_eq!(c.cost.alpha, 0.0);
        // round-trips through TOML
        let again = SocietyConfig::from_toml_str(&c.to_toml().unwrap(), "y").unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn cost_model_values_are_checked_and_recorded() {
        let bad = GOOD.replace("alpha = 0.0", "alpha = 0.0\nmodel = \"joules\"");
        let s = SocietyConfig::from_toml_str(&bad, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(s.starts_with("c.toml: key `cost.model`"), "{s}");
        assert!(s.contains("formula") && s.contains("measured"), "{s}");
        let measured = GOOD.replace("alpha = 0.0", "alpha = 0.5\nmodel = \"measured\"");
        let s = SocietyConfig::from_toml_str(&measured, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(s.starts_with("c.toml: key `cost.reference_size`"), "{s}");
        let with_ref = measured.replace(
            "model = \"measured\"",
            "model = \"measured\"\nreference_size = 4\nreference_j_per_token = 0.5",
        );
        // Scripted agents consume no energy a meter could measure.
        let s = SocietyConfig::from_toml_str(&with_ref, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            s.starts_with("c.toml: key `cost.model`") && s.contains("roster[0]"),
            "{s}"
        );
        let local = with_ref
            .replace("scripted:greedy", "smollm2")
            .replace("scripted:donor", "smollm2");
        let c = SocietyConfig::from_toml_str(&local, "c.toml").unwrap();
        let text = c.to_toml().unwrap();
        assert!(text.contains("model = \"measured\""), "{text}");
        assert!(text.contains("scale = 0.06"), "{text}");
        let again = SocietyConfig::from_toml_str(&text, "resolved.toml").unwrap();
        assert_eq!(again.cost.per_joule(), c.cost.per_joule());
        let formula = SocietyConfig::from_toml_str(GOOD, "c.toml").unwrap();
        assert!(formula.to_toml().unwrap().contains("model = \"formula\""));
    }

    #[test]
    fn a_generation_seed_that_would_be_ignored_is_refused() {
        let zero = format!("{GOOD}\n[generation]\nseed = 0\n");
        assert!(SocietyConfig::from_toml_str(&zero, "c.toml").is_ok());
        let set = format!("{GOOD}\n[generation]\nseed = 7\n");
        let s = SocietyConfig::from_toml_str(&set, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            s.starts_with("c.toml: key `generation.seed`") && s.contains("run's `seed`"),
            "{s}"
        );
    }

    #[test]
    fn the_kv_cache_type_is_read_recorded_and_checked() {
        let c = SocietyConfig::from_toml_str(GOOD, "c.toml").unwrap();
        assert_eq!(
            c.llm.kv_cache,
            crate::inference::engine::state::KvCache::F32
        );
        assert!(c.to_toml().unwrap().contains("kv_cache = \"f32\""));
        let half = format!("{GOOD}\n[llm]\nkv_cache = \"f16\"\n");
        let c = SocietyConfig::from_toml_str(&half, "c.toml").unwrap();
        assert_eq!(
            c.llm.kv_cache,
            crate::inference::engine::state::KvCache::F16
        );
        let again = SocietyConfig::from_toml_str(&c.to_toml().unwrap(), "resolved.toml").unwrap();
        assert_eq!(again, c);
        let bad = format!("{GOOD}\n[llm]\nkv_cache = \"q8\"\n");
        let s = SocietyConfig::from_toml_str(&bad, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            s.starts_with("c.toml: key `llm.kv_cache`") && s.contains("f16"),
            "{s}"
        );
    }

    #[test]
    fn toml_syntax_errors_give_line_and_column_and_a_missing_file_one_cause() {
        let bad = GOOD.replace("max_rounds = 3", "max_rounds = = 3");
        let s = SocietyConfig::from_toml_str(&bad, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(s.starts_with("c.toml: key `max_rounds`: "), "{s}");
        assert!(
            s.ends_with("(line 4, column 14)") && !s.contains('\n'),
            "{s}"
        );
        let s = format!("{:#}", SocietyConfig::load("/nowhere/c.toml").unwrap_err());
        assert_eq!(s.matches("No such file").count(), 1, "{s}");
        assert!(
            s.starts_with("/nowhere/c.toml: cannot read the config: "),
            "{s}"
        );
        assert!(!s.contains("(file)"), "{s}");
    }

    #[test]
    fn negative_size_names_file_key_and_expectation() {
        let bad = GOOD.replace("size = 9", "size = -1");
        let e = SocietyConfig::from_toml_str(&bad, "configs/x.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "configs/x.toml: key `roster[1].size`: expected a positive number, got -1"
        );
    }

    #[test]
    fn control_characters_in_ids_and_model_names_are_refused() {
        for (from, to, key) in [
            (
                "agent_id = \"b\"",
                "agent_id = \"b\\nc\"",
                "roster[1].agent_id",
            ),
            (
                "model_name = \"m\"\nsize = 9",
                "model_name = \"m\\u001b[2J\"\nsize = 9",
                "roster[1].model_name",
            ),
            (
                "agent_id = \"a\"",
                "agent_id = \"a\\tb\"",
                "roster[0].agent_id",
            ),
        ] {
            let bad = GOOD.replace(from, to);
            assert_ne!(bad, GOOD);
            let e = SocietyConfig::from_toml_str(&bad, "c.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!(
                    "c.toml: key `{key}`: expected a name without control characters"
                )),
                "{e}"
            );
        }
        // A `|` is no control character: reports escape it.
        let pipe = GOOD.replace("agent_id = \"b\"", "agent_id = \"team|b\"");
        SocietyConfig::from_toml_str(&pipe, "c.toml").unwrap();
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_place() {
        let bad = GOOD.replace("alpha = 0.0", "alpha = 0.0\nbeta = 2");
        let e = SocietyConfig::from_toml_str(&bad, "c.toml").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("c.toml: key `cost.beta`"), "{s}");
        assert!(s.contains("unknown field `beta`"), "{s}");
        let bad = GOOD.replace("size = 4", "size = 4\ncolour = 1");
        let s = SocietyConfig::from_toml_str(&bad, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(s.contains("roster[0].colour"), "{s}");
    }

    #[test]
    fn wrong_types_and_bad_modes_are_named() {
        let bad = GOOD.replace("mode = \"corrected\"", "mode = \"fast\"");
        let s = SocietyConfig::from_toml_str(&bad, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(s.contains("key `mode`") && s.contains("faithful"), "{s}");
        let bad = GOOD.replace("max_rounds = 3", "max_rounds = \"many\"");
        let s = SocietyConfig::from_toml_str(&bad, "c.toml")
            .unwrap_err()
            .to_string();
        assert!(s.contains("key `max_rounds`"), "{s}");
        for (value, key) in [
            ("temperature = nan", "generation.temperature"),
            ("temperature = -1.0", "generation.temperature"),
            ("top_p = 0.0", "generation.top_p"),
            ("min_p = 1.5", "generation.min_p"),
            ("repeat_penalty = inf", "generation.repeat_penalty"),
            ("top_k = 0", "generation.top_k"),
        ] {
            let bad = format!("{GOOD}\n[generation]\n{value}\n");
            let s = SocietyConfig::from_toml_str(&bad, "c.toml")
                .unwrap_err()
                .to_string();
            assert!(
                s.starts_with(&format!("c.toml: key `{key}`: expected")),
                "{s}"
            );
        }
        for (from, to, key, expected) in [
            ("alpha = 0.0", "alpha = -2.0", "cost.alpha", "expected a number >= 0"),
            ("alpha = 0.0", "alpha = 50.0", "cost.alpha", "expected α in [0, 4.01) for this roster and k = 0.015, got 50: one generated token would cost roster[0] (`a`, size 4)"),
            ("k = 0.015", "k = 0.0", "cost.k", "expected a positive number"),
            ("model_name = \"m\"\nsize = 9", "model_name = \" \"\nsize = 9", "roster[1].model_name", "expected the name prompts and reports show"),
            ("k = 0.015", "k = 100.0", "cost.k", "expected a price per token below every agent's init_energy (the smallest is 100)"),
        ] {
            let bad = GOOD.replace(from, to);
            let s = SocietyConfig::from_toml_str(&bad, "c.toml")
                .unwrap_err()
                .to_string();
            assert!(
                s.starts_with(&format!("c.toml: key `{key}`: {expected}")),
                "{to}: {s}"
            );
        }
        let bad = GOOD.replace("max_rounds = 3", "max_rounds = 0");
        let s = SocietyConfig::from_toml_str(&bad, "c.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(s, "c.toml: key `max_rounds`: expected at least 1, got 0");
    }

    #[test]
    fn a_call_budget_of_none_or_past_the_bound_is_refused_naming_the_key() {
        for calls in [0u64, 101, 4294967295] {
            let s = error_of(&format!("max_calls = {calls}\n{GOOD}"));
            assert_eq!(
                s,
                format!("c.toml: key `max_calls`: expected 1 to {MAX_CALLS}, got {calls}")
            );
        }
        SocietyConfig::from_toml_str(&format!("max_calls = {MAX_CALLS}\n{GOOD}"), "c.toml")
            .unwrap();
    }

    fn error_of(text: &str) -> String {
        SocietyConfig::from_toml_str(text, "c.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn sizes_and_energies_too_large_to_run_are_refused_naming_the_key() {
        // A u32 sum that wraps to 1 (and to 0) once let a run start.
        for (easy, medium) in [(4294967295u64, 2), (4294967295, 1)] {
            let s = error_of(&format!(
                "{GOOD}\n[difficulty]\neasy = {easy}\nmedium = {medium}\nhard = 0\n"
            ));
            assert_eq!(
                s,
                format!("c.toml: key `difficulty.easy`: expected at most 1000 jobs per round, got {easy}")
            );
        }
        let s = error_of(&GOOD.replace("max_rounds = 3", "max_rounds = 4000000000"));
        assert_eq!(
            s,
            "c.toml: key `max_rounds`: expected at most 100000, got 4000000000"
        );
        let s = error_of(&GOOD.replace("init_energy = 100", "init_energy = 1.7e308"));
        assert_eq!(
            s,
            "c.toml: key `roster[1].init_energy`: expected at most 1000000000000 (the paper's agents start with 1500), got 1.7e308"
        );
        // Tiny numbers are written compactly, not as 300 digits.
        let s = error_of(&GOOD.replace("init_energy = 100", "init_energy = 1e-300"));
        assert!(s.contains("(the smallest is 1e-300), got 0.015"), "{s}");
        assert_eq!(num(1500.0), "1500");
        assert_eq!(num(0.015), "0.015");
        assert_eq!(num(-2e20), "-2e20");
    }
}
