//! Energy Society rounds whose agents run on the roster architectures'
//! tiny fixture models (`tests/fixtures/roster/`) through the real LLM
//! backend: chat template, tokenizer, constrained decoding, per-model
//! batching, per-sequence states (recurrent ones included) and the exact
//! token accounting, every call charged `round(T · k · S^α, 2)` with the
//! agent's own S.

use joule::energy::CostModel;
use joule::energy_society::config::SocietyConfig;
use joule::energy_society::runner::{backend_for, run_society};
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/roster")
        .join(name)
        .display()
        .to_string()
}

/// The paper's five agents (roster models and sizes), one round with votes.
const CONFIG: &str = r#"
name = "roster-fixtures"
mode = "faithful"
objective = "comp"
use_votes = false
max_rounds = 1
seed = 11
max_calls = 2

[difficulty]
easy = 2
medium = 1
hard = 0

[jobs]
source = "procedural"

[generation]
max_tokens = 160
temperature = 0.7
thinking = false

[llm]
device = "cpu"
structured = "constrained"
max_string_chars = 6
__STAND_INS__

[[roster]]
agent_id = "agent_1"
model = "gemma4-e4b"
model_name = "gemma4:e4b"
size = 4

[[roster]]
agent_id = "agent_2"
model = "nemotron-3-nano-4b"
model_name = "nemotron-3-nano:4b"
size = 4

[[roster]]
agent_id = "agent_3"
model = "qwen3.5-4b"
model_name = "qwen3.5:4b"
size = 4

[[roster]]
agent_id = "agent_4"
model = "qwen3-8b"
model_name = "qwen3:8b"
size = 8

[[roster]]
agent_id = "agent_5"
model = "qwen3.5-9b"
model_name = "qwen3.5:9b"
size = 9
"#;

/// Run one round and check every invocation's charge and parse.
fn run_round(stand_ins: &str) -> Vec<serde_json::Value> {
    let text = CONFIG.replace("__STAND_INS__", stand_ins);
    let cfg = SocietyConfig::from_toml_str(&text, "roster.toml").expect("config");
    let mut backend = backend_for(&cfg).expect("backend");
    let dir = tempfile::tempdir().unwrap();
    let result = run_society(cfg, backend.as_mut(), Some(dir.path()), |_| {}).expect("run");
    assert_eq!(result.rounds_played, 1);
    let events =
        joule::energy_society::recorder::read_events(dir.path().join("events.jsonl")).unwrap();
    let c = CostModel {
        k: 0.015,
        alpha: 0.5,
        ..Default::default()
    };
    let sizes = [
        ("agent_1", 4.0),
        ("agent_2", 4.0),
        ("agent_3", 4.0),
        ("agent_4", 8.0),
        ("agent_5", 9.0),
    ];
    let invocations: Vec<serde_json::Value> = events
        .into_iter()
        .filter(|e| e["event"] == "invocation")
        .collect();
    for e in &invocations {
        let agent = e["agent"].as_str().unwrap();
        let size = sizes.iter().find(|(a, _)| *a == agent).unwrap().1;
        let tokens = e["tokens"].as_u64().expect("token count");
        assert!(tokens > 0, "no tokens counted: {e}");
        let spent = e["spent"].as_f64().unwrap();
        assert_eq!(
            spent,
            c.charge(tokens, size),
            "{agent}: {tokens} tokens at S={size}"
        );
        assert_eq!(e["fallback"], false, "constrained output must parse: {e}");
    }
    for (agent, _) in sizes {
        assert!(
            invocations.iter().any(|e| e["agent"] == agent),
            "{agent} made no call"
        );
    }
    for f in [
        "agents.json",
        "token_usage.json",
        "transcript.json",
        "config.resolved.toml",
    ] {
        assert!(dir.path().join(f).exists(), "{f} written");
    }
    invocations
}

/// Every agent on the Qwen3.5 fixture: five recurrent sequence states on one
/// model, decoded in one batch.
#[test]
fn a_round_on_the_qwen35_fixture() {
    let inv = run_round(&format!("stand_in = \"{}\"", fixture("qwen35.f32.gguf")));
    assert!(inv.len() >= 5, "decisions of five agents: {}", inv.len());
    // Thinking is off: nothing generated counts as thinking.
    for e in &inv {
        for call in e["calls"].as_array().unwrap() {
            assert_eq!(call["thinking_tokens"], 0, "{call}");
        }
    }
}

/// Every agent on the Gemma 4 fixture (the real Gemma 4 chat template and
/// tokenizer; shared-KV layers that keep no state).
#[test]
fn a_round_on_the_gemma4_fixture() {
    let inv = run_round(&format!("stand_in = \"{}\"", fixture("gemma4.f32.gguf")));
    assert!(inv.len() >= 5, "decisions of five agents: {}", inv.len());
}

/// The whole roster at once: each of the five agents on a fixture of its
/// own model's architecture (gemma4, nemotron_h, qwen35, qwen3, qwen35),
/// so four models are loaded and batched separately, each charged with its
/// agent's own S.
#[test]
fn a_round_with_every_roster_architecture() {
    let stand_ins = format!(
        "[llm.stand_ins]\n\"gemma4-e4b\" = \"{}\"\n\"nemotron-3-nano-4b\" = \"{}\"\n\"qwen3.5-4b\" = \"{}\"\n\"qwen3-8b\" = \"{}\"\n\"qwen3.5-9b\" = \"{}\"\n",
        fixture("gemma4.f32.gguf"),
        fixture("nemotron_h.f32.gguf"),
        fixture("qwen35.f32.gguf"),
        fixture("qwen3.f32.gguf"),
        fixture("qwen35.q8_0.gguf"),
    );
    let inv = run_round(&stand_ins);
    assert!(inv.len() >= 5, "decisions of five agents: {}", inv.len());
    // Each agent's calls went through its own architecture's chat template.
    let marker = |agent: &str| -> String {
        let e = inv.iter().find(|e| e["agent"] == agent).unwrap();
        e["calls"][0]["rendered_prompt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        marker("agent_1").contains("<|turn>") || marker("agent_1").contains("<start_of_turn>"),
        "gemma template"
    );
    assert!(
        marker("agent_3").contains("<|im_start|>"),
        "qwen3.5 template"
    );
    assert!(marker("agent_4").contains("<|im_start|>"), "qwen3 template");
    assert_ne!(
        marker("agent_2"),
        marker("agent_3"),
        "nemotron has its own template"
    );
}
