//! `joule bench society`: the real workload's speed. N default Energy
//! Societies (the embedded `joule run` config, seeds s … s+N−1, every agent
//! on one GGUF, or with `--models` each agent on its own) run concurrently on one driver for R rounds, with records in
//! memory; loads the models (timed apart) and checks the memory plan first, then
//! reports wall time, generated tokens/s, prompt tokens/s split into
//! computed and reused (the agent's own state, the prefix cache), and the
//! backend's time split into prefill, decode and engine (templates,
//! tokenising, constraint masks, sampling, cache copies); the rest of the
//! wall time is the scenarios' own work. `--via URL` sends the same
//! workload to an OpenAI-compatible server (llama-server `-np N`) instead,
//! whose reports give the token counts (not the reuse or the time split).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::agency::Driver;
use crate::backend::{Answer, Backend, ModelRequest, ModelResult, StepBackend};
use crate::energy_society::config::SocietyConfig;
use crate::energy_society::runner::{job_source, society};
use crate::inference::llm_backend::LlmBackend;
use crate::served::openai::OpenAiBackend;

#[derive(Args, Debug)]
pub struct SocietyBenchArgs {
    /// The GGUF model every agent runs (with `--via`: only named in the report).
    #[arg(long, conflicts_with = "models")]
    pub gguf: Option<PathBuf>,
    /// Each agent on its own model: GGUF paths (or manifest names) in roster order, one per
    /// agent of the default roster (gemma4-e4b, nemotron-3-nano-4b, qwen3.5-4b, qwen3-8b,
    /// qwen3.5-9b), or `MODEL=PATH` entries naming roster models; comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Local: cpu, cuda or metal (`[llm] device`).
    #[arg(long)]
    pub device: Option<String>,
    /// Concurrent societies, 1 to 1000; a list runs one measurement per entry (`1,4,16`).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub sims: Vec<usize>,
    /// Rounds per society.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Seed of the first society (the others count up from it).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Drive the workload through an OpenAI-compatible server at this API root
    /// (e.g. `http://127.0.0.1:8080/v1`) instead of the local engine.
    #[arg(long)]
    pub via: Option<String>,
    /// With `--via`: the served model name sent in every request; without it each agent's
    /// roster `model_name` (`gemma4:e4b`, `qwen3-8b`, …), each agent on its own model, as a
    /// server holding the roster's models names them (Ollama; llama-server's router with a
    /// preset section per name).
    #[arg(long)]
    pub served_model: Option<String>,
    /// With `--via`: requests in flight at once (default: 5 per society).
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Local: MiB of the prefix cache (0 turns it off).
    #[arg(long)]
    pub prefix_cache_mib: Option<usize>,
    /// Local: `continuous` (default) or `waves` (`[llm] batching`).
    #[arg(long, value_parser = ["continuous", "waves"])]
    pub batching: Option<String>,
    /// Local, continuous batching: prompt tokens per step (`[llm] prefill_step_tokens`).
    #[arg(long)]
    pub prefill_step_tokens: Option<usize>,
    /// Local: how sequence states store keys and values, f32 or f16 (`[llm] kv_cache`).
    #[arg(long = "kv-cache")]
    pub kv_cache: Option<crate::inference::engine::state::KvCache>,
    /// Local: tokens per sequence the memory plan assumes (`[llm] plan_context`).
    #[arg(long)]
    pub plan_context: Option<usize>,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(short = 't', long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
    /// Stop each measurement this many seconds after it starts (loading the models included)
    /// and report what was answered by then (`complete: false`): a measurement that always
    /// ends in time.
    #[arg(long)]
    pub time_limit: Option<f64>,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One measurement (N societies).
#[derive(Debug, Clone, Serialize)]
pub struct SocietyBench {
    pub backend: String,
    pub model: String,
    pub sims: usize,
    pub rounds: u32,
    pub seed: u64,
    pub threads: usize,
    /// Local: seconds to load every model and plan memory (before `wall_s` starts).
    pub load_s: Option<f64>,
    /// The societies' wall time, models already loaded.
    pub wall_s: f64,
    pub calls: u64,
    pub failed_calls: u64,
    pub generated_tokens: u64,
    pub generated_tps: f64,
    pub prompt_tokens: u64,
    pub prompt_tps: f64,
    /// Local engine only (`None` through a server).
    pub kv_cache: Option<crate::inference::engine::state::KvCache>,
    pub computed_prompt_tokens: Option<u64>,
    pub reused_own_tokens: Option<u64>,
    pub reused_prefix_tokens: Option<u64>,
    pub prefill_s: Option<f64>,
    pub decode_s: Option<f64>,
    pub engine_s: Option<f64>,
    /// Wall time outside the backend (the scenarios and the driver).
    pub scenario_s: f64,
    pub batches: usize,
    pub largest_batch: usize,
    /// The kernels that computed the logits (`inference::engine::kernel_record`).
    pub kernels: Option<crate::backend::KernelRecord>,
    /// Whether every society ran to its end (false: stopped by `--time-limit`; the counts
    /// are those of the calls answered by then).
    pub complete: bool,
    /// Societies that ran to their end.
    pub finished: usize,
}

/// Counts what goes through a backend.
struct Meter<'a> {
    inner: &'a mut dyn Backend,
    calls: u64,
    failed: u64,
    prompt: u64,
    generated: u64,
    secs: f64,
    batches: usize,
    largest: usize,
    /// Calls submitted and not yet answered (continuous batching).
    in_flight: usize,
    /// `--time-limit`: past this instant the meter reports the backend unavailable, so the
    /// driver stops every society.
    deadline: Option<Instant>,
}

impl<'a> Meter<'a> {
    /// A meter with nothing counted yet around `inner`.
    fn new(inner: &'a mut dyn Backend, deadline: Option<Instant>) -> Self {
        Meter {
            inner,
            calls: 0,
            failed: 0,
            prompt: 0,
            generated: 0,
            secs: 0.0,
            batches: 0,
            largest: 0,
            in_flight: 0,
            deadline,
        }
    }
}

impl Backend for Meter<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn batch_key(&self, model: &str) -> String {
        self.inner.batch_key(model)
    }
    fn unavailable(&self) -> Option<String> {
        self.inner
            .unavailable()
            .or_else(|| crate::backend::time_limit_passed(self.deadline))
    }
    fn end_session(&mut self, session: u64) {
        self.inner.end_session(session)
    }
    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        let t0 = Instant::now();
        let out = self.inner.generate(batch);
        self.secs += t0.elapsed().as_secs_f64();
        self.batches += 1;
        self.largest = self.largest.max(batch.len());
        for r in &out {
            self.count(r);
        }
        out
    }
    fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
        if self.inner.stepwise().is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl Meter<'_> {
    fn count(&mut self, r: &ModelResult) {
        self.calls += 1;
        match r {
            Ok(r) => {
                self.prompt += r.usage.prompt_tokens as u64;
                self.generated += r.usage.generated_tokens as u64;
            }
            Err(_) => self.failed += 1,
        }
    }
}

