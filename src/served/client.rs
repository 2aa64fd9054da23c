//! HTTP to an OpenAI-compatible server (ureq, blocking): `GET /models`,
//! `POST /chat/completions`, and the retry policy. Refused connections,
//! timeouts, HTTP 5xx (and 408/429) and malformed JSON are retried with
//! exponential backoff up to `retries` times; other HTTP errors (a 4xx such
//! as an unknown model) and responses without exact counts are final at once.
//! A failure carries the server's own message, whether the server itself is
//! unreachable, and whether it answered with an HTTP server error on every
//! try (either way the backend then stops the run, see `Backend::unavailable`).
//! A body larger than [`MAX_BODY_BYTES`] is an answer, not an outage: a final
//! failure of that call, never fetched again. Server text in a failure's
//! message has its control characters escaped.

use std::time::Duration;

use serde_json::Value;

use super::api::{self, Answer, BadResponse};

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// Worth another try (connection, timeout, 5xx, malformed JSON).
    pub retry: bool,
    /// The server could not be reached at all (connection refused or reset, timeout).
    pub unreachable: bool,
    /// The server answered with a retryable HTTP status (5xx, 408, 429): an
    /// overloaded server or a proxy whose backend died. When it is still so
    /// after every retry, the server is taken to have stopped answering.
    pub server_error: bool,
}

impl Failure {
    fn final_(message: String) -> Self {
        Failure {
            message,
            retry: false,
            unreachable: false,
            server_error: false,
        }
    }
}

/// How requests are sent and retried.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub base_url: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
    pub retries: u32,
    pub backoff: Duration,
    /// Connections kept open for reuse (the most requests in flight at once).
    pub pool: usize,
}

/// A connection pool to one server.
pub struct Client {
    agent: ureq::Agent,
    opts: ClientOptions,
}

/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The most bytes of one response body that are read (10 MiB); the rest of a
/// larger one is left unread.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Why a response body could not be read.
enum BodyError {
    /// Larger than [`MAX_BODY_BYTES`].
    TooBig,
    /// The connection failed while reading.
    Io(std::io::Error),
}

