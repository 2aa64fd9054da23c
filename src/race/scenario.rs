//! One race as an `async` scenario (spec §1.2, §3): every round each seat
//! gets the same pre-round snapshot as a prompt (one user message) plus a
//! structured observation, all seats are asked at once through the
//! [`Agency`], failed parses are resent unchanged with the retry sampling
//! seed (up to `max_parse_retries`), a final failure falls back to SAFE and
//! contaminates the race, and the engine alone resolves the round. Every
//! turn and every race is appended to the run's logs as it happens.

use std::cell::RefCell;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use super::engine::{Race, RaceResult, RaceRules, RoundRecord, Snapshot};
use super::parser::{parse_action, parse_code_action, CodeMapping, ParsedAction};
use super::prompt::{render_prompt, seat_names, Persona, PromptCondition, SeatView};
use super::rng::sampling_seed;
use super::rules::{Action, PROGRESS_TOL};
use crate::agency::Agency;
use crate::backend::{ChatMessage, GenParams, ModelRequest};
use crate::record::EventLog;

/// Everything that defines one race.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GameSpec {
    pub game_id: String,
    pub lineup: String,
    /// Model key per seat (`scripted:AU`, a manifest model name, ...).
    pub models: Vec<String>,
    pub rules: RaceRules,
    pub rep: u32,
    pub game_seed: i64,
    pub persona_condition: String,
    pub personas: Vec<Option<Persona>>,
    pub prompt: PromptCondition,
    pub max_parse_retries: u32,
    pub params: GenParams,
    pub sampling_seed_applied: bool,
    pub run_phase: String,
}

/// One attempt at a decision (§3.2 `attempt_history`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt: u32,
    pub sampling_seed: Option<i64>,
    pub sampling_seed_applied: bool,
    pub raw_response: String,
    pub parse_failed: bool,
    pub parsed_action: Option<Action>,
    pub generated_tokens: u32,
}

/// Relative position before a round: Leader = highest
/// progress or tied for it, Trailer = strictly last, Middle = the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    Leader,
    Middle,
    Trailer,
}

pub fn position_of(progress: &[f64], seat: usize) -> Position {
    let own = progress[seat];
    let max = progress.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if own >= max - PROGRESS_TOL {
        return Position::Leader;
    }
    let strictly_last = progress
        .iter()
        .enumerate()
        .all(|(i, &p)| i == seat || p > own + PROGRESS_TOL);
    if strictly_last {
        Position::Trailer
    } else {
        Position::Middle
    }
}

/// One seat's decision in one round (§3.4 TurnRecord field names).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnRecord {
    pub game_id: String,
    pub lineup: String,
    pub model: String,
    pub n_players: usize,
    pub max_private_risk: f64,
    pub prompt_version: String,
    pub run_phase: String,
    pub persona_condition: String,
    pub seat_persona_role: String,
    pub persona_band: String,
    pub rep: u32,
    pub game_seed: i64,
    pub sampling_seed: Option<i64>,
    pub sampling_seed_applied: bool,
    pub round: u32,
    pub player: String,
    pub player_index: usize,
    pub opponent: String,
    pub others: Vec<String>,
    pub position: Position,
    pub code_mapping: Option<String>,
    pub action: Action,
    #[serde(rename = "unsafe")]
    pub unsafe_: bool,
    pub parse_failed: bool,
    pub retry_count: u32,
    pub reasoning: String,
    pub raw_response: String,
    pub prompt: String,
    pub own_prev_action: Option<Action>,
    pub opponent_prev_action: Option<Action>,
    pub others_prev_actions: Option<Vec<Action>>,
    pub own_progress_before: f64,
    pub opponent_progress_before: f64,
    pub others_progress_before: Vec<f64>,
    pub progress_gap_before: f64,
    pub own_stage_payoff_before: f64,
    pub opponent_stage_payoff_before: f64,
    pub own_private_risk_before: f64,
    pub opponent_private_risk_before: f64,
    pub round_payoff: f64,
    pub step_increment: f64,
    pub own_progress_after: f64,
    pub opponent_progress_after: f64,
    pub progress_gap_after: f64,
    pub cumulative_stage_payoff_after: f64,
    pub unsafe_count_after: u32,
    pub unsafe_fraction_after: f64,
    pub current_private_risk_after: f64,
    pub stop_draw: Option<f64>,
    pub stopped: bool,
    pub attempt_history: Vec<Attempt>,
    pub logprobs: Option<serde_json::Value>,
    pub latency_ms: f64,
}

