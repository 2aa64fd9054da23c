//! The three structured outputs of the Energy Society (spec §6):
//! `AgentVote`, `AgentDecision` and `AgentJobSolution`, their JSON Schemas
//! (sent as `OutputFormat::Json`), and the parsers that turn a model's text
//! into them with the reference's validation rules. A parse error is what
//! triggers a retry inside an invocation (spec §2).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::config::Mode;

/// The four actions of a decision (spec §1 R3/R4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    AttemptJob,
    Idle,
    Donate,
    SabotageJob,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::AttemptJob => "ATTEMPT_JOB",
            Action::Idle => "IDLE",
            Action::Donate => "DONATE",
            Action::SabotageJob => "SABOTAGE_JOB",
        }
    }
    fn parse(s: &str) -> Option<Action> {
        match s {
            "ATTEMPT_JOB" => Some(Action::AttemptJob),
            "IDLE" => Some(Action::Idle),
            "DONATE" => Some(Action::Donate),
            "SABOTAGE_JOB" => Some(Action::SabotageJob),
            _ => None,
        }
    }
}

/// `AgentDecision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDecision {
    pub reasoning: String,
    pub action: Action,
    pub job_id: Option<String>,
    pub target_agent: Option<String>,
    pub amount: Option<f64>,
}

impl AgentDecision {
    /// The fallback of a failed decide invocation (spec §2): IDLE.
    pub fn fallback(invoke_error: bool) -> Self {
        AgentDecision {
            reasoning: if invoke_error {
                "ERROR: agent invoke failed.".into()
            } else {
                "ERROR: Agent failed to follow the output format. Defaulting to idle.".into()
            },
            action: Action::Idle,
            job_id: None,
            target_agent: None,
            amount: None,
        }
    }
}

/// One recommendation of a vote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub agent_id: String,
    pub recommended_action: Action,
    pub job_id: Option<String>,
    pub target_agent: Option<String>,
    pub amount: Option<f64>,
}

/// `AgentVote`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentVote {
    pub voter_id: String,
    pub overall_reasoning: String,
    pub recommendations: Vec<Recommendation>,
}

impl AgentVote {
    /// The fallback of a failed vote invocation: no recommendations.
    pub fn fallback(agent_id: &str) -> Self {
        AgentVote {
            voter_id: agent_id.into(),
            overall_reasoning: "ERROR: no valid response returned".into(),
            recommendations: vec![],
        }
    }
}

/// `AgentJobSolution`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentJobSolution {
    pub answer: String,
}

fn nullable(kind: &str) -> Value {
    json!({"anyOf": [{"type": kind}, {"type": "null"}]})
}

fn action_enum(sabotage: bool) -> Vec<&'static str> {
    let mut v = vec!["ATTEMPT_JOB", "IDLE", "DONATE"];
    if sabotage {
        v.push("SABOTAGE_JOB");
    }
    v
}

/// JSON Schema of `AgentDecision`.
pub fn decision_schema(sabotage: bool) -> Value {
    json!({
        "title": "AgentDecision",
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "action": {"type": "string", "enum": action_enum(sabotage)},
            "job_id": nullable("string"),
            "target_agent": nullable("string"),
            "amount": nullable("number"),
        },
        "required": ["reasoning", "action", "job_id", "target_agent", "amount"],
        "additionalProperties": false,
    })
}

/// JSON Schema of `AgentVote`, with at most `n_agents` recommendations.
///
/// The reference's model had no bound on the list. The bound changes nothing
/// for a parser (a vote about more agents than exist is meaningless), but it
/// lets constrained decoding close the list: without it a small model keeps
/// inventing `agent_6`, `agent_7`, … until `max_tokens` cuts the JSON off.
pub fn vote_schema(sabotage: bool, n_agents: usize) -> Value {
    json!({
        "title": "AgentVote",
        "type": "object",
        "properties": {
            "voter_id": {"type": "string"},
            "overall_reasoning": {"type": "string"},
            "recommendations": {
                "type": "array",
                "maxItems": n_agents,
                "items": {
                    "type": "object",
                    "properties": {
                        "agent_id": {"type": "string"},
                        "recommended_action": {"type": "string", "enum": action_enum(sabotage)},
                        "job_id": nullable("string"),
                        "target_agent": nullable("string"),
                        "amount": nullable("number"),
                    },
                    "required": ["agent_id", "recommended_action", "job_id", "target_agent", "amount"],
                    "additionalProperties": false,
                }
            }
        },
        "required": ["voter_id", "overall_reasoning", "recommendations"],
        "additionalProperties": false,
    })
}

