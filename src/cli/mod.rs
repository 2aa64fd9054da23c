//! The `joule` command line: one subcommand per file in this folder.

pub mod race;

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
    /// The AI development race: run, sweep, audit, egt, report.
    Race(race::RaceArgs),
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
        Command::Race(args) => race::run(args),
    }
}