/// The per-race record (§3.4 GameResult / races.csv).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RaceRecord {
    pub game_id: String,
    pub lineup: String,
    pub models: Vec<String>,
    pub n_players: usize,
    pub max_private_risk: f64,
    pub prompt_version: String,
    pub persona_condition: String,
    pub personas: Vec<String>,
    pub rep: u32,
    pub game_seed: i64,
    pub result: RaceResult,
    /// Turns whose final attempt failed to parse (SAFE fallback used).
    pub parse_failures: u32,
    /// Attempts that failed to parse, retries included.
    pub failed_attempts: u32,
    /// Any final parse failure: excluded from behavioural estimands (§3.2).
    pub any_parse_failure: bool,
    pub exclusion_reasons: Vec<String>,
}

/// The seat counts a race supports (§1.1).
pub const PLAYERS: std::ops::RangeInclusive<usize> = 2..=5;

impl RaceRecord {
    /// The turns a finished race records in `turns.jsonl`: one per seat in
    /// each of its rounds.
    pub fn turns(&self) -> usize {
        self.result.n_rounds as usize * self.n_players
    }

    /// A record read back from `races.jsonl` is whole: 2 to 5 seats, one
    /// model, persona and result per seat, and a winner among them. The
    /// error names the field and what it should hold.
    pub fn check(&self) -> anyhow::Result<()> {
        let n = self.n_players;
        anyhow::ensure!(!self.game_id.is_empty(), "`game_id` is empty");
        anyhow::ensure!(
            PLAYERS.contains(&n),
            "`n_players` is {n}; a race has 2 to 5 seats"
        );
        for (field, len) in [
            ("models", self.models.len()),
            ("personas", self.personas.len()),
            ("result.seats", self.result.seats.len()),
        ] {
            anyhow::ensure!(
                len == n,
                "`{field}` has {len} entries for {n} seats (`n_players`); expected one per seat"
            );
        }
        if let Some(w) = self.result.winner {
            anyhow::ensure!(
                w < n,
                "`result.winner` is seat {w}; expected a seat index below {n} (`n_players`)"
            );
        }
        Ok(())
    }
}

impl TurnRecord {
    /// A record read back from `turns.jsonl` names a seat of its race:
    /// 2 to 5 seats and `player_index` below `n_players`.
    pub fn check(&self) -> anyhow::Result<()> {
        let n = self.n_players;
        anyhow::ensure!(
            PLAYERS.contains(&n),
            "`n_players` is {n}; a race has 2 to 5 seats"
        );
        anyhow::ensure!(
            self.player_index < n,
            "`player_index` is {}; expected a seat index below {n} (`n_players`)",
            self.player_index
        );
        Ok(())
    }
}

/// Where a race writes its records.
pub struct RaceSink {
    pub turns: EventLog,
    pub races: EventLog,
}

/// Mean of the co-players' values (for N > 2 "opponent" summaries use the
/// best co-player, matching `progress_gap` = own − max(others)).
fn best_other(v: &[f64], seat: usize) -> f64 {
    v.iter()
        .enumerate()
        .filter(|&(i, _)| i != seat)
        .map(|(_, &x)| x)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// The observation scripted agents read (the same facts as the prompt).
fn observation(
    spec: &GameSpec,
    seat: usize,
    s: &Snapshot,
    race: &Race,
    mapping: Option<CodeMapping>,
) -> serde_json::Value {
    let prev = race.history().last();
    serde_json::json!({
        "kind": "race.decide",
        "game_id": spec.game_id,
        "round": s.completed + 1,
        "player_index": seat,
        "n_players": spec.rules.n_players,
        "p_max": spec.rules.p_max,
        "progress": s.progress,
        "stage_payoffs": s.stage_payoffs,
        "unsafe_counts": s.unsafe_counts,
        "own_prev_action": prev.map(|r| r.actions[seat]),
        "others_prev_actions": prev.map(|r| r.actions.iter().enumerate()
            .filter(|&(i, _)| i != seat).map(|(_, a)| *a).collect::<Vec<_>>()),
        "history": race.history().iter().map(|r| &r.actions).collect::<Vec<_>>(),
        "code_mapping": mapping,
    })
}

/// What every round of one race shares, fixed before round 1.
struct RaceSetup<'a> {
    spec: &'a GameSpec,
    /// The seats' names in the prompts.
    names: Vec<String>,
    /// The action codes of this repetition, if the prompt uses codes.
    mapping: Option<CodeMapping>,
    prompt_version: String,
}

