//! The power of Welch's t test itself, and the difference a reproduction row detects with it.
//!
//! A row's estimate is normal with variance Σ vⱼ, the sum of independent components, each
//! estimated from its runs as vⱼ·Xⱼ/dfⱼ with Xⱼ ~ χ²(dfⱼ); the test divides by the estimated
//! standard error and compares with Student's t at the Welch–Satterthwaite degrees of
//! freedom of the *estimates*. Both the standard error and the degrees of freedom are random,
//! so the noncentral t at the row's observed df overstates the power at 5 runs a side (it
//! promises 80 % for a difference that simulated tables catch in 74–78 %). [`WelchPower`] integrates over the components' sampling distribution instead:
//!
//!   power(δ) = E[Φ((δ − c·ŝe)/σ) + Φ((−δ − c·ŝe)/σ)],  c = t(1 − α/2, d̂f),
//!
//! σ² = Σ vⱼ, the expectation over (X₁…Xₖ) on the product of each component's Gauss rule
//! for the χ² distribution, about 4,096 points in all (64 nodes a side for two components,
//! 16 for three, down to 4 for six). One component is the noncentral t exactly ([`super::t_power`]);
//! more than six fall back to the noncentral t at the Welch–Satterthwaite df.
//!
//! [`welch_detectable`] turns a row's *estimated* components into the difference it detects
//! with 80 % power: each variance is first taken at its median-unbiased value
//! vⱼ·dfⱼ/χ²₀.₅(dfⱼ) (a variance from 5 runs falls below the true one more often than not,
//! which alone makes a plug-in detectable difference optimistic where one component
//! dominates). Simulated against the reference runs' rows
//! (`tests/quick/reproduction_calibration.rs`), a true difference of the printed size is then
//! caught in at least 80 % of tables (87–92 %: with two like components the correction errs
//! on the safe side); correcting the sum as one (at the Welch df) comes closer to 80 % there
//! but falls below it, to about 78 %, with 3 runs against 5 or one side's sd three times the
//! other's.

use super::{detectable, increasing_root, ln_gamma, t_power, t_quantile, POWER};

/// Regularized lower incomplete gamma P(a, x): its series below a + 1, else one minus the
/// continued fraction of Q (Lentz), as in Numerical Recipes' `gser`/`gcf`.
fn gamma_p(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut ap, mut del) = (a, 1.0 / a);
        let mut sum = del;
        for _ in 0..10_000 {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        (sum * front).min(1.0)
    } else {
        const TINY: f64 = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (1.0 - front * h).max(0.0)
    }
}

/// The quantile q ∈ (0, 1) of χ² with `df` > 0 degrees of freedom (scipy's `chi2.ppf`), by
/// bisection on ln x; NaN outside that domain.
pub fn chi2_quantile(q: f64, df: f64) -> f64 {
    if !(q > 0.0 && q < 1.0) || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let cdf = |x: f64| gamma_p(df / 2.0, x / 2.0);
    let (mut lo, mut hi) = ((1e-300f64).ln(), (df + 20.0 + 10.0 * df.sqrt()).ln());
    while cdf(hi.exp()) < q {
        hi += std::f64::consts::LN_2;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid.exp()) < q {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-15 {
            break;
        }
    }
    (0.5 * (lo + hi)).exp()
}

