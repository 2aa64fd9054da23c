//! The Energy Society scenario (spec: ../shared/specs/energy-society.md).

pub mod job;
pub mod layout;
