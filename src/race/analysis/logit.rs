//! Cluster-robust logistic regression (spec §8): the six nested
//! specifications of the paper's Table 1 over a [`Decision`] sample, fitted
//! by Newton–Raphson to the maximum-likelihood estimate, with the
//! cluster-robust sandwich covariance exactly as statsmodels computes it for
//! `Logit(...).fit(cov_type="cluster")`: `H⁻¹ (Σ_g s_g s_gᵀ) H⁻¹ ·
//! G/(G−1) · (N−1)/(N−K)`, z = coef/SE, two-sided normal p-values. Terms are
//! named as patsy names them (`C(max_private_risk)[T.0.6]`,
//! `own_prev_unsafe:opponent_prev_unsafe`), categorical controls use
//! treatment coding against the first level in sorted order, and the fit is
//! refused with fewer than two clusters.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::stats::normal_sf2;

/// One decision in round ≥ 2 with everything a specification may use.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub unsafe_: bool,
    pub p_max: f64,
    pub own_prev_unsafe: bool,
    pub opponent_prev_unsafe: bool,
    pub progress_gap_before: f64,
    pub first_round_unsafe: bool,
    /// The cluster the standard errors are clustered on (CRN block or pair).
    pub cluster: String,
    /// Categorical controls by name (`model`, `sex`, ...).
    pub categorical: BTreeMap<String, String>,
    /// Numeric controls by name (`age_c`, ...).
    pub numeric: BTreeMap<String, f64>,
}

/// A control added to every specification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Control {
    /// `C(name)`: one dummy per level after the first (sorted).
    Categorical(String),
    /// A numeric column entered as is.
    Numeric(String),
}

impl Control {
    pub fn formula(&self) -> String {
        match self {
            Control::Categorical(n) => format!("C({n})"),
            Control::Numeric(n) => n.clone(),
        }
    }
}

/// The base variables of the dynamic terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Own,
    Opp,
    Gap,
    First,
}

impl Var {
    fn name(self) -> &'static str {
        match self {
            Var::Own => "own_prev_unsafe",
            Var::Opp => "opponent_prev_unsafe",
            Var::Gap => "progress_gap_before",
            Var::First => "first_round_unsafe",
        }
    }
    fn value(self, d: &Decision) -> f64 {
        match self {
            Var::Own => d.own_prev_unsafe as u8 as f64,
            Var::Opp => d.opponent_prev_unsafe as u8 as f64,
            Var::Gap => d.progress_gap_before,
            Var::First => d.first_round_unsafe as u8 as f64,
        }
    }
}

/// The six nested specifications (spec §8, the paper's Table 1): the
/// dynamic terms each adds to the risk dummies.
pub fn specification_terms(spec: usize) -> Vec<Vec<&'static str>> {
    use Var::*;
    let additive = vec![vec![Own], vec![Opp], vec![Gap]];
    let full = vec![
        vec![Own],
        vec![Opp],
        vec![Gap],
        vec![Own, Opp],
        vec![Own, Gap],
        vec![Opp, Gap],
        vec![Own, Opp, Gap],
    ];
    let terms: Vec<Vec<Var>> = match spec {
        1 => vec![],
        2 => additive,
        3 => full,
        4 => vec![vec![First]],
        5 => std::iter::once(vec![First]).chain(additive).collect(),
        6 => std::iter::once(vec![First]).chain(full).collect(),
        _ => vec![],
    };
    terms
        .into_iter()
        .map(|t| t.into_iter().map(Var::name).collect())
        .collect()
}

fn var_of(name: &str) -> Var {
    match name {
        "own_prev_unsafe" => Var::Own,
        "opponent_prev_unsafe" => Var::Opp,
        "progress_gap_before" => Var::Gap,
        _ => Var::First,
    }
}