/// Continuous batching: `batches` counts steps, `largest` the most calls running at once.
impl StepBackend for Meter<'_> {
    fn submit(&mut self, ticket: u64, request: ModelRequest) {
        if let Some(s) = self.inner.stepwise() {
            s.submit(ticket, request);
            self.in_flight += 1;
        }
    }
    fn step(&mut self) -> Vec<Answer> {
        let t0 = Instant::now();
        let Some(s) = self.inner.stepwise() else {
            return Vec::new();
        };
        let running = s.in_flight();
        let out = s.step();
        self.in_flight = self.in_flight.saturating_sub(out.len());
        self.secs += t0.elapsed().as_secs_f64();
        self.batches += 1;
        self.largest = self.largest.max(running);
        for a in &out {
            self.count(&a.result);
        }
        out
    }
    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

/// The embedded default society with `seed`, `rounds`, every agent on `gguf`.
fn config(args: &SocietyBenchArgs, seed: u64) -> anyhow::Result<SocietyConfig> {
    let mut cfg = SocietyConfig::from_toml_str(
        crate::cli::run::DEFAULT_CONFIG,
        crate::cli::run::DEFAULT_CONFIG_NAME,
    )?;
    cfg.seed = seed;
    cfg.max_rounds = args.rounds;
    cfg.validate("joule bench society")?;
    match &args.via {
        Some(url) => {
            cfg.llm.backend = crate::llm::BackendKind::Openai;
            cfg.llm.base_url = Some(url.clone());
            cfg.llm.model = args.served_model.clone();
            cfg.llm.stand_in = None;
        }
        None if !args.models.is_empty() => {
            let roster: Vec<String> = cfg.roster.iter().map(|a| a.model.clone()).collect();
            cfg.llm.stand_in = None;
            cfg.llm.stand_ins = roster_models(&args.models, &roster)?;
        }
        None => {
            let gguf = args.gguf.as_ref().context(
                "joule bench society: --gguf FILE or --models A,B,... is needed without --via",
            )?;
            if !gguf.is_file() {
                anyhow::bail!("--gguf {}: no such file", gguf.display());
            }
            cfg.llm.stand_in = Some(gguf.display().to_string());
        }
    }
    if let Some(d) = &args.device {
        cfg.llm.device = d.clone();
    }
    if let Some(m) = args.prefix_cache_mib {
        cfg.llm.prefix_cache_mib = m;
    }
    match args.batching.as_deref() {
        Some("waves") => cfg.llm.batching = crate::llm::Batching::Waves,
        Some(_) => cfg.llm.batching = crate::llm::Batching::Continuous,
        None => {}
    }
    if let Some(t) = args.prefill_step_tokens {
        cfg.llm.prefill_step_tokens = t;
    }
    if let Some(kv) = args.kv_cache {
        cfg.llm.kv_cache = kv;
    }
    if let Some(n) = args.plan_context {
        cfg.llm.plan_context = n;
    }
    Ok(cfg)
}

