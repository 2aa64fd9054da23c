//! The data a report page embeds, built from what a run folder holds: the
//! reference layout (`agents.json` memory, `transcript.json`, `token_usage.json`)
//! for every run, and for Joule's own runs the full call records of
//! `events.jsonl` (read with [`read_events`]). Nothing here recomputes a
//! metric: energies, charges and rewards are the recorded values, and the
//! mean energy lines are the `energy_over_time` aggregate table.
//!
//! Prompt texts are deduplicated by line: every prompt is a list of ids into
//! one [`LineTable`] per page (calls repeat most lines of the rounds before).
//! The call records of each run are serialized apart from the rest, so the
//! page parses a run's calls only when they are browsed.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

use crate::energy_society::layout::{MemoryEntry, RunFolder};
use crate::energy_society::recorder::read_events;
use crate::report::load::{Condition, Run};
use crate::report::summary::agent_order;
use crate::report::table::{Cell, Table};

/// One page's table of prompt lines: a line's id is its index.
#[derive(Default)]
pub struct LineTable {
    ids: HashMap<String, u32>,
    pub lines: Vec<String>,
}

impl LineTable {
    /// The ids of the lines of `text` (split at `\n`), new lines appended,
    /// with runs of consecutive ids shortened: `-k` after id `a` stands for
    /// `a+1, …, a+k` (prompts add their new lines in order, so most ids come
    /// in such runs). `page.js` expands them.
    pub fn intern(&mut self, text: &str) -> Vec<i64> {
        let mut out: Vec<i64> = Vec::new();
        let mut last: Option<u32> = None;
        for line in text.split('\n') {
            let id = match self.ids.get(line) {
                Some(&id) => id,
                None => {
                    let id = self.lines.len() as u32;
                    self.ids.insert(line.to_string(), id);
                    self.lines.push(line.to_string());
                    id
                }
            };
            match (last, out.last_mut()) {
                (Some(prev), Some(tail)) if id == prev + 1 && *tail < 0 => *tail -= 1,
                (Some(prev), Some(_)) if id == prev + 1 => out.push(-1),
                _ => out.push(i64::from(id)),
            }
            last = Some(id);
        }
        out
    }
}

/// One agent of a condition.
#[derive(Serialize)]
pub struct AgentInfo {
    pub id: String,
    pub model: String,
    pub size: f64,
}

/// One point of the mean energy line (`energy_over_time`): round, mean, std,
/// and whether it is the `final` point.
#[derive(Serialize)]
pub struct MeanPoint(pub i64, pub Option<f64>, pub Option<f64>, pub bool);

