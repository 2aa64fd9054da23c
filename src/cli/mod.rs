//! The `joule` command line: one subcommand per file in this folder.

pub mod bench;
pub mod generate;

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
    /// Generate from a GGUF model and print the text and token counts.
    Generate(generate::GenerateArgs),
    /// Measure prompt-processing and generation speed (llama-bench method).
    Bench(bench::BenchArgs),
}

/// Entry point of the binary: run the command, print errors with their chain.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Generate(a) => generate::run(a),
        Command::Bench(a) => bench::run(a),
    }
}
