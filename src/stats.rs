//! The crate's statistical distributions and tests, shared by the reproduction tables
//! (`report::reproduction`) and the race's human comparison (`race::analysis`), written out
//! so that each can be checked against scipy/statsmodels (`scripts/gen_reproduction_stats.py`
//! writes the expected values to `tests/fixtures/reproduction_stats.json`):
//!
//! - Student's t distribution ([`t_sf2`], [`t_quantile`]) through the
//!   regularized incomplete beta function ([`beta_inc`], Lentz's continued
//!   fraction), the normal distribution ([`normal_sf2`]);
//! - Welch's t test from summary statistics ([`welch`], scipy's
//!   `ttest_ind_from_stats(equal_var=False)`), and its generalisation to a
//!   linear contrast of independent means ([`welch_components`]: the
//!   Welch–Satterthwaite degrees of freedom over every variance component);
//! - Holm's step-down adjustment ([`holm`], statsmodels'
//!   `multipletests(method="holm")`), also over a pre-declared family of `m` tests ([`holm_declared`]);
//! - the power of a t test (noncentral t, [`t_power`], scipy's `nct`), the
//!   smallest difference it detects with 80 % power at a given level
//!   ([`detectable`]), and the share of runs an every-run claim
//!   detects ([`detectable_share`]); the power of Welch's test itself, whose
//!   df and standard error are estimated, and the difference a row detects
//!   from its estimated variance components (`welch_power.rs`: [`WelchPower`],
//!   [`welch_detectable`], with χ² quantiles, [`chi2_quantile`]);
//! - two-proportion z tests ([`two_proportion_z`], statsmodels'
//!   `proportions_ztest`) and the cluster-robust difference of two rates
//!   ([`cluster_robust_diff`], statsmodels' `OLS(y, [1, group]).fit(
//!   cov_type="cluster", use_t=True)`: its small-sample correction and a t
//!   reference with G − 1 degrees of freedom);
//!
//! No bootstrap: with the 3–10 runs a reproduction has, a percentile
//! bootstrap's interval is too narrow (it rejects about 12 % of true nulls
//! at 5 vs 5 runs, and cannot leave the range of the runs against a
//! constant), while Welch's t holds its level.

mod welch_power;
pub use welch_power::{
    chi2_quantile, welch_detectable, welch_detectable_rough, welch_power, WelchPower,
};

/// ln Γ(x) for x > 0.
fn ln_gamma(x: f64) -> f64 {
    libm::lgamma(x)
}

/// Lentz's continued fraction for the incomplete beta function (Numerical
/// Recipes' `betacf`), converging for x < (a + 1) / (a + b + 2).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-16;
    let qab = a + b;
    let qap = a + 1.0;
    let qam = a - 1.0;
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..10_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// The regularized incomplete beta function I_x(a, b).
pub fn beta_inc(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (-x).ln_1p();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_cf(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * beta_cf(b, a, 1.0 - x) / b
    }
}

/// Two-sided tail of Student's t: P(|T| ≥ |t|) with `df` degrees of freedom
/// (`df` may be fractional, as Welch's are).
pub fn t_sf2(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return 0.0;
    }
    let x = df / (df + t * t);
    beta_inc(df / 2.0, 0.5, x).clamp(0.0, 1.0)
}

/// The density of Student's t with `df` degrees of freedom.
pub fn t_pdf(t: f64, df: f64) -> f64 {
    (ln_gamma((df + 1.0) / 2.0)
        - ln_gamma(df / 2.0)
        - 0.5 * (df * std::f64::consts::PI).ln()
        - (df + 1.0) / 2.0 * (t * t / df).ln_1p())
    .exp()
}

/// The quantile q ∈ (0.5, 1) of Student's t with `df` degrees of freedom
/// (Newton's method on the two-sided tail, kept inside a bracket that
/// bisection narrows whenever a step would leave it; NaN outside (0.5, 1)).
pub fn t_quantile(q: f64, df: f64) -> f64 {
    if !(q > 0.5 && q < 1.0) || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let target = 2.0 * (1.0 - q);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while t_sf2(hi, df) > target {
        lo = hi;
        hi *= 2.0;
        if hi > 1e300 {
            return f64::INFINITY;
        }
    }
    let mut x = 0.5 * (lo + hi);
    for _ in 0..500 {
        let f = t_sf2(x, df) - target;
        if f == 0.0 {
            return x;
        }
        if f > 0.0 {
            lo = x;
        } else {
            hi = x;
        }
        let mut next = x + f / (2.0 * t_pdf(x, df));
        if !(next > lo && next < hi) {
            next = 0.5 * (lo + hi);
        }
        let done = (next - x).abs() <= 2.0 * f64::EPSILON * x || hi - lo <= 2.0 * f64::EPSILON * hi;
        x = next;
        if done {
            break;
        }
    }
    x
}

