//! The Energy Society scenario (spec: ../shared/specs/energy-society.md).

pub mod dataset;
pub mod draw;
pub mod job;
pub mod layout;
pub mod procedural;
