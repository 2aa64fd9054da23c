//! `joule replay RUN_DIR...`: replay reference run folders through the
//! faithful engine and report every value it does not reproduce.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::energy_society::replay::replay_run;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Reference run folders (config.json, agents.json, token_usage.json, transcript.json).
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let mut failed = 0;
    for dir in &args.runs {
        let r = replay_run(dir)?;
        let c = &r.charges;
        println!(
            "{}: {} rounds, {} values checked, charges: {} single-call formula, {} multi-call split, {} unrecorded, {} invoke errors; {} mismatches",
            r.run, r.rounds, r.values_checked, c.single_call, c.split_calls, c.unrecorded, c.invoke_errors,
            r.mismatches.len()
        );
        for m in &r.mismatches {
            println!("  MISMATCH {}: {m}", r.run);
        }
        if !r.mismatches.is_empty() {
            failed += 1;
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
