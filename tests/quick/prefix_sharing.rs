//! Calls that start together share their common prefix through the prefix
//! cache: with continuous batching, a call whose prompt starts like a
//! running call's waits until that call has computed the shared blocks and
//! starts from them, and a call arriving after another has computed them
//! starts from them at once. Each call's answer and counts are those it has
//! alone. Checked through the real backend on the roster fixtures, with
//! attention-only (qwen3) and recurrent (qwen35, nemotron_h) layers.

use crate::roster_common;

use joule::backend::{Backend, ChatMessage, GenParams, ModelRequest, ModelResponse};
use joule::inference::llm_backend::{LlmBackend, LlmOptions, StructuredMode};

/// A system message of a few hundred tokens the calls share.
fn rules() -> String {
    (1..=40)
        .map(|i| format!("Rule {i}: each agent pays energy for every token it writes."))
        .collect::<Vec<_>>()
        .join(" ")
}

fn request(agent: &str, question: &str) -> ModelRequest {
    ModelRequest {
        model: "m".into(),
        agent_id: agent.into(),
        session: 1,
        tag: "vote".into(),
        messages: vec![ChatMessage::system(rules()), ChatMessage::user(question)],
        format: Default::default(),
        params: GenParams {
            max_tokens: 12,
            temperature: 0.7,
            seed: 5,
            ignore_eos: true,
            ..GenParams::default()
        },
        observation: serde_json::Value::Null,
    }
}

fn backend(fixture: &str) -> LlmBackend {
    LlmBackend::new(
        roster_common::test_device(),
        LlmOptions {
            stand_in: Some(roster_common::fixture(fixture)),
            structured: StructuredMode::Free,
            ..LlmOptions::default()
        },
    )
}

/// What a call's answer says that must not depend on sharing.
fn key(r: &ModelResponse) -> (String, u32, u32) {
    (
        r.text.clone(),
        r.usage.prompt_tokens,
        r.usage.generated_tokens,
    )
}

#[test]
fn calls_that_start_together_share_the_prefix_and_answer_as_alone() {
    let questions = [
        "Which job do you vote for?",
        "Do you donate energy this round?",
        "Which job do you attempt?",
    ];
    for fixture in [
        "qwen3.q8_0.gguf",
        "qwen35.q8_0.gguf",
        "nemotron_h.q8_0.gguf",
    ] {
        let alone: Vec<_> = questions
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let mut b = backend(fixture);
                let r = b.generate(&[request(&format!("agent_{i}"), q)]);
                key(r[0].as_ref().expect("a call alone"))
            })
            .collect();

        // The first two together, the third once they have answered.
        let mut b = backend(fixture);
        let mut answers = Vec::new();
        {
            let step = b.stepwise().expect("continuous batching");
            step.submit(0, request("agent_0", questions[0]));
            step.submit(1, request("agent_1", questions[1]));
            while step.in_flight() > 0 {
                answers.extend(step.step());
            }
        }
        let together = b.stats();
        {
            let step = b.stepwise().expect("continuous batching");
            step.submit(2, request("agent_2", questions[2]));
            while step.in_flight() > 0 {
                answers.extend(step.step());
            }
        }
        answers.sort_by_key(|a| a.ticket);
        let got: Vec<_> = answers
            .iter()
            .map(|a| key(a.result.as_ref().expect("a call together")))
            .collect();
        assert_eq!(got, alone, "{fixture}: sharing changed an answer");

        let prompt = got[0].1 as usize;
        assert!(
            prompt > 300,
            "{fixture}: the shared prompt is {prompt} tokens"
        );
        assert_eq!(together.waited_for_prefix, 1, "{fixture}: {together:?}");
        assert!(
            together.reused_prefix_tokens >= 256,
            "{fixture}: the second call did not start from the first's blocks: {together:?}"
        );
        let all = b.stats();
        assert_eq!(all.waited_for_prefix, 1, "{fixture}: {all:?}");
        assert!(
            all.reused_prefix_tokens >= together.reused_prefix_tokens + 256,
            "{fixture}: the third call did not start from the cache: {all:?}"
        );
        assert_eq!(
            all.prompt_tokens,
            all.computed_prompt_tokens() + all.reused_own_tokens + all.reused_prefix_tokens
        );
    }
}

/// Without the prefix cache nothing waits.
#[test]
fn without_the_prefix_cache_no_call_waits() {
    let mut b = LlmBackend::new(
        roster_common::test_device(),
        LlmOptions {
            stand_in: Some(roster_common::fixture("qwen3.q8_0.gguf")),
            structured: StructuredMode::Free,
            prefix_cache_bytes: 0,
            ..LlmOptions::default()
        },
    );
    let step = b.stepwise().expect("continuous batching");
    step.submit(0, request("agent_0", "Which job do you vote for?"));
    step.submit(1, request("agent_1", "Do you donate energy this round?"));
    let mut n = 0;
    while step.in_flight() > 0 {
        n += step.step().iter().filter(|a| a.result.is_ok()).count();
    }
    assert_eq!(n, 2);
    let s = b.stats();
    assert_eq!(
        (s.waited_for_prefix, s.reused_prefix_tokens),
        (0, 0),
        "{s:?}"
    );
}