/// The n-point Gauss rule of the χ²(df) distribution: nodes and weights (summing to 1) that
/// integrate x^j exactly for j < 2n. Golub–Welsch: the eigenvalues of the Jacobi matrix of
/// the generalized Laguerre weight x^a·e^(−x), a = df/2 − 1 (diagonal 2i + a + 1,
/// off-diagonal √(i(i + a))), by implicit QL, each weight the square of its eigenvector's
/// first component; χ² nodes are twice the Laguerre ones.
fn chi2_gauss_rule(n: usize, df: f64) -> Vec<(f64, f64)> {
    let a = df / 2.0 - 1.0;
    let mut d: Vec<f64> = (0..n).map(|i| 2.0 * i as f64 + a + 1.0).collect();
    let mut e: Vec<f64> = (0..n)
        .map(|i| {
            let k = (i + 1) as f64;
            if i + 1 < n {
                (k * (k + a)).sqrt()
            } else {
                0.0
            }
        })
        .collect();
    // The first row of the eigenvector matrix, rotated along with the QL steps.
    let mut z = vec![0.0; n];
    z[0] = 1.0;
    for l in 0..n {
        for _ in 0..100 {
            let mut m = l;
            while m + 1 < n {
                let dd = d[m].abs() + d[m + 1].abs();
                if e[m].abs() <= f64::EPSILON * dd {
                    break;
                }
                m += 1;
            }
            if m == l {
                break;
            }
            let mut g = (d[l + 1] - d[l]) / (2.0 * e[l]);
            let mut r = g.hypot(1.0);
            g = d[m] - d[l] + e[l] / (g + r.copysign(g));
            let (mut s, mut c, mut p) = (1.0, 1.0, 0.0);
            let mut deflated = false;
            let mut i = m;
            while i > l {
                i -= 1;
                let f = s * e[i];
                let b = c * e[i];
                r = f.hypot(g);
                e[i + 1] = r;
                if r == 0.0 {
                    d[i + 1] -= p;
                    e[m] = 0.0;
                    deflated = true;
                    break;
                }
                s = f / r;
                c = g / r;
                g = d[i + 1] - p;
                r = (d[i] - g) * s + 2.0 * c * b;
                p = s * r;
                d[i + 1] = g + p;
                g = c * r - b;
                let f = z[i + 1];
                z[i + 1] = s * z[i] + c * f;
                z[i] = c * z[i] - s * f;
            }
            if !deflated {
                d[l] -= p;
                e[l] = g;
                e[m] = 0.0;
            }
        }
    }
    d.iter().zip(&z).map(|(&x, &v)| (2.0 * x, v * v)).collect()
}

/// Most components integrated over on a grid; more fall back to the noncentral t.
const MOST_COMPONENTS: usize = 6;

/// Grid points per component for `k` components: about 4,096 points in all.
fn per_component(k: usize) -> usize {
    match k {
        0 | 1 => 1,
        2 => 64,
        3 => 16,
        4 => 8,
        5 => 5,
        _ => 4,
    }
}

/// The power function of a two-sided Welch–Satterthwaite t test at level α whose estimate's
/// variance has the true components (variance, degrees of freedom) it was made with: the
/// rejection threshold c·ŝe of every grid point, ready to be weighed against a difference.
#[derive(Debug, Clone)]
pub struct WelchPower {
    /// σ, the true standard error.
    sd: f64,
    /// One component: its degrees of freedom (the noncentral t is exact).
    single_df: Option<f64>,
    alpha: f64,
    /// Each grid point's weight (summing to 1) and threshold c·ŝe.
    grid: Vec<(f64, f64)>,
}

impl WelchPower {
    /// The power function for `components` (variances and their degrees of freedom; those of
    /// variance 0 drop out). None when no variance is left (the estimate is exact) or a
    /// component is not a finite variance with positive degrees of freedom.
    pub fn new(components: &[(f64, f64)], alpha: f64) -> Option<Self> {
        Self::with_grid(components, alpha, 1)
    }

