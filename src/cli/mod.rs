//! The `joule` command line: one subcommand per file in this folder.

pub(crate) mod bench;
pub(crate) mod bench_layers;
pub(crate) mod bench_matmul;
pub(crate) mod bench_society;
pub(crate) mod bench_trace;
pub(crate) mod calibrate;
pub(crate) mod generate;
pub(crate) mod jobs;
/// Public for the logits comparisons of the tests (`agreement`).
pub mod logits;
pub(crate) mod meters;
pub(crate) mod models;
pub(crate) mod race;
pub(crate) mod replay;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod serve_check;
pub(crate) mod slurm;
pub(crate) mod sweep;
pub(crate) mod tokenize;
pub(crate) mod view;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "joule",
    version,
    about = "Societies of local LLM agents that pay energy for every generated token"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the job lists (question ids) the reference's draw gives a seed.
    Jobs(jobs::JobsArgs),
    /// Run one Energy Society experiment from a TOML config.
    Run(run::RunArgs),
    /// Run a grid of Energy Society configs x seeds, resumably.
    Sweep(sweep::SweepArgs),
    /// Replay reference run folders through the faithful engine and compare.
    Replay(replay::ReplayArgs),
    /// Aggregate metrics, tables and plots of Energy Society runs.
    Report(report::ReportArgs),
    /// Write the self-contained HTML report of runs, print its path (`--open`: open it).
    View(view::ViewArgs),
    /// Print the token ids of a text under a GGUF file's tokenizer.
    Tokenize(tokenize::TokenizeArgs),
    /// Generate from a GGUF model and print the text and token counts.
    Generate(generate::GenerateArgs),
    /// Measure prompt-processing and generation speed (llama-bench method).
    Bench(bench::BenchArgs),
    /// Write a model's logits for token ids to a .npy file (debugging, golden checks).
    Logits(logits::LogitsArgs),
    /// Model manifests and files: list, fetch, path, inspect.
    Models(models::ModelsArgs),
    /// The AI development race: run, sweep, audit, egt, report.
    Race(race::RaceArgs),
    /// The energy meters this machine has (NVML, RAPL, Apple) and why a missing one is missing.
    Meters(meters::MetersArgs),
    /// Measure joules per prompt and generated token and fit the formula's k and α.
    Calibrate(calibrate::CalibrateArgs),
}

/// Entry point of the binary: run the command, print errors with their chain.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            crate::errln!("error: {e:#}");
            // A command stopped by SIGINT/SIGTERM (`crate::interrupt`).
            match crate::interrupt::requested() {
                Some(signal) => ExitCode::from(crate::interrupt::exit_status(signal)),
                None => ExitCode::from(2),
            }
        }
    }
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Jobs(args) => jobs::run(args),
        Command::Run(a) => run::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Report(args) => report::run(args),
        Command::View(a) => view::run(a),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Generate(a) => generate::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Logits(a) => logits::run(a),
        Command::Models(args) => models::run(args),
        Command::Race(args) => race::run(args),
        Command::Meters(a) => meters::run(a),
        Command::Calibrate(a) => calibrate::run(a),
    }
}