/// `--models`: each roster model (in roster order) and the file or manifest that runs it.
/// Entries are either all plain (one per roster agent, in order) or all `MODEL=PATH`; a path
/// must be an existing file (a manifest name is resolved when the backend loads it).
pub(crate) fn roster_models(
    entries: &[String],
    roster: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let named = entries.iter().filter(|e| e.contains('=')).count();
    let mut out = std::collections::BTreeMap::new();
    let check = |spec: &str, what: &str| -> anyhow::Result<()> {
        let looks_like_path = spec.contains('/') || spec.ends_with(".gguf");
        if looks_like_path && !std::path::Path::new(spec).is_file() {
            anyhow::bail!("--models: {what} = `{spec}`: no such file");
        }
        Ok(())
    };
    if named == 0 {
        if entries.len() != roster.len() {
            anyhow::bail!(
                "--models: {} entries for {} roster agents ({}); give one per agent in roster \
                 order, or MODEL=PATH entries",
                entries.len(),
                roster.len(),
                roster.join(", ")
            );
        }
        for (model, spec) in roster.iter().zip(entries) {
            check(spec, model)?;
            if let Some(prev) = out.insert(model.clone(), spec.clone()) {
                if &prev != spec {
                    anyhow::bail!(
                        "--models: roster model `{model}` appears twice with different files \
                         (`{prev}`, `{spec}`)"
                    );
                }
            }
        }
    } else if named == entries.len() {
        for e in entries {
            let (model, spec) = e.split_once('=').unwrap_or((e.as_str(), ""));
            if !roster.iter().any(|m| m == model) {
                anyhow::bail!(
                    "--models: `{model}` is not a roster model (expected one of {})",
                    roster.join(", ")
                );
            }
            if spec.is_empty() {
                anyhow::bail!("--models: `{e}` names no file after `=`");
            }
            check(spec, model)?;
            out.insert(model.to_string(), spec.to_string());
        }
        if let Some(m) = roster.iter().find(|m| !out.contains_key(*m)) {
            anyhow::bail!("--models: no file for roster model `{m}`");
        }
    } else {
        anyhow::bail!("--models: mix of plain and MODEL=PATH entries; use one form");
    }
    Ok(out)
}

