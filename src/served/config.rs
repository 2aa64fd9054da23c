//! The served-backend settings of an `[llm]` section: which backend runs the
//! model-backed agents ([`BackendKind`]), how a request switches thinking
//! ([`ThinkingSwitch`]), the checks of every served field ([`validate`]) and
//! the served model name of each roster model key ([`ServedNames`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::inference::llm_backend::LlmConfig;
use crate::scripted::SCRIPTED_PREFIX;

/// Which backend answers model-backed agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Local GGUF models on candle, in this process.
    #[default]
    Local,
    /// An OpenAI-compatible server (`/v1/chat/completions`): Ollama, vLLM, llama-server.
    Openai,
}

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

/// Check the served fields of `[llm]`. The error is (key, what was expected).
pub fn validate(llm: &LlmConfig) -> Result<(), (String, String)> {
    let err = |key: &str, msg: String| Err((format!("llm.{key}"), msg));
    match llm.backend {
        BackendKind::Local => {
            for (key, set) in [
                ("base_url", llm.base_url.is_some()),
                ("api_key_env", llm.api_key_env.is_some()),
                ("model", llm.model.is_some()),
            ] {
                if set {
                    return err(
                        key,
                        "is only used with backend = \"openai\"; add `backend = \"openai\"` \
                         to [llm] to use a served model"
                            .into(),
                    );
                }
            }
        }
        BackendKind::Openai => {
            match llm.base_url.as_deref().map(str::trim) {
                None | Some("") => {
                    return err(
                        "base_url",
                        "expected the server's API root with backend = \"openai\", e.g. \
                         \"http://127.0.0.1:11434/v1\" (Ollama), \":8000/v1\" (vLLM) or \
                         \":8080/v1\" (llama-server)"
                            .into(),
                    )
                }
                Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                    return err(
                        "base_url",
                        format!("expected an http:// or https:// URL, got `{u}`"),
                    )
                }
                Some(u) if u.contains(char::is_whitespace) => {
                    return err(
                        "base_url",
                        format!("expected a URL without spaces, got `{u}`"),
                    )
                }
                Some(_) => {}
            }
            if llm.stand_in.is_some() {
                return err(
                    "stand_in",
                    "is for the local backend; with backend = \"openai\" set `llm.model` to \
                     serve every agent with one model"
                        .into(),
                );
            }
            if llm.kv_cache != crate::inference::state::KvCache::F32 {
                return err(
                    "kv_cache",
                    "is for the local backend; a server chooses its own cache type \
                     (llama-server `-ctk`/`-ctv`, vLLM `--kv-cache-dtype`)"
                        .into(),
                );
            }
            if let Some(m) = &llm.model {
                if m.trim().is_empty() {
                    return err(
                        "model",
                        "expected a served model name, got an empty string".into(),
                    );
                }
            }
            if let Some(v) = &llm.api_key_env {
                if v.trim().is_empty() || v.contains('=') {
                    return err(
                        "api_key_env",
                        format!("expected the name of an environment variable, got `{v}`"),
                    );
                }
            }
        }
    }
    if llm.max_concurrency == 0 {
        return err("max_concurrency", "expected at least 1, got 0".into());
    }
    if !(llm.timeout_s > 0.0 && llm.timeout_s.is_finite()) {
        return err(
            "timeout_s",
            format!(
                "expected a positive number of seconds, got {}",
                llm.timeout_s
            ),
        );
    }
    if !(llm.retry_backoff_s >= 0.0 && llm.retry_backoff_s <= 3600.0) {
        return err(
            "retry_backoff_s",
            format!("expected seconds in [0, 3600], got {}", llm.retry_backoff_s),
        );
    }
    if llm.retries > 100 {
        return err(
            "retries",
            format!("expected at most 100, got {}", llm.retries),
        );
    }
    Ok(())
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
    pub fn add<'a>(
        &mut self,
        llm: &LlmConfig,
        entries: impl IntoIterator<Item = (String, &'a str, &'a str)>,
    ) -> anyhow::Result<()> {
        for (what, key, name) in entries {
            if key.starts_with(SCRIPTED_PREFIX) {
                continue;
            }
            let served = llm.model.as_deref().unwrap_or(name).to_string();
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

    fn openai() -> LlmConfig {
        LlmConfig {
            backend: BackendKind::Openai,
            base_url: Some("http://127.0.0.1:8080/v1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn served_fields_are_checked() {
        assert!(validate(&openai()).is_ok());
        assert!(validate(&LlmConfig::default()).is_ok());
        let mut c = openai();
        c.base_url = None;
        assert_eq!(validate(&c).unwrap_err().0, "llm.base_url");
        c.base_url = Some("127.0.0.1:8080".into());
        let (key, msg) = validate(&c).unwrap_err();
        assert_eq!(key, "llm.base_url");
        assert!(msg.contains("http://"), "{msg}");
        let mut c = openai();
        c.stand_in = Some("smollm2-135m-instruct".into());
        assert_eq!(validate(&c).unwrap_err().0, "llm.stand_in");
        let mut c = openai();
        c.kv_cache = crate::inference::state::KvCache::F16;
        let (key, msg) = validate(&c).unwrap_err();
        assert_eq!(key, "llm.kv_cache");
        assert!(msg.contains("local backend"), "{msg}");
        let mut c = openai();
        c.max_concurrency = 0;
        assert_eq!(validate(&c).unwrap_err().0, "llm.max_concurrency");
        let mut c = openai();
        c.timeout_s = f64::NAN;
        assert_eq!(validate(&c).unwrap_err().0, "llm.timeout_s");
        let c = LlmConfig {
            model: Some("qwen3:8b".into()),
            ..Default::default()
        };
        let (key, msg) = validate(&c).unwrap_err();
        assert_eq!(key, "llm.model");
        assert!(msg.contains("backend = \"openai\""), "{msg}");
    }

    #[test]
    fn served_names_come_from_the_roster_or_the_override() {
        let mut n = ServedNames::default();
        n.add(
            &openai(),
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
            .add(
                &openai(),
                [("roster[3]".to_string(), "qwen3-8b", "qwen3:4b")],
            )
            .unwrap_err();
        assert!(format!("{e}").contains("roster[3]"), "{e}");
        let mut c = openai();
        c.model = Some("smollm2".into());
        let mut n = ServedNames::default();
        n.add(&c, [("roster[0]".to_string(), "qwen3-8b", "qwen3:8b")])
            .unwrap();
        assert_eq!(n.get("qwen3-8b"), Some("smollm2"));
    }
}
