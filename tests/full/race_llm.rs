//! The AI race with a real model: `configs/ai-race/smollm2-vs-cs.toml`
//! (SmolLM2-135M-Instruct on candle against CS, three races) played to the
//! end, with every attempt, retry, SAFE fallback and contaminated race
//! recorded and reported, the three races' model calls sharing one batch
//! per round; and a small validity audit (the first probe of each category,
//! every condition) against the same model.
//!
//! The model is obtained the way a user obtains it (`scripts/fetch-default-model.sh`,
//! which `.ci/run` calls first). Under CI a missing model fails the test; elsewhere
//! the test says it was skipped.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use joule::backend::{Backend, ModelRequest, ModelResult};
use joule::inference::files::manifest::DEFAULT_MODEL;
use joule::race::audit::{run_audit_plan, score_response, summarize, summary_table, AuditPlan};
use joule::race::config::ExperimentConfig;
use joule::race::run::{backend_for, backend_for_models, run_experiment};
use joule::race::scenario::{RaceRecord, TurnRecord};
use joule::record::read_jsonl;

use crate::default_model;

fn model_cached() -> bool {
    default_model::cached().is_some()
}

/// Forwards to a backend and records every batch's model and size.
struct Counting {
    inner: Box<dyn Backend>,
    batches: Arc<Mutex<Vec<(String, usize)>>>,
}

impl Backend for Counting {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn batch_key(&self, model: &str) -> String {
        self.inner.batch_key(model)
    }
    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        if let Some(r) = batch.first() {
            self.batches
                .lock()
                .unwrap()
                .push((r.model.clone(), batch.len()));
        }
        self.inner.generate(batch)
    }
    fn unavailable(&self) -> Option<String> {
        self.inner.unavailable()
    }
}

