//! Tests of structured output: schema subset, masks, random walks on a hand-built vocab and on
//! the real Qwen2 vocab (../shared/data/tokenizers/ggml-vocab-qwen2.gguf), free-mode parsing.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::*;

// ------------------------------------------------------------------ schemas of the Energy Society

fn action_enum() -> Value {
    json!({"type": "string", "enum": ["ATTEMPT_JOB", "IDLE", "DONATE", "SABOTAGE_JOB"]})
}

/// AgentDecision as Pydantic writes it (anyOf for Optional, defaults, titles).
fn agent_decision() -> Value {
    json!({
        "title": "AgentDecision",
        "type": "object",
        "properties": {
            "reasoning": {"title": "Reasoning", "type": "string"},
            "action": {"$ref": "#/$defs/ActionType"},
            "job_id": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
            "target_agent": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
            "amount": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null}
        },
        "required": ["reasoning", "action", "job_id", "target_agent", "amount"],
        "additionalProperties": false,
        "$defs": {"ActionType": action_enum()}
    })
}

fn agent_vote() -> Value {
    json!({
        "type": "object",
        "properties": {
            "voter_id": {"type": "string"},
            "overall_reasoning": {"type": "string"},
            "recommendations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "agent_id": {"type": "string"},
                        "recommended_action": action_enum(),
                        "job_id": {"type": ["string", "null"]},
                        "target_agent": {"type": ["string", "null"]},
                        "amount": {"type": ["number", "null"]}
                    },
                    "required": ["agent_id", "recommended_action", "job_id", "target_agent", "amount"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["voter_id", "overall_reasoning", "recommendations"],
        "additionalProperties": false
    })
}

fn agent_job_solution() -> Value {
    json!({
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": false
    })
}

/// Exercises the rest of the subset: optional members, integers, booleans, bounds.
fn mixed_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "boolean"},
            "c": {"type": "string", "minLength": 1, "maxLength": 3},
            "d": {"type": "array", "items": {"type": ["integer", "null"]}, "minItems": 1, "maxItems": 3},
            "e": {"enum": ["x", null]}
        },
        "required": ["b"]
    })
}

// ------------------------------------------------------------------ vocabularies

/// Every single byte, some multi-byte tokens that cut across JSON structure, and specials.
fn hand_vocab() -> Arc<TokenVocab> {
    static V: OnceLock<Arc<TokenVocab>> = OnceLock::new();
    V.get_or_init(|| {
        let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        for t in [
            "{\"",
            "\": \"",
            "\", \"",
            "\"}",
            "\": ",
            ", \"",
            "null",
            "true",
            "false",
            "ATTEMPT",
            "_JOB",
            "IDLE",
            "DONATE",
            "\"IDLE\"",
            "agent",
            "_1",
            "job",
            " the",
            "ing",
            "}]}",
            "}, {\"",
            "\"]",
            "[{\"",
            "\": [",
            "1.5",
            "-0",
            "e+",
            "\\n",
            "\\\"",
            "\\u00e9",
            "é",
            "😀",
            "  ",
            "\n\n",
            "reasoning",
            "amount",
            "\": null",
            ", ",
            "\"\"",
            "{}",
            "[]",
        ] {
            toks.push(t.as_bytes().to_vec());
        }
        let eos = toks.len() as u32;
        toks.push(b"<|im_end|>".to_vec());
        let open = toks.len() as u32;
        toks.push(b"<think>".to_vec());
        let close = toks.len() as u32;
        toks.push(b"</think>".to_vec());
        let eot = toks.len() as u32;
        toks.push(b"<|endoftext|>".to_vec());
        Arc::new(TokenVocab::new(toks, vec![eos, eot], vec![open, close]).expect("hand vocab"))
    })
    .clone()
}

fn hand_id(text: &str) -> u32 {
    let v = hand_vocab();
    (0..v.len() as u32)
        .find(|&i| v.token_bytes(i) == text.as_bytes())
        .unwrap_or_else(|| panic!("no token {text:?}"))
}

/// GPT-2 byte-level encoding: the printable stand-in character of each byte, inverted.
fn gpt2_unicode_to_byte() -> std::collections::HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.iter()
        .zip(cs.iter())
        .map(|(&b, &c)| (char::from_u32(c).expect("valid char"), b as u8))
        .collect()
}

