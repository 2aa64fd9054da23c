//! Element-wise activations on the CPU in plain arithmetic the compiler vectorises, for
//! those candle computes one value at a time through libm.
//!
//! - [`gelu_tanh`]: GELU with the tanh approximation (Gemma's `gelu_pytorch_tanh`),
//!   `0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))`, candle's formula with `tanh(u)` as
//!   `sign(u)·(1 − e)/(1 + e)`, `e = exp(−2|u|)` from the softmax's exponential
//!   ([`super::cpu_attention::exp_neg`], relative error about 1e-7). Candle's `gelu` spent
//!   4 % of a full-size Gemma 4 decode step in `tanhf`/`expm1f` (measured with perf).
//! - [`softcap`]: `cap·tanh(x / cap)` (Gemma's final-logit and attention soft-capping), the
//!   same `tanh`: candle's `tanh` took libm's `tanhf` for each of Gemma 4's 262,144 logits
//!   per token.

use super::cpu_attention::exp_neg;

/// `√(2/π)`.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// `tanh(u)` as `sign(u)·(1 − e)/(1 + e)`, `e = exp(−2|u|)` (inlined into vector loops).
#[inline(always)]
fn tanh(u: f32) -> f32 {
    let e = exp_neg(-2.0 * u.abs());
    ((1.0 - e) / (1.0 + e)).copysign(u)
}

/// GELU (tanh approximation) of every value, in place.
pub fn gelu_tanh(v: &mut [f32]) {
    for x in v.iter_mut() {
        let a = *x;
        let u = SQRT_2_OVER_PI * a * (1.0 + 0.044_715 * a * a);
        *x = 0.5 * a * (1.0 + tanh(u));
    }
}

/// `cap·tanh(x / cap)` of every value, in place.
pub fn softcap(v: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    for x in v.iter_mut() {
        *x = cap * tanh(*x * inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `cap·tanh(x/cap)` in f64 and candle's `tanh`, over logits' range and beyond.
    #[test]
    fn softcap_matches_the_formula() {
        let mut xs: Vec<f32> = (-20_000..=20_000).map(|i| i as f32 * 0.01).collect();
        xs.extend([1e-30, -1e-30, 0.0, -0.0, 1e6, -1e6, 3e38, -3e38]);
        for cap in [30.0f32, 50.0] {
            let mut got = xs.clone();
            softcap(&mut got, cap);
            let t = candle_core::Tensor::new(xs.as_slice(), &candle_core::Device::Cpu).unwrap();
            let c: Vec<f32> = ((t / cap as f64).unwrap().tanh().unwrap() * cap as f64)
                .unwrap()
                .to_vec1()
                .unwrap();
            for ((&x, &g), &c) in xs.iter().zip(&got).zip(&c) {
                let want = cap as f64 * (x as f64 / cap as f64).tanh();
                // `1 − e` cancels near 0: an absolute error of a few 1e-7·cap there (a logit
                // of 30 has an ulp of 2e-6), relative 4e-6 elsewhere.
                let tol = 4e-7 * cap as f64 + 4e-6 * want.abs();
                assert!(
                    (g as f64 - want).abs() <= tol,
                    "softcap({x}, {cap}) = {g}, want {want}"
                );
                assert!(
                    (g - c).abs() as f64 <= tol,
                    "softcap({x}, {cap}) = {g}, candle {c}"
                );
            }
        }
    }

    /// Against the formula with f64's `tanh`, over the range activations take and beyond
    /// (where `exp` underflows and `tanh` is ±1), zero and non-finite inputs.
    #[test]
    fn gelu_tanh_matches_the_formula() {
        let mut xs: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 0.001).collect();
        xs.extend([1e-30, -1e-30, 0.0, -0.0, 1e4, -1e4, 3e38, -3e38]);
        let mut got = xs.clone();
        gelu_tanh(&mut got);
        for (&x, &g) in xs.iter().zip(&got) {
            let xd = x as f64;
            let u = (2.0 / std::f64::consts::PI).sqrt() * xd * (1.0 + 0.044715 * xd * xd);
            let want = 0.5 * xd * (1.0 + u.tanh());
            let tol = 2e-6 * xd.abs().max(1e-3);
            assert!(
                (g as f64 - want).abs() <= tol || (want.is_nan() && g.is_nan()),
                "gelu({x}) = {g}, want {want}"
            );
        }
        // Candle's own `gelu` on the same values: within the same tolerance.
        let t = candle_core::Tensor::new(xs.as_slice(), &candle_core::Device::Cpu).unwrap();
        let c: Vec<f32> = t.gelu().unwrap().to_vec1().unwrap();
        for ((&x, &g), &c) in xs.iter().zip(&got).zip(&c) {
            if x.abs() < 1e3 {
                assert!(
                    (g - c).abs() <= 2e-6 * x.abs().max(1e-3),
                    "gelu({x}): {g} against candle's {c}"
                );
            }
        }
    }
}
