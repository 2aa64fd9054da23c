//! `JsonConstraint`: token-by-token masks that make a model's output a JSON value of a schema.
//!
//! The schema (subset in [`super::schema`]) becomes a Lark grammar run by llguidance's Earley
//! parser over the vocab's token trie. The contract for a sampler:
//! 1. `allowed_tokens()` → mask; set disallowed logits to −∞ (`TokenMask::apply_to_logits`);
//! 2. sample a token; `advance(token)`;
//! 3. stop when the sampled token is EOS (allowed only once `is_complete()`), or when the mask
//!    allows nothing but EOS.
//!
//! Every token sequence that follows the masks and ends in EOS spells JSON that serde_json
//! parses and that validates against the schema (the random-walk tests check this).

use std::sync::Arc;

use anyhow::{bail, Context};
use llguidance::api::TopLevelGrammar;
use llguidance::Matcher;
use serde_json::Value;

use super::schema::{JsonStyle, Schema};
use super::vocab::{TokenMask, TokenVocab};

/// Constrained decoding of one JSON value (see module docs).
pub struct JsonConstraint {
    vocab: Arc<TokenVocab>,
    schema: Schema,
    grammar: String,
    /// The matcher at the start, cloned on `reset`.
    initial: Matcher,
    matcher: Matcher,
    /// The text so far is a complete value (EOS allowed).
    complete: bool,
    /// EOS was consumed.
    finished: bool,
    /// Bytes of the tokens consumed so far.
    text: Vec<u8>,
}

impl std::fmt::Debug for JsonConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonConstraint")
            .field("schema", &self.schema)
            .field("complete", &self.complete)
            .field("finished", &self.finished)
            .field("text", &String::from_utf8_lossy(&self.text))
            .finish_non_exhaustive()
    }
}

impl JsonConstraint {
    /// Compiles `schema` with the default layout (`{"a": 1, "b": [2, 3]}`).
    pub fn new(schema: &Value, vocab: Arc<TokenVocab>) -> anyhow::Result<Self> {
        Self::with_style(schema, vocab, &JsonStyle::default())
    }

    pub fn with_style(
        schema: &Value,
        vocab: Arc<TokenVocab>,
        style: &JsonStyle,
    ) -> anyhow::Result<Self> {
        let compiled = Schema::compile(schema)?;
        let grammar = compiled.to_lark(style);
        let matcher = new_matcher(&vocab, &grammar)?;
        Ok(JsonConstraint {
            vocab,
            schema: compiled,
            grammar,
            initial: matcher.clone(),
            matcher,
            complete: false,
            finished: false,
            text: Vec::new(),
        })
    }

    /// The compiled schema (the free mode validates against the same tree).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The Lark grammar given to the engine (for logs and debugging).
    pub fn grammar(&self) -> &str {
        &self.grammar
    }

    pub fn vocab(&self) -> &Arc<TokenVocab> {
        &self.vocab
    }

    /// Tokens allowed next. EOS ids are allowed exactly when the value is complete; once a
    /// self-delimiting value (object, array, string) is complete, only EOS is allowed.
    pub fn allowed_tokens(&mut self) -> anyhow::Result<TokenMask> {
        let n = self.vocab.len();
        let eos_only = || {
            let mut m = TokenMask::none(n);
            for &e in self.vocab.eos_ids() {
                m.allow(e);
            }
            m
        };
        if self.finished || (self.complete && self.schema.is_self_delimiting()) {
            return Ok(eos_only());
        }
        if self.matcher.is_stopped() {
            if let Some(e) = self.matcher.get_error() {
                bail!("constrained decoding failed: {e}");
            }
            // The grammar admits nothing more: only EOS can follow.
            return Ok(eos_only());
        }
        let vob = self
            .matcher
            .compute_mask()
            .map_err(|e| anyhow::anyhow!("computing the token mask: {e}"))?;
        let mut mask = TokenMask::from_words32(vob.as_slice(), n);
        for &e in self.vocab.eos_ids() {
            if self.complete {
                mask.allow(e);
            } else {
                mask.disallow(e);
            }
        }
        Ok(mask)
    }

    /// Consumes one sampled token. A token the mask does not allow is refused with an error
    /// and leaves the state unchanged.
    pub fn advance(&mut self, token: u32) -> anyhow::Result<()> {
        if self.vocab.is_eos(token) {
            if !self.complete {
                bail!(
                    "EOS ({}) before the JSON value is complete (so far: {:?})",
                    self.vocab.describe(token),
                    String::from_utf8_lossy(&self.text)
                );
            }
            self.finished = true;
            return Ok(());
        }
        if self.finished {
            bail!(
                "{} after EOS: the JSON value is finished",
                self.vocab.describe(token)
            );
        }
        if token as usize >= self.vocab.len() {
            bail!(
                "token id {token} is outside the vocab of {} tokens",
                self.vocab.len()
            );
        }
        if self.vocab.is_special(token) {
            bail!(
                "special {} cannot appear inside JSON",
                self.vocab.describe(token)
            );
        }
        if self.complete && self.schema.is_self_delimiting() {
            bail!(
                "{} after the complete JSON value; only EOS may follow",
                self.vocab.describe(token)
            );
        }
        let ok = self
            .matcher
            .validate_tokens(&[token])
            .map_err(|e| anyhow::anyhow!("checking {}: {e}", self.vocab.describe(token)))?;
        if ok != 1 {
            bail!(
                "{} does not continue valid JSON for the schema after {:?}",
                self.vocab.describe(token),
                String::from_utf8_lossy(&self.text)
            );
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| anyhow::anyhow!("consuming {}: {e}", self.vocab.describe(token)))?;
        self.text.extend_from_slice(self.vocab.token_bytes(token));
        self.complete = self
            .matcher
            .is_accepting()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    }

    /// The text so far is one complete JSON value of the schema (EOS may be sampled now).
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// EOS has been consumed.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The JSON text generated so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.text).into_owned()
    }

    /// Back to the start, for a new generation with the same schema.
    pub fn reset(&mut self) {
        self.matcher = self.initial.clone();
        self.complete = false;
        self.finished = false;
        self.text.clear();
    }
}

fn new_matcher(vocab: &TokenVocab, grammar: &str) -> anyhow::Result<Matcher> {
    let parser = vocab
        .factory
        .create_parser(TopLevelGrammar::from_lark(grammar.to_string()))
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("compiling the JSON grammar:\n{grammar}"))?;
    let matcher = Matcher::new(Ok(parser));
    if let Some(e) = matcher.get_error() {
        bail!("starting the JSON grammar: {e}");
    }
    Ok(matcher)
}
