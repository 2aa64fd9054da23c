//! The gated delta rule (Qwen3.5's linear attention), on the host in f32:
//! a recurrent form that takes one token at a time (decoding) and a chunked
//! form that takes a whole prompt in chunks of [`CHUNK`] tokens, both from
//! and to the same per-head state. They compute the same function; the
//! chunked form does it with small matrix products per chunk instead of one
//! rank-1 update per token. The CUDA kernels are tested against these.
//!
//! Per value head `h` with state `S` (`[d_k, d_v]`), for each token `t`
//! (transformers' `torch_recurrent_gated_delta_rule`):
//! ```text
//! S  ← S · exp(g_t)
//! δ  ← (v_t − Sᵀ k_t) · β_t
//! S  ← S + k_t ⊗ δ
//! o_t = Sᵀ q_t
//! ```
//! where `q`, `k` are L2-normalised and `q` is scaled by `1/√d_k`
//! ([`normalize_qk`]). The chunked form is transformers'
//! `torch_chunk_gated_delta_rule` (the UT transform: a unit lower-triangular
//! solve per chunk).
//!
//! Value heads share key heads: value head `h` reads key head `h mod n_k`
//! when the file stores value heads in tiled order (llama.cpp's converter
//! reorders them so), or `h / (n_v / n_k)` in grouped order (transformers').

use super::nn::{decay, dot, gemm_acc};

/// Tokens per chunk of the chunked form (transformers' and llama.cpp's 64).
pub const CHUNK: usize = 64;

/// Head counts and sizes of one delta-net layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub n_k: usize,
    pub n_v: usize,
    pub d_k: usize,
    pub d_v: usize,
    /// Value heads in tiled order (`h mod n_k`) rather than grouped.
    pub tiled: bool,
}

impl Dims {
    /// The key head that value head `h` reads.
    pub fn key_head(&self, h: usize) -> usize {
        if self.tiled {
            h % self.n_k
        } else {
            h / (self.n_v / self.n_k)
        }
    }

    pub fn state_len(&self) -> usize {
        self.n_v * self.d_k * self.d_v
    }
}

/// L2-normalise each head of `q` and `k` (`[t, n_k, d_k]`, eps 1e-6 inside
/// the square root, as transformers and the FLA library do) and scale `q`
/// by `1/√d_k`.
pub fn normalize_qk(q: &mut [f32], k: &mut [f32], d_k: usize) {
    let scale = 1.0 / (d_k as f32).sqrt();
    for (x, s) in [(q, scale), (k, 1.0)] {
        for head in x.chunks_exact_mut(d_k) {
            let ss: f32 = head.iter().map(|v| v * v).sum();
            let inv = 1.0 / (ss + 1e-6).sqrt() * s;
            head.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

/// One sequence's inputs to a delta-net layer, for `t` tokens: `q`, `k`
/// `[t, n_k, d_k]` (normalised), `v` `[t, n_v, d_v]`, `g` (log decay, ≤ 0)
/// and `beta` `[t, n_v]`.
pub struct Inputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
}

impl Inputs<'_> {
    fn tokens(&self, d: &Dims) -> usize {
        self.g.len() / d.n_v
    }
}

/// Run the delta rule over the inputs from `state` (`[n_v, d_k, d_v]`,
/// updated in place). Uses the chunked form when `chunked`, else one token
/// at a time. Returns the outputs `[t, n_v, d_v]`. Heads run in parallel on
/// candle's CPU worker pool when the step is large enough to pay for it.
pub fn run(d: &Dims, x: &Inputs<'_>, state: &mut [f32], chunked: bool) -> Vec<f32> {
    let t = x.tokens(d);
    super::nn::run_heads(state, d.n_v, t, d.d_v, |h, s| {
        if chunked {
            head_chunked(d, x, h, s)
        } else {
            head_recurrent(d, x, h, None, s)
        }
    })
}

/// [`run`] from `old` (read only: a sequence's committed state, borrowed in
/// place) into a new state: returns the outputs and the new state. The
/// recurrent form's first decay pass reads `old` and writes the new state
/// (no copy of the state before or after the step); the chunked form
/// copies each head's block first. Bit for bit [`run`]'s results.
pub fn run_from(d: &Dims, x: &Inputs<'_>, old: &[f32], chunked: bool) -> (Vec<f32>, Vec<f32>) {
    let t = x.tokens(d);
    let dv = d.d_v;
    super::nn::run_heads_from(old, d.n_v, t, dv, |h, old_h, fresh| {
        if chunked || t == 0 {
            let s = fresh.copy_from(old_h);
            return head_chunked(d, x, h, s);
        }
        let (_, k, _) = at(d, x, 0, h);
        let decay = x.g[h].exp();
        let mut mem = vec![0f32; dv];
        let s = fresh.write_rows(dv, |i, row| {
            let ki = k[i];
            for ((&r0, w), m) in old_h[i * dv..(i + 1) * dv]
                .iter()
                .zip(row.iter_mut())
                .zip(mem.iter_mut())
            {
                let r = r0 * decay;
                w.write(r);
                *m += r * ki;
            }
        });
        head_recurrent(d, x, h, Some(mem), s)
    })
}

/// Slices of token `ti` for value head `h`.
fn at<'a>(d: &Dims, x: &Inputs<'a>, ti: usize, h: usize) -> (&'a [f32], &'a [f32], &'a [f32]) {
    let kh = d.key_head(h);
    let qk = (ti * d.n_k + kh) * d.d_k;
    let vo = (ti * d.n_v + h) * d.d_v;
    (
        &x.q[qk..qk + d.d_k],
        &x.k[qk..qk + d.d_k],
        &x.v[vo..vo + d.d_v],
    )
}

