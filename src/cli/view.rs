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
    /// Output folder (default: `joule-view/<name>-<key>` in the system's
    /// temporary folder, `<key>` taken from the whole paths of the runs, so
    /// two runs never share a page). A given folder must be new or empty,
    /// unless `--force`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write into a `--out` folder that is not empty: the files an earlier
    /// report or view wrote there are removed first; other files are kept,
    /// and the view is refused if it would overwrite one.
    #[arg(long)]
    pub force: bool,
    /// Open the page in the default browser.
    #[arg(long)]
    pub open: bool,
}

fn is_race_dir(d: &Path) -> bool {
    d.join("races.jsonl").is_file()
}

/// `joule-view/<last folder name>-<key>` in the temporary folder, where
/// `<key>` is a digest of the runs' whole (absolute) paths: runs in
/// different places that share a folder name (`seed_1`) get their own pages.
fn default_out(runs: &[PathBuf]) -> PathBuf {
    use sha2::Digest;
    let name = runs
        .first()
        .map(|p| report::load::condition_label(p))
        .unwrap_or_default()
        .replace('/', "_");
    let mut h = sha2::Sha256::new();
    for p in runs {
        let full = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        h.update(full.display().to_string().as_bytes());
        h.update(b"\n");
    }
    let key: String = h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::env::temp_dir()
        .join("joule-view")
        .join(format!("{name}-{key}"))
}

/// Run `joule view`.
pub fn run(args: ViewArgs) -> anyhow::Result<ExitCode> {
    // The default folder is the view's own: its earlier pages are replaced.
    let out = args.out.clone().unwrap_or_else(|| default_out(&args.runs));
    let force = args.force || args.out.is_none();
    let (pages, out_dir) = if args.runs.iter().all(|d| is_race_dir(d)) {
        let planned = [PathBuf::from("report.html")].into();
        let out_dir = report::out_dir::OutDir::prepare(&out, force, "--out", &planned)?;
        (
            vec![report::html::race::write_race(&args.runs, &out)?],
            out_dir,
        )
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
        let planned = report::planned_files(&reports, false, false, true);
        let out_dir = report::out_dir::OutDir::prepare(&out, force, "--out", &planned)?;
        let written = report::write(&reports, &out, false, false)?;
        let dirs: Vec<PathBuf> = written
            .aggregate_dirs
            .iter()
            .map(|d| d.parent().map_or_else(|| out.clone(), PathBuf::from))
            .collect();
        (
            report::html::write_society(&reports, &dirs, &out, false)?,
            out_dir,
        )
    };
    out_dir.finish()?;
    for p in &pages {
        crate::outln!("{}", p.display());
    }
    if args.open {
        for p in &pages {
            if let Err(e) = open::that_detached(p) {
                crate::errln!(
                    "could not open a browser ({e}); open {} yourself",
                    p.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_keyed_by_the_whole_run_path() {
        let a = default_out(&[PathBuf::from("/runs/baseline-comp/seed_1")]);
        let b = default_out(&[PathBuf::from("/runs/baseline-coop/seed_1")]);
        assert_ne!(a, b);
        assert_eq!(
            a,
            default_out(&[PathBuf::from("/runs/baseline-comp/seed_1")])
        );
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("seed_1-") && name.len() == "seed_1-".len() + 12,
            "{name}"
        );
    }
}
