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
//!   extra stop ids; never sampled with `params.ignore_eos`), at a stop
//!   string (`Stop`), or when the context is full (`Length`).

use crate::backend::{FinishReason, GenParams, TokenUsage};
use crate::inference::engine::model::{logits_to_vec, CausalLm, SeqState, SeqStep};
use crate::inference::engine::sampler::{Sampler, SamplingParams};
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
    /// Used up by a generation (taken out of the sequence).
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

/// A mask borrowed for one [`generate_batch`] call.
struct BorrowedMask<'a>(&'a mut dyn TokenMask);

impl TokenMask for BorrowedMask<'_> {
    fn allowed(&mut self, generated: &[u32]) -> Result<Option<Vec<bool>>> {
        self.0.allowed(generated)
    }
}

/// [`generate_batch`], telling `obs` about every forward step (energy
/// metering: [`crate::meter::attribution`]; [`StepWork::seq`] is the
/// sequence's index in `seqs`). Every sequence starts at once and feeds its
/// next prompt piece in every step (a [`DecodeBatch`] without a budget).
pub fn generate_batch_observed(
    model: &dyn CausalLm,
    seqs: &mut [GenSeq<'_>],
    obs: &mut dyn StepObserver,
) -> Vec<Result<Generation>> {
    let mut batch = DecodeBatch::new(0);
    for (i, s) in seqs.iter_mut().enumerate() {
        // The batch owns its states while it runs; each goes back below.
        let state = std::mem::replace(s.state, SeqState::new(&[], 0));
        let decode = s
            .decode
            .map(|d| Box::new(move |ids: &[u32]| d(ids)) as Box<dyn Fn(&[u32]) -> String + '_>);
        let mask = s
            .mask
            .take()
            .map(|m| Box::new(BorrowedMask(m)) as Box<dyn TokenMask + '_>);
        batch.add(
            model,
            i as u64,
            BatchSeq {
                prompt: s.prompt.to_vec(),
                state,
                params: s.params.clone(),
                options: s.options.clone(),
                decode,
                mask,
            },
        );
    }
    let mut results: Vec<Option<Result<Generation>>> = (0..seqs.len()).map(|_| None).collect();
    let mut collect = |done: Vec<Finished>, seqs: &mut [GenSeq<'_>]| {
        for f in done {
            let i = f.id as usize;
            *seqs[i].state = f.state;
            results[i] = Some(f.result);
        }
    };
    let done = batch.take_finished();
    collect(done, seqs);
    while !batch.is_empty() {
        let done = batch.step(model, obs);
        collect(done, seqs);
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("generate: sequence without result"))))
        .collect()
}

/// A sequence to add to a [`DecodeBatch`], owning what it needs (closures
/// may borrow for `'a`).
pub struct BatchSeq<'a> {
    pub prompt: Vec<u32>,
    pub state: SeqState,
    pub params: GenParams,
    pub options: GenOptions,
    /// Decodes token ids to text; needed for `params.stop` strings.
    pub decode: Option<Box<dyn Fn(&[u32]) -> String + 'a>>,
    pub mask: Option<Box<dyn TokenMask + 'a>>,
}

/// A sequence that left a [`DecodeBatch`]: its id, prompt and state back,
/// and its generation (or why it failed).
pub struct Finished {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub state: SeqState,
    pub result: Result<Generation>,
}

struct Running<'a> {
    id: u64,
    seq: BatchSeq<'a>,
    st: State,
    /// What the sequence feeds when its next step is a decode step.
    feed: Vec<u32>,
}

/// Continuous batching: a running batch of sequences that new sequences
/// join at any step, and that each sequence leaves as soon as it finishes
/// (so its place is taken at once, not at the end of the longest one).
///
/// Each [`DecodeBatch::step`] is one forward pass over one token of every
/// decoding sequence and the next prompt piece ([`prompt_pieces`]) of
/// prefilling ones, in the order they joined, as long as the pieces fit
/// `prefill_budget` prompt tokens (the oldest waiting piece always goes, so
/// a piece larger than the budget still advances; 0 = no budget). Pieces are
/// never split or merged: a sequence computes exactly the passes it would
/// compute alone, and since every model computes each sequence's rows of a
/// step independently, its logits — and so its tokens — do not depend on
/// which sequences share its steps or when it joined.
pub struct DecodeBatch<'a> {
    running: Vec<Running<'a>>,
    /// Sequences that finished without a step (bad prompts, `max_tokens = 0`).
    finished: Vec<Finished>,
    pub prefill_budget: usize,
    /// Forward steps so far.
    pub steps: u64,
}

