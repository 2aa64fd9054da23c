//! A Hugging Face `tokenizer.json` beside the model file: when present, text
//! is encoded with it (through the `tokenizers` crate, already a dependency of
//! candle) instead of the GGUF metadata rules, while ids, special tokens and
//! decoding still come from the GGUF vocabulary. The two must agree on the
//! vocabulary: same size (added tokens included, or GGUF padded beyond) and
//! the same ids for the special tokens.

use anyhow::{anyhow, bail, Result};
use std::path::{Path, PathBuf};

/// Two copies of the HF tokenizer: one that turns special-token texts into
/// their ids and one that reads them as plain text (`parse_special` off).
pub struct HfEncoder {
    pub path: PathBuf,
    parse: tokenizers::Tokenizer,
    plain: tokenizers::Tokenizer,
}

impl std::fmt::Debug for HfEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfEncoder")
            .field("path", &self.path)
            .finish()
    }
}

impl HfEncoder {
    /// The `tokenizer.json` in the model file's folder, if any.
    pub fn beside(model_file: &Path) -> Option<PathBuf> {
        let p = model_file.with_file_name("tokenizer.json");
        p.is_file().then_some(p)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let parse = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow!("{}: cannot load tokenizer.json: {e}", path.display()))?;
        let mut plain = parse.clone();
        plain.set_encode_special_tokens(true);
        Ok(Self {
            path: path.to_path_buf(),
            parse,
            plain,
        })
    }

    /// Check that the ids mean the same tokens as in the GGUF vocabulary.
    pub fn check_against(&self, gguf: &super::Tokenizer) -> Result<()> {
        let n = self.parse.get_vocab_size(true);
        if n > gguf.vocab_size() {
            bail!(
                "{}: {n} tokens, but the GGUF vocabulary of {} has {}",
                self.path.display(),
                gguf.source().display(),
                gguf.vocab_size()
            );
        }
        for (id, text) in self.parse.get_added_tokens_decoder() {
            if gguf.token_text(id) != Some(text.content.as_str()) {
                bail!(
                    "{}: added token {id} is {:?} but the GGUF vocabulary of {} has {:?}",
                    self.path.display(),
                    text.content,
                    gguf.source().display(),
                    gguf.token_text(id)
                );
            }
        }
        Ok(())
    }

    /// Encode without any BOS/EOS (the caller adds them from GGUF metadata).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let t = if parse_special {
            &self.parse
        } else {
            &self.plain
        };
        let enc = t
            .encode_fast(text, false)
            .map_err(|e| anyhow!("{}: encoding failed: {e}", self.path.display()))?;
        Ok(enc.get_ids().to_vec())
    }
}
