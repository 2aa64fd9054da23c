//! `joule report RUNS... --against paper|DIR`: is a reproduction consistent
//! with the paper (or with reference runs)? For each condition and metric,
//! the runs' mean ± sd (n) beside the paper's figure, the difference with a
//! 95 % interval, the test that gave it, the smallest difference it could
//! detect and a verdict (consistent, inconclusive, higher, lower) after
//! Holm's adjustment over the condition's declared family of tests; then
//! the paper's claims as effects (contrasts): the run's effect, its sign and
//! whether its size is compatible with the paper's.
//!
//! - [`paper`]: the published figures (`src/report/reproduction/paper.toml`);
//! - [`measures`]: the per-run values of each metric;
//! - [`stats`]: Student's t, Welch, Holm, power, two-proportion and
//!   cluster-robust tests (checked against scipy/statsmodels);
//! - [`verdict`]: the test of each row and the rule that gives its verdict;
//! - [`contrasts`]: the effects;
//! - [`render`]: Markdown, the terminal's compact table, CSV and the HTML
//!   section.
//!
//! Runs are matched to the paper's conditions by the condition inferred from
//! each run (`energy_society::condition`: objective, votes, sabotage, memory,
//! jobs per round, α) and to a reference folder's conditions the same way
//! (or, with one condition on each side, directly). Runs whose set-up
//! differs from the reference condition's (rounds, α, roster, objective,
//! votes, sabotage, memory, jobs) are refused with the reason, or compared
//! with `--allow-mismatch` and marked on every row.

pub mod cli;
pub mod contrasts;
pub mod measures;
pub mod paper;
pub mod render;
pub mod verdict;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::energy_society::condition::{self, Overrides};
use crate::energy_society::config::Objective as EngineObjective;
use crate::report::load::Condition;
use crate::report::metrics::Mode;
use crate::report::summary::agent_order;
use crate::report::ConditionReport;
use crate::stats::Summary;
use measures::Metric;
use paper::{Cell, Objective, Paper, PaperCondition, Published};
pub use verdict::{distance, Verdict, ALPHA};
use verdict::{Reference, RowTest, Spread};

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
    /// What the row compares with, and where its spread comes from.
    pub compared_with: Option<Reference>,
    /// Where the reference's spread comes from (`published sd`, `sd of the
    /// reference runs`, `the runs' own sd (equal variances)`), or `every
    /// run` for an every-run claim.
    pub spread: String,
    /// run − reference (for a range: the distance from it, 0 inside).
    pub difference: f64,
    pub ci: (f64, f64),
    pub test: String,
    /// t (NaN for an every-run count or an exact comparison).
    pub statistic: f64,
    pub df: f64,
    pub se: f64,
    pub p: f64,
    pub p_holm: f64,
    /// Runs deviating from an every-run value (of `run.n`).
    pub deviating: Option<usize>,
    /// The smallest difference detected with 80 % power at Holm's first
    /// step (for an every-run claim: the smallest share of deviating runs).
    pub detectable: f64,
    /// The declared margin the verdict weighs `detectable` against.
    pub margin: f64,
    /// For an inconclusive row: the runs (the same spreads) whose detectable
    /// difference would reach the margin.
    pub runs_for_margin: Option<verdict::RunsForMargin>,
    /// The Holm family and its m.
    pub family: String,
    pub family_m: usize,
    /// Counted in the family's m (not an every-run count, not a row that
    /// cannot differ).
    pub in_family: bool,
    pub verdict: Verdict,
    /// How the runs' set-up differs from the reference condition's
    /// (compared anyway with `--allow-mismatch`).
    pub mismatch: Option<String>,
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
    /// The sign test: the runs' effect against 0.
    pub sign_test: RowTest,
    pub p_sign_holm: f64,
    pub sign_detectable: f64,
    /// The size test: the runs' effect against the reference's (the
    /// distance from the published range of effects).
    pub size_test: RowTest,
    pub p_size_holm: f64,
    pub size_detectable: f64,
    /// |the reference effect|: what both tests must be able to detect.
    pub margin: f64,
    /// `same sign`, `opposite sign`, `no clear effect`, `inconclusive`.
    pub sign: String,
    /// `compatible`, `inconclusive`, `higher`, `lower` (the run's effect
    /// against the paper's).
    pub size: String,
    pub mismatch: Option<String>,
}

