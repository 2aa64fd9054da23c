//! The Mamba-2 selective state-space scan (Nemotron-H's recurrent layers),
//! on the host in f32: a recurrent form that takes one token at a time
//! (decoding) and a chunked form (the SSD "state-space duality" form) that
//! takes a whole prompt in chunks of [`CHUNK`] tokens, both from and to the
//! same per-head state. They compute the same function; the chunked form
//! replaces the per-token state update inside a chunk by an
//! attention-like product over the chunk's positions, and touches the state
//! once per chunk.
//!
//! Per head `h` (head size `p`, state size `n`, state `S` `[p, n]`), for each
//! token with inputs `x` (`[p]`), `B`, `C` (`[n]`, shared by the heads of a
//! group), step size `dt > 0` (already `softplus(dt + dt_bias)`), `A < 0`
//! and skip weight `D` (transformers' `mamba2_selective_state_update`,
//! llama.cpp's `ggml_ssm_scan`):
//! ```text
//! S ← S · exp(dt·A) + (dt · x) ⊗ B
//! y = S · C + D · x
//! ```
//! The chunked form (transformers' `mamba2_chunk_scan`): with `a_t = dt_t·A`
//! and `c_t` the running sum of `a` inside the chunk,
//! ```text
//! y_i = e^{c_i} S₀·C_i + Σ_{j≤i} (C_i·B_j) e^{c_i − c_j} dt_j x_j + D x_i
//! S   ← e^{c_last} S₀ + Σ_j e^{c_last − c_j} (dt_j x_j) ⊗ B_j
//! ```
//! Every exponent is ≤ 0, so nothing overflows. Heads map to groups in
//! blocks (`repeat_interleave`): head `h` reads group `h / (n_head / n_group)`.

use super::nn::{decay, dot, gemm_acc};

/// Tokens per chunk of the chunked form. The result does not depend on it
/// (beyond rounding); transformers uses the config's `chunk_size`, which the
/// GGUF file does not keep.
pub const CHUNK: usize = 64;

/// Sizes of one Mamba-2 layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub n_head: usize,
    pub head_dim: usize,
    pub d_state: usize,
    pub n_group: usize,
}

impl Dims {
    /// The group (of `B` and `C`) that head `h` reads.
    pub fn group(&self, h: usize) -> usize {
        h / (self.n_head / self.n_group)
    }

    /// `n_head · head_dim` (the inner size).
    pub fn inner(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Elements of one sequence's state, `[n_head, head_dim, d_state]`.
    pub fn state_len(&self) -> usize {
        self.n_head * self.head_dim * self.d_state
    }
}

/// One sequence's inputs to a Mamba-2 scan for `t` tokens: `x` `[t, n_head,
/// head_dim]`, `b` and `c` `[t, n_group, d_state]`, `dt` `[t, n_head]` (after
/// bias and softplus).
pub struct Inputs<'a> {
    pub x: &'a [f32],
    pub b: &'a [f32],
    pub c: &'a [f32],
    pub dt: &'a [f32],
}

/// The per-head constants of a layer: `a` (`A`, negative: llama.cpp's
/// converter stores `−exp(A_log)`) and `d` (the skip weight), `[n_head]`.
pub struct Params<'a> {
    pub a: &'a [f32],
    pub d: &'a [f32],
}

impl Inputs<'_> {
    fn tokens(&self, d: &Dims) -> usize {
        self.dt.len() / d.n_head
    }

    /// `x`, `B`, `C` and `dt` of token `ti` for head `h`.
    fn at(&self, d: &Dims, ti: usize, h: usize) -> (&[f32], &[f32], &[f32], f32) {
        let xo = (ti * d.n_head + h) * d.head_dim;
        let go = (ti * d.n_group + d.group(h)) * d.d_state;
        (
            &self.x[xo..xo + d.head_dim],
            &self.b[go..go + d.d_state],
            &self.c[go..go + d.d_state],
            self.dt[ti * d.n_head + h],
        )
    }
}

