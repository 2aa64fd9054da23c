//! The folder a report is written into (`joule report --out`, `joule view`):
//! a folder that holds files is refused unless forced, so an earlier
//! report's files never stand beside a new one's; forced, it clears only the
//! files an earlier report wrote there (listed in its [`MANIFEST`]) and
//! keeps anything else. After writing, [`OutDir::finish`] lists what this
//! report wrote, for the next one to clear.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The list of files a report wrote, relative to its folder, one per line.
pub const MANIFEST: &str = ".joule-report-files";

/// A report folder made ready for writing.
pub struct OutDir {
    dir: PathBuf,
    /// Files that were there before this report and are not its own.
    kept: BTreeSet<PathBuf>,
}

/// Every file under `dir`, relative to it (none when `dir` does not exist).
fn files(dir: &Path) -> anyhow::Result<BTreeSet<PathBuf>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) -> anyhow::Result<()> {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in entries {
            let e = e.with_context(|| format!("reading {}", dir.display()))?;
            let path = e.path();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(root, &path, out)?;
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.insert(rel.to_path_buf());
            }
        }
        Ok(())
    }
    let mut out = BTreeSet::new();
    if dir.is_dir() {
        walk(dir, dir, &mut out)?;
    }
    Ok(out)
}

/// Remove `dir` and its parents up to `root` while they are empty.
fn remove_empty_dirs(root: &Path, mut dir: &Path) {
    while dir != root && dir.starts_with(root) {
        if std::fs::remove_dir(dir).is_err() {
            break;
        }
        match dir.parent() {
            Some(p) => dir = p,
            None => break,
        }
    }
}

impl OutDir {
    /// Make `dir` ready for a report. A folder with files in it is refused
    /// unless `force`; forced, the files of the earlier report its manifest
    /// lists are removed and every other file is kept (and said so).
    pub fn prepare(dir: &Path, force: bool, flag: &str) -> anyhow::Result<OutDir> {
        if dir.exists() && !dir.is_dir() {
            anyhow::bail!("{flag} {}: not a folder", dir.display());
        }
        let before = files(dir)?;
        if before.is_empty() {
            return Ok(OutDir {
                dir: dir.to_path_buf(),
                kept: BTreeSet::new(),
            });
        }
        if !force {
            anyhow::bail!(
                "{flag} {}: the folder is not empty ({} file(s)); nothing was written. Give a new or empty folder, or add --force to replace the report written there before (only its files are removed)",
                dir.display(),
                before.len()
            );
        }
        let manifest = dir.join(MANIFEST);
        let ours: BTreeSet<PathBuf> = match std::fs::read_to_string(&manifest) {
            Ok(text) => text
                .lines()
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
                // Only plain relative paths inside the folder.
                .filter(|p| {
                    p.components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)))
                })
                .collect(),
            Err(_) => BTreeSet::new(),
        };
        for rel in &ours {
            let path = dir.join(rel);
            if path.is_file() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
                if let Some(parent) = path.parent() {
                    remove_empty_dirs(dir, parent);
                }
            }
        }
        let _ = std::fs::remove_file(&manifest);
        let kept = files(dir)?;
        if !kept.is_empty() {
            eprintln!(
                "note: {}: kept {} file(s) that no earlier report wrote here (--force removes only a report's own files)",
                dir.display(),
                kept.len()
            );
        }
        Ok(OutDir {
            dir: dir.to_path_buf(),
            kept,
        })
    }

    /// Record the files this report wrote (every file now in the folder
    /// that was not kept from before).
    pub fn finish(&self) -> anyhow::Result<()> {
        let now = files(&self.dir)?;
        let ours: Vec<String> = now
            .difference(&self.kept)
            .filter(|p| p.as_os_str() != MANIFEST)
            .map(|p| p.display().to_string())
            .collect();
        let path = self.dir.join(MANIFEST);
        std::fs::write(&path, ours.join("\n") + "\n")
            .with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_with_files_is_refused_and_forced_loses_only_the_reports_own_files() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("out");
        // A new folder, and an empty one, take a report.
        let first = OutDir::prepare(&dir, false, "--out").unwrap();
        std::fs::create_dir_all(dir.join("old-condition/aggregate")).unwrap();
        std::fs::write(dir.join("old-condition/aggregate/a.csv"), "x").unwrap();
        std::fs::write(dir.join("reproduction.md"), "old").unwrap();
        first.finish().unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let e = OutDir::prepare(&dir, false, "--out")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not empty") && e.contains("--force"), "{e}");
        let second = OutDir::prepare(&dir, true, "--out").unwrap();
        assert!(!dir.join("reproduction.md").exists());
        assert!(!dir.join("old-condition").exists());
        assert!(dir.join("notes.txt").is_file());
        std::fs::write(dir.join("report.md"), "new").unwrap();
        second.finish().unwrap();
        let listed = std::fs::read_to_string(dir.join(MANIFEST)).unwrap();
        assert_eq!(listed, "report.md\n");
    }
}
