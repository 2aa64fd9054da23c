//! `joule bench trace RUN_DIR…`: the paper's own workload as a benchmark.
//! Reference runs are replayed through the faithful engine, and every call
//! also goes to the agent's roster model on a real backend (Joule's engine,
//! or an OpenAI-compatible server with `--via`), which generates exactly the
//! recorded number of tokens (`energy_society::trace`). Reports wall time,
//! generated and prompt tokens/s per model and per phase, the prefix cache's
//! reuse, peak memory against the memory plan, and the estimated time of the
//! paper's 60-run grid on this machine from the measured rates.
//!
//! Models: `--models` as in `bench society`; without it the roster's five
//! models are synthesized at real width (`joule models synth`, Q4_K_M, with
//! their vocabularies from `--vocab-dir`; `--layers` for fewer layers) into
//! Joule's cache, once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::agency::Driver;
use crate::backend::Backend;
use crate::energy_society::condition::Overrides;
use crate::energy_society::config::{num, SocietyConfig};
use crate::energy_society::replay::Replay;
use crate::energy_society::trace::{rates_by, Pace, Rates, TraceBackend, TraceCall};
use crate::inference::llm_backend::{EngineStats, LlmBackend};
use crate::served::openai::OpenAiBackend;

/// Runs of the paper's grid (6 conditions × 2 exponents × 5 runs).
pub const GRID_RUNS: usize = 60;

#[derive(Args, Debug)]
pub struct TraceBenchArgs {
    /// Reference run folders (each with config.json, transcript.json, token_usage.json,
    /// agents.json), or folders searched for them (e.g. ../shared/data/reference-runs).
    #[arg(required = true, value_name = "RUN_DIR")]
    pub dirs: Vec<PathBuf>,
    /// Runs replayed at once (the runs found are taken in order, N at a time).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// At most this many of the runs found (in order).
    #[arg(long)]
    pub max_runs: Option<usize>,
    /// Rounds sent to the model: `R` (rounds 1 to R) or `A..B` (A to B; the calls of rounds
    /// before A are answered from the record without the model). Default: every round.
    #[arg(long)]
    pub rounds: Option<String>,
    /// Every call generates its recorded count times F (at least 1 token): a shorter trace for
    /// small machines. The output says so, and the grid estimate scales back.
    #[arg(long, default_value_t = 1.0)]
    pub token_scale: f64,
    /// Each agent on its own model: GGUF paths (or manifest names) in roster order (gemma4-e4b,
    /// nemotron-3-nano-4b, qwen3.5-4b, qwen3-8b, qwen3.5-9b) or `MODEL=PATH` entries;
    /// comma-separated. Default: the roster's models synthesized at real width.
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Without `--models`: synthesize the roster's models with this many layers (same widths,
    /// same kinds of layer), for machines that cannot hold them at full depth.
    #[arg(long)]
    pub layers: Option<u64>,
    /// Without `--models`: the vocabulary GGUFs the synthesized models copy their tokenizers
    /// and chat templates from (and, beside it, `chat-templates/` for Nemotron's).
    #[arg(long, default_value = "../shared/data/tokenizers")]
    pub vocab_dir: PathBuf,
    /// Without `--models`: where synthesized files are kept (default: Joule's model cache,
    /// `synth/` under it).
    #[arg(long)]
    pub synth_dir: Option<PathBuf>,
    /// Local: cpu, cuda or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(short = 't', long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
    /// Local: MiB of each model's prefix cache (0 turns it off).
    #[arg(long)]
    pub prefix_cache_mib: Option<usize>,
    /// Local: how sequence states store keys and values, f32 or f16.
    #[arg(long = "kv-cache")]
    pub kv_cache: Option<crate::inference::engine::state::KvCache>,
    /// Local: tokens per sequence the memory plan assumes (default: the trace's longest call,
    /// its recorded length plus 4,096 prompt tokens).
    #[arg(long)]
    pub plan_context: Option<usize>,
    /// Send the calls to an OpenAI-compatible server at this API root (llama-server, Ollama's
    /// `/v1`, vLLM) instead of the local engine: the same prompts, `max_tokens` = the recorded
    /// count, `ignore_eos`.
    #[arg(long)]
    pub via: Option<String>,
    /// With `--via`: the served model name of every call (one model); without it each agent's
    /// roster `model_name` (`gemma4:e4b`, …: Ollama's tags, llama-server router aliases).
    #[arg(long, requires = "via")]
    pub served_model: Option<String>,
    /// With `--via`: `best` (every call of a wave at once, every slot busy) or `reference`
    /// (one call at a time in run and roster order, as the reference ran it).
    #[arg(long, requires = "via", value_parser = ["best", "reference"], default_value = "best")]
    pub served_mode: String,
    /// With `--via --served-mode best`: requests in flight at once (default: 5 per run).
    #[arg(long, requires = "via")]
    pub max_concurrency: Option<usize>,
    /// Stop the trace this many seconds after the command starts (loading the models
    /// included) and report the calls answered by then (`complete: false`): a measurement
    /// that always ends in time. The calls in flight at the limit are dropped: their time
    /// counts, their tokens do not, so the rates err slow.
    #[arg(long, value_name = "S")]
    pub time_limit: Option<f64>,
    /// Print the result as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The estimated time of the paper's grid on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct GridEstimate {
    pub runs: usize,
    /// Mean recorded generated tokens of one whole run (the runs given, every round).
    pub tokens_per_run: f64,
    /// Mean recorded calls of one whole run.
    pub calls_per_run: f64,
    pub generated_tokens: f64,
    /// From the measured generated tokens/s alone.
    pub hours_by_generated_rate: f64,
    /// Decode time scaled by generated tokens and the rest (prefill, the engine's per-call
    /// work, the scenarios) by calls (local engine only).
    pub hours_split: Option<f64>,
    /// The estimate printed (`hours_split` where known).
    pub hours: f64,
    pub assumptions: Vec<String>,
}

