//! End to end with a real model and energy metering: a one-round Energy
//! Society backed by SmolLM2-135M-Instruct on candle (CPU), metered by the
//! test meter `fake-power:100` (100 W × wall time, labelled as a test meter:
//! this machine has no real one). Checks that every model call records its
//! measured joules (prefill and decode) beside its formula charge, that the
//! calls' joules are what the meter attributed, that `[cost] model =
//! "measured"` charges `round(scale · J, 2)` and records the formula's
//! charge, that `joule report` shows the measured energy, and that without a
//! meter the run works and says nothing was measured.
//!
//! The model is obtained as `tests/full/llm_society.rs` obtains it (skipped
//! outside CI when it is not cached).

use std::process::Command;

use joule::energy::CostModel;
use joule::energy_society::config::SocietyConfig;
use joule::energy_society::runner::{backend_for, run_society};
use joule::meter::attribution::MeterStatus;

const CONFIG: &str = r#"
name = "metered"
mode = "faithful"
objective = "comp"
use_votes = false
max_rounds = 1
seed = 7
max_calls = 1

[difficulty]
easy = 1
medium = 0
hard = 0

[jobs]
source = "procedural"

[cost]
k = 0.015
alpha = 0.5
__COST__

[generation]
max_tokens = 24
temperature = 0.0
thinking = false

[llm]
device = "cpu"
structured = "constrained"
stand_in = "__MODEL__"
max_string_chars = 20
meter = "__METER__"

[[roster]]
agent_id = "agent_1"
model = "qwen3-8b"
model_name = "qwen3:8b"
size = 8
init_energy = 1500.0

[[roster]]
agent_id = "agent_2"
model = "qwen3.5-4b"
model_name = "qwen3.5:4b"
size = 4
init_energy = 1500.0
"#;

use crate::default_model;

fn model() -> Option<String> {
    default_model::cached().map(|p| p.display().to_string())
}

fn config(model: &str, meter: &str, cost: &str) -> String {
    CONFIG
        .replace("__MODEL__", model)
        .replace("__METER__", meter)
        .replace("__COST__", cost)
}

