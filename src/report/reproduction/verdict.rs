//! The test behind each row of the reproduction tables and the rule that
//! turns it into a verdict, independent of where the values came from (so
//! that `tests/quick/reproduction_calibration.rs` can simulate thousands of tables
//! through the same code):
//!
//! - a mean against a published mean ± sd, against a single published
//!   number or range (a mean of the paper's seeds whose spread is the
//!   reference runs' sd, or else the runs' own sd under equal variances), or
//!   against reference runs: Welch's t (Welch–Satterthwaite degrees of
//!   freedom over every variance component), the difference measured from
//!   the nearest end of a range;
//! - a claim that every run had a value: the count of runs that do not
//!   (any one contradicts it), outside Holm's family;
//! - Holm over a declared family, rows that cannot differ (no spread on
//!   either side, equal) left out of its m;
//! - the smallest difference each row detects with 80 % power at Holm's
//!   first step (α/m: a single true difference in the family has the
//!   smallest p and meets that threshold first), by the power of Welch's
//!   test itself (its standard error and degrees of freedom as random as the
//!   variances they are estimated from), each variance at its
//!   median-unbiased value (`stats::welch_detectable`); and the verdict: *higher* /
//!   *lower* when the Holm-adjusted p is below α, else *consistent* when the
//!   row could have detected the declared margin, else *inconclusive*.

use serde::Serialize;

use crate::stats::{self, mean_component, Summary};

/// The significance level of every verdict (after Holm).
pub const ALPHA: f64 = 0.05;

/// The share of runs an every-run claim must be able to catch deviating
/// (80 % power) for its row to be *consistent*: half the runs (3 runs or
/// more).
pub const EVERY_RUN_MARGIN: f64 = 0.5;

/// A verdict of one comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No difference shown, and the row could have detected the margin.
    Consistent,
    /// No difference shown, but the row could not have detected the margin.
    Inconclusive,
    Higher,
    Lower,
    /// Not tested, and why.
    NotTested(String),
}

impl Verdict {
    pub fn text(&self) -> String {
        match self {
            Verdict::Consistent => "consistent".into(),
            Verdict::Inconclusive => "inconclusive".into(),
            Verdict::Higher => "higher".into(),
            Verdict::Lower => "lower".into(),
            Verdict::NotTested(why) => format!("not tested ({why})"),
        }
    }

    /// A difference shown.
    pub fn differs(&self) -> bool {
        matches!(self, Verdict::Higher | Verdict::Lower)
    }
}

/// Where the spread of a reference mean comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Spread {
    /// A published sd, or the reference runs' sd: `sd` of a mean over
    /// `n_mean` runs, estimated from `n_sd` runs.
    Known { sd: f64, n_mean: usize, n_sd: usize },
    /// A published mean over `n_mean` runs without a spread and no reference
    /// runs: its sd is taken to equal the runs' own (equal variances).
    RunsOwn { n_mean: usize },
}

/// What a row compares the runs with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reference {
    /// Every run had `value`.
    EveryRun { value: f64 },
    /// A mean that lies in [lo, hi] (a point when equal), with its spread.
    Mean { lo: f64, hi: f64, spread: Spread },
}

/// One row's test: the difference (runs − reference, or the distance from
/// a range), its 95 % interval, standard error, degrees of freedom, t and
/// two-sided p; for an every-run claim the runs that deviate instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowTest {
    pub test: String,
    pub difference: f64,
    pub ci: (f64, f64),
    pub se: f64,
    pub df: f64,
    pub statistic: f64,
    /// NaN for an every-run claim (decided by its count, not a p-value).
    pub p: f64,
    /// No spread on either side and no difference: the row cannot differ
    /// and is left out of Holm's m.
    pub cannot_differ: bool,
    /// Runs deviating from an every-run value, of `n`.
    pub deviating: Option<usize>,
    pub n: usize,
    /// The estimated variance components (variance, degrees of freedom) behind `se` and `df`,
    /// which the detectable difference integrates over.
    #[serde(skip)]
    pub components: Vec<(f64, f64)>,
    /// How the runs' own component (the first) grows with their number,
    /// for [`runs_for_margin`]; None where more runs are not modelled.
    #[serde(skip)]
    pub runs_part: Option<RunsPart>,
}

/// How the runs' variance component depends on their number n.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunsPart {
    /// sd²/n with n − 1 degrees of freedom; the reference's parts stay.
    Mean { sd: f64 },
    /// sd²·(1/n + 1/n_mean) with n − 1: the reference's sd taken as the
    /// runs' own (equal variances).
    EqualVariances { sd: f64, n_mean: usize },
}

