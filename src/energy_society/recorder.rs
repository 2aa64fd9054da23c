//! The records of one run folder: `config.resolved.toml` (written first),
//! an append-only `events.jsonl` (every model request and response, every
//! state change and charge, with round, phase, agent and energy before/after),
//! the reference layout (agents.json, config.json, token_usage.json,
//! transcript.json via `layout::RunFolder`) at the end, and last of all the
//! completion marker `COMPLETE` that sweeps use to skip finished cells.
//!
//! Prompt texts are stored once per line. Every call's messages repeat most
//! of the previous round's lines (the system prompt, the memory lines, the
//! job list, the other agents' blocks), and they were three quarters of a
//! run's records. So a string under a key named in [`INTERNED_KEYS`]
//! (message `content`, `rendered_prompt`) is written as `{"lines": [ids]}`,
//! and each line not seen before in the run is first written, in order, by a
//! `{"event": "lines", "first": id, "lines": [...]}` event. Nothing is lost:
//! [`read_events`] gives back every event with its texts whole, and the
//! lines joined by `\n` are the text byte for byte.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{json, Value};

use crate::record::EventLog;

use super::config::SocietyConfig;
use super::layout::{RunFolder, TokenUsageRecord, TranscriptEntry};

/// File name of the completion marker.
pub const COMPLETE_MARKER: &str = "COMPLETE";

/// Every file a run writes into its folder: what starting the run again
/// removes (with the `*.json.tmp` of a write cut short). Other files and
/// folders there are not the run's and are never touched.
pub const RUN_FILES: [&str; 10] = [
    "config.resolved.toml",
    "events.jsonl",
    COMPLETE_MARKER,
    "agents.json",
    "config.json",
    "token_usage.json",
    "transcript.json",
    "meter.json",
    crate::energy_society::call_errors::FILE,
    crate::provenance::FILE,
];

/// Whether `name` is one of the [`RUN_FILES`] or the temporary file of a
/// write of one cut short (`*.tmp`, and any `*.json.tmp`).
fn is_run_file(name: &str) -> bool {
    let stem = name.strip_suffix(".tmp").unwrap_or(name);
    RUN_FILES.contains(&stem) || name.ends_with(".json.tmp")
}

