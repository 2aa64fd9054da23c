//! The race's rule book (spec §1.1, §2): actions, progress increments, the
//! stage payoff (the 2×2 matrix at N = 2, the b/c/s rule for N > 2), the
//! horizon and prize constants, and the two number formats the prompts use
//! (§1.3 "3 decimals, zeros stripped" and the decision card's `%g`, quirk 7).

use serde::{Deserialize, Serialize};

/// One seat's choice in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Safe,
    Unsafe,
}

impl Action {
    /// The upper-case label used in prompts and the `ACTION:` line.
    pub fn label(self) -> &'static str {
        match self {
            Action::Safe => "SAFE",
            Action::Unsafe => "UNSAFE",
        }
    }
    /// The lower-case form stored in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Safe => "safe",
            Action::Unsafe => "unsafe",
        }
    }
    pub fn is_unsafe(self) -> bool {
        self == Action::Unsafe
    }
}

/// Per-round benefit b (§2).
pub const BENEFIT_B: f64 = 4.0;
/// SAFE cost c (§2).
pub const COST_C: f64 = 1.0;
/// Speed s: the UNSAFE progress increment and the payoff divisor weight (§2).
pub const SPEED_S: f64 = 1.5;
/// Progress of a SAFE round (§1.1).
pub const SAFE_STEP: f64 = 1.0;
/// Minimum number of rounds before any stop draw (§1.1).
pub const MIN_ROUNDS: u32 = 5;
/// Probability of stopping after each completed round r ≥ 5 (§1.1).
pub const STOP_PROBABILITY: f64 = 0.2;
/// Safety cap on the number of rounds (§1.1).
pub const ROUND_CAP: u32 = 100;
/// Terminal prize B (§1.1).
pub const PRIZE: f64 = 100.0;
/// Tolerance of progress comparisons (§1.4).
pub const PROGRESS_TOL: f64 = 1e-9;
/// The three canonical p_max treatments.
pub const CANONICAL_PMAX: [f64; 3] = [0.1, 0.6, 0.9];

/// Progress added by an action (§1.1: SAFE +1.0, UNSAFE +1.5).
pub fn step(action: Action) -> f64 {
    match action {
        Action::Safe => SAFE_STEP,
        Action::Unsafe => SAFE_STEP * SPEED_S,
    }
}

/// The two-player stage payoff, row = own action, column = opponent (§1.1):
/// SS 1.0, SU 0.6, US 2.4, UU 2.0.
pub fn stage_payoff_2p(own: Action, opponent: Action) -> f64 {
    match (own, opponent) {
        (Action::Safe, Action::Safe) => 1.0,
        (Action::Safe, Action::Unsafe) => 0.6,
        (Action::Unsafe, Action::Safe) => 2.4,
        (Action::Unsafe, Action::Unsafe) => 2.0,
    }
}

/// The N-player stage payoff (§2): with k SAFE players (focal included) and
/// D(k) = k + s(N − k), SAFE earns −c + b/D(k) (k = N special-cased as
/// −c + b/N, as the reference does) and UNSAFE earns s·b/D(k). At N = 2 the
/// literal matrix is returned so two-player sums stay bit-identical.
pub fn stage_payoff(n: usize, own: Action, k_safe: usize) -> f64 {
    if n == 2 {
        let opp = match (own, k_safe) {
            (Action::Safe, 2) | (Action::Unsafe, 1) => Action::Safe,
            _ => Action::Unsafe,
        };
        return stage_payoff_2p(own, opp);
    }
    let nf = n as f64;
    let k = k_safe as f64;
    match own {
        Action::Safe if k_safe == n => -COST_C + BENEFIT_B / nf,
        Action::Safe => -COST_C + BENEFIT_B / (k + SPEED_S * (nf - k)),
        Action::Unsafe => SPEED_S * BENEFIT_B / (k + SPEED_S * (nf - k)),
    }
}

