//! Measuring what the process really holds, to check a memory plan
//! ([`super::memory_plan`]) against it: `joule models inspect FILE --memory
//! --measure` loads the model, runs the workload a plan is made for
//! ([`Workload`]: `sequences` prompts filling `tokens` positions each, fed in
//! steps of at most `step_tokens` prompt tokens as `[llm]
//! prefill_step_tokens` feeds them, then a few decode steps of every sequence
//! at once), and reads the resident memory of the process (`VmRSS`, its
//! anonymous part `RssAnon`, which the plan is compared with, and the peak
//! `VmHWM`) from `/proc/self/status`. That file exists on Linux only;
//! elsewhere [`proc_memory`] says so.
//!
//! The workload exercises every path that allocates for good: prompts of more
//! than 32 tokens per step and decode steps of several rows at once are what
//! make candle build its repacked weight copies (see
//! `quant_matmul::candle_repack_bytes`), and the states grow to the
//! capacity the plan reserves for `tokens` positions.

use anyhow::{bail, Context, Result};

use crate::backend::GenParams;
use crate::inference::engine::generate::{BatchSeq, DecodeBatch, GenOptions};
use crate::inference::engine::model::CausalLm;
use crate::inference::engine::state::{KvCache, SeqState};
use crate::meter::attribution::NoObserver;

/// Resident memory of this process, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcMemory {
    /// `VmRSS`: resident now.
    pub rss: u64,
    /// `VmHWM`: the peak of `VmRSS` so far.
    pub hwm: u64,
    /// `RssAnon`: the anonymous part of `VmRSS` (heap, weights, states),
    /// without the pages of the binary and its libraries (`RssFile`), which
    /// grow as code runs for the first time (some 20 MiB of `joule`'s) and
    /// are shared and reclaimable.
    pub anon: u64,
}

/// This process's resident memory (`/proc/self/status`; Linux only).
pub fn proc_memory() -> Result<ProcMemory> {
    if !cfg!(target_os = "linux") {
        bail!(
            "measuring resident memory reads /proc/self/status, which only Linux has; \
             on {} use the plan alone (`joule models inspect FILE --memory`)",
            std::env::consts::OS
        );
    }
    let text = std::fs::read_to_string("/proc/self/status")
        .context("reading /proc/self/status for VmRSS and VmHWM")?;
    parse_status(&text).ok_or_else(|| {
        anyhow::anyhow!("/proc/self/status has no `VmRSS:` and `VmHWM:` lines in kB")
    })
}

/// `VmRSS` and `VmHWM` (kB) of a `/proc/<pid>/status` text.
pub fn parse_status(text: &str) -> Option<ProcMemory> {
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb = rest.trim().strip_suffix("kB")?.trim();
            kb.parse::<u64>().ok().map(|k| k * 1024)
        })
    };
    Some(ProcMemory {
        rss: field("VmRSS")?,
        hwm: field("VmHWM")?,
        anon: field("RssAnon")?,
    })
}

/// What [`run`] feeds the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Sequences alive at once.
    pub sequences: usize,
    /// Positions each sequence holds at the end (prompt + decoded tokens).
    pub tokens: usize,
    /// Decode steps after the prompts (every sequence in each).
    pub decode_steps: usize,
    /// Prompt tokens per forward step (`[llm] prefill_step_tokens`).
    pub step_tokens: usize,
    /// Prompts are fed in pieces ending at multiples of this (the prefix
    /// cache's block; 0: none).
    pub block: usize,
    pub kv_cache: KvCache,
}

/// Run `w` on `model` and return the sequences' states (hold them while
/// measuring: they are part of what the plan counts).
pub fn run(model: &dyn CausalLm, w: &Workload) -> Result<Vec<SeqState>> {
    if w.sequences == 0 {
        bail!("the memory workload needs at least one sequence");
    }
    if w.tokens < w.decode_steps + 2 {
        bail!(
            "the memory workload needs more than {} tokens per sequence (it decodes {} of them)",
            w.decode_steps + 1,
            w.decode_steps
        );
    }
    let info = model.info();
    let vocab = info.vocab_size.max(1) as u64;
    let prompt_len = w.tokens - w.decode_steps;
    let params = GenParams {
        max_tokens: w.decode_steps as u32,
        temperature: 0.0,
        ..GenParams::default()
    };
    let options = GenOptions {
        block: w.block,
        ..GenOptions::default()
    };
    let mut batch = DecodeBatch::new(w.step_tokens);
    for s in 0..w.sequences {
        // Different pseudo-random ids per sequence (no shared prefix).
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (s as u64 + 1);
        let prompt: Vec<u32> = (0..prompt_len)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((x >> 33) % vocab) as u32
            })
            .collect();
        batch.add(
            model,
            s as u64,
            BatchSeq {
                prompt,
                state: model.new_state().with_kv_cache(w.kv_cache),
                params: params.clone(),
                options: options.clone(),
                decode: None,
                mask: None,
            },
        );
    }
    let mut states: Vec<Option<SeqState>> = (0..w.sequences).map(|_| None).collect();
    let mut finish = |done: Vec<crate::inference::engine::generate::Finished>| -> Result<()> {
        for f in done {
            f.result.with_context(|| {
                format!(
                    "model `{}`: the memory workload's sequence {}",
                    info.name, f.id
                )
            })?;
            states[f.id as usize] = Some(f.state);
        }
        Ok(())
    };
    finish(batch.take_finished())?;
    while !batch.is_empty() {
        let done = batch.step(model, &mut NoObserver);
        finish(done)?;
    }
    states
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            s.ok_or_else(|| anyhow::anyhow!("memory workload: sequence {i} never finished"))
        })
        .collect()
}

/// `(planned − measured) / measured`, in percent.
pub fn difference_percent(planned: u64, measured: u64) -> f64 {
    if measured == 0 {
        return f64::INFINITY;
    }
    (planned as f64 - measured as f64) / measured as f64 * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_parsed() {
        let m = parse_status(
            "Name:\tjoule\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t   768 kB\nRssFile:\t   256 kB\n",
        )
        .unwrap();
        assert_eq!(m.rss, 1024 * 1024);
        assert_eq!(m.hwm, 2048 * 1024);
        assert_eq!(m.anon, 768 * 1024);
        assert!(parse_status("VmRSS: 1 kB\n").is_none());
        if cfg!(target_os = "linux") {
            let m = proc_memory().unwrap();
            assert!(m.anon > 0 && m.rss >= m.anon && m.hwm >= m.rss, "{m:?}");
        } else {
            assert!(proc_memory().is_err());
        }
    }

    #[test]
    fn difference_is_relative_to_the_measurement() {
        assert_eq!(difference_percent(105, 100), 5.0);
        assert_eq!(difference_percent(95, 100), -5.0);
    }
}
