//! The reproduction verdicts calibrated by simulation (fixed seeds): perfect
//! reproductions — the runs and the paper's (or the reference's) runs drawn
//! from the same normal populations, with the reference runs' means and sds
//! per row — must raise a false *higher*/*lower* in at most 5 % of tables
//! (plus Monte Carlo error) per Holm family, against the paper and against
//! reference runs; and a true difference of the size a row prints as
//! detectable must be flagged in at least 80 % of tables (and not in
//! nearly all: a detectable difference far too large would call too few
//! rows consistent). The rows go through
//! the same code as `joule report --against` (`reproduction::verdict`).

use std::path::Path;

use joule::report::reproduction::paper::{Paper, Published};
use joule::report::reproduction::verdict::{
    self, adjust, decide, level, Reference, RowTest, Spread, ALPHA,
};
use joule::report::reproduction::{paper_cell, side_values};
use joule::report::{self, ConditionReport, Mode};
use joule::stats::Summary;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Tables simulated per setting.
const TABLES: usize = 2000;

fn reference(cond: &str) -> ConditionReport {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society")
        .join(cond)
        .join("exponent_0.5");
    let mut conds = report::load::discover(&[dir]).expect("reading the reference runs");
    report::analyse_with(conds.remove(0), Mode::Faithful)
}

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    // Box–Muller.
    let u1: f64 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn draw(rng: &mut ChaCha8Rng, mean: f64, sd: f64, n: usize) -> Vec<f64> {
    (0..n).map(|_| mean + sd * normal(rng)).collect()
}

fn round_to(x: f64, rounding: f64) -> f64 {
    if rounding == 0.0 {
        x
    } else {
        let unit = 2.0 * rounding;
        (x / unit).round() * unit
    }
}

/// One row of a simulated table: the population of the runs (mean, sd) and
/// how the paper publishes it.
#[derive(Clone)]
struct Row {
    name: String,
    mean: f64,
    sd: f64,
    published: Published,
}

/// The baseline table of `cond` as the paper publishes it, with each row's
/// population from the reference runs.
fn paper_rows(cond: &str) -> Vec<Row> {
    let r = reference(cond);
    let (cell, differs) = paper_cell(&r.condition).expect("a paper cell");
    assert!(differs.is_empty(), "{differs:?}");
    let paper = Paper::embedded();
    paper
        .figures
        .iter()
        .filter(|f| f.cell == cell)
        .map(|f| {
            let agents: Vec<String> = f.agent.iter().cloned().collect();
            let xs: Vec<f64> = side_values(&r, f.metric, &agents, Mode::Faithful)
                .into_iter()
                .map(|(_, x)| x)
                .collect();
            let s = Summary::of(&xs);
            Row {
                name: format!("{} {}", f.metric.name(), f.agent.as_deref().unwrap_or("")),
                mean: s.mean,
                sd: s.sd,
                published: f.published,
            }
        })
        .collect()
}

/// What the paper would publish from its own simulated runs, as the
/// reference a reproduction is tested against. A range is the span of the
/// rows published as that range (`span`); a bound stays as published.
fn simulated_reference(
    row: &Row,
    paper_runs: &[f64],
    span: Option<(f64, f64)>,
    reference_runs: bool,
) -> Reference {
    let s = Summary::of(paper_runs);
    match row.published {
        Published::MeanSd { n, .. } => Reference::Mean {
            lo: s.mean,
            hi: s.mean,
            spread: Spread::Known {
                sd: s.sd,
                n_mean: n,
                n_sd: n,
            },
        },
        Published::Exact { .. } => Reference::EveryRun { value: row.mean },
        Published::Interval {
            low,
            high,
            rounding,
            n,
            ..
        } => {
            let (lo, hi) = if low == f64::NEG_INFINITY || high == f64::INFINITY {
                (low - rounding, high + rounding)
            } else if let Some((a, b)) = span {
                (
                    round_to(a, rounding) - rounding,
                    round_to(b, rounding) + rounding,
                )
            } else {
                let v = round_to(s.mean, rounding);
                (v - rounding, v + rounding)
            };
            Reference::Mean {
                lo,
                hi,
                spread: if reference_runs {
                    Spread::Known {
                        sd: s.sd,
                        n_mean: n,
                        n_sd: n,
                    }
                } else {
                    Spread::RunsOwn { n_mean: n }
                },
            }
        }
    }
}

