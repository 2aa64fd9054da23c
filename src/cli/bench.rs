//! `joule bench`: prompt-processing and token-generation speed of a GGUF
//! model, measured the way llama-bench measures it.
//!
//! - `pp<P>`: a fresh cache, P random tokens in one forward pass; t/s = P / time.
//! - `tg<N>`: a fresh cache, N random tokens fed one at a time (each step
//!   computes the next-token logits, as a decode step does); t/s = N / time.
//! - One warm-up run of each test, then `-r` timed repetitions; the table
//!   shows the mean ± sample standard deviation of the per-run t/s.
//! - `-d D` (llama-bench's depth): each sequence first has D tokens of
//!   context in its cache (filled untimed), as an agent's long prompt does.
//! - `-s S` (Joule's own, like llama.cpp's batched-bench): S sequences, each
//!   with its own cache, go through the model together; t/s counts the
//!   tokens of all of them. This is how an Energy Society phase decodes its
//!   agents.
//! - On the CPU, the machine's read bandwidth: the best of several streaming
//!   reads of a buffer the size of the weights one decode step reads (every
//!   matrix once), on the same worker threads; each `tg` test also says its
//!   weight bytes × steps/s and that as a percentage of the bandwidth. A VM's
//!   bandwidth can move by half within minutes, so the buffer is also read once
//!   after every repetition, and each repetition is held against the better of
//!   the reads just before and after it: that mean percentage is the one to quote.

use crate::backend::KernelRecord;
use crate::inference::engine::device::{device_name, select_device};
use crate::inference::engine::model::{CausalLm, SeqStep};
use crate::inference::engine::state::KvCache;
use crate::inference::files::gguf_weights::{GgufFile, MatmulUse};
use crate::inference::kernels::memory_read::read_pass;
use crate::inference::models::load_model_from;
use anyhow::Result;
use clap::Args;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    /// `society`: the Energy Society workload instead of llama-bench's tests.
    #[command(subcommand)]
    pub workload: Option<BenchWorkload>,
    /// The GGUF model file.
    #[arg(long, required = true)]
    pub gguf: Option<PathBuf>,
    /// Prompt tokens of the prompt-processing test (0 skips it).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the token-generation test (0 skips it).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Tokens of context already in each sequence's cache before a test (llama-bench's -d).
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    pub n_depth: usize,
    /// Sequences processed together, each with its own cache; a list (`1,16,64`) runs the
    /// tests at each count on one loaded model (1 to 1024 each).
    #[arg(short = 's', long = "seqs", value_delimiter = ',', default_value = "1")]
    pub seqs: Vec<usize>,
    /// Timed repetitions of each test, at least 1.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub repetitions: usize,
    /// cpu, cuda or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(short = 't', long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
    /// How each sequence's cache stores keys and values: f32 or f16 (llama-bench's -ctk/-ctv).
    #[arg(long = "kv-cache", default_value = "f32")]
    pub kv_cache: KvCache,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Workloads other than llama-bench's tests.
#[derive(clap::Subcommand, Debug)]
pub enum BenchWorkload {
    /// N concurrent default Energy Societies (see `joule bench society --help`).
    #[command(
        after_help = "Example:\n  joule bench society --gguf FILE --sims 1,4,16 --rounds 2 -t 2"
    )]
    Society(super::bench_society::SocietyBenchArgs),
    /// Reference runs replayed at their recorded lengths on real models (see
    /// `joule bench trace --help`).
    #[command(
        after_help = "Example:\n  joule bench trace ../shared/data/reference-runs --runs 1 -t 2"
    )]
    Trace(super::bench_trace::TraceBenchArgs),
    /// Tokens/s of one real-shape matrix per GGUF type (see `joule bench matmul --help`).
    #[command(
        after_help = "Example:\n  joule bench matmul --types q4_k,q6_k --shape 12288x4096 --rows 1,16 -t 1"
    )]
    Matmul(super::bench_matmul::MatmulBenchArgs),
    /// Time of the recurrent and per-layer-embedding layer cores at real width (see
    /// `joule bench layers --help`).
    #[command(after_help = "Example:\n  joule bench layers --kinds delta,mamba -r 10 -t 1")]
    Layers(super::bench_layers::LayersBenchArgs),
    /// This machine's read bandwidth alone: the plain streaming read `joule bench` puts
    /// decode against, so a script can measure it beside another engine's run.
    #[command(after_help = "Example:\n  joule bench read --mb 1024 -t 2")]
    Read(ReadBenchArgs),
}