/// The recurrent form for one value head; returns `[t, d_v]`. With
/// `first` (`Sᵀk` of the first token, whose decay [`run_from`] already
/// applied to `s`) the first token's decay pass is skipped.
fn head_recurrent(
    d: &Dims,
    x: &Inputs<'_>,
    h: usize,
    first: Option<Vec<f32>>,
    s: &mut [f32],
) -> Vec<f32> {
    let t = x.tokens(d);
    let dv = d.d_v;
    let mut out = vec![0f32; t * dv];
    let decayed = first.is_some();
    let mut mem = first.unwrap_or_else(|| vec![0f32; dv]);
    for ti in 0..t {
        let (q, k, v) = at(d, x, ti, h);
        let decay = x.g[ti * d.n_v + h].exp();
        let beta = x.beta[ti * d.n_v + h];
        if ti > 0 || !decayed {
            mem.iter_mut().for_each(|m| *m = 0.0);
            for (i, row) in s.chunks_exact_mut(dv).enumerate() {
                let ki = k[i];
                for (r, m) in row.iter_mut().zip(mem.iter_mut()) {
                    *r *= decay;
                    *m += *r * ki;
                }
            }
        }
        // δ = (v − Sᵀk)·β, reusing `mem`.
        for (m, &vj) in mem.iter_mut().zip(v) {
            *m = (vj - *m) * beta;
        }
        let o = &mut out[ti * dv..(ti + 1) * dv];
        for (i, row) in s.chunks_exact_mut(dv).enumerate() {
            let (ki, qi) = (k[i], q[i]);
            for ((r, &dj), oj) in row.iter_mut().zip(mem.iter()).zip(o.iter_mut()) {
                *r += ki * dj;
                *oj += *r * qi;
            }
        }
    }
    out
}

