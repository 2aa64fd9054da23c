//! Generation on the tiny llama fixture: greedy determinism, seeded
//! sampling, exact counts with and without the EOS token, stop strings,
//! thinking tokens, batched decoding equal to one-by-one decoding, cache
//! reuse, and the prompt-too-long error.

use candle_core::Device;
use joule::backend::{FinishReason, GenParams};
use joule::inference::engine::generate::{
    generate, generate_batch, GenOptions, GenSeq, Generation, PromptTooLong, ThinkingDelims,
};
use joule::inference::engine::model::{SeqState, SharedModel};
use joule::inference::models::load_model;
use std::path::PathBuf;

fn model() -> SharedModel {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden/llama.gguf");
    load_model(p, &Device::Cpu).unwrap()
}

const PROMPT: &[u32] = &[1, 17, 99, 5, 64];

fn params(max_tokens: u32, temperature: f32, seed: u64) -> GenParams {
    GenParams {
        max_tokens,
        temperature,
        seed,
        ..GenParams::default()
    }
}

fn run(m: &SharedModel, prompt: &[u32], p: &GenParams, o: &GenOptions) -> Generation {
    let mut cache = m.new_state();
    generate(
        m.as_ref(),
        GenSeq {
            prompt,
            state: &mut cache,
            params: p,
            options: o,
            decode: None,
            mask: None,
        },
    )
    .unwrap()
}

#[test]
fn greedy_is_deterministic_and_counts_are_exact() {
    let m = model();
    let o = GenOptions::default();
    let a = run(&m, PROMPT, &params(12, 0.0, 0), &o);
    let b = run(&m, PROMPT, &params(12, 0.0, 99), &o);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.tokens.len(), 12);
    assert_eq!(a.generated_tokens, 12);
    assert_eq!(a.prompt_tokens, 5);
    assert_eq!(a.finish, FinishReason::Length);
    assert!(!a.eos_counted);
}

#[test]
fn seeded_sampling_repeats_per_seed() {
    let m = model();
    let o = GenOptions::default();
    let a = run(&m, PROMPT, &params(16, 1.5, 7), &o);
    let b = run(&m, PROMPT, &params(16, 1.5, 7), &o);
    let c = run(&m, PROMPT, &params(16, 1.5, 8), &o);
    assert_eq!(a.tokens, b.tokens);
    assert_ne!(a.tokens, c.tokens);
}

#[test]
fn eos_ends_generation_and_is_counted_by_default() {
    let m = model();
    let greedy = run(&m, PROMPT, &params(12, 0.0, 0), &GenOptions::default());
    // Declare the 4th greedy token an EOS: generation stops there.
    let eos = greedy.tokens[3];
    let first = greedy.tokens.iter().position(|&t| t == eos).unwrap();
    let o = GenOptions {
        eos_ids: vec![eos],
        ..GenOptions::default()
    };
    let g = run(&m, PROMPT, &params(12, 0.0, 0), &o);
    assert_eq!(g.finish, FinishReason::Eos);
    assert_eq!(g.tokens, greedy.tokens[..=first].to_vec());
    assert_eq!(g.generated_tokens as usize, first + 1);
    assert!(g.eos_counted);
    assert_eq!(g.text_tokens(&o).len(), first);
    assert_eq!(g.usage().charged_tokens, g.generated_tokens);

    let o = GenOptions {
        eos_ids: vec![eos],
        count_eos: false,
        ..GenOptions::default()
    };
    let g = run(&m, PROMPT, &params(12, 0.0, 0), &o);
    assert_eq!(g.generated_tokens as usize, first);
    assert!(!g.eos_counted);

    let o = GenOptions {
        stop_ids: vec![eos],
        ..GenOptions::default()
    };
    let g = run(&m, PROMPT, &params(12, 0.0, 0), &o);
    assert_eq!(g.finish, FinishReason::Stop);
}

#[test]
fn ignore_eos_never_samples_an_end_token_and_generates_max_tokens() {
    let m = model();
    let greedy = run(&m, PROMPT, &params(12, 0.0, 0), &GenOptions::default());
    // The 2nd and 4th greedy tokens declared end tokens: without `ignore_eos` generation
    // stops at the first of them; with it, it runs to max_tokens and never samples either.
    let (eos, stop) = (greedy.tokens[1], greedy.tokens[3]);
    let o = GenOptions {
        eos_ids: vec![eos],
        stop_ids: vec![stop],
        ..GenOptions::default()
    };
    let ended = run(&m, PROMPT, &params(12, 0.0, 0), &o);
    assert!(ended.tokens.len() < 12, "{:?}", ended.tokens);
    for temperature in [0.0, 1.0] {
        let p = GenParams {
            ignore_eos: true,
            ..params(12, temperature, 3)
        };
        let g = run(&m, PROMPT, &p, &o);
        assert_eq!(g.finish, FinishReason::Length);
        assert_eq!(g.generated_tokens, 12);
        assert!(
            !g.tokens.contains(&eos) && !g.tokens.contains(&stop),
            "{:?}",
            g.tokens
        );
    }
}

