//! Each model's Unsafe rate against the humans', beside the
//! humans-versus-models rate tables of `race report --human`: for every cell
//! of those tables (all rounds, by p_max, by position) and every model, the
//! difference model − humans with
//!
//! - the pooled two-proportion z test (statsmodels' `proportions_ztest`),
//!   which treats every decision as independent, and
//! - the cluster-robust test, clustered as the logits are (a model's CRN
//!   block `source::model::rep`, a human pair): the slope of a linear
//!   probability model on a model dummy with statsmodels' cluster sandwich
//!   (`OLS(...).fit(cov_type="cluster", use_t=True)`), its 95 % interval and
//!   p from a t reference with G − 1 degrees of freedom (G the clusters of
//!   both groups: with a few clusters a normal reference rejects far too
//!   often); the table shows the clusters of each group.
//!
//! Decisions of one player are not independent, so the verdict uses the
//! cluster-robust p-value, Holm-adjusted over every test of the section.
//! The statistics are `crate::stats`, checked against
//! statsmodels by `tests/quick/reproduction_stats.rs`.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::stats::{cluster_robust_diff, fmt_p, holm, two_proportion_z};

/// One decision: its group (`human` or a model), cluster, its key in each
/// table (same order as the tables), and whether it was Unsafe.
pub struct Obs<'a> {
    pub group: &'a str,
    pub cluster: &'a str,
    pub keys: Vec<String>,
    pub unsafe_: bool,
}

/// One test.
#[derive(Debug, Clone)]
pub struct Test {
    pub table: String,
    pub key: String,
    pub model: String,
    pub model_k: usize,
    pub model_n: usize,
    pub human_k: usize,
    pub human_n: usize,
    /// Clusters of the model's and of the humans' decisions.
    pub model_clusters: usize,
    pub human_clusters: usize,
    /// Degrees of freedom of the cluster-robust t (G − 1).
    pub df: f64,
    pub diff: f64,
    pub ci: (f64, f64),
    pub z_pooled: f64,
    pub p_pooled: f64,
    pub p_cluster: f64,
    pub p_holm: f64,
    pub verdict: &'static str,
}

/// Every test: tables `(title, keys)`, plus `all` (every decision).
pub fn tests(obs: &[Obs], human: &str, tables: &[(&str, &[String])]) -> Vec<Test> {
    let models: BTreeSet<&str> = obs
        .iter()
        .map(|o| o.group)
        .filter(|g| *g != human)
        .collect();
    let mut out = Vec::new();
    let mut cells: Vec<(String, String, Option<usize>)> = vec![("all".into(), "all".into(), None)];
    for (ti, (title, keys)) in tables.iter().enumerate() {
        for k in keys.iter() {
            cells.push((title.to_string(), k.clone(), Some(ti)));
        }
    }
    for (table, key, ti) in &cells {
        let pick = |g: &str| -> Vec<(String, bool)> {
            obs.iter()
                .filter(|o| o.group == g && ti.is_none_or(|t| o.keys.get(t) == Some(key)))
                .map(|o| (o.cluster.to_string(), o.unsafe_))
                .collect()
        };
        let h = pick(human);
        if h.is_empty() {
            continue;
        }
        for m in &models {
            let x = pick(m);
            if x.is_empty() {
                continue;
            }
            let (mk, hk) = (
                x.iter().filter(|o| o.1).count(),
                h.iter().filter(|o| o.1).count(),
            );
            let z = two_proportion_z(mk, x.len(), hk, h.len());
            let c = cluster_robust_diff(&x, &h);
            out.push(Test {
                table: table.clone(),
                key: key.clone(),
                model: m.to_string(),
                model_k: mk,
                model_n: x.len(),
                human_k: hk,
                human_n: h.len(),
                model_clusters: c.clusters_a,
                human_clusters: c.clusters_b,
                df: c.df,
                diff: c.estimate,
                ci: c.ci,
                z_pooled: z.z,
                p_pooled: z.p,
                p_cluster: c.p,
                p_holm: f64::NAN,
                verdict: "",
            });
        }
    }
    let adj = holm(&out.iter().map(|t| t.p_cluster).collect::<Vec<_>>());
    for (t, p) in out.iter_mut().zip(adj) {
        t.p_holm = p;
        t.verdict = if p.is_nan() {
            "not tested"
        } else if p >= 0.05 {
            "no difference shown"
        } else if t.diff > 0.0 {
            "more Unsafe"
        } else {
            "less Unsafe"
        };
    }
    out
}

