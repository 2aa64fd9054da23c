//! `joule report`: the Energy Society's aggregate metrics, tables and plots
//! (spec §7–§9), computed from run folders in the reference layout.
//!
//! - [`load`]: find run folders, group them into conditions, flatten to rows;
//! - [`stats`]: pandas-exact sums, means and standard deviations;
//! - [`metrics`]: one file per metric family, producing [`table::Table`]s;
//! - [`table`]: typed tables and the pandas-identical CSV writer;
//! - [`summary`], [`markdown`], [`plots`], [`compare`]: the human-facing report;
//! - [`html`]: the self-contained `report.html` run explorer (`--html`, `joule view`).
//! - [`measured`]: measured joules per agent and phase beside the formula's charges.
//! - [`reproduction`]: `--against paper|DIR`, verdicts of a reproduction.
//! - [`identical`]: conditions whose runs are the same record for record (empty effects).
//! - [`out_dir`]: the output folder: a non-empty one refused unless forced; a report's own files listed.
//!
//! Output folder: `aggregate/*.csv` (one condition) or `<condition>/aggregate/*.csv`
//! (several), `report.md`, `metrics.json`, `plots/*.svg|png`, and with
//! `--compare` also `compare.md` and `compare.csv`; with `--html` also
//! `report.html` (per condition: `<condition>/report.html` when there are several).

pub(crate) mod compare;
pub(crate) mod html;
pub mod identical;
pub mod load;
pub(crate) mod markdown;
pub(crate) mod measured;
pub mod metrics;
pub mod out_dir;
pub(crate) mod plots;
pub mod provenance;
pub mod race_out;
pub mod reproduction;
pub(crate) mod stats;
pub mod summary;
pub(crate) mod table;

use std::path::{Path, PathBuf};

use anyhow::Context;

use load::{Condition, Rows};
pub use metrics::Mode;
use summary::Summary;
use table::Table;

