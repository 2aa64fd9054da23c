//! The worker threads that compute: one count per process, chosen once before
//! any work starts ([`setup`]) from, in order, a command's `--threads N`, the
//! config's `[llm] threads`, `RAYON_NUM_THREADS` in the environment, and otherwise candle's default (every core this process
//! may run on). The count sizes rayon's global pool and candle's own pools
//! (its rayon pool and the barrier pool Joule's CPU kernels run on); candle
//! sizes those only from `CANDLE_NUM_THREADS` / `RAYON_NUM_THREADS`, read at
//! their first use, so [`setup`] puts the chosen count in both variables
//! before the first kernel runs, which makes every pool agree. [`current`]
//! is the count chosen, recorded in a run's resolved config (`[llm]
//! threads`) and in its `[kernels]` record.

use std::sync::OnceLock;

static CHOSEN: OnceLock<usize> = OnceLock::new();

/// A `--threads` value: a whole number of at least 1 (a clap value parser).
pub fn parse_threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("expected a whole number of worker threads, at least 1; got 0".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "expected a whole number of worker threads, at least 1; got `{s}`"
        )),
    }
}

/// The count the environment asks for (`RAYON_NUM_THREADS`, as candle reads
/// it), or candle's default.
fn from_environment() -> usize {
    candle_core::utils::get_num_threads().max(1)
}

/// Chooses the process's worker threads: `flag` (a command's `--threads`)
/// over `config` (`[llm] threads`) over the environment; sizes every pool to
/// it and returns it. Call it once, before any work starts; a later call
/// returns the count already chosen (the pools cannot be resized), or an
/// error when it asks for another one.
pub fn setup(flag: Option<usize>, config: Option<usize>) -> anyhow::Result<usize> {
    let asked = flag.or(config);
    if let Some(0) = asked {
        anyhow::bail!(
            "{}: expected a whole number of worker threads, at least 1; got 0",
            if flag.is_some() {
                "--threads"
            } else {
                "llm.threads"
            }
        );
    }
    if let Some(&n) = CHOSEN.get() {
        return match asked {
            Some(a) if a != n => anyhow::bail!(
                "the worker threads were already set to {n} in this process; {a} asked for"
            ),
            _ => Ok(n),
        };
    }
    let n = match asked {
        Some(n) => {
            // candle reads these once, at its pools' first use; nothing has
            // computed yet, so every pool is built with `n` threads.
            for var in ["RAYON_NUM_THREADS", "CANDLE_NUM_THREADS"] {
                std::env::set_var(var, n.to_string());
            }
            n
        }
        None => from_environment(),
    };
    // Already built (a test that called this before, in-process): the count
    // above still is the one candle's pools and the records use.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    Ok(*CHOSEN.get_or_init(|| n))
}

/// The worker threads of this process: the count [`setup`] chose, or the
/// environment's when nothing called it.
pub fn current() -> usize {
    CHOSEN.get().copied().unwrap_or_else(from_environment)
}