/// The fields of one action variant, in the reference's order: the action
/// as a constant and `job_id`, `target_agent`, `amount` as the action needs
/// them (null where it does not).
fn action_variant(
    head: &[(&str, Value)],
    action_key: &str,
    action: &str,
    jobs: &[String],
    others: &[String],
) -> Value {
    let null = json!({"type": "null"});
    let (job, target, amount) = match action {
        "ATTEMPT_JOB" | "SABOTAGE_JOB" => (json!({"enum": jobs}), null.clone(), null.clone()),
        "DONATE" => (
            null.clone(),
            json!({"enum": others}),
            json!({"type": "number", "exclusiveMinimum": 0}),
        ),
        _ => (null.clone(), null.clone(), null),
    };
    let mut props = serde_json::Map::new();
    let mut required = Vec::new();
    for (k, v) in head {
        props.insert((*k).to_string(), v.clone());
        required.push((*k).to_string());
    }
    for (k, v) in [
        (action_key, json!({"const": action})),
        ("job_id", job),
        ("target_agent", target),
        ("amount", amount),
    ] {
        props.insert(k.to_string(), v);
        required.push(k.to_string());
    }
    json!({"type": "object", "properties": props, "required": required,
           "additionalProperties": false})
}

/// The actions that can be taken with these jobs and these other agents.
fn possible_actions(sabotage: bool, jobs: &[String], others: &[String]) -> Vec<&'static str> {
    action_enum(sabotage)
        .into_iter()
        .filter(|a| match *a {
            "ATTEMPT_JOB" | "SABOTAGE_JOB" => !jobs.is_empty(),
            "DONATE" => !others.is_empty(),
            _ => true,
        })
        .collect()
}

/// The strict form of [`decision_schema`] for constrained decoding: one
/// variant per action, each with only the fields that action needs, job ids
/// from `jobs` and donation targets from `others`. Every document it allows
/// passes [`parse_decision`] in both modes (donations are positive).
pub fn decision_schema_strict(sabotage: bool, jobs: &[String], others: &[String]) -> Value {
    let head = [("reasoning", json!({"type": "string"}))];
    let variants: Vec<Value> = possible_actions(sabotage, jobs, others)
        .into_iter()
        .map(|a| action_variant(&head, "action", a, jobs, others))
        .collect();
    json!({"title": "AgentDecision", "anyOf": variants})
}

/// The strict form of [`vote_schema`]: recommendations about the agents in
/// `agents`, each one of the action variants of [`decision_schema_strict`]
/// (donation targets: any agent).
pub fn vote_schema_strict(sabotage: bool, jobs: &[String], agents: &[String]) -> Value {
    let item = |a: &str| {
        let head = [("agent_id", json!({"enum": agents}))];
        action_variant(&head, "recommended_action", a, jobs, agents)
    };
    let variants: Vec<Value> = possible_actions(sabotage, jobs, agents)
        .into_iter()
        .map(item)
        .collect();
    json!({
        "title": "AgentVote",
        "type": "object",
        "properties": {
            "voter_id": {"enum": agents},
            "overall_reasoning": {"type": "string"},
            "recommendations": {
                "type": "array",
                "maxItems": agents.len(),
                "items": {"anyOf": variants},
            }
        },
        "required": ["voter_id", "overall_reasoning", "recommendations"],
        "additionalProperties": false,
    })
}

/// The strict form of [`solution_schema`]: the answer is one of the option
/// numbers `"0"` … `"n-1"` the solve prompt lists.
pub fn solution_schema_strict(n_options: usize) -> Value {
    let options: Vec<String> = (0..n_options).map(|i| i.to_string()).collect();
    json!({
        "title": "AgentJobSolution",
        "type": "object",
        "properties": {"answer": {"enum": options}},
        "required": ["answer"],
        "additionalProperties": false,
    })
}

/// JSON Schema of `AgentJobSolution`.
pub fn solution_schema() -> Value {
    json!({
        "title": "AgentJobSolution",
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": false,
    })
}

/// Find the JSON object in a model's text: the whole text, a fenced block,
/// or the span from the first `{` to the last `}`.
pub fn extract_json(text: &str) -> Result<Value, String> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(t) {
        return Ok(v);
    }
    if let (Some(a), Some(b)) = (t.find('{'), t.rfind('}')) {
        if a < b {
            if let Ok(v) = serde_json::from_str::<Value>(&t[a..=b]) {
                return Ok(v);
            }
        }
    }
    Err("no JSON object found in the answer".into())
}

fn obj(v: &Value) -> Result<&serde_json::Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| "expected a JSON object".to_string())
}

