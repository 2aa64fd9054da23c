//! An interrupted `joule run` keeps what it recorded and resumes from its
//! last complete round, giving the files of an uninterrupted run: after a
//! kill -9 at many points of its `events.jsonl` (each line boundary a run
//! can stop at, and torn lines), after a real kill -9 and after SIGINT
//! (exit status 130, a note saying what was kept and how to go on). An
//! incomplete run of another config is refused. A closed standard output
//! or error never stops a run or a sweep. A run on the default model
//! (SmolLM2-135M, when cached) resumes to the same files, latencies aside.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::default_model;

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

fn joule(args: &[&str]) -> Output {
    Command::new(JOULE)
        .args(args)
        .env("JOULE_PROGRESS", "off")
        .output()
        .expect("run joule")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The paper's scripted baseline at `rounds` rounds; `rich` gives every
/// agent energy enough to play them all (a long run to interrupt).
fn config(dir: &Path, rounds: u32, rich: bool) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/energy-society/baseline-comp.toml");
    let mut t = std::fs::read_to_string(src)
        .unwrap()
        .replace("max_rounds = 30", &format!("max_rounds = {rounds}"));
    if rich {
        t = t
            .replace("init_energy = 1500.0", "init_energy = 100000000.0")
            .replace("memory = true", "memory = false");
    }
    let path = dir.join(format!("baseline-{rounds}-{rich}.toml"));
    std::fs::write(&path, t).unwrap();
    path
}

/// Every file of a run folder by name.
/// The files of a run folder, without `provenance.json` (not one of the run's records: it
/// says when, where and by which build each session played; [`from_rounds`] reads it).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != joule::provenance::FILE)
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

