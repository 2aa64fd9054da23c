//! `joule report --compare A B`: two conditions side by side, per agent and
//! metric, with the difference B − A of the means (and of the collisions).

use std::fmt::Write;

use serde::Serialize;

use crate::report::summary::{MeanStd, Summary};
use crate::report::table::{Cell, Table};
use crate::shown::md_cell;

/// One compared quantity.
#[derive(Debug, Clone, Serialize)]
pub struct CompareRow {
    pub agent_id: String,
    pub model_name: String,
    pub metric: String,
    pub a: MeanStd,
    pub b: MeanStd,
    /// `b.mean - a.mean`; `None` when either side has no data.
    pub diff: Option<f64>,
}

fn metrics(s: &crate::report::summary::AgentSummary) -> Vec<(&'static str, MeanStd)> {
    vec![
        ("rounds_active", s.rounds_active),
        ("gained_per_spent", s.gained_per_spent),
        ("donations_made_per_run", s.donations_made),
        ("donations_received_per_run", s.donations_received),
        ("success_rate_easy", s.success_rate[0]),
        ("success_rate_medium", s.success_rate[1]),
        ("success_rate_hard", s.success_rate[2]),
        ("attempts_per_run_easy", s.attempts_per_run[0]),
        ("attempts_per_run_medium", s.attempts_per_run[1]),
        ("attempts_per_run_hard", s.attempts_per_run[2]),
    ]
}

/// Rows for every agent present in both conditions, plus the collisions.
pub fn compare(a: &Summary, b: &Summary) -> Vec<CompareRow> {
    let diff = |x: &MeanStd, y: &MeanStd| Some(y.mean? - x.mean?);
    let mut rows = vec![CompareRow {
        agent_id: "all".into(),
        model_name: "-".into(),
        metric: "collisions_per_run".into(),
        a: a.collisions,
        b: b.collisions,
        diff: diff(&a.collisions, &b.collisions),
    }];
    for sa in &a.agents {
        let Some(sb) = b
            .agents
            .iter()
            .find(|x| x.agent_id == sa.agent_id && x.model_name == sa.model_name)
        else {
            continue;
        };
        for ((name, ma), (_, mb)) in metrics(sa).into_iter().zip(metrics(sb)) {
            rows.push(CompareRow {
                agent_id: sa.agent_id.clone(),
                model_name: sa.model_name.clone(),
                metric: name.into(),
                a: ma,
                b: mb,
                diff: diff(&ma, &mb),
            });
        }
    }
    rows
}

/// `compare.csv`: exact values (Python float repr, empty when missing).
pub fn to_table(rows: &[CompareRow]) -> Table {
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "metric",
        "a_mean",
        "a_std",
        "b_mean",
        "b_std",
        "diff_b_minus_a",
    ]);
    let f = |x: Option<f64>| Cell::Float(x.unwrap_or(f64::NAN));
    for r in rows {
        t.push(vec![
            Cell::Str(r.agent_id.clone()),
            Cell::Str(r.model_name.clone()),
            Cell::Str(r.metric.clone()),
            f(r.a.mean),
            f(r.a.std),
            f(r.b.mean),
            f(r.b.std),
            f(r.diff),
        ]);
    }
    t
}

/// `compare.md`.
pub fn to_markdown(a: &Summary, b: &Summary, rows: &[CompareRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Comparison: A = `{}` vs B = `{}`\n\nA seeds: {:?}; B seeds: {:?}. Differences are B − A of the means.\n",
        a.condition, b.condition, a.seeds, b.seeds
    );
    out.push_str("| Agent | Model | Metric | A | B | B − A |\n|---|---|---|---:|---:|---:|\n");
    for r in rows {
        let [a, b, d] = shown(r);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {a} | {b} | {d} |",
            md_cell(&r.agent_id),
            md_cell(&r.model_name),
            r.metric,
        );
    }
    out
}

/// A row's A, B and B − A as `compare.md` (and the HTML report) show them:
/// rates in percent (the difference in percentage points), others to 2 digits.
pub fn shown(r: &CompareRow) -> [String; 3] {
    let pct = r.metric.starts_with("success_rate");
    let (scale, suffix, digits) = if pct { (100.0, "%", 1) } else { (1.0, "", 2) };
    let d = r.diff.map_or("-".to_string(), |d| {
        if pct {
            format!("{:+.1} pp", d * 100.0)
        } else {
            format!("{d:+.2}")
        }
    });
    [
        r.a.fmt(digits, scale, suffix),
        r.b.fmt(digits, scale, suffix),
        d,
    ]
}