    /// [`WelchPower::new`] on a grid `coarsen` times coarser a side (at least 4 nodes): for
    /// searches over many candidate designs.
    fn with_grid(components: &[(f64, f64)], alpha: f64, coarsen: usize) -> Option<Self> {
        if components
            .iter()
            .any(|&(v, df)| !(v.is_finite() && v >= 0.0 && df > 0.0))
        {
            return None;
        }
        let comps: Vec<(f64, f64)> = components.iter().copied().filter(|c| c.0 > 0.0).collect();
        let var: f64 = comps.iter().map(|c| c.0).sum();
        if comps.is_empty() || var == 0.0 {
            return None;
        }
        let sd = var.sqrt();
        let single_df = match comps.len() {
            1 => Some(comps[0].1),
            k if k > MOST_COMPONENTS => Some(welch_df(&comps)),
            _ => None,
        };
        let mut grid = Vec::new();
        if single_df.is_none() {
            let n = (per_component(comps.len()) / coarsen.max(1)).max(4);
            // The ratio X/df of each component at its Gauss nodes, with their weights.
            let rules: Vec<Vec<(f64, f64)>> = comps
                .iter()
                .map(|&(_, df)| {
                    chi2_gauss_rule(n, df)
                        .into_iter()
                        .map(|(x, w)| (x / df, w))
                        .collect()
                })
                .collect();
            let points = n.pow(comps.len() as u32);
            grid.reserve(points);
            let mut estimated = vec![(0.0, 0.0); comps.len()];
            for mut p in 0..points {
                let mut weight = 1.0;
                for (j, &(v, df)) in comps.iter().enumerate() {
                    let (ratio, w) = rules[j][p % n];
                    estimated[j] = (v * ratio, df);
                    weight *= w;
                    p /= n;
                }
                let se = estimated.iter().map(|c| c.0).sum::<f64>().sqrt();
                let c = t_quantile(1.0 - alpha / 2.0, welch_df(&estimated));
                grid.push((weight, c * se));
            }
        }
        Some(WelchPower {
            sd,
            single_df,
            alpha,
            grid,
        })
    }

    /// The probability of rejecting when the true difference is `delta`.
    pub fn at(&self, delta: f64) -> f64 {
        if let Some(df) = self.single_df {
            return t_power(delta / self.sd, df, self.alpha);
        }
        let phi = |y: f64| 0.5 * libm::erfc(-y / std::f64::consts::SQRT_2);
        let sum: f64 = self
            .grid
            .iter()
            .map(|&(w, t)| w * (phi((delta - t) / self.sd) + phi((-delta - t) / self.sd)))
            .sum();
        sum.clamp(0.0, 1.0)
    }

    /// The smallest difference rejected with 80 % power.
    pub fn detectable(&self) -> f64 {
        if let Some(df) = self.single_df {
            return detectable(self.sd, df, self.alpha);
        }
        let first = self.grid.iter().map(|g| g.1).fold(0.0, f64::max) + self.sd;
        increasing_root(|d| self.at(d) - POWER, first, first * 1e6)
    }
}

/// The Welch–Satterthwaite degrees of freedom (Σv)² / Σ(v²/df).
fn welch_df(comps: &[(f64, f64)]) -> f64 {
    let var: f64 = comps.iter().map(|c| c.0).sum();
    var * var / comps.iter().map(|(v, df)| v * v / df).sum::<f64>()
}

/// The power of the two-sided Welch–Satterthwaite t test at level `alpha` when the true
/// difference is `delta` and the true variance components are `components`; NaN when
/// [`WelchPower::new`] has none.
pub fn welch_power(delta: f64, components: &[(f64, f64)], alpha: f64) -> f64 {
    WelchPower::new(components, alpha).map_or(f64::NAN, |w| w.at(delta))
}

/// The difference a row whose *estimated* variance components are `estimated` detects with
/// 80 % power at level `alpha`: each variance taken at its median-unbiased value
/// vⱼ·dfⱼ/χ²₀.₅(dfⱼ), then [`WelchPower::detectable`]. 0 when every variance is 0 (any
/// difference is certain); NaN when a component is not a finite variance with positive
/// degrees of freedom.
pub fn welch_detectable(estimated: &[(f64, f64)], alpha: f64) -> f64 {
    detectable_on(estimated, alpha, 1)
}

