//! Chat templates: the Jinja programs shipped with a model (GGUF metadata
//! `tokenizer.chat_template`, or a `.jinja` file) that turn a conversation
//! into the prompt text, rendered with minijinja in the environment Hugging
//! Face's `apply_chat_template` provides:
//!
//! - `trim_blocks` and `lstrip_blocks` on, `break`/`continue` in loops;
//! - Python string and dict methods (`startswith`, `split`, `strip`, `get`,
//!   `items`, ...) through minijinja-contrib's pycompat;
//! - variables `messages`, `add_generation_prompt`, `bos_token`, `eos_token`,
//!   `tools` and `documents` (both none), and `enable_thinking` when the
//!   caller sets it (left undefined otherwise, as transformers does);
//! - functions `raise_exception(msg)` (a render error carrying `msg`) and
//!   `strftime_now(fmt)`; `namespace` and the other Jinja built-ins;
//! - a `tojson` filter that writes like Python's `json.dumps` (`", "` and
//!   `": "` separators, non-ASCII kept, optional `indent`).
//!
//! [`ChatTemplate::thinking`] finds out, by rendering probes, whether the
//! template has a thinking block, which markers delimit it, and whether it
//! can be switched on and off with `enable_thinking`.

use crate::backend::ChatMessage;
use anyhow::{anyhow, Context, Result};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};
use std::time::{SystemTime, UNIX_EPOCH};

const TEMPLATE_NAME: &str = "chat_template";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    name: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("name", &self.name)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

/// How a template handles a thinking (reasoning) block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkingSupport {
    /// Marker that opens the thinking block (`<think>`, Gemma 4's `<|channel>`).
    pub open: String,
    /// Marker that closes it (`</think>`, Gemma 4's `<channel|>`).
    pub close: String,
    /// Whether `enable_thinking` changes the prompt (on/off switch).
    pub switchable: bool,
    /// With thinking on, the generation prompt already opens the block
    /// (Qwen3.5 and Nemotron end the prompt with `<think>\n`): the model's
    /// first generated token is inside the thinking block.
    pub prompt_opens_block: bool,
}

/// Marker pairs recognised in templates, in order of preference.
const MARKERS: &[(&str, &str)] = &[("<think>", "</think>"), ("<|channel>", "<channel|>")];

impl ChatTemplate {
    /// Compile `source`. `bos` and `eos` are the texts of the model's BOS and
    /// EOS tokens (`bos_token`/`eos_token` in the template; may be empty).
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        Self::named(source, bos, eos, "chat template")
    }

    /// As [`ChatTemplate::new`], with a name (a file, a model) for error messages.
    pub fn named(source: &str, bos: &str, eos: &str, name: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson_filter);
        // Python's jinja2: `none is iterable` is false (minijinja says true, and
        // then `none | length` fails, e.g. in Nemotron's `tools` check).
        env.add_test("iterable", |v: minijinja::Value| {
            !v.is_none() && !v.is_undefined() && v.try_iter().is_ok()
        });
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| anyhow!("{name}: cannot compile the chat template: {}", describe(&e)))?;
        Ok(Self {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
            name: name.to_string(),
        })
    }

    /// Read a template from a file (`.jinja`, or a Hugging Face
    /// `tokenizer_config.json` / `chat_template.json` with a `chat_template` string).
    pub fn from_file(path: impl AsRef<std::path::Path>, bos: &str, eos: &str) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading chat template {}", path.display()))?;
        let source = if path.extension().is_some_and(|e| e == "json") {
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("parsing {} as JSON", path.display()))?;
            v.get("chat_template")
                .and_then(|t| t.as_str())
                .ok_or_else(|| anyhow!("{}: no string field `chat_template`", path.display()))?
                .to_string()
        } else {
            text
        };
        Self::named(&source, bos, eos, &path.display().to_string())
    }

    /// Read `tokenizer.chat_template` from GGUF metadata; `None` when the
    /// file has none. BOS/EOS texts come from the tokenizer.
    pub fn from_gguf_content(
        content: &candle_core::quantized::gguf_file::Content,
        tokenizer: &crate::inference::text::tokenizer::Tokenizer,
    ) -> Result<Option<Self>> {
        let name = format!("{} (tokenizer.chat_template)", tokenizer.source().display());
        match content.metadata.get("tokenizer.chat_template") {
            None => Ok(None),
            Some(candle_core::quantized::gguf_file::Value::String(s)) => {
                let text = |id: Option<u32>| {
                    id.and_then(|i| tokenizer.token_text(i))
                        .unwrap_or("")
                        .to_string()
                };
                Self::named(
                    s,
                    &text(tokenizer.bos_id()),
                    &text(tokenizer.eos_id()),
                    &name,
                )
                .map(Some)
            }
            Some(_) => Err(anyhow!("{name}: metadata is not a string")),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Render a conversation. `enable_thinking = None` leaves the variable
    /// undefined, so the template's own default applies.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| anyhow!("{}: {}", self.name, describe(&e)))?;
        let mut ctx = std::collections::BTreeMap::<&str, Value>::new();
        ctx.insert("messages", Value::from_serialize(messages));
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        ctx.insert("bos_token", Value::from(self.bos.as_str()));
        ctx.insert("eos_token", Value::from(self.eos.as_str()));
        ctx.insert("tools", Value::from(()));
        ctx.insert("documents", Value::from(()));
        if let Some(t) = enable_thinking {
            ctx.insert("enable_thinking", Value::from(t));
        }
        tmpl.render(ctx)
            .map_err(|e| anyhow!("{}: rendering failed: {}", self.name, describe(&e)))
    }

    /// Whether and how the template writes a thinking block; `None` when it
    /// mentions none of the known markers.
    pub fn thinking(&self) -> Option<ThinkingSupport> {
        let probe = [ChatMessage::user("ping")];
        let on = self.render(&probe, true, Some(true)).ok();
        let off = self.render(&probe, true, Some(false)).ok();
        let source = self
            .env
            .get_template(TEMPLATE_NAME)
            .ok()?
            .source()
            .to_string();
        let (open, close) = MARKERS
            .iter()
            .find(|(o, c)| source.contains(o) && source.contains(c))
            .map(|&(o, c)| (o.to_string(), c.to_string()))?;
        let switchable = matches!((&on, &off), (Some(a), Some(b)) if a != b);
        let prompt_opens_block =
            on.as_deref()
                .is_some_and(|p| match (p.rfind(&open), p.rfind(&close)) {
                    (Some(o), Some(c)) => o > c,
                    (Some(_), None) => true,
                    _ => false,
                });
        Some(ThinkingSupport {
            open,
            close,
            switchable,
            prompt_opens_block,
        })
    }
}

