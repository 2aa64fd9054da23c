//! The quick tier of the integration tests, compiled as one binary (one link
//! instead of one per file): each module is one former test file.
//! Needs no downloaded model, no llama.cpp build, no server and no browser
//! (it reads ../shared in place): `scripts/test.sh --quick` runs it with the
//! unit tests.

#[path = "../gguf_edit/mod.rs"]
mod gguf_edit;
#[path = "../roster_common/mod.rs"]
mod roster_common;

mod bad_gguf;
mod bench_results;
mod bench_trace;
mod cli_refusals;
mod fuzz;
mod generate;
mod golden_logits;
mod import_graph;
mod knobs_env;
mod memory_plan;
mod prefix_sharing;
mod race_analysis;
mod replay_reference;
mod report_folders;
mod report_output;
mod report_reference;
mod reproduction_calibration;
mod reproduction_report;
mod reproduction_stats;
mod roster_gemma4;
mod roster_nemotron_h;
mod roster_qwen35;
mod roster_society;
mod run_folder_states;
mod single_parse;
mod sweep_backends;
mod sweep_resume;
mod synth_ollama_layout;
mod threads_setting;
mod worklog_refs;
