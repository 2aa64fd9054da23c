//! The race engine: the only code that changes race state (spec §1.2–§1.4,
//! §2). Seats submit sealed actions from one pre-round snapshot; the engine
//! applies payoffs, progress and UNSAFE counts together, draws the stop
//! lottery after every round r ≥ 5 from the horizon stream, and at the end
//! ranks seats, splits the prize among leaders and draws one setback uniform
//! per seat (eligible or not) from the setback stream.
//!
//! N = 2 uses the two-player streams (17, 29) and the literal matrix; N > 2
//! uses the N-player streams (53, 61) and the b/c/s payoff rule.

use serde::{Deserialize, Serialize};

use super::rng::{
    stream_seed, PyRandom, STREAM_HORIZON, STREAM_NPLAYER_HORIZON, STREAM_NPLAYER_SETBACK,
    STREAM_SETBACK,
};
use super::rules::{
    stage_payoff, step, Action, MIN_ROUNDS, PRIZE, PROGRESS_TOL, ROUND_CAP, STOP_PROBABILITY,
};

/// The parameters of one race.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RaceRules {
    pub n_players: usize,
    /// p_max (`maxPrivateRisk`), a probability in [0, 1].
    pub p_max: f64,
}

impl RaceRules {
    pub fn new(n_players: usize, p_max: f64) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (2..=5).contains(&n_players),
            "the race supports 2 to 5 players, got {n_players}"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&p_max),
            "p_max must be a probability in [0, 1], got {p_max}"
        );
        Ok(Self { n_players, p_max })
    }

    fn streams(&self) -> (i64, i64) {
        if self.n_players == 2 {
            (STREAM_HORIZON, STREAM_SETBACK)
        } else {
            (STREAM_NPLAYER_HORIZON, STREAM_NPLAYER_SETBACK)
        }
    }
}

/// The public state every seat sees before a round (§1.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Rounds completed so far (the next round is `completed + 1`).
    pub completed: u32,
    pub progress: Vec<f64>,
    pub stage_payoffs: Vec<f64>,
    pub unsafe_counts: Vec<u32>,
}

impl Snapshot {
    fn new(n: usize) -> Self {
        Self {
            completed: 0,
            progress: vec![0.0; n],
            stage_payoffs: vec![0.0; n],
            unsafe_counts: vec![0; n],
        }
    }

    /// Current private risk of a seat in percent, over completed rounds
    /// (§1.3, quirk 8): p_max·n_U/completed·100, 0 before round 1.
    pub fn current_risk_pct(&self, seat: usize, p_max: f64) -> f64 {
        if self.completed == 0 {
            0.0
        } else {
            p_max * self.unsafe_counts[seat] as f64 / self.completed as f64 * 100.0
        }
    }

    /// Own progress minus the best co-player's progress (§2 records).
    pub fn gap(&self, seat: usize) -> f64 {
        let best = self
            .progress
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != seat)
            .map(|(_, &p)| p)
            .fold(f64::NEG_INFINITY, f64::max);
        self.progress[seat] - best
    }
}

/// One resolved round (§1.2 step 5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    pub round: u32,
    pub actions: Vec<Action>,
    pub payoffs: Vec<f64>,
    pub increments: Vec<f64>,
    pub progress_after: Vec<f64>,
    pub stage_payoffs_after: Vec<f64>,
    pub unsafe_counts_after: Vec<u32>,
    /// The horizon uniform drawn after this round (none for rounds 1–4).
    pub stop_draw: Option<f64>,
    pub stopped: bool,
    /// Stopped by the cap although the draw did not stop the race.
    pub stop_forced: bool,
}

/// Terminal classification of a seat (§1.4, §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Winner,
    Loser,
    Tie,
}

/// One seat's terminal record (§1.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatResult {
    pub outcome: Outcome,
    pub progress: f64,
    pub stage_payoff: f64,
    pub unsafe_count: u32,
    pub unsafe_frequency: f64,
    /// q = clamp(p_max·n_U/W, 0, 1), computed for every seat.
    pub private_risk: f64,
    pub prize: f64,
    pub setback_eligible: bool,
    pub setback_draw: f64,
    pub setback: bool,
    pub final_payoff: f64,
}

