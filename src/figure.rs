//! The look every static figure shares (the Energy Society's plots in
//! `report/plots.rs`, the race's charts in `race/report.rs` and
//! `race/analysis/compare.rs`). A leaf module, so the race need not import the
//! report folder for it.

use plotters::style::RGBAColor;

/// The grid: major lines only, faint (no minor-grid hatching).
pub const GRID: RGBAColor = RGBAColor(0, 0, 0, 0.1);
