//! Measured energy in `joule report`: the joules an energy meter measured
//! for the calls of each agent and each phase (vote, decide, act), read from
//! the runs' `events.jsonl` (each call's `measured` record), beside what the
//! formula charges for the same calls, and their ratio (formula energy
//! units per measured joule). Engine overhead and idle energy come from each
//! run's `meter.json` (every session of the run: `meter::run_meter`) and are
//! reported apart, never spread over calls; runs and sessions that recorded
//! none are said, never counted as zero. Runs without measurements (reference runs, scripted
//! agents, no meter) contribute nothing, and the report says when nothing
//! was measured at all.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::meter::attribution::{MeasuredEnergy, MeterStatus};
use crate::report::load::Condition;
use crate::shown::md_cell;

/// The measured calls of one agent in one phase, over every run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Cell {
    pub agent_id: String,
    pub phase: String,
    pub calls: u64,
    pub measured_calls: u64,
    pub prefill_j: f64,
    pub decode_j: f64,
    /// Generated tokens of the measured calls.
    pub tokens: u64,
    /// The formula's charge of the measured calls.
    pub formula_charge: f64,
}

impl Cell {
    pub fn joules(&self) -> f64 {
        self.prefill_j + self.decode_j
    }
    /// Formula energy units per measured joule.
    pub fn ratio(&self) -> Option<f64> {
        (self.joules() > 0.0).then(|| self.formula_charge / self.joules())
    }
}

/// A condition's measured energy.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Measured {
    /// Meters named by the measured calls (`fake-…` are test meters).
    pub meters: Vec<String>,
    /// Per agent and phase, in roster then vote/decide/act order.
    pub cells: Vec<Cell>,
    /// Runs with at least one measured call / all runs.
    pub measured_runs: usize,
    pub runs: usize,
    /// Σ over the runs' `meter.json` (every session of each): engine overhead and idle joules.
    pub overhead_j: f64,
    pub idle_j: f64,
    /// Measured runs without a readable `meter.json`: their overhead and idle are unknown.
    pub without_meter_file: usize,
    /// Sessions of measured runs that recorded no meter totals (killed).
    pub sessions_missing: usize,
    /// Problems reading a run's events (the run is skipped).
    pub warnings: Vec<String>,
}

fn phase_rank(p: &str) -> u8 {
    match p {
        "vote" => 0,
        "decide" => 1,
        "act" => 2,
        _ => 3,
    }
}

