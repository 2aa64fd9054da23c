//! The worker threads are a setting: `joule run --threads N` (and `[llm]
//! threads` in the config) choose them, the resolved config records the
//! count, and a bad value is one error naming the flag or field. Also: the
//! resolved config keeps values as written (`temperature = 0.7`, not the f32
//! widened to 0.699999988079071). The built binary on the scripted baseline.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn joule(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(JOULE);
    c.args(args)
        .stdin(Stdio::null())
        .env("JOULE_PROGRESS", "off");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("running joule")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The scripted competitive baseline, 2 rounds, with `extra` appended, written to `dir/name`.
fn config(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let base = std::fs::read_to_string(root().join("configs/energy-society/baseline-comp.toml"))
        .unwrap()
        .replace("max_rounds = 30", "max_rounds = 2");
    assert!(
        !base.contains("\n[llm]"),
        "the baseline has no [llm] section to clash with"
    );
    let path = dir.join(name);
    std::fs::write(&path, format!("{base}\n{extra}")).unwrap();
    path
}

fn resolved(run: &Path) -> String {
    std::fs::read_to_string(run.join("config.resolved.toml")).expect("config.resolved.toml")
}

/// The `threads = N` line of the `[llm]` table of a resolved config.
fn llm_threads(resolved: &str) -> Option<String> {
    let llm = resolved.split("\n[llm]\n").nth(1)?;
    let table = llm.split("\n[").next()?;
    table
        .lines()
        .find(|l| l.starts_with("threads = "))
        .map(|l| l["threads = ".len()..].to_string())
}

#[test]
fn run_threads_flag_is_recorded_and_overrides_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "c.toml", "[llm]\nthreads = 2\n");
    let out = dir.path().join("run");
    let o = joule(
        &[
            "run",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--threads",
            "1",
        ],
        &[],
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    let r = resolved(&out);
    assert_eq!(llm_threads(&r).as_deref(), Some("1"), "{r}");
    // Values as written: the f32 temperature 0.7 is not widened.
    assert!(r.contains("\ntemperature = 0.7\n"), "{r}");
    assert!(!r.contains("0.69999"), "{r}");
}

#[test]
fn run_threads_from_the_config_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "c.toml", "[llm]\nthreads = 1\n");
    let out = dir.path().join("from-config");
    let o = joule(
        &["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()],
        &[("RAYON_NUM_THREADS", "3")],
    );
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(llm_threads(&resolved(&out)).as_deref(), Some("1"));

    // Neither flag nor config: RAYON_NUM_THREADS, as before.
    let plain = config(dir.path(), "plain.toml", "");
    let out = dir.path().join("from-env");
    let o = joule(
        &[
            "run",
            plain.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[("RAYON_NUM_THREADS", "1")],
    );
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(llm_threads(&resolved(&out)).as_deref(), Some("1"));
}

#[test]
fn bad_thread_counts_name_the_flag_or_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let plain = config(dir.path(), "plain.toml", "");
    for bad in ["0", "abc"] {
        let out = dir.path().join(format!("flag-{bad}"));
        let o = joule(
            &[
                "run",
                plain.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--threads",
                bad,
            ],
            &[],
        );
        let (_, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(2), "--threads {bad}: {stderr}");
        assert!(stderr.contains("--threads"), "--threads {bad}: {stderr}");
        assert!(stderr.contains("at least 1"), "--threads {bad}: {stderr}");
        assert!(!out.exists(), "nothing is written for --threads {bad}");
    }
    for (bad, says) in [("0", "at least 1"), ("\"abc\"", "abc")] {
        let cfg = config(dir.path(), "bad.toml", &format!("[llm]\nthreads = {bad}\n"));
        let out = dir.path().join("cfg");
        let o = joule(
            &["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()],
            &[],
        );
        let (_, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(2), "threads = {bad}: {stderr}");
        assert!(stderr.contains("threads"), "threads = {bad}: {stderr}");
        assert!(stderr.contains(says), "threads = {bad}: {stderr}");
        assert!(!out.exists(), "nothing is written for threads = {bad}");
    }
}

#[test]
fn race_run_takes_threads_and_prints_its_folder_last() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("race");
    let cfg = root().join("configs/ai-race/baseline-scripted.toml");
    let o = joule(
        &[
            "race",
            "run",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--threads",
            "1",
        ],
        &[],
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().last(),
        Some(format!("run folder: {}", out.display()).as_str()),
        "{stdout}"
    );
}