impl<'a> DecodeBatch<'a> {
    pub fn new(prefill_budget: usize) -> Self {
        Self {
            running: Vec::new(),
            finished: Vec::new(),
            prefill_budget,
            steps: 0,
        }
    }

    /// Sequences running or finished but not yet taken.
    pub fn len(&self) -> usize {
        self.running.len() + self.finished.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ids of the running sequences, in the order they joined.
    pub fn running_ids(&self) -> Vec<u64> {
        self.running.iter().map(|r| r.id).collect()
    }

    /// Tokens the running sequences sampled so far (progress only).
    pub fn sampled(&self) -> u64 {
        self.running
            .iter()
            .map(|r| r.st.gen.tokens.len() as u64)
            .sum()
    }

    /// A running sequence's prompt and state (`None` once it finished).
    pub fn sequence(&self, id: u64) -> Option<(&[u32], &SeqState)> {
        self.running
            .iter()
            .find(|r| r.id == id)
            .map(|r| (r.seq.prompt.as_slice(), &r.seq.state))
    }

    /// Sequences that finished without a forward step, taken out.
    pub fn take_finished(&mut self) -> Vec<Finished> {
        std::mem::take(&mut self.finished)
    }

    /// Add a sequence; it feeds from the next step on. It resumes from the
    /// longest prefix of its prompt its state can return to (block-aligned
    /// with `options.block`).
    pub fn add(&mut self, model: &dyn CausalLm, id: u64, mut seq: BatchSeq<'a>) {
        let name = &model.info().name;
        let ctx = model.info().context_length.min(seq.state.max_len());
        let n = seq.prompt.len();
        let bad = if n == 0 {
            Some(anyhow::anyhow!("model `{name}`: empty prompt"))
        } else if n >= ctx {
            Some(
                PromptTooLong {
                    model: name.clone(),
                    prompt_tokens: n,
                    context_length: ctx,
                }
                .into(),
            )
        } else if !seq.params.stop.is_empty() && seq.decode.is_none() {
            Some(anyhow::anyhow!(
                "model `{name}`: stop strings need a decode callback"
            ))
        } else {
            None
        };
        if let Some(e) = bad {
            self.finished.push(Finished {
                id,
                prompt: seq.prompt,
                state: seq.state,
                result: Err(e),
            });
            return;
        }
        let mut want = seq.state.common_prefix(&seq.prompt).min(n - 1);
        if seq.options.block > 0 {
            want -= want % seq.options.block;
        }
        let reuse = seq.state.rewind(want);
        // Key/value buffers sized for the whole prompt at its first piece.
        seq.state.reserve_kv(n);
        let pieces = prompt_pieces(&seq.state, reuse, n, seq.options.block);
        let st = State {
            sampler: Sampler::new(SamplingParams::from_gen_params(&seq.params)),
            history: seq.prompt.clone(),
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
            in_think: seq.params.thinking && seq.options.thinking.is_some_and(|t| t.starts_inside),
            max_stop_chars: seq
                .params
                .stop
                .iter()
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0),
            done: seq.params.max_tokens == 0,
            pieces: pieces.into(),
        };
        if st.done {
            self.finished.push(Finished {
                id,
                prompt: seq.prompt,
                state: seq.state,
                result: Ok(st.gen),
            });
            return;
        }
        self.running.push(Running {
            id,
            seq,
            st,
            feed: Vec::new(),
        });
    }

