//! `joule report RUNS... --against paper|DIR`: is a reproduction consistent
//! with the paper (or with reference runs)? For each condition and metric,
//! the runs' mean ± sd (n) beside the paper's figure, the difference with a
//! 95 % interval, the test that gave it and a verdict (consistent, higher,
//! lower) after Holm's adjustment over the table; then the paper's claims as
//! effects (contrasts): the run's effect, its sign and whether its size is
//! compatible with the paper's.
//!
//! - [`paper`]: the published figures (`src/report/reproduction/paper.toml`);
//! - [`measures`]: the per-run values of each metric;
//! - [`stats`]: Welch, Holm, two-proportion and cluster-robust tests, the
//!   deterministic bootstrap (checked against scipy/statsmodels);
//! - [`contrasts`]: the effects;
//! - [`render`]: Markdown, CSV and the HTML section.
//!
//! Runs are matched to the paper's conditions by the condition inferred from
//! each run (`energy_society::condition`: objective, votes, sabotage, memory,
//! jobs per round, α) and to a reference folder's conditions the same way
//! (or, with one condition on each side, directly).

pub mod cli;
pub mod contrasts;
pub mod measures;
pub mod paper;
pub mod render;
pub mod stats;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::energy_society::condition::{self, Overrides};
use crate::energy_society::config::Objective as EngineObjective;
use crate::report::load::Condition;
use crate::report::metrics::Mode;
use crate::report::summary::agent_order;
use crate::report::ConditionReport;
use measures::Metric;
use paper::{Cell, Objective, Paper, PaperCondition, Published};
use stats::{Bootstrap, Summary};

/// The significance level of every verdict (after Holm).
pub const ALPHA: f64 = 0.05;
/// The bootstrap's fixed seed (the paper's publication date) and resamples.
pub const BOOTSTRAP: Bootstrap = Bootstrap {
    seed: 20_260_716,
    resamples: 9_999,
};

/// What `--against` names.
#[derive(Debug, Clone, PartialEq)]
pub enum Against {
    /// The paper's published figures.
    Paper,
    /// A folder of runs in the reference layout (one or more conditions).
    Runs(PathBuf),
}

impl Against {
    /// `paper`, or a folder that holds runs in the reference layout (checked
    /// by [`reproduce`]).
    pub fn parse(s: &str) -> Against {
        if s == "paper" {
            Against::Paper
        } else {
            Against::Runs(PathBuf::from(s))
        }
    }
}

/// A verdict of one comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Consistent,
    Higher,
    Lower,
    /// Not tested, and why.
    NotTested(String),
}

impl Verdict {
    pub fn text(&self) -> String {
        match self {
            Verdict::Consistent => "consistent".into(),
            Verdict::Higher => "higher".into(),
            Verdict::Lower => "lower".into(),
            Verdict::NotTested(why) => format!("not tested ({why})"),
        }
    }

    fn from(p_holm: f64, diff: f64) -> Verdict {
        if p_holm.is_nan() {
            Verdict::NotTested("no p-value".into())
        } else if p_holm >= ALPHA {
            Verdict::Consistent
        } else if diff > 0.0 {
            Verdict::Higher
        } else {
            Verdict::Lower
        }
    }
}

/// One comparison of a level: the run's mean of a metric against the
/// reference's.
#[derive(Debug, Clone, Serialize)]
pub struct LevelRow {
    /// The paper's condition (`baseline comp`) or the reference condition.
    pub reference_condition: String,
    /// The runs' condition label.
    pub run_condition: String,
    pub metric: Metric,
    pub agent: Option<String>,
    /// The runs' model (or policy) at that agent slot.
    pub model: Option<String>,
    pub run: Summary,
    /// The reference as written (`14.0 ± 9.5 (n=5)`, `1.13–1.42`, or the
    /// reference runs' mean ± sd (n)).
    pub reference: String,
    pub reference_summary: Option<Summary>,
    /// run − reference (for a range or single number: the distance from it,
    /// 0 inside).
    pub difference: f64,
    pub ci: (f64, f64),
    pub test: String,
    pub p: f64,
    pub p_holm: f64,
    pub verdict: Verdict,
    /// The sentence of the paper, or the reference folder.
    pub source: String,
}

