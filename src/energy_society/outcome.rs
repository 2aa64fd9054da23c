//! A run that completed but leaves nothing to study: every agent was out
//! (energy 0) at the end of round 1, so no agent ever played a second round.
//! Prices or energies made the run meaningless; `joule run` and `joule
//! sweep` warn and exit with [`EXIT_ALL_OUT`] instead of 0.

use std::path::Path;

use super::layout::AgentRecord;

/// The exit status of a run (or sweep) in which every agent was out in round 1.
pub const EXIT_ALL_OUT: u8 = 4;

/// Whether every agent of a run was out at the end of round 1.
pub fn all_out_in_round_one(agents: &[AgentRecord]) -> bool {
    !agents.is_empty()
        && agents
            .iter()
            .all(|a| a.deactivated_at_round.is_some_and(|r| r <= 1))
}

/// The warning for such a run (`dir` its folder).
pub fn warning(dir: &Path) -> String {
    format!(
        "{}: every agent was out (energy 0) at the end of round 1: the prices (`[cost]`) or energies (`init_energy`) leave nothing to study",
        dir.display()
    )
}

/// Whether the complete run in `dir` had every agent out in round 1 (a
/// folder without a readable `agents.json` has not).
pub fn folder_all_out(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("agents.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Vec<AgentRecord>>(&t).ok())
        .is_some_and(|a| all_out_in_round_one(&a))
}
