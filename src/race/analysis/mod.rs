//! The analysis of §8 of the race spec: humans and models on the same footing.
//!
//! - [`runs`]: the run folders an analysis reads and the Wilson interval.
//! - [`trajectory`]: player-race trajectories, from recorded turns or from the human data.
//! - [`human`]: the human data set (reader, the paper's Table 1 sample and controls).
//! - [`logit`]: the six logit specifications (Newton–Raphson, statsmodels' cluster-robust
//!   sandwich, patsy term names).
//! - [`strategy`]: the nearest of AS/AU/CS/CAS per player (ties kept), N-player AS/AU/CS.
//! - [`archetype`]: five features, z-scored with the human mean/SD, k-means as scikit-learn runs it.
//! - [`compare`]: humans versus models: the report section, its CSVs and the archetype plot.
//! - [`unsafe_rates`]: each model's Unsafe rate against the humans' (two-proportion and
//!   cluster-robust tests, Holm-adjusted), beside the comparison.
//!
//! Imports run one way: `report.rs` (the rate tables) calls [`compare`]; nothing here
//! imports the report writer.

pub mod archetype;
pub mod compare;
pub mod human;
pub mod logit;
pub mod runs;
pub(crate) mod strategy;
pub mod trajectory;
pub mod unsafe_rates;
