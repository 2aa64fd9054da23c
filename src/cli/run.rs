//! `joule run CONFIG`: one Energy Society run from a TOML config, with
//! progress on standard error (`crate::progress`) and a per-agent summary
//! table at the end (with each agent's INVOKE_ERROR and FORMAT_ERROR
//! counts), then what the energy meter measured (also written to
//! `<run>/meter.json`) or that nothing was measured. Before anything runs,
//! every roster entry is checked (`runner::check_roster`) and a complete run
//! folder is kept unless `--force`; an interrupted one resumes from its last
//! complete round (`energy_society::resume`). SIGINT/SIGTERM stop the run
//! at its next model call with what it recorded kept (`crate::interrupt`).
//! The exit status is 0, 3 (INVOKE_ERRORs), 4 (every agent out in round 1),
//! 2 (failed), 130 or 143 (interrupted by SIGINT or SIGTERM).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::energy_society::call_errors::{CallErrors, EXIT_CALL_ERRORS};
use crate::energy_society::config::SocietyConfig;
use crate::energy_society::outcome;
use crate::energy_society::recorder::Recorder;
use crate::energy_society::runner::{backend_for, check_roster, run_or_resume};
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
    /// Override the config's max_rounds (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: Option<u32>,
    /// Override `[llm] meter` (`auto`, `none`, `nvml`, `rapl`, `fake-file:PATH`, `fake-power:WATTS`).
    #[arg(long)]
    pub meter: Option<crate::meter::MeterChoice>,
    /// Replace the run folder even when it holds a complete run.
    #[arg(long)]
    pub force: bool,
    /// Worker threads that compute, at least 1; overrides `[llm] threads`
    /// (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
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
    }
    cfg.llm.threads = Some(crate::threads::setup(args.threads, cfg.llm.threads)?);
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from("runs")
            .join(SocietyConfig::folder_name(&config_path))
            .join(format!("seed_{}", cfg.seed))
    });
    check_roster(&cfg, &config_path.display().to_string())?;
    check_out(&out, args.force)?;
    let mut backend = backend_for(&cfg)?;
    // A server answers: no meter of this machine sees its energy.
    let cfg_served = cfg.llm.backend == crate::llm::BackendKind::Openai
        && cfg
            .roster
            .iter()
            .any(|a| !a.model.starts_with(crate::backend::SCRIPTED_PREFIX));
    crate::interrupt::install();
    let max_rounds = cfg.max_rounds;
    let progress =
        crate::progress::calls::Tracker::rounds(crate::progress::Mode::from_env(), max_rounds);
    let t = progress.clone();
    let resumed = progress.clone();
    let out_shown = out.display().to_string();
    let result = run_or_resume(
        cfg,
        &mut crate::progress::calls::Watched::new(backend.as_mut(), progress.clone()),
        &out,
        args.force,
        move |kept| {
            resumed.resumed(kept as u64);
            crate::errln!(
                "resuming {out_shown}: {} kept (replayed from events.jsonl), playing from round {}",
                crate::energy_society::resume::kept_words(kept),
                kept + 1
            );
        },
        move |_| t.unit_done(None, None),
    );
    progress.finish();
    if let (Err(e), Some(signal)) = (&result, crate::interrupt::requested()) {
        crate::errln!("{}", interrupted_note(&out, max_rounds, signal, e));
        return Ok(ExitCode::from(crate::interrupt::exit_status(signal)));
    }
    let result = result?;
    let errors = CallErrors::read(&out)?.unwrap_or_default();
    crate::out!("{}", summary_table(&result, &errors));
    crate::out!("{}", errors.describe());
    match backend.metering() {
        // Written by the run, one record per session (`meter::run_meter`).
        Some(status) => match crate::meter::run_meter::RunMeter::read(&out) {
            Ok(Some(m)) => crate::outln!(
                "{}",
                m.summary(crate::provenance::sessions_in(&out))
            ),
            _ => crate::outln!("{}", status.summary()),
        },
        None if cfg_served => crate::outln!(
            "energy: nothing was measured: the agents were answered by a model server, whose energy Joule cannot read"
        ),
        None => {
            crate::outln!("energy: nothing was measured: every agent is scripted (no model ran)")
        }
    }
    crate::outln!("run folder: {}", out.display());
    if errors.invoke_errors == 0 && outcome::all_out_in_round_one(&result.folder.agents) {
        crate::errln!(
            "warning: {} (exit status {})",
            outcome::warning(&out),
            outcome::EXIT_ALL_OUT
        );
        return Ok(ExitCode::from(outcome::EXIT_ALL_OUT));
    }
    Ok(exit_status(&errors))
}