struct RealVocab {
    vocab: Arc<TokenVocab>,
    open_think: Option<u32>,
    close_think: Option<u32>,
}

/// The Qwen2 vocab (151k tokens) read from the shared GGUF file.
fn qwen_vocab() -> &'static RealVocab {
    static V: OnceLock<RealVocab> = OnceLock::new();
    V.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/tokenizers/ggml-vocab-qwen2.gguf");
        let mut f = std::fs::File::open(&path).expect("open qwen2 vocab gguf");
        let content = candle_core::quantized::gguf_file::Content::read(&mut f).expect("read gguf");
        let md = &content.metadata;
        let tokens = md["tokenizer.ggml.tokens"].to_vec().expect("tokens");
        let types = md["tokenizer.ggml.token_type"].to_vec().expect("types");
        let eos = md["tokenizer.ggml.eos_token_id"].to_u32().expect("eos");
        let map = gpt2_unicode_to_byte();
        let mut bytes = Vec::new();
        let mut special = Vec::new();
        let (mut open, mut close) = (None, None);
        for (id, (t, ty)) in tokens.iter().zip(types.iter()).enumerate() {
            let s = t.to_string().expect("token string");
            let ty = ty.to_i32().expect("token type");
            // 1 = normal (GPT-2 byte-level text); 3 = control, 5 = unused (special);
            // 4 = user-defined (added tokens, written as plain text).
            if ty == 1 {
                bytes.push(
                    s.chars()
                        .map(|c| *map.get(&c).unwrap_or_else(|| panic!("char {c:?}")))
                        .collect(),
                );
            } else {
                bytes.push(s.as_bytes().to_vec());
                if ty == 3 || ty == 5 {
                    special.push(id as u32);
                }
            }
            // This vocab has no <think> tokens; two control tokens stand in for them.
            if s == "<|im_start|>" {
                close = Some(id as u32);
            }
            if s == "<|fim_prefix|>" {
                open = Some(id as u32);
            }
        }
        let mut eos_ids = vec![eos];
        if let Some(eot) = tokens
            .iter()
            .position(|t| t.to_string().map(|s| s == "<|endoftext|>").unwrap_or(false))
        {
            if eot as u32 != eos {
                eos_ids.push(eot as u32);
            }
        }
        RealVocab {
            vocab: Arc::new(TokenVocab::new(bytes, eos_ids, special).expect("qwen vocab")),
            open_think: open,
            close_think: close,
        }
    })
}

// ------------------------------------------------------------------ random walks

/// Samples uniformly among allowed tokens until EOS; returns the generated JSON text.
fn random_walk(c: &mut JsonConstraint, rng: &mut ChaCha8Rng, max_steps: usize) -> String {
    for _ in 0..max_steps {
        let mask = c.allowed_tokens().expect("mask");
        let ids: Vec<u32> = mask.allowed_ids().collect();
        assert!(
            !ids.is_empty(),
            "empty mask after {:?} (a dead end)",
            c.text()
        );
        let tok = ids[rng.gen_range(0..ids.len())];
        c.advance(tok).expect("allowed token must be accepted");
        if c.vocab().is_eos(tok) {
            assert!(c.is_finished());
            return c.text();
        }
    }
    panic!("no EOS within {max_steps} steps: {:?}", c.text());
}

fn assert_walks(schema: &Value, vocab: Arc<TokenVocab>, seeds: u64, style: &JsonStyle) {
    let mut c = JsonConstraint::with_style(schema, vocab, style).expect("compile");
    let compiled = Schema::compile(schema).expect("compile");
    let mut saw_distinct = std::collections::HashSet::new();
    for seed in 0..seeds {
        c.reset();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let text = random_walk(&mut c, &mut rng, 3000);
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("seed {seed}: output does not parse ({e}): {text:?}"));
        if let Err(e) = compiled.validate(&value) {
            panic!("seed {seed}: output does not validate ({e}): {text}");
        }
        saw_distinct.insert(text);
    }
    // The walks really explore: different seeds give different documents.
    assert!(saw_distinct.len() as u64 > seeds / 2, "{saw_distinct:?}");
}

fn short_strings() -> JsonStyle {
    JsonStyle {
        default_max_string_len: Some(12),
        ..JsonStyle::default()
    }
}

#[test]
fn constrained_output_always_parses_hand_vocab() {
    for schema in [
        agent_vote(),
        agent_decision(),
        agent_job_solution(),
        mixed_schema(),
    ] {
        assert_walks(&schema, hand_vocab(), 60, &short_strings());
    }
}