/// Whether every entry of the folder `dir` is a file a run writes
/// ([`RUN_FILES`] and their temporary files): what a run cut short while
/// its files were being replaced or first written can leave.
pub fn only_run_files(dir: &Path) -> anyhow::Result<bool> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if !is_run_file(&entry.file_name().to_string_lossy()) || !entry.path().is_file() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The [`RUN_FILES`] of `dir` (and temporary files of theirs) in the order
/// a new start removes them: `COMPLETE` first and `config.resolved.toml`
/// last, so a removal cut short leaves a folder that is resumed or started
/// again, never one marked complete without its records. An error, with
/// nothing removed, when one of them is not a file.
fn run_files_in(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_run_file(&name) {
            let path = entry.path();
            if !path.is_file() {
                anyhow::bail!(
                    "{}: a run writes a file of this name here, and it is not a file; nothing was run",
                    path.display()
                );
            }
            let rank = match name.as_str() {
                COMPLETE_MARKER => 0,
                "config.resolved.toml" => 2,
                _ => 1,
            };
            found.push((rank, path));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Remove the run's files from `dir` ([`run_files_in`]).
fn clear_run_files(dir: &Path) -> anyhow::Result<()> {
    for path in run_files_in(dir)? {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

/// Write the completion marker of the run folder `dir`: the last file a run
/// writes, after its records, `call_errors.json` and `meter.json`.
pub fn mark_complete(dir: &Path) -> anyhow::Result<()> {
    std::fs::write(dir.join(COMPLETE_MARKER), "complete\n")
        .with_context(|| format!("writing {}/{COMPLETE_MARKER}", dir.display()))
}

/// Keys whose string values `events.jsonl` stores as line references.
pub const INTERNED_KEYS: [&str; 2] = ["content", "rendered_prompt"];

/// The run's table of prompt lines.
#[derive(Default)]
struct Lines {
    ids: HashMap<String, u64>,
    /// Lines not yet written, with the id of the first.
    pending: Vec<String>,
}

impl Lines {
    fn intern(&mut self, text: &str) -> Vec<u64> {
        text.split('\n')
            .map(|line| match self.ids.get(line) {
                Some(&id) => id,
                None => {
                    let id = self.ids.len() as u64;
                    self.ids.insert(line.to_string(), id);
                    self.pending.push(line.to_string());
                    id
                }
            })
            .collect()
    }

    /// Replace every interned-key string in `v` by its line references.
    fn intern_in(&mut self, v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, x) in map.iter_mut() {
                    match x {
                        Value::String(text) if INTERNED_KEYS.contains(&k.as_str()) => {
                            *x = json!({ "lines": self.intern(text) });
                        }
                        _ => self.intern_in(x),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|x| self.intern_in(x)),
            _ => {}
        }
    }

    /// The `lines` event for the pending lines, if any.
    fn flush(&mut self) -> Option<Value> {
        if self.pending.is_empty() {
            return None;
        }
        let lines = std::mem::take(&mut self.pending);
        let first = self.ids.len() - lines.len();
        Some(json!({"event": "lines", "first": first, "lines": lines}))
    }
}

/// A prompt text as a [`Recorder`] stores it: whole (records kept in
/// memory), or as references into the run's line table (`events.jsonl`).
/// Written under a key of [`INTERNED_KEYS`], so [`read_events`] restores it.
#[derive(Debug, Clone, PartialEq)]
pub enum Text<'a> {
    Whole(&'a str),
    Lines(Vec<u64>),
}

impl serde::Serialize for Text<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Text::Whole(t) => s.serialize_str(t),
            Text::Lines(ids) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("lines", ids)?;
                m.end()
            }
        }
    }
}

/// The recorded lines of `events.jsonl` a resumed run must give again
/// before it writes anything (`super::resume`).
struct Expected {
    /// The lines still to be given, in order.
    lines: std::collections::VecDeque<String>,
    /// How many lines were given so far (for errors).
    given: usize,
    /// The bytes of `events.jsonl` they make up: the file is cut there
    /// once they all came, and the run appends after them.
    keep_bytes: u64,
    /// A resolved config to write over `config.resolved.toml` at that point
    /// (a resume whose start differs in how, not what, it computes).
    config: Option<String>,
}

/// Collects a run's records; writes them when a folder is given.
pub struct Recorder {
    dir: Option<PathBuf>,
    log: Option<EventLog>,
    expected: Option<Expected>,
    lines: Lines,
    /// Events kept in memory when no folder is given (tests, replay).
    pub kept: Vec<Value>,
    pub token_usage: Vec<TokenUsageRecord>,
    pub transcript: Vec<TranscriptEntry>,
    /// A resumed run's provenance session, appended once every kept line came again.
    provenance: Option<crate::provenance::Session>,
}

impl Recorder {
    /// Records kept in memory only.
    pub fn in_memory() -> Self {
        Recorder {
            dir: None,
            log: None,
            expected: None,
            lines: Lines::default(),
            kept: vec![],
            token_usage: vec![],
            transcript: vec![],
            provenance: None,
        }
    }

