//! The paper's claims as effects (issue #29 item 3): for each contrast of
//! `src/report/reproduction/paper.toml`, effect = mean(a) − mean(b), whether the
//! runs show it with the paper's sign, and whether its size is compatible
//! with the paper's.
//!
//! The runs' effect: sides in the same runs (same condition) are paired by
//! run (the per-run difference), others are independent samples of runs.
//! Against the paper, when both sides are published as mean ± sd (or as an
//! every-run value, sd 0) the tests are t tests with Welch–Satterthwaite
//! degrees of freedom over every variance component (the runs' and the
//! paper's; the paper's two sides are taken as independent); when a side is
//! a single number or a range, the runs' effect is bootstrapped and compared
//! with the range of effects the published numbers allow (taken as exact).
//! Against reference runs, both effects are bootstrapped and their
//! difference tested. Holm's adjustment runs over every p-value of the table
//! (the sign tests and the size tests together).

use super::paper::{Cell, Contrast, Paper, Side};
use super::stats::{self, mean_component, Summary};
use super::{cell_label, distance, side_values, ContrastRow, BOOTSTRAP};
use crate::report::metrics::Mode;
use crate::report::ConditionReport;

fn side_label(s: &Side) -> String {
    let who = if s.agents.is_empty() {
        String::new()
    } else {
        format!(" {}", s.agents.join("+"))
    };
    format!("{} {}{}", cell_label(s.cell), s.metric.name(), who)
}

/// A side's published value, with the sentence it is implied by.
fn side_text(s: &Side) -> String {
    let t = s.published.text(s.metric.percent());
    match &s.implied_by {
        Some(by) => format!("{t}, implied by \"{by}\""),
        None => t,
    }
}

/// The runs' effect of a contrast: per-run differences when paired, else the
/// two samples.
enum RunEffect {
    Paired(Vec<f64>),
    Independent(Vec<f64>, Vec<f64>),
}

impl RunEffect {
    fn of(c: &Contrast, ra: &ConditionReport, rb: &ConditionReport, mode: Mode) -> RunEffect {
        let va = side_values(ra, c.a.metric, &c.a.agents, mode);
        let vb = side_values(rb, c.b.metric, &c.b.agents, mode);
        if c.a.cell == c.b.cell {
            RunEffect::Paired(
                va.iter()
                    .filter_map(|(r, x)| vb.iter().find(|(q, _)| q == r).map(|(_, y)| x - y))
                    .collect(),
            )
        } else {
            RunEffect::Independent(
                va.iter().map(|p| p.1).collect(),
                vb.iter().map(|p| p.1).collect(),
            )
        }
    }

    fn enough(&self) -> bool {
        match self {
            RunEffect::Paired(d) => d.len() >= 2,
            RunEffect::Independent(a, b) => a.len() >= 2 && b.len() >= 2,
        }
    }

    /// The effect as summary statistics (mean = the effect, sd and n of the
    /// paired differences; for independent samples sd is the effect's
    /// standard error × 1 and n = 1 is not meaningful, so the components
    /// carry the variance).
    fn estimate(&self) -> (f64, Vec<(f64, f64)>, usize) {
        match self {
            RunEffect::Paired(d) => {
                let s = Summary::of(d);
                (s.mean, vec![mean_component(&s)], s.n)
            }
            RunEffect::Independent(a, b) => {
                let (sa, sb) = (Summary::of(a), Summary::of(b));
                (
                    sa.mean - sb.mean,
                    vec![mean_component(&sa), mean_component(&sb)],
                    sa.n.min(sb.n),
                )
            }
        }
    }

    fn bootstrap(&self, key: &str) -> stats::Distribution {
        match self {
            RunEffect::Paired(d) => BOOTSTRAP.mean(key, d),
            RunEffect::Independent(a, b) => BOOTSTRAP.diff(key, a, b),
        }
    }

    fn paired(&self) -> bool {
        matches!(self, RunEffect::Paired(_))
    }
}

fn summary_of_effect(est: f64, comps: &[(f64, f64)], n: usize) -> Summary {
    let var: f64 = comps.iter().map(|c| c.0).sum();
    Summary {
        mean: est,
        // The standard error, scaled back to an sd of n runs.
        sd: (var * n as f64).sqrt(),
        n,
    }
}