/// The chunked form for one value head; returns `[t, d_v]`.
fn head_chunked(d: &Dims, x: &Inputs<'_>, h: usize, s: &mut [f32]) -> Vec<f32> {
    let t = x.tokens(d);
    let (dk, dv) = (d.d_k, d.d_v);
    let mut out = vec![0f32; t * dv];
    for c0 in (0..t).step_by(CHUNK) {
        let l = CHUNK.min(t - c0);
        let tok = |i: usize| at(d, x, c0 + i, h);
        let beta = |i: usize| x.beta[(c0 + i) * d.n_v + h];
        // Cumulative log decay inside the chunk.
        let mut cum = vec![0f32; l];
        let mut acc = 0f32;
        for (i, c) in cum.iter_mut().enumerate() {
            acc += x.g[(c0 + i) * d.n_v + h];
            *c = acc;
        }
        // A[i][j] = β_i (k_i·k_j) e^{cum_i − cum_j} for j < i (strictly lower).
        // Solve (I + A) X = B by forward substitution for
        // X = new values (B = β v) and K = decayed keys (B = β k e^{cum}).
        let mut a = vec![0f32; l * l];
        for i in 0..l {
            let (_, ki, _) = tok(i);
            for j in 0..i {
                let (_, kj, _) = tok(j);
                a[i * l + j] = beta(i) * dot(ki, kj) * decay(cum[i] - cum[j]);
            }
        }
        let mut xv = vec![0f32; l * dv];
        let mut xk = vec![0f32; l * dk];
        for i in 0..l {
            let (_, ki, vi) = tok(i);
            let b = beta(i);
            let e = decay(cum[i]);
            let (done_v, row_v) = xv.split_at_mut(i * dv);
            let row_v = &mut row_v[..dv];
            row_v.iter_mut().zip(vi).for_each(|(r, &v)| *r = b * v);
            let (done_k, row_k) = xk.split_at_mut(i * dk);
            let row_k = &mut row_k[..dk];
            row_k.iter_mut().zip(ki).for_each(|(r, &k)| *r = b * k * e);
            for j in 0..i {
                let aij = a[i * l + j];
                if aij == 0.0 {
                    continue;
                }
                row_v
                    .iter_mut()
                    .zip(&done_v[j * dv..(j + 1) * dv])
                    .for_each(|(r, &p)| *r -= aij * p);
                row_k
                    .iter_mut()
                    .zip(&done_k[j * dk..(j + 1) * dk])
                    .for_each(|(r, &p)| *r -= aij * p);
            }
        }
        // u_i = X_i − K_i S (what the old state does not already predict).
        let mut u = xv;
        let mut ks = vec![0f32; l * dv];
        gemm_acc(&mut ks, &xk, s, l, dk, dv);
        u.iter_mut().zip(&ks).for_each(|(o, &p)| *o -= p);
        // o_i = (q_i e^{cum_i}) S + Σ_{j≤i} (q_i·k_j) e^{cum_i − cum_j} u_j
        let mut qe = vec![0f32; l * dk];
        for (i, row) in qe.chunks_exact_mut(dk).enumerate() {
            let e = decay(cum[i]);
            row.iter_mut()
                .zip(tok(i).0)
                .for_each(|(r, &qv)| *r = qv * e);
        }
        let mut w = vec![0f32; l * l];
        for i in 0..l {
            let (qi, _, _) = tok(i);
            for j in 0..=i {
                w[i * l + j] = dot(qi, tok(j).1) * decay(cum[i] - cum[j]);
            }
        }
        let o = &mut out[c0 * dv..(c0 + l) * dv];
        gemm_acc(o, &qe, s, l, dk, dv);
        gemm_acc(o, &w, &u, l, l, dv);
        // S ← S e^{cum_last} + Σ_i (k_i e^{cum_last − cum_i}) ⊗ u_i, the sum
        // as (K ⊙ w)ᵀ U.
        let last = cum[l - 1];
        let el = decay(last);
        s.iter_mut().for_each(|v| *v *= el);
        let mut kwt = vec![0f32; dk * l];
        for i in 0..l {
            let (_, ki, _) = tok(i);
            let f = decay(last - cum[i]);
            for (r, &kv) in ki.iter().enumerate() {
                kwt[r * l + i] = kv * f;
            }
        }
        gemm_acc(s, &kwt, &u, dk, l, dv);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random(n: usize, rng: &mut rand_chacha::ChaCha8Rng, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(lo..hi)).collect()
    }

    fn case(t: usize, d: &Dims, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut q = random(t * d.n_k * d.d_k, &mut rng, -1.0, 1.0);
        let mut k = random(t * d.n_k * d.d_k, &mut rng, -1.0, 1.0);
        normalize_qk(&mut q, &mut k, d.d_k);
        let v = random(t * d.n_v * d.d_v, &mut rng, -1.0, 1.0);
        let g = random(t * d.n_v, &mut rng, -1.5, -0.01);
        let beta = random(t * d.n_v, &mut rng, 0.0, 1.0);
        (q, k, v, g, beta)
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn chunked_equals_recurrent_across_chunks_and_states() {
        for tiled in [true, false] {
            let d = Dims {
                n_k: 2,
                n_v: 4,
                d_k: 8,
                d_v: 6,
                tiled,
            };
            let t = 150; // three chunks, the last one partial
            let (q, k, v, g, beta) = case(t, &d, 7);
            let x = Inputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &beta,
            };
            let mut s0: Vec<f32> = (0..d.state_len())
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let mut s1 = s0.clone();
            let o_rec = run(&d, &x, &mut s0, false);
            let o_chk = run(&d, &x, &mut s1, true);
            assert!(max_diff(&o_rec, &o_chk) < 1e-4, "outputs differ");
            assert!(max_diff(&s0, &s1) < 1e-4, "final states differ");
        }
    }

    #[test]
    fn splitting_a_sequence_gives_the_same_result() {
        let d = Dims {
            n_k: 1,
            n_v: 2,
            d_k: 4,
            d_v: 4,
            tiled: true,
        };
        let t = 70;
        let (q, k, v, g, beta) = case(t, &d, 3);
        let whole = Inputs {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
        };
        let mut s = vec![0f32; d.state_len()];
        let o = run(&d, &whole, &mut s, true);
        let cut = 65;
        let part = |a: &[f32], per: usize, r: std::ops::Range<usize>| {
            a[r.start * per..r.end * per].to_vec()
        };
        let (kq, kv) = (d.n_k * d.d_k, d.n_v * d.d_v);
        let mut s2 = vec![0f32; d.state_len()];
        let mut o2 = Vec::new();
        for r in [0..cut, cut..t] {
            let (q, k, v, g, b) = (
                part(&q, kq, r.clone()),
                part(&k, kq, r.clone()),
                part(&v, kv, r.clone()),
                part(&g, d.n_v, r.clone()),
                part(&beta, d.n_v, r.clone()),
            );
            let x = Inputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &b,
            };
            o2.extend(run(&d, &x, &mut s2, r.len() > 1));
        }
        assert!(max_diff(&o, &o2) < 1e-4);
        assert!(max_diff(&s, &s2) < 1e-4);
    }

    /// The model's path (the old state read in place, the first decay pass
    /// writing the new state) gives the in-place rule's outputs and state
    /// bit for bit: one token, several recurrent tokens, a chunked prompt,
    /// at a small width (the calling thread) and at Qwen3.5-4B's (the worker
    /// pool); and one decoded token against the rule written out in f64.
    #[test]
    fn run_from_is_run_bit_for_bit_and_the_f64_rule() {
        let small = Dims {
            n_k: 2,
            n_v: 4,
            d_k: 8,
            d_v: 6,
            tiled: true,
        };
        let real = Dims {
            n_k: 16,
            n_v: 32,
            d_k: 128,
            d_v: 128,
            tiled: true,
        };
        let same = |a: &[f32], b: &[f32]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        };
        for (d, t, chunked) in [
            (small, 1, false),
            (small, 5, false),
            (small, 70, true),
            (real, 1, false),
            (real, 3, false),
        ] {
            let (q, k, v, g, beta) = case(t, &d, 9 + t as u64);
            let x = Inputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &beta,
            };
            let old: Vec<f32> = (0..d.state_len())
                .map(|i| ((i % 7919) as f32 * 0.011).sin() * 0.1)
                .collect();
            let mut s = old.clone();
            let o = run(&d, &x, &mut s, chunked);
            let (o2, s2) = run_from(&d, &x, &old, chunked);
            assert!(same(&o, &o2), "{d:?} t {t}: outputs differ");
            assert!(same(&s, &s2), "{d:?} t {t}: states differ");
            if t != 1 {
                continue;
            }
            for h in 0..d.n_v {
                let kh = d.key_head(h);
                let (dk, dv) = (d.d_k, d.d_v);
                let kk = &k[kh * dk..(kh + 1) * dk];
                let qq = &q[kh * dk..(kh + 1) * dk];
                let decay = (g[h] as f64).exp();
                let st: Vec<f64> = old[h * dk * dv..(h + 1) * dk * dv]
                    .iter()
                    .map(|&v| v as f64 * decay)
                    .collect();
                for j in 0..dv {
                    let sk: f64 = (0..dk).map(|i| st[i * dv + j] * kk[i] as f64).sum();
                    let delta = (v[h * dv + j] as f64 - sk) * beta[h] as f64;
                    let mut out = 0f64;
                    for i in 0..dk {
                        let sv = st[i * dv + j] + kk[i] as f64 * delta;
                        out += sv * qq[i] as f64;
                        let got = s2[h * dk * dv + i * dv + j] as f64;
                        assert!((got - sv).abs() < 1e-5, "head {h} state {i},{j}");
                    }
                    let got = o2[h * dv + j] as f64;
                    assert!((got - out).abs() < 1e-5, "head {h} out {j}: {got} vs {out}");
                }
            }
        }
    }

    #[test]
    fn key_head_orders() {
        let tiled = Dims {
            n_k: 2,
            n_v: 6,
            d_k: 1,
            d_v: 1,
            tiled: true,
        };
        let grouped = Dims {
            tiled: false,
            ..tiled
        };
        let t: Vec<usize> = (0..6).map(|h| tiled.key_head(h)).collect();
        let g: Vec<usize> = (0..6).map(|h| grouped.key_head(h)).collect();
        assert_eq!(t, vec![0, 1, 0, 1, 0, 1]);
        assert_eq!(g, vec![0, 0, 0, 1, 1, 1]);
    }
}