/// Read the measured energy of every run of `condition`.
pub fn collect(condition: &Condition) -> Measured {
    let mut out = Measured {
        runs: condition.runs.len(),
        ..Default::default()
    };
    let mut cells: BTreeMap<(String, String), Cell> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for run in &condition.runs {
        for a in &run.data.agents {
            if !order.contains(&a.agent_id) {
                order.push(a.agent_id.clone());
            }
        }
        let events = run.dir.join("events.jsonl");
        // Cheap test first: most runs (reference, scripted) measured nothing.
        match std::fs::read(&events) {
            Ok(bytes) if bytes.windows(10).any(|w| w == b"\"measured\"") => {}
            _ => continue,
        }
        let events = match crate::energy_society::recorder::read_events(&events) {
            Ok(e) => e,
            Err(e) => {
                out.warnings.push(format!("{}: {e:#}", events.display()));
                continue;
            }
        };
        let mut any = false;
        for e in &events {
            if e.get("event").and_then(|v| v.as_str()) != Some("invocation") {
                continue;
            }
            let agent = e.get("agent").and_then(|v| v.as_str()).unwrap_or("?");
            let phase = e.get("phase").and_then(|v| v.as_str()).unwrap_or("?");
            let cell = cells
                .entry((agent.to_string(), phase.to_string()))
                .or_insert_with(|| Cell {
                    agent_id: agent.into(),
                    phase: phase.into(),
                    ..Default::default()
                });
            for c in e
                .get("calls")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
            {
                cell.calls += 1;
                let Some(m) = c
                    .get("measured")
                    .and_then(|m| serde_json::from_value::<MeasuredEnergy>(m.clone()).ok())
                else {
                    continue;
                };
                any = true;
                cell.measured_calls += 1;
                cell.prefill_j += m.prefill_j;
                cell.decode_j += m.decode_j;
                cell.tokens += c
                    .get("charged_tokens")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0);
                let formula = c
                    .get("formula_charge")
                    .and_then(|v| v.as_f64())
                    .or_else(|| c.get("charge").and_then(|v| v.as_f64()))
                    .unwrap_or(0.0);
                cell.formula_charge += formula;
                if !out.meters.contains(&m.meter) {
                    out.meters.push(m.meter.clone());
                }
            }
        }
        if any {
            out.measured_runs += 1;
        }
        if !any {
            continue;
        }
        match crate::meter::run_meter::RunMeter::read(&run.dir) {
            Ok(Some(m)) => {
                if let MeterStatus::Measured(t) = m.total() {
                    out.overhead_j += t.overhead_j;
                    out.idle_j += t.idle_j;
                }
                out.sessions_missing +=
                    m.missing_sessions(crate::provenance::sessions_in(&run.dir));
            }
            Ok(None) => out.without_meter_file += 1,
            Err(e) => {
                out.warnings.push(format!("{e:#}"));
                out.without_meter_file += 1;
            }
        }
    }
    let rank = |a: &str| order.iter().position(|x| x == a).unwrap_or(usize::MAX);
    let mut v: Vec<Cell> = cells
        .into_values()
        .filter(|c| c.measured_calls > 0)
        .collect();
    v.sort_by(|a, b| {
        (rank(&a.agent_id), phase_rank(&a.phase), &a.agent_id).cmp(&(
            rank(&b.agent_id),
            phase_rank(&b.phase),
            &b.agent_id,
        ))
    });
    out.cells = v;
    out
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.4}"))
}

