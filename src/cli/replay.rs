//! `joule replay RUN_DIR...`: replay reference run folders through the
//! faithful engine and report every value it does not reproduce. Each run's
//! condition (objective, votes, sabotage, memory, jobs per round, α) is
//! inferred from the folder names, `config.json` and every recorded
//! response (`energy_society::condition`), printed with its sources, and can
//! be overridden by flags. A run's mismatches are summarised (the first 20,
//! each cut short) unless `--all`; a folder with no agents is a warning and
//! a non-zero exit, not a replay. A folder that holds run folders (a
//! condition, `<condition>/exponent_<α>`, as `joule report` takes) replays
//! each run in it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, Args, ValueEnum};

use crate::energy_society::condition::Overrides;
use crate::energy_society::config::Objective;
use crate::energy_society::replay::replay_run_with;

/// `--objective` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ObjectiveArg {
    Comp,
    Coop,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Reference run folders (config.json, agents.json, token_usage.json, transcript.json),
    /// or folders holding some at any depth (a condition folder): each run in them is replayed.
    #[arg(required = true, value_name = "RUN_DIRS")]
    pub runs: Vec<PathBuf>,
    /// Replay with sabotage on, whatever the run folder suggests.
    #[arg(long, action = ArgAction::SetTrue, overrides_with = "no_sabotage")]
    pub sabotage: bool,
    /// Replay with sabotage off.
    #[arg(long, action = ArgAction::SetTrue, overrides_with = "sabotage")]
    pub no_sabotage: bool,
    /// Replay with votes (discussion) on.
    #[arg(long, action = ArgAction::SetTrue, overrides_with = "no_votes")]
    pub votes: bool,
    /// Replay with votes off.
    #[arg(long, action = ArgAction::SetTrue, overrides_with = "votes")]
    pub no_votes: bool,
    /// Replay with memory shown in prompts.
    #[arg(long, action = ArgAction::SetTrue, overrides_with = "no_memory")]
    pub memory: bool,
    /// Replay with memory left out of prompts.
    #[arg(long, action = ArgAction::SetTrue, overrides_with = "memory")]
    pub no_memory: bool,
    /// The objective agents were given.
    #[arg(long, value_enum)]
    pub objective: Option<ObjectiveArg>,
    /// The size exponent α of the cost model.
    #[arg(long)]
    pub alpha: Option<f64>,
    /// Print every mismatch in full (default: the first 20, each cut to 240 characters).
    #[arg(long)]
    pub all: bool,
}

/// Mismatches printed per run without `--all`.
const SHOWN: usize = 20;
/// Characters of one mismatch printed without `--all`.
const WIDTH: usize = 240;

/// `text` cut to `n` characters, saying how much was left out.
fn clip(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        None => text.to_string(),
        Some((i, _)) => format!(
            "{}… ({} more characters)",
            &text[..i],
            text[i..].chars().count()
        ),
    }
}

/// A warning when `dir` holds a run folder with no agents (an empty or
/// unfinished run), which no replay can match.
pub fn empty_run_warning(dir: &std::path::Path) -> Option<String> {
    let path = dir.join("agents.json");
    let text = std::fs::read_to_string(&path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v.as_array().is_some_and(|a| a.is_empty())).then(|| {
        format!(
            "{} lists no agents: an empty or unfinished run folder",
            path.display()
        )
    })
}

/// The run folders `path` names: itself when it holds `agents.json`, else
/// every folder under it holding `agents.json` and `config.json`, in name
/// order; an error saying what to pass when there is none.
pub fn run_folders(path: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        if dir.join("agents.json").is_file() && dir.join("config.json").is_file() {
            out.push(dir.to_path_buf());
            return Ok(());
        }
        let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| anyhow::anyhow!("reading folder {}: {e}", dir.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        subs.sort();
        for s in subs {
            walk(&s, out)?;
        }
        Ok(())
    }
    if !path.is_dir() {
        anyhow::bail!(
            "{} is not a folder; pass a reference run folder",
            path.display()
        );
    }
    if path.join("agents.json").is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    walk(path, &mut out)?;
    if out.is_empty() {
        anyhow::bail!(
            "no run folders (with agents.json and config.json) in {}; pass a reference run folder (e.g. <condition>/exponent_0.5/run_1) or a folder holding some",
            path.display()
        );
    }
    Ok(out)
}

fn pair(on: bool, off: bool) -> Option<bool> {
    match (on, off) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}

impl ReplayArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            objective: self.objective.map(|o| match o {
                ObjectiveArg::Comp => Objective::Competitive,
                ObjectiveArg::Coop => Objective::Cooperative,
            }),
            use_votes: pair(self.votes, self.no_votes),
            enable_sabotage: pair(self.sabotage, self.no_sabotage),
            memory: pair(self.memory, self.no_memory),
            alpha: self.alpha,
        }
    }
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    if let Some(a) = args.alpha {
        if !(a.is_finite() && a >= 0.0) {
            anyhow::bail!(
                "--alpha: expected a number >= 0 (0: no size penalty; the paper's 0.5), got {a}: \
                 a negative α makes bigger models cheaper"
            );
        }
    }
    let flags = args.overrides();
    let mut runs = Vec::new();
    for p in &args.runs {
        runs.extend(run_folders(p)?);
    }
    let mut failed = 0;
    for dir in &runs {
        if let Some(w) = empty_run_warning(dir) {
            crate::errln!("warning: {w}; not replayed");
            failed += 1;
            continue;
        }
        let r = replay_run_with(dir, &flags)?;
        let c = &r.charges;
        crate::outln!("{}: condition\n{}", r.run, r.condition);
        crate::outln!(
            "{}: {} rounds, {} values checked, charges: {} single-call formula, {} multi-call split, {} unrecorded, {} invoke errors; {} mismatches",
            r.run, r.rounds, r.values_checked, c.single_call, c.split_calls, c.unrecorded, c.invoke_errors,
            r.mismatches.len()
        );
        let shown = if args.all { r.mismatches.len() } else { SHOWN };
        for m in r.mismatches.iter().take(shown) {
            let m = m.to_string();
            let m = if args.all { m } else { clip(&m, WIDTH) };
            crate::outln!("  MISMATCH {}: {m}", r.run);
        }
        if r.mismatches.len() > shown {
            crate::outln!(
                "  … and {} more mismatches (--all prints every one in full)",
                r.mismatches.len() - shown
            );
        }
        if !r.mismatches.is_empty() {
            failed += 1;
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