/// A response's body as text (invalid UTF-8 replaced), at most [`MAX_BODY_BYTES`].
fn read_body(r: ureq::Response) -> Result<String, BodyError> {
    use std::io::Read;
    let mut buf = Vec::new();
    r.into_reader()
        .take(MAX_BODY_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(BodyError::Io)?;
    if buf.len() > MAX_BODY_BYTES {
        return Err(BodyError::TooBig);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// [`MAX_BODY_BYTES`] in words.
fn body_limit() -> String {
    format!("{} MiB", MAX_BODY_BYTES / (1024 * 1024))
}

impl Client {
    pub fn new(mut opts: ClientOptions) -> Self {
        opts.base_url = opts.base_url.trim().trim_end_matches('/').to_string();
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10).min(opts.timeout))
            .timeout(opts.timeout)
            .max_idle_connections_per_host(opts.pool.max(1))
            .build();
        Client { agent, opts }
    }

    pub fn base_url(&self) -> &str {
        &self.opts.base_url
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.opts.base_url)
    }

    /// One HTTP exchange: the body of a 2xx response, or a classified failure.
    fn exchange(&self, method: &str, path: &str, body: Option<&str>) -> Result<String, Failure> {
        self.exchange_at(method, self.url(path), body)
    }

    /// [`Self::exchange`] with a whole URL.
    fn exchange_at(
        &self,
        method: &str,
        url: String,
        body: Option<&str>,
    ) -> Result<String, Failure> {
        let mut req = self.agent.request(method, &url);
        if let Some(key) = &self.opts.api_key {
            req = req.set("Authorization", &format!("Bearer {key}"));
        }
        let res = match body {
            Some(b) => req.set("Content-Type", "application/json").send_string(b),
            None => req.call(),
        };
        match res {
            Ok(r) => read_body(r).map_err(|e| match e {
                // The server answered: this call failed, the server did not.
                BodyError::TooBig => Failure::final_(format!(
                    "{method} {url}: the answer is larger than the {} limit (not read further)",
                    body_limit()
                )),
                BodyError::Io(e) => Failure {
                    message: crate::shown::terminal(&format!(
                        "{method} {url}: reading the response failed: {e}"
                    )),
                    retry: true,
                    unreachable: true,
                    server_error: false,
                },
            }),
            Err(ureq::Error::Status(code, r)) => {
                let said = match read_body(r) {
                    Ok(text) => api::server_message(&text),
                    Err(BodyError::TooBig) => {
                        format!("(an error body larger than the {} limit)", body_limit())
                    }
                    Err(BodyError::Io(_)) => api::server_message(""),
                };
                let retry = code >= 500 || code == 408 || code == 429;
                Err(Failure {
                    message: format!("{method} {url}: HTTP {code}: {said}"),
                    retry,
                    unreachable: false,
                    server_error: retry,
                })
            }
            Err(ureq::Error::Transport(t)) => Err(Failure {
                // A transport error can quote what the server sent.
                message: crate::shown::terminal(&format!("{method} {url}: {t}")),
                retry: true,
                unreachable: true,
                server_error: false,
            }),
        }
    }

    /// Run `attempt` until it succeeds, fails for good, or the retries are spent.
    fn with_retries<T>(
        &self,
        mut attempt: impl FnMut() -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let mut tries = 0u32;
        loop {
            match attempt() {
                Ok(v) => return Ok(v),
                Err(f) if f.retry && tries < self.opts.retries => {
                    let wait = self
                        .opts
                        .backoff
                        .saturating_mul(1u32 << tries.min(16))
                        .min(MAX_BACKOFF);
                    std::thread::sleep(wait);
                    tries += 1;
                }
                Err(mut f) => {
                    if tries > 0 {
                        f.message = format!("{} (after {} tries)", f.message, tries + 1);
                    }
                    return Err(f);
                }
            }
        }
    }

    /// The names the server serves (`GET /models`).
    pub fn models(&self) -> Result<Vec<String>, Failure> {
        self.model_list().map(|l| l.names)
    }

    /// The server's model list (`GET /models`): the names it serves and its entry for each.
    pub fn model_list(&self) -> Result<ModelList, Failure> {
        self.with_retries(|| {
            let body = self.exchange("GET", "models", None)?;
            let names = api::parse_models(&body).map_err(|m| Failure {
                message: format!("GET {}: {m}", self.url("models")),
                retry: true,
                unreachable: false,
                server_error: false,
            })?;
            Ok(ModelList {
                names,
                entries: api::model_entries(&body),
            })
        })
    }

    /// Ollama's own list of tags with their digests (`GET /api/tags` beside the OpenAI-compatible
    /// `/v1`), asked once; empty from a server that has none (llama-server, vLLM).
    pub fn ollama_tags(&self) -> std::collections::BTreeMap<String, (String, String)> {
        let base = self.opts.base_url.trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base);
        self.exchange_at("GET", format!("{root}/api/tags"), None)
            .map(|body| api::ollama_tags(&body))
            .unwrap_or_default()
    }

    /// One chat completion, read into an [`Answer`].
    pub fn chat(&self, body: &Value, counted_by: &str) -> Result<Answer, Failure> {
        let text = body.to_string();
        let max_tokens = body
            .get("max_tokens")
            .and_then(Value::as_u64)
            .and_then(|m| u32::try_from(m).ok());
        self.with_retries(|| {
            let resp = self.exchange("POST", "chat/completions", Some(&text))?;
            api::parse_response(&resp, counted_by, max_tokens).map_err(|e| match e {
                BadResponse::Malformed(m) => Failure {
                    message: m,
                    retry: true,
                    unreachable: false,
                    server_error: false,
                },
                BadResponse::BadCounts(m) => Failure::final_(m),
            })
        })
    }
}

