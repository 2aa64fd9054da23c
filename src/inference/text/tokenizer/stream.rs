//! Incremental detokenization: token ids in, UTF-8 text out, with the bytes
//! of a character split across tokens held back until the character is whole.

use super::Tokenizer;

/// Turns a stream of token ids into text. Create one per generated sequence.
///
/// `push` returns the text that became complete with that token; bytes that
/// start a UTF-8 character but do not finish it yet are held back. Byte
/// sequences that can never be valid UTF-8 come out as U+FFFD, as in
/// [`Tokenizer::decode`]. `finish` flushes what is left, so the
/// concatenation of every `push` and `finish` equals `decode` of all ids.
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    skip_special: bool,
    pending: Vec<u8>,
    /// Whether a leading space is still to be removed (SentencePiece
    /// vocabularies that prefix a space; see [`Tokenizer::decode`]).
    strip_space: Option<bool>,
}

impl StreamDecoder {
    pub fn new(skip_special: bool) -> Self {
        Self {
            skip_special,
            pending: Vec::new(),
            strip_space: None,
        }
    }

    /// Add one token; returns the newly completed text (may be empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        let strip = self
            .strip_space
            .get_or_insert(tokenizer.strips_leading_space());
        if let Some(piece) = tokenizer.piece_for_decode(id, self.skip_special, strip) {
            self.pending.extend_from_slice(piece);
        }
        self.take_complete()
    }

    /// The bytes still held back (an unfinished UTF-8 character).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Flush what is held back (lossily: an unfinished character becomes
    /// U+FFFD) and reset for a new sequence.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.strip_space = None;
        out
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&rest[..valid]).expect("valid prefix"));
                    match e.error_len() {
                        // Invalid bytes: replace and go on.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &rest[valid + bad..];
                        }
                        // An unfinished character at the end: hold it back.
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}
