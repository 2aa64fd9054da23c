//! Continuous batching (`generate::DecodeBatch`) is exact: a sequence's
//! logits do not depend on which sequences share its forward steps (checked
//! bit for bit on quantised weights: the roster's q8_0 fixtures, recurrent
//! and sliding-window ones included, SmolLM2's Q4_1 kernel when the model is
//! cached, and a synthesized Q4_K_M whose Q4_K/Q6_K are split by rows between
//! Joule's and candle's kernels; dense f32 weights agree to 1e-5 only), so its tokens do not
//! depend on when it joins the running batch or on the prefill budget; and a
//! finished sequence's place is taken at the next step, before the longest
//! sequence ends.

use crate::batch_rows;
use crate::roster_common;

use batch_rows::{ids, rows_are_independent};

use joule::backend::GenParams;
use joule::inference::engine::generate::{
    generate, BatchSeq, DecodeBatch, GenOptions, GenSeq, Generation,
};
use joule::inference::engine::model::{CausalLm, SharedModel};
use joule::meter::attribution::NoObserver;
use std::path::PathBuf;

fn golden_llama() -> SharedModel {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden/llama.gguf");
    joule::inference::models::load_model(p, &roster_common::test_device()).unwrap()
}

/// Quantised weights (every roster architecture's q8_0 fixture): exact.
/// The f32 golden llama: close (see [`rows_are_independent`]).
#[test]
fn batched_rows_are_computed_independently_on_every_architecture() {
    for f in [
        "qwen3.q8_0.gguf",
        "qwen35.q8_0.gguf",
        "nemotron_h.q8_0.gguf",
        "gemma4.q8_0.gguf",
    ] {
        rows_are_independent(roster_common::load(f).as_ref(), f, true);
    }
    rows_are_independent(golden_llama().as_ref(), "llama f32", false);
}

/// The default model when it is cached (CI fetches it first).
fn smollm2() -> Option<PathBuf> {
    use joule::inference::files::manifest::{Catalog, DEFAULT_MODEL};
    let catalog = Catalog::embedded().expect("embedded manifests");
    let manifest = catalog.get(DEFAULT_MODEL).expect("default manifest");
    match joule::inference::files::sources::Sources::from_env().find_cached(manifest) {
        Some(f) => Some(f.path),
        None if std::env::var_os("CI").is_some() => {
            panic!("the default model is not cached: .ci/run must run scripts/fetch-default-model.sh first")
        }
        None => {
            eprintln!("skipped: run scripts/fetch-default-model.sh to fetch {DEFAULT_MODEL}");
            None
        }
    }
}

#[test]
fn batched_rows_are_computed_independently_on_smollm2() {
    if let Some(p) = smollm2() {
        let m = joule::inference::models::load_model(&p, &roster_common::test_device()).unwrap();
        rows_are_independent(m.as_ref(), "SmolLM2 Q4_1", true);
    }
}

/// A synthesized SmolLM2 Q4_K_M (its `ffn_down` is Q4_K and Q6_K in shapes candle repacks) with
/// the default kernels: the plan mixes 64-, 39- and 21-row pieces with 8- and 1-row ones in shared
/// steps, and every piece is the same bits as alone. (`tests/split_kquants.rs` runs the same plan
/// with `JOULE_CPU_KERNEL_TYPES=split`.)
#[test]
fn batched_rows_are_computed_independently_on_k_quants() {
    let (_dir, gguf) = batch_rows::synthesized_smollm2_q4_k_m();
    let model = joule::inference::models::load_model(&gguf, &roster_common::test_device()).unwrap();
    rows_are_independent(model.as_ref(), "SmolLM2 Q4_K_M, default kernels", true);
}

fn params(max_tokens: u32, seed: u64) -> GenParams {
    GenParams {
        max_tokens,
        temperature: 0.9,
        seed,
        ..GenParams::default()
    }
}

fn options() -> GenOptions {
    GenOptions {
        block: 8,
        ..GenOptions::default()
    }
}

fn alone(m: &dyn CausalLm, prompt: &[u32], p: &GenParams) -> Generation {
    let mut st = m.new_state();
    generate(
        m,
        GenSeq {
            prompt,
            state: &mut st,
            params: p,
            options: &options(),
            decode: None,
            mask: None,
        },
    )
    .expect("alone")
}