/// What an interrupted run kept and how to go on.
fn interrupted_note(out: &Path, max_rounds: u32, signal: i32, e: &anyhow::Error) -> String {
    let kept = crate::energy_society::resume::complete_rounds(out);
    let mut why = crate::interrupt::signal_name(signal);
    // Another failure that came with the signal is said too.
    if e.downcast_ref::<crate::interrupt::Interrupted>().is_none() {
        why += &format!(" ({e:#})");
    }
    let how = "run the same command again (same config, seed and --out)";
    if kept == 0 {
        format!(
            "interrupted by {why}: no round was complete; {} keeps what was recorded, without a COMPLETE marker. To start again, {how}",
            out.display()
        )
    } else {
        format!(
            "interrupted by {why}: {} keeps {} of at most {max_rounds} (events.jsonl; no COMPLETE marker; the round under way is dropped when it resumes). To continue from round {}, {how}",
            out.display(),
            crate::energy_society::resume::kept_words(kept),
            kept + 1
        )
    }
}

/// 0 for a complete run, [`EXIT_CALL_ERRORS`] for one that completed with
/// INVOKE_ERRORs (docs/commands.md, "Exit statuses"); a failed run is an error (2).
pub fn exit_status(errors: &CallErrors) -> ExitCode {
    if errors.invoke_errors > 0 {
        crate::errln!(
            "warning: the run completed with {} INVOKE_ERROR(s): some agents did not run as configured (exit status {EXIT_CALL_ERRORS})",
            errors.invoke_errors
        );
        ExitCode::from(EXIT_CALL_ERRORS)
    } else {
        ExitCode::SUCCESS
    }
}

/// Whether `out` may receive a run: a complete run is kept unless `force`
/// (the error says how to run again); an incomplete one is resumed or
/// refused by `runner::run_or_resume` (replaced with `force`, and this says
/// so); a folder that is not a run folder is never cleared.
pub fn check_out(out: &Path, force: bool) -> anyhow::Result<()> {
    if !out.exists() {
        return Ok(());
    }
    // Nothing is said of a folder another process is writing but that.
    if out.is_dir() {
        drop(crate::record::FolderLock::acquire(out)?);
    }
    if Recorder::is_complete(out) {
        if force {
            crate::errln!(
                "note: {} held a complete run: replacing it (--force)",
                out.display()
            );
            return Ok(());
        }
        anyhow::bail!(
            "{} already holds a complete run; nothing was run. Run again with --force to replace it, or give a new --out",
            out.display()
        );
    }
    let empty = std::fs::read_dir(out)
        .with_context(|| format!("reading {}", out.display()))?
        .next()
        .is_none();
    if empty {
        return Ok(());
    }
    // A run writes config.resolved.toml before anything else, so a folder
    // without one holds no run of Joule's, unless it holds nothing but a
    // run's files (what a run cut short while writing or replacing them
    // leaves: started again, or refused by the resume when rounds are kept).
    if !out.join("config.resolved.toml").is_file()
        && !crate::energy_society::recorder::only_run_files(out)?
    {
        let records = if out.join("events.jsonl").exists() {
            ": it holds an events.jsonl but not the config.resolved.toml a run writes first"
        } else {
            " (no config.resolved.toml)"
        };
        anyhow::bail!(
            "{} exists and is not a run folder{records}; nothing was run. Give a new or empty --out",
            out.display()
        );
    }
    if force {
        crate::errln!(
            "note: {} holds an incomplete run (no COMPLETE marker): replacing its files (--force; other files there are kept)",
            out.display()
        );
    }
    Ok(())
}