#[test]
fn constrained_output_always_parses_qwen2_vocab() {
    let v = qwen_vocab();
    assert!(v.vocab.len() > 150_000, "{}", v.vocab.len());
    for schema in [agent_vote(), agent_decision(), agent_job_solution()] {
        assert_walks(&schema, v.vocab.clone(), 12, &short_strings());
    }
    assert_walks(&mixed_schema(), v.vocab.clone(), 12, &JsonStyle::default());
}

#[test]
fn think_then_json_on_qwen2_vocab() {
    let v = qwen_vocab();
    let close = v.close_think.expect("qwen2 vocab has <|im_start|>");
    let json = JsonConstraint::with_style(&agent_decision(), v.vocab.clone(), &short_strings())
        .expect("compile");
    let mut t = ThinkThenJson::new(json, close, Some(5)).expect("wrap");
    if let Some(open) = v.open_think {
        t = t.with_open_think(open);
    }
    let compiled = Schema::compile(&agent_decision()).expect("compile");
    for seed in 0..5u64 {
        t.reset();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut steps = 0;
        loop {
            let mask = t.allowed_tokens().expect("mask");
            if t.phase() == Phase::Thinking {
                for &e in v.vocab.eos_ids() {
                    assert!(!mask.is_allowed(e), "EOS allowed while thinking");
                }
                if t.thinking_tokens() == 5 {
                    // Budget spent: the close token is forced.
                    assert_eq!(mask.allowed_ids().collect::<Vec<_>>(), vec![close]);
                }
            }
            let ids: Vec<u32> = mask.allowed_ids().collect();
            let tok = ids[rng.gen_range(0..ids.len())];
            t.advance(tok).expect("advance");
            steps += 1;
            if v.vocab.is_eos(tok) {
                break;
            }
            assert!(steps < 3000);
        }
        assert!(t.thinking_tokens() <= 5);
        let value: Value = serde_json::from_str(&t.json().text()).expect("parses");
        compiled.validate(&value).expect("validates");
    }
}

// ------------------------------------------------------------------ masks

/// Greedy longest-match tokenisation with the hand vocab (specials excluded).
fn hand_tokenize(text: &str) -> Vec<u32> {
    let v = hand_vocab();
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let best = (0..v.len() as u32)
            .filter(|&id| !v.is_special(id))
            .filter(|&id| {
                let t = v.token_bytes(id);
                !t.is_empty() && b[i..].starts_with(t)
            })
            .max_by_key(|&id| v.token_bytes(id).len())
            .expect("single bytes cover everything");
        out.push(best);
        i += v.token_bytes(best).len();
    }
    out
}

/// Feeds `text` token by token; every token must be allowed, EOS must be allowed exactly at
/// the end.
fn accepts(schema: &Value, text: &str) -> bool {
    let vocab = hand_vocab();
    let mut c = JsonConstraint::new(schema, vocab.clone()).expect("compile");
    for tok in hand_tokenize(text) {
        let mask = c.allowed_tokens().expect("mask");
        for &e in vocab.eos_ids() {
            assert_eq!(mask.is_allowed(e), c.is_complete());
        }
        if !mask.is_allowed(tok) {
            assert!(
                c.advance(tok).is_err(),
                "advance must refuse a masked token"
            );
            return false;
        }
        c.advance(tok).expect("allowed");
    }
    let mask = c.allowed_tokens().expect("mask");
    let eos = vocab.eos_ids()[0];
    c.is_complete() && mask.is_allowed(eos) && c.advance(eos).is_ok()
}

