//! Fixed-state replay (spec §5.4): scripted random trajectories are played
//! through the engine, snapshots before every round are stratified by round
//! bucket and selected round-robin, and each selected state is asked once
//! per skin × code mapping, without the answer changing any later state.
//!
//! Seeds follow the reference: `stable_seed(parts…)` = first 8 bytes
//! (big-endian) of SHA-256 over the `|`-joined parts, mod 2^31 − 1; the
//! shuffles use CPython's `random.shuffle`. The state id hashes canonical
//! JSON of the state; its history encoding is this crate's own (a list of
//! `[seat0, seat1]` lower-case actions), so ids are not the reference's.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::engine::{Race, RaceRules, RoundRecord, Snapshot};
use super::parser::{parse_code_action, CodeMapping};
use super::prompt::{render_prompt, seat_names, PromptCondition, SeatView};
use super::rng::{PyRandom, SEED_MODULUS};
use super::rules::Action;
use crate::agency::Agency;
use crate::backend::{ChatMessage, GenParams, ModelRequest};

/// `stable_seed(parts…)` (§5.4).
pub fn stable_seed(parts: &[String]) -> i64 {
    let digest = Sha256::digest(parts.join("|").as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(b) % SEED_MODULUS as u64) as i64
}

/// CPython `random._randbelow` via `getrandbits`.
fn randbelow(rng: &mut PyRandom, n: usize) -> usize {
    let k = usize::BITS - n.leading_zeros();
    loop {
        let r = (rng.next_u32() >> (32 - k)) as usize;
        if r < n {
            return r;
        }
    }
}

/// CPython `random.shuffle` (for lists shorter than 2^32).
pub fn py_shuffle<T>(v: &mut [T], rng: &mut PyRandom) {
    for i in (1..v.len()).rev() {
        let j = randbelow(rng, i + 1);
        v.swap(i, j);
    }
}

/// One recorded state to replay.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayState {
    pub state_id: String,
    pub trajectory_id: u32,
    pub game_name: String,
    pub risk: f64,
    pub source_seed: i64,
    pub round: u32,
    pub player_index: usize,
    pub history: Vec<[Action; 2]>,
    pub snapshot: Snapshot,
    #[serde(skip)]
    pub records: Vec<RoundRecord>,
}

fn bucket_of(round: u32) -> usize {
    match round {
        1 => 0,
        2..=4 => 1,
        5..=8 => 2,
        _ => 3,
    }
}

const BUCKETS: [&str; 4] = ["opening", "early", "eligible", "late"];

/// Generate and select `k` states for one risk config (§5.4 steps 1–3).
pub fn select_states(
    base: i64,
    cfg_idx: usize,
    p_max: f64,
    k: usize,
) -> anyhow::Result<Vec<ReplayState>> {
    let game_name = format!("ai_race_risk_{}", (p_max * 100.0).round() as i64);
    let mut pool: Vec<ReplayState> = Vec::new();
    let mut traj = 0u32;
    while pool.len() < k.max(32).max(4 * k) {
        let source_seed = base + traj as i64;
        let mut race = Race::new(RaceRules::new(2, p_max)?, source_seed);
        while !race.is_over() {
            let round = race.snapshot().completed + 1;
            for seat in 0..2 {
                let history: Vec<[Action; 2]> = race
                    .history()
                    .iter()
                    .map(|r| [r.actions[0], r.actions[1]])
                    .collect();
                let id_json = serde_json::json!({
                    "game_name": game_name, "history": history, "player_index": seat,
                    "risk": p_max, "round": round, "source_seed": source_seed,
                    "trajectory_id": traj,
                });
                // serde_json maps keep insertion order here; the keys above are sorted.
                let canonical = serde_json::to_string(&id_json)?;
                let state_id = hex::encode(Sha256::digest(canonical.as_bytes()))[..24].to_string();
                pool.push(ReplayState {
                    state_id,
                    trajectory_id: traj,
                    game_name: game_name.clone(),
                    risk: p_max,
                    source_seed,
                    round,
                    player_index: seat,
                    history,
                    snapshot: race.snapshot().clone(),
                    records: race.history().to_vec(),
                });
            }
            let mut rng = PyRandom::new(stable_seed(&[
                "context-replay-policy".into(),
                base.to_string(),
                traj.to_string(),
                round.to_string(),
            ]) as u128);
            let acts: Vec<Action> = (0..2)
                .map(|_| {
                    if rng.random() < 0.5 {
                        Action::Unsafe
                    } else {
                        Action::Safe
                    }
                })
                .collect();
            race.play_round(&acts)?;
        }
        traj += 1;
    }
    let mut buckets: Vec<Vec<ReplayState>> = vec![Vec::new(); 4];
    for s in pool {
        buckets[bucket_of(s.round)].push(s);
    }
    for (i, b) in buckets.iter_mut().enumerate() {
        let mut rng = PyRandom::new(stable_seed(&[
            "bucket".into(),
            base.to_string(),
            cfg_idx.to_string(),
            BUCKETS[i].into(),
        ]) as u128);
        py_shuffle(b, &mut rng);
    }
    let mut chosen = Vec::with_capacity(k);
    while chosen.len() < k && buckets.iter().any(|b| !b.is_empty()) {
        for b in buckets.iter_mut() {
            if chosen.len() < k {
                if let Some(s) = b.pop() {
                    chosen.push(s);
                }
            }
        }
    }
    Ok(chosen)
}

