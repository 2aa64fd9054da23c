//! Energy arithmetic shared by every scenario: the per-token price
//! `c = k · S^α`, the charge `round(T · c, 2)` ([`token_charge`]) with Python's `round`
//! (half-to-even on the exact double), and clamping at zero; and the measured
//! cost model (`[cost] model = "measured"`): a call pays `round(scale · J, 2)`
//! for the joules `J` an energy meter measured for it ([`joule_charge`]).

use serde::{Deserialize, Serialize};

/// What a model call costs an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CostKind {
    /// The paper's formula `C = k · T · S^α`.
    #[default]
    Formula,
    /// `scale · joules` measured for the call (local models with an energy meter).
    Measured,
}

/// The cost model: the paper's `C = k · T · S^α`, or (`model = "measured"`)
/// `scale · J` with the scale that makes a reference call cost what the
/// formula says: `scale = k · reference_size^α / reference_j_per_token`, so a
/// call of a `reference_size` model that spends `reference_j_per_token` joules
/// per generated token pays exactly its formula charge (`joule calibrate`
/// measures J/token). `scale` may also be given directly.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// Base price per token (the paper's k = 0.015).
    pub k: f64,
    /// Size exponent α (0.5 in the baseline, 0.0 in the no-size-penalty condition).
    pub alpha: f64,
    /// `formula` (default) or `measured`.
    #[serde(default)]
    pub model: CostKind,
    /// measured: energy units per joule (computed from the reference when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// measured: the reference model's size S (billions of parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_size: Option<f64>,
    /// measured: the reference model's joules per generated token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_j_per_token: Option<f64>,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            k: 0.015,
            alpha: 0.5,
            model: CostKind::Formula,
            scale: None,
            reference_size: None,
            reference_j_per_token: None,
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

    /// The price of a joule under `model = "measured"` (`None` under the
    /// formula): `scale`, else `k · reference_size^α / reference_j_per_token`.
    pub fn per_joule(&self) -> Option<f64> {
        match self.model {
            CostKind::Formula => None,
            CostKind::Measured => {
                self.scale
                    .or_else(|| match (self.reference_size, self.reference_j_per_token) {
                        (Some(s), Some(j)) if j > 0.0 => Some(self.per_token(s) / j),
                        _ => None,
                    })
            }
        }
    }

    /// Check the measured model's fields; `Err((field, message))`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let positive = |key: &str, v: Option<f64>| match v {
            Some(v) if !(v > 0.0 && v.is_finite()) => Err((
                format!("cost.{key}"),
                format!("expected a positive number, got {v}"),
            )),
            _ => Ok(()),
        };
        positive("scale", self.scale)?;
        positive("reference_size", self.reference_size)?;
        positive("reference_j_per_token", self.reference_j_per_token)?;
        match self.model {
            CostKind::Formula => {
                for (key, v) in [
                    ("scale", self.scale),
                    ("reference_size", self.reference_size),
                    ("reference_j_per_token", self.reference_j_per_token),
                ] {
                    if v.is_some() {
                        return Err((
                            format!("cost.{key}"),
                            "only the measured cost model reads it; set `model = \"measured\"` or remove it".into(),
                        ));
                    }
                }
            }
            CostKind::Measured => {
                let reference = (self.reference_size, self.reference_j_per_token);
                match (self.scale, reference) {
                    (Some(_), (None, None)) | (None, (Some(_), Some(_))) => {}
                    // A resolved config records the scale beside its reference.
                    (Some(scale), (Some(s), Some(j))) => {
                        let from_reference = self.per_token(s) / j;
                        if (scale - from_reference).abs() > 1e-9 * from_reference.abs() {
                            return Err((
                                "cost.scale".into(),
                                format!("{scale} disagrees with the reference (k · reference_size^α / reference_j_per_token = {from_reference}); give `scale` or the reference, not both"),
                            ));
                        }
                    }
                    (Some(_), _) => {
                        return Err((
                            "cost.scale".into(),
                            "give either `scale` or `reference_size` with `reference_j_per_token`, not both".into(),
                        ))
                    }
                    (None, (None, _)) => {
                        return Err((
                            "cost.reference_size".into(),
                            "the measured cost model needs `scale` (energy per joule), or `reference_size` (S of the reference model) and `reference_j_per_token` (its joules per generated token, from `joule calibrate`)".into(),
                        ))
                    }
                    (None, (Some(_), None)) => {
                        return Err((
                            "cost.reference_j_per_token".into(),
                            "expected the reference model's joules per generated token (from `joule calibrate`) beside `reference_size`".into(),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// The same model with `scale` filled in (what the resolved config records).
    pub fn resolved(&self) -> Self {
        let mut c = *self;
        if c.model == CostKind::Measured {
            c.scale = self.per_joule();
        }
        c
    }
}

/// The charge for `joules` measured joules at `per_joule`: `round(J · scale, 2)`.
pub fn joule_charge(joules: f64, per_joule: f64) -> f64 {
    py_round(joules * per_joule, 2)
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
            ..Default::default()
        };
        assert_eq!(flat.per_token(9.0), 0.015);
        // 1399 tokens of a 4B model: 41.97 (reference run_1, round 1, agent_1 vote).
        assert_eq!(c.charge(1399, 4.0), 41.97);
    }

    #[test]
    fn measured_scale_makes_the_reference_call_cost_the_formula() {
        let c = CostModel {
            model: CostKind::Measured,
            reference_size: Some(8.0),
            reference_j_per_token: Some(0.25),
            ..Default::default()
        };
        c.check().unwrap();
        let scale = c.per_joule().unwrap();
        // 1000 tokens of the reference model at 0.25 J/token = 250 J.
        assert_eq!(joule_charge(250.0, scale), c.charge(1000, 8.0));
        assert_eq!(c.resolved().scale, Some(scale));
        c.resolved().check().unwrap();
        let off = CostModel {
            scale: Some(scale * 1.01),
            ..c
        };
        assert_eq!(off.check().unwrap_err().0, "cost.scale");
        assert_eq!(CostModel::default().per_joule(), None);
        assert_eq!(CostModel::default().resolved(), CostModel::default());
    }

    #[test]
    fn measured_fields_are_checked_by_name() {
        let bad = |c: CostModel| c.check().unwrap_err().0;
        let m = CostModel {
            model: CostKind::Measured,
            ..Default::default()
        };
        assert_eq!(bad(m), "cost.reference_size");
        let m2 = CostModel {
            reference_size: Some(4.0),
            ..m
        };
        assert_eq!(bad(m2), "cost.reference_j_per_token");
        let m3 = CostModel {
            scale: Some(2.0),
            reference_j_per_token: None,
            ..m2
        };
        assert_eq!(bad(m3), "cost.scale");
        let m4 = CostModel {
            scale: Some(-1.0),
            ..m
        };
        assert_eq!(bad(m4), "cost.scale");
        let f = CostModel {
            scale: Some(1.0),
            ..Default::default()
        };
        assert_eq!(bad(f), "cost.scale");
        CostModel {
            scale: Some(3.0),
            ..m
        }
        .check()
        .unwrap();
    }

    #[test]
    fn clamp_never_goes_negative() {
        assert_eq!(clamp_sub(5.0, 10.0), 0.0);
        assert_eq!(clamp_sub(15.0, 10.0), 5.0);
    }
}
