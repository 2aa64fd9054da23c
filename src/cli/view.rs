//! `joule view RUN_DIR... [--out DIR] [--open]`: write the self-contained
//! HTML report of Energy Society runs (a run folder, a condition folder or
//! several) or of AI-race run folders (those holding `races.jsonl`), print
//! its path, and with `--open` open it in the default browser.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::report;

/// Arguments of `joule view`.
#[derive(Args, Debug)]
pub struct ViewArgs {
    /// Energy Society run folders (or folders of them), or AI-race run folders.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Output folder (default: `joule-view/<name>` in the system's temporary folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Open the page in the default browser.
    #[arg(long)]
    pub open: bool,
}

fn is_race_dir(d: &Path) -> bool {
    d.join("races.jsonl").is_file()
}

fn default_out(runs: &[PathBuf]) -> PathBuf {
    let name = runs
        .first()
        .map(|p| report::load::condition_label(p))
        .unwrap_or_default()
        .replace('/', "_");
    std::env::temp_dir().join("joule-view").join(name)
}

/// Run `joule view`.
pub fn run(args: ViewArgs) -> anyhow::Result<ExitCode> {
    let out = args.out.clone().unwrap_or_else(|| default_out(&args.runs));
    let pages = if args.runs.iter().all(|d| is_race_dir(d)) {
        vec![report::html::race::write_race(&args.runs, &out)?]
    } else {
        if let Some(d) = args.runs.iter().find(|d| is_race_dir(d)) {
            anyhow::bail!(
                "{} is an AI-race run folder and the others are not; view race and Energy Society runs separately",
                d.display()
            );
        }
        let conditions = report::load::discover(&args.runs)?;
        let reports: Vec<report::ConditionReport> =
            conditions.into_iter().map(report::analyse).collect();
        let written = report::write(&reports, &out, false, false)?;
        let dirs: Vec<PathBuf> = written
            .aggregate_dirs
            .iter()
            .map(|d| d.parent().map_or_else(|| out.clone(), PathBuf::from))
            .collect();
        report::html::write_society(&reports, &dirs, &out, false)?
    };
    for p in &pages {
        println!("{}", p.display());
    }
    if args.open {
        for p in &pages {
            if let Err(e) = open::that_detached(p) {
                eprintln!(
                    "could not open a browser ({e}); open {} yourself",
                    p.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
