//! `joule meters`: which energy meters this machine has (NVML, RAPL, Apple
//! silicon) and why a missing one is missing.

use std::process::ExitCode;

use clap::Args;

#[derive(Args, Debug)]
pub struct MetersArgs {
    /// Print the probe results as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: MetersArgs) -> anyhow::Result<ExitCode> {
    let probes = crate::meter::probe();
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&probes)?);
        return Ok(ExitCode::SUCCESS);
    }
    crate::outln!("{:<6} {:<9} detail", "meter", "status");
    for p in &probes {
        let status = if p.available { "present" } else { "missing" };
        crate::outln!("{:<6} {:<9} {}", p.kind, status, p.detail);
    }
    if probes.iter().any(|p| p.available) {
        crate::outln!("`[llm] meter = \"auto\"` (the default) meters model calls with every present meter, summed.");
    } else {
        crate::outln!(
            "no energy meter on this machine: runs record the formula's charges only and say that nothing was measured."
        );
    }
    Ok(ExitCode::SUCCESS)
}