/// The verdicts of one simulated table against the paper: `shift` moves
/// the runs' population of row `shifted` (in its sds: absolute units).
fn paper_table(
    rng: &mut ChaCha8Rng,
    rows: &[Row],
    n_runs: usize,
    reference_runs: bool,
    shift: Option<(usize, f64)>,
) -> (Vec<verdict::Verdict>, Vec<RowTest>, usize) {
    let paper_runs: Vec<Vec<f64>> = rows.iter().map(|r| draw(rng, r.mean, r.sd, 5)).collect();
    // The span of the rows published as one range (same low and high).
    let span_of = |i: usize| -> Option<(f64, f64)> {
        let Published::Interval {
            low, high, point, ..
        } = rows[i].published
        else {
            return None;
        };
        if point || !low.is_finite() || !high.is_finite() {
            return None;
        }
        let means: Vec<f64> = rows
            .iter()
            .zip(&paper_runs)
            .filter(|(r, _)| r.published == rows[i].published)
            .map(|(_, p)| Summary::of(p).mean)
            .collect();
        Some((
            means.iter().cloned().fold(f64::INFINITY, f64::min),
            means.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        ))
    };
    let tests: Vec<RowTest> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut mean = r.mean;
            if let Some((j, d)) = shift {
                if i == j {
                    mean += d;
                }
            }
            let runs = draw(rng, mean, r.sd, n_runs);
            let reference = simulated_reference(r, &paper_runs[i], span_of(i), reference_runs);
            level(&runs, &reference)
        })
        .collect();
    let declared = rows
        .iter()
        .filter(|r| !matches!(r.published, Published::Exact { .. }))
        .count()
        + tests.iter().filter(|t| t.deviating.is_some()).count();
    let refs: Vec<&RowTest> = tests.iter().collect();
    let (h, m) = adjust(&refs, declared);
    // Detectable differences are not needed to tell a false alarm: NaN
    // keeps each consistent/inconclusive row out of higher/lower alike.
    let v = tests
        .iter()
        .zip(&h)
        .map(|(t, p)| decide(t, *p, f64::NAN, 1.0))
        .collect();
    (v, tests, m)
}

/// P(at least one higher/lower) over `tables`, with its Monte Carlo bound.
fn check_rate(label: &str, alarms: usize, tables: usize) {
    let rate = alarms as f64 / tables as f64;
    let mc = (ALPHA * (1.0 - ALPHA) / tables as f64).sqrt();
    let bound = ALPHA + 2.33 * mc;
    eprintln!("{label}: family-wise false alarms {rate:.4} (bound {bound:.4})");
    assert!(
        rate <= bound,
        "{label}: false higher/lower in {rate:.4} of perfect reproductions (bound {bound:.4})"
    );
}

#[test]
fn perfect_reproductions_against_the_paper_hold_the_family_wise_level() {
    for cond in ["comp_with_discussion", "coop"] {
        let rows = paper_rows(cond);
        for n_runs in [3, 5, 10] {
            for reference_runs in [true, false] {
                let mut rng = ChaCha8Rng::seed_from_u64(
                    20_260_716 + n_runs as u64 + 100 * u64::from(reference_runs),
                );
                let mut alarms = 0;
                for _ in 0..TABLES {
                    let (v, _, _) = paper_table(&mut rng, &rows, n_runs, reference_runs, None);
                    if v.iter().any(|x| x.differs()) {
                        alarms += 1;
                    }
                }
                check_rate(
                    &format!(
                        "{cond} against the paper, {n_runs} runs, spread of single numbers from {}",
                        if reference_runs {
                            "the reference runs"
                        } else {
                            "the runs (equal variances)"
                        }
                    ),
                    alarms,
                    TABLES,
                );
            }
        }
    }
}

/// The rows of `joule report --against DIR` for a reference condition: each
/// metric (per agent) with values in the reference runs.
fn dir_rows(cond: &str) -> Vec<(String, f64, f64)> {
    let r = reference(cond);
    let mut agents: Vec<String> = r.rows.agents.iter().map(|a| a.agent_id.clone()).collect();
    agents.sort();
    agents.dedup();
    let mut out = Vec::new();
    for m in joule::report::reproduction::measures::Metric::ALL {
        let who: Vec<Vec<String>> = if m.per_agent() {
            agents.iter().map(|a| vec![a.clone()]).collect()
        } else {
            vec![Vec::new()]
        };
        for ag in who {
            let xs: Vec<f64> = side_values(&r, m, &ag, Mode::Faithful)
                .into_iter()
                .map(|(_, x)| x)
                .collect();
            if xs.len() >= 2 {
                let s = Summary::of(&xs);
                out.push((format!("{} {}", m.name(), ag.join("+")), s.mean, s.sd));
            }
        }
    }
    out
}

fn dir_table(
    rng: &mut ChaCha8Rng,
    rows: &[(String, f64, f64)],
    n_runs: usize,
    n_ref: usize,
    shift: Option<(usize, f64)>,
) -> (Vec<verdict::Verdict>, Vec<RowTest>, usize) {
    let tests: Vec<RowTest> = rows
        .iter()
        .enumerate()
        .map(|(i, (_, mean, sd))| {
            let d = shift.filter(|s| s.0 == i).map_or(0.0, |s| s.1);
            let runs = draw(rng, mean + d, *sd, n_runs);
            let refs = Summary::of(&draw(rng, *mean, *sd, n_ref));
            level(
                &runs,
                &Reference::Mean {
                    lo: refs.mean,
                    hi: refs.mean,
                    spread: Spread::Known {
                        sd: refs.sd,
                        n_mean: n_ref,
                        n_sd: n_ref,
                    },
                },
            )
        })
        .collect();
    let refs: Vec<&RowTest> = tests.iter().collect();
    let (h, m) = adjust(&refs, rows.len());
    let v = tests
        .iter()
        .zip(&h)
        .map(|(t, p)| decide(t, *p, f64::NAN, 1.0))
        .collect();
    (v, tests, m)
}

