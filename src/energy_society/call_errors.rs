//! How many of a run's invocations failed, per agent: INVOKE_ERRORs (the
//! backend could not answer: an unknown policy, a model that would not
//! load, a server that went away) and FORMAT_ERRORs (no valid answer within
//! the call budget), counted from the `invocation` events of `events.jsonl`
//! and kept in the run folder as `call_errors.json`. Faithful mode keeps
//! the reference's outcomes for both; this file is how the user is told.
//! A run with INVOKE_ERRORs did not run as configured: `joule run` and
//! `joule sweep` exit with [`EXIT_CALL_ERRORS`] for it.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The file in a run folder that keeps the counts.
pub const FILE: &str = "call_errors.json";

/// The exit status of a run (or sweep) that completed with INVOKE_ERRORs.
pub const EXIT_CALL_ERRORS: u8 = 3;

/// One agent's failed invocations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentErrors {
    pub agent_id: String,
    pub invoke_errors: u32,
    pub format_errors: u32,
    /// The message of the agent's first INVOKE_ERROR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_invoke_error: Option<String>,
}

/// Every agent's failed invocations, in roster order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallErrors {
    pub invoke_errors: u32,
    pub format_errors: u32,
    pub agents: Vec<AgentErrors>,
}

#[derive(Deserialize)]
struct Event {
    event: String,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    status: String,
    #[serde(default)]
    message: Option<String>,
}

impl CallErrors {
    /// Count the failed invocations of the run in `dir` (its `events.jsonl`)
    /// for the agents `agent_ids` (roster order; an agent the events name
    /// that is not listed is added at the end).
    pub fn count(dir: &Path, agent_ids: &[String]) -> anyhow::Result<CallErrors> {
        let path = dir.join("events.jsonl");
        let file =
            std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut out = CallErrors {
            agents: agent_ids
                .iter()
                .map(|a| AgentErrors {
                    agent_id: a.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        for line in std::io::BufReader::new(file).lines() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            // Only invocation events matter; a torn line is no invocation.
            if !line.contains("\"invocation\"") {
                continue;
            }
            let Ok(ev) = serde_json::from_str::<Event>(&line) else {
                continue;
            };
            let (Some(agent), Some(status)) = (ev.agent, ev.status) else {
                continue;
            };
            if ev.event != "invocation" {
                continue;
            }
            let invoke = status.status == "invoke_error";
            if !invoke && status.status != "format_error" {
                continue;
            }
            let i = match out.agents.iter().position(|a| a.agent_id == agent) {
                Some(i) => i,
                None => {
                    out.agents.push(AgentErrors {
                        agent_id: agent,
                        ..Default::default()
                    });
                    out.agents.len() - 1
                }
            };
            let a = &mut out.agents[i];
            if invoke {
                a.invoke_errors += 1;
                out.invoke_errors += 1;
                if a.first_invoke_error.is_none() {
                    a.first_invoke_error = status.message;
                }
            } else {
                a.format_errors += 1;
                out.format_errors += 1;
            }
        }
        Ok(out)
    }

    /// Count (as [`CallErrors::count`]) and write `call_errors.json` into `dir`.
    pub fn write(dir: &Path, agent_ids: &[String]) -> anyhow::Result<CallErrors> {
        let c = Self::count(dir, agent_ids)?;
        crate::record::write_json_atomic(dir.join(FILE), &c)?;
        Ok(c)
    }

    /// The counts a run folder keeps, or counted from its events when the
    /// file is missing (a run written before it existed); `None` for a
    /// folder with neither.
    pub fn read(dir: &Path) -> anyhow::Result<Option<CallErrors>> {
        let path = dir.join(FILE);
        if path.is_file() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            return Ok(Some(serde_json::from_str(&text).with_context(|| {
                format!("{}: unexpected content", path.display())
            })?));
        }
        if dir.join("events.jsonl").is_file() {
            return Ok(Some(Self::count(dir, &[])?));
        }
        Ok(None)
    }

    /// The agent's counts (zero for an agent with none).
    pub fn of(&self, agent_id: &str) -> (u32, u32) {
        self.agents
            .iter()
            .find(|a| a.agent_id == agent_id)
            .map_or((0, 0), |a| (a.invoke_errors, a.format_errors))
    }

    /// Lines for people: each agent with INVOKE_ERRORs and its first
    /// message, then the FORMAT_ERROR total; empty when nothing failed.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for a in &self.agents {
            if a.invoke_errors > 0 {
                s += &format!(
                    "call errors: {} had {} INVOKE_ERROR(s): {}\n",
                    crate::shown::terminal(&a.agent_id),
                    a.invoke_errors,
                    clip(a.first_invoke_error.as_deref().unwrap_or("(no message)"))
                );
            }
        }
        if self.format_errors > 0 {
            s += &format!(
                "format errors: {} invocation(s) gave no valid answer within the call budget (FORMAT_ERROR)\n",
                self.format_errors
            );
        }
        s
    }
}

