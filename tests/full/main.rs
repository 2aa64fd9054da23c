//! The full tier of the integration tests, compiled as one binary (one link
//! instead of one per file): each module is one former test file.
//! Needs the default model (scripts/fetch-default-model.sh), llama.cpp's
//! llama-server (scripts/fetch-llama-cpp.sh) or Chromium; a test whose
//! prerequisite is missing says it was skipped (under CI it fails).

#[path = "../batch_rows/mod.rs"]
mod batch_rows;
#[path = "../default_model/mod.rs"]
mod default_model;
#[path = "../roster_common/mod.rs"]
mod roster_common;

mod continuous_batching;
mod html_report;
mod llm_society;
mod memory_measure;
mod metered_society;
mod prefix_cache;
mod progress_output;
mod race_llm;
mod run_checks;
mod run_resume;
mod served_llama;
mod synth_vs_llama;
