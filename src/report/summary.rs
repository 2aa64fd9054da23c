//! The per-agent summary of one condition, as in the paper's tables: rounds
//! active, efficiency (gained/spent), donations made and received per run,
//! success rate by difficulty, each as mean ± sample std over runs, and the
//! collisions per run. Values are read from the aggregate tables, so the summary
//! and the CSVs never disagree.

use serde::Serialize;

use crate::report::load::{Condition, Rows};
use crate::report::metrics::jobs::DIFFICULTIES;
use crate::report::metrics::Mode;
use crate::report::table::Table;

/// A mean and sample std over runs (std `None` with one run); `None` mean = no data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeanStd {
    pub mean: Option<f64>,
    pub std: Option<f64>,
}

impl MeanStd {
    fn new(mean: Option<f64>, std: Option<f64>) -> Self {
        let keep = |x: Option<f64>| x.filter(|v| !v.is_nan());
        Self {
            mean: keep(mean),
            std: keep(std),
        }
    }

    /// `14.00 ± 9.46` (`-` without data; no `±` with one run), scaled by `scale`.
    pub fn fmt(&self, digits: usize, scale: f64, suffix: &str) -> String {
        match (self.mean, self.std) {
            (None, _) => "-".to_string(),
            (Some(m), None) => format!("{:.*}{suffix}", digits, m * scale),
            (Some(m), Some(s)) => {
                format!(
                    "{:.*}{suffix} ± {:.*}{suffix}",
                    digits,
                    m * scale,
                    digits,
                    s * scale
                )
            }
        }
    }
}

/// One agent's row of the summary.
#[derive(Debug, Clone, Serialize)]
pub struct AgentSummary {
    pub agent_id: String,
    pub model_name: String,
    /// The models that answered this agent's calls in the condition's runs
    /// when not `model_name` (stand-ins, served models, scripted policies;
    /// `agents.json`'s `answered_by`), in run order; empty when the paper's
    /// model answered.
    pub answered_by: Vec<String>,
    pub model_size: f64,
    pub n_runs: usize,
    pub rounds_active: MeanStd,
    pub gained_per_spent: MeanStd,
    /// Donations made per run and total. Faithful: over runs with at least one
    /// donation (QUIRK-16); corrected: over all runs of the agent.
    pub donations_made: MeanStd,
    pub donations_made_total: i64,
    pub donations_received: MeanStd,
    pub donations_received_total: i64,
    /// Success rate per run by difficulty (easy, medium, hard), runs with attempts.
    pub success_rate: [MeanStd; 3],
    /// Attempts per run by difficulty (easy, medium, hard), zero-filled.
    pub attempts_per_run: [MeanStd; 3],
}

impl AgentSummary {
    /// The model as reports show it: the paper's name, and the model that
    /// answered beside it when another one did
    /// (`qwen3:8b (answered by smollm2-135m-instruct)`).
    pub fn model_label(&self) -> String {
        model_label(&self.model_name, &self.answered_by)
    }
}

/// `name`, or `name (answered by a / b)` when other models answered.
pub fn model_label(name: &str, answered_by: &[String]) -> String {
    if answered_by.is_empty() {
        name.to_string()
    } else {
        format!("{name} (answered by {})", answered_by.join(" / "))
    }
}

/// The summary of one condition.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub condition: String,
    /// The metric mode the tables were computed in (QUIRK-14 to 17).
    pub mode: Mode,
    pub dir: String,
    pub experiment: Vec<String>,
    pub seeds: Vec<u64>,
    pub n_runs: usize,
    pub agents: Vec<AgentSummary>,
    /// Collisions per run (mean ± std) and the range.
    pub collisions: MeanStd,
    pub collisions_min: Option<f64>,
    pub collisions_max: Option<f64>,
}

/// Look up a column of the row whose key columns equal `key`.
pub fn lookup(t: &Table, key: &[(&str, &str)], col: &str) -> Option<f64> {
    let c = t.col(col)?;
    let keys: Option<Vec<(usize, &str)>> =
        key.iter().map(|(k, v)| t.col(k).map(|i| (i, *v))).collect();
    let keys = keys?;
    t.rows
        .iter()
        .find(|row| {
            keys.iter().all(
                |(i, v)| matches!(&row[*i], crate::report::table::Cell::Str(s) if s.as_str() == *v),
            )
        })
        .and_then(|row| row[c].as_f64())
}

