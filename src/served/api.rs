//! The OpenAI chat-completions wire format as Joule speaks it: the request
//! body of one [`ModelRequest`] ([`request_body`]) and the reading of a
//! response ([`parse_response`]) into text, thinking and the server's exact
//! token counts. Pure functions, no I/O.
//!
//! Counts are never guessed: the charge is `usage.completion_tokens` (the
//! server's count of every generated token, thinking included, which is what
//! Ollama reported to the reference), prompt tokens are `usage.prompt_tokens`,
//! and a response without them is an error. Thinking text comes from the
//! message's `reasoning_content` (vLLM, llama-server) or `reasoning` (Ollama,
//! newer vLLM), else from a `<think>…</think>` block in the content; thinking
//! tokens from `usage.completion_tokens_details.reasoning_tokens` when the
//! server reports them (else 0, and the record says so).

use serde_json::{json, Map, Value};

use crate::backend::{CountSource, FinishReason, ModelRequest, OutputFormat, Role, TokenUsage};
use crate::inference::llm_backend::{SchemaChoice, StructuredMode};
use crate::inference::text::thinking::split_thinking;

use super::config::ThinkingSwitch;

/// The request options that come from `[llm]` rather than from the request.
#[derive(Debug, Clone)]
pub struct RequestOptions {
    pub structured: StructuredMode,
    pub schema: SchemaChoice,
    /// `maxLength` given to schema strings that have none (as local constrained decoding does).
    pub max_string_chars: Option<usize>,
    pub thinking_switch: ThinkingSwitch,
}

/// The seed a server receives: the low 31 bits of the call's seed. Ollama and
/// vLLM take a signed 64-bit seed and llama-server a 32-bit one in which
/// 2^32−1 means "random", so 31 bits are valid everywhere and never random.
pub fn wire_seed(seed: u64) -> u64 {
    seed & 0x7fff_ffff
}

/// The JSON body of `POST /chat/completions` for one request.
pub fn request_body(req: &ModelRequest, served_model: &str, opts: &RequestOptions) -> Value {
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({"role": role, "content": m.content})
        })
        .collect();
    let p = &req.params;
    let mut body = Map::new();
    body.insert("model".into(), served_model.into());
    body.insert("messages".into(), messages.into());
    body.insert("stream".into(), false.into());
    body.insert("max_tokens".into(), p.max_tokens.into());
    body.insert("temperature".into(), json!(p.temperature));
    body.insert("seed".into(), wire_seed(p.seed).into());
    if let Some(v) = p.top_p {
        body.insert("top_p".into(), json!(v));
    }
    // Not OpenAI fields; llama-server and vLLM read them, others ignore them.
    if let Some(v) = p.top_k {
        body.insert("top_k".into(), v.into());
    }
    if let Some(v) = p.min_p {
        body.insert("min_p".into(), json!(v));
    }
    if let Some(v) = p.repeat_penalty {
        // llama-server's name, and vLLM's.
        body.insert("repeat_penalty".into(), json!(v));
        body.insert("repetition_penalty".into(), json!(v));
    }
    if !p.stop.is_empty() {
        body.insert("stop".into(), json!(p.stop));
    }
    if p.ignore_eos {
        // llama-server's and vLLM's field; servers without it (Ollama) may end a call early,
        // and the answer's `completion_tokens` says so.
        body.insert("ignore_eos".into(), true.into());
    }
    match opts.thinking_switch {
        ThinkingSwitch::ChatTemplateKwargs => {
            body.insert(
                "chat_template_kwargs".into(),
                json!({"enable_thinking": p.thinking}),
            );
        }
        ThinkingSwitch::ReasoningEffort => {
            if !p.thinking {
                body.insert("reasoning_effort".into(), "none".into());
            }
        }
        ThinkingSwitch::Think => {
            body.insert("think".into(), p.thinking.into());
        }
        ThinkingSwitch::None => {}
    }
    if let (
        OutputFormat::Json {
            name,
            schema,
            strict,
        },
        StructuredMode::Constrained,
    ) = (&req.format, opts.structured)
    {
        let chosen = match (opts.schema, strict) {
            (SchemaChoice::Strict, Some(s)) => s,
            _ => schema,
        };
        let mut chosen = chosen.clone();
        if let Some(n) = opts.max_string_chars {
            cap_strings(&mut chosen, n);
        }
        body.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                "json_schema": {"name": schema_name(name), "schema": chosen, "strict": true},
            }),
        );
    }
    Value::Object(body)
}