/// Two-sided normal tail P(|Z| ≥ |z|).
pub fn normal_sf2(z: f64) -> f64 {
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
}

/// A p-value with three significant digits (`<1e-4` below).
pub fn fmt_p(p: f64) -> String {
    if p.is_nan() {
        "—".into()
    } else if p < 1e-4 {
        "<0.0001".into()
    } else if p >= 0.01 {
        format!("{p:.3}")
    } else {
        format!("{p:.4}")
    }
}

/// The normal quantile at 0.975.
pub const Z975: f64 = 1.959_963_984_540_054;

/// A mean, sample std (ddof = 1) and count.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary {
    pub mean: f64,
    pub sd: f64,
    pub n: usize,
}

impl Summary {
    /// The summary of `xs` (NaN values must have been left out); sd is NaN
    /// below two values.
    pub fn of(xs: &[f64]) -> Summary {
        let n = xs.len();
        if n == 0 {
            return Summary {
                mean: f64::NAN,
                sd: f64::NAN,
                n,
            };
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = if n < 2 {
            f64::NAN
        } else {
            (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        Summary { mean, sd, n }
    }
}

/// A t test of an estimate: the estimate, its standard error, degrees of
/// freedom, t, two-sided p and the 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TTest {
    pub estimate: f64,
    pub se: f64,
    pub df: f64,
    pub t: f64,
    pub p: f64,
    pub ci: (f64, f64),
}

/// A t test of `estimate` whose variance is the sum of independent
/// components (variance, degrees of freedom), with the Welch–Satterthwaite
/// degrees of freedom `(Σv)² / Σ(v²/df)`. Components of variance 0 drop out;
/// when every variance is 0 the estimate is exact: p = 1 if it is 0, else 0.
pub fn welch_components(estimate: f64, components: &[(f64, f64)]) -> TTest {
    let var: f64 = components.iter().map(|(v, _)| v).sum();
    if var == 0.0 {
        return TTest {
            estimate,
            se: 0.0,
            df: f64::NAN,
            t: f64::NAN,
            p: if estimate == 0.0 { 1.0 } else { 0.0 },
            ci: (estimate, estimate),
        };
    }
    let den: f64 = components
        .iter()
        .filter(|(v, _)| *v > 0.0)
        .map(|(v, df)| v * v / df)
        .sum();
    let df = var * var / den;
    let se = var.sqrt();
    let t = estimate / se;
    let half = t_quantile(0.975, df) * se;
    TTest {
        estimate,
        se,
        df,
        t,
        p: t_sf2(t, df),
        ci: (estimate - half, estimate + half),
    }
}

/// The variance component of a mean: (s²/n, n − 1).
pub fn mean_component(s: &Summary) -> (f64, f64) {
    (s.sd * s.sd / s.n as f64, s.n as f64 - 1.0)
}

/// Welch's two-sample t test of a − b from summary statistics (scipy's
/// `ttest_ind_from_stats(..., equal_var=False)`), with the 95 % interval of
/// the difference. Both need n ≥ 2 and a finite sd.
pub fn welch(a: &Summary, b: &Summary) -> TTest {
    welch_components(a.mean - b.mean, &[mean_component(a), mean_component(b)])
}

/// Holm's step-down adjusted p-values (statsmodels' `multipletests(...,
/// method="holm")`); NaN entries are left out of the family and stay NaN.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    idx.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let m = idx.len();
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 0.0f64;
    for (rank, &i) in idx.iter().enumerate() {
        let adj = ((m - rank) as f64 * p[i]).min(1.0);
        running = running.max(adj);
        out[i] = running;
    }
    out
}

/// Holm's adjustment over a family declared to hold `m` tests, of which
/// `p` are the ones that could be run (NaN entries are left out and stay
/// NaN): the k-th smallest p is multiplied by m − k, so a test missing from
/// the runs counts as p = 1 and the family does not shrink with what was
/// passed. `m` below the number of p-values is raised to it.
pub fn holm_declared(p: &[f64], m: usize) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    idx.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let m = m.max(idx.len());
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 0.0f64;
    for (rank, &i) in idx.iter().enumerate() {
        let adj = ((m - rank) as f64 * p[i]).min(1.0);
        running = running.max(adj);
        out[i] = running;
    }
    out
}

/// The power the detectable differences are computed at.
pub const POWER: f64 = 0.8;

