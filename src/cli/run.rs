//! `joule run CONFIG`: one Energy Society run from a TOML config, with
//! progress on standard error (`crate::progress`) and a per-agent summary
//! table at the end, then what the energy meter measured (also written to
//! `<run>/meter.json`) or that nothing was measured.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::energy_society::config::SocietyConfig;
use crate::energy_society::runner::{backend_for, run_society};
use crate::energy_society::society::SocietyResult;

/// The embedded default experiment (`joule run` with no config).
pub const DEFAULT_CONFIG: &str = include_str!("../../configs/energy-society/default-smollm2.toml");
/// The name the embedded default goes by in errors and run folders.
pub const DEFAULT_CONFIG_NAME: &str = "configs/energy-society/default-smollm2.toml";

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The experiment config (TOML). Without one, the embedded default runs: a
    /// short competitive baseline backed by SmolLM2-135M-Instruct (fetched on first use).
    pub config: Option<PathBuf>,
    /// Run folder (default: runs/<config name>/seed_<seed>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override the config's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override the config's max_rounds.
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Override `[llm] meter` (`auto`, `none`, `nvml`, `rapl`, `fake-file:PATH`, `fake-power:WATTS`).
    #[arg(long)]
    pub meter: Option<crate::meter::MeterChoice>,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config_path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_NAME));
    let mut cfg = match &args.config {
        Some(path) => {
            let mut cfg = SocietyConfig::load(path)?;
            if let Some(dir) = path.parent() {
                cfg.resolve_paths(dir);
            }
            cfg
        }
        None => SocietyConfig::from_toml_str(DEFAULT_CONFIG, DEFAULT_CONFIG_NAME)?,
    };
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    if let Some(m) = args.meter {
        cfg.llm.meter = m;
    }
    if let Some(r) = args.rounds {
        cfg.max_rounds = r;
        cfg.validate(&config_path.display().to_string())?;
    }
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from("runs")
            .join(SocietyConfig::folder_name(&config_path))
            .join(format!("seed_{}", cfg.seed))
    });
    let mut backend = backend_for(&cfg)?;
    let progress =
        crate::progress::calls::Tracker::rounds(crate::progress::Mode::from_env(), cfg.max_rounds);
    let t = progress.clone();
    let result = run_society(
        cfg,
        &mut crate::progress::calls::Watched::new(backend.as_mut(), progress.clone()),
        Some(&out),
        move |_| t.unit_done(None, None),
    );
    progress.finish();
    let result = result?;
    print!("{}", summary_table(&result));
    match backend.metering() {
        Some(status) => {
            println!("{}", status.summary());
            crate::record::write_json_atomic(out.join("meter.json"), &status)?;
        }
        None => println!("energy: nothing was measured: every agent is scripted (no model ran)"),
    }
    println!("run folder: {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// The per-agent summary printed after a run.
pub fn summary_table(r: &SocietyResult) -> String {
    let mut s = format!(
        "{} rounds played\n{:<10} {:<22} {:>6} {:>12} {:>7} {:>9} {:>10} {:>9}\n",
        r.rounds_played,
        "agent",
        "model",
        "size",
        "final",
        "active",
        "attempts",
        "successes",
        "donations"
    );
    for (a, (att, succ, don)) in r.folder.agents.iter().zip(&r.stats) {
        s += &format!(
            "{:<10} {:<22} {:>6} {:>12.2} {:>7} {:>9} {:>10} {:>9}\n",
            a.agent_id, a.model_name, a.model_size, a.final_energy, a.rounds_active, att, succ, don
        );
    }
    s
}
