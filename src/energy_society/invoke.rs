//! One invocation (spec §2): a vote, decide or solve of one agent, made of
//! up to `max_calls` model calls with parse-and-retry. Energy is charged
//! after every call (`round(T · c, 2)`, clamped at 0) and carried from call
//! to call; the scenario writes it back when the invocation returns. The
//! outcome is either a parsed value, a FORMAT_ERROR (no valid answer within
//! the budget) or an INVOKE_ERROR (the backend failed).

use serde::Serialize;

use crate::agency::Agency;
use crate::backend::{ChatMessage, GenParams, ModelRequest, OutputFormat};
use crate::energy::{clamp_sub, py_round};

use super::config::Mode;

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

/// One model call of an invocation, as recorded in `events.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct CallLog {
    pub call: u32,
    pub messages: Vec<ChatMessage>,
    pub seed: u64,
    pub text: String,
    pub thinking: String,
    pub rendered_prompt: Option<String>,
    pub prompt_tokens: u32,
    pub generated_tokens: u32,
    pub thinking_tokens: u32,
    pub charged_tokens: u32,
    /// Which count `charged_tokens` is and who counted it (none when the call failed).
    pub count_source: Option<crate::backend::CountSource>,
    pub charge: f64,
    pub energy_before: f64,
    pub energy_after: f64,
    pub parse_error: Option<String>,
    pub backend_error: Option<String>,
    pub latency_ms: f64,
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
    pub per_token: f64,
    pub energy_before: f64,
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
    pub energy_before: f64,
    pub energy_after: f64,
    /// Tokens for `token_usage.json`: summed over calls, 0 on INVOKE_ERROR
    /// in faithful mode (QUIRK-3).
    pub logged_tokens: u64,
    /// Thinking text of every call, joined by blank lines.
    pub reasoning: String,
}

impl<T> Invocation<T> {
    /// `round(before − after, 2)`: what memory records as the phase's spend.
    pub fn spent(&self) -> f64 {
        py_round(self.energy_before - self.energy_after, 2)
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
    let mut messages = vec![
        ChatMessage::system(spec.system.clone()),
        ChatMessage::user(spec.user.clone()),
    ];
    let mut energy = spec.energy_before;
    let mut calls = Vec::new();
    let mut reasoning = Vec::new();
    let mut tokens: u64 = 0;
    let base_seed = spec.params.seed;
    for call in 0..spec.max_calls {
        let mut params = spec.params.clone();
        params.seed = base_seed.wrapping_add(call as u64);
        let mut observation = spec.observation.clone();
        if let Some(o) = observation.as_object_mut() {
            o.insert("call".into(), call.into());
        }
        let req = ModelRequest {
            model: spec.model.clone(),
            agent_id: spec.agent_id.clone(),
            tag: spec.tag.clone(),
            messages: messages.clone(),
            format: spec.format.clone(),
            params: params.clone(),
            observation,
        };
        let before = energy;
        match agency.call(req).await {
            Err(e) => {
                let partial = e.partial_usage.map(|u| u.charged_tokens).unwrap_or(0);
                let (after, charge) = match spec.mode {
                    // QUIRK-3: nothing is charged for the whole invocation.
                    Mode::Faithful => (spec.energy_before, 0.0),
                    Mode::Corrected => {
                        let c = py_round(partial as f64 * spec.per_token, 2);
                        (clamp_sub(energy, c), c)
                    }
                };
                calls.push(CallLog {
                    call,
                    messages,
                    seed: params.seed,
                    text: String::new(),
                    thinking: String::new(),
                    rendered_prompt: None,
                    prompt_tokens: 0,
                    generated_tokens: partial,
                    thinking_tokens: 0,
                    charged_tokens: partial,
                    count_source: None,
                    charge,
                    energy_before: before,
                    energy_after: after,
                    parse_error: None,
                    backend_error: Some(e.message.clone()),
                    latency_ms: 0.0,
                });
                let logged = match spec.mode {
                    Mode::Faithful => 0,
                    Mode::Corrected => tokens + partial as u64,
                };
                return Invocation {
                    agent: spec.agent,
                    value: None,
                    status: InvokeStatus::InvokeError(e.message),
                    calls,
                    energy_before: spec.energy_before,
                    energy_after: after,
                    logged_tokens: logged,
                    reasoning: reasoning.join("\n\n"),
                };
            }
            Ok(resp) => {
                let charged = resp.usage.charged_tokens;
                let charge = py_round(charged as f64 * spec.per_token, 2);
                energy = clamp_sub(energy, charge);
                tokens += charged as u64;
                if !resp.thinking.is_empty() {
                    reasoning.push(resp.thinking.clone());
                }
                let parsed = parse(&resp.text);
                let parse_error = parsed.as_ref().err().cloned();
                calls.push(CallLog {
                    call,
                    messages: messages.clone(),
                    seed: params.seed,
                    text: resp.text.clone(),
                    thinking: resp.thinking.clone(),
                    rendered_prompt: resp.rendered_prompt.clone(),
                    prompt_tokens: resp.usage.prompt_tokens,
                    generated_tokens: resp.usage.generated_tokens,
                    thinking_tokens: resp.usage.thinking_tokens,
                    charged_tokens: charged,
                    count_source: resp.count_source.clone(),
                    charge,
                    energy_before: before,
                    energy_after: energy,
                    parse_error: parse_error.clone(),
                    backend_error: None,
                    latency_ms: resp.latency_ms,
                });
                if spec.mode == Mode::Corrected && energy <= 0.0 {
                    // QUIRK-2 corrected: reaching 0 aborts; the output is not used.
                    return Invocation {
                        agent: spec.agent,
                        value: None,
                        status: InvokeStatus::EnergyExhausted,
                        calls,
                        energy_before: spec.energy_before,
                        energy_after: energy,
                        logged_tokens: tokens,
                        reasoning: reasoning.join("\n\n"),
                    };
                }
                match parsed {
                    Ok(v) => {
                        return Invocation {
                            agent: spec.agent,
                            value: Some(v),
                            status: InvokeStatus::Ok,
                            calls,
                            energy_before: spec.energy_before,
                            energy_after: energy,
                            logged_tokens: tokens,
                            reasoning: reasoning.join("\n\n"),
                        }
                    }
                    Err(err) => {
                        messages.push(ChatMessage::assistant(resp.text));
                        messages.push(ChatMessage::user(format!(
                            "That answer could not be used ({err}). Reply again with only the JSON object."
                        )));
                    }
                }
            }
        }
    }
    Invocation {
        agent: spec.agent,
        value: None,
        status: InvokeStatus::FormatError,
        calls,
        energy_before: spec.energy_before,
        energy_after: energy,
        logged_tokens: tokens,
        reasoning: reasoning.join("\n\n"),
    }
}

/// Run several invocations in parallel (one fan-out phase).
pub async fn invoke_all<T>(
    agency: &Agency,
    specs: Vec<InvokeSpec>,
    parse: impl Fn(&str) -> Result<T, String> + Copy,
) -> Vec<Invocation<T>> {
    futures::future::join_all(specs.into_iter().map(|s| invoke(agency, s, parse))).await
}
