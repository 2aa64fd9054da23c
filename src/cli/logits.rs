//! `joule logits`: run token ids through a GGUF model and write the logits
//! at every position as a float32 `.npy` array `[n_ids, vocab]`. No
//! tokenizer is needed, so it works on any file whose architecture Joule
//! implements; it is how every architecture is checked against a reference.
//!
//! Without `--prefill` all ids go through one forward pass. With
//! `--prefill K` the first K go through one pass and the rest are decoded
//! one at a time through the sequence state, so the decode path (KV cache,
//! recurrent state) is what is checked.
//!
//! `--against REF.npy` compares the logits with a reference of the same
//! shape (e.g. the same file on the CPU, while this run is on CUDA): the
//! largest absolute difference, the mean KL(reference ‖ these) and the top-1
//! agreement, over all positions and, with `--prefill`, over the prompt's
//! and the decode steps' positions apart. The exit status is 1 when the mean
//! KL is above `--max-kl` or the top-1 agreement below `--min-top1`.

use crate::inference::engine::device::select_device;
use crate::inference::engine::logits::compute;
use crate::inference::models::load_model;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct LogitsArgs {
    /// The GGUF model file.
    #[arg(long)]
    pub gguf: PathBuf,
    /// Token ids, separated by spaces or commas: "1 17 99".
    #[arg(long)]
    pub ids: String,
    /// Feed the first K ids in one pass, then the rest one at a time.
    #[arg(long)]
    pub prefill: Option<usize>,
    /// Output file (`.npy`, float32, `[n_ids, vocab]`); needed unless `--against` is given.
    /// Refused if it exists, unless `--force`.
    #[arg(long, required_unless_present = "against")]
    pub out: Option<PathBuf>,
    /// Replace an existing `--out` file.
    #[arg(long, requires = "out")]
    pub force: bool,
    /// cpu, cuda or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compare with these reference logits (`.npy`, float32, `[n_ids, vocab]`).
    #[arg(long)]
    pub against: Option<PathBuf>,
    /// With `--against`: the largest mean KL(reference ‖ these) that passes.
    #[arg(long, default_value_t = 0.01)]
    pub max_kl: f64,
    /// With `--against`: the smallest top-1 agreement that passes.
    #[arg(long, default_value_t = 0.9)]
    pub min_top1: f64,
    /// Print the result (and the comparison) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the hidden states layer by layer to this folder (`NAME.npy`, llama.cpp's
    /// graph names: `l_out-3`, …; `scripts/llama-logits.cpp --dump` writes llama.cpp's), for the
    /// architectures that have the hook (qwen35 so far); not with `--prefill`.
    #[arg(long, conflicts_with = "prefill")]
    pub dump: Option<PathBuf>,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
}

/// Parse "1 2, 3" into ids, naming the first bad entry.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    let ids: Vec<u32> = s
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<u32>().with_context(|| {
                format!("--ids: `{x}` is not a token id (expected a non-negative integer)")
            })
        })
        .collect::<Result<_>>()?;
    if ids.is_empty() {
        bail!("--ids: no token ids given");
    }
    Ok(ids)
}

/// How two sets of logits over the same positions differ.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Agreement {
    pub positions: usize,
    /// The largest |reference − these| over every logit.
    pub max_abs_diff: f64,
    /// Mean over positions of KL(softmax(reference) ‖ softmax(these)).
    pub mean_kl: f64,
    /// The largest per-position KL.
    pub max_kl: f64,
    /// Fraction of positions whose argmax is the same.
    pub top1: f64,
}