/// One contrast: the paper's claim as an effect.
#[derive(Debug, Clone, Serialize)]
pub struct ContrastRow {
    pub id: String,
    pub claim: String,
    /// The run conditions of side a and side b.
    pub runs: (String, String),
    /// Paired by run (both sides in the same runs) or independent samples.
    pub paired: bool,
    pub run_effect: Summary,
    pub run_ci: (f64, f64),
    pub reference_effect: String,
    pub reference_value: f64,
    pub size_difference: f64,
    pub size_ci: (f64, f64),
    pub test: String,
    pub p_sign: f64,
    pub p_sign_holm: f64,
    pub p_size: f64,
    pub p_size_holm: f64,
    /// `same sign`, `opposite sign`, `no clear effect`.
    pub sign: String,
    /// `compatible`, `higher`, `lower` (the run's effect against the paper's).
    pub size: String,
}

/// The comparison of a set of runs against the paper or reference runs.
#[derive(Debug, Clone, Serialize)]
pub struct Reproduction {
    /// `the paper` or the reference folder.
    pub against: String,
    pub mode: Mode,
    pub bootstrap: Bootstrap,
    pub alpha: f64,
    /// One line per run condition: what it was matched to, its agents.
    pub conditions: Vec<String>,
    /// Said at the top of every table when the runs were answered by other
    /// models than the paper's ([`stand_in_notice`]).
    pub notice: Option<String>,
    pub levels: Vec<LevelRow>,
    pub contrasts: Vec<ContrastRow>,
    /// Contrasts or conditions that could not be compared, and why.
    pub notes: Vec<String>,
}

/// A number as the tables show it: a share as a percentage, others with two
/// decimals.
pub fn fmt_value(x: f64, percent: bool) -> String {
    if x.is_nan() {
        "—".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "∞".into()
        } else {
            "−∞".into()
        }
    } else if percent {
        format!("{:.1}%", 100.0 * x)
    } else {
        format!("{x:.2}")
    }
}