/// Chain of a minijinja error's causes in one line, with the template line.
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    if let Some(line) = e.line() {
        s.push_str(&format!(" (template line {line})"));
    }
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}

fn raise_exception(msg: String) -> std::result::Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {msg}"),
    ))
}

/// `strftime_now(fmt)`: the current UTC time formatted with the common
/// `strftime` codes (`%d %m %Y %y %b %B %a %A %H %M %S %j %%`).
fn strftime_now(fmt: String) -> std::result::Result<Value, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime_at(&fmt, secs).map(Value::from)
}

/// Format UNIX time `secs` (UTC) with a subset of `strftime`.
pub fn strftime_at(fmt: &str, secs: i64) -> std::result::Result<String, Error> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(code) = chars.next() else {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "strftime_now: format ends with '%'",
            ));
        };
        let m = MONTHS[(month - 1) as usize];
        match code {
            'd' => out.push_str(&format!("{day:02}")),
            'm' => out.push_str(&format!("{month:02}")),
            'Y' => out.push_str(&year.to_string()),
            'y' => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            'b' => out.push_str(&m[..3]),
            'B' => out.push_str(m),
            'a' => out.push_str(&DAYS[weekday][..3]),
            'A' => out.push_str(DAYS[weekday]),
            'H' => out.push_str(&format!("{:02}", tod / 3600)),
            'M' => out.push_str(&format!("{:02}", tod / 60 % 60)),
            'S' => out.push_str(&format!("{:02}", tod % 60)),
            'j' => out.push_str(&format!("{yday:03}")),
            '%' => out.push('%'),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: unsupported format code %{other}"),
                ))
            }
        }
    }
    Ok(out)
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False,
/// indent=indent, sort_keys=sort_keys)`.
fn tojson_filter(value: Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    write_py_json(&json, indent, sort_keys.unwrap_or(false), 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// Write JSON as Python's `json.dumps` does (ensure_ascii=False).
pub fn write_py_json(
    v: &serde_json::Value,
    indent: Option<usize>,
    sort_keys: bool,
    depth: usize,
    out: &mut String,
) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                out.push_str(&py_float_repr(f));
            } else {
                out.push_str(&n.to_string());
            }
        }
        J::String(s) => write_py_string(s, out),
        J::Array(a) => {
            if a.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_py_json(x, indent, sort_keys, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(o) => {
            if o.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &J)> = o.iter().collect();
            if sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, x)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_py_string(k, out);
                out.push_str(": ");
                write_py_json(x, indent, sort_keys, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
    }
}