/// OpenAI allows `[a-zA-Z0-9_-]{1,64}` as a schema name.
fn schema_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        "answer".into()
    } else {
        s
    }
}

/// Give every string schema without a `maxLength` one of `n` characters.
pub fn cap_strings(schema: &mut Value, n: usize) {
    match schema {
        Value::Object(o) => {
            let is_string = match o.get("type") {
                Some(Value::String(t)) => t == "string",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
                _ => false,
            };
            let constrained = o.contains_key("enum") || o.contains_key("const");
            if is_string && !constrained && !o.contains_key("maxLength") {
                o.insert("maxLength".into(), n.into());
            }
            for v in o.values_mut() {
                cap_strings(v, n);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| cap_strings(v, n)),
        _ => {}
    }
}

/// One answer read from a server response.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub thinking: String,
    pub usage: TokenUsage,
    pub finish: FinishReason,
    pub count_source: CountSource,
}

/// Why a 200 response could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadResponse {
    /// Not the JSON of a chat completion (retried: a proxy or a dying server).
    Malformed(String),
    /// A well-formed completion without exact counts, or with counts that
    /// cannot be true (more tokens than the request allowed, more thinking
    /// tokens than generated ones). Not retried: the server never reports them,
    /// and a count is never guessed.
    BadCounts(String),
}

impl std::fmt::Display for BadResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadResponse::Malformed(m) | BadResponse::BadCounts(m) => f.write_str(m),
        }
    }
}

fn count(v: &Value, path: &[&str]) -> Option<u32> {
    let mut cur = v;
    for k in path {
        cur = cur.get(k)?;
    }
    cur.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// Read a chat-completion response body. `counted_by` names the server in
/// the recorded [`CountSource`]; `max_tokens` is the request's limit, which a
/// true count never exceeds.
pub fn parse_response(
    body: &str,
    counted_by: &str,
    max_tokens: Option<u32>,
) -> Result<Answer, BadResponse> {
    let v: Value = serde_json::from_str(body).map_err(|e| {
        BadResponse::Malformed(format!("the response is not JSON ({e}): {}", excerpt(body)))
    })?;
    if let Some(msg) = error_message(&v) {
        return Err(BadResponse::Malformed(format!(
            "the server answered an error: {msg}"
        )));
    }
    let choice = v.get("choices").and_then(|c| c.get(0)).ok_or_else(|| {
        BadResponse::Malformed(format!(
            "the response has no `choices[0]`: {}",
            excerpt(body)
        ))
    })?;
    let message = choice.get("message").ok_or_else(|| {
        BadResponse::Malformed(format!(
            "the response has no `choices[0].message`: {}",
            excerpt(body)
        ))
    })?;
    let content = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => {
            return Err(BadResponse::Malformed(format!(
                "`choices[0].message.content` is not a string: {}",
                excerpt(&other.to_string())
            )))
        }
    };
    let reasoning = ["reasoning_content", "reasoning"].iter().find_map(|k| {
        message
            .get(*k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    });
    let (thinking, text) = match reasoning {
        Some(r) => (r.trim().to_string(), content),
        None if content.contains("<think>") => {
            split_thinking(&content, "<think>", "</think>", false)
        }
        // The prompt opened the block (the server did not parse it out).
        None if content.contains("</think>") => {
            split_thinking(&content, "<think>", "</think>", true)
        }
        None => (String::new(), content),
    };
    let usage = v.get("usage").filter(|u| u.is_object()).ok_or_else(|| {
        BadResponse::BadCounts(
            "the response has no `usage` object, so the generated tokens cannot be counted \
             exactly (the charge is never guessed)"
                .into(),
        )
    })?;
    let completion = count(usage, &["completion_tokens"]).ok_or_else(|| {
        BadResponse::BadCounts(format!(
            "the response's usage has no `completion_tokens` count: {}",
            excerpt(&usage.to_string())
        ))
    })?;
    let prompt = count(usage, &["prompt_tokens"]).ok_or_else(|| {
        BadResponse::BadCounts(format!(
            "the response's usage has no `prompt_tokens` count: {}",
            excerpt(&usage.to_string())
        ))
    })?;
    let reasoning_tokens = count(usage, &["completion_tokens_details", "reasoning_tokens"]);
    let reported = usage
        .get("completion_tokens_details")
        .and_then(|d| d.get("reasoning_tokens"))
        .filter(|r| !r.is_null());
    if let (None, Some(r)) = (reasoning_tokens, reported) {
        return Err(BadResponse::BadCounts(format!(
            "the response's `usage.completion_tokens_details.reasoning_tokens` is not a count \
             of tokens: {}",
            excerpt(&r.to_string())
        )));
    }
    if let Some(max) = max_tokens.filter(|&m| completion > m) {
        return Err(BadResponse::BadCounts(format!(
            "the response's `usage.completion_tokens` is {completion}, more than the {max} the \
             request allowed (`max_tokens`): a count that cannot be true is not charged"
        )));
    }
    if let Some(r) = reasoning_tokens.filter(|&r| r > completion) {
        return Err(BadResponse::BadCounts(format!(
            "the response's `usage.completion_tokens_details.reasoning_tokens` is {r}, more than \
             its `usage.completion_tokens` ({completion}): a count that cannot be true is not \
             charged"
        )));
    }
    let finish = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("length") => FinishReason::Length,
        _ => FinishReason::Stop,
    };
    Ok(Answer {
        text,
        thinking,
        usage: TokenUsage {
            prompt_tokens: prompt,
            generated_tokens: completion,
            thinking_tokens: reasoning_tokens.unwrap_or(0),
            charged_tokens: completion,
            eos_counted: false,
        },
        finish,
        count_source: CountSource {
            charged: "usage.completion_tokens".into(),
            counted_by: counted_by.to_string(),
            thinking: Some(match reasoning_tokens {
                Some(_) => "usage.completion_tokens_details.reasoning_tokens".into(),
                None => "not reported".into(),
            }),
        },
    })
}

