//! Scripted race agents: the reference strategies AS, AU, CS
//! and CAS (§7.1, §2) and a seeded 50/50 random player, as
//! [`crate::scripted::Policy`] impls. They read the structured observation
//! of a `race.decide` request (never the prompt) and answer with the
//! contract line `ACTION: SAFE|UNSAFE` (or the opaque code when the
//! observation names a code mapping). `sloppy` answers correctly but in
//! prose half of the time, to exercise the parser, retries and fallback.
//! The audit's `oracle` and `sloppy` probe answerers live in [`super::audit`].

use anyhow::Context;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::egt::Strategy;
use super::parser::CodeMapping;
use super::rules::Action;
use crate::backend::ModelRequest;
use crate::scripted::{Policy, ScriptedBackend};

/// The observation fields a scripted race agent needs.
pub struct DecideView {
    pub others_prev: Option<Vec<Action>>,
    pub mapping: Option<CodeMapping>,
}

/// Read a `race.decide` observation.
pub fn decide_view(req: &ModelRequest) -> anyhow::Result<DecideView> {
    let obs = &req.observation;
    anyhow::ensure!(
        obs.get("kind").and_then(|k| k.as_str()) == Some("race.decide"),
        "scripted race agents answer `race.decide` observations, got {}",
        obs.get("kind")
            .map(|k| k.to_string())
            .unwrap_or_else(|| "none".into())
    );
    let prev = obs
        .get("others_prev_actions")
        .context("observation lacks `others_prev_actions`")?;
    let others_prev = if prev.is_null() {
        None
    } else {
        Some(
            serde_json::from_value::<Vec<Action>>(prev.clone())
                .context("observation field `others_prev_actions` must be a list of safe/unsafe")?,
        )
    };
    let mapping = match obs.get("code_mapping") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value::<CodeMapping>(v.clone())
                .context("observation field `code_mapping` must be safe_p or safe_q")?,
        ),
    };
    Ok(DecideView {
        others_prev,
        mapping,
    })
}

/// The contract line for an action under an optional code mapping.
pub fn action_line(action: Action, mapping: Option<CodeMapping>) -> String {
    match mapping {
        None => format!("ACTION: {}", action.label()),
        Some(m) => format!("ACTION: {}", m.code_of(action)),
    }
}

/// A reference strategy as a scripted agent.
pub struct StrategyPolicy(pub Strategy);

impl Policy for StrategyPolicy {
    fn respond(&self, req: &ModelRequest, _rng: &mut ChaCha8Rng) -> anyhow::Result<String> {
        let v = decide_view(req)?;
        Ok(action_line(self.0.act(v.others_prev.as_deref()), v.mapping))
    }
}

/// A 50/50 random player, seeded by the request (sampling seed, agent, tag).
pub struct RandomPolicy;

impl Policy for RandomPolicy {
    fn respond(&self, req: &ModelRequest, rng: &mut ChaCha8Rng) -> anyhow::Result<String> {
        let v = decide_view(req)?;
        let a = if rng.gen_bool(0.5) {
            Action::Unsafe
        } else {
            Action::Safe
        };
        Ok(action_line(a, v.mapping))
    }
}

/// A random player that wraps its answer in prose half of the time (each
/// retry has a new seed, so most turns recover; some fall back to SAFE).
pub struct SloppyPolicy;

impl Policy for SloppyPolicy {
    fn respond(&self, req: &ModelRequest, rng: &mut ChaCha8Rng) -> anyhow::Result<String> {
        if req.observation.get("kind").and_then(|k| k.as_str()) == Some("race.probe") {
            return super::audit::sloppy_answer(req, rng);
        }
        let v = decide_view(req)?;
        let a = if rng.gen_bool(0.5) {
            Action::Unsafe
        } else {
            Action::Safe
        };
        let line = action_line(a, v.mapping);
        Ok(if rng.gen_bool(0.5) {
            format!("I weigh the risk first.\n{line}")
        } else {
            line
        })
    }
}

/// Register every scripted race agent: `AS`, `AU`, `CS`, `CAS`, `random`,
/// `sloppy` and the audit's `oracle`.
pub fn register_race_policies(backend: &mut ScriptedBackend) {
    for s in super::egt::STRATEGIES {
        backend.register(s.name(), Box::new(StrategyPolicy(s)));
    }
    backend.register("random", Box::new(RandomPolicy));
    backend.register("sloppy", Box::new(SloppyPolicy));
    backend.register("oracle", Box::new(super::audit::OraclePolicy));
}
