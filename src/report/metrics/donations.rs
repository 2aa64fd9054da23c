//! Donation metrics from memory rows (spec §7): `donations_made` (DONATE rows of
//! the donor) and `donations_received` (rows with a target, regrouped by target).
//! Only runs with at least one donation count (QUIRK-16).

use std::collections::{BTreeMap, HashMap};

use super::energy::by_agent;
use crate::report::load::MemRow;
use crate::report::stats::{group_by, kmean, ksum, nunique, welford_std};
use crate::report::table::{Cell, Table};

/// `donations_made.csv`.
pub fn donations_made(memory: &[MemRow]) -> Table {
    let rows: Vec<&MemRow> = memory.iter().filter(|m| m.action == "DONATE").collect();
    if rows.is_empty() {
        return Table::empty();
    }
    // (agent, model, run) → (count, energy, energy per donation)
    let per_run: BTreeMap<_, (i64, f64, f64)> = group_by(rows, |m| {
        Some((m.agent_id.clone(), m.model_name.clone(), m.run_id.clone()))
    })
    .into_iter()
    .map(|(k, rs)| {
        let n = rs.len() as i64;
        let e = ksum(rs.iter().map(|m| m.donated_amount));
        (k, (n, e, e / n as f64))
    })
    .collect();
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "avg_donations_made",
        "std_donations_made",
        "total_donations_made",
        "avg_energy_donated_per_run",
        "std_energy_donated_per_run",
        "total_energy_donated",
        "avg_energy_per_donation",
        "std_energy_per_donation",
        "n_runs",
    ]);
    for ((id, model), runs) in by_agent(&per_run) {
        let n = || runs.iter().map(|(_, v)| v.0 as f64);
        let e = || runs.iter().map(|(_, v)| v.1);
        let p = || runs.iter().map(|(_, v)| v.2);
        t.push(vec![
            Cell::Str(id),
            Cell::Str(model),
            Cell::Float(kmean(n())),
            Cell::Float(welford_std(n())),
            Cell::Int(runs.iter().map(|(_, v)| v.0).sum()),
            Cell::Float(kmean(e())),
            Cell::Float(welford_std(e())),
            Cell::Float(ksum(e())),
            Cell::Float(kmean(p())),
            Cell::Float(welford_std(p())),
            Cell::Int(nunique(runs.iter().map(|(r, _)| Some(r)))),
        ]);
    }
    t
}

/// `donations_received.csv`. A target that is not an agent of the condition has
/// no model name and drops out, as in the reference.
pub fn donations_received(memory: &[MemRow]) -> Table {
    let rows: Vec<&MemRow> = memory.iter().filter(|m| m.target_agent.is_some()).collect();
    if rows.is_empty() {
        return Table::empty();
    }
    let mut models: HashMap<&str, &str> = HashMap::new();
    for m in memory {
        models.insert(&m.agent_id, &m.model_name); // the last pairing wins, as in `to_dict`
    }
    let per_run: BTreeMap<_, (i64, f64)> = group_by(rows, |m| {
        let target = m.target_agent.as_deref()?;
        let model = models.get(target)?;
        Some((target.to_string(), model.to_string(), m.run_id.clone()))
    })
    .into_iter()
    .map(|(k, rs)| {
        (
            k,
            (rs.len() as i64, ksum(rs.iter().map(|m| m.donated_amount))),
        )
    })
    .collect();
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "avg_donations_received",
        "std_donations_received",
        "total_donations_received",
        "avg_energy_received_per_run",
        "total_energy_received",
        "n_runs",
    ]);
    for ((id, model), runs) in by_agent(&per_run) {
        let n = || runs.iter().map(|(_, v)| v.0 as f64);
        let e = || runs.iter().map(|(_, v)| v.1);
        t.push(vec![
            Cell::Str(id),
            Cell::Str(model),
            Cell::Float(kmean(n())),
            Cell::Float(welford_std(n())),
            Cell::Int(runs.iter().map(|(_, v)| v.0).sum()),
            Cell::Float(kmean(e())),
            Cell::Float(ksum(e())),
            Cell::Int(nunique(runs.iter().map(|(r, _)| Some(r)))),
        ]);
    }
    t
}