/// `joule bench read`: the read bandwidth of a buffer of a model's weight size.
#[derive(clap::Args, Debug)]
pub struct ReadBenchArgs {
    /// Buffer size in MB (10^6 bytes): a model's weights read per step (`joule bench`
    /// prints it); at least 64 MiB are read whatever is asked.
    #[arg(long, default_value_t = 1024)]
    pub mb: usize,
    /// Passes over the buffer; the best is printed.
    #[arg(short = 'r', long, default_value_t = 3)]
    pub passes: usize,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(short = 't', long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
}

/// One test's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub model: String,
    pub arch: String,
    pub size_bytes: u64,
    pub n_params: u64,
    pub backend: String,
    pub threads: usize,
    pub test: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub n_depth: usize,
    pub seqs: usize,
    pub kv_cache: KvCache,
    pub samples_ts: Vec<f64>,
    pub avg_ts: f64,
    pub stddev_ts: f64,
    /// The kernels that computed the logits (`inference::engine::kernel_record`).
    pub kernels: KernelRecord,
    /// Bytes of the matrices one decode step reads (each once).
    pub step_weight_bytes: u64,
    /// This machine's read bandwidth on these threads, GB/s (CPU only).
    pub read_bandwidth_gbs: Option<f64>,
    /// A `tg` test's weight bytes × steps/s, GB/s.
    pub decode_weight_gbs: Option<f64>,
    /// [`Self::decode_weight_gbs`] as a percentage of [`Self::read_bandwidth_gbs`].
    pub bandwidth_pct: Option<f64>,
    /// A `tg` test's reads of the same buffer, one before the first timed repetition and
    /// one after each, GB/s (CPU only).
    pub adjacent_read_gbs: Vec<f64>,
    /// The mean over repetitions of each one's weight GB/s as a percentage of the better
    /// of the reads just before and after it.
    pub adjacent_pct: Option<f64>,
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let sd = if xs.len() > 1 {
        (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, sd)
}

fn random_tokens(rng: &mut impl Rng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|_| rng.gen_range(0..vocab as u32)).collect()
}

/// Fresh caches holding `depth` tokens of context each (filled untimed).
fn caches_at_depth(
    model: &dyn CausalLm,
    depth: &[Vec<u32>],
    kv: KvCache,
) -> Result<Vec<crate::inference::engine::model::SeqState>> {
    let mut caches: Vec<_> = depth
        .iter()
        .map(|_| model.new_state().with_kv_cache(kv))
        .collect();
    let mut steps: Vec<SeqStep<'_>> = depth
        .iter()
        .zip(caches.iter_mut())
        .filter(|(d, _)| !d.is_empty())
        .map(|(d, c)| SeqStep::new(d, c))
        .collect();
    if !steps.is_empty() {
        model.forward(&mut steps)?;
    }
    drop(steps);
    Ok(caches)
}

/// One forward pass over every sequence's prompt; seconds.
fn time_pp(
    model: &dyn CausalLm,
    kv: KvCache,
    prompts: &[Vec<u32>],
    depth: &[Vec<u32>],
) -> Result<f64> {
    let mut caches = caches_at_depth(model, depth, kv)?;
    let t0 = Instant::now();
    let mut steps: Vec<SeqStep<'_>> = prompts
        .iter()
        .zip(caches.iter_mut())
        .map(|(p, c)| SeqStep::new(p, c))
        .collect();
    model.forward(&mut steps)?;
    Ok(t0.elapsed().as_secs_f64())
}