    /// Start a run folder: removes the files of a previous attempt
    /// ([`RUN_FILES`]; anything else in the folder is kept), writes the
    /// resolved config, opens `events.jsonl`.
    pub fn create(dir: &Path, config: &SocietyConfig) -> anyhow::Result<Self> {
        if dir.exists() {
            clear_run_files(dir)?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // Atomic: a start cut short leaves no config, never half of one.
        crate::record::write_atomic(dir.join("config.resolved.toml"), config.to_toml()?)?;
        Ok(Recorder {
            dir: Some(dir.to_path_buf()),
            log: Some(EventLog::append(dir.join("events.jsonl"))?),
            expected: None,
            lines: Lines::default(),
            kept: vec![],
            token_usage: vec![],
            transcript: vec![],
            provenance: None,
        })
    }

    /// Resume the incomplete run in `dir`: its `events.jsonl` begins with
    /// `kept` (whole lines, without their newlines, `keep_bytes` bytes with
    /// them). The run is played again from round 1; each event it records
    /// must be the next kept line, byte for byte (an error otherwise, with
    /// the folder untouched), and once every kept line came, the file is
    /// cut after them and the run appends as a fresh one would.
    /// `config`, when given, replaces `config.resolved.toml` at that point too.
    pub fn resume(
        dir: &Path,
        kept: Vec<String>,
        keep_bytes: u64,
        config: Option<String>,
    ) -> anyhow::Result<Self> {
        let mut rec = Recorder {
            dir: Some(dir.to_path_buf()),
            log: None,
            expected: Some(Expected {
                lines: kept.into(),
                given: 0,
                keep_bytes,
                config,
            }),
            lines: Lines::default(),
            kept: vec![],
            token_usage: vec![],
            transcript: vec![],
            provenance: None,
        };
        rec.open_when_given()?;
        Ok(rec)
    }

    /// Record `session` in the folder's `provenance.json` (`crate::provenance`): as its only
    /// session for a run from round 1, appended for a resumed one. A resume appends it once
    /// every kept line came again, so a resume that is refused leaves the folder untouched.
    /// Nothing happens without a folder.
    pub fn provenance(&mut self, session: crate::provenance::Session) -> anyhow::Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        if self.expected.is_some() {
            self.provenance = Some(session);
            return Ok(());
        }
        if session.from_round <= 1 {
            crate::provenance::Provenance::start(dir, session)
        } else {
            crate::provenance::Provenance::append(dir, session)
        }
    }

    /// Every expected line came: cut `events.jsonl` after them and append.
    fn open_when_given(&mut self) -> anyhow::Result<()> {
        let (Some(dir), Some(x)) = (&self.dir, &self.expected) else {
            return Ok(());
        };
        if !x.lines.is_empty() {
            return Ok(());
        }
        let path = dir.join("events.jsonl");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        file.set_len(x.keep_bytes)
            .and_then(|_| file.sync_all())
            .with_context(|| format!("cutting {} after its last complete round", path.display()))?;
        if let Some(config) = &x.config {
            crate::record::write_atomic(dir.join("config.resolved.toml"), config)?;
        }
        if let Some(session) = self.provenance.take() {
            crate::provenance::Provenance::append(dir, session)?;
        }
        self.log = Some(EventLog::append(&path)?);
        self.expected = None;
        Ok(())
    }

    /// Write one event line, or check it against the next expected one.
    fn emit<T: serde::Serialize>(&mut self, event: &T) -> anyhow::Result<()> {
        if let Some(x) = &mut self.expected {
            let got = serde_json::to_string(event).context("serialising event")?;
            let want = x.lines.pop_front().unwrap_or_default();
            x.given += 1;
            if got != want {
                let dir = self.dir.as_deref().unwrap_or(Path::new("."));
                anyhow::bail!(
                    "cannot resume {}: played again, its events.jsonl differs at line {} (recorded: {}; now: {}); nothing was changed. Run with --force to start it again",
                    dir.display(),
                    x.given,
                    clip(&want),
                    clip(&got)
                );
            }
            return self.open_when_given();
        }
        match &mut self.log {
            Some(log) => log.write(event),
            None => Ok(()),
        }
    }

    /// Whether texts go to the line table (a folder is written or checked).
    fn writes(&self) -> bool {
        self.log.is_some() || self.expected.is_some()
    }