    /// One forward step (see [`DecodeBatch`]); returns the sequences that
    /// finished in it (and any that finished when added), in join order.
    /// `obs` hears about the step; [`StepWork::seq`] is a sequence's id.
    pub fn step(&mut self, model: &dyn CausalLm, obs: &mut dyn StepObserver) -> Vec<Finished> {
        let mut out = self.take_finished();
        if self.running.is_empty() {
            return out;
        }
        let ctx = model.info().context_length;
        // Choose what each sequence feeds: decoding ones one token, prefilling
        // ones their next piece while the budget lasts.
        let mut left = if self.prefill_budget == 0 {
            usize::MAX
        } else {
            self.prefill_budget
        };
        let mut took_piece = false;
        // (index in running, is a prompt piece, snapshot after, more pieces follow)
        let mut plan: Vec<(usize, bool, bool, bool)> = Vec::with_capacity(self.running.len());
        for (k, r) in self.running.iter_mut().enumerate() {
            match r.st.pieces.front() {
                Some((range, snap)) => {
                    let len = range.len();
                    if took_piece && len > left {
                        continue;
                    }
                    let snap = *snap;
                    let range = range.clone();
                    r.st.pieces.pop_front();
                    r.feed = r.seq.prompt[range].to_vec();
                    left = left.saturating_sub(len);
                    took_piece = true;
                    plan.push((k, true, snap, !r.st.pieces.is_empty()));
                }
                None => plan.push((k, false, false, false)),
            }
        }
        let work: Vec<StepWork> = plan
            .iter()
            .map(|&(k, prefill, _, _)| StepWork {
                seq: self.running[k].id as usize,
                tokens: self.running[k].feed.len(),
                prefill,
            })
            .collect();
        obs.before_step();
        let t0 = Instant::now();
        let logits = {
            let picked: Vec<usize> = plan.iter().map(|p| p.0).collect();
            let mut steps: Vec<SeqStep<'_>> = Vec::with_capacity(picked.len());
            let mut next = picked.iter().peekable();
            for (k, r) in self.running.iter_mut().enumerate() {
                if next.peek() == Some(&&k) {
                    next.next();
                    steps.push(SeqStep::new(&r.feed, &mut r.seq.state));
                }
            }
            run_step(model, steps)
        };
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        obs.after_step(&work, ms);
        self.steps += 1;
        let mut failed: Vec<(usize, anyhow::Error)> = Vec::new();
        let mut ended: Vec<usize> = Vec::new();
        for (&(k, prefill, snap_after, more), lg) in plan.iter().zip(logits) {
            let r = &mut self.running[k];
            if prefill {
                r.st.gen.prefill_ms += ms;
            } else {
                r.st.gen.decode_ms += ms;
            }
            if more {
                // A piece of the prompt before its last one: no sampling yet.
                match lg {
                    Ok(_) if snap_after => r.seq.state.snapshot(),
                    Ok(_) => {}
                    Err(e) => failed.push((k, e)),
                }
                continue;
            }
            let step = match lg {
                Ok(lg) => advance(&mut r.st, &mut r.seq, &lg, ctx),
                Err(e) => Err(e),
            };
            match step {
                Ok(Some(tok)) => r.feed = vec![tok],
                Ok(None) => ended.push(k),
                Err(e) => failed.push((k, e)),
            }
        }
        let mut failed: std::collections::BTreeMap<usize, anyhow::Error> =
            failed.into_iter().collect();
        let ended: std::collections::BTreeSet<usize> = ended.into_iter().collect();
        let running = std::mem::take(&mut self.running);
        for (k, r) in running.into_iter().enumerate() {
            let result = match failed.remove(&k) {
                Some(e) => Err(e),
                None if ended.contains(&k) => Ok(r.st.gen),
                None => {
                    self.running.push(r);
                    continue;
                }
            };
            out.push(Finished {
                id: r.id,
                prompt: r.seq.prompt,
                state: r.seq.state,
                result,
            });
        }
        if took_piece {
            // A prompt step's buffers (hundreds of MiB at real width) go
            // back to the system rather than stay committed for good
            // (`load_purge`'s text); decode steps' are small and reused.
            crate::inference::engine::load_purge::release_freed();
        }
        out
    }
}

/// One forward pass over the given sequences; on a batch failure each
/// sequence is retried alone so one bad sequence does not fail the others.
fn run_step(model: &dyn CausalLm, mut steps: Vec<SeqStep<'_>>) -> Vec<Result<Vec<f32>>> {
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
    seq: &mut BatchSeq<'_>,
    logits: &[f32],
    ctx: usize,
) -> Result<Option<u32>> {
    let mask = match seq.mask.as_mut() {
        Some(m) => m.allowed(&st.gen.tokens)?,
        None => None,
    };
    // `ignore_eos`: end-of-generation ids are never sampled.
    let suppressed;
    let logits = if seq.params.ignore_eos {
        let mut l = logits.to_vec();
        for &id in seq.options.eos_ids.iter().chain(&seq.options.stop_ids) {
            if let Some(x) = l.get_mut(id as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
        suppressed = l;
        &suppressed[..]
    } else {
        logits
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
    let opts = &seq.options;
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
    if let (Some(decode), false) = (seq.decode.as_ref(), seq.params.stop.is_empty()) {
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
    use crate::inference::engine::state::{SeqState, SlotKind, SnapshotPolicy};

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