/// The power of a two-sided t test at level `alpha` with `df` degrees of
/// freedom when the true difference is `ncp` standard errors: P(|T'| ≥
/// t(1 − α/2, df)) for T' noncentral t (scipy's `nct`), as the expectation
/// over V ~ χ²(df) of Φ(ncp − c·√(V/df)) + Φ(−ncp − c·√(V/df)), integrated
/// by Simpson's rule over ln V.
pub fn t_power(ncp: f64, df: f64, alpha: f64) -> f64 {
    if ncp.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let c = t_quantile(1.0 - alpha / 2.0, df);
    let phi = |y: f64| 0.5 * libm::erfc(-y / std::f64::consts::SQRT_2);
    let h = df / 2.0;
    let norm = h * std::f64::consts::LN_2 + ln_gamma(h);
    // ln V from far below the mode (the density grows as e^{h·x}) to far
    // into the χ² tail.
    let lo = df.ln() - 74.0 / df - 2.0;
    let hi = (df + 60.0 + 12.0 * df.sqrt()).ln();
    const STEPS: usize = 1200;
    let step = (hi - lo) / STEPS as f64;
    let mut sum = 0.0;
    for i in 0..=STEPS {
        let x = lo + step * i as f64;
        let v = x.exp();
        let density = (h * x - v / 2.0 - norm).exp();
        let s = (v / df).sqrt();
        let f = density * (phi(ncp - c * s) + phi(-ncp - c * s));
        let w = if i == 0 || i == STEPS {
            1.0
        } else if i % 2 == 1 {
            4.0
        } else {
            2.0
        };
        sum += w * f;
    }
    (sum * step / 3.0).clamp(0.0, 1.0)
}

/// The smallest true difference a two-sided t test at level `alpha` with
/// standard error `se` and `df` degrees of freedom detects with 80 % power
/// (the noncentrality where [`t_power`] reaches 0.8, times `se`). 0 when
/// `se` is 0 (any difference is certain); NaN when `se` or `df` is not a
/// number.
pub fn detectable(se: f64, df: f64, alpha: f64) -> f64 {
    if se == 0.0 {
        return 0.0;
    }
    if !se.is_finite() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let ncp = increasing_root(
        |x| t_power(x, df, alpha) - POWER,
        t_quantile(1.0 - alpha / 2.0, df) + 1.0,
        1e6,
    );
    ncp * se
}

/// The x ≥ 0 where `g`, increasing and negative at 0, crosses 0: a bracket
/// from (0, `first`) doubled until `g` is positive (infinity once past
/// `limit`), then regula falsi (Illinois) to a relative 1e-12.
pub(crate) fn increasing_root(g: impl Fn(f64) -> f64, first: f64, limit: f64) -> f64 {
    let (mut a, mut b) = (0.0f64, first);
    let (mut fa, mut fb) = (g(a), g(b));
    while fb < 0.0 {
        a = b;
        fa = fb;
        b *= 2.0;
        if b > limit {
            return f64::INFINITY;
        }
        fb = g(b);
    }
    let mut side = 0i8;
    for _ in 0..100 {
        let x = (a * fb - b * fa) / (fb - fa);
        let fx = g(x);
        if fx.abs() < 1e-12 || (b - a) <= 1e-12 * b {
            return x;
        }
        if fx < 0.0 {
            a = x;
            fa = fx;
            if side == -1 {
                fb /= 2.0;
            }
            side = -1;
        } else {
            b = x;
            fb = fx;
            if side == 1 {
                fa /= 2.0;
            }
            side = 1;
        }
        if (b - a) <= 1e-12 * b {
            break;
        }
    }
    0.5 * (a + b)
}

/// The smallest share of runs that deviate from an every-run value which
/// `n` runs reveal (at least one deviating run) with 80 % power:
/// `1 − 0.2^(1/n)`.
pub fn detectable_share(n: usize) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    1.0 - (1.0 - POWER).powf(1.0 / n as f64)
}

/// A z test of two proportions: the difference a − b, the pooled z and its
/// p-value (statsmodels' `proportions_ztest([ka, kb], [na, nb])`), and the
/// unpooled Wald 95 % interval of the difference (statsmodels'
/// `confint_proportions_2indep(..., compare="diff", method="wald")`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ZTest {
    pub estimate: f64,
    pub se: f64,
    pub z: f64,
    pub p: f64,
    pub ci: (f64, f64),
}

/// [`ZTest`] of ka/na − kb/nb.
pub fn two_proportion_z(ka: usize, na: usize, kb: usize, nb: usize) -> ZTest {
    let (ka, na, kb, nb) = (ka as f64, na as f64, kb as f64, nb as f64);
    let (pa, pb) = (ka / na, kb / nb);
    let pooled = (ka + kb) / (na + nb);
    let se0 = (pooled * (1.0 - pooled) * (1.0 / na + 1.0 / nb)).sqrt();
    let d = pa - pb;
    let (z, p) = if se0 == 0.0 {
        (f64::NAN, if d == 0.0 { 1.0 } else { 0.0 })
    } else {
        (d / se0, normal_sf2(d / se0))
    };
    let se = (pa * (1.0 - pa) / na + pb * (1.0 - pb) / nb).sqrt();
    ZTest {
        estimate: d,
        se,
        z,
        p,
        ci: (d - Z975 * se, d + Z975 * se),
    }
}

