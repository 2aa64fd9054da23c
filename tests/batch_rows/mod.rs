//! What `tests/full/continuous_batching.rs` and `tests/split_kquants.rs` share: a plan of prefill
//! pieces and decode steps run with every sequence alone and then sharing steps, whose logits
//! must agree bit for bit, and a synthesized Q4_K_M model to run it on.

#![allow(dead_code)]

use crate::roster_common;
use joule::inference::engine::model::{logits_to_vec, CausalLm, Logits, SeqStep};

/// Deterministic pseudo-random ids below `vocab`.
pub fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

/// Each sequence's steps: (from, to) ranges of its ids, fed in order.
pub type Plan = Vec<Vec<(usize, usize)>>;

/// Run `plan` with every sequence alone, then with the sequences sharing
/// steps as `together` says (step k feeds piece `together[k][i]` of sequence
/// `i`, or nothing); every piece's logits must be the same bits (`exact`),
/// or within 1e-5 (dense f32 weights: candle's gemm blocks a matmul by the
/// number of rows, so the last bits depend on the batch).
pub fn rows_are_independent(m: &dyn CausalLm, what: &str, exact: bool) {
    let vocab = m.info().vocab_size;
    let seqs = [ids(150, vocab, 1), ids(40, vocab, 2), ids(9, vocab, 3)];
    // Prefill pieces of different sizes, then decode steps of one token.
    let plan: Plan = vec![
        vec![(0, 64), (64, 128), (128, 149), (149, 150)],
        vec![(0, 39), (39, 40)],
        vec![(0, 8), (8, 9)],
    ];
    let alone: Vec<Vec<Vec<f32>>> = (0..seqs.len())
        .map(|i| {
            let mut st = m.new_state();
            plan[i]
                .iter()
                .map(|&(a, b)| {
                    let mut step = [SeqStep {
                        tokens: &seqs[i][a..b],
                        state: &mut st,
                        logits: Logits::All,
                    }];
                    logits_to_vec(&m.forward(&mut step).expect("forward")[0]).unwrap()
                })
                .collect()
        })
        .collect();
    // Step k: which piece of each sequence (None = not in this step).
    let together: Vec<[Option<usize>; 3]> = vec![
        [Some(0), None, None],
        [Some(1), Some(0), None],
        [Some(2), Some(1), Some(0)],
        [Some(3), None, Some(1)],
    ];
    let mut states: Vec<_> = seqs.iter().map(|_| m.new_state()).collect();
    for (k, row) in together.iter().enumerate() {
        let mut steps = Vec::new();
        let mut who = Vec::new();
        for (i, st) in states.iter_mut().enumerate() {
            if let Some(p) = row[i] {
                let (a, b) = plan[i][p];
                steps.push(SeqStep {
                    tokens: &seqs[i][a..b],
                    state: st,
                    logits: Logits::All,
                });
                who.push((i, p));
            }
        }
        let out = m.forward(&mut steps).expect("batched forward");
        for ((i, p), t) in who.into_iter().zip(out) {
            let got = logits_to_vec(&t).unwrap();
            let want = &alone[i][p];
            if !exact {
                let e = roster_common::rel_err(&got, want);
                assert!(
                    e < 1e-5,
                    "{what}: step {k}, sequence {i} piece {p}: rel err {e}"
                );
                continue;
            }
            let differ = got.iter().zip(want).filter(|(x, y)| x != y).count();
            assert_eq!(
                differ,
                0,
                "{what}: step {k}, sequence {i} piece {p}: {differ} logits differ from the \
                 sequence alone (rel err {})",
                roster_common::rel_err(&got, want)
            );
        }
    }
}

/// SmolLM2 synthesized as Q4_K_M with three layers (llama-quantize's mix gives layer 2's
/// `ffn_down` Q6_K, the others Q4_K): the folder that holds it, and its path.
pub fn synthesized_smollm2_q4_k_m() -> (tempfile::TempDir, std::path::PathBuf) {
    use joule::inference::files::manifest::Catalog;
    use joule::inference::files::synth::{recipe::FileType, synthesize, SynthOptions};
    let catalog = Catalog::load(None).expect("manifests");
    let m = catalog
        .get("smollm2-135m-instruct")
        .expect("SmolLM2 manifest");
    let cfg = m.synth.clone().expect("SmolLM2's [synth] table");
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("smollm2.Q4_K_M.gguf");
    let opts = SynthOptions {
        out: gguf.clone(),
        file_type: FileType::Q4KM,
        layout: joule::inference::files::synth::Layout::LlamaCpp,
        layers: Some(3),
        seed: 1,
        vocab: None,
        chat_template: None,
        quiet: true,
    };
    synthesize(&m.name, &m.architecture, &cfg, &opts).expect("synthesize");
    (dir, gguf)
}
