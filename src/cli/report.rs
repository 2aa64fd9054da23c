//! `joule report`: aggregate metrics, tables and plots of Energy Society runs.
//! Empty run folders are left out with a warning (an error when nothing is
//! left); inconsistent ones are warned about.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::report;
use crate::shown::md_cells;

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
    /// files are kept, and the report is refused if it would overwrite one.
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
        // What a reader must know before citing a verdict: runs of one condition answered by
        // different files, builds with modified sources (`report::provenance`).
        r.warnings
            .extend(report::provenance::warnings(&report::provenance::read(
                reports.iter().map(|c| &c.condition),
            )));
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
    let mut planned =
        report::planned_files(&reports, args.compare.is_some(), !args.no_plots, args.html);
    if reproduction.is_some() {
        planned.extend(report::reproduction::cli::FILES.iter().map(PathBuf::from));
    }
    let out_dir = report::out_dir::OutDir::prepare(out, args.force, "--out", &planned)?;
    let pages = write_into(args, &reports, reproduction.as_ref(), out);
    // What was written is listed even when a later step failed; but the
    // step's own error comes first (listing fails too when the folder
    // could not be made).
    let listed = out_dir.finish();
    let pages = pages?;
    listed?;
    Ok(pages)
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

/// Columns of the terminal report (the Markdown files keep the full tables).
pub const TERMINAL_WIDTH: usize = 120;

/// A Markdown table as aligned plain text no wider than `width` where it
/// can be: columns that do not fit go to a further table below, each
/// repeating the first column; numbers (`---:` columns) align right.
fn table_text(rows: &[&str], width: usize) -> String {
    let header = md_cells(rows[0]);
    let align: Vec<bool> = rows
        .get(1)
        .map(|r| md_cells(r).iter().map(|c| c.ends_with(':')).collect())
        .unwrap_or_default();
    let body: Vec<Vec<String>> = rows.iter().skip(2).map(|r| md_cells(r)).collect();
    let n = header.len();
    let w: Vec<usize> = (0..n)
        .map(|i| {
            body.iter()
                .filter_map(|r| r.get(i))
                .chain(std::iter::once(&header[i]))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    // Groups of columns after the first, each fitting beside it.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut used = w[0];
    for i in 1..n {
        match groups.last_mut() {
            Some(g) if used + 2 + w[i] <= width => g.push(i),
            _ => {
                groups.push(vec![i]);
                used = w[0];
            }
        }
        used += 2 + w[i];
    }
    if groups.is_empty() {
        groups.push(Vec::new());
    }
    let pad = |c: &str, i: usize| {
        let fill = " ".repeat(w[i].saturating_sub(c.chars().count()));
        if align.get(i).copied().unwrap_or(false) {
            format!("{fill}{c}")
        } else {
            format!("{c}{fill}")
        }
    };
    let mut out = String::new();
    for (k, g) in groups.iter().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let cols: Vec<usize> = std::iter::once(0).chain(g.iter().copied()).collect();
        let line = |r: &[String]| {
            let t: Vec<String> = cols
                .iter()
                .map(|&i| pad(r.get(i).map_or("", String::as_str), i))
                .collect();
            t.join("  ").trim_end().to_string() + "\n"
        };
        out += &line(&header);
        let rule: Vec<String> = cols.iter().map(|&i| "-".repeat(w[i])).collect();
        out += &(rule.join("  ") + "\n");
        for r in &body {
            out += &line(r);
        }
    }
    out
}

/// `line` broken at spaces into lines of at most `width` characters
/// (a word longer than that keeps its own line).
fn wrap(line: &str, width: usize) -> String {
    let indent: String = line.chars().take_while(|c| *c == ' ').collect();
    let cont = if line.trim_start().starts_with("- ") {
        format!("{indent}  ")
    } else {
        indent.clone()
    };
    let mut out = String::new();
    let mut cur = String::new();
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        let lead = if out.is_empty() && cur.is_empty() {
            &indent
        } else {
            &cont
        };
        if cur.is_empty() {
            cur = format!("{lead}{word}");
        } else if cur.chars().count() + 1 + word.chars().count() <= width {
            cur.push(' ');
            cur.push_str(word);
        } else {
            out += &cur;
            out.push('\n');
            cur = format!("{cont}{word}");
        }
    }
    out + &cur
}

