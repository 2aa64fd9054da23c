//! End to end with a real model: a short Energy Society round backed by
//! SmolLM2-135M-Instruct on candle (CPU), checking that every model call is
//! charged exactly `round(T · k · S^α, 2)` from the engine's own token count,
//! that constrained decoding gives answers that parse, and that the run folder
//! holds the full records.
//!
//! The model is obtained the way a user obtains it (`scripts/fetch-default-model.sh`,
//! which `.ci/run` calls first). Under CI a missing model fails the test; elsewhere
//! the test says it was skipped.

use joule::energy::CostModel;
use joule::energy_society::config::SocietyConfig;
use joule::energy_society::runner::{backend_for, run_society};

use crate::default_model;

#[test]
fn smollm2_society_round_charges_exactly_the_counted_tokens() {
    let Some(model) = default_model::cached() else {
        return;
    };
    let text = default_model::one_round_society("e2e-smollm2", &model);
    let cfg = SocietyConfig::from_toml_str(&text, "e2e.toml").expect("config");
    let mut backend = backend_for(&cfg).expect("backend");
    let dir = tempfile::tempdir().unwrap();
    let result = run_society(cfg, backend.as_mut(), Some(dir.path()), |_| {}).expect("run");
    assert_eq!(result.rounds_played, 1);

    // Every LLM invocation: charge = round(tokens * c, 2), tokens > 0, and the
    // decision parsed (constrained decoding never gives a format error).
    let events =
        joule::energy_society::recorder::read_events(dir.path().join("events.jsonl")).unwrap();
    let c = CostModel {
        k: 0.015,
        alpha: 0.5,
        ..Default::default()
    };
    let mut llm_calls = 0;
    for e in events
        .iter()
        .filter(|e| e["event"] == "invocation" && e["agent"] == "agent_1")
    {
        llm_calls += 1;
        let tokens = e["tokens"].as_u64().expect("token count");
        assert!(tokens > 0, "no tokens counted: {e}");
        let spent = e["spent"].as_f64().unwrap();
        assert_eq!(
            spent,
            c.charge(tokens, 8.0),
            "charge of {tokens} tokens at S=8"
        );
        let before = e["energy_before"].as_f64().unwrap();
        let after = e["energy_after"].as_f64().unwrap();
        assert_eq!(after, (before - spent).max(0.0));
        assert_eq!(e["fallback"], false, "constrained output must parse: {e}");
        let call = &e["calls"][0];
        assert!(
            call.to_string().contains("<|im_start|>"),
            "rendered prompt recorded: {call}"
        );
    }
    assert!(llm_calls >= 1, "the LLM agent made no call");
    for f in [
        "agents.json",
        "config.json",
        "token_usage.json",
        "transcript.json",
        "config.resolved.toml",
    ] {
        assert!(dir.path().join(f).exists(), "{f} written");
    }

    // The resolved config records the kernels that computed the logits, and
    // still reads back as a config.
    let resolved = std::fs::read_to_string(dir.path().join("config.resolved.toml")).unwrap();
    assert!(resolved.contains("\n[kernels]\n"), "{resolved}");
    let back = SocietyConfig::from_toml_str(&resolved, "config.resolved.toml").expect("reads back");
    let k = back.kernels.expect("[kernels]");
    assert_eq!(k.backend, "candle");
    assert_eq!(k.device.as_deref(), Some("cpu"));
    let simd = k.simd.as_deref().expect("simd level");
    assert!(k.simd_available.iter().any(|s| s == simd), "{simd}: {k:?}");
    // One model loaded: the stand-in file, named by its path.
    assert_eq!(k.models.len(), 1, "{:?}", k.models);
    let (file, types) = k.models.iter().next().unwrap();
    assert!(file.ends_with(".gguf"), "{file}");
    let q41 = &types["Q4_1"];
    let candle_only = std::env::var_os("JOULE_CANDLE_KERNELS_ONLY").is_some();
    if !candle_only && std::env::var("JOULE_CPU_KERNEL_TYPES").is_err() {
        assert_eq!(k.types["Q4_1"], "joule");
        assert!(q41.starts_with("joule ("), "{q41}");
        assert!(k.attention.starts_with("joule"), "{}", k.attention);
        assert_eq!(
            k.simd_from.as_deref(),
            Some(
                if std::env::var("JOULE_SIMD").is_ok_and(|v| !v.is_empty()) {
                    "JOULE_SIMD"
                } else {
                    "detected"
                }
            )
        );
    }
    assert_eq!(k.kv_cache.as_deref(), Some("f32"));

    // The provenance names the file that answered by its sha256, the build and the machine.
    let p = joule::provenance::Provenance::read(dir.path())
        .expect("provenance.json reads")
        .expect("provenance.json written");
    assert_eq!(p.sessions.len(), 1);
    let s = &p.sessions[0];
    assert_eq!(s.from_round, 1);
    assert_eq!(s.build, joule::provenance::Build::this());
    assert_eq!(s.machine.device.as_deref(), Some("cpu"));
    assert_eq!(s.machine.simd.as_deref(), Some(simd));
    assert!(!s.models.is_empty());
    let sha = joule::inference::files::sources::sha256_file(std::path::Path::new(file), false)
        .expect("hash the model");
    for o in &s.models {
        assert_eq!(o.file.as_deref(), Some(file.as_str()), "{o:?}");
        assert_eq!(o.sha256.as_deref(), Some(sha.as_str()), "{o:?}");
        assert_eq!(o.architecture.as_deref(), Some("llama"), "{o:?}");
        assert!(
            o.tensor_types
                .as_deref()
                .is_some_and(|t| t.contains("Q4_1")),
            "{o:?}"
        );
    }
    assert!(
        s.jobs.source.starts_with("procedural seed="),
        "{:?}",
        s.jobs
    );
}
