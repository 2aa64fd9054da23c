//! Energy-efficiency metrics from memory rows (spec §7): `energy_gained_per_spent`
//! and `energy_spent_per_phase`.
//!
//! QUIRK-14, per memory row:
//! - [`Mode::Faithful`] (the reference): `act = energy_spent_on_action`, which for
//!   a DONATE row is the recorded donated amount; `spent = vote + decide + act`;
//!   `gained = energy_rewarded` (received donations are not gains).
//! - [`Mode::Corrected`]: a donation is a transfer, not spending. On a DONATE row
//!   `act = max(0, energy_spent_on_action − donated_amount)` (a null amount counts
//!   as 0), i.e. 0 for every row the reference wrote, since both are the recorded
//!   amount (spec §4.1); other rows keep their `act`. `spent = vote + decide + act`
//!   with that `act`, in both `energy_gained_per_spent` (S) and every column of
//!   `energy_spent_per_phase`. `gained = energy_rewarded + Σ received_donations
//!   [].amount` of the same memory entry (self-donations included), so G in
//!   `energy_gained_per_spent` counts receipts as gains. `energy_spent_per_phase`
//!   is about spending only and has no gain column.

use std::collections::BTreeMap;

use super::Mode;
use crate::report::load::MemRow;
use crate::report::stats::{group_by, kmean, ksum, nunique, welford_std};
use crate::report::table::{Cell, Table};

/// The action spend of a memory row in `mode` (QUIRK-14, module doc).
pub fn act(m: &MemRow, mode: Mode) -> f64 {
    match mode {
        Mode::Faithful => m.act,
        Mode::Corrected if m.action == "DONATE" => {
            let donated = if m.donated_amount.is_nan() {
                0.0
            } else {
                m.donated_amount
            };
            (m.act - donated).max(0.0)
        }
        Mode::Corrected => m.act,
    }
}

/// `vote + decide + act` of a memory row in `mode` (QUIRK-14).
pub fn spent(m: &MemRow, mode: Mode) -> f64 {
    match mode {
        Mode::Faithful => m.spent,
        Mode::Corrected => m.vote + m.decide + act(m, mode),
    }
}

/// The energy gained by a memory row in `mode` (QUIRK-14): the reward, plus the
/// donations received when corrected.
pub fn gained(m: &MemRow, mode: Mode) -> f64 {
    match mode {
        Mode::Faithful => m.rewarded,
        Mode::Corrected => m.rewarded + m.received,
    }
}

/// Memory rows grouped by (agent, model, run), sorted.
pub fn per_agent_run(memory: &[MemRow]) -> BTreeMap<(String, String, String), Vec<&MemRow>> {
    group_by(memory, |m| {
        Some((m.agent_id.clone(), m.model_name.clone(), m.run_id.clone()))
    })
}

/// Regroup per-(agent, model, run) values by (agent, model), keeping run order.
pub fn by_agent<T: Clone>(
    per_run: &BTreeMap<(String, String, String), T>,
) -> BTreeMap<(String, String), Vec<(String, T)>> {
    let mut out: BTreeMap<(String, String), Vec<(String, T)>> = BTreeMap::new();
    for ((a, m, r), v) in per_run {
        out.entry((a.clone(), m.clone()))
            .or_default()
            .push((r.clone(), v.clone()));
    }
    out
}

/// `energy_gained_per_spent.csv`: per (agent, run) G = Σ rewarded, S = Σ spent,
/// ratio G/S (NaN when S = 0); per agent the mean/std of the ratio and mean G, S.
/// G and S follow `mode` (QUIRK-14, module doc); the column names stay.
pub fn energy_gained_per_spent(memory: &[MemRow], mode: Mode) -> Table {
    if memory.is_empty() {
        return Table::empty();
    }
    let per_run: BTreeMap<_, (f64, f64)> = per_agent_run(memory)
        .into_iter()
        .map(|(k, rows)| {
            let g = ksum(rows.iter().map(|m| gained(m, mode)));
            let s = ksum(rows.iter().map(|m| spent(m, mode)));
            (k, (g, s))
        })
        .collect();
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "avg_gained_per_spent",
        "std_gained_per_spent",
        "avg_energy_rewarded",
        "avg_energy_spent",
        "n_runs",
    ]);
    for ((id, model), runs) in by_agent(&per_run) {
        let ratio = |(_, (g, s)): &(String, (f64, f64))| if *s == 0.0 { f64::NAN } else { g / s };
        t.push(vec![
            Cell::Str(id),
            Cell::Str(model),
            Cell::Float(kmean(runs.iter().map(ratio))),
            Cell::Float(welford_std(runs.iter().map(ratio))),
            Cell::Float(kmean(runs.iter().map(|(_, (g, _))| *g))),
            Cell::Float(kmean(runs.iter().map(|(_, (_, s))| *s))),
            Cell::Int(nunique(runs.iter().map(|(r, _)| Some(r)))),
        ]);
    }
    t
}

/// `energy_spent_per_phase.csv`: per (agent, run) the mean over memory rows of
/// vote, decide, act and total spend; per agent the mean and std of those means.
/// Act and total follow `mode` (QUIRK-14, module doc).
pub fn energy_spent_per_phase(memory: &[MemRow], mode: Mode) -> Table {
    if memory.is_empty() {
        return Table::empty();
    }
    let fields: [fn(&MemRow, Mode) -> f64; 4] = [|m, _| m.vote, |m, _| m.decide, act, spent];
    let per_run: BTreeMap<_, [f64; 4]> = per_agent_run(memory)
        .into_iter()
        .map(|(k, rows)| (k, fields.map(|f| kmean(rows.iter().map(|m| f(m, mode))))))
        .collect();
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "energy_vote_mean",
        "energy_vote_std",
        "energy_decide_mean",
        "energy_decide_std",
        "energy_act_mean",
        "energy_act_std",
        "total_energy_spent_mean",
        "total_energy_spent_std",
    ]);
    for ((id, model), runs) in by_agent(&per_run) {
        let mut row = vec![Cell::Str(id), Cell::Str(model)];
        for i in 0..4 {
            row.push(Cell::Float(kmean(runs.iter().map(|(_, v)| v[i]))));
            row.push(Cell::Float(welford_std(runs.iter().map(|(_, v)| v[i]))));
        }
        t.push(row);
    }
    t
}
