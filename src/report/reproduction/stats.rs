//! The statistics of the reproduction tables, written out so that each can be
//! checked against scipy/statsmodels (`scripts/gen_reproduction_stats.py`
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
//!   `multipletests(method="holm")`);
//! - two-proportion z tests ([`two_proportion_z`], statsmodels'
//!   `proportions_ztest`) and the cluster-robust difference of two rates
//!   ([`cluster_robust_diff`], statsmodels' `OLS(y, [1, group]).fit(
//!   cov_type="cluster")` with its small-sample correction);
//! - the deterministic percentile bootstrap of a mean or of a difference of
//!   means over runs ([`Bootstrap`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

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

/// The quantile q ∈ (0.5, 1) of Student's t with `df` degrees of freedom
/// (bisection to the last bit on the two-sided tail).
pub fn t_quantile(q: f64, df: f64) -> f64 {
    assert!(q > 0.5 && q < 1.0, "t_quantile takes q in (0.5, 1)");
    let target = 2.0 * (1.0 - q);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while t_sf2(hi, df) > target {
        hi *= 2.0;
        if hi > 1e300 {
            return f64::INFINITY;
        }
    }
    for _ in 0..2000 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if t_sf2(mid, df) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Two-sided normal tail P(|Z| ≥ |z|).
pub fn normal_sf2(z: f64) -> f64 {
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
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

/// The difference of two rates a − b with a cluster-robust standard error:
/// the slope of `y ~ 1 + [group = a]` by least squares with statsmodels'
/// cluster sandwich (`cov_type="cluster"`, correction `G/(G−1)·(N−1)/(N−K)`,
/// K = 2, G = the clusters of both groups; a cluster must lie in one group),
/// and the normal p-value and 95 % interval statsmodels reports with it.
/// `a` and `b` are (cluster, outcome) pairs; clusters are compared by value.
pub fn cluster_robust_diff(a: &[(String, bool)], b: &[(String, bool)]) -> ZTest {
    use std::collections::BTreeMap;
    let rate = |xs: &[(String, bool)]| xs.iter().filter(|x| x.1).count() as f64 / xs.len() as f64;
    let (pa, pb) = (rate(a), rate(b));
    let d = pa - pb;
    // Least squares with a dummy: the residuals are y − p_group. The slope's
    // row of (X'X)^-1 X' is (x − x̄-free form): for a dummy regression,
    // slope influence = (1/na) on a and −(1/nb) on b; sum per cluster.
    let mut score: BTreeMap<(u8, &str), f64> = BTreeMap::new();
    for (c, y) in a {
        *score.entry((0, c.as_str())).or_default() +=
            (f64::from(u8::from(*y)) - pa) / a.len() as f64;
    }
    for (c, y) in b {
        *score.entry((1, c.as_str())).or_default() -=
            (f64::from(u8::from(*y)) - pb) / b.len() as f64;
    }
    let g = score.len() as f64;
    let n = (a.len() + b.len()) as f64;
    let corr = g / (g - 1.0) * (n - 1.0) / (n - 2.0);
    let var = corr * score.values().map(|s| s * s).sum::<f64>();
    let se = var.sqrt();
    let (z, p) = if se == 0.0 {
        (f64::NAN, if d == 0.0 { 1.0 } else { 0.0 })
    } else {
        (d / se, normal_sf2(d / se))
    };
    ZTest {
        estimate: d,
        se,
        z,
        p,
        ci: (d - Z975 * se, d + Z975 * se),
    }
}

/// The deterministic percentile bootstrap over runs: `resamples` draws with
/// replacement from a ChaCha20 stream seeded with `seed` and the comparison's
/// key, so each row is reproducible on its own and independent of the
/// table's order.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Bootstrap {
    pub seed: u64,
    pub resamples: usize,
}

/// The bootstrap distribution of a statistic, sorted, with the 95 %
/// percentile interval (numpy's linear quantiles at 0.025 and 0.975).
#[derive(Debug, Clone)]
pub struct Distribution {
    pub sorted: Vec<f64>,
}

impl Distribution {
    fn new(mut xs: Vec<f64>) -> Self {
        xs.sort_by(|a, b| a.total_cmp(b));
        Distribution { sorted: xs }
    }

    /// numpy's default (linear) quantile.
    pub fn quantile(&self, q: f64) -> f64 {
        let n = self.sorted.len();
        if n == 0 {
            return f64::NAN;
        }
        let h = (n - 1) as f64 * q;
        let lo = h.floor() as usize;
        let hi = (lo + 1).min(n - 1);
        self.sorted[lo] + (h - lo as f64) * (self.sorted[hi] - self.sorted[lo])
    }

    /// The 95 % percentile interval.
    pub fn ci95(&self) -> (f64, f64) {
        (self.quantile(0.025), self.quantile(0.975))
    }

    /// The two-sided bootstrap p-value of "the statistic lies in [lo, hi]":
    /// `min(1, 2·min((1 + #{θ* ≤ hi}) / (B + 1), (1 + #{θ* ≥ lo}) / (B + 1)))`.
    /// It is below 0.05 exactly when the 95 % percentile interval misses
    /// [lo, hi] (up to the +1 of the finite-sample correction).
    pub fn p_interval(&self, lo: f64, hi: f64) -> f64 {
        let b = self.sorted.len() as f64;
        let below = self.sorted.partition_point(|x| *x <= hi) as f64;
        let above = (self.sorted.len() - self.sorted.partition_point(|x| *x < lo)) as f64;
        (2.0 * ((1.0 + below) / (b + 1.0)).min((1.0 + above) / (b + 1.0))).min(1.0)
    }
}

fn key_seed(seed: u64, key: &str) -> u64 {
    // FNV-1a of the key, mixed with the seed.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ seed.rotate_left(17)
}

fn resample_mean(rng: &mut ChaCha20Rng, xs: &[f64]) -> f64 {
    let n = xs.len();
    let mut s = 0.0;
    for _ in 0..n {
        s += xs[rng.gen_range(0..n)];
    }
    s / n as f64
}

impl Bootstrap {
    /// The bootstrap distribution of the mean of `xs` (n ≥ 1).
    pub fn mean(&self, key: &str, xs: &[f64]) -> Distribution {
        let mut rng = ChaCha20Rng::seed_from_u64(key_seed(self.seed, key));
        Distribution::new(
            (0..self.resamples)
                .map(|_| resample_mean(&mut rng, xs))
                .collect(),
        )
    }

    /// The bootstrap distribution of mean(a) − mean(b), each resampled on its
    /// own (independent samples of runs).
    pub fn diff(&self, key: &str, a: &[f64], b: &[f64]) -> Distribution {
        let mut rng = ChaCha20Rng::seed_from_u64(key_seed(self.seed, key));
        Distribution::new(
            (0..self.resamples)
                .map(|_| resample_mean(&mut rng, a) - resample_mean(&mut rng, b))
                .collect(),
        )
    }

    /// The bootstrap distribution of Σ wᵢ·mean(sampleᵢ), each sample resampled
    /// on its own: a contrast of independent conditions.
    pub fn contrast(&self, key: &str, parts: &[(f64, &[f64])]) -> Distribution {
        let mut rng = ChaCha20Rng::seed_from_u64(key_seed(self.seed, key));
        Distribution::new(
            (0..self.resamples)
                .map(|_| {
                    parts
                        .iter()
                        .map(|(w, xs)| w * resample_mean(&mut rng, xs))
                        .sum()
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_of_textbook_tables() {
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

    #[test]
    fn bootstrap_is_deterministic_and_keyed() {
        let b = Bootstrap {
            seed: 7,
            resamples: 999,
        };
        let xs = [1.0, 2.0, 3.0, 4.0, 10.0];
        let d1 = b.mean("k", &xs);
        let d2 = b.mean("k", &xs);
        assert_eq!(d1.sorted, d2.sorted);
        assert_ne!(d1.sorted, b.mean("other", &xs).sorted);
        // A constant sample: the interval is the point, p = 1 at it, tiny elsewhere.
        let c = b.mean("c", &[30.0; 5]);
        assert_eq!(c.ci95(), (30.0, 30.0));
        assert_eq!(c.p_interval(30.0, 30.0), 1.0);
        assert!(c.p_interval(31.0, 31.0) < 0.01);
        // Identical samples: the difference is centred on 0.
        assert!(b.diff("d", &xs, &xs).p_interval(0.0, 0.0) > 0.5);
    }
}
