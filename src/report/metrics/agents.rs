//! Metrics read from the agent records and configs (spec §7): `runs`,
//! `rounds_active`, `first_deactivation` and `energy_over_time`.

use crate::report::load::{AgentRow, Condition, MemRow};
use crate::report::stats::{group_by, kmean, nunique, welford_std};
use crate::report::table::{Cell, Table};

/// `runs.csv`: one row per run with its config (raw dump).
pub fn runs(cond: &Condition) -> Table {
    let mut t = Table::new(&[
        "run_id",
        "run_dir",
        "experiment",
        "seed",
        "max_rounds",
        "num_jobs",
        "model_size_exponent",
        "prompt_mode",
        "use_votes",
        "enable_sabotage",
    ]);
    for r in &cond.runs {
        let c = &r.data.config;
        t.push(vec![
            Cell::Str(r.run_id.clone()),
            Cell::Str(r.dir.display().to_string()),
            Cell::Str(c.experiment.clone()),
            Cell::Int(c.seed as i64),
            Cell::Int(i64::from(c.max_rounds)),
            Cell::Int(i64::from(c.num_jobs)),
            Cell::Float(c.model_size_exponent),
            Cell::opt_str(&c.prompt_mode),
            c.use_votes.map_or(Cell::Null, Cell::Bool),
            c.enable_sabotage.map_or(Cell::Null, Cell::Bool),
        ]);
    }
    t
}

fn by_agent(agents: &[AgentRow]) -> std::collections::BTreeMap<(String, String), Vec<&AgentRow>> {
    group_by(agents, |a| Some((a.agent_id.clone(), a.model_name.clone())))
}

/// `rounds_active.csv`: mean and std over runs of `rounds_active`.
pub fn rounds_active(agents: &[AgentRow]) -> Table {
    if agents.is_empty() {
        return Table::empty();
    }
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "avg_rounds_active",
        "std_rounds_active",
        "n_runs",
    ]);
    for ((id, model), rows) in by_agent(agents) {
        let xs: Vec<f64> = rows.iter().map(|r| r.rounds_active as f64).collect();
        t.push(vec![
            Cell::Str(id),
            Cell::Str(model),
            Cell::Float(kmean(xs.iter().copied())),
            Cell::Float(welford_std(xs.iter().copied())),
            Cell::Int(nunique(rows.iter().map(|r| Some(&r.run_id)))),
        ]);
    }
    t
}

/// `first_deactivation.csv`: share of runs with a deactivation round.
pub fn first_deactivation(agents: &[AgentRow]) -> Table {
    if agents.is_empty() {
        return Table::empty();
    }
    let mut t = Table::new(&["agent_id", "model_name", "deactivation_rate", "n_runs"]);
    for ((id, model), rows) in by_agent(agents) {
        t.push(vec![
            Cell::Str(id),
            Cell::Str(model),
            Cell::Float(kmean(
                rows.iter().map(|r| f64::from(u8::from(r.deactivated))),
            )),
            Cell::Int(nunique(rows.iter().map(|r| Some(&r.run_id)))),
        ]);
    }
    t
}

/// One point of an agent's energy trajectory in one run.
struct Point<'a> {
    agent_id: &'a str,
    model_name: &'a str,
    run_id: &'a str,
    round_num: i64,
    energy: f64,
    final_point: bool,
}

/// `energy_over_time.csv`: start-of-round energy for rounds 1..=max_rounds (0.0
/// for a round without a memory row, QUIRK-8) and the final energy at
/// max_rounds + 1; mean, std, min and max over runs.
pub fn energy_over_time(memory: &[MemRow], agents: &[AgentRow]) -> Table {
    if memory.is_empty() || agents.is_empty() {
        return Table::empty();
    }
    let mut points = Vec::new();
    for a in agents {
        let mut start = std::collections::HashMap::new();
        for m in memory
            .iter()
            .filter(|m| m.run_id == a.run_id && m.agent_id == a.agent_id)
        {
            start.insert(m.round_num, m.energy_start); // the last entry wins
        }
        for r in 1..=a.max_rounds {
            points.push(Point {
                agent_id: &a.agent_id,
                model_name: &a.model_name,
                run_id: &a.run_id,
                round_num: r,
                energy: start.get(&r).copied().unwrap_or(0.0),
                final_point: false,
            });
        }
        points.push(Point {
            agent_id: &a.agent_id,
            model_name: &a.model_name,
            run_id: &a.run_id,
            round_num: a.max_rounds + 1,
            energy: if a.final_energy.is_nan() {
                0.0
            } else {
                a.final_energy
            },
            final_point: true,
        });
    }
    let mut t = Table::new(&[
        "agent_id",
        "model_name",
        "round_num",
        "point_type",
        "avg_energy",
        "std_energy",
        "min_energy",
        "max_energy",
        "n_runs",
    ]);
    let groups = group_by(&points, |p| {
        let kind = if p.final_point {
            "final"
        } else {
            "round_start"
        };
        Some((p.agent_id, p.model_name, p.round_num, kind))
    });
    for ((id, model, round, kind), ps) in groups {
        let xs: Vec<f64> = ps.iter().map(|p| p.energy).collect();
        let finite = xs.iter().copied().filter(|x| !x.is_nan());
        let min = finite
            .clone()
            .fold(f64::NAN, |m, x| if m.is_nan() || x < m { x } else { m });
        let max = finite.fold(f64::NAN, |m, x| if m.is_nan() || x > m { x } else { m });
        t.push(vec![
            Cell::Str(id.to_string()),
            Cell::Str(model.to_string()),
            Cell::Int(round),
            Cell::Str(kind.to_string()),
            Cell::Float(kmean(xs.iter().copied())),
            Cell::Float(welford_std(xs.iter().copied())),
            Cell::Float(min),
            Cell::Float(max),
            Cell::Int(nunique(ps.iter().map(|p| Some(&p.run_id)))),
        ]);
    }
    t
}