#[test]
fn replay_of_a_folder_without_runs_says_what_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    let o = joule(&["replay", dir.path().to_str().unwrap()], &[]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pass a reference run folder"), "{stderr}");
}

/// The subcommands a `--help` lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:\n")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .take_while(|l| !l.trim().is_empty())
                .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| *c != "help")
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Options and arguments of a `--help` that have no description.
fn undescribed(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        if !(2..=6).contains(&indent)
            || !(t.starts_with('-') || t.starts_with('<') || t.starts_with('['))
        {
            continue;
        }
        // The flag and its value name, then (after two spaces) the description.
        let rest = t.split_once("  ").map_or("", |(_, r)| r.trim());
        let described =
            !(rest.is_empty() || rest.starts_with("[default") || rest.starts_with("[possible"));
        let next_is_text = lines
            .get(i + 1)
            .is_some_and(|n| n.starts_with("          ") && !n.trim().is_empty());
        if !described && !next_is_text {
            out.push(t.to_string());
        }
    }
    out
}

#[test]
fn every_command_is_listed_described_and_has_an_example() {
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    let mut seen = 0;
    let mut problems = Vec::new();
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let o = joule(&args, &[]);
        let (help, stderr) = text(&o);
        assert!(o.status.success(), "{args:?}: {stderr}");
        seen += 1;
        if !help.contains("Example") {
            problems.push(format!("joule {}: no example", path.join(" ")));
        }
        for u in undescribed(&help) {
            problems.push(format!(
                "joule {}: `{u}` has no description",
                path.join(" ")
            ));
        }
        for sub in subcommands(&help) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
    }
    assert!(seen > 30, "{seen} commands seen");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Why a run may resume on another thread count (`energy_society::resume::HOW_KEYS`):
/// the logits of every roster architecture's fixture (quantised, and two in f32), a prompt in one pass and
/// then tokens one at a time, are the same bytes on 1, 2 and 3 threads.
#[test]
fn logits_do_not_depend_on_the_thread_count() {
    let t = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..48)
        .map(|i| ((i * 37 + 11) % 97 + 3).to_string())
        .collect();
    let ids = ids.join(" ");
    for arch in [
        "qwen3.q8_0",
        "qwen35.q8_0",
        "gemma4.q8_0",
        "nemotron_h.q8_0",
        "qwen3.f32",
        "nemotron_h.f32",
    ] {
        let gguf = root().join(format!("tests/fixtures/roster/{arch}.gguf"));
        let mut outs = Vec::new();
        for threads in ["1", "2", "3"] {
            let out = t.path().join(format!("{arch}-{threads}.npy"));
            let o = joule(
                &[
                    "logits",
                    "--gguf",
                    gguf.to_str().unwrap(),
                    "--ids",
                    &ids,
                    "--prefill",
                    "40",
                    "--threads",
                    threads,
                    "--out",
                    out.to_str().unwrap(),
                ],
                &[],
            );
            assert!(o.status.success(), "{arch} on {threads}: {}", text(&o).1);
            outs.push(std::fs::read(&out).unwrap());
        }
        assert!(outs[0].len() > 1000, "{arch}: {} bytes", outs[0].len());
        assert!(
            outs[0] == outs[1] && outs[1] == outs[2],
            "{arch}: logits differ by thread count"
        );
    }
}