impl RunsPart {
    fn component(self, n: usize) -> (f64, f64) {
        let n = n as f64;
        match self {
            RunsPart::Mean { sd } => (sd * sd / n, n - 1.0),
            RunsPart::EqualVariances { sd, n_mean } => {
                (sd * sd * (1.0 / n + 1.0 / n_mean as f64), n - 1.0)
            }
        }
    }
}

/// The most runs [`runs_for_margin`] considers.
pub const MOST_RUNS: usize = 1000;

/// How many runs an inconclusive row needs to detect its margin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunsForMargin {
    /// This many runs with the same spread would.
    Runs(usize),
    /// Not even this many would: the reference's own spread (or the
    /// margin's smallness against it) is the limit.
    Beyond(usize),
}

/// The signed distance of `x` from [lo, hi] (0 inside; NaN when `x` is not
/// a number, so an estimate that could not be made never reads as a match).
pub fn distance(x: f64, lo: f64, hi: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else if x > hi {
        x - hi
    } else if x < lo {
        x - lo
    } else {
        0.0
    }
}

/// A t test of the distance of `estimate` from [lo, hi] with the variance
/// components `comps` (variance of each independent part, its degrees of
/// freedom).
pub fn t_row(
    test: String,
    estimate: f64,
    lo: f64,
    hi: f64,
    comps: &[(f64, f64)],
    n: usize,
) -> RowTest {
    let d = distance(estimate, lo, hi);
    let t = stats::welch_components(d, comps);
    RowTest {
        test,
        difference: d,
        ci: t.ci,
        se: t.se,
        df: t.df,
        statistic: t.t,
        p: t.p,
        cannot_differ: t.se == 0.0 && d == 0.0,
        deviating: None,
        n,
        components: comps.to_vec(),
        runs_part: None,
    }
}

/// The test of the runs' values `xs` (n ≥ 2, or n ≥ 1 for an every-run
/// claim) against `reference`.
pub fn level(xs: &[f64], reference: &Reference) -> RowTest {
    let s = Summary::of(xs);
    match *reference {
        Reference::EveryRun { value } => {
            let tol = 1e-9 * value.abs().max(1.0);
            let dev: Vec<f64> = xs
                .iter()
                .map(|x| x - value)
                .filter(|d| d.abs() > tol)
                .collect();
            RowTest {
                test: "count of runs deviating from the every-run value".into(),
                difference: s.mean - value,
                ci: (f64::NAN, f64::NAN),
                se: f64::NAN,
                df: f64::NAN,
                statistic: f64::NAN,
                p: f64::NAN,
                cannot_differ: false,
                deviating: Some(dev.len()),
                n: s.n,
                components: Vec::new(),
                runs_part: None,
            }
        }
        Reference::Mean { lo, hi, spread } => {
            let where_ = if lo == hi {
                "the value"
            } else {
                "the nearest end of the range"
            };
            let (comps, test, part) = match spread {
                Spread::Known { sd, n_mean, n_sd } => (
                    vec![
                        mean_component(&s),
                        (sd * sd / n_mean as f64, n_sd as f64 - 1.0),
                    ],
                    format!("Welch t vs {where_}"),
                    RunsPart::Mean { sd: s.sd },
                ),
                Spread::RunsOwn { n_mean } => (
                    vec![(
                        s.sd * s.sd * (1.0 / s.n as f64 + 1.0 / n_mean as f64),
                        s.n as f64 - 1.0,
                    )],
                    format!("t vs {where_}, equal variances"),
                    RunsPart::EqualVariances { sd: s.sd, n_mean },
                ),
            };
            let mut t = t_row(test, s.mean, lo, hi, &comps, s.n);
            t.runs_part = Some(part);
            t
        }
    }
}

/// Holm over a family declared to hold `declared` tests (those not run
/// count as p = 1), less the rows that cannot differ and every-run counts.
/// Returns the adjusted p-values (NaN where no p) and the family's m.
pub fn adjust(tests: &[&RowTest], declared: usize) -> (Vec<f64>, usize) {
    let excluded = tests
        .iter()
        .filter(|t| t.cannot_differ || t.deviating.is_some())
        .count();
    let m = declared.saturating_sub(excluded).max(1);
    let p: Vec<f64> = tests
        .iter()
        .map(|t| {
            if t.cannot_differ || t.deviating.is_some() {
                f64::NAN
            } else {
                t.p
            }
        })
        .collect();
    let mut h = stats::holm_declared(&p, m);
    for (x, t) in h.iter_mut().zip(tests) {
        if t.cannot_differ {
            *x = 1.0;
        }
    }
    (h, m)
}