/// The cluster-robust difference of two rates: the estimate, its
/// cluster-robust standard error, t, the degrees of freedom of its t
/// reference (G − 1), two-sided p, 95 % interval and the clusters in each
/// group.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClusterTest {
    pub estimate: f64,
    pub se: f64,
    pub t: f64,
    pub df: f64,
    pub p: f64,
    pub ci: (f64, f64),
    pub clusters_a: usize,
    pub clusters_b: usize,
}

/// The difference of two rates a − b with a cluster-robust standard error:
/// the slope of `y ~ 1 + [group = a]` by least squares with statsmodels'
/// cluster sandwich (`cov_type="cluster"`, correction `G/(G−1)·(N−1)/(N−K)`,
/// K = 2, G = the clusters of both groups; a cluster must lie in one group),
/// and, as statsmodels does with `use_t=True`, a t reference with G − 1
/// degrees of freedom for p and the 95 % interval (with few clusters the
/// normal reference rejects far too often: 4 clusters a side give p 0.050
/// where t with 3 df gives 0.145). `a` and `b` are (cluster, outcome) pairs;
/// clusters are compared by value.
pub fn cluster_robust_diff(a: &[(String, bool)], b: &[(String, bool)]) -> ClusterTest {
    use std::collections::BTreeMap;
    let rate = |xs: &[(String, bool)]| xs.iter().filter(|x| x.1).count() as f64 / xs.len() as f64;
    let (pa, pb) = (rate(a), rate(b));
    let d = pa - pb;
    // Least squares with a dummy: the residuals are y − p_group, and the
    // slope's influence is 1/na on a and −1/nb on b; summed per cluster.
    let mut score: BTreeMap<(u8, &str), f64> = BTreeMap::new();
    for (c, y) in a {
        *score.entry((0, c.as_str())).or_default() +=
            (f64::from(u8::from(*y)) - pa) / a.len() as f64;
    }
    for (c, y) in b {
        *score.entry((1, c.as_str())).or_default() -=
            (f64::from(u8::from(*y)) - pb) / b.len() as f64;
    }
    let clusters_a = score.keys().filter(|k| k.0 == 0).count();
    let clusters_b = score.len() - clusters_a;
    let g = score.len() as f64;
    let n = (a.len() + b.len()) as f64;
    let corr = g / (g - 1.0) * (n - 1.0) / (n - 2.0);
    let var = corr * score.values().map(|s| s * s).sum::<f64>();
    let se = var.sqrt();
    let df = g - 1.0;
    let (t, p, ci) = if se == 0.0 || se.is_nan() || df < 1.0 {
        (
            f64::NAN,
            if se == 0.0 && d == 0.0 {
                1.0
            } else if se == 0.0 {
                0.0
            } else {
                f64::NAN
            },
            (d, d),
        )
    } else {
        let half = t_quantile(0.975, df) * se;
        (d / se, t_sf2(d / se, df), (d - half, d + half))
    };
    ClusterTest {
        estimate: d,
        se,
        t,
        df,
        p,
        ci,
        clusters_a,
        clusters_b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_of_textbook_tables() {
        assert!(t_quantile(0.4, 4.0).is_nan());
        assert!((t_quantile(0.975, 4.0) - 2.776_445_105_197_793).abs() < 1e-12);
        assert!((t_quantile(0.975, 1.0) - 12.706_204_736_174_7).abs() < 1e-9);
        assert!((t_sf2(2.776_445_105_197_793, 4.0) - 0.05).abs() < 1e-13);
    }

    #[test]
    fn holm_is_monotone_and_capped() {
        let p = [0.01, 0.04, 0.03, f64::NAN, 0.5];
        let h = holm(&p);
        assert!((h[0] - 0.04).abs() < 1e-15);
        assert!((h[2] - 0.09).abs() < 1e-15);
        assert!((h[1] - 0.09).abs() < 1e-15);
        assert!(h[3].is_nan());
        assert!((h[4] - 0.5).abs() < 1e-15);
    }

    #[test]
    fn exact_estimates_have_p_one_or_zero() {
        let a = Summary {
            mean: 30.0,
            sd: 0.0,
            n: 5,
        };
        assert_eq!(welch(&a, &a).p, 1.0);
        let b = Summary {
            mean: 25.0,
            sd: 0.0,
            n: 5,
        };
        assert_eq!(welch(&b, &a).p, 0.0);
    }
}
