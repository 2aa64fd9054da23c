//! The JSON Schema subset that structured output supports, compiled once into a [`Schema`] tree.
//!
//! One compiled tree serves both modes, so they can never disagree:
//! - constrained decoding turns it into a grammar ([`Schema::to_lark`], used by `JsonConstraint`);
//! - the free (parse + retry) mode validates a parsed value against it ([`Schema::validate`]).
//!
//! Supported (anything else is rejected with an error naming the keyword and the schema path):
//! - `type`: `object`, `array`, `string`, `number`, `integer`, `boolean`, `null`, or a list of them
//!   (`["string", "null"]` is a union);
//! - objects: `properties` (generated in the order written), `required`, `additionalProperties`
//!   absent or `false` (objects are always closed);
//! - arrays: `items` (one schema), `minItems`, `maxItems`;
//! - numbers: `exclusiveMinimum: 0` (positive numbers; no other bounds);
//! - strings: `minLength`, `maxLength` (in Unicode scalar values), `enum` / `const` of strings
//!   (`null` inside `enum` allows null);
//! - `anyOf` (as Pydantic writes `Optional[...]`), local `$ref` to `#/$defs/NAME` or
//!   `#/definitions/NAME` (not recursive);
//! - annotations that change nothing: `title`, `description`, `default`, `examples`, `$schema`,
//!   `$id`, `$comment`, and `$defs`/`definitions` themselves.

use std::fmt;

use anyhow::{bail, Context};
use serde_json::Value;

/// A compiled schema node.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    Object(ObjectSchema),
    Array {
        items: Box<Schema>,
        min_items: usize,
        max_items: Option<usize>,
    },
    String {
        min_length: usize,
        max_length: Option<usize>,
    },
    /// A string that must be one of these values.
    Enum(Vec<String>),
    Number,
    /// A number above 0 (`exclusiveMinimum: 0`).
    PositiveNumber,
    Integer,
    Boolean,
    Null,
    /// Any one of these (never nested: unions are flattened).
    AnyOf(Vec<Schema>),
}

/// A closed object: only the listed properties, in this order when generated.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectSchema {
    pub properties: Vec<Property>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    pub name: String,
    pub schema: Schema,
    pub required: bool,
}

const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "definitions",
];

impl Schema {
    /// Compiles a JSON Schema document (the subset in the module docs).
    pub fn compile(schema: &Value) -> anyhow::Result<Schema> {
        let mut compiler = Compiler {
            root: schema,
            ref_stack: Vec::new(),
        };
        compiler.node(schema, "#")
    }

    /// True when the JSON text of every value of this schema ends with its own closing
    /// character (`}`, `]`, `"`), so nothing can follow it once it is complete.
    pub fn is_self_delimiting(&self) -> bool {
        match self {
            Schema::Object(_) | Schema::Array { .. } | Schema::String { .. } | Schema::Enum(_) => {
                true
            }
            Schema::Number
            | Schema::PositiveNumber
            | Schema::Integer
            | Schema::Boolean
            | Schema::Null => false,
            Schema::AnyOf(alts) => alts.iter().all(Schema::is_self_delimiting),
        }
    }

    /// Human description used in validation messages: `number or null`, `one of "A", "B"`.
    pub fn describe(&self) -> String {
        match self {
            Schema::Object(_) => "object".into(),
            Schema::Array { .. } => "array".into(),
            Schema::String { .. } => "string".into(),
            Schema::Enum(values) => {
                let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
                format!("one of {}", quoted.join(", "))
            }
            Schema::Number => "number".into(),
            Schema::PositiveNumber => "positive number".into(),
            Schema::Integer => "integer".into(),
            Schema::Boolean => "boolean".into(),
            Schema::Null => "null".into(),
            Schema::AnyOf(alts) => {
                let parts: Vec<String> = alts.iter().map(Schema::describe).collect();
                parts.join(" or ")
            }
        }
    }
}

