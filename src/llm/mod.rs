//! The `[llm]` section of an experiment config and the backend it builds: which
//! backend answers model-backed agents ([`BackendKind`]: the local engine in
//! `crate::inference`, or a server through `crate::served`), the checks of every
//! field ([`validate`]), and [`build_backend`], which puts it behind a
//! [`mixed::MixedBackend`] so that `scripted:` keys go to scripted policies.
//! Scenario runners (`energy_society::runner`, `race::run`) build their backends here.

pub mod mixed;
pub mod preflight;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::inference::engine::state::KvCache;
use crate::inference::llm_backend::{
    LlmBackend, LlmOptions, SchemaChoice, StructuredMode, DEFAULT_PLAN_CONTEXT,
    DEFAULT_PREFILL_STEP_TOKENS,
};
use crate::meter::MeterChoice;
use crate::scripted::ScriptedBackend;
use crate::served::config::{ServedNames, ServedOptions, ThinkingSwitch};
use crate::served::openai::OpenAiBackend;

pub use mixed::MixedBackend;

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

/// The `[llm]` section of an experiment config: how model-backed agents run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// `cpu`, `cuda[:N]` or `metal[:N]` (GPU ones need the matching cargo feature).
    pub device: String,
    /// Constrained JSON decoding, or free text parsed with retries.
    pub structured: StructuredMode,
    /// Count the end-of-generation token as generated (Ollama's eval_count does).
    pub count_eos: bool,
    /// Most thinking tokens before the close marker is forced (constrained mode).
    pub max_thinking_tokens: Option<usize>,
    /// Run every model-backed agent on this model (a manifest name or GGUF path)
    /// instead of its own, keeping each agent's size S for the costs.
    pub stand_in: Option<String>,
    /// Per-model stand-ins (`[llm.stand_ins]`: roster model → manifest name
    /// or GGUF path), taking precedence over `stand_in`.
    pub stand_ins: std::collections::BTreeMap<String, String>,
    /// Longest string constrained decoding allows where the schema sets no maxLength.
    pub max_string_chars: Option<usize>,
    /// `strict` (default): constrained decoding enforces the scenario's strict
    /// schema (valid actions and ids only); `reference`: the reference's schema.
    pub schema: SchemaChoice,
    // The fields below choose and configure a served backend (`src/served/`);
    // `crate::llm::validate` checks them.
    /// `local` (default): models on candle in this process; `openai`: an
    /// OpenAI-compatible server (Ollama, vLLM, llama-server).
    pub backend: BackendKind,
    /// openai: the server's API root, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: Option<String>,
    /// openai: the environment variable that holds the API key (sent as a bearer token).
    pub api_key_env: Option<String>,
    /// openai: the served model name for every model-backed agent (else each
    /// agent's roster `model_name`).
    pub model: Option<String>,
    /// openai: most requests in flight at once (a batch becomes that many concurrent requests).
    pub max_concurrency: usize,
    /// openai: seconds one request may take before it counts as failed.
    pub timeout_s: f64,
    /// openai: retries after a refused connection, a timeout, HTTP 5xx or malformed JSON.
    pub retries: u32,
    /// openai: seconds before the first retry, doubled for each next one (at most 30).
    pub retry_backoff_s: f64,
    /// openai: how a request turns thinking on or off.
    pub thinking_switch: ThinkingSwitch,
    /// local: tokens each sequence's state is planned for when Joule checks,
    /// before round 1, that the models and every agent's state fit the device.
    pub plan_context: usize,
    /// local: the energy meter (`auto`: every meter this machine has, none
    /// if it has none; `none`, `nvml`, `rapl`; `fake-file:PATH` and
    /// `fake-power:WATTS` are test meters). See `joule meters`.
    pub meter: MeterChoice,
    /// local: MiB each model's prefix cache (computed prompt blocks shared
    /// by every call, agent and run) may hold; 0 turns it off.
    pub prefix_cache_mib: usize,
    /// local: `continuous` (default): a call joins the running batch as soon
    /// as its scenario asks for it and leaves it when it finishes; `waves`:
    /// the calls queued together are decoded together to the end of the
    /// longest. Records are the same either way.
    pub batching: Batching,
    /// local, continuous batching: prompt tokens one forward step feeds at
    /// most (whole 64-token prompt blocks; the oldest waiting one always goes).
    pub prefill_step_tokens: usize,
    /// local: how sequence states store keys and values: `f32` (default,
    /// as computed) or `f16` (half the memory; each value rounded once).
    pub kv_cache: KvCache,
    /// Worker threads that compute (rayon's and candle's pools; at least 1).
    /// Unset: `RAYON_NUM_THREADS` if set, else every core, as before. A
    /// command's `--threads N` overrides it; the resolved config records the
    /// count the run used (`crate::threads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
}

