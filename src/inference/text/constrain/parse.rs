//! The free (parse + retry) mode: find the JSON object in a model's free text and check it
//! against the schema, with messages a retry prompt can quote.
//!
//! Extraction order: text after the last `</think>` if any; inside it, the first fenced code
//! block (```` ```json … ``` ```` or plain ```` ``` ````) that holds an object; otherwise the
//! first `{` from which a complete JSON object parses (leading prose and trailing text are
//! ignored; a `{` that starts no valid object is skipped).

use std::fmt;

use serde_json::Value;

use super::schema::{Schema, ValidationErrors};

/// A JSON object found in free text; `start..end` is its byte span in the text given.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractedJson {
    pub value: Value,
    pub start: usize,
    pub end: usize,
}

/// The first complete JSON object in `text` (see module docs), or None.
pub fn extract_json_object(text: &str) -> Option<ExtractedJson> {
    let base = text
        .rfind("</think>")
        .map(|i| i + "</think>".len())
        .unwrap_or(0);
    let body = &text[base..];
    let found = fenced_object(body).or_else(|| first_object(body, 0))?;
    Some(ExtractedJson {
        start: found.start + base,
        end: found.end + base,
        value: found.value,
    })
}

fn fenced_object(body: &str) -> Option<ExtractedJson> {
    let mut from = 0;
    while let Some(open) = body[from..].find("```") {
        let open = from + open;
        let after_ticks = open + 3;
        // The info string (e.g. `json`) runs to the end of the line.
        let content_start = match body[after_ticks..].find('\n') {
            Some(nl) => after_ticks + nl + 1,
            None => return None,
        };
        let content_end = match body[content_start..].find("```") {
            Some(close) => content_start + close,
            None => body.len(),
        };
        if let Some(found) = first_object(&body[content_start..content_end], content_start) {
            return Some(found);
        }
        from = (content_end + 3).min(body.len());
        if content_end >= body.len() {
            return None;
        }
    }
    None
}

fn first_object(s: &str, offset: usize) -> Option<ExtractedJson> {
    for (i, _) in s.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&s[i..]).into_iter::<Value>();
        if let Some(Ok(value @ Value::Object(_))) = stream.next() {
            let end = i + stream.byte_offset();
            return Some(ExtractedJson {
                value,
                start: offset + i,
                end: offset + end,
            });
        }
    }
    None
}

/// Why free text gave no valid answer.
#[derive(Debug, Clone, PartialEq)]
pub enum FreeParseError {
    /// No complete JSON object anywhere in the text.
    NoJson,
    /// An object was found but does not match the schema.
    Invalid {
        value: Value,
        errors: ValidationErrors,
    },
}

impl fmt::Display for FreeParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeParseError::NoJson => write!(f, "no complete JSON object found in the output"),
            FreeParseError::Invalid { errors, .. } => {
                write!(f, "the JSON object does not match the schema: {errors}")
            }
        }
    }
}

impl std::error::Error for FreeParseError {}

/// Extracts the first JSON object of `text` and validates it against `schema`.
pub fn parse_free(text: &str, schema: &Schema) -> Result<Value, FreeParseError> {
    let found = extract_json_object(text).ok_or(FreeParseError::NoJson)?;
    match schema.validate(&found.value) {
        Ok(()) => Ok(found.value),
        Err(errors) => Err(FreeParseError::Invalid {
            value: found.value,
            errors,
        }),
    }
}
