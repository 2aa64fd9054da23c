//! Conditions whose runs are identical: for every seed, the same
//! `agents.json` records (every decision, energy and memory entry) in both.
//! Then every effect between the two conditions is empty by construction
//! (scripted policies that ignore the condition's switch, say), and the
//! report says so instead of showing differences of zero as findings.

use crate::report::load::Condition;

/// The records of a run that decide every metric: each agent's record,
/// less the label of the model that answered.
fn records(run: &crate::report::load::Run) -> Vec<crate::energy_society::layout::AgentRecord> {
    run.data
        .agents
        .iter()
        .map(|a| crate::energy_society::layout::AgentRecord {
            answered_by: None,
            ..a.clone()
        })
        .collect()
}

/// Whether `a` and `b` hold runs of the same seeds with identical records.
pub fn identical(a: &Condition, b: &Condition) -> bool {
    if a.runs.is_empty() || a.runs.len() != b.runs.len() {
        return false;
    }
    a.runs.iter().all(|ra| {
        b.runs
            .iter()
            .any(|rb| rb.data.config.seed == ra.data.config.seed && records(ra) == records(rb))
    })
}

/// One sentence per pair of conditions with identical runs.
pub fn notes<'a>(conditions: impl IntoIterator<Item = &'a Condition>) -> Vec<String> {
    let conditions: Vec<&Condition> = conditions.into_iter().collect();
    let mut out = Vec::new();
    for (i, a) in conditions.iter().enumerate() {
        for b in &conditions[i + 1..] {
            if identical(a, b) {
                out.push(format!(
                    "the runs of `{}` and `{}` are identical (the same records for each of their {} seed(s)): the agents did not respond to what differs between the conditions, so every effect between them is zero by construction, not a finding",
                    a.label,
                    b.label,
                    a.runs.len()
                ));
            }
        }
    }
    out
}