fn run(cfg: &Path, out: &Path) -> Output {
    joule(&["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()])
}

fn assert_same_files(a: &Path, b: &Path, what: &str) {
    let (fa, fb) = (files(a), files(b));
    assert_eq!(
        fa.keys().collect::<Vec<_>>(),
        fb.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (name, bytes) in &fa {
        assert!(bytes == &fb[name], "{what}: {name} differs");
    }
}

/// The round each session of the run in `dir` started from, as its provenance says.
fn from_rounds(dir: &Path) -> Vec<u32> {
    joule::provenance::Provenance::read(dir)
        .unwrap()
        .unwrap_or_default()
        .sessions
        .iter()
        .map(|s| s.from_round)
        .collect()
}

/// The records of two run folders are the same bytes (`config.resolved.toml`
/// aside, which says how each start ran).
fn assert_same_records(a: &Path, b: &Path) {
    let records = |d: &Path| {
        let mut f = files(d);
        f.remove("config.resolved.toml");
        f
    };
    assert!(records(a) == records(b), "records differ");
}

/// `round 1` or `rounds 1-k`, as the notes say.
fn kept_words(kept: usize) -> String {
    match kept {
        1 => "round 1".to_string(),
        k => format!("rounds 1-{k}"),
    }
}

fn round_ends(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("{\"event\":\"round_end\""))
        .count()
}

#[test]
fn a_run_cut_anywhere_resumes_to_the_files_of_an_uninterrupted_run() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 4, false);
    let whole = t.path().join("whole");
    let o = run(&cfg, &whole);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let events = std::fs::read(whole.join("events.jsonl")).unwrap();
    let ends: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    assert!(ends.len() > 20, "{} lines", ends.len());
    // What a kill -9 leaves: config.resolved.toml and events.jsonl up to a
    // point (a whole line, or a torn one), nothing else.
    let mut cuts: Vec<usize> = ends.iter().step_by(ends.len() / 12).copied().collect();
    cuts.extend([ends[ends.len() / 2] - 7, ends[ends.len() - 2], 0, 3]);
    cuts.sort();
    cuts.dedup();
    let mut resumed = 0;
    for cut in cuts {
        let dir = t.path().join(format!("cut-{cut}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy(
            whole.join("config.resolved.toml"),
            dir.join("config.resolved.toml"),
        )
        .unwrap();
        std::fs::write(dir.join("events.jsonl"), &events[..cut]).unwrap();
        let kept = round_ends(&dir);
        let o = run(&cfg, &dir);
        let stderr = text(&o.stderr);
        assert!(o.status.success(), "cut at byte {cut}: {stderr}");
        if kept > 0 {
            resumed += 1;
            assert!(
                stderr.contains(&format!("{} kept", kept_words(kept))),
                "cut at byte {cut}: {stderr}"
            );
        }
        assert_same_files(&whole, &dir, &format!("cut at byte {cut}"));
        // The cut folder had no provenance: the resume's session is its only one.
        assert_eq!(from_rounds(&dir), [kept as u32 + 1], "cut at byte {cut}");
    }
    assert!(resumed >= 8, "{resumed}");
}

#[test]
fn a_run_killed_or_interrupted_resumes_to_the_same_files() {
    let t = tempfile::tempdir().unwrap();
    let rounds = 400;
    let cfg = config(t.path(), rounds, true);
    let whole = t.path().join("whole");
    let started = Instant::now();
    let o = run(&cfg, &whole);
    let took = started.elapsed();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        round_ends(&whole),
        rounds as usize,
        "the agents play every round"
    );

    // Stop a run once its events.jsonl has `fraction` of the whole run's
    // bytes: SIGSTOP freezes it there at once, then `signal` (SIGKILL, or
    // SIGINT handled as it goes on).
    let size = std::fs::metadata(whole.join("events.jsonl")).unwrap().len() as f64;
    let stop = |name: &str, fraction: f64, signal: i32| -> (PathBuf, Output) {
        let dir = t.path().join(name);
        let events = dir.join("events.jsonl");
        let child = Command::new(JOULE)
            .args(["run", cfg.to_str().unwrap(), "--out", dir.to_str().unwrap()])
            .env("JOULE_PROGRESS", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + took * 20 + Duration::from_secs(30);
        let pid = child.id() as i32;
        loop {
            let len = std::fs::metadata(&events).map(|m| m.len()).unwrap_or(0);
            if len as f64 >= size * fraction {
                break;
            }
            assert!(Instant::now() < deadline, "{name}: {len} bytes");
            std::thread::sleep(Duration::from_micros(200));
        }
        // SAFETY: signals to the child this test started.
        unsafe {
            libc::kill(pid, libc::SIGSTOP);
            libc::kill(pid, signal);
            libc::kill(pid, libc::SIGCONT);
        }
        let o = child.wait_with_output().unwrap();
        assert!(!o.status.success(), "{name}: it ran to the end");
        assert!(!dir.join("COMPLETE").exists());
        (dir, o)
    };
    for (i, fraction) in [0.02, 0.3, 0.7].into_iter().enumerate() {
        let (dir, _) = stop(&format!("kill-{i}"), fraction, libc::SIGKILL);
        let kept = round_ends(&dir);
        let o = run(&cfg, &dir);
        let stderr = text(&o.stderr);
        assert!(o.status.success(), "{stderr}");
        if kept > 0 {
            assert!(
                stderr.contains(&format!("{} kept", kept_words(kept))),
                "{stderr}"
            );
        }
        assert_same_files(&whole, &dir, &format!("killed at {fraction} of its events"));
    }

    // Interrupted in round 1: nothing kept, and the note says so once.
    let (dir, o) = stop("sigint-early", 0.0005, libc::SIGINT);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    if round_ends(&dir) == 0 {
        assert!(
            stderr.contains("interrupted by SIGINT (Ctrl-C): no round was complete"),
            "{stderr}"
        );
    }
    let o = run(&cfg, &dir);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_same_files(&whole, &dir, "interrupted in round 1");

    let (dir, o) = stop("sigint", 0.5, libc::SIGINT);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    let kept = round_ends(&dir);
    assert!(kept > 0, "{stderr}");
    assert!(
        stderr.contains("interrupted by SIGINT")
            && stderr.contains(&format!("keeps {} of at most {rounds}", kept_words(kept)))
            && stderr.contains(&format!("To continue from round {}", kept + 1)),
        "{stderr}"
    );
    let o = run(&cfg, &dir);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_same_files(&whole, &dir, "interrupted by SIGINT");
}

#[test]
fn an_incomplete_run_of_another_config_is_refused_unless_forced() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 3, false);
    let dir = t.path().join("run");
    assert!(run(&cfg, &dir).status.success());
    std::fs::remove_file(dir.join("COMPLETE")).unwrap();
    let other = joule(&[
        "run",
        cfg.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--seed",
        "7",
    ]);
    let stderr = text(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds an incomplete run of another config")
            && stderr.contains("seed = 12345")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(!dir.join("COMPLETE").exists());
    let forced = joule(&[
        "run",
        cfg.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--seed",
        "7",
        "--force",
    ]);
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    assert!(dir.join("COMPLETE").exists());
}

