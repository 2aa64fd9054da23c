//! Resuming an interrupted run from its last complete round.
//!
//! A run folder without its COMPLETE marker keeps `config.resolved.toml` and
//! the `events.jsonl` written up to the interruption. A round is complete
//! when its `round_end` event was written (and no `stopped` event says its
//! calls failed because the model server went away). [`plan`] decides:
//!
//! - the same resolved config and at least one complete round: **resume**.
//!   The run is played again from round 1 on a [`Replay`] backend that
//!   answers every call of the complete rounds with the recorded answer
//!   (text, token counts, latency, measured joules), so every piece of state
//!   — the job draws' random generators, energies, memories, the prompt line
//!   table — is rebuilt by the engine itself; the recorder checks each event
//!   against the recorded line byte for byte ([`Recorder::resume`]), cuts
//!   what followed the last complete round and appends from there, with the
//!   real backend answering from the next round on. The files are those of
//!   an uninterrupted run, latencies of the new rounds aside.
//! - no complete round: started again from round 1 (nothing worth keeping),
//!   whatever config the folder recorded.
//! - another resolved config (another seed, roster, model, kernels…):
//!   **refused** with the first differing line, unless forced (then replaced);
//!   a sweep's cell is cleared and run again (its sweep file defines it).
//!   Keys that say how the run is computed but not what it computes
//!   ([`HOW_KEYS`]: the worker-thread count, whose records are the same at
//!   any count) do not make another config: the run resumes, and its
//!   `config.resolved.toml` is rewritten with this start's values under a
//!   comment naming the earlier ones, once the kept rounds were given again.
//!   Likewise a config written by an earlier build that did not record a
//!   field this build has: read as this build reads it (the field at its
//!   default, which is what earlier builds did), it is the same config, so
//!   the run resumes, the comment naming the fields; should a default not be
//!   what the earlier build did, the kept rounds would not be given again
//!   byte for byte and the resume stops with the folder untouched.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::backend::{
    Answer, Backend, BackendError, FinishReason, KernelRecord, MemoryDemand, MemoryReport,
    ModelRequest, ModelResponse, ModelResult, StepBackend, TokenUsage,
};

use super::recorder::{expand_events, Recorder};

/// [`plan`]'s refusal of a folder whose incomplete run was made with another
/// config: a sweep replaces such a cell (its sweep file defines it), while
/// every other refusal stops the cell.
#[derive(Debug)]
pub struct OtherConfig(String);

impl std::fmt::Display for OtherConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OtherConfig {}

/// What a run folder's incomplete run allows.
pub enum Plan {
    /// Start from round 1 (no folder, an empty one, or nothing complete in it).
    Fresh,
    /// Resume after `rounds` complete rounds.
    Resume(Resumed),
}

/// An incomplete run to resume.
pub struct Resumed {
    /// Complete rounds kept.
    pub rounds: u32,
    /// The lines of `events.jsonl` through the last complete round.
    lines: Vec<String>,
    keep_bytes: u64,
    /// The recorded answer of each call of those rounds.
    answers: Answers,
    /// The resolved config to write once the kept rounds were given again,
    /// when this start differs from the recorded one in [`HOW_KEYS`] only.
    config: Option<String>,
}

impl Resumed {
    /// The recorder that checks the kept lines, then appends.
    pub fn recorder(&self, dir: &Path) -> anyhow::Result<Recorder> {
        Recorder::resume(
            dir,
            self.lines.clone(),
            self.keep_bytes,
            self.config.clone(),
        )
    }

    /// The kept rounds' recorded answers, for the run `session` on a
    /// [`Replay`] backend.
    pub fn answers(&mut self, session: u64) -> Answers {
        std::mem::take(&mut self.answers)
            .into_iter()
            .map(|((_, agent, seed), a)| ((session, agent, seed), a))
            .collect()
    }
}

/// Recorded answers by (run session, agent id, sampling seed), in call order.
pub type Answers = HashMap<(u64, String, u64), VecDeque<ModelResult>>;

