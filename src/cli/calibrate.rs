//! `joule calibrate --gguf FILE...`: measured joules per prompt token and per
//! generated token of each model at a few batch sizes, and the `k` and `α`
//! of `c(S) = k · S^α` (joules per generated token) that best fit them, with
//! the fit's error. Needs an energy meter (`joule meters`); without one it
//! stops with the reason instead of printing numbers.
//!
//! Method: per model and batch size B, one unmeasured warm-up, then `-r`
//! measured generations of B sequences (fresh states, `-p` random prompt
//! tokens each, `-n` generated tokens each, greedy, no stop tokens), every
//! forward step metered and attributed as in a run
//! (`crate::meter::attribution`). J/prompt token = prefill joules / prompt
//! tokens processed; J/generated token = decode joules / decode steps. S is
//! the GGUF's parameter count in billions. The meters are machine-wide, so
//! run it on an otherwise idle machine.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::backend::GenParams;
use crate::inference::engine::device::select_device;
use crate::inference::engine::generate::{generate_batch_observed, GenOptions, GenSeq};
use crate::inference::models::load_model;
use crate::meter::attribution::Metering;
use crate::meter::fit::{fit_power_law, Fit};
use crate::meter::MeterChoice;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// GGUF model files (several sizes let α be fitted).
    #[arg(long, num_args = 1.., required = true)]
    pub gguf: Vec<PathBuf>,
    /// Batch sizes (sequences generated together).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub batch: Vec<usize>,
    /// Prompt tokens per sequence.
    #[arg(short = 'p', long = "n-prompt", default_value_t = 128)]
    pub n_prompt: usize,
    /// Generated tokens per sequence.
    #[arg(short = 'n', long = "n-gen", default_value_t = 32)]
    pub n_gen: u32,
    /// Measured repetitions per point (at least 1).
    #[arg(short = 'r', long = "repetitions", default_value_t = 3)]
    pub repetitions: usize,
    /// cpu, cuda or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// The energy meter (`auto`, `nvml`, `rapl`; `fake-…` test meters print no fit worth using).
    #[arg(long, default_value = "auto")]
    pub meter: MeterChoice,
    /// α used when all models have one size (k alone is fitted): a finite number >= 0.
    #[arg(long, default_value_t = 0.5)]
    pub alpha: f64,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
}

/// One measured model × batch size.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub model: String,
    pub size_b: f64,
    pub batch: usize,
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
    pub prefill_j: f64,
    pub decode_j: f64,
    pub j_per_prompt_token: f64,
    pub j_per_generated_token: f64,
}

#[derive(Debug, Clone, Serialize)]
struct BatchFit {
    batch: usize,
    #[serde(flatten)]
    fit: Fit,
}

