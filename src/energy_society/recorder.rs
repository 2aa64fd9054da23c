//! The records of one run folder: `config.resolved.toml` (written first),
//! an append-only `events.jsonl` (every model request and response, every
//! state change and charge, with round, phase, agent and energy before/after),
//! the reference layout (agents.json, config.json, token_usage.json,
//! transcript.json via `layout::RunFolder`) at the end, and last of all the
//! completion marker `COMPLETE` that sweeps use to skip finished cells.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{json, Value};

use crate::record::EventLog;

use super::config::SocietyConfig;
use super::layout::{RunFolder, TokenUsageRecord, TranscriptEntry};

/// File name of the completion marker.
pub const COMPLETE_MARKER: &str = "COMPLETE";

/// Collects a run's records; writes them when a folder is given.
pub struct Recorder {
    dir: Option<PathBuf>,
    log: Option<EventLog>,
    /// Events kept in memory when no folder is given (tests, replay).
    pub kept: Vec<Value>,
    pub token_usage: Vec<TokenUsageRecord>,
    pub transcript: Vec<TranscriptEntry>,
}

impl Recorder {
    /// Records kept in memory only.
    pub fn in_memory() -> Self {
        Recorder {
            dir: None,
            log: None,
            kept: vec![],
            token_usage: vec![],
            transcript: vec![],
        }
    }

    /// Start a run folder: clears a previous incomplete attempt, writes the
    /// resolved config, opens `events.jsonl`.
    pub fn create(dir: &Path, config: &SocietyConfig) -> anyhow::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("clearing incomplete run folder {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("config.resolved.toml"), config.to_toml()?)
            .with_context(|| format!("writing {}/config.resolved.toml", dir.display()))?;
        Ok(Recorder {
            dir: Some(dir.to_path_buf()),
            log: Some(EventLog::append(dir.join("events.jsonl"))?),
            kept: vec![],
            token_usage: vec![],
            transcript: vec![],
        })
    }

    /// Is `dir` a finished run?
    pub fn is_complete(dir: &Path) -> bool {
        dir.join(COMPLETE_MARKER).is_file()
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Append one event `{"event": kind, ...fields}`.
    pub fn event(&mut self, kind: &str, fields: Value) -> anyhow::Result<()> {
        let mut e = json!({"event": kind});
        if let (Some(o), Value::Object(f)) = (e.as_object_mut(), fields) {
            o.extend(f);
        }
        match &mut self.log {
            Some(log) => log.write(&e),
            None => {
                self.kept.push(e);
                Ok(())
            }
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

    /// Write the reference layout and then the completion marker.
    pub fn finish(&mut self, folder: &RunFolder) -> anyhow::Result<()> {
        if let Some(dir) = &self.dir {
            folder.write(dir)?;
            std::fs::write(dir.join(COMPLETE_MARKER), "complete\n")
                .with_context(|| format!("writing {}/{COMPLETE_MARKER}", dir.display()))?;
        }
        Ok(())
    }
}
