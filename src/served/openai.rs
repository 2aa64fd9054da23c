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
//! message; when the server itself is unreachable, or still answers a request
//! with an HTTP server error (5xx, 408, 429) after every retry, the backend
//! reports [`Backend::unavailable`], and the driver stops the runs (left
//! incomplete, so running the command again resumes them) instead of playing
//! them out on errors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::backend::{Backend, BackendError, ModelRequest, ModelResponse, ModelResult};

use super::api::{self, RequestOptions};
use super::client::{Client, ClientOptions, ModelList};
use super::config::{ServedNames, ServedOptions};

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
    /// The server's model list, for a run's provenance.
    listing: ModelList,
    /// Ollama's tags with their digests and details (empty from other servers).
    ollama: std::collections::BTreeMap<String, (String, String)>,
}

/// The HTTP client the served options describe (the API key read from its variable).
pub fn client_for(llm: &ServedOptions) -> anyhow::Result<Client> {
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
        timeout: Duration::try_from_secs_f64(llm.timeout_s).map_err(|_| {
            anyhow::anyhow!(
                "llm.timeout_s: expected a positive number of seconds, got {}",
                llm.timeout_s
            )
        })?,
        retries: llm.retries,
        backoff: Duration::try_from_secs_f64(llm.retry_backoff_s).map_err(|_| {
            anyhow::anyhow!(
                "llm.retry_backoff_s: expected a number of seconds >= 0, got {}",
                llm.retry_backoff_s
            )
        })?,
        pool: llm.max_concurrency,
    }))
}

