//! Fitting the paper's price per token `c(S) = k · S^α` to measured joules
//! per generated token (`joule calibrate`): least squares on
//! `ln j = ln k + α · ln S` over the models measured, and the fit's error
//! as the relative error of `k · S^α` against each measurement.

use serde::Serialize;

/// A fitted `k` and `α`, with the fit's relative errors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// Joules per generated token of a 1-B-parameter model.
    pub k: f64,
    pub alpha: f64,
    /// Whether α was fitted (false: fewer than two distinct sizes, α held fixed).
    pub alpha_fitted: bool,
    /// Root mean square of `k·S^α / j − 1` over the points.
    pub rms_rel_error: f64,
    /// Largest `|k·S^α / j − 1|`.
    pub max_rel_error: f64,
    pub points: usize,
}

/// Fit `j = k · S^α` to `(S, j)` points (sizes in billions of parameters,
/// joules per token; both > 0). With fewer than two distinct sizes, α is held
/// at `alpha_fixed` and only k is fitted. `None` without a usable point.
pub fn fit_power_law(points: &[(f64, f64)], alpha_fixed: f64) -> Option<Fit> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&(s, j)| s > 0.0 && j > 0.0 && s.is_finite() && j.is_finite())
        .map(|(s, j)| (s.ln(), j.ln()))
        .collect();
    if pts.is_empty() {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let distinct = sxx > 1e-12;
    let alpha = if distinct {
        pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx
    } else {
        alpha_fixed
    };
    let ln_k = my - alpha * mx;
    let k = ln_k.exp();
    let rel: Vec<f64> = pts
        .iter()
        .map(|&(x, y)| (ln_k + alpha * x - y).exp() - 1.0)
        .collect();
    let rms = (rel.iter().map(|r| r * r).sum::<f64>() / n).sqrt();
    let max = rel.iter().map(|r| r.abs()).fold(0.0, f64::max);
    Some(Fit {
        k,
        alpha,
        alpha_fitted: distinct,
        rms_rel_error: rms,
        max_rel_error: max,
        points: pts.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_power_law_is_recovered() {
        let pts: Vec<(f64, f64)> = [0.135, 1.0, 4.0, 9.0]
            .iter()
            .map(|&s| (s, 0.02 * f64::powf(s, 0.7)))
            .collect();
        let f = fit_power_law(&pts, 0.5).unwrap();
        assert!(
            (f.k - 0.02).abs() < 1e-12 && (f.alpha - 0.7).abs() < 1e-12,
            "{f:?}"
        );
        assert!(f.alpha_fitted && f.rms_rel_error < 1e-12);
    }

    #[test]
    fn noisy_points_give_their_error_and_one_size_holds_alpha() {
        let f = fit_power_law(&[(1.0, 1.0), (4.0, 2.2), (4.0, 1.8)], 0.5).unwrap();
        assert!(f.alpha_fitted && f.max_rel_error > 0.05, "{f:?}");
        let one = fit_power_law(&[(2.0, 0.4), (2.0, 0.6)], 0.5).unwrap();
        assert!(!one.alpha_fitted && one.alpha == 0.5);
        // Geometric mean of 0.4 and 0.6 at S = 2: k = sqrt(0.24) / 2^0.5.
        assert!((one.k - (0.24f64).sqrt() / 2f64.sqrt()).abs() < 1e-12);
        assert!(fit_power_law(&[(0.0, 1.0), (1.0, f64::NAN)], 0.5).is_none());
    }
}
