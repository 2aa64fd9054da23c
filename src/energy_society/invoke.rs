//! One invocation (spec §2): a vote, decide or solve of one agent, made of
//! up to `max_calls` model calls with parse-and-retry. Every call is charged
//! on the invocation's ledger [`Tab`] (`round(T · c, 2)`, clamped at 0,
//! carried from call to call); the scenario has the ledger settle the tab
//! when the invocation returns. The outcome is either a parsed value, a
//! FORMAT_ERROR (no valid answer within the budget) or an INVOKE_ERROR (the
//! backend failed).

use serde::Serialize;

use crate::agency::Agency;
use crate::backend::{ChatMessage, GenParams, ModelRequest, OutputFormat, Role};
use crate::energy::py_round;

use super::config::Mode;
use super::ledger::Tab;
use super::recorder::{Recorder, Text};

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", content = "message", rename_all = "snake_case")]
pub enum InvokeStatus {
    Ok,
    /// No structured answer within the call budget.
    FormatError,
    /// The backend failed.
    InvokeError(String),
    /// Corrected mode only (QUIRK-2): the agent reached 0 mid-invocation and
    /// the invocation was aborted.
    EnergyExhausted,
}

/// One model call of an invocation. `events.jsonl` records it as a
/// [`CallRecord`]: these fields, with the prompt texts (`messages`,
/// `rendered_prompt`) stored through the recorder's line table.
#[derive(Debug, Clone, Serialize)]
pub struct CallLog {
    pub call: u32,
    #[serde(skip)]
    pub messages: Vec<ChatMessage>,
    pub seed: u64,
    pub text: String,
    pub thinking: String,
    #[serde(skip)]
    pub rendered_prompt: Option<String>,
    pub prompt_tokens: u32,
    pub generated_tokens: u32,
    pub thinking_tokens: u32,
    pub charged_tokens: u32,
    /// Which count `charged_tokens` is and who counted it (none when the call failed).
    pub count_source: Option<crate::backend::CountSource>,
    pub charge: f64,
    /// Under the measured cost model: what the formula would have charged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formula_charge: Option<f64>,
    /// The joules an energy meter measured for the call (prefill, decode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<crate::meter::attribution::MeasuredEnergy>,
    pub energy_before: f64,
    pub energy_after: f64,
    pub parse_error: Option<String>,
    pub backend_error: Option<String>,
    pub latency_ms: f64,
}

/// A chat message as `events.jsonl` records it.
#[derive(Debug, Clone, Serialize)]
pub struct MessageRecord<'a> {
    pub role: Role,
    pub content: Text<'a>,
}

/// A [`CallLog`] as `events.jsonl` records it.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord<'a> {
    pub messages: Vec<MessageRecord<'a>>,
    pub rendered_prompt: Option<Text<'a>>,
    #[serde(flatten)]
    pub call: &'a CallLog,
}

impl CallLog {
    /// This call with its texts as `rec` stores them.
    pub fn record<'a>(&'a self, rec: &mut Recorder) -> CallRecord<'a> {
        CallRecord {
            messages: self
                .messages
                .iter()
                .map(|m| MessageRecord {
                    role: m.role,
                    content: rec.text(&m.content),
                })
                .collect(),
            rendered_prompt: self.rendered_prompt.as_deref().map(|p| rec.text(p)),
            call: self,
        }
    }
}

/// Everything one agent's phase needs to ask its model.
#[derive(Debug, Clone)]
pub struct InvokeSpec {
    pub agent: usize,
    pub model: String,
    pub agent_id: String,
    pub tag: String,
    pub system: String,
    pub user: String,
    pub format: OutputFormat,
    pub params: GenParams,
    pub observation: serde_json::Value,
    /// The agent's tab, opened at its energy now.
    pub tab: Tab,
    pub max_calls: u32,
    pub mode: Mode,
}

/// The result of one invocation.
#[derive(Debug, Clone)]
pub struct Invocation<T> {
    pub agent: usize,
    pub value: Option<T>,
    pub status: InvokeStatus,
    pub calls: Vec<CallLog>,
    /// The charges of the calls, for the ledger to apply.
    pub tab: Tab,
    /// Tokens for `token_usage.json`: summed over calls, 0 on INVOKE_ERROR
    /// in faithful mode (QUIRK-3).
    pub logged_tokens: u64,
    /// Thinking text of every call, joined by blank lines.
    pub reasoning: String,
}

impl<T> Invocation<T> {
    pub fn energy_before(&self) -> f64 {
        self.tab.start()
    }
    pub fn energy_after(&self) -> f64 {
        self.tab.energy()
    }
    /// `round(before − after, 2)`: what memory records as the phase's spend.
    pub fn spent(&self) -> f64 {
        py_round(self.energy_before() - self.energy_after(), 2)
    }
}