/// A Joule run's own switches, from its `config.resolved.toml` (the
/// reference layout has no memory switch, and a Joule folder name such as
/// `no-memory-comp` is not the reference's): they outrank what is inferred
/// from the recorded run. A reference run has no such file: no overrides.
pub fn resolved_switches(run_dir: &Path) -> Overrides {
    let Some(t) = std::fs::read_to_string(run_dir.join("config.resolved.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
    else {
        return Overrides::default();
    };
    let flag = |k: &str| t.get(k).and_then(|v| v.as_bool());
    Overrides {
        objective: match t.get("objective").and_then(|v| v.as_str()) {
            Some("comp") => Some(EngineObjective::Competitive),
            Some("coop") => Some(EngineObjective::Cooperative),
            _ => None,
        },
        use_votes: flag("use_votes"),
        enable_sabotage: flag("enable_sabotage"),
        memory: flag("memory"),
        alpha: t
            .get("cost")
            .and_then(|c| c.get("alpha"))
            .and_then(|a| a.as_float().or_else(|| a.as_integer().map(|i| i as f64))),
    }
}

/// The paper cell of a condition, from the condition inferred for each run;
/// `Err` says why it is none of the paper's.
pub fn paper_cell(cond: &Condition) -> Result<Cell, String> {
    let mut cell: Option<Cell> = None;
    for run in &cond.runs {
        let c = condition::infer(&run.data, &run.dir, &resolved_switches(&run.dir));
        let d = c.difficulty.value;
        let mut differs = Vec::new();
        if !c.use_votes.value {
            differs.push("no votes".to_string());
        }
        if c.enable_sabotage.value {
            differs.push("sabotage".into());
        }
        if !c.memory.value {
            differs.push("no memory".into());
        }
        if (d.easy, d.medium, d.hard) != (4, 4, 4) {
            differs.push(format!("jobs {}/{}/{}", d.easy, d.medium, d.hard));
        }
        if run.data.config.max_rounds != 30 {
            differs.push(format!("{} rounds", run.data.config.max_rounds));
        }
        let alpha = c.alpha.value;
        let which = if alpha == 0.5 {
            PaperCondition::Baseline
        } else if alpha == 0.0 {
            PaperCondition::NoSizePenalty
        } else {
            differs.push(format!("α = {alpha}"));
            PaperCondition::Baseline
        };
        if !differs.is_empty() {
            return Err(format!(
                "{} ({}) is not a condition the paper gives figures for (baseline or no size penalty): {}",
                cond.label,
                run.dir.display(),
                differs.join(", ")
            ));
        }
        let obj = match c.objective.value {
            EngineObjective::Competitive => Objective::Comp,
            EngineObjective::Cooperative => Objective::Coop,
        };
        match cell {
            None => cell = Some((which, obj)),
            Some(prev) if prev != (which, obj) => {
                return Err(format!(
                    "the runs of {} are of different conditions ({} {} and {} {})",
                    cond.label,
                    prev.0.label(),
                    prev.1.label(),
                    which.label(),
                    obj.label()
                ))
            }
            _ => {}
        }
    }
    cell.ok_or_else(|| format!("{} holds no runs", cond.label))
}

/// `baseline comp`.
pub fn cell_label(c: Cell) -> String {
    format!("{} {}", c.0.label(), c.1.label())
}

/// The models at each agent slot of a condition: the paper's model name,
/// with the model that answered beside it when another one did
/// (`qwen3:8b (answered by smollm2-135m-instruct)`, `gemma4:e4b (answered
/// by scripted:greedy)`): `agents.json`'s `answered_by`, or for a run
/// recorded without it, what its `config.resolved.toml` says answered.
pub fn slot_models(cond: &Condition) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for run in &cond.runs {
        let resolved = std::fs::read_to_string(run.dir.join("config.resolved.toml"))
            .ok()
            .and_then(|t| crate::energy_society::config::SocietyConfig::from_toml_str(&t, "").ok());
        for a in &run.data.agents {
            let answered = a.answered_by.clone().or_else(|| {
                let cfg = resolved.as_ref()?;
                let r = cfg.roster.iter().find(|r| r.agent_id == a.agent_id)?;
                cfg.llm.answered_by(&r.model, &a.model_name)
            });
            let name = crate::report::summary::model_label(&a.model_name, answered.as_slice());
            if !out.iter().any(|(id, m)| id == &a.agent_id && m == &name) {
                out.push((a.agent_id.clone(), name));
            }
        }
    }
    out.sort_by_key(|(id, _)| agent_order(id));
    out
}

/// The notice every table of a reproduction opens with when some of its
/// runs were not answered by the paper's models (stand-ins, served
/// models, scripted policies); `None` when every call was.
pub fn stand_in_notice(reports: &[ConditionReport]) -> Option<String> {
    let mut slots: Vec<String> = Vec::new();
    for r in reports {
        for (a, m) in slot_models(&r.condition) {
            if m.contains(" (answered by ") {
                let s = format!("{a} {m}");
                if !slots.contains(&s) {
                    slots.push(s);
                }
            }
        }
    }
    (!slots.is_empty()).then(|| {
        format!(
            "Not the paper's models: these runs were answered by stand-ins ({}); each agent kept its paper model's name and size, so the differences below measure the stand-ins, not the paper's models.",
            slots.join("; ")
        )
    })
}

fn model_of(models: &[(String, String)], agent: &str) -> Option<String> {
    let ms: Vec<&str> = models
        .iter()
        .filter(|(id, _)| id == agent)
        .map(|(_, m)| m.as_str())
        .collect();
    (!ms.is_empty()).then(|| ms.join(" / "))
}

fn run_ids(cond: &Condition) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for r in &cond.runs {
        if !ids.contains(&r.run_id) {
            ids.push(r.run_id.clone());
        }
    }
    ids
}