fn write_py_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, `.0` on integral
/// values, exponent form outside 1e-4 ≤ |x| < 1e16.
fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust: "1e16" / "1.5e-5"; Python: "1e+16" / "1.5e-05".
        let s = format!("{f:e}");
        let (mant, exp) = s.split_once('e').expect("exponent form");
        let exp: i32 = exp.parse().expect("integer exponent");
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Role;
    use std::path::Path;

    fn templates_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/chat-templates")
    }

    fn fixture(name: &str) -> serde_json::Value {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/chat_templates")
            .join(name.replace(".jinja", ".json"));
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    }

    fn messages(v: &serde_json::Value) -> Vec<ChatMessage> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|m| ChatMessage {
                role: match m["role"].as_str().unwrap() {
                    "system" => Role::System,
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    r => panic!("role {r}"),
                },
                content: m["content"].as_str().unwrap().to_string(),
            })
            .collect()
    }

    /// Every template in ../shared/data/chat-templates renders every fixture
    /// case (generated by scripts/gen_chat_template_fixtures.py with Python
    /// jinja2) to exactly the same string.
    #[test]
    fn all_templates_match_python_jinja2() {
        let mut checked = 0;
        let mut names: Vec<String> = std::fs::read_dir(templates_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".jinja"))
            .collect();
        names.sort();
        assert_eq!(names.len(), 6);
        for name in names {
            let fx = fixture(&name);
            let source = std::fs::read_to_string(templates_dir().join(&name)).unwrap();
            let t = ChatTemplate::named(
                &source,
                fx["bos_token"].as_str().unwrap(),
                fx["eos_token"].as_str().unwrap(),
                &name,
            )
            .unwrap();
            for case in fx["cases"].as_array().unwrap() {
                let conv = messages(&fx["conversations"][case["conversation"].as_str().unwrap()]);
                let agp = case["add_generation_prompt"].as_bool().unwrap();
                let thinking = case["enable_thinking"].as_bool();
                let got = t.render(&conv, agp, thinking);
                match case["expected"].as_str() {
                    Some(want) => {
                        let got = got.unwrap_or_else(|e| panic!("{name} {case}: {e:#}"));
                        assert_eq!(got, want, "{name}: case {case}");
                    }
                    None => assert!(got.is_err(), "{name}: case {case} should fail"),
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 72);
    }

    #[test]
    fn thinking_support_of_each_family() {
        let load = |n: &str| {
            let source = std::fs::read_to_string(templates_dir().join(n)).unwrap();
            ChatTemplate::named(&source, "<bos>", "<eos>", n).unwrap()
        };
        let think = |open: &str, close: &str, switchable, prompt_opens_block| ThinkingSupport {
            open: open.into(),
            close: close.into(),
            switchable,
            prompt_opens_block,
        };
        assert_eq!(load("Qwen-Qwen2.5-7B-Instruct.jinja").thinking(), None);
        assert_eq!(
            load("meta-llama-Llama-3.1-8B-Instruct.jinja").thinking(),
            None
        );
        assert_eq!(
            load("Qwen-Qwen3-0.6B.jinja").thinking(),
            Some(think("<think>", "</think>", true, false))
        );
        assert_eq!(
            load("Qwen3.5-4B.jinja").thinking(),
            Some(think("<think>", "</think>", true, true))
        );
        assert_eq!(
            load("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja").thinking(),
            Some(think("<think>", "</think>", true, true))
        );
        assert_eq!(
            load("google-gemma-4-31B-it.jinja").thinking(),
            Some(think("<|channel>", "<channel|>", true, false))
        );
    }

    #[test]
    fn raise_exception_is_an_error_naming_template_and_cause() {
        let t = ChatTemplate::named(
            "{{ raise_exception('no system role') }}",
            "",
            "",
            "my.jinja",
        )
        .unwrap();
        let err = format!("{:#}", t.render(&[], false, None).unwrap_err());
        assert!(
            err.contains("my.jinja") && err.contains("no system role"),
            "{err}"
        );
    }

    #[test]
    fn tojson_writes_like_python_json_dumps() {
        let t = ChatTemplate::new(
            r#"{{ {"a": 1, "b": [1.5, "é\n"], "c": none} | tojson }}|{{ [1, {"x": true}] | tojson(indent=2) }}"#,
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&[], false, None).unwrap(),
            "{\"a\": 1, \"b\": [1.5, \"é\\n\"], \"c\": null}|[\n  1,\n  {\n    \"x\": true\n  }\n]"
        );
    }

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-07-26 00:00:00 UTC was a Friday.
        assert_eq!(
            strftime_at("%d %b %Y", 1_721_952_000).unwrap(),
            "26 Jul 2024"
        );
        assert_eq!(
            strftime_at("%A %j %H:%M:%S %%", 1_721_952_000 + 3723).unwrap(),
            "Friday 208 01:02:03 %"
        );
        assert!(strftime_at("%Q", 0).is_err());
    }
}
