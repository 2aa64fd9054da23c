//! Golden-logit tests: tiny random-weight llama, qwen2, qwen3 and gemma3
//! models written as F32 GGUF by scripts/gen_golden_logits.py, whose
//! transformers logits are in tests/fixtures/golden/<arch>.logits.json.
//! Our logits must match to 1e-4 for a one-shot prefill, for a prefill
//! followed by single-token decode steps through the KV cache, and for a
//! batch of sequences at different positions.

use candle_core::Device;
use joule::inference::engine::model::{logits_to_vec, Logits, SeqStep};
use joule::inference::models::load_model;
use std::path::PathBuf;

struct Golden {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn fixture(arch: &str) -> (PathBuf, Golden) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{arch}.logits.json"))).unwrap(),
    )
    .unwrap();
    let tokens = json["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let logits = json["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    (dir.join(format!("{arch}.gguf")), Golden { tokens, logits })
}

/// The device the golden tests run on: `JOULE_TEST_DEVICE` (`cpu`, `cuda`,
/// `cuda:N`, `metal`; default cpu), so `scripts/gpu-check.sh` can run them
/// on a GPU build.
fn test_device() -> Device {
    match std::env::var("JOULE_TEST_DEVICE") {
        Ok(name) if !name.is_empty() => joule::inference::engine::device::select_device(&name)
            .unwrap_or_else(|e| panic!("JOULE_TEST_DEVICE={name}: {e:#}")),
        _ => Device::Cpu,
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const TOL: f32 = 1e-4;

fn check_arch(arch: &str) {
    let (path, g) = fixture(arch);
    let model = load_model(&path, &test_device()).unwrap();
    assert_eq!(model.info().arch, arch);
    let vocab = model.info().vocab_size;
    let n = g.tokens.len();

    // 1. One-shot prefill, logits at every position.
    let mut cache = model.new_state();
    let mut step = [SeqStep {
        tokens: &g.tokens,
        state: &mut cache,
        logits: Logits::All,
    }];
    let out = model.forward(&mut step).unwrap();
    let all = logits_to_vec(&out[0]).unwrap();
    assert_eq!(all.len(), n * vocab);
    for (i, want) in g.logits.iter().enumerate() {
        let d = max_abs_diff(&all[i * vocab..(i + 1) * vocab], want);
        assert!(d < TOL, "{arch}: prefill position {i}: max abs diff {d}");
    }
    assert_eq!(cache.len(), n);

    // 2. Prefill a prefix, then decode one token at a time through the cache.
    let split = 5;
    let mut cache = model.new_state();
    let mut step = [SeqStep::new(&g.tokens[..split], &mut cache)];
    let out = model.forward(&mut step).unwrap();
    let d = max_abs_diff(&logits_to_vec(&out[0]).unwrap(), &g.logits[split - 1]);
    assert!(d < TOL, "{arch}: prefix prefill: max abs diff {d}");
    for i in split..n {
        let mut step = [SeqStep::new(&g.tokens[i..i + 1], &mut cache)];
        assert_eq!(step[0].position(), i);
        let out = model.forward(&mut step).unwrap();
        let d = max_abs_diff(&logits_to_vec(&out[0]).unwrap(), &g.logits[i]);
        assert!(d < TOL, "{arch}: decode position {i}: max abs diff {d}");
    }

    // 3. A batch: two sequences at different positions with their own caches.
    let mut c1 = model.new_state();
    let mut c2 = model.new_state();
    let mut first = [SeqStep::new(&g.tokens[..8], &mut c1)];
    model.forward(&mut first).unwrap();
    let mut batch = [
        SeqStep::new(&g.tokens[8..9], &mut c1),
        SeqStep::new(&g.tokens[..3], &mut c2),
    ];
    let out = model.forward(&mut batch).unwrap();
    let d1 = max_abs_diff(&logits_to_vec(&out[0]).unwrap(), &g.logits[8]);
    let d2 = max_abs_diff(&logits_to_vec(&out[1]).unwrap(), &g.logits[2]);
    assert!(d1 < TOL && d2 < TOL, "{arch}: batch: {d1} {d2}");

    // 4. Reusing a cache after truncation gives the same logits again.
    assert_eq!(c1.rewind(4), 4);
    let mut step = [SeqStep::new(&g.tokens[4..7], &mut c1)];
    let out = model.forward(&mut step).unwrap();
    let d = max_abs_diff(&logits_to_vec(&out[0]).unwrap(), &g.logits[6]);
    assert!(d < TOL, "{arch}: after truncate: {d}");
}

#[test]
fn llama_matches_transformers() {
    check_arch("llama");
}

#[test]
fn qwen2_matches_transformers() {
    check_arch("qwen2");
}

#[test]
fn qwen3_matches_transformers() {
    check_arch("qwen3");
}

#[test]
fn gemma3_matches_transformers() {
    check_arch("gemma3");
}

/// A prompt longer than one attention chunk (128 queries) gives, in one
/// step, the logits it gives when fed in short pieces through the cache, and
/// a batch of a long and a short sequence gives each its own logits.
fn check_long_prompt(arch: &str) {
    let (path, _) = fixture(arch);
    let model = load_model(&path, &test_device()).unwrap();
    let vocab = model.info().vocab_size;
    let n = 250.min(model.info().context_length - 1);
    let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 3) % vocab as u32).collect();

    let mut one_shot = model.new_state();
    let mut step = [SeqStep {
        tokens: &tokens,
        state: &mut one_shot,
        logits: Logits::All,
    }];
    let all = logits_to_vec(&model.forward(&mut step).unwrap()[0]).unwrap();

    let mut pieces = model.new_state();
    for (p, chunk) in tokens.chunks(25).enumerate() {
        let mut step = [SeqStep {
            tokens: chunk,
            state: &mut pieces,
            logits: Logits::All,
        }];
        let got = logits_to_vec(&model.forward(&mut step).unwrap()[0]).unwrap();
        let at = p * 25 * vocab;
        let d = max_abs_diff(&got, &all[at..at + got.len()]);
        assert!(d < TOL, "{arch}: piece {p}: max abs diff {d}");
    }

    let mut long = model.new_state();
    let mut short = model.new_state();
    let mut batch = [
        SeqStep::new(&tokens[..3], &mut short),
        SeqStep::new(&tokens, &mut long),
    ];
    let out = model.forward(&mut batch).unwrap();
    let d_short = max_abs_diff(&logits_to_vec(&out[0]).unwrap(), &all[2 * vocab..3 * vocab]);
    let d_long = max_abs_diff(&logits_to_vec(&out[1]).unwrap(), &all[(n - 1) * vocab..]);
    assert!(
        d_short < TOL && d_long < TOL,
        "{arch}: batch: {d_short} {d_long}"
    );
}

#[test]
fn long_prompts_are_chunked_without_changing_logits() {
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        check_long_prompt(arch);
    }
}