impl ContrastRow {
    pub fn size_difference(&self) -> f64 {
        self.size_test.difference
    }
}

/// The comparison of a set of runs against the paper or reference runs.
#[derive(Debug, Clone, Serialize)]
pub struct Reproduction {
    /// `the paper` or the reference folder.
    pub against: String,
    pub mode: Mode,
    pub alpha: f64,
    /// One line per run condition: what it was matched to, its agents.
    pub conditions: Vec<String>,
    /// Said at the top of every table when the runs were answered by other
    /// models than the paper's ([`stand_in_notice`]).
    pub notice: Option<String>,
    pub levels: Vec<LevelRow>,
    pub contrasts: Vec<ContrastRow>,
    /// The Holm families: name, m, and what was left out of m.
    pub families: Vec<String>,
    /// Runs compared although their set-up differs (`--allow-mismatch`).
    pub allow_mismatch: bool,
    /// Contrasts or conditions that could not be compared, and why.
    pub notes: Vec<String>,
    /// What a reader must know before reading the tables (e.g. two
    /// conditions whose runs are identical, so every effect between them is
    /// zero by construction); shown above the tables.
    pub warnings: Vec<String>,
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

/// The set-up of a run that a comparison must match: objective, votes,
/// sabotage, memory, jobs per round (easy/medium/hard), α, rounds and the
/// agents' slots.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub objective: EngineObjective,
    pub use_votes: bool,
    pub enable_sabotage: bool,
    pub memory: bool,
    pub jobs: (u32, u32, u32),
    pub alpha: f64,
    pub rounds: u32,
    pub agents: Vec<String>,
}

impl Setup {
    /// The set-up of the paper's runs of `cell` (spec §5): votes, no
    /// sabotage, memory, 4/4/4 jobs, 30 rounds, agent_1..agent_5.
    pub fn paper(cell: Cell) -> Setup {
        Setup {
            objective: match cell.1 {
                Objective::Comp => EngineObjective::Competitive,
                Objective::Coop => EngineObjective::Cooperative,
            },
            use_votes: true,
            enable_sabotage: false,
            memory: true,
            jobs: (4, 4, 4),
            alpha: match cell.0 {
                PaperCondition::Baseline => 0.5,
                PaperCondition::NoSizePenalty => 0.0,
            },
            rounds: 30,
            agents: (1..=5).map(|i| format!("agent_{i}")).collect(),
        }
    }

    /// The set-up of one run, inferred from what it recorded (its own
    /// `config.resolved.toml` switches first).
    pub fn of_run(run: &crate::report::load::Run) -> Setup {
        let c = condition::infer(&run.data, &run.dir, &resolved_switches(&run.dir));
        let d = c.difficulty.value;
        let mut agents: Vec<String> = run.data.agents.iter().map(|a| a.agent_id.clone()).collect();
        agents.sort_by_key(|id| agent_order(id));
        agents.dedup();
        Setup {
            objective: c.objective.value,
            use_votes: c.use_votes.value,
            enable_sabotage: c.enable_sabotage.value,
            memory: c.memory.value,
            jobs: (d.easy, d.medium, d.hard),
            alpha: c.alpha.value,
            rounds: run.data.config.max_rounds,
            agents,
        }
    }

    /// The one set-up of a condition's runs; `Err` when they differ.
    pub fn of_condition(cond: &Condition) -> Result<Setup, String> {
        let mut out: Option<Setup> = None;
        for run in &cond.runs {
            let s = Setup::of_run(run);
            match &out {
                None => out = Some(s),
                Some(prev) => {
                    // The odd run against the runs before it, in that order.
                    let d = s.differences_from(prev, "the condition's other runs");
                    if !d.is_empty() {
                        return Err(format!(
                            "the runs of {} differ in their set-up ({}: {})",
                            cond.label,
                            run.dir.display(),
                            d.join(", ")
                        ));
                    }
                }
            }
        }
        out.ok_or_else(|| format!("{} holds no runs", cond.label))
    }

