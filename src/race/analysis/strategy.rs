//! Nearest-strategy classification of player-race trajectories (spec §8,
//! the reference's `strategy_analysis/classify.py`): each reference
//! strategy's predicted actions over the observed horizon (two players: AS =
//! all Safe, AU = all Unsafe, CS = Safe then the opponent's previous action,
//! CAS = Unsafe then the opponent's previous action; N players: AS, AU and
//! CS = Safe in round 1, then Safe iff every co-player played Safe last
//! round), the Hamming distance to each (also as a rate), and the nearest
//! strategies with ties kept (`unique_best` is `None` on a tie). The
//! exploratory rule "Unsafe iff behind" is reported beside them, labelled as
//! such, and never counts as a nearest strategy.

use serde::Serialize;

use super::trajectory::PlayerRace;
use crate::race::rules::PROGRESS_TOL;

/// The label of the exploratory rule (not one of the paper's strategies).
pub const EXPLORATORY_BEHIND: &str = "BEHIND_UNSAFE_EXPLORATORY";

/// Distance from a trajectory to one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyMatch {
    pub strategy: String,
    pub predicted: Vec<bool>,
    pub mismatches: usize,
    pub mismatch_rate: f64,
    pub canonical: bool,
}

/// The classification of one trajectory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classification {
    pub horizon: usize,
    /// Every canonical strategy at the minimum distance, in AS, AU, CS, CAS order.
    pub best: Vec<String>,
    pub unique_best: Option<String>,
    pub matches: Vec<StrategyMatch>,
}

/// Predicted actions of a strategy given the co-players' actions per round
/// (`others[r]` = the co-players' actions in round r+1).
pub fn predict(strategy: &str, others: &[Vec<bool>]) -> Option<Vec<bool>> {
    let n = others.len();
    let copy = |first: bool| -> Vec<bool> {
        (0..n)
            .map(|r| {
                if r == 0 {
                    first
                } else {
                    others[r - 1].iter().any(|&u| u)
                }
            })
            .collect()
    };
    match strategy {
        "AS" => Some(vec![false; n]),
        "AU" => Some(vec![true; n]),
        "CS" => Some(copy(false)),
        "CAS" => Some(copy(true)),
        _ => None,
    }
}

/// Classify own actions against the co-players' actions (`gaps` = own minus
/// best co-player's progress entering each round, for the exploratory rule).
pub fn classify(own: &[bool], others: &[Vec<bool>], gaps: &[f64]) -> Classification {
    let n_players = others.first().map(|o| o.len() + 1).unwrap_or(2);
    let strategies: &[&str] = if n_players == 2 {
        &["AS", "AU", "CS", "CAS"]
    } else {
        &["AS", "AU", "CS"]
    };
    let h = own.len();
    let rate = |m: usize| if h == 0 { 0.0 } else { m as f64 / h as f64 };
    let mut matches: Vec<StrategyMatch> = strategies
        .iter()
        .filter_map(|s| {
            let p = predict(s, others)?;
            let m = p.iter().zip(own).filter(|(a, b)| a != b).count();
            Some(StrategyMatch {
                strategy: s.to_string(),
                predicted: p,
                mismatches: m,
                mismatch_rate: rate(m),
                canonical: true,
            })
        })
        .collect();
    let min = matches.iter().map(|m| m.mismatches).min().unwrap_or(0);
    let best: Vec<String> = matches
        .iter()
        .filter(|m| m.mismatches == min)
        .map(|m| m.strategy.clone())
        .collect();
    if gaps.len() == h {
        let p: Vec<bool> = gaps.iter().map(|&g| g < -PROGRESS_TOL).collect();
        let m = p.iter().zip(own).filter(|(a, b)| a != b).count();
        matches.push(StrategyMatch {
            strategy: EXPLORATORY_BEHIND.into(),
            predicted: p,
            mismatches: m,
            mismatch_rate: rate(m),
            canonical: false,
        });
    }
    Classification {
        horizon: h,
        unique_best: (best.len() == 1).then(|| best[0].clone()),
        best,
        matches,
    }
}

/// Classify one player-race.
pub fn classify_player(p: &PlayerRace) -> Classification {
    let own: Vec<bool> = p.rounds.iter().map(|r| r.unsafe_).collect();
    let others: Vec<Vec<bool>> = p.rounds.iter().map(|r| r.others.clone()).collect();
    let gaps: Vec<f64> = p.rounds.iter().map(|r| r.gap_before).collect();
    classify(&own, &others, &gaps)
}

/// The label of a classification in a strategy-mix table: the unique
/// nearest strategy, or `tie`.
pub fn mix_label(c: &Classification) -> &str {
    c.unique_best.as_deref().unwrap_or("tie")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opp(v: &[u8]) -> Vec<Vec<bool>> {
        v.iter().map(|&x| vec![x == 1]).collect()
    }

    #[test]
    fn two_player_predictions_and_ties() {
        let o = opp(&[1, 0, 1, 1, 0]);
        assert_eq!(predict("CS", &o).unwrap(), [false, true, false, true, true]);
        assert_eq!(predict("CAS", &o).unwrap(), [true, true, false, true, true]);
        // A CS player against this opponent: unique CS.
        let c = classify(&[false, true, false, true, true], &o, &[0.0; 5]);
        assert_eq!(c.best, ["CS"]);
        assert_eq!(c.unique_best.as_deref(), Some("CS"));
        assert_eq!(c.matches[0].mismatches, 3); // AS
        assert!((c.matches[0].mismatch_rate - 0.6).abs() < 1e-12);
        // Against an all-Safe opponent AS and CS predict the same: a tie.
        let c = classify(&[false; 5], &opp(&[0; 5]), &[0.0; 5]);
        assert_eq!(c.best, ["AS", "CS"]);
        assert_eq!(c.unique_best, None);
        assert_eq!(mix_label(&c), "tie");
        // The exploratory rule is reported but never best.
        let c = classify(&[true, true], &opp(&[0, 0]), &[-0.5, -1.0]);
        let e = c
            .matches
            .iter()
            .find(|m| m.strategy == EXPLORATORY_BEHIND)
            .unwrap();
        assert_eq!(e.mismatches, 0);
        assert!(!e.canonical);
        assert_eq!(c.best, ["AU"]);
    }

    #[test]
    fn n_player_cs_plays_safe_only_after_all_safe() {
        let others = vec![vec![false, false], vec![true, false], vec![false, false]];
        assert_eq!(predict("CS", &others).unwrap(), [false, false, true]);
        let c = classify(&[false, false, true], &others, &[]);
        assert_eq!(c.unique_best.as_deref(), Some("CS"));
        assert!(c.matches.iter().all(|m| m.strategy != "CAS"));
    }
}
