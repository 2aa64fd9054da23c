//! The per-agent state of a society besides energy: the roster entry, the
//! price per token, memory, errors and the end-of-round bookkeeping.
//! Energies live in the ledger (`ledger.rs`), the only code that changes them.

use super::config::RosterEntry;
use super::layout::{ErrorRecord, MemoryEntry};

/// One agent's roster entry and history. Its energy is not here: the
/// ledger holds it and is the only code that changes it, so this does not
/// compile:
///
/// ```compile_fail,E0609
/// use joule::energy_society::{config::SocietyConfig, state::Agent};
/// let mut agent = Agent::new(SocietyConfig::paper_roster("greedy").remove(0), 0.03);
/// agent.energy = 0.0;
/// ```
///
/// (while the same agent without the assignment does:)
///
/// ```
/// use joule::energy_society::{config::SocietyConfig, state::Agent};
/// let agent = Agent::new(SocietyConfig::paper_roster("greedy").remove(0), 0.03);
/// assert_eq!(agent.id(), "agent_1");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub spec: RosterEntry,
    /// Unrounded per-token price `k · S^α`.
    pub per_token: f64,
    pub rounds_active: u32,
    pub deactivated_at_round: Option<u32>,
    pub memory: Vec<MemoryEntry>,
    /// `memory`, each entry rendered for prompts (`prompts::render_entry`).
    pub memory_text: Vec<String>,
    pub errors: Vec<ErrorRecord>,
}

impl Agent {
    pub fn new(spec: RosterEntry, per_token: f64) -> Self {
        Agent {
            spec,
            per_token,
            rounds_active: 0,
            deactivated_at_round: None,
            memory: vec![],
            memory_text: vec![],
            errors: vec![],
        }
    }
    pub fn id(&self) -> &str {
        &self.spec.agent_id
    }

    /// Add a memory entry (and its rendering for prompts).
    pub fn remember(&mut self, entry: MemoryEntry) {
        self.memory_text.push(super::prompts::render_entry(&entry));
        self.memory.push(entry);
    }
}