#[test]
fn valid_documents_are_accepted_token_by_token() {
    let d = agent_decision();
    assert!(accepts(
        &d,
        r#"{"reasoning": "Revive agent_5.", "action": "DONATE", "job_id": null, "target_agent": "agent_5", "amount": 120.0}"#
    ));
    assert!(accepts(
        &d,
        r#"{"reasoning": "a \"quoted\" é 😀 \u00e9\n", "action": "IDLE", "job_id": "j1", "target_agent": null, "amount": -1.5e+3}"#
    ));
    // Leading whitespace after </think> is allowed (up to 4 characters).
    assert!(accepts(&agent_job_solution(), "\n\n{\"answer\": \"B\"}"));
    assert!(accepts(
        &agent_vote(),
        r#"{"voter_id": "agent_1", "overall_reasoning": "", "recommendations": []}"#
    ));
    assert!(accepts(
        &agent_vote(),
        r#"{"voter_id": "agent_1", "overall_reasoning": "x", "recommendations": [{"agent_id": "agent_1", "recommended_action": "ATTEMPT_JOB", "job_id": "job_3", "target_agent": null, "amount": null}, {"agent_id": "agent_2", "recommended_action": "SABOTAGE_JOB", "job_id": "job_3", "target_agent": null, "amount": 0}]}"#
    ));
    // Optional members may be left out, in any combination, but order is fixed.
    let m = mixed_schema();
    assert!(accepts(&m, r#"{"b": true}"#));
    assert!(accepts(&m, r#"{"a": -7, "b": false, "e": null}"#));
    assert!(accepts(
        &m,
        r#"{"b": true, "c": "abc", "d": [1, null, 3], "e": "x"}"#
    ));
}

#[test]
fn invalid_documents_are_refused() {
    let d = agent_decision();
    let ok = r#"{"reasoning": "r", "action": "IDLE", "job_id": null, "target_agent": null, "amount": null}"#;
    assert!(accepts(&d, ok));
    for bad in [
        // unknown enum value
        r#"{"reasoning": "r", "action": "SLEEP", "job_id": null, "target_agent": null, "amount": null}"#,
        // missing required member
        r#"{"reasoning": "r", "action": "IDLE", "job_id": null, "target_agent": null}"#,
        // wrong order
        r#"{"action": "IDLE", "reasoning": "r", "job_id": null, "target_agent": null, "amount": null}"#,
        // string where a number or null is required
        r#"{"reasoning": "r", "action": "IDLE", "job_id": null, "target_agent": null, "amount": "5"}"#,
        // extra member
        r#"{"reasoning": "r", "action": "IDLE", "job_id": null, "target_agent": null, "amount": null, "x": 1}"#,
        // trailing text after the object
        r#"{"reasoning": "r", "action": "IDLE", "job_id": null, "target_agent": null, "amount": null} "#,
        // raw newline inside a string, lone surrogate escape
        "{\"reasoning\": \"a\nb\", \"action\": \"IDLE\", \"job_id\": null, \"target_agent\": null, \"amount\": null}",
        r#"{"reasoning": "\ud800", "action": "IDLE", "job_id": null, "target_agent": null, "amount": null}"#,
        // numbers that do not fit an f64 / leading zeros
        r#"{"reasoning": "r", "action": "IDLE", "job_id": null, "target_agent": null, "amount": 1e400}"#,
        r#"{"reasoning": "r", "action": "IDLE", "job_id": null, "target_agent": null, "amount": 012}"#,
        // more than 4 leading whitespace characters
        "     {\"reasoning\": \"r\", \"action\": \"IDLE\", \"job_id\": null, \"target_agent\": null, \"amount\": null}",
    ] {
        assert!(!accepts(&d, bad), "accepted: {bad}");
    }
    let m = mixed_schema();
    for bad in [
        r#"{"a": 1.5, "b": true}"#,          // integer
        r#"{"b": true, "c": ""}"#,           // minLength 1
        r#"{"b": true, "c": "abcd"}"#,       // maxLength 3
        r#"{"b": true, "d": []}"#,           // minItems 1
        r#"{"b": true, "d": [1, 2, 3, 4]}"#, // maxItems 3
        r#"{"b": true, "e": "y"}"#,          // enum
        r#"{}"#,                             // b required
    ] {
        assert!(!accepts(&m, bad), "accepted: {bad}");
    }
}

#[test]
fn eos_only_when_complete_and_then_only_eos() {
    let vocab = hand_vocab();
    let mut c = JsonConstraint::new(&agent_job_solution(), vocab.clone()).expect("compile");
    let eos = vocab.eos_ids().to_vec();
    let mask = c.allowed_tokens().expect("mask");
    assert!(eos.iter().all(|&e| !mask.is_allowed(e)));
    assert!(mask.is_allowed(hand_id("{\"")));
    assert!(!mask.is_allowed(hand_id("}")));
    // Specials never appear inside JSON.
    assert!(!mask.is_allowed(hand_id("<think>")));
    assert!(c.advance(eos[0]).is_err());
    for tok in hand_tokenize(r#"{"answer": "B""#) {
        c.advance(tok).expect("valid prefix");
        assert!(!c.is_complete());
        let mask = c.allowed_tokens().expect("mask");
        assert!(eos.iter().all(|&e| !mask.is_allowed(e)));
    }
    c.advance(hand_id("}")).expect("close");
    assert!(c.is_complete());
    let mask = c.allowed_tokens().expect("mask");
    let mut allowed: Vec<u32> = mask.allowed_ids().collect();
    allowed.sort();
    assert_eq!(allowed, eos);
    assert!(c.advance(hand_id(" ")).is_err());
    c.advance(eos[1]).expect("either EOS ends");
    assert!(c.is_finished());
    assert_eq!(c.text(), r#"{"answer": "B"}"#);
    // reset starts over
    c.reset();
    assert!(!c.is_complete());
    assert_eq!(c.text(), "");
    assert!(c.allowed_tokens().expect("mask").is_allowed(hand_id("{\"")));
}

#[test]
fn refused_token_leaves_state_unchanged() {
    let vocab = hand_vocab();
    let mut c = JsonConstraint::new(&agent_decision(), vocab).expect("compile");
    for tok in hand_tokenize(r#"{"reasoning": "r", "action": "#) {
        c.advance(tok).expect("prefix");
    }
    let err = c
        .advance(hand_id("null"))
        .expect_err("action is not nullable");
    assert!(
        err.to_string().contains("does not continue valid JSON"),
        "{err}"
    );
    let mask = c.allowed_tokens().expect("mask");
    assert!(mask.is_allowed(hand_id("\"IDLE\"")));
    assert!(!mask.is_allowed(hand_id("null")));
    c.advance(hand_id("\"IDLE\"")).expect("enum value");
    assert_eq!(c.text(), r#"{"reasoning": "r", "action": "IDLE""#);
}

#[test]
fn mask_applies_to_padded_logits() {
    let mut m = TokenMask::none(5);
    m.allow(1);
    m.allow(3);
    let mut logits = vec![0.5f32; 8];
    m.apply_to_logits(&mut logits);
    let finite: Vec<usize> = (0..8).filter(|&i| logits[i].is_finite()).collect();
    assert_eq!(finite, vec![1, 3]);
    assert_eq!(m.count_allowed(), 2);
    assert_eq!(m.to_bools(), vec![false, true, false, true, false]);
    assert_eq!(TokenMask::all(70).count_allowed(), 70);
}

#[test]
fn thinking_then_json_on_hand_vocab() {
    let vocab = hand_vocab();
    let (open, close) = (hand_id("<think>"), hand_id("</think>"));
    let json = JsonConstraint::new(&agent_job_solution(), vocab.clone()).expect("compile");
    let mut t = ThinkThenJson::new(json, close, Some(3))
        .expect("wrap")
        .with_open_think(open);
    let mask = t.allowed_tokens().expect("mask");
    assert!(mask.is_allowed(open) && mask.is_allowed(close) && mask.is_allowed(hand_id("}")));
    assert!(vocab.eos_ids().iter().all(|&e| !mask.is_allowed(e)));
    t.advance(open).expect("open");
    t.advance(hand_id("}")).expect("free text while thinking");
    t.advance(hand_id(" the"))
        .expect("free text while thinking");
    assert!(t.advance(vocab.eos_ids()[0]).is_err());
    assert_eq!(t.thinking_tokens(), 3);
    let forced: Vec<u32> = t.allowed_tokens().expect("mask").allowed_ids().collect();
    assert_eq!(forced, vec![close]);
    assert!(t.advance(hand_id("x")).is_err());
    t.advance(close).expect("close");
    assert_eq!(t.phase(), Phase::Answer);
    for tok in hand_tokenize("\n\n{\"answer\": \"A\"}") {
        assert!(t.allowed_tokens().expect("mask").is_allowed(tok));
        t.advance(tok).expect("json");
    }
    assert!(t.is_complete());
    t.reset();
    assert_eq!(t.phase(), Phase::Thinking);
    assert_eq!(t.thinking_tokens(), 0);
}

// ------------------------------------------------------------------ schema subset errors

#[test]
fn unsupported_keywords_are_named() {
    let vocab = hand_vocab();
    let cases = [
        (json!({"type": "string", "pattern": "^a$"}), "`pattern`"),
        (
            json!({"type": "object", "properties": {"x": {"type": "string", "format": "date"}}}),
            "`format`",
        ),
        (
            json!({"type": "object", "additionalProperties": true}),
            "`additionalProperties`",
        ),
        (
            json!({"oneOf": [{"type": "string"}, {"type": "null"}]}),
            "`oneOf`",
        ),
        (json!({"type": "number", "minimum": 0}), "`minimum`"),
        (json!({"description": "anything"}), "no `type`"),
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}),
            "\"b\"",
        ),
        (json!({"$ref": "#/$defs/Missing"}), "names no definition"),
        (
            json!({"$ref": "#/$defs/A", "$defs": {"A": {"type": "array", "items": {"$ref": "#/$defs/A"}}}}),
            "recursive",
        ),
        (json!({"enum": [1, 2]}), "strings and null only"),
    ];
    for (schema, needle) in cases {
        let err = JsonConstraint::new(&schema, vocab.clone()).expect_err("must be refused");
        let msg = format!("{err:#}");
        assert!(msg.contains(needle), "{schema}: {msg}");
    }
}

#[test]
fn schema_compiles_pydantic_style() {
    let s = Schema::compile(&agent_decision()).expect("compile");
    let Schema::Object(o) = &s else {
        panic!("{s:?}")
    };
    let names: Vec<&str> = o.properties.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["reasoning", "action", "job_id", "target_agent", "amount"]
    );
    assert_eq!(
        o.properties[4].schema,
        Schema::AnyOf(vec![Schema::Number, Schema::Null])
    );
    assert_eq!(
        o.properties[1].schema,
        Schema::Enum(vec![
            "ATTEMPT_JOB".into(),
            "IDLE".into(),
            "DONATE".into(),
            "SABOTAGE_JOB".into()
        ])
    );
    assert!(o.properties.iter().all(|p| p.required));
}

// ------------------------------------------------------------------ free mode

#[test]
fn validation_errors_name_the_path() {
    let s = Schema::compile(&agent_vote()).expect("compile");
    let v = json!({
        "voter_id": "agent_1",
        "overall_reasoning": 3,
        "recommendations": [
            {"agent_id": "a", "recommended_action": "IDLE", "job_id": null, "target_agent": null, "amount": null},
            {"agent_id": "b", "recommended_action": "SLEEP", "job_id": null, "target_agent": null, "amount": 1},
            {"agent_id": "c", "recommended_action": "DONATE", "job_id": null, "target_agent": "a", "amount": "5", "extra": 1},
            {"agent_id": "d", "recommended_action": "IDLE", "job_id": null, "amount": null}
        ]
    });
    let errs = s.validate(&v).expect_err("invalid");
    let msgs: Vec<String> = errs.0.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        msgs,
        vec![
            "overall_reasoning: expected string, found number",
            "recommendations[1].recommended_action: expected one of \"ATTEMPT_JOB\", \"IDLE\", \"DONATE\", \"SABOTAGE_JOB\", found \"SLEEP\"",
            "recommendations[2].extra: unexpected property",
            "recommendations[2].amount: expected number or null, found string",
            "recommendations[3].target_agent: missing (expected string or null)",
        ]
    );
    assert_eq!(
        Schema::compile(&agent_job_solution())
            .expect("compile")
            .validate(&json!([1]))
            .expect_err("array")
            .to_string(),
        "(root): expected object, found array"
    );
    let m = Schema::compile(&mixed_schema()).expect("compile");
    m.validate(&json!({"a": 2.0, "b": true}))
        .expect("2.0 is an integer");
    assert_eq!(
        m.validate(&json!({"a": 2.5, "b": true, "d": []}))
            .expect_err("bad")
            .to_string(),
        "a: expected integer, found 2.5; d: expected at least 1 items, found 0"
    );
}

#[test]
fn extracts_json_from_free_text() {
    let obj = r#"{"answer": "C"}"#;
    let cases = [
        obj.to_string(),
        format!("The answer is below.\n```json\n{obj}\n```\nHope this helps {{not json}}"),
        format!("Sure! {obj} and some trailing words"),
        format!("Use {{braces}} carefully: {obj}"),
        format!("<think>maybe {{\"answer\": \"A\"}}?</think>\n\n{obj}"),
        format!("```\n{obj}\n```"),
        format!("```json\nnot json\n```\n{obj}"),
    ];
    for text in &cases {
        let found = extract_json_object(text).unwrap_or_else(|| panic!("none in {text:?}"));
        assert_eq!(found.value, json!({"answer": "C"}), "{text:?}");
        assert_eq!(&text[found.start..found.end], obj, "{text:?}");
    }
    assert_eq!(extract_json_object("no json here"), None);
    assert_eq!(extract_json_object("{\"answer\": \"C\""), None);
    assert_eq!(extract_json_object("[1, 2]"), None);

    let s = Schema::compile(&agent_job_solution()).expect("compile");
    assert_eq!(
        parse_free("ok: {\"answer\": \"D\"} done", &s),
        Ok(json!({"answer": "D"}))
    );
    assert_eq!(parse_free("I think D", &s), Err(FreeParseError::NoJson));
    let err = parse_free("{\"answer\": 4}", &s).expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "the JSON object does not match the schema: answer: expected string, found number"
    );
}

