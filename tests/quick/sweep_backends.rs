//! Sweep cells whose `[llm]` sections differ never share a backend: two
//! cells that differ only in `llm.stand_in` (two tiny GGUF files without a
//! tokenizer, so loading fails at the first call and each call's error names
//! the file its backend was built for) run in one chunk, and each run's
//! resolved config and calls show its own settings.

use std::path::Path;

use joule::energy_society::config::SocietyConfig;
use joule::energy_society::job::{Difficulty, Job, JobSource};
use joule::energy_society::listed_jobs::ListedJobs;
use joule::sweep::{backend_key, cells, run_cells};

fn jobs(cfg: &SocietyConfig) -> anyhow::Result<Box<dyn JobSource>> {
    let round: Vec<Job> = (0..2)
        .map(|i| Job {
            id: format!("job_{i}"),
            question_id: i,
            category: "math".into(),
            difficulty: Difficulty::Easy,
            reward: 200,
            description: format!("question {i}"),
            options: (0..4).map(|k| format!("option {k}")).collect(),
            answer_index: 1,
        })
        .collect();
    Ok(Box::new(ListedJobs::new(
        vec![round; cfg.max_rounds as usize],
        "test",
    )))
}

const CONFIG: &str = r#"
name = "__NAME__"
use_votes = false
max_rounds = 1
max_calls = 1

[llm]
stand_in = "__GGUF__"
max_string_chars = __CHARS__

[[roster]]
agent_id = "agent_1"
model = "qwen3-8b"
model_name = "qwen3:8b"
size = 8

[[roster]]
agent_id = "agent_2"
model = "scripted:easiest"
model_name = "scripted"
size = 4
"#;

#[test]
fn cells_with_different_llm_sections_run_on_their_own_backends() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden");
    let dir = tempfile::tempdir().unwrap();
    let cases = [("a", "llama.gguf", 60), ("b", "qwen2.gguf", 90)];
    for (name, gguf, chars) in cases {
        let text = CONFIG
            .replace("__NAME__", name)
            .replace("__GGUF__", &golden.join(gguf).display().to_string())
            .replace("__CHARS__", &chars.to_string());
        std::fs::write(dir.path().join(format!("{name}.toml")), text).unwrap();
    }
    let sweep = dir.path().join("sweep.toml");
    std::fs::write(&sweep, "seeds = [3]\nconfigs = [\"a.toml\", \"b.toml\"]\n").unwrap();
    let out = dir.path().join("out");
    let c = cells(&sweep, Some(&out)).unwrap();
    assert_ne!(backend_key(&c[0].config), backend_key(&c[1].config));
    // Both cells in one chunk of two.
    assert_eq!(run_cells(c, 2, true, &jobs).unwrap(), (2, 0));

    for (name, gguf, chars) in cases {
        let run = out.join(name).join("seed_3");
        let resolved = std::fs::read_to_string(run.join("config.resolved.toml")).unwrap();
        let cfg = SocietyConfig::from_toml_str(&resolved, "resolved").unwrap();
        assert!(
            cfg.llm.stand_in.as_deref().unwrap().ends_with(gguf),
            "{resolved}"
        );
        assert_eq!(cfg.llm.max_string_chars, Some(chars));
        // The model-backed agent's calls failed on its own cell's model file.
        let other = cases.iter().find(|c| c.0 != name).unwrap().1;
        let events = joule::record::read_jsonl(run.join("events.jsonl")).unwrap();
        let errors: Vec<String> = events
            .iter()
            .filter(|e| e["event"] == "invocation" && e["agent"] == "agent_1")
            .flat_map(|e| e["calls"].as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["backend_error"].as_str().map(String::from))
            .collect();
        assert!(!errors.is_empty(), "{name}: no failed call of agent_1");
        for e in &errors {
            assert!(e.contains(gguf) && !e.contains(other), "{name}: {e}");
        }
        // The scripted agent played normally.
        assert!(events.iter().any(|e| e["event"] == "invocation"
            && e["agent"] == "agent_2"
            && e["status"]["status"] == "ok"));
    }
}

#[test]
fn the_backend_key_covers_every_llm_and_scripted_field() {
    let base = SocietyConfig::baseline("greedy");
    let mut other = base.clone();
    other.llm.device = "cuda:1".into();
    assert_ne!(backend_key(&base), backend_key(&other));
    let mut other = base.clone();
    other.llm.count_eos = !other.llm.count_eos;
    assert_ne!(backend_key(&base), backend_key(&other));
    let mut other = base.clone();
    other.scripted.skill.hard = 0.9;
    assert_ne!(backend_key(&base), backend_key(&other));
    // What does not shape the backend does not split cells.
    let mut other = base.clone();
    other.seed = 99;
    other.max_rounds = 3;
    assert_eq!(backend_key(&base), backend_key(&other));
}