/// The smallest difference `t` detects with 80 % power at Holm's first
/// step of a family of `m`: the power of Welch's test itself over its
/// components' sampling distribution, each variance at its median-unbiased
/// value ([`stats::welch_detectable`]); for an every-run claim, the smallest
/// share of deviating runs its n runs catch.
pub fn detectable(t: &RowTest, m: usize) -> f64 {
    if t.deviating.is_some() {
        return stats::detectable_share(t.n);
    }
    if t.cannot_differ {
        return 0.0;
    }
    stats::welch_detectable(&t.components, ALPHA / m.max(1) as f64)
}

/// The runs an inconclusive row would need, the spreads as they are, for
/// its detectable difference at Holm's first step of a family of `m` to
/// reach `margin` (an every-run claim: the runs that catch deviations in
/// [`EVERY_RUN_MARGIN`] of them). None for a row whose runs' part is not
/// modelled. A search on [`stats::welch_detectable_rough`], its answer then
/// checked, and moved, on the full grid.
pub fn runs_for_margin(t: &RowTest, m: usize, margin: f64) -> Option<RunsForMargin> {
    if t.deviating.is_some() {
        let n = (1..=MOST_RUNS).find(|&n| stats::detectable_share(n) <= EVERY_RUN_MARGIN)?;
        return Some(RunsForMargin::Runs(n));
    }
    let part = t.runs_part?;
    if t.components.is_empty() || margin.is_nan() || margin <= 0.0 {
        return None;
    }
    let alpha = ALPHA / m.max(1) as f64;
    let at = |n: usize, rough: bool| {
        let mut c = t.components.clone();
        c[0] = part.component(n);
        let d = if rough {
            stats::welch_detectable_rough(&c, alpha)
        } else {
            stats::welch_detectable(&c, alpha)
        };
        d <= margin
    };
    if !at(MOST_RUNS, false) {
        return Some(RunsForMargin::Beyond(MOST_RUNS));
    }
    let (mut lo, mut hi) = (t.n.max(1), MOST_RUNS);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if at(mid, true) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let mut n = hi;
    while n < MOST_RUNS && !at(n, false) {
        n += 1;
    }
    while n > t.n.max(1) + 1 && at(n - 1, false) {
        n -= 1;
    }
    Some(RunsForMargin::Runs(n))
}