/// The message of an error body: OpenAI's `{"error": {"message": …}}` or a
/// plain `{"error": "…"}` (Ollama's native style), with its control
/// characters escaped (it is printed).
pub fn error_message(v: &Value) -> Option<String> {
    let message = match v.get("error")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => Some(
            o.get("message")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| Value::Object(o.clone()).to_string()),
        ),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    message.map(|m| crate::shown::terminal(&m))
}

/// What a server said in an error response body, for the recorded INVOKE_ERROR.
pub fn server_message(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v) => error_message(&v).unwrap_or_else(|| excerpt(body)),
        Err(_) => excerpt(body),
    }
}

/// The first 300 characters of a body, on one line, with its control
/// characters escaped (a server's text is printed, and must not drive the
/// terminal).
pub fn excerpt(s: &str) -> String {
    let one_line: String = s
        .trim()
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    if one_line.chars().count() > 300 {
        let cut: String = one_line.chars().take(300).collect();
        format!("{}…", crate::shown::terminal(&cut))
    } else if one_line.is_empty() {
        "(empty body)".into()
    } else {
        crate::shown::terminal(&one_line)
    }
}

/// The model names a `GET /models` response lists: each entry's `id`, and
/// its `aliases` where the server gives them (llama-server).
pub fn parse_models(body: &str) -> Result<Vec<String>, String> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| format!("the model list is not JSON ({e}): {}", excerpt(body)))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("the model list has no `data` array: {}", excerpt(body)))?;
    let mut names = Vec::new();
    for m in data {
        if let Some(id) = m.get("id").and_then(Value::as_str) {
            names.push(id.to_string());
        }
        if let Some(aliases) = m.get("aliases").and_then(Value::as_array) {
            names.extend(aliases.iter().filter_map(Value::as_str).map(String::from));
        }
    }
    names.dedup();
    Ok(names)
}

/// Each name of the server's model list (ids and aliases) with the server's own entry for it,
/// as compact JSON: llama-server's carries `meta` (parameters, file size, vocabulary), vLLM's
/// `root` (the weights it loaded) and `max_model_len`. A body that is not a model list gives none.
pub fn model_entries(body: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return out;
    };
    for m in v
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let entry = m.to_string();
        let aliases = m.get("aliases").and_then(Value::as_array);
        for name in m
            .get("id")
            .into_iter()
            .chain(aliases.into_iter().flatten())
            .filter_map(Value::as_str)
        {
            out.entry(name.to_string()).or_insert_with(|| entry.clone());
        }
    }
    out
}

