//! Progress goes to standard error, never elsewhere: `joule run` and `joule
//! sweep` with standard error piped (not a terminal, as in CI or a Slurm log)
//! print one plain line per round or cell there, while standard output and
//! every file they write are byte for byte what they are with progress off
//! (`JOULE_PROGRESS=off`). Every count on a line says its scope (`this
//! round`, `in all`), and the last line says when all was done, never a
//! time left of `0ms`. A model-backed run on the default model
//! (SmolLM2-135M) also says when its model starts and ends loading.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use crate::default_model;

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

/// Run `joule args` with standard output and error piped; `progress` is
/// `JOULE_PROGRESS` (unset: the default, plain lines off a terminal).
fn joule(args: &[&str], progress: Option<&str>) -> Output {
    let mut c = Command::new(JOULE);
    c.args(args).env_remove("JOULE_PROGRESS");
    if let Some(p) = progress {
        c.env("JOULE_PROGRESS", p);
    }
    let out = c.output().expect("run joule");
    assert!(
        out.status.success(),
        "joule {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// Every file under `dir`, by its path relative to `dir`, without the runs' `provenance.json`
/// (when and by which command each was played: not one of their records).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.file_name().is_some_and(|n| n == joule::provenance::FILE) {
                continue;
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    assert!(!out.is_empty(), "{} holds no files", dir.display());
    out
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

/// The stderr lines that start with `prefix`, but for the lines a long
/// round prints while it is under way.
fn lines_starting<'a>(stderr: &'a str, prefix: &str) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|l| l.starts_with(prefix) && !l.contains(" under way: "))
        .collect()
}

/// The config of the paper's baseline (scripted agents) at `rounds` rounds.
fn baseline(dir: &Path, rounds: u32) -> std::path::PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/energy-society/baseline-comp.toml");
    let text = std::fs::read_to_string(src).unwrap();
    assert!(text.contains("max_rounds = 30"));
    let path = dir.join("baseline-comp.toml");
    std::fs::write(
        &path,
        text.replace("max_rounds = 30", &format!("max_rounds = {rounds}")),
    )
    .unwrap();
    path
}

#[test]
fn a_scripted_run_prints_a_line_per_round_on_stderr_only() {
    let t = tempfile::tempdir().unwrap();
    let cfg = baseline(t.path(), 3);
    let cfg = cfg.to_str().unwrap();
    let (on, off) = (t.path().join("on"), t.path().join("off"));
    let shown = joule(&["run", cfg, "--out", on.to_str().unwrap()], None);
    let quiet = joule(&["run", cfg, "--out", off.to_str().unwrap()], Some("off"));

    let stdout = text(&shown.stdout);
    let played: u32 = stdout
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `N rounds played` in:\n{stdout}"));
    assert!((1..=3).contains(&played), "{stdout}");
    let stderr = text(&shown.stderr);
    let rounds = lines_starting(&stderr, "round ");
    assert_eq!(rounds.len(), played as usize, "{stderr}");
    for (i, l) in rounds.iter().enumerate() {
        // Scripted agents call no model: the line says the round's time.
        assert!(l.starts_with(&format!("round {}/3: ", i + 1)), "{l}");
        assert!(!l.contains(" calls"), "{l}");
        // Never a time left of nothing while rounds remain.
        assert!(!l.contains("eta 0ms"), "{l}");
        if i + 1 < 3 {
            assert!(l.contains("; eta "), "{l}");
        }
    }
    assert!(
        rounds[played as usize - 1].contains("; all done in ") || played < 3,
        "{stderr}"
    );

    // Off: nothing on stderr; stdout and every file the same.
    assert_eq!(text(&quiet.stderr), "");
    assert_eq!(
        stdout.replace(on.to_str().unwrap(), "RUN"),
        text(&quiet.stdout).replace(off.to_str().unwrap(), "RUN")
    );
    assert_eq!(files(&on), files(&off));
}