/// A stable per-call sampling seed.
pub fn call_seed(run_seed: u64, round: u32, tag: &str, agent: usize, call: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ run_seed;
    for b in tag
        .bytes()
        .chain(round.to_le_bytes())
        .chain((agent as u64).to_le_bytes())
        .chain(call.to_le_bytes())
    {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Run one invocation against the agency.
pub async fn invoke<T>(
    agency: &Agency,
    spec: InvokeSpec,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Invocation<T> {
    let InvokeSpec {
        agent,
        model,
        agent_id,
        tag,
        system,
        user,
        format,
        params,
        observation,
        tab,
        max_calls,
        mode,
    } = spec;
    let mut tab = tab;
    let mut calls = Vec::new();
    let mut reasoning = Vec::new();
    let mut tokens: u64 = 0;
    let base_seed = params.seed;
    let done = |value, status, calls, tab, logged_tokens, reasoning: Vec<String>| Invocation {
        agent,
        value,
        status,
        calls,
        tab,
        logged_tokens,
        reasoning: reasoning.join("\n\n"),
    };
    // One request, amended and resent on each retry (the agency hands it back).
    let mut req = ModelRequest {
        model,
        session: 0,
        agent_id,
        tag,
        messages: vec![ChatMessage::system(system), ChatMessage::user(user)],
        format,
        params,
        observation,
    };
    for call in 0..max_calls {
        req.params.seed = base_seed.wrapping_add(call as u64);
        if let Some(o) = req.observation.as_object_mut() {
            o.insert("call".into(), call.into());
        }
        let before = tab.energy();
        let (back, result) = agency.exchange(req).await;
        req = back;
        // The measured cost model cannot price a call without a measurement.
        let result = match result {
            Ok(r) if tab.per_joule().is_some() && r.measured.is_none() => {
                Err(crate::backend::BackendError {
                    model: req.model.clone(),
                    message: "no measured energy for this call (the energy meter's read failed; see meter.json), and [cost] model = \"measured\" prices calls by it".into(),
                    partial_usage: Some(r.usage),
                })
            }
            other => other,
        };
        match result {
            Err(e) => {
                let partial = e.partial_usage.map(|u| u.charged_tokens).unwrap_or(0);
                let charge = match mode {
                    // QUIRK-3: nothing is charged for the whole invocation.
                    Mode::Faithful => {
                        tab.void();
                        0.0
                    }
                    Mode::Corrected => tab.charge(partial as u64).amount,
                };
                calls.push(CallLog {
                    call,
                    messages: std::mem::take(&mut req.messages),
                    seed: req.params.seed,
                    text: String::new(),
                    thinking: String::new(),
                    rendered_prompt: None,
                    prompt_tokens: 0,
                    generated_tokens: partial,
                    thinking_tokens: 0,
                    charged_tokens: partial,
                    count_source: None,
                    charge,
                    formula_charge: None,
                    measured: None,
                    energy_before: before,
                    energy_after: tab.energy(),
                    parse_error: None,
                    backend_error: Some(e.message.clone()),
                    latency_ms: 0.0,
                });
                let logged = match mode {
                    Mode::Faithful => 0,
                    Mode::Corrected => tokens + partial as u64,
                };
                let status = InvokeStatus::InvokeError(e.message);
                return done(None, status, calls, tab, logged, reasoning);
            }
            Ok(resp) => {
                let charged = resp.usage.charged_tokens;
                let charge = match &resp.measured {
                    Some(m) if tab.per_joule().is_some() => {
                        tab.charge_measured(charged as u64, m.joules()).amount
                    }
                    _ => tab.charge(charged as u64).amount,
                };
                let formula_charge = tab
                    .per_joule()
                    .map(|_| crate::energy::token_charge(charged as u64, tab.per_token()));
                let energy = tab.energy();
                tokens += charged as u64;
                if !resp.thinking.is_empty() {
                    reasoning.push(resp.thinking.clone());
                }
                let parsed = parse(&resp.text);
                let parse_error = parsed.as_ref().err().cloned();
                // QUIRK-2 corrected: reaching 0 aborts; the output is not used.
                let exhausted = mode == Mode::Corrected && energy <= 0.0;
                // The conversation goes on only after an unusable answer.
                let last = parsed.is_ok() || exhausted;
                calls.push(CallLog {
                    call,
                    messages: if last {
                        std::mem::take(&mut req.messages)
                    } else {
                        req.messages.clone()
                    },
                    seed: req.params.seed,
                    text: resp.text.clone(),
                    thinking: resp.thinking,
                    rendered_prompt: resp.rendered_prompt,
                    prompt_tokens: resp.usage.prompt_tokens,
                    generated_tokens: resp.usage.generated_tokens,
                    thinking_tokens: resp.usage.thinking_tokens,
                    charged_tokens: charged,
                    count_source: resp.count_source.clone(),
                    charge,
                    formula_charge,
                    measured: resp.measured.clone(),
                    energy_before: before,
                    energy_after: energy,
                    parse_error,
                    backend_error: None,
                    latency_ms: resp.latency_ms,
                });
                if exhausted {
                    let status = InvokeStatus::EnergyExhausted;
                    return done(None, status, calls, tab, tokens, reasoning);
                }
                match parsed {
                    Ok(v) => return done(Some(v), InvokeStatus::Ok, calls, tab, tokens, reasoning),
                    Err(err) => {
                        req.messages.push(ChatMessage::assistant(resp.text));
                        req.messages.push(ChatMessage::user(format!(
                            "That answer could not be used ({err}). Reply again with only the JSON object."
                        )));
                    }
                }
            }
        }
    }
    done(
        None,
        InvokeStatus::FormatError,
        calls,
        tab,
        tokens,
        reasoning,
    )
}

/// Run several invocations in parallel (one fan-out phase).
pub async fn invoke_all<T>(
    agency: &Agency,
    specs: Vec<InvokeSpec>,
    parse: impl Fn(&str) -> Result<T, String> + Copy,
) -> Vec<Invocation<T>> {
    futures::future::join_all(specs.into_iter().map(|s| invoke(agency, s, parse))).await
}
