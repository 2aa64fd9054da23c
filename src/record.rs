//! Append-only run records: `events.jsonl` (one JSON object per line, flushed
//! as it is written) and the resolved config beside it. A run folder can be
//! audited, resumed and re-analysed from these files alone. A process that
//! writes a folder holds it ([`FolderLock`]), so two never interleave records.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

/// Writes one JSON object per line to an append-only file.
pub struct EventLog {
    path: PathBuf,
    file: File,
    written: u64,
}

impl EventLog {
    /// Open (creating if needed) `path` for appending.
    pub fn append(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating run folder {}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening event log {}", path.display()))?;
        Ok(Self {
            path,
            file,
            written: 0,
        })
    }

    /// Append one event. Each line is written whole and flushed, so an
    /// interrupted run loses at most the event being written.
    pub fn write<T: Serialize>(&mut self, event: &T) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(event).context("serialising event")?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.flush())
            .with_context(|| format!("writing {}", self.path.display()))?;
        self.written += 1;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Events written through this handle.
    pub fn written(&self) -> u64 {
        self.written
    }
}

/// Read every complete line of a JSONL file. A torn last line (from an
/// interrupted write, possibly cut inside a multi-byte character) is
/// ignored; a corrupt line elsewhere (not UTF-8, not JSON) is an error that
/// names the file and line.
pub fn read_jsonl(path: impl AsRef<Path>) -> anyhow::Result<Vec<serde_json::Value>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // The last non-empty line is the only one an interrupted write can tear.
    let last = lines
        .iter()
        .rposition(|l| !l.iter().all(u8::is_ascii_whitespace));
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let torn = Some(i) == last;
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(_) if torn => break,
            Err(e) => anyhow::bail!("{}: line {} is not UTF-8: {e}", path.display(), i + 1),
        };
        match serde_json::from_str(text) {
            Ok(v) => out.push(v),
            Err(_) if torn => break,
            Err(e) => anyhow::bail!("{}: line {} is not valid JSON: {e}", path.display(), i + 1),
        }
    }
    Ok(out)
}

/// Make a JSONL file end after its last complete line before appending to
/// it: a torn last line (which [`read_jsonl`] leaves out) is cut off, and a
/// last line that is whole but lost its newline gets it back. Otherwise the
/// next line appended would be fused to it. A missing file is left alone.
pub fn mend_tail(path: impl AsRef<Path>) -> anyhow::Result<()> {
    let path = path.as_ref();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    // The last non-empty line: where it starts and whether it is whole.
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let start = bytes[..end]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let whole = std::str::from_utf8(&bytes[start..end])
        .ok()
        .is_some_and(|t| serde_json::from_str::<serde_json::Value>(t).is_ok());
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    if start == end || !whole {
        file.set_len(start as u64)
            .and_then(|_| file.sync_all())
            .with_context(|| format!("cutting the torn last line of {}", path.display()))?;
    } else if !bytes[end..].contains(&b'\n') {
        file.set_len(end as u64)
            .and_then(|_| OpenOptions::new().append(true).open(path))
            .and_then(|mut f| f.write_all(b"\n").and_then(|_| f.sync_all()))
            .with_context(|| format!("ending the last line of {}", path.display()))?;
    }
    Ok(())
}

/// A hold on a record folder for as long as it lives: a second process that
/// tries to write the same folder (another `joule run --out` on it, a Slurm
/// task given a cell that is already running, a second `race run`) is refused
/// before it reads or writes anything there, instead of interleaving its
/// records with the first's. The operating system releases the hold when the
/// process ends, however it ends, so a killed run leaves nothing to clear up.
/// On a file system without locks (some network mounts) the folder is not held.
#[derive(Debug)]
pub struct FolderLock {
    _dir: Option<File>,
}

impl FolderLock {
    /// Hold `dir` (created if missing), or say that another process holds it.
    pub fn acquire(dir: &Path) -> anyhow::Result<FolderLock> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let handle = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        match handle.try_lock() {
            Ok(()) => Ok(FolderLock { _dir: Some(handle) }),
            Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
                "{} is being written by another joule process (a run, a sweep cell or a race on \
                 the same folder); nothing was done here. Wait for it to end, or give another \
                 folder",
                dir.display()
            ),
            // Locks unsupported here: go on unheld, as before locks existed.
            Err(std::fs::TryLockError::Error(_)) => Ok(FolderLock { _dir: None }),
        }
    }
}

/// Write `value` as pretty JSON to `path` atomically ([`write_atomic`]).
pub fn write_json_atomic<T: Serialize>(path: impl AsRef<Path>, value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("serialising JSON")?;
    write_atomic(path, text)
}

/// Write `contents` to `path` atomically: into `<path>.tmp`, then renamed
/// over `path`, so a reader (or a run started after a crash) never sees half
/// a file; a write cut short leaves only the `.tmp` file.
pub fn write_atomic(path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let path = path.as_ref();
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_folder_is_refused_until_its_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let held = FolderLock::acquire(&run).unwrap();
        assert!(run.is_dir());
        let e = FolderLock::acquire(&run).unwrap_err().to_string();
        assert!(e.contains("being written by another joule process"), "{e}");
        drop(held);
        FolderLock::acquire(&run).unwrap();
    }

    #[test]
    fn appends_and_ignores_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("events.jsonl");
        {
            let mut log = EventLog::append(&p).unwrap();
            log.write(&serde_json::json!({"a": 1})).unwrap();
        }
        {
            let mut log = EventLog::append(&p).unwrap();
            log.write(&serde_json::json!({"a": 2})).unwrap();
        }
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"a\": 3").unwrap();
        let v = read_jsonl(&p).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1]["a"], 2);
    }

    /// After `mend_tail` a line appended stands on its own: a torn tail is
    /// cut, a whole last line without its newline gets one.
    #[test]
    fn mend_tail_cuts_a_torn_line_and_ends_a_whole_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("races.jsonl");
        mend_tail(&p).unwrap();
        assert!(!p.exists());
        for (text, want) in [
            ("{\"a\":1}\n{\"a\":2}", "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n"),
            ("{\"a\":1}\n{\"a\"", "{\"a\":1}\n{\"a\":3}\n"),
            ("{\"a\":1}\n", "{\"a\":1}\n{\"a\":3}\n"),
            ("{\"a\"", "{\"a\":3}\n"),
            ("", "{\"a\":3}\n"),
        ] {
            std::fs::write(&p, text).unwrap();
            mend_tail(&p).unwrap();
            EventLog::append(&p)
                .unwrap()
                .write(&serde_json::json!({"a": 3}))
                .unwrap();
            assert_eq!(std::fs::read_to_string(&p).unwrap(), want, "{text:?}");
            assert_eq!(read_jsonl(&p).unwrap().last().unwrap()["a"], 3);
        }
    }
}
