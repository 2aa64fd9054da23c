//! The prefix cache is exact on every architecture: a prompt resumed from
//! cached blocks (keys/values, and recurrent states at block ends) that
//! another prompt computed gives the logits of a full block-aligned
//! recompute bit for bit (and, for f32 files, those of one pass to 1e-5). Checked on
//! the golden fixtures (llama, qwen2, qwen3, gemma3), the roster fixtures
//! (qwen3, qwen35, nemotron_h, gemma4) and SmolLM2 when it is cached; and,
//! on SmolLM2, that societies sharing one backend get their own per-run
//! states, the records of a run alone (in waves and with continuous
//! batching), and reuse each other's prefixes. Every architecture is
//! checked with f32 and with f16 key/value caches (`[llm] kv_cache`); f16
//! logits stay within 1% of f32 ones (f32 files; quantised ones by cosine).

use crate::roster_common;

use joule::backend::GenParams;
use joule::inference::engine::generate::{generate, GenOptions, GenSeq};
use joule::inference::engine::model::{
    logits_to_vec, CausalLm, KvCache, Logits, SeqState, SeqStep, SnapshotPolicy,
};
use joule::inference::engine::prefix_cache::PrefixCache;
use std::path::PathBuf;

const BLOCK: usize = 8;

/// Deterministic pseudo-random ids below `vocab`.
fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % vocab as u64) as u32
        })
        .collect()
}

/// Logits of every position of `ids[from..]`, fed from `state` (at `from`)
/// in pieces ending at multiples of [`BLOCK`], as block-aligned generation feeds.
fn aligned(m: &dyn CausalLm, ids: &[u32], from: usize, state: &mut SeqState) -> Vec<f32> {
    let mut out = Vec::new();
    let mut at = from;
    while at < ids.len() {
        let end = ((at / BLOCK + 1) * BLOCK).min(ids.len());
        let mut step = [SeqStep {
            tokens: &ids[at..end],
            state: &mut *state,
            logits: Logits::All,
        }];
        out.extend(logits_to_vec(&m.forward(&mut step).expect("forward")[0]).unwrap());
        at = end;
    }
    out
}

/// `exact`: the file is f32, so the aligned logits are also compared with a
/// one-pass recompute (quantised activations turn the rounding differences
/// of another chunking into different int8 roundings).
fn check(path: PathBuf, one_pass_too: bool) {
    for kv in [KvCache::F32, KvCache::F16] {
        check_kv(&path, one_pass_too, kv);
    }
}

/// [`check`] with states that store keys and values as `kv`.
fn check_kv(path: &std::path::Path, one_pass_too: bool, kv: KvCache) {
    let m = joule::inference::models::load_model(&path, &roster_common::test_device())
        .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    let vocab = m.info().vocab_size;
    let policy = SnapshotPolicy {
        every: BLOCK,
        keep: 16,
    };
    let n = 40;
    let a = ids(n, vocab, 1);
    // `b` shares 27 tokens with `a`, then differs.
    let mut b = a[..27].to_vec();
    b.extend(ids(n - 27, vocab, 2));

    // Compute `a` the way the backend does (block-aligned generation,
    // snapshots at block ends).
    let new_state = || m.new_state().with_policy(policy).with_kv_cache(kv);
    let mut sa = new_state();
    let params = GenParams {
        max_tokens: 1,
        temperature: 0.0,
        ..GenParams::default()
    };
    let options = GenOptions {
        block: BLOCK,
        ..GenOptions::default()
    };
    generate(
        m.as_ref(),
        GenSeq {
            prompt: &a,
            state: &mut sa,
            params: &params,
            options: &options,
            decode: None,
            mask: None,
        },
    )
    .expect("generate a");
    let mut cache = PrefixCache::new(BLOCK, 1 << 30);
    cache.insert(&sa, &a).expect("insert");
    assert!(cache.stats().blocks >= 4, "{}: blocks of a", path.display());

    // Resume `b` from the cache: three full blocks (24 tokens).
    let mut sb = new_state();
    let r = cache
        .restore(&mut sb, &b, b.len() - 1, 64)
        .expect("restore");
    assert_eq!(r, 24, "{}: restored positions", path.display());
    assert_eq!(sb.tokens(), &b[..24]);
    let resumed = aligned(m.as_ref(), &b, r, &mut sb);

    // A recompute of `b` from nothing, block-aligned: the same bits.
    let mut fresh = new_state();
    let all = aligned(m.as_ref(), &b, 0, &mut fresh);
    let want = &all[r * vocab..];
    assert_eq!(resumed.len(), want.len());
    let differ = resumed.iter().zip(want).filter(|(x, y)| x != y).count();
    assert_eq!(
        differ,
        0,
        "{} ({kv}): {differ} logits after the cached prefix differ from a recompute (rel err {})",
        path.display(),
        roster_common::rel_err(&resumed, want)
    );
    if kv != KvCache::F32 {
        // The same prompt on f32 caches: close (each key and value rounded
        // once). Quantised files re-round their int8 activations after any
        // change, so they are held to the mean cosine of the logit rows, as
        // close as Joule's and candle's f32 kernels are to each other there.
        let mut exact = m.new_state().with_policy(policy);
        let all32 = aligned(m.as_ref(), &b, 0, &mut exact);
        let (e, cos) = (
            roster_common::rel_err(&all, &all32),
            roster_common::mean_cos(&all, &all32, vocab),
        );
        assert!(e > 0.0, "{} ({kv}): no rounding at all", path.display());
        assert!(
            if one_pass_too { e < 1e-2 } else { cos > 0.999 },
            "{} ({kv}) against f32 caches: rel err {e}, mean cosine {cos}",
            path.display()
        );
    }
    if one_pass_too {
        let mut one = m.new_state().with_kv_cache(kv);
        let mut step = [SeqStep {
            tokens: &b,
            state: &mut one,
            logits: Logits::All,
        }];
        let all = logits_to_vec(&m.forward(&mut step).expect("one pass")[0]).unwrap();
        let e = roster_common::rel_err(&resumed, &all[r * vocab..]);
        // f16 caches: a key that one chunking computes 1 ulp apart can round
        // to the neighbouring f16 (2^-11 apart), so the bound is wider.
        let bound = if kv == KvCache::F32 { 1e-5 } else { 1e-3 };
        assert!(
            e < bound,
            "{} ({kv}): against one pass, rel err {e}",
            path.display()
        );
    }
    // A prompt that shares less than a block restores nothing.
    let mut c = a[..5].to_vec();
    c.extend(ids(20, vocab, 3));
    let mut sc = new_state();
    assert_eq!(cache.restore(&mut sc, &c, c.len() - 1, 64).unwrap(), 0);
    assert!(sc.is_empty());
    // A state that stores keys and values otherwise restores nothing either.
    let other = if kv == KvCache::F32 {
        KvCache::F16
    } else {
        KvCache::F32
    };
    let mut sd = m.new_state().with_policy(policy).with_kv_cache(other);
    assert_eq!(cache.restore(&mut sd, &b, b.len() - 1, 64).unwrap(), 0);
    assert!(sd.is_empty());
}