/// §1.3 number format: 3 decimals, then trailing zeros and a trailing dot
/// stripped (0.6 → `0.6`, 100 → `100`, 6.6667 → `6.667`).
pub fn fmt_num(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// Python's `%g` (6 significant digits, zeros stripped, exponent form when
/// the exponent is < −4 or ≥ 6), used by the decision card (§5.3).
pub fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if !x.is_finite() {
        return format!("{x}");
    }
    let sci = format!("{x:.5e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let mant = if mant.contains('.') {
            mant.trim_end_matches('0').trim_end_matches('.')
        } else {
            mant
        };
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    #[test]
    fn two_player_matrix_is_a_deadlock() {
        assert_eq!(stage_payoff_2p(Safe, Safe), 1.0);
        assert_eq!(stage_payoff_2p(Safe, Unsafe), 0.6);
        assert_eq!(stage_payoff_2p(Unsafe, Safe), 2.4);
        assert_eq!(stage_payoff_2p(Unsafe, Unsafe), 2.0);
        // T > P > R > S: UNSAFE strictly dominates within a round.
        for opp in [Safe, Unsafe] {
            assert!(stage_payoff_2p(Unsafe, opp) > stage_payoff_2p(Safe, opp));
        }
        assert_eq!(step(Safe), 1.0);
        assert_eq!(step(Unsafe), 1.5);
    }

    #[test]
    fn n_player_rule_reproduces_the_matrix_at_n2() {
        // The b/c/s rule with N = 2 equals the literal matrix (to rounding).
        let f = |own: Action, k: usize| {
            let (n, kf) = (2.0, k as f64);
            let d = kf + SPEED_S * (n - kf);
            match own {
                Safe => -COST_C + BENEFIT_B / d,
                Unsafe => SPEED_S * BENEFIT_B / d,
            }
        };
        assert!((f(Safe, 2) - 1.0).abs() < 1e-12);
        assert!((f(Safe, 1) - 0.6).abs() < 1e-12);
        assert!((f(Unsafe, 1) - 2.4).abs() < 1e-12);
        assert!((f(Unsafe, 0) - 2.0).abs() < 1e-12);
        assert_eq!(stage_payoff(2, Safe, 1), 0.6);
        assert_eq!(stage_payoff(2, Unsafe, 0), 2.0);
    }

    #[test]
    fn n_player_table_matches_spec_section_2() {
        // (N, k, SAFE payoff or None, UNSAFE payoff or None), spec §2 table.
        let table: &[(usize, usize, Option<f64>, Option<f64>)] = &[
            (3, 0, None, Some(1.333333)),
            (3, 1, Some(0.0), Some(1.5)),
            (3, 2, Some(0.142857), Some(1.714286)),
            (3, 3, Some(0.333333), None),
            (4, 0, None, Some(1.0)),
            (4, 1, Some(-0.272727), Some(1.090909)),
            (4, 2, Some(-0.2), Some(1.2)),
            (4, 3, Some(-0.111111), Some(1.333333)),
            (4, 4, Some(0.0), None),
            (5, 0, None, Some(0.8)),
            (5, 1, Some(-0.428571), Some(0.857143)),
            (5, 2, Some(-0.384615), Some(0.923077)),
            (5, 3, Some(-0.333333), Some(1.0)),
            (5, 4, Some(-0.272727), Some(1.090909)),
            (5, 5, Some(-0.2), None),
        ];
        for &(n, k, s, u) in table {
            if let Some(s) = s {
                let got = stage_payoff(n, Safe, k);
                assert!((got - s).abs() < 5e-7, "N={n} k={k} SAFE {got} vs {s}");
            }
            if let Some(u) = u {
                let got = stage_payoff(n, Unsafe, k);
                assert!((got - u).abs() < 5e-7, "N={n} k={k} UNSAFE {got} vs {u}");
            }
        }
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_num(0.6), "0.6");
        assert_eq!(fmt_num(100.0), "100");
        assert_eq!(fmt_num(40.0), "40");
        assert_eq!(fmt_num(6.6667), "6.667");
        assert_eq!(fmt_num(20.000000000000004), "20");
        assert_eq!(fmt_num(-0.5), "-0.5");
        assert_eq!(fmt_g(6.666666666), "6.66667");
        assert_eq!(fmt_g(20.000000000000004), "20");
        assert_eq!(fmt_g(0.6), "0.6");
        assert_eq!(fmt_g(1e-5), "1e-05");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(2.4), "2.4");
    }
}