/// One agent in one round of one run: what the memory entry and the
/// transcript record.
#[derive(Serialize, Default)]
pub struct RoundCell {
    pub r: u32,
    /// Energy at the start of the round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e: Option<f64>,
    /// The action (ATTEMPT_JOB, IDLE, DONATE, SABOTAGE_JOB, INACTIVE, ...).
    pub a: String,
    /// Energy spent in the round: voting, deciding, acting.
    pub sp: [f64; 3],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Difficulty and reward of the attempted job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jr: Option<f64>,
    /// Graded correct (`None`: not executed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ans: Option<String>,
    /// Energy rewarded.
    pub rw: f64,
    /// Donation target and amount.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amt: Option<f64>,
    /// Donations received: (from, amount).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rcv: Vec<(String, f64)>,
    /// Sabotaged job, whether it succeeded, whom it hit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sab: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sok: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hit: Vec<String>,
    /// The agent's vote: (agent, action, job or target, amount) per recommendation.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vote: Vec<(String, String, String, Option<f64>)>,
    /// Errors of the round: `phase: type`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub err: Vec<String>,
    /// The number of recorded calls of the agent in the round (the timeline
    /// links to them only when there are some).
    #[serde(skip_serializing_if = "is_zero")]
    pub nc: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One agent of one run.
#[derive(Serialize)]
pub struct RunAgent {
    pub id: String,
    #[serde(rename = "final")]
    pub final_energy: f64,
    pub init: f64,
    pub active: u32,
    pub deact: Option<u32>,
    pub rounds: Vec<RoundCell>,
}

/// One run: its timeline, and where its calls come from.
#[derive(Serialize)]
pub struct RunData {
    pub id: String,
    pub dir: String,
    pub seed: u64,
    pub max_rounds: u32,
    /// `events` (Joule's full call records) or `transcript` (the reference's
    /// transcripts: no prompts).
    pub source: &'static str,
    pub n_calls: usize,
    pub agents: Vec<RunAgent>,
}

/// One model call, as the call browser shows it. Fields a source lacks are
/// absent.
#[derive(Serialize, Default)]
pub struct Call {
    pub r: u32,
    pub ph: String,
    pub ag: String,
    /// Call index within the invocation (retries are further calls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub i: Option<u64>,
    /// Messages: role and line ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub msgs: Vec<(String, Vec<i64>)>,
    /// The rendered prompt (chat template applied), line ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rp: Option<Vec<i64>>,
    /// Raw output text.
    pub out: String,
    /// Thinking text.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub th: String,
    /// Prompt, generated, thinking and charged tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ct: Option<u64>,
    /// Energy charged for the call (for reference transcripts: the phase's
    /// recorded spend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ch: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ea: Option<f64>,
    /// Parse status: `ok`, the parse error, or `recorded` (reference).
    pub ps: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub be: Option<String>,
    /// Invocation status (`ok`, `FORMAT_ERROR`, `INVOKE_ERROR`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub st: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<Value>,
}

/// One condition's page data (without its calls).
#[derive(Serialize)]
pub struct ConditionData {
    pub label: String,
    pub dir: String,
    pub agents: Vec<AgentInfo>,
    /// Agent id → mean energy line.
    pub mean: Vec<(String, Vec<MeanPoint>)>,
    pub runs: Vec<RunData>,
}

/// A condition's data and the calls of each of its runs.
pub struct Built {
    pub data: ConditionData,
    pub calls: Vec<Vec<Call>>,
}

fn mean_lines(table: Option<&Table>) -> Vec<(String, Vec<MeanPoint>)> {
    let Some(t) = table else {
        return Vec::new();
    };
    let (Some(ia), Some(ir), Some(ip), Some(im), Some(is)) = (
        t.col("agent_id"),
        t.col("round_num"),
        t.col("point_type"),
        t.col("avg_energy"),
        t.col("std_energy"),
    ) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<MeanPoint>)> = Vec::new();
    for row in &t.rows {
        let Cell::Str(agent) = &row[ia] else { continue };
        let Some(round) = row[ir].as_f64() else {
            continue;
        };
        let fin = matches!(&row[ip], Cell::Str(s) if s == "final");
        let finite = |c: &Cell| c.as_f64().filter(|v| v.is_finite());
        let p = MeanPoint(round as i64, finite(&row[im]), finite(&row[is]), fin);
        match out.iter_mut().find(|(a, _)| a == agent) {
            Some((_, v)) => v.push(p),
            None => out.push((agent.clone(), vec![p])),
        }
    }
    out.sort_by_key(|(a, _)| agent_order(a));
    out
}

fn str_of(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(x) => x.to_string(),
    }
}

fn votes_by(
    folder: &RunFolder,
) -> HashMap<(String, u32), Vec<(String, String, String, Option<f64>)>> {
    let mut out = HashMap::new();
    for e in folder.transcript.iter().filter(|e| e.phase == "vote") {
        let recs = e
            .structured_response
            .get("recommendations")
            .and_then(Value::as_array)
            .map(|v| v.as_slice())
            .unwrap_or(&[]);
        let v: Vec<_> = recs
            .iter()
            .map(|r| {
                let job = str_of(r, "job_id");
                let what = if job.is_empty() {
                    str_of(r, "target_agent")
                } else {
                    job
                };
                (
                    str_of(r, "agent_id"),
                    str_of(r, "recommended_action"),
                    what,
                    r.get("amount").and_then(Value::as_f64),
                )
            })
            .collect();
        out.insert((e.agent_id.clone(), e.round_num), v);
    }
    out
}

fn round_cell(m: &MemoryEntry) -> RoundCell {
    let job = m.attempted_job.as_ref();
    let sab = m.sabotaged_job.as_ref().and_then(|j| j.as_ref());
    RoundCell {
        r: m.round_num,
        e: m.energy_at_start_of_round,
        a: m.action.clone(),
        sp: [
            m.energy_spent_voting.unwrap_or(0.0),
            m.energy_spent_deciding.unwrap_or(0.0),
            m.energy_spent_on_action.unwrap_or(0.0),
        ],
        job: job.map(|j| j.job_id.clone()),
        diff: job.map(|j| j.difficulty.clone()),
        jr: job.map(|j| j.reward),
        ok: m.succeeded,
        ans: m.agent_answer.clone(),
        rw: m.energy_rewarded.unwrap_or(0.0),
        to: m.target_agent.clone(),
        amt: m.donated_amount,
        rcv: m
            .received_donations
            .iter()
            .flatten()
            .map(|d| (d.from_agent.clone(), d.amount))
            .collect(),
        sab: sab.map(|j| j.job_id.clone()),
        sok: m.sabotage_successful.flatten(),
        hit: m.sabotage_hit_agents.clone().flatten().unwrap_or_default(),
        ..RoundCell::default()
    }
}