    /// How `self` (the runs) differs from `reference`, in words
    /// (`no memory`, `2 rounds (reference: 30)`); empty when comparable.
    pub fn differences(&self, reference: &Setup) -> Vec<String> {
        self.differences_from(reference, "reference")
    }

    /// [`Self::differences`], the other side called `other` in the words
    /// (`5 rounds (the condition's other runs: 30)`).
    pub fn differences_from(&self, reference: &Setup, other: &str) -> Vec<String> {
        let mut out = Vec::new();
        let obj = |o: EngineObjective| match o {
            EngineObjective::Competitive => "comp",
            EngineObjective::Cooperative => "coop",
        };
        if self.objective != reference.objective {
            out.push(format!(
                "objective {} ({other}: {})",
                obj(self.objective),
                obj(reference.objective)
            ));
        }
        let mut switch = |on: bool, want: bool, name: &str| {
            if on != want {
                out.push(if on {
                    name.to_string()
                } else {
                    format!("no {name}")
                });
            }
        };
        switch(self.use_votes, reference.use_votes, "votes");
        switch(self.enable_sabotage, reference.enable_sabotage, "sabotage");
        switch(self.memory, reference.memory, "memory");
        if self.jobs != reference.jobs {
            let j = |x: (u32, u32, u32)| format!("{}/{}/{}", x.0, x.1, x.2);
            out.push(format!(
                "jobs {} ({other}: {})",
                j(self.jobs),
                j(reference.jobs)
            ));
        }
        if self.alpha != reference.alpha {
            out.push(format!("α = {} ({other}: {})", self.alpha, reference.alpha));
        }
        if self.rounds != reference.rounds {
            out.push(format!(
                "{} rounds ({other}: {})",
                self.rounds, reference.rounds
            ));
        }
        if self.agents != reference.agents {
            out.push(format!(
                "agents {} ({other}: {})",
                self.agents.join(", "),
                reference.agents.join(", ")
            ));
        }
        out
    }
}