fn seq(m: &dyn CausalLm, prompt: &[u32], p: &GenParams) -> BatchSeq<'static> {
    BatchSeq {
        prompt: prompt.to_vec(),
        state: m.new_state(),
        params: p.clone(),
        options: options(),
        decode: None,
        mask: None,
    }
}

/// A long sequence, a short one and one that joins when the short one
/// ends: the newcomer starts at the next step and finishes while the long
/// one still runs, and every sequence gets the tokens it gets alone, for
/// any prefill budget (pieces are never split, only scheduled).
#[test]
fn a_finished_slot_is_refilled_before_the_longest_sequence_ends() {
    let m = golden_llama();
    let m = m.as_ref();
    let vocab = m.info().vocab_size;
    let (pa, pb, pc) = (ids(30, vocab, 4), ids(12, vocab, 5), ids(21, vocab, 6));
    let (qa, qb, qc) = (params(40, 1), params(3, 2), params(6, 3));
    let want = [alone(m, &pa, &qa), alone(m, &pb, &qb), alone(m, &pc, &qc)];
    assert_eq!(
        want[0].tokens.len(),
        40,
        "the long sequence runs to max_tokens"
    );

    for budget in [0, 8, 16, 1000] {
        let mut batch = DecodeBatch::new(budget);
        batch.add(m, 0, seq(m, &pa, &qa));
        batch.add(m, 1, seq(m, &pb, &qb));
        let mut ended: Vec<(u64, u64)> = Vec::new(); // (id, step it ended in)
        let mut got: Vec<Option<Generation>> = vec![None, None, None];
        let mut c_joined = None;
        while !batch.is_empty() {
            for f in batch.step(m, &mut NoObserver) {
                ended.push((f.id, batch.steps));
                got[f.id as usize] = Some(f.result.expect("generation"));
                if f.id == 1 {
                    batch.add(m, 2, seq(m, &pc, &qc));
                    c_joined = Some(batch.steps);
                }
            }
        }
        let at = |id: u64| ended.iter().find(|e| e.0 == id).map(|e| e.1).unwrap();
        let joined = c_joined.expect("c joined");
        assert_eq!(joined, at(1), "budget {budget}: c joins when b ends");
        assert!(
            at(2) < at(0),
            "budget {budget}: c (joined at step {joined}, ended {}) ends before a ({})",
            at(2),
            at(0)
        );
        for (i, w) in want.iter().enumerate() {
            let g = got[i].as_ref().unwrap();
            assert_eq!(g.tokens, w.tokens, "budget {budget}: sequence {i}'s tokens");
            assert_eq!(g.cached_prompt_tokens, 0);
            assert_eq!(g.prompt_tokens, w.prompt_tokens);
        }
        // With a budget of one block, a's 30-token prompt (pieces of 8, 8, 8
        // and 6) needs four steps and b's prefill waits behind it.
        if budget == 8 {
            assert_eq!(at(1), 4 + 2 + 2, "b: 2 pieces after a's 4, then 3 tokens");
        }
    }
}

/// The budget caps prompt tokens per step (whole pieces; the oldest waiting
/// piece always goes) while decoding sequences feed one token every step.
#[test]
fn the_prefill_budget_schedules_whole_pieces_oldest_first() {
    use joule::meter::attribution::{StepObserver, StepWork};
    struct Log(Vec<Vec<(usize, usize, bool)>>);
    impl StepObserver for Log {
        fn before_step(&mut self) {}
        fn after_step(&mut self, work: &[StepWork], _ms: f64) {
            self.0
                .push(work.iter().map(|w| (w.seq, w.tokens, w.prefill)).collect());
        }
    }
    let m = golden_llama();
    let m = m.as_ref();
    let vocab = m.info().vocab_size;
    let mut batch = DecodeBatch::new(16);
    batch.add(m, 7, seq(m, &ids(20, vocab, 8), &params(3, 1)));
    batch.add(m, 9, seq(m, &ids(10, vocab, 9), &params(2, 2)));
    let mut log = Log(Vec::new());
    while !batch.is_empty() {
        batch.step(m, &mut log);
    }
    assert_eq!(
        log.0,
        vec![
            // 7's pieces: 0..8, 8..16, 16..20; 9's: 0..8, 8..10.
            vec![(7, 8, true), (9, 8, true)],
            vec![(7, 8, true), (9, 2, true)],
            vec![(7, 4, true), (9, 1, false)],
            vec![(7, 1, false)],
            vec![(7, 1, false)],
        ]
    );
}