fn run_agents(folder: &RunFolder) -> Vec<RunAgent> {
    let votes = votes_by(folder);
    let mut agents: Vec<RunAgent> = folder
        .agents
        .iter()
        .map(|a| {
            let rounds = a
                .memory
                .iter()
                .map(|m| {
                    let mut c = round_cell(m);
                    if let Some(v) = votes.get(&(a.agent_id.clone(), m.round_num)) {
                        c.vote = v.clone();
                    }
                    c.err = a
                        .errors
                        .iter()
                        .filter(|e| e.round_num == m.round_num)
                        .map(|e| format!("{}: {}", e.phase, e.error_type))
                        .collect();
                    c
                })
                .collect();
            RunAgent {
                id: a.agent_id.clone(),
                final_energy: a.final_energy,
                init: a.init_energy,
                active: a.rounds_active,
                deact: a.deactivated_at_round,
                rounds,
            }
        })
        .collect();
    agents.sort_by_key(|a| agent_order(&a.id));
    agents
}

/// The calls of a reference run: its transcript entries, with the output
/// tokens of `token_usage.json` and the phase's spend from the memory entry.
fn transcript_calls(folder: &RunFolder) -> Vec<Call> {
    let tokens: HashMap<(u32, &str, &str), u64> = folder
        .token_usage
        .iter()
        .map(|t| {
            (
                (t.round_num, t.phase.as_str(), t.agent_id.as_str()),
                t.output_tokens,
            )
        })
        .collect();
    let spend: HashMap<(u32, &str), &MemoryEntry> = folder
        .agents
        .iter()
        .flat_map(|a| {
            a.memory
                .iter()
                .map(move |m| ((m.round_num, a.agent_id.as_str()), m))
        })
        .collect();
    folder
        .transcript
        .iter()
        .map(|e| {
            let m = spend.get(&(e.round_num, e.agent_id.as_str()));
            let ch = m.and_then(|m| match e.phase.as_str() {
                "vote" => m.energy_spent_voting,
                "decide" => m.energy_spent_deciding,
                "act" => m.energy_spent_on_action,
                _ => None,
            });
            Call {
                r: e.round_num,
                ph: e.phase.clone(),
                ag: e.agent_id.clone(),
                out: serde_json::to_string(&e.structured_response).unwrap_or_default(),
                th: e.reasoning_content.clone(),
                ct: tokens
                    .get(&(e.round_num, e.phase.as_str(), e.agent_id.as_str()))
                    .copied(),
                ch,
                ps: "recorded".into(),
                ..Call::default()
            }
        })
        .collect()
}

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn int(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

/// The calls of a Joule run: every call of every `invocation` event.
/// A folder marked COMPLETE whose log does not end with the run's `run_end`
/// was cut (copied in part, truncated): it is refused, not shown with calls missing.
fn event_calls(path: &Path, lines: &mut LineTable) -> anyhow::Result<Vec<Call>> {
    let events = read_events(path)?;
    let complete = path.with_file_name(crate::energy_society::recorder::COMPLETE_MARKER);
    if complete.is_file() && events.last().is_none_or(|e| e["event"] != "run_end") {
        anyhow::bail!(
            "{} does not end with the run's `run_end` event although the folder is marked \
             COMPLETE: the record was cut, so its calls cannot all be shown (copy the whole \
             file again, or play the run again)",
            path.display()
        );
    }
    let mut out = Vec::new();
    for e in events.iter().filter(|e| e["event"] == "invocation") {
        let status = e
            .get("status")
            .map(|s| str_of(s, "status"))
            .unwrap_or_default();
        let calls = e.get("calls").and_then(Value::as_array);
        for c in calls.into_iter().flatten() {
            let msgs = c
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|m| {
                    let content = m.get("content").and_then(Value::as_str).unwrap_or("");
                    (str_of(m, "role"), lines.intern(content))
                })
                .collect();
            let parse = match c.get("parse_error") {
                Some(Value::Null) | None => "ok".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(x) => x.to_string(),
            };
            out.push(Call {
                r: int(e, "round").unwrap_or(0) as u32,
                ph: str_of(e, "phase"),
                ag: str_of(e, "agent"),
                i: int(c, "call"),
                msgs,
                rp: c
                    .get("rendered_prompt")
                    .and_then(Value::as_str)
                    .map(|t| lines.intern(t)),
                out: str_of(c, "text"),
                th: str_of(c, "thinking"),
                pt: int(c, "prompt_tokens"),
                gt: int(c, "generated_tokens"),
                tt: int(c, "thinking_tokens"),
                ct: int(c, "charged_tokens"),
                ch: num(c, "charge"),
                eb: num(c, "energy_before"),
                ea: num(c, "energy_after"),
                ps: parse,
                be: c
                    .get("backend_error")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                st: Some(status.clone()),
                src: c.get("count_source").filter(|v| !v.is_null()).cloned(),
            });
        }
    }
    Ok(out)
}