/// [`welch_detectable`] on a grid half as fine a side (within half a percent of it): for
/// searches over many candidate designs, whose answer is then checked with the full grid.
pub fn welch_detectable_rough(estimated: &[(f64, f64)], alpha: f64) -> f64 {
    detectable_on(estimated, alpha, 2)
}

fn detectable_on(estimated: &[(f64, f64)], alpha: f64, coarsen: usize) -> f64 {
    if estimated.iter().all(|c| c.0 == 0.0) {
        return 0.0;
    }
    let unbiased: Vec<(f64, f64)> = estimated
        .iter()
        .map(|&(v, df)| (v * df / chi2_quantile(0.5, df), df))
        .collect();
    WelchPower::with_grid(&unbiased, alpha, coarsen).map_or(f64::NAN, |w| w.detectable())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn chi2_quantiles_of_scipy() {
        // scipy.stats.chi2.ppf
        for (q, df, want) in [
            (0.5, 4.0, 3.356_693_980_033_322),
            (0.95, 1.0, 3.841_458_820_694_124),
            (0.5, 2.0, 1.386_294_361_119_890_6),
            (0.0078125, 4.0, 0.261_055_267_124_648_55),
            (0.9921875, 9.0, 22.357_478_281_907_742),
            (0.5, 0.5, 0.087_347_604_705_746_8),
        ] {
            let got = chi2_quantile(q, df);
            assert!(
                (got / want - 1.0).abs() < 1e-9,
                "χ²({df}) at {q}: {got} vs {want}"
            );
        }
        assert!(chi2_quantile(0.0, 4.0).is_nan());
        assert!(chi2_quantile(0.5, 0.0).is_nan());
    }

    #[test]
    fn the_gauss_rules_hold_the_chi2_moments() {
        for (n, df) in [
            (4usize, 1.0f64),
            (5, 2.0),
            (8, 4.0),
            (16, 9.0),
            (64, 4.0),
            (64, 29.0),
        ] {
            let rule = chi2_gauss_rule(n, df);
            assert_eq!(rule.len(), n);
            // E[X^j] = df (df + 2) … (df + 2j − 2), exact for j < 2n (up to j = 6 here).
            let mut want = 1.0;
            for j in 0..(2 * n).min(7) {
                let got: f64 = rule.iter().map(|(x, w)| w * x.powi(j as i32)).sum();
                assert!(
                    (got / want - 1.0).abs() < 1e-9,
                    "χ²({df}), {n} nodes, moment {j}: {got} vs {want}"
                );
                want *= df + 2.0 * j as f64;
            }
            assert!(rule.iter().all(|&(x, w)| x > 0.0 && w > 0.0));
        }
    }

    /// The power by brute force: draws of every component's estimate (χ² as sums of squared
    /// normals) and of the estimate itself, the test as a report runs it.
    fn simulated_power(delta: f64, comps: &[(f64, usize)], alpha: f64, draws: usize) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut normal = || {
            let u1: f64 = 1.0 - rng.gen::<f64>();
            let u2: f64 = rng.gen::<f64>();
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        };
        let sd = comps.iter().map(|c| c.0).sum::<f64>().sqrt();
        let mut rejected = 0;
        for _ in 0..draws {
            let est: Vec<(f64, f64)> = comps
                .iter()
                .map(|&(v, df)| {
                    let x: f64 = (0..df).map(|_| normal().powi(2)).sum();
                    (v * x / df as f64, df as f64)
                })
                .collect();
            let t = super::super::welch_components(delta + sd * normal(), &est);
            if t.p < alpha {
                rejected += 1;
            }
        }
        rejected as f64 / draws as f64
    }

    #[test]
    fn the_grid_gives_the_power_of_the_test_as_run() {
        // Two, three and four components, balanced and not, at a Holm-sized level.
        for (comps, alpha) in [
            (vec![(0.2, 4), (0.2, 4)], 0.05 / 40.0),
            (vec![(0.1, 9), (1.8, 4)], 0.05 / 10.0),
            (vec![(0.3, 4), (0.2, 2), (0.5, 4)], 0.05),
            (vec![(0.2, 4), (0.2, 4), (0.1, 4), (0.3, 6)], 0.05 / 5.0),
            (
                vec![(0.1, 4), (0.1, 4), (0.2, 3), (0.1, 9), (0.3, 4), (0.05, 2)],
                0.05 / 20.0,
            ),
        ] {
            let true_comps: Vec<(f64, f64)> = comps.iter().map(|&(v, d)| (v, d as f64)).collect();
            let w = WelchPower::new(&true_comps, alpha).expect("components");
            let d80 = w.detectable();
            assert!((w.at(d80) - POWER).abs() < 1e-9);
            for delta in [0.5 * d80, d80] {
                let grid = w.at(delta);
                let sim = simulated_power(delta, &comps, alpha, 40_000);
                // 40,000 draws: a Monte Carlo sd of at most 0.0025.
                assert!(
                    (grid - sim).abs() < 0.008,
                    "{comps:?} at {delta}: grid {grid}, simulated {sim}"
                );
            }
        }
    }

    #[test]
    fn the_noncentral_t_at_the_observed_df_overstates_the_power() {
        // 5 runs a side, equal variances, α/m with m = 40: the noncentral t at the Welch df
        // promises 80 % at a difference Welch's test catches less often.
        let comps = [(0.2, 4.0), (0.2, 4.0)];
        let alpha = 0.05 / 40.0;
        let t = super::super::welch_components(0.0, &comps);
        let nct = detectable(t.se, t.df, alpha);
        let w = WelchPower::new(&comps, alpha).expect("components");
        assert!(w.at(nct) < 0.78, "{}", w.at(nct));
        assert!(w.detectable() > nct);
    }

    #[test]
    fn one_component_is_the_noncentral_t_and_exact_rows_detect_anything() {
        let alpha = 0.05 / 3.0;
        // One component: its own median-unbiased variance.
        let d = welch_detectable(&[(0.25, 4.0)], alpha);
        let unbiased = 0.25 * 4.0 / chi2_quantile(0.5, 4.0);
        assert!((d - detectable(unbiased.sqrt(), 4.0, alpha)).abs() < 1e-12);
        assert_eq!(welch_detectable(&[(0.0, 4.0), (0.0, 2.0)], alpha), 0.0);
        // A zero-variance component drops out.
        assert!((welch_detectable(&[(0.25, 4.0), (0.0, 2.0)], alpha) - d).abs() < 1e-12);
        assert!(welch_detectable(&[(f64::NAN, 4.0)], alpha).is_nan());
        assert!(welch_power(1.0, &[(0.25, 0.0)], alpha).is_nan());
    }

    #[test]
    fn the_rough_grid_is_within_half_a_percent() {
        for comps in [
            vec![(0.2, 4.0), (0.2, 4.0)],
            vec![(0.1, 9.0), (1.8, 4.0)],
            vec![(0.5, 2.0), (0.05, 4.0)],
            vec![(0.3, 4.0), (0.2, 2.0), (0.5, 4.0)],
        ] {
            for alpha in [0.05, 0.05 / 40.0] {
                let (full, rough) = (
                    welch_detectable(&comps, alpha),
                    welch_detectable_rough(&comps, alpha),
                );
                assert!(
                    (rough / full - 1.0).abs() < 0.005,
                    "{comps:?} at {alpha}: {rough} vs {full}"
                );
            }
        }
    }

    #[test]
    fn many_components_fall_back_to_the_noncentral_t() {
        let comps = vec![(0.1, 4.0); MOST_COMPONENTS + 1];
        let t = super::super::welch_components(0.0, &comps);
        let w = WelchPower::new(&comps, 0.05).expect("components");
        assert!((w.detectable() - detectable(t.se, t.df, 0.05)).abs() < 1e-12);
    }
}