/// Ollama's own list (`GET /api/tags`): each tag with the digest of what it names and its
/// `details` (format, family, parameter size, quantization level) as compact JSON. A body that
/// is not such a list (another server) gives none.
pub fn ollama_tags(body: &str) -> std::collections::BTreeMap<String, (String, String)> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return out;
    };
    for m in v
        .get("models")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = m
            .get("name")
            .or_else(|| m.get("model"))
            .and_then(Value::as_str);
        let digest = m.get("digest").and_then(Value::as_str);
        if let (Some(name), Some(digest)) = (name, digest) {
            let details = m.get("details").map(Value::to_string).unwrap_or_default();
            out.insert(name.to_string(), (digest.to_string(), details));
        }
    }
    out
}

/// Does the server's list hold `name`? Exact, or Ollama's implicit `:latest` tag.
pub fn lists_model(listed: &[String], name: &str) -> bool {
    listed.iter().any(|l| {
        l == name
            || (!name.contains(':') && l.strip_suffix(":latest") == Some(name))
            || (!l.contains(':') && name.strip_suffix(":latest") == Some(l.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ChatMessage, GenParams};

    fn opts() -> RequestOptions {
        RequestOptions {
            structured: StructuredMode::Constrained,
            schema: SchemaChoice::Strict,
            max_string_chars: Some(50),
            thinking_switch: ThinkingSwitch::ChatTemplateKwargs,
        }
    }

    fn request() -> ModelRequest {
        ModelRequest {
            model: "qwen3-8b".into(),
            session: 0,
            agent_id: "agent_1".into(),
            tag: "decide".into(),
            messages: vec![ChatMessage::system("sys"), ChatMessage::user("hi")],
            format: OutputFormat::Json {
                name: "agent decision".into(),
                schema: json!({"type": "object", "properties": {"a": {"type": "string"}}}),
                strict: Some(json!({"type": "object", "properties": {
                    "b": {"type": "string"}, "c": {"type": "string", "enum": ["x"]}}})),
            },
            params: GenParams {
                max_tokens: 100,
                temperature: 0.5,
                top_k: Some(40),
                top_p: Some(0.9),
                min_p: None,
                repeat_penalty: Some(1.1),
                seed: u64::MAX,
                stop: vec!["END".into()],
                thinking: false,
                ignore_eos: false,
            },
            observation: Value::Null,
        }
    }

    #[test]
    fn the_servers_own_entries_and_ollamas_digests_are_read() {
        let llama = r#"{"object":"list","data":[{"id":"smollm2","aliases":["s2"],"object":"model",
            "meta":{"n_params":134515008,"size":98362432}}]}"#;
        let e = model_entries(llama);
        assert_eq!(e.len(), 2);
        assert!(e["s2"].contains("\"n_params\":134515008"), "{e:?}");
        assert_eq!(e["smollm2"], e["s2"]);
        assert!(model_entries("not json").is_empty());
        let tags = r#"{"models":[{"name":"qwen3:8b","model":"qwen3:8b","digest":"500a1f067a9f",
            "details":{"format":"gguf","quantization_level":"Q4_K_M"}},{"name":"no-digest"}]}"#;
        let t = ollama_tags(tags);
        assert_eq!(t.len(), 1);
        assert_eq!(t["qwen3:8b"].0, "500a1f067a9f");
        assert!(t["qwen3:8b"].1.contains("Q4_K_M"));
        assert!(ollama_tags(llama).is_empty());
    }

    #[test]
    fn the_body_carries_sampling_seed_schema_and_thinking_switch() {
        let b = request_body(&request(), "qwen3:8b", &opts());
        assert_eq!(b["model"], "qwen3:8b");
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "sys"})
        );
        assert_eq!(b["messages"][1]["role"], "user");
        assert_eq!(b["max_tokens"], 100);
        assert_eq!(b["seed"], 0x7fff_ffffu64);
        assert_eq!(b["top_k"], 40);
        assert_eq!(
            b["repeat_penalty"].as_f64().map(|v| (v * 10.0).round()),
            Some(11.0)
        );
        assert!(b.get("min_p").is_none());
        assert_eq!(b["stop"], json!(["END"]));
        assert_eq!(b["stream"], false);
        assert!(b.get("ignore_eos").is_none());
        let mut eos = request();
        eos.params.ignore_eos = true;
        let be = request_body(&eos, "qwen3:8b", &opts());
        assert_eq!(be["ignore_eos"], true);
        assert_eq!(b["chat_template_kwargs"], json!({"enable_thinking": false}));
        // The strict schema, with strings capped (not the enum one).
        let rf = &b["response_format"];
        assert_eq!(rf["type"], "json_schema");
        assert_eq!(rf["json_schema"]["name"], "agent_decision");
        let s = &rf["json_schema"]["schema"]["properties"];
        assert_eq!(s["b"]["maxLength"], 50);
        assert!(s["c"].get("maxLength").is_none());

        let mut o = opts();
        o.schema = SchemaChoice::Reference;
        o.thinking_switch = ThinkingSwitch::ReasoningEffort;
        let b = request_body(&request(), "m", &o);
        assert!(b["response_format"]["json_schema"]["schema"]["properties"]
            .get("a")
            .is_some());
        assert_eq!(b["reasoning_effort"], "none");
        assert!(b.get("chat_template_kwargs").is_none());

        o.structured = StructuredMode::Free;
        o.thinking_switch = ThinkingSwitch::Think;
        let b = request_body(&request(), "m", &o);
        assert!(b.get("response_format").is_none());
        assert_eq!(b["think"], false);
    }

    #[test]
    fn usage_is_charged_and_its_absence_is_an_error() {
        let body = r#"{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant",
            "content":"{\"a\":1}","reasoning_content":"let me see"}}],
            "usage":{"completion_tokens":17,"prompt_tokens":40,"total_tokens":57}}"#;
        let a = parse_response(body, "server http://127.0.0.1:8080/v1", Some(100)).unwrap();
        assert_eq!(a.text, "{\"a\":1}");
        assert_eq!(a.thinking, "let me see");
        assert_eq!(a.usage.charged_tokens, 17);
        assert_eq!(a.usage.generated_tokens, 17);
        assert_eq!(a.usage.prompt_tokens, 40);
        assert_eq!(a.count_source.charged, "usage.completion_tokens");
        assert_eq!(a.count_source.counted_by, "server http://127.0.0.1:8080/v1");
        assert_eq!(a.count_source.thinking.as_deref(), Some("not reported"));

        let no_usage = r#"{"choices":[{"message":{"content":"x"}}]}"#;
        assert!(matches!(
            parse_response(no_usage, "s", None),
            Err(BadResponse::BadCounts(_))
        ));
        let no_count = r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":3}}"#;
        assert!(matches!(
            parse_response(no_count, "s", None),
            Err(BadResponse::BadCounts(_))
        ));
        assert!(matches!(
            parse_response("<html>", "s", None),
            Err(BadResponse::Malformed(_))
        ));
        assert!(matches!(
            parse_response("{\"usage\":{}}", "s", None),
            Err(BadResponse::Malformed(_))
        ));
        let err =
            parse_response(r#"{"error":{"message":"model not loaded"}}"#, "s", None).unwrap_err();
        assert!(err.to_string().contains("model not loaded"));
    }

    #[test]
    fn counts_that_cannot_be_true_are_refused_naming_the_field() {
        let with = |usage: &str| {
            format!(r#"{{"choices":[{{"message":{{"content":"x"}}}}],"usage":{usage}}}"#)
        };
        let at_limit = with(r#"{"completion_tokens":100,"prompt_tokens":3}"#);
        assert_eq!(
            parse_response(&at_limit, "s", Some(100))
                .unwrap()
                .usage
                .charged_tokens,
            100
        );
        let above = with(r#"{"completion_tokens":4000000000,"prompt_tokens":3}"#);
        let Err(BadResponse::BadCounts(m)) = parse_response(&above, "s", Some(8000)) else {
            panic!("a count above max_tokens is refused")
        };
        assert!(
            m.contains("`usage.completion_tokens` is 4000000000") && m.contains("8000"),
            "{m}"
        );
        let thinking = with(
            r#"{"completion_tokens":9,"prompt_tokens":3,"completion_tokens_details":{"reasoning_tokens":10}}"#,
        );
        let Err(BadResponse::BadCounts(m)) = parse_response(&thinking, "s", Some(100)) else {
            panic!("more thinking than generated tokens is refused")
        };
        assert!(m.contains("reasoning_tokens` is 10"), "{m}");
        let huge = with(
            r#"{"completion_tokens":9,"prompt_tokens":3,"completion_tokens_details":{"reasoning_tokens":1000000000000}}"#,
        );
        let Err(BadResponse::BadCounts(m)) = parse_response(&huge, "s", Some(100)) else {
            panic!("a thinking count beyond any u32 is refused")
        };
        assert!(m.contains("not a count"), "{m}");
    }

    #[test]
    fn thinking_comes_from_reasoning_fields_or_a_think_block() {
        let with = |msg: &str, usage: &str| {
            format!(
                r#"{{"choices":[{{"finish_reason":"length","message":{msg}}}],"usage":{usage}}}"#
            )
        };
        let u = r#"{"completion_tokens":9,"prompt_tokens":1,"completion_tokens_details":{"reasoning_tokens":4}}"#;
        let a =
            parse_response(&with(r#"{"content":"ok","reasoning":"hm"}"#, u), "s", None).unwrap();
        assert_eq!((a.thinking.as_str(), a.text.as_str()), ("hm", "ok"));
        assert_eq!(a.usage.thinking_tokens, 4);
        assert_eq!(a.finish, FinishReason::Length);
        assert_eq!(
            a.count_source.thinking.as_deref(),
            Some("usage.completion_tokens_details.reasoning_tokens")
        );
        let a = parse_response(
            &with(r#"{"content":"<think>a b</think>\n{}"}"#, u),
            "s",
            None,
        )
        .unwrap();
        assert_eq!((a.thinking.as_str(), a.text.as_str()), ("a b", "{}"));
        let a = parse_response(&with(r#"{"content":"a b</think>{}"}"#, u), "s", None).unwrap();
        assert_eq!((a.thinking.as_str(), a.text.as_str()), ("a b", "{}"));
        let a = parse_response(&with(r#"{"content":null}"#, u), "s", None).unwrap();
        assert_eq!(a.text, "");
    }

    #[test]
    fn model_lists_and_error_bodies_are_read() {
        let llama = r#"{"object":"list","data":[{"id":"smollm2","aliases":["smollm2","s2"],"owned_by":"llamacpp"}]}"#;
        assert_eq!(parse_models(llama).unwrap(), vec!["smollm2", "s2"]);
        let ollama = r#"{"object":"list","data":[{"id":"qwen3:8b"},{"id":"gemma3:latest"}]}"#;
        let names = parse_models(ollama).unwrap();
        assert!(lists_model(&names, "qwen3:8b"));
        assert!(lists_model(&names, "gemma3"));
        assert!(!lists_model(&names, "qwen3:4b"));
        assert!(parse_models("[]").is_err());
        assert_eq!(
            server_message(r#"{"error":"model 'x' not found"}"#),
            "model 'x' not found"
        );
        assert_eq!(server_message("Bad Gateway"), "Bad Gateway");
    }

    /// Escape sequences in a server's error body or non-JSON answer reach a
    /// message only escaped.
    #[test]
    fn server_text_in_messages_has_its_control_characters_escaped() {
        let evil = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[31mbad";
        let json_error = serde_json::json!({ "error": { "message": evil } }).to_string();
        let plain_error = serde_json::json!({ "error": evil }).to_string();
        for m in [
            server_message(&json_error),
            server_message(&plain_error),
            server_message(evil),
            parse_response(evil, "s", None).unwrap_err().to_string(),
            parse_response(&json_error, "s", None)
                .unwrap_err()
                .to_string(),
            parse_models(evil).unwrap_err(),
            excerpt(&format!("{}{evil}", "x".repeat(290))),
        ] {
            assert!(!m.chars().any(char::is_control), "{m:?}");
            assert!(m.contains("\\u{1b}"), "{m:?}");
        }
    }
}
