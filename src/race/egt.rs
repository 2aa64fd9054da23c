//! The evolutionary benchmark (spec §7): the four reference strategies AS,
//! AU, CS and CAS; their expected matchup payoffs and UNSAFE fractions,
//! computed by playing each pair through the rule book for every horizon W
//! and weighting by P(W = 5 + k) = 0.2·0.8^k (setback lottery in
//! expectation, §7.1); and the stationary distribution of the finite
//! population pairwise-comparison (Fermi) process with mutation (§7.2),
//! solved exactly on all C(Z+3, 3) states with ILU(k)-preconditioned
//! restarted GMRES (checked against dense GTH elimination on small Z and
//! against Appendix A at Z = 100), plus the small-mutation limit.

use serde::Serialize;

use super::rules::{stage_payoff_2p, step, Action, MIN_ROUNDS, PRIZE, STOP_PROBABILITY};

/// A reference strategy (§7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Strategy {
    /// Always SAFE.
    AS,
    /// Always UNSAFE.
    AU,
    /// SAFE in round 1, then copy the opponent's previous action.
    CS,
    /// UNSAFE in round 1, then copy the opponent's previous action.
    CAS,
}

pub const STRATEGIES: [Strategy; 4] = [Strategy::AS, Strategy::AU, Strategy::CS, Strategy::CAS];

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::AS => "AS",
            Strategy::AU => "AU",
            Strategy::CS => "CS",
            Strategy::CAS => "CAS",
        }
    }

    /// The action given the co-players' previous actions (none in round 1).
    /// CS/CAS copy a single opponent; with several co-players CS plays SAFE
    /// iff all played SAFE (§2 "Reference strategies"), and CAS — which has
    /// no N-player reference — plays UNSAFE iff any played UNSAFE.
    pub fn act(self, others_prev: Option<&[Action]>) -> Action {
        match (self, others_prev) {
            (Strategy::AS, _) => Action::Safe,
            (Strategy::AU, _) => Action::Unsafe,
            (Strategy::CS, None) => Action::Safe,
            (Strategy::CAS, None) => Action::Unsafe,
            (Strategy::CS | Strategy::CAS, Some(prev)) => {
                if prev.iter().any(|a| a.is_unsafe()) {
                    Action::Unsafe
                } else {
                    Action::Safe
                }
            }
        }
    }
}

/// Expected payoffs Π[row][col] and UNSAFE fractions U[row][col] of the
/// four strategies at one p_max (§7.1).
#[derive(Debug, Clone, Serialize)]
pub struct MatchupTable {
    pub p_max: f64,
    pub payoff: [[f64; 4]; 4],
    pub unsafe_fraction: [[f64; 4]; 4],
}

/// Largest horizon summed: P(W > 5 + K) = 0.8^(K+1) < 1e-17 for K = 175.
const HORIZON_TERMS: u32 = 176;

/// Π and U at `p_max`: each ordered pair is played by the rule book for
/// W = 5 … 5+K rounds; an eligible seat (winner or tie) earns
/// (stage + prize)·(1 − p·n_U/W), a loser its stage sum; the results are
/// weighted by the horizon law and renormalised over the truncated mass.
pub fn matchup_table(p_max: f64) -> MatchupTable {
    let mut payoff = [[0.0; 4]; 4];
    let mut unsafe_fraction = [[0.0; 4]; 4];
    let max_w = MIN_ROUNDS + HORIZON_TERMS;
    for (i, &a) in STRATEGIES.iter().enumerate() {
        for (j, &b) in STRATEGIES.iter().enumerate() {
            let (mut stage, mut prog, mut nu) = ([0.0f64; 2], [0.0f64; 2], [0u32; 2]);
            let mut prev: Option<[Action; 2]> = None;
            let (mut mass, mut pay, mut uf) = (0.0, 0.0, 0.0);
            for w in 1..=max_w {
                let acts = [
                    a.act(prev.as_ref().map(|p| &p[1..2])),
                    b.act(prev.as_ref().map(|p| &p[0..1])),
                ];
                for s in 0..2 {
                    stage[s] += stage_payoff_2p(acts[s], acts[1 - s]);
                    prog[s] += step(acts[s]);
                    nu[s] += acts[s].is_unsafe() as u32;
                }
                prev = Some(acts);
                if w < MIN_ROUNDS {
                    continue;
                }
                let k = (w - MIN_ROUNDS) as i32;
                let pw = STOP_PROBABILITY * (1.0 - STOP_PROBABILITY).powi(k);
                let wf = w as f64;
                let diff = prog[0] - prog[1];
                let value = if diff < -1e-9 {
                    stage[0]
                } else {
                    let prize = if diff > 1e-9 { PRIZE } else { PRIZE / 2.0 };
                    let q = (p_max * nu[0] as f64 / wf).clamp(0.0, 1.0);
                    (stage[0] + prize) * (1.0 - q)
                };
                mass += pw;
                pay += pw * value;
                uf += pw * nu[0] as f64 / wf;
            }
            payoff[i][j] = pay / mass;
            unsafe_fraction[i][j] = uf / mass;
        }
    }
    MatchupTable {
        p_max,
        payoff,
        unsafe_fraction,
    }
}

