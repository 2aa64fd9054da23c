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
//! - [`trajectory`]: player-race trajectories shared by the analyses below.
//! - [`human`]: the human experiment's data set and its analysed sample (§8).
//! - [`logit`]: the six cluster-robust logits (§8).
//! - [`strategy`]: nearest-strategy classification (§8).
//! - [`archetype`]: the five features, human k-means, nearest centroid (§8).
//! - [`compare`]: humans versus models in the report (§8).
//! - [`unsafe_rates`]: each model's Unsafe rate against the humans' (two-proportion and cluster-robust tests).

pub mod agents;
pub mod archetype;
pub mod audit;
pub mod compare;
pub mod config;
pub mod egt;
pub mod engine;
pub mod human;
pub mod logit;
pub mod parser;
pub mod prompt;
pub mod replay;
pub mod report;
pub mod rng;
pub mod rules;
pub mod run;
pub mod scenario;
pub mod strategy;
pub mod trajectory;
pub mod unsafe_rates;

#[cfg(test)]
mod tests;