/// The markdown section.
pub fn section(m: &Measured) -> String {
    let mut out = String::from("### Measured energy\n\n");
    if m.cells.is_empty() {
        let _ = writeln!(
            out,
            "Nothing was measured: none of the {} run(s) recorded an energy meter reading (no meter, scripted agents, or reference runs). The energies above are the formula's.\n",
            m.runs
        );
        return out;
    }
    let fake = m.meters.iter().any(|x| x.starts_with("fake-"));
    let _ = writeln!(
        out,
        "Meter: {}{}; {} of {} run(s) measured. Joules are each call's share of the forward steps it took part in; ratio = formula charge / measured J (energy units per joule).\n",
        m.meters.join(", "),
        if fake { " (a test meter: not measurements)" } else { "" },
        m.measured_runs,
        m.runs
    );
    out.push_str("| Agent | Phase | Measured calls | Prefill J | Decode J | J / generated token | Formula charge | Formula / J |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    let mut agents: Vec<String> = Vec::new();
    for c in &m.cells {
        if !agents.contains(&c.agent_id) {
            agents.push(c.agent_id.clone());
        }
    }
    let row = |out: &mut String, who: &str, phase: &str, c: &Cell| {
        let _ = writeln!(
            out,
            "| {} | {} | {}/{} | {:.3} | {:.3} | {} | {:.2} | {} |",
            md_cell(who),
            md_cell(phase),
            c.measured_calls,
            c.calls,
            c.prefill_j,
            c.decode_j,
            if c.tokens > 0 {
                format!("{:.5}", c.decode_j / c.tokens as f64)
            } else {
                "-".into()
            },
            c.formula_charge,
            fmt_ratio(c.ratio())
        );
    };
    let mut all = Cell::default();
    for a in &agents {
        let mut sum = Cell::default();
        for c in m.cells.iter().filter(|c| &c.agent_id == a) {
            row(&mut out, a, &c.phase, c);
            for s in [&mut sum, &mut all] {
                s.calls += c.calls;
                s.measured_calls += c.measured_calls;
                s.prefill_j += c.prefill_j;
                s.decode_j += c.decode_j;
                s.tokens += c.tokens;
                s.formula_charge += c.formula_charge;
            }
        }
        row(&mut out, a, "**all**", &sum);
    }
    let mut phases: Vec<&str> = m.cells.iter().map(|c| c.phase.as_str()).collect();
    phases.sort_by_key(|p| (phase_rank(p), p.to_string()));
    phases.dedup();
    for p in phases {
        let mut sum = Cell::default();
        for c in m.cells.iter().filter(|c| c.phase == p) {
            sum.calls += c.calls;
            sum.measured_calls += c.measured_calls;
            sum.prefill_j += c.prefill_j;
            sum.decode_j += c.decode_j;
            sum.tokens += c.tokens;
            sum.formula_charge += c.formula_charge;
        }
        row(&mut out, "**all agents**", p, &sum);
    }
    row(&mut out, "**all agents**", "**all**", &all);
    let mut unknown = Vec::new();
    if m.without_meter_file > 0 {
        unknown.push(format!(
            "{} measured run(s) have no readable meter.json, so their overhead and idle are not included",
            m.without_meter_file
        ));
    }
    if m.sessions_missing > 0 {
        unknown.push(format!(
            "{} session(s) of the runs ended without recording their meter totals (killed), so theirs are not included",
            m.sessions_missing
        ));
    }
    if m.without_meter_file > 0 && m.without_meter_file == m.measured_runs {
        let _ = writeln!(
            out,
            "\nNot in any call: engine overhead and idle are unknown: no measured run has a readable meter.json.\n"
        );
    } else {
        let _ = writeln!(
            out,
            "\nNot in any call: engine overhead {:.3} J, idle {:.3} J (from the runs' meter.json{}).\n",
            m.overhead_j,
            m.idle_j,
            if unknown.is_empty() {
                String::new()
            } else {
                format!("; {}", unknown.join("; "))
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_measured_says_so() {
        let s = section(&Measured {
            runs: 3,
            ..Default::default()
        });
        assert!(
            s.contains("Nothing was measured: none of the 3 run(s)"),
            "{s}"
        );
    }

    #[test]
    fn cells_give_totals_and_ratio() {
        let m = Measured {
            meters: vec!["rapl".into()],
            cells: vec![
                Cell {
                    agent_id: "a".into(),
                    phase: "vote".into(),
                    calls: 2,
                    measured_calls: 2,
                    prefill_j: 1.0,
                    decode_j: 3.0,
                    tokens: 10,
                    formula_charge: 2.0,
                },
                Cell {
                    agent_id: "a".into(),
                    phase: "act".into(),
                    calls: 1,
                    measured_calls: 1,
                    prefill_j: 0.0,
                    decode_j: 4.0,
                    tokens: 8,
                    formula_charge: 6.0,
                },
            ],
            measured_runs: 1,
            runs: 1,
            overhead_j: 0.5,
            idle_j: 2.0,
            ..Default::default()
        };
        let s = section(&m);
        assert!(
            s.contains("| a | vote | 2/2 | 1.000 | 3.000 | 0.30000 | 2.00 | 0.5000 |"),
            "{s}"
        );
        assert!(
            s.contains("| a | **all** | 3/3 | 1.000 | 7.000 | 0.38889 | 8.00 | 1.0000 |"),
            "{s}"
        );
        assert!(
            s.contains("| **all agents** | vote | 2/2 | 1.000 | 3.000 |"),
            "{s}"
        );
        let vote = s.find("| **all agents** | vote |").unwrap();
        let act = s.find("| **all agents** | act |").unwrap();
        assert!(vote < act, "phases in game order: {s}");
        assert!(s.contains("engine overhead 0.500 J, idle 2.000 J"), "{s}");
        // Runs and sessions that recorded no meter totals are said, not counted as zero.
        let s = section(&Measured {
            sessions_missing: 1,
            ..m.clone()
        });
        assert!(
            s.contains("idle 2.000 J (from the runs' meter.json; 1 session(s) of the runs ended without recording"),
            "{s}"
        );
        let s = section(&Measured {
            without_meter_file: 1,
            ..m
        });
        assert!(
            s.contains(
                "engine overhead and idle are unknown: no measured run has a readable meter.json"
            ) && !s.contains("0.500 J"),
            "{s}"
        );
    }
}
