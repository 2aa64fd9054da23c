//! What `joule report` reads and writes, checked on small scripted runs made
//! by the built binary: an output folder with files in it is refused unless
//! `--force`, which removes only the earlier report's own files; runs that
//! did not finish are left out and named; two conditions with identical runs
//! are named; the reproduction of runs not answered by the paper's models
//! says so above every table; the cooperative scripted baseline donates;
//! every run records its provenance and the report sets it out, warning when
//! one condition's runs were answered by different files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn joule(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running joule")
}

fn ok(args: &[&str]) -> (String, String) {
    let o = joule(args);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert_eq!(o.status.code(), Some(0), "joule {args:?}:\n{out}\n{err}");
    (out, err)
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `configs/energy-society/<name>.toml` with `rounds` rounds, run with `seed` into `out`.
fn run(name: &str, rounds: u32, seed: u64, out: &Path) {
    let text = std::fs::read_to_string(root().join(format!("configs/energy-society/{name}.toml")))
        .unwrap()
        .replace("max_rounds = 30", &format!("max_rounds = {rounds}"));
    let cfg = out.with_extension("toml");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    std::fs::write(&cfg, text).unwrap();
    ok(&["run", p(&cfg), "--seed", &seed.to_string(), "--out", p(out)]);
}

fn n_runs(report: &Path) -> u64 {
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("metrics.json")).unwrap())
            .unwrap();
    m["conditions"][0]["summary"]["n_runs"].as_u64().unwrap()
}

#[test]
fn an_out_folder_with_files_is_refused_and_force_removes_only_the_old_reports_files() {
    let t = tempfile::tempdir().unwrap();
    run("baseline-comp", 2, 1, &t.path().join("a/seed_1"));
    run("baseline-comp", 2, 1, &t.path().join("b/seed_1"));
    let rep = t.path().join("report");
    // Two conditions: a folder per condition.
    ok(&[
        "report",
        p(&t.path().join("a")),
        p(&t.path().join("b")),
        "--out",
        p(&rep),
        "--no-plots",
    ]);
    assert!(rep.join("a/aggregate").is_dir() && rep.join("b/aggregate").is_dir());
    std::fs::write(rep.join("mine.txt"), "kept").unwrap();
    let o = joule(&[
        "report",
        p(&t.path().join("a")),
        "--out",
        p(&rep),
        "--no-plots",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    assert!(
        rep.join("b/aggregate").is_dir(),
        "a refused report changes nothing"
    );
    // One condition, forced: the old condition folders go, the user's file stays.
    ok(&[
        "report",
        p(&t.path().join("a")),
        "--out",
        p(&rep),
        "--no-plots",
        "--force",
    ]);
    assert!(rep.join("aggregate").is_dir());
    assert!(
        !rep.join("a").exists() && !rep.join("b").exists(),
        "stale condition folders"
    );
    assert_eq!(
        std::fs::read_to_string(rep.join("mine.txt")).unwrap(),
        "kept"
    );
}

#[test]
fn runs_that_did_not_finish_are_left_out_and_named() {
    let t = tempfile::tempdir().unwrap();
    let cond = t.path().join("cond");
    run("baseline-comp", 2, 1, &cond.join("seed_1"));
    run("baseline-comp", 2, 2, &cond.join("seed_2"));
    run("baseline-comp", 2, 3, &cond.join("seed_3"));
    // seed_2 lost its COMPLETE marker; seed_3 stopped before its agents.json.
    std::fs::remove_file(cond.join("seed_2/COMPLETE")).unwrap();
    for f in [
        "agents.json",
        "config.json",
        "token_usage.json",
        "transcript.json",
        "COMPLETE",
    ] {
        std::fs::remove_file(cond.join("seed_3").join(f)).unwrap();
    }
    let rep = t.path().join("report");
    let (_, err) = ok(&["report", p(&cond), "--out", p(&rep), "--no-plots"]);
    let line = |what: &str| {
        err.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?} in {err}"))
            .to_string()
    };
    let incomplete = line("without their COMPLETE marker");
    assert!(
        incomplete.contains("left out 1 run(s)") && incomplete.contains("seed_2"),
        "{incomplete}"
    );
    assert!(incomplete.contains("--include-incomplete"), "{incomplete}");
    let unfinished = line("without agents.json");
    assert!(
        unfinished.contains("left out 1 run folder(s)") && unfinished.contains("seed_3"),
        "{unfinished}"
    );
    assert_eq!(n_runs(&rep), 1);
    let rep2 = t.path().join("report2");
    ok(&[
        "report",
        p(&cond),
        "--out",
        p(&rep2),
        "--no-plots",
        "--include-incomplete",
    ]);
    assert_eq!(n_runs(&rep2), 2);
}

#[test]
fn identical_conditions_are_named_and_the_cooperative_baseline_donates() {
    let t = tempfile::tempdir().unwrap();
    run(
        "baseline-comp",
        10,
        12345,
        &t.path().join("comp/seed_12345"),
    );
    run(
        "baseline-comp",
        10,
        12345,
        &t.path().join("comp-again/seed_12345"),
    );
    run(
        "baseline-coop",
        10,
        12345,
        &t.path().join("coop/seed_12345"),
    );
    let agents =
        |c: &str| std::fs::read_to_string(t.path().join(c).join("seed_12345/agents.json")).unwrap();
    assert_ne!(
        agents("comp"),
        agents("coop"),
        "the coop baseline plays like the comp one"
    );
    let coop: serde_json::Value = serde_json::from_str(&agents("coop")).unwrap();
    let donations = coop
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["memory"].as_array().unwrap())
        .filter(|m| m["action"] == "DONATE")
        .count();
    assert!(donations > 0, "the cooperative policy never donated");
    let rep = t.path().join("report");
    let (_, err) = ok(&[
        "report",
        p(&t.path().join("comp")),
        p(&t.path().join("comp-again")),
        p(&t.path().join("coop")),
        "--out",
        p(&rep),
        "--no-plots",
    ]);
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(md.contains("## Identical conditions"), "{md}");
    assert!(
        md.contains("the runs of `comp` and `comp-again` are identical"),
        "{md}"
    );
    assert!(
        !md.contains("`coop` are identical") && !md.contains("and `coop`"),
        "{md}"
    );
    assert!(err.contains("are identical"), "{err}");
}

