//! `joule race report` (spec §8): reads run folders and
//! writes Unsafe rates with 95% Wilson intervals by p_max, N, lineup,
//! persona band and position (Leader / Middle / Trailer before the round),
//! with parse-failure and contamination counts beside every rate; the
//! per-trajectory features (own action, opponent action and progress gap
//! for rounds 1–5); and a plot of Unsafe rate by position and persona band.
//! Behavioural rates use uncontaminated races only (§3.2).
//!
//! Every number of `report.md`'s results is also in a CSV at full precision
//! (tests/quick/race_analysis.rs checks it); its closing Provenance section
//! (`crate::provenance::summary`) has `provenance.csv` beside it. The files are written into a fresh
//! folder beside `--out` and moved into `--out` only when all of them were
//! written, so a failure (a bad `--human` file, say) leaves `--out` as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;
use serde::Serialize;

use super::analysis::runs::{load, wilson, RunData};
use super::scenario::{Position, TurnRecord};
use crate::csv::CsvText;
use crate::shown::md_cell;

/// One row of a rate table.
#[derive(Debug, Clone, Serialize)]
pub struct RateRow {
    pub table: String,
    pub group: Vec<(String, String)>,
    pub races: usize,
    pub decisions: usize,
    pub unsafe_count: usize,
    pub unsafe_rate: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// Turns (all races) whose final attempt failed and fell back to SAFE.
    pub parse_failures: usize,
    /// Races in the cell excluded for any parse failure.
    pub contaminated_races: usize,
}

fn band_order(b: &str) -> usize {
    ["baseline", "placebo", "low", "mid", "high", "framing"]
        .iter()
        .position(|x| *x == b)
        .unwrap_or(9)
}

fn pos_name(p: Position) -> &'static str {
    match p {
        Position::Leader => "Leader",
        Position::Middle => "Middle",
        Position::Trailer => "Trailer",
    }
}

fn rate_table(
    data: &RunData,
    table: &str,
    keys: &[&str],
    key_of: impl Fn(&TurnRecord) -> Vec<String>,
) -> Vec<RateRow> {
    let contaminated: BTreeSet<&str> = data
        .races
        .iter()
        .filter(|r| r.any_parse_failure)
        .map(|r| r.game_id.as_str())
        .collect();
    #[derive(Default)]
    struct Acc {
        n: usize,
        u: usize,
        pf: usize,
        races: BTreeSet<String>,
        bad: BTreeSet<String>,
    }
    let mut cells: BTreeMap<Vec<String>, Acc> = BTreeMap::new();
    for t in &data.turns {
        let a = cells.entry(key_of(t)).or_default();
        a.pf += t.parse_failed as usize;
        if contaminated.contains(t.game_id.as_str()) {
            a.bad.insert(t.game_id.clone());
            continue;
        }
        a.n += 1;
        a.u += t.unsafe_ as usize;
        a.races.insert(t.game_id.clone());
    }
    cells
        .into_iter()
        .map(|(k, a)| {
            let (lo, hi) = wilson(a.u, a.n);
            RateRow {
                table: table.into(),
                group: keys.iter().map(|s| s.to_string()).zip(k).collect(),
                races: a.races.len(),
                decisions: a.n,
                unsafe_count: a.u,
                unsafe_rate: if a.n == 0 {
                    0.0
                } else {
                    a.u as f64 / a.n as f64
                },
                ci_low: lo,
                ci_high: hi,
                parse_failures: a.pf,
                contaminated_races: a.bad.len(),
            }
        })
        .collect()
}