    /// Is `dir` a finished run?
    pub fn is_complete(dir: &Path) -> bool {
        dir.join(COMPLETE_MARKER).is_file()
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// `text` as this recorder stores it: interned when writing a folder.
    pub fn text<'a>(&mut self, text: &'a str) -> Text<'a> {
        if self.writes() {
            Text::Lines(self.lines.intern(text))
        } else {
            Text::Whole(text)
        }
    }

    /// Append one event `{"event": kind, ...fields}`, serialized straight
    /// from `fields` (a struct with named fields). Texts meant for the line
    /// table must already be [`Text`]s (see [`Recorder::text`]).
    pub fn record<T: serde::Serialize>(&mut self, kind: &str, fields: &T) -> anyhow::Result<()> {
        #[derive(serde::Serialize)]
        struct Tagged<'a, T> {
            event: &'a str,
            #[serde(flatten)]
            fields: &'a T,
        }
        let e = Tagged {
            event: kind,
            fields,
        };
        if self.writes() {
            if let Some(lines) = self.lines.flush() {
                self.emit(&lines)?;
            }
            self.emit(&e)
        } else {
            self.kept.push(serde_json::to_value(&e)?);
            Ok(())
        }
    }

    /// Append one event `{"event": kind, ...fields}`.
    pub fn event(&mut self, kind: &str, fields: Value) -> anyhow::Result<()> {
        let mut e = json!({"event": kind});
        if let (Some(o), Value::Object(f)) = (e.as_object_mut(), fields) {
            o.extend(f);
        }
        if self.writes() {
            self.lines.intern_in(&mut e);
            if let Some(lines) = self.lines.flush() {
                self.emit(&lines)?;
            }
            self.emit(&e)
        } else {
            self.kept.push(e);
            Ok(())
        }
    }

    /// Sort token usage and transcript as the reference does (round, then
    /// vote < decide < act, then agent id).
    pub fn sort_reference_lists(&mut self) {
        fn phase_rank(p: &str) -> u8 {
            match p {
                "vote" => 0,
                "decide" => 1,
                _ => 2,
            }
        }
        self.token_usage.sort_by(|a, b| {
            (a.round_num, phase_rank(&a.phase), &a.agent_id).cmp(&(
                b.round_num,
                phase_rank(&b.phase),
                &b.agent_id,
            ))
        });
        self.transcript.sort_by(|a, b| {
            (a.round_num, phase_rank(&a.phase), &a.agent_id).cmp(&(
                b.round_num,
                phase_rank(&b.phase),
                &b.agent_id,
            ))
        });
    }

    /// Write the reference layout. The completion marker comes later
    /// ([`mark_complete`], from `runner`), once every file of the run is written.
    pub fn finish(&mut self, folder: &RunFolder) -> anyhow::Result<()> {
        if let Some(x) = &self.expected {
            anyhow::bail!(
                "cannot resume: the run ended {} events before the recorded one did",
                x.lines.len()
            );
        }
        if let Some(dir) = &self.dir {
            folder.write(dir)?;
        }
        Ok(())
    }
}