#[test]
fn smollm2_race_config_plays_to_the_end_with_its_contract_recorded() {
    if !model_cached() {
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cfg = ExperimentConfig::load(&root.join("configs/ai-race/smollm2-vs-cs.toml")).unwrap();
    let batches = Arc::new(Mutex::new(Vec::new()));
    let mut backend = Counting {
        inner: backend_for(&cfg).unwrap(),
        batches: batches.clone(),
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let s = run_experiment(&cfg, &dir, false, &mut backend).unwrap();
    assert_eq!((s.total_races, s.played_races), (3, 3));

    // The three races' SmolLM2 seats go to the model together each round.
    let b = batches.lock().unwrap().clone();
    let llm: Vec<usize> = b
        .iter()
        .filter(|(m, _)| m == "smollm2-135m-instruct")
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(llm.first(), Some(&3), "first model batch: {b:?}");
    assert!(llm.iter().all(|&n| n <= 3));

    let races: Vec<RaceRecord> = read_jsonl(dir.join("races.jsonl"))
        .unwrap()
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let turns: Vec<TurnRecord> = read_jsonl(dir.join("turns.jsonl"))
        .unwrap()
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    assert_eq!(races.len(), 3);
    let rounds: u32 = races.iter().map(|r| r.result.n_rounds).sum();
    assert_eq!(turns.len() as u32, 2 * rounds);
    let mut llm_attempts = 0;
    for r in &races {
        let mine: Vec<&TurnRecord> = turns.iter().filter(|t| t.game_id == r.game_id).collect();
        let fallbacks = mine.iter().filter(|t| t.parse_failed).count() as u32;
        let failed: u32 = mine
            .iter()
            .map(|t| t.attempt_history.iter().filter(|a| a.parse_failed).count() as u32)
            .sum();
        assert_eq!(r.parse_failures, fallbacks, "{}", r.game_id);
        assert_eq!(r.failed_attempts, failed, "{}", r.game_id);
        assert_eq!(r.any_parse_failure, fallbacks > 0);
        assert_eq!(
            r.exclusion_reasons
                .contains(&"any_parse_failure".to_string()),
            fallbacks > 0
        );
    }
    for t in turns.iter().filter(|t| t.model == "smollm2-135m-instruct") {
        let n = t.attempt_history.len();
        llm_attempts += n;
        assert!((1..=4).contains(&n), "{n} attempts");
        assert_eq!(t.retry_count as usize, n - 1);
        // Retries only after failures; the record's verdict is the last attempt's.
        assert!(t.attempt_history[..n - 1].iter().all(|a| a.parse_failed));
        let last = t.attempt_history.last().unwrap();
        assert_eq!(t.parse_failed, last.parse_failed);
        assert_eq!(t.raw_response, last.raw_response);
        assert!(last.generated_tokens >= 1 && last.generated_tokens <= 17);
        if t.parse_failed {
            assert_eq!(n, 4, "a fallback only after every retry");
            assert!(!t.unsafe_, "the fallback is SAFE");
        } else {
            assert_eq!(last.parsed_action, Some(t.action));
        }
        // Each retry has its own seed.
        let seeds: std::collections::BTreeSet<_> =
            t.attempt_history.iter().map(|a| a.sampling_seed).collect();
        assert_eq!(seeds.len(), n);
    }
    assert!(llm_attempts >= rounds as usize);
    assert!(dir.join("races.csv").exists() && dir.join("players.csv").exists());

    // The report counts the same attempts, fallbacks and contaminated races.
    let out = tmp.path().join("report");
    let md = joule::race::report::write_report_with(&[dir.clone()], &out, None).unwrap();
    let fallbacks = turns.iter().filter(|t| t.parse_failed).count();
    let contaminated = races.iter().filter(|r| r.any_parse_failure).count();
    let row = md
        .lines()
        .find(|l| l.starts_with("| `smollm2-135m-instruct` |"))
        .expect("the model's contract row");
    let cells: Vec<&str> = row.split('|').map(|c| c.trim()).collect();
    assert_eq!(cells[2], rounds.to_string(), "{row}");
    assert_eq!(cells[3], llm_attempts.to_string(), "{row}");
    assert_eq!(cells[6], fallbacks.to_string(), "{row}");
    assert_eq!(cells[8], contaminated.to_string(), "{row}");
    eprintln!("{row}");
}

#[test]
fn small_audit_of_smollm2_gives_the_table_with_counts() {
    if !model_cached() {
        return;
    }
    let model = DEFAULT_MODEL.to_string();
    let mut backend = backend_for_models(&Default::default(), &[model.as_str()], None).unwrap();
    let plan = AuditPlan {
        reps: 1,
        per_category: Some(1),
        slots: 4,
    };
    let probes = joule::race::audit::plan_probes(&plan).unwrap();
    assert_eq!(probes.len(), 6);
    let rows = joule::agency::run_one(backend.as_mut(), |agency| {
        run_audit_plan(agency, model.clone(), plan)
    })
    .unwrap();
    // 2 categorical probes × 5 conditions + 4 numeric × 3.
    assert_eq!(rows.len(), 22);
    for r in &rows {
        assert!(r.generated_tokens >= 1 && r.generated_tokens <= 33);
        let p = probes.iter().find(|p| p.id == r.probe_id).unwrap();
        let again = score_response(&r.raw_response, p);
        assert_eq!(again.strict_valid, r.score.strict_valid);
        assert_eq!(again.semantic_correct, r.score.semantic_correct);
        assert!(!r.score.strict_correct || r.score.strict_valid && r.score.semantic_correct);
    }
    let s = summarize(&rows);
    let ns: Vec<usize> = s.by_category.iter().map(|(_, a)| a.n).collect();
    assert_eq!(ns, [5, 3, 5, 3, 3, 3]);
    assert_eq!(s.overall.n, 22);
    let table = summary_table(&model, &s);
    assert!(table.contains("Rule recall") && table.contains("Expected-payoff calculation"));
    eprintln!("{table}");
}
