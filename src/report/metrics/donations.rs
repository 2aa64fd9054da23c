//! Donation metrics from memory rows (spec §7): `donations_made` (DONATE rows of
//! the donor) and `donations_received` (rows with a target, regrouped by target).
//!
//! QUIRK-16, which runs the per-run averages, stds and `n_runs` are taken over:
//! - [`Mode::Faithful`] (the reference): only the runs in which the agent made
//!   (resp. received) at least one donation.
//! - [`Mode::Corrected`]: every run of the agent, i.e. every run in which it
//!   has a memory row, plus any run where it received a donation; a run without
//!   donations counts as 0 donations and 0 energy. The energy per donation of
//!   such a run is undefined (NaN) and is skipped in its mean and std. Totals are
//!   the same in both modes. With no donation at all, the corrected tables still
//!   list every agent with zeros.

use std::collections::{BTreeMap, HashMap};

use super::energy::by_agent;
use super::Mode;
use crate::report::load::MemRow;
use crate::report::stats::{group_by, kmean, ksum, nunique, welford_std};
use crate::report::table::{Cell, Table};

/// The (agent, model, run) keys of every memory row: the runs of each agent.
fn agent_runs(memory: &[MemRow]) -> impl Iterator<Item = (String, String, String)> + '_ {
    memory
        .iter()
        .map(|m| (m.agent_id.clone(), m.model_name.clone(), m.run_id.clone()))
}

/// `donations_made.csv`; the runs averaged over follow `mode` (QUIRK-16).
pub fn donations_made(memory: &[MemRow], mode: Mode) -> Table {
    let rows: Vec<&MemRow> = memory.iter().filter(|m| m.action == "DONATE").collect();
    let none = match mode {
        Mode::Faithful => rows.is_empty(),
        Mode::Corrected => memory.is_empty(),
    };
    if none {
        return Table::empty();
    }
    // (agent, model, run) → (count, energy, energy per donation)
    let mut per_run: BTreeMap<_, (i64, f64, f64)> = group_by(rows, |m| {
        Some((m.agent_id.clone(), m.model_name.clone(), m.run_id.clone()))
    })
    .into_iter()
    .map(|(k, rs)| {
        let n = rs.len() as i64;
        let e = ksum(rs.iter().map(|m| m.donated_amount));
        (k, (n, e, e / n as f64))
    })
    .collect();
    if mode == Mode::Corrected {
        for k in agent_runs(memory) {
            per_run.entry(k).or_insert((0, 0.0, f64::NAN));
        }
    }
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
/// no model name and drops out, as in the reference. The runs averaged over
/// follow `mode` (QUIRK-16).
pub fn donations_received(memory: &[MemRow], mode: Mode) -> Table {
    let rows: Vec<&MemRow> = memory.iter().filter(|m| m.target_agent.is_some()).collect();
    let none = match mode {
        Mode::Faithful => rows.is_empty(),
        Mode::Corrected => memory.is_empty(),
    };
    if none {
        return Table::empty();
    }
    let mut models: HashMap<&str, &str> = HashMap::new();
    for m in memory {
        models.insert(&m.agent_id, &m.model_name); // the last pairing wins, as in `to_dict`
    }
    let mut per_run: BTreeMap<_, (i64, f64)> = group_by(rows, |m| {
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
    if mode == Mode::Corrected {
        for k in agent_runs(memory) {
            per_run.entry(k).or_insert((0, 0.0));
        }
    }
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
