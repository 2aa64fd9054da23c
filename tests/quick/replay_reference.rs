//! Replays the ten shared reference runs (comp_with_discussion and coop,
//! exponent 0.5, run_1..5) through the faithful engine: every recorded value
//! must be reproduced.

use std::path::Path;

use joule::energy_society::condition::Overrides;
use joule::energy_society::replay::{replay_run, replay_run_with};

fn replay_condition(cond: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society")
        .join(cond)
        .join("exponent_0.5");
    assert!(
        root.exists(),
        "missing {}: tests read ../shared in place",
        root.display()
    );
    for k in 1..=5 {
        let dir = root.join(format!("run_{k}"));
        let r = replay_run(&dir).unwrap_or_else(|e| panic!("{e:#}"));
        let shown: Vec<String> = r
            .mismatches
            .iter()
            .take(20)
            .map(|m| m.to_string())
            .collect();
        assert!(
            r.mismatches.is_empty(),
            "{}: {} mismatches, first:\n{}",
            r.run,
            r.mismatches.len(),
            shown.join("\n")
        );
        assert!(
            r.values_checked > 1000,
            "{}: only {} values checked",
            r.run,
            r.values_checked
        );
        // Most phase charges are the cost formula on one call (spec §2).
        let c = &r.charges;
        assert!(c.single_call > 10 * c.split_calls, "{}: {c:?}", r.run);
    }
}

#[test]
fn replays_comp_with_discussion_runs() {
    replay_condition("comp_with_discussion");
}

#[test]
fn replays_coop_runs() {
    replay_condition("coop");
}

/// The shared runs' conditions are inferred as spec §5's table gives them.
#[test]
fn the_shared_runs_conditions_are_inferred_with_their_sources() {
    use joule::energy_society::config::Objective;
    for (cond, objective) in [
        ("comp_with_discussion", Objective::Competitive),
        ("coop", Objective::Cooperative),
    ] {
        let dir = reference(cond, 1);
        let r = replay_run(&dir).unwrap_or_else(|e| panic!("{e:#}"));
        let c = &r.condition;
        assert_eq!(c.objective.value, objective, "{cond}");
        assert!(c.use_votes.value, "{cond}");
        assert!(
            c.use_votes.from.contains("vote entries"),
            "{}",
            c.use_votes.from
        );
        assert!(!c.enable_sabotage.value, "{cond}");
        assert!(
            c.enable_sabotage.from.contains("folder name"),
            "{}",
            c.enable_sabotage.from
        );
        assert!(c.memory.value, "{cond}");
        let d = c.difficulty.value;
        assert_eq!(d.easy + d.medium + d.hard, 12);
        assert_eq!(c.alpha.value, 0.5);
        assert!(c
            .alpha
            .notes
            .iter()
            .any(|n| n.contains("recorded phase charges")));
        // Every source agrees on a published run.
        for notes in [
            &c.objective.notes,
            &c.use_votes.notes,
            &c.enable_sabotage.notes,
        ] {
            assert!(notes.is_empty(), "{cond}: {notes:?}");
        }
        let shown = c.to_string();
        for word in ["objective", "votes", "sabotage", "memory", "jobs", "alpha"] {
            assert!(shown.contains(word), "{shown}");
        }
    }
}

fn reference(cond: &str, k: u32) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society")
        .join(cond)
        .join("exponent_0.5")
        .join(format!("run_{k}"))
}

fn read(dir: &Path, file: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
}

/// Copy a shared run into `<tmp>/<folder>/<sub>/run_1`, letting `edit`
/// change its transcript and agents (never the shared files themselves).
fn synthetic(
    tmp: &Path,
    from: &Path,
    folder: &str,
    sub: &str,
    edit: impl FnOnce(&mut serde_json::Value, &mut serde_json::Value),
) -> std::path::PathBuf {
    let dir = tmp.join(folder).join(sub).join("run_1");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "token_usage.json"] {
        std::fs::copy(from.join(f), dir.join(f)).unwrap();
    }
    let mut transcript = read(from, "transcript.json");
    let mut agents = read(from, "agents.json");
    edit(&mut transcript, &mut agents);
    std::fs::write(dir.join("transcript.json"), transcript.to_string()).unwrap();
    std::fs::write(dir.join("agents.json"), agents.to_string()).unwrap();
    dir
}

