//! The condition a recorded run was played in (spec §5), inferred for
//! replay: objective, votes, sabotage, memory, jobs per round (scarcity) and
//! the size exponent α.
//!
//! A reference `config.json` lacks `prompt_mode`, `use_votes` and
//! `enable_sabotage` and has no memory switch, so each switch is inferred
//! from everything the run folder holds, in this order of precedence:
//!
//! 1. a command-line flag ([`Overrides`]);
//! 2. the key in `config.json`, where the reference's HEAD code wrote it;
//! 3. what the run recorded: every structured response of `transcript.json`
//!    (decisions' actions *and* votes' recommendations), the memory entries
//!    of `agents.json` (actions and the sabotage keys, which only the
//!    sabotage conditions write, even when null), and the recorded charges;
//! 4. the folder names (`coop/exponent_0.5_sabotage/run_3`);
//! 5. the baseline default.
//!
//! Recorded evidence outranks the folder name only where it is conclusive:
//! a SABOTAGE_JOB anywhere in a recorded response proves sabotage was on (the
//! reference's schema rejects it otherwise), and vote entries prove votes
//! were on, while their absence in a run that had two active agents in
//! round 1 proves votes were off. The absence of sabotage proves nothing (a
//! sabotage-enabled run in which nobody sabotaged), so there the folder
//! name decides. Every disagreement between sources is kept as a note.

use std::path::Path;

use serde_json::Value;

use crate::energy::CostModel;

use super::config::Objective;
use super::layout::{DifficultyCounts, RunFolder};

/// A switch's value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Inferred<T> {
    pub value: T,
    /// What decided it (`config.json key \`experiment\` = "coop"`).
    pub from: String,
    /// Sources that disagreed with the value, or checks of it.
    pub notes: Vec<String>,
}

impl<T> Inferred<T> {
    fn new(value: T, from: impl Into<String>) -> Self {
        Inferred {
            value,
            from: from.into(),
            notes: vec![],
        }
    }
    fn note(mut self, n: impl Into<String>) -> Self {
        self.notes.push(n.into());
        self
    }
}

/// The whole inferred condition of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub objective: Inferred<Objective>,
    pub use_votes: Inferred<bool>,
    pub enable_sabotage: Inferred<bool>,
    pub memory: Inferred<bool>,
    pub difficulty: Inferred<DifficultyCounts>,
    pub alpha: Inferred<f64>,
}

/// Command-line overrides (`--sabotage`, `--no-votes`, `--objective coop`, …).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Overrides {
    pub objective: Option<Objective>,
    pub use_votes: Option<bool>,
    pub enable_sabotage: Option<bool>,
    pub memory: Option<bool>,
    pub alpha: Option<f64>,
}

/// What the folder names of a run say (`<folder>/<sub>/run_N`, e.g.
/// `comp_no_discussion/exponent_0.5` or `coop/exponent_0.5_sabotage`).
/// `None` where the names say nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FolderName {
    /// The `<folder>/<sub>` names read.
    pub names: String,
    pub objective: Option<Objective>,
    pub use_votes: Option<bool>,
    pub enable_sabotage: Option<bool>,
    pub memory: Option<bool>,
    pub scarce: Option<bool>,
    pub alpha: Option<f64>,
}