fn calls(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let events = joule::energy_society::recorder::read_events(dir.join("events.jsonl")).unwrap();
    events
        .iter()
        .filter(|e| e["event"] == "invocation")
        .flat_map(|e| e["calls"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn metered_calls_record_their_joules_and_the_measured_cost_model_charges_them() {
    let Some(model) = model() else { return };

    // Measured pricing (scale: 1 energy unit per joule), metered by the test meter.
    let cfg = SocietyConfig::from_toml_str(
        &config(
            &model,
            "fake-power:100",
            "model = \"measured\"\nscale = 1.0",
        ),
        "m.toml",
    )
    .unwrap();
    let mut backend = backend_for(&cfg).expect("backend");
    let dir = tempfile::tempdir().unwrap();
    run_society(cfg, backend.as_mut(), Some(dir.path()), |_| {}).expect("run");
    let resolved = std::fs::read_to_string(dir.path().join("config.resolved.toml")).unwrap();
    assert!(
        resolved.contains("model = \"measured\"") && resolved.contains("scale = 1.0"),
        "{resolved}"
    );
    let formula = CostModel::default();
    let calls = calls(dir.path());
    assert!(calls.len() >= 2, "{calls:?}");
    let mut sum = 0.0;
    for c in &calls {
        let m = &c["measured"];
        assert_eq!(m["meter"], "fake-power:100", "{c}");
        let (p, d) = (
            m["prefill_j"].as_f64().unwrap(),
            m["decode_j"].as_f64().unwrap(),
        );
        assert!(p > 0.0 && d > 0.0, "{m}");
        assert!(m["prefill_tokens"].as_u64().unwrap() > 0);
        // A decode step per generated token but the first (from the prefill's logits).
        assert_eq!(
            m["decode_tokens"].as_u64().unwrap() + 1,
            c["generated_tokens"].as_u64().unwrap(),
            "{c}"
        );
        assert_eq!(
            c["charge"].as_f64().unwrap(),
            joule::energy::joule_charge(p + d, 1.0),
            "{c}"
        );
        let tokens = c["charged_tokens"].as_u64().unwrap();
        let fc = c["formula_charge"].as_f64().unwrap();
        assert!(
            fc == formula.charge(tokens, 8.0) || fc == formula.charge(tokens, 4.0),
            "{c}"
        );
        sum += p + d;
    }
    let Some(MeterStatus::Measured(t)) = backend.metering() else {
        panic!("metered backend says it measured nothing");
    };
    // The calls' joules are exactly what the steps measured; the rest is apart.
    assert!(
        (t.prefill_j + t.decode_j - sum).abs() < 1e-6 * sum.max(1.0),
        "{t:?} vs {sum}"
    );
    assert!(t.overhead_j > 0.0 && t.failed_reads == 0, "{t:?}");

    // The report shows the measured energy per agent and phase.
    let out = tempfile::tempdir().unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_joule"))
        .arg("report")
        .arg(dir.path())
        .arg("--out")
        .arg(out.path())
        .arg("--no-plots")
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(md.contains("### Measured energy"), "{md}");
    assert!(
        md.contains("fake-power:100 (a test meter: not measurements)"),
        "{md}"
    );
    assert!(md.contains("| agent_1 | decide |"), "{md}");
    assert!(md.contains("| **all agents** | **all** |"), "{md}");
}

#[test]
fn a_run_without_a_meter_works_and_says_nothing_was_measured() {
    let Some(model) = model() else { return };
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("c.toml");
    std::fs::write(&cfg, config(&model, "auto", "")).unwrap();
    let run_dir = t.path().join("run");
    let joule = env!("CARGO_BIN_EXE_joule");
    // `--meter none` stands for a machine without meters wherever this runs.
    let out = Command::new(joule)
        .args([
            "run",
            cfg.to_str().unwrap(),
            "--meter",
            "none",
            "--out",
            run_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("energy: nothing was measured: metering is off"),
        "{stdout}"
    );
    let status = joule::meter::run_meter::RunMeter::read(&run_dir)
        .unwrap()
        .expect("meter.json")
        .total();
    assert!(
        matches!(status, MeterStatus::NotMeasured { .. }),
        "{status:?}"
    );
    for c in calls(&run_dir) {
        assert!(c.get("measured").is_none(), "{c}");
    }
    let rep = t.path().join("report");
    let st = Command::new(joule)
        .args([
            "report",
            run_dir.to_str().unwrap(),
            "--out",
            rep.to_str().unwrap(),
            "--no-plots",
        ])
        .output()
        .unwrap();
    assert!(st.status.success());
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(
        md.contains("Nothing was measured: none of the 1 run(s)"),
        "{md}"
    );

    // The measured cost model refuses to start without a meter, naming the field.
    std::fs::write(
        &cfg,
        config(&model, "none", "model = \"measured\"\nscale = 2.0"),
    )
    .unwrap();
    let out = Command::new(joule)
        .args([
            "run",
            cfg.to_str().unwrap(),
            "--out",
            t.path().join("r2").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("key `cost.model`") && err.contains("metering is off"),
        "{err}"
    );

    // `auto` here: a meter when `joule meters` finds one, else the reason.
    let (meter, why) = joule::meter::open(&joule::meter::MeterChoice::Auto).unwrap();
    let any = joule::meter::probe().iter().any(|p| p.available);
    assert_eq!(meter.is_some(), any);
    if !any {
        assert!(
            why.starts_with("no energy meter on this machine (nvml: "),
            "{why}"
        );
    }
}

/// A measured run interrupted and resumed keeps the energy of every session
/// in `meter.json`; a session killed before it could record its own is
/// named as missing, by the run's summary and by the report.
#[test]
fn every_session_of_a_resumed_run_keeps_its_measured_energy() {
    use joule::meter::run_meter::RunMeter;
    let Some(model) = model() else { return };
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("c.toml");
    std::fs::write(&cfg, config(&model, "fake-power:100", "")).unwrap();
    let run_dir = t.path().join("run");
    let joule = env!("CARGO_BIN_EXE_joule");
    let go = || {
        let out = Command::new(joule)
            .args(["run", cfg.to_str().unwrap(), "--rounds", "2", "--out"])
            .arg(&run_dir)
            .env("JOULE_PROGRESS", "off")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    // What a kill during round 2 leaves: round 1 kept, no COMPLETE, no
    // totals of the killed session.
    let cut_after_round_one = || {
        let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
        let end = events.find("\"event\":\"round_end\"").unwrap();
        let end = end + events[end..].find('\n').unwrap() + 1;
        std::fs::write(run_dir.join("events.jsonl"), &events[..end]).unwrap();
        std::fs::remove_file(run_dir.join("COMPLETE")).unwrap();
    };
    go();
    assert_eq!(RunMeter::read(&run_dir).unwrap().unwrap().sessions.len(), 1);
    cut_after_round_one();
    std::fs::remove_file(run_dir.join("meter.json")).unwrap();
    let said = go();
    assert!(
        said.contains("1 earlier session(s) ended without recording their energy"),
        "{said}"
    );
    let m = RunMeter::read(&run_dir).unwrap().unwrap();
    assert_eq!(m.sessions.len(), 1);
    assert_eq!(m.sessions[0].from_round, 2);
    // Resumed again: this session is added to the one recorded before.
    cut_after_round_one();
    let said = go();
    assert!(said.contains("(the sum of the run's 2 sessions)"), "{said}");
    let m = RunMeter::read(&run_dir).unwrap().unwrap();
    let overhead = |s: &joule::meter::attribution::MeterStatus| match s {
        MeterStatus::Measured(t) => t.overhead_j + t.idle_j,
        other => panic!("{other:?}"),
    };
    let MeterStatus::Measured(total) = m.total() else {
        panic!("measured")
    };
    let sum: f64 = m.sessions.iter().map(|s| overhead(&s.status)).sum();
    assert!((total.overhead_j + total.idle_j - sum).abs() < 1e-9);
    let rep = t.path().join("report");
    let st = Command::new(joule)
        .args(["report", "--no-plots", "--out"])
        .arg(&rep)
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(
        md.contains("1 session(s) of the runs ended without recording their meter totals"),
        "{md}"
    );
}
