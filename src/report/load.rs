//! Finding run folders and flattening them into the three row sets every metric
//! reads (spec §7 "Sources"): one row per memory entry, one per agent record and
//! one per vote recommendation. Field rules follow the reference analysis
//! (`plotting/analyse.py`): missing spend fields count as 0, a missing reward as 0,
//! the attempted job's fields come from `attempted_job`, and a memory row is an
//! `ERROR` row when its agent logged an error of any phase in that round.
//!
//! Run folders are recognised by holding `agents.json` and `config.json`; a
//! Joule run without its COMPLETE marker, and a folder with a run's records
//! but no `agents.json` (an unfinished sweep cell), are left out and named
//! ([`discover_with`] keeps the former on request). Runs
//! are grouped into conditions by their parent folder and ordered by path, as
//! pandas' `sorted(Path)` orders them; a run is labelled `run_<run_number>`, or
//! by its folder name when runs of one condition share a run number (a sweep).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::energy_society::layout::RunFolder;

/// One run folder as read.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub run_id: String,
    pub data: RunFolder,
}

/// The runs of one condition (one parent folder), ordered by path.
#[derive(Debug, Clone)]
pub struct Condition {
    /// e.g. `coop/exponent_0.5`.
    pub label: String,
    pub dir: PathBuf,
    pub runs: Vec<Run>,
}

/// One memory entry of one agent in one run.
#[derive(Debug, Clone)]
pub struct MemRow {
    pub run_id: String,
    pub agent_id: String,
    pub model_name: String,
    pub round_num: i64,
    pub action: String,
    /// `energy_at_start_of_round`; NaN when null.
    pub energy_start: f64,
    pub vote: f64,
    pub decide: f64,
    pub act: f64,
    pub rewarded: f64,
    pub succeeded: Option<bool>,
    pub job_difficulty: Option<String>,
    pub job_category: Option<String>,
    pub job_id: Option<String>,
    pub target_agent: Option<String>,
    /// NaN when null.
    pub donated_amount: f64,
    pub any_error: bool,
    /// `vote + decide + act`.
    pub spent: f64,
    /// `rewarded - spent`.
    pub net: f64,
    /// Σ `received_donations[].amount` of the entry (0 when null); used only by
    /// the corrected report mode (QUIRK-14).
    pub received: f64,
    /// `sabotaged_job.job_id` of a SABOTAGE_JOB entry (null job or key absent:
    /// `None`); used only by the corrected report mode (QUIRK-17).
    pub sabotaged_job_id: Option<String>,
}

impl MemRow {
    /// An attempt: ATTEMPT_JOB with a (valid) job (spec §7 "Attempts").
    pub fn is_attempt(&self) -> bool {
        self.action == "ATTEMPT_JOB" && self.job_id.is_some()
    }

    /// An attempt that was executed (`succeeded` not null): the corrected
    /// attempt rule (QUIRK-15).
    pub fn is_executed_attempt(&self) -> bool {
        self.is_attempt() && self.succeeded.is_some()
    }
}

/// One agent record of one run.
#[derive(Debug, Clone)]
pub struct AgentRow {
    pub run_id: String,
    pub agent_id: String,
    pub model_name: String,
    pub model_size: f64,
    pub final_energy: f64,
    pub rounds_active: i64,
    pub deactivated: bool,
    pub max_rounds: i64,
}

/// One recommendation of one vote (transcript `vote` entries).
#[derive(Debug, Clone)]
pub struct VoteRow {
    pub run_id: String,
    pub run_dir: String,
    pub experiment: String,
    pub seed: i64,
    pub max_rounds: i64,
    pub round_num: i64,
    /// The model-written `voter_id`, or the caller when it is empty.
    pub voter: String,
    pub voter_model: Option<String>,
    pub rec_agent: Option<String>,
    pub rec_model: Option<String>,
    pub index: i64,
    pub action: Option<String>,
    pub job_id: Option<String>,
    pub target_agent: Option<String>,
    /// NaN when null.
    pub amount: f64,
    /// `self` when the recommendation is for the voter.
    pub target_type: &'static str,
}

/// All rows of one condition.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    pub memory: Vec<MemRow>,
    pub agents: Vec<AgentRow>,
    pub votes: Vec<VoteRow>,
}

fn is_run_dir(dir: &Path) -> bool {
    dir.join("agents.json").is_file() && dir.join("config.json").is_file()
}

/// A Joule run folder that did not finish: it has records
/// (`config.resolved.toml` or `events.jsonl`) but not the reference layout
/// a finished run writes last.
fn is_unfinished_dir(dir: &Path) -> bool {
    !is_run_dir(dir)
        && (dir.join("events.jsonl").is_file() || dir.join("config.resolved.toml").is_file())
}

