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
    version = crate::provenance::version_line(),
    about = "Societies of local LLM agents that pay energy for every generated token",
    after_help = "Examples:\n  joule run configs/energy-society/baseline-comp.toml --rounds 2\n  joule report runs/baseline-comp --out report\n  joule help run"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the job lists (question ids) the reference's draw gives a seed.
    #[command(
        after_help = "Example:\n  joule jobs --dataset mmlu-pro-stratified.json --seed 42 --rounds 30"
    )]
    Jobs(jobs::JobsArgs),
    /// Run one Energy Society experiment from a TOML config.
    #[command(
        after_help = "Examples:\n  joule run configs/energy-society/baseline-comp.toml --rounds 2\n  joule run configs/energy-society/cpu-qwen2.5-1.5b.toml --threads 2 --out runs/qwen\n\nThe run folder's path is the last line on standard output. Exit status: 0 complete, 3 with\nINVOKE_ERRORs, 4 every agent out in round 1, 2 failed, 130/143 interrupted (SIGINT/SIGTERM)."
    )]
    Run(run::RunArgs),
    /// Run a grid of Energy Society configs x seeds, resumably.
    #[command(
        after_help = "Examples:\n  joule sweep configs/energy-society/sweep-paper.toml --jobs 4\n  joule sweep configs/energy-society/sweep-paper.toml --status\n\nExit status: 0 every cell complete, 3 a cell with INVOKE_ERRORs, 4 a cell with every agent\nout in round 1, 2 failed, 130/143 interrupted (SIGINT/SIGTERM)."
    )]
    Sweep(sweep::SweepArgs),
    /// Replay reference run folders through the faithful engine and compare.
    #[command(
        after_help = "Examples:\n  joule replay ../shared/data/reference-runs/energy-society/coop/exponent_0.5/run_1\n  joule replay ../shared/data/reference-runs/energy-society/coop/exponent_0.5\n\nExit status: 0 every run reproduced, 1 a mismatch or a run with no agents, 2 an error\n(no run folder found, a file that cannot be read)."
    )]
    Replay(replay::ReplayArgs),
    /// Aggregate metrics, tables and plots of Energy Society runs.
    #[command(
        after_help = "Examples:\n  joule report ../shared/data/reference-runs/energy-society/coop/exponent_0.5 --out out --html\n  joule report runs/sweep-paper --against paper"
    )]
    Report(report::ReportArgs),
    /// Write the self-contained HTML report of runs, print its path (`--open`: open it).
    #[command(after_help = "Example:\n  joule view runs/baseline-comp/seed_42 --open")]
    View(view::ViewArgs),
    /// Print the token ids of a text under a GGUF file's tokenizer.
    #[command(
        after_help = "Example:\n  echo 'Hello, world' | joule tokenize --gguf \"$(joule models path smollm2-135m-instruct)\""
    )]
    Tokenize(tokenize::TokenizeArgs),
    /// Generate from a GGUF model and print the text and token counts.
    #[command(
        after_help = "Example:\n  joule generate --gguf \"$(joule models path smollm2-135m-instruct)\" --prompt 'Name a prime.' --max-tokens 32"
    )]
    Generate(generate::GenerateArgs),
    /// Measure prompt-processing and generation speed (llama-bench method).
    #[command(
        after_help = "Examples:\n  joule bench --gguf \"$(joule models path smollm2-135m-instruct)\" -p 512 -n 128 -t 2\n  joule bench --gguf FILE -s 1,16,64"
    )]
    Bench(bench::BenchArgs),
    /// Write a model's logits for token ids to a .npy file (debugging, golden checks).
    #[command(
        after_help = "Example:\n  joule logits --gguf FILE --ids \"1 17 99\" --out logits.npy --against reference.npy"
    )]
    Logits(logits::LogitsArgs),
    /// Model manifests and files: list, fetch, path, inspect, serve-check, synth.
    #[command(
        after_help = "Examples:\n  joule models list\n  joule models fetch smollm2-135m-instruct"
    )]
    Models(models::ModelsArgs),
    /// The AI development race: run, sweep, audit, egt, replay, report.
    #[command(
        after_help = "Examples:\n  joule race run configs/ai-race/baseline-scripted.toml\n  joule race report runs/race/baseline-scripted --out race-report"
    )]
    Race(race::RaceArgs),
    /// The energy meters this machine has (NVML, RAPL, Apple) and why a missing one is missing.
    #[command(after_help = "Example:\n  joule meters --json")]
    Meters(meters::MetersArgs),
    /// Measure joules per prompt and generated token and fit the formula's k and α.
    #[command(
        after_help = "Example:\n  joule calibrate --gguf A.gguf B.gguf --batch 1,4,16 -p 128 -n 32 -r 3"
    )]
    Calibrate(calibrate::CalibrateArgs),
}

/// Check a command's `--out` file before anything is computed: a folder is
/// refused, and so is an existing file unless `force`. `kind` says what the
/// file is (`a GGUF file`).
pub(crate) fn check_out_file(out: &std::path::Path, force: bool, kind: &str) -> anyhow::Result<()> {
    if out.is_dir() {
        anyhow::bail!(
            "--out {}: is a folder, not {kind} to write; nothing was written",
            out.display()
        );
    }
    if !force && std::fs::symlink_metadata(out).is_ok() {
        anyhow::bail!(
            "--out {}: the file exists; nothing was written. Give a new file name, or add --force to replace it",
            out.display()
        );
    }
    Ok(())
}

/// A list flag of counts (`--seqs`, `bench society --sims`): one or more,
/// each from 1 to `max`; the error names the flag, the range and an
/// `example`.
pub(crate) fn check_counts(
    flag: &str,
    counts: &[usize],
    max: usize,
    example: &str,
) -> anyhow::Result<()> {
    if counts.is_empty() || counts.iter().any(|n| !(1..=max).contains(n)) {
        anyhow::bail!(
            "{flag}: give one or more counts from 1 to {max} (e.g. {example}), got {}",
            counts
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(())
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