pub fn run(args: CalibrateArgs) -> Result<ExitCode> {
    crate::threads::setup(args.threads, None)?;
    if args.batch.is_empty() || args.batch.contains(&0) {
        bail!(
            "--batch: expected batch sizes of at least 1, got {:?}",
            args.batch
        );
    }
    if args.repetitions == 0 {
        bail!("--repetitions: expected at least 1, got 0");
    }
    if !(args.alpha >= 0.0 && args.alpha.is_finite()) {
        bail!(
            "--alpha: expected a finite number >= 0, got {}",
            crate::energy_society::config::num(args.alpha)
        );
    }
    if args.n_prompt == 0 || args.n_gen < 2 {
        bail!("--n-prompt must be at least 1 and --n-gen at least 2 (one decode step)");
    }
    let (meter, why) = crate::meter::open(&args.meter).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(meter) = meter else {
        bail!("joule calibrate needs an energy meter, and {why}; see `joule meters`");
    };
    let mut metering = Metering::new(meter);
    let meter_name = metering.name();
    let device = select_device(&args.device)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4321);
    let params = GenParams {
        max_tokens: args.n_gen,
        temperature: 0.0,
        thinking: false,
        ..Default::default()
    };
    // No end-of-generation ids: every sequence generates exactly n_gen tokens.
    let options = GenOptions::default();
    let mut points = Vec::new();
    for path in &args.gguf {
        let model =
            load_model(path, &device).with_context(|| format!("loading {}", path.display()))?;
        let info = model.info().clone();
        let size_b = info.n_params as f64 / 1e9;
        for &b in &args.batch {
            let mut totals = (0u64, 0u64, 0.0f64, 0.0f64);
            for rep in 0..=args.repetitions {
                let prompts: Vec<Vec<u32>> = (0..b)
                    .map(|_| {
                        (0..args.n_prompt)
                            .map(|_| rng.gen_range(0..info.vocab_size as u32))
                            .collect()
                    })
                    .collect();
                let mut states: Vec<_> = (0..b).map(|_| model.new_state()).collect();
                let mut seqs: Vec<GenSeq<'_>> = prompts
                    .iter()
                    .zip(states.iter_mut())
                    .map(|(p, s)| GenSeq {
                        prompt: p,
                        state: s,
                        params: &params,
                        options: &options,
                        decode: None,
                        mask: None,
                    })
                    .collect();
                let mut bm = metering.begin_batch(b);
                let results = generate_batch_observed(model.as_ref(), &mut seqs, &mut bm);
                let measured = bm.finish();
                for r in results {
                    r.with_context(|| format!("{}: generation failed", path.display()))?;
                }
                if rep == 0 {
                    continue; // warm-up
                }
                for m in measured {
                    let Some(m) = m else {
                        bail!(
                            "{}: batch {b}: the meter's read failed ({}); nothing measured",
                            path.display(),
                            metering
                                .totals
                                .last_error
                                .as_deref()
                                .unwrap_or("unknown error")
                        );
                    };
                    totals.0 += m.prefill_tokens;
                    totals.1 += m.decode_tokens;
                    totals.2 += m.prefill_j;
                    totals.3 += m.decode_j;
                }
            }
            let (pt, dt, pj, dj) = totals;
            points.push(Point {
                model: info.name.clone(),
                size_b,
                batch: b,
                prompt_tokens: pt,
                decode_tokens: dt,
                prefill_j: pj,
                decode_j: dj,
                j_per_prompt_token: pj / pt.max(1) as f64,
                j_per_generated_token: dj / dt.max(1) as f64,
            });
        }
    }
    let fits: Vec<BatchFit> = args
        .batch
        .iter()
        .filter_map(|&b| {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.batch == b)
                .map(|p| (p.size_b, p.j_per_generated_token))
                .collect();
            fit_power_law(&pts, args.alpha).map(|fit| BatchFit { batch: b, fit })
        })
        .collect();
    let fake = meter_name.starts_with("fake-");
    if args.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "meter": meter_name, "test_meter": fake, "device": args.device,
                "points": points, "fits": fits,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    crate::outln!(
        "meter: {meter_name}{}",
        if fake {
            " (a test meter: these are not measurements)"
        } else {
            ""
        }
    );
    crate::outln!("| model | S (B) | batch | J/prompt token | J/generated token |");
    crate::outln!("| --- | ---: | ---: | ---: | ---: |");
    for p in &points {
        crate::outln!(
            "| {} | {:.6} | {} | {:.6} | {:.6} |",
            p.model,
            p.size_b,
            p.batch,
            p.j_per_prompt_token,
            p.j_per_generated_token
        );
    }
    for f in &fits {
        let a = if f.fit.alpha_fitted {
            format!("α = {:.4}", f.fit.alpha)
        } else {
            format!("α = {} (held: one model size)", f.fit.alpha)
        };
        crate::outln!(
            "batch {}: J/generated token ≈ k · S^α with k = {:.6e} J, {a}; fit error: rms {:.1}%, max {:.1}% over {} model(s)",
            f.batch,
            f.fit.k,
            f.fit.rms_rel_error * 100.0,
            f.fit.max_rel_error * 100.0,
            f.fit.points
        );
    }
    crate::outln!("for `[cost] model = \"measured\"`: reference_size = S and reference_j_per_token = J/generated token of one row (the batch size your runs use).");
    Ok(ExitCode::SUCCESS)
}