#[test]
fn stop_strings_use_the_decode_callback() {
    let m = model();
    let greedy = run(&m, PROMPT, &params(12, 0.0, 0), &GenOptions::default());
    let decode = |ids: &[u32]| ids.iter().map(|i| format!("<{i}>")).collect::<String>();
    let target = format!("<{}><{}>", greedy.tokens[4], greedy.tokens[5]);
    let first = (0..11)
        .find(|&i| format!("<{}><{}>", greedy.tokens[i], greedy.tokens[i + 1]) == target)
        .unwrap();
    let p = GenParams {
        stop: vec![target.clone()],
        ..params(12, 0.0, 0)
    };
    let o = GenOptions::default();
    let mut cache = m.new_state();
    let g = generate(
        m.as_ref(),
        GenSeq {
            prompt: PROMPT,
            state: &mut cache,
            params: &p,
            options: &o,
            decode: Some(&decode),
            mask: None,
        },
    )
    .unwrap();
    assert_eq!(g.finish, FinishReason::Stop);
    assert_eq!(g.stop_string.as_deref(), Some(target.as_str()));
    assert_eq!(g.tokens.len(), first + 2);
    assert_eq!(g.generated_tokens as usize, first + 2);
}

#[test]
fn thinking_tokens_are_counted_between_delimiters() {
    let m = model();
    // Force a token sequence with a mask: think-start, two tokens, think-end, one more.
    let script = [10u32, 20, 21, 11, 30, 31];
    let mut mask = |generated: &[u32]| -> anyhow::Result<Option<Vec<bool>>> {
        let mut v = vec![false; 128];
        v[script[generated.len().min(script.len() - 1)] as usize] = true;
        Ok(Some(v))
    };
    let o = GenOptions {
        thinking: Some(ThinkingDelims {
            start: 10,
            end: 11,
            starts_inside: false,
        }),
        ..GenOptions::default()
    };
    let p = params(6, 0.8, 1);
    let mut cache = m.new_state();
    let g = generate(
        m.as_ref(),
        GenSeq {
            prompt: PROMPT,
            state: &mut cache,
            params: &p,
            options: &o,
            decode: None,
            mask: Some(&mut mask),
        },
    )
    .unwrap();
    assert_eq!(g.tokens, script.to_vec());
    assert_eq!(g.thinking_tokens, 4);
    assert_eq!(g.generated_tokens, 6);
}

#[test]
fn batch_equals_one_by_one_and_caches_are_reused() {
    let m = model();
    let o = GenOptions::default();
    let prompts: [&[u32]; 3] = [PROMPT, &[1, 2, 3], &[1, 17, 99, 5, 64, 3, 120, 42]];
    let ps = [params(10, 0.0, 0), params(7, 1.0, 3), params(9, 0.9, 4)];
    let solo: Vec<Generation> = prompts
        .iter()
        .zip(&ps)
        .map(|(pr, p)| run(&m, pr, p, &o))
        .collect();
    let mut caches: Vec<SeqState> = (0..3).map(|_| m.new_state()).collect();
    let mut seqs: Vec<GenSeq> = caches
        .iter_mut()
        .zip(prompts.iter().zip(&ps))
        .map(|(c, (pr, p))| GenSeq {
            prompt: pr,
            state: c,
            params: p,
            options: &o,
            decode: None,
            mask: None,
        })
        .collect();
    let batch: Vec<Generation> = generate_batch(m.as_ref(), &mut seqs)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    drop(seqs);
    for (s, b) in solo.iter().zip(&batch) {
        assert_eq!(s.tokens, b.tokens);
        assert_eq!(s.generated_tokens, b.generated_tokens);
    }
    // Continue the first conversation: the cached prompt + answer is reused.
    let mut next: Vec<u32> = PROMPT.to_vec();
    next.extend(&batch[0].tokens);
    next.extend([5, 6]);
    let p = params(5, 0.0, 0);
    let g = generate(
        m.as_ref(),
        GenSeq {
            prompt: &next,
            state: &mut caches[0],
            params: &p,
            options: &o,
            decode: None,
            mask: None,
        },
    )
    .unwrap();
    assert_eq!(
        g.cached_prompt_tokens as usize,
        PROMPT.len() + batch[0].tokens.len() - 1
    );
    assert_eq!(g.prompt_tokens as usize, next.len());
    let fresh = run(&m, &next, &p, &o);
    assert_eq!(g.tokens, fresh.tokens);
}

#[test]
fn prompt_too_long_names_model_and_lengths() {
    let m = model();
    let ctx = m.info().context_length;
    let long: Vec<u32> = (0..ctx as u32).map(|i| i % 100).collect();
    let mut cache = m.new_state();
    let p = params(4, 0.0, 0);
    let o = GenOptions::default();
    let err = generate(
        m.as_ref(),
        GenSeq {
            prompt: &long,
            state: &mut cache,
            params: &p,
            options: &o,
            decode: None,
            mask: None,
        },
    )
    .unwrap_err();
    let e = err.downcast_ref::<PromptTooLong>().expect("PromptTooLong");
    assert_eq!(e.prompt_tokens, ctx);
    assert_eq!(e.context_length, ctx);
    let msg = err.to_string();
    assert!(
        msg.contains("joule-golden-llama") && msg.contains(&ctx.to_string()),
        "{msg}"
    );

    // Generation that reaches the end of the context stops with Length.
    let near: Vec<u32> = (0..(ctx - 3) as u32).map(|i| i % 100).collect();
    let g = run(&m, &near, &params(50, 0.0, 0), &o);
    assert_eq!(g.finish, FinishReason::Length);
    // 3 free positions are fed; the token sampled after the last one ends it.
    assert_eq!(g.tokens.len(), 4);
}