/// The most concurrent societies of one measurement (`--sims`): their
/// configs are built before the clock starts, which this keeps to moments.
pub const MAX_SIMS: usize = 1000;

fn measure(args: &SocietyBenchArgs, sims: usize) -> anyhow::Result<SocietyBench> {
    let deadline = crate::backend::time_limit_deadline(args.time_limit)?;
    let seed0 = args.seed.unwrap_or(12345);
    let cfgs: Vec<SocietyConfig> = (0..sims)
        .map(|i| config(args, seed0 + i as u64))
        .collect::<anyhow::Result<_>>()?;
    let kv_cache = cfgs[0].llm.kv_cache;
    let models: Vec<String> = cfgs[0].roster.iter().map(|a| a.model.clone()).collect();
    let mut local: Option<LlmBackend> = None;
    let mut served: Option<OpenAiBackend> = None;
    match &args.via {
        None => local = Some(cfgs[0].llm.local_backend()?),
        Some(_) => {
            let mut llm = cfgs[0].llm.clone();
            llm.max_concurrency = args.max_concurrency.unwrap_or(5 * sims).max(1);
            crate::llm::validate(&llm).map_err(|(k, m)| anyhow::anyhow!("{k}: {m}"))?;
            let mut names = crate::served::config::ServedNames::default();
            for c in &cfgs {
                names.add(
                    llm.model.as_deref(),
                    c.roster.iter().enumerate().map(|(i, a)| {
                        (
                            format!("bench: roster[{i}]"),
                            a.model.as_str(),
                            a.model_name.as_str(),
                        )
                    }),
                )?;
            }
            served = Some(OpenAiBackend::connect(&llm.served(), names)?);
        }
    }
    // Load every model and check the memory plan before the clock starts (a GPU that cannot
    // hold the models and every agent's state stops here, saying how many runs would fit).
    let load_s = match local.as_mut() {
        Some(b) => {
            let t = Instant::now();
            let refs: Vec<&SocietyConfig> = cfgs.iter().collect();
            crate::energy_society::runner::check_memory(b, &refs)?;
            Some(t.elapsed().as_secs_f64())
        }
        None => None,
    };
    let before = local.as_ref().map(|b| b.stats());
    let mut driver = Driver::new();
    for cfg in cfgs {
        let s = society(cfg, None, &job_source)?;
        driver.spawn(move |agency| s.run(agency));
    }
    let inner: &mut dyn Backend = match (local.as_mut(), served.as_mut()) {
        (Some(b), _) => b,
        (None, Some(b)) => b,
        (None, None) => anyhow::bail!("no backend"),
    };
    let mut meter = Meter::new(inner, deadline);
    let t0 = Instant::now();
    let progress = crate::progress::calls::Tracker::sessions(
        crate::progress::Mode::from_env(),
        "society",
        sims,
        std::time::Duration::ZERO,
    );
    let results = driver.run(
        &mut crate::progress::calls::Watched::new(&mut meter, progress.clone()),
        |_| {},
    );
    progress.finish();
    let wall = t0.elapsed().as_secs_f64();
    let limited = crate::backend::time_limit_passed(meter.deadline).is_some();
    let finished = results.iter().filter(|r| r.is_ok()).count();
    if !limited {
        for (i, r) in results.iter().enumerate() {
            if let Err(e) = r {
                anyhow::bail!("society {i} failed: {e:#}");
            }
        }
    }
    let Meter {
        calls,
        failed,
        prompt,
        generated,
        secs,
        batches,
        largest,
        ..
    } = meter;
    let models: Vec<&str> = models.iter().map(String::as_str).collect();
    let kernels = match (local.as_ref(), served.as_ref()) {
        (Some(l), _) => Some(l.kernel_record(&models)),
        (None, Some(s)) => s.kernels(&models),
        (None, None) => None,
    };
    let delta = match (before, local.as_ref()) {
        (Some(b), Some(l)) => Some(l.stats().since(&b)),
        _ => None,
    };
    Ok(SocietyBench {
        backend: match &args.via {
            Some(u) => format!("server {u}"),
            None => "joule".into(),
        },
        model: match (&args.gguf, args.models.is_empty()) {
            (Some(p), _) => p.display().to_string(),
            (None, false) => args.models.join(","),
            (None, true) => match &args.served_model {
                Some(m) => m.clone(),
                None => "the roster's model names".into(),
            },
        },
        sims,
        rounds: args.rounds,
        seed: seed0,
        threads: crate::threads::current(),
        load_s,
        wall_s: wall,
        calls,
        failed_calls: failed,
        generated_tokens: generated,
        generated_tps: generated as f64 / wall,
        prompt_tokens: prompt,
        prompt_tps: prompt as f64 / wall,
        kv_cache: delta.map(|_| kv_cache),
        computed_prompt_tokens: delta.map(|d| d.computed_prompt_tokens()),
        reused_own_tokens: delta.map(|d| d.reused_own_tokens),
        reused_prefix_tokens: delta.map(|d| d.reused_prefix_tokens),
        prefill_s: delta.map(|d| d.prefill_ms / 1e3),
        decode_s: delta.map(|d| d.decode_ms / 1e3),
        engine_s: delta.map(|d| d.engine_ms / 1e3),
        scenario_s: (wall - secs).max(0.0),
        batches,
        largest_batch: largest,
        kernels,
        complete: finished == sims,
        finished,
    })
}

