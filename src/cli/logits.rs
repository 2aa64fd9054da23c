//! `joule logits`: run token ids through a GGUF model and write the logits
//! at every position as a float32 `.npy` array `[n_ids, vocab]`. No
//! tokenizer is needed, so it works on any file whose architecture Joule
//! implements; it is how every architecture is checked against a reference.
//!
//! Without `--prefill` all ids go through one forward pass. With
//! `--prefill K` the first K go through one pass and the rest are decoded
//! one at a time through the sequence state, so the decode path (KV cache,
//! recurrent state) is what is checked.

use crate::inference::engine::device::select_device;
use crate::inference::engine::logits::compute;
use crate::inference::models::load_model;
use anyhow::{bail, Context, Result};
use clap::Args;
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
    /// Output file (`.npy`, float32, `[n_ids, vocab]`).
    #[arg(long)]
    pub out: PathBuf,
    /// cpu, cuda or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
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

pub fn run(args: LogitsArgs) -> Result<ExitCode> {
    let ids = parse_ids(&args.ids)?;
    let device = select_device(&args.device)?;
    let model = load_model(&args.gguf, &device)?;
    if let Some(k) = args.prefill.filter(|&k| k > ids.len()) {
        bail!("--prefill {k} is more than the {} ids given", ids.len());
    }
    let logits = compute(model.as_ref(), &ids, args.prefill)?;
    let vocab = logits.len() / ids.len();
    crate::npy::write_f32(&args.out, &[ids.len(), vocab], &logits)?;
    println!(
        "{}: {} positions x {} logits ({}{})",
        args.out.display(),
        ids.len(),
        vocab,
        model.info().arch,
        match args.prefill {
            Some(k) => format!(", prefill {k} then decode"),
            None => ", one pass".into(),
        }
    );
    Ok(ExitCode::SUCCESS)
}