/// One condition, analysed.
pub struct ConditionReport {
    pub condition: Condition,
    pub rows: Rows,
    pub tables: Vec<(&'static str, Table)>,
    pub summary: Summary,
    /// Measured joules per agent and phase, when the runs recorded them.
    pub measured: measured::Measured,
}

/// Compute every aggregate table and the summary of a condition, reproducing
/// the reference (faithful mode, the default).
pub fn analyse(condition: Condition) -> ConditionReport {
    analyse_with(condition, Mode::Faithful)
}

/// Compute every aggregate table and the summary of a condition in `mode`:
/// faithful reproduces the reference's metric quirks (QUIRK-14 to 17),
/// corrected fixes them (see [`metrics`]).
pub fn analyse_with(condition: Condition, mode: Mode) -> ConditionReport {
    let rows = condition.rows();
    let tables = metrics::aggregate(&condition, &rows, mode);
    let summary = summary::summarize(&condition, &rows, &tables, mode);
    let measured = measured::collect(&condition);
    ConditionReport {
        condition,
        rows,
        tables,
        summary,
        measured,
    }
}

/// What a report wrote.
pub struct Written {
    /// The agent tables, as printed to the terminal.
    pub terminal: String,
    /// Aggregate folder of each condition.
    pub aggregate_dirs: Vec<PathBuf>,
    pub plots: Vec<String>,
    /// Problems that did not stop the report (e.g. no font for the plots).
    pub warnings: Vec<String>,
}

fn slug(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The folder of each condition's tables: `out/aggregate` for one
/// condition, `out/<condition>/aggregate` for several.
fn aggregate_dirs(reports: &[ConditionReport], out: &Path) -> Vec<PathBuf> {
    let mut used: Vec<String> = Vec::new();
    reports
        .iter()
        .map(|r| {
            if reports.len() == 1 {
                return out.join("aggregate");
            }
            let mut s = slug(&r.condition.label);
            while used.contains(&s) {
                s.push('_');
            }
            used.push(s.clone());
            out.join(s).join("aggregate")
        })
        .collect()
}

/// The files, relative to the output folder, that [`write`] writes for
/// `reports` (and, with `html`, [`html::write_society`]), so that a forced
/// report can refuse to overwrite a file it did not write before.
pub fn planned_files(
    reports: &[ConditionReport],
    compare: bool,
    with_plots: bool,
    html: bool,
) -> std::collections::BTreeSet<PathBuf> {
    let dirs = aggregate_dirs(reports, Path::new(""));
    let mut files: std::collections::BTreeSet<PathBuf> = reports
        .iter()
        .zip(&dirs)
        .flat_map(|(r, d)| {
            r.tables
                .iter()
                .map(move |(n, _)| d.join(format!("{n}.csv")))
        })
        .collect();
    if with_plots {
        files.extend(
            plots::file_names()
                .iter()
                .map(|f| Path::new("plots").join(f)),
        );
    }
    for f in ["provenance.csv", "report.md", "metrics.json"] {
        files.insert(PathBuf::from(f));
    }
    if compare && reports.len() >= 2 {
        files.insert(PathBuf::from("compare.md"));
        files.insert(PathBuf::from("compare.csv"));
    }
    if html {
        let parents: Vec<PathBuf> = dirs
            .iter()
            .map(|d| d.parent().map(Path::to_path_buf).unwrap_or_default())
            .collect();
        files.extend(html::page_paths(
            reports.len(),
            &parents,
            Path::new(""),
            compare,
        ));
    }
    files
}

/// Write the report of `reports` into `out`. With `compare`, the first two
/// conditions are A and B and the differences B − A are written too.
pub fn write(
    reports: &[ConditionReport],
    out: &Path,
    compare: bool,
    with_plots: bool,
) -> anyhow::Result<Written> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let aggregate_dirs = aggregate_dirs(reports, out);
    for (r, dir) in reports.iter().zip(&aggregate_dirs) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, t) in &r.tables {
            t.write_csv(&dir.join(format!("{name}.csv")))?;
        }
    }
    let summaries: Vec<Summary> = reports.iter().map(|r| r.summary.clone()).collect();
    let mut warnings = Vec::new();
    let plots = if with_plots {
        let inputs: Vec<plots::PlotInput> = reports
            .iter()
            .map(|r| plots::PlotInput {
                summary: &r.summary,
                tables: &r.tables,
            })
            .collect();
        match plots::write_all(&out.join("plots"), &inputs) {
            Ok(files) => files.into_iter().map(|f| format!("plots/{f}")).collect(),
            Err(e) => {
                // Tables matter more than figures: keep going, and say why.
                warnings.push(format!("plots not written: {e:#}"));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let png_plots: Vec<String> = plots
        .iter()
        .filter(|p| p.ends_with(".png"))
        .cloned()
        .collect();
    let measured: Vec<String> = reports
        .iter()
        .map(|r| measured::section(&r.measured))
        .collect();
    let mut md = markdown::report_with(&summaries, &measured, &png_plots);
    let same = identical::notes(reports.iter().map(|r| &r.condition));
    if !same.is_empty() {
        let text: String = same.iter().map(|n| format!("- {n}\n")).collect();
        md.push_str(&format!("\n## Identical conditions\n\n{text}"));
        warnings.extend(same);
    }
    let origins = provenance::read(reports.iter().map(|r| &r.condition));
    let cautions = provenance::warnings(&origins);
    md.push('\n');
    md.push_str(&provenance::section(&origins));
    md.push_str(&crate::provenance::summary::cautions_markdown(&cautions));
    warnings.extend(cautions);
    write_text(&out.join("provenance.csv"), &provenance::csv(&origins))?;
    let mut terminal: String = summaries
        .iter()
        .zip(&measured)
        .map(|(s, m)| format!("{}\n{m}", markdown::condition_section(s)))
        .collect();
    for r in reports {
        warnings.extend(r.measured.warnings.iter().cloned());
    }
    let mut compare_json = serde_json::Value::Null;
    if compare && reports.len() >= 2 {
        let (a, b) = (&summaries[0], &summaries[1]);
        let rows = compare::compare(a, b);
        let cmp_md = compare::to_markdown(a, b, &rows);
        write_text(&out.join("compare.md"), &cmp_md)?;
        compare::to_table(&rows).write_csv(&out.join("compare.csv"))?;
        md.push('\n');
        md.push_str(&cmp_md.replacen("# ", "## ", 1));
        terminal.push_str(&cmp_md);
        compare_json = serde_json::to_value(&rows)?;
    }
    write_text(&out.join("report.md"), &md)?;
    let conditions: Vec<serde_json::Value> = reports
        .iter()
        .zip(&aggregate_dirs)
        .map(|(r, dir)| {
            let aggregates: serde_json::Map<String, serde_json::Value> = r
                .tables
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_json()))
                .collect();
            serde_json::json!({
                "label": r.condition.label,
                "aggregate_dir": dir.display().to_string(),
                "summary": r.summary,
                "measured": r.measured,
                "aggregates": aggregates,
            })
        })
        .collect();
    let json = serde_json::json!({
        "conditions": conditions,
        "compare": compare_json,
        "plots": plots,
    });
    crate::record::write_json_atomic(out.join("metrics.json"), &json)?;
    Ok(Written {
        terminal,
        aggregate_dirs,
        plots,
        warnings,
    })
}

fn write_text(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