/// The values of one metric (one agent, or the per-run mean over several)
/// in each run of a condition.
pub fn side_values(
    report: &ConditionReport,
    metric: Metric,
    agents: &[String],
    mode: Mode,
) -> Vec<(String, f64)> {
    let ids = run_ids(&report.condition);
    if agents.is_empty() {
        return measures::per_run(&report.rows, &ids, metric, None, mode);
    }
    let per: Vec<Vec<(String, f64)>> = agents
        .iter()
        .map(|a| measures::per_run(&report.rows, &ids, metric, Some(a), mode))
        .collect();
    ids.iter()
        .filter_map(|id| {
            let vs: Vec<f64> = per
                .iter()
                .filter_map(|p| p.iter().find(|(r, _)| r == id).map(|(_, v)| *v))
                .collect();
            (!vs.is_empty()).then(|| (id.clone(), vs.iter().sum::<f64>() / vs.len() as f64))
        })
        .collect()
}

fn values(v: &[(String, f64)]) -> Vec<f64> {
    v.iter().map(|(_, x)| *x).collect()
}

/// The signed distance of `x` from [lo, hi] (0 inside).
pub fn distance(x: f64, lo: f64, hi: f64) -> f64 {
    if x > hi {
        x - hi
    } else if x < lo {
        x - lo
    } else {
        0.0
    }
}

/// A level against a published figure.
fn level_vs_published(
    key: &str,
    xs: &[f64],
    published: &Published,
) -> (f64, (f64, f64), String, f64) {
    let run = Summary::of(xs);
    match published.summary() {
        Some(p) => {
            let t = stats::welch(&run, &p);
            let name = if p.sd == 0.0 {
                format!(
                    "one-sample t vs the every-run value (df {:.0})",
                    run.n as f64 - 1.0
                )
            } else if t.df.is_nan() {
                "Welch t (both sds 0)".to_string()
            } else {
                format!("Welch t (df {:.1})", t.df)
            };
            (t.estimate, t.ci, name, t.p)
        }
        None => {
            let (lo, hi) = published.widened();
            let d = BOOTSTRAP.mean(key, xs);
            let (qlo, qhi) = d.ci95();
            let name = match published {
                Published::Interval { point: true, .. } => "bootstrap vs the value ± rounding",
                _ => "bootstrap vs the range",
            };
            (
                distance(run.mean, lo, hi),
                (distance(qlo, lo, hi), distance(qhi, lo, hi)),
                name.to_string(),
                d.p_interval(lo, hi),
            )
        }
    }
}

/// Apply Holm over the rows' p-values and set their verdicts.
fn adjust_levels(rows: &mut [LevelRow]) {
    let p: Vec<f64> = rows.iter().map(|r| r.p).collect();
    let h = stats::holm(&p);
    for (r, ph) in rows.iter_mut().zip(h) {
        r.p_holm = ph;
        if !matches!(r.verdict, Verdict::NotTested(_)) {
            r.verdict = Verdict::from(ph, r.difference);
        }
    }
}