/// How the local backend batches calls (`[llm] batching`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Batching {
    #[default]
    Continuous,
    Waves,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            device: "cpu".into(),
            structured: StructuredMode::Constrained,
            count_eos: true,
            max_thinking_tokens: Some(512),
            stand_in: None,
            stand_ins: Default::default(),
            max_string_chars: Some(240),
            schema: SchemaChoice::Strict,
            backend: Default::default(),
            base_url: None,
            api_key_env: None,
            model: None,
            max_concurrency: 8,
            timeout_s: 900.0,
            retries: 4,
            retry_backoff_s: 1.0,
            thinking_switch: Default::default(),
            plan_context: DEFAULT_PLAN_CONTEXT,
            meter: MeterChoice::Auto,
            prefix_cache_mib: 2048,
            batching: Batching::Continuous,
            prefill_step_tokens: DEFAULT_PREFILL_STEP_TOKENS,
            kv_cache: KvCache::F32,
            threads: None,
        }
    }
}

impl LlmConfig {
    /// The local backend: resolves (and fetches if needed) the stand-in model.
    pub fn local_backend(&self) -> anyhow::Result<LlmBackend> {
        let device = crate::inference::engine::device::select_device(&self.device)?;
        let stand_in = match &self.stand_in {
            Some(s) => Some(
                crate::inference::files::sources::resolve_model(s)
                    .with_context(|| format!("llm.stand_in = `{s}`"))?,
            ),
            None => None,
        };
        let mut stand_ins = std::collections::BTreeMap::new();
        for (model, s) in &self.stand_ins {
            let path = crate::inference::files::sources::resolve_model(s)
                .with_context(|| format!("llm.stand_ins.\"{model}\" = `{s}`"))?;
            stand_ins.insert(model.clone(), path);
        }
        Ok(LlmBackend::new(
            device,
            LlmOptions {
                structured: self.structured,
                count_eos: self.count_eos,
                max_thinking_tokens: self.max_thinking_tokens,
                stand_in,
                stand_ins,
                max_string_chars: self.max_string_chars,
                schema: self.schema,
                plan_context: self.plan_context,
                prefix_cache_bytes: self.prefix_cache_mib << 20,
                continuous: self.batching == Batching::Continuous,
                prefill_step_tokens: self.prefill_step_tokens,
                kv_cache: self.kv_cache,
                ..LlmOptions::default()
            },
        )
        .with_meter(&self.meter)
        .map_err(|e| anyhow::anyhow!("llm.meter = \"{}\": {e}", self.meter))?)
    }
}

impl LlmConfig {
    /// The model that answers an agent whose roster `model` key is `key`
    /// and whose paper name is `model_name`, when it is not that model: a
    /// scripted policy (`scripted:donor`), a local stand-in
    /// (`[llm.stand_ins]`, `[llm] stand_in`), a served `llm.model`, or a
    /// local key that names another model than `model_name`. `None` when
    /// the paper's model itself answered (`qwen3-8b` for `qwen3:8b`).
    /// Every output that names an agent's model names this one beside it.
    pub fn answered_by(&self, key: &str, model_name: &str) -> Option<String> {
        if key.starts_with(crate::backend::SCRIPTED_PREFIX) {
            return Some(key.to_string());
        }
        let differs = |m: &str| (!same_model(m, model_name)).then(|| m.to_string());
        match self.backend {
            BackendKind::Openai => self.model.as_deref().and_then(differs),
            BackendKind::Local => match self.stand_ins.get(key).or(self.stand_in.as_ref()) {
                Some(s) => differs(s),
                None => differs(key),
            },
        }
    }
}

/// Whether two model names name one model: equal, equal but for `:` and
/// `-` (a manifest name and its Ollama tag: `qwen3-8b`, `qwen3:8b`), or a
/// manifest and its Ollama tag.
fn same_model(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim().to_lowercase().replace(':', "-");
    if norm(a) == norm(b) {
        return true;
    }
    crate::inference::files::manifest::Catalog::load(None)
        .ok()
        .and_then(|c| {
            let (ma, mb) = (c.get(a).ok()?, c.get(b).ok()?);
            Some(ma.name == mb.name)
        })
        .unwrap_or(false)
}

impl LlmConfig {
    /// What a served backend needs of this section.
    pub fn served(&self) -> ServedOptions {
        ServedOptions {
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            max_concurrency: self.max_concurrency,
            timeout_s: self.timeout_s,
            retries: self.retries,
            retry_backoff_s: self.retry_backoff_s,
            thinking_switch: self.thinking_switch,
            structured: self.structured,
            schema: self.schema,
            max_string_chars: self.max_string_chars,
        }
    }
}

