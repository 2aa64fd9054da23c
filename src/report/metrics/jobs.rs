//! Job metrics from memory rows (spec §7): `average_collisions`,
//! `attempted_difficulty_distribution`, `success_rate_by_difficulty` and
//! `category_difficulty_attempts`.
//!
//! QUIRK-15, which rows are attempts (in all four tables):
//! - [`Mode::Faithful`] (the reference): an ATTEMPT_JOB row with a job, executed
//!   or not; an attempt never executed (`succeeded` null, e.g. the agent hit 0
//!   while deciding) counts as a failed attempt.
//! - [`Mode::Corrected`]: only executed attempts, i.e. ATTEMPT_JOB rows with a
//!   job and `succeeded` not null. Unexecuted ones are left out of the success
//!   rates, the collisions (an agent that never solved the job does not collide)
//!   and the attempt counts by difficulty and category; the agent-run grid of
//!   `attempted_difficulty_distribution` still holds every agent-run with memory
//!   rows (zero-filled).

use std::collections::{BTreeMap, HashMap};

use super::{count_cell, zero_filled, Mode};
use crate::report::load::MemRow;
use crate::report::stats::{
    group_by, kmean, ksum, nunique, series_mean, series_std, unique_in_order, welford_std,
};
use crate::report::table::{Cell, Table};

/// The difficulties in the reference's order.
pub const DIFFICULTIES: [&str; 3] = ["easy", "medium", "hard"];

/// The attempts in `mode` (QUIRK-15, module doc).
pub fn attempts(memory: &[MemRow], mode: Mode) -> Vec<&MemRow> {
    memory
        .iter()
        .filter(|m| match mode {
            Mode::Faithful => m.is_attempt(),
            Mode::Corrected => m.is_executed_attempt(),
        })
        .collect()
}

/// Collisions per run, in run order: jobs of a (round, job id) attempted by more
/// than one distinct agent. `None` for a run without any collision (the
/// reference's left join leaves it missing before filling 0).
pub fn collisions_per_run(memory: &[MemRow], mode: Mode) -> Vec<(String, Option<i64>)> {
    let per_job = group_by(attempts(memory, mode), |m| {
        Some((m.run_id.clone(), m.round_num, m.job_id.clone()?))
    });
    let mut per_run: HashMap<String, i64> = HashMap::new();
    for ((run, _, _), rows) in per_job {
        if nunique(rows.iter().map(|m| Some(&m.agent_id))) > 1 {
            *per_run.entry(run).or_default() += 1;
        }
    }
    unique_in_order(memory.iter().map(|m| m.run_id.clone()))
        .into_iter()
        .map(|r| {
            let c = per_run.get(&r).copied();
            (r, c)
        })
        .collect()
}

/// `average_collisions.csv`: one row, mean/std/min/max of collisions per run
/// (zero-filled; pandas Series statistics).
pub fn average_collisions(memory: &[MemRow], mode: Mode) -> Table {
    if attempts(memory, mode).is_empty() {
        return Table::empty();
    }
    let per_run = collisions_per_run(memory, mode);
    let as_float = per_run.iter().any(|(_, c)| c.is_none());
    let xs: Vec<f64> = per_run.iter().map(|(_, c)| c.unwrap_or(0) as f64).collect();
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut t = Table::new(&["metric", "mean", "std", "min", "max"]);
    t.push(vec![
        Cell::Str("total_collisions".into()),
        Cell::Float(series_mean(&xs)),
        Cell::Float(series_std(&xs)),
        count_cell(min, as_float),
        count_cell(max, as_float),
    ]);
    t
}

/// `attempted_difficulty_distribution.csv`: attempts per (agent, run, difficulty)
/// zero-filled over easy/medium/hard for every agent-run with memory rows; the
/// share of the run's attempts (NaN without attempts).
pub fn attempted_difficulty_distribution(memory: &[MemRow], mode: Mode) -> Table {
    let att = attempts(memory, mode);
    if att.is_empty() {
        return Table::empty();
    }
    let grid_keys = unique_in_order(
        memory
            .iter()
            .map(|m| (m.agent_id.clone(), m.model_name.clone(), m.run_id.clone())),
    );
    let counts = group_by(att, |m| {
        Some((
            m.agent_id.clone(),
            m.model_name.clone(),
            m.run_id.clone(),
            m.job_difficulty.clone()?,
        ))
    });
    let grid: Vec<((String, String, String), &str)> = grid_keys
        .iter()
        .flat_map(|k| DIFFICULTIES.iter().map(move |d| (k.clone(), *d)))
        .collect();
    let (filled, as_float) = zero_filled(grid.iter().map(|((a, m, r), d)| {
        counts
            .get(&(a.clone(), m.clone(), r.clone(), d.to_string()))
            .map(|v| v.len() as i64)
    }));
    // Total attempts per agent-run over the grid.
    let mut totals: HashMap<&(String, String, String), Vec<f64>> = HashMap::new();
    for ((k, _), c) in grid.iter().zip(&filled) {
        totals.entry(k).or_default().push(*c);
    }
    let totals: HashMap<_, f64> = totals.into_iter().map(|(k, v)| (k, ksum(v))).collect();
    struct Cellv<'a> {
        key: (&'a str, &'a str, &'a str),
        run: &'a str,
        count: f64,
        freq: f64,
    }
    let cells: Vec<Cellv> = grid
        .iter()
        .zip(&filled)
        .map(|((k, d), c)| {
            let tot = totals[k];
            Cellv {
                key: (k.0.as_str(), k.1.as_str(), *d),
                run: k.2.as_str(),
                count: *c,
                freq: if tot == 0.0 { f64::NAN } else { c / tot },
            }
        })
        .collect();
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "job_difficulty",
        "count",
        "avg_count_per_run",
        "std_count_per_run",
        "avg_frequency_per_run",
        "n_runs",
    ]);
    for ((a, m, d), cs) in group_by(&cells, |c| Some(c.key)) {
        t.push(vec![
            Cell::Str(a.into()),
            Cell::Str(m.into()),
            Cell::Str(d.into()),
            count_cell(ksum(cs.iter().map(|c| c.count)), as_float),
            Cell::Float(kmean(cs.iter().map(|c| c.count))),
            Cell::Float(welford_std(cs.iter().map(|c| c.count))),
            Cell::Float(kmean(cs.iter().map(|c| c.freq))),
            Cell::Int(nunique(cs.iter().map(|c| Some(&c.run)))),
        ]);
    }
    t
}