/// The verdict of a row: `p_holm` below α is a difference (its sign that
/// of the difference); else consistent when the row could detect `margin`
/// (for an every-run claim: [`EVERY_RUN_MARGIN`] of the runs), else
/// inconclusive.
pub fn decide(t: &RowTest, p_holm: f64, detectable: f64, margin: f64) -> Verdict {
    if let Some(k) = t.deviating {
        return if k > 0 {
            if t.difference > 0.0 {
                Verdict::Higher
            } else {
                Verdict::Lower
            }
        } else if detectable <= EVERY_RUN_MARGIN {
            Verdict::Consistent
        } else {
            Verdict::Inconclusive
        };
    }
    if p_holm.is_nan() {
        return Verdict::NotTested("no p-value".into());
    }
    if p_holm < ALPHA {
        if t.difference > 0.0 {
            Verdict::Higher
        } else {
            Verdict::Lower
        }
    } else if detectable <= margin {
        Verdict::Consistent
    } else {
        Verdict::Inconclusive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_that_is_not_a_number_is_no_distance_of_zero() {
        assert_eq!(distance(5.0, 1.0, 3.0), 2.0);
        assert_eq!(distance(2.0, 1.0, 3.0), 0.0);
        assert!(distance(f64::NAN, 1.0, 3.0).is_nan());
        assert!(t_row("t".into(), f64::NAN, 1.0, 3.0, &[(1.0, 4.0)], 5)
            .difference
            .is_nan());
    }

    #[test]
    fn an_every_run_claim_is_contradicted_by_one_run() {
        let t = level(
            &[30.0, 30.0, 29.0, 30.0, 30.0],
            &Reference::EveryRun { value: 30.0 },
        );
        assert_eq!(t.deviating, Some(1));
        let d = detectable(&t, 10);
        assert_eq!(decide(&t, f64::NAN, d, 1.0), Verdict::Lower);
        let ok = level(&[30.0; 5], &Reference::EveryRun { value: 30.0 });
        assert_eq!(
            decide(&ok, f64::NAN, detectable(&ok, 10), 1.0),
            Verdict::Consistent
        );
        let two = level(&[30.0; 2], &Reference::EveryRun { value: 30.0 });
        assert_eq!(
            decide(&two, f64::NAN, detectable(&two, 10), 1.0),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn more_runs_reach_a_margin_unless_the_reference_is_too_uncertain() {
        let runs = [10.0, 12.0, 9.0, 14.0, 11.0];
        let known = |sd: f64, n_sd: usize| {
            level(
                &runs,
                &Reference::Mean {
                    lo: 11.0,
                    hi: 11.0,
                    spread: Spread::Known {
                        sd,
                        n_mean: n_sd,
                        n_sd,
                    },
                },
            )
        };
        // A reference of 20 runs with a small sd: more runs get there, and
        // the answer is the first count that does.
        let t = known(1.0, 20);
        let (m, margin) = (8, 3.0);
        assert!(detectable(&t, m) > margin);
        let Some(RunsForMargin::Runs(n)) = runs_for_margin(&t, m, margin) else {
            panic!("{:?}", runs_for_margin(&t, m, margin));
        };
        let at = |n: usize| {
            let mut c = t.components.clone();
            c[0] = RunsPart::Mean {
                sd: Summary::of(&runs).sd,
            }
            .component(n);
            stats::welch_detectable(&c, ALPHA / m as f64)
        };
        assert!(n > 5 && at(n) <= margin && at(n - 1) > margin, "{n}");
        // Five reference runs with a wide sd: no number of runs will.
        assert_eq!(
            runs_for_margin(&known(4.0, 5), m, margin),
            Some(RunsForMargin::Beyond(MOST_RUNS))
        );
        // Equal variances (no published spread): the runs' own sd.
        let own = level(
            &runs,
            &Reference::Mean {
                lo: 11.0,
                hi: 11.0,
                spread: Spread::RunsOwn { n_mean: 5 },
            },
        );
        // Its part grows with the runs' df, not only their number: reached.
        assert!(detectable(&own, m) > 4.0);
        assert!(
            matches!(runs_for_margin(&own, m, 4.0), Some(RunsForMargin::Runs(n)) if n > 5),
            "{:?}",
            runs_for_margin(&own, m, 4.0)
        );
        // An every-run claim needs 3 runs.
        let two = level(&[30.0; 2], &Reference::EveryRun { value: 30.0 });
        assert_eq!(runs_for_margin(&two, m, 1.0), Some(RunsForMargin::Runs(3)));
    }

    #[test]
    fn rows_that_cannot_differ_leave_the_family() {
        let a = level(
            &[30.0; 5],
            &Reference::Mean {
                lo: 30.0,
                hi: 30.0,
                spread: Spread::Known {
                    sd: 0.0,
                    n_mean: 5,
                    n_sd: 5,
                },
            },
        );
        assert!(a.cannot_differ);
        let b = level(
            &[1.0, 2.0, 3.0, 4.0, 5.0],
            &Reference::Mean {
                lo: 3.0,
                hi: 3.0,
                spread: Spread::RunsOwn { n_mean: 5 },
            },
        );
        assert!(!b.cannot_differ);
        assert_eq!(b.df, 4.0);
        let (h, m) = adjust(&[&a, &b], 2);
        assert_eq!(m, 1);
        assert_eq!(h[0], 1.0);
        assert_eq!(h[1], b.p);
    }

    #[test]
    fn a_range_is_tested_from_its_nearest_end() {
        let xs = [1.5, 1.6, 1.7];
        let t = level(
            &xs,
            &Reference::Mean {
                lo: 1.0,
                hi: 1.2,
                spread: Spread::Known {
                    sd: 0.1,
                    n_mean: 5,
                    n_sd: 5,
                },
            },
        );
        assert!((t.difference - 0.4).abs() < 1e-12);
        let inside = level(
            &[1.1, 1.15, 1.12],
            &Reference::Mean {
                lo: 1.0,
                hi: 1.2,
                spread: Spread::RunsOwn { n_mean: 5 },
            },
        );
        assert_eq!(inside.difference, 0.0);
        assert_eq!(inside.p, 1.0);
    }
}
