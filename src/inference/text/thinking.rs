//! Thinking-token accounting: which generated tokens belong to the model's
//! thinking (reasoning) block, and the split of the generated text into
//! thinking and visible answer.
//!
//! Rule (used for `TokenUsage::thinking_tokens`): a token is a thinking token
//! when it lies between the open marker and the close marker, **both markers
//! included**. When the prompt already opened the block (Qwen3.5 and Nemotron
//! with thinking on end the prompt with `<think>\n`), counting starts at the
//! first generated token and the open marker, which was not generated, is not
//! counted. A block that is never closed (generation stopped by length) counts
//! up to the last generated token. Only the first block is counted; markers
//! after it are ordinary tokens. Markers are matched by token id: each marker
//! must be a single vocabulary token (true of `<think>`/`</think>` in Qwen and
//! Nemotron and of `<|channel>`/`<channel|>` in Gemma 4).

use crate::inference::text::chat_template::ThinkingSupport;
use crate::inference::text::tokenizer::Tokenizer;
use anyhow::{anyhow, Result};

/// Token ids of a thinking block's markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingMarkers {
    pub open: u32,
    pub close: u32,
}

impl ThinkingMarkers {
    /// Look the template's markers up in the vocabulary; an error when either
    /// is not a single token.
    pub fn resolve(support: &ThinkingSupport, tokenizer: &Tokenizer) -> Result<Self> {
        let id = |m: &str| {
            tokenizer.token_id(m).ok_or_else(|| {
                anyhow!(
                    "{}: thinking marker {m:?} is not a single token of the vocabulary",
                    tokenizer.source().display()
                )
            })
        };
        Ok(Self {
            open: id(&support.open)?,
            close: id(&support.close)?,
        })
    }
}

#[cfg(test)]
/// The span `[start, end)` of generated ids that are thinking tokens (see the
/// module rule); `None` when there are none.
pub fn thinking_span(
    ids: &[u32],
    markers: ThinkingMarkers,
    prompt_opens_block: bool,
) -> Option<(usize, usize)> {
    let start = if prompt_opens_block {
        0
    } else {
        ids.iter().position(|&t| t == markers.open)?
    };
    let from = if prompt_opens_block { start } else { start + 1 };
    let end = match ids[from.min(ids.len())..]
        .iter()
        .position(|&t| t == markers.close)
    {
        Some(i) => from + i + 1,
        None => ids.len(),
    };
    (end > start).then_some((start, end))
}

#[cfg(test)]
/// Number of thinking tokens among the generated ids (see the module rule).
pub fn count_thinking_tokens(
    ids: &[u32],
    markers: ThinkingMarkers,
    prompt_opens_block: bool,
) -> u32 {
    thinking_span(ids, markers, prompt_opens_block).map_or(0, |(s, e)| (e - s) as u32)
}

/// Split generated text into (thinking, answer) by the same rule, on text:
/// the thinking is what lies between the markers (markers removed, outer
/// whitespace trimmed); the answer is the rest with leading whitespace
/// trimmed. Without a thinking block, the thinking is empty and the answer is
/// the whole text.
pub fn split_thinking(
    text: &str,
    open: &str,
    close: &str,
    prompt_opens_block: bool,
) -> (String, String) {
    let (before, inner_start) = if prompt_opens_block {
        ("", 0)
    } else {
        match text.find(open) {
            Some(i) => (&text[..i], i + open.len()),
            None => return (String::new(), text.to_string()),
        }
    };
    let rest = &text[inner_start..];
    let (thinking, after) = match rest.find(close) {
        Some(i) => (&rest[..i], &rest[i + close.len()..]),
        None => (rest, ""),
    };
    let answer = format!("{before}{after}");
    (thinking.trim().to_string(), answer.trim_start().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: ThinkingMarkers = ThinkingMarkers {
        open: 100,
        close: 101,
    };

    #[test]
    fn markers_are_counted_with_the_block() {
        // <think> a b </think> x y
        assert_eq!(count_thinking_tokens(&[100, 1, 2, 101, 3, 4], M, false), 4);
        assert_eq!(
            thinking_span(&[100, 1, 2, 101, 3, 4], M, false),
            Some((0, 4))
        );
        // Gemma-style: a channel name token after the open marker counts too.
        assert_eq!(count_thinking_tokens(&[7, 100, 8, 9, 101, 3], M, false), 4);
    }

    #[test]
    fn prompt_opened_block_counts_from_the_first_token() {
        // prompt ended with <think>: a b </think> x
        assert_eq!(count_thinking_tokens(&[1, 2, 101, 3], M, true), 3);
        // empty thinking: only the close marker
        assert_eq!(count_thinking_tokens(&[101, 3], M, true), 1);
    }

    #[test]
    fn unclosed_block_runs_to_the_end_and_no_block_is_zero() {
        assert_eq!(count_thinking_tokens(&[100, 1, 2], M, false), 3);
        assert_eq!(count_thinking_tokens(&[1, 2], M, true), 2);
        assert_eq!(count_thinking_tokens(&[1, 2, 3], M, false), 0);
        assert_eq!(count_thinking_tokens(&[], M, false), 0);
        // Only the first block counts.
        assert_eq!(count_thinking_tokens(&[100, 101, 100, 5, 101], M, false), 2);
    }

    #[test]
    fn split_text_into_thinking_and_answer() {
        assert_eq!(
            split_thinking(
                "<think>\nplan\n</think>\n\n{\"a\":1}",
                "<think>",
                "</think>",
                false
            ),
            ("plan".to_string(), "{\"a\":1}".to_string())
        );
        assert_eq!(
            split_thinking("plan\n</think>\n\nanswer", "<think>", "</think>", true),
            ("plan".to_string(), "answer".to_string())
        );
        assert_eq!(
            split_thinking("just text", "<think>", "</think>", false),
            (String::new(), "just text".to_string())
        );
        assert_eq!(
            split_thinking(
                "<|channel>thought\nhmm<channel|>Yes",
                "<|channel>",
                "<channel|>",
                false
            ),
            ("thought\nhmm".to_string(), "Yes".to_string())
        );
    }
}
