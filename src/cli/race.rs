//! `joule race …`: the AI development race (spec `ai-race.md`): run a
//! config, sweep (resumable), the validity audit, the evolutionary
//! benchmark, and the report.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::backend::SCRIPTED_PREFIX;
use crate::energy_society::config::num;
use crate::llm::preflight::{check_models, ModelRef};
use crate::race::audit::{run_audit_plan, summarize, summary_table, AuditPlan, AuditRow};
use crate::race::config::ExperimentConfig;
use crate::race::egt::{
    matchup_table, stationary_full, stationary_small_mutation, PopulationParams, STRATEGIES,
};
use crate::race::run::{backend_for, backend_for_models, run_experiment, scripted_backend};
use crate::record::{write_json_atomic, EventLog};

#[derive(Args, Debug)]
pub struct RaceArgs {
    #[command(subcommand)]
    pub command: RaceCommand,
}

#[derive(Subcommand, Debug)]
pub enum RaceCommand {
    /// Run every race of a config into a fresh folder (a new or empty one, or
    /// this config's race folder to resume).
    #[command(
        after_help = "Examples:\n  joule race run configs/ai-race/baseline-scripted.toml\n  joule race run configs/ai-race/smollm2-vs-cs.toml --threads 2 --out runs/race/smollm2\n\nThe output folder's path is the last line on standard output."
    )]
    Run {
        /// Race config (TOML), e.g. configs/ai-race/baseline-scripted.toml.
        config: PathBuf,
        /// Output folder (default runs/race/<name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Continue a folder that already holds finished races.
        #[arg(long)]
        resume: bool,
        /// Worker threads that compute, at least 1; overrides `[llm] threads`
        /// (default: RAYON_NUM_THREADS if set, else every core).
        #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
        threads: Option<usize>,
    },
    /// Run a sweep (models × p_max × personas × N × reps), skipping finished races.
    #[command(
        after_help = "Example:\n  joule race sweep configs/ai-race/sweep-scripted.toml --out runs/race/sweep"
    )]
    Sweep {
        /// Sweep file (TOML), e.g. configs/ai-race/sweep-scripted.toml.
        file: PathBuf,
        /// Output folder (default runs/race/<name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Worker threads that compute, at least 1; overrides `[llm] threads`
        /// (default: RAYON_NUM_THREADS if set, else every core).
        #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
        threads: Option<usize>,
    },
    /// The task-validity audit (spec §6) against one model.
    #[command(
        after_help = "Examples:\n  joule race audit --model scripted:oracle --reps 1\n  joule race audit --model smollm2-135m-instruct --per-category 2 --out audit"
    )]
    Audit {
        /// Model key: a manifest model (`smollm2-135m-instruct`, `qwen2.5-7b-instruct`),
        /// or a scripted answerer (`scripted:oracle`, `scripted:sloppy`).
        #[arg(long, default_value = "scripted:oracle")]
        model: String,
        /// Times each probe is asked, per condition (1 to 1000).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
        reps: u32,
        /// Ask only the first N probes of each category (all conditions); default all 41.
        #[arg(long)]
        per_category: Option<usize>,
        /// Calls in flight at once (each slot reuses the shared rules context).
        #[arg(long, default_value_t = 16)]
        slots: usize,
        /// A race config whose `[llm]` section says how the model runs (device,
        /// stand-in, `backend = "openai"`); default: local candle on the CPU.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Folder for audit.jsonl and audit_summary.json.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the summary as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Worker threads that compute, at least 1; overrides `[llm] threads`
        /// (default: RAYON_NUM_THREADS if set, else every core).
        #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
        threads: Option<usize>,
    },
    /// The evolutionary benchmark (spec §7).
    #[command(
        after_help = "Example:\n  joule race egt --z 100 --pmax 0.1,0.6,0.9 --small-mutation"
    )]
    Egt {
        /// Population size Z.
        #[arg(long, default_value_t = 100)]
        z: usize,
        /// Selection intensity β (0: neutral drift; larger: the fitter strategy spreads faster).
        #[arg(long, default_value_t = 2.0)]
        beta: f64,
        /// Mutation rate μ: the chance a newcomer picks a strategy at random.
        #[arg(long, default_value_t = 0.02)]
        mu: f64,
        /// The races' p_max values to solve at, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = vec![0.1, 0.6, 0.9])]
        pmax: Vec<f64>,
        /// Also report the small-mutation limit.
        #[arg(long)]
        small_mutation: bool,
        /// Print the results as JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Fixed-state replay (spec §5.4): k states per p_max × 8 skins × 2 mappings.
    #[command(
        after_help = "Example:\n  joule race replay --model scripted:random --k 8 --out race-replay"
    )]
    Replay {
        /// The scripted answerer replayed (this build replays scripted models only).
        #[arg(long, default_value = "scripted:random")]
        model: String,
        /// States selected per p_max (1 to 10000).
        #[arg(long, default_value_t = 32,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
        k: usize,
        /// Folder for replay.jsonl (created; an existing replay.jsonl is refused).
        #[arg(long)]
        out: PathBuf,
    },
    /// Tables, trajectory features and a plot from run folders.
    ///
    /// Writes report.md (also printed), the CSVs behind every number it shows
    /// (unsafe_rates.csv, contract.csv, humans_vs_models.csv, logit.csv, ...) and
    /// the plots into --out. The files are written into a new folder beside --out and
    /// moved in at the end, so a failure leaves --out as it was.
    #[command(
        after_help = "Example:\n  joule race report runs/race/baseline-scripted --out race-report --html"
    )]
    Report {
        /// Race run folders, as `joule race run` or `joule race sweep` wrote them (each
        /// holding races.jsonl and turns.jsonl); the finished races of all of them are
        /// pooled into one report.
        #[arg(required = true, value_name = "DIRS")]
        dirs: Vec<PathBuf>,
        /// Folder the report is written into (created if need be; a folder that is not
        /// empty is refused unless --force).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Write into a folder that is not empty: the files the report written
        /// there before lists (`.joule-report-files`) are removed first; other
        /// files are kept.
        #[arg(long)]
        force: bool,
        /// Also write a self-contained `report.html` (rates with intervals, every race's trajectory).
        #[arg(long)]
        html: bool,
        /// The human experiment's data set (`airace_deidentified_long.csv` from the
        /// `public_dataset/` folder of the race's public repository): the report then
        /// opens with humans versus models.
        #[arg(long)]
        human: Option<PathBuf>,
    },
}

