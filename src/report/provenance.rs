//! What produced a report's runs (`crate::provenance::summary`, which writes the section and the
//! warnings): the runs' records read from their folders, and `provenance.csv`, one row per run.

use crate::provenance::summary::{identity, Overview, RUNS};
use crate::provenance::{Provenance, Session};
use crate::report::load::Condition;
use crate::report::table::{Cell, Table};

pub use crate::provenance::summary::RunProvenance;

/// The section's content for the Energy Society's runs, naming `provenance.csv`.
pub fn overview(runs: &[RunProvenance]) -> Option<Overview> {
    crate::provenance::summary::overview(runs, RUNS).map(|mut o| {
        o.intro.push_str(" `provenance.csv` has one row per run.");
        o
    })
}

/// The "Provenance" section of `report.md`; empty when there are no runs.
pub fn section(runs: &[RunProvenance]) -> String {
    overview(runs)
        .map(|o| crate::provenance::summary::markdown(&o))
        .unwrap_or_default()
}

/// What a reader must know before citing the runs' figures.
pub fn warnings(runs: &[RunProvenance]) -> Vec<String> {
    crate::provenance::summary::warnings(runs, RUNS)
}

/// The provenance of every run of `conditions`, in report order.
pub fn read<'a>(conditions: impl IntoIterator<Item = &'a Condition>) -> Vec<RunProvenance> {
    let mut out = Vec::new();
    for c in conditions {
        for r in &c.runs {
            out.push(RunProvenance {
                run: format!("{}/{}", c.label, r.run_id),
                condition: c.label.clone(),
                record: Provenance::read(&r.dir).map_err(|e| format!("{e:#}")),
            });
        }
    }
    out
}

/// `provenance.csv`: one row per run.
pub fn table(runs: &[RunProvenance]) -> Table {
    let mut t = Table::new(&[
        "condition",
        "run",
        "sessions",
        "from_rounds",
        "started_utc",
        "builds",
        "dirty",
        "machines",
        "models",
        "jobs_digest",
    ]);
    for r in runs {
        let s = r.sessions();
        let join = |f: &dyn Fn(&Session) -> String| -> Cell {
            if s.is_empty() {
                return Cell::Null;
            }
            let mut v: Vec<String> = Vec::new();
            for x in s {
                let x = f(x);
                if !v.contains(&x) {
                    v.push(x);
                }
            }
            Cell::Str(v.join("; "))
        };
        t.push(vec![
            Cell::Str(r.condition.clone()),
            Cell::Str(r.run.rsplit('/').next().unwrap_or_default().to_string()),
            Cell::Int(s.len() as i64),
            join(&|x| x.from_round.to_string()),
            join(&|x| x.started_utc.clone()),
            join(&|x| {
                format!(
                    "{} {}",
                    x.build.version,
                    x.build.commit.as_deref().unwrap_or("unknown")
                )
            }),
            if s.is_empty() {
                Cell::Null
            } else {
                Cell::Bool(s.iter().any(|x| x.build.dirty == Some(true)))
            },
            join(&|x| x.machine.label()),
            join(&|x| {
                x.models
                    .iter()
                    .map(|o| format!("{}={}", o.model, identity(o)))
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
            join(&|x| x.jobs.digest.clone().unwrap_or_default()),
        ]);
    }
    t
}
