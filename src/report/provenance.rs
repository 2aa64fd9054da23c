//! What produced a report's runs: the runs' records read from their folders, with the section,
//! the warnings and `provenance.csv` of `crate::provenance::summary` in the Energy Society's
//! wording.

use crate::provenance::summary::{Overview, RUNS};
use crate::provenance::Provenance;
use crate::report::load::Condition;

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
pub fn csv(runs: &[RunProvenance]) -> String {
    crate::provenance::summary::csv(runs, RUNS)
}
