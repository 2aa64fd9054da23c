//! The served backend's options ([`ServedOptions`], taken from an `[llm]`
//! section by `crate::llm`), how a request switches thinking
//! ([`ThinkingSwitch`]) and the served model name of each roster model key
//! ([`ServedNames`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::backend::SCRIPTED_PREFIX;
use crate::inference::llm_backend::{SchemaChoice, StructuredMode};

/// How a served request turns the model's thinking on or off
/// (`GenParams::thinking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingSwitch {
    /// `chat_template_kwargs: {"enable_thinking": on}` (vLLM, llama-server).
    #[default]
    ChatTemplateKwargs,
    /// `reasoning_effort: "none"` when off, nothing when on (what Ollama's
    /// `/v1` endpoint reads; llama-server reads it too).
    ReasoningEffort,
    /// `think: on` (Ollama's native field, for proxies that pass it through).
    Think,
    /// Send nothing: the server's default applies.
    None,
}

/// What a served backend needs of an `[llm]` section (`crate::llm::LlmConfig::served`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServedOptions {
    /// The server's API root, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: Option<String>,
    /// The environment variable that holds the API key (sent as a bearer token).
    pub api_key_env: Option<String>,
    /// Most requests in flight at once.
    pub max_concurrency: usize,
    /// Seconds one request may take before it counts as failed.
    pub timeout_s: f64,
    /// Retries after a refused connection, a timeout, HTTP 5xx or malformed JSON.
    pub retries: u32,
    /// Seconds before the first retry, doubled for each next one (at most 30).
    pub retry_backoff_s: f64,
    /// How a request turns thinking on or off.
    pub thinking_switch: ThinkingSwitch,
    /// Constrained JSON (a `response_format` schema) or free text parsed with retries.
    pub structured: StructuredMode,
    /// The scenario's strict schema or the reference's.
    pub schema: SchemaChoice,
    /// Longest string the schema allows where it sets no maxLength.
    pub max_string_chars: Option<usize>,
}

/// The served model name of each model key: `llm.model` for every key when
/// set, else the roster's `model_name` (the Ollama tag, e.g. `qwen3:8b`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServedNames {
    names: BTreeMap<String, String>,
}

impl ServedNames {
    /// Add the model-backed entries of a roster, given as (model key, model
    /// name) pairs with `what` naming each entry in errors (`roster[2]`).
    /// The same key must map to the same served name everywhere.
    /// `model_override` is `llm.model`: one served name for every key.
    pub fn add<'a>(
        &mut self,
        model_override: Option<&str>,
        entries: impl IntoIterator<Item = (String, &'a str, &'a str)>,
    ) -> anyhow::Result<()> {
        for (what, key, name) in entries {
            if key.starts_with(SCRIPTED_PREFIX) {
                continue;
            }
            let served = model_override.unwrap_or(name).to_string();
            match self.names.get(key) {
                Some(prev) if *prev != served => anyhow::bail!(
                    "{what}: model `{key}` is served as `{prev}` for another agent and as \
                     `{served}` here; a model key is served under one name (give the two \
                     agents different `model` keys)"
                ),
                Some(_) => {}
                None => {
                    self.names.insert(key.to_string(), served);
                }
            }
        }
        Ok(())
    }

    /// The served name of a model key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.names.get(key).map(String::as_str)
    }

    /// Every (model key, served name), in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.names.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_names_come_from_the_roster_or_the_override() {
        let mut n = ServedNames::default();
        n.add(
            None,
            [
                ("roster[0]".to_string(), "qwen3-8b", "qwen3:8b"),
                ("roster[1]".to_string(), "scripted:greedy", "x"),
                ("roster[2]".to_string(), "qwen3-8b", "qwen3:8b"),
            ],
        )
        .unwrap();
        assert_eq!(n.get("qwen3-8b"), Some("qwen3:8b"));
        assert_eq!(n.get("scripted:greedy"), None);
        let e = n
            .add(None, [("roster[3]".to_string(), "qwen3-8b", "qwen3:4b")])
            .unwrap_err();
        assert!(format!("{e}").contains("roster[3]"), "{e}");
        let mut n = ServedNames::default();
        n.add(
            Some("smollm2"),
            [("roster[0]".to_string(), "qwen3-8b", "qwen3:8b")],
        )
        .unwrap();
        assert_eq!(n.get("qwen3-8b"), Some("smollm2"));
    }
}