/// The formula of a specification with its controls, as patsy would read it.
pub fn formula(spec: usize, controls: &[Control]) -> String {
    let mut f = "unsafe ~ C(max_private_risk)".to_string();
    match spec {
        2 => f.push_str(" + own_prev_unsafe + opponent_prev_unsafe + progress_gap_before"),
        3 => f.push_str(" + own_prev_unsafe * opponent_prev_unsafe * progress_gap_before"),
        4 => f.push_str(" + first_round_unsafe"),
        5 => f.push_str(
            " + first_round_unsafe + own_prev_unsafe + opponent_prev_unsafe + progress_gap_before",
        ),
        6 => f.push_str(
            " + first_round_unsafe + own_prev_unsafe * opponent_prev_unsafe * progress_gap_before",
        ),
        _ => {}
    }
    for c in controls {
        f.push_str(" + ");
        f.push_str(&c.formula());
    }
    f
}

/// One fitted coefficient.
#[derive(Debug, Clone, Serialize)]
pub struct Coef {
    pub term: String,
    pub coef: f64,
    pub se: f64,
    pub z: f64,
    pub p: f64,
}

/// One fitted specification.
#[derive(Debug, Clone, Serialize)]
pub struct Fit {
    pub specification: usize,
    pub formula: String,
    pub nobs: usize,
    pub n_clusters: usize,
    pub log_likelihood: f64,
    pub iterations: usize,
    pub coefs: Vec<Coef>,
}

impl Fit {
    pub fn get(&self, term: &str) -> Option<&Coef> {
        self.coefs.iter().find(|c| c.term == term)
    }
}

