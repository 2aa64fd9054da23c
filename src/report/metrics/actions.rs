//! Action frequencies from memory rows (spec §7): `action_frequency` and
//! `action_frequency_with_errors` (a row becomes `ERROR` when its agent logged an
//! error of any phase in that round).

use std::collections::{BTreeSet, HashMap};

use super::{count_cell, zero_filled};
use crate::report::load::MemRow;
use crate::report::stats::{group_by, kmean, ksum, nunique, unique_in_order};
use crate::report::table::{Cell, Table};

/// The reference's preferred order of actions; others follow sorted.
const ACTION_WITH_ERROR_ORDER: [&str; 5] =
    ["ATTEMPT_JOB", "IDLE", "DONATE", "SABOTAGE_JOB", "ERROR"];

/// `action_frequency.csv`.
pub fn action_frequency(memory: &[MemRow]) -> Table {
    frequency(memory, |m| m.action.as_str())
}

/// `action_frequency_with_errors.csv`.
pub fn action_frequency_with_errors(memory: &[MemRow]) -> Table {
    frequency(memory, |m| {
        if m.any_error {
            "ERROR"
        } else {
            m.action.as_str()
        }
    })
}

fn frequency(memory: &[MemRow], action: impl Fn(&MemRow) -> &str) -> Table {
    if memory.is_empty() {
        return Table::empty();
    }
    let seen: BTreeSet<&str> = memory.iter().map(&action).collect();
    let mut actions: Vec<&str> = ACTION_WITH_ERROR_ORDER
        .iter()
        .copied()
        .filter(|a| seen.contains(a))
        .collect();
    actions.extend(
        seen.iter()
            .filter(|a| !actions.contains(a))
            .copied()
            .collect::<Vec<_>>(),
    );
    let keys = unique_in_order(
        memory
            .iter()
            .map(|m| (&m.agent_id, &m.model_name, &m.run_id)),
    );
    let counts = group_by(memory, |m| {
        Some((&m.agent_id, &m.model_name, &m.run_id, action(m)))
    });
    let grid: Vec<_> = keys
        .iter()
        .flat_map(|k| actions.iter().map(move |a| (*k, *a)))
        .collect();
    let (filled, as_float) = zero_filled(
        grid.iter()
            .map(|((ag, mo, ru), a)| counts.get(&(*ag, *mo, *ru, *a)).map(|v| v.len() as i64)),
    );
    let mut totals: HashMap<_, Vec<f64>> = HashMap::new();
    for ((k, _), c) in grid.iter().zip(&filled) {
        totals.entry(*k).or_default().push(*c);
    }
    let totals: HashMap<_, f64> = totals.into_iter().map(|(k, v)| (k, ksum(v))).collect();
    let cells: Vec<_> = grid
        .iter()
        .zip(&filled)
        .map(|((k, a), c)| {
            let tot = totals[k];
            (
                (k.0, k.1, *a),
                k.2,
                *c,
                if tot == 0.0 { f64::NAN } else { c / tot },
            )
        })
        .collect();
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "action",
        "count",
        "avg_count_per_run",
        "avg_frequency_per_run",
        "n_runs",
    ]);
    for ((ag, mo, a), cs) in group_by(&cells, |c| Some(c.0)) {
        t.push(vec![
            Cell::Str(ag.clone()),
            Cell::Str(mo.clone()),
            Cell::Str(a.to_string()),
            count_cell(ksum(cs.iter().map(|c| c.2)), as_float),
            Cell::Float(kmean(cs.iter().map(|c| c.2))),
            Cell::Float(kmean(cs.iter().map(|c| c.3))),
            Cell::Int(nunique(cs.iter().map(|c| Some(c.1)))),
        ]);
    }
    t
}
