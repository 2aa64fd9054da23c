//! `ThinkThenJson`: free thinking first, then constrained JSON.
//!
//! Models that reason before answering (`<think> … </think>`) get two phases:
//! 1. thinking: every token may be sampled except EOS and special tokens (the open-think
//!    token, if given, is allowed); the close-think token ends the phase. When the thinking
//!    budget is spent, only the close-think token is allowed (it is forced).
//! 2. answer: the wrapped [`JsonConstraint`] decides.
//!
//! Thinking tokens are counted here (they are charged like any generated token).

use super::json::JsonConstraint;
use super::vocab::TokenMask;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Thinking,
    Answer,
}

/// See module docs.
#[derive(Debug)]
pub struct ThinkThenJson {
    json: JsonConstraint,
    open_think: Option<u32>,
    close_think: u32,
    max_thinking_tokens: Option<usize>,
    thinking_tokens: usize,
    phase: Phase,
}

impl ThinkThenJson {
    /// `close_think` is the id of `</think>`; `max_thinking_tokens` counts thinking tokens
    /// before the close token (None = no budget).
    pub fn new(
        json: JsonConstraint,
        close_think: u32,
        max_thinking_tokens: Option<usize>,
    ) -> anyhow::Result<Self> {
        if close_think as usize >= json.vocab().len() {
            anyhow::bail!(
                "close-think token id {close_think} is outside the vocab of {} tokens",
                json.vocab().len()
            );
        }
        if json.vocab().is_eos(close_think) {
            anyhow::bail!("close-think token id {close_think} is an EOS token");
        }
        Ok(ThinkThenJson {
            json,
            open_think: None,
            close_think,
            max_thinking_tokens,
            thinking_tokens: 0,
            phase: Phase::Thinking,
        })
    }

    /// Also allows the open-think token (often special) during thinking.
    pub fn with_open_think(mut self, open_think: u32) -> Self {
        self.open_think = Some(open_think);
        self
    }

    /// Starts in the answer phase (thinking already closed in the prompt, as a chat template
    /// does when thinking is switched off).
    pub fn skip_thinking(&mut self) {
        self.phase = Phase::Answer;
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Thinking tokens consumed so far (the close-think token not included).
    pub fn thinking_tokens(&self) -> usize {
        self.thinking_tokens
    }

    pub fn json(&self) -> &JsonConstraint {
        &self.json
    }

    pub fn allowed_tokens(&mut self) -> anyhow::Result<TokenMask> {
        match self.phase {
            Phase::Answer => self.json.allowed_tokens(),
            Phase::Thinking => {
                let vocab = self.json.vocab().clone();
                let n = vocab.len();
                let mut m = TokenMask::none(n);
                if self
                    .max_thinking_tokens
                    .is_some_and(|max| self.thinking_tokens >= max)
                {
                    m.allow(self.close_think);
                    return Ok(m);
                }
                for id in 0..n as u32 {
                    if !vocab.is_special(id) {
                        m.allow(id);
                    }
                }
                m.allow(self.close_think);
                if let Some(o) = self.open_think {
                    m.allow(o);
                }
                for &e in vocab.eos_ids() {
                    m.disallow(e);
                }
                Ok(m)
            }
        }
    }

    pub fn advance(&mut self, token: u32) -> anyhow::Result<()> {
        match self.phase {
            Phase::Answer => self.json.advance(token),
            Phase::Thinking => {
                if token == self.close_think {
                    self.phase = Phase::Answer;
                    return Ok(());
                }
                let vocab = self.json.vocab();
                if self
                    .max_thinking_tokens
                    .is_some_and(|max| self.thinking_tokens >= max)
                {
                    anyhow::bail!(
                        "thinking budget of {} tokens spent: only the close-think token may follow, got {}",
                        self.thinking_tokens,
                        vocab.describe(token)
                    );
                }
                if vocab.is_eos(token) {
                    anyhow::bail!("EOS ({}) while thinking", vocab.describe(token));
                }
                if token as usize >= vocab.len() {
                    anyhow::bail!(
                        "token id {token} is outside the vocab of {} tokens",
                        vocab.len()
                    );
                }
                if vocab.is_special(token) && Some(token) != self.open_think {
                    anyhow::bail!("special {} while thinking", vocab.describe(token));
                }
                self.thinking_tokens += 1;
                Ok(())
            }
        }
    }

    /// The JSON answer is complete (EOS may be sampled).
    pub fn is_complete(&self) -> bool {
        self.phase == Phase::Answer && self.json.is_complete()
    }

    pub fn reset(&mut self) {
        self.json.reset();
        self.thinking_tokens = 0;
        self.phase = Phase::Thinking;
    }
}
