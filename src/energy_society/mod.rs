//! The Energy Society scenario (spec: ../shared/specs/energy-society.md).
//!
//! - [`config`]: the TOML experiment configuration (mode, conditions, roster).
//! - [`job`], [`listed_jobs`]: jobs and where they come from.
//! - [`schema`]: structured outputs, their JSON Schemas and parsers (§6).
//! - [`prompts`]: vote/decide/solve prompts, memory rendering, observations (§4).
//! - [`rules`]: grading, splits, fees, donations, bookkeeping (§1–§3, §10).
//! - [`state`]: per-agent roster entry, memory, errors, bookkeeping.
//! - [`ledger`]: the agents' energies, the only code that changes them (one
//!   line per change), and the conservation check.
//! - [`invoke`]: one invocation of up to 5 calls with parse-and-retry (§2).
//! - [`society`]: the round loop R0–R7 as an async scenario (§1), one
//!   function per phase of a round.
//! - [`policies`]: scripted baseline agents.
//! - [`recorder`]: run folders (events.jsonl, reference layout, marker).
//! - [`resume`]: resuming an interrupted run from its last complete round.
//! - [`replay`]: re-run a reference run through the engine and compare.
//! - [`trace`]: the same replay with each call also sent to a real model,
//!   generating the recorded length (`joule bench trace`).
//! - [`condition`]: the condition of a recorded run, inferred for replay (§5).
//! - [`layout`]: the reference run-folder files.
//! - [`call_errors`]: a run's INVOKE_ERROR and FORMAT_ERROR counts per agent.

pub mod call_errors;
pub mod condition;
pub mod config;
pub(crate) mod dataset;
pub(crate) mod draw;
pub(crate) mod invoke;
pub mod job;
pub(crate) mod layout;
pub mod ledger;
pub mod listed_jobs;
pub mod outcome;
pub(crate) mod policies;
pub(crate) mod procedural;
pub(crate) mod prompts;
pub mod recorder;
pub mod replay;
pub mod resume;
pub(crate) mod rules;
pub mod runner;
pub mod schema;
pub(crate) mod society;
#[cfg(test)]
mod society_tests;
pub mod state;
pub mod trace;
