//! The paper's claims as effects: for each contrast of
//! `src/report/reproduction/paper.toml`, effect = mean(a) − mean(b), whether the
//! runs show it with the paper's sign, and whether its size is compatible
//! with the paper's.
//!
//! The runs' effect: sides in the same runs (same condition) are paired by
//! run (the per-run difference), others are independent samples of runs.
//! Every test is a t test with Welch–Satterthwaite degrees of freedom over
//! the variance components of the runs' effect and of the reference's:
//! against the paper, a side published as mean ± sd brings its sd, an
//! every-run value none, and a single number or range the reference runs'
//! sd (or, without reference runs, the runs' own sd of that side under
//! equal variances); the runs' effect is compared with the range of effects
//! the published figures allow (the distance from it). Against reference
//! runs, the reference effect is estimated the same way as the runs'.
//! Holm runs over two declared families: the sign tests of all the paper's
//! contrasts, and their size tests (a contrast the runs cannot form counts
//! as p = 1). The margin of both is the size of the reference effect.

use super::paper::{Cell, Contrast, Paper, Published, Side};
use super::verdict::{self, RowTest, ALPHA};
use super::{cell_label, side_values, ContrastRow};
use crate::report::metrics::Mode;
use crate::report::ConditionReport;
use crate::stats::{mean_component, Summary};

/// A run condition (or reference condition) of a paper cell, with how its
/// set-up differs from the reference's (compared with `--allow-mismatch`).
pub type CellRuns<'a> = (Cell, &'a ConditionReport, Option<String>);

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

    /// The runs' sd of side a and side b (for a side whose published
    /// value takes the runs' own sd).
    fn side_summaries(&self) -> Option<(Summary, Summary)> {
        match self {
            RunEffect::Paired(_) => None,
            RunEffect::Independent(a, b) => Some((Summary::of(a), Summary::of(b))),
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

fn sign_word(t: &RowTest, reference: f64, p_holm: f64, detectable: f64, margin: f64) -> String {
    if p_holm.is_nan() {
        "not tested".into()
    } else if p_holm >= ALPHA {
        if detectable <= margin {
            "no clear effect".into()
        } else {
            "inconclusive".into()
        }
    } else if (t.difference > 0.0) == (reference > 0.0) && reference != 0.0 {
        "same sign".into()
    } else {
        "opposite sign".into()
    }
}

fn size_word(t: &RowTest, p_holm: f64, detectable: f64, margin: f64) -> String {
    match verdict::decide(t, p_holm, detectable, margin) {
        verdict::Verdict::Consistent => "compatible".into(),
        verdict::Verdict::NotTested(_) => "not tested".into(),
        v => v.text(),
    }
}

/// Holm over the two declared families (each of `declared` tests), the
/// detectable effects and the words; returns the families' lines.
fn finish(rows: &mut [ContrastRow], declared: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for size in [false, true] {
        let tests: Vec<&RowTest> = rows
            .iter()
            .map(|r| if size { &r.size_test } else { &r.sign_test })
            .collect();
        let (h, m) = verdict::adjust(&tests, declared);
        let exact = tests.iter().filter(|t| t.cannot_differ).count();
        let det: Vec<f64> = tests.iter().map(|t| verdict::detectable(t, m)).collect();
        for (i, r) in rows.iter_mut().enumerate() {
            if size {
                r.p_size_holm = h[i];
                r.size_detectable = det[i];
                r.size = size_word(&r.size_test, h[i], det[i], r.margin);
            } else {
                r.p_sign_holm = h[i];
                r.sign_detectable = det[i];
                r.sign = sign_word(&r.sign_test, r.reference_value, h[i], det[i], r.margin);
            }
        }
        lines.push(format!(
            "{} tests of the paper's {declared} contrasts: Holm over m = {m}{}",
            if size { "size" } else { "sign" },
            if exact > 0 {
                format!(" (not counted: {exact} that cannot differ)")
            } else {
                String::new()
            }
        ));
    }
    lines
}

fn find<'a>(cells: &[CellRuns<'a>], c: Cell) -> Option<(&'a ConditionReport, Option<String>)> {
    cells
        .iter()
        .find(|(x, _, _)| *x == c)
        .map(|(_, r, m)| (*r, m.clone()))
}

fn missing_note(c: &Contrast, cells: &[CellRuns], whose: &str) -> String {
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

/// A published side as the interval its mean lies in and its variance
/// component; `None` for the component when the side takes the runs' own
/// sd (equal variances) — then `own` is that component.
type SideParts = ((f64, f64), Option<(f64, f64)>, Option<(f64, f64)>);

fn published_side(p: &Published, own: Option<&Summary>) -> SideParts {
    match *p {
        Published::MeanSd { mean, sd, n } => (
            (mean, mean),
            Some((sd * sd / n as f64, n as f64 - 1.0)),
            None,
        ),
        Published::Exact { value, .. } => ((value, value), None, None),
        Published::Interval { n, spread, .. } => {
            let w = p.widened();
            match spread {
                Some(s) => (w, Some((s.sd * s.sd / n as f64, s.n as f64 - 1.0)), None),
                None => (
                    w,
                    None,
                    own.map(|s| (s.sd * s.sd / n as f64, s.n as f64 - 1.0)),
                ),
            }
        }
    }
}

fn mismatch_of(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x),
        (Some(x), Some(y)) if x == y => Some(x),
        (Some(x), Some(y)) => Some(format!("{x}; {y}")),
    }
}

