//! Scripted (non-LLM) agents behind the same [`Backend`] interface as real
//! models. A request whose model is `scripted:<policy>` is answered by the
//! registered [`Policy`] of that name, which reads the request's structured
//! `observation` (never the prompt) and writes the text a model would have
//! written. Token counts are drawn from a configurable [`TokenDist`], so the
//! energy economy runs exactly as it would with a model.
//!
//! Randomness is derived from the request's own seed, agent and tag, so the
//! answer to a request does not depend on how requests were batched.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::backend::{
    Backend, BackendError, FinishReason, ModelRequest, ModelResponse, ModelResult, TokenUsage,
    SCRIPTED_PREFIX,
};

/// A non-LLM decision rule.
pub trait Policy {
    /// Produce the answer text for `request` (e.g. the JSON a model would
    /// return). `rng` is seeded from the request alone.
    fn respond(&self, request: &ModelRequest, rng: &mut ChaCha8Rng) -> anyhow::Result<String>;
}

/// How many tokens a scripted answer "costs".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenDist {
    /// Always the same count.
    Fixed { tokens: u32 },
    /// Uniform on `[min, max]`.
    Uniform { min: u32, max: u32 },
    /// Log-normal with the given median and log-space sigma, clamped to
    /// `[1, max]` (reasoning-model answers are heavy-tailed).
    LogNormal { median: f64, sigma: f64, max: u32 },
}

impl Default for TokenDist {
    fn default() -> Self {
        TokenDist::LogNormal {
            median: 600.0,
            sigma: 0.6,
            max: 8000,
        }
    }
}

impl TokenDist {
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            TokenDist::Fixed { .. } => Ok(()),
            TokenDist::Uniform { min, max } if min > max => Err(format!(
                "uniform token distribution needs min <= max, got min={min}, max={max}"
            )),
            TokenDist::Uniform { .. } => Ok(()),
            TokenDist::LogNormal { median, sigma, max } => {
                if !(median > 0.0 && median.is_finite()) {
                    Err(format!(
                        "log_normal median must be a positive number, got {median}"
                    ))
                } else if !(sigma >= 0.0 && sigma.is_finite()) {
                    Err(format!("log_normal sigma must be >= 0, got {sigma}"))
                } else if max == 0 {
                    Err("log_normal max must be at least 1".into())
                } else {
                    Ok(())
                }
            }
        }
    }

    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        match *self {
            TokenDist::Fixed { tokens } => tokens,
            TokenDist::Uniform { min, max } => rng.gen_range(min..=max),
            TokenDist::LogNormal { median, sigma, max } => {
                // Box-Muller standard normal.
                let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
                let u2: f64 = rng.gen();
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                let x = (median.ln() + sigma * z).exp().round();
                (x.max(1.0) as u64).min(max as u64) as u32
            }
        }
    }
}

/// A backend of named scripted policies.
#[derive(Default)]
pub struct ScriptedBackend {
    policies: BTreeMap<String, Box<dyn Policy>>,
    tokens: TokenDist,
}

impl ScriptedBackend {
    pub fn new(tokens: TokenDist) -> Self {
        Self {
            policies: BTreeMap::new(),
            tokens,
        }
    }

    /// Register `policy` under `name`; requests for `scripted:<name>` go to it.
    pub fn register(&mut self, name: impl Into<String>, policy: Box<dyn Policy>) -> &mut Self {
        self.policies.insert(name.into(), policy);
        self
    }

    pub fn policy_names(&self) -> Vec<String> {
        self.policies.keys().cloned().collect()
    }

    fn answer(&self, req: &ModelRequest) -> ModelResult {
        let err = |message: String| BackendError {
            model: req.model.clone(),
            message,
            partial_usage: None,
        };
        let name = req.model.strip_prefix(SCRIPTED_PREFIX).ok_or_else(|| {
            err(format!(
                "not a scripted model key (expected `{SCRIPTED_PREFIX}<policy>`)"
            ))
        })?;
        let policy = self.policies.get(name).ok_or_else(|| {
            err(format!(
                "unknown scripted policy `{name}`; known: {}",
                self.policy_names().join(", ")
            ))
        })?;
        let mut rng = request_rng(req);
        let text = policy
            .respond(req, &mut rng)
            .map_err(|e| err(format!("{e:#}")))?;
        let tokens = self
            .tokens
            .sample(&mut rng)
            .min(req.params.max_tokens.max(1));
        Ok(ModelResponse {
            text,
            thinking: String::new(),
            usage: TokenUsage {
                prompt_tokens: 0,
                generated_tokens: tokens,
                thinking_tokens: 0,
                charged_tokens: tokens,
                eos_counted: false,
            },
            finish: FinishReason::Scripted,
            rendered_prompt: None,
            latency_ms: 0.0,
            measured: None,
            count_source: Some(crate::backend::CountSource {
                charged: "token draw".into(),
                counted_by: "scripted".into(),
                thinking: None,
            }),
        })
    }
}

/// A generator seeded by the request's seed, agent and tag (FNV-1a mix), so
/// answers do not depend on batching or on other agents.
pub fn request_rng(req: &ModelRequest) -> ChaCha8Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in req.agent_id.bytes().chain([0u8]).chain(req.tag.bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ChaCha8Rng::seed_from_u64(req.params.seed ^ h)
}

impl Backend for ScriptedBackend {
    fn name(&self) -> String {
        "scripted".into()
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        batch.iter().map(|r| self.answer(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Constant;
    impl Policy for Constant {
        fn respond(&self, _r: &ModelRequest, rng: &mut ChaCha8Rng) -> anyhow::Result<String> {
            Ok(format!("{}", rng.gen_range(0..1000)))
        }
    }

    fn req(agent: &str, seed: u64) -> ModelRequest {
        ModelRequest {
            model: "scripted:const".into(),
            session: 0,
            agent_id: agent.into(),
            tag: "t".into(),
            messages: vec![],
            format: Default::default(),
            params: crate::backend::GenParams {
                seed,
                ..Default::default()
            },
            observation: serde_json::Value::Null,
        }
    }

    #[test]
    fn answers_do_not_depend_on_batching() {
        let mut b = ScriptedBackend::new(TokenDist::Uniform { min: 10, max: 20 });
        b.register("const", Box::new(Constant));
        let alone = b.generate(&[req("a", 7)]);
        let batched = b.generate(&[req("b", 7), req("a", 7)]);
        assert_eq!(alone[0].as_ref().unwrap(), batched[1].as_ref().unwrap());
        let t = alone[0].as_ref().unwrap().usage.charged_tokens;
        assert!((10..=20).contains(&t));
    }

    #[test]
    fn unknown_policy_is_a_backend_error() {
        let mut b = ScriptedBackend::default();
        let mut r = req("a", 1);
        r.model = "scripted:nope".into();
        let out = b.generate(&[r]);
        assert!(out[0]
            .as_ref()
            .unwrap_err()
            .message
            .contains("unknown scripted policy"));
    }

    #[test]
    fn token_dist_validation_names_the_problem() {
        assert!(TokenDist::Uniform { min: 5, max: 1 }
            .validate()
            .unwrap_err()
            .contains("min <= max"));
        assert!(TokenDist::LogNormal {
            median: -1.0,
            sigma: 0.5,
            max: 10
        }
        .validate()
        .is_err());
    }
}