/// Row player's payoff when `a` meets `b` for exactly `w` rounds, with the
/// setback lottery in expectation (§7.1): an eligible seat earns
/// (stage + prize)·(1 − p·n_U/W), a loser its stage sum.
pub fn payoff_at_horizon(a: Strategy, b: Strategy, w: u32, p_max: f64) -> f64 {
    let (mut stage, mut prog, mut nu) = ([0.0f64; 2], [0.0f64; 2], [0u32; 2]);
    let mut prev: Option<[Action; 2]> = None;
    for _ in 0..w {
        let acts = [
            a.act(prev.as_ref().map(|p| &p[1..2])),
            b.act(prev.as_ref().map(|p| &p[0..1])),
        ];
        for s in 0..2 {
            stage[s] += stage_payoff_2p(acts[s], acts[1 - s]);
            prog[s] += step(acts[s]);
            nu[s] += acts[s].is_unsafe() as u32;
        }
        prev = Some(acts);
    }
    let diff = prog[0] - prog[1];
    if diff < -1e-9 {
        stage[0]
    } else {
        let prize = if diff > 1e-9 { PRIZE } else { PRIZE / 2.0 };
        let q = (p_max * nu[0] as f64 / w as f64).clamp(0.0, 1.0);
        (stage[0] + prize) * (1.0 - q)
    }
}

/// Parameters of the population process (§7.2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PopulationParams {
    pub z: usize,
    pub beta: f64,
    pub mu: f64,
}

/// The largest population the full chain is solved for: it holds
/// (Z+1)(Z+2)(Z+3)/6 states (Z = 200: 1.4 million, about 3 GB and a
/// minute); the spec's Z is 100.
pub const MAX_Z: usize = 200;
/// The largest selection intensity: far past the point where the Fermi
/// rule is a step (the spec's β is 2).
pub const MAX_BETA: f64 = 1000.0;

impl PopulationParams {
    /// Parameters the solve can finish with, the error naming the flag
    /// (`joule race egt --z/--beta/--mu`).
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (2..=MAX_Z).contains(&self.z),
            "--z must be 2..={MAX_Z} (the full chain has (Z+1)(Z+2)(Z+3)/6 states; Z = {MAX_Z} needs about 3 GB), got {}",
            self.z
        );
        anyhow::ensure!(
            self.beta.is_finite() && (0.0..=MAX_BETA).contains(&self.beta),
            "--beta must be a number in [0, {MAX_BETA}] (0: neutral drift; the spec uses 2), got {}",
            self.beta
        );
        anyhow::ensure!(
            self.mu > 0.0 && self.mu < 1.0,
            "--mu must be a mutation rate in (0, 1), got {}",
            self.mu
        );
        Ok(())
    }
}

/// The stationary result at one p_max.
#[derive(Debug, Clone, Serialize)]
pub struct StationaryResult {
    /// Expected strategy frequencies (AS, AU, CS, CAS).
    pub stationary: [f64; 4],
    /// Predicted UNSAFE rate under random matching (§7.2).
    pub unsafe_rate: f64,
    /// Number of population states solved.
    pub states: usize,
    /// Relative residual ‖Aπ − b‖/‖b‖ of the linear solve.
    pub residual: f64,
}