#[test]
fn a_reproduction_of_runs_not_answered_by_the_papers_models_says_so_above_every_table() {
    let t = tempfile::tempdir().unwrap();
    for seed in [1, 2] {
        run(
            "baseline-comp",
            30,
            seed,
            &t.path().join(format!("baseline-comp/seed_{seed}")),
        );
        run(
            "baseline-coop",
            30,
            seed,
            &t.path().join(format!("baseline-coop/seed_{seed}")),
        );
    }
    let rep = t.path().join("rep");
    let (shown, _) = ok(&[
        "report",
        p(&t.path().join("baseline-comp")),
        p(&t.path().join("baseline-coop")),
        "--against",
        "paper",
        "--out",
        p(&rep),
        "--no-plots",
    ]);
    // The terminal's compact table opens with the notice too.
    let compact = &shown[shown.find("Reproduction against").expect("compact table")..];
    assert!(
        compact.contains("Not the paper's models: these runs were answered by stand-ins"),
        "{compact}"
    );
    let md = std::fs::read_to_string(rep.join("reproduction.md")).unwrap();
    let notice = "> **Not the paper's models: these runs were answered by stand-ins";
    for table in ["## Levels", "## Effects"] {
        let at = md
            .find(table)
            .unwrap_or_else(|| panic!("no {table} in {md}"));
        let next = md[at..].find('|').unwrap();
        assert!(md[at..at + next].contains(notice), "{table}: {md}");
    }
    assert!(
        md.contains("agent_4 qwen3:8b (answered by scripted:greedy)"),
        "{md}"
    );
}

