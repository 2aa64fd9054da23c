//! The benchmark results are data: every record in `benches/results/*.json`
//! carries the keys of the schema in benches/README.md ("Records"), and
//! benches/RESULTS.md is exactly what `scripts/bench_results.py` generates from
//! them (`python3 scripts/bench_results.py --check`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `python3 scripts/bench_results.py --check` in the tree at `dir`:
/// (exit status success, stdout + stderr).
fn check_in(dir: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .arg(dir.join("scripts/bench_results.py"))
        .arg("--check")
        .current_dir(dir)
        .output()
        .expect("running python3 scripts/bench_results.py --check (is python3 installed?)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn records() -> Vec<(PathBuf, Value)> {
    let dir = root().join("benches/results");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            (p, v)
        })
        .collect()
}

#[test]
fn every_record_has_the_required_keys() {
    let recs = records();
    assert!(!recs.is_empty(), "no records in benches/results");
    let mut problems = Vec::new();
    for (p, v) in &recs {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let mut missing = |what: String| problems.push(format!("{name}: {what}"));
        for key in [
            "schema",
            "target",
            "date",
            "machine",
            "threads",
            "commit",
            "commands",
            "model",
            "peer",
            "measurements",
            "notes",
        ] {
            if v.get(key).is_none() {
                missing(format!("missing key `{key}`"));
            }
        }
        for key in ["cpu", "cores", "flags"] {
            if v.get("machine").and_then(|m| m.get(key)).is_none() {
                missing(format!("missing key `machine.{key}`"));
            }
        }
        for key in ["name", "file", "sha256"] {
            if v.get("model").and_then(|m| m.get(key)).is_none() {
                missing(format!("missing key `model.{key}`"));
            }
        }
        match v.get("measurements").and_then(Value::as_array) {
            Some(ms) if !ms.is_empty() => {
                for (i, m) in ms.iter().enumerate() {
                    for key in ["metric", "unit", "joule", "llama_cpp", "ratio"] {
                        if m.get(key).is_none() {
                            missing(format!("missing key `measurements[{i}].{key}`"));
                        }
                    }
                }
            }
            _ => missing("`measurements` is not a non-empty list".into()),
        }
    }
    assert!(
        problems.is_empty(),
        "benchmark records without the schema's keys (benches/README.md, \"Records\"):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn results_md_is_what_the_records_generate() {
    let (ok, text) = check_in(&root());
    assert!(
        ok,
        "benches/RESULTS.md is stale or a record is invalid; run \
         `python3 scripts/bench_results.py` and commit the result:\n{text}"
    );
}

/// The check can fail: a copy of the script and records with RESULTS.md edited.
#[test]
fn the_check_fails_on_an_edited_results_md() {
    let tmp = tempfile::tempdir().expect("temporary folder");
    let t = tmp.path();
    std::fs::create_dir_all(t.join("scripts")).unwrap();
    std::fs::create_dir_all(t.join("benches/results")).unwrap();
    std::fs::copy(
        root().join("scripts/bench_results.py"),
        t.join("scripts/bench_results.py"),
    )
    .unwrap();
    for (p, _) in records() {
        std::fs::copy(&p, t.join("benches/results").join(p.file_name().unwrap())).unwrap();
    }
    let md = std::fs::read_to_string(root().join("benches/RESULTS.md")).unwrap();
    std::fs::write(t.join("benches/RESULTS.md"), &md).unwrap();
    let (ok, text) = check_in(t);
    assert!(ok, "the unedited copy should pass:\n{text}");
    std::fs::write(t.join("benches/RESULTS.md"), md.replacen("×", "x", 1)).unwrap();
    let (ok, text) = check_in(t);
    assert!(!ok, "an edited RESULTS.md passed the check");
    assert!(
        text.contains("RESULTS.md is not what the records"),
        "{text}"
    );
}
