//! Player-race trajectories: one player's decisions through one race, in a
//! form shared by model runs (built here from `turns.jsonl` records) and the
//! human experiment ([`super::human`]). The nearest-strategy classification
//! ([`super::strategy`]), the archetype features ([`super::archetype`]) and
//! the logit sample ([`super::logit`]) all read this type.

use std::collections::{BTreeMap, BTreeSet};

use super::logit::Decision;
use super::runs::RunData;
use crate::race::scenario::TurnRecord;

/// One round of a player's race.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundObs {
    pub round: u32,
    pub unsafe_: bool,
    /// The co-players' actions this round (seat order; one for two players).
    pub others: Vec<bool>,
    /// Own progress minus the best co-player's, entering the round.
    pub gap_before: f64,
}

/// One player through one race.
#[derive(Debug, Clone)]
pub struct PlayerRace {
    /// Unique key (`source::game_id::seat`, or the participant id).
    pub key: String,
    /// `human` or the model key.
    pub group: String,
    pub p_max: f64,
    pub n_players: usize,
    /// CRN block (`source::model::rep`) for models, the pair for humans.
    pub cluster: String,
    /// Included in behavioural estimands (uncontaminated, canonical).
    pub included: bool,
    /// Categorical controls of the logit (`model`, `prompt_version`, ...).
    pub categorical: BTreeMap<String, String>,
    pub numeric: BTreeMap<String, f64>,
    /// Rounds in order, starting at round 1.
    pub rounds: Vec<RoundObs>,
}

impl PlayerRace {
    /// The decisions of rounds ≥ 2 as logit rows (two-player races only).
    pub fn decisions(&self) -> Vec<Decision> {
        let Some(first) = self.rounds.first() else {
            return Vec::new();
        };
        if self.n_players != 2 || first.round != 1 {
            return Vec::new();
        }
        self.rounds
            .windows(2)
            .filter(|w| w[1].round == w[0].round + 1)
            .map(|w| Decision {
                unsafe_: w[1].unsafe_,
                p_max: self.p_max,
                own_prev_unsafe: w[0].unsafe_,
                opponent_prev_unsafe: w[0].others[0],
                progress_gap_before: w[1].gap_before,
                first_round_unsafe: first.unsafe_,
                cluster: self.cluster.clone(),
                categorical: self.categorical.clone(),
                numeric: self.numeric.clone(),
            })
            .collect()
    }
}

/// The player-races of model runs (every race; `included` marks the
/// uncontaminated canonical ones). `source` of a turn is its run folder's index.
pub fn from_runs(data: &RunData) -> Vec<PlayerRace> {
    let excluded: BTreeSet<(usize, &str)> = data
        .races
        .iter()
        .zip(&data.race_sources)
        .filter(|(r, _)| !r.exclusion_reasons.is_empty())
        .map(|(r, &s)| (s, r.game_id.as_str()))
        .collect();
    let mut by: BTreeMap<(usize, &str), Vec<&TurnRecord>> = BTreeMap::new();
    for (t, &s) in data.turns.iter().zip(&data.turn_sources) {
        by.entry((s, t.game_id.as_str())).or_default().push(t);
    }
    let mut out = Vec::new();
    for ((src, gid), turns) in by {
        let n = turns[0].n_players;
        let mut rounds: BTreeMap<u32, Vec<Option<&TurnRecord>>> = BTreeMap::new();
        for t in &turns {
            let r = rounds.entry(t.round).or_insert_with(|| vec![None; n]);
            if let Some(slot) = r.get_mut(t.player_index) {
                *slot = Some(t);
            }
        }
        // Only rounds where every seat's record is present.
        let complete: Vec<Vec<&TurnRecord>> = rounds
            .into_values()
            .filter_map(|seats| seats.into_iter().collect::<Option<Vec<_>>>())
            .collect();
        for seat in 0..n {
            let Some(t0) = complete.first().map(|r| r[seat]) else {
                continue;
            };
            let src_name = data
                .sources
                .get(src)
                .cloned()
                .unwrap_or_else(|| src.to_string());
            let mut categorical = BTreeMap::new();
            categorical.insert("model".into(), t0.model.clone());
            categorical.insert("prompt_version".into(), t0.prompt_version.clone());
            categorical.insert("run_phase".into(), t0.run_phase.clone());
            categorical.insert("persona_condition".into(), t0.persona_condition.clone());
            categorical.insert("source_run".into(), src_name.clone());
            out.push(PlayerRace {
                key: format!("{src_name}::{gid}::{seat}"),
                group: t0.model.clone(),
                p_max: t0.max_private_risk,
                n_players: n,
                cluster: format!("{src_name}::{}::{}", t0.model, t0.rep),
                included: !excluded.contains(&(src, gid)),
                categorical,
                numeric: BTreeMap::new(),
                rounds: complete
                    .iter()
                    .map(|r| RoundObs {
                        round: r[seat].round,
                        unsafe_: r[seat].unsafe_,
                        others: (0..n)
                            .filter(|&i| i != seat)
                            .map(|i| r[i].unsafe_)
                            .collect(),
                        gap_before: r[seat].progress_gap_before,
                    })
                    .collect(),
            });
        }
    }
    out
}