fn sign_word(run: f64, reference: f64, p_holm: f64) -> String {
    if p_holm.is_nan() {
        "not tested".into()
    } else if p_holm >= super::ALPHA {
        "no clear effect".into()
    } else if (run > 0.0) == (reference > 0.0) && reference != 0.0 {
        "same sign".into()
    } else {
        "opposite sign".into()
    }
}

fn size_word(diff: f64, p_holm: f64) -> String {
    if p_holm.is_nan() {
        "not tested".into()
    } else if p_holm >= super::ALPHA {
        "compatible".into()
    } else if diff > 0.0 {
        "higher".into()
    } else {
        "lower".into()
    }
}

fn finish(rows: &mut [ContrastRow]) {
    let mut p = Vec::new();
    for r in rows.iter() {
        p.push(r.p_sign);
        p.push(r.p_size);
    }
    let h = stats::holm(&p);
    for (i, r) in rows.iter_mut().enumerate() {
        r.p_sign_holm = h[2 * i];
        r.p_size_holm = h[2 * i + 1];
        r.sign = sign_word(r.run_effect.mean, r.reference_value, r.p_sign_holm);
        r.size = size_word(r.size_difference, r.p_size_holm);
    }
}

fn find<'a>(cells: &[(Cell, &'a ConditionReport)], c: Cell) -> Option<&'a ConditionReport> {
    cells.iter().find(|(x, _)| *x == c).map(|(_, r)| *r)
}

fn missing_note(c: &Contrast, cells: &[(Cell, &ConditionReport)], whose: &str) -> String {
    let mut need: Vec<String> = [c.a.cell, c.b.cell]
        .iter()
        .filter(|x| find(cells, **x).is_none())
        .map(|x| cell_label(*x))
        .collect();
    need.dedup();
    format!(
        "contrast `{}` not tested: {whose} no {} runs",
        c.id,
        need.join(" or ")
    )
}

/// The contrasts of the paper that `cells` (run conditions by paper cell)
/// allow, against the paper's published effects.
pub fn against_paper(
    paper: &Paper,
    cells: &[(Cell, &ConditionReport)],
    mode: Mode,
) -> (Vec<ContrastRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for c in &paper.contrasts {
        let (Some(ra), Some(rb)) = (find(cells, c.a.cell), find(cells, c.b.cell)) else {
            notes.push(missing_note(c, cells, "there are"));
            continue;
        };
        let eff = RunEffect::of(c, ra, rb, mode);
        if !eff.enough() {
            notes.push(format!(
                "contrast `{}` not tested: fewer than 2 runs with values",
                c.id
            ));
            continue;
        }
        let (est, comps, n) = eff.estimate();
        let key = format!("contrast:{}", c.id);
        let row = match (c.a.published.summary(), c.b.published.summary()) {
            (Some(pa), Some(pb)) => {
                let reference = pa.mean - pb.mean;
                let mut all = comps.clone();
                all.push(mean_component(&pa));
                all.push(mean_component(&pb));
                let sign = stats::welch_components(est, &comps);
                let size = stats::welch_components(est - reference, &all);
                ContrastRow {
                    id: c.id.clone(),
                    claim: c.claim.clone(),
                    runs: (ra.condition.label.clone(), rb.condition.label.clone()),
                    paired: eff.paired(),
                    run_effect: summary_of_effect(est, &comps, n),
                    run_ci: sign.ci,
                    reference_effect: format!(
                        "{} ({} − {})",
                        super::fmt_value(reference, false),
                        side_text(&c.a),
                        side_text(&c.b)
                    ),
                    reference_value: reference,
                    size_difference: size.estimate,
                    size_ci: size.ci,
                    test: if size.df.is_nan() {
                        "t (all sds 0)".into()
                    } else {
                        format!("Welch–Satterthwaite t (df {:.1})", size.df)
                    },
                    p_sign: sign.p,
                    p_sign_holm: f64::NAN,
                    p_size: size.p,
                    p_size_holm: f64::NAN,
                    sign: String::new(),
                    size: String::new(),
                }
            }
            _ => {
                let (alo, ahi) = c.a.published.widened();
                let (blo, bhi) = c.b.published.widened();
                let (lo, hi) = (alo - bhi, ahi - blo);
                let d = eff.bootstrap(&key);
                let (qlo, qhi) = d.ci95();
                let mid = if lo.is_finite() && hi.is_finite() {
                    0.5 * (lo + hi)
                } else if lo.is_finite() {
                    lo
                } else {
                    hi
                };
                ContrastRow {
                    id: c.id.clone(),
                    claim: c.claim.clone(),
                    runs: (ra.condition.label.clone(), rb.condition.label.clone()),
                    paired: eff.paired(),
                    run_effect: summary_of_effect(est, &comps, n),
                    run_ci: (qlo, qhi),
                    reference_effect: format!(
                        "{} ({} − {}; published values taken as exact)",
                        if lo == hi {
                            super::fmt_value(lo, c.a.metric.percent())
                        } else {
                            format!(
                                "{}…{}",
                                super::fmt_value(lo, c.a.metric.percent()),
                                super::fmt_value(hi, c.a.metric.percent())
                            )
                        },
                        side_text(&c.a),
                        side_text(&c.b)
                    ),
                    reference_value: mid,
                    size_difference: distance(est, lo, hi),
                    size_ci: (distance(qlo, lo, hi), distance(qhi, lo, hi)),
                    test: "bootstrap vs the published range of the effect".into(),
                    p_sign: d.p_interval(0.0, 0.0),
                    p_sign_holm: f64::NAN,
                    p_size: d.p_interval(lo, hi),
                    p_size_holm: f64::NAN,
                    sign: String::new(),
                    size: String::new(),
                }
            }
        };
        rows.push(row);
    }
    finish(&mut rows);
    (rows, notes)
}

