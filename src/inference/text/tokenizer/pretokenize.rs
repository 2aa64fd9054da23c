//! Pre-tokenizers of byte-level BPE vocabularies: the regular expressions that
//! cut text into words before BPE merges run, one set per
//! `tokenizer.ggml.pre` value, as llama.cpp's `llama-vocab.cpp` defines them.
//!
//! A pre-tokenizer is a list of regexes applied in turn: each regex cuts every
//! piece made by the previous one into its matches and the text between them
//! (both kept). Character classes use Unicode general categories (`\p{L}`
//! letters, `\p{N}` numbers, `\p{M}` marks) and `\s` is Unicode White_Space,
//! the same sets llama.cpp's own Unicode tables give.

use anyhow::{Context, Result};
use fancy_regex::Regex;

use crate::inference::files::gguf_header::quoted_head;

/// GPT-2's split rule.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's rule: contractions in either case, letters with one leading
/// non-letter, numbers of at most three digits, newline runs kept apart.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 / Qwen3: Llama 3's rule with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5: Qwen2's rule where combining marks belong to words.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Gemma 4 (SentencePiece-style BPE): only newline runs are cut out.
const NEWLINES: &str = r"[^\n]+|[\n]+";

/// The pre-tokenizer families this crate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreKind {
    Gpt2,
    Llama3,
    Qwen2,
    Qwen35,
    SmolLm,
    Gemma4,
}

impl PreKind {
    /// Map a `tokenizer.ggml.pre` value to its family; `None` for values this
    /// crate does not implement.
    pub fn from_gguf_name(name: &str) -> Option<PreKind> {
        Some(match name {
            "gpt-2" => PreKind::Gpt2,
            // llama.cpp reads Nemotron 3's `pixtral` as Llama 3's rule too.
            "llama3" | "llama-v3" | "llama-bpe" | "pixtral" => PreKind::Llama3,
            "qwen2" | "deepseek-r1-qwen" => PreKind::Qwen2,
            "qwen35" => PreKind::Qwen35,
            "smollm" => PreKind::SmolLm,
            "gemma4" => PreKind::Gemma4,
            _ => return None,
        })
    }

    /// The `tokenizer.ggml.pre` values accepted, for error messages.
    pub fn supported_names() -> &'static str {
        "gpt-2, llama3, llama-v3, llama-bpe, pixtral, qwen2, deepseek-r1-qwen, qwen35, smollm, gemma4"
    }

    fn patterns(self) -> &'static [&'static str] {
        match self {
            PreKind::Gpt2 => &[GPT2],
            PreKind::Llama3 => &[LLAMA3],
            PreKind::Qwen2 => &[QWEN2],
            PreKind::Qwen35 => &[QWEN35],
            PreKind::SmolLm => &[r"\p{N}", GPT2],
            PreKind::Gemma4 => &[NEWLINES],
        }
    }

    /// Whether words are re-encoded into GPT-2's byte-level alphabet before
    /// the merges (false for Gemma 4, whose vocabulary is raw UTF-8).
    pub fn byte_encoded(self) -> bool {
        !matches!(self, PreKind::Gemma4)
    }

    /// Whether a word that is itself a vocabulary entry skips the merges
    /// (llama.cpp's `ignore_merges`, set for Llama 3).
    pub fn ignore_merges(self) -> bool {
        matches!(self, PreKind::Llama3)
    }
}

/// A compiled pre-tokenizer.
#[derive(Debug)]
pub struct PreTokenizer {
    kind: PreKind,
    regexes: Vec<Regex>,
}

impl PreTokenizer {
    pub fn new(kind: PreKind) -> Result<Self> {
        let regexes = kind
            .patterns()
            .iter()
            .map(|p| Regex::new(p).with_context(|| format!("compiling pre-tokenizer regex {p:?}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { kind, regexes })
    }

    pub fn kind(&self) -> PreKind {
        self.kind
    }

    /// Cut `text` into words (byte ranges of `text`, in order, covering it).
    pub fn split<'t>(&self, text: &'t str) -> Result<Vec<&'t str>> {
        let mut pieces: Vec<&str> = if text.is_empty() {
            Vec::new()
        } else {
            vec![text]
        };
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let mut last = 0;
                for m in re.find_iter(piece) {
                    let m = m.with_context(|| {
                        format!("pre-tokenizer regex failed on {}", quoted_head(piece, 80))
                    })?;
                    if m.start() > last {
                        next.push(&piece[last..m.start()]);
                    }
                    if m.end() > m.start() {
                        next.push(m.as_str());
                    }
                    last = m.end();
                }
                if last < piece.len() {
                    next.push(&piece[last..]);
                }
            }
            pieces = next;
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(kind: PreKind, text: &str) -> Vec<String> {
        PreTokenizer::new(kind)
            .unwrap()
            .split(text)
            .unwrap()
            .into_iter()
            .map(String::from)
            .collect()
    }

    #[test]
    fn llama3_groups_digits_by_three_and_qwen2_singly() {
        assert_eq!(split(PreKind::Llama3, "12345"), ["123", "45"]);
        assert_eq!(split(PreKind::Qwen2, "123"), ["1", "2", "3"]);
    }

    #[test]
    fn trailing_spaces_leave_one_for_the_next_word() {
        assert_eq!(split(PreKind::Gpt2, "a   b"), ["a", "  ", " b"]);
        assert_eq!(
            split(PreKind::Qwen2, "Hello, y'all!\n\n x"),
            ["Hello", ",", " y", "'all", "!\n\n", " x"]
        );
    }

    #[test]
    fn qwen35_keeps_combining_marks_in_words() {
        // U+0301 COMBINING ACUTE ACCENT after "e".
        assert_eq!(split(PreKind::Qwen35, "cafe\u{301}!"), ["cafe\u{301}", "!"]);
        assert_eq!(split(PreKind::Qwen2, "cafe\u{301}!"), ["cafe", "\u{301}!"]);
    }

    #[test]
    fn smollm_splits_every_digit_first() {
        assert_eq!(split(PreKind::SmolLm, "ab 123"), ["ab", " ", "1", "2", "3"]);
    }

    #[test]
    fn gemma4_cuts_only_newlines() {
        assert_eq!(split(PreKind::Gemma4, "a b\n\nc"), ["a b", "\n\n", "c"]);
    }

    #[test]
    fn a_piece_the_regex_cannot_finish_is_quoted_cut_short() {
        let text = "a".repeat(1_000_000);
        let e = PreTokenizer::new(PreKind::Gpt2)
            .unwrap()
            .split(&text)
            .unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("… (1000000 chars)") && e.len() < 400,
            "{}",
            &e[..e.len().min(400)]
        );
    }

    #[test]
    fn unknown_names_are_not_mapped() {
        assert_eq!(PreKind::from_gguf_name("qwen2"), Some(PreKind::Qwen2));
        assert_eq!(PreKind::from_gguf_name("falcon"), None);
    }
}