/// Peak memory against the memory plan (local engine).
#[derive(Debug, Clone, Serialize)]
pub struct MemoryUse {
    pub planned_bytes: u64,
    pub required_bytes: u64,
    /// The process's peak resident memory (VmHWM), when it can be read.
    pub peak_bytes: Option<u64>,
    pub plan: String,
}

/// One trace measurement.
#[derive(Debug, Clone, Serialize)]
pub struct TraceBench {
    pub backend: String,
    /// `engine` (local), or the served mode.
    pub mode: String,
    pub models: Vec<(String, String)>,
    pub runs: Vec<String>,
    pub runs_at_once: usize,
    pub rounds: (u32, u32),
    pub token_scale: f64,
    pub threads: usize,
    pub load_s: Option<f64>,
    pub wall_s: f64,
    /// False when `--time-limit` stopped the trace before every run of the slice ended.
    pub complete: bool,
    /// Calls in flight when `--time-limit` stopped the trace: dropped from the counts,
    /// their time kept in `wall_s`.
    pub cut_calls: usize,
    pub calls: usize,
    pub failed_calls: usize,
    /// Calls that generated another count than asked for.
    pub short_calls: usize,
    pub requested_tokens: u64,
    pub generated_tokens: u64,
    pub prompt_tokens: u64,
    pub generated_tps: f64,
    pub prompt_tps: f64,
    pub per_model: BTreeMap<String, Rates>,
    pub per_phase: BTreeMap<String, Rates>,
    /// Local engine: its counters over the trace (prompt tokens computed and reused,
    /// the prefix cache's lookups and reuse, prefill and decode time).
    pub engine: Option<EngineStats>,
    pub memory: Option<MemoryUse>,
    /// Values of the recorded runs the replay did not reproduce (must be 0).
    pub replay_mismatches: usize,
    pub grid: GridEstimate,
    /// Every call sent to the model: run, round, phase, agent, tokens, times.
    pub call_log: Vec<TraceCall>,
}

