//! The logits of a token sequence at every position, in one forward pass or as a prompt
//! followed by one-token decode steps through the sequence state: what `joule logits` writes
//! and what the roster tests compare against transformers and llama.cpp.

use anyhow::{bail, Result};

use crate::inference::engine::model::{logits_to_vec, CausalLm, Logits, SeqStep};

/// Logits `[n, vocab]` (row-major) of `ids`, in one pass or prefill-then-decode.
pub fn compute(model: &dyn CausalLm, ids: &[u32], prefill: Option<usize>) -> Result<Vec<f32>> {
    let n = ids.len();
    let k = prefill.unwrap_or(n);
    if k > n {
        bail!("prefill {k} is more than the {n} ids given");
    }
    let mut state = model.new_state();
    let mut out = Vec::with_capacity(n * model.info().vocab_size);
    if k > 0 {
        let mut step = [SeqStep {
            tokens: &ids[..k],
            state: &mut state,
            logits: Logits::All,
        }];
        let lg = model.forward(&mut step)?;
        out.extend(logits_to_vec(&lg[0])?);
    }
    for i in k..n {
        let mut step = [SeqStep::new(&ids[i..i + 1], &mut state)];
        let lg = model.forward(&mut step)?;
        out.extend(logits_to_vec(&lg[0])?);
    }
    Ok(out)
}