struct Compiler<'a> {
    root: &'a Value,
    ref_stack: Vec<String>,
}

impl<'a> Compiler<'a> {
    fn node(&mut self, v: &'a Value, path: &str) -> anyhow::Result<Schema> {
        let obj = match v {
            Value::Object(o) => o,
            Value::Bool(_) => bail!(
                "schema {path}: boolean schemas are not supported; write an object with `type`"
            ),
            _ => bail!("schema {path}: expected a JSON object, found {v}"),
        };
        // Reject what we do not implement before interpreting anything.
        const KNOWN: &[&str] = &[
            "type",
            "properties",
            "required",
            "additionalProperties",
            "items",
            "minItems",
            "maxItems",
            "minLength",
            "maxLength",
            "enum",
            "const",
            "anyOf",
            "$ref",
            "exclusiveMinimum",
        ];
        for key in obj.keys() {
            if !KNOWN.contains(&key.as_str()) && !ANNOTATIONS.contains(&key.as_str()) {
                bail!("schema {path}: unsupported keyword `{key}`");
            }
        }

        if let Some(r) = obj.get("$ref") {
            if let Some(other) = obj
                .keys()
                .find(|k| *k != "$ref" && !ANNOTATIONS.contains(&k.as_str()))
            {
                bail!("schema {path}: `$ref` combined with `{other}` is not supported");
            }
            return self.reference(r, path);
        }

        if let Some(alts) = obj.get("anyOf") {
            if let Some(other) = obj
                .keys()
                .find(|k| *k != "anyOf" && !ANNOTATIONS.contains(&k.as_str()))
            {
                bail!("schema {path}: `anyOf` combined with `{other}` is not supported");
            }
            let alts = alts
                .as_array()
                .with_context(|| format!("schema {path}: `anyOf` must be an array"))?;
            if alts.is_empty() {
                bail!("schema {path}: `anyOf` must not be empty");
            }
            let mut out = Vec::new();
            for (i, a) in alts.iter().enumerate() {
                out.push(self.node(a, &format!("{path}/anyOf/{i}"))?);
            }
            return Ok(union(out));
        }

        let types: Option<Vec<&str>> = match obj.get("type") {
            None => None,
            Some(Value::String(s)) => Some(vec![s.as_str()]),
            Some(Value::Array(list)) => {
                let mut out = Vec::new();
                for t in list {
                    out.push(t.as_str().with_context(|| {
                        format!("schema {path}: `type` list entries must be strings, found {t}")
                    })?);
                }
                if out.is_empty() {
                    bail!("schema {path}: `type` list must not be empty");
                }
                Some(out)
            }
            Some(other) => bail!("schema {path}: `type` must be a string or a list, found {other}"),
        };

        let enum_values = match (obj.get("enum"), obj.get("const")) {
            (Some(_), Some(_)) => bail!("schema {path}: both `enum` and `const` given"),
            (Some(Value::Array(values)), None) => Some(values.clone()),
            (Some(other), None) => bail!("schema {path}: `enum` must be an array, found {other}"),
            (None, Some(c)) => Some(vec![c.clone()]),
            (None, None) => None,
        };
        if let Some(values) = enum_values {
            return self.enumeration(obj, &values, types.as_deref(), path);
        }

        let Some(types) = types else {
            bail!("schema {path}: no `type` (nor `enum`, `const`, `anyOf`, `$ref`): unconstrained values are not supported");
        };
        let mut alts = Vec::new();
        for t in &types {
            alts.push(self.typed(obj, t, path)?);
        }
        // Keywords that belong to a type that is not listed are mistakes worth reporting.
        let owner = |k: &str| match k {
            "properties" | "required" | "additionalProperties" => Some("object"),
            "items" | "minItems" | "maxItems" => Some("array"),
            "minLength" | "maxLength" => Some("string"),
            "exclusiveMinimum" => Some("number"),
            _ => None,
        };
        for key in obj.keys() {
            if let Some(t) = owner(key) {
                if !types.contains(&t) {
                    bail!("schema {path}: keyword `{key}` applies to type {t}, which `type` does not list");
                }
            }
        }
        Ok(union(alts))
    }

