//! Sweep resume: run a small sweep, delete one cell's completion marker,
//! run again: only that cell reruns, and it reproduces the same records.

use std::path::Path;

use joule::energy_society::config::SocietyConfig;
use joule::energy_society::job::{Difficulty, Job, JobSource};
use joule::energy_society::listed_jobs::ListedJobs;
use joule::sweep::{cells, run_cells};

/// Jobs that depend on the seed, so cells differ.
fn jobs(cfg: &SocietyConfig) -> anyhow::Result<Box<dyn JobSource>> {
    let rounds = (0..cfg.max_rounds as usize)
        .map(|r| {
            (0..6)
                .map(|i| {
                    let d = Difficulty::ALL[(i + r + cfg.seed as usize) % 3];
                    Job {
                        id: format!("job_{i}"),
                        question_id: i as i64,
                        category: "math".into(),
                        difficulty: d,
                        reward: d.reward(),
                        description: format!("question {i}"),
                        options: (0..4).map(|k| format!("option {k}")).collect(),
                        answer_index: (i + r) % 4,
                    }
                })
                .collect()
        })
        .collect();
    Ok(Box::new(ListedJobs::new(rounds, "test")))
}

#[test]
fn an_interrupted_cell_is_the_only_one_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = small_sweep(
        dir.path(),
        &["baseline-comp.toml", "scarcity-coop.toml"],
        "[1, 2]",
    );
    let out = dir.path().join("o");
    let c = cells(&sweep, Some(&out)).unwrap();
    assert_eq!(c.len(), 4);
    assert_eq!(run_cells(c, 2, true, &jobs).unwrap(), (4, 0));
    let cell = out.join("baseline-comp").join("seed_2");
    let before = std::fs::read_to_string(cell.join("events.jsonl")).unwrap();
    let other = out
        .join("scarcity-coop")
        .join("seed_1")
        .join("events.jsonl");
    let other_mtime = std::fs::metadata(&other).unwrap().modified().unwrap();
    std::fs::remove_file(cell.join("COMPLETE")).unwrap();
    assert_eq!(
        run_cells(cells(&sweep, Some(&out)).unwrap(), 2, true, &jobs).unwrap(),
        (1, 3)
    );
    assert_eq!(
        std::fs::read_to_string(cell.join("events.jsonl")).unwrap(),
        before
    );
    assert_eq!(
        std::fs::metadata(&other).unwrap().modified().unwrap(),
        other_mtime
    );
    assert_eq!(
        run_cells(cells(&sweep, Some(&out)).unwrap(), 2, true, &jobs).unwrap(),
        (0, 4)
    );
}

/// A sweep file and three-round copies of `names` from configs/energy-society in `dir`
/// (`sub/NAME` entries are written under `sub/`).
fn small_sweep(dir: &Path, names: &[&str], seeds: &str) -> std::path::PathBuf {
    let cfgs = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/energy-society");
    for name in names {
        let base = Path::new(name).file_name().unwrap();
        let text = std::fs::read_to_string(cfgs.join(base)).unwrap();
        let to = dir.join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text.replace("max_rounds = 30", "max_rounds = 3")).unwrap();
    }
    let list: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    let sweep = dir.join("sweep.toml");
    std::fs::write(
        &sweep,
        format!("seeds = {seeds}\nconfigs = [{}]\n", list.join(", ")),
    )
    .unwrap();
    sweep
}

#[test]
fn sweeps_whose_cells_would_share_a_folder_or_that_have_none_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = small_sweep(
        dir.path(),
        &["a/baseline-comp.toml", "b/baseline-comp.toml"],
        "[1]",
    );
    let e = cells(&sweep, Some(&dir.path().join("o"))).unwrap_err();
    let s = format!("{e:#}");
    assert!(
        s.contains("a/baseline-comp.toml")
            && s.contains("b/baseline-comp.toml")
            && s.contains("share"),
        "{s}"
    );
    assert!(!dir.path().join("o").exists());
    let sweep = small_sweep(dir.path(), &["baseline-comp.toml"], "[1, 2, 1]");
    let s = format!(
        "{:#}",
        cells(&sweep, Some(&dir.path().join("o"))).unwrap_err()
    );
    assert!(s.contains("seed 1 is listed twice"), "{s}");
    for (configs, seeds, key) in [
        (&[][..], "[1]", "key configs"),
        (&["baseline-comp.toml"][..], "[]", "key seeds"),
    ] {
        let sweep = small_sweep(dir.path(), configs, seeds);
        let s = format!(
            "{:#}",
            cells(&sweep, Some(&dir.path().join("o"))).unwrap_err()
        );
        assert!(s.contains(key) && s.contains("no cells"), "{s}");
    }
}

#[test]
fn a_cell_whose_records_cannot_be_read_is_reported_not_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = small_sweep(dir.path(), &["baseline-comp.toml"], "[1]");
    let out = dir.path().join("o");
    assert_eq!(
        run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &jobs).unwrap(),
        (1, 0)
    );
    let cell = out.join("baseline-comp").join("seed_1");
    std::fs::remove_file(cell.join("COMPLETE")).unwrap();
    std::fs::write(cell.join("notes.txt"), "mine").unwrap();
    // A record in the middle that is not JSON: the rounds after it cannot be checked.
    let events = std::fs::read_to_string(cell.join("events.jsonl")).unwrap();
    let mut lines: Vec<&str> = events.lines().collect();
    lines[5] = "X{";
    let damaged = lines.join("\n") + "\n";
    std::fs::write(cell.join("events.jsonl"), &damaged).unwrap();
    assert!(run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &jobs).is_err());
    assert_eq!(
        std::fs::read_to_string(cell.join("events.jsonl")).unwrap(),
        damaged
    );
    assert!(cell.join("notes.txt").is_file());
    // A config file that is not TOML any more: likewise.
    std::fs::write(cell.join("events.jsonl"), &events).unwrap();
    std::fs::write(cell.join("config.resolved.toml"), "name = = 3\n").unwrap();
    assert!(run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &jobs).is_err());
    assert_eq!(
        std::fs::read_to_string(cell.join("events.jsonl")).unwrap(),
        events
    );
}

/// A folder another process is writing (held with `FolderLock`, as a running
/// `joule run` or sweep cell holds it) is refused by a sweep cell and by
/// `joule run`, with nothing read or written there; once let go it runs.
#[test]
fn a_folder_another_process_is_writing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = small_sweep(dir.path(), &["baseline-comp.toml"], "[1]");
    let out = dir.path().join("o");
    let cell = out.join("baseline-comp").join("seed_1");
    let held = joule::record::FolderLock::acquire(&cell).unwrap();
    let e = format!(
        "{:#}",
        run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &jobs).unwrap_err()
    );
    assert!(e.contains("being written by another joule process"), "{e}");
    assert_eq!(std::fs::read_dir(&cell).unwrap().count(), 0);

    let cfg = dir.path().join("baseline-comp.toml");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
        .args([
            "run",
            cfg.to_str().unwrap(),
            "--out",
            cell.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("being written by another joule process"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&cell).unwrap().count(), 0);

    drop(held);
    assert_eq!(
        run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &jobs).unwrap(),
        (1, 0)
    );
    assert!(cell.join("COMPLETE").is_file());
}