/// The lines of `events.jsonl` in `dir` through its last complete round:
/// (lines, their bytes with newlines, complete rounds).
fn complete_prefix(dir: &Path) -> anyhow::Result<(Vec<String>, u64, u32)> {
    let path = dir.join("events.jsonl");
    let text = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], 0, 0)),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    // Only whole lines: a torn last line (a write cut short) is dropped, and
    // so is a last line that is not a record. A line that is not a record
    // with more lines after it is damage, not an interruption: the rounds
    // after it could not be checked, so nothing is kept and nothing is cut.
    let mut lines = Vec::new();
    let mut ends = Vec::new();
    let mut kinds = Vec::new();
    let mut at = 0usize;
    for (n, raw) in text.split_inclusive(|&b| b == b'\n').enumerate() {
        at += raw.len();
        if raw.last() != Some(&b'\n') {
            break;
        }
        let record = std::str::from_utf8(&raw[..raw.len() - 1])
            .map_err(|e| e.to_string())
            .and_then(|line| {
                serde_json::from_str::<Value>(line)
                    .map(|v| (line, v))
                    .map_err(|e| e.to_string())
            });
        let (line, v) = match record {
            Ok(r) => r,
            Err(_) if at == text.len() => break,
            Err(why) => anyhow::bail!(
                "{}: line {} is not a JSON record ({why}) and more records follow it; the rounds after it cannot be checked, so the run cannot resume. Nothing was changed: repair or remove that line, or run with --force to start the run again",
                path.display(),
                n + 1
            ),
        };
        kinds.push((
            v["event"].as_str().unwrap_or_default().to_string(),
            v["round"].as_u64(),
        ));
        lines.push(line.to_string());
        ends.push(at as u64);
    }
    let stopped = kinds
        .iter()
        .find(|(k, _)| k == "stopped")
        .and_then(|(_, r)| *r);
    // The round a `stopped` event names was played on failed calls: not kept.
    let kept = |r: &Option<u64>| stopped.is_none_or(|s| r.is_some_and(|r| r < s));
    let last = kinds.iter().rposition(|(k, r)| k == "round_end" && kept(r));
    match last {
        Some(i) => {
            let rounds = kinds[..=i]
                .iter()
                .filter(|(k, r)| k == "round_end" && kept(r))
                .count() as u32;
            lines.truncate(i + 1);
            Ok((lines, ends[i], rounds))
        }
        None => Ok((vec![], 0, 0)),
    }
}

/// `round 1` or `rounds 1-k`, the rounds a resumed run keeps.
pub fn kept_words(kept: u32) -> String {
    match kept {
        1 => "round 1".to_string(),
        k => format!("rounds 1-{k}"),
    }
}

/// The complete rounds an incomplete run folder keeps (0 when none, or no folder).
pub fn complete_rounds(dir: &Path) -> u32 {
    complete_prefix(dir).map(|(_, _, r)| r).unwrap_or(0)
}

/// Keys of the resolved config (table, key) that say how a run is computed,
/// not what it computes: a run resumed with other values records what an
/// uninterrupted run records (latencies aside). The thread count qualifies
/// because every kernel splits work over output rows or heads, each computed
/// by one thread in a fixed order (`quant_matmul`, `models::nn`, `mamba2`).
pub const HOW_KEYS: [(&str, &str); 2] = [("llm", "threads"), ("kernels", "threads")];

/// A resolved config's values without [`HOW_KEYS`] (`None` when it is not TOML).
fn what_it_computes(text: &str) -> Option<toml::Table> {
    let mut t: toml::Table = text.parse().ok()?;
    for (table, key) in HOW_KEYS {
        if let Some(toml::Value::Table(x)) = t.get_mut(table) {
            x.remove(key);
        }
    }
    Some(t)
}

/// For the complete run in `dir`, whether it was run with another config
/// than `cfg` (what it computes; the `[kernels]` a run records and
/// [`HOW_KEYS`] aside): the first key that differs, with both values. A
/// sweep counts such a cell as done and says so.
pub fn complete_with_other_config(
    dir: &Path,
    cfg: &super::config::SocietyConfig,
) -> Option<String> {
    let recorded = std::fs::read_to_string(dir.join("config.resolved.toml")).ok()?;
    let recorded = as_this_build_writes(&recorded).unwrap_or(recorded);
    let now = cfg.to_toml().ok()?;
    let without_kernels = |text: &str| {
        what_it_computes(text).map(|mut t| {
            t.remove("kernels");
            t
        })
    };
    let (Some(a), Some(b)) = (without_kernels(&recorded), without_kernels(&now)) else {
        return Some("its config.resolved.toml is not a config this build reads".into());
    };
    fn first(a: &toml::Value, b: &toml::Value, path: &str) -> Option<String> {
        match (a, b) {
            (toml::Value::Table(x), toml::Value::Table(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|k| {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    match (x.get(k), y.get(k)) {
                        (Some(u), Some(v)) => first(u, v, &p),
                        (u, v) => Some(format!(
                            "{p}: {} when it ran, {} now",
                            u.map_or("absent".into(), |u| u.to_string()),
                            v.map_or("absent".into(), |v| v.to_string())
                        )),
                    }
                })
            }
            (toml::Value::Array(x), toml::Value::Array(y)) if x.len() == y.len() => x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (u, v))| first(u, v, &format!("{path}[{i}]"))),
            (u, v) if u == v => None,
            (u, v) => Some(format!("{path}: {u} when it ran, {v} now")),
        }
    }
    first(&toml::Value::Table(a), &toml::Value::Table(b), "")
}