    fn reference(&mut self, r: &Value, path: &str) -> anyhow::Result<Schema> {
        let r = r
            .as_str()
            .with_context(|| format!("schema {path}: `$ref` must be a string"))?;
        let (section, name) = if let Some(n) = r.strip_prefix("#/$defs/") {
            ("$defs", n)
        } else if let Some(n) = r.strip_prefix("#/definitions/") {
            ("definitions", n)
        } else {
            bail!("schema {path}: `$ref` {r:?} is not supported (only #/$defs/NAME and #/definitions/NAME)");
        };
        if self.ref_stack.iter().any(|x| x == r) {
            bail!("schema {path}: recursive `$ref` {r:?} is not supported");
        }
        let target = self
            .root
            .get(section)
            .and_then(|d| d.get(name))
            .with_context(|| format!("schema {path}: `$ref` {r:?} names no definition"))?;
        self.ref_stack.push(r.to_string());
        let out = self.node(target, r);
        self.ref_stack.pop();
        out
    }

    fn enumeration(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        values: &[Value],
        types: Option<&[&str]>,
        path: &str,
    ) -> anyhow::Result<Schema> {
        for key in obj.keys() {
            if !["type", "enum", "const"].contains(&key.as_str())
                && !ANNOTATIONS.contains(&key.as_str())
            {
                bail!("schema {path}: keyword `{key}` next to `enum`/`const` is not supported");
            }
        }
        if let Some(types) = types {
            if let Some(t) = types.iter().find(|t| **t != "string" && **t != "null") {
                bail!("schema {path}: `enum`/`const` is supported for strings (and null) only, not type {t}");
            }
        }
        let allows = |t: &str| types.is_none_or(|ts| ts.contains(&t));
        let mut strings = Vec::new();
        let mut null = false;
        for v in values {
            match v {
                Value::String(s) if allows("string") => {
                    if !strings.contains(s) {
                        strings.push(s.clone())
                    }
                }
                Value::Null if allows("null") => null = true,
                Value::String(_) | Value::Null => {}
                other => bail!(
                    "schema {path}: `enum`/`const` value {other} is not supported (strings and null only)"
                ),
            }
        }
        let mut alts = Vec::new();
        if !strings.is_empty() {
            alts.push(Schema::Enum(strings));
        }
        if null {
            alts.push(Schema::Null);
        }
        if alts.is_empty() {
            bail!("schema {path}: `enum`/`const` allows no value");
        }
        Ok(union(alts))
    }