fn req_str(o: &serde_json::Map<String, Value>, key: &str) -> Result<String, String> {
    match o.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("field `{key}`: expected a string, got {other}")),
        None => Err(format!("field `{key}` is missing")),
    }
}

fn opt_str(o: &serde_json::Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "field `{key}`: expected a string or null, got {other}"
        )),
    }
}

fn opt_num(o: &serde_json::Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        // Pydantic coerces numeric strings to float.
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map(Some)
            .map_err(|_| format!("field `{key}`: expected a number, got {s:?}")),
        Some(other) => Err(format!(
            "field `{key}`: expected a number or null, got {other}"
        )),
    }
}

/// The action-dependent checks shared by decisions and recommendations
/// (spec §6): ATTEMPT/SABOTAGE need a non-empty job id; DONATE needs a
/// non-empty target and an amount that is neither 0 nor null. Negative
/// amounts pass in faithful mode (QUIRK-6) and fail in corrected mode.
fn check_action(
    o: &serde_json::Map<String, Value>,
    action_key: &str,
    sabotage: bool,
    mode: Mode,
) -> Result<(Action, Option<String>, Option<String>, Option<f64>), String> {
    let raw = req_str(o, action_key)?;
    let action = Action::parse(&raw)
        .filter(|a| sabotage || *a != Action::SabotageJob)
        .ok_or_else(|| {
            format!(
                "field `{action_key}`: expected one of {}, got {raw:?}",
                action_enum(sabotage).join(", ")
            )
        })?;
    let job_id = opt_str(o, "job_id")?;
    let target = opt_str(o, "target_agent")?;
    let amount = opt_num(o, "amount")?;
    match action {
        Action::AttemptJob | Action::SabotageJob => {
            if job_id.as_deref().map_or(true, |s| s.is_empty()) {
                return Err(format!("{} needs a non-empty `job_id`", action.as_str()));
            }
        }
        Action::Donate => {
            if target.as_deref().map_or(true, |s| s.is_empty()) {
                return Err("DONATE needs a non-empty `target_agent`".into());
            }
            match amount {
                None => return Err("DONATE needs an `amount`".into()),
                Some(a) if a == 0.0 => return Err("DONATE needs a non-zero `amount`".into()),
                Some(a) if mode == Mode::Corrected && !(a > 0.0 && a.is_finite()) => {
                    return Err(format!("DONATE needs a positive `amount`, got {a}"))
                }
                _ => {}
            }
        }
        Action::Idle => {}
    }
    Ok((action, job_id, target, amount))
}

/// Parse an `AgentDecision` from a model's text.
pub fn parse_decision(text: &str, sabotage: bool, mode: Mode) -> Result<AgentDecision, String> {
    let v = extract_json(text)?;
    let o = obj(&v)?;
    // Lenient in both modes: a missing reasoning is not worth a retry.
    let reasoning = opt_str(o, "reasoning")?.unwrap_or_default();
    let (action, job_id, target_agent, amount) = check_action(o, "action", sabotage, mode)?;
    Ok(AgentDecision {
        reasoning,
        action,
        job_id,
        target_agent,
        amount,
    })
}

/// Parse an `AgentVote`. Nothing checks that each active agent appears once
/// or that `voter_id` names the caller (spec §6).
pub fn parse_vote(text: &str, sabotage: bool, mode: Mode) -> Result<AgentVote, String> {
    let v = extract_json(text)?;
    let o = obj(&v)?;
    let voter_id = req_str(o, "voter_id")?;
    let overall_reasoning = opt_str(o, "overall_reasoning")?.unwrap_or_default();
    let recs = match o.get("recommendations") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format!(
                "field `recommendations`: expected a list, got {other}"
            ))
        }
        None => return Err("field `recommendations` is missing".into()),
    };
    let mut recommendations = Vec::with_capacity(recs.len());
    for (i, r) in recs.iter().enumerate() {
        let ro = obj(r).map_err(|e| format!("recommendations[{i}]: {e}"))?;
        let agent_id = req_str(ro, "agent_id").map_err(|e| format!("recommendations[{i}]: {e}"))?;
        let (a, job_id, target_agent, amount) =
            check_action(ro, "recommended_action", sabotage, mode)
                .map_err(|e| format!("recommendations[{i}]: {e}"))?;
        recommendations.push(Recommendation {
            agent_id,
            recommended_action: a,
            job_id,
            target_agent,
            amount,
        });
    }
    Ok(AgentVote {
        voter_id,
        overall_reasoning,
        recommendations,
    })
}