// ------------------------------------------------------------------ the society's strict schemas

/// Every document constrained decoding allows under the Energy Society's strict schemas passes
/// the society's own checks in both modes and names only this round's jobs and agents.
#[test]
fn strict_society_schemas_only_allow_valid_answers() {
    use crate::energy_society::config::Mode;
    use crate::energy_society::schema as es;
    let jobs: Vec<String> = (0..3).map(|i| format!("job_{i}")).collect();
    let agents: Vec<String> = (1..=3).map(|i| format!("agent_{i}")).collect();
    let others = agents[1..].to_vec();
    let style = short_strings();
    let vocab = hand_vocab();
    let check_ids = |job: &Option<String>, target: &Option<String>, text: &str| {
        if let Some(j) = job {
            assert!(jobs.contains(j), "{text}");
        }
        if let Some(t) = target {
            assert!(agents.contains(t), "{text}");
        }
    };
    for sabotage in [false, true] {
        let schemas = [
            es::decision_schema_strict(sabotage, &jobs, &others),
            es::vote_schema_strict(sabotage, &jobs, &agents),
            es::solution_schema_strict(4),
        ];
        for (k, schema) in schemas.iter().enumerate() {
            let mut c = JsonConstraint::with_style(schema, vocab.clone(), &style).expect("compile");
            let mut actions = std::collections::HashSet::new();
            for seed in 0..40 {
                c.reset();
                let text = random_walk(&mut c, &mut ChaCha8Rng::seed_from_u64(seed), 3000);
                for mode in [Mode::Faithful, Mode::Corrected] {
                    match k {
                        0 => match es::parse_decision(&text, sabotage, mode) {
                            Ok(d) => {
                                check_ids(&d.job_id, &d.target_agent, &text);
                                actions.insert(d.action.as_str());
                            }
                            Err(e) => panic!("{e}: {text}"),
                        },
                        1 => match es::parse_vote(&text, sabotage, mode) {
                            Ok(v) => {
                                assert!(v.recommendations.len() <= agents.len());
                                for r in &v.recommendations {
                                    check_ids(&r.job_id, &r.target_agent, &text);
                                    assert!(agents.contains(&r.agent_id), "{text}");
                                    actions.insert(r.recommended_action.as_str());
                                }
                            }
                            Err(e) => panic!("{e}: {text}"),
                        },
                        _ => {
                            let a = es::parse_solution(&text).expect("solution parses");
                            assert!(["0", "1", "2", "3"].contains(&a.answer.as_str()));
                        }
                    }
                }
            }
            if k == 0 {
                // The walks reach every action the schema offers.
                assert_eq!(actions.len(), if sabotage { 4 } else { 3 }, "{actions:?}");
            }
        }
    }
}

#[test]
fn exclusive_minimum_zero_allows_only_positive_numbers() {
    let s = json!({"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 0}},
                   "required": ["x"], "additionalProperties": false});
    for ok in ["1", "0.5", "12.25", "3e-2", "7E+1"] {
        assert!(accepts(&s, &format!(r#"{{"x": {ok}}}"#)), "refused {ok}");
    }
    for bad in ["0", "-1", "0.0", "-0.5", "00.1"] {
        assert!(
            !accepts(&s, &format!(r#"{{"x": {bad}}}"#)),
            "accepted {bad}"
        );
    }
    let other = json!({"type": "number", "exclusiveMinimum": 5});
    let err = Schema::compile(&other).unwrap_err().to_string();
    assert!(err.contains("exclusiveMinimum"), "{err}");
}