fn golden(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/golden")
        .join(format!("{arch}.gguf"))
}

#[test]
fn exact_on_llama_qwen2_qwen3_gemma3() {
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        check(golden(arch), true);
    }
}

#[test]
fn exact_on_the_roster_architectures() {
    for (f, f32) in [
        ("qwen3.f32.gguf", true),
        ("qwen35.f32.gguf", true),
        ("nemotron_h.f32.gguf", true),
        ("gemma4.f32.gguf", true),
        ("qwen35.q8_0.gguf", false),
        ("nemotron_h.q8_0.gguf", false),
    ] {
        check(roster_common::fixture(f), f32);
    }
}

/// The default model when it is cached (CI fetches it first).
fn smollm2() -> Option<PathBuf> {
    default_model::cached()
}

use crate::default_model;

#[test]
fn exact_on_smollm2() {
    if let Some(p) = smollm2() {
        check(p, false);
    }
}

const SOCIETY: &str = r#"
name = "prefix-smollm2"
mode = "faithful"
objective = "comp"
use_votes = true
max_rounds = 1
seed = 7
max_calls = 1

[difficulty]
easy = 1
medium = 1
hard = 0

[jobs]
source = "procedural"

[generation]
max_tokens = 40
temperature = 0.7
thinking = false

[llm]
device = "cpu"
structured = "constrained"
stand_in = "__MODEL__"
max_string_chars = 30

[[roster]]
agent_id = "agent_1"
model = "qwen3-8b"
model_name = "qwen3:8b"
size = 8
init_energy = 1500.0

[[roster]]
agent_id = "agent_2"
model = "scripted:easiest"
model_name = "scripted"
size = 4
init_energy = 1500.0
"#;

/// Every call of a run: (agent, tag, call, text, tokens) from its events.
fn calls(dir: &std::path::Path) -> Vec<String> {
    let events =
        joule::energy_society::recorder::read_events(dir.join("events.jsonl")).expect("events");
    let mut out = Vec::new();
    for e in events.iter().filter(|e| e["event"] == "invocation") {
        for c in e["calls"].as_array().expect("calls") {
            out.push(format!(
                "{} r{} {} | {} | {} | {}",
                e["agent"],
                e["round"],
                e["phase"],
                c["text"],
                c["generated_tokens"],
                c["prompt_tokens"]
            ));
        }
    }
    out
}