fn markdown(rows: &[RateRow], title: &str) -> String {
    let mut out = format!("## {title}\n\n");
    let Some(first) = rows.first() else {
        return out + "(no decisions)\n\n";
    };
    let keys: Vec<&str> = first.group.iter().map(|(k, _)| k.as_str()).collect();
    out.push_str(&format!(
        "| {} | races | n | Unsafe | 95% CI | parse failures | contaminated races |\n",
        keys.join(" | ")
    ));
    // One separator cell per header cell: the keys, then the six counts.
    out.push_str(&format!(
        "|{}---|---|---|---|---|---|\n",
        "---|".repeat(keys.len())
    ));
    for r in rows {
        let mark = if r.decisions < 20 { "†" } else { "" };
        out.push_str(&format!(
            "| {} | {} | {}{} | {:.1}% | {:.1}–{:.1}% | {} | {} |\n",
            r.group
                .iter()
                .map(|(_, v)| md_cell(v))
                .collect::<Vec<_>>()
                .join(" | "),
            r.races,
            r.decisions,
            mark,
            100.0 * r.unsafe_rate,
            100.0 * r.ci_low,
            100.0 * r.ci_high,
            r.parse_failures,
            r.contaminated_races
        ));
    }
    out.push('\n');
    out
}

/// Per-trajectory features: own action, opponent action (for N > 2 the
/// share of co-players playing UNSAFE) and progress gap entering rounds 1–5.
fn trajectories_csv(data: &RunData) -> String {
    let mut by: BTreeMap<(String, usize), Vec<&TurnRecord>> = BTreeMap::new();
    for t in &data.turns {
        by.entry((t.game_id.clone(), t.player_index))
            .or_default()
            .push(t);
    }
    let contaminated: BTreeSet<&str> = data
        .races
        .iter()
        .filter(|r| r.any_parse_failure)
        .map(|r| r.game_id.as_str())
        .collect();
    let mut head = vec![
        "game_id",
        "lineup",
        "model",
        "n_players",
        "max_private_risk",
        "persona_condition",
        "persona_band",
        "rep",
        "player_index",
        "contaminated",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    for f in ["own", "opp", "gap"] {
        for r in 1..=5 {
            head.push(format!("{f}_{r}"));
        }
    }
    let mut out = CsvText::new();
    out.record(&head);
    for ((gid, seat), mut ts) in by {
        ts.sort_by_key(|t| t.round);
        let t0 = ts[0];
        let mut row = vec![
            gid.clone(),
            t0.lineup.clone(),
            t0.model.clone(),
            t0.n_players.to_string(),
            t0.max_private_risk.to_string(),
            t0.persona_condition.clone(),
            t0.persona_band.clone(),
            t0.rep.to_string(),
            seat.to_string(),
            contaminated.contains(gid.as_str()).to_string(),
        ];
        let get = |r: usize| ts.iter().find(|t| t.round as usize == r);
        for r in 1..=5 {
            row.push(
                get(r)
                    .map(|t| (t.unsafe_ as u8).to_string())
                    .unwrap_or_default(),
            );
        }
        for r in 1..=5 {
            // The co-players' actions in round r are their own records.
            let others: Vec<&TurnRecord> = data_round(&data.turns, &gid, r, seat);
            row.push(if others.is_empty() {
                String::new()
            } else {
                let u = others.iter().filter(|t| t.unsafe_).count() as f64;
                super::rules::fmt_num(u / others.len() as f64)
            });
        }
        for r in 1..=5 {
            row.push(
                get(r)
                    .map(|t| super::rules::fmt_num(t.progress_gap_before))
                    .unwrap_or_default(),
            );
        }
        out.record(&row);
    }
    out.into_string()
}

fn data_round<'a>(
    turns: &'a [TurnRecord],
    gid: &str,
    round: usize,
    seat: usize,
) -> Vec<&'a TurnRecord> {
    turns
        .iter()
        .filter(|t| t.game_id == gid && t.round as usize == round && t.player_index != seat)
        .collect()
}

