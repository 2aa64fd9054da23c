//! Joule: societies of local LLM agents where every generated token costs energy.
//!
//! Module map (see ARCHITECTURE.md for the flow of one round):
//! - [`backend`]: requests, responses and the `Backend` trait (scenario ↔ inference boundary).
//! - [`agency`]: the driver that runs many scenarios at once and batches their calls per model.
//! - [`scripted`]: non-LLM policies behind the backend interface.
//! - [`energy`]: cost model and Python-exact rounding.
//! - [`record`]: append-only JSONL event logs and atomic JSON files.
//! - [`cli`]: the `joule` command line.

pub mod agency;
pub mod backend;
pub mod cli;
pub mod energy;
pub mod energy_society;
pub mod inference;
pub mod record;
pub mod scripted;