/// A message cut to 300 characters, with its control characters escaped (a
/// server's error body can be long, and is printed; the whole message stays
/// in `call_errors.json` and `events.jsonl`).
fn clip(m: &str) -> String {
    match m.char_indices().nth(300) {
        Some((i, _)) => format!("{}… (see {FILE})", crate::shown::terminal(&m[..i])),
        None => crate::shown::terminal(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_invoke_and_format_errors_per_agent() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            r#"{"event": "run_start", "seed": 1}"#,
            r#"{"event": "invocation", "round": 1, "agent": "a", "status": {"status": "invoke_error", "message": "boom"}}"#,
            r#"{"event": "invocation", "round": 1, "agent": "a", "status": {"status": "invoke_error", "message": "again"}}"#,
            r#"{"event": "invocation", "round": 1, "agent": "b", "status": {"status": "format_error"}}"#,
            r#"{"event": "invocation", "round": 1, "agent": "b", "status": {"status": "ok"}}"#,
            r#"{"event": "invocation", "round": 2, "agent": "c", "sta"#,
        ];
        std::fs::write(dir.path().join("events.jsonl"), lines.join("\n")).unwrap();
        let ids = ["a".to_string(), "b".to_string(), "z".to_string()];
        let c = CallErrors::write(dir.path(), &ids).unwrap();
        assert_eq!((c.invoke_errors, c.format_errors), (2, 1));
        assert_eq!(c.of("a"), (2, 0));
        assert_eq!(c.of("b"), (0, 1));
        assert_eq!(c.of("z"), (0, 0));
        assert_eq!(c.agents[0].first_invoke_error.as_deref(), Some("boom"));
        assert_eq!(CallErrors::read(dir.path()).unwrap(), Some(c.clone()));
        assert!(
            c.describe().contains("a had 2 INVOKE_ERROR(s): boom"),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn a_long_message_is_cut_when_described() {
        let long = "é".repeat(1000);
        let c = CallErrors {
            invoke_errors: 1,
            format_errors: 0,
            agents: vec![AgentErrors {
                agent_id: "a".into(),
                invoke_errors: 1,
                format_errors: 0,
                first_invoke_error: Some(long),
            }],
        };
        let d = c.describe();
        assert!(
            d.len() < 700 && d.contains("… (see call_errors.json)"),
            "{d}"
        );
    }

    /// A recorded message keeps the server's raw text (it is data); the
    /// lines printed from it carry no control character but their ends.
    #[test]
    fn described_messages_have_their_control_characters_escaped() {
        let raw = "HTTP 400: \u{1b}]0;pwned\u{7}\u{1b}[2Jbad\nrequest";
        let c = CallErrors {
            invoke_errors: 1,
            format_errors: 0,
            agents: vec![AgentErrors {
                agent_id: "a\u{1b}[31m".into(),
                invoke_errors: 1,
                format_errors: 0,
                first_invoke_error: Some(raw.into()),
            }],
        };
        let d = c.describe();
        assert!(
            !d.trim_end_matches('\n').chars().any(char::is_control),
            "{d:?}"
        );
        assert!(d.contains("HTTP 400: \\u{1b}]0;pwned\\u{7}"), "{d}");
        let long = format!("{}{raw}", "x".repeat(295));
        let c = CallErrors {
            agents: vec![AgentErrors {
                first_invoke_error: Some(long),
                ..c.agents[0].clone()
            }],
            ..c
        };
        let d = c.describe();
        assert!(
            !d.trim_end_matches('\n').chars().any(char::is_control),
            "{d:?}"
        );
    }
}