/// A server's model list: the names it serves (ids and aliases) and, per name, the server's own
/// entry for it as compact JSON (`api::model_entries`).
#[derive(Debug, Clone, Default)]
pub struct ModelList {
    pub names: Vec<String>,
    pub entries: std::collections::BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    //! The retry policy against a loopback responder that answers canned
    //! HTTP responses in order (one connection each).
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn serve(responses: Vec<(u16, &'static str)>) -> (String, std::thread::JoinHandle<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            let mut served = 0;
            for (code, body) in responses {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 65536];
                let mut got = Vec::new();
                // Read the head and the body the Content-Length announces.
                loop {
                    let n = s.read(&mut buf).unwrap();
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap())
                            })
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                    if n == 0 {
                        break;
                    }
                }
                let reply = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                // A client that stops reading a long body closes the connection.
                let _ = s.write_all(reply.as_bytes());
                served += 1;
            }
            served
        });
        (format!("http://{addr}/v1"), handle)
    }

    fn client(url: String, retries: u32) -> Client {
        Client::new(ClientOptions {
            base_url: url,
            api_key: Some("k".into()),
            timeout: Duration::from_secs(10),
            retries,
            backoff: Duration::from_millis(1),
            pool: 1,
        })
    }

    const OK: &str = r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#;

    #[test]
    fn server_errors_and_malformed_json_are_retried() {
        let (url, h) = serve(vec![
            (503, r#"{"error":{"message":"loading model"}}"#),
            (200, "{\"choices\": [tru"),
            (200, OK),
        ]);
        let a = client(url, 3)
            .chat(&serde_json::json!({"model": "m"}), "server x")
            .unwrap();
        assert_eq!(a.text, "hi");
        assert_eq!(a.usage.charged_tokens, 2);
        assert_eq!(h.join().unwrap(), 3);
    }

    #[test]
    fn retries_end_with_the_servers_message() {
        let (url, h) = serve(vec![
            (500, r#"{"error":{"message":"out of memory"}}"#),
            (500, r#"{"error":{"message":"out of memory"}}"#),
        ]);
        let f = client(url, 1)
            .chat(&serde_json::json!({}), "s")
            .unwrap_err();
        assert!(
            f.message.contains("HTTP 500: out of memory"),
            "{}",
            f.message
        );
        assert!(f.message.contains("after 2 tries"), "{}", f.message);
        assert!(!f.unreachable);
        assert!(f.server_error, "a 500 on every try is a server error");
        assert_eq!(h.join().unwrap(), 2);
    }

    #[test]
    fn client_errors_and_missing_usage_are_not_retried() {
        let (url, h) = serve(vec![(
            404,
            r#"{"error":"model \"qwen3:8b\" not found, try pulling it first"}"#,
        )]);
        let f = client(url, 5)
            .chat(&serde_json::json!({}), "s")
            .unwrap_err();
        assert!(
            f.message.contains("HTTP 404: model \"qwen3:8b\" not found"),
            "{}",
            f.message
        );
        assert_eq!(h.join().unwrap(), 1);
        let (url, h) = serve(vec![(200, r#"{"choices":[{"message":{"content":"x"}}]}"#)]);
        let f = client(url, 5)
            .chat(&serde_json::json!({}), "s")
            .unwrap_err();
        assert!(f.message.contains("no `usage`"), "{}", f.message);
        assert!(!f.server_error);
        assert_eq!(h.join().unwrap(), 1);
    }

    /// A body over the limit is the call's own failure, said with the limit,
    /// and asked for once: the server answered, it did not stop answering.
    #[test]
    fn an_answer_over_the_size_limit_fails_that_call_once_and_is_no_outage() {
        let big: &'static str = Box::leak(" ".repeat(MAX_BODY_BYTES + 1).into_boxed_str());
        // An error body over the limit still gives the status.
        for (code, says) in [
            (200, "the answer is larger than the 10 MiB limit"),
            (
                400,
                "HTTP 400: (an error body larger than the 10 MiB limit)",
            ),
        ] {
            let (url, h) = serve(vec![(code, big)]);
            let f = client(url, 3)
                .chat(&serde_json::json!({}), "s")
                .unwrap_err();
            assert!(f.message.contains(says), "{}", f.message);
            assert!(!f.retry && !f.unreachable && !f.server_error, "{f:?}");
            assert!(!f.message.contains("tries"), "{}", f.message);
            assert_eq!(h.join().unwrap(), 1);
        }
    }

    #[test]
    fn a_refused_connection_is_unreachable_after_its_retries() {
        // A port that was just free: nothing listens there.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let f = client(format!("http://127.0.0.1:{port}/v1"), 2)
            .models()
            .unwrap_err();
        assert!(f.unreachable);
        assert!(f.message.contains("after 3 tries"), "{}", f.message);
    }
}