/// What a resume cannot check is refused with the folder as it was: records in
/// a folder without the config.resolved.toml a run writes first, a damaged
/// record with complete rounds after it. Starting again (`--force`) replaces
/// the run's own files and keeps everything else in the folder.
#[test]
fn records_a_resume_cannot_check_are_kept_and_other_files_never_removed() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 4, false);
    let whole = t.path().join("whole");
    assert!(run(&cfg, &whole).status.success());
    let events = std::fs::read_to_string(whole.join("events.jsonl")).unwrap();
    let snapshot = |d: &Path| {
        let mut all = Vec::new();
        for e in walk(d) {
            all.push((e.clone(), std::fs::read(&e).unwrap()));
        }
        all
    };
    fn walk(d: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out.sort();
        out
    }

    // Another tool's folder with an events.jsonl of its own.
    let foreign = t.path().join("project");
    std::fs::create_dir_all(foreign.join("src")).unwrap();
    std::fs::write(foreign.join("events.jsonl"), "{\"some\":\"log\"}\n").unwrap();
    std::fs::write(foreign.join("src/main.rs"), "fn main() {}").unwrap();
    // An interrupted run whose config.resolved.toml went missing.
    let lost = t.path().join("lost");
    std::fs::create_dir(&lost).unwrap();
    let half: String = events
        .lines()
        .take(events.lines().count() / 2)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(lost.join("events.jsonl"), &half).unwrap();
    // An interrupted run with a damaged record in its first round.
    let damaged = t.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    std::fs::copy(
        whole.join("config.resolved.toml"),
        damaged.join("config.resolved.toml"),
    )
    .unwrap();
    let mut lines: Vec<String> = half.lines().map(String::from).collect();
    lines[3] = format!("X{}", lines[3]);
    std::fs::write(damaged.join("events.jsonl"), lines.join("\n") + "\n").unwrap();
    for (dir, says) in [
        (&foreign, "is not a run folder"),
        (&lost, "not the config.resolved.toml"),
        (&damaged, "line 4 is not a JSON record"),
    ] {
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let before = snapshot(dir);
        let o = run(&cfg, dir);
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {stderr}", dir.display());
        assert!(stderr.contains(says), "{}: {stderr}", dir.display());
        assert!(snapshot(dir) == before, "{} changed", dir.display());
    }
    // Started again on purpose: the run's files replaced, the notes kept.
    let o = joule(&[
        "run",
        cfg.to_str().unwrap(),
        "--out",
        damaged.to_str().unwrap(),
        "--force",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(damaged.join("notes.txt")).unwrap(),
        "mine"
    );
    std::fs::remove_file(damaged.join("notes.txt")).unwrap();
    assert_same_files(&whole, &damaged, "started again");
}