/// A run folder of Joule's (it has `events.jsonl`) without its COMPLETE
/// marker. Reference runs have neither and are complete.
pub fn is_incomplete(dir: &Path) -> bool {
    dir.join("events.jsonl").is_file()
        && !crate::energy_society::recorder::Recorder::is_complete(dir)
}

fn find_runs(
    root: &Path,
    out: &mut Vec<PathBuf>,
    unfinished: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    if is_run_dir(root) {
        out.push(root.to_path_buf());
        return Ok(());
    }
    if is_unfinished_dir(root) {
        unfinished.push(root.to_path_buf());
        return Ok(());
    }
    let entries =
        std::fs::read_dir(root).with_context(|| format!("reading folder {}", root.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("reading folder {}", root.display()))?;
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            find_runs(&e.path(), out, unfinished)?;
        }
    }
    Ok(())
}

/// The runs found, and the run folders left out of every report.
pub struct Discovered {
    pub conditions: Vec<Condition>,
    /// One line per kind of folder left out, naming them (empty when none).
    pub left_out: Vec<String>,
}

/// A short name for a condition folder: its last component, or the last two when
/// the last is `exponent_*` (the reference layout `<condition>/exponent_<α>`).
pub fn condition_label(dir: &Path) -> String {
    let parts: Vec<String> = dir
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    match parts.as_slice() {
        [.., a, b] if b.starts_with("exponent_") => format!("{a}/{b}"),
        [.., b] => b.clone(),
        [] => ".".to_string(),
    }
}

/// Find every run folder under `paths` (each a run folder or a folder holding
/// some, at any depth), read them, and group them by parent folder. Runs
/// without their COMPLETE marker and unfinished folders (a sweep cell
/// without `agents.json`) are left out, each kind said in one line on
/// standard error.
pub fn discover(paths: &[PathBuf]) -> anyhow::Result<Vec<Condition>> {
    let d = discover_with(paths, false)?;
    for line in &d.left_out {
        eprintln!("note: {line}");
    }
    Ok(d.conditions)
}