/// Python's `repr` of a risk level as patsy prints it in a term name.
fn level_name(p: f64) -> String {
    let s = format!("{p}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

/// Build the design matrix of one specification: column names and rows.
fn design(
    data: &[Decision],
    spec: usize,
    controls: &[Control],
) -> anyhow::Result<(Vec<String>, Vec<Vec<f64>>)> {
    let mut risks: Vec<f64> = data.iter().map(|d| d.p_max).collect();
    risks.sort_by(|a, b| a.total_cmp(b));
    risks.dedup_by(|a, b| (*a - *b).abs() < 1e-12);
    let mut names = vec!["Intercept".to_string()];
    for r in risks.iter().skip(1) {
        names.push(format!("C(max_private_risk)[T.{}]", level_name(*r)));
    }
    let terms = specification_terms(spec);
    for t in &terms {
        names.push(t.join(":"));
    }
    let mut levels: Vec<Vec<String>> = Vec::new();
    for c in controls {
        match c {
            Control::Categorical(n) => {
                let mut lv = BTreeSet::new();
                for (i, d) in data.iter().enumerate() {
                    let v = d.categorical.get(n).ok_or_else(|| {
                        anyhow::anyhow!("decision {i} has no value for the control `{n}`")
                    })?;
                    lv.insert(v.clone());
                }
                let lv: Vec<String> = lv.into_iter().collect();
                for l in lv.iter().skip(1) {
                    names.push(format!("C({n})[T.{l}]"));
                }
                levels.push(lv);
            }
            Control::Numeric(n) => {
                names.push(n.clone());
                levels.push(Vec::new());
            }
        }
    }
    let mut rows = Vec::with_capacity(data.len());
    for (i, d) in data.iter().enumerate() {
        let mut row = Vec::with_capacity(names.len());
        row.push(1.0);
        for r in risks.iter().skip(1) {
            row.push(((d.p_max - r).abs() < 1e-12) as u8 as f64);
        }
        for t in &terms {
            row.push(t.iter().map(|v| var_of(v).value(d)).product());
        }
        for (c, lv) in controls.iter().zip(&levels) {
            match c {
                Control::Categorical(n) => {
                    let v = &d.categorical[n];
                    for l in lv.iter().skip(1) {
                        row.push((v == l) as u8 as f64);
                    }
                }
                Control::Numeric(n) => {
                    let v = *d.numeric.get(n).ok_or_else(|| {
                        anyhow::anyhow!("decision {i} has no value for the control `{n}`")
                    })?;
                    anyhow::ensure!(v.is_finite(), "decision {i}: control `{n}` is {v}");
                    row.push(v);
                }
            }
        }
        anyhow::ensure!(
            row.iter().all(|x| x.is_finite()),
            "decision {i} has a non-finite covariate"
        );
        rows.push(row);
    }
    Ok((names, rows))
}

/// Invert a symmetric positive-definite matrix (Gauss–Jordan with partial
/// pivoting); `None` when it is singular.
fn invert(m: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let k = m.len();
    let mut a: Vec<Vec<f64>> = m
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut r = r.clone();
            r.extend((0..k).map(|j| (i == j) as u8 as f64));
            r
        })
        .collect();
    let scale = m
        .iter()
        .flat_map(|r| r.iter())
        .fold(0.0f64, |s, x| s.max(x.abs()))
        .max(1e-300);
    for col in 0..k {
        let piv = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 * scale {
            return None;
        }
        a.swap(col, piv);
        let d = a[col][col];
        for x in a[col].iter_mut() {
            *x /= d;
        }
        for r in 0..k {
            if r != col {
                let f = a[r][col];
                if f != 0.0 {
                    for c in 0..2 * k {
                        a[r][c] -= f * a[col][c];
                    }
                }
            }
        }
    }
    Some(a.into_iter().map(|r| r[k..].to_vec()).collect())
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Fit one specification by Newton–Raphson with cluster-robust SEs.
pub fn fit(data: &[Decision], spec: usize, controls: &[Control]) -> anyhow::Result<Fit> {
    anyhow::ensure!((1..=6).contains(&spec), "specification {spec} is not 1..6");
    anyhow::ensure!(!data.is_empty(), "no decisions to fit");
    let clusters: BTreeSet<&str> = data.iter().map(|d| d.cluster.as_str()).collect();
    anyhow::ensure!(
        clusters.len() >= 2,
        "clustered logit refused: {} cluster(s); cluster-robust standard errors need at least 2",
        clusters.len()
    );
    let n_unsafe = data.iter().filter(|d| d.unsafe_).count();
    anyhow::ensure!(
        n_unsafe > 0 && n_unsafe < data.len(),
        "clustered logit needs both Safe and Unsafe outcomes ({n_unsafe} of {} Unsafe)",
        data.len()
    );
    let (names, x) = design(data, spec, controls)?;
    let (n, k) = (x.len(), names.len());
    anyhow::ensure!(n > k, "{n} decisions for {k} coefficients");
    let y: Vec<f64> = data.iter().map(|d| d.unsafe_ as u8 as f64).collect();
    let mut beta = vec![0.0; k];
    let loglik = |beta: &[f64]| -> f64 {
        x.iter()
            .zip(&y)
            .map(|(r, &yi)| {
                let eta: f64 = r.iter().zip(beta).map(|(a, b)| a * b).sum();
                // log σ(η) = −log(1+e^−η); stable form.
                let l1p = |t: f64| {
                    if t > 0.0 {
                        t + (-t).exp().ln_1p()
                    } else {
                        t.exp().ln_1p()
                    }
                };
                yi * -l1p(-eta) + (1.0 - yi) * -l1p(eta)
            })
            .sum()
    };
    let info = |beta: &[f64]| -> (Vec<f64>, Vec<Vec<f64>>) {
        let mut g = vec![0.0; k];
        let mut h = vec![vec![0.0; k]; k];
        for (r, &yi) in x.iter().zip(&y) {
            let eta: f64 = r.iter().zip(beta).map(|(a, b)| a * b).sum();
            let p = sigmoid(eta);
            let w = p * (1.0 - p);
            for a in 0..k {
                g[a] += r[a] * (yi - p);
                for b in 0..=a {
                    h[a][b] += w * r[a] * r[b];
                }
            }
        }
        for a in 0..k {
            for b in 0..a {
                h[b][a] = h[a][b];
            }
        }
        (g, h)
    };
    let mut ll = loglik(&beta);
    let mut iterations = 0;
    let mut converged = false;
    for it in 0..200 {
        iterations = it + 1;
        let (g, h) = info(&beta);
        let Some(hinv) = invert(&h) else {
            if let Some((i, b)) = beta.iter().enumerate().find(|(_, b)| b.abs() > 10.0) {
                anyhow::bail!(
                    "specification {spec}: coefficient `{}` reached {b:.1} (perfect or quasi-separation); \
                     the maximum-likelihood estimate does not exist",
                    names[i]
                );
            }
            anyhow::bail!(
                "specification {spec}: the information matrix is singular (collinear terms among {})",
                names.join(", ")
            );
        };
        let step: Vec<f64> = (0..k)
            .map(|a| (0..k).map(|b| hinv[a][b] * g[b]).sum())
            .collect();
        let mut t = 1.0;
        let mut next: Vec<f64>;
        let mut ll_next;
        loop {
            next = beta.iter().zip(&step).map(|(b, s)| b + t * s).collect();
            ll_next = loglik(&next);
            if ll_next >= ll - 1e-12 * ll.abs().max(1.0) || t < 1e-8 {
                break;
            }
            t *= 0.5;
        }
        let max_step = step.iter().fold(0.0f64, |m, s| m.max((t * s).abs()));
        beta = next;
        ll = ll_next;
        if let Some((i, b)) = beta.iter().enumerate().find(|(_, b)| b.abs() > 25.0) {
            anyhow::bail!(
                "specification {spec}: coefficient `{}` reached {b:.1} (perfect or quasi-separation); \
                 the maximum-likelihood estimate does not exist",
                names[i]
            );
        }
        if max_step < 1e-12 {
            converged = true;
            break;
        }
    }
    anyhow::ensure!(
        converged,
        "specification {spec}: Newton–Raphson did not converge in {iterations} iterations"
    );
    let (_, h) = info(&beta);
    let hinv = invert(&h).ok_or_else(|| anyhow::anyhow!("singular information matrix"))?;
    // Per-cluster score sums.
    let mut sums: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for ((r, &yi), d) in x.iter().zip(&y).zip(data) {
        let eta: f64 = r.iter().zip(&beta).map(|(a, b)| a * b).sum();
        let resid = yi - sigmoid(eta);
        let s = sums
            .entry(d.cluster.as_str())
            .or_insert_with(|| vec![0.0; k]);
        for a in 0..k {
            s[a] += r[a] * resid;
        }
    }
    let mut meat = vec![vec![0.0; k]; k];
    for s in sums.values() {
        for a in 0..k {
            for b in 0..k {
                meat[a][b] += s[a] * s[b];
            }
        }
    }
    let g = sums.len() as f64;
    let corr = g / (g - 1.0) * (n as f64 - 1.0) / (n as f64 - k as f64);
    let mut coefs = Vec::with_capacity(k);
    for a in 0..k {
        let mut v = 0.0;
        for i in 0..k {
            for j in 0..k {
                v += hinv[a][i] * meat[i][j] * hinv[j][a];
            }
        }
        let se = (v * corr).sqrt();
        let z = beta[a] / se;
        coefs.push(Coef {
            term: names[a].clone(),
            coef: beta[a],
            se,
            z,
            p: normal_sf2(z),
        });
    }
    Ok(Fit {
        specification: spec,
        formula: formula(spec, controls),
        nobs: n,
        n_clusters: sums.len(),
        log_likelihood: ll,
        iterations,
        coefs,
    })
}

/// All six specifications; a specification that cannot be fitted gives its reason.
pub fn fit_all(data: &[Decision], controls: &[Control]) -> Vec<Result<Fit, String>> {
    (1..=6)
        .map(|s| fit(data, s, controls).map_err(|e| format!("{e:#}")))
        .collect()
}

/// The terms shown in the report, in table order.
pub const REPORT_TERMS: [&str; 11] = [
    "Intercept",
    "C(max_private_risk)[T.0.6]",
    "C(max_private_risk)[T.0.9]",
    "first_round_unsafe",
    "own_prev_unsafe",
    "opponent_prev_unsafe",
    "progress_gap_before",
    "own_prev_unsafe:opponent_prev_unsafe",
    "own_prev_unsafe:progress_gap_before",
    "opponent_prev_unsafe:progress_gap_before",
    "own_prev_unsafe:opponent_prev_unsafe:progress_gap_before",
];

/// The fits as CSV rows: `sample,specification,term,coef,se,z,p,nobs,n_clusters,log_likelihood,note`
/// (`note`: why a specification was not fitted; its other fields are then empty).
pub fn csv_rows(sample: &str, fits: &[Result<Fit, String>]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, f) in fits.iter().enumerate() {
        match f {
            Ok(f) => {
                for c in &f.coefs {
                    out.push(format!(
                        "{sample},{},\"{}\",{},{},{},{},{},{},{},",
                        f.specification,
                        c.term,
                        c.coef,
                        c.se,
                        c.z,
                        c.p,
                        f.nobs,
                        f.n_clusters,
                        f.log_likelihood
                    ));
                }
            }
            // A specification that was not fitted: one row, its reason in
            // `note`, every number empty.
            Err(e) => out.push(format!(
                "{sample},{},,,,,,,,,\"not fitted: {}\"",
                i + 1,
                e.replace('"', "'")
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(u: bool, p: f64, own: bool, opp: bool, gap: f64, c: &str) -> Decision {
        Decision {
            unsafe_: u,
            p_max: p,
            own_prev_unsafe: own,
            opponent_prev_unsafe: opp,
            progress_gap_before: gap,
            first_round_unsafe: own,
            cluster: c.into(),
            categorical: BTreeMap::new(),
            numeric: BTreeMap::new(),
        }
    }

    #[test]
    fn one_cluster_is_refused_and_separation_is_named() {
        let d: Vec<Decision> = (0..20)
            .map(|i| {
                dec(
                    i % 3 == 0,
                    [0.1, 0.6][i % 2],
                    i % 2 == 0,
                    i % 5 == 0,
                    0.0,
                    "a",
                )
            })
            .collect();
        let e = fit(&d, 1, &[]).unwrap_err().to_string();
        assert!(e.contains("refused") && e.contains("1 cluster"), "{e}");
        // Unsafe exactly when own_prev_unsafe: separation.
        let d: Vec<Decision> = (0..40)
            .map(|i| {
                let own = i % 2 == 0;
                dec(
                    own,
                    [0.1, 0.6][(i / 2) % 2],
                    own,
                    i % 3 == 0,
                    ((i * 7) % 5) as f64 * 0.5 - 1.0,
                    ["a", "b"][i % 4 / 2],
                )
            })
            .collect();
        let e = fit(&d, 2, &[]).unwrap_err().to_string();
        assert!(e.contains("separation"), "{e}");
        // A constant covariate is collinear with the intercept.
        let d: Vec<Decision> = (0..40)
            .map(|i| {
                let a = ["a", "b"][i % 2];
                dec(
                    i % 3 == 0,
                    [0.1, 0.6][i % 2],
                    i % 5 == 0,
                    i % 7 == 0,
                    0.0,
                    a,
                )
            })
            .collect();
        let e = fit(&d, 2, &[]).unwrap_err().to_string();
        assert!(
            e.contains("singular") && e.contains("progress_gap_before"),
            "{e}"
        );
    }

    #[test]
    fn intercept_only_logit_is_the_log_odds() {
        // Spec 1 with one risk level: intercept = logit(share), SE from clusters.
        let d: Vec<Decision> = (0..30)
            .map(|i| dec(i % 3 == 0, 0.1, false, false, 0.0, ["a", "b", "c"][i % 3]))
            .collect();
        let f = fit(&d, 1, &[]).unwrap();
        let c = f.get("Intercept").unwrap();
        assert!((c.coef - (1.0f64 / 2.0).ln()).abs() < 1e-10, "{}", c.coef);
        assert!(normal_sf2(1.959963984540054) - 0.05 < 1e-12);
    }

    #[test]
    fn formulas_and_names_follow_patsy() {
        assert_eq!(
            formula(6, &[Control::Categorical("model".into())]),
            "unsafe ~ C(max_private_risk) + first_round_unsafe + own_prev_unsafe * opponent_prev_unsafe * progress_gap_before + C(model)"
        );
        assert_eq!(level_name(0.6), "0.6");
        assert_eq!(level_name(1.0), "1.0");
        assert_eq!(specification_terms(3).len(), 7);
        assert_eq!(specification_terms(5).len(), 4);
    }
}