impl FolderName {
    /// Read the names of `run_dir`'s parent (`exponent_…`) and grandparent
    /// (`comp_with_discussion`, `coop_no_discussion`, …).
    pub fn of(run_dir: &Path) -> Self {
        let dir = std::fs::canonicalize(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
        let name = |p: Option<&Path>| {
            p.and_then(Path::file_name)
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let sub_path = dir.parent();
        let sub = name(sub_path);
        let folder = name(sub_path.and_then(Path::parent));
        Self::parse(&folder, &sub)
    }

    /// Parse a condition folder name and its sub-folder name.
    pub fn parse(folder: &str, sub: &str) -> Self {
        let mut f = FolderName {
            names: format!("{folder}/{sub}"),
            ..Default::default()
        };
        if folder.starts_with("coop") {
            f.objective = Some(Objective::Cooperative);
        } else if folder.starts_with("comp") {
            f.objective = Some(Objective::Competitive);
        }
        if folder.ends_with("_no_discussion") {
            f.use_votes = Some(false);
        } else if folder.ends_with("_with_discussion") {
            f.use_votes = Some(true);
        }
        if let Some(rest) = sub.strip_prefix("exponent_") {
            let num_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            f.alpha = rest[..num_len].parse::<f64>().ok();
            let suffix = &rest[num_len..];
            // A condition sub-folder: what its suffix does not name is off.
            f.memory = Some(!suffix.contains("_no_memory"));
            f.enable_sabotage = Some(suffix.contains("_sabotage"));
            f.scarce = Some(suffix.contains("_scarce"));
        }
        f
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The first place a recorded run shows sabotage, and how many places do.
fn sabotage_evidence(run: &RunFolder) -> Option<(String, usize)> {
    let mut first: Option<String> = None;
    let mut n = 0;
    let mut see = |what: String| {
        n += 1;
        if first.is_none() {
            first = Some(what);
        }
    };
    for t in &run.transcript {
        let sr = &t.structured_response;
        let is_sab = |v: Option<&Value>| v.and_then(Value::as_str) == Some("SABOTAGE_JOB");
        match t.phase.as_str() {
            "decide" if is_sab(sr.get("action")) => see(format!(
                "round {} {}'s decision is SABOTAGE_JOB",
                t.round_num, t.agent_id
            )),
            "vote" => {
                for r in sr
                    .get("recommendations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if is_sab(r.get("recommended_action")) {
                        see(format!(
                            "round {} {}'s vote recommends SABOTAGE_JOB",
                            t.round_num, t.agent_id
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    for a in &run.agents {
        for m in &a.memory {
            if m.action == "SABOTAGE_JOB" {
                see(format!(
                    "round {} {}'s memory records SABOTAGE_JOB",
                    m.round_num, a.agent_id
                ));
            } else if m.sabotaged_job.is_some()
                || m.sabotage_successful.is_some()
                || m.sabotage_hit_agents.is_some()
            {
                see(format!(
                    "round {} {}'s memory entry has the sabotage keys",
                    m.round_num, a.agent_id
                ));
            }
        }
    }
    first.map(|f| (f, n))
}

/// Phases whose recorded spend is exactly `round(T · k · S^α, 2)` of their
/// recorded tokens, out of the phases with a spend and tokens.
pub fn charge_fit(run: &RunFolder, alpha: f64) -> (usize, usize) {
    let cost = CostModel {
        k: 0.015,
        alpha,
        ..Default::default()
    };
    let (mut fit, mut total) = (0, 0);
    for u in &run.token_usage {
        let Some(agent) = run.agents.iter().find(|a| a.agent_id == u.agent_id) else {
            continue;
        };
        let Some(m) = agent
            .memory
            .iter()
            .find(|m| m.round_num == u.round_num && m.action != "INACTIVE")
        else {
            continue;
        };
        let spent = match u.phase.as_str() {
            "vote" => m.energy_spent_voting,
            "decide" => m.energy_spent_deciding,
            _ => m.energy_spent_on_action,
        };
        let Some(spent) = spent else { continue };
        if u.output_tokens == 0 {
            continue;
        }
        total += 1;
        if cost.charge(u.output_tokens, agent.model_size) == spent {
            fit += 1;
        }
    }
    (fit, total)
}

fn fit_note(run: &RunFolder, alpha: f64) -> String {
    let (fit, total) = charge_fit(run, alpha);
    format!("{fit} of {total} recorded phase charges are round(T·k·S^α, 2) in one call with α = {alpha}")
}

fn job_index(id: &str) -> Option<u32> {
    id.strip_prefix("job_")?.parse().ok()
}

/// Infer the condition of `run`, recorded in `run_dir`.
pub fn infer(run: &RunFolder, run_dir: &Path, flags: &Overrides) -> Condition {
    let folder = FolderName::of(run_dir);
    infer_with_names(run, &folder, flags)
}

/// [`infer`] with the folder names already read: one inference per switch.
pub fn infer_with_names(run: &RunFolder, folder: &FolderName, flags: &Overrides) -> Condition {
    Condition {
        objective: infer_objective(run, folder, flags),
        use_votes: infer_votes(run, folder, flags),
        enable_sabotage: infer_sabotage(run, folder, flags),
        memory: infer_memory(folder, flags),
        difficulty: infer_difficulty(run, folder),
        alpha: infer_alpha(run, folder, flags),
    }
}

/// Objective: flag > `prompt_mode` > `experiment` > folder > comp; notes
/// where `experiment` or the folder name disagree.
fn infer_objective(run: &RunFolder, folder: &FolderName, flags: &Overrides) -> Inferred<Objective> {
    let c = &run.config;
    let names = &folder.names;
    let experiment_says = if c.experiment.contains("coop") {
        Some(Objective::Cooperative)
    } else if c.experiment.contains("comp") {
        Some(Objective::Competitive)
    } else {
        None
    };
    let config_says = c
        .prompt_mode
        .as_deref()
        .map(|m| {
            (
                if m == "coop" {
                    Objective::Cooperative
                } else {
                    Objective::Competitive
                },
                format!("config.json key `prompt_mode` = {m:?}"),
            )
        })
        .or(experiment_says.map(|o| {
            (
                o,
                format!("config.json key `experiment` = {:?}", c.experiment),
            )
        }));
    let mut objective = match (flags.objective, config_says, folder.objective) {
        (Some(o), ..) => Inferred::new(o, "the --objective flag"),
        (None, Some((o, from)), _) => Inferred::new(o, from),
        (None, None, Some(o)) => Inferred::new(o, format!("the folder name {names}")),
        (None, None, None) => Inferred::new(Objective::Competitive, "the default (comp)"),
    };
    for (o, who) in [
        (
            experiment_says,
            format!("config.json `experiment` {:?}", c.experiment),
        ),
        (folder.objective, format!("the folder name {names}")),
    ] {
        if let Some(o) = o {
            if o != objective.value {
                objective = objective.note(format!("{who} says {}", o.as_str()));
            }
        }
    }
    objective
}

/// Votes: flag > `use_votes` > the transcript (vote entries, or none while
/// two agents decided in round 1) > folder > on.
fn infer_votes(run: &RunFolder, folder: &FolderName, flags: &Overrides) -> Inferred<bool> {
    let names = &folder.names;
    let vote_entries = run.transcript.iter().filter(|t| t.phase == "vote").count();
    let round1_deciders = run
        .transcript
        .iter()
        .filter(|t| t.round_num == 1 && t.phase == "decide")
        .count();
    let recorded_votes = if vote_entries > 0 {
        Some((true, format!("the transcript: {vote_entries} vote entries")))
    } else if round1_deciders > 1 {
        Some((
            false,
            format!("the transcript: no vote entries, although {round1_deciders} agents decided in round 1"),
        ))
    } else {
        None
    };
    let mut use_votes = match (
        flags.use_votes,
        run.config.use_votes,
        &recorded_votes,
        folder.use_votes,
    ) {
        (Some(v), ..) => Inferred::new(v, "the --votes/--no-votes flag"),
        (None, Some(v), ..) => Inferred::new(v, "config.json key `use_votes`"),
        (None, None, Some((v, from)), _) => Inferred::new(*v, from.clone()),
        (None, None, None, Some(v)) => Inferred::new(v, format!("the folder name {names}")),
        (None, None, None, None) => Inferred::new(true, "the default (on)"),
    };
    if let Some((v, from)) = &recorded_votes {
        if *v != use_votes.value {
            use_votes = use_votes.note(format!("{from} say {}", on_off(*v)));
        }
    }
    if let Some(v) = folder.use_votes {
        if v != use_votes.value {
            use_votes = use_votes.note(format!("the folder name {names} says {}", on_off(v)));
        }
    }
    use_votes
}

/// Sabotage: flag > `enable_sabotage` > any recorded SABOTAGE > folder > off.
fn infer_sabotage(run: &RunFolder, folder: &FolderName, flags: &Overrides) -> Inferred<bool> {
    let names = &folder.names;
    let evidence = sabotage_evidence(run);
    let mut enable_sabotage = match (
        flags.enable_sabotage,
        run.config.enable_sabotage,
        &evidence,
        folder.enable_sabotage,
    ) {
        (Some(v), ..) => Inferred::new(v, "the --sabotage/--no-sabotage flag"),
        (None, Some(v), ..) => Inferred::new(v, "config.json key `enable_sabotage`"),
        (None, None, Some((first, n)), _) => Inferred::new(
            true,
            format!(
                "the recorded responses: {first}{}",
                if *n > 1 { format!(" ({n} places in all)") } else { String::new() }
            ),
        ),
        (None, None, None, Some(v)) => Inferred::new(
            v,
            format!(
                "the folder name {names} (no recorded response shows sabotage, which proves nothing)"
            ),
        ),
        (None, None, None, None) => Inferred::new(
            false,
            "the default (off): no recorded response shows sabotage and the folder name does not say",
        ),
    };
    if let Some((first, _)) = &evidence {
        if !enable_sabotage.value {
            enable_sabotage = enable_sabotage.note(format!("but {first}"));
        }
    }
    if let Some(v) = folder.enable_sabotage {
        if v != enable_sabotage.value {
            enable_sabotage =
                enable_sabotage.note(format!("the folder name {names} says {}", on_off(v)));
        } else if evidence.is_some() {
            enable_sabotage = enable_sabotage.note(format!("the folder name {names} agrees"));
        }
    }
    enable_sabotage
}

/// Memory: nothing recorded shows it (spec §4.3), so flag > folder > on.
fn infer_memory(folder: &FolderName, flags: &Overrides) -> Inferred<bool> {
    match (flags.memory, folder.memory) {
        (Some(v), _) => Inferred::new(v, "the --memory/--no-memory flag"),
        (None, Some(v)) => Inferred::new(v, format!("the folder name {}", folder.names)),
        (None, None) => Inferred::new(true, "the default (on): the folder name does not say"),
    }
}

/// Jobs per round: config.json (always there), checked against `num_jobs`,
/// the folder name and the job ids recorded in memory entries.
fn infer_difficulty(run: &RunFolder, folder: &FolderName) -> Inferred<DifficultyCounts> {
    let c = &run.config;
    let names = &folder.names;
    let d = c.difficulty_distribution;
    let n = d.easy + d.medium + d.hard;
    let mut difficulty = Inferred::new(
        d,
        format!(
            "config.json `difficulty_distribution` ({n} jobs per round = {}/{}/{})",
            d.easy, d.medium, d.hard
        ),
    );
    if n != c.num_jobs {
        difficulty = difficulty.note(format!("config.json `num_jobs` says {}", c.num_jobs));
    }
    if let Some(scarce) = folder.scarce {
        if scarce != (n < 12) {
            difficulty = difficulty.note(format!(
                "the folder name {names} says {}",
                if scarce { "scarce" } else { "not scarce" }
            ));
        }
    }
    let recorded_max = run
        .agents
        .iter()
        .flat_map(|a| &a.memory)
        .flat_map(|m| {
            m.attempted_job
                .iter()
                .chain(m.sabotaged_job.iter().flatten())
                .filter_map(|j| job_index(&j.job_id).map(|k| (k, m.round_num, j.job_id.clone())))
        })
        .max();
    if let Some((k, round, id)) = recorded_max {
        if k >= n {
            difficulty = difficulty.note(format!(
                "round {round} records {id}, beyond {n} jobs per round"
            ));
        }
    }
    difficulty
}

/// α: flag > config.json (checked against the folder and the charges); when
/// config.json and the folder disagree, the one more charges fit. The fit of
/// the chosen α is always noted.
fn infer_alpha(run: &RunFolder, folder: &FolderName, flags: &Overrides) -> Inferred<f64> {
    let names = &folder.names;
    let config_alpha = run.config.model_size_exponent;
    let alpha = match (flags.alpha, folder.alpha) {
        (Some(a), _) => Inferred::new(a, "the --alpha flag"),
        (None, Some(fa)) if fa != config_alpha => {
            let (cf, _) = charge_fit(run, config_alpha);
            let (ff, _) = charge_fit(run, fa);
            if ff > cf {
                Inferred::new(
                    fa,
                    format!("the folder name {names}, which more recorded charges fit"),
                )
                .note(format!(
                    "config.json `model_size_exponent` says {config_alpha}"
                ))
            } else {
                Inferred::new(config_alpha, "config.json `model_size_exponent`")
                    .note(format!("the folder name {names} says {fa}"))
            }
        }
        (None, _) => Inferred::new(config_alpha, "config.json `model_size_exponent`"),
    };
    let check = fit_note(run, alpha.value);
    alpha.note(check)
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn line<T>(
            f: &mut std::fmt::Formatter<'_>,
            name: &str,
            shown: String,
            i: &Inferred<T>,
        ) -> std::fmt::Result {
            write!(f, "  {name:<10} {shown:<8} from {}", i.from)?;
            for n in &i.notes {
                write!(f, "; {n}")?;
            }
            writeln!(f)
        }
        line(
            f,
            "objective",
            self.objective.value.as_str().into(),
            &self.objective,
        )?;
        line(
            f,
            "votes",
            on_off(self.use_votes.value).into(),
            &self.use_votes,
        )?;
        line(
            f,
            "sabotage",
            on_off(self.enable_sabotage.value).into(),
            &self.enable_sabotage,
        )?;
        line(f, "memory", on_off(self.memory.value).into(), &self.memory)?;
        let d = self.difficulty.value;
        line(
            f,
            "jobs",
            format!("{}", d.easy + d.medium + d.hard),
            &self.difficulty,
        )?;
        line(f, "alpha", format!("{}", self.alpha.value), &self.alpha)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_twelve_published_condition_names() {
        // (folder, sub) -> objective, votes, sabotage, memory, scarce, alpha (spec §5).
        let table: [(&str, &str, Objective, Option<bool>, bool, bool, bool, f64); 12] = {
            use Objective::{Competitive as C, Cooperative as O};
            [
                (
                    "comp_with_discussion",
                    "exponent_0.5",
                    C,
                    Some(true),
                    false,
                    true,
                    false,
                    0.5,
                ),
                (
                    "comp_with_discussion",
                    "exponent_0.0",
                    C,
                    Some(true),
                    false,
                    true,
                    false,
                    0.0,
                ),
                (
                    "comp_with_discussion",
                    "exponent_0.5_no_memory",
                    C,
                    Some(true),
                    false,
                    false,
                    false,
                    0.5,
                ),
                (
                    "comp_with_discussion",
                    "exponent_0.5_sabotage",
                    C,
                    Some(true),
                    true,
                    true,
                    false,
                    0.5,
                ),
                (
                    "comp_with_discussion",
                    "exponent_0.5_scarce",
                    C,
                    Some(true),
                    false,
                    true,
                    true,
                    0.5,
                ),
                (
                    "comp_no_discussion",
                    "exponent_0.5",
                    C,
                    Some(false),
                    false,
                    true,
                    false,
                    0.5,
                ),
                ("coop", "exponent_0.5", O, None, false, true, false, 0.5),
                ("coop", "exponent_0.0", O, None, false, true, false, 0.0),
                (
                    "coop",
                    "exponent_0.5_no_memory",
                    O,
                    None,
                    false,
                    false,
                    false,
                    0.5,
                ),
                (
                    "coop",
                    "exponent_0.5_sabotage",
                    O,
                    None,
                    true,
                    true,
                    false,
                    0.5,
                ),
                (
                    "coop",
                    "exponent_0.5_scarce",
                    O,
                    None,
                    false,
                    true,
                    true,
                    0.5,
                ),
                (
                    "coop_no_discussion",
                    "exponent_0.5",
                    O,
                    Some(false),
                    false,
                    true,
                    false,
                    0.5,
                ),
            ]
        };
        for (folder, sub, obj, votes, sab, mem, scarce, alpha) in table {
            let f = FolderName::parse(folder, sub);
            assert_eq!(f.objective, Some(obj), "{folder}/{sub}");
            assert_eq!(f.use_votes, votes, "{folder}/{sub}");
            assert_eq!(f.enable_sabotage, Some(sab), "{folder}/{sub}");
            assert_eq!(f.memory, Some(mem), "{folder}/{sub}");
            assert_eq!(f.scarce, Some(scarce), "{folder}/{sub}");
            assert_eq!(f.alpha, Some(alpha), "{folder}/{sub}");
        }
        // Names that say nothing leave every switch open.
        let f = FolderName::parse("tmp", "somewhere");
        assert_eq!(
            (
                f.objective,
                f.use_votes,
                f.enable_sabotage,
                f.memory,
                f.alpha
            ),
            (None, None, None, None, None)
        );
    }
}
