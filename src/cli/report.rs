//! `joule report`: aggregate metrics, tables and plots of Energy Society runs.
//! Empty run folders are left out with a warning (an error when nothing is
//! left); inconsistent ones are warned about.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::report;

/// Arguments of `joule report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Run folders, or folders holding them at any depth (e.g.
    /// `<condition>/exponent_<α>/`); runs are grouped by their parent folder.
    pub runs: Vec<PathBuf>,
    /// Output folder (aggregate/*.csv, report.md, metrics.json, plots/; with
    /// `--against`, also reproduction.md and reproduction.csv). May be left
    /// out with `--against`: then the comparison is only printed.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Compare the runs with the paper's published figures (`paper`) or with
    /// reference runs (a folder in the reference layout): per condition and
    /// metric, mean ± sd beside the reference, the difference with a 95 %
    /// interval, the test, the smallest difference it could detect, and a
    /// verdict (consistent / inconclusive / higher / lower, Holm over the
    /// condition's family); and the paper's claims as effects. The terminal
    /// shows a compact table, reproduction.md the full one. (A folder named
    /// `paper` is `./paper`.)
    #[arg(long, value_name = "paper|DIR")]
    pub against: Option<String>,
    /// With `--against`: compare runs whose set-up (rounds, α, agents,
    /// objective, votes, sabotage, memory, jobs) differs from the reference
    /// condition's, marking every such row, instead of refusing them.
    #[arg(long, requires = "against")]
    pub allow_mismatch: bool,
    /// Compare two conditions A and B (each a folder of runs of one condition);
    /// differences are B − A.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub compare: Option<Vec<PathBuf>>,
    /// Skip the SVG/PNG plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Metric mode: `faithful` reproduces the reference's metric quirks
    /// (QUIRK-14 to 17) and its CSVs byte for byte; `corrected` fixes them
    /// (donations are transfers, only executed attempts count, donation averages
    /// over all runs, normalised recommendation job ids and strict sabotage).
    #[arg(long, value_enum, default_value_t = MetricMode::Faithful)]
    pub mode: MetricMode,
    /// Also write a self-contained `report.html` per condition (one page with
    /// both conditions for `--compare`): summary, energy charts, per-round
    /// timeline and every model call, searchable; opens offline from file://.
    #[arg(long)]
    pub html: bool,
    /// Write into a folder that is not empty: the files the report written
    /// there before lists (`.joule-report-files`) are removed first; other
    /// files are kept.
    #[arg(long)]
    pub force: bool,
    /// Also report runs without their COMPLETE marker (runs that did not
    /// finish; left out by default, and named).
    #[arg(long)]
    pub include_incomplete: bool,
}

/// `--mode` of `joule report`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricMode {
    Faithful,
    Corrected,
}

impl From<MetricMode> for report::Mode {
    fn from(m: MetricMode) -> Self {
        match m {
            MetricMode::Faithful => report::Mode::Faithful,
            MetricMode::Corrected => report::Mode::Corrected,
        }
    }
}

/// The runs worth reporting: a run folder whose `agents.json` lists no
/// agents (an empty or unfinished run) is left out with a warning, and one
/// whose files disagree (calls of agents `agents.json` does not list, a
/// Joule run without its COMPLETE marker) is warned about. An error when
/// nothing is left to report (or, with `--compare`, a condition is empty).
fn checked_runs(
    conditions: Vec<report::load::Condition>,
    compare: bool,
) -> anyhow::Result<Vec<report::load::Condition>> {
    let mut left_out = Vec::new();
    let mut kept = Vec::new();
    for mut c in conditions {
        c.runs.retain(|run| {
            let d = &run.data;
            if d.agents.is_empty() {
                let w = format!(
                    "{} lists no agents: an empty or unfinished run folder",
                    run.dir.join("agents.json").display()
                );
                crate::errln!("warning: {w}; left out of the report");
                left_out.push(w);
                return false;
            }
            let known: std::collections::BTreeSet<&str> =
                d.agents.iter().map(|a| a.agent_id.as_str()).collect();
            let strangers: std::collections::BTreeSet<&str> = d
                .token_usage
                .iter()
                .map(|t| t.agent_id.as_str())
                .chain(d.transcript.iter().map(|t| t.agent_id.as_str()))
                .filter(|a| !known.contains(a))
                .collect();
            if !strangers.is_empty() {
                crate::errln!(
                    "warning: {}: token_usage.json or transcript.json name agents that agents.json does not list ({}): an inconsistent run folder",
                    run.dir.display(),
                    strangers.into_iter().collect::<Vec<_>>().join(", ")
                );
            }
            if run.dir.join("events.jsonl").is_file()
                && !crate::energy_society::recorder::Recorder::is_complete(&run.dir)
            {
                crate::errln!(
                    "warning: {}: no COMPLETE marker: the run did not finish",
                    run.dir.display()
                );
            }
            true
        });
        if c.runs.is_empty() && compare {
            anyhow::bail!(
                "--compare: the condition {} has no run with agents ({})",
                c.dir.display(),
                left_out.join("; ")
            );
        }
        if !c.runs.is_empty() {
            kept.push(c);
        }
    }
    if kept.is_empty() {
        anyhow::bail!("no run to report: {}", left_out.join("; "));
    }
    Ok(kept)
}