/// One token per sequence per step, `tokens[i].len()` steps; seconds.
fn time_tg(
    model: &dyn CausalLm,
    kv: KvCache,
    tokens: &[Vec<u32>],
    depth: &[Vec<u32>],
) -> Result<f64> {
    let mut caches = caches_at_depth(model, depth, kv)?;
    let n = tokens.first().map_or(0, Vec::len);
    let t0 = Instant::now();
    for i in 0..n {
        let mut steps: Vec<SeqStep<'_>> = tokens
            .iter()
            .zip(caches.iter_mut())
            .map(|(t, c)| SeqStep::new(&t[i..i + 1], c))
            .collect();
        model.forward(&mut steps)?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// The most sequences of one test (`--seqs`): each holds its own cache.
pub const MAX_SEQS: usize = 1024;

/// Each test's sequences must fit the model's context: `--n-depth` tokens
/// of context and then the test's own (`--n-prompt`, or `--n-gen`), as a
/// sequence's cache holds them all. Checked before any cache is made.
fn check_context(args: &BenchArgs, context_length: usize) -> Result<()> {
    for (flag, n) in [("--n-prompt", args.n_prompt), ("--n-gen", args.n_gen)] {
        let need = args.n_depth as u128 + n as u128;
        anyhow::ensure!(
            n == 0 || need <= context_length as u128,
            "--n-depth {} + {flag} {n} = {need} tokens do not fit the model's context of \
             {context_length} tokens; give at most {context_length} together",
            args.n_depth
        );
    }
    Ok(())
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    match args.workload {
        Some(BenchWorkload::Society(a)) => return super::bench_society::run(a),
        Some(BenchWorkload::Trace(a)) => return super::bench_trace::run(a),
        Some(BenchWorkload::Matmul(a)) => return super::bench_matmul::run(a),
        Some(BenchWorkload::Layers(a)) => return super::bench_layers::run(a),
        Some(BenchWorkload::Read(a)) => {
            crate::threads::setup(a.threads, None)?;
            let meter = ReadMeter::new(a.mb.saturating_mul(1_000_000));
            let gbs = meter.best_gbs(a.passes);
            crate::outln!(
                "read: {gbs:.2} GB/s ({:.1} MB, best of {} passes, {} threads)",
                (meter.buf.len() * 8) as f64 / 1e6,
                a.passes.max(1),
                crate::threads::current()
            );
            return Ok(ExitCode::SUCCESS);
        }
        None => {}
    }
    let Some(gguf) = args.gguf.as_ref() else {
        anyhow::bail!("joule bench: --gguf FILE is required");
    };
    crate::threads::setup(args.threads, None)?;
    let reps = args.repetitions.max(1);
    super::check_counts("--seqs", &args.seqs, MAX_SEQS, "1,16,64")?;
    let device = select_device(&args.device)?;
    let stage = crate::progress::Stage::start(format!("loading {}", gguf.display()));
    let mut file = GgufFile::open(gguf)?;
    let model = load_model_from(&mut file, &device)?;
    stage.done();
    let info = model.info().clone();
    check_context(&args, info.context_length)?;
    let kernels = KernelRecord::local(
        &device,
        args.kv_cache,
        &[(info.name.clone(), file.matmuls())],
    );
    let threads = crate::threads::current();
    let step_bytes = step_weight_bytes(file.matmuls());
    let meter = (device_name(&device) == "cpu" && args.n_gen > 0)
        .then(|| ReadMeter::new(step_bytes as usize));
    let bandwidth = meter.as_ref().map(|m| m.best_gbs(6));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1234);
    let mut results = Vec::new();
    let mut tests: Vec<(String, usize, usize)> = Vec::new();
    if args.n_prompt > 0 {
        tests.push((format!("pp{}", args.n_prompt), args.n_prompt, 0));
    }
    if args.n_gen > 0 {
        tests.push((format!("tg{}", args.n_gen), 0, args.n_gen));
    }
    let depth = args.n_depth;
    let runs: Vec<(usize, (String, usize, usize))> = args
        .seqs
        .iter()
        .flat_map(|&s| tests.iter().map(move |t| (s, t.clone())))
        .collect();
    for (seqs, (mut name, p, n)) in runs {
        if depth > 0 {
            name = format!("{name} @ d{depth}");
        }
        if seqs > 1 {
            name = format!("{name} x{seqs}");
        }
        if args.kv_cache != KvCache::F32 {
            name = format!("{name} kv {}", args.kv_cache);
        }
        let count = p.max(n);
        let mut draw = |len: usize| -> Vec<Vec<u32>> {
            (0..seqs)
                .map(|_| random_tokens(&mut rng, len, info.vocab_size))
                .collect()
        };
        let time = |toks: &[Vec<u32>], ctx: &[Vec<u32>]| {
            if p > 0 {
                time_pp(model.as_ref(), args.kv_cache, toks, ctx)
            } else {
                time_tg(model.as_ref(), args.kv_cache, toks, ctx)
            }
        };
        let progress =
            crate::progress::Progress::items(format!("bench {name}"), reps as u64 + 1, "reps");
        let (warm, ctx) = (draw(count), draw(depth));
        time(&warm, &ctx)?;
        progress.inc(1);
        let adjacent = meter.as_ref().filter(|_| n > 0);
        let mut reads: Vec<f64> = adjacent.iter().map(|m| m.best_gbs(1)).collect();
        let mut samples = Vec::with_capacity(reps);
        for _ in 0..reps {
            let (toks, ctx) = (draw(count), draw(depth));
            let secs = time(&toks, &ctx)?;
            samples.push((count * seqs) as f64 / secs);
            reads.extend(adjacent.iter().map(|m| m.best_gbs(1)));
            progress.inc(1);
        }
        progress.finish();
        let (avg, sd) = mean_sd(&samples);
        // Decode reads every matrix once per step, whatever the number of sequences.
        let weight_gbs = |ts: f64| step_bytes as f64 * ts / seqs as f64 / 1e9;
        let decode_gbs = (n > 0).then(|| weight_gbs(avg));
        let rates: Vec<f64> = samples.iter().map(|&ts| weight_gbs(ts)).collect();
        let adjacent_pct = adjacent_pct(&rates, &reads);
        results.push(BenchResult {
            model: info.name.clone(),
            arch: info.arch.clone(),
            size_bytes: info.weight_bytes,
            n_params: info.n_params,
            backend: device_name(&device).to_string(),
            threads,
            test: name,
            n_prompt: p,
            n_gen: n,
            n_depth: depth,
            seqs,
            kv_cache: args.kv_cache,
            samples_ts: samples,
            avg_ts: avg,
            stddev_ts: sd,
            kernels: kernels.clone(),
            step_weight_bytes: step_bytes,
            read_bandwidth_gbs: bandwidth,
            decode_weight_gbs: decode_gbs,
            bandwidth_pct: decode_gbs.zip(bandwidth).map(|(d, b)| 100.0 * d / b),
            adjacent_read_gbs: reads,
            adjacent_pct,
        });
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print_table(&results);
        crate::outln!();
        print_bandwidth(&results);
        for line in kernels.lines() {
            crate::outln!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(results: &[BenchResult]) {
    crate::outln!("| model | size | params | backend | threads | test | t/s |");
    crate::outln!("| --- | ---: | ---: | --- | ---: | ---: | ---: |");
    for r in results {
        crate::outln!(
            "| {} ({}) | {:.2} MiB | {:.2} M | candle-{} | {} | {} | {:.2} ± {:.2} |",
            r.model,
            r.arch,
            r.size_bytes as f64 / (1024.0 * 1024.0),
            r.n_params as f64 / 1e6,
            r.backend,
            r.threads,
            r.test,
            r.avg_ts,
            r.stddev_ts
        );
    }
}

/// The decode lines under the table: weight bytes per step × steps/s against the
/// machine's read bandwidth.
fn print_bandwidth(results: &[BenchResult]) {
    let Some(r0) = results.first() else { return };
    let Some(bw) = r0.read_bandwidth_gbs else {
        return;
    };
    crate::outln!(
        "read bandwidth: {bw:.2} GB/s (best streaming read of {:.1} MB, the matrices one decode \
         step reads, on {} threads)",
        r0.step_weight_bytes as f64 / 1e6,
        r0.threads
    );
    for r in results {
        if let (Some(d), Some(p)) = (r.decode_weight_gbs, r.bandwidth_pct) {
            crate::outln!(
                "{}: {d:.2} GB/s of weights ({:.1} MB × {:.2} steps/s) = {p:.1} % of the read \
                 bandwidth",
                r.test,
                r.step_weight_bytes as f64 / 1e6,
                r.avg_ts / r.seqs as f64
            );
            if let Some(a) = r.adjacent_pct {
                let lo = r
                    .adjacent_read_gbs
                    .iter()
                    .copied()
                    .fold(f64::INFINITY, f64::min);
                let hi = r.adjacent_read_gbs.iter().copied().fold(0.0, f64::max);
                crate::outln!(
                    "{}: {a:.1} % of the reads beside each repetition (the better of the one \
                     before and after it; reads {lo:.1}–{hi:.1} GB/s)",
                    r.test
                );
            }
        }
    }
    crate::outln!();
}

/// Bytes of the matrices a decode step multiplies, each read once.
fn step_weight_bytes(matmuls: &[MatmulUse]) -> u64 {
    matmuls
        .iter()
        .map(|m| (m.n * m.k / m.dtype.block_size() * m.dtype.type_size()) as u64)
        .sum()
}

/// The mean over repetitions of each one's weight rate (`rates[i]`, GB/s) as a percentage of
/// the better of the reads just before and after it (`reads[i]`, `reads[i + 1]`); `None`
/// unless there is one read more than there are repetitions.
fn adjacent_pct(rates: &[f64], reads: &[f64]) -> Option<f64> {
    (!rates.is_empty() && reads.len() == rates.len() + 1).then(|| {
        let pcts: Vec<f64> = rates
            .iter()
            .zip(reads.windows(2))
            .map(|(&r, w)| 100.0 * r / w[0].max(w[1]))
            .collect();
        mean_sd(&pcts).0
    })
}

/// This machine's read bandwidth: streaming reads (`memory_read::read_pass`: sums of
/// 64-bit words) of a buffer of `bytes` (at least 64 MiB, past the caches) on the pages the
/// weights get, split over candle's worker pool as the matrix products are. The buffer is
/// kept for the reads beside each repetition.
struct ReadMeter {
    buf: crate::inference::kernels::weight_memory::WeightVec<u64>,
}

impl ReadMeter {
    fn new(bytes: usize) -> Self {
        let words = (bytes / 8).max(8 << 20);
        ReadMeter {
            buf: crate::inference::kernels::memory_read::read_buffer(words),
        }
    }

    /// The best of `passes` reads of the whole buffer, GB/s.
    fn best_gbs(&self, passes: usize) -> f64 {
        let mut best = f64::INFINITY;
        for _ in 0..passes.max(1) {
            let t0 = Instant::now();
            std::hint::black_box(read_pass(&self.buf));
            best = best.min(t0.elapsed().as_secs_f64());
        }
        (self.buf.len() * 8) as f64 / best / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::{adjacent_pct, check_context, mean_sd, step_weight_bytes, BenchArgs, ReadMeter};

    /// Each test's context (`-d` and then `-p`, or `-n`) must fit the
    /// model's; a skipped test (0) needs none.
    #[test]
    fn tests_past_the_models_context_are_refused_naming_the_flags() {
        let args = |n_depth, n_prompt, n_gen| BenchArgs {
            workload: None,
            gguf: Some("m.gguf".into()),
            n_prompt,
            n_gen,
            n_depth,
            seqs: vec![1],
            repetitions: 1,
            device: "cpu".into(),
            threads: None,
            kv_cache: crate::inference::engine::state::KvCache::F32,
            json: false,
        };
        check_context(&args(4000, 4096, 96), 8192).unwrap();
        check_context(&args(8192, 0, 0), 8192).unwrap();
        let e = check_context(&args(8000, 100, 300), 8192)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--n-depth 8000 + --n-gen 300 = 8300 tokens do not fit the model's context of 8192 \
             tokens; give at most 8192 together"
        );
        let e = check_context(&args(0, 4294967295, 0), 8192)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--n-prompt 4294967295"), "{e}");
        let e = check_context(&args(usize::MAX, 1, 0), 8192)
            .unwrap_err()
            .to_string();
        assert!(e.contains("= 18446744073709551616 tokens"), "{e}");
    }

    use crate::inference::files::gguf_weights::MatmulUse;
    use candle_core::quantized::GgmlDType;

    #[test]
    fn a_step_reads_each_matrix_once_and_the_bandwidth_is_a_rate() {
        let m = |dtype, n, k| MatmulUse {
            dtype,
            n,
            k,
            joule: true,
            split: false,
        };
        // Q4_K: 144 bytes per 256 values; Q8_0: 34 per 32.
        let uses = [m(GgmlDType::Q4K, 512, 1024), m(GgmlDType::Q8_0, 3, 64)];
        assert_eq!(step_weight_bytes(&uses), 512 * 4 * 144 + 3 * 2 * 34);
        let meter = ReadMeter::new(1 << 20);
        assert_eq!(meter.buf.len(), 8 << 20, "at least 64 MiB");
        let bw = meter.best_gbs(2);
        assert!(bw.is_finite() && bw > 0.1, "{bw}");
    }

    #[test]
    fn each_repetition_is_held_against_the_better_read_beside_it() {
        // Repetition 0 between reads 40 and 50 (held against 50), repetition 1 between 50
        // and 20 (against 50): 80 % and 60 %.
        let pct = adjacent_pct(&[40.0, 30.0], &[40.0, 50.0, 20.0]).unwrap();
        assert!((pct - 70.0).abs() < 1e-9, "{pct}");
        assert_eq!(adjacent_pct(&[40.0], &[40.0]), None);
        assert_eq!(adjacent_pct(&[], &[40.0]), None);
    }

    #[test]
    fn bench_read_takes_its_size_passes_and_threads() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        let argv = ["joule", "bench", "read", "--mb", "64", "-r", "2", "-t", "1"];
        let Ok(Cli {
            command: Command::Bench(b),
            ..
        }) = Cli::try_parse_from(argv)
        else {
            panic!("`joule bench read` did not parse as bench");
        };
        let Some(super::BenchWorkload::Read(r)) = b.workload else {
            panic!("not the read workload: {:?}", b.workload);
        };
        assert_eq!((r.mb, r.passes, r.threads), (64, 2, Some(1)));
        assert!(Cli::try_parse_from(["joule", "bench", "read", "--mb", "lots"]).is_err());
    }

    #[test]
    fn mean_and_sample_sd() {
        let (m, s) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((s - 2.138089935299395).abs() < 1e-12, "{s}");
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
    }
}
