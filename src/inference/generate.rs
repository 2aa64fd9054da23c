//! Token generation with exact counts, for one sequence or a batch of
//! sequences decoded together step by step (each with its own sequence
//! state, sampler and stop rules).
//!
//! Prefix reuse: a sequence resumes from the longest prefix of its prompt
//! that its state can really return to ([`SeqState::rewind`]). For models
//! with recurrent layers the prompt is fed in pieces that end at multiples
//! of the state's snapshot interval and just before the prompt's last
//! token, with a snapshot after each piece, so a later prompt that shares
//! the prefix (a retry, the next round's prompt) resumes from a snapshot
//! instead of recomputing.
//!
//! Counting rules (what [`Generation::usage`] reports):
//! - `prompt_tokens`: every token of the prompt, including the part reused
//!   from the sequence's state.
//! - `generated_tokens`: every sampled token, thinking included. The token
//!   that ends generation (an end-of-generation id: EOS, `<|im_end|>`, ...)
//!   is included when `count_eos` is true, which is the default because it
//!   is what Ollama's `eval_count` (the number the reference charged) and
//!   llama.cpp's `predicted_n` report: both runners increment their
//!   predicted-token counter for each sampled token before checking whether
//!   it is end-of-generation. Tokens that complete a stop string are counted
//!   (they were generated).
//! - `thinking_tokens`: tokens inside the thinking block, delimiters
//!   included, when the caller names the delimiter ids.
//! - Generation stops at `max_tokens` sampled tokens (finish `Length`), at
//!   an end-of-generation id (`Eos` for the model's EOS ids, `Stop` for
//!   extra stop ids), at a stop string (`Stop`), or when the context is full
//!   (`Length`).

use super::model::{logits_to_vec, CausalLm, SeqState, SeqStep};
use super::sampler::{Sampler, SamplingParams};
use crate::backend::{FinishReason, GenParams, TokenUsage};
use crate::meter::attribution::{NoObserver, StepObserver, StepWork};
use anyhow::{bail, Result};
use std::time::Instant;

/// Thinking-block delimiter tokens (e.g. `<think>` and `</think>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingDelims {
    pub start: u32,
    pub end: u32,
    /// The prompt already opened the block (templates that end in `<think>\n`).
    pub starts_inside: bool,
}

/// Per-sequence stop and counting rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenOptions {
    /// The model's end-of-sequence ids (finish `Eos`).
    pub eos_ids: Vec<u32>,
    /// Further end-of-generation ids (finish `Stop`), e.g. `<|im_end|>`.
    pub stop_ids: Vec<u32>,
    /// Whether the end-of-generation token counts as generated (default true).
    pub count_eos: bool,
    pub thinking: Option<ThinkingDelims>,
    /// Block alignment of prompt computation (0: none). With a block `B`,
    /// a prompt is fed in pieces that end at every multiple of `B`, and a
    /// sequence resumes only at a multiple of `B`: every full block is then
    /// computed in one pass of exactly its positions, whoever computes it,
    /// so blocks shared through a prefix cache hold the same values a
    /// recompute gives, bit for bit, and results do not depend on what the
    /// cache held.
    pub block: usize,
}

impl Default for GenOptions {
    fn default() -> Self {
        Self {
            eos_ids: Vec::new(),
            stop_ids: Vec::new(),
            count_eos: true,
            thinking: None,
            block: 0,
        }
    }
}

/// A source of allowed-token masks (constrained decoding): given the tokens
/// generated so far, the tokens allowed next (`None` = all).
pub trait TokenMask {
    fn allowed(&mut self, generated: &[u32]) -> Result<Option<Vec<bool>>>;
}

impl<F: FnMut(&[u32]) -> Result<Option<Vec<bool>>>> TokenMask for F {
    fn allowed(&mut self, generated: &[u32]) -> Result<Option<Vec<bool>>> {
        self(generated)
    }
}

/// One sequence of a batch.
pub struct GenSeq<'a> {
    pub prompt: &'a [u32],
    pub state: &'a mut SeqState,
    pub params: &'a GenParams,
    pub options: &'a GenOptions,
    /// Decodes token ids to text; needed for `params.stop` strings.
    pub decode: Option<&'a dyn Fn(&[u32]) -> String>,
    pub mask: Option<&'a mut dyn TokenMask>,
}

