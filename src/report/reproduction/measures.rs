//! The per-run values the reproduction tables compare (spec §7 metrics,
//! taken per run before they are averaged), read from a condition's rows in
//! the report's metric mode, so they are the values behind the aggregate
//! CSVs' means (except where noted).

use serde::{Deserialize, Serialize};

use crate::report::load::{MemRow, Rows};
use crate::report::metrics::{energy, jobs, Mode};

/// A metric with one value per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The agent's `rounds_active`.
    RoundsActive,
    /// Σ gained / Σ spent of the agent (QUIRK-14 follows the mode); runs with
    /// nothing spent are left out, as in `energy_gained_per_spent.csv`.
    GainedPerSpent,
    /// The agent's DONATE rows / its memory rows (`action_frequency.csv`).
    DonateShare,
    /// Rows of any agent whose target is this agent, in every run of the
    /// condition (zero-filled, unlike the faithful `donations_received.csv`,
    /// QUIRK-16; the paper's coop figures had a donation in every run).
    DonationsReceived,
    /// DONATE rows of all agents, every run (condition-level).
    Donations,
    /// Collisions per run, zero-filled (condition-level; QUIRK-15 follows the mode).
    Collisions,
    /// Solved / attempted easy jobs of the agent, runs with an easy attempt.
    SuccessEasy,
    /// The same for medium jobs.
    SuccessMedium,
    /// The same for hard jobs.
    SuccessHard,
}

impl Metric {
    /// Every metric, in table order.
    pub const ALL: [Metric; 9] = [
        Metric::RoundsActive,
        Metric::GainedPerSpent,
        Metric::DonateShare,
        Metric::DonationsReceived,
        Metric::Donations,
        Metric::Collisions,
        Metric::SuccessEasy,
        Metric::SuccessMedium,
        Metric::SuccessHard,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::RoundsActive => "rounds_active",
            Metric::GainedPerSpent => "gained_per_spent",
            Metric::DonateShare => "donate_share",
            Metric::DonationsReceived => "donations_received",
            Metric::Donations => "donations",
            Metric::Collisions => "collisions",
            Metric::SuccessEasy => "success_easy",
            Metric::SuccessMedium => "success_medium",
            Metric::SuccessHard => "success_hard",
        }
    }

    /// How the table names it.
    pub fn label(self) -> &'static str {
        match self {
            Metric::RoundsActive => "rounds active",
            Metric::GainedPerSpent => "gained / spent",
            Metric::DonateShare => "DONATE share of actions",
            Metric::DonationsReceived => "donations received / run",
            Metric::Donations => "donations / run (all agents)",
            Metric::Collisions => "collisions / run",
            Metric::SuccessEasy => "success on easy jobs",
            Metric::SuccessMedium => "success on medium jobs",
            Metric::SuccessHard => "success on hard jobs",
        }
    }

    /// One value per agent (else one per run for the whole condition).
    pub fn per_agent(self) -> bool {
        !matches!(self, Metric::Donations | Metric::Collisions)
    }

    /// A share, shown as a percentage.
    pub fn percent(self) -> bool {
        matches!(
            self,
            Metric::DonateShare | Metric::SuccessEasy | Metric::SuccessMedium | Metric::SuccessHard
        )
    }
}

/// The value of `metric` in each run (`run_ids` in the condition's order),
/// for `agent` (ignored by condition-level metrics). Runs without a value
/// (the agent absent, nothing spent, no attempt of that difficulty) are left
/// out.
pub fn per_run(
    rows: &Rows,
    run_ids: &[String],
    metric: Metric,
    agent: Option<&str>,
    mode: Mode,
) -> Vec<(String, f64)> {
    let agent = agent.unwrap_or("");
    fn rows_of<'a>(rows: &'a Rows, run: &'a str, agent: &'a str) -> Vec<&'a MemRow> {
        rows.memory
            .iter()
            .filter(|m| m.run_id == run && m.agent_id == agent)
            .collect()
    }

    let mut out = Vec::new();
    for run in run_ids {
        let v = match metric {
            Metric::RoundsActive => rows
                .agents
                .iter()
                .find(|a| &a.run_id == run && a.agent_id == agent)
                .map(|a| a.rounds_active as f64),
            Metric::GainedPerSpent => {
                let ms = rows_of(rows, run, agent);
                let g = crate::report::stats::ksum(ms.iter().map(|m| energy::gained(m, mode)));
                let s = crate::report::stats::ksum(ms.iter().map(|m| energy::spent(m, mode)));
                (!ms.is_empty() && s != 0.0).then(|| g / s)
            }
            Metric::DonateShare => {
                let ms = rows_of(rows, run, agent);
                (!ms.is_empty()).then(|| {
                    ms.iter().filter(|m| m.action == "DONATE").count() as f64 / ms.len() as f64
                })
            }
            Metric::DonationsReceived => Some(
                rows.memory
                    .iter()
                    .filter(|m| &m.run_id == run && m.target_agent.as_deref() == Some(agent))
                    .count() as f64,
            ),
            Metric::Donations => Some(
                rows.memory
                    .iter()
                    .filter(|m| &m.run_id == run && m.action == "DONATE")
                    .count() as f64,
            ),
            Metric::Collisions => None, // below, over all runs at once
            Metric::SuccessEasy | Metric::SuccessMedium | Metric::SuccessHard => {
                let d = match metric {
                    Metric::SuccessEasy => "easy",
                    Metric::SuccessMedium => "medium",
                    _ => "hard",
                };
                let att: Vec<_> = jobs::attempts(&rows.memory, mode)
                    .into_iter()
                    .filter(|m| {
                        &m.run_id == run
                            && m.agent_id == agent
                            && m.job_difficulty.as_deref() == Some(d)
                    })
                    .collect();
                (!att.is_empty()).then(|| {
                    att.iter().filter(|m| m.succeeded == Some(true)).count() as f64
                        / att.len() as f64
                })
            }
        };
        if let Some(v) = v {
            out.push((run.clone(), v));
        }
    }
    if metric == Metric::Collisions {
        let counted = jobs::collisions_per_run(&rows.memory, mode);
        for run in run_ids {
            let c = counted
                .iter()
                .find(|(r, _)| r == run)
                .and_then(|(_, c)| *c)
                .unwrap_or(0);
            out.push((run.clone(), c as f64));
        }
    }
    out
}