/// `table.key = value` for each of [`HOW_KEYS`] whose value differs between
/// the two configs (`-` where one has no such key).
fn how_differs(recorded: &str, resolved: &str) -> Vec<(String, String, String)> {
    let (Ok(a), Ok(b)) = (
        recorded.parse::<toml::Table>(),
        resolved.parse::<toml::Table>(),
    ) else {
        return Vec::new();
    };
    let get = |t: &toml::Table, table: &str, key: &str| {
        t.get(table)
            .and_then(|x| x.get(key))
            .map_or("-".to_string(), |v| v.to_string())
    };
    HOW_KEYS
        .iter()
        .map(|(table, key)| {
            (
                format!("{table}.{key}"),
                get(&a, table, key),
                get(&b, table, key),
            )
        })
        .filter(|(_, was, now)| was != now)
        .collect()
}

/// Whether a line of a resolved config counts when two are compared for a
/// person: not the comments a resume writes at the top, not a [`HOW_KEYS`] line.
fn compared(line: &str) -> bool {
    !line.starts_with('#')
        && !HOW_KEYS
            .iter()
            .any(|(_, k)| line.starts_with(&format!("{k} = ")))
}

/// The recorded config as this build writes it: the fields an earlier build
/// did not record take their defaults (new fields default to what earlier
/// builds did). None when this build does not read it as a config (a field
/// it no longer knows, a value it refuses).
fn as_this_build_writes(recorded: &str) -> Option<String> {
    super::config::SocietyConfig::from_toml_str(recorded, "config.resolved.toml")
        .ok()?
        .to_toml()
        .ok()
}

