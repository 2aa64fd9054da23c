//! A run that went wrong says so: the built `joule` binary on
//! small scripted configs. Nothing starts that cannot run as configured (a
//! misspelled policy or model is one error naming file, key, value and the
//! nearest names, and nothing is written); call errors show in the summary,
//! in the run folder and in the exit status; a complete run folder is never
//! overwritten silently; and the messages say each cause once, plainly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::default_model;

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn joule(args: &[&str]) -> Output {
    Command::new(JOULE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running joule")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The scripted competitive baseline, 2 rounds, with `edit` applied, written to `dir/name`.
fn config(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let base = std::fs::read_to_string(root().join("configs/energy-society/baseline-comp.toml"))
        .unwrap()
        .replace("max_rounds = 30", "max_rounds = 2");
    let path = dir.join(name);
    std::fs::write(&path, edit(base)).unwrap();
    path
}

/// The model key of roster entry `i` (0-based) replaced by `model`.
fn set_model(text: String, i: usize, model: &str) -> String {
    let mut n = 0;
    text.lines()
        .map(|l| {
            if l.starts_with("model = ") {
                n += 1;
                if n == i + 1 {
                    return format!("model = {model:?}");
                }
            }
            l.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_misspelled_policy_stops_before_anything_is_written() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "bad.toml", |s| {
        s.replace("scripted:greedy", "scripted:greedyy")
    });
    let out = t.path().join("run");
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stdout}{err}");
    for want in [
        p(&cfg),
        "key `roster[0].model`",
        "and 3 more",
        "`scripted:greedyy`",
        "unknown scripted policy `greedyy` (nearest: greedy)",
        "known: cooperative, donor, easiest, greedy, random",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    assert_eq!(err.lines().count(), 1, "one error, one line: {err}");
    assert!(!stdout.contains("rounds played"), "{stdout}");
    assert!(!out.exists(), "nothing may be written");
}

#[test]
fn a_misspelled_model_stops_before_anything_is_loaded_or_written() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "bad.toml", |s| set_model(s, 3, "qwen3-8bb"));
    let out = t.path().join("run");
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stdout}{err}");
    for want in [
        p(&cfg),
        "key `roster[3].model`",
        "`qwen3-8bb`",
        "nearest: qwen3-8b",
        "known models:",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    assert!(!err.contains("memory plan"), "{err}");
    assert!(!out.exists(), "nothing may be written");
}

#[test]
fn a_sweep_checks_every_config_before_the_first_cell() {
    let t = tempfile::tempdir().unwrap();
    config(t.path(), "good.toml", |s| s);
    config(t.path(), "bad.toml", |s| set_model(s, 1, "scripted:rando"));
    let sweep = t.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        "configs = [\"good.toml\", \"bad.toml\"]\nseeds = [1, 2]\n",
    )
    .unwrap();
    let out = t.path().join("out");
    let o = joule(&["sweep", p(&sweep), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stdout}{err}");
    assert!(
        err.contains("bad.toml: key `roster[1].model`: `scripted:rando`")
            && err.contains("nearest: random"),
        "{err}"
    );
    assert!(!out.exists(), "no cell may run: {stdout}");
}

#[test]
fn a_race_checks_its_seats_and_the_audit_its_model() {
    let t = tempfile::tempdir().unwrap();
    let race = std::fs::read_to_string(root().join("configs/ai-race/baseline-scripted.toml"))
        .unwrap()
        .replace(
            "[\"scripted:CS\", \"scripted:CAS\"]",
            "[\"scripted:CS\", \"scripted:CASS\"]",
        );
    let cfg = t.path().join("race.toml");
    std::fs::write(&cfg, race).unwrap();
    let out = t.path().join("race");
    let o = joule(&["race", "run", p(&cfg), "--out", p(&out)]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("key `lineups[1].seats[1]`: `scripted:CASS`") && err.contains("nearest: CAS"),
        "{err}"
    );
    assert!(!out.exists());
    let o = joule(&["race", "audit", "--model", "scripted:orcale", "--reps", "1"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("key `--model`: `scripted:orcale`") && err.contains("nearest: oracle"),
        "{err}"
    );
}

#[test]
fn call_errors_show_in_the_table_the_folder_and_the_exit_status() {
    let t = tempfile::tempdir().unwrap();
    // A scripted run: no errors, exit 0, the columns and the file say 0.
    let ok = config(t.path(), "ok.toml", |s| s);
    let out = t.path().join("ok");
    let o = joule(&["run", p(&ok), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}{err}");
    assert!(
        stdout.contains("invoke_errors") && stdout.contains("format_errors"),
        "{stdout}"
    );
    let counts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("call_errors.json")).unwrap())
            .unwrap();
    assert_eq!(counts["invoke_errors"], 0, "{counts}");
    assert_eq!(counts["agents"].as_array().unwrap().len(), 5, "{counts}");

    // One agent on a GGUF file without a chat template: found, so the run
    // starts, and every call of that agent is an INVOKE_ERROR.
    let gguf = root().join("tests/fixtures/golden/llama.gguf");
    let bad = config(t.path(), "calls.toml", |s| set_model(s, 1, p(&gguf)));
    let out = t.path().join("calls");
    let o = joule(&["run", p(&bad), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{stdout}{err}");
    assert!(out.join("COMPLETE").is_file());
    let row = stdout
        .lines()
        .find(|l| l.starts_with("agent_2 "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let invoke: u32 = cols[cols.len() - 2].parse().unwrap();
    assert!(invoke > 0, "{row}");
    let other = stdout.lines().find(|l| l.starts_with("agent_1 ")).unwrap();
    assert_eq!(other.split_whitespace().rev().nth(1), Some("0"), "{other}");
    assert!(
        stdout.contains("call errors: agent_2 had") && stdout.contains("llama.gguf"),
        "{stdout}"
    );
    assert!(err.contains("exit status 3"), "{err}");
    let counts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("call_errors.json")).unwrap())
            .unwrap();
    assert_eq!(counts["agents"][1]["agent_id"], "agent_2", "{counts}");
    assert_eq!(counts["agents"][1]["invoke_errors"], invoke, "{counts}");
    assert_eq!(counts["invoke_errors"], invoke, "{counts}");
}

#[test]
fn a_complete_run_folder_is_kept_unless_forced() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "c.toml", |s| s);
    let out = t.path().join("run");
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    assert!(o.status.success(), "{:?}", text(&o));
    let events = std::fs::read(out.join("events.jsonl")).unwrap();

    // Again with another seed: refused, the first run kept.
    let o = joule(&["run", p(&cfg), "--out", p(&out), "--seed", "7"]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stdout}{err}");
    assert!(
        err.contains("already holds a complete run")
            && err.contains("--force")
            && err.contains("--out"),
        "{err}"
    );
    assert_eq!(std::fs::read(out.join("events.jsonl")).unwrap(), events);

    // --force replaces it.
    let o = joule(&["run", p(&cfg), "--out", p(&out), "--seed", "7", "--force"]);
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{stdout}{err}");
    assert!(err.contains("replacing"), "{err}");
    assert_ne!(std::fs::read(out.join("events.jsonl")).unwrap(), events);

    // An incomplete run of another config is refused (tests/full/run_resume.rs:
    // one of the same config resumes), and replaced with --force.
    std::fs::remove_file(out.join("COMPLETE")).unwrap();
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stdout}{err}");
    assert!(
        err.contains("incomplete run of another config") && err.contains("--force"),
        "{err}"
    );
    let o = joule(&["run", p(&cfg), "--out", p(&out), "--force"]);
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{stdout}{err}");
    assert!(
        err.contains("incomplete run") && err.contains("replacing"),
        "{err}"
    );
    assert!(out.join("COMPLETE").is_file());

    // A folder that is not a run folder is never cleared.
    let other = t.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("keep.txt"), "mine").unwrap();
    let o = joule(&["run", p(&cfg), "--out", p(&other)]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a run folder"), "{err}");
    assert_eq!(
        std::fs::read_to_string(other.join("keep.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn messages_say_each_cause_once_with_the_place() {
    let t = tempfile::tempdir().unwrap();
    // A missing config: one cause, plain words.
    let o = joule(&["run", "/nowhere/c.toml"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    assert!(
        err.contains("/nowhere/c.toml: cannot read the config") && !err.contains("(file)"),
        "{err}"
    );
    // A missing GGUF file: "No such file" once.
    let o = joule(&["tokenize", "--gguf", "/nowhere/m.gguf"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    // A TOML syntax error: line and column.
    let cfg = config(t.path(), "syntax.toml", |s| {
        s.replace("max_rounds = 2", "max_rounds = = 2")
    });
    let line = std::fs::read_to_string(&cfg)
        .unwrap()
        .lines()
        .position(|l| l.starts_with("max_rounds"))
        .unwrap()
        + 1;
    let o = joule(&["run", p(&cfg), "--out", p(&t.path().join("r"))]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("key `max_rounds`") && err.contains(&format!("(line {line}, column 14)")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn empty_run_folders_are_reported_and_replays_are_summaries() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "c.toml", |s| s);
    let run = t.path().join("cond").join("run_1");
    let o = joule(&["run", p(&cfg), "--out", p(&run)]);
    assert!(o.status.success(), "{:?}", text(&o));
    std::fs::write(run.join("agents.json"), "[]").unwrap();
    let rep = t.path().join("rep");
    let o = joule(&["report", p(&run), "--out", p(&rep), "--no-plots"]);
    let (stdout, err) = text(&o);
    assert_ne!(o.status.code(), Some(0), "{stdout}{err}");
    assert!(
        err.contains("agents.json lists no agents") && err.contains("no run to report"),
        "{err}"
    );
    let o = joule(&["replay", p(&run)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stdout}{err}");
    assert!(err.contains("lists no agents"), "{err}");
    assert!(stdout.len() < 2000, "{stdout}");

    // A replay with many mismatches prints a bounded summary.
    let reference =
        root().join("../shared/data/reference-runs/energy-society/coop/exponent_0.5/run_1");
    if !reference.is_dir() {
        eprintln!("skipped the replay bound: no {}", reference.display());
        return;
    }
    let o = joule(&["replay", p(&reference), "--alpha", "2"]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stdout}{err}");
    assert!(stdout.contains("more mismatches (--all"), "{stdout}");
    assert!(stdout.lines().all(|l| l.chars().count() < 400), "{stdout}");
    assert!(stdout.matches("MISMATCH").count() <= 20, "{stdout}");
}

#[test]
fn a_misspelled_roster_model_is_refused_even_with_a_stand_in() {
    let t = tempfile::tempdir().unwrap();
    let tiny = root().join("tests/fixtures/gguf/tiny-llama.gguf");
    let cfg = config(t.path(), "bad.toml", |s| {
        set_model(s, 3, "qwen3-8bb").replacen(
            "[[roster]]",
            &format!("[llm]\nstand_in = {:?}\n\n[[roster]]", p(&tiny)),
            1,
        )
    });
    let out = t.path().join("run");
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stdout}{err}");
    for want in [
        "key `roster[3].model`",
        "`qwen3-8bb`",
        "no model of that name (nearest: qwen3-8b, qwen3:8b)",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    assert!(!out.exists(), "nothing may be written");
}

#[test]
fn a_flag_error_names_the_flag_and_bad_ranges_name_the_key() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "good.toml", |s| s);
    let o = joule(&[
        "run",
        p(&cfg),
        "--rounds",
        "0",
        "--out",
        p(&t.path().join("r")),
    ]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stdout}{err}");
    assert!(err.contains("--rounds"), "{err}");
    assert!(!err.contains(p(&cfg)), "the config is not to blame: {err}");
    for (edit, key, says) in [
        ("alpha = -2.0", "cost.alpha", "expected a number >= 0"),
        ("alpha = 50.0", "cost.alpha", "expected α in [0, "),
    ] {
        let bad = config(t.path(), "bad.toml", |s| s.replace("alpha = 0.5", edit));
        let o = joule(&["run", p(&bad), "--out", p(&t.path().join("r"))]);
        let (stdout, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{edit}: {stdout}{err}");
        assert!(
            err.contains(&format!("{}: key `{key}`: {says}", p(&bad))),
            "{edit}: {err}"
        );
    }
}

#[test]
fn a_run_whose_agents_are_all_out_in_round_one_warns_and_exits_4() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "starved.toml", |s| {
        s.replace("init_energy = 1500.0", "init_energy = 1.0")
    });
    let out = t.path().join("run");
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(4), "{stdout}{err}");
    assert!(
        err.contains("every agent was out (energy 0) at the end of round 1")
            && err.contains("(exit status 4)"),
        "{err}"
    );
    assert!(out.join("COMPLETE").is_file(), "the run itself is complete");
    // A normal run still exits 0.
    let cfg = config(t.path(), "fed.toml", |s| s);
    let o = joule(&["run", p(&cfg), "--out", p(&t.path().join("fed"))]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
}

#[test]
fn every_output_names_the_model_that_answered() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), "scripted.toml", |s| s);
    let out = t.path().join("run");
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}{err}");
    let header = stdout.lines().nth(1).unwrap();
    assert!(
        header.contains("model") && header.contains("answered by"),
        "{stdout}"
    );
    let row = stdout.lines().find(|l| l.starts_with("agent_4 ")).unwrap();
    assert!(
        row.contains("qwen3:8b") && row.contains("scripted:greedy"),
        "{row}"
    );
    let json = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join(f)).unwrap()).unwrap()
    };
    let agents = json("agents.json");
    assert_eq!(agents[3]["model_name"], "qwen3:8b");
    assert_eq!(agents[3]["answered_by"], "scripted:greedy");
    let config = json("config.json");
    assert_eq!(config["agents"][3]["model_name"], "qwen3:8b");
    assert_eq!(config["agents"][3]["answered_by"], "scripted:greedy");
    let events = std::fs::read_to_string(out.join("events.jsonl")).unwrap();
    let start: serde_json::Value = serde_json::from_str(events.lines().next().unwrap()).unwrap();
    assert_eq!(start["event"], "run_start", "{start}");
    assert_eq!(start["agents"][3]["model_name"], "qwen3:8b");
    assert_eq!(start["agents"][3]["answered_by"], "scripted:greedy");
    // report.md names both.
    let rep = t.path().join("report");
    let o = joule(&["report", p(&out), "--out", p(&rep), "--no-plots", "--html"]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(
        md.contains("| agent_4 | qwen3:8b (answered by scripted:greedy) |"),
        "{md}"
    );
    assert!(md.contains("not the paper's models"), "{md}");
    let html = std::fs::read_to_string(rep.join("report.html")).unwrap();
    assert!(
        html.contains("<td>qwen3:8b (answered by scripted:greedy)</td>"),
        "the HTML summary names both"
    );
}

/// A model-backed run on a stand-in (the default model standing in for
/// qwen3:8b) names the stand-in beside the paper model in its summary and
/// its run files.
#[test]
fn a_stand_in_run_names_the_stand_in_beside_the_paper_model() {
    let Some(model) = default_model::cached() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("stand-in.toml");
    std::fs::write(&cfg, default_model::one_round_society("stand-in", &model)).unwrap();
    let out = t.path().join("run");
    let o = joule(&["run", p(&cfg), "--out", p(&out)]);
    let (stdout, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}{err}");
    let row = stdout.lines().find(|l| l.starts_with("agent_1 ")).unwrap();
    assert!(
        row.contains("qwen3:8b") && row.contains(p(&model)),
        "{stdout}"
    );
    let agents: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("agents.json")).unwrap()).unwrap();
    assert_eq!(agents[0]["model_name"], "qwen3:8b");
    assert_eq!(agents[0]["answered_by"], p(&model));
}