fn draw_chart<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    bands: &[String],
    rows: &[RateRow],
) -> anyhow::Result<()> {
    let positions = ["Leader", "Middle", "Trailer"];
    let colors = [
        RGBColor(46, 125, 50),
        RGBColor(249, 168, 37),
        RGBColor(198, 40, 40),
    ];

    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let nb = bands.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Unsafe rate by position and persona band (95% Wilson CI)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5f64..nb - 0.5, 0.0f64..1.05)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let bands_c = bands.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(0)
        .bold_line_style(crate::figure::GRID)
        .x_labels(bands.len().max(1))
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                bands_c.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("Unsafe rate")
        .x_desc("persona band")
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    for (j, pos) in positions.iter().enumerate() {
        let color = colors[j];
        let mut bars = Vec::new();
        let mut whiskers = Vec::new();
        for (i, b) in bands.iter().enumerate() {
            if let Some(r) = rows
                .iter()
                .find(|r| &r.group[0].1 == b && r.group[1].1 == *pos)
            {
                if r.decisions == 0 {
                    continue;
                }
                let x = i as f64 + (j as f64 - 1.0) * 0.27;
                bars.push(Rectangle::new(
                    [(x - 0.12, 0.0), (x + 0.12, r.unsafe_rate)],
                    color.filled(),
                ));
                whiskers.push(PathElement::new(
                    vec![(x, r.ci_low), (x, r.ci_high)],
                    BLACK.stroke_width(2),
                ));
            }
        }
        // Only a position with bars has a legend entry (a two-player race has
        // no Middle).
        if bars.is_empty() {
            continue;
        }
        chart
            .draw_series(bars)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .label(*pos)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(whiskers)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

/// Grouped bars: Unsafe rate by position within each persona band, with
/// Wilson intervals.
fn plot(rows: &[RateRow], path: &Path, svg: bool) -> anyhow::Result<()> {
    let mut bands: Vec<String> = rows.iter().map(|r| r.group[0].1.clone()).collect();
    bands.sort_by_key(|b| (band_order(b), b.clone()));
    bands.dedup();
    if svg {
        draw_chart(
            SVGBackend::new(path, (900, 520)).into_drawing_area(),
            &bands,
            rows,
        )
    } else {
        draw_chart(
            BitMapBackend::new(path, (900, 520)).into_drawing_area(),
            &bands,
            rows,
        )
    }
    .with_context(|| format!("drawing {}", path.display()))
}

/// The report's six rate tables, in this order: by p_max, by N, by N and
/// position, by persona band and position, by lineup/N/p_max, and by model,
/// persona band and position (the HTML report shows the same rows).
pub fn rate_tables(data: &RunData) -> [Vec<RateRow>; 6] {
    let s = |x: &str| x.to_string();
    let t_pmax = rate_table(data, "by_pmax", &["p_max"], |t| {
        vec![super::rules::fmt_num(t.max_private_risk)]
    });
    let t_n = rate_table(data, "by_n", &["N"], |t| vec![t.n_players.to_string()]);
    let t_lineup = rate_table(data, "by_lineup_pmax", &["lineup", "N", "p_max"], |t| {
        vec![
            t.lineup.clone(),
            t.n_players.to_string(),
            super::rules::fmt_num(t.max_private_risk),
        ]
    });
    let t_pos = rate_table(data, "by_position", &["N", "position"], |t| {
        vec![t.n_players.to_string(), s(pos_name(t.position))]
    });
    let mut t_band = rate_table(
        data,
        "by_band_position",
        &["persona band", "position"],
        |t| vec![t.persona_band.clone(), s(pos_name(t.position))],
    );
    t_band.sort_by_key(|r| {
        (
            band_order(&r.group[0].1),
            r.group[0].1.clone(),
            r.group[1].1.clone(),
        )
    });
    let t_model_band = rate_table(
        data,
        "by_model_band_position",
        &["model", "persona band", "position"],
        |t| {
            vec![
                t.model.clone(),
                t.persona_band.clone(),
                s(pos_name(t.position)),
            ]
        },
    );
    [t_pmax, t_n, t_pos, t_band, t_lineup, t_model_band]
}

/// Parse failures, retries and SAFE fallbacks per model: the Markdown table
/// and `contract.csv` (the same rows, then `all`, the run's totals the
/// report's first paragraph gives).
fn retry_md(data: &RunData) -> (String, String) {
    #[derive(Default)]
    struct Acc {
        turns: usize,
        attempts: usize,
        failed_attempts: usize,
        retried: usize,
        fallbacks: usize,
        races: BTreeSet<String>,
        contaminated: BTreeSet<String>,
    }
    let bad: BTreeSet<(usize, &str)> = data
        .races
        .iter()
        .zip(&data.race_sources)
        .filter(|(r, _)| r.any_parse_failure)
        .map(|(r, &s)| (s, r.game_id.as_str()))
        .collect();
    let mut by: BTreeMap<&str, Acc> = BTreeMap::new();
    for (t, &src) in data.turns.iter().zip(&data.turn_sources) {
        let a = by.entry(t.model.as_str()).or_default();
        a.turns += 1;
        a.attempts += t.attempt_history.len();
        a.failed_attempts += t.attempt_history.iter().filter(|x| x.parse_failed).count();
        a.retried += (t.retry_count > 0) as usize;
        a.fallbacks += t.parse_failed as usize;
        let key = format!("{src}::{}", t.game_id);
        a.races.insert(key.clone());
        if bad.contains(&(src, t.game_id.as_str())) {
            a.contaminated.insert(key);
        }
    }
    let mut csv = CsvText::new();
    csv.record([
        "model",
        "turns",
        "attempts",
        "failed_attempts",
        "turns_retried",
        "safe_fallbacks",
        "races",
        "contaminated_races",
    ]);
    let mut md = String::from(
        "## Output contract per model\n\nAttempts include retries (the same prompt resent with the retry seed); \
         a fallback is a turn whose last attempt failed to parse and was played as SAFE, which \
         contaminates its race.\n\n| model | turns | attempts | failed attempts | turns retried | SAFE fallbacks | races | contaminated races |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (m, a) in &by {
        csv.record([
            m.to_string(),
            a.turns.to_string(),
            a.attempts.to_string(),
            a.failed_attempts.to_string(),
            a.retried.to_string(),
            a.fallbacks.to_string(),
            a.races.len().to_string(),
            a.contaminated.len().to_string(),
        ]);
        md.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |\n",
            md_cell(m),
            a.turns,
            a.attempts,
            a.failed_attempts,
            a.retried,
            a.fallbacks,
            a.races.len(),
            a.contaminated.len()
        ));
    }
    let total = |f: &dyn Fn(&Acc) -> usize| by.values().map(f).sum::<usize>();
    csv.record([
        "all".to_string(),
        total(&|a| a.turns).to_string(),
        total(&|a| a.attempts).to_string(),
        total(&|a| a.failed_attempts).to_string(),
        total(&|a| a.retried).to_string(),
        total(&|a| a.fallbacks).to_string(),
        data.races.len().to_string(),
        bad.len().to_string(),
    ]);
    md.push('\n');
    (md, csv.into_string())
}