/// The end of a race.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RaceResult {
    pub n_rounds: u32,
    pub stop_forced: bool,
    pub tie: bool,
    /// Seat index of the sole winner, if any.
    pub winner: Option<usize>,
    pub seats: Vec<SeatResult>,
    pub stop_draws: Vec<f64>,
}

/// A race in progress.
pub struct Race {
    pub rules: RaceRules,
    horizon: PyRandom,
    setback: PyRandom,
    snapshot: Snapshot,
    history: Vec<RoundRecord>,
    result: Option<RaceResult>,
}

impl Race {
    /// A fresh race whose horizon and setback streams derive from `game_seed`
    /// (§1.5).
    pub fn new(rules: RaceRules, game_seed: i64) -> Self {
        let (h, s) = rules.streams();
        Self {
            rules,
            horizon: PyRandom::from_i64(stream_seed(game_seed, h)),
            setback: PyRandom::from_i64(stream_seed(game_seed, s)),
            snapshot: Snapshot::new(rules.n_players),
            history: Vec::new(),
            result: None,
        }
    }

    /// The state before the next round.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub fn history(&self) -> &[RoundRecord] {
        &self.history
    }

    pub fn result(&self) -> Option<&RaceResult> {
        self.result.as_ref()
    }

    pub fn is_over(&self) -> bool {
        self.result.is_some()
    }

    /// Resolve one round from every seat's sealed action (§1.2 steps 3–6).
    /// Terminal scoring runs when the race stops.
    pub fn play_round(&mut self, actions: &[Action]) -> anyhow::Result<&RoundRecord> {
        let n = self.rules.n_players;
        anyhow::ensure!(!self.is_over(), "the race is already over");
        anyhow::ensure!(
            actions.len() == n,
            "expected {n} actions, got {}",
            actions.len()
        );
        let k_safe = actions.iter().filter(|a| !a.is_unsafe()).count();
        let payoffs: Vec<f64> = actions
            .iter()
            .map(|&a| stage_payoff(n, a, k_safe))
            .collect();
        let increments: Vec<f64> = actions.iter().map(|&a| step(a)).collect();
        let s = &mut self.snapshot;
        for i in 0..n {
            s.progress[i] += increments[i];
            s.stage_payoffs[i] += payoffs[i];
            if actions[i].is_unsafe() {
                s.unsafe_counts[i] += 1;
            }
        }
        s.completed += 1;
        let round = s.completed;
        let (stop_draw, stopped, stop_forced) = if round >= MIN_ROUNDS {
            let u = self.horizon.random();
            let by_draw = u < STOP_PROBABILITY;
            let capped = round >= ROUND_CAP;
            (Some(u), by_draw || capped, capped && !by_draw)
        } else {
            (None, false, false)
        };
        self.history.push(RoundRecord {
            round,
            actions: actions.to_vec(),
            payoffs,
            increments,
            progress_after: s.progress.clone(),
            stage_payoffs_after: s.stage_payoffs.clone(),
            unsafe_counts_after: s.unsafe_counts.clone(),
            stop_draw,
            stopped,
            stop_forced,
        });
        if stopped {
            self.finalize();
        }
        Ok(self.history.last().expect("just pushed"))
    }

    /// Terminal scoring (§1.4, §2) with one setback uniform per seat drawn
    /// in seat order from the setback stream.
    fn finalize(&mut self) {
        let n = self.rules.n_players;
        let draws: Vec<f64> = (0..n).map(|_| self.setback.random()).collect();
        let s = &self.snapshot;
        let seats = score_terminal(
            self.rules.p_max,
            s.completed,
            &s.progress,
            &s.stage_payoffs,
            &s.unsafe_counts,
            &draws,
        );
        let n_leaders = seats.iter().filter(|x| x.outcome != Outcome::Loser).count();
        let winner = seats.iter().position(|x| x.outcome == Outcome::Winner);
        self.result = Some(RaceResult {
            n_rounds: s.completed,
            stop_forced: self.history.last().is_some_and(|r| r.stop_forced),
            tie: n_leaders > 1,
            winner,
            seats,
            stop_draws: self.history.iter().filter_map(|r| r.stop_draw).collect(),
        });
    }
}