/// `success_rate_by_difficulty.csv`: pooled attempted/succeeded/rate, and the
/// mean/std of per-run rates over runs with at least one attempt.
pub fn success_rate_by_difficulty(memory: &[MemRow], mode: Mode) -> Table {
    let att: Vec<&MemRow> = attempts(memory, mode)
        .into_iter()
        .filter(|m| m.job_difficulty.is_some())
        .collect();
    if att.is_empty() {
        return Table::empty();
    }
    let successes =
        |rows: &[&MemRow]| rows.iter().filter(|m| m.succeeded == Some(true)).count() as i64;
    let per_run = group_by(att.iter().copied(), |m| {
        Some((
            m.agent_id.clone(),
            m.model_name.clone(),
            m.job_difficulty.clone()?,
            m.run_id.clone(),
        ))
    });
    // (agent, model, difficulty) → per-run rates in run order.
    let mut rates: BTreeMap<(String, String, String), Vec<(String, f64)>> = BTreeMap::new();
    for ((a, m, d, r), rows) in per_run {
        let s = successes(&rows);
        rates
            .entry((a, m, d))
            .or_default()
            .push((r, s as f64 / rows.len() as f64));
    }
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "job_difficulty",
        "attempted",
        "succeeded",
        "success_rate_pooled",
        "avg_success_rate_per_run",
        "std_success_rate_per_run",
        "n_runs_with_attempt",
    ]);
    let pooled = group_by(att.iter().copied(), |m| {
        Some((
            m.agent_id.clone(),
            m.model_name.clone(),
            m.job_difficulty.clone()?,
        ))
    });
    for (key, rows) in pooled {
        let n = rows.len() as i64;
        let s = successes(&rows);
        let runs = &rates[&key];
        t.push(vec![
            Cell::Str(key.0),
            Cell::Str(key.1),
            Cell::Str(key.2),
            Cell::Int(n),
            Cell::Int(s),
            Cell::Float(s as f64 / n as f64),
            Cell::Float(kmean(runs.iter().map(|(_, x)| *x))),
            Cell::Float(welford_std(runs.iter().map(|(_, x)| *x))),
            Cell::Int(nunique(runs.iter().map(|(r, _)| Some(r)))),
        ]);
    }
    t
}

/// `category_difficulty_attempts.csv`: attempts per (agent, run, category,
/// difficulty) for the combinations that occur; total, mean, std, runs.
pub fn category_difficulty_attempts(memory: &[MemRow], mode: Mode) -> Table {
    let att = attempts(memory, mode);
    if att.is_empty() {
        return Table::empty();
    }
    let per_run = group_by(att, |m| {
        Some((
            m.agent_id.clone(),
            m.model_name.clone(),
            m.job_category.clone()?,
            m.job_difficulty.clone()?,
            m.run_id.clone(),
        ))
    });
    type Key = (String, String, String, String);
    let mut pooled: BTreeMap<Key, Vec<(String, i64)>> = BTreeMap::new();
    for ((a, m, c, d, r), rows) in per_run {
        pooled
            .entry((a, m, c, d))
            .or_default()
            .push((r, rows.len() as i64));
    }
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "job_category",
        "job_difficulty",
        "total_attempts",
        "avg_count_per_run",
        "std_count_per_run",
        "n_runs",
    ]);
    for ((a, m, c, d), runs) in pooled {
        t.push(vec![
            Cell::Str(a),
            Cell::Str(m),
            Cell::Str(c),
            Cell::Str(d),
            Cell::Int(runs.iter().map(|(_, n)| n).sum()),
            Cell::Float(kmean(runs.iter().map(|(_, n)| *n as f64))),
            Cell::Float(welford_std(runs.iter().map(|(_, n)| *n as f64))),
            Cell::Int(nunique(runs.iter().map(|(r, _)| Some(r)))),
        ]);
    }
    t
}