/// The thread count says how a run is computed, not what: a run interrupted
/// on two threads resumes on one (and again on two) to the records of an
/// uninterrupted run, its `config.resolved.toml` saying the count each start
/// used; a run that differs in a value that counts is still refused, the
/// error naming that value, not the thread count.
#[test]
fn a_run_resumed_with_another_thread_count_keeps_its_rounds() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 4, false);
    let at = |out: &Path, threads: &str, extra: &[&str]| {
        let mut a = vec![
            "run",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--threads",
            threads,
        ];
        a.extend_from_slice(extra);
        joule(&a)
    };
    let whole = t.path().join("whole");
    let o = at(&whole, "2", &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(round_ends(&whole) >= 3, "{} rounds", round_ends(&whole));
    let events = std::fs::read(whole.join("events.jsonl")).unwrap();
    let config2 = std::fs::read_to_string(whole.join("config.resolved.toml")).unwrap();
    assert!(config2.contains("\nthreads = 2\n"), "{config2}");
    // The first `round_end` line and everything before it: round 1 complete.
    let cut_after = |round: usize| {
        let mut seen = 0;
        let mut at = 0;
        for line in events.split_inclusive(|&b| b == b'\n') {
            at += line.len();
            if line.starts_with(b"{\"event\":\"round_end\"") {
                seen += 1;
                if seen == round {
                    return at;
                }
            }
        }
        panic!("no round {round}")
    };
    let dir = t.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("config.resolved.toml"), &config2).unwrap();
    std::fs::write(dir.join("events.jsonl"), &events[..cut_after(1) + 5]).unwrap();

    // Another seed and another thread count: refused, naming the seed.
    let o = at(&dir, "1", &["--seed", "7"]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("seed = 12345"), "{stderr}");
    assert!(!stderr.contains("threads"), "{stderr}");

    // Another thread count only: resumed.
    let o = at(&dir, "1", &[]);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("round 1 kept")
            && stderr.contains("llm.threads = 1 (the rounds before ran with 2)"),
        "{stderr}"
    );
    let config1 = config2.replace("\nthreads = 2\n", "\nthreads = 1\n");
    let said = "# resumed after round 1: llm.threads = 1 (the rounds before ran with 2)\n";
    assert_eq!(
        std::fs::read_to_string(dir.join("config.resolved.toml")).unwrap(),
        format!("{said}{config1}")
    );
    assert_same_records(&whole, &dir);

    // Interrupted again after round 2 and resumed on two threads: both starts said.
    std::fs::remove_file(dir.join("COMPLETE")).unwrap();
    std::fs::write(dir.join("events.jsonl"), &events[..cut_after(2)]).unwrap();
    let o = at(&dir, "2", &[]);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("config.resolved.toml")).unwrap(),
        format!(
            "{said}# resumed after rounds 1-2: llm.threads = 2 (the rounds before ran with 1)\n{config2}"
        )
    );
    assert_same_records(&whole, &dir);
}

/// A run folder written by an earlier build that did not record some fields
/// of this build's config resumes: the fields take their defaults (what the
/// earlier build did), the note and `config.resolved.toml` name them, and
/// the records are those of an uninterrupted run. A recorded value that is
/// not the default, once missing, still makes another config.
#[test]
fn a_run_recorded_by_an_earlier_build_without_newer_fields_resumes() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 3, false);
    let whole = t.path().join("whole");
    let o = run(&cfg, &whole);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(round_ends(&whole) >= 2, "{} rounds", round_ends(&whole));
    let config = std::fs::read_to_string(whole.join("config.resolved.toml")).unwrap();
    let events = std::fs::read(whole.join("events.jsonl")).unwrap();
    let first_round = {
        let at = events
            .windows(20)
            .position(|w| w == b"{\"event\":\"round_end\"")
            .expect("a round_end event");
        at + events[at..].iter().position(|&b| b == b'\n').unwrap() + 1
    };
    // As an earlier build would have written it: without three fields that
    // are at their defaults here.
    let dropped = [
        "idle_fee = 10.0\n",
        "kv_cache = \"f32\"\n",
        "prefix_cache_mib = 2048\n",
    ];
    let mut earlier = config.clone();
    for line in dropped {
        assert!(earlier.contains(line), "{line} in {config}");
        earlier = earlier.replacen(line, "", 1);
    }
    let folder = |name: &str, recorded: &str| {
        let dir = t.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("config.resolved.toml"), recorded).unwrap();
        std::fs::write(dir.join("events.jsonl"), &events[..first_round]).unwrap();
        dir
    };

    let dir = folder("earlier", &earlier);
    let o = run(&cfg, &dir);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let said = "idle_fee, llm.kv_cache, llm.prefix_cache_mib at their defaults (the build that \
                started the run did not record them)";
    assert!(
        stderr.contains("round 1 kept") && stderr.contains(said),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("config.resolved.toml")).unwrap(),
        format!("# resumed after round 1: {said}\n{config}")
    );
    assert_same_records(&whole, &dir);

    // A missing value that is not the default (30 rounds) is another run.
    let dir = folder("other", &config.replacen("max_rounds = 3\n", "", 1));
    let o = run(&cfg, &dir);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds an incomplete run of another config"),
        "{stderr}"
    );
    assert!(!dir.join("COMPLETE").exists());
}

/// `joule ARGS` with standard output and error closed by the reader
/// before it writes anything (`joule … 2>&1 | head -0`).
fn with_closed_pipes(args: &[&str]) -> std::process::ExitStatus {
    let mut child = Command::new(JOULE)
        .args(args)
        .env("JOULE_PROGRESS", "plain")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    child.wait().unwrap()
}

