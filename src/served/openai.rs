//! [`OpenAiBackend`]: the [`Backend`] that answers scenario requests through
//! an OpenAI-compatible server (`[llm] backend = "openai"`): Ollama, vLLM,
//! llama.cpp's llama-server.
//!
//! Every model key is sent under its served name ([`ServedNames`]). All
//! served models share one batch key, so a whole phase (every agent, every
//! concurrent society) goes out together: a batch becomes that many
//! concurrent requests, at most `max_concurrency` in flight, and the server's
//! own continuous batching fills its GPU. Answers come back in request order.
//! A request that fails for good is an INVOKE_ERROR carrying the server's
//! message; when the server itself is unreachable the backend reports
//! [`Backend::unavailable`], and the driver stops the runs (left incomplete,
//! so a resumed sweep reruns them) instead of playing them out on errors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::backend::{Backend, BackendError, ModelRequest, ModelResponse, ModelResult};
use crate::inference::llm_backend::LlmConfig;

use super::api::{self, RequestOptions};
use super::client::{Client, ClientOptions};
use super::config::ServedNames;

/// The batch key of every served model.
const SERVED_KEY: &str = "served";

/// Model-backed agents on an OpenAI-compatible server.
pub struct OpenAiBackend {
    client: Client,
    names: ServedNames,
    request: RequestOptions,
    max_concurrency: usize,
    /// `server <base_url>`: who counted, in every recorded call.
    counted_by: String,
    /// Set once the server could not be reached after all retries.
    down: Mutex<Option<String>>,
}

/// The HTTP client an `[llm]` section describes (the API key read from its variable).
pub fn client_for(llm: &LlmConfig) -> anyhow::Result<Client> {
    let base_url = llm
        .base_url
        .clone()
        .context("llm.base_url: expected the server's URL with backend = \"openai\"")?;
    let api_key = match &llm.api_key_env {
        Some(var) => Some(std::env::var(var).map_err(|_| {
            anyhow::anyhow!(
                "llm.api_key_env names the environment variable `{var}`, which is not set"
            )
        })?),
        None => None,
    };
    Ok(Client::new(ClientOptions {
        base_url,
        api_key,
        timeout: Duration::from_secs_f64(llm.timeout_s),
        retries: llm.retries,
        backoff: Duration::from_secs_f64(llm.retry_backoff_s),
    }))
}

/// Check that the server lists every served name; returns what it lists.
/// The error names each missing model and what the server does serve.
pub fn check_models(client: &Client, names: &ServedNames) -> anyhow::Result<Vec<String>> {
    let listed = client.models().map_err(|f| {
        if f.unreachable {
            anyhow::anyhow!(
                "cannot reach the model server at {}: {}. Start it (e.g. `ollama serve`, \
                 `vllm serve MODEL`, `llama-server -m FILE`) or fix `llm.base_url`",
                client.base_url(),
                f.message
            )
        } else {
            anyhow::anyhow!(
                "the model server at {} did not list its models: {}",
                client.base_url(),
                f.message
            )
        }
    })?;
    let missing: Vec<(&str, &str)> = names
        .iter()
        .filter(|(_, served)| !api::lists_model(&listed, served))
        .collect();
    if !missing.is_empty() {
        let which: Vec<String> = missing
            .iter()
            .map(|(key, served)| {
                if key == served {
                    format!("`{served}`")
                } else {
                    format!("`{served}` (model key `{key}`)")
                }
            })
            .collect();
        let serves = if listed.is_empty() {
            "no models".to_string()
        } else {
            listed.join(", ")
        };
        anyhow::bail!(
            "the model server at {} does not serve model{} {}; it serves: {serves}. \
             Make the server serve {} (with Ollama: `ollama pull {}`), or set `llm.model` to \
             one it serves",
            client.base_url(),
            if missing.len() > 1 { "s" } else { "" },
            which.join(", "),
            if missing.len() > 1 { "them" } else { "it" },
            missing[0].1,
        );
    }
    Ok(listed)
}

impl OpenAiBackend {
    /// The backend of an `[llm]` section: connects, and checks that the
    /// server serves every model in `names` before anything runs.
    pub fn connect(llm: &LlmConfig, names: ServedNames) -> anyhow::Result<Self> {
        let client = client_for(llm)?;
        check_models(&client, &names)?;
        Ok(Self::with_client(llm, client, names))
    }

    /// The backend without the model check (tests of a dead server).
    pub fn with_client(llm: &LlmConfig, client: Client, names: ServedNames) -> Self {
        let counted_by = format!("server {}", client.base_url());
        OpenAiBackend {
            client,
            names,
            request: RequestOptions {
                structured: llm.structured,
                schema: llm.schema,
                max_string_chars: llm.max_string_chars,
                thinking_switch: llm.thinking_switch,
            },
            max_concurrency: llm.max_concurrency.max(1),
            counted_by,
            down: Mutex::new(None),
        }
    }

    fn down(&self) -> Option<String> {
        self.down
            .lock()
            .map(|d| d.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    fn call(&self, req: &ModelRequest) -> ModelResult {
        let fail = |message: String| BackendError {
            model: req.model.clone(),
            message,
            partial_usage: None,
        };
        if let Some(why) = self.down() {
            return Err(fail(format!("not sent: {why}")));
        }
        let served = self.names.get(&req.model).ok_or_else(|| {
            fail(format!(
                "model key `{}` has no served name (it is not in the roster the backend was \
                 built for)",
                req.model
            ))
        })?;
        let body = api::request_body(req, served, &self.request);
        let start = Instant::now();
        match self.client.chat(&body, &self.counted_by) {
            Ok(a) => Ok(ModelResponse {
                text: a.text,
                thinking: a.thinking,
                usage: a.usage,
                finish: a.finish,
                rendered_prompt: None,
                latency_ms: start.elapsed().as_secs_f64() * 1000.0,
                count_source: Some(a.count_source),
            }),
            Err(f) => {
                if f.unreachable {
                    let mut d = self.down.lock().unwrap_or_else(|e| e.into_inner());
                    d.get_or_insert_with(|| {
                        format!(
                            "the model server at {} stopped answering ({})",
                            self.client.base_url(),
                            f.message
                        )
                    });
                }
                Err(fail(f.message))
            }
        }
    }
}

impl Backend for OpenAiBackend {
    fn name(&self) -> String {
        format!("openai {}", self.client.base_url())
    }

    fn batch_key(&self, _model: &str) -> String {
        SERVED_KEY.into()
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        let this: &Self = self;
        let slots: Vec<Mutex<Option<ModelResult>>> =
            batch.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let workers = this.max_concurrency.min(batch.len());
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(req) = batch.get(i) else { break };
                    let r = this.call(req);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                });
            }
        });
        slots
            .into_iter()
            .zip(batch)
            .map(|(slot, req)| {
                slot.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or_else(|| {
                        Err(BackendError {
                            model: req.model.clone(),
                            message: "the request's worker stopped without an answer".into(),
                            partial_usage: None,
                        })
                    })
            })
            .collect()
    }

    fn unavailable(&self) -> Option<String> {
        self.down()
    }
}