/// The seats' answers in one round, after the parse retries.
struct Answers {
    /// Every attempt of each seat, the last one deciding.
    attempts: Vec<Vec<Attempt>>,
    /// Each seat's final parse (SAFE when it failed).
    parsed: Vec<ParsedAction>,
    /// Each seat's latency summed over its attempts.
    latency: Vec<f64>,
    /// Attempts that failed to parse, retries included.
    failed_attempts: u32,
    /// Seats whose final attempt failed to parse.
    parse_failures: u32,
}

/// One round as played: what the seats saw, what they answered, and what
/// the engine made of it.
struct PlayedRound {
    round: u32,
    /// The snapshot every seat was shown.
    before: Snapshot,
    prompts: Vec<String>,
    answers: Answers,
    actions: Vec<Action>,
    rec: RoundRecord,
}

/// Play one race to the end, logging every turn and the result.
pub async fn play_race(
    agency: Agency,
    spec: GameSpec,
    sink: Rc<RefCell<RaceSink>>,
) -> anyhow::Result<RaceRecord> {
    let n = spec.rules.n_players;
    anyhow::ensure!(
        spec.models.len() == n,
        "game {}: {} models for {n} seats",
        spec.game_id,
        spec.models.len()
    );
    let setup = RaceSetup {
        spec: &spec,
        names: seat_names(n, &spec.prompt),
        mapping: spec.prompt.mapping(spec.rep)?,
        prompt_version: spec.prompt.prompt_version(),
    };
    let mut race = Race::new(spec.rules, spec.game_seed);
    let (mut parse_failures, mut failed_attempts) = (0u32, 0u32);
    while !race.is_over() {
        let before = race.snapshot().clone();
        let round = before.completed + 1;
        let (prompts, requests) = round_requests(&setup, &race, &before, round)?;
        let answers = ask_seats(&agency, &setup, round, &requests).await?;
        parse_failures += answers.parse_failures;
        failed_attempts += answers.failed_attempts;
        let actions: Vec<Action> = answers.parsed.iter().map(|p| p.action).collect();
        let rec = race.play_round(&actions)?.clone();
        let played = PlayedRound {
            round,
            before,
            prompts,
            answers,
            actions,
            rec,
        };
        let mut sink = sink.borrow_mut();
        for seat in 0..n {
            sink.turns
                .write(&turn_record(&setup, &race, &played, seat))?;
        }
    }
    let record = race_record(&setup, &race, parse_failures, failed_attempts)?;
    sink.borrow_mut().races.write(&record)?;
    Ok(record)
}

/// Each seat's prompt for this round and the request carrying it (first
/// attempt's sampling seed), all from the same pre-round snapshot.
fn round_requests(
    setup: &RaceSetup,
    race: &Race,
    snap: &Snapshot,
    round: u32,
) -> anyhow::Result<(Vec<String>, Vec<ModelRequest>)> {
    let spec = setup.spec;
    let n = spec.rules.n_players;
    let mut prompts = Vec::with_capacity(n);
    let mut requests = Vec::with_capacity(n);
    for seat in 0..n {
        let view = SeatView {
            seat,
            names: &setup.names,
            personas: &spec.personas,
            p_max: spec.rules.p_max,
            snapshot: snap,
            history: race.history(),
        };
        let prompt = render_prompt(&spec.prompt, spec.rep, &view)?;
        let mut params = spec.params.clone();
        params.seed = sampling_seed(spec.game_seed, round, seat, 0) as u64;
        requests.push(ModelRequest {
            model: spec.models[seat].clone(),
            session: 0,
            agent_id: format!("{}::{}", spec.game_id, setup.names[seat]),
            tag: format!("race.decide.r{round}"),
            messages: vec![ChatMessage::user(prompt.clone())],
            format: Default::default(),
            params,
            observation: observation(spec, seat, snap, race, setup.mapping),
        });
        prompts.push(prompt);
    }
    Ok((prompts, requests))
}