#[test]
fn a_scripted_sweep_prints_a_line_per_cell_on_stderr_only() {
    let t = tempfile::tempdir().unwrap();
    baseline(t.path(), 2);
    let sweep = t.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        "seeds = [1, 2, 3]\nconfigs = [\"baseline-comp.toml\"]\n",
    )
    .unwrap();
    let sweep = sweep.to_str().unwrap();
    let (on, off) = (t.path().join("on"), t.path().join("off"));
    let args = |out: &Path| {
        [
            "sweep",
            sweep,
            "--jobs",
            "2",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(str::to_string)
        .to_vec()
    };
    let a = args(&on);
    let shown = joule(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        Some("plain"),
    );
    let b = args(&off);
    let quiet = joule(
        &b.iter().map(String::as_str).collect::<Vec<_>>(),
        Some("off"),
    );

    let stderr = text(&shown.stderr);
    let cells = lines_starting(&stderr, "cell ");
    assert_eq!(cells.len(), 3, "{stderr}");
    for (i, l) in cells.iter().enumerate() {
        assert!(l.starts_with(&format!("cell {}/3 (", i + 1)), "{l}");
        assert!(l.contains("baseline-comp"), "{l}");
        assert!(l.contains(" running, ") && l.contains(" pending; "), "{l}");
        assert!(!l.contains("eta 0ms"), "{l}");
    }
    assert!(
        cells[2].contains("; 0 running, 0 pending; all done in "),
        "{stderr}"
    );

    assert_eq!(text(&quiet.stderr), "");
    let stdout = text(&shown.stdout);
    assert!(
        stdout.contains("3 cell(s) run, 0 already complete"),
        "{stdout}"
    );
    assert_eq!(stdout, text(&quiet.stdout));
    assert_eq!(files(&on), files(&off));
}

#[test]
fn a_model_backed_run_says_it_loads_the_model_and_each_round() {
    let Some(model) = default_model::cached() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("smollm2.toml");
    std::fs::write(
        &cfg,
        default_model::one_round_society("progress-smollm2", &model),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let (on, off) = (t.path().join("on"), t.path().join("off"));
    let run = |out: &Path, progress| {
        joule(
            &[
                "run",
                cfg,
                "--meter",
                "none",
                "--out",
                out.to_str().unwrap(),
            ],
            progress,
        )
    };
    let shown = run(&on, None);
    let quiet = run(&off, Some("off"));

    let stderr = text(&shown.stderr);
    let loading = format!("loading model stand-in:{}", model.display());
    assert!(
        stderr.lines().any(|l| l == format!("{loading} ...")),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with(&format!("{loading}: done in "))),
        "{stderr}"
    );
    let rounds = lines_starting(&stderr, "round ");
    assert_eq!(rounds.len(), 1, "{stderr}");
    let l = rounds[0];
    assert!(l.starts_with("round 1/1: this round "), "{l}");
    assert!(l.contains(" tok/s; all done in "), "{l}");
    // At least the model agent's decision (scripted agents' calls are not counted).
    let calls: u64 = l["round 1/1: this round ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no call count in {l}"));
    assert!(calls >= 1, "{l}");
    // One round: this round's counts are every count.
    let this = &l["round 1/1: this round ".len()..l.find("; in all ").unwrap()];
    let all = &l[l.find("; in all ").unwrap() + "; in all ".len()..l.find("; all done").unwrap()];
    let counts = |t: &str| {
        t.split(", ")
            .take(2)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(counts(this), counts(all), "{l}");

    // Off: no progress (a memory-plan warning may still be there).
    let quiet_err = text(&quiet.stderr);
    assert!(
        lines_starting(&quiet_err, "round ").is_empty()
            && lines_starting(&quiet_err, "loading model").is_empty(),
        "{quiet_err}"
    );
    let stdout = text(&shown.stdout);
    assert!(stdout.starts_with("1 rounds played\n"), "{stdout}");
    assert_eq!(
        stdout.replace(on.to_str().unwrap(), "RUN"),
        text(&quiet.stdout).replace(off.to_str().unwrap(), "RUN")
    );
    let (a, b) = (files(&on), files(&off));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        assert_eq!(without_latency(bytes), without_latency(&b[name]), "{name}");
    }
}
