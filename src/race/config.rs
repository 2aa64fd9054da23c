//! Race experiment files (`configs/ai-race/*.toml`): one
//! format for `joule race run` and `joule race sweep`. An experiment is the
//! product lineups × persona conditions × N × p_max × repetitions; every
//! cell is one race with `game_seed = base_seed + rep`, so p_max levels
//! share horizons and setback draws (common random numbers, §1.5).

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::engine::RaceRules;
use super::prompt::{persona, PromptCondition};
use super::rng::BASE_SEED;
use super::scenario::GameSpec;
use crate::backend::GenParams;
use crate::scripted::TokenDist;

/// Models per seat; a list shorter than N is cycled (one model = self-play).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lineup {
    pub name: String,
    pub seats: Vec<String>,
}

/// Persona ids per seat (cycled); empty = no persona sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonaCondition {
    pub name: String,
    #[serde(default)]
    pub seats: Vec<String>,
}

fn default_reps() -> u32 {
    10
}
fn default_seed() -> i64 {
    BASE_SEED
}
fn default_n() -> Vec<usize> {
    vec![2]
}
fn default_pmax() -> Vec<f64> {
    vec![0.1, 0.6, 0.9]
}
fn default_retries() -> u32 {
    3
}
fn default_temperature() -> f32 {
    0.7
}
fn default_max_tokens() -> u32 {
    32
}
fn default_true() -> bool {
    true
}
fn default_phase() -> String {
    "pilot".into()
}
fn default_personas() -> Vec<PersonaCondition> {
    vec![PersonaCondition {
        name: "none".into(),
        seats: vec![],
    }]
}

/// The most repetitions of one cell.
pub const MAX_REPETITIONS: u32 = 10_000;
/// The most races of one experiment (every pending race is held at once).
pub const MAX_RACES: usize = 200_000;
/// The most parse retries of a turn (each one a model call): far above
/// the paper's 3, and few enough that a model that never answers in the
/// format cannot keep a race going for days (as `llm.retries`).
pub const MAX_PARSE_RETRIES: u32 = 100;

/// `name` names the default output folder `runs/race/<name>`: a plain file
/// name, not a path.
fn check_name(name: &str) -> anyhow::Result<()> {
    let plain =
        !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    anyhow::ensure!(
        plain,
        "`name` must be a plain file name (not empty, no `/`, `\\` or `..`): it names the default output folder runs/race/<name>; got {name:?}"
    );
    Ok(())
}

/// The `field` of every `list` entry is different (game ids are built from them).
fn unique(list: &str, field: &str, values: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for v in values {
        anyhow::ensure!(
            seen.insert(v.clone()),
            "`{list}` lists {field} `{v}` twice; each must be different (it is part of every race's game id)"
        );
    }
    Ok(())
}

/// A race experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentConfig {
    pub name: String,
    #[serde(default = "default_reps")]
    pub repetitions: u32,
    #[serde(default = "default_seed")]
    pub base_seed: i64,
    #[serde(default = "default_pmax")]
    pub p_max: Vec<f64>,
    #[serde(default = "default_n")]
    pub n_players: Vec<usize>,
    pub lineups: Vec<Lineup>,
    #[serde(default = "default_personas")]
    pub personas: Vec<PersonaCondition>,
    #[serde(default)]
    pub prompt: PromptCondition,
    #[serde(default = "default_retries")]
    pub max_parse_retries: u32,
    #[serde(
        default = "default_temperature",
        serialize_with = "crate::backend::f32_as_written",
        deserialize_with = "crate::backend::f32_in_range"
    )]
    pub temperature: f32,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default = "default_true")]
    pub sampling_seed_applied: bool,
    #[serde(default = "default_phase")]
    pub run_phase: String,
    /// Token counts of scripted answers.
    #[serde(default)]
    pub scripted_tokens: Option<TokenDist>,
    /// How model-backed seats run (device, stand-in model); see `[llm]` in docs/configuration.md.
    #[serde(default)]
    pub llm: crate::llm::LlmConfig,
}

