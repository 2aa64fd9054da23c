//! Energy arithmetic shared by every scenario: the per-token price
//! `c = k · S^α`, the charge `round(T · c, 2)` ([`token_charge`]) with Python's `round`
//! (half-to-even on the exact double), and clamping at zero.

use serde::{Deserialize, Serialize};

/// The cost model of the paper: `C = k · T · S^α`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// Base price per token (the paper's k = 0.015).
    pub k: f64,
    /// Size exponent α (0.5 in the baseline, 0.0 in the no-size-penalty condition).
    pub alpha: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            k: 0.015,
            alpha: 0.5,
        }
    }
}

impl CostModel {
    /// Price of one token for a model of `size_b` billion parameters,
    /// unrounded, exactly as the reference computes it (`k * size ** alpha`).
    pub fn per_token(&self, size_b: f64) -> f64 {
        self.k * size_b.powf(self.alpha)
    }

    /// Energy charged for `tokens` generated tokens: `round(tokens * c, 2)`.
    pub fn charge(&self, tokens: u64, size_b: f64) -> f64 {
        token_charge(tokens, self.per_token(size_b))
    }
}

/// The charge for `tokens` tokens at the unrounded price `per_token`:
/// `round(tokens * c, 2)`. The one place the formula is written; the Energy
/// Society's ledger (`energy_society::ledger::Tab`) charges with it.
pub fn token_charge(tokens: u64, per_token: f64) -> f64 {
    py_round(tokens as f64 * per_token, 2)
}

/// Python's `round(x, ndigits)`: the exact binary value of `x` rounded to
/// `ndigits` decimals, ties to even, returned as the nearest double.
/// (`round(2.675, 2) == 2.67`, `round(0.375, 2) == 0.38`.)
pub fn py_round(x: f64, ndigits: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // Rust's fixed-precision formatting rounds the exact decimal expansion of
    // the double half-to-even, which is what CPython's float rounding does.
    let s = format!("{:.*}", ndigits, x);
    let r: f64 = s.parse().unwrap_or(x);
    // Python keeps the sign of zero: round(-0.001, 2) == -0.0.
    if r == 0.0 && x.is_sign_negative() {
        -0.0
    } else {
        r
    }
}

/// Subtract `cost` from `energy`, never going below zero.
pub fn clamp_sub(energy: f64, cost: f64) -> f64 {
    (energy - cost).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_round_matches_python_half_even_on_exact_doubles() {
        assert_eq!(py_round(2.675, 2), 2.67);
        assert_eq!(py_round(0.375, 2), 0.38);
        assert_eq!(py_round(0.125, 2), 0.12);
        assert_eq!(py_round(0.625, 2), 0.62);
        assert_eq!(py_round(1.005, 2), 1.0);
        assert_eq!(py_round(266.665, 2), 266.67);
        assert_eq!(py_round(2.5, 0), 2.0);
        assert_eq!(py_round(3.5, 0), 4.0);
    }

    #[test]
    fn per_token_prices_match_the_spec() {
        let c = CostModel::default();
        assert_eq!(c.per_token(4.0), 0.03);
        assert_eq!(c.per_token(8.0), 0.042426406871192854);
        assert_eq!(c.per_token(9.0), 0.045);
        let flat = CostModel {
            k: 0.015,
            alpha: 0.0,
        };
        assert_eq!(flat.per_token(9.0), 0.015);
        // 1399 tokens of a 4B model: 41.97 (reference run_1, round 1, agent_1 vote).
        assert_eq!(c.charge(1399, 4.0), 41.97);
    }

    #[test]
    fn clamp_never_goes_negative() {
        assert_eq!(clamp_sub(5.0, 10.0), 0.0);
        assert_eq!(clamp_sub(15.0, 10.0), 5.0);
    }
}