/// The backend of a config with model-backed agents: `scripted:` keys go to
/// `scripted`, every other key to the `[llm]` section's backend (local
/// candle, or the server, whose models are checked here, before anything runs).
pub fn build_backend(
    llm: &LlmConfig,
    scripted: ScriptedBackend,
    names: ServedNames,
) -> anyhow::Result<Box<dyn Backend>> {
    Ok(match llm.backend {
        BackendKind::Local => Box::new(MixedBackend::new(scripted, llm.local_backend()?)),
        BackendKind::Openai => Box::new(MixedBackend::new(
            scripted,
            OpenAiBackend::connect(&llm.served(), names)?,
        )),
    })
}

/// Check the fields of `[llm]` (the served ones against the backend chosen). The error is (key, what was expected).
/// The longest `timeout_s` a call can wait for (a week): far past any model
/// call, and a wait the HTTP client's clock can hold.
pub const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;

pub fn validate(llm: &LlmConfig) -> Result<(), (String, String)> {
    let err = |key: &str, msg: String| Err((format!("llm.{key}"), msg));
    if llm.threads == Some(0) {
        return err(
            "threads",
            "expected a whole number of worker threads, at least 1; got 0".into(),
        );
    }
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
            if llm.kv_cache != KvCache::F32 {
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
    if !(llm.timeout_s > 0.0 && llm.timeout_s <= MAX_TIMEOUT_S) {
        return err(
            "timeout_s",
            format!(
                "expected a positive number of seconds, at most {MAX_TIMEOUT_S} (a week), got {}",
                crate::output::num(llm.timeout_s)
            ),
        );
    }
    if !(llm.retry_backoff_s >= 0.0 && llm.retry_backoff_s <= 3600.0) {
        return err(
            "retry_backoff_s",
            format!(
                "expected seconds in [0, 3600], got {}",
                crate::output::num(llm.retry_backoff_s)
            ),
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
    fn the_answering_model_is_named_when_it_is_not_the_papers() {
        let local = LlmConfig::default();
        assert_eq!(local.answered_by("qwen3-8b", "qwen3:8b"), None);
        assert_eq!(local.answered_by("qwen3:8b", "qwen3:8b"), None);
        assert_eq!(
            local
                .answered_by("smollm2-135m-instruct", "qwen3:8b")
                .as_deref(),
            Some("smollm2-135m-instruct")
        );
        assert_eq!(
            local.answered_by("scripted:donor", "qwen3:8b").as_deref(),
            Some("scripted:donor")
        );
        let stand_in = LlmConfig {
            stand_in: Some("smollm2-135m-instruct".into()),
            ..Default::default()
        };
        assert_eq!(
            stand_in.answered_by("qwen3-8b", "qwen3:8b").as_deref(),
            Some("smollm2-135m-instruct")
        );
        let mut per_model = stand_in.clone();
        per_model
            .stand_ins
            .insert("qwen3-8b".into(), "/m/tiny.gguf".into());
        assert_eq!(
            per_model.answered_by("qwen3-8b", "qwen3:8b").as_deref(),
            Some("/m/tiny.gguf")
        );
        let mut served = openai();
        assert_eq!(served.answered_by("qwen3-8b", "qwen3:8b"), None);
        served.model = Some("llama3.2:1b".into());
        assert_eq!(
            served.answered_by("qwen3-8b", "qwen3:8b").as_deref(),
            Some("llama3.2:1b")
        );
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
        c.kv_cache = KvCache::F16;
        let (key, msg) = validate(&c).unwrap_err();
        assert_eq!(key, "llm.kv_cache");
        assert!(msg.contains("local backend"), "{msg}");
        let mut c = openai();
        c.max_concurrency = 0;
        assert_eq!(validate(&c).unwrap_err().0, "llm.max_concurrency");
        let mut c = openai();
        c.timeout_s = f64::NAN;
        assert_eq!(validate(&c).unwrap_err().0, "llm.timeout_s");
        c.timeout_s = 1e300;
        let (key, msg) = validate(&c).unwrap_err();
        assert_eq!(key, "llm.timeout_s");
        assert!(msg.ends_with("got 1e300"), "{msg}");
        let mut c = openai();
        c.retry_backoff_s = 1e300;
        let (key, msg) = validate(&c).unwrap_err();
        assert_eq!(key, "llm.retry_backoff_s");
        assert_eq!(msg, "expected seconds in [0, 3600], got 1e300");
        let c = LlmConfig {
            model: Some("qwen3:8b".into()),
            ..Default::default()
        };
        let (key, msg) = validate(&c).unwrap_err();
        assert_eq!(key, "llm.model");
        assert!(msg.contains("backend = \"openai\""), "{msg}");
    }
}