/// Check that the server lists every served name; returns what it lists.
/// The error names each missing model and what the server does serve.
pub fn check_models(client: &Client, names: &ServedNames) -> anyhow::Result<ModelList> {
    let list = client.model_list().map_err(|f| {
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
    let listed = &list.names;
    let missing: Vec<(&str, &str)> = names
        .iter()
        .filter(|(_, served)| !api::lists_model(listed, served))
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
        // The names are the server's text: escaped before they are printed.
        let serves = if listed.is_empty() {
            "no models".to_string()
        } else {
            crate::shown::terminal(&listed.join(", "))
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
    Ok(list)
}

impl OpenAiBackend {
    /// The backend of an `[llm]` section: connects, and checks that the
    /// server serves every model in `names` before anything runs.
    pub fn connect(llm: &ServedOptions, names: ServedNames) -> anyhow::Result<Self> {
        let client = client_for(llm)?;
        let list = check_models(&client, &names)?;
        let ollama = client.ollama_tags();
        let mut backend = Self::with_client(llm, client, names);
        backend.listing = list;
        backend.ollama = ollama;
        Ok(backend)
    }

    /// The backend without the model check (tests of a dead server).
    pub fn with_client(llm: &ServedOptions, client: Client, names: ServedNames) -> Self {
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
            listing: ModelList::default(),
            ollama: Default::default(),
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
                measured: None,
                count_source: Some(a.count_source),
            }),
            Err(f) => {
                if f.unreachable || f.server_error {
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

    fn kernels(&self, _models: &[&str]) -> Option<crate::backend::KernelRecord> {
        Some(crate::backend::KernelRecord::served("openai"))
    }

    /// The server and the name each model is served under: the server's
    /// weights are its own, so no file or sha256 is known here.
    fn model_origins(&self, models: &[&str]) -> Vec<crate::backend::ModelOrigin> {
        let server = self.client.base_url();
        let mut out: Vec<crate::backend::ModelOrigin> = Vec::new();
        for m in models {
            let Some(name) = self.names.get(m) else {
                continue;
            };
            if out.iter().any(|o| o.model == *m) {
                continue;
            }
            // The entries of the name as listed (exact, or with Ollama's implicit `:latest`).
            let listed = |keys: Vec<&String>| -> Option<String> {
                keys.into_iter()
                    .find(|k| api::lists_model(std::slice::from_ref(*k), name))
                    .cloned()
            };
            let entry = listed(self.listing.entries.keys().collect())
                .and_then(|k| self.listing.entries.get(&k).cloned());
            let tag = listed(self.ollama.keys().collect()).and_then(|k| self.ollama.get(&k));
            out.push(crate::backend::ModelOrigin {
                model: m.to_string(),
                server: Some(server.to_string()),
                served_name: Some(name.to_string()),
                served_entry: entry,
                served_digest: tag.map(|t| t.0.clone()),
                served_details: tag.map(|t| t.1.clone()).filter(|d| !d.is_empty()),
                ..Default::default()
            });
        }
        out
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backend::{ChatMessage, OutputFormat};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    fn llm(url: &str) -> ServedOptions {
        ServedOptions {
            base_url: Some(url.into()),
            api_key_env: None,
            max_concurrency: 4,
            timeout_s: 900.0,
            retries: 0,
            retry_backoff_s: 1.0,
            thinking_switch: Default::default(),
            structured: crate::inference::llm_backend::StructuredMode::Constrained,
            schema: crate::inference::llm_backend::SchemaChoice::Strict,
            max_string_chars: Some(240),
        }
    }

    fn names(pairs: &[(&str, &str)]) -> ServedNames {
        let mut n = ServedNames::default();
        n.add(
            None,
            pairs.iter().map(|(k, v)| ("test".to_string(), *k, *v)),
        )
        .unwrap();
        n
    }

    fn req(model: &str) -> ModelRequest {
        ModelRequest {
            model: model.into(),
            session: 0,
            agent_id: model.into(),
            tag: "t".into(),
            messages: vec![ChatMessage::user("hi")],
            format: OutputFormat::Text,
            params: Default::default(),
            observation: serde_json::Value::Null,
        }
    }

    /// Answers each request with its own `model` field as the content, after a
    /// delay that makes earlier requests finish last; one thread per connection.
    fn echo_server(requests: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for _ in 0..requests {
                let Ok((s, _)) = listener.accept() else {
                    return;
                };
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut len = 0;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let model = v["model"].as_str().unwrap().to_string();
                    let n: u64 = model.trim_start_matches('m').parse().unwrap();
                    std::thread::sleep(Duration::from_millis(200 - 40 * n));
                    let reply = serde_json::json!({
                        "object": "chat.completion",
                        "choices": [{"message": {"content": model}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": n + 1},
                    })
                    .to_string();
                    let mut s = s;
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                        reply.len()
                    );
                });
            }
        });
        url
    }

    #[test]
    fn a_batch_is_sent_concurrently_and_answered_in_request_order() {
        let url = echo_server(5);
        let keys = ["k0", "k1", "k2", "k3", "k4"];
        let served = ["m0", "m1", "m2", "m3", "m4"];
        let pairs: Vec<(&str, &str)> = keys.iter().copied().zip(served).collect();
        let client = client_for(&llm(&url)).unwrap();
        let mut b = OpenAiBackend::with_client(&llm(&url), client, names(&pairs));
        assert_eq!(
            b.batch_key("k0"),
            b.batch_key("k4"),
            "one batch for every served model"
        );
        let batch: Vec<ModelRequest> = keys.iter().map(|k| req(k)).collect();
        let start = Instant::now();
        let out = b.generate(&batch);
        // Five requests of 40..200 ms, four at a time: well under their 600 ms sum.
        assert!(
            start.elapsed() < Duration::from_millis(550),
            "{:?}",
            start.elapsed()
        );
        for (i, r) in out.iter().enumerate() {
            let r = r.as_ref().unwrap();
            assert_eq!(r.text, served[i]);
            assert_eq!(r.usage.charged_tokens, i as u32 + 1);
        }
        assert!(b.unavailable().is_none());
    }

    /// What [`route_server`] answers a path it has no route for, by default.
    const NOT_FOUND: (u16, &str) = (404, "{\"error\":\"no\"}");

    /// Answers each request by its path from `routes` (status 200), else with
    /// `otherwise` (status and body), one connection at a time (also the
    /// server of `joule models serve-check`'s tests).
    pub(crate) fn route_server(
        routes: Vec<(&'static str, &'static str)>,
        otherwise: (u16, &'static str),
    ) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                r.read_line(&mut first).unwrap_or(0);
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                // The request's body is read before answering.
                let mut sent = vec![0; len];
                let _ = r.read_exact(&mut sent);
                let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
                let (code, body) = match routes.iter().find(|(p, _)| *p == path) {
                    Some((_, b)) => (200, *b),
                    None => otherwise,
                };
                let mut s = s;
                let _ = write!(
                    s,
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        url
    }

    #[test]
    fn a_served_models_origin_holds_the_servers_entry_and_ollamas_digest() {
        // An Ollama-like server: its OpenAI list and its own tags with digests.
        let url = route_server(
            vec![
                (
                    "/v1/models",
                    r#"{"data":[{"id":"qwen3:8b","object":"model","owned_by":"library"}]}"#,
                ),
                (
                    "/api/tags",
                    r#"{"models":[{"name":"qwen3:8b","digest":"500a1f067a9f","details":{"quantization_level":"Q4_K_M"}}]}"#,
                ),
            ],
            NOT_FOUND,
        );
        let b = OpenAiBackend::connect(&llm(&url), names(&[("qwen3-8b", "qwen3:8b")])).unwrap();
        let o = b.model_origins(&["qwen3-8b", "scripted:random"]);
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(o[0].served_name.as_deref(), Some("qwen3:8b"));
        assert_eq!(o[0].server.as_deref(), Some(url.as_str()));
        assert!(
            o[0].served_entry
                .as_deref()
                .is_some_and(|e| e.contains("library")),
            "{o:?}"
        );
        assert_eq!(o[0].served_digest.as_deref(), Some("500a1f067a9f"));
        assert!(o[0]
            .served_details
            .as_deref()
            .is_some_and(|d| d.contains("Q4_K_M")));
        // A llama-server-like one: its entry's meta, no tags; an alias names the model.
        let url = route_server(
            vec![(
                "/v1/models",
                r#"{"data":[{"id":"m.gguf","aliases":["smol"],"meta":{"n_params":134515008}}]}"#,
            )],
            NOT_FOUND,
        );
        let b = OpenAiBackend::connect(&llm(&url), names(&[("k", "smol")])).unwrap();
        let o = b.model_origins(&["k"]);
        assert!(
            o[0].served_entry
                .as_deref()
                .is_some_and(|e| e.contains("134515008")),
            "{o:?}"
        );
        assert_eq!(o[0].served_digest, None);
    }

    /// The model ids a server lists are its own text: the error that names
    /// what it serves escapes their control characters.
    #[test]
    fn served_model_ids_are_escaped_in_the_missing_model_error() {
        let url = route_server(
            vec![(
                "/v1/models",
                r#"{"data":[{"id":"\u001b]0;pwned\u0007\u001b[2J\u001b[31mevil"}]}"#,
            )],
            NOT_FOUND,
        );
        let e = OpenAiBackend::connect(&llm(&url), names(&[("k", "m")]))
            .err()
            .expect("a missing model");
        let msg = format!("{e:#}");
        assert!(msg.contains("it serves: \\u{1b}]0;pwned\\u{7}"), "{msg}");
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
    }

    #[test]
    fn an_unreachable_server_is_an_error_before_anything_runs_and_stops_a_run() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/v1");
        let e = OpenAiBackend::connect(&llm(&url), names(&[("k", "m")]))
            .err()
            .expect("no server");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("cannot reach the model server") && msg.contains(&url),
            "{msg}"
        );

        let client = client_for(&llm(&url)).unwrap();
        let mut b = OpenAiBackend::with_client(&llm(&url), client, names(&[("k", "m")]));
        let out = b.generate(&[req("k"), req("k")]);
        assert!(out.iter().all(|r| r.is_err()));
        let why = b.unavailable().expect("the server is marked unavailable");
        assert!(why.contains("stopped answering"), "{why}");
        let unknown = b.generate(&[req("other")]);
        assert!(unknown[0]
            .as_ref()
            .unwrap_err()
            .message
            .contains("not sent"));
    }

    #[test]
    fn a_server_error_on_every_try_stops_a_run_and_a_client_error_does_not() {
        // An overloaded server (or a proxy whose backend died): 503 after every retry.
        let url = route_server(vec![], (503, r#"{"error":"upstream unavailable"}"#));
        let mut opts = llm(&url);
        opts.retries = 1;
        opts.retry_backoff_s = 0.01;
        let client = client_for(&opts).unwrap();
        let mut b = OpenAiBackend::with_client(&opts, client, names(&[("k", "m")]));
        let out = b.generate(&[req("k"), req("k")]);
        assert!(out.iter().all(|r| r.is_err()));
        let why = b.unavailable().expect("the server is marked unavailable");
        assert!(
            why.contains("stopped answering") && why.contains("HTTP 503"),
            "{why}"
        );

        // A request the server refuses (an unknown model): that call's error only.
        let url = route_server(vec![], (404, r#"{"error":"model not found"}"#));
        let client = client_for(&llm(&url)).unwrap();
        let mut b = OpenAiBackend::with_client(&llm(&url), client, names(&[("k", "m")]));
        let out = b.generate(&[req("k")]);
        assert!(out[0].as_ref().unwrap_err().message.contains("HTTP 404"));
        assert!(b.unavailable().is_none());
    }

    #[test]
    fn a_missing_api_key_variable_is_named() {
        let mut c = llm("http://127.0.0.1:1/v1");
        c.api_key_env = Some("JOULE_TEST_SURELY_UNSET_KEY".into());
        let e = client_for(&c).err().expect("unset variable");
        assert!(format!("{e}").contains("JOULE_TEST_SURELY_UNSET_KEY"));
    }
}