    fn typed(
        &mut self,
        obj: &'a serde_json::Map<String, Value>,
        t: &str,
        path: &str,
    ) -> anyhow::Result<Schema> {
        Ok(match t {
            "object" => {
                match obj.get("additionalProperties") {
                    None | Some(Value::Bool(false)) => {}
                    Some(other) => bail!(
                        "schema {path}: `additionalProperties` {other} is not supported (objects are closed: omit it or write false)"
                    ),
                }
                let mut properties = Vec::new();
                if let Some(props) = obj.get("properties") {
                    let props = props.as_object().with_context(|| {
                        format!("schema {path}: `properties` must be an object")
                    })?;
                    for (name, sub) in props {
                        let schema = self.node(sub, &format!("{path}/properties/{name}"))?;
                        properties.push(Property {
                            name: name.clone(),
                            schema,
                            required: false,
                        });
                    }
                }
                if let Some(req) = obj.get("required") {
                    let req = req
                        .as_array()
                        .with_context(|| format!("schema {path}: `required` must be an array"))?;
                    for r in req {
                        let r = r.as_str().with_context(|| {
                            format!("schema {path}: `required` entries must be strings, found {r}")
                        })?;
                        let prop = properties
                            .iter_mut()
                            .find(|p| p.name == r)
                            .with_context(|| {
                                format!("schema {path}: `required` names {r:?}, which is not in `properties`")
                            })?;
                        prop.required = true;
                    }
                }
                Schema::Object(ObjectSchema { properties })
            }
            "array" => {
                let items = obj
                    .get("items")
                    .with_context(|| format!("schema {path}: array without `items`"))?;
                let items = self.node(items, &format!("{path}/items"))?;
                let min_items = count(obj, "minItems", path)?.unwrap_or(0);
                let max_items = count(obj, "maxItems", path)?;
                if let Some(max) = max_items {
                    if max < min_items {
                        bail!("schema {path}: `maxItems` {max} is below `minItems` {min_items}");
                    }
                }
                Schema::Array {
                    items: Box::new(items),
                    min_items,
                    max_items,
                }
            }
            "string" => {
                let min_length = count(obj, "minLength", path)?.unwrap_or(0);
                let max_length = count(obj, "maxLength", path)?;
                if let Some(max) = max_length {
                    if max < min_length {
                        bail!("schema {path}: `maxLength` {max} is below `minLength` {min_length}");
                    }
                }
                Schema::String {
                    min_length,
                    max_length,
                }
            }
            "number" => match obj.get("exclusiveMinimum") {
                None => Schema::Number,
                Some(m) if m.as_f64() == Some(0.0) => Schema::PositiveNumber,
                Some(m) => bail!(
                    "schema {path}: `exclusiveMinimum` {m} is not supported (only 0, for positive numbers)"
                ),
            },
            "integer" => Schema::Integer,
            "boolean" => Schema::Boolean,
            "null" => Schema::Null,
            other => bail!("schema {path}: unknown `type` {other:?}"),
        })
    }
}

fn count(
    obj: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
) -> anyhow::Result<Option<usize>> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(Some(usize::try_from(n).with_context(|| {
                format!("schema {path}: `{key}` {n} is too large")
            })?)),
            None => bail!("schema {path}: `{key}` must be a non-negative integer, found {v}"),
        },
    }
}

/// Flattens nested unions and drops duplicates; a single alternative stands alone.
fn union(alts: Vec<Schema>) -> Schema {
    let mut flat: Vec<Schema> = Vec::new();
    for a in alts {
        match a {
            Schema::AnyOf(inner) => {
                for i in inner {
                    if !flat.contains(&i) {
                        flat.push(i);
                    }
                }
            }
            other => {
                if !flat.contains(&other) {
                    flat.push(other);
                }
            }
        }
    }
    if flat.len() == 1 {
        flat.pop().expect("one element")
    } else {
        Schema::AnyOf(flat)
    }
}

// ---------------------------------------------------------------------------------------------
// Validation (free mode)
// ---------------------------------------------------------------------------------------------

/// One reason a value does not match; `path` is like `recommendations[2].amount` (empty = root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "(root): {}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every mismatch found, in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|e| e.to_string()).collect();
        write!(f, "{}", parts.join("; "))
    }
}