/// A vote recommends SABOTAGE_JOB; nobody sabotages.
fn recommend_sabotage(transcript: &mut serde_json::Value, _: &mut serde_json::Value) {
    let vote = transcript
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["phase"] == "vote" && t["round_num"] == 2)
        .unwrap();
    let rec = &mut vote["structured_response"]["recommendations"][0];
    rec["recommended_action"] = "SABOTAGE_JOB".into();
    rec["job_id"] = "job_0".into();
    rec["target_agent"] = serde_json::Value::Null;
    rec["amount"] = serde_json::Value::Null;
}

fn assert_clean(r: &joule::energy_society::replay::ReplayReport) {
    let shown: Vec<String> = r.mismatches.iter().take(5).map(|m| m.to_string()).collect();
    assert!(r.mismatches.is_empty(), "{}: {shown:?}", r.run);
}

#[test]
fn a_sabotage_folder_where_nobody_sabotaged_but_a_vote_recommended_it() {
    let tmp = tempfile::tempdir().unwrap();
    let from = reference("coop", 1);
    let dir = synthetic(
        tmp.path(),
        &from,
        "coop",
        "exponent_0.5_sabotage",
        recommend_sabotage,
    );
    let r = replay_run(&dir).unwrap();
    assert!(r.condition.enable_sabotage.value);
    assert_clean(&r);

    // The same vote in a folder whose name does not say: the recorded
    // recommendation proves sabotage was on.
    let dir = synthetic(
        tmp.path(),
        &from,
        "coop",
        "exponent_0.5",
        recommend_sabotage,
    );
    let r = replay_run(&dir).unwrap();
    let s = &r.condition.enable_sabotage;
    assert!(s.value);
    assert!(
        s.from.contains("round 2") && s.from.contains("recommends SABOTAGE_JOB"),
        "{}",
        s.from
    );
    assert!(s.notes.iter().any(|n| n.contains("folder name")), "{s:?}");
    assert_clean(&r);

    // Forcing sabotage off makes the engine reject that vote, as the
    // reference's schema would have: the flag is applied, and it matters.
    let flags = Overrides {
        enable_sabotage: Some(false),
        ..Default::default()
    };
    let r = replay_run_with(&dir, &flags).unwrap();
    assert!(!r.condition.enable_sabotage.value);
    assert!(r.condition.enable_sabotage.from.contains("flag"));
    assert!(
        r.mismatches.iter().any(|m| m.field == "errors"),
        "{:?}",
        r.mismatches
    );
}

#[test]
fn sabotage_keys_in_memory_mark_a_sabotage_run_whatever_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = synthetic(
        tmp.path(),
        &reference("comp_with_discussion", 2),
        "somewhere",
        "else",
        |t, agents| {
            recommend_sabotage(t, agents);
            for a in agents.as_array_mut().unwrap() {
                for m in a["memory"].as_array_mut().unwrap() {
                    for k in [
                        "sabotaged_job",
                        "sabotage_successful",
                        "sabotage_hit_agents",
                    ] {
                        m[k] = serde_json::Value::Null;
                    }
                }
            }
        },
    );
    let r = replay_run(&dir).unwrap();
    assert!(r.condition.enable_sabotage.value);
    assert!(r.condition.memory.value);
    assert!(r.condition.memory.from.contains("default"));
    assert_clean(&r);
}

#[test]
fn flags_override_votes_and_objective() {
    let flags = Overrides {
        use_votes: Some(false),
        objective: Some(joule::energy_society::config::Objective::Cooperative),
        memory: Some(false),
        ..Default::default()
    };
    let r = replay_run_with(&reference("comp_with_discussion", 3), &flags).unwrap();
    let c = &r.condition;
    assert!(!c.use_votes.value && c.use_votes.from.contains("flag"));
    assert!(c.use_votes.notes.iter().any(|n| n.contains("vote entries")));
    assert_eq!(
        c.objective.value,
        joule::energy_society::config::Objective::Cooperative
    );
    assert!(!c.memory.value);
    // Without votes the engine never asks for the recorded vote calls.
    assert!(r.mismatches.iter().any(|m| m.field == "vote call"));
}