/// The result of one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Every sampled token, including the one that ended generation.
    pub tokens: Vec<u32>,
    pub prompt_tokens: u32,
    /// Prompt tokens reused from the sequence's state (not recomputed).
    pub cached_prompt_tokens: u32,
    pub generated_tokens: u32,
    pub thinking_tokens: u32,
    pub eos_counted: bool,
    pub finish: FinishReason,
    /// The stop string that ended generation, if one did.
    pub stop_string: Option<String>,
    /// Wall-clock time of the prefill and of the decode steps (shared by a batch).
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl Generation {
    /// Tokens without the end-of-generation token (the text to decode).
    pub fn text_tokens(&self, options: &GenOptions) -> &[u32] {
        match self.tokens.last() {
            Some(t) if options.eos_ids.contains(t) || options.stop_ids.contains(t) => {
                &self.tokens[..self.tokens.len() - 1]
            }
            _ => &self.tokens,
        }
    }

    /// Token counts in the backend's shape; `charged_tokens` = `generated_tokens`.
    pub fn usage(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt_tokens,
            generated_tokens: self.generated_tokens,
            thinking_tokens: self.thinking_tokens,
            charged_tokens: self.generated_tokens,
            eos_counted: self.eos_counted,
        }
    }
}

/// The prompt does not fit in the model's context.
#[derive(Debug, thiserror::Error)]
#[error("prompt of {prompt_tokens} tokens does not fit the context of model `{model}` ({context_length} tokens; at least one must be left to generate)")]
pub struct PromptTooLong {
    pub model: String,
    pub prompt_tokens: usize,
    pub context_length: usize,
}

struct State {
    sampler: Sampler,
    history: Vec<u32>,
    gen: Generation,
    in_think: bool,
    max_stop_chars: usize,
    done: bool,
    /// Prompt pieces still to feed (ranges of the prompt), in order, each
    /// with whether a snapshot follows it.
    pieces: std::collections::VecDeque<(std::ops::Range<usize>, bool)>,
}

/// Split `prompt[reuse..]` into the pieces a sequence feeds, each with
/// whether a snapshot follows it. Cuts: every multiple of `block` (when
/// not 0); for recurrent states also every multiple of the snapshot
/// interval and `n - 1`, with a snapshot after those (so a later prompt
/// sharing the prefix, or a retry, resumes there). The last piece is never
/// followed by a snapshot (its last logits are sampled).
fn prompt_pieces(
    state: &SeqState,
    reuse: usize,
    n: usize,
    block: usize,
) -> Vec<(std::ops::Range<usize>, bool)> {
    let recurrent = state.is_recurrent();
    let every = state.policy().every.max(1);
    let mut cuts: Vec<(usize, bool)> = Vec::new();
    for c in reuse + 1..n {
        let at_block = block > 0 && c % block == 0;
        let snap = recurrent && (c % every == 0 || (c == n - 1 && n - reuse >= 2));
        if at_block || snap {
            cuts.push((c, snap));
        }
    }
    cuts.push((n, false));
    let mut out = Vec::with_capacity(cuts.len());
    let mut from = reuse;
    for (c, snap) in cuts {
        out.push((from..c, snap));
        from = c;
    }
    out
}

/// Generate for one sequence. See [`generate_batch`].
pub fn generate(model: &dyn CausalLm, seq: GenSeq<'_>) -> Result<Generation> {
    let mut v = vec![seq];
    generate_batch(model, &mut v)
        .pop()
        .unwrap_or_else(|| bail!("generate: no result"))
}