#[test]
fn perfect_reproductions_against_reference_runs_hold_the_family_wise_level() {
    for cond in ["comp_with_discussion", "coop"] {
        let rows = dir_rows(cond);
        assert!(rows.len() > 30, "{cond}: {} rows", rows.len());
        for (n_runs, n_ref) in [(5, 5), (4, 3), (10, 5)] {
            let mut rng = ChaCha8Rng::seed_from_u64(29 + 7 * n_runs as u64 + n_ref as u64);
            let mut alarms = 0;
            for _ in 0..TABLES {
                let (v, _, _) = dir_table(&mut rng, &rows, n_runs, n_ref, None);
                if v.iter().any(|x| x.differs()) {
                    alarms += 1;
                }
            }
            check_rate(
                &format!("{cond} against reference runs, {n_runs} vs {n_ref} runs"),
                alarms,
                TABLES,
            );
        }
    }
}

/// The printed detectable difference is where Welch's test itself reaches
/// 80 % power, each variance at its median-unbiased value; that errs on the
/// safe side (87–92 % in these tables at 5 vs 5 runs), so the promise is
/// *at least* 80 %: a rate from 78 % (2.3 Monte Carlo standard errors below
/// 80 %) up to 95 % passes. (The noncentral t at a row's observed Welch df
/// gives 74–78 % in these tables: `stats::welch_power` says why.)
fn check_power(label: &str, flagged: usize, tables: usize) {
    let rate = flagged as f64 / tables as f64;
    eprintln!("{label}: flagged in {rate:.3} of tables (at least 80 % printed)");
    assert!(
        (0.78..=0.95).contains(&rate),
        "{label}: a difference of the printed detectable size was flagged in {rate:.3} of tables, \
         not at least 80 % (or far more than that)"
    );
}

/// Tables whose printed detectable difference gives the promise.
const PROMISE_TABLES: usize = 301;

/// The detectable difference a row prints (its own se and Welch df, at
/// Holm's first step), as the median over perfect reproductions.
fn promised(mut printed: Vec<f64>) -> f64 {
    printed.sort_by(f64::total_cmp);
    printed[printed.len() / 2]
}

#[test]
fn differences_of_the_printed_detectable_size_are_flagged_in_at_least_80_percent() {
    // Against the paper: the 9B agent's rounds (mean ± sd) and the 8B
    // agent's efficiency (a single number, the reference runs' sd) in the
    // comp baseline; 5 runs.
    let rows = paper_rows("comp_with_discussion");
    for name in ["rounds_active agent_5", "gained_per_spent agent_4"] {
        let i = rows.iter().position(|r| r.name == name).expect(name);
        let mut rng = ChaCha8Rng::seed_from_u64(80 + i as u64);
        let delta = promised(
            (0..PROMISE_TABLES)
                .map(|_| {
                    let (_, tests, m) = paper_table(&mut rng, &rows, 5, true, None);
                    verdict::detectable(&tests[i], m)
                })
                .collect(),
        );
        let mut flagged = 0;
        for _ in 0..TABLES {
            let (v, _, _) = paper_table(&mut rng, &rows, 5, true, Some((i, delta)));
            if v[i] == verdict::Verdict::Higher {
                flagged += 1;
            }
        }
        check_power(
            &format!("against the paper, {name} (+{delta:.3})"),
            flagged,
            TABLES,
        );
    }
    // Against reference runs, 5 vs 5: the 8B agent's rounds in comp, the
    // collisions in coop.
    for (cond, name) in [
        ("comp_with_discussion", "rounds_active agent_4"),
        ("coop", "collisions "),
    ] {
        let rows = dir_rows(cond);
        let i = rows.iter().position(|r| r.0 == name).expect(name);
        let mut rng = ChaCha8Rng::seed_from_u64(800 + i as u64);
        let delta = promised(
            (0..PROMISE_TABLES)
                .map(|_| {
                    let (_, tests, m) = dir_table(&mut rng, &rows, 5, 5, None);
                    verdict::detectable(&tests[i], m)
                })
                .collect(),
        );
        let mut flagged = 0;
        for _ in 0..TABLES {
            let (v, _, _) = dir_table(&mut rng, &rows, 5, 5, Some((i, -delta)));
            if v[i] == verdict::Verdict::Lower {
                flagged += 1;
            }
        }
        check_power(
            &format!("{cond} against reference runs, {name} (−{delta:.3})"),
            flagged,
            TABLES,
        );
    }
}