/// One replayed cell (§5.4 step 4).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayRow {
    pub state_id: String,
    pub risk: f64,
    pub round: u32,
    pub player_index: usize,
    pub skin: String,
    pub mapping: String,
    pub prompt: String,
    pub prompt_sha256: String,
    pub raw_responses: Vec<String>,
    pub code: Option<String>,
    pub action: Action,
    #[serde(rename = "unsafe")]
    pub unsafe_: bool,
    pub parse_failed: bool,
    pub own_progress: f64,
    pub progress_gap: f64,
}

/// Ask `model` once per state × skin × mapping (with up to `retries`
/// resends of the unchanged prompt); nothing is played forward.
pub async fn replay_cells(
    agency: Agency,
    model: String,
    states: Vec<ReplayState>,
    skins: Vec<String>,
    retries: u32,
) -> anyhow::Result<Vec<ReplayRow>> {
    let mut rows = Vec::new();
    for st in &states {
        for skin in &skins {
            for mapping in [CodeMapping::SafeP, CodeMapping::SafeQ] {
                let cond = PromptCondition {
                    skin: Some(skin.clone()),
                    codes: Some(mapping.as_str().into()),
                    ..Default::default()
                };
                let names = seat_names(2, &cond);
                let view = SeatView {
                    seat: st.player_index,
                    names: &names,
                    personas: &[None, None],
                    p_max: st.risk,
                    snapshot: &st.snapshot,
                    history: &st.records,
                };
                let prompt = render_prompt(&cond, 0, &view)
                    .with_context(|| format!("replay state {} skin {skin}", st.state_id))?;
                let base_seed =
                    stable_seed(&["context-replay-sampling".into(), st.state_id.clone()]);
                let mut raws = Vec::new();
                let mut parsed = None;
                for attempt in 0..=retries {
                    let seed = (base_seed + attempt as i64 * 10_000_019) % SEED_MODULUS;
                    let others = vec![st.history.last().map(|h| h[1 - st.player_index])];
                    let req = ModelRequest {
                        model: model.clone(),
                        session: 0,
                        agent_id: format!("replay::{}::{skin}::{}", st.state_id, mapping.as_str()),
                        tag: format!("race.replay.a{attempt}"),
                        messages: vec![ChatMessage::user(prompt.clone())],
                        format: Default::default(),
                        params: GenParams {
                            max_tokens: 16,
                            temperature: 0.0,
                            seed: seed as u64,
                            thinking: false,
                            ..Default::default()
                        },
                        observation: serde_json::json!({
                            "kind": "race.decide", "round": st.round, "player_index": st.player_index,
                            "others_prev_actions": others[0].map(|a| vec![a]),
                            "code_mapping": mapping,
                        }),
                    };
                    let resp = agency
                        .call(req)
                        .await
                        .map_err(|e| anyhow::anyhow!("replay {}: {e}", st.state_id))?;
                    let (p, code) = parse_code_action(&resp.text, mapping);
                    raws.push(resp.text);
                    let failed = p.parse_failed;
                    parsed = Some((p, code));
                    if !failed {
                        break;
                    }
                }
                let (p, code) = parsed.context("no replay attempt was made")?;
                rows.push(ReplayRow {
                    state_id: st.state_id.clone(),
                    risk: st.risk,
                    round: st.round,
                    player_index: st.player_index,
                    skin: skin.clone(),
                    mapping: mapping.as_str().into(),
                    prompt_sha256: hex::encode(Sha256::digest(prompt.as_bytes())),
                    prompt,
                    raw_responses: raws,
                    code,
                    action: p.action,
                    unsafe_: p.action.is_unsafe(),
                    parse_failed: p.parse_failed,
                    own_progress: st.snapshot.progress[st.player_index],
                    progress_gap: st.snapshot.gap(st.player_index),
                });
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_seed_and_shuffle_match_python() {
        // int.from_bytes(sha256(b"a|1").digest()[:8], "big") % (2**31 - 1)
        let s = stable_seed(&["a".into(), "1".into()]);
        let d = Sha256::digest(b"a|1");
        let v = u64::from_be_bytes(d[..8].try_into().unwrap()) % 2_147_483_647;
        assert_eq!(s, v as i64);
        // random.Random(42); x = list(range(10)); r.shuffle(x) -> [7, 3, 2, 8, 5, 6, 9, 4, 0, 1]
        let mut x: Vec<u32> = (0..10).collect();
        py_shuffle(&mut x, &mut PyRandom::new(42));
        assert_eq!(x, vec![7, 3, 2, 8, 5, 6, 9, 4, 0, 1]);
    }

    #[test]
    fn selection_is_stratified_and_coverage_is_complete() {
        let states = select_states(260_726, 1, 0.6, 32).unwrap();
        assert_eq!(states.len(), 32);
        let opening = states.iter().filter(|s| s.round == 1).count();
        assert_eq!(opening, 8, "round-robin over 4 buckets");
        let mut ids: Vec<&str> = states.iter().map(|s| s.state_id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 32);
        let mut b = super::super::run::scripted_backend(None);
        let skins = vec![
            "technology_race".to_string(),
            "abstract_contest".to_string(),
        ];
        let rows = crate::agency::run_one(&mut b, |a| {
            replay_cells(a, "scripted:CS".into(), states[..4].to_vec(), skins, 3)
        })
        .unwrap();
        assert_eq!(rows.len(), 4 * 2 * 2);
        for r in &rows {
            assert!(!r.parse_failed);
            assert!(!r.prompt.contains("SAFE"));
        }
        // CS in the same state answers the same action under both mappings.
        for pair in rows.chunks(2) {
            assert_eq!(pair[0].action, pair[1].action);
            assert_ne!(pair[0].code, pair[1].code);
        }
    }
}
