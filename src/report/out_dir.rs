//! The folder a report is written into (`joule report --out`, `joule view`):
//! a folder that holds files is refused unless forced, so an earlier
//! report's files never stand beside a new one's; forced, it clears only the
//! files an earlier report wrote there (listed in its [`MANIFEST`]) and
//! keeps anything else, refusing when the new report would write over one
//! of the kept files. After writing, [`OutDir::finish`] lists what this
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
pub fn files(dir: &Path) -> anyhow::Result<BTreeSet<PathBuf>> {
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

/// The files an earlier report listed in `dir`'s manifest (none without one).
fn listed(dir: &Path) -> BTreeSet<PathBuf> {
    match std::fs::read_to_string(dir.join(MANIFEST)) {
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
    }
}

/// Refuse when a file the report will write (`planned`, relative to `dir`)
/// is already there and no earlier report listed it: forcing would
/// overwrite a file that is not a report's own.
fn refuse_overwrites(
    dir: &Path,
    flag: &str,
    before: &BTreeSet<PathBuf>,
    ours: &BTreeSet<PathBuf>,
    planned: &BTreeSet<PathBuf>,
) -> anyhow::Result<()> {
    let clash: Vec<String> = planned
        .iter()
        .filter(|p| before.contains(*p) && !ours.contains(*p))
        .map(|p| dir.join(p).display().to_string())
        .collect();
    let Some(first) = clash.first() else {
        return Ok(());
    };
    let more = match clash.len() {
        1 => String::new(),
        n => format!(" (and {} more: {})", n - 1, clash[1..].join(", ")),
    };
    anyhow::bail!(
        "{flag} {}: the report would overwrite {first}{more}, which no earlier report wrote there (it is not listed in {MANIFEST}); nothing was written or removed. Move the file away, or give a new or empty folder",
        dir.display()
    )
}

impl OutDir {
    /// Make `dir` ready for a report that writes `planned` (files relative
    /// to `dir`). A folder with files in it is refused unless `force`;
    /// forced, it is refused when a planned file is there and is not the
    /// earlier report's own; otherwise the files of the earlier report its
    /// manifest lists are removed and every other file is kept (and said so).
    pub fn prepare(
        dir: &Path,
        force: bool,
        flag: &str,
        planned: &BTreeSet<PathBuf>,
    ) -> anyhow::Result<OutDir> {
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
        let ours = listed(dir);
        refuse_overwrites(dir, flag, &before, &ours, planned)?;
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

    fn set(files: &[&str]) -> BTreeSet<PathBuf> {
        files.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn a_folder_with_files_is_refused_and_forced_loses_only_the_reports_own_files() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("out");
        // A new folder, and an empty one, take a report.
        let first = OutDir::prepare(&dir, false, "--out", &set(&["reproduction.md"])).unwrap();
        std::fs::create_dir_all(dir.join("old-condition/aggregate")).unwrap();
        std::fs::write(dir.join("old-condition/aggregate/a.csv"), "x").unwrap();
        std::fs::write(dir.join("reproduction.md"), "old").unwrap();
        first.finish().unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let e = OutDir::prepare(&dir, false, "--out", &set(&["report.md"]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not empty") && e.contains("--force"), "{e}");
        let second = OutDir::prepare(&dir, true, "--out", &set(&["report.md"])).unwrap();
        assert!(!dir.join("reproduction.md").exists());
        assert!(!dir.join("old-condition").exists());
        assert!(dir.join("notes.txt").is_file());
        std::fs::write(dir.join("report.md"), "new").unwrap();
        second.finish().unwrap();
        let listed = std::fs::read_to_string(dir.join(MANIFEST)).unwrap();
        assert_eq!(listed, "report.md\n");
    }

    #[test]
    fn forced_it_refuses_to_overwrite_a_file_no_report_wrote() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("out");
        std::fs::create_dir_all(dir.join("aggregate")).unwrap();
        std::fs::write(dir.join("report.md"), "my notes").unwrap();
        std::fs::write(dir.join("aggregate/runs.csv"), "reference").unwrap();
        std::fs::write(dir.join("old.csv"), "old report").unwrap();
        std::fs::write(dir.join(MANIFEST), "old.csv\n").unwrap();
        let planned = set(&["report.md", "aggregate/runs.csv", "metrics.json"]);
        let e = OutDir::prepare(&dir, true, "--out", &planned)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&dir.join("aggregate/runs.csv").display().to_string())
                && e.contains(&dir.join("report.md").display().to_string())
                && e.contains("nothing was written"),
            "{e}"
        );
        // Nothing was removed or changed.
        assert_eq!(
            std::fs::read_to_string(dir.join("report.md")).unwrap(),
            "my notes"
        );
        assert!(dir.join("old.csv").is_file() && dir.join(MANIFEST).is_file());
        // A file the earlier report listed is its own, and is replaced.
        let ok = OutDir::prepare(&dir, true, "--out", &set(&["old.csv", "metrics.json"])).unwrap();
        assert!(!dir.join("old.csv").exists());
        ok.finish().unwrap();
    }
}