/// [`discover`], keeping the runs without their COMPLETE marker when
/// `include_incomplete`, and returning what was left out instead of saying it.
pub fn discover_with(paths: &[PathBuf], include_incomplete: bool) -> anyhow::Result<Discovered> {
    let mut dirs = Vec::new();
    let mut unfinished = Vec::new();
    let mut incomplete = Vec::new();
    for p in paths {
        if !p.is_dir() {
            anyhow::bail!("{} is not a folder", p.display());
        }
        let mut found = Vec::new();
        let unfinished_before = unfinished.len();
        find_runs(p, &mut found, &mut unfinished)?;
        let found_any = !found.is_empty();
        for d in found {
            if !include_incomplete && is_incomplete(&d) {
                incomplete.push(d);
            } else {
                dirs.push(d);
            }
        }
        if !found_any && unfinished.len() == unfinished_before {
            anyhow::bail!(
                "no run folders (with agents.json and config.json) under {}",
                p.display()
            );
        }
    }
    let names = |v: &[PathBuf]| {
        v.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut left_out = Vec::new();
    if !incomplete.is_empty() {
        left_out.push(format!(
            "left out {} run(s) without their COMPLETE marker (they did not finish; --include-incomplete keeps them): {}",
            incomplete.len(),
            names(&incomplete)
        ));
    }
    if !unfinished.is_empty() {
        left_out.push(format!(
            "left out {} run folder(s) without agents.json (unfinished runs or sweep cells; nothing to report until they finish): {}",
            unfinished.len(),
            names(&unfinished)
        ));
    }
    if dirs.is_empty() {
        anyhow::bail!("no complete run to report: {}", left_out.join("; "));
    }
    dirs.sort();
    dirs.dedup();
    let mut by_parent: BTreeMap<PathBuf, Vec<Run>> = BTreeMap::new();
    for dir in dirs {
        let data = RunFolder::read(&dir)
            .with_context(|| format!("reading run folder {}", dir.display()))?;
        let run_id = format!("run_{}", data.config.run_number);
        let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        by_parent
            .entry(parent)
            .or_default()
            .push(Run { dir, run_id, data });
    }
    for runs in by_parent.values_mut() {
        // Runs that share a run number (a sweep writes run_number 1 in every
        // `seed_<s>` folder) would merge into one run: name them by folder.
        let ids: HashSet<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
        if ids.len() < runs.len() {
            for r in runs.iter_mut() {
                if let Some(name) = r.dir.file_name() {
                    r.run_id = name.to_string_lossy().into_owned();
                }
            }
        }
    }
    let conditions = by_parent
        .into_iter()
        .map(|(dir, runs)| Condition {
            label: condition_label(&dir),
            dir,
            runs,
        })
        .collect();
    Ok(Discovered {
        conditions,
        left_out,
    })
}

impl Condition {
    /// Flatten the runs into memory, agent and vote rows, in run then roster then
    /// file order.
    pub fn rows(&self) -> Rows {
        let mut rows = Rows::default();
        for run in &self.runs {
            memory_rows(run, &mut rows.memory);
            agent_rows(run, &mut rows.agents);
            vote_rows(run, &mut rows.votes);
        }
        rows
    }

    /// The seeds of the runs, in run order.
    pub fn seeds(&self) -> Vec<u64> {
        self.runs.iter().map(|r| r.data.config.seed).collect()
    }
}

fn memory_rows(run: &Run, out: &mut Vec<MemRow>) {
    let mut error_rounds: HashSet<(&str, u32)> = HashSet::new();
    for a in &run.data.agents {
        for e in &a.errors {
            if matches!(e.phase.as_str(), "vote" | "decide" | "act") {
                error_rounds.insert((a.agent_id.as_str(), e.round_num));
            }
        }
    }
    for a in &run.data.agents {
        for m in &a.memory {
            let job = m.attempted_job.as_ref();
            let vote = m.energy_spent_voting.unwrap_or(0.0);
            let decide = m.energy_spent_deciding.unwrap_or(0.0);
            let act = m.energy_spent_on_action.unwrap_or(0.0);
            let rewarded = m.energy_rewarded.unwrap_or(0.0);
            let spent = vote + decide + act;
            out.push(MemRow {
                run_id: run.run_id.clone(),
                agent_id: a.agent_id.clone(),
                model_name: a.model_name.clone(),
                round_num: i64::from(m.round_num),
                action: m.action.clone(),
                energy_start: m.energy_at_start_of_round.unwrap_or(f64::NAN),
                vote,
                decide,
                act,
                rewarded,
                succeeded: m.succeeded,
                job_difficulty: job.map(|j| j.difficulty.clone()),
                job_category: job.map(|j| j.category.clone()),
                job_id: job.map(|j| j.job_id.clone()),
                target_agent: m.target_agent.clone(),
                donated_amount: m.donated_amount.unwrap_or(f64::NAN),
                any_error: error_rounds.contains(&(a.agent_id.as_str(), m.round_num)),
                spent,
                net: rewarded - spent,
                received: m
                    .received_donations
                    .as_ref()
                    .map_or(0.0, |r| r.iter().map(|d| d.amount).sum()),
                sabotaged_job_id: m
                    .sabotaged_job
                    .as_ref()
                    .and_then(|j| j.as_ref())
                    .map(|j| j.job_id.clone()),
            });
        }
    }
}

fn agent_rows(run: &Run, out: &mut Vec<AgentRow>) {
    for a in &run.data.agents {
        out.push(AgentRow {
            run_id: run.run_id.clone(),
            agent_id: a.agent_id.clone(),
            model_name: a.model_name.clone(),
            model_size: a.model_size,
            final_energy: a.final_energy,
            rounds_active: i64::from(a.rounds_active),
            deactivated: a.deactivated_at_round.is_some(),
            max_rounds: i64::from(run.data.config.max_rounds),
        });
    }
}

fn json_str(v: &serde_json::Value, key: &str) -> Option<String> {
    v.get(key).and_then(|x| x.as_str()).map(str::to_string)
}

fn vote_rows(run: &Run, out: &mut Vec<VoteRow>) {
    let models: HashMap<&str, &str> = run
        .data
        .agents
        .iter()
        .map(|a| (a.agent_id.as_str(), a.model_name.as_str()))
        .collect();
    let cfg = &run.data.config;
    for entry in run.data.transcript.iter().filter(|e| e.phase == "vote") {
        let s = &entry.structured_response;
        let voter = json_str(s, "voter_id")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| entry.agent_id.clone());
        let recs = s
            .get("recommendations")
            .and_then(|r| r.as_array())
            .map(|v| v.as_slice())
            .unwrap_or(&[]);
        for (i, rec) in recs.iter().enumerate() {
            let rec_agent = json_str(rec, "agent_id");
            out.push(VoteRow {
                run_id: run.run_id.clone(),
                run_dir: run.dir.display().to_string(),
                experiment: cfg.experiment.clone(),
                seed: cfg.seed as i64,
                max_rounds: i64::from(cfg.max_rounds),
                round_num: i64::from(entry.round_num),
                voter_model: models.get(voter.as_str()).map(|m| m.to_string()),
                rec_model: rec_agent
                    .as_deref()
                    .and_then(|r| models.get(r))
                    .map(|m| m.to_string()),
                target_type: if rec_agent.as_deref() == Some(voter.as_str()) {
                    "self"
                } else {
                    "other"
                },
                voter: voter.clone(),
                rec_agent,
                index: i as i64 + 1,
                action: json_str(rec, "recommended_action"),
                job_id: json_str(rec, "job_id"),
                target_agent: json_str(rec, "target_agent"),
                amount: rec
                    .get("amount")
                    .and_then(|a| a.as_f64())
                    .unwrap_or(f64::NAN),
            });
        }
    }
}