/// The report's Markdown for a terminal of `width` columns: tables as
/// aligned text split into parts that fit, long lines wrapped; and whether
/// anything was split or wrapped.
pub fn compact(md: &str, width: usize) -> (String, bool) {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = String::new();
    let mut changed = false;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.trim_start().starts_with('|') {
            let start = i;
            while i < lines.len() && lines[i].trim_start().starts_with('|') {
                i += 1;
            }
            let rows = &lines[start..i];
            if rows.iter().any(|r| r.chars().count() > width) && rows.len() >= 2 {
                out += &table_text(rows, width);
                changed = true;
            } else {
                for r in rows {
                    out += r;
                    out.push('\n');
                }
            }
            continue;
        }
        if l.chars().count() > width {
            out += &wrap(l, width);
            changed = true;
        } else {
            out += l;
        }
        out.push('\n');
        i += 1;
    }
    if !md.ends_with('\n') && out.ends_with('\n') {
        out.pop();
    }
    (out, changed)
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
    let (shown, narrowed) = compact(&written.terminal, TERMINAL_WIDTH);
    crate::out!("{shown}");
    if narrowed {
        crate::outln!(
            "(tables split and text wrapped to {TERMINAL_WIDTH} columns here; the full tables are in {})",
            out.join("report.md").display()
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_tables_split_to_the_width_and_keep_every_cell() {
        let head: Vec<String> = (0..12).map(|i| format!("Column number {i}")).collect();
        let row: Vec<String> = (0..12).map(|i| format!("{i}.00 ± 1.25")).collect();
        let md = format!(
            "# Title\n\n| {} |\n|---|{}\n| {} |\n\n{}\n",
            head.join(" | "),
            "---:|".repeat(11),
            row.join(" | "),
            "word ".repeat(60)
        );
        let (text, changed) = compact(&md, 120);
        assert!(changed);
        for l in text.lines() {
            assert!(l.chars().count() <= 120, "{l}");
        }
        for c in head.iter().chain(&row) {
            assert!(text.contains(c.as_str()), "{c} kept: {text}");
        }
        // A narrow table is left as it is.
        let narrow = "| a | b |\n|---|---:|\n| x | 1 |\n";
        assert_eq!(compact(narrow, 120), (narrow.to_string(), false));
    }

    /// A `|` escaped in a cell (`\|`, as the reports write names) stays in
    /// its cell when a wide table is laid out for the terminal: each value
    /// stands under its own heading.
    #[test]
    fn escaped_pipes_stay_inside_their_cells_on_the_terminal() {
        let head: Vec<String> = (0..12).map(|i| format!("Column number {i}")).collect();
        let mut row: Vec<String> = (0..12).map(|i| format!("{i}.00 ± 1.25")).collect();
        row[0] = crate::shown::md_cell("team|blue");
        row[1] = crate::shown::md_cell("qwen3 | 8b");
        let md = format!(
            "| {} |\n|---|{}\n| {} |\n",
            head.join(" | "),
            "---:|".repeat(11),
            row.join(" | ")
        );
        let (text, changed) = compact(&md, 120);
        assert!(changed);
        assert!(!text.contains('\\'), "{text}");
        // Each part: its heading line, its rule, the row; cells apart by two spaces.
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len() % 3, 0, "{text}");
        let cells = |l: &str| -> Vec<String> {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        };
        for part in lines.chunks(3) {
            let (h, r) = (cells(part[0]), cells(part[2]));
            assert_eq!(h.len(), r.len(), "{text}");
            assert_eq!(r[0], "team|blue", "{text}");
            for (h, r) in h.iter().zip(&r).skip(1) {
                let i = h.trim_start_matches("Column number ");
                let want = if i == "1" {
                    "qwen3 | 8b".to_string()
                } else {
                    format!("{i}.00 ± 1.25")
                };
                assert_eq!(*r, want, "{text}");
            }
        }
    }
}