/// The paper's contrasts, the runs' effect against the reference runs'
/// effect (both bootstrapped, independent).
pub fn against_runs(
    paper: &Paper,
    runs: &[(Cell, &ConditionReport)],
    refs: &[(Cell, &ConditionReport)],
    mode: Mode,
) -> (Vec<ContrastRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for c in &paper.contrasts {
        let (Some(ra), Some(rb)) = (find(runs, c.a.cell), find(runs, c.b.cell)) else {
            notes.push(missing_note(c, runs, "the runs have"));
            continue;
        };
        let (Some(xa), Some(xb)) = (find(refs, c.a.cell), find(refs, c.b.cell)) else {
            notes.push(missing_note(c, refs, "the reference has"));
            continue;
        };
        // A side the paper states only by implication (`exact`) is measured here.
        let eff = RunEffect::of(c, ra, rb, mode);
        let reff = RunEffect::of(c, xa, xb, mode);
        if !eff.enough() || !reff.enough() {
            notes.push(format!(
                "contrast `{}` not tested: fewer than 2 runs with values",
                c.id
            ));
            continue;
        }
        let (est, comps, n) = eff.estimate();
        let (rest, _, _) = reff.estimate();
        let key = format!("contrast-runs:{}", c.id);
        let d = eff.bootstrap(&key);
        // The difference of the two effects: every sample (the runs' and the
        // reference's, each side) resampled on its own in one stream.
        let diffs: Vec<f64> = {
            let parts = |e: &RunEffect| -> Vec<(f64, Vec<f64>)> {
                match e {
                    RunEffect::Paired(x) => vec![(1.0, x.clone())],
                    RunEffect::Independent(a, b) => vec![(1.0, a.clone()), (-1.0, b.clone())],
                }
            };
            let mut all: Vec<(f64, Vec<f64>)> = parts(&eff);
            all.extend(parts(&reff).into_iter().map(|(w, x)| (-w, x)));
            let refs: Vec<(f64, &[f64])> = all.iter().map(|(w, x)| (*w, x.as_slice())).collect();
            BOOTSTRAP
                .contrast(&format!("{key}:difference"), &refs)
                .sorted
        };
        let dd = stats::Distribution { sorted: diffs };
        rows.push(ContrastRow {
            id: c.id.clone(),
            claim: c.claim.clone(),
            runs: (ra.condition.label.clone(), rb.condition.label.clone()),
            paired: eff.paired(),
            run_effect: summary_of_effect(est, &comps, n),
            run_ci: d.ci95(),
            reference_effect: format!(
                "{} ({} − {} of the reference runs)",
                super::fmt_value(rest, c.a.metric.percent()),
                side_label(&c.a),
                side_label(&c.b)
            ),
            reference_value: rest,
            size_difference: est - rest,
            size_ci: dd.ci95(),
            test: "bootstrap, difference of effects".into(),
            p_sign: d.p_interval(0.0, 0.0),
            p_sign_holm: f64::NAN,
            p_size: dd.p_interval(0.0, 0.0),
            p_size_holm: f64::NAN,
            sign: String::new(),
            size: String::new(),
        });
    }
    finish(&mut rows);
    (rows, notes)
}