/// Terminal scoring of a finished race of `w` rounds (§1.4, §2): every seat
/// within 1e-9 of the top progress is a leader and shares the prize; every
/// seat's risk is q = clamp(p_max·n_U/W, 0, 1); a leader whose draw is
/// strictly below q is set back and ends with 0; everyone else keeps
/// stage sum + prize (a loser keeps its stage sum).
pub fn score_terminal(
    p_max: f64,
    w: u32,
    progress: &[f64],
    stage: &[f64],
    unsafe_counts: &[u32],
    draws: &[f64],
) -> Vec<SeatResult> {
    let n = progress.len();
    let max = progress.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let leaders: Vec<bool> = progress.iter().map(|&p| p >= max - PROGRESS_TOL).collect();
    let n_leaders = leaders.iter().filter(|&&l| l).count();
    let prize_each = PRIZE / n_leaders as f64;
    (0..n)
        .map(|i| {
            let outcome = match (leaders[i], n_leaders) {
                (true, 1) => Outcome::Winner,
                (true, _) => Outcome::Tie,
                (false, _) => Outcome::Loser,
            };
            let q = (p_max * unsafe_counts[i] as f64 / w as f64).clamp(0.0, 1.0);
            let prize = if leaders[i] { prize_each } else { 0.0 };
            let eligible = leaders[i];
            let setback = eligible && draws[i] < q;
            SeatResult {
                outcome,
                progress: progress[i],
                stage_payoff: stage[i],
                unsafe_count: unsafe_counts[i],
                unsafe_frequency: unsafe_counts[i] as f64 / w as f64,
                private_risk: q,
                prize,
                setback_eligible: eligible,
                setback_draw: draws[i],
                setback,
                final_payoff: if setback { 0.0 } else { stage[i] + prize },
            }
        })
        .collect()
}