impl ExperimentConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read the config: {e}", path.display()))?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Parse and validate TOML text; `file` names the source in errors (a
    /// syntax error with its line and column).
    pub fn from_toml_str(text: &str, file: &str) -> anyhow::Result<Self> {
        let cfg: Self = toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "race config {file}: {}",
                crate::energy_society::config::toml_message(&e, text)
            )
        })?;
        cfg.validate()
            .with_context(|| format!("invalid race config {file}"))?;
        Ok(cfg)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        check_name(&self.name)?;
        // Names are written into tables, game ids and terminal lines.
        let names = self
            .lineups
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("lineups[{i}].name"), &l.name));
        let personas = self
            .personas
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("personas[{i}].name"), &p.name));
        let other = [
            ("name".to_string(), &self.name),
            ("run_phase".to_string(), &self.run_phase),
        ];
        for (key, value) in names.chain(personas).chain(other) {
            crate::shown::plain_name(value).map_err(|m| anyhow::anyhow!("`{key}`: {m}"))?;
        }
        anyhow::ensure!(
            !self.lineups.is_empty(),
            "`lineups` must list at least one lineup"
        );
        for l in &self.lineups {
            anyhow::ensure!(!l.name.is_empty(), "a lineup has an empty `name`");
            anyhow::ensure!(!l.seats.is_empty(), "lineup `{}` has no seats", l.name);
        }
        unique(
            "lineups",
            "name",
            self.lineups.iter().map(|l| l.name.clone()),
        )?;
        anyhow::ensure!(
            !self.personas.is_empty(),
            "`personas` must list at least one persona condition (leave it out for none)"
        );
        for pc in &self.personas {
            anyhow::ensure!(
                !pc.name.is_empty(),
                "a persona condition has an empty `name`"
            );
        }
        unique(
            "personas",
            "name",
            self.personas.iter().map(|p| p.name.clone()),
        )?;
        anyhow::ensure!(!self.p_max.is_empty(), "`p_max` must not be empty");
        unique(
            "p_max",
            "value",
            self.p_max.iter().map(|&p| super::rules::fmt_num(p)),
        )?;
        anyhow::ensure!(!self.n_players.is_empty(), "`n_players` must not be empty");
        unique(
            "n_players",
            "value",
            self.n_players.iter().map(|n| n.to_string()),
        )?;
        crate::llm::validate(&self.llm).map_err(|(key, msg)| anyhow::anyhow!("`{key}` {msg}"))?;
        for &p in &self.p_max {
            anyhow::ensure!(
                (0.0..=1.0).contains(&p),
                "`p_max` values must lie in [0, 1], got {p}"
            );
        }
        for &n in &self.n_players {
            anyhow::ensure!(
                super::scenario::PLAYERS.contains(&n),
                "`n_players` values must be 2..5, got {n}"
            );
        }
        anyhow::ensure!(
            self.max_parse_retries <= MAX_PARSE_RETRIES,
            "`max_parse_retries` expected at most {MAX_PARSE_RETRIES} (each retry is a model call), got {}",
            self.max_parse_retries
        );
        anyhow::ensure!(
            (1..=MAX_REPETITIONS).contains(&self.repetitions),
            "`repetitions` must be 1..={MAX_REPETITIONS}, got {}",
            self.repetitions
        );
        anyhow::ensure!(
            self.base_seed
                .checked_add(i64::from(self.repetitions) - 1)
                .is_some(),
            "`base_seed` must leave room for its {} repetitions (game_seed = base_seed + rep), \
             got {}: the last game_seed would overflow a 64-bit integer",
            self.repetitions,
            self.base_seed
        );
        let races = [
            self.lineups.len(),
            self.personas.len(),
            self.n_players.len(),
            self.p_max.len(),
            self.repetitions as usize,
        ]
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .unwrap_or(usize::MAX);
        anyhow::ensure!(
            races <= MAX_RACES,
            "the experiment has {races} races (lineups × personas × n_players × p_max × repetitions); at most {MAX_RACES} fit one run: split it into several configs"
        );
        anyhow::ensure!(
            self.temperature >= 0.0 && self.temperature.is_finite(),
            "`temperature` must be a number >= 0, got {}",
            crate::output::num(f64::from(self.temperature))
        );
        for pc in &self.personas {
            for id in &pc.seats {
                persona(id).with_context(|| format!("persona condition `{}`", pc.name))?;
            }
        }
        self.prompt.mapping(0).context("`prompt.codes`")?;
        if let Some(s) = &self.prompt.skin {
            super::prompt::skin(s).context("`prompt.skin`")?;
        }
        if let Some(t) = &self.scripted_tokens {
            t.validate()
                .map_err(|e| anyhow::anyhow!("`scripted_tokens`: {e}"))?;
        }
        Ok(())
    }

    /// Every race of the experiment, in a fixed order.
    pub fn games(&self) -> anyhow::Result<Vec<GameSpec>> {
        let variant = self.prompt.variant();
        let mut out = Vec::new();
        for lineup in &self.lineups {
            for pc in &self.personas {
                for &n in &self.n_players {
                    for &p in &self.p_max {
                        for rep in 0..self.repetitions {
                            let models: Vec<String> = (0..n)
                                .map(|i| lineup.seats[i % lineup.seats.len()].clone())
                                .collect();
                            let personas = (0..n)
                                .map(|i| {
                                    if pc.seats.is_empty() {
                                        Ok(None)
                                    } else {
                                        persona(&pc.seats[i % pc.seats.len()])
                                    }
                                })
                                .collect::<anyhow::Result<Vec<_>>>()?;
                            let mut game_id = format!(
                                "n{n}__p{}__{}__{}",
                                super::rules::fmt_num(p),
                                lineup.name,
                                pc.name
                            );
                            if !variant.is_empty() {
                                game_id.push_str(&format!("__{variant}"));
                            }
                            game_id.push_str(&format!("__rep{rep:04}"));
                            out.push(GameSpec {
                                game_id,
                                lineup: lineup.name.clone(),
                                models,
                                rules: RaceRules::new(n, p)?,
                                rep,
                                game_seed: self.base_seed + rep as i64,
                                persona_condition: pc.name.clone(),
                                personas,
                                prompt: self.prompt.clone(),
                                max_parse_retries: self.max_parse_retries,
                                params: GenParams {
                                    max_tokens: self.max_tokens,
                                    temperature: self.temperature,
                                    thinking: false,
                                    ..Default::default()
                                },
                                sampling_seed_applied: self.sampling_seed_applied,
                                run_phase: self.run_phase.clone(),
                            });
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}