/// A run alone, then two societies with the same agent ids (one of them the
/// same config again) together on the same backend: each run's agent states
/// are dropped when it ends; the prefix cache serves the repeated run's
/// prompts from the first run's blocks; and its records equal the first's.
#[test]
fn societies_on_one_backend_keep_their_own_states_and_records() {
    use joule::energy_society::config::SocietyConfig;
    use joule::energy_society::runner::{job_source, run_many};
    use joule::inference::llm_backend::LlmBackend;
    let Some(p) = smollm2() else { return };
    let text = SOCIETY.replace("__MODEL__", &p.display().to_string());
    let cfg = SocietyConfig::from_toml_str(&text, "prefix.toml").expect("config");
    let backend = |cfg: &SocietyConfig| -> LlmBackend { cfg.llm.local_backend().expect("backend") };
    let tmp = tempfile::tempdir().unwrap();

    let alone = tmp.path().join("alone");
    let mut b = backend(&cfg);
    let r = run_many(
        vec![(cfg.clone(), alone.clone())],
        &mut b,
        &job_source,
        |_| {},
    );
    assert!(r.iter().all(|r| r.is_ok()), "{:?}", r[0].as_ref().err());
    assert_eq!(b.agent_states(), 0, "a finished run's states are dropped");
    let first = b.stats();

    let mut other = cfg.clone();
    other.seed = 8;
    let (d_same, d_other) = (tmp.path().join("same"), tmp.path().join("other"));
    let r = run_many(
        vec![(other, d_other.clone()), (cfg.clone(), d_same.clone())],
        &mut b,
        &job_source,
        |_| {},
    );
    assert!(r.iter().all(|r| r.is_ok()));
    assert_eq!(b.agent_states(), 0);
    let got = calls(&d_same);
    assert!(!got.is_empty());
    assert_eq!(got, calls(&alone), "a run's records depend on other runs");
    let stats = b.stats();
    assert!(
        stats.reused_prefix_tokens > first.reused_prefix_tokens,
        "no prompt was served from the prefix cache: {stats:?}"
    );
    assert_eq!(
        stats.prompt_tokens,
        stats.computed_prompt_tokens() + stats.reused_own_tokens + stats.reused_prefix_tokens
    );
}

/// Continuous batching with a small prefill budget, two societies sharing
/// the running batch (calls joining while others decode): each run's
/// records equal those of the run alone decoded in waves, with the prefix
/// cache and without it (per-(run, agent) states, unaligned prompts), and
/// with f16 key/value caches.
#[test]
fn continuous_batching_gives_each_run_the_records_it_has_alone() {
    use joule::energy_society::config::SocietyConfig;
    use joule::energy_society::runner::{job_source, run_many};
    use joule::llm::Batching;
    let Some(p) = smollm2() else { return };
    let text = SOCIETY.replace("__MODEL__", &p.display().to_string());
    let base = SocietyConfig::from_toml_str(&text, "prefix.toml").expect("config");
    let tmp = tempfile::tempdir().unwrap();
    for (prefix_mib, kv) in [
        (2048, KvCache::F32),
        (0, KvCache::F32),
        (2048, KvCache::F16),
    ] {
        let mut cfg = base.clone();
        cfg.llm.prefix_cache_mib = prefix_mib;
        cfg.llm.kv_cache = kv;
        cfg.llm.batching = Batching::Waves;
        let alone = tmp.path().join(format!("alone-{prefix_mib}-{kv}"));
        let mut b = cfg.llm.local_backend().expect("backend");
        let r = run_many(
            vec![(cfg.clone(), alone.clone())],
            &mut b,
            &job_source,
            |_| {},
        );
        assert!(r.iter().all(|r| r.is_ok()), "{:?}", r[0].as_ref().err());

        cfg.llm.batching = Batching::Continuous;
        cfg.llm.prefill_step_tokens = 64;
        let mut b = cfg.llm.local_backend().expect("backend");
        let mut cells = Vec::new();
        for (k, seed) in [8u64, 7].into_iter().enumerate() {
            let mut c = cfg.clone();
            c.seed = seed;
            cells.push((
                c,
                tmp.path().join(format!("together-{prefix_mib}-{kv}-{k}")),
            ));
        }
        let same = cells[1].1.clone();
        let r = run_many(cells, &mut b, &job_source, |_| {});
        assert!(
            r.iter().all(|r| r.is_ok()),
            "{:?}",
            r.iter().find_map(|r| r.as_ref().err())
        );
        assert_eq!(b.agent_states(), 0);
        let got = calls(&same);
        assert!(!got.is_empty());
        assert_eq!(
            got,
            calls(&alone),
            "prefix_cache_mib = {prefix_mib}, kv_cache = {kv}: a run's records depend on the runs it shares a continuous batch with"
        );
        let resolved =
            std::fs::read_to_string(same.join("config.resolved.toml")).unwrap_or_default();
        assert!(
            resolved.contains(&format!("kv_cache = \"{kv}\"")),
            "the resolved config names the cache type: {resolved}"
        );
    }
}
