//! Run folders that a start cut short can leave (a kill, a power cut, a full
//! disk while the first files were written or old ones removed) are started
//! again or resumed, never left so that only deleting files by hand helps;
//! a folder another process holds is refused before anything is said of
//! it; and a sweep says when a complete cell ran another version of its
//! config. Scripted agents: no model.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

fn joule(args: &[&str]) -> Output {
    Command::new(JOULE)
        .args(args)
        .stdin(Stdio::null())
        .env("JOULE_PROGRESS", "off")
        .output()
        .expect("running joule")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The scripted baseline with `rounds` rounds, written to `dir/c.toml`.
fn config(dir: &Path, rounds: u32) -> PathBuf {
    let base =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/energy-society/baseline-comp.toml");
    let text = std::fs::read_to_string(base).unwrap();
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        text.replace("max_rounds = 30", &format!("max_rounds = {rounds}")),
    )
    .unwrap();
    path
}

fn run(cfg: &Path, out: &Path, more: &[&str]) -> Output {
    let mut args = vec!["run", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend(more);
    joule(&args)
}

#[test]
fn a_folder_left_with_only_some_run_files_starts_again() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 2);
    // A replacement (--force) cut short after it removed the config: the
    // files it had not reached yet are left, with no config.
    for force in [false, true] {
        let out = t.path().join(format!("left-{force}"));
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("provenance.json"), "{}").unwrap();
        std::fs::write(out.join("transcript.json"), "[]").unwrap();
        let o = run(&cfg, &out, if force { &["--force"] } else { &[] });
        assert!(o.status.success(), "{}", text(&o));
        assert!(out.join("COMPLETE").is_file());
    }
    // A start cut short while writing its config: empty, or only its
    // temporary file.
    let out = t.path().join("empty-config");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("config.resolved.toml"), "").unwrap();
    std::fs::write(out.join("config.resolved.toml.tmp"), "").unwrap();
    let o = run(&cfg, &out, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("COMPLETE").is_file());
    assert!(!out.join("config.resolved.toml.tmp").exists());
    // A user's file still makes it not a run folder.
    let mine = t.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("transcript.json"), "[]").unwrap();
    std::fs::write(mine.join("notes.txt"), "mine").unwrap();
    let o = run(&cfg, &mine, &["--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not a run folder"), "{}", text(&o));
    assert!(mine.join("transcript.json").is_file());
}

#[test]
fn a_cut_config_with_kept_rounds_is_named_by_where_it_ends() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 2);
    let out = t.path().join("run");
    assert!(run(&cfg, &out, &[]).status.success());
    std::fs::remove_file(out.join("COMPLETE")).unwrap();
    let recorded = std::fs::read_to_string(out.join("config.resolved.toml")).unwrap();
    let first: String = recorded.lines().take(5).map(|l| format!("{l}\n")).collect();
    std::fs::write(out.join("config.resolved.toml"), &first).unwrap();
    let o = run(&cfg, &out, &[]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains("config.resolved.toml ends after line 5") && !said.contains("line 1:"),
        "{said}"
    );
    // Nothing was touched.
    assert_eq!(
        std::fs::read_to_string(out.join("config.resolved.toml")).unwrap(),
        first
    );
}

#[test]
fn a_folder_another_process_holds_is_refused_before_any_note() {
    let t = tempfile::tempdir().unwrap();
    let cfg = config(t.path(), 2);
    let out = t.path().join("run");
    assert!(run(&cfg, &out, &[]).status.success());
    std::fs::remove_file(out.join("COMPLETE")).unwrap();
    let held = joule::record::FolderLock::acquire(&out).unwrap();
    let o = run(&cfg, &out, &["--force"]);
    let said = text(&o);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(
        said.contains("being written by another joule process"),
        "{said}"
    );
    assert!(!said.contains("replacing"), "{said}");
    drop(held);
}

#[test]
fn a_sweep_says_which_complete_cells_ran_another_version_of_their_config() {
    let t = tempfile::tempdir().unwrap();
    config(t.path(), 2);
    let sweep = t.path().join("sweep.toml");
    std::fs::write(&sweep, "seeds = [1]\nconfigs = [\"c.toml\"]\n").unwrap();
    let out = t.path().join("o");
    let go = || {
        let o = joule(&[
            "sweep",
            sweep.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
        text(&o)
    };
    go();
    // The same config again: the cell is done, nothing to say.
    let said = go();
    assert!(
        said.contains("1 already complete") && !said.contains("warning"),
        "{said}"
    );
    // Another version of it: still counted done, and said.
    config(t.path(), 3);
    let said = go();
    assert!(
        said.contains("1 already complete")
            && said.contains("holds a complete run of another version of its config")
            && said.contains("max_rounds: 2 when it ran, 3 now"),
        "{said}"
    );
}