/// Run the scan over the inputs from `state` (`[n_head, head_dim, d_state]`,
/// updated in place), in the chunked form when `chunked`, else one token at
/// a time. Returns `y` `[t, n_head, head_dim]`, the `D` skip included. Heads
/// run in parallel on candle's CPU worker pool when the step is large enough.
pub fn run(d: &Dims, p: &Params<'_>, x: &Inputs<'_>, state: &mut [f32], chunked: bool) -> Vec<f32> {
    let t = x.tokens(d);
    super::nn::run_heads(state, d.n_head, t, d.head_dim, |h, s| {
        if chunked {
            head_chunked(d, p, x, h, s)
        } else {
            head_recurrent(d, p, x, h, None, s)
        }
    })
}

/// [`run`] from `old` (read only: a sequence's committed state, borrowed in
/// place) into a new state: returns `y` and the new state. The recurrent
/// form's first token reads `old` and writes the new state in the same
/// sweep of each head (a decode step passes over the state once); the
/// chunked form copies each head's block first. Bit for bit [`run`]'s
/// results.
pub fn run_from(
    d: &Dims,
    p: &Params<'_>,
    x: &Inputs<'_>,
    old: &[f32],
    chunked: bool,
) -> (Vec<f32>, Vec<f32>) {
    let t = x.tokens(d);
    let n = d.d_state;
    super::nn::run_heads_from(old, d.n_head, t, d.head_dim, |h, old_h, fresh| {
        if chunked || t == 0 {
            let s = fresh.copy_from(old_h);
            return head_chunked(d, p, x, h, s);
        }
        // The first token from the old rows into the new ones.
        let (xt, bt, ct, dt) = x.at(d, 0, h);
        let decay = (dt * p.a[h]).exp();
        let mut y0 = vec![0f32; d.head_dim];
        let s = fresh.write_rows(n, |pi, row| {
            let u = dt * xt[pi];
            y0[pi] =
                row_into(&old_h[pi * n..(pi + 1) * n], row, bt, ct, decay, u) + p.d[h] * xt[pi];
        });
        head_recurrent(d, p, x, h, Some(y0), s)
    })
}

/// One row of a head's state for one token: `row ← row · decay + u · B`,
/// then `row · C` ([`dot`]) while the row is still in the L1 cache, so the
/// state is swept once per token. (One loop that also accumulated `row · C`
/// lane by lane vectorised worse, two floats per instruction, and so did
/// [`dot`] inlined into the heads' closures: a function of its own gets the
/// full vector width.)
#[inline(never)]
fn row_step(row: &mut [f32], b: &[f32], c: &[f32], decay: f32, u: f32) -> f32 {
    for (r, &bv) in row.iter_mut().zip(b) {
        *r = *r * decay + u * bv;
    }
    dot(row, c)
}

/// [`row_step`] from `old` into `new` (written in full), bit for bit.
#[inline(never)]
fn row_into(
    old: &[f32],
    new: &mut [std::mem::MaybeUninit<f32>],
    b: &[f32],
    c: &[f32],
    decay: f32,
    u: f32,
) -> f32 {
    let n = old.len();
    let (new, b) = (&mut new[..n], &b[..n]);
    for ((w, &o), &bv) in new.iter_mut().zip(old).zip(b) {
        w.write(o * decay + u * bv);
    }
    // SAFETY: the loop above wrote all `n` elements of `new` (`old`, `new`
    // and `b` are `n` long); `MaybeUninit<f32>` has `f32`'s layout.
    let new = unsafe { &*(new as *const [std::mem::MaybeUninit<f32>] as *const [f32]) };
    dot(new, c)
}