pub fn run(args: RaceArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        RaceCommand::Run {
            config,
            out,
            resume,
            threads,
        } => run_config(&config, out, resume, threads),
        RaceCommand::Sweep { file, out, threads } => run_config(&file, out, true, threads),
        RaceCommand::Audit {
            model,
            reps,
            per_category,
            slots,
            config,
            out,
            json,
            threads,
        } => audit(
            model,
            threads,
            AuditPlan {
                reps,
                per_category,
                slots,
            },
            config,
            out,
            json,
        ),
        RaceCommand::Egt {
            z,
            beta,
            mu,
            pmax,
            small_mutation,
            json,
        } => egt(z, beta, mu, &pmax, small_mutation, json),
        RaceCommand::Replay { model, k, out } => replay(model, k, out),
        RaceCommand::Report {
            dirs,
            out,
            human,
            html,
            force,
        } => {
            let md = crate::report::race_out::write_report_out(
                &dirs,
                &out,
                human.as_deref(),
                html,
                force,
            )?;
            crate::outln!("{md}");
            crate::errln!("report written to {}", out.display());
            if html {
                crate::errln!("wrote {}", out.join("report.html").display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_config(
    config: &PathBuf,
    out: Option<PathBuf>,
    resume: bool,
    threads: Option<usize>,
) -> anyhow::Result<ExitCode> {
    let cfg = ExperimentConfig::load(config)?;
    crate::threads::setup(threads, cfg.llm.threads)?;
    let seats: Vec<ModelRef> = cfg
        .lineups
        .iter()
        .enumerate()
        .flat_map(|(i, l)| {
            l.seats
                .iter()
                .enumerate()
                .map(move |(j, m)| ModelRef::new(format!("lineups[{i}].seats[{j}]"), m))
        })
        .collect();
    check_race_models(&config.display().to_string(), &seats, &cfg.llm)?;
    let dir = out.unwrap_or_else(|| PathBuf::from("runs/race").join(&cfg.name));
    let mut backend = backend_for(&cfg)?;
    crate::interrupt::install();
    let t = std::time::Instant::now();
    let s = run_experiment(&cfg, &dir, resume, backend.as_mut());
    if let (Err(_), Some(signal)) = (&s, crate::interrupt::requested()) {
        crate::errln!(
            "interrupted by {}: the races finished before it are kept in {}{}",
            crate::interrupt::signal_name(signal),
            dir.display(),
            if resume {
                "; run the same command again to play the rest"
            } else {
                ""
            }
        );
        return Ok(ExitCode::from(crate::interrupt::exit_status(signal)));
    }
    let s = s?;
    crate::errln!(
        "{}: {} races ({} played, {} already done, {} contaminated) in {:.1}s, {} batches (largest {}) -> {}",
        cfg.name,
        s.total_races,
        s.played_races,
        s.skipped_races,
        s.contaminated_races,
        t.elapsed().as_secs_f64(),
        s.batches,
        s.largest_batch,
        dir.display()
    );
    // Last, on standard output, as `joule run` ends: the folder to read.
    crate::outln!("run folder: {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

fn audit(
    model: String,
    threads: Option<usize>,
    plan: AuditPlan,
    config: Option<PathBuf>,
    out: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &out {
        let path = dir.join("audit.jsonl");
        anyhow::ensure!(
            !path.exists(),
            "{} exists; choose a new folder",
            path.display()
        );
    }
    let llm = match &config {
        Some(p) => ExperimentConfig::load(p)?.llm,
        None => Default::default(),
    };
    crate::threads::setup(threads, llm.threads)?;
    let file = config
        .as_ref()
        .map_or("command line".to_string(), |p| p.display().to_string());
    check_race_models(&file, &[ModelRef::new("--model", &model)], &llm)?;
    let mut backend = backend_for_models(&llm, &[model.as_str()], None)?;
    let t = std::time::Instant::now();
    let progress = crate::progress::calls::Tracker::audit(crate::progress::Mode::from_env());
    let watched = &mut crate::progress::calls::Watched::new(backend.as_mut(), progress.clone());
    let rows = crate::agency::run_one(watched, |agency| {
        run_audit_plan(agency, model.clone(), plan)
    });
    progress.finish();
    let rows: Vec<AuditRow> = rows?;
    crate::errln!(
        "{} probe outputs from {model} in {:.1}s",
        rows.len(),
        t.elapsed().as_secs_f64()
    );
    let summary = summarize(&rows);
    if let Some(dir) = &out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("audit.jsonl");
        anyhow::ensure!(
            !path.exists(),
            "{} exists; choose a new folder",
            path.display()
        );
        let mut log = EventLog::append(&path)?;
        for r in &rows {
            log.write(r)?;
        }
        write_json_atomic(dir.join("audit_summary.json"), &summary)?;
        // The kernels that computed the audited model's answers.
        if let Some(k) = backend.kernels(&[model.as_str()]) {
            write_json_atomic(dir.join("kernels.json"), &k)?;
        }
    }
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        crate::out!("{}", summary_table(&model, &summary));
    }
    Ok(ExitCode::SUCCESS)
}

/// Check, before anything runs, that every race model key can run: the
/// scripted race policies exist, the models are found or can be fetched.
fn check_race_models(
    file: &str,
    refs: &[ModelRef],
    llm: &crate::llm::LlmConfig,
) -> anyhow::Result<()> {
    let policies = scripted_backend(None).policy_names();
    check_models(file, refs, llm, &policies)
}

fn egt(
    z: usize,
    beta: f64,
    mu: f64,
    pmax: &[f64],
    small_mutation: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let params = PopulationParams { z, beta, mu };
    params.check()?;
    let mut per_p = serde_json::Map::new();
    let mut payoffs = serde_json::Map::new();
    let mut text = format!("Evolutionary benchmark: Z={z}, beta={beta}, mu={mu}\n");
    // Each value once, as a race config's `p_max`: a repeated one would be
    // solved and printed twice.
    let mut seen = std::collections::BTreeSet::new();
    for &p in pmax {
        anyhow::ensure!(
            (0.0..=1.0).contains(&p),
            "--pmax values must lie in [0, 1], got {}",
            num(p)
        );
        anyhow::ensure!(
            seen.insert(num(p)),
            "--pmax lists {} twice; give each value once",
            num(p)
        );
    }
    for &p in pmax {
        let table = matchup_table(p);
        let res = stationary_full(&table, params)?;
        let key = num(p);
        let freq: serde_json::Map<String, serde_json::Value> = STRATEGIES
            .iter()
            .zip(res.stationary)
            .map(|(s, f)| (s.name().to_string(), f.into()))
            .collect();
        let mut entry = serde_json::json!({
            "unsafe_rate": res.unsafe_rate,
            "stationary": freq,
            "states": res.states,
            "residual": res.residual,
        });
        let mut pay = serde_json::Map::new();
        for (i, a) in STRATEGIES.iter().enumerate() {
            let row: serde_json::Map<String, serde_json::Value> = STRATEGIES
                .iter()
                .enumerate()
                .map(|(j, b)| (b.name().to_string(), table.payoff[i][j].into()))
                .collect();
            pay.insert(a.name().to_string(), row.into());
        }
        payoffs.insert(key.clone(), pay.into());
        text.push_str(&format!(
            "\np_max = {key}: predicted Unsafe rate {:.1}% ({:.6})\n  stationary  {}\n",
            100.0 * res.unsafe_rate,
            res.unsafe_rate,
            STRATEGIES
                .iter()
                .zip(res.stationary)
                .map(|(s, f)| format!("{} {:.6}", s.name(), f))
                .collect::<Vec<_>>()
                .join("  ")
        ));
        text.push_str("  payoffs (row vs column)     AS         AU         CS        CAS\n");
        for (i, a) in STRATEGIES.iter().enumerate() {
            text.push_str(&format!(
                "  {:<24} {}\n",
                a.name(),
                table.payoff[i]
                    .iter()
                    .map(|x| format!("{x:>10.4}"))
                    .collect::<String>()
            ));
        }
        if small_mutation {
            let sm = stationary_small_mutation(&table, z, beta);
            let u: f64 = (0..4).map(|s| sm[s] * table.unsafe_fraction[s][s]).sum();
            text.push_str(&format!(
                "  small-mutation limit: Unsafe {:.6}; {}\n",
                u,
                STRATEGIES
                    .iter()
                    .zip(sm)
                    .map(|(s, f)| format!("{} {:.6}", s.name(), f))
                    .collect::<Vec<_>>()
                    .join("  ")
            ));
            entry["small_mutation"] = serde_json::json!({"unsafe_rate": u, "stationary": sm});
        }
        per_p.insert(key, entry);
    }
    if json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "params": {"z": z, "beta": beta, "mu": mu},
                "pmax": per_p,
                "payoffs": payoffs,
            }))?
        );
    } else {
        crate::out!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

fn replay(model: String, k: usize, out: PathBuf) -> anyhow::Result<ExitCode> {
    use crate::race::replay::{replay_cells, select_states};
    anyhow::ensure!(
        model.starts_with(SCRIPTED_PREFIX),
        "model `{model}` is not scripted; this build serves scripted models"
    );
    // Everything that can refuse the replay is checked before it is computed.
    let path = out.join("replay.jsonl");
    anyhow::ensure!(
        !path.exists(),
        "{} exists; choose a new folder",
        path.display()
    );
    check_race_models(
        "command line",
        &[ModelRef::new("--model", &model)],
        &Default::default(),
    )?;
    let mut states = Vec::new();
    for (i, p) in [0.1, 0.6, 0.9].into_iter().enumerate() {
        states.extend(select_states(crate::race::rng::BASE_SEED, i, p, k)?);
    }
    let skins: Vec<String> = crate::race::prompt::skins()?
        .into_iter()
        .map(|s| s.id)
        .collect();
    let mut backend = scripted_backend(None);
    let n_states = states.len();
    let rows = crate::agency::run_one(&mut backend, |agency| {
        replay_cells(agency, model.clone(), states, skins, 3)
    })?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    anyhow::ensure!(
        !path.exists(),
        "{} appeared while the replay ran; choose a new folder",
        path.display()
    );
    let mut log = EventLog::append(&path)?;
    for r in &rows {
        log.write(r)?;
    }
    let unsafe_n = rows.iter().filter(|r| r.unsafe_).count();
    let failed = rows.iter().filter(|r| r.parse_failed).count();
    crate::outln!(
        "{n_states} states x 8 skins x 2 mappings = {} cells; Unsafe {:.1}%, {failed} parse failures -> {}",
        rows.len(),
        100.0 * unsafe_n as f64 / rows.len().max(1) as f64,
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        race: super::RaceCommand,
    }

    /// Counts used as sizes are bounded on the command line, the error
    /// naming the flag.
    #[test]
    fn audit_reps_and_replay_k_are_bounded() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["race"], args].concat());
        assert!(parse(&["audit", "--reps", "5"]).is_ok());
        assert!(parse(&["replay", "--k", "32", "--out", "x"]).is_ok());
        for args in [
            &["audit", "--reps", "4000000000"][..],
            &["audit", "--reps", "0"],
            &["replay", "--k", "4000000000", "--out", "x"],
            &["replay", "--k", "0", "--out", "x"],
        ] {
            let e = parse(args).err().unwrap().to_string();
            assert!(e.contains(args[1]), "{args:?}: {e}");
        }
    }
}
