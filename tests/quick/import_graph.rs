//! The import graph of `src/` keeps ARCHITECTURE.md's two rules: no cycle between files, and
//! imports between folders follow the declared layer order. `scripts/import_cycles.py` checks
//! both; this test runs it and fails with its report.

use std::process::Command;

#[test]
fn no_import_cycle_and_folders_import_downward() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = match Command::new("python3")
        .arg(format!("{root}/scripts/import_cycles.py"))
        .arg(root)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("python3 scripts/import_cycles.py did not start: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "scripts/import_cycles.py found imports against ARCHITECTURE.md's rules \
         (exit status {:?}):\n{text}",
        out.status.code()
    );
}

/// Every file or folder ARCHITECTURE.md names in backticks (`src/record.rs`, `society/round.rs`,
/// `x86/`) exists: as a path from the repository's root, or as the end of a path in it.
#[test]
fn architecture_names_only_paths_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("reading ARCHITECTURE.md");
    let mut known = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = e.expect("a folder entry").path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel.starts_with("target") || rel.starts_with(".git") {
                continue;
            }
            if path.is_dir() {
                known.push(format!("{rel}/"));
                stack.push(path);
            } else {
                known.push(rel);
            }
        }
    }
    let is_path = |t: &str| {
        !t.is_empty()
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
            && (t.contains('/') || t.ends_with(".rs") || t.ends_with(".py") || t.ends_with(".sh"))
    };
    let missing: Vec<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| is_path(t) && !t.starts_with("../"))
        .filter(|t| {
            let dir = format!("{}/", t.trim_end_matches('/'));
            !known.iter().any(|k| {
                k == t
                    || *k == dir
                    || k.ends_with(&format!("/{t}"))
                    || k.ends_with(&format!("/{dir}"))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}