/// Compare `reports` with the paper.
pub fn against_paper(reports: &[ConditionReport], mode: Mode) -> anyhow::Result<Reproduction> {
    let paper = Paper::embedded();
    let mut conditions = Vec::new();
    let mut notes = Vec::new();
    let mut cells: Vec<(Cell, usize)> = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let models = slot_models(&r.condition);
        let roster = models
            .iter()
            .map(|(a, m)| format!("{a} {m}"))
            .collect::<Vec<_>>()
            .join(", ");
        match paper_cell(&r.condition) {
            Ok(c) => {
                if let Some((_, j)) = cells.iter().find(|(cc, _)| *cc == c) {
                    notes.push(format!(
                        "{} is also {}; the contrasts use {}",
                        r.condition.label,
                        cell_label(c),
                        reports[*j].condition.label
                    ));
                } else {
                    cells.push((c, i));
                }
                conditions.push(format!(
                    "`{}` ({} runs) against the paper's {} — agents: {roster}",
                    r.condition.label,
                    r.condition.runs.len(),
                    cell_label(c)
                ));
            }
            Err(e) => notes.push(e),
        }
    }
    if cells.is_empty() {
        anyhow::bail!(
            "none of the runs is of a condition the paper gives figures for (baseline or no size penalty, comp or coop):\n  {}",
            notes.join("\n  ")
        );
    }
    let mut levels = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let Ok(cell) = paper_cell(&r.condition) else {
            continue;
        };
        let models = slot_models(&r.condition);
        for f in paper.figures.iter().filter(|f| f.cell == cell) {
            let agents: Vec<String> = f.agent.iter().cloned().collect();
            let xs = values(&side_values(r, f.metric, &agents, mode));
            let run = Summary::of(&xs);
            let key = format!(
                "{i}:{}:{}:{}",
                cell_label(cell),
                f.metric.name(),
                f.agent.as_deref().unwrap_or("")
            );
            let mut row = LevelRow {
                reference_condition: cell_label(cell),
                run_condition: r.condition.label.clone(),
                metric: f.metric,
                agent: f.agent.clone(),
                model: f.agent.as_deref().and_then(|a| model_of(&models, a)),
                run,
                reference: f.published.text(f.metric.percent()),
                reference_summary: f.published.summary(),
                difference: f64::NAN,
                ci: (f64::NAN, f64::NAN),
                test: String::new(),
                p: f64::NAN,
                p_holm: f64::NAN,
                verdict: Verdict::NotTested(String::new()),
                source: match &f.also {
                    Some(a) => format!("{} / {}", f.sentence, a),
                    None => f.sentence.clone(),
                },
            };
            if xs.len() < 2 {
                row.verdict = Verdict::NotTested(if xs.is_empty() {
                    "no value in these runs".into()
                } else {
                    "one run".into()
                });
            } else {
                let (d, ci, test, p) = level_vs_published(&key, &xs, &f.published);
                row.difference = d;
                row.ci = ci;
                row.test = test;
                row.p = p;
                row.verdict = Verdict::Consistent;
            }
            levels.push(row);
        }
    }
    adjust_levels(&mut levels);
    let by_cell: Vec<(Cell, &ConditionReport)> =
        cells.iter().map(|(c, i)| (*c, &reports[*i])).collect();
    let (contrasts, mut cnotes) = contrasts::against_paper(&paper, &by_cell, mode);
    notes.append(&mut cnotes);
    Ok(Reproduction {
        against: format!("the paper ({})", paper.source),
        mode,
        bootstrap: BOOTSTRAP,
        alpha: ALPHA,
        conditions,
        notice: stand_in_notice(reports),
        levels,
        contrasts,
        notes,
    })
}

/// Read the reference folder of `--against DIR`.
pub fn read_reference(dir: &Path) -> anyhow::Result<Vec<Condition>> {
    if !dir.is_dir() {
        anyhow::bail!(
            "--against {}: expected `paper` or a folder of runs in the reference layout (run_*/agents.json and config.json), and that is not a folder",
            dir.display()
        );
    }
    crate::report::load::discover(&[dir.to_path_buf()]).map_err(|e| {
        anyhow::anyhow!(
            "--against {}: expected `paper` or a folder of runs in the reference layout (run_*/agents.json and config.json): {e:#}",
            dir.display()
        )
    })
}

/// The metrics and agents compared between runs and reference runs.
fn shared_agents(a: &ConditionReport, b: &ConditionReport) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for x in &a.rows.agents {
        if !ids.contains(&x.agent_id) && b.rows.agents.iter().any(|y| y.agent_id == x.agent_id) {
            ids.push(x.agent_id.clone());
        }
    }
    ids.sort_by_key(|id| agent_order(id));
    ids
}