/// The recurrent form for one head; returns `[t, head_dim]`. With `first`
/// (the first token's outputs, its step already applied to `s` by
/// [`run_from`]) it starts at the second token.
fn head_recurrent(
    d: &Dims,
    p: &Params<'_>,
    x: &Inputs<'_>,
    h: usize,
    first: Option<Vec<f32>>,
    s: &mut [f32],
) -> Vec<f32> {
    let t = x.tokens(d);
    let (pd, n) = (d.head_dim, d.d_state);
    let (a, skip) = (p.a[h], p.d[h]);
    let mut out = Vec::with_capacity(t * pd);
    let start = match first {
        Some(y0) => {
            out.extend_from_slice(&y0);
            1
        }
        None => 0,
    };
    out.resize(t * pd, 0.0);
    for ti in start..t {
        let (xt, bt, ct, dt) = x.at(d, ti, h);
        let decay = (dt * a).exp();
        let o = &mut out[ti * pd..(ti + 1) * pd];
        for ((row, &xi), oi) in s.chunks_exact_mut(n).zip(xt).zip(o.iter_mut()) {
            *oi = row_step(row, bt, ct, decay, dt * xi) + skip * xi;
        }
    }
    out
}

/// The chunked form for one head; returns `[t, head_dim]`. The products
/// with the state and across the chunk run as small matrix products
/// ([`gemm_acc`]).
fn head_chunked(d: &Dims, p: &Params<'_>, x: &Inputs<'_>, h: usize, s: &mut [f32]) -> Vec<f32> {
    let t = x.tokens(d);
    let (pd, n) = (d.head_dim, d.d_state);
    let (a, skip) = (p.a[h], p.d[h]);
    let mut out = vec![0f32; t * pd];
    let mut cum = Vec::with_capacity(CHUNK);
    let mut w = vec![0f32; CHUNK * CHUNK];
    let mut ce = vec![0f32; CHUNK * n];
    let mut xc = vec![0f32; CHUNK * pd];
    let mut st = vec![0f32; n * pd];
    let mut xft = vec![0f32; pd * CHUNK];
    let mut bc = vec![0f32; CHUNK * n];
    for c0 in (0..t).step_by(CHUNK) {
        let l = CHUNK.min(t - c0);
        let tok = |i: usize| x.at(d, c0 + i, h);
        cum.clear();
        let mut acc = 0f32;
        for i in 0..l {
            acc += tok(i).3 * a;
            cum.push(acc);
        }
        let o = &mut out[c0 * pd..(c0 + l) * pd];
        // The skip; the chunk's x, C e^{c} and B as rows; the state transposed.
        for i in 0..l {
            let (xi, bi, ci, _) = tok(i);
            let e = decay(cum[i]);
            o[i * pd..(i + 1) * pd]
                .iter_mut()
                .zip(xi)
                .for_each(|(oj, &xv)| *oj = skip * xv);
            xc[i * pd..(i + 1) * pd].copy_from_slice(xi);
            ce[i * n..(i + 1) * n]
                .iter_mut()
                .zip(ci)
                .for_each(|(r, &cv)| *r = cv * e);
            bc[i * n..(i + 1) * n].copy_from_slice(bi);
        }
        for (pi, row) in s.chunks_exact(n).enumerate() {
            for (ni, &sv) in row.iter().enumerate() {
                st[ni * pd + pi] = sv;
            }
        }
        // What the state at the chunk's start contributes: (C e^{c}) Sᵀ.
        gemm_acc(o, &ce[..l * n], &st, l, n, pd);
        // The chunk's own tokens up to each one: W X with
        // W[i][j] = (C_i·B_j) e^{c_i − c_j} dt_j for j ≤ i.
        w[..l * l].iter_mut().for_each(|v| *v = 0.0);
        for i in 0..l {
            let ci = tok(i).2;
            for j in 0..=i {
                let (_, bj, _, dtj) = tok(j);
                w[i * l + j] = dot(ci, bj) * decay(cum[i] - cum[j]) * dtj;
            }
        }
        gemm_acc(o, &w[..l * l], &xc[..l * pd], l, l, pd);
        // The state at the chunk's end: S e^{c_last} + (X ⊙ f)ᵀ B with
        // f_j = e^{c_last − c_j} dt_j.
        let last = cum[l - 1];
        let el = decay(last);
        s.iter_mut().for_each(|v| *v *= el);
        for j in 0..l {
            let (xj, _, _, dtj) = tok(j);
            let f = decay(last - cum[j]) * dtj;
            for (pi, &xv) in xj.iter().enumerate() {
                xft[pi * l + j] = f * xv;
            }
        }
        gemm_acc(s, &xft[..pd * l], &bc[..l * n], pd, l, n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    type Case = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>);

    fn random(n: usize, rng: &mut rand_chacha::ChaCha8Rng, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(lo..hi)).collect()
    }

    /// `x`, `B`, `C`, `dt`, `A`, `D` for `t` tokens.
    fn case(t: usize, d: &Dims, seed: u64) -> Case {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let x = random(t * d.inner(), &mut rng, -1.0, 1.0);
        let b = random(t * d.n_group * d.d_state, &mut rng, -1.0, 1.0);
        let c = random(t * d.n_group * d.d_state, &mut rng, -1.0, 1.0);
        let dt = random(t * d.n_head, &mut rng, 0.001, 0.5);
        let a = random(d.n_head, &mut rng, -8.0, -0.5);
        let dd = random(d.n_head, &mut rng, 0.5, 1.5);
        (x, b, c, dt, a, dd)
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    const DIMS: Dims = Dims {
        n_head: 6,
        head_dim: 5,
        d_state: 7,
        n_group: 3,
    };

    #[test]
    fn chunked_equals_recurrent_across_chunks_and_states() {
        let d = DIMS;
        let t = 2 * CHUNK + 22; // three chunks, the last one partial
        let (xs, b, c, dt, a, dd) = case(t, &d, 11);
        let x = Inputs {
            x: &xs,
            b: &b,
            c: &c,
            dt: &dt,
        };
        let p = Params { a: &a, d: &dd };
        let mut s0: Vec<f32> = (0..d.state_len())
            .map(|i| (i as f32 * 0.29).cos())
            .collect();
        let mut s1 = s0.clone();
        let y_rec = run(&d, &p, &x, &mut s0, false);
        let y_chk = run(&d, &p, &x, &mut s1, true);
        let scale = y_rec.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.1, "degenerate case");
        assert!(max_diff(&y_rec, &y_chk) < 1e-4 * scale, "outputs differ");
        assert!(max_diff(&s0, &s1) < 1e-4, "final states differ");
    }

    /// Both forms against the recurrence written out index by index in f64,
    /// from a zero state.
    #[test]
    fn both_forms_are_the_textbook_recurrence() {
        let d = DIMS;
        let t = CHUNK + 9;
        let (xs, b, c, dt, a, dd) = case(t, &d, 5);
        let x = Inputs {
            x: &xs,
            b: &b,
            c: &c,
            dt: &dt,
        };
        for chunked in [false, true] {
            let mut s = vec![0f32; d.state_len()];
            let y = run(&d, &Params { a: &a, d: &dd }, &x, &mut s, chunked);
            check_textbook(&d, t, (&xs, &b, &c, &dt, &a, &dd), &y);
            let zero = vec![0f32; d.state_len()];
            let (y, _) = run_from(&d, &Params { a: &a, d: &dd }, &x, &zero, chunked);
            check_textbook(&d, t, (&xs, &b, &c, &dt, &a, &dd), &y);
        }
    }

    type Refs<'a> = (
        &'a [f32],
        &'a [f32],
        &'a [f32],
        &'a [f32],
        &'a [f32],
        &'a [f32],
    );

    fn check_textbook(d: &Dims, t: usize, (xs, b, c, dt, a, dd): Refs<'_>, y: &[f32]) {
        for h in 0..d.n_head {
            let g = d.group(h);
            let mut st = vec![vec![0f64; d.d_state]; d.head_dim];
            for ti in 0..t {
                let dtv = dt[ti * d.n_head + h] as f64;
                let decay = (dtv * a[h] as f64).exp();
                for (pi, row) in st.iter_mut().enumerate() {
                    let xv = xs[(ti * d.n_head + h) * d.head_dim + pi] as f64;
                    let mut yv = dd[h] as f64 * xv;
                    for (ni, sv) in row.iter_mut().enumerate() {
                        let k = (ti * d.n_group + g) * d.d_state + ni;
                        *sv = *sv * decay + dtv * xv * b[k] as f64;
                        yv += *sv * c[k] as f64;
                    }
                    let got = y[(ti * d.n_head + h) * d.head_dim + pi] as f64;
                    assert!(
                        (got - yv).abs() < 1e-4,
                        "head {h} token {ti}: {got} vs {yv}"
                    );
                }
            }
        }
    }

    #[test]
    fn splitting_a_sequence_gives_the_same_result() {
        let d = DIMS;
        let t = CHUNK + 30;
        let (xs, b, c, dt, a, dd) = case(t, &d, 3);
        let p = Params { a: &a, d: &dd };
        let whole = Inputs {
            x: &xs,
            b: &b,
            c: &c,
            dt: &dt,
        };
        let mut s = vec![0f32; d.state_len()];
        let y = run(&d, &p, &whole, &mut s, true);
        let part = |v: &[f32], per: usize, r: &std::ops::Range<usize>| {
            v[r.start * per..r.end * per].to_vec()
        };
        let gs = d.n_group * d.d_state;
        // A prompt cut in two chunked pieces, then single decoded tokens.
        let cut = CHUNK + 3;
        let mut s2 = vec![0f32; d.state_len()];
        let mut y2 = Vec::new();
        let mut pieces = vec![0..cut, cut..t - 2];
        pieces.extend((t - 2..t).map(|i| i..i + 1));
        for r in pieces {
            let (xp, bp, cp, dp) = (
                part(&xs, d.inner(), &r),
                part(&b, gs, &r),
                part(&c, gs, &r),
                part(&dt, d.n_head, &r),
            );
            let x = Inputs {
                x: &xp,
                b: &bp,
                c: &cp,
                dt: &dp,
            };
            if r.len() > 1 {
                y2.extend(run(&d, &p, &x, &mut s2, true));
            } else {
                // Decoded tokens as the model runs them: from the state read in place.
                let (y, new) = run_from(&d, &p, &x, &s2, false);
                y2.extend(y);
                s2 = new;
            }
        }
        assert!(max_diff(&y, &y2) < 1e-4);
        assert!(max_diff(&s, &s2) < 1e-4);
    }

    /// Bit-exact equality of two float vectors.
    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// The decode path (the old state read in place, the new one written in
    /// the same sweep) gives the in-place scan's outputs and state bit for
    /// bit, for one token, a few recurrent tokens and a chunked prompt, from
    /// a non-zero state; and both continue the f64 recurrence.
    #[test]
    fn run_from_is_run_bit_for_bit() {
        let d = DIMS;
        for (t, chunked) in [(1, false), (3, false), (CHUNK + 5, true), (0, false)] {
            let (xs, b, c, dt, a, dd) = case(t, &d, 21 + t as u64);
            let x = Inputs {
                x: &xs,
                b: &b,
                c: &c,
                dt: &dt,
            };
            let p = Params { a: &a, d: &dd };
            let old: Vec<f32> = (0..d.state_len())
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let mut s = old.clone();
            let y = run(&d, &p, &x, &mut s, chunked);
            let (y2, s2) = run_from(&d, &p, &x, &old, chunked);
            assert!(same_bits(&y, &y2), "t {t}: outputs differ");
            assert!(same_bits(&s, &s2), "t {t}: states differ");
        }
    }

    /// One fused row step is the row update followed by [`super::super::nn::dot`],
    /// bit for bit, for rows with and without a tail past the lanes.
    #[test]
    fn the_fused_row_step_is_update_then_dot() {
        for n in [128, 37, 5] {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(n as u64);
            let row = random(n, &mut rng, -1.0, 1.0);
            let b = random(n, &mut rng, -1.0, 1.0);
            let c = random(n, &mut rng, -1.0, 1.0);
            let (decay, u) = (0.83f32, -0.41f32);
            let want: Vec<f32> = row
                .iter()
                .zip(&b)
                .map(|(&r, &bv)| r * decay + u * bv)
                .collect();
            let want_y = dot(&want, &c);
            let mut got = row.clone();
            let y = row_step(&mut got, &b, &c, decay, u);
            assert!(same_bits(&got, &want) && y.to_bits() == want_y.to_bits());
            let mut fresh = vec![std::mem::MaybeUninit::new(f32::NAN); n];
            let y2 = row_into(&row, &mut fresh, &b, &c, decay, u);
            // SAFETY: `fresh` was initialised (NaN) at creation and overwritten.
            let fresh: Vec<f32> = fresh.iter().map(|v| unsafe { v.assume_init() }).collect();
            assert!(same_bits(&fresh, &want) && y2.to_bits() == want_y.to_bits());
        }
    }

    /// At Nemotron-3-Nano-4B's width the decode step runs its heads on the
    /// worker pool; each head alone (a one-head scan, too small for the
    /// pool: the calling thread) gives the same bits, so the result depends
    /// neither on the thread count nor on which thread ran a head. The
    /// outputs also follow the f64 recurrence from the same non-zero state.
    #[test]
    fn decode_at_real_width_equals_each_head_alone_and_f64() {
        let d = Dims {
            n_head: 96,
            head_dim: 80,
            d_state: 128,
            n_group: 8,
        };
        let (xs, b, c, dt, a, dd) = case(1, &d, 77);
        let x = Inputs {
            x: &xs,
            b: &b,
            c: &c,
            dt: &dt,
        };
        let p = Params { a: &a, d: &dd };
        let old: Vec<f32> = (0..d.state_len())
            .map(|i| ((i % 9973) as f32 * 0.013).sin())
            .collect();
        let (y, s) = run_from(&d, &p, &x, &old, false);
        let one = Dims {
            n_head: 1,
            head_dim: d.head_dim,
            d_state: d.d_state,
            n_group: 1,
        };
        let (pd, n) = (d.head_dim, d.d_state);
        let hs = pd * n;
        for h in 0..d.n_head {
            let g = d.group(h);
            let xh = Inputs {
                x: &xs[h * pd..(h + 1) * pd],
                b: &b[g * n..(g + 1) * n],
                c: &c[g * n..(g + 1) * n],
                dt: &dt[h..h + 1],
            };
            let ph = Params {
                a: &a[h..h + 1],
                d: &dd[h..h + 1],
            };
            let (yh, sh) = run_from(&one, &ph, &xh, &old[h * hs..(h + 1) * hs], false);
            assert!(
                same_bits(&y[h * pd..(h + 1) * pd], &yh),
                "head {h}: outputs"
            );
            assert!(same_bits(&s[h * hs..(h + 1) * hs], &sh), "head {h}: state");
            // The f64 step from the same state.
            let dtv = dt[h] as f64;
            let decay = (dtv * a[h] as f64).exp();
            for pi in 0..pd {
                let xv = xs[h * pd + pi] as f64;
                let mut yv = dd[h] as f64 * xv;
                for ni in 0..n {
                    let sv =
                        old[h * hs + pi * n + ni] as f64 * decay + dtv * xv * b[g * n + ni] as f64;
                    yv += sv * c[g * n + ni] as f64;
                    let got = s[h * hs + pi * n + ni] as f64;
                    assert!((got - sv).abs() < 1e-5, "head {h} state {pi},{ni}");
                }
                let got = y[h * pd + pi] as f64;
                assert!((got - yv).abs() < 1e-4, "head {h} out {pi}: {got} vs {yv}");
            }
        }
    }

    #[test]
    fn heads_read_their_groups_in_blocks() {
        let g: Vec<usize> = (0..6).map(|h| DIMS.group(h)).collect();
        assert_eq!(g, vec![0, 0, 1, 1, 2, 2]);
    }
}