fn get<'a>(tables: &'a [(&'static str, Table)], name: &str) -> &'a Table {
    static EMPTY: Table = Table {
        columns: Vec::new(),
        rows: Vec::new(),
    };
    tables
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&EMPTY, |(_, t)| t)
}

/// Build the summary of a condition from its aggregate tables.
pub fn summarize(
    cond: &Condition,
    rows: &Rows,
    tables: &[(&'static str, Table)],
    mode: Mode,
) -> Summary {
    let mut agents: Vec<AgentSummary> = Vec::new();
    for a in &rows.agents {
        if agents
            .iter()
            .any(|s| s.agent_id == a.agent_id && s.model_name == a.model_name)
        {
            continue;
        }
        let k = [
            ("agent_id", a.agent_id.as_str()),
            ("model_name", a.model_name.as_str()),
        ];
        let ms = |table: &str, m: &str, s: &str| {
            let t = get(tables, table);
            MeanStd::new(lookup(t, &k, m), lookup(t, &k, s))
        };
        let by_diff = |table: &str, m: &str, s: &str| {
            DIFFICULTIES.map(|d| {
                let t = get(tables, table);
                let kd = [k[0], k[1], ("job_difficulty", d)];
                MeanStd::new(lookup(t, &kd, m), lookup(t, &kd, s))
            })
        };
        let total =
            |table: &str, col: &str| lookup(get(tables, table), &k, col).unwrap_or(0.0) as i64;
        let mut answered_by: Vec<String> = Vec::new();
        for run in &cond.runs {
            for r in &run.data.agents {
                if r.agent_id == a.agent_id && r.model_name == a.model_name {
                    if let Some(m) = &r.answered_by {
                        if !answered_by.contains(m) {
                            answered_by.push(m.clone());
                        }
                    }
                }
            }
        }
        agents.push(AgentSummary {
            agent_id: a.agent_id.clone(),
            model_name: a.model_name.clone(),
            answered_by,
            model_size: a.model_size,
            n_runs: rows
                .agents
                .iter()
                .filter(|b| b.agent_id == a.agent_id && b.model_name == a.model_name)
                .count(),
            rounds_active: ms("rounds_active", "avg_rounds_active", "std_rounds_active"),
            gained_per_spent: ms(
                "energy_gained_per_spent",
                "avg_gained_per_spent",
                "std_gained_per_spent",
            ),
            donations_made: ms("donations_made", "avg_donations_made", "std_donations_made"),
            donations_made_total: total("donations_made", "total_donations_made"),
            donations_received: ms(
                "donations_received",
                "avg_donations_received",
                "std_donations_received",
            ),
            donations_received_total: total("donations_received", "total_donations_received"),
            success_rate: by_diff(
                "success_rate_by_difficulty",
                "avg_success_rate_per_run",
                "std_success_rate_per_run",
            ),
            attempts_per_run: by_diff(
                "attempted_difficulty_distribution",
                "avg_count_per_run",
                "std_count_per_run",
            ),
        });
    }
    agents.sort_by_key(|a| agent_order(&a.agent_id));
    let coll = get(tables, "average_collisions");
    let ck = [("metric", "total_collisions")];
    let mut experiment: Vec<String> = Vec::new();
    for r in &cond.runs {
        if !experiment.contains(&r.data.config.experiment) {
            experiment.push(r.data.config.experiment.clone());
        }
    }
    Summary {
        condition: cond.label.clone(),
        mode,
        dir: cond.dir.display().to_string(),
        experiment,
        seeds: cond.seeds(),
        n_runs: cond.runs.len(),
        agents,
        collisions: MeanStd::new(lookup(coll, &ck, "mean"), lookup(coll, &ck, "std")),
        collisions_min: lookup(coll, &ck, "min"),
        collisions_max: lookup(coll, &ck, "max"),
    }
}

/// `agent_10` after `agent_9`: numeric suffixes sort as numbers.
pub fn agent_order(id: &str) -> (u64, String) {
    let n = id
        .rsplit('_')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(u64::MAX);
    (n, id.to_string())
}
