//! A tokenizer as constrained decoding sees it: the bytes of every token id, which ids end
//! generation (EOS) and which are special (control tokens that never stand for text), plus the
//! token-mask type that a sampler applies to its logits.
//!
//! Built once per model and shared (`Arc<TokenVocab>`) by every constraint on that model: it
//! holds the llguidance token trie and parser factory, whose construction walks the whole vocab.

use std::fmt;
use std::sync::Arc;

use anyhow::{bail, Context};
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::ParserFactory;

/// The vocabulary of one tokenizer (see module docs).
pub struct TokenVocab {
    token_bytes: Vec<Vec<u8>>,
    eos_ids: Vec<u32>,
    is_special: Vec<bool>,
    pub(crate) factory: ParserFactory,
}

impl fmt::Debug for TokenVocab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenVocab")
            .field("len", &self.token_bytes.len())
            .field("eos_ids", &self.eos_ids)
            .finish_non_exhaustive()
    }
}

impl TokenVocab {
    /// `token_bytes[id]` is the text of token `id` as raw bytes (after undoing any byte-level
    /// encoding such as GPT-2's). EOS ids are the tokens that end generation (e.g. `<|im_end|>`
    /// and `<|endoftext|>`); special ids are control tokens that never appear inside JSON.
    /// EOS ids count as special whether listed or not.
    pub fn new(
        token_bytes: Vec<Vec<u8>>,
        eos_ids: Vec<u32>,
        special_ids: Vec<u32>,
    ) -> anyhow::Result<Self> {
        let n = token_bytes.len();
        if n == 0 {
            bail!("token vocabulary is empty");
        }
        let n_u32 = u32::try_from(n).context("token vocabulary has more than 2^32 tokens")?;
        if eos_ids.is_empty() {
            bail!("token vocabulary: no EOS token id given");
        }
        let mut is_special = vec![false; n];
        for &id in eos_ids.iter().chain(special_ids.iter()) {
            if id >= n_u32 {
                bail!("token vocabulary: EOS/special id {id} is outside the vocab of {n} tokens");
            }
            is_special[id as usize] = true;
        }
        // llguidance marks special tokens with a leading 0xFF byte (never valid UTF-8), which
        // keeps them out of every grammar; ordinary tokens keep their bytes.
        let words: Vec<Vec<u8>> = token_bytes
            .iter()
            .enumerate()
            .map(|(id, b)| {
                if is_special[id] {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(b);
                    if b.is_empty() {
                        w.extend_from_slice(format!("[{id}]").as_bytes());
                    }
                    w
                } else {
                    b.clone()
                }
            })
            .collect();
        let info = TokRxInfo::new(n_u32, eos_ids[0]);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_ids);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env)
            .context("building the constrained-decoding parser factory for this vocab")?;
        factory.quiet();
        Ok(TokenVocab {
            token_bytes,
            eos_ids,
            is_special,
            factory,
        })
    }

    /// Number of token ids (the length of every mask).
    pub fn len(&self) -> usize {
        self.token_bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.token_bytes.is_empty()
    }

    /// Raw bytes of `id` (empty for ids outside the vocab).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map(|b| b.as_slice())
            .unwrap_or(&[])
    }

    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.contains(&id)
    }

    /// Special (control) token, EOS included.
    pub fn is_special(&self, id: u32) -> bool {
        self.is_special.get(id as usize).copied().unwrap_or(false)
    }

    /// A short printable form of a token for error messages.
    pub fn describe(&self, id: u32) -> String {
        format!(
            "token {id} {:?}",
            String::from_utf8_lossy(self.token_bytes(id))
        )
    }
}

/// Which token ids may be sampled next: a bitset over the vocab.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenMask {
    bits: Vec<u64>,
    len: usize,
}

impl fmt::Debug for TokenMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TokenMask({} of {} allowed)",
            self.count_allowed(),
            self.len
        )
    }
}

impl TokenMask {
    /// Nothing allowed.
    pub fn none(len: usize) -> Self {
        TokenMask {
            bits: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// Everything allowed.
    pub fn all(len: usize) -> Self {
        let mut m = TokenMask::none(len);
        for id in 0..len {
            m.allow(id as u32);
        }
        m
    }

    pub(crate) fn from_words32(words: &[u32], len: usize) -> Self {
        let mut m = TokenMask::none(len);
        for (i, w) in words.iter().enumerate() {
            let mut w = *w;
            while w != 0 {
                let b = w.trailing_zeros() as usize;
                let id = i * 32 + b;
                if id < len {
                    m.bits[id / 64] |= 1 << (id % 64);
                }
                w &= w - 1;
            }
        }
        m
    }

    /// Vocab size this mask covers; ids at or beyond it are never allowed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_allowed(&self, id: u32) -> bool {
        let id = id as usize;
        id < self.len && self.bits[id / 64] & (1 << (id % 64)) != 0
    }

    pub fn allow(&mut self, id: u32) {
        let id = id as usize;
        if id < self.len {
            self.bits[id / 64] |= 1 << (id % 64);
        }
    }

    pub fn disallow(&mut self, id: u32) {
        let id = id as usize;
        if id < self.len {
            self.bits[id / 64] &= !(1 << (id % 64));
        }
    }

    pub fn count_allowed(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Allowed ids in increasing order.
    pub fn allowed_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.bits.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    None
                } else {
                    let b = w.trailing_zeros() as usize;
                    w &= w - 1;
                    Some((i * 64 + b) as u32)
                }
            })
        })
    }

    pub fn to_bools(&self) -> Vec<bool> {
        (0..self.len).map(|id| self.is_allowed(id as u32)).collect()
    }

    /// Sets every disallowed logit to −∞, including positions past the vocab (models often
    /// pad their output layer beyond the tokenizer's size). Apply before temperature/top-k/
    /// top-p and softmax so that sampling renormalises over the allowed tokens only.
    pub fn apply_to_logits(&self, logits: &mut [f32]) {
        for (id, l) in logits.iter_mut().enumerate() {
            if !self.is_allowed(id as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}