fn fermi(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Enumerate the count vectors (k_AS, k_AU, k_CS, k_CAS) summing to `z`,
/// with k_AU innermost: AU and CAS are neutral against each other (§9.10),
/// so the slowest direction of the chain is AU ↔ CAS, and keeping those
/// moves adjacent in the ordering lets the ILU preconditioner capture it.
/// `index[state_key(k)]` is the position of `k`.
fn enumerate_states(z: usize) -> (Vec<[usize; 4]>, Vec<u32>) {
    let mut states = Vec::new();
    let side = z + 1;
    let mut index = vec![u32::MAX; side * side * side];
    for a in 0..=z {
        for c in 0..=z - a {
            for b in 0..=z - a - c {
                let k = [a, b, c, z - a - b - c];
                index[state_key(&k, side)] = states.len() as u32;
                states.push(k);
            }
        }
    }
    (states, index)
}

fn state_key(k: &[usize; 4], side: usize) -> usize {
    (k[0] * side + k[2]) * side + k[1]
}

/// A square sparse matrix in compressed rows with sorted columns.
struct Csr {
    n: usize,
    ptr: Vec<usize>,
    col: Vec<usize>,
    val: Vec<f64>,
}

impl Csr {
    fn from_triplets(n: usize, mut t: Vec<(usize, usize, f64)>) -> Self {
        t.sort_by_key(|&(r, c, _)| (r, c));
        let mut ptr = vec![0usize; n + 1];
        let mut col = Vec::with_capacity(t.len());
        let mut val: Vec<f64> = Vec::with_capacity(t.len());
        let mut last: Option<(usize, usize)> = None;
        for (r, c, v) in t {
            if last == Some((r, c)) {
                *val.last_mut().expect("entry exists") += v;
                continue;
            }
            col.push(c);
            val.push(v);
            ptr[r + 1] += 1;
            last = Some((r, c));
        }
        for i in 0..n {
            ptr[i + 1] += ptr[i];
        }
        Self { n, ptr, col, val }
    }

    fn mul(&self, x: &[f64], y: &mut [f64]) {
        for i in 0..self.n {
            let mut s = 0.0;
            for k in self.ptr[i]..self.ptr[i + 1] {
                s += self.val[k] * x[self.col[k]];
            }
            y[i] = s;
        }
    }
}

/// Incomplete LU factors with level-of-fill `k` (ILU(k)): L unit-lower and
/// U upper stored together in compressed rows, `diag[i]` pointing at U_ii.
struct Ilu {
    m: Csr,
    diag: Vec<usize>,
}

impl Ilu {
    fn new(a: &Csr, k: u32) -> anyhow::Result<Self> {
        const ABSENT: u32 = u32::MAX;
        let n = a.n;
        let mut ptr = vec![0usize; n + 1];
        let mut col: Vec<usize> = Vec::with_capacity(a.col.len() * 3);
        let mut val: Vec<f64> = Vec::with_capacity(a.col.len() * 3);
        let mut lev_of: Vec<u32> = Vec::with_capacity(a.col.len() * 3);
        let mut diag = vec![usize::MAX; n];
        let mut w = vec![0.0f64; n];
        let mut lev = vec![ABSENT; n];
        let mut nz: Vec<usize> = Vec::new();
        let mut heap = std::collections::BinaryHeap::new();
        for i in 0..n {
            for t in a.ptr[i]..a.ptr[i + 1] {
                let c = a.col[t];
                w[c] = a.val[t];
                lev[c] = 0;
                nz.push(c);
                if c < i {
                    heap.push(std::cmp::Reverse(c));
                }
            }
            while let Some(std::cmp::Reverse(j)) = heap.pop() {
                let f = w[j] / val[diag[j]];
                w[j] = f;
                let lj = lev[j];
                for t in diag[j] + 1..ptr[j + 1] {
                    let m = col[t];
                    let nl = lj.saturating_add(lev_of[t]).saturating_add(1);
                    if lev[m] == ABSENT {
                        if nl <= k {
                            lev[m] = nl;
                            w[m] = -f * val[t];
                            nz.push(m);
                            if m < i {
                                heap.push(std::cmp::Reverse(m));
                            }
                        }
                    } else {
                        w[m] -= f * val[t];
                        lev[m] = lev[m].min(nl);
                    }
                }
            }
            nz.sort_unstable();
            for &c in &nz {
                if c == i {
                    diag[i] = col.len();
                }
                col.push(c);
                val.push(w[c]);
                lev_of.push(lev[c]);
                w[c] = 0.0;
                lev[c] = ABSENT;
            }
            nz.clear();
            ptr[i + 1] = col.len();
            anyhow::ensure!(
                diag[i] != usize::MAX && val[diag[i]] != 0.0,
                "ILU({k}): zero or missing pivot at row {i}"
            );
        }
        Ok(Self {
            m: Csr { n, ptr, col, val },
            diag,
        })
    }

    /// Solve (LU) x = b in place.
    fn solve(&self, x: &mut [f64]) {
        let m = &self.m;
        for i in 0..m.n {
            let mut s = x[i];
            for k in m.ptr[i]..self.diag[i] {
                s -= m.val[k] * x[m.col[k]];
            }
            x[i] = s;
        }
        for i in (0..m.n).rev() {
            let mut s = x[i];
            for k in self.diag[i] + 1..m.ptr[i + 1] {
                s -= m.val[k] * x[m.col[k]];
            }
            x[i] = s / m.val[self.diag[i]];
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// Right-preconditioned restarted GMRES(m). Returns the relative residual.
fn gmres(
    a: &Csr,
    pre: &Ilu,
    b: &[f64],
    x: &mut [f64],
    tol: f64,
    restart: usize,
    max_outer: usize,
) -> f64 {
    let n = a.n;
    let bnorm = norm(b).max(f64::MIN_POSITIVE);
    let mut r = vec![0.0; n];
    let mut w = vec![0.0; n];
    let mut z = vec![0.0; n];
    let mut rel = f64::INFINITY;
    for _ in 0..max_outer {
        a.mul(x, &mut r);
        for i in 0..n {
            r[i] = b[i] - r[i];
        }
        let beta = norm(&r);
        rel = beta / bnorm;
        if rel < tol {
            return rel;
        }
        let mut v: Vec<Vec<f64>> = vec![r.iter().map(|t| t / beta).collect()];
        let mut h = vec![vec![0.0; restart]; restart + 1];
        let (mut cs, mut sn) = (vec![0.0; restart], vec![0.0; restart]);
        let mut g = vec![0.0; restart + 1];
        g[0] = beta;
        let mut used = 0;
        for j in 0..restart {
            z.copy_from_slice(&v[j]);
            pre.solve(&mut z);
            a.mul(&z, &mut w);
            for (i, vi) in v.iter().enumerate() {
                let hij = dot(&w, vi);
                h[i][j] = hij;
                for t in 0..n {
                    w[t] -= hij * vi[t];
                }
            }
            let hn = norm(&w);
            h[j + 1][j] = hn;
            for i in 0..j {
                let t = cs[i] * h[i][j] + sn[i] * h[i + 1][j];
                h[i + 1][j] = -sn[i] * h[i][j] + cs[i] * h[i + 1][j];
                h[i][j] = t;
            }
            let d = (h[j][j] * h[j][j] + h[j + 1][j] * h[j + 1][j]).sqrt();
            cs[j] = h[j][j] / d;
            sn[j] = h[j + 1][j] / d;
            h[j][j] = d;
            h[j + 1][j] = 0.0;
            g[j + 1] = -sn[j] * g[j];
            g[j] *= cs[j];
            used = j + 1;
            if (g[j + 1].abs() / bnorm) < tol || hn == 0.0 {
                break;
            }
            v.push(w.iter().map(|t| t / hn).collect());
        }
        // Back-substitute y and update x += M⁻¹ V y.
        let mut y = vec![0.0; used];
        for i in (0..used).rev() {
            let mut s = g[i];
            for k in i + 1..used {
                s -= h[i][k] * y[k];
            }
            y[i] = s / h[i][i];
        }
        z.iter_mut().for_each(|t| *t = 0.0);
        for (k, yk) in y.iter().enumerate() {
            for t in 0..n {
                z[t] += yk * v[k][t];
            }
        }
        pre.solve(&mut z);
        for t in 0..n {
            x[t] += z[t];
        }
    }
    a.mul(x, &mut r);
    for i in 0..n {
        r[i] = b[i] - r[i];
    }
    rel.min(norm(&r) / bnorm)
}

/// The full chain of §7.2: its states (count vectors) and its off-diagonal
/// transitions (from, to, probability) with
/// T(k → k − e_a + e_b) = (k_a/Z)·[μ/3 + (1−μ)·(k_b/(Z−1))·Fermi(β(f_b − f_a))]
/// and f_s = (Σ_t k_t Π[s,t] − Π[s,s])/(Z−1).
struct Chain {
    states: Vec<[usize; 4]>,
    trans: Vec<(usize, usize, f64)>,
}

fn build_chain(table: &MatchupTable, params: PopulationParams) -> anyhow::Result<Chain> {
    let PopulationParams { z, beta, mu } = params;
    anyhow::ensure!(z >= 2, "population size Z must be at least 2, got {z}");
    anyhow::ensure!(
        mu > 0.0 && mu < 1.0,
        "the full chain needs a mutation rate in (0, 1), got {mu}"
    );
    let (states, index) = enumerate_states(z);
    let side = z + 1;
    let zf = z as f64;
    let pi = &table.payoff;
    let mut trans = Vec::with_capacity(states.len() * 12);
    for (i, k) in states.iter().enumerate() {
        let fit: Vec<f64> = (0..4)
            .map(|s| {
                let tot: f64 = (0..4).map(|t| k[t] as f64 * pi[s][t]).sum();
                (tot - pi[s][s]) / (zf - 1.0)
            })
            .collect();
        for a in 0..4 {
            if k[a] == 0 {
                continue;
            }
            for b in 0..4 {
                if a == b {
                    continue;
                }
                let rate = (k[a] as f64 / zf)
                    * (mu / 3.0
                        + (1.0 - mu)
                            * (k[b] as f64 / (zf - 1.0))
                            * fermi(beta * (fit[b] - fit[a])));
                let mut nk = *k;
                nk[a] -= 1;
                nk[b] += 1;
                let j = index[state_key(&nk, side)] as usize;
                trans.push((i, j, rate));
            }
        }
    }
    Ok(Chain { states, trans })
}

/// Strategy frequencies and the random-matching UNSAFE rate (§7.2) of a
/// stationary law over `states`.
fn summarize(states: &[[usize; 4]], p: &[f64], table: &MatchupTable, z: usize) -> ([f64; 4], f64) {
    let zf = z as f64;
    let u = &table.unsafe_fraction;
    let mut freq = [0.0; 4];
    let mut unsafe_rate = 0.0;
    for (k, &w) in states.iter().zip(p) {
        for s in 0..4 {
            freq[s] += w * k[s] as f64 / zf;
        }
        let mut m = 0.0;
        for s in 0..4 {
            for t in 0..4 {
                let kt = k[t] as f64 - if s == t { 1.0 } else { 0.0 };
                m += k[s] as f64 * kt * u[s][t];
            }
        }
        unsafe_rate += w * m / (zf * (zf - 1.0));
    }
    (freq, unsafe_rate)
}

/// Stationary distribution of the full chain (§7.2, Appendix A): πQ = 0,
/// Σπ = 1 on all C(Z+3, 3) states.
pub fn stationary_full(
    table: &MatchupTable,
    params: PopulationParams,
) -> anyhow::Result<StationaryResult> {
    let chain = build_chain(table, params)?;
    let pin = favoured_state(table, params, &chain.states);
    let (p, residual) = solve_stationary(chain.states.len(), &chain.trans, pin)?;
    let (stationary, unsafe_rate) = summarize(&chain.states, &p, table, params.z);
    Ok(StationaryResult {
        stationary,
        unsafe_rate,
        states: chain.states.len(),
        residual,
    })
}

/// Level of fill of the preconditioner.
const ILU_LEVEL: u32 = 2;

/// The monomorphic state of the strategy the small-mutation limit favours
/// (a likely state, used as the solver's pin).
fn favoured_state(table: &MatchupTable, params: PopulationParams, states: &[[usize; 4]]) -> usize {
    let sm = stationary_small_mutation(table, params.z, params.beta);
    let fav = (0..4)
        .max_by(|&a, &b| sm[a].total_cmp(&sm[b]))
        .expect("4 strategies");
    states
        .iter()
        .position(|k| k[fav] == params.z)
        .expect("monomorphic states exist")
}

/// Solve πQ = 0, Σπ = 1 for the generator with off-diagonal `trans`:
/// A = Qᵀ with row `pin` replaced by π_pin = 1, solved by restarted GMRES
/// right-preconditioned with ILU(k). A rare pin makes x huge and puts a
/// rounding floor under the relative residual, so a coarse first pass
/// finds the likeliest state and a second pass, pinned there and started
/// from the rescaled first solution, solves to 1e-14.
/// Returns π (normalised) and the relative residual ‖b − Ax‖/‖b‖.
fn solve_stationary(
    n: usize,
    trans: &[(usize, usize, f64)],
    pin: usize,
) -> anyhow::Result<(Vec<f64>, f64)> {
    anyhow::ensure!(pin < n, "pinned state {pin} out of range (n = {n})");
    let mut out = vec![0.0; n];
    for &(i, _, rate) in trans {
        out[i] += rate;
    }
    let mut pin = pin;
    let mut x = vec![0.0; n];
    x[pin] = 1.0;
    for pass in 0..2 {
        let mut trip: Vec<(usize, usize, f64)> = Vec::with_capacity(trans.len() + n);
        for &(i, j, rate) in trans {
            if j != pin {
                trip.push((j, i, rate));
            }
        }
        for (i, &o) in out.iter().enumerate() {
            trip.push((i, i, if i == pin { 1.0 } else { -o }));
        }
        let a = Csr::from_triplets(n, trip);
        let mut b = vec![0.0; n];
        b[pin] = 1.0;
        let pre = Ilu::new(&a, ILU_LEVEL)?;
        // Pass 0 is coarse (a rare pin leaves a rounding floor on the
        // residual); pass 1 refines pinned at the likeliest state found.
        let tol = if pass == 0 { 1e-8 } else { 1e-14 };
        let max_outer = if pass == 0 { 20 } else { 200 };
        let residual = gmres(&a, &pre, &b, &mut x, tol, 60, max_outer);
        if pass == 0 {
            let (best, &xmax) = x
                .iter()
                .enumerate()
                .max_by(|p, q| p.1.total_cmp(q.1))
                .expect("n > 0");
            x.iter_mut().for_each(|v| *v /= xmax);
            pin = best;
            continue;
        }
        anyhow::ensure!(
            residual < 1e-10,
            "the stationary solve did not converge (relative residual {residual:e})"
        );
        let total: f64 = x.iter().sum();
        x.iter_mut().for_each(|v| *v /= total);
        return Ok((x, residual));
    }
    unreachable!("the second pass always returns")
}

/// The small-mutation limit (§7.2 "other route"): the embedded chain over
/// monomorphic states with entries ρ_{a→b}/3; its UNSAFE rate uses the
/// self-play rates U[s][s]. It cannot represent μ.
pub fn stationary_small_mutation(table: &MatchupTable, z: usize, beta: f64) -> [f64; 4] {
    let pi = &table.payoff;
    let zf = z as f64;
    let rho = |res: usize, mutant: usize| -> f64 {
        // ρ = 1 / (1 + Σ_{i=1}^{Z−1} Π_{j=1}^{i} exp(−β(f_mut(j) − f_res(j)))), in log space.
        let mut log_terms = Vec::with_capacity(z);
        let mut acc = 0.0;
        for j in 1..z {
            let jf = j as f64;
            let f_mut =
                ((jf - 1.0) * pi[mutant][mutant] + (zf - jf) * pi[mutant][res]) / (zf - 1.0);
            let f_res = (jf * pi[res][mutant] + (zf - jf - 1.0) * pi[res][res]) / (zf - 1.0);
            acc += -beta * (f_mut - f_res);
            log_terms.push(acc);
        }
        let m = log_terms.iter().cloned().fold(0.0f64, f64::max);
        let s: f64 = (-m).exp() + log_terms.iter().map(|t| (t - m).exp()).sum::<f64>();
        (-m).exp() / s
    };
    let mut t = [[0.0; 4]; 4];
    for a in 0..4 {
        let mut off = 0.0;
        for b in 0..4 {
            if a != b {
                t[a][b] = rho(a, b) / 3.0;
                off += t[a][b];
            }
        }
        t[a][a] = 1.0 - off;
    }
    // Power iteration on the 4-state embedded chain.
    let mut p = [0.25; 4];
    for _ in 0..200_000 {
        let mut q = [0.0; 4];
        for a in 0..4 {
            for b in 0..4 {
                q[b] += p[a] * t[a][b];
            }
        }
        let d: f64 = (0..4).map(|i| (q[i] - p[i]).abs()).sum();
        p = q;
        if d < 1e-16 {
            break;
        }
    }
    p
}

/// Dense stationary law by the Grassmann–Taksar–Heyman elimination (no
/// subtractions, so accurate to rounding); O(n³), for small chains only.
#[cfg(test)]
fn gth_dense(n: usize, trans: &[(usize, usize, f64)]) -> Vec<f64> {
    let mut p = vec![vec![0.0f64; n]; n];
    for &(i, j, r) in trans {
        p[i][j] += r;
    }
    for k in (1..n).rev() {
        let s: f64 = p[k][..k].iter().sum();
        for i in 0..k {
            let f = p[i][k] / s;
            if f == 0.0 {
                continue;
            }
            for j in 0..k {
                p[i][j] += f * p[k][j];
            }
        }
        for row in p.iter_mut().take(k) {
            row[k] /= s;
        }
    }
    let mut x = vec![0.0; n];
    x[0] = 1.0;
    for k in 1..n {
        x[k] = (0..k).map(|i| x[i] * p[i][k]).sum();
    }
    let t: f64 = x.iter().sum();
    x.iter().map(|v| v / t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const E_INV_W: f64 = 0.1320625279342246;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn strategies_play_by_their_definitions() {
        use Action::*;
        assert_eq!(Strategy::CS.act(None), Safe);
        assert_eq!(Strategy::CAS.act(None), Unsafe);
        assert_eq!(Strategy::CS.act(Some(&[Unsafe])), Unsafe);
        assert_eq!(Strategy::CAS.act(Some(&[Safe])), Safe);
        assert_eq!(Strategy::CS.act(Some(&[Safe, Unsafe])), Unsafe);
        assert_eq!(Strategy::AS.act(Some(&[Unsafe])), Safe);
    }

    #[test]
    fn matchup_payoffs_match_the_exact_limits_of_section_7_1() {
        let spec: [(f64, [[f64; 4]; 4]); 3] = [
            (
                0.1,
                [
                    [59.0, 5.4, 59.0, 8.6],
                    [109.44, 61.2, 106.56, 61.2],
                    [59.0, 16.6, 59.0, 33.7925925925926],
                    [108.960885966747, 61.2, 86.7532490392405, 61.2],
                ],
            ),
            (
                0.6,
                [
                    [59.0, 5.4, 59.0, 8.6],
                    [48.64, 27.2, 47.36, 27.2],
                    [59.0, 16.6, 59.0, 26.6444444444444],
                    [101.765315800482, 27.2, 61.630605346554, 27.2],
                ],
            ),
            (
                0.9,
                [
                    [59.0, 5.4, 59.0, 8.6],
                    [12.16, 6.8, 11.84, 6.8],
                    [59.0, 16.6, 59.0, 22.3555555555556],
                    [97.4479737007227, 6.8, 46.5570191309421, 6.8],
                ],
            ),
        ];
        for (p, want) in spec {
            let t = matchup_table(p);
            for i in 0..4 {
                for j in 0..4 {
                    assert!(
                        close(t.payoff[i][j], want[i][j], 1e-9),
                        "p={p} {:?} vs {:?}: {} vs {}",
                        STRATEGIES[i],
                        STRATEGIES[j],
                        t.payoff[i][j],
                        want[i][j]
                    );
                }
            }
        }
    }

    #[test]
    fn unsafe_fractions_match_section_7_1() {
        let t = matchup_table(0.6);
        let u = &t.unsafe_fraction;
        assert_eq!(u[0], [0.0; 4]);
        for j in 0..4 {
            assert!(close(u[1][j], 1.0, 1e-12));
        }
        assert!(close(u[2][1], 1.0 - E_INV_W, 1e-12));
        assert!(close(u[2][1], 0.867937472065775, 1e-12));
        assert!(close(u[2][3], 0.460954094848192, 1e-12));
        assert_eq!(u[2][0], 0.0);
        assert_eq!(u[2][2], 0.0);
        assert!(close(u[3][0], E_INV_W, 1e-12));
        assert!(close(u[3][2], 0.539045905151808, 1e-12));
        assert!(close(u[3][1], 1.0, 1e-12));
        assert!(close(u[3][3], 1.0, 1e-12));
    }

    #[test]
    fn closed_forms_hold_for_each_fixed_horizon() {
        // Spot-check §7.1 closed forms against the engine's rule book via
        // the table at p = 0 (no risk): AU–AS = 2.4·E[W] + 100 = 121.6.
        let t = matchup_table(0.0);
        assert!(close(t.payoff[1][0], 2.4 * 9.0 + 100.0, 1e-9));
        assert!(close(t.payoff[2][1], 2.0 * 9.0 - 1.4, 1e-9));
        assert!(close(t.payoff[0][3], 9.0 - 0.4, 1e-9));
    }

    #[test]
    fn fixed_horizon_payoffs_follow_the_closed_forms() {
        use Strategy::*;
        for w in 5..30u32 {
            let wf = w as f64;
            for p in [0.1, 0.6, 0.9] {
                let c = |a, b| payoff_at_horizon(a, b, w, p);
                assert!(close(c(AS, AS), wf + 50.0, 1e-9));
                assert!(close(c(AS, AU), 0.6 * wf, 1e-9));
                assert!(close(c(AS, CAS), wf - 0.4, 1e-9));
                assert!(close(c(CS, AU), 2.0 * wf - 1.4, 1e-9));
                assert!(close(c(AU, AS), (1.0 - p) * (2.4 * wf + 100.0), 1e-9));
                assert!(close(c(AU, CS), (1.0 - p) * (2.0 * wf + 100.4), 1e-9));
                for (x, y) in [(AU, AU), (AU, CAS), (CAS, AU), (CAS, CAS)] {
                    assert!(close(c(x, y), (1.0 - p) * (2.0 * wf + 50.0), 1e-9));
                }
                assert!(close(c(CAS, AS), (wf + 101.4) * (1.0 - p / wf), 1e-9));
                if w % 2 == 0 {
                    assert!(close(c(CS, CAS), (1.5 * wf + 50.0) * (1.0 - p / 2.0), 1e-9));
                    assert!(close(c(CAS, CS), (1.5 * wf + 50.0) * (1.0 - p / 2.0), 1e-9));
                } else {
                    assert!(close(c(CS, CAS), 1.5 * wf - 0.9, 1e-9));
                    let q = p * (wf + 1.0) / (2.0 * wf);
                    assert!(close(c(CAS, CS), (1.5 * wf + 100.9) * (1.0 - q), 1e-9));
                }
            }
        }
    }

    #[test]
    fn small_mutation_limit_matches_section_7_2() {
        let p = stationary_small_mutation(&matchup_table(0.9), 100, 2.0);
        assert!(close(p[2], 0.980582, 1e-6), "CS {}", p[2]);
        assert!(close(p[0], 0.009709, 1e-6), "AS {}", p[0]);
        assert!(close(p[3], 0.009614, 1e-6), "CAS {}", p[3]);
        assert!(close(p[1], 0.000095, 1e-6), "AU {}", p[1]);
        let p = stationary_small_mutation(&matchup_table(0.1), 100, 2.0);
        assert!(close(p[1], 0.5, 1e-6) && close(p[3], 0.5, 1e-6));
    }

    /// The sparse solver against the dense GTH elimination on small chains.
    #[test]
    fn full_chain_solver_agrees_with_dense_elimination() {
        for (z, p) in [(6, 0.6), (10, 0.1), (10, 0.9)] {
            let table = matchup_table(p);
            let params = PopulationParams {
                z,
                beta: 2.0,
                mu: 0.02,
            };
            let chain = build_chain(&table, params).unwrap();
            let n = chain.states.len();
            let dense = gth_dense(n, &chain.trans);
            let (sparse, _) = solve_stationary(
                n,
                &chain.trans,
                favoured_state(&table, params, &chain.states),
            )
            .unwrap();
            let mut worst = 0.0f64;
            for (d, s) in dense.iter().zip(&sparse) {
                worst = worst.max((d - s).abs());
            }
            let (fd, ud) = summarize(&chain.states, &dense, &table, z);
            let (fs, us) = summarize(&chain.states, &sparse, &table, z);
            eprintln!("Z={z} p={p}: max |Δπ| {worst:e}, unsafe {ud} vs {us}");
            assert!(worst < 1e-11, "Z={z} p={p}: max |Δπ| {worst:e}");
            assert!(
                (ud - us).abs() < 1e-10 * ud,
                "Z={z} p={p}: unsafe {ud} vs {us}"
            );
            for s in 0..4 {
                assert!(
                    (fd[s] - fs[s]).abs() < 1e-11,
                    "Z={z} p={p} {:?}: {} vs {}",
                    STRATEGIES[s],
                    fd[s],
                    fs[s]
                );
            }
        }
    }
}

#[cfg(test)]
mod appendix_a {
    use super::*;

    /// Appendix A rows: (μ, p, UNSAFE, [AS, AU, CS, CAS]) at Z = 100, β = 2.
    const CELLS: [(f64, f64, f64, [f64; 4]); 6] = [
        (
            0.02,
            0.1,
            0.991724,
            [0.006666, 0.927941, 0.006756, 0.058637],
        ),
        (
            0.02,
            0.6,
            0.979971,
            [0.006666, 0.021974, 0.007894, 0.963466],
        ),
        (
            0.02,
            0.9,
            0.018702,
            [0.044715, 0.006666, 0.941804, 0.006815],
        ),
        (
            0.01,
            0.1,
            0.995875,
            [0.003333, 0.932592, 0.003356, 0.060719],
        ),
        (
            0.01,
            0.6,
            0.989793,
            [0.003333, 0.021598, 0.004112, 0.970957],
        ),
        (
            0.01,
            0.9,
            0.009438,
            [0.042391, 0.003333, 0.950800, 0.003476],
        ),
    ];

    /// The paper's Unsafe rates (§7.3) to one decimal, main regime.
    fn paper_percent(p: f64) -> &'static str {
        match p {
            x if x == 0.1 => "99.2",
            x if x == 0.6 => "98.0",
            _ => "1.9",
        }
    }

    /// Check one Appendix A cell to its printed 6 decimals (±1e-6 plus
    /// rounding) and, for the main regime, the paper's percentage.
    fn check_cell(mu: f64, p: f64) {
        let (_, _, want_u, want_f) = *CELLS
            .iter()
            .find(|c| c.0 == mu && c.1 == p)
            .expect("cell listed");
        let params = PopulationParams {
            z: 100,
            beta: 2.0,
            mu,
        };
        let r = stationary_full(&matchup_table(p), params).unwrap();
        assert_eq!(r.states, 176_851);
        assert!(
            (r.unsafe_rate - want_u).abs() < 1e-6,
            "μ={mu} p={p}: UNSAFE {} vs {want_u}",
            r.unsafe_rate
        );
        for s in 0..4 {
            assert!(
                (r.stationary[s] - want_f[s]).abs() < 1e-6,
                "μ={mu} p={p} {:?}: {} vs {}",
                STRATEGIES[s],
                r.stationary[s],
                want_f[s]
            );
        }
        if mu == 0.02 {
            assert_eq!(format!("{:.1}", 100.0 * r.unsafe_rate), paper_percent(p));
        }
    }

    /// Appendix A, main regime (μ = 0.02), and the paper's Unsafe rates
    /// 99.2%, 98.0% and 1.9%. A few seconds per cell in release; ignored in
    /// debug builds, where the solve is an order of magnitude slower.
    #[test]
    #[cfg_attr(debug_assertions, ignore = "release-speed test (cargo test --release)")]
    fn full_chain_reproduces_appendix_a_and_the_paper_main_regime() {
        for p in [0.1, 0.6, 0.9] {
            check_cell(0.02, p);
        }
    }

    /// Appendix A, Fig S5 regime (μ = 1/Z = 0.01).
    #[test]
    #[cfg_attr(debug_assertions, ignore = "release-speed test (cargo test --release)")]
    fn full_chain_reproduces_appendix_a_fig_s5_regime() {
        for p in [0.1, 0.6, 0.9] {
            check_cell(0.01, p);
        }
    }
}