#[test]
fn runs_record_their_provenance_and_the_report_warns_when_one_conditions_files_differ() {
    let t = tempfile::tempdir().unwrap();
    for seed in [1, 2] {
        run(
            "baseline-comp",
            2,
            seed,
            &t.path().join(format!("c/seed_{seed}")),
        );
    }
    let read = |seed: u64| {
        joule::provenance::Provenance::read(&t.path().join(format!("c/seed_{seed}")))
            .unwrap()
            .expect("provenance.json")
    };
    let first = read(1);
    assert_eq!(first.sessions.len(), 1);
    let s = &first.sessions[0];
    assert_eq!((s.from_round, s.command[1].as_str()), (1, "run"));
    // The binary and these tests are built from the same sources.
    assert_eq!(s.build, joule::provenance::Build::this());
    assert!(
        s.models.is_empty(),
        "scripted agents answer from no model: {:?}",
        s.models
    );
    assert_eq!(s.machine.device, None);
    assert!(s.machine.cpus.is_some_and(|n| n > 0));
    assert!(
        s.jobs.source.starts_with("procedural seed=1 "),
        "{}",
        s.jobs.source
    );
    // `joule --version` names the same build, with its whole commit.
    let (version, _) = ok(&["--version"]);
    assert_eq!(version, format!("joule {}\n", s.build.version_text(40)));

    let rep = t.path().join("report");
    let (_, err) = ok(&[
        "report",
        p(&t.path().join("c")),
        "--out",
        p(&rep),
        "--no-plots",
    ]);
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(
        md.contains("## Provenance") && md.contains("2 of 2 runs record it."),
        "{md}"
    );
    assert!(md.contains(&format!("| {} | 2 |", s.build.label())), "{md}");
    assert!(!err.contains("different files"), "{err}");
    let csv = std::fs::read_to_string(rep.join("provenance.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(
        csv.lines().nth(2).unwrap().starts_with("c,seed_2,1,1,"),
        "{csv}"
    );

    // The same model answered by two files in one condition: said in the report, on the
    // terminal and above the reproduction's tables.
    for (seed, sha) in [(1, "a"), (2, "b")] {
        let mut record = read(seed);
        record.sessions[0].models.push(joule::backend::ModelOrigin {
            model: "qwen3-8b".into(),
            file: Some(format!("/models/{sha}.gguf")),
            sha256: Some(sha.repeat(64)),
            ..Default::default()
        });
        let path = t.path().join(format!("c/seed_{seed}/provenance.json"));
        std::fs::write(&path, serde_json::to_string(&record).unwrap()).unwrap();
    }
    let (_, err) = ok(&[
        "report",
        p(&t.path().join("c")),
        "--out",
        p(&rep),
        "--no-plots",
        "--force",
    ]);
    let said = "condition c: model qwen3-8b was answered by 2 different files or servers (sha256 aaaaaaaaaaaa…, sha256 bbbbbbbbbbbb…)";
    assert!(err.contains(&format!("warning: {said}")), "{err}");
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(
        md.contains(&format!("Before citing these figures:\n\n- {said}")),
        "{md}"
    );
    let (out, _) = ok(&[
        "report",
        p(&t.path().join("c")),
        "--against",
        "paper",
        "--allow-mismatch",
    ]);
    assert!(
        out.contains("model qwen3-8b was answered by 2 different files"),
        "{out}"
    );

    // A corrupt record is named; the report still comes.
    std::fs::write(t.path().join("c/seed_2/provenance.json"), "{").unwrap();
    let (_, err) = ok(&[
        "report",
        p(&t.path().join("c")),
        "--out",
        p(&rep),
        "--no-plots",
        "--force",
    ]);
    assert!(
        err.contains("run c/seed_2: its provenance could not be read")
            && err.contains("provenance.json"),
        "{err}"
    );
}

/// Copy the folder `from` to `to` (files and folders only).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn refused(args: &[&str]) -> String {
    let o = joule(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    // An error, not a panic (101) or an abort (no code).
    assert!(
        o.status.code().is_some_and(|c| c != 0 && c != 101),
        "joule {args:?}: {:?} {err}",
        o.status
    );
    err
}

#[test]
fn a_complete_run_whose_log_was_cut_is_refused_by_view() {
    let t = tempfile::tempdir().unwrap();
    let run_dir = t.path().join("run");
    run("baseline-comp", 2, 1, &run_dir);
    ok(&["view", p(&run_dir), "--out", p(&t.path().join("whole"))]);
    // The first half of the log's lines, as a copy cut short leaves it.
    let log = run_dir.join("events.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&log, lines[..lines.len() / 2].join("\n") + "\n").unwrap();
    let err = refused(&["view", p(&run_dir), "--out", p(&t.path().join("cut"))]);
    assert!(
        err.contains("events.jsonl does not end with the run's `run_end` event"),
        "{err}"
    );
    assert!(!t.path().join("cut").join("report.html").exists());
}

#[test]
fn force_refuses_to_overwrite_a_file_that_no_report_wrote() {
    let t = tempfile::tempdir().unwrap();
    let run_dir = t.path().join("run");
    run("baseline-comp", 2, 1, &run_dir);
    // A user's own report.md (report) and report.html (view).
    let rep = t.path().join("rep");
    std::fs::create_dir_all(&rep).unwrap();
    std::fs::write(rep.join("report.md"), "MY OWN NOTES").unwrap();
    let err = refused(&[
        "report",
        p(&run_dir),
        "--out",
        p(&rep),
        "--no-plots",
        "--force",
    ]);
    assert!(
        err.contains(&rep.join("report.md").display().to_string())
            && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(rep.join("report.md")).unwrap(),
        "MY OWN NOTES"
    );
    assert!(!rep.join("metrics.json").exists());
    std::fs::remove_file(rep.join("report.md")).unwrap();
    std::fs::write(rep.join("report.html"), "MY PAGE").unwrap();
    let err = refused(&["view", p(&run_dir), "--out", p(&rep), "--force"]);
    assert!(
        err.contains(&rep.join("report.html").display().to_string()),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(rep.join("report.html")).unwrap(),
        "MY PAGE"
    );
    // A reference condition reported into itself: its own aggregate/*.csv stay.
    let reference = root().join("../shared/data/reference-runs/energy-society/coop/exponent_0.5");
    let cond = t.path().join("exponent_0.5");
    copy_dir(&reference, &cond);
    let runs_csv = std::fs::read(cond.join("aggregate/runs.csv")).unwrap();
    let err = refused(&[
        "report",
        p(&cond),
        "--out",
        p(&cond),
        "--no-plots",
        "--force",
    ]);
    assert!(err.contains("aggregate"), "{err}");
    assert_eq!(
        std::fs::read(cond.join("aggregate/runs.csv")).unwrap(),
        runs_csv
    );
    // A report forced over its own earlier report replaces it.
    for _ in 0..2 {
        ok(&[
            "report",
            p(&run_dir),
            "--out",
            p(&run_dir),
            "--no-plots",
            "--html",
            "--force",
        ]);
    }
    assert!(run_dir.join("aggregate").is_dir() && run_dir.join("events.jsonl").is_file());
}

#[test]
fn the_files_a_report_plans_are_the_files_it_writes() {
    let t = tempfile::tempdir().unwrap();
    let run_dir = t.path().join("a/seed_1");
    run("baseline-comp", 2, 1, &run_dir);
    let rep = t.path().join("rep");
    ok(&["report", p(&run_dir), "--out", p(&rep), "--html"]);
    let written: std::collections::BTreeSet<PathBuf> =
        std::fs::read_to_string(rep.join(".joule-report-files"))
            .unwrap()
            .lines()
            .map(PathBuf::from)
            .collect();
    let reports: Vec<_> = joule::report::load::discover(&[run_dir])
        .unwrap()
        .into_iter()
        .map(joule::report::analyse)
        .collect();
    let planned = joule::report::planned_files(&reports, false, true, true);
    // Every file written was planned (plots may be missing without a font).
    assert!(written.is_subset(&planned), "{written:?}\n{planned:?}");
    let not_plots: Vec<_> = planned.iter().filter(|f| !f.starts_with("plots")).collect();
    assert!(
        not_plots.iter().all(|f| written.contains(*f)),
        "{written:?}"
    );
    assert!(planned.contains(Path::new("report.html")));
}

/// A copy of the shared reference run `coop/exponent_0.5/run_1` in `dir`,
/// its `file` changed by `edit`.
fn edited_reference(dir: &Path, file: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let reference =
        root().join("../shared/data/reference-runs/energy-society/coop/exponent_0.5/run_1");
    let run = dir.join("run_1");
    copy_dir(&reference, &run);
    let path = run.join(file);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    run
}

#[test]
fn numbers_in_a_run_folder_no_run_can_hold_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let a = edited_reference(&t.path().join("a"), "config.json", |c| {
        c["max_rounds"] = 4_000_000_000u64.into()
    });
    let b = edited_reference(&t.path().join("b"), "agents.json", |a| {
        a[0]["memory"][0]["round_num"] = 4_000_000_000u64.into()
    });
    let huge_count = edited_reference(&t.path().join("f"), "token_usage.json", |u| {
        u[0]["output_tokens"] = 1_000_000_000_000u64.into()
    });
    let rep = t.path().join("rep");
    for (args, says) in [
        (
            vec!["report", p(&a), "--out", p(&rep), "--no-plots"],
            "config.json: field `max_rounds`: expected at most 100000, got 4000000000",
        ),
        (
            vec!["view", p(&a), "--out", p(&rep)],
            "config.json: field `max_rounds`",
        ),
        (vec!["replay", p(&a)], "config.json: field `max_rounds`"),
        (
            vec!["replay", p(&huge_count)],
            "token_usage.json: field `[0].output_tokens`: expected at most 1000000",
        ),
        (
            vec!["replay", p(&b)],
            "agents.json: field `[0].memory[0].round_num`: expected at most 100000, got 4000000000",
        ),
    ] {
        let err = refused(&args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Values no run can hold: no rounds, an agent listed twice, a size of 0.
    let edits: [(&str, &str, fn(&mut serde_json::Value), &str); 3] = [
        (
            "c",
            "config.json",
            |c| c["max_rounds"] = 0.into(),
            "config.json: field `max_rounds`: expected at least 1, got 0",
        ),
        (
            "d",
            "agents.json",
            |a| a[1]["agent_id"] = a[0]["agent_id"].clone(),
            "agents.json: field `[1].agent_id`: `agent_1` is listed twice",
        ),
        (
            "e",
            "config.json",
            |c| c["agents"][2]["model_size"] = 0.into(),
            "config.json: field `agents[2].model_size`: expected a positive number, got 0",
        ),
    ];
    for (name, file, edit, says) in edits {
        let run = edited_reference(&t.path().join(name), file, edit);
        let err = refused(&["report", p(&run), "--out", p(&rep), "--no-plots"]);
        assert!(err.contains(says), "{name}: {err}");
    }
}

#[test]
fn energies_too_large_to_plot_leave_the_plots_out_with_a_warning() {
    let t = tempfile::tempdir().unwrap();
    let run_dir = edited_reference(t.path(), "agents.json", |agents| {
        for a in agents.as_array_mut().unwrap() {
            for m in a["memory"].as_array_mut().unwrap() {
                m["energy_at_start_of_round"] = 1.7e308.into();
            }
        }
    });
    let rep = t.path().join("rep");
    let mut child = Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["report", p(&run_dir), "--out", p(&rep)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > 120 {
            child.kill().unwrap();
            panic!("joule report did not end in 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("plots not written"), "{err}");
    assert!(rep.join("report.md").is_file());
}

#[test]
fn an_out_folder_that_cannot_be_made_is_the_error() {
    let t = tempfile::tempdir().unwrap();
    let run_dir = t.path().join("run");
    run("baseline-comp", 2, 1, &run_dir);
    let file = t.path().join("file");
    std::fs::write(&file, "").unwrap();
    let out = file.join("rep");
    let err = refused(&["report", p(&run_dir), "--out", p(&out), "--no-plots"]);
    assert!(
        err.contains(&format!("creating {}", out.display())),
        "{err}"
    );
}
