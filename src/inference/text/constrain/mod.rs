//! Structured output for local models: agents answer with JSON that matches a schema.
//!
//! Two modes share one compiled [`Schema`] (the supported JSON Schema subset):
//! - constrained: [`JsonConstraint`] (optionally inside [`ThinkThenJson`]) gives the sampler a
//!   [`TokenMask`] per step, so the output always parses and validates;
//! - free (parse + retry): [`parse::extract_json_object`] and [`Schema::validate`] /
//!   [`parse::parse_free`] turn free text into a value or into errors naming the path.
//!
//! Works with any tokenizer given the bytes of each token id ([`TokenVocab`]).
//!
//! Sampler loop (per sequence):
//! ```text
//! loop {
//!     let mask = constraint.allowed_tokens()?;   // TokenMask over the vocab
//!     mask.apply_to_logits(&mut logits);           // −∞ where disallowed (also past the vocab)
//!     let tok = sample(&logits);                   // temperature / top-p as usual
//!     if vocab.is_eos(tok) { constraint.advance(tok)?; break; }
//!     constraint.advance(tok)?;
//! }
//! ```

pub mod json;
pub mod parse;
pub mod schema;
pub mod think;
pub mod vocab;

pub use json::JsonConstraint;
pub use parse::{extract_json_object, parse_free, ExtractedJson, FreeParseError};
pub use schema::{JsonStyle, Schema, ValidationError, ValidationErrors};
pub use think::{Phase, ThinkThenJson};
pub use vocab::{TokenMask, TokenVocab};

#[cfg(test)]
mod tests;