/// The per-agent summary printed after a run, with each agent's
/// INVOKE_ERROR and FORMAT_ERROR counts. `model` is the paper's model (its
/// name and size S price the calls); `answered by` is the model that
/// answered the calls (a stand-in, a served model, a scripted policy, or
/// the paper's model itself).
pub fn summary_table(r: &SocietyResult, errors: &CallErrors) -> String {
    // Names are read from the run folder: escaped, so that each row keeps to one line.
    let shown = crate::shown::terminal;
    let answered = |a: &crate::energy_society::layout::AgentRecord| {
        shown(a.answered_by.as_deref().unwrap_or(&a.model_name))
    };
    let width = r
        .folder
        .agents
        .iter()
        .map(|a| answered(a).chars().count())
        .chain([22])
        .max()
        .unwrap_or(22);
    let mut s = format!(
        "{} rounds played\n{:<10} {:<22} {:<width$} {:>6} {:>12} {:>7} {:>9} {:>10} {:>9} {:>13} {:>13}\n",
        r.rounds_played,
        "agent",
        "model",
        "answered by",
        "size",
        "final",
        "active",
        "attempts",
        "successes",
        "donations",
        "invoke_errors",
        "format_errors"
    );
    for (a, (att, succ, don)) in r.folder.agents.iter().zip(&r.stats) {
        let (inv, fmt) = errors.of(&a.agent_id);
        s += &format!(
            "{:<10} {:<22} {:<width$} {:>6} {:>12.2} {:>7} {:>9} {:>10} {:>9} {:>13} {:>13}\n",
            shown(&a.agent_id),
            shown(&a.model_name),
            answered(a),
            a.model_size,
            a.final_energy,
            a.rounds_active,
            att,
            succ,
            don,
            inv,
            fmt
        );
    }
    if r.folder.agents.iter().any(|a| a.answered_by.is_some()) {
        s += "note: `model` is the paper's model, whose name and size S set the prices; the calls were answered by the `answered by` model\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::energy_society::layout::{AgentRecord, RunConfig, RunFolder};

    /// The default config's roster after two rounds, each agent answered by its stand-in.
    fn default_result() -> SocietyResult {
        let cfg = SocietyConfig::from_toml_str(DEFAULT_CONFIG, DEFAULT_CONFIG_NAME).unwrap();
        let agents: Vec<AgentRecord> = cfg
            .roster
            .iter()
            .map(|r| AgentRecord {
                agent_id: r.agent_id.clone(),
                model_name: r.model_name.clone(),
                model_size: r.size,
                init_energy: r.init_energy,
                final_energy: r.init_energy,
                rounds_active: 2,
                deactivated_at_round: None,
                memory: vec![],
                errors: vec![],
                answered_by: cfg.llm.answered_by(&r.model, &r.model_name),
            })
            .collect();
        SocietyResult {
            folder: RunFolder {
                config: RunConfig {
                    experiment: cfg.name.clone(),
                    run_number: 1,
                    max_rounds: cfg.max_rounds,
                    num_jobs: cfg.num_jobs(),
                    model_size_exponent: cfg.cost.alpha,
                    seed: cfg.seed,
                    difficulty_distribution: cfg.difficulty,
                    agents: vec![],
                    prompt_mode: None,
                    use_votes: None,
                    enable_sabotage: None,
                },
                agents,
                token_usage: vec![],
                transcript: vec![],
            },
            rounds_played: 2,
            stats: vec![(0, 0, 0); 5],
        }
    }

    /// The main command (`joule run`, the embedded default) names, in its
    /// summary, the model that answered beside each paper model.
    #[test]
    fn the_default_runs_summary_names_the_stand_in_beside_the_paper_model() {
        let result = default_result();
        assert!(result
            .folder
            .agents
            .iter()
            .all(|a| a.answered_by.as_deref() == Some("smollm2-135m-instruct")));
        let table = summary_table(&result, &CallErrors::default());
        let header = table.lines().nth(1).unwrap();
        assert!(
            header.contains(" model ") && header.contains(" answered by "),
            "{table}"
        );
        let row = table.lines().find(|l| l.starts_with("agent_4 ")).unwrap();
        assert!(
            row.contains("qwen3:8b") && row.contains("smollm2-135m-instruct"),
            "{table}"
        );
        assert!(
            table.contains("the calls were answered by the `answered by` model"),
            "{table}"
        );
    }

    /// Names read from a run folder with a newline or an escape sequence keep
    /// the summary at one row per agent, with nothing raw on the terminal.
    #[test]
    fn the_summary_escapes_control_characters_in_names() {
        let mut result = default_result();
        result.folder.agents[0].model_name = "gemma4\ne4b\u{1b}[31m".into();
        result.folder.agents[1].answered_by = Some("served\nname".into());
        result.folder.agents[2].agent_id = "agent\r3".into();
        let table = summary_table(&result, &CallErrors::default());
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
        let rows: Vec<&str> = table.lines().skip(2).take(5).collect();
        assert!(
            rows[0].starts_with("agent_1 ") && rows[0].contains("gemma4\\ne4b\\u{1b}[31m"),
            "{table}"
        );
        assert!(rows[1].contains("served\\nname"), "{table}");
        assert!(rows[2].starts_with("agent\\r3 "), "{table}");
        assert!(
            rows[3].starts_with("agent_4 ") && rows[4].starts_with("agent_5 "),
            "{table}"
        );
    }
}