/// Generate for several sequences at once: prefill all, then advance every
/// unfinished sequence by one token per step, each in its own state. Each
/// sequence reuses the longest prefix of its prompt its state can return to.
/// Returns one result per sequence, in order; a failing sequence does not
/// stop the others.
pub fn generate_batch(model: &dyn CausalLm, seqs: &mut [GenSeq<'_>]) -> Vec<Result<Generation>> {
    generate_batch_observed(model, seqs, &mut NoObserver)
}

/// [`generate_batch`], telling `obs` about every forward step (energy
/// metering: [`crate::meter::attribution`]).
pub fn generate_batch_observed(
    model: &dyn CausalLm,
    seqs: &mut [GenSeq<'_>],
    obs: &mut dyn StepObserver,
) -> Vec<Result<Generation>> {
    let ctx = model.info().context_length;
    let name = model.info().name.clone();
    let mut results: Vec<Option<Result<Generation>>> = (0..seqs.len()).map(|_| None).collect();
    let mut states: Vec<Option<State>> = Vec::with_capacity(seqs.len());
    let mut feeds: Vec<Vec<u32>> = Vec::with_capacity(seqs.len());
    for (i, s) in seqs.iter_mut().enumerate() {
        let ctx = ctx.min(s.state.max_len());
        let n = s.prompt.len();
        if n == 0 {
            results[i] = Some(Err(anyhow::anyhow!("model `{name}`: empty prompt")));
        } else if n >= ctx {
            results[i] = Some(Err(PromptTooLong {
                model: name.clone(),
                prompt_tokens: n,
                context_length: ctx,
            }
            .into()));
        } else if !s.params.stop.is_empty() && s.decode.is_none() {
            results[i] = Some(Err(anyhow::anyhow!(
                "model `{name}`: stop strings need a decode callback"
            )));
        }
        if results[i].is_some() {
            states.push(None);
            feeds.push(Vec::new());
            continue;
        }
        let mut want = s.state.common_prefix(s.prompt).min(n - 1);
        if s.options.block > 0 {
            want -= want % s.options.block;
        }
        let reuse = s.state.rewind(want);
        let pieces = prompt_pieces(s.state, reuse, n, s.options.block);
        feeds.push(Vec::new());
        states.push(Some(State {
            sampler: Sampler::new(SamplingParams::from_gen_params(s.params)),
            history: s.prompt.to_vec(),
            gen: Generation {
                tokens: Vec::new(),
                prompt_tokens: n as u32,
                cached_prompt_tokens: reuse as u32,
                generated_tokens: 0,
                thinking_tokens: 0,
                eos_counted: false,
                finish: FinishReason::Length,
                stop_string: None,
                prefill_ms: 0.0,
                decode_ms: 0.0,
            },
            // The prompt opens the block only when this request thinks: with
            // thinking off such templates close an empty block in the prompt.
            in_think: s.params.thinking && s.options.thinking.is_some_and(|t| t.starts_inside),
            max_stop_chars: s
                .params
                .stop
                .iter()
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0),
            done: s.params.max_tokens == 0,
            pieces: pieces.into(),
        }));
    }

    loop {
        // Sequences that still need a forward pass this step.
        let active: Vec<usize> = (0..seqs.len())
            .filter(|&i| states[i].as_ref().is_some_and(|s| !s.done) && results[i].is_none())
            .collect();
        if active.is_empty() {
            break;
        }
        // What each active sequence feeds: its next prompt piece, or the
        // token it sampled last.
        let mut prefill = vec![false; seqs.len()];
        let mut snap_after = vec![false; seqs.len()];
        let mut more = vec![false; seqs.len()];
        for &i in &active {
            let st = states[i].as_mut().expect("active sequences have state");
            if let Some((r, snap)) = st.pieces.pop_front() {
                feeds[i] = seqs[i].prompt[r].to_vec();
                prefill[i] = true;
                snap_after[i] = snap;
                more[i] = !st.pieces.is_empty();
            }
        }
        obs.before_step();
        let t0 = Instant::now();
        let logits = run_step(model, seqs, &feeds, &active);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let work: Vec<StepWork> = active
            .iter()
            .map(|&i| StepWork {
                seq: i,
                tokens: feeds[i].len(),
                prefill: prefill[i],
            })
            .collect();
        obs.after_step(&work, ms);
        for (&i, lg) in active.iter().zip(logits) {
            let st = states[i].as_mut().expect("active sequences have state");
            if prefill[i] {
                st.gen.prefill_ms += ms;
            } else {
                st.gen.decode_ms += ms;
            }
            if more[i] {
                // A piece of the prompt before its last one: no sampling yet.
                match lg {
                    Ok(_) if snap_after[i] => seqs[i].state.snapshot(),
                    Ok(_) => {}
                    Err(e) => results[i] = Some(Err(e)),
                }
                continue;
            }
            let step = match lg {
                Ok(lg) => advance(st, &mut seqs[i], &lg, ctx),
                Err(e) => Err(e),
            };
            match step {
                Ok(Some(tok)) => feeds[i] = vec![tok],
                Ok(None) => st.done = true,
                Err(e) => results[i] = Some(Err(e)),
            }
        }
    }
    results
        .into_iter()
        .zip(states)
        .map(|(r, s)| match (r, s) {
            (Some(r), _) => r,
            (None, Some(s)) => Ok(s.gen),
            (None, None) => Err(anyhow::anyhow!("generate: sequence without state")),
        })
        .collect()
}

/// One forward pass over the active sequences; on a batch failure each
/// sequence is retried alone so one bad sequence does not fail the others.
fn run_step(
    model: &dyn CausalLm,
    seqs: &mut [GenSeq<'_>],
    feeds: &[Vec<u32>],
    active: &[usize],
) -> Vec<Result<Vec<f32>>> {
    let mut picked: Vec<&mut GenSeq<'_>> = seqs
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| active.contains(i))
        .map(|(_, s)| s)
        .collect();
    let mut steps: Vec<SeqStep<'_>> = picked
        .iter_mut()
        .zip(active)
        .map(|(s, &i)| SeqStep::new(&feeds[i], s.state))
        .collect();
    match model.forward(&mut steps) {
        Ok(out) => out.iter().map(logits_to_vec).collect(),
        Err(_) if steps.len() > 1 => steps
            .into_iter()
            .map(|st| {
                let mut one = [st];
                let out = model.forward(&mut one)?;
                match out.first() {
                    Some(t) => logits_to_vec(t),
                    None => bail!("model returned no logits"),
                }
            })
            .collect(),
        Err(e) => vec![Err(e)],
    }
}

/// Sample the next token of one sequence and apply its stop rules. Returns
/// the token to feed next, or `None` when the sequence is finished.
fn advance(
    st: &mut State,
    seq: &mut GenSeq<'_>,
    logits: &[f32],
    ctx: usize,
) -> Result<Option<u32>> {
    let mask = match seq.mask.as_mut() {
        Some(m) => m.allowed(&st.gen.tokens)?,
        None => None,
    };
    let tok = st.sampler.sample(logits, &st.history, mask.as_deref())?;
    st.gen.tokens.push(tok);
    st.history.push(tok);
    if let Some(d) = seq.options.thinking {
        if tok == d.start {
            st.in_think = true;
            st.gen.thinking_tokens += 1;
        } else if st.in_think {
            st.gen.thinking_tokens += 1;
            if tok == d.end {
                st.in_think = false;
            }
        }
    }
    let opts = seq.options;
    let eog = if opts.eos_ids.contains(&tok) {
        Some(FinishReason::Eos)
    } else if opts.stop_ids.contains(&tok) {
        Some(FinishReason::Stop)
    } else {
        None
    };
    if let Some(f) = eog {
        st.gen.finish = f;
        st.gen.eos_counted = opts.count_eos;
        st.gen.generated_tokens = st.gen.tokens.len() as u32 - u32::from(!opts.count_eos);
        return Ok(None);
    }
    st.gen.generated_tokens = st.gen.tokens.len() as u32;
    if let (Some(decode), false) = (seq.decode, seq.params.stop.is_empty()) {
        // A stop string ends in the newest token: decode a tail long enough
        // to hold the longest stop string.
        let tail = (st.max_stop_chars + 8).min(st.gen.tokens.len());
        let text = decode(&st.gen.tokens[st.gen.tokens.len() - tail..]);
        if let Some(s) = seq
            .params
            .stop
            .iter()
            .find(|s| !s.is_empty() && text.contains(s.as_str()))
        {
            st.gen.finish = FinishReason::Stop;
            st.gen.stop_string = Some(s.clone());
            return Ok(None);
        }
    }
    if st.gen.tokens.len() >= seq.params.max_tokens as usize {
        st.gen.finish = FinishReason::Length;
        return Ok(None);
    }
    if seq.state.len() + 1 > ctx.min(seq.state.max_len()) {
        st.gen.finish = FinishReason::Length;
        return Ok(None);
    }
    Ok(Some(tok))
}

#[cfg(test)]
mod tests {
    use super::prompt_pieces;
    use crate::inference::state::{SeqState, SlotKind, SnapshotPolicy};

    #[test]
    fn pieces_end_at_block_multiples_and_snapshot_only_where_kept() {
        let att = SeqState::attention_only(1, 1000);
        assert_eq!(prompt_pieces(&att, 0, 150, 0), vec![(0..150, false)]);
        assert_eq!(
            prompt_pieces(&att, 64, 200, 64),
            vec![(64..128, false), (128..192, false), (192..200, false)]
        );
        let rec =
            SeqState::new(&[SlotKind::Recurrent, SlotKind::Kv], 1000).with_policy(SnapshotPolicy {
                every: 128,
                keep: 8,
            });
        assert_eq!(
            prompt_pieces(&rec, 0, 300, 64),
            vec![
                (0..64, false),
                (64..128, true),
                (128..192, false),
                (192..256, true),
                (256..299, true),
                (299..300, false)
            ]
        );
        // Without a block: the recurrent cuts alone, as before.
        assert_eq!(
            prompt_pieces(&rec, 10, 300, 0),
            vec![
                (10..128, true),
                (128..256, true),
                (256..299, true),
                (299..300, false)
            ]
        );
    }
}
