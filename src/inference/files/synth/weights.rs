//! Random weights for synthesized models: each tensor's values come from its name, the seed
//! and the element's index alone (a counter-based generator), so a tensor can be produced in
//! any number of chunks, in parallel, without holding it whole, and the same seed always gives
//! the same file. Values are uniform with the standard deviation the initialiser asks for.

/// How a tensor's values are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    /// Zero-mean, this standard deviation (uniform on ±std·√3).
    Std(f32),
    /// Uniform on [lo, hi).
    Uniform(f32, f32),
    /// −Uniform(lo, hi): a decay rate stored as a negative number (`ssm_a`).
    NegUniform(f32, f32),
    /// softplus⁻¹ of a log-uniform dt in [lo, hi] (Mamba-2's `dt_bias`).
    InvSoftplusLogUniform(f32, f32),
    /// Like `Std`, but every `every`-th row (of `row` elements) is `boost` times larger: an
    /// output matrix with a few "frequent" tokens, so the next-token distribution is peaked as
    /// a trained model's is, rather than flat over the whole vocabulary.
    StdBoostRows {
        std: f32,
        row: u64,
        every: u64,
        boost: f32,
    },
    /// `n_rot` ones then 1e30 (Gemma 4's `rope_freqs` for proportional RoPE).
    RopeFreqs { n_rot: u64 },
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The generator's key for one tensor of one seed (FNV-1a of the name, mixed with the seed).
pub fn tensor_key(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    splitmix(h ^ splitmix(seed))
}

/// Fills `out` with elements `start..start + out.len()` of the tensor.
pub fn fill(init: &Init, key: u64, start: u64, out: &mut [f32]) {
    let unit = |i: u64| -> f32 {
        // 24 random bits -> [0, 1)
        (splitmix(key ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93)) >> 40) as f32 / (1u64 << 24) as f32
    };
    match *init {
        Init::Std(std) => {
            let a = std * 3f32.sqrt();
            for (j, o) in out.iter_mut().enumerate() {
                *o = (2.0 * unit(start + j as u64) - 1.0) * a;
            }
        }
        Init::StdBoostRows {
            std,
            row,
            every,
            boost,
        } => {
            let a = std * 3f32.sqrt();
            for (j, o) in out.iter_mut().enumerate() {
                let i = start + j as u64;
                let g = if (i / row.max(1)) % every.max(1) == 0 {
                    boost
                } else {
                    1.0
                };
                *o = (2.0 * unit(i) - 1.0) * a * g;
            }
        }
        Init::Uniform(lo, hi) => {
            for (j, o) in out.iter_mut().enumerate() {
                *o = lo + (hi - lo) * unit(start + j as u64);
            }
        }
        Init::NegUniform(lo, hi) => {
            for (j, o) in out.iter_mut().enumerate() {
                *o = -(lo + (hi - lo) * unit(start + j as u64));
            }
        }
        Init::InvSoftplusLogUniform(lo, hi) => {
            for (j, o) in out.iter_mut().enumerate() {
                let dt = (lo.ln() + (hi.ln() - lo.ln()) * unit(start + j as u64)).exp();
                // softplus(b) = dt  <=>  b = dt + ln(1 - e^-dt)
                *o = dt + (-(-dt).exp_m1()).ln();
            }
        }
        Init::RopeFreqs { n_rot } => {
            for (j, o) in out.iter_mut().enumerate() {
                *o = if start + (j as u64) < n_rot {
                    1.0
                } else {
                    1e30
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_match_whole_and_std_is_right() {
        let key = tensor_key(7, "blk.0.attn_q.weight");
        let mut whole = vec![0f32; 10_000];
        fill(&Init::Std(0.5), key, 0, &mut whole);
        let mut parts = vec![0f32; 10_000];
        fill(&Init::Std(0.5), key, 0, &mut parts[..3000]);
        fill(&Init::Std(0.5), key, 3000, &mut parts[3000..]);
        assert_eq!(whole, parts);
        let var = whole.iter().map(|x| x * x).sum::<f32>() / whole.len() as f32;
        assert!((var.sqrt() - 0.5).abs() < 0.02, "std {}", var.sqrt());
        let other = tensor_key(8, "blk.0.attn_q.weight");
        let mut b = vec![0f32; 16];
        fill(&Init::Std(0.5), other, 0, &mut b);
        assert_ne!(&whole[..16], &b[..]);
    }

    #[test]
    fn dt_bias_inverts_softplus() {
        let mut b = vec![0f32; 100];
        fill(&Init::InvSoftplusLogUniform(0.01, 0.2), 1, 0, &mut b);
        for x in b {
            let dt = (1.0 + x.exp()).ln();
            assert!((0.0099..=0.2001).contains(&dt), "{dt}");
        }
    }
}