impl std::error::Error for ValidationErrors {}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(n: &serde_json::Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

impl Schema {
    /// Checks `value` against this schema; all mismatches are reported with their paths.
    pub fn validate(&self, value: &Value) -> Result<(), ValidationErrors> {
        let mut errors = Vec::new();
        self.check(value, &mut String::new(), &mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(errors))
        }
    }

    /// Does `value` match, without collecting messages.
    pub fn matches(&self, value: &Value) -> bool {
        let mut errors = Vec::new();
        self.check(value, &mut String::new(), &mut errors);
        errors.is_empty()
    }

    fn check(&self, value: &Value, path: &mut String, errors: &mut Vec<ValidationError>) {
        let mut fail = |message: String| {
            errors.push(ValidationError {
                path: path.clone(),
                message,
            })
        };
        let expected = |s: &Schema| format!("expected {}, found {}", s.describe(), kind_of(value));
        match (self, value) {
            (Schema::AnyOf(alts), _) => {
                if alts.iter().any(|a| a.matches(value)) {
                    return;
                }
                // When exactly one alternative has the value's kind, its errors say more.
                let same_kind: Vec<&Schema> = alts
                    .iter()
                    .filter(|a| a.accepts_kind(kind_of(value)))
                    .collect();
                if same_kind.len() == 1 && matches!(value, Value::Object(_) | Value::Array(_)) {
                    same_kind[0].check(value, path, errors);
                } else {
                    fail(expected(self));
                }
            }
            (Schema::Object(o), Value::Object(map)) => {
                for key in map.keys() {
                    if !o.properties.iter().any(|p| &p.name == key) {
                        let mut p = path.clone();
                        push_key(&mut p, key);
                        errors.push(ValidationError {
                            path: p,
                            message: "unexpected property".into(),
                        });
                    }
                }
                for prop in &o.properties {
                    let len = path.len();
                    push_key(path, &prop.name);
                    match map.get(&prop.name) {
                        Some(v) => prop.schema.check(v, path, errors),
                        None if prop.required => errors.push(ValidationError {
                            path: path.clone(),
                            message: format!("missing (expected {})", prop.schema.describe()),
                        }),
                        None => {}
                    }
                    path.truncate(len);
                }
            }
            (
                Schema::Array {
                    items,
                    min_items,
                    max_items,
                },
                Value::Array(list),
            ) => {
                if list.len() < *min_items {
                    fail(format!(
                        "expected at least {min_items} items, found {}",
                        list.len()
                    ));
                }
                if let Some(max) = max_items {
                    if list.len() > *max {
                        fail(format!(
                            "expected at most {max} items, found {}",
                            list.len()
                        ));
                    }
                }
                for (i, item) in list.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    items.check(item, path, errors);
                    path.truncate(len);
                }
            }
            (
                Schema::String {
                    min_length,
                    max_length,
                },
                Value::String(s),
            ) => {
                let n = s.chars().count();
                if n < *min_length {
                    fail(format!(
                        "expected a string of at least {min_length} characters, found {n}"
                    ));
                } else if max_length.is_some_and(|m| n > m) {
                    fail(format!(
                        "expected a string of at most {} characters, found {n}",
                        max_length.unwrap_or_default()
                    ));
                }
            }
            (Schema::Enum(values), Value::String(s)) => {
                if !values.contains(s) {
                    fail(format!("expected {}, found {s:?}", self.describe()));
                }
            }
            (Schema::Number, Value::Number(_)) => {}
            (Schema::PositiveNumber, Value::Number(n)) => {
                if !n.as_f64().is_some_and(|x| x > 0.0) {
                    fail(format!("expected a positive number, found {n}"));
                }
            }
            (Schema::Integer, Value::Number(n)) => {
                if !is_integer(n) {
                    fail(format!("expected integer, found {n}"));
                }
            }
            (Schema::Boolean, Value::Bool(_)) | (Schema::Null, Value::Null) => {}
            _ => fail(expected(self)),
        }
    }

    fn accepts_kind(&self, kind: &str) -> bool {
        match self {
            Schema::Object(_) => kind == "object",
            Schema::Array { .. } => kind == "array",
            Schema::String { .. } | Schema::Enum(_) => kind == "string",
            Schema::Number | Schema::PositiveNumber | Schema::Integer => kind == "number",
            Schema::Boolean => kind == "boolean",
            Schema::Null => kind == "null",
            Schema::AnyOf(alts) => alts.iter().any(|a| a.accepts_kind(kind)),
        }
    }
}

fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push_str(&format!("[{key:?}]"));
    }
}