/// A fresh folder beside `out` the report is written into, moved into `out`
/// by [`Staging::commit`]; dropped before that, it is removed.
struct Staging {
    dir: PathBuf,
    done: bool,
}

impl Staging {
    fn new(out: &Path) -> anyhow::Result<Self> {
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "report".into());
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        let mut k = 0u32;
        loop {
            let dir = parent.join(format!(".{name}.partial-{}-{k}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(Staging { dir, done: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && k < 1000 => k += 1,
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
            }
        }
    }

    /// Move every file written into `out` (created if need be; files of the
    /// same name there are replaced, others kept).
    fn commit(mut self, out: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let entries = std::fs::read_dir(&self.dir)
            .with_context(|| format!("reading {}", self.dir.display()))?;
        for e in entries {
            let e = e.with_context(|| format!("reading {}", self.dir.display()))?;
            let to = out.join(e.file_name());
            std::fs::rename(e.path(), &to)
                .with_context(|| format!("moving {} to {}", e.path().display(), to.display()))?;
        }
        self.done = true;
        std::fs::remove_dir(&self.dir).with_context(|| format!("removing {}", self.dir.display()))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A race report written into a staging folder beside its destination, not
/// yet moved there: so a caller can add files (the HTML page) and check the
/// destination against the whole list before anything reaches it
/// (`crate::report::race_out`). Dropped uncommitted, the staging folder goes.
pub struct StagedReport {
    stage: Staging,
    /// The report's Markdown text.
    pub md: String,
}

impl StagedReport {
    /// Write the report of `dirs` (with the humans-versus-models section when
    /// `human` names the human data set) into a staging folder for `out`.
    pub fn write(dirs: &[PathBuf], out: &Path, human: Option<&Path>) -> anyhow::Result<Self> {
        let data = load(dirs)?;
        let stage = Staging::new(out)?;
        let md = write_files(dirs, &data, stage.dir.as_path(), human)?;
        Ok(StagedReport { stage, md })
    }

    /// The staging folder (files added here are moved with the report).
    pub fn dir(&self) -> &Path {
        &self.stage.dir
    }

    /// Move every staged file into `out`; returns the Markdown text.
    pub fn commit(self, out: &Path) -> anyhow::Result<String> {
        self.stage.commit(out)?;
        Ok(self.md)
    }
}

/// Write the report into `out` and return the Markdown text.
pub fn write_report(dirs: &[PathBuf], out: &Path) -> anyhow::Result<String> {
    write_report_with(dirs, out, None)
}

/// The report, opening with the humans-versus-models section when `human`
/// names the human data set (see [`super::analysis::compare`]).
pub fn write_report_with(
    dirs: &[PathBuf],
    out: &Path,
    human: Option<&Path>,
) -> anyhow::Result<String> {
    let data = load(dirs)?;
    let stage = Staging::new(out)?;
    let md = write_files(dirs, &data, stage.dir.as_path(), human)?;
    stage.commit(out)?;
    Ok(md)
}

/// Every file of the report, written into `out`.
fn write_files(
    dirs: &[PathBuf],
    data: &RunData,
    out: &Path,
    human: Option<&Path>,
) -> anyhow::Result<String> {
    let cmp = super::analysis::compare::compare(data, human, out)?;
    let n_races = data.races.len();
    let bad = data.races.iter().filter(|r| r.any_parse_failure).count();
    let pf: usize = data.turns.iter().filter(|t| t.parse_failed).count();
    let retried: usize = data.turns.iter().filter(|t| t.retry_count > 0).count();
    let mut md = format!(
        "# AI race report\n\nRuns: {}\n\n{} races, {} decisions; {} races contaminated by a final parse failure \
         (excluded from rates), {} final parse failures, {} decisions needed a retry. \
         Rates are over uncontaminated races; † marks cells with n < 20.\n\n",
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        n_races,
        data.turns.len(),
        bad,
        pf,
        retried
    );
    if human.is_some() {
        md.push_str(&cmp.markdown);
    }
    let (contract_md, contract_csv) = retry_md(data);
    md.push_str(&contract_md);
    std::fs::write(out.join("contract.csv"), contract_csv)
        .with_context(|| format!("writing {}/contract.csv", out.display()))?;
    let [t_pmax, t_n, t_pos, t_band, t_lineup, t_model_band] = rate_tables(data);
    md.push_str(&markdown(&t_pmax, "Unsafe rate by p_max"));
    md.push_str(&markdown(&t_n, "Unsafe rate by number of players"));
    md.push_str(&markdown(
        &t_pos,
        "Unsafe rate by position (Leader = top or tied for top, Trailer = strictly last)",
    ));
    md.push_str(&markdown(
        &t_band,
        "Unsafe rate by persona band and position",
    ));
    md.push_str(&markdown(&t_lineup, "Unsafe rate by lineup, N and p_max"));
    md.push_str(&markdown(
        &t_model_band,
        "Unsafe rate by model, persona band and position",
    ));
    if human.is_none() {
        md.push_str(&cmp.markdown);
    }
    // What played the races (`crate::provenance`), one record per experiment folder.
    let origins = crate::provenance::summary::read_folders(dirs);
    let wording = crate::provenance::summary::EXPERIMENTS;
    md.push_str(&crate::provenance::summary::section(&origins, wording));
    std::fs::write(
        out.join("provenance.csv"),
        crate::provenance::summary::csv(&origins, wording),
    )
    .with_context(|| format!("writing {}/provenance.csv", out.display()))?;
    let cautions = crate::provenance::summary::warnings(&origins, wording);
    md.push_str(&crate::provenance::summary::cautions_markdown(&cautions));
    for c in &cautions {
        crate::errln!("warning: {c}");
    }
    md.push_str("Files: `unsafe_rates.csv`, `contract.csv`, `trajectories.csv`, `unsafe_by_position.png`, \
                 `unsafe_by_position.svg`, `logit.csv`, `logit_sample.csv`, `strategies.csv`, `archetypes.csv`, \
                 `humans_vs_models.csv`, `provenance.csv` (with `--human`: `unsafe_tests.csv`, \
                 `archetype_centroids.csv`, `archetypes.png`, `archetypes.svg`).\n");
    let all: Vec<&RateRow> = [&t_pmax, &t_n, &t_pos, &t_band, &t_lineup, &t_model_band]
        .into_iter()
        .flatten()
        .collect();
    let mut csv = CsvText::new();
    csv.record(
        "table,group,races,decisions,unsafe_count,unsafe_rate,ci_low,ci_high,parse_failures,contaminated_races"
            .split(','),
    );
    for r in all {
        let g = r
            .group
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        csv.record([
            r.table.to_string(),
            g,
            r.races.to_string(),
            r.decisions.to_string(),
            r.unsafe_count.to_string(),
            r.unsafe_rate.to_string(),
            r.ci_low.to_string(),
            r.ci_high.to_string(),
            r.parse_failures.to_string(),
            r.contaminated_races.to_string(),
        ]);
    }
    std::fs::write(out.join("unsafe_rates.csv"), csv.into_string())
        .with_context(|| format!("writing {}/unsafe_rates.csv", out.display()))?;
    std::fs::write(out.join("trajectories.csv"), trajectories_csv(data))
        .with_context(|| format!("writing {}/trajectories.csv", out.display()))?;
    plot(&t_band, &out.join("unsafe_by_position.png"), false)?;
    plot(&t_band, &out.join("unsafe_by_position.svg"), true)?;
    std::fs::write(out.join("report.md"), &md)
        .with_context(|| format!("writing {}/report.md", out.display()))?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lineup and model names with a `|` or a newline stay inside their
    /// cells: every row has the header's columns, on one line.
    #[test]
    fn names_with_pipes_and_newlines_keep_the_rate_tables_columns() {
        let row = |lineup: &str, model: &str| RateRow {
            table: "t".into(),
            group: vec![
                ("lineup".into(), lineup.into()),
                ("model".into(), model.into()),
            ],
            races: 2,
            decisions: 30,
            unsafe_count: 3,
            unsafe_rate: 0.1,
            ci_low: 0.05,
            ci_high: 0.2,
            parse_failures: 0,
            contaminated_races: 0,
        };
        let md = markdown(&[row("AU|CS", "m"), row("CS\nCAS", "a | b")], "Rates");
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(lines.len(), 4, "{md}");
        for l in &lines {
            assert_eq!(crate::shown::md_cells(l).len(), 8, "{l}");
        }
        assert_eq!(crate::shown::md_cells(lines[2])[..3], ["AU|CS", "m", "2"]);
        assert_eq!(
            crate::shown::md_cells(lines[3])[..3],
            ["CS\\nCAS", "a | b", "2"]
        );
    }

    #[test]
    fn wilson_matches_statsmodels() {
        // statsmodels proportion_confint(count, nobs, method="wilson").
        let (lo, hi) = wilson(288, 1460); // 19.7%: paper Table 5 first row 17.7–21.8%
        assert!(
            (lo - 0.1775).abs() < 5e-4 && (hi - 0.2181).abs() < 5e-4,
            "{lo} {hi}"
        );
        let (lo, hi) = wilson(0, 9); // 0.0–29.9%
        assert_eq!(lo, 0.0);
        assert!((hi - 0.2991).abs() < 5e-4, "{hi}");
        let (lo, hi) = wilson(4, 4); // 51.0–100%
        assert!(
            (lo - 0.5101).abs() < 5e-4 && (hi - 1.0).abs() < 1e-12,
            "{lo}"
        );
    }
}