/// Compare `reports` with the reference runs in `refs` (already analysed).
pub fn against_runs(
    reports: &[ConditionReport],
    refs: &[ConditionReport],
    dir: &Path,
    mode: Mode,
) -> anyhow::Result<Reproduction> {
    let mut conditions = Vec::new();
    let mut notes = Vec::new();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    if reports.len() == 1 && refs.len() == 1 {
        pairs.push((0, 0));
    } else {
        for (i, r) in reports.iter().enumerate() {
            let cell = paper_cell(&r.condition).ok();
            let found = refs.iter().position(|x| {
                (cell.is_some() && paper_cell(&x.condition).ok() == cell)
                    || x.condition.label == r.condition.label
            });
            match found {
                Some(j) => pairs.push((i, j)),
                None => notes.push(format!(
                    "{}: no condition of {} matches it (by inferred condition or by folder name)",
                    r.condition.label,
                    dir.display()
                )),
            }
        }
    }
    if pairs.is_empty() {
        anyhow::bail!(
            "--against {}: none of its conditions ({}) matches the runs' ({})",
            dir.display(),
            refs.iter()
                .map(|r| r.condition.label.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            reports
                .iter()
                .map(|r| r.condition.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut levels = Vec::new();
    for &(i, j) in &pairs {
        let (r, x) = (&reports[i], &refs[j]);
        let models = slot_models(&r.condition);
        conditions.push(format!(
            "`{}` ({} runs) against `{}` ({} runs, {})",
            r.condition.label,
            r.condition.runs.len(),
            x.condition.label,
            x.condition.runs.len(),
            x.condition.dir.display()
        ));
        let agents = shared_agents(r, x);
        let mut items: Vec<(Metric, Option<String>)> = Vec::new();
        for m in Metric::ALL {
            if m.per_agent() {
                items.extend(agents.iter().map(|a| (m, Some(a.clone()))));
            } else {
                items.push((m, None));
            }
        }
        for (m, agent) in items {
            let ag: Vec<String> = agent.iter().cloned().collect();
            let xs = values(&side_values(r, m, &ag, mode));
            let ys = values(&side_values(x, m, &ag, mode));
            if xs.is_empty() && ys.is_empty() {
                continue;
            }
            let run = Summary::of(&xs);
            let rs = Summary::of(&ys);
            let mut row = LevelRow {
                reference_condition: x.condition.label.clone(),
                run_condition: r.condition.label.clone(),
                metric: m,
                agent: agent.clone(),
                model: agent.as_deref().and_then(|a| model_of(&models, a)),
                run,
                reference: render::mean_sd(&rs, m.percent()),
                reference_summary: Some(rs),
                difference: f64::NAN,
                ci: (f64::NAN, f64::NAN),
                test: String::new(),
                p: f64::NAN,
                p_holm: f64::NAN,
                verdict: Verdict::NotTested(String::new()),
                source: x.condition.dir.display().to_string(),
            };
            if xs.len() < 2 || ys.len() < 2 {
                row.verdict = Verdict::NotTested("fewer than 2 runs with a value".into());
            } else {
                let key = format!("{i}:{j}:{}:{}", m.name(), agent.as_deref().unwrap_or(""));
                let d = BOOTSTRAP.diff(&key, &xs, &ys);
                row.difference = run.mean - rs.mean;
                row.ci = d.ci95();
                row.test = "bootstrap, difference of means".into();
                row.p = d.p_interval(0.0, 0.0);
                row.verdict = Verdict::Consistent;
            }
            levels.push(row);
        }
    }
    adjust_levels(&mut levels);
    // The paper's contrasts, run effect against reference effect.
    let cells_of = |rs: &[ConditionReport], idx: Vec<usize>| -> Vec<(Cell, usize)> {
        let mut out: Vec<(Cell, usize)> = Vec::new();
        for i in idx {
            if let Ok(c) = paper_cell(&rs[i].condition) {
                if !out.iter().any(|(cc, _)| *cc == c) {
                    out.push((c, i));
                }
            }
        }
        out
    };
    let run_cells = cells_of(reports, pairs.iter().map(|p| p.0).collect());
    let ref_cells = cells_of(refs, pairs.iter().map(|p| p.1).collect());
    let rc: Vec<(Cell, &ConditionReport)> =
        run_cells.iter().map(|(c, i)| (*c, &reports[*i])).collect();
    let xc: Vec<(Cell, &ConditionReport)> =
        ref_cells.iter().map(|(c, i)| (*c, &refs[*i])).collect();
    let (contrasts, mut cnotes) = contrasts::against_runs(&Paper::embedded(), &rc, &xc, mode);
    notes.append(&mut cnotes);
    Ok(Reproduction {
        against: dir.display().to_string(),
        mode,
        bootstrap: BOOTSTRAP,
        alpha: ALPHA,
        conditions,
        notice: stand_in_notice(reports),
        levels,
        contrasts,
        notes,
    })
}
