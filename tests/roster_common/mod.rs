//! Shared checks of the roster architectures' golden fixtures
//! (`tests/fixtures/roster/`, made by `scripts/gen_roster_fixtures.py`: tiny
//! random transformers models converted by llama.cpp's own converter, and
//! transformers' logits at every position of three id sequences).

#![allow(dead_code)]

use candle_core::Device;
use joule::inference::engine::logits::compute;
use joule::inference::engine::model::{logits_to_vec, Logits, SeqStep, SharedModel};
use joule::inference::models::load_model;
use std::path::PathBuf;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/roster")
        .join(name)
}

/// One reference sequence: its ids and transformers' logits `[n, vocab]`.
pub struct RefSeq {
    pub ids: Vec<u32>,
    pub logits: Vec<f32>,
    pub vocab: usize,
}

/// The `main`, `b37` and `b53` sequences of an architecture's fixture.
pub fn sequences(arch: &str) -> Vec<(String, RefSeq)> {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(&format!("{arch}.json"))).expect("fixture json"),
    )
    .expect("fixture json parses");
    let mut out = Vec::new();
    for name in ["main", "b37", "b53"] {
        let s = &meta["sequences"][name];
        let ids: Vec<u32> = s["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let file = s["logits"].as_str().expect("logits file");
        let (shape, logits) = joule::npy::read_f32(&fixture(file)).expect("reference logits");
        assert_eq!(shape[0], ids.len());
        out.push((
            name.to_string(),
            RefSeq {
                ids,
                logits,
                vocab: shape[1],
            },
        ));
    }
    out
}

/// max |a − r| / max |r|.
pub fn rel_err(a: &[f32], r: &[f32]) -> f32 {
    assert_eq!(a.len(), r.len(), "logit counts differ");
    let d = a
        .iter()
        .zip(r)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let m = r.iter().map(|y| y.abs()).fold(0.0, f32::max);
    d / m
}

/// Mean over positions of the cosine between rows of `a` and `r`.
pub fn mean_cos(a: &[f32], r: &[f32], vocab: usize) -> f32 {
    let rows: Vec<f32> = a
        .chunks(vocab)
        .zip(r.chunks(vocab))
        .map(|(x, y)| {
            let d: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
            let nx: f32 = x.iter().map(|p| p * p).sum::<f32>().sqrt();
            let ny: f32 = y.iter().map(|p| p * p).sum::<f32>().sqrt();
            d / (nx * ny)
        })
        .collect();
    rows.iter().sum::<f32>() / rows.len() as f32
}

/// The device the golden tests run on: `JOULE_TEST_DEVICE` (`cpu`, `cuda`,
/// `cuda:N`, `metal`; default cpu), so `scripts/gpu-check.sh` can run them
/// on a GPU build.
pub fn test_device() -> Device {
    match std::env::var("JOULE_TEST_DEVICE") {
        Ok(name) if !name.is_empty() => joule::inference::engine::device::select_device(&name)
            .unwrap_or_else(|e| panic!("JOULE_TEST_DEVICE={name}: {e:#}")),
        _ => Device::Cpu,
    }
}

pub fn load(file: &str) -> SharedModel {
    load_model(fixture(file), &test_device()).expect("fixture loads")
}

pub const F32_TOL: f32 = 1e-3;

/// The f32 file gives transformers' logits in one pass and when the tail
/// is decoded one token at a time through the sequence state.
pub fn check_one_pass_and_decode(file: &str, arch: &str) {
    let m = load(file);
    assert_eq!(m.info().arch, arch);
    for (name, s) in sequences(arch) {
        let one = compute(m.as_ref(), &s.ids, None).expect("one pass");
        let e = rel_err(&one, &s.logits);
        assert!(e < F32_TOL, "{file} {name}: one pass rel err {e}");
        let k = s.ids.len() * 2 / 3;
        let dec = compute(m.as_ref(), &s.ids, Some(k)).expect("prefill + decode");
        let e = rel_err(&dec, &s.logits);
        assert!(
            e < F32_TOL,
            "{file} {name}: prefill {k} + decode rel err {e}"
        );
    }
}