/// The paper cell of a condition (α 0: no size penalty, else the baseline;
/// its objective) and how its set-up differs from the paper's runs of that
/// cell; `Err` when its runs differ among themselves.
pub fn paper_cell(cond: &Condition) -> Result<(Cell, Vec<String>), String> {
    let s = Setup::of_condition(cond)?;
    let which = if s.alpha == 0.0 {
        PaperCondition::NoSizePenalty
    } else {
        PaperCondition::Baseline
    };
    let obj = match s.objective {
        EngineObjective::Competitive => Objective::Comp,
        EngineObjective::Cooperative => Objective::Coop,
    };
    let cell = (which, obj);
    let d = s.differences(&Setup::paper(cell));
    Ok((cell, d))
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

/// What a published figure is compared as: an every-run value (counted),
/// or a mean in [low − rounding, high + rounding] with its published sd,
/// the reference runs' sd, or (neither) the runs' own.
pub fn reference_of(published: &Published) -> Reference {
    match *published {
        Published::MeanSd { mean, sd, n } => Reference::Mean {
            lo: mean,
            hi: mean,
            spread: Spread::Known {
                sd,
                n_mean: n,
                n_sd: n,
            },
        },
        Published::Exact { value, .. } => Reference::EveryRun { value },
        Published::Interval { n, spread, .. } => {
            let (lo, hi) = published.widened();
            Reference::Mean {
                lo,
                hi,
                spread: match spread {
                    Some(s) => Spread::Known {
                        sd: s.sd,
                        n_mean: n,
                        n_sd: s.n,
                    },
                    None => Spread::RunsOwn { n_mean: n },
                },
            }
        }
    }
}

/// Where a reference's spread comes from, in words.
pub fn spread_text(r: &Reference, paper: bool) -> String {
    match r {
        Reference::EveryRun { .. } => "every run".into(),
        Reference::Mean {
            spread: Spread::Known { n_sd, .. },
            ..
        } => {
            if !paper {
                format!("sd of the {n_sd} reference runs")
            } else {
                "published sd".into()
            }
        }
        Reference::Mean {
            spread: Spread::RunsOwn { .. },
            ..
        } => "runs' own sd (equal variances)".into(),
    }
}

/// A row not yet tested (its test and verdict follow).
#[allow(clippy::too_many_arguments)]
fn blank_row(
    reference_condition: String,
    run_condition: String,
    metric: Metric,
    agent: Option<String>,
    model: Option<String>,
    run: Summary,
    reference: String,
    reference_summary: Option<Summary>,
    margin: f64,
    mismatch: Option<String>,
    source: String,
) -> LevelRow {
    LevelRow {
        reference_condition,
        run_condition,
        metric,
        agent,
        model,
        run,
        reference,
        reference_summary,
        compared_with: None,
        spread: String::new(),
        difference: f64::NAN,
        ci: (f64::NAN, f64::NAN),
        test: String::new(),
        statistic: f64::NAN,
        df: f64::NAN,
        se: f64::NAN,
        p: f64::NAN,
        p_holm: f64::NAN,
        deviating: None,
        detectable: f64::NAN,
        margin,
        runs_for_margin: None,
        family: String::new(),
        family_m: 0,
        in_family: false,
        verdict: Verdict::NotTested(String::new()),
        mismatch,
        source,
    }
}

/// Put a row's test into it.
fn set_test(row: &mut LevelRow, t: &RowTest) {
    row.difference = t.difference;
    row.ci = t.ci;
    row.test = t.test.clone();
    row.statistic = t.statistic;
    row.df = t.df;
    row.se = t.se;
    row.p = t.p;
    row.deviating = t.deviating;
    row.in_family = !(t.cannot_differ || t.deviating.is_some());
}

/// Holm over one family (`rows` with their tests, `declared` tests in all),
/// the detectable differences and the verdicts; returns the family's line.
fn finish_family(rows: &mut [(LevelRow, Option<RowTest>)], name: &str, declared: usize) -> String {
    let tested: Vec<&RowTest> = rows.iter().filter_map(|(_, t)| t.as_ref()).collect();
    let (h, m) = verdict::adjust(&tested, declared);
    let counts = tested.iter().filter(|t| t.deviating.is_some()).count();
    let exact = tested.iter().filter(|t| t.cannot_differ).count();
    let mut k = 0;
    for (row, t) in rows.iter_mut() {
        row.family = name.to_string();
        row.family_m = m;
        let Some(t) = t else { continue };
        row.p_holm = h[k];
        k += 1;
        row.detectable = verdict::detectable(t, m);
        if !matches!(&row.verdict, Verdict::NotTested(w) if !w.is_empty()) {
            row.verdict = verdict::decide(t, row.p_holm, row.detectable, row.margin);
        }
        if row.verdict == Verdict::Inconclusive {
            row.runs_for_margin = verdict::runs_for_margin(t, m, row.margin);
        }
    }
    let mut left = Vec::new();
    if counts > 0 {
        left.push(format!(
            "{counts} every-run claim(s), decided by their count"
        ));
    }
    if exact > 0 {
        left.push(format!(
            "{exact} row(s) that cannot differ (sd 0 on both sides, equal)"
        ));
    }
    format!(
        "{name}: Holm over m = {m}{}",
        if left.is_empty() {
            String::new()
        } else {
            format!(" (not counted: {})", left.join("; "))
        }
    )
}

/// Compare `reports` with the paper.
pub fn against_paper(
    reports: &[ConditionReport],
    mode: Mode,
    allow_mismatch: bool,
) -> anyhow::Result<Reproduction> {
    let paper = Paper::embedded();
    let mut conditions = Vec::new();
    let mut notes = Vec::new();
    let mut cells: Vec<(Cell, usize)> = Vec::new();
    let mut matched: Vec<(usize, Cell, Option<String>)> = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let models = slot_models(&r.condition);
        let roster = models
            .iter()
            .map(|(a, m)| format!("{a} {m}"))
            .collect::<Vec<_>>()
            .join(", ");
        let (c, differs) = match paper_cell(&r.condition) {
            Ok(x) => x,
            Err(e) => {
                notes.push(e);
                continue;
            }
        };
        let mismatch = (!differs.is_empty()).then(|| differs.join(", "));
        if let Some(d) = &mismatch {
            if !allow_mismatch {
                notes.push(format!(
                    "{} ({}) is not a condition the paper gives figures for (baseline or no size penalty): {d} — refused (compare anyway with --allow-mismatch)",
                    r.condition.label,
                    r.condition.dir.display(),
                ));
                continue;
            }
        }
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
            "`{}` ({} runs) against the paper's {}{} — agents: {roster}",
            r.condition.label,
            r.condition.runs.len(),
            cell_label(c),
            mismatch
                .as_deref()
                .map(|d| format!(" (MISMATCH, compared with --allow-mismatch: {d})"))
                .unwrap_or_default()
        ));
        matched.push((i, c, mismatch));
    }
    if cells.is_empty() {
        anyhow::bail!(
            "none of the runs is of a condition the paper gives figures for (baseline or no size penalty, comp or coop):\n  {}",
            notes.join("\n  ")
        );
    }
    let mut levels = Vec::new();
    let mut families = Vec::new();
    for (i, cell, mismatch) in &matched {
        let r = &reports[*i];
        let models = slot_models(&r.condition);
        let figures: Vec<&paper::Figure> =
            paper.figures.iter().filter(|f| f.cell == *cell).collect();
        let mut rows: Vec<(LevelRow, Option<RowTest>)> = Vec::new();
        for f in &figures {
            let agents: Vec<String> = f.agent.iter().cloned().collect();
            let xs = values(&side_values(r, f.metric, &agents, mode));
            let reference = reference_of(&f.published);
            let mut row = blank_row(
                cell_label(*cell),
                r.condition.label.clone(),
                f.metric,
                f.agent.clone(),
                f.agent.as_deref().and_then(|a| model_of(&models, a)),
                Summary::of(&xs),
                f.published.text(f.metric.percent()),
                f.published.summary(),
                paper.margin(f.metric),
                mismatch.clone(),
                match &f.also {
                    Some(a) => format!("{} / {}", f.sentence, a),
                    None => f.sentence.clone(),
                },
            );
            row.spread = spread_text(&reference, true);
            if let (
                Published::Interval { .. },
                Reference::Mean {
                    spread: Spread::Known { n_sd, .. },
                    ..
                },
            ) = (&f.published, &reference)
            {
                row.spread = format!("sd of the {n_sd} reference runs");
            }
            row.compared_with = Some(reference);
            let every_run = matches!(reference, Reference::EveryRun { .. });
            let t = if xs.is_empty() || (xs.len() < 2 && !every_run) {
                row.verdict = Verdict::NotTested(if xs.is_empty() {
                    "no value in these runs".into()
                } else {
                    "one run".into()
                });
                None
            } else {
                let mut t = verdict::level(&xs, &reference);
                if let Published::Interval { point: true, .. } = f.published {
                    t.test = t
                        .test
                        .replace("the nearest end of the range", "the value ± its rounding");
                }
                set_test(&mut row, &t);
                Some(t)
            };
            rows.push((row, t));
        }
        // The family: every figure of the cell that is a t test (declared
        // by the paper), whether or not these runs had values for it.
        let declared = figures
            .iter()
            .filter(|f| !matches!(f.published, Published::Exact { .. }))
            .count()
            + rows
                .iter()
                .filter(|(_, t)| t.as_ref().is_some_and(|t| t.deviating.is_some()))
                .count();
        families.push(finish_family(
            &mut rows,
            &format!(
                "levels of `{}` against {}",
                r.condition.label,
                cell_label(*cell)
            ),
            declared,
        ));
        levels.extend(rows.into_iter().map(|(r, _)| r));
    }
    let by_cell: Vec<(Cell, &ConditionReport, Option<String>)> = cells
        .iter()
        .map(|(c, i)| {
            let mm = matched
                .iter()
                .find(|(j, _, _)| j == i)
                .and_then(|(_, _, m)| m.clone());
            (*c, &reports[*i], mm)
        })
        .collect();
    let (contrasts, mut cnotes, cfam) = contrasts::against_paper(&paper, &by_cell, mode);
    families.extend(cfam);
    notes.append(&mut cnotes);
    Ok(Reproduction {
        against: format!("the paper ({})", paper.source),
        mode,
        alpha: ALPHA,
        conditions,
        notice: stand_in_notice(reports),
        warnings: Vec::new(),
        levels,
        contrasts,
        families,
        allow_mismatch,
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

/// The agents of the reference condition, in slot order.
fn reference_agents(x: &ConditionReport) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for a in &x.rows.agents {
        if !ids.contains(&a.agent_id) {
            ids.push(a.agent_id.clone());
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
    allow_mismatch: bool,
) -> anyhow::Result<Reproduction> {
    let paper = Paper::embedded();
    let mut conditions = Vec::new();
    let mut notes = Vec::new();
    let mut candidates: Vec<(usize, usize)> = Vec::new();
    if reports.len() == 1 && refs.len() == 1 {
        candidates.push((0, 0));
    } else {
        for (i, r) in reports.iter().enumerate() {
            let cell = paper_cell(&r.condition).ok().map(|c| c.0);
            let found = refs.iter().position(|x| {
                (cell.is_some() && paper_cell(&x.condition).ok().map(|c| c.0) == cell)
                    || x.condition.label == r.condition.label
            });
            match found {
                Some(j) => candidates.push((i, j)),
                None => notes.push(format!(
                    "{}: no condition of {} matches it (by inferred condition or by folder name)",
                    r.condition.label,
                    dir.display()
                )),
            }
        }
    }
    // The set-ups must match.
    let mut pairs: Vec<(usize, usize, Option<String>)> = Vec::new();
    let mut refused = Vec::new();
    for (i, j) in candidates {
        let (r, x) = (&reports[i], &refs[j]);
        let differs = match (
            Setup::of_condition(&r.condition),
            Setup::of_condition(&x.condition),
        ) {
            (Ok(a), Ok(b)) => a.differences(&b),
            (Err(e), _) | (_, Err(e)) => vec![e],
        };
        if differs.is_empty() {
            pairs.push((i, j, None));
        } else if allow_mismatch {
            pairs.push((i, j, Some(differs.join(", "))));
        } else {
            refused.push(format!(
                "{} against {}: {}",
                r.condition.label,
                x.condition.label,
                differs.join(", ")
            ));
        }
    }
    if pairs.is_empty() {
        if !refused.is_empty() {
            anyhow::bail!(
                "--against {}: the runs are not comparable with the reference condition (compare anyway with --allow-mismatch):\n  {}",
                dir.display(),
                refused.join("\n  ")
            );
        }
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
    for r in refused {
        notes.push(format!(
            "refused (compare anyway with --allow-mismatch): {r}"
        ));
    }
    let mut levels = Vec::new();
    let mut families = Vec::new();
    for (i, j, mismatch) in &pairs {
        let (r, x) = (&reports[*i], &refs[*j]);
        let models = slot_models(&r.condition);
        conditions.push(format!(
            "`{}` ({} runs) against `{}` ({} runs, {}){}",
            r.condition.label,
            r.condition.runs.len(),
            x.condition.label,
            x.condition.runs.len(),
            x.condition.dir.display(),
            mismatch
                .as_deref()
                .map(|d| format!(" (MISMATCH, compared with --allow-mismatch: {d})"))
                .unwrap_or_default()
        ));
        // The family is the reference condition's table: every metric, and
        // the per-agent ones for each of its agents.
        let agents = reference_agents(x);
        let mut items: Vec<(Metric, Option<String>)> = Vec::new();
        for m in Metric::ALL {
            if m.per_agent() {
                items.extend(agents.iter().map(|a| (m, Some(a.clone()))));
            } else {
                items.push((m, None));
            }
        }
        let mut rows: Vec<(LevelRow, Option<RowTest>)> = Vec::new();
        let mut declared = 0;
        for (m, agent) in items {
            let ag: Vec<String> = agent.iter().cloned().collect();
            let xs = values(&side_values(r, m, &ag, mode));
            let ys = values(&side_values(x, m, &ag, mode));
            if ys.is_empty() {
                // Not in the reference's table (no value in any reference run).
                continue;
            }
            declared += 1;
            let rs = Summary::of(&ys);
            let mut row = blank_row(
                x.condition.label.clone(),
                r.condition.label.clone(),
                m,
                agent.clone(),
                agent.as_deref().and_then(|a| model_of(&models, a)),
                Summary::of(&xs),
                render::mean_sd(&rs, m.percent()),
                Some(rs),
                paper.margin(m),
                mismatch.clone(),
                x.condition.dir.display().to_string(),
            );
            let reference = Reference::Mean {
                lo: rs.mean,
                hi: rs.mean,
                spread: Spread::Known {
                    sd: rs.sd,
                    n_mean: rs.n,
                    n_sd: rs.n,
                },
            };
            row.spread = spread_text(&reference, false);
            row.compared_with = Some(reference);
            let t = if xs.len() < 2 || ys.len() < 2 {
                row.verdict = Verdict::NotTested("fewer than 2 runs with a value".into());
                None
            } else {
                let t = verdict::level(&xs, &reference);
                set_test(&mut row, &t);
                Some(t)
            };
            rows.push((row, t));
        }
        families.push(finish_family(
            &mut rows,
            &format!(
                "levels of `{}` against `{}`",
                r.condition.label, x.condition.label
            ),
            declared,
        ));
        levels.extend(rows.into_iter().map(|(r, _)| r));
    }
    // The paper's contrasts, run effect against reference effect.
    let cells_of = |rs: &[ConditionReport], idx: Vec<usize>| -> Vec<(Cell, usize)> {
        let mut out: Vec<(Cell, usize)> = Vec::new();
        for i in idx {
            if let Ok((c, _)) = paper_cell(&rs[i].condition) {
                if !out.iter().any(|(cc, _)| *cc == c) {
                    out.push((c, i));
                }
            }
        }
        out
    };
    let run_cells = cells_of(reports, pairs.iter().map(|p| p.0).collect());
    let ref_cells = cells_of(refs, pairs.iter().map(|p| p.1).collect());
    let rc: Vec<(Cell, &ConditionReport, Option<String>)> = run_cells
        .iter()
        .map(|(c, i)| {
            let mm = pairs.iter().find(|p| p.0 == *i).and_then(|p| p.2.clone());
            (*c, &reports[*i], mm)
        })
        .collect();
    let xc: Vec<(Cell, &ConditionReport, Option<String>)> = ref_cells
        .iter()
        .map(|(c, i)| (*c, &refs[*i], None))
        .collect();
    let (contrasts, mut cnotes, cfam) = contrasts::against_runs(&paper, &rc, &xc, mode);
    families.extend(cfam);
    notes.append(&mut cnotes);
    Ok(Reproduction {
        against: dir.display().to_string(),
        mode,
        alpha: ALPHA,
        conditions,
        notice: stand_in_notice(reports),
        warnings: Vec::new(),
        levels,
        contrasts,
        families,
        allow_mismatch,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A condition whose runs differ names the odd run with its own value and
    /// the other runs' (not the reference's) beside it.
    #[test]
    fn a_setup_difference_names_the_odd_runs_value_first() {
        let thirty = Setup {
            objective: EngineObjective::Cooperative,
            use_votes: true,
            enable_sabotage: false,
            memory: true,
            jobs: (4, 4, 4),
            alpha: 0.5,
            rounds: 30,
            agents: vec!["agent_1".into()],
        };
        let five = Setup {
            rounds: 5,
            ..thirty.clone()
        };
        assert_eq!(
            five.differences_from(&thirty, "the condition's other runs"),
            ["5 rounds (the condition's other runs: 30)"]
        );
        assert_eq!(five.differences(&thirty), ["5 rounds (reference: 30)"]);
    }
}