pub fn run(args: SocietyBenchArgs) -> anyhow::Result<ExitCode> {
    crate::threads::setup(args.threads, None)?;
    super::check_counts("--sims", &args.sims, MAX_SIMS, "1,4,16")?;
    if args.rounds == 0 {
        anyhow::bail!("--rounds: at least 1");
    }
    let mut out = Vec::new();
    for &n in &args.sims {
        let r = measure(&args, n)?;
        if !args.json {
            print_row(&r, out.is_empty());
            if !r.complete {
                crate::outln!(
                    "(stopped by --time-limit: {} of {} societies finished; the counts are the \
                     calls answered by then)",
                    r.finished,
                    r.sims
                );
            }
        }
        out.push(r);
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&out)?);
    } else if let Some(k) = out.last().and_then(|r| r.kernels.as_ref()) {
        crate::outln!();
        for line in k.lines() {
            crate::outln!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1}")).unwrap_or_else(|| "—".into())
}

fn opt_n(x: Option<u64>) -> String {
    x.map(|v| v.to_string()).unwrap_or_else(|| "—".into())
}

fn print_row(r: &SocietyBench, header: bool) {
    if header {
        crate::outln!("| backend | sims | rounds | calls | load s | wall s | gen tok | gen t/s | prompt tok | prompt t/s | computed | reused own | reused prefix | prefill s | decode s | engine s | scenarios s |");
        crate::outln!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    }
    crate::outln!(
        "| {} | {} | {} | {}{} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {:.1} |",
        r.backend,
        r.sims,
        r.rounds,
        r.calls,
        if r.failed_calls > 0 {
            format!(" ({} failed)", r.failed_calls)
        } else {
            String::new()
        },
        opt(r.load_s),
        r.wall_s,
        r.generated_tokens,
        r.generated_tps,
        r.prompt_tokens,
        r.prompt_tps,
        opt_n(r.computed_prompt_tokens),
        opt_n(r.reused_own_tokens),
        opt_n(r.reused_prefix_tokens),
        opt(r.prefill_s),
        opt(r.decode_s),
        opt(r.engine_s),
        r.scenario_s
    );
}

#[cfg(test)]
mod tests {
    use super::roster_models;