// ---------------------------------------------------------------------------------------------
// Grammar (constrained mode)
// ---------------------------------------------------------------------------------------------

/// How constrained JSON is laid out. Separators are fixed so that generation cannot wander
/// off into endless whitespace; only a short run of whitespace is allowed before the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonStyle {
    /// Between array items and between object members (default `", "`, as Python's json.dumps).
    pub item_separator: String,
    /// Between a key and its value (default `": "`).
    pub key_separator: String,
    /// Most whitespace characters allowed before the value (e.g. `\n\n` after `</think>`).
    pub max_leading_whitespace: usize,
    /// Upper bound for strings that have no `maxLength` (None = unbounded).
    pub default_max_string_len: Option<usize>,
}

impl Default for JsonStyle {
    fn default() -> Self {
        JsonStyle {
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            max_leading_whitespace: 4,
            default_max_string_len: None,
        }
    }
}

/// Regex (for a Lark terminal) matching exactly `s`: every non-alphanumeric ASCII byte is
/// written as `\xHH`, which also keeps `/` from ending the terminal.
fn regex_literal(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if c.is_ascii() {
            out.push_str(&format!("\\x{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn json_literal(s: &str) -> String {
    // A JSON-encoded string never fails to serialise.
    serde_json::to_string(s).unwrap_or_default()
}

/// One JSON string character: any scalar except `"`, `\` and controls, or an escape. `\u`
/// escapes exclude surrogates so that every generated string decodes.
const STRING_CHAR: &str = r"(?:[^\x22\x5C\x00-\x1F]|\x5C[\x22\x5C\x2Fbfnrt]|\x5Cu(?:[0-9A-Ca-c][0-9A-Fa-f]{3}|[Dd][0-7][0-9A-Fa-f]{2}|[EFef][0-9A-Fa-f]{3}))";
/// Numbers: at most 16 integer digits, 16 fraction digits and a two-digit exponent, so that
/// every generated number is finite as an f64.
const NUMBER: &str = r"-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,2})?";
/// [`NUMBER`] above 0: no sign, and not all digits zero (an exponent only scales it).
const POSITIVE_NUMBER: &str =
    r"(?:[1-9][0-9]{0,15}(?:\.[0-9]{1,16})?|0\.[0-9]{0,15}[1-9])(?:[eE][+-]?[0-9]{1,2})?";
const INTEGER: &str = r"-?(?:0|[1-9][0-9]{0,15})";

struct LarkWriter<'s> {
    style: &'s JsonStyle,
    rules: Vec<String>,
}

impl Schema {
    /// The Lark grammar (llguidance dialect) whose language is the compact JSON text of the
    /// values of this schema, laid out by `style`.
    pub fn to_lark(&self, style: &JsonStyle) -> String {
        let mut w = LarkWriter {
            style,
            rules: Vec::new(),
        };
        let root = w.node(self);
        let mut out = String::new();
        if style.max_leading_whitespace > 0 {
            out.push_str(&format!(
                "start: LEADING_WS? {root}\nLEADING_WS: /[\\x20\\t\\r\\n]{{1,{}}}/\n",
                style.max_leading_whitespace
            ));
        } else {
            out.push_str(&format!("start: {root}\n"));
        }
        for r in &w.rules {
            out.push_str(r);
            out.push('\n');
        }
        out
    }
}

impl LarkWriter<'_> {
    fn new_rule(&mut self, body: String) -> String {
        let name = format!("n{}", self.rules.len());
        self.rules.push(String::new());
        let idx = self.rules.len() - 1;
        self.rules[idx] = format!("{name}: {body}");
        name
    }

    fn lit(s: &str) -> String {
        format!("/{}/", regex_literal(s))
    }

    fn node(&mut self, s: &Schema) -> String {
        match s {
            Schema::Null => Self::lit("null"),
            Schema::Boolean => format!("({} | {})", Self::lit("true"), Self::lit("false")),
            Schema::Number => format!("/{NUMBER}/"),
            Schema::PositiveNumber => format!("/{POSITIVE_NUMBER}/"),
            Schema::Integer => format!("/{INTEGER}/"),
            Schema::Enum(values) => {
                let alts: Vec<String> =
                    values.iter().map(|v| Self::lit(&json_literal(v))).collect();
                format!("({})", alts.join(" | "))
            }
            Schema::String {
                min_length,
                max_length,
            } => {
                let max = max_length.or(self.style.default_max_string_len);
                let rep = match max {
                    Some(m) => format!("{{{},{}}}", min_length, m.max(*min_length)),
                    None if *min_length == 0 => "*".to_string(),
                    None => format!("{{{},}}", min_length),
                };
                format!("/\\x22{STRING_CHAR}{rep}\\x22/")
            }
            Schema::AnyOf(alts) => {
                let parts: Vec<String> = alts.iter().map(|a| self.node(a)).collect();
                format!("({})", parts.join(" | "))
            }
            Schema::Array {
                items,
                min_items,
                max_items,
            } => {
                let item = self.node(items);
                let item_rule = self.new_rule(item);
                let sep = Self::lit(&self.style.item_separator);
                let open = Self::lit("[");
                let close = Self::lit("]");
                // Items after the first: each preceded by the separator.
                let more_min = min_items.saturating_sub(1);
                let more = match max_items {
                    Some(0) => None,
                    Some(max) => Some(format!("({sep} {item_rule}){{{more_min},{}}}", max - 1)),
                    None => Some(format!("({sep} {item_rule}){{{more_min},}}")),
                };
                let body = match more {
                    None => format!("{open} {close}"),
                    Some(more) if *min_items == 0 => {
                        format!("{open} ({item_rule} {more})? {close}")
                    }
                    Some(more) => format!("{open} {item_rule} {more} {close}"),
                };
                self.new_rule(body)
            }
            Schema::Object(o) => self.object(o),
        }
    }

    /// Properties in order, optional ones skippable. Two chains of rules: `first_i` (nothing
    /// written yet, so no separator before the next member) and `after_i` (something written).
    fn object(&mut self, o: &ObjectSchema) -> String {
        let open = Self::lit("{");
        let close = Self::lit("}");
        let sep = Self::lit(&self.style.item_separator);
        let members: Vec<(String, bool)> = o
            .properties
            .iter()
            .map(|p| {
                let value = self.node(&p.schema);
                let member = format!(
                    "{} {} {}",
                    Self::lit(&json_literal(&p.name)),
                    Self::lit(&self.style.key_separator),
                    value
                );
                (self.new_rule(member), p.required)
            })
            .collect();
        // Build from the end: after_{n} and first_{n} are empty.
        let mut after: Option<String> = None; // rule for "rest, something already written"
        let mut first: Option<String> = None; // rule for "rest, nothing written yet"
        for (member, required) in members.iter().rev() {
            let after_tail = after.clone().unwrap_or_default();
            let first_tail = first.clone();
            let new_after = if *required {
                format!("{sep} {member} {after_tail}")
            } else {
                match &after {
                    Some(a) => format!("({sep} {member})? {a}"),
                    None => format!("({sep} {member})?"),
                }
            };
            let new_first = if *required {
                format!("{member} {after_tail}")
            } else {
                match first_tail {
                    Some(f) => format!("{member} {after_tail} | {f}"),
                    // The last member optional: written, or nothing at all.
                    None => format!("({member})?"),
                }
            };
            let a = self.new_rule(new_after.trim().to_string());
            let f = self.new_rule(new_first.trim().to_string());
            after = Some(a);
            first = Some(f);
        }
        match first {
            None => self.new_rule(format!("{open} {close}")),
            Some(f) => self.new_rule(format!("{open} {f} {close}")),
        }
    }
}