/// The contrasts of the paper that `cells` (run conditions by paper cell)
/// allow, against the paper's published effects; the notes and the Holm
/// families' lines.
pub fn against_paper(
    paper: &Paper,
    cells: &[CellRuns],
    mode: Mode,
) -> (Vec<ContrastRow>, Vec<String>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for c in &paper.contrasts {
        let (Some((ra, ma)), Some((rb, mb))) = (find(cells, c.a.cell), find(cells, c.b.cell))
        else {
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
        let (est, mut comps, n) = eff.estimate();
        let sums = eff.side_summaries();
        let ((alo, ahi), ca, own_a) = published_side(&c.a.published, sums.as_ref().map(|s| &s.0));
        let ((blo, bhi), cb, own_b) = published_side(&c.b.published, sums.as_ref().map(|s| &s.1));
        let sign = verdict::t_row(
            "t of the runs' effect vs 0".into(),
            est,
            0.0,
            0.0,
            &comps,
            n,
        );
        // A side taking the runs' own sd: its component joins the runs' own
        // of that side (one estimate, its df), when the sides are independent.
        if let (Some(o), false) = (own_a, eff.paired()) {
            comps[0].0 += o.0;
        } else if let Some(o) = own_a {
            comps.push(o);
        }
        if let (Some(o), false) = (own_b, eff.paired()) {
            comps[1].0 += o.0;
        } else if let Some(o) = own_b {
            comps.push(o);
        }
        comps.extend(ca);
        comps.extend(cb);
        let (lo, hi) = (alo - bhi, ahi - blo);
        let reference = if lo == hi {
            lo
        } else if lo.is_finite() && hi.is_finite() {
            0.5 * (lo + hi)
        } else if lo.is_finite() {
            lo
        } else {
            hi
        };
        let equal_var = own_a.is_some() || own_b.is_some();
        let size = verdict::t_row(
            format!(
                "Welch–Satterthwaite t vs the paper's effect{}",
                if equal_var {
                    " (a side's sd taken as the runs')"
                } else {
                    ""
                }
            ),
            est,
            lo,
            hi,
            &comps,
            n,
        );
        let pc = c.a.metric.percent();
        rows.push(ContrastRow {
            id: c.id.clone(),
            claim: c.claim.clone(),
            runs: (ra.condition.label.clone(), rb.condition.label.clone()),
            paired: eff.paired(),
            run_effect: summary_of_effect(est, &sign_comps(&eff), n),
            run_ci: sign.ci,
            reference_effect: format!(
                "{} ({} − {})",
                if lo == hi {
                    super::fmt_value(lo, pc)
                } else {
                    format!("{}…{}", super::fmt_value(lo, pc), super::fmt_value(hi, pc))
                },
                side_text(&c.a),
                side_text(&c.b)
            ),
            reference_value: reference,
            sign_test: sign,
            p_sign_holm: f64::NAN,
            sign_detectable: f64::NAN,
            size_test: size,
            p_size_holm: f64::NAN,
            size_detectable: f64::NAN,
            margin: reference.abs(),
            sign: String::new(),
            size: String::new(),
            mismatch: mismatch_of(ma, mb),
        });
    }
    let fam = finish(&mut rows, paper.contrasts.len());
    (rows, notes, fam)
}

fn sign_comps(e: &RunEffect) -> Vec<(f64, f64)> {
    e.estimate().1
}

/// The paper's contrasts, the runs' effect against the reference runs'
/// effect (independent), with the notes and the Holm families' lines.
pub fn against_runs(
    paper: &Paper,
    runs: &[CellRuns],
    refs: &[CellRuns],
    mode: Mode,
) -> (Vec<ContrastRow>, Vec<String>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for c in &paper.contrasts {
        let (Some((ra, ma)), Some((rb, mb))) = (find(runs, c.a.cell), find(runs, c.b.cell)) else {
            notes.push(missing_note(c, runs, "the runs have"));
            continue;
        };
        let (Some((xa, _)), Some((xb, _))) = (find(refs, c.a.cell), find(refs, c.b.cell)) else {
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
        let (rest, rcomps, _) = reff.estimate();
        let sign = verdict::t_row(
            "t of the runs' effect vs 0".into(),
            est,
            0.0,
            0.0,
            &comps,
            n,
        );
        let mut all = comps.clone();
        all.extend(rcomps);
        let size = verdict::t_row(
            "Welch–Satterthwaite t vs the reference runs' effect".into(),
            est - rest,
            0.0,
            0.0,
            &all,
            n,
        );
        rows.push(ContrastRow {
            id: c.id.clone(),
            claim: c.claim.clone(),
            runs: (ra.condition.label.clone(), rb.condition.label.clone()),
            paired: eff.paired(),
            run_effect: summary_of_effect(est, &comps, n),
            run_ci: sign.ci,
            reference_effect: format!(
                "{} ({} − {} of the reference runs)",
                super::fmt_value(rest, c.a.metric.percent()),
                side_label(&c.a),
                side_label(&c.b)
            ),
            reference_value: rest,
            sign_test: sign,
            p_sign_holm: f64::NAN,
            sign_detectable: f64::NAN,
            size_test: size,
            p_size_holm: f64::NAN,
            size_detectable: f64::NAN,
            margin: rest.abs(),
            sign: String::new(),
            size: String::new(),
            mismatch: mismatch_of(ma, mb),
        });
    }
    let fam = finish(&mut rows, paper.contrasts.len());
    (rows, notes, fam)
}