/// A quantised file stays close to transformers' f32 logits.
pub fn check_quantised(file: &str, arch: &str, min_mean_cos: f32) {
    let m = load(file);
    let (_, s) = sequences(arch).remove(0);
    let lg = compute(m.as_ref(), &s.ids, None).expect("one pass");
    let c = mean_cos(&lg, &s.logits, s.vocab);
    assert!(
        c >= min_mean_cos,
        "{file}: mean cosine {c} < {min_mean_cos}"
    );
}

/// Sequences of different lengths and positions in one batched forward
/// equal each run alone: a prefill of each sequence's first part, then
/// every sequence's next pieces of different sizes together.
pub fn check_batch_equals_alone(file: &str, arch: &str) {
    let m = load(file);
    let seqs = sequences(arch);
    let mut states: Vec<_> = seqs.iter().map(|_| m.new_state()).collect();
    let cuts: Vec<(usize, usize)> = seqs
        .iter()
        .enumerate()
        .map(|(i, (_, s))| (s.ids.len() / 2 - i * 3, s.ids.len() / 2 - i * 3 + 1 + 2 * i))
        .collect();
    // Step 1: prefills of different lengths together.
    let mut steps: Vec<SeqStep<'_>> = seqs
        .iter()
        .zip(states.iter_mut())
        .zip(&cuts)
        .map(|(((_, s), st), &(a, _))| SeqStep {
            tokens: &s.ids[..a],
            state: st,
            logits: Logits::All,
        })
        .collect();
    let out1 = m.forward(&mut steps).expect("batched prefill");
    drop(steps);
    // Step 2: pieces of 1, 3 and 5 tokens together.
    let mut steps: Vec<SeqStep<'_>> = seqs
        .iter()
        .zip(states.iter_mut())
        .zip(&cuts)
        .map(|(((_, s), st), &(a, b))| SeqStep {
            tokens: &s.ids[a..b],
            state: st,
            logits: Logits::All,
        })
        .collect();
    let out2 = m.forward(&mut steps).expect("batched mixed step");
    for (i, (name, s)) in seqs.iter().enumerate() {
        let (a, b) = cuts[i];
        let mut got = logits_to_vec(&out1[i]).unwrap();
        got.extend(logits_to_vec(&out2[i]).unwrap());
        let want = &s.logits[..b * s.vocab];
        let e = rel_err(&got, want);
        assert!(
            e < F32_TOL,
            "{file} {name}: batched rel err {e} (cut {a}..{b})"
        );
    }
}

/// Rewinding a state to a snapshot and continuing equals a recompute; a
/// rewind no snapshot covers restarts from 0 and still gives the right
/// logits.
pub fn check_snapshot_restore(file: &str, arch: &str) {
    let m = load(file);
    let (_, s) = sequences(arch).remove(0);
    let n = s.ids.len();
    let v = s.vocab;
    let mut st = m.new_state();
    let snap = n / 2;
    let mut step = [SeqStep::new(&s.ids[..snap], &mut st)];
    m.forward(&mut step).unwrap();
    st.snapshot();
    let mut step = [SeqStep::new(&s.ids[snap..n - 5], &mut st)];
    m.forward(&mut step).unwrap();
    // Back to a position after the snapshot: the state returns to the snapshot.
    let reached = st.rewind(snap + 3);
    let expect = if st.is_recurrent() { snap } else { snap + 3 };
    assert_eq!(reached, expect, "{file}: rewind");
    let mut step = [SeqStep {
        tokens: &s.ids[reached..n],
        state: &mut st,
        logits: Logits::All,
    }];
    let lg = logits_to_vec(&m.forward(&mut step).unwrap()[0]).unwrap();
    let e = rel_err(&lg, &s.logits[reached * v..n * v]);
    assert!(
        e < F32_TOL,
        "{file}: after restoring a snapshot rel err {e}"
    );
    // Before the snapshot: a recurrent state can only start again from 0.
    let reached = st.rewind(snap - 2);
    if st.is_recurrent() {
        assert_eq!(reached, 0, "{file}: no snapshot covers {}", snap - 2);
    }
    let mut step = [SeqStep {
        tokens: &s.ids[reached..n],
        state: &mut st,
        logits: Logits::All,
    }];
    let lg = logits_to_vec(&m.forward(&mut step).unwrap()[0]).unwrap();
    let e = rel_err(&lg, &s.logits[reached * v..n * v]);
    assert!(
        e < F32_TOL,
        "{file}: after rewinding to {reached} rel err {e}"
    );
}