/// The dotted keys (`generation.top_k`, `roster[2].size`) that `upgraded`
/// has and `recorded` does not.
fn added_keys(recorded: &str, upgraded: &str) -> Vec<String> {
    fn walk(old: &toml::Value, new: &toml::Value, path: &str, out: &mut Vec<String>) {
        match (old, new) {
            (toml::Value::Table(o), toml::Value::Table(n)) => {
                for (k, v) in n {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    match o.get(k) {
                        Some(ov) => walk(ov, v, &p, out),
                        None => out.push(p),
                    }
                }
            }
            (toml::Value::Array(o), toml::Value::Array(n)) => {
                for (i, (ov, nv)) in o.iter().zip(n).enumerate() {
                    walk(ov, nv, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let (Ok(o), Ok(n)) = (
        recorded.parse::<toml::Table>(),
        upgraded.parse::<toml::Table>(),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    walk(&toml::Value::Table(o), &toml::Value::Table(n), "", &mut out);
    out
}

/// What to do with the run folder `dir` for a run whose resolved config is
/// `resolved` (see the module doc). A complete run is the caller's concern
/// (`joule run` refuses it unless forced).
pub fn plan(dir: &Path, resolved: &str, force: bool) -> anyhow::Result<Plan> {
    let config = dir.join("config.resolved.toml");
    if force || Recorder::is_complete(dir) {
        return Ok(Plan::Fresh);
    }
    if !config.is_file() {
        if config.exists() {
            anyhow::bail!("{} is not a file; nothing was run", config.display());
        }
        let kept = complete_prefix(dir)?.2;
        if kept > 0 {
            anyhow::bail!(
                "{} holds {} of an interrupted run but not its config.resolved.toml, which a resume needs to check them; nothing was run. Restore that file, give a new --out, or run with --force to start the run again",
                dir.display(),
                kept_words(kept)
            );
        }
        return Ok(Plan::Fresh);
    }
    let recorded = std::fs::read_to_string(&config)
        .with_context(|| format!("reading {}", config.display()))?;
    if let Err(e) = recorded.parse::<toml::Table>() {
        anyhow::bail!(
            "{}: not a config this build can read ({}); nothing was run. Restore it, give a new --out, or run with --force to start the run again",
            config.display(),
            e.message()
        );
    }
    // What to say of this start against the recorded one: another thread
    // count, and the fields an earlier build did not record.
    let mut rewrite = None;
    if recorded != resolved {
        let computes = what_it_computes(resolved);
        let same_work = |text: &str| computes.is_some() && what_it_computes(text) == computes;
        let added = if same_work(&recorded) {
            Vec::new()
        } else if let Some(upgraded) = as_this_build_writes(&recorded).filter(|t| same_work(t)) {
            added_keys(&recorded, &upgraded)
        } else if complete_prefix(dir)?.2 == 0 {
            // Nothing worth keeping (a start cut short may even have left
            // the config empty): started again, as any run without a
            // complete round is.
            return Ok(Plan::Fresh);
        } else {
            // Past its end, the recorded config reads as an empty line after its last.
            let end = recorded.lines().count();
            let (n, was, now) = recorded
                .lines()
                .enumerate()
                .filter(|(_, l)| compared(l))
                .chain(std::iter::repeat((end, "")))
                .zip(
                    resolved
                        .lines()
                        .filter(|l| compared(l))
                        .chain(std::iter::repeat("")),
                )
                .find(|((_, a), b)| a != b)
                .map(|((i, a), b)| (i + 1, a.to_string(), b.to_string()))
                .unwrap_or_default();
            let recorded_line = if n > end {
                format!("config.resolved.toml ends after line {end}")
            } else {
                format!("config.resolved.toml line {n}: `{was}`")
            };
            return Err(OtherConfig(format!(
                "{} holds an incomplete run of another config ({recorded_line}, this run: `{now}`); nothing was run. Run with --force to replace it, or give a new --out",
                dir.display()
            ))
            .into());
        };
        rewrite = Some((how_differs(&recorded, resolved), added));
    }
    let (lines, keep_bytes, rounds) = complete_prefix(dir)?;
    if rounds == 0 {
        return Ok(Plan::Fresh);
    }
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l))
        .collect::<Result<_, _>>()
        .context("reading events.jsonl")?;
    let events = expand_events(events, &dir.join("events.jsonl"))?;
    let mut answers: Answers = HashMap::new();
    for e in events.iter().filter(|e| e["event"] == "invocation") {
        let agent = e["agent"].as_str().unwrap_or_default();
        for c in e["calls"].as_array().into_iter().flatten() {
            let seed = c["seed"]
                .as_u64()
                .with_context(|| format!("{}: a call without its seed", dir.display()))?;
            answers
                .entry((0, agent.to_string(), seed))
                .or_default()
                .push_back(
                    answer(c).with_context(|| {
                        format!("{}: a recorded call of {agent}", dir.display())
                    })?,
                );
        }
    }
    // Another thread count, fields an earlier build did not record: said,
    // and recorded above this start's config (the comments of earlier
    // resumes kept).
    let config = rewrite
        .filter(|(how, added)| !how.is_empty() || !added.is_empty())
        .map(|(how, added)| {
            let mut said = Vec::new();
            let mut why = Vec::new();
            if !how.is_empty() {
                said.push(
                    how.iter()
                        .map(|(k, was, now)| {
                            format!("{k} = {now} (the rounds before ran with {was})")
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                why.push("the records do not depend on it, latencies do");
            }
            if !added.is_empty() {
                let (them, its) = if added.len() == 1 {
                    ("it", "its default")
                } else {
                    ("them", "their defaults")
                };
                said.push(format!(
                    "{} at {its} (the build that started the run did not record {them})",
                    added.join(", ")
                ));
                why.push("each kept round is checked against its records as it is given again");
            }
            let said = said.join("; ");
            crate::errln!(
                "note: {}: resumed after {} with {said}; {}",
                dir.display(),
                kept_words(rounds),
                why.join("; "),
            );
            let mut text: String = recorded
                .lines()
                .take_while(|l| l.starts_with('#'))
                .map(|l| format!("{l}\n"))
                .collect();
            text.push_str(&format!("# resumed after {}: {said}\n", kept_words(rounds)));
            text.push_str(resolved);
            text
        });
    Ok(Plan::Resume(Resumed {
        rounds,
        lines,
        keep_bytes,
        answers,
        config,
    }))
}

/// A recorded call as the backend's answer that gives the same record.
fn answer(c: &Value) -> anyhow::Result<ModelResult> {
    let n = |k: &str| c[k].as_u64().unwrap_or(0) as u32;
    if let Some(message) = c["backend_error"].as_str() {
        return Ok(Err(BackendError {
            model: String::new(),
            message: message.to_string(),
            partial_usage: Some(TokenUsage {
                generated_tokens: n("charged_tokens"),
                charged_tokens: n("charged_tokens"),
                ..Default::default()
            }),
        }));
    }
    fn opt<T: serde::de::DeserializeOwned>(c: &Value, k: &str) -> anyhow::Result<Option<T>> {
        Ok(match &c[k] {
            Value::Null => None,
            v => Some(serde_json::from_value(v.clone()).with_context(|| format!("`{k}`"))?),
        })
    }
    Ok(Ok(ModelResponse {
        text: c["text"].as_str().unwrap_or_default().to_string(),
        thinking: c["thinking"].as_str().unwrap_or_default().to_string(),
        usage: TokenUsage {
            prompt_tokens: n("prompt_tokens"),
            generated_tokens: n("generated_tokens"),
            thinking_tokens: n("thinking_tokens"),
            charged_tokens: n("charged_tokens"),
            eos_counted: false,
        },
        finish: FinishReason::Stop,
        rendered_prompt: c["rendered_prompt"].as_str().map(str::to_string),
        latency_ms: c["latency_ms"].as_f64().unwrap_or(0.0),
        count_source: opt(c, "count_source")?,
        measured: opt(c, "measured")?,
    }))
}

/// A backend that answers the calls of a resumed run's complete rounds from
/// their record and passes every other call to `inner`, unchanged and in
/// order (with `inner`'s continuous batching when it has it).
pub struct Replay<'b> {
    inner: &'b mut dyn Backend,
    answers: Answers,
    /// Recorded answers to hand back at the next step.
    ready: Vec<Answer>,
    inner_in_flight: usize,
}

impl<'b> Replay<'b> {
    /// `inner`, answering the calls `answers` recorded.
    pub fn new(inner: &'b mut dyn Backend, answers: Answers) -> Replay<'b> {
        Replay {
            inner,
            answers,
            ready: Vec::new(),
            inner_in_flight: 0,
        }
    }

    fn recorded(&mut self, r: &ModelRequest) -> Option<ModelResult> {
        let key = (r.session, r.agent_id.clone(), r.params.seed);
        let q = self.answers.get_mut(&key)?;
        let a = q.pop_front();
        if q.is_empty() {
            self.answers.remove(&key);
        }
        a.map(|a| {
            a.map_err(|mut e| {
                e.model = r.model.clone();
                e
            })
        })
    }
}

impl Backend for Replay<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        let mut out: Vec<Option<ModelResult>> = batch.iter().map(|r| self.recorded(r)).collect();
        let rest: Vec<ModelRequest> = batch
            .iter()
            .zip(&out)
            .filter(|(_, a)| a.is_none())
            .map(|(r, _)| r.clone())
            .collect();
        if !rest.is_empty() {
            let mut fresh = self.inner.generate(&rest).into_iter();
            for (slot, r) in out.iter_mut().zip(batch) {
                if slot.is_none() {
                    *slot = Some(fresh.next().unwrap_or_else(|| {
                        Err(BackendError {
                            model: r.model.clone(),
                            message: "backend returned fewer results than requests".into(),
                            partial_usage: None,
                        })
                    }));
                }
            }
        }
        out.into_iter().flatten().collect()
    }

    fn batch_key(&self, model: &str) -> String {
        self.inner.batch_key(model)
    }

    fn unavailable(&self) -> Option<String> {
        self.inner.unavailable()
    }

    fn end_session(&mut self, session: u64) {
        self.inner.end_session(session);
    }

    fn plan_memory(
        &mut self,
        demand: &MemoryDemand,
    ) -> anyhow::Result<Option<Box<dyn MemoryReport>>> {
        self.inner.plan_memory(demand)
    }

    fn metering(&self) -> Option<crate::meter::attribution::MeterStatus> {
        self.inner.metering()
    }

    fn kernels(&self, models: &[&str]) -> Option<KernelRecord> {
        self.inner.kernels(models)
    }

    fn model_origins(&self, models: &[&str]) -> Vec<crate::backend::ModelOrigin> {
        self.inner.model_origins(models)
    }

    fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
        if self.inner.stepwise().is_some() {
            Some(self)
        } else {
            None
        }
    }
}

impl StepBackend for Replay<'_> {
    fn submit(&mut self, ticket: u64, request: ModelRequest) {
        match self.recorded(&request) {
            Some(result) => self.ready.push(Answer {
                ticket,
                request,
                result,
            }),
            None => {
                if let Some(s) = self.inner.stepwise() {
                    self.inner_in_flight += 1;
                    s.submit(ticket, request);
                }
            }
        }
    }

    fn step(&mut self) -> Vec<Answer> {
        if !self.ready.is_empty() {
            return std::mem::take(&mut self.ready);
        }
        let Some(s) = self.inner.stepwise() else {
            return Vec::new();
        };
        let answers = s.step();
        self.inner_in_flight = self.inner_in_flight.saturating_sub(answers.len());
        answers
    }

    fn in_flight(&self) -> usize {
        self.ready.len() + self.inner_in_flight
    }
}