/// Compares `ours` with `reference`, both `[n, vocab]` row-major; an error when the sizes
/// differ or a value of `ours` is not finite.
pub fn agreement(reference: &[f32], ours: &[f32], vocab: usize) -> Result<Agreement> {
    if vocab == 0 || reference.len() != ours.len() || ours.len() % vocab != 0 {
        bail!(
            "logits of different sizes: reference {} values, these {} (vocab {vocab})",
            reference.len(),
            ours.len()
        );
    }
    let n = ours.len() / vocab;
    let (mut max_abs, mut kl_sum, mut kl_max, mut agree) = (0f64, 0f64, 0f64, 0usize);
    let lse = |x: &[f32]| {
        let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
    };
    let argmax = |x: &[f32]| {
        x.iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |m, (j, &v)| {
                    if v > m.1 {
                        (j, v)
                    } else {
                        m
                    }
                },
            )
            .0
    };
    for i in 0..n {
        let (a, b) = (
            &reference[i * vocab..(i + 1) * vocab],
            &ours[i * vocab..(i + 1) * vocab],
        );
        if let Some(j) = b.iter().position(|x| !x.is_finite()) {
            bail!("these logits are not finite at position {i}, token {j}");
        }
        let (la, lb) = (lse(a), lse(b));
        let mut kl = 0f64;
        for (&x, &y) in a.iter().zip(b) {
            max_abs = max_abs.max((x as f64 - y as f64).abs());
            let (px, py) = (x as f64 - la, y as f64 - lb);
            kl += px.exp() * (px - py);
        }
        kl_sum += kl;
        kl_max = kl_max.max(kl);
        agree += usize::from(argmax(a) == argmax(b));
    }
    Ok(Agreement {
        positions: n,
        max_abs_diff: max_abs,
        mean_kl: kl_sum / n.max(1) as f64,
        max_kl: kl_max,
        top1: agree as f64 / n.max(1) as f64,
    })
}

#[derive(Debug, Serialize)]
struct Comparison {
    reference: PathBuf,
    all: Agreement,
    /// With `--prefill K`: positions `0..K` (one pass) and `K..n` (decode steps).
    prefill: Option<Agreement>,
    decode: Option<Agreement>,
    max_kl: f64,
    min_top1: f64,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    gguf: PathBuf,
    arch: String,
    device: String,
    positions: usize,
    vocab: usize,
    prefill: Option<usize>,
    out: Option<PathBuf>,
    seconds: f64,
    comparison: Option<Comparison>,
}

