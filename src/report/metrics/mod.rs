//! The aggregate tables of one condition (spec §7), one file per metric family.
//! [`aggregate`] returns them under the reference's file names and in the
//! reference's order (`plotting/analyse.py: aggregate_experiment`).
//!
//! Every metric affected by a metric quirk (spec §10, QUIRK-14 to 17) takes a
//! [`Mode`]: [`Mode::Faithful`] reproduces the reference byte for byte,
//! [`Mode::Corrected`] applies the fix documented in the metric's file
//! (`energy.rs`: 14, `jobs.rs`: 15, `donations.rs`: 16, `recommendations.rs`: 17).

pub mod actions;
pub mod agents;
pub mod donations;
pub mod energy;
pub mod jobs;
pub mod recommendations;

use crate::report::load::{Condition, Rows};
use crate::report::table::{Cell, Table};
use recommendations::CollisionMode;

pub use crate::energy_society::config::Mode;

/// The aggregate file names (without `.csv`), in the reference's order.
pub const NAMES: [&str; 22] = [
    "runs",
    "recommendations_raw",
    "recommended_job_collisions",
    "recommended_other_only_job_collisions",
    "recommended_donations_to_self",
    "recommendation_action_self_vs_others",
    "recommendation_follow_rate",
    "recommendation_decision_follow_source",
    "enacted_recommendation_net_energy",
    "average_collisions",
    "energy_gained_per_spent",
    "rounds_active",
    "first_deactivation",
    "donations_received",
    "donations_made",
    "action_frequency",
    "action_frequency_with_errors",
    "attempted_difficulty_distribution",
    "success_rate_by_difficulty",
    "energy_spent_per_phase",
    "category_difficulty_attempts",
    "energy_over_time",
];

/// Every aggregate table of a condition, named as in [`NAMES`], computed in `mode`.
pub fn aggregate(cond: &Condition, rows: &Rows, mode: Mode) -> Vec<(&'static str, Table)> {
    let (m, a, v) = (&rows.memory, &rows.agents, &rows.votes);
    let tables = [
        agents::runs(cond),
        recommendations::recommendations_raw(v),
        recommendations::recommended_collisions(v, CollisionMode::All),
        recommendations::recommended_collisions(v, CollisionMode::OtherOnly),
        recommendations::recommended_donations_to_self(v),
        recommendations::recommendation_action_self_vs_others(v),
        recommendations::recommendation_follow_rate(v, m, mode),
        recommendations::recommendation_decision_follow_source(v, m, mode),
        recommendations::enacted_recommendation_net_energy(v, m, mode),
        jobs::average_collisions(m, mode),
        energy::energy_gained_per_spent(m, mode),
        agents::rounds_active(a),
        agents::first_deactivation(a),
        donations::donations_received(m, mode),
        donations::donations_made(m, mode),
        actions::action_frequency(m),
        actions::action_frequency_with_errors(m),
        jobs::attempted_difficulty_distribution(m, mode),
        jobs::success_rate_by_difficulty(m, mode),
        energy::energy_spent_per_phase(m, mode),
        jobs::category_difficulty_attempts(m, mode),
        agents::energy_over_time(m, a),
    ];
    NAMES.into_iter().zip(tables).collect()
}

/// Counts from a left join onto a grid, missing filled with 0. pandas turns the
/// whole column into floats when any grid cell was missing; the flag says so.
pub(crate) fn zero_filled(xs: impl Iterator<Item = Option<i64>>) -> (Vec<f64>, bool) {
    let mut any_missing = false;
    let v = xs
        .map(|x| {
            any_missing |= x.is_none();
            x.unwrap_or(0) as f64
        })
        .collect();
    (v, any_missing)
}

/// A count in a column that is float when `as_float`, else integer.
pub(crate) fn count_cell(x: f64, as_float: bool) -> Cell {
    if as_float {
        Cell::Float(x)
    } else {
        Cell::Int(x as i64)
    }
}

#[cfg(test)]
mod tests;