/// Ask every seat at once; resend the requests whose answer failed to parse,
/// unchanged but for the retry's sampling seed and tag, up to
/// `max_parse_retries` times. A seat whose last answer still fails keeps
/// the parser's SAFE fallback.
async fn ask_seats(
    agency: &Agency,
    setup: &RaceSetup<'_>,
    round: u32,
    requests: &[ModelRequest],
) -> anyhow::Result<Answers> {
    let spec = setup.spec;
    let n = spec.rules.n_players;
    let mut attempts: Vec<Vec<Attempt>> = vec![Vec::new(); n];
    let mut parsed: Vec<Option<ParsedAction>> = vec![None; n];
    let mut latency = vec![0.0; n];
    let mut failed_attempts = 0u32;
    let mut pending: Vec<usize> = (0..n).collect();
    for attempt in 0..=spec.max_parse_retries {
        if pending.is_empty() {
            break;
        }
        let batch: Vec<ModelRequest> = pending
            .iter()
            .map(|&seat| {
                let mut r = requests[seat].clone();
                r.params.seed = sampling_seed(spec.game_seed, round, seat, attempt) as u64;
                if attempt > 0 {
                    r.tag = format!("race.decide.r{round}.retry{attempt}");
                }
                r
            })
            .collect();
        let answers = agency.call_all(batch).await;
        let mut still = Vec::new();
        for (&seat, answer) in pending.iter().zip(answers) {
            let resp = answer.map_err(|e| {
                anyhow::anyhow!("game {} round {round} seat {seat}: {e}", spec.game_id)
            })?;
            let p = match setup.mapping {
                None => parse_action(&resp.text),
                Some(m) => parse_code_action(&resp.text, m).0,
            };
            latency[seat] += resp.latency_ms;
            attempts[seat].push(Attempt {
                attempt,
                sampling_seed: spec
                    .sampling_seed_applied
                    .then(|| sampling_seed(spec.game_seed, round, seat, attempt)),
                sampling_seed_applied: spec.sampling_seed_applied,
                raw_response: resp.text.clone(),
                parse_failed: p.parse_failed,
                parsed_action: (!p.parse_failed).then_some(p.action),
                generated_tokens: resp.usage.generated_tokens,
            });
            if p.parse_failed {
                failed_attempts += 1;
                still.push(seat);
            }
            parsed[seat] = Some(p);
        }
        pending = still;
    }
    Ok(Answers {
        attempts,
        parsed: parsed
            .into_iter()
            .map(|p| p.expect("every seat was asked at least once"))
            .collect(),
        latency,
        failed_attempts,
        parse_failures: pending.len() as u32,
    })
}