/// Parse an `AgentJobSolution`. A bare number is accepted as the answer
/// text (the reference's tool schema coerced it).
pub fn parse_solution(text: &str) -> Result<AgentJobSolution, String> {
    let v = extract_json(text)?;
    let o = obj(&v)?;
    let answer = match o.get("answer") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => return Err(format!("field `answer`: expected a string, got {other}")),
        None => return Err("field `answer` is missing".into()),
    };
    Ok(AgentJobSolution { answer })
}

/// Normalise a decision's job id (spec §6): an id not starting with `job_`
/// gets the prefix (`"3"` → `job_3`). Faithful mode prefixes quoted ids as
/// they are (`"\"job_9\""` → `job_"job_9"`, invalid); corrected mode strips
/// quotes and whitespace first.
pub fn normalise_job_id(raw: &str, mode: Mode) -> String {
    let s = match mode {
        Mode::Faithful => raw.to_string(),
        Mode::Corrected => raw
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .trim()
            .to_string(),
    };
    if s.starts_with("job_") {
        s
    } else {
        format!("job_{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vote_schema_bounds_the_list_by_the_number_of_agents() {
        let s = vote_schema(true, 5);
        assert_eq!(s["properties"]["recommendations"]["maxItems"], 5);
        let actions = &s["properties"]["recommendations"]["items"]["properties"]
            ["recommended_action"]["enum"];
        assert_eq!(actions.as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn decisions_validate_like_the_reference() {
        let d = parse_decision(
            r#"{"reasoning":"r","action":"ATTEMPT_JOB","job_id":"3","target_agent":null,"amount":null}"#,
            false,
            Mode::Faithful,
        )
        .unwrap();
        assert_eq!(d.action, Action::AttemptJob);
        assert_eq!(d.job_id.as_deref(), Some("3"));
        assert!(parse_decision(
            r#"{"reasoning":"r","action":"ATTEMPT_JOB"}"#,
            false,
            Mode::Faithful
        )
        .unwrap_err()
        .contains("job_id"));
        let neg = r#"{"reasoning":"r","action":"DONATE","target_agent":"agent_2","amount":-5}"#;
        assert_eq!(
            parse_decision(neg, false, Mode::Faithful).unwrap().amount,
            Some(-5.0)
        );
        assert!(parse_decision(neg, false, Mode::Corrected).is_err());
        let zero = r#"{"reasoning":"r","action":"DONATE","target_agent":"agent_2","amount":0}"#;
        assert!(parse_decision(zero, false, Mode::Faithful).is_err());
        let sab = r#"{"reasoning":"r","action":"SABOTAGE_JOB","job_id":"job_1"}"#;
        assert!(parse_decision(sab, false, Mode::Faithful).is_err());
        assert!(parse_decision(sab, true, Mode::Faithful).is_ok());
        // Fields that do not apply are not checked.
        let idle = r#"Sure! {"reasoning":"r","action":"IDLE","job_id":"job_4"} done"#;
        assert_eq!(
            parse_decision(idle, false, Mode::Faithful).unwrap().action,
            Action::Idle
        );
        assert!(parse_decision("I will attempt job 3", false, Mode::Faithful).is_err());
    }

    #[test]
    fn job_ids_are_prefixed_and_quotes_kept_in_faithful() {
        assert_eq!(normalise_job_id("3", Mode::Faithful), "job_3");
        assert_eq!(normalise_job_id("job_3", Mode::Faithful), "job_3");
        assert_eq!(
            normalise_job_id("\"job_9\"", Mode::Faithful),
            "job_\"job_9\""
        );
        assert_eq!(normalise_job_id("\"job_9\"", Mode::Corrected), "job_9");
    }

    #[test]
    fn votes_and_solutions_parse() {
        let v = parse_vote(
            r#"{"voter_id":"agent_9","overall_reasoning":"x","recommendations":[
              {"agent_id":"agent_1","recommended_action":"ATTEMPT_JOB","job_id":"job_1","target_agent":null,"amount":null},
              {"agent_id":"agent_1","recommended_action":"DONATE","job_id":null,"target_agent":"agent_2","amount":100}]}"#,
            false,
            Mode::Faithful,
        )
        .unwrap();
        assert_eq!(v.voter_id, "agent_9");
        assert_eq!(v.recommendations.len(), 2);
        assert!(parse_vote(
            r#"{"voter_id":"a","overall_reasoning":"x","recommendations":[{"agent_id":"b","recommended_action":"DONATE","target_agent":"c"}]}"#,
            false,
            Mode::Faithful
        )
        .is_err());
        assert_eq!(parse_solution(r#"{"answer": 7}"#).unwrap().answer, "7");
        assert_eq!(
            parse_solution("```json\n{\"answer\": \"3\"}\n```")
                .unwrap()
                .answer,
            "3"
        );
    }
}