#[test]
fn a_closed_stdout_or_stderr_never_stops_a_run_or_a_sweep() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 3, false);
    let dir = t.path().join("run");
    let status = with_closed_pipes(&["run", cfg.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert!(status.success(), "{status}");
    assert!(dir.join("COMPLETE").is_file());
    let whole = t.path().join("whole");
    assert!(run(&cfg, &whole).status.success());
    assert_same_files(&whole, &dir, "closed pipes");

    let sweep = t.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        format!(
            "seeds = [1, 2]\nconfigs = [\"{}\"]\n",
            cfg.file_name().unwrap().to_str().unwrap()
        ),
    )
    .unwrap();
    let out = t.path().join("sweep");
    let status = with_closed_pipes(&[
        "sweep",
        sweep.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(status.success(), "{status}");
    let cfg_name = cfg.file_stem().unwrap().to_str().unwrap();
    for seed in [1, 2] {
        assert!(out
            .join(cfg_name)
            .join(format!("seed_{seed}"))
            .join("COMPLETE")
            .is_file());
    }
}

/// `"latency_ms":<number>` (wall-clock time, the one value of a model-backed
/// run's files that differs between two runs) set to 0.
fn without_latency(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let key = "\"latency_ms\":";
    let mut out = String::new();
    let mut rest: &str = &s;
    while let Some(i) = rest.find(key) {
        out.push_str(&rest[..i + key.len()]);
        out.push('0');
        rest = rest[i + key.len()..].trim_start_matches(|c: char| {
            c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+' | ' ')
        });
    }
    out.push_str(rest);
    out
}

#[test]
fn a_model_backed_run_interrupted_after_a_round_resumes_to_the_same_files() {
    let Some(model) = default_model::cached() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("smollm2.toml");
    let rounds = 2;
    std::fs::write(
        &cfg,
        default_model::one_round_society("resume-smollm2", &model)
            .replace("max_rounds = 1", &format!("max_rounds = {rounds}")),
    )
    .unwrap();
    let args = |out: &Path| {
        [
            "run",
            cfg.to_str().unwrap(),
            "--meter",
            "none",
            "--threads",
            "2",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(str::to_string)
    };
    let whole = t.path().join("whole");
    let o = joule(&args(&whole).each_ref().map(String::as_str));
    assert!(o.status.success(), "{}", text(&o.stderr));
    if round_ends(&whole) < 2 {
        // Every agent was out before round 2: nothing to interrupt.
        return;
    }
    let dir = t.path().join("interrupted");
    let child = Command::new(JOULE)
        .args(args(&dir))
        .env("JOULE_PROGRESS", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    while round_ends(&dir) < 1 {
        assert!(Instant::now() < deadline, "no round 1");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: sends a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    // Round 2's call takes seconds on this model: the signal comes first.
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted by SIGINT"), "{stderr}");
    // Resumed on one thread: the model's answers do not depend on the count.
    let mut resume = args(&dir);
    resume[5] = "1".to_string();
    let o = joule(&resume.each_ref().map(String::as_str));
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("round 1 kept (replayed from events.jsonl)")
            && stderr.contains("llm.threads = 1 (the rounds before ran with 2)"),
        "{stderr}"
    );
    let (mut a, mut b) = (files(&whole), files(&dir));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let config = |f: &mut BTreeMap<String, Vec<u8>>| {
        text(&f.remove("config.resolved.toml").unwrap_or_default())
    };
    let (was, now) = (config(&mut a), config(&mut b));
    // meter.json holds a record per session: one for the whole run, two for
    // the interrupted one (the interrupt recorded its session's).
    let sessions = |f: &mut BTreeMap<String, Vec<u8>>| {
        let v: serde_json::Value =
            serde_json::from_slice(&f.remove("meter.json").unwrap()).unwrap();
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["from_round"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(sessions(&mut a), [1]);
    assert_eq!(sessions(&mut b), [1, 2]);
    assert_eq!(
        now,
        format!(
            "# resumed after round 1: llm.threads = 1 (the rounds before ran with 2), kernels.threads = 1 (the rounds before ran with 2)\n{}",
            was.replace("\nthreads = 2\n", "\nthreads = 1\n")
        )
    );
    for (name, bytes) in &a {
        assert_eq!(without_latency(bytes), without_latency(&b[name]), "{name}");
    }
    // Two sessions, the second from round 2, on the same file with another thread count.
    let p = joule::provenance::Provenance::read(&dir).unwrap().unwrap();
    assert_eq!(from_rounds(&dir), [1, 2]);
    assert_eq!(p.sessions[0].models, p.sessions[1].models);
    assert_eq!(p.sessions[0].machine.threads, Some(2));
    assert_eq!(p.sessions[1].machine.threads, Some(1));
    assert!(p.sessions[1].models.iter().all(|o| o.sha256.is_some()));
}

#[test]
fn the_round_a_stopped_server_spoiled_is_not_kept() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 4, false);
    let whole = t.path().join("whole");
    assert!(run(&cfg, &whole).status.success());
    // What a run whose server stopped answering in round 3 leaves: round
    // 3 recorded (its calls failed), then `stopped`.
    let events = std::fs::read_to_string(whole.join("events.jsonl")).unwrap();
    let mut kept = String::new();
    let mut ends = 0;
    for line in events.lines() {
        kept += line;
        kept += "\n";
        if line.starts_with("{\"event\":\"round_end\"") {
            ends += 1;
            if ends == 3 {
                break;
            }
        }
    }
    kept += "{\"event\":\"stopped\",\"round\":3,\"reason\":\"the server stopped answering\"}\n";
    let dir = t.path().join("stopped");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(
        whole.join("config.resolved.toml"),
        dir.join("config.resolved.toml"),
    )
    .unwrap();
    std::fs::write(dir.join("events.jsonl"), kept).unwrap();
    let o = run(&cfg, &dir);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("rounds 1-2 kept"), "{stderr}");
    assert_same_files(&whole, &dir, "stopped in round 3");
}

#[test]
fn an_interrupted_sweep_says_so_and_resumes_its_cells_to_the_same_files() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 300, true);
    let name = cfg.file_stem().unwrap().to_str().unwrap().to_string();
    let sweep = t.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        format!("seeds = [1, 2]\nconfigs = [\"{name}.toml\"]\n"),
    )
    .unwrap();
    let sweep_args = |out: &Path| {
        [
            "sweep".to_string(),
            sweep.display().to_string(),
            "--out".to_string(),
            out.display().to_string(),
        ]
    };
    let whole = t.path().join("whole");
    let o = joule(&sweep_args(&whole).each_ref().map(String::as_str));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let cell = |out: &Path, seed: u32| out.join(&name).join(format!("seed_{seed}"));
    let size = std::fs::metadata(cell(&whole, 1).join("events.jsonl"))
        .unwrap()
        .len();

    let out = t.path().join("interrupted");
    let child = Command::new(JOULE)
        .args(sweep_args(&out))
        .env("JOULE_PROGRESS", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let events = cell(&out, 1).join("events.jsonl");
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::metadata(&events).map(|m| m.len()).unwrap_or(0) < size / 2 {
        assert!(
            Instant::now() < deadline,
            "the first cell did not get half way"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let pid = child.id() as i32;
    // SAFETY: signals to the child this test started.
    unsafe {
        libc::kill(pid, libc::SIGSTOP);
        libc::kill(pid, libc::SIGINT);
        libc::kill(pid, libc::SIGCONT);
    }
    let o = child.wait_with_output().unwrap();
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted by SIGINT (Ctrl-C): 0 of 2 cells are complete")
            && stderr.contains("To continue, run `joule sweep "),
        "{stderr}"
    );
    assert!(!cell(&out, 1).join("COMPLETE").exists());
    assert!(!cell(&out, 2).exists(), "no cell starts after the signal");

    let o = joule(&sweep_args(&out).each_ref().map(String::as_str));
    assert!(o.status.success(), "{}", text(&o.stderr));
    for seed in [1, 2] {
        assert_same_files(
            &cell(&whole, seed),
            &cell(&out, seed),
            &format!("seed {seed}"),
        );
    }
    // The interrupted cell says it was resumed, and from which round; the other ran once.
    let resumed = from_rounds(&cell(&out, 1));
    assert!(
        resumed.len() == 2 && resumed[0] == 1 && resumed[1] > 1,
        "{resumed:?}"
    );
    assert_eq!(from_rounds(&cell(&out, 2)), [1]);
}