pub fn run(args: LogitsArgs) -> Result<ExitCode> {
    crate::threads::setup(args.threads, None)?;
    let ids = parse_ids(&args.ids)?;
    if let Some(out) = &args.out {
        super::check_out_file(out, args.force, "a .npy file")?;
    }
    if let Some(k) = args.prefill.filter(|&k| k > ids.len()) {
        bail!("--prefill {k} is more than the {} ids given", ids.len());
    }
    // The reference is read first, so a wrong path fails before the model loads.
    let reference = match &args.against {
        Some(p) => {
            let (shape, data) = crate::npy::read_f32(p).with_context(|| "--against")?;
            if shape.len() != 2 || shape[0] != ids.len() {
                bail!(
                    "--against {}: shape {shape:?}, expected [{}, vocab] (one row per id)",
                    p.display(),
                    ids.len()
                );
            }
            Some((p.clone(), shape[1], data))
        }
        None => None,
    };
    if let Some(dir) = &args.dump {
        crate::inference::engine::dump::set_dir(dir.clone())?;
    }
    let t0 = std::time::Instant::now();
    let device = select_device(&args.device)?;
    let model = load_model(&args.gguf, &device)?;
    let logits = compute(model.as_ref(), &ids, args.prefill)?;
    let seconds = t0.elapsed().as_secs_f64();
    if let Some(dir) = &args.dump {
        let written = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).count())
            .unwrap_or(0);
        if written == 0 {
            crate::errln!(
                "--dump {}: nothing written: {} has no layer-by-layer hook yet (qwen35 has one)",
                dir.display(),
                args.gguf.display()
            );
        }
    }
    let vocab = logits.len() / ids.len();
    if let Some(out) = &args.out {
        crate::npy::write_f32(out, &[ids.len(), vocab], &logits)?;
    }
    let comparison = match reference {
        Some((path, ref_vocab, data)) => {
            if ref_vocab != vocab {
                bail!(
                    "--against {}: {ref_vocab} logits per position, the model has {vocab}",
                    path.display()
                );
            }
            let all = agreement(&data, &logits, vocab)?;
            let split = match args.prefill {
                Some(k) if k > 0 && k < ids.len() => Some((
                    agreement(&data[..k * vocab], &logits[..k * vocab], vocab)?,
                    agreement(&data[k * vocab..], &logits[k * vocab..], vocab)?,
                )),
                _ => None,
            };
            let pass = all.mean_kl <= args.max_kl && all.top1 >= args.min_top1;
            Some(Comparison {
                reference: path,
                all,
                prefill: split.map(|s| s.0),
                decode: split.map(|s| s.1),
                max_kl: args.max_kl,
                min_top1: args.min_top1,
                pass,
            })
        }
        None => None,
    };
    let how = match args.prefill {
        Some(k) => format!("prefill {k} then decode"),
        None => "one pass".into(),
    };
    let report = Report {
        gguf: args.gguf.clone(),
        arch: model.info().arch.clone(),
        device: args.device.clone(),
        positions: ids.len(),
        vocab,
        prefill: args.prefill,
        out: args.out.clone(),
        seconds,
        comparison,
    };
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let dest = args.out.as_ref().map_or_else(
            || args.gguf.display().to_string(),
            |o| o.display().to_string(),
        );
        crate::outln!(
            "{dest}: {} positions x {vocab} logits ({}, {how}, {}, {seconds:.1} s)",
            ids.len(),
            report.arch,
            args.device
        );
        if let Some(c) = &report.comparison {
            let line = |what: &str, a: &Agreement| {
                crate::outln!(
                    "  {what} ({} positions): max |diff| {:.4}, mean KL {:.6} (max {:.6}), \
                     top-1 {:.3}",
                    a.positions,
                    a.max_abs_diff,
                    a.mean_kl,
                    a.max_kl,
                    a.top1
                )
            };
            crate::outln!("against {}:", c.reference.display());
            line("all", &c.all);
            if let (Some(p), Some(d)) = (&c.prefill, &c.decode) {
                line("prompt", p);
                line("decode", d);
            }
            crate::outln!(
                "  {} (mean KL <= {}, top-1 >= {})",
                if c.pass { "pass" } else { "FAIL" },
                c.max_kl,
                c.min_top1
            );
        }
    }
    Ok(match &report.comparison {
        Some(c) if !c.pass => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::agreement;

    #[test]
    fn agreement_of_identical_shifted_and_different_logits() {
        let a = [1.0f32, 2.0, 3.0, 0.5, 0.1, -1.0];
        let same = agreement(&a, &a, 3).unwrap();
        assert_eq!(same.positions, 2);
        assert_eq!((same.max_abs_diff, same.top1), (0.0, 1.0));
        assert!(same.mean_kl.abs() < 1e-12);
        // A constant shift changes no probability, only the raw difference.
        let shifted: Vec<f32> = a.iter().map(|x| x + 2.0).collect();
        let s = agreement(&a, &shifted, 3).unwrap();
        assert!((s.max_abs_diff - 2.0).abs() < 1e-6 && s.mean_kl.abs() < 1e-9);
        // The second row's argmax moves: top-1 1/2, KL > 0 there only.
        let b = [1.0f32, 2.0, 3.0, 0.1, 0.5, -1.0];
        let d = agreement(&a, &b, 3).unwrap();
        assert_eq!(d.top1, 0.5);
        assert!(d.mean_kl > 0.0 && (d.max_kl - 2.0 * d.mean_kl).abs() < 1e-12);
        assert!(agreement(&a, &b[..3], 3).is_err());
        assert!(agreement(&a, &[f32::NAN, 0.0, 0.0, 0.0, 0.0, 0.0], 3).is_err());
    }
}