/// Run `joule report`.
pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let pages = report_pages(&args)?;
    for p in pages {
        crate::outln!("wrote {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Write the report of `args` (printing what it wrote), and return the HTML
/// pages written (none without `--html`).
pub fn report_pages(args: &ReportArgs) -> anyhow::Result<Vec<PathBuf>> {
    let conditions = match &args.compare {
        Some(ab) => {
            if !args.runs.is_empty() {
                anyhow::bail!(
                    "--compare takes the two conditions itself; drop the other run folders"
                );
            }
            let mut out = Vec::new();
            for p in ab {
                let mut c = discover(std::slice::from_ref(p), args.include_incomplete)?;
                if c.len() != 1 {
                    anyhow::bail!(
                        "--compare needs one condition per argument; {} holds {} (folders {})",
                        p.display(),
                        c.len(),
                        c.iter()
                            .map(|c| c.dir.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                out.push(c.remove(0));
            }
            out
        }
        None => {
            if args.runs.is_empty() {
                anyhow::bail!("give at least one run folder (or a folder of runs)");
            }
            discover(&args.runs, args.include_incomplete)?
        }
    };
    let conditions = checked_runs(conditions, args.compare.is_some())?;
    let mode = report::Mode::from(args.mode);
    let reports: Vec<report::ConditionReport> = conditions
        .into_iter()
        .map(|c| report::analyse_with(c, mode))
        .collect();
    let mut reproduction = match &args.against {
        Some(a) => Some(report::reproduction::cli::compare(
            &reports,
            a,
            mode,
            args.allow_mismatch,
        )?),
        None => None,
    };
    if let Some(r) = &mut reproduction {
        r.warnings.extend(report::identical::notes(
            reports.iter().map(|c| &c.condition),
        ));
    }
    let Some(out) = &args.out else {
        return match reproduction {
            Some(r) => {
                crate::out!("{}", report::reproduction::render::terminal(&r));
                Ok(Vec::new())
            }
            None => anyhow::bail!(
                "give --out FOLDER (or --against paper|DIR to only print the comparison)"
            ),
        };
    };
    let out_dir = report::out_dir::OutDir::prepare(out, args.force, "--out")?;
    let pages = write_into(args, &reports, reproduction.as_ref(), out);
    // What was written is listed even when a later step failed.
    out_dir.finish()?;
    pages
}

/// The runs under `paths`, with the run folders left out named on
/// standard error.
fn discover(
    paths: &[PathBuf],
    include_incomplete: bool,
) -> anyhow::Result<Vec<report::load::Condition>> {
    let d = report::load::discover_with(paths, include_incomplete)?;
    for line in &d.left_out {
        crate::errln!("note: {line}");
    }
    Ok(d.conditions)
}

/// Write the report files into `out` (made ready by `OutDir::prepare`).
fn write_into(
    args: &ReportArgs,
    reports: &[report::ConditionReport],
    reproduction: Option<&report::reproduction::Reproduction>,
    out: &std::path::Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let out = &out.to_path_buf();
    let written = report::write(reports, out, args.compare.is_some(), !args.no_plots)?;
    crate::out!("{}", written.terminal);
    if let Some(r) = reproduction {
        crate::out!("\n{}", report::reproduction::render::terminal(r));
    }
    for d in &written.aggregate_dirs {
        crate::outln!("wrote {}", d.display());
    }
    crate::outln!("wrote {}", out.join("report.md").display());
    crate::outln!("wrote {}", out.join("metrics.json").display());
    if !written.plots.is_empty() {
        crate::outln!(
            "wrote {} plots in {}",
            written.plots.len(),
            out.join("plots").display()
        );
    }
    if let Some(r) = reproduction {
        for p in report::reproduction::cli::write(r, out)? {
            crate::outln!("wrote {}", p.display());
        }
    }
    for w in &written.warnings {
        crate::errln!("warning: {w}");
    }
    if !args.html {
        return Ok(Vec::new());
    }
    let dirs: Vec<PathBuf> = written
        .aggregate_dirs
        .iter()
        .map(|d| d.parent().map_or_else(|| out.clone(), PathBuf::from))
        .collect();
    let pages = report::html::write_society(reports, &dirs, out, args.compare.is_some())?;
    if let Some(r) = reproduction {
        report::reproduction::cli::add_to_pages(r, &pages)?;
    }
    Ok(pages)
}