fn run_data(run: &Run, lines: &mut LineTable) -> anyhow::Result<(RunData, Vec<Call>)> {
    let events = run.dir.join("events.jsonl");
    let (source, calls) = if events.is_file() {
        let calls = event_calls(&events, lines)
            .with_context(|| format!("reading the calls of {}", events.display()))?;
        ("events", calls)
    } else {
        ("transcript", transcript_calls(&run.data))
    };
    let mut per_cell: HashMap<(u32, &str), usize> = HashMap::new();
    for c in &calls {
        *per_cell.entry((c.r, c.ag.as_str())).or_default() += 1;
    }
    let mut agents = run_agents(&run.data);
    for a in &mut agents {
        for rc in &mut a.rounds {
            rc.nc = per_cell.get(&(rc.r, a.id.as_str())).copied().unwrap_or(0);
        }
    }
    Ok((
        RunData {
            id: run.run_id.clone(),
            dir: run.dir.display().to_string(),
            seed: run.data.config.seed,
            max_rounds: run.data.config.max_rounds,
            source,
            n_calls: calls.len(),
            agents,
        },
        calls,
    ))
}

/// Everything a page shows of one condition, lines interned into `lines`.
pub fn build(
    cond: &Condition,
    tables: &[(&'static str, Table)],
    lines: &mut LineTable,
) -> anyhow::Result<Built> {
    let mut agents: Vec<AgentInfo> = Vec::new();
    for run in &cond.runs {
        for a in &run.data.agents {
            if !agents.iter().any(|x| x.id == a.agent_id) {
                // The paper's model, and the models that answered beside it.
                let mut answered: Vec<String> = Vec::new();
                for r in cond.runs.iter().flat_map(|r| &r.data.agents) {
                    if r.agent_id == a.agent_id {
                        if let Some(m) = &r.answered_by {
                            if !answered.contains(m) {
                                answered.push(m.clone());
                            }
                        }
                    }
                }
                agents.push(AgentInfo {
                    id: a.agent_id.clone(),
                    model: crate::report::summary::model_label(&a.model_name, &answered),
                    size: a.model_size,
                });
            }
        }
    }
    agents.sort_by_key(|a| agent_order(&a.id));
    let table = tables
        .iter()
        .find(|(n, _)| *n == "energy_over_time")
        .map(|(_, t)| t);
    let mut runs = Vec::new();
    let mut calls = Vec::new();
    for run in &cond.runs {
        let (r, c) = run_data(run, lines)?;
        runs.push(r);
        calls.push(c);
    }
    // Run numbers repeat when runs were made one by one (`joule run --seed`):
    // then the folder names tell them apart.
    let mut ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        for (r, run) in runs.iter_mut().zip(&cond.runs) {
            if let Some(name) = run.dir.file_name() {
                r.id = name.to_string_lossy().into_owned();
            }
        }
    }
    Ok(Built {
        data: ConditionData {
            label: cond.label.clone(),
            dir: cond.dir.display().to_string(),
            agents,
            mean: mean_lines(table),
            runs,
        },
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of the run encoding, as `page.js` expands it.
    fn expand(ids: &[i64]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut prev = 0i64;
        for &v in ids {
            if v < 0 {
                for k in 1..=-v {
                    out.push((prev + k) as u32);
                }
                prev -= v;
            } else {
                out.push(v as u32);
                prev = v;
            }
        }
        out
    }

    #[test]
    fn interned_texts_come_back_whole_and_runs_are_shortened() {
        let mut t = LineTable::default();
        let a = t.intern("one\ntwo\nthree\nfour");
        assert_eq!(a, vec![0, -3]);
        let b = t.intern("two\nthree\nfive\n\nsix\none");
        assert_eq!(b, vec![1, -1, 4, -2, 0]);
        for (ids, text) in [
            (&a, "one\ntwo\nthree\nfour"),
            (&b, "two\nthree\nfive\n\nsix\none"),
        ] {
            let back: Vec<&str> = expand(ids)
                .iter()
                .map(|&i| t.lines[i as usize].as_str())
                .collect();
            assert_eq!(back.join("\n"), text);
        }
        assert_eq!(t.intern(""), vec![5]);
        assert_eq!(t.lines[5], "");
    }
}
