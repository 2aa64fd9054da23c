//! The AI development race (spec `ai-race.md`; paper seed 003): a repeated
//! game where companies choose SAFE or UNSAFE each round, built on the same
//! core as the Energy Society. The engine alone changes state; agents are
//! model calls through [`crate::agency::Agency`] (LLMs or scripted policies).
//!
//! - [`rng`]: CPython-exact random streams and seed formulas (§1.5).
//! - [`rules`]: actions, payoffs, constants, number formats (§1.1, §2).
//! - [`engine`]: rounds, horizon, terminal scoring (§1.2–§1.4, §2).
//! - [`parser`]: the strict ACTION contracts (§3.2, §5.2).
//! - [`prompt`]: prompt conditions rendered from `data/` (§3.1, §4, §5).
//! - [`scenario`]: one race as an async scenario, with its records (§3).
//! - [`agents`]: scripted strategies AS, AU, CS, CAS, random (§7.1).
//! - [`config`], [`run`]: experiment files, runs and sweeps (§3.3).
//! - [`replay`]: fixed-state replay across skins and P/Q mappings (§5.4).
//! - [`report`]: rates, Wilson intervals, trajectories, plot (§8).
//! - [`audit`]: the 41-probe validity audit (§6).
//! - [`egt`]: the evolutionary benchmark (§7).
//! - [`analysis`]: humans versus models (§8): run loading, trajectories, the human data
//!   set, the cluster-robust logits, strategies, archetypes and the comparison.

pub(crate) mod agents;
pub mod analysis;
pub mod audit;
pub mod config;
pub(crate) mod egt;
pub(crate) mod engine;
pub mod parser;
pub(crate) mod prompt;
pub(crate) mod replay;
pub mod report;
pub(crate) mod rng;
pub(crate) mod rules;
pub mod run;
pub mod scenario;

#[cfg(test)]
mod tests;