    fn roster() -> Vec<String> {
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn models_in_roster_order_or_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let f: Vec<String> = (0..3)
            .map(|i| {
                let p = dir.path().join(format!("m{i}.gguf"));
                std::fs::write(&p, b"x").unwrap();
                p.display().to_string()
            })
            .collect();
        let m = roster_models(&f, &roster()).unwrap();
        assert_eq!(m["a"], f[0]);
        assert_eq!(m["c"], f[2]);
        let named: Vec<String> = ["c", "a", "b"]
            .iter()
            .zip(&f)
            .map(|(k, p)| format!("{k}={p}"))
            .collect();
        let m = roster_models(&named, &roster()).unwrap();
        assert_eq!(
            (m["c"].as_str(), m["b"].as_str()),
            (f[0].as_str(), f[2].as_str())
        );
        // Manifest names pass through unchecked (resolved when the backend loads them).
        let m = roster_models(&["x".into(), "y".into(), "z".into()], &roster()).unwrap();
        assert_eq!(m["b"], "y");
    }

    #[test]
    fn the_meter_reports_the_backend_unavailable_past_the_time_limit() {
        use crate::backend::Backend;
        let mut inner =
            crate::scripted::ScriptedBackend::new(crate::scripted::TokenDist::Fixed { tokens: 3 });
        let mut meter = super::Meter::new(&mut inner, None);
        assert_eq!(meter.unavailable(), None);
        meter.deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(3600));
        assert_eq!(meter.unavailable(), None);
        meter.deadline = Some(std::time::Instant::now());
        let why = meter.unavailable().expect("past the deadline");
        assert!(why.contains("--time-limit"), "{why}");
    }

    /// A `--time-limit` that is not a number of seconds a clock can hold is
    /// refused naming the flag (NaN, 0 and negatives measured nothing; 1e300
    /// panicked).
    #[test]
    fn time_limits_no_clock_can_hold_are_refused() {
        use crate::backend::time_limit_deadline;
        assert!(time_limit_deadline(None).unwrap().is_none());
        assert!(time_limit_deadline(Some(30.0)).unwrap().is_some());
        for bad in [f64::NAN, 0.0, -5.0, 1e300, f64::INFINITY] {
            let e = time_limit_deadline(Some(bad)).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--time-limit {bad}: expected")),
                "{e}"
            );
        }
    }

    #[test]
    fn via_without_a_served_name_sends_each_agents_roster_name() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: super::SocietyBenchArgs,
        }
        let cfg = |argv: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))
                .expect("arguments parse");
            super::config(&cli.args, 7).expect("config")
        };
        let url = "http://127.0.0.1:9/v1";
        let each = cfg(&["--via", url]);
        assert_eq!(
            each.llm.model, None,
            "each agent's roster model_name is sent"
        );
        assert_eq!(each.llm.base_url.as_deref(), Some(url));
        let names: Vec<&str> = each.roster.iter().map(|a| a.model_name.as_str()).collect();
        assert_eq!(names[0], "gemma4:e4b", "{names:?}");
        let one = cfg(&["--via", url, "--served-model", "smol"]);
        assert_eq!(one.llm.model.as_deref(), Some("smol"));
    }

    #[test]
    fn bad_models_lists_name_what_was_expected() {
        let err = |e: &[&str]| {
            let v: Vec<String> = e.iter().map(|s| s.to_string()).collect();
            roster_models(&v, &roster()).unwrap_err().to_string()
        };
        assert!(err(&["x", "y"]).contains("2 entries for 3 roster agents"));
        assert!(err(&["a=x", "b=y"]).contains("no file for roster model `c`"));
        assert!(err(&["q=x", "b=y", "c=z"]).contains("`q` is not a roster model"));
        assert!(err(&["a=x", "y", "z"]).contains("one form"));
        assert!(err(&["/no/such.gguf", "y", "z"]).contains("no such file"));
        assert!(err(&["a=", "b=y", "c=z"]).contains("names no file"));
    }
}