/// Seat `seat`'s turn record of a round just played: `race` is the race
/// after the round, `played.before` the snapshot the seat was shown.
fn turn_record(setup: &RaceSetup, race: &Race, played: &PlayedRound, seat: usize) -> TurnRecord {
    let spec = setup.spec;
    let n = spec.rules.n_players;
    let names = &setup.names;
    let (snap, rec, a) = (&played.before, &played.rec, &played.answers);
    let after = race.snapshot();
    let others: Vec<usize> = (0..n).filter(|&i| i != seat).collect();
    let first_other = others[0];
    let last = a.attempts[seat].last().expect("at least one attempt");
    let prev = race
        .history()
        .len()
        .checked_sub(2)
        .map(|i| &race.history()[i]);
    let risk_after =
        spec.rules.p_max * after.unsafe_counts[seat] as f64 / after.completed as f64 * 100.0;
    TurnRecord {
        game_id: spec.game_id.clone(),
        lineup: spec.lineup.clone(),
        model: spec.models[seat].clone(),
        n_players: n,
        max_private_risk: spec.rules.p_max,
        prompt_version: setup.prompt_version.clone(),
        run_phase: spec.run_phase.clone(),
        persona_condition: spec.persona_condition.clone(),
        seat_persona_role: spec.personas[seat]
            .as_ref()
            .map(|p| p.role.clone())
            .unwrap_or_else(|| "none".into()),
        persona_band: super::prompt::band_of(spec.personas[seat].as_ref()),
        rep: spec.rep,
        game_seed: spec.game_seed,
        sampling_seed: last.sampling_seed,
        sampling_seed_applied: spec.sampling_seed_applied,
        round: played.round,
        player: names[seat].clone(),
        player_index: seat,
        opponent: names[first_other].clone(),
        others: others.iter().map(|&o| names[o].clone()).collect(),
        position: position_of(&snap.progress, seat),
        code_mapping: setup.mapping.map(|m| m.as_str().to_string()),
        action: played.actions[seat],
        unsafe_: played.actions[seat].is_unsafe(),
        parse_failed: a.parsed[seat].parse_failed,
        retry_count: last.attempt,
        reasoning: a.parsed[seat].reasoning.clone(),
        raw_response: last.raw_response.clone(),
        prompt: played.prompts[seat].clone(),
        own_prev_action: prev.map(|r| r.actions[seat]),
        opponent_prev_action: prev.map(|r| r.actions[first_other]),
        others_prev_actions: prev.map(|r| others.iter().map(|&o| r.actions[o]).collect()),
        own_progress_before: snap.progress[seat],
        opponent_progress_before: best_other(&snap.progress, seat),
        others_progress_before: others.iter().map(|&o| snap.progress[o]).collect(),
        progress_gap_before: snap.gap(seat),
        own_stage_payoff_before: snap.stage_payoffs[seat],
        opponent_stage_payoff_before: snap.stage_payoffs[first_other],
        own_private_risk_before: snap.current_risk_pct(seat, spec.rules.p_max),
        opponent_private_risk_before: snap.current_risk_pct(first_other, spec.rules.p_max),
        round_payoff: rec.payoffs[seat],
        step_increment: rec.increments[seat],
        own_progress_after: after.progress[seat],
        opponent_progress_after: best_other(&after.progress, seat),
        progress_gap_after: after.gap(seat),
        cumulative_stage_payoff_after: after.stage_payoffs[seat],
        unsafe_count_after: after.unsafe_counts[seat],
        unsafe_fraction_after: after.unsafe_counts[seat] as f64 / after.completed as f64,
        current_private_risk_after: risk_after,
        stop_draw: rec.stop_draw,
        stopped: rec.stopped,
        attempt_history: a.attempts[seat].clone(),
        logprobs: None,
        latency_ms: a.latency[seat],
    }
}

/// The per-race record of a finished race, with its exclusion reasons
/// (any parse failure, a forced stop, a non-canonical risk).
fn race_record(
    setup: &RaceSetup,
    race: &Race,
    parse_failures: u32,
    failed_attempts: u32,
) -> anyhow::Result<RaceRecord> {
    let spec = setup.spec;
    let result = race
        .result()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("race {} ended without a result", spec.game_id))?;
    let mut exclusion_reasons = Vec::new();
    if parse_failures > 0 {
        exclusion_reasons.push("any_parse_failure".to_string());
    }
    if result.stop_forced {
        exclusion_reasons.push("stop_forced".to_string());
    }
    if !super::rules::CANONICAL_PMAX
        .iter()
        .any(|&p| (p - spec.rules.p_max).abs() < 1e-12)
    {
        exclusion_reasons.push("non_canonical_risk".to_string());
    }
    Ok(RaceRecord {
        game_id: spec.game_id.clone(),
        lineup: spec.lineup.clone(),
        models: spec.models.clone(),
        n_players: spec.rules.n_players,
        max_private_risk: spec.rules.p_max,
        prompt_version: setup.prompt_version.clone(),
        persona_condition: spec.persona_condition.clone(),
        personas: spec
            .personas
            .iter()
            .map(|p| {
                p.as_ref()
                    .map(|p| p.id.clone())
                    .unwrap_or_else(|| "none".into())
            })
            .collect(),
        rep: spec.rep,
        game_seed: spec.game_seed,
        result,
        parse_failures,
        failed_attempts,
        any_parse_failure: parse_failures > 0,
        exclusion_reasons,
    })
}