fn fp(p: f64) -> String {
    fmt_p(p)
}

/// The Markdown section and its CSV (`unsafe_tests.csv`).
pub fn section(obs: &[Obs], human: &str, tables: &[(&str, &[String])]) -> (String, String) {
    let ts = tests(obs, human, tables);
    let mut md = String::from(
        "### Unsafe rates against the humans' (two-proportion tests)\n\n\
         Each model against the humans in the same cell: difference model − humans in percentage points \
         with its cluster-robust 95 % CI (clustered as the logits: a model's CRN block, a human pair), the \
         pooled two-proportion z test (decisions taken as independent), and the cluster-robust p (t with \
         G − 1 df, G the clusters of both groups) with Holm's adjustment over every test of this table, \
         which gives the verdict.\n\n\
         | cells | key | model | model Unsafe (n) | humans Unsafe (n) | clusters model / humans | difference [95 % CI] | z pooled, p | cluster-robust p, t df (Holm) | verdict |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut csv = crate::csv::CsvText::new();
    csv.record(
        "cells,key,model,model_unsafe,model_n,model_rate,human_unsafe,human_n,human_rate,model_clusters,human_clusters,difference,ci_low,ci_high,z_pooled,p_pooled,p_cluster,df_cluster,p_cluster_holm,verdict"
            .split(','),
    );
    let pct = |k: usize, n: usize| format!("{:.1}% ({n})", 100.0 * k as f64 / n as f64);
    for t in &ts {
        let _ = writeln!(
            md,
            "| {} | {} | `{}` | {} | {} | {} / {} | {:+.1} [{:+.1}, {:+.1}] | {:.2}, {} | {}, df {} ({}) | **{}** |",
            t.table,
            t.key,
            crate::shown::md_cell(&t.model),
            pct(t.model_k, t.model_n),
            pct(t.human_k, t.human_n),
            t.model_clusters,
            t.human_clusters,
            100.0 * t.diff,
            100.0 * t.ci.0,
            100.0 * t.ci.1,
            t.z_pooled,
            fp(t.p_pooled),
            fp(t.p_cluster),
            t.df,
            fp(t.p_holm),
            t.verdict
        );
        csv.record([
            t.table.to_string(),
            t.key.to_string(),
            t.model.to_string(),
            t.model_k.to_string(),
            t.model_n.to_string(),
            (t.model_k as f64 / t.model_n as f64).to_string(),
            t.human_k.to_string(),
            t.human_n.to_string(),
            (t.human_k as f64 / t.human_n as f64).to_string(),
            t.model_clusters.to_string(),
            t.human_clusters.to_string(),
            t.diff.to_string(),
            t.ci.0.to_string(),
            t.ci.1.to_string(),
            t.z_pooled.to_string(),
            t.p_pooled.to_string(),
            t.p_cluster.to_string(),
            t.df.to_string(),
            t.p_holm.to_string(),
            t.verdict.to_string(),
        ]);
    }
    md.push('\n');
    (md, csv.into_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_that_is_always_unsafe_is_more_unsafe_than_mixed_humans() {
        let keys = vec!["0.1".to_string()];
        let mut obs = Vec::new();
        let clusters: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
        for (i, c) in clusters.iter().enumerate() {
            for r in 0..5 {
                obs.push(Obs {
                    group: "human",
                    cluster: c,
                    keys: keys.clone(),
                    unsafe_: (i + r) % 3 == 0,
                });
                obs.push(Obs {
                    group: "m",
                    cluster: c,
                    keys: keys.clone(),
                    unsafe_: true,
                });
            }
        }
        let ts = tests(&obs, "human", &[("p_max", &keys)]);
        assert_eq!(ts.len(), 2);
        assert!(ts.iter().all(|t| t.verdict == "more Unsafe"), "{ts:?}");
        let (md, csv) = section(&obs, "human", &[("p_max", &keys)]);
        assert!(md.contains("more Unsafe"));
        // Clusters of each group, and the t reference's G − 1 = 39 df.
        assert!(md.contains("| 20 / 20 |"), "{md}");
        assert!(md.contains(", df 39 ("), "{md}");
        assert!(ts.iter().all(|t| t.df == 39.0));
        assert_eq!(csv.lines().count(), 3);
    }
}