#[cfg(test)]
/// The horizon W a game seed produces (the stop draws do not depend on the
/// actions), for tests and theory.
pub fn horizon_of(game_seed: i64, n_players: usize) -> (u32, Vec<f64>) {
    let stream = if n_players == 2 {
        STREAM_HORIZON
    } else {
        STREAM_NPLAYER_HORIZON
    };
    let mut rng = PyRandom::from_i64(stream_seed(game_seed, stream));
    let mut draws = Vec::new();
    let mut r = MIN_ROUNDS;
    loop {
        let u = rng.random();
        draws.push(u);
        if u < STOP_PROBABILITY || r >= ROUND_CAP {
            return (r, draws);
        }
        r += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::rng::BASE_SEED;
    use super::*;
    use Action::*;

    fn play_fixed(
        rules: RaceRules,
        seed: i64,
        mut choose: impl FnMut(&Race, usize) -> Action,
    ) -> Race {
        let mut race = Race::new(rules, seed);
        while !race.is_over() {
            let acts: Vec<Action> = (0..rules.n_players).map(|i| choose(&race, i)).collect();
            race.play_round(&acts).unwrap();
        }
        race
    }

    /// AU at seat 0, CS at seat 1 (§1.5 table).
    fn au_vs_cs(p: f64, rep: i64) -> Race {
        play_fixed(
            RaceRules::new(2, p).unwrap(),
            BASE_SEED + rep,
            |race, seat| {
                if seat == 0 {
                    Unsafe
                } else {
                    race.history().last().map_or(Safe, |r| r.actions[0])
                }
            },
        )
    }

    #[test]
    fn horizons_and_stop_draws_match_the_spec() {
        let (w0, d0) = horizon_of(BASE_SEED, 2);
        assert_eq!(w0, 5);
        assert!((d0[0] - 0.056165).abs() < 1e-6);
        let (w1, d1) = horizon_of(BASE_SEED + 1, 2);
        assert_eq!(w1, 7);
        for (got, want) in d1.iter().zip([0.212194, 0.860302, 0.182800]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        let (w2, d2) = horizon_of(BASE_SEED + 2, 2);
        assert_eq!(w2, 9);
        for (got, want) in d2
            .iter()
            .zip([0.658257, 0.861451, 0.962145, 0.807162, 0.155755])
        {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
    }

    #[test]
    fn au_vs_cs_full_races_match_the_spec_table() {
        // (p, rep, W, progress, stage sums, q, setbacks, finals) — §1.5.
        #[allow(clippy::type_complexity)]
        let table: &[(
            f64,
            i64,
            u32,
            [f64; 2],
            [f64; 2],
            [f64; 2],
            [bool; 2],
            [f64; 2],
        )] = &[
            (
                0.1,
                0,
                5,
                [7.5, 7.0],
                [10.4, 8.6],
                [0.1, 0.08],
                [true, false],
                [0.0, 8.6],
            ),
            (
                0.1,
                1,
                7,
                [10.5, 10.0],
                [14.4, 12.6],
                [0.1, 0.0857],
                [false, false],
                [114.4, 12.6],
            ),
            (
                0.6,
                2,
                9,
                [13.5, 13.0],
                [18.4, 16.6],
                [0.6, 0.5333],
                [true, false],
                [0.0, 16.6],
            ),
            (
                0.9,
                1,
                7,
                [10.5, 10.0],
                [14.4, 12.6],
                [0.9, 0.7714],
                [true, false],
                [0.0, 12.6],
            ),
        ];
        for &(p, rep, w, prog, stage, q, setb, fin) in table {
            let race = au_vs_cs(p, rep);
            let r = race.result().unwrap();
            assert_eq!(r.n_rounds, w);
            assert_eq!(r.winner, Some(0));
            for i in 0..2 {
                let s = &r.seats[i];
                assert_eq!(s.progress, prog[i]);
                assert!((s.stage_payoff - stage[i]).abs() < 1e-9);
                assert!(
                    (s.private_risk - q[i]).abs() < 1e-4,
                    "p={p} rep={rep} seat {i}"
                );
                assert_eq!(s.setback, setb[i], "p={p} rep={rep} seat {i}");
                assert!((s.final_payoff - fin[i]).abs() < 1e-9);
            }
            // The loser is never eligible, whatever its draw.
            assert!(!r.seats[1].setback_eligible);
            assert_eq!(r.seats[1].outcome, Outcome::Loser);
        }
    }

    #[test]
    fn tie_splits_the_prize_and_both_seats_are_eligible() {
        let race = play_fixed(RaceRules::new(2, 0.9).unwrap(), BASE_SEED, |_, _| Safe);
        let r = race.result().unwrap();
        assert!(r.tie);
        assert_eq!(r.winner, None);
        for s in &r.seats {
            assert_eq!(s.outcome, Outcome::Tie);
            assert_eq!(s.prize, 50.0);
            assert!(s.setback_eligible);
            // No UNSAFE play: zero risk, so no setback even with draw 0.068.
            assert_eq!(s.private_risk, 0.0);
            assert!(!s.setback);
            assert_eq!(s.final_payoff, 5.0 + 50.0);
        }
    }

    #[test]
    fn setback_zeroes_stage_and_prize_and_comparison_is_strict() {
        // Rep 0 draws 0.0682 for seat 0; AU-vs-AU at p = 0.1 gives q = 0.1 for both.
        let race = play_fixed(RaceRules::new(2, 0.1).unwrap(), BASE_SEED, |_, _| Unsafe);
        let r = race.result().unwrap();
        assert!(r.tie);
        assert!(r.seats[0].setback);
        assert_eq!(r.seats[0].final_payoff, 0.0);
        // Seat 1 draws 0.19197… ≥ 0.1: no setback, keeps stage + half prize.
        assert!(!r.seats[1].setback);
        assert_eq!(r.seats[1].final_payoff, 10.0 + 50.0);
    }

    #[test]
    fn no_stop_draw_before_round_five_and_snapshot_risk() {
        let mut race = Race::new(RaceRules::new(2, 0.6).unwrap(), BASE_SEED + 2);
        for r in 1..=4 {
            let rec = race.play_round(&[Unsafe, Safe]).unwrap();
            assert_eq!(rec.round, r);
            assert_eq!(rec.stop_draw, None);
            assert!(!rec.stopped);
        }
        let s = race.snapshot();
        assert_eq!(s.progress, vec![6.0, 4.0]);
        assert!((s.current_risk_pct(0, 0.6) - 60.0).abs() < 1e-12);
        assert_eq!(s.current_risk_pct(1, 0.6), 0.0);
        assert_eq!(s.gap(0), 2.0);
        assert!(race.play_round(&[Safe]).is_err());
    }

    #[test]
    fn n_player_prize_split_among_tied_leaders() {
        // N = 4: seats 0 and 1 always UNSAFE (tied leaders), 2 and 3 SAFE.
        let race = play_fixed(RaceRules::new(4, 0.0).unwrap(), BASE_SEED, |_, i| {
            if i < 2 {
                Unsafe
            } else {
                Safe
            }
        });
        let r = race.result().unwrap();
        assert!(r.tie);
        assert_eq!(r.seats[0].prize, 50.0);
        assert_eq!(r.seats[1].prize, 50.0);
        assert_eq!(r.seats[2].outcome, Outcome::Loser);
        assert_eq!(r.seats[2].prize, 0.0);
        // Three-way tie at N = 5 splits 100/3.
        let race = play_fixed(RaceRules::new(5, 0.0).unwrap(), BASE_SEED, |_, i| {
            if i < 3 {
                Unsafe
            } else {
                Safe
            }
        });
        let r = race.result().unwrap();
        assert!((r.seats[0].prize - 100.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            r.seats.iter().filter(|s| s.outcome == Outcome::Tie).count(),
            3
        );
    }

    #[test]
    fn random_games_keep_the_invariants() {
        // Seeded loop over many random games (property test).
        let mut pick = PyRandom::new(12345);
        for g in 0..400i64 {
            let n = 2 + (g % 4) as usize;
            let p = [0.1, 0.6, 0.9][(g % 3) as usize];
            let rules = RaceRules::new(n, p).unwrap();
            let race = play_fixed(rules, 1000 + g, |_, _| {
                if pick.random() < 0.5 {
                    Unsafe
                } else {
                    Safe
                }
            });
            let r = race.result().unwrap();
            let w = r.n_rounds;
            assert!(w >= MIN_ROUNDS && w <= ROUND_CAP);
            assert_eq!(race.history().len(), w as usize);
            assert_eq!(r.stop_draws.len(), (w - MIN_ROUNDS + 1) as usize);
            // Only the last draw may stop the race.
            for (i, d) in r.stop_draws.iter().enumerate() {
                assert_eq!(
                    *d < STOP_PROBABILITY,
                    i + 1 == r.stop_draws.len() && !r.stop_forced
                );
            }
            let max = r.seats.iter().map(|s| s.progress).fold(0.0, f64::max);
            let leaders = r.seats.iter().filter(|s| s.progress == max).count();
            let mut prize_total = 0.0;
            for (i, s) in r.seats.iter().enumerate() {
                // progress = rounds + 0.5·n_U
                assert_eq!(s.progress, w as f64 + 0.5 * s.unsafe_count as f64);
                // Stage sum equals the sum of the per-round payoffs.
                let sum: f64 = race.history().iter().map(|h| h.payoffs[i]).sum();
                assert!((sum - s.stage_payoff).abs() < 1e-9);
                assert!((s.private_risk - (p * s.unsafe_count as f64 / w as f64)).abs() < 1e-12);
                assert_eq!(s.setback_eligible, s.progress == max);
                assert_eq!(
                    s.setback,
                    s.setback_eligible && s.setback_draw < s.private_risk
                );
                let expect = if s.setback {
                    0.0
                } else {
                    s.stage_payoff + s.prize
                };
                assert_eq!(s.final_payoff, expect);
                if s.outcome == Outcome::Loser {
                    assert_eq!(s.final_payoff, s.stage_payoff);
                }
                prize_total += s.prize;
            }
            assert!((prize_total - 100.0).abs() < 1e-9);
            assert_eq!(r.tie, leaders > 1);
            // Each round: k SAFE players get the SAFE payoff, the rest UNSAFE.
            for h in race.history() {
                let k = h.actions.iter().filter(|a| **a == Safe).count();
                for (a, pay) in h.actions.iter().zip(&h.payoffs) {
                    assert_eq!(*pay, stage_payoff(n, *a, k));
                }
            }
        }
    }
}