/// Run folders under `dirs` (a folder with `config.json` and `transcript.json`
/// is a run; others are searched, in name order).
pub fn find_runs(dirs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        if dir.join("config.json").is_file() && dir.join("transcript.json").is_file() {
            out.push(dir.to_path_buf());
            return Ok(());
        }
        let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("{}: cannot read the folder", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        subs.sort_by(|a, b| natural(a).cmp(&natural(b)));
        for s in subs {
            walk(&s, out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    for d in dirs {
        if !d.is_dir() {
            anyhow::bail!(
                "{}: no such folder (expected a reference run folder)",
                d.display()
            );
        }
        let before = out.len();
        walk(d, &mut out)?;
        if out.len() == before {
            anyhow::bail!(
                "{}: no reference run in it (a run folder has config.json and transcript.json)",
                d.display()
            );
        }
    }
    Ok(out)
}

/// A path's name with its digits compared as numbers (`run_2` before `run_10`).
fn natural(p: &Path) -> (String, u64) {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let n = digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    (name[..name.len() - digits.len()].to_string(), n)
}

/// `--rounds`: `R` → (1, R); `A..B` → (A, B).
pub fn parse_rounds(s: &str) -> anyhow::Result<(u32, u32)> {
    let bad = || anyhow::anyhow!("--rounds {s}: expected R (rounds 1 to R) or A..B, both from 1");
    let (a, b) = match s.split_once("..") {
        Some((a, b)) => (
            a.trim().parse::<u32>().map_err(|_| bad())?,
            b.trim()
                .trim_start_matches('=')
                .parse::<u32>()
                .map_err(|_| bad())?,
        ),
        None => (1, s.trim().parse::<u32>().map_err(|_| bad())?),
    };
    if a == 0 || b < a {
        return Err(bad());
    }
    Ok((a, b))
}

/// The roster model key of a recorded `model_name` (the embedded default
/// society's roster names both).
fn roster_key(model_name: &str) -> anyhow::Result<String> {
    let cfg = SocietyConfig::from_toml_str(
        crate::cli::run::DEFAULT_CONFIG,
        crate::cli::run::DEFAULT_CONFIG_NAME,
    )?;
    cfg.roster
        .iter()
        .find(|a| a.model_name == model_name)
        .map(|a| a.model.clone())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "a recorded agent's model_name `{model_name}` is not one of the roster's ({})",
                cfg.roster
                    .iter()
                    .map(|a| a.model_name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The vocabulary GGUF (and chat template) each roster model is synthesized with.
fn vocabulary(model: &str) -> Option<(&'static str, Option<&'static str>)> {
    Some(match model {
        "gemma4-e4b" => ("ggml-vocab-gemma-4.gguf", None),
        // Nemotron's own vocabulary is not among them: Llama 3's with Nemotron's template.
        "nemotron-3-nano-4b" => (
            "ggml-vocab-llama-bpe.gguf",
            Some("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"),
        ),
        "qwen3.5-4b" | "qwen3.5-9b" => ("ggml-vocab-qwen35.gguf", None),
        "qwen3-8b" | "qwen2.5-7b-instruct" | "qwen2.5-1.5b-instruct" => {
            ("ggml-vocab-qwen2.gguf", None)
        }
        _ => return None,
    })
}

/// The roster's models synthesized at real width (once; later runs find the files).
fn synthesized(args: &TraceBenchArgs, keys: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    use crate::inference::files::manifest::Catalog;
    use crate::inference::files::synth::{recipe::FileType, synthesize, Layout, SynthOptions};
    let dir = match &args.synth_dir {
        Some(d) => d.clone(),
        None => crate::inference::files::sources::Sources::from_env()
            .cache_dir
            .join("synth"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let catalog = Catalog::load(None)?;
    let mut out = BTreeMap::new();
    for key in keys {
        if out.contains_key(key) {
            continue;
        }
        let layers = args.layers.map(|l| format!("-{l}l")).unwrap_or_default();
        let path = dir.join(format!("{key}-q4_k_m{layers}.gguf"));
        if !path.is_file() {
            let m = catalog.get(key)?;
            let cfg = m
                .synth
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("{}: no [synth] table", m.origin))?;
            let (vocab, template) = vocabulary(key).ok_or_else(|| {
                anyhow::anyhow!("no vocabulary known for `{key}`; give --models with its file")
            })?;
            let vocab = args.vocab_dir.join(vocab);
            if !vocab.is_file() {
                anyhow::bail!(
                    "--vocab-dir {}: no {} (the vocabulary `{key}` is synthesized with; give \
                     --vocab-dir, or --models with your own files)",
                    args.vocab_dir.display(),
                    vocab.display()
                );
            }
            let chat_template = match template {
                Some(t) => {
                    let p = args
                        .vocab_dir
                        .parent()
                        .unwrap_or(Path::new("."))
                        .join("chat-templates")
                        .join(t);
                    Some(std::fs::read_to_string(&p).with_context(|| {
                        format!("reading {} (`{key}`'s chat template)", p.display())
                    })?)
                }
                None => None,
            };
            // Written beside its final name, so a file cut short is never taken for a whole one.
            let part = path.with_extension("gguf.part");
            crate::errln!("synthesizing {key} into {}", path.display());
            synthesize(
                &m.name,
                &m.architecture,
                cfg,
                &SynthOptions {
                    out: part.clone(),
                    file_type: FileType::parse("q4_k_m").context("q4_k_m")?,
                    layout: Layout::parse("llama.cpp").context("llama.cpp layout")?,
                    layers: args.layers,
                    seed: 0,
                    vocab: Some(vocab),
                    chat_template,
                    quiet: true,
                },
            )?;
            std::fs::rename(&part, &path)
                .with_context(|| format!("renaming {} to {}", part.display(), path.display()))?;
        }
        out.insert(key.clone(), path.display().to_string());
    }
    Ok(out)
}

/// Recorded calls and generated tokens of one whole run (tokens > 0).
/// Every `token_usage.json` entry with tokens names a call of `transcript.json`
/// (as in every reference run): the trace replays the transcript's calls and
/// the grid estimate sums the entries, so an entry without a call would count
/// tokens no call generated.
fn check_counts_have_calls(replay: &Replay) -> anyhow::Result<()> {
    let calls: std::collections::BTreeSet<(u32, &str, &str)> = replay
        .run
        .transcript
        .iter()
        .map(|t| (t.round_num, t.phase.as_str(), t.agent_id.as_str()))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for (i, u) in replay.run.token_usage.iter().enumerate() {
        let key = (u.round_num, u.phase.as_str(), u.agent_id.as_str());
        let at = || {
            format!(
                "{}: entry {i} (round {}, {}, {})",
                replay.dir.join("token_usage.json").display(),
                u.round_num,
                u.phase,
                u.agent_id
            )
        };
        anyhow::ensure!(
            seen.insert(key),
            "{}: listed twice, so its tokens would be counted twice",
            at()
        );
        anyhow::ensure!(
            u.output_tokens == 0 || calls.contains(&key),
            "{}: {} tokens but no call in transcript.json, so the trace cannot generate them",
            at(),
            u.output_tokens
        );
    }
    Ok(())
}

fn recorded_totals(replay: &Replay) -> (u64, u64) {
    let calls = replay
        .run
        .token_usage
        .iter()
        .filter(|u| u.output_tokens > 0)
        .count() as u64;
    let tokens = replay.run.token_usage.iter().map(|u| u.output_tokens).sum();
    (calls, tokens)
}

/// The runs' faithful configurations with the roster's model keys and `last` rounds.
fn trace_config(replay: &Replay, last: u32) -> anyhow::Result<SocietyConfig> {
    let mut cfg = replay.config.clone();
    for a in cfg.roster.iter_mut() {
        a.model = roster_key(&a.model_name)
            .with_context(|| format!("{}: {}", replay.dir.display(), a.agent_id))?;
    }
    cfg.max_rounds = last.min(cfg.max_rounds);
    Ok(cfg)
}

fn measure(args: &TraceBenchArgs) -> anyhow::Result<TraceBench> {
    let deadline = crate::backend::time_limit_deadline(args.time_limit)?;
    if !(args.token_scale > 0.0 && args.token_scale <= 1.0) {
        anyhow::bail!(
            "--token-scale {}: expected a factor in (0, 1]",
            num(args.token_scale)
        );
    }
    if args.runs == 0 {
        anyhow::bail!("--runs: at least 1");
    }
    for (flag, n) in [
        ("--max-runs", args.max_runs),
        ("--max-concurrency", args.max_concurrency),
    ] {
        if n == Some(0) {
            anyhow::bail!("{flag}: expected at least 1, got 0");
        }
    }
    let mut dirs = find_runs(&args.dirs)?;
    if let Some(n) = args.max_runs {
        dirs.truncate(n);
    }
    // Read every run first: a bad folder stops here, before any model loads.
    let mut prepared = Vec::new();
    for d in &dirs {
        let (replay, backend) = Replay::prepare(d, &Overrides::default())?;
        check_counts_have_calls(&replay)?;
        prepared.push((replay, backend));
    }
    let max_rounds = prepared
        .iter()
        .map(|(r, _)| r.config.max_rounds)
        .max()
        .unwrap_or(1);
    let (first, last) = match &args.rounds {
        Some(s) => parse_rounds(s)?,
        None => (1, max_rounds),
    };
    if first > max_rounds {
        anyhow::bail!(
            "--rounds {}: the runs have at most {max_rounds} rounds, so nothing would be traced",
            args.rounds.as_deref().unwrap_or_default()
        );
    }
    let keys: Vec<String> = prepared[0]
        .0
        .config
        .roster
        .iter()
        .map(|a| roster_key(&a.model_name))
        .collect::<anyhow::Result<_>>()?;
    let longest = prepared
        .iter()
        .flat_map(|(r, _)| r.run.token_usage.iter())
        .filter(|u| u.round_num >= first && u.round_num <= last)
        .map(|u| crate::energy_society::trace::scaled(u.output_tokens as u32, args.token_scale))
        .max()
        .unwrap_or(0) as usize;

    // The backend: Joule's engine with the roster's models, or the server.
    let mut llm = crate::llm::LlmConfig {
        device: args.device.clone(),
        structured: crate::inference::llm_backend::StructuredMode::Free,
        plan_context: args.plan_context.unwrap_or(longest + 4096),
        ..Default::default()
    };
    if let Some(m) = args.prefix_cache_mib {
        llm.prefix_cache_mib = m;
    }
    if let Some(kv) = args.kv_cache {
        llm.kv_cache = kv;
    }
    let pace = match args.served_mode.as_str() {
        "reference" if args.via.is_some() => Pace::OneAtATime,
        _ => Pace::Together,
    };
    let mut local: Option<LlmBackend> = None;
    let mut served: Option<OpenAiBackend> = None;
    let models: Vec<(String, String)>;
    match &args.via {
        None => {
            llm.stand_ins = if args.models.is_empty() {
                synthesized(args, &keys)?
            } else {
                crate::cli::bench_society::roster_models(&args.models, &keys)?
            };
            models = llm
                .stand_ins
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            local = Some(llm.local_backend()?);
        }
        Some(url) => {
            llm.backend = crate::llm::BackendKind::Openai;
            llm.base_url = Some(url.clone());
            llm.model = args.served_model.clone();
            llm.max_concurrency = match pace {
                Pace::OneAtATime => 1,
                Pace::Together => args.max_concurrency.unwrap_or(5 * args.runs).max(1),
            };
            crate::llm::validate(&llm).map_err(|(k, m)| anyhow::anyhow!("{k}: {m}"))?;
            let mut names = crate::served::config::ServedNames::default();
            let roster = &prepared[0].0.config.roster;
            names.add(
                llm.model.as_deref(),
                roster
                    .iter()
                    .zip(&keys)
                    .enumerate()
                    .map(|(i, (a, k))| (format!("roster[{i}]"), k.as_str(), a.model_name.as_str())),
            )?;
            models = roster
                .iter()
                .zip(&keys)
                .map(|(a, k)| {
                    (
                        k.clone(),
                        args.served_model.clone().unwrap_or(a.model_name.clone()),
                    )
                })
                .collect();
            served = Some(OpenAiBackend::connect(&llm.served(), names)?);
        }
    }

    // Load every model and check the memory plan before the clock starts.
    let at_once = args.runs.min(prepared.len());
    let mut memory = None;
    let load_s = match local.as_mut() {
        Some(b) => {
            let t = Instant::now();
            let mut demand = crate::backend::MemoryDemand::default();
            for _ in 0..at_once {
                demand.add_run(keys.iter().map(String::as_str));
            }
            crate::backend::check_memory(b, &demand)?;
            let plan = b.memory_plan(&demand)?;
            memory = Some(MemoryUse {
                planned_bytes: plan.planned(),
                required_bytes: plan.required(),
                peak_bytes: None,
                plan: plan.render(),
            });
            Some(t.elapsed().as_secs_f64())
        }
        None => None,
    };
    let before = local.as_ref().map(|b| b.stats());
    let inner: &mut dyn Backend = match (local.as_mut(), served.as_mut()) {
        (Some(b), _) => b,
        (None, Some(b)) => b,
        (None, None) => anyhow::bail!("no backend"),
    };

    let (mut grid_calls, mut grid_tokens) = (0u64, 0u64);
    for (r, _) in &prepared {
        let (c, t) = recorded_totals(r);
        grid_calls += c;
        grid_tokens += t;
    }
    let n_runs = prepared.len();
    let mut calls: Vec<TraceCall> = Vec::new();
    let mut mismatches = 0usize;
    let mut wall = 0.0f64;
    let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut prepared = prepared.into_iter();
    let mut run_index = 0usize;
    let mut cut_calls = 0usize;
    let mut limited = false;
    while !limited {
        let chunk: Vec<_> = prepared.by_ref().take(at_once).collect();
        if chunk.is_empty() {
            break;
        }
        let mut driver = Driver::new();
        let mut replays = Vec::new();
        let mut backends = Vec::new();
        for (replay, backend) in chunk {
            let society = replay.society(Some(trace_config(&replay, last)?));
            driver.spawn(move |agency| society.run(agency));
            replays.push(replay);
            backends.push(backend);
        }
        let sessions = driver.sessions().to_vec();
        let mut trace = TraceBackend::new(&mut *inner, args.token_scale, first, pace);
        trace.stop_at(deadline);
        for (s, b) in sessions.iter().zip(backends) {
            trace.add_run(*s, b);
        }
        let progress = crate::progress::calls::Tracker::sessions(
            crate::progress::Mode::from_env(),
            "trace",
            sessions.len(),
            std::time::Duration::ZERO,
        );
        trace.start_clock();
        let t0 = Instant::now();
        let results = driver.run(
            &mut crate::progress::calls::Watched::new(&mut trace, progress.clone()),
            |_| {},
        );
        progress.finish();
        let elapsed = t0.elapsed().as_secs_f64();
        // Stopped by the limit: some run of the chunk did not end (a chunk that ended just
        // before the limit is whole).
        limited = trace.past_deadline() && results.iter().any(|r| r.is_err());
        if limited {
            cut_calls += trace.cut_calls().len();
        }
        calls.extend(trace.calls().iter().cloned().map(|mut c| {
            c.run += run_index;
            c.start_s += wall;
            c.end_s += wall;
            c
        }));
        let mut backs = trace.into_runs();
        for ((replay, session), result) in replays.iter().zip(&sessions).zip(results) {
            if limited && result.is_err() {
                // Stopped at the time limit: nothing whole to compare with the record.
                continue;
            }
            let result = result.with_context(|| format!("tracing {}", replay.dir.display()))?;
            let Some(b) = backs.remove(session) else {
                continue;
            };
            let whole = last >= replay.config.max_rounds;
            let report = replay.report(&b, Some(&result), (!whole).then_some(last));
            if let Some(m) = report.mismatches.first() {
                crate::errln!(
                    "{}: the replay did not reproduce the record ({} mismatches; first: {m})",
                    replay.dir.display(),
                    report.mismatches.len()
                );
            }
            mismatches += report.mismatches.len();
        }
        wall += elapsed;
        run_index += at_once;
    }
    if let Some(m) = memory.as_mut() {
        m.peak_bytes = crate::inference::engine::memory_measure::proc_memory()
            .ok()
            .map(|p| p.hwm);
    }
    let engine = match (before, local.as_ref()) {
        (Some(b), Some(l)) => Some(l.stats().since(&b)),
        _ => None,
    };
    let requested: u64 = calls.iter().map(|c| c.requested as u64).sum();
    let generated: u64 = calls.iter().map(|c| c.generated as u64).sum();
    let prompt: u64 = calls.iter().map(|c| c.prompt_tokens as u64).sum();
    let grid = grid_estimate(
        grid_tokens as f64 / n_runs as f64,
        grid_calls as f64 / n_runs as f64,
        calls.len(),
        generated,
        wall,
        engine.as_ref().map(|e| e.decode_ms / 1e3),
        engine
            .as_ref()
            .filter(|e| e.prompt_tokens > 0)
            .map(|e| e.reused_prefix_tokens as f64 / e.prompt_tokens as f64),
        args,
        at_once,
        (first, last),
        cut_calls,
    );
    Ok(TraceBench {
        backend: match &args.via {
            Some(u) => format!("server {u}"),
            None => "joule".into(),
        },
        mode: match (&args.via, pace) {
            (None, _) => "engine".into(),
            (Some(_), Pace::Together) => "best".into(),
            (Some(_), Pace::OneAtATime) => "reference".into(),
        },
        models,
        runs: names,
        runs_at_once: at_once,
        rounds: (first, last),
        token_scale: args.token_scale,
        threads: crate::threads::current(),
        load_s,
        wall_s: wall,
        complete: !limited,
        cut_calls,
        failed_calls: calls.iter().filter(|c| c.error.is_some()).count(),
        short_calls: calls
            .iter()
            .filter(|c| c.error.is_none() && c.generated != c.requested)
            .count(),
        calls: calls.len(),
        requested_tokens: requested,
        generated_tokens: generated,
        prompt_tokens: prompt,
        generated_tps: generated as f64 / wall.max(1e-9),
        prompt_tps: prompt as f64 / wall.max(1e-9),
        per_model: rates_by(&calls, |c| c.model.clone()),
        per_phase: rates_by(&calls, |c| c.phase.clone()),
        engine,
        memory,
        replay_mismatches: mismatches,
        grid,
        call_log: calls,
    })
}

#[allow(clippy::too_many_arguments)]
fn grid_estimate(
    tokens_per_run: f64,
    calls_per_run: f64,
    slice_calls: usize,
    slice_generated: u64,
    wall: f64,
    decode_s: Option<f64>,
    prefix_share: Option<f64>,
    args: &TraceBenchArgs,
    at_once: usize,
    rounds: (u32, u32),
    cut_calls: usize,
) -> GridEstimate {
    let grid_tokens = tokens_per_run * GRID_RUNS as f64;
    let grid_calls = calls_per_run * GRID_RUNS as f64;
    if slice_generated == 0 {
        return GridEstimate {
            runs: GRID_RUNS,
            tokens_per_run,
            calls_per_run,
            generated_tokens: grid_tokens,
            hours_by_generated_rate: f64::NAN,
            hours_split: None,
            hours: f64::NAN,
            assumptions: vec![format!(
                "no estimate: no call of the slice ended{}",
                if cut_calls > 0 {
                    " before the time limit (give a longer --time-limit or a smaller \
                     --token-scale)"
                } else {
                    ""
                }
            )],
        };
    }
    let rate = slice_generated as f64 / wall.max(1e-9);
    let by_rate = if rate > 0.0 {
        grid_tokens / rate / 3600.0
    } else {
        f64::INFINITY
    };
    let split = decode_s
        .filter(|_| slice_calls > 0 && slice_generated > 0)
        .map(|d| {
            let d = d.min(wall);
            ((wall - d) * grid_calls / slice_calls as f64
                + d * grid_tokens / slice_generated as f64)
                / 3600.0
        });
    let mut assumptions = vec![
        format!(
            "{GRID_RUNS} runs, each generating the mean of the runs traced ({tokens_per_run:.0} \
             tokens in {calls_per_run:.0} calls, every round)"
        ),
        format!("{at_once} run(s) at once, as measured"),
        format!(
            "the rates of the slice measured (rounds {}..{}, token scale {}) hold for whole runs",
            rounds.0,
            rounds.1,
            num(args.token_scale)
        ),
    ];
    if split.is_some() {
        assumptions.push(
            "decode time grows with the generated tokens, the rest (prompts, which are the \
             recorded run's at any token scale, and each call's own work) with the calls"
                .into(),
        );
    } else {
        assumptions.push(
            "generated tokens/s includes the prompts' time as measured; with a token scale \
             below 1 prompts weigh more than in whole runs, so this errs long"
                .into(),
        );
    }
    if let Some(share) = prefix_share.filter(|&x| x > 0.0 && at_once > 1) {
        assumptions.push(format!(
            "{:.0} % of the prompt tokens came from the prefix cache, as in the slice; runs at \
             once share more of their prompts in round 1 (alike up to the jobs) than later, so \
             with round 1 in the slice this errs short",
            share * 100.0
        ));
    }
    if args.token_scale < 1.0 {
        assumptions.push(
            "shorter calls decode at shallower depth than whole ones, so the decode rate errs \
             fast"
                .into(),
        );
    }
    if cut_calls > 0 {
        assumptions.push(format!(
            "the time limit stopped the slice with {cut_calls} call(s) in flight: their time \
             is counted and their tokens are not, so this errs long"
        ));
    }
    GridEstimate {
        runs: GRID_RUNS,
        tokens_per_run,
        calls_per_run,
        generated_tokens: grid_tokens,
        hours_by_generated_rate: by_rate,
        hours_split: split,
        hours: split.unwrap_or(by_rate),
        assumptions,
    }
}

pub fn run(args: TraceBenchArgs) -> anyhow::Result<ExitCode> {
    crate::threads::setup(args.threads, None)?;
    let r = measure(&args)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_report(&r);
    }
    if r.replay_mismatches > 0 {
        anyhow::bail!(
            "the replay did not reproduce {} recorded value(s): the prompts are not the \
             recorded runs'",
            r.replay_mismatches
        );
    }
    if r.failed_calls > 0 {
        anyhow::bail!("{} call(s) failed", r.failed_calls);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_rates(title: &str, rates: &BTreeMap<String, Rates>) {
    crate::outln!();
    crate::outln!("| {title} | calls | generated | gen t/s | prompt tok | prompt t/s | busy s |");
    crate::outln!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (k, r) in rates {
        crate::outln!(
            "| {k} | {} | {} | {:.1} | {} | {:.1} | {:.1} |",
            r.calls,
            r.generated_tokens,
            r.generated_tps,
            r.prompt_tokens,
            r.prompt_tps,
            r.busy_s
        );
    }
}

fn print_report(r: &TraceBench) {
    crate::outln!(
        "trace of {} run(s), {} at once, rounds {}..{}, {} threads, on {} ({})",
        r.runs.len(),
        r.runs_at_once,
        r.rounds.0,
        r.rounds.1,
        r.threads,
        r.backend,
        r.mode
    );
    if r.token_scale != 1.0 {
        crate::outln!(
            "token scale {}: every call generates its recorded count × {} (at least 1 token)",
            num(r.token_scale),
            num(r.token_scale)
        );
    }
    for (k, f) in &r.models {
        crate::outln!("  {k}: {f}");
    }
    crate::outln!();
    crate::outln!("| load s | wall s | calls | generated | gen t/s | prompt tok | prompt t/s |");
    crate::outln!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    crate::outln!(
        "| {} | {:.1} | {}{} | {} | {:.1} | {} | {:.1} |",
        r.load_s
            .map(|s| format!("{s:.1}"))
            .unwrap_or_else(|| "—".into()),
        r.wall_s,
        r.calls,
        if r.failed_calls > 0 {
            format!(" ({} failed)", r.failed_calls)
        } else {
            String::new()
        },
        r.generated_tokens,
        r.generated_tps,
        r.prompt_tokens,
        r.prompt_tps
    );
    if !r.complete {
        crate::outln!(
            "stopped at the time limit (--time-limit): the slice's runs did not all end; {} \
             call(s) in flight were dropped (their time counted, their tokens not)",
            r.cut_calls
        );
    }
    if r.short_calls > 0 {
        crate::outln!(
            "{} call(s) generated another count than asked for ({} asked, {} generated): a \
             server that does not honour ignore_eos, or a context too short",
            r.short_calls,
            r.requested_tokens,
            r.generated_tokens
        );
    }
    print_rates("model", &r.per_model);
    print_rates("phase", &r.per_phase);
    if let Some(e) = &r.engine {
        crate::outln!();
        crate::outln!(
            "prompt tokens: {} computed, {} reused from the agent's own state, {} from the \
             prefix cache ({} lookups; {} calls waited for a running call's prefix); \
             prefill {:.1} s, decode {:.1} s, engine {:.1} s",
            e.computed_prompt_tokens(),
            e.reused_own_tokens,
            e.reused_prefix_tokens,
            e.prefix.lookups,
            e.waited_for_prefix,
            e.prefill_ms / 1e3,
            e.decode_ms / 1e3,
            e.engine_ms / 1e3
        );
    }
    if let Some(m) = &r.memory {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        crate::outln!(
            "memory: peak {} against the plan's {:.2} GiB (required with margin {:.2} GiB)",
            m.peak_bytes
                .map(|b| format!("{:.2} GiB", gib(b)))
                .unwrap_or_else(|| "unknown".into()),
            gib(m.planned_bytes),
            gib(m.required_bytes)
        );
    }
    let g = &r.grid;
    crate::outln!();
    if !g.hours.is_finite() {
        crate::outln!("estimated time of the paper's grid on this machine: none");
        for a in &g.assumptions {
            crate::outln!("  {a}");
        }
        return;
    }
    crate::outln!(
        "estimated time of the paper's grid on this machine: {:.1} h ({} runs, {:.1} M generated \
         tokens){}",
        g.hours,
        g.runs,
        g.generated_tokens / 1e6,
        match g.hours_split {
            Some(_) => format!(
                "; from generated t/s alone {:.1} h",
                g.hours_by_generated_rate
            ),
            None => String::new(),
        }
    );
    for a in &g.assumptions {
        crate::outln!("  assuming {a}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_one_to_r_or_a_range() {
        assert_eq!(parse_rounds("3").unwrap(), (1, 3));
        assert_eq!(parse_rounds("2..5").unwrap(), (2, 5));
        assert_eq!(parse_rounds("2..=5").unwrap(), (2, 5));
        for bad in ["0", "5..2", "x", "1..", "0..3"] {
            let e = parse_rounds(bad).unwrap_err().to_string();
            assert!(e.contains("--rounds"), "{e}");
        }
    }

    #[test]
    fn runs_are_found_in_natural_order_and_a_folder_without_any_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for r in ["run_10", "run_2", "aggregate"] {
            let d = dir.path().join("cond").join(r);
            std::fs::create_dir_all(&d).unwrap();
            if r != "aggregate" {
                std::fs::write(d.join("config.json"), "{}").unwrap();
                std::fs::write(d.join("transcript.json"), "[]").unwrap();
            }
        }
        let runs = find_runs(&[dir.path().to_path_buf()]).unwrap();
        let names: Vec<_> = runs
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["run_2", "run_10"]);
        let empty = dir.path().join("cond").join("aggregate");
        let e = find_runs(&[empty]).unwrap_err().to_string();
        assert!(e.contains("no reference run"), "{e}");
    }

    #[test]
    fn zero_run_and_concurrency_limits_are_refused_and_tiny_scales_print_short() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: TraceBenchArgs,
        }
        let refused = |extra: &[&str]| {
            let mut argv = vec!["t", "no-such-run-folder"];
            argv.extend_from_slice(extra);
            let cli = Cli::try_parse_from(argv).unwrap();
            measure(&cli.args).err().unwrap().to_string()
        };
        let e = refused(&["--max-runs", "0"]);
        assert_eq!(e, "--max-runs: expected at least 1, got 0");
        let e = refused(&["--via", "http://127.0.0.1:9/v1", "--max-concurrency", "0"]);
        assert_eq!(e, "--max-concurrency: expected at least 1, got 0");
        let e = refused(&["--token-scale", "1e300"]);
        assert!(e.starts_with("--token-scale 1e300:"), "{e}");
        let cli = Cli::try_parse_from(["t", "x", "--token-scale", "1e-300"]).unwrap();
        let g = grid_estimate(
            50_000.0,
            100.0,
            10,
            1_000,
            100.0,
            None,
            None,
            &cli.args,
            1,
            (1, 2),
            0,
        );
        assert!(
            g.assumptions
                .iter()
                .any(|a| a.contains("token scale 1e-300)")),
            "{:?}",
            g.assumptions
        );
    }

    #[test]
    fn the_grid_estimate_scales_prompts_by_calls_and_decode_by_tokens() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: TraceBenchArgs,
        }
        let cli = Cli::try_parse_from(["t", "x", "--token-scale", "0.5"]).unwrap();
        // 10 calls, 1,000 tokens in 100 s, 60 of them decode; a run: 100 calls, 50,000 tokens.
        let estimate = |at_once, cut| {
            grid_estimate(
                50_000.0,
                100.0,
                10,
                1_000,
                100.0,
                Some(60.0),
                Some(0.5),
                &cli.args,
                at_once,
                (1, 2),
                cut,
            )
        };
        let g = estimate(1, 0);
        let split = (40.0 * 6000.0 / 10.0 + 60.0 * 3_000_000.0 / 1000.0) / 3600.0;
        assert!((g.hours - split).abs() < 1e-9, "{g:?}");
        assert!((g.hours_by_generated_rate - 3_000_000.0 / 10.0 / 3600.0).abs() < 1e-9);
        assert!(g.assumptions.iter().any(|a| a.contains("token scale 0.5")));
        // One run at a time shares nothing with other runs: no such caveat.
        assert!(!g.assumptions.iter().any(|a| a.contains("prefix cache")));
        assert!(!g.assumptions.iter().any(|a| a.contains("time limit")));
        let g = estimate(5, 0);
        assert!(
            g.assumptions
                .iter()
                .any(|a| a.contains("50 % of the prompt tokens")),
            "{:?}",
            g.assumptions
        );
        // Nothing generated: no estimate, and why.
        let g = grid_estimate(
            50_000.0,
            100.0,
            0,
            0,
            100.0,
            Some(60.0),
            None,
            &cli.args,
            1,
            (1, 2),
            4,
        );
        assert!(g.hours.is_nan() && g.hours_split.is_none(), "{g:?}");
        assert!(
            g.assumptions[0].contains("--time-limit"),
            "{:?}",
            g.assumptions
        );
        // Calls cut at the time limit: said, and the direction of the error.
        let g = estimate(5, 3);
        assert!(
            g.assumptions
                .iter()
                .any(|a| a.contains("3 call(s) in flight") && a.contains("errs long")),
            "{:?}",
            g.assumptions
        );
    }
}