/// The start of an event line, for errors.
fn clip(line: &str) -> String {
    match line.char_indices().nth(160) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// Read a run's `events.jsonl` with every interned text whole again (the
/// `lines` events themselves are left out). A torn last line is ignored, as
/// [`crate::record::read_jsonl`] does; a reference to a line never written,
/// or a `lines` event out of order, is an error naming the file and event.
pub fn read_events(path: impl AsRef<Path>) -> anyhow::Result<Vec<Value>> {
    let path = path.as_ref();
    expand_events(crate::record::read_jsonl(path)?, path)
}

/// [`read_events`] of events already parsed (the lines of `path`).
pub fn expand_events(events: Vec<Value>, path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut table: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (n, mut e) in events.into_iter().enumerate() {
        let at = || format!("{}: event {}", path.display(), n + 1);
        if e["event"] == "lines" {
            let first = e["first"].as_u64();
            if first != Some(table.len() as u64) {
                anyhow::bail!(
                    "{}: a `lines` event starting at {:?}, but {} lines were written before",
                    at(),
                    e["first"],
                    table.len()
                );
            }
            let Some(lines) = e["lines"].as_array() else {
                anyhow::bail!("{}: `lines` is not a list", at());
            };
            for l in lines {
                match l.as_str() {
                    Some(s) => table.push(s.to_string()),
                    None => anyhow::bail!("{}: a line that is not a string: {l}", at()),
                }
            }
            continue;
        }
        expand_in(&mut e, &table).with_context(at)?;
        out.push(e);
    }
    Ok(out)
}

fn expand_in(v: &mut Value, table: &[String]) -> anyhow::Result<()> {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                let refs = x
                    .as_object()
                    .filter(|o| o.len() == 1 && INTERNED_KEYS.contains(&k.as_str()))
                    .and_then(|o| o.get("lines"))
                    .and_then(Value::as_array);
                match refs {
                    Some(ids) => {
                        let mut text = Vec::with_capacity(ids.len());
                        for id in ids {
                            let line = id
                                .as_u64()
                                .and_then(|i| table.get(usize::try_from(i).ok()?))
                                .ok_or_else(|| {
                                    anyhow::anyhow!(
                                        "`{k}` refers to line {id}, but only {} lines were written",
                                        table.len()
                                    )
                                })?;
                            text.push(line.as_str());
                        }
                        *x = Value::String(text.join("\n"));
                    }
                    None => expand_in(x, table)?,
                }
            }
        }
        Value::Array(items) => {
            for x in items {
                expand_in(x, table)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_start_removes_complete_first_and_the_config_last() {
        let dir = tempfile::tempdir().unwrap();
        for f in RUN_FILES {
            std::fs::write(dir.path().join(f), "x").unwrap();
        }
        std::fs::write(dir.path().join("config.resolved.toml.tmp"), "").unwrap();
        std::fs::write(dir.path().join("agents.json.tmp"), "").unwrap();
        assert!(only_run_files(dir.path()).unwrap());
        let order: Vec<String> = run_files_in(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(order.len(), RUN_FILES.len() + 2);
        assert_eq!(order[0], COMPLETE_MARKER);
        assert_eq!(order[order.len() - 1], "config.resolved.toml");
        // A file of the user's is not a run's, and is kept.
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        assert!(!only_run_files(dir.path()).unwrap());
        clear_run_files(dir.path()).unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["notes.txt"]);
    }

    #[test]
    fn interned_texts_come_back_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SocietyConfig::baseline("greedy");
        let mut rec = Recorder::create(dir.path(), &cfg).unwrap();
        let texts = ["SYSTEM\nline two\n", "", "line two\n\nnew", "SYSTEM"];
        for (i, t) in texts.iter().enumerate() {
            rec.event(
                "invocation",
                json!({"i": i, "calls": [{"messages": [{"role": "user", "content": t}],
                       "rendered_prompt": t, "text": t}]}),
            )
            .unwrap();
        }
        let raw = std::fs::read_to_string(dir.path().join("events.jsonl")).unwrap();
        // Each distinct line is written once.
        assert_eq!(raw.matches("line two").count(), 1 + 2, "{raw}");
        let events = read_events(dir.path().join("events.jsonl")).unwrap();
        assert_eq!(events.len(), texts.len());
        for (e, t) in events.iter().zip(texts) {
            assert_eq!(e["calls"][0]["messages"][0]["content"], t);
            assert_eq!(e["calls"][0]["rendered_prompt"], t);
            assert_eq!(e["calls"][0]["text"], t);
        }
    }

    #[test]
    fn a_reference_to_an_unwritten_line_is_an_error_naming_the_event() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("events.jsonl");
        std::fs::write(
            &p,
            "{\"event\":\"lines\",\"first\":0,\"lines\":[\"a\"]}\n{\"event\":\"x\",\"content\":{\"lines\":[0,1]}}\n{}\n",
        )
        .unwrap();
        let e = format!("{:#}", read_events(&p).unwrap_err());
        assert!(e.contains("event 2") && e.contains("line 1"), "{e}");
        std::fs::write(&p, "{\"event\":\"lines\",\"first\":3,\"lines\":[]}\n{}\n").unwrap();
        let e = format!("{:#}", read_events(&p).unwrap_err());
        assert!(e.contains("starting at"), "{e}");
    }
}
