//! Behavioural archetypes (spec §8, the reference's
//! `analyze_behavioral_clustering.py`): five features per player-race —
//! overall Unsafe rate, reciprocity P(U | opp prev U) − P(U | opp prev S),
//! position sensitivity P(U | ahead) − P(U | behind), own autocorrelation
//! P(U | own prev U) − P(U | own prev S), first-round Unsafe — with the
//! conditional terms over rounds > 1 and a missing difference imputed with
//! the human mean; z-scored with the human mean and SD (n − 1); k-means with
//! k = 4 fitted on the human data only, exactly as the reference's
//! scikit-learn `KMeans(n_clusters=4, random_state=0, n_init=10)` runs it
//! (numpy's MT19937 seeded 0 drives the k-means++ starts; see [`kmeans`]).
//! That matters: the human features have several local optima, and the
//! reference's partition (19/170/133/19, inertia 975.32) is not the lowest
//! one (972.63, found by more restarts), so only the same starts give the
//! paper's archetypes. Model trajectories go to the nearest human centroid.
//!
//! Cluster ids are ordered by size (largest first, ties by centroid), and
//! named from their centroids by the paper's archetypes: the cluster that
//! starts Safe is the *cautious starter*, of the rest the one with the
//! highest own autocorrelation the *persister*, then the one with the
//! highest reciprocity the *reciprocal catch-up*, and the last the
//! *aggressive starter / reciprocator*.

use serde::Serialize;

use crate::race::rng::PyRandom;

use super::trajectory::PlayerRace;

pub const FEATURES: [&str; 5] = [
    "overall_unsafe_rate",
    "reciprocity",
    "position_sensitivity",
    "own_autocorrelation",
    "first_round_unsafe",
];
pub const K: usize = 4;
/// scikit-learn's `random_state` and `n_init` of the reference.
pub const SEED: u32 = 0;
pub const N_INIT: usize = 10;

/// The raw features of one player-race (`None`: a condition never occurred).
pub fn features(p: &PlayerRace) -> [Option<f64>; 5] {
    let mean = |v: &[bool]| -> Option<f64> {
        (!v.is_empty()).then(|| v.iter().filter(|&&x| x).count() as f64 / v.len() as f64)
    };
    let diff = |a: &[bool], b: &[bool]| Some(mean(a)? - mean(b)?);
    let all: Vec<bool> = p.rounds.iter().map(|r| r.unsafe_).collect();
    let (mut opp_u, mut opp_s, mut ahead, mut behind, mut own_u, mut own_s) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for w in p.rounds.windows(2) {
        let (prev, cur) = (&w[0], &w[1]);
        if cur.round <= 1 {
            continue;
        }
        let u = cur.unsafe_;
        if prev.others.iter().any(|&x| x) {
            opp_u.push(u)
        } else {
            opp_s.push(u)
        }
        if cur.gap_before > 0.0 {
            ahead.push(u);
        } else if cur.gap_before < 0.0 {
            behind.push(u);
        }
        if prev.unsafe_ {
            own_u.push(u)
        } else {
            own_s.push(u)
        }
    }
    let first = p
        .rounds
        .iter()
        .find(|r| r.round == 1)
        .map(|r| r.unsafe_ as u8 as f64);
    [
        mean(&all),
        diff(&opp_u, &opp_s),
        diff(&ahead, &behind),
        diff(&own_u, &own_s),
        first,
    ]
}

/// The archetype model: human scaling, centroids (in z units), names.
#[derive(Debug, Clone, Serialize)]
pub struct Archetypes {
    /// Human mean of each (imputed) feature: the imputation value and the z centre.
    pub mean: [f64; 5],
    pub std: [f64; 5],
    pub centroids: Vec<[f64; 5]>,
    /// Mean raw features of each cluster's human members.
    pub raw_centroids: Vec<[f64; 5]>,
    pub names: Vec<String>,
    pub inertia: f64,
    /// The human cluster of each human player-race, in input order.
    pub human_labels: Vec<usize>,
    pub sizes: Vec<usize>,
}

fn dist2(a: &[f64; 5], b: &[f64; 5]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// The nearest centre of a point (first on ties, as numpy's argmin).
fn nearest(p: &[f64; 5], c: &[[f64; 5]]) -> usize {
    let (mut best, mut bd) = (0, f64::INFINITY);
    for (j, cj) in c.iter().enumerate() {
        let d = dist2(p, cj);
        if d < bd {
            bd = d;
            best = j;
        }
    }
    best
}

/// scikit-learn's `_kmeans_plusplus` (one run): the first centre by
/// `RandomState.choice` with uniform weights, then each next centre the
/// best of `2 + ⌊ln k⌋` candidates drawn in proportion to the squared
/// distance to the nearest chosen centre.
fn plus_plus(x: &[[f64; 5]], k: usize, rng: &mut PyRandom) -> Vec<[f64; 5]> {
    let n = x.len();
    let trials = 2 + (k as f64).ln() as usize;
    // choice(n, p=w/w.sum()): cdf = cumsum(p) / cdf[-1], searchsorted(u, 'right').
    let mut cdf = Vec::with_capacity(n);
    let mut acc = 0.0;
    for _ in 0..n {
        acc += 1.0 / n as f64;
        cdf.push(acc);
    }
    let last = cdf[n - 1];
    for v in cdf.iter_mut() {
        *v /= last;
    }
    let u = rng.random();
    let first = cdf.partition_point(|&c| c <= u).min(n - 1);
    let mut centers = vec![x[first]];
    let mut closest: Vec<f64> = x.iter().map(|p| dist2(p, &x[first])).collect();
    let mut pot: f64 = closest.iter().sum();
    while centers.len() < k {
        let mut cum = Vec::with_capacity(n);
        let mut a = 0.0;
        for d in &closest {
            a += d;
            cum.push(a);
        }
        let cands: Vec<usize> = (0..trials)
            .map(|_| {
                let r = rng.random() * pot;
                cum.partition_point(|&c| c < r).min(n - 1)
            })
            .collect();
        let mut best: Option<(f64, usize, Vec<f64>)> = None;
        for &c in &cands {
            let d: Vec<f64> = x
                .iter()
                .zip(&closest)
                .map(|(p, &old)| old.min(dist2(p, &x[c])))
                .collect();
            let s: f64 = d.iter().sum();
            if best.as_ref().is_none_or(|b| s < b.0) {
                best = Some((s, c, d));
            }
        }
        let (s, c, d) = best.expect("at least one candidate");
        pot = s;
        closest = d;
        centers.push(x[c]);
    }
    centers
}

/// scikit-learn's `_kmeans_single_lloyd`: E and M steps until the labels
/// repeat (strict convergence) or the squared centre shift is at most
/// `tol`; an empty cluster takes the point farthest from its centre.
fn lloyd(x: &[[f64; 5]], mut c: Vec<[f64; 5]>, tol: f64) -> (Vec<usize>, Vec<[f64; 5]>, f64) {
    let n = x.len();
    let k = c.len();
    let mut old = vec![usize::MAX; n];
    let mut strict = false;
    for _ in 0..300 {
        let mut labels: Vec<usize> = x.iter().map(|p| nearest(p, &c)).collect();
        for j in 0..k {
            if !labels.contains(&j) {
                let far = (0..n)
                    .max_by(|&a, &b| {
                        dist2(&x[a], &c[labels[a]]).total_cmp(&dist2(&x[b], &c[labels[b]]))
                    })
                    .unwrap_or(0);
                labels[far] = j;
            }
        }
        let mut sums = vec![[0.0; 5]; k];
        let mut counts = vec![0usize; k];
        for (p, &l) in x.iter().zip(&labels) {
            counts[l] += 1;
            for f in 0..5 {
                sums[l][f] += p[f];
            }
        }
        let new: Vec<[f64; 5]> = (0..k)
            .map(|j| std::array::from_fn(|f| sums[j][f] / counts[j].max(1) as f64))
            .collect();
        let shift: f64 = c.iter().zip(&new).map(|(a, b)| dist2(a, b)).sum();
        c = new;
        if labels == old {
            strict = true;
            break;
        }
        old = labels;
        if shift <= tol {
            break;
        }
    }
    let labels: Vec<usize> = if strict {
        old
    } else {
        x.iter().map(|p| nearest(p, &c)).collect()
    };
    let inertia = x.iter().zip(&labels).map(|(p, &l)| dist2(p, &c[l])).sum();
    (labels, c, inertia)
}

/// k-means as scikit-learn's `KMeans(n_clusters=k, random_state=seed,
/// n_init)` runs it: the data centred, `n_init` k-means++ starts drawn in
/// turn from numpy's `RandomState(seed)`, Lloyd from each with tolerance
/// 1e-4 × the mean feature variance, the lowest inertia kept (a later run
/// replaces the best only with a strictly lower inertia and a different
/// partition). Cluster ids are then renumbered by size (largest first, ties
/// by centroid).
pub fn kmeans(
    x: &[[f64; 5]],
    k: usize,
    seed: u32,
    n_init: usize,
) -> anyhow::Result<(Vec<usize>, Vec<[f64; 5]>, f64)> {
    anyhow::ensure!(
        x.len() >= k && k > 0,
        "k-means needs at least {k} points, got {}",
        x.len()
    );
    let n = x.len() as f64;
    let mean: [f64; 5] = std::array::from_fn(|f| x.iter().map(|p| p[f]).sum::<f64>() / n);
    let xc: Vec<[f64; 5]> = x
        .iter()
        .map(|p| std::array::from_fn(|f| p[f] - mean[f]))
        .collect();
    let var: f64 = (0..5)
        .map(|f| xc.iter().map(|p| p[f] * p[f]).sum::<f64>() / n)
        .sum::<f64>()
        / 5.0;
    let tol = var * 1e-4;
    let mut rng = PyRandom::numpy_legacy(seed);
    let mut best: Option<(Vec<usize>, Vec<[f64; 5]>, f64)> = None;
    for _ in 0..n_init.max(1) {
        let start = plus_plus(&xc, k, &mut rng);
        let r = lloyd(&xc, start, tol);
        let better = match &best {
            None => true,
            Some(b) => r.2 < b.2 && !same_partition(&r.0, &b.0, k),
        };
        if better {
            best = Some(r);
        }
    }
    let (labels, c, inertia) = best.expect("at least one start");
    let c: Vec<[f64; 5]> = c
        .iter()
        .map(|p| std::array::from_fn(|f| p[f] + mean[f]))
        .collect();
    let mut order: Vec<usize> = (0..k).collect();
    let size = |j: usize| labels.iter().filter(|&&l| l == j).count();
    order.sort_by(|&a, &b| {
        size(b)
            .cmp(&size(a))
            .then_with(|| c[a].partial_cmp(&c[b]).unwrap_or(std::cmp::Ordering::Equal))
    });
    let mut new_id = vec![0; k];
    for (new, &old) in order.iter().enumerate() {
        new_id[old] = new;
    }
    Ok((
        labels.iter().map(|&l| new_id[l]).collect(),
        order.iter().map(|&o| c[o]).collect(),
        inertia,
    ))
}

/// scikit-learn's `_is_same_clustering`: equal up to a relabelling.
fn same_partition(a: &[usize], b: &[usize], k: usize) -> bool {
    let mut map = vec![usize::MAX; k];
    for (&x, &y) in a.iter().zip(b) {
        if map[x] == usize::MAX {
            map[x] = y;
        } else if map[x] != y {
            return false;
        }
    }
    true
}

impl Archetypes {
    /// Fit on human player-races.
    pub fn fit(humans: &[PlayerRace]) -> anyhow::Result<Self> {
        let raw: Vec<[Option<f64>; 5]> = humans.iter().map(features).collect();
        let mut mean = [0.0; 5];
        for f in 0..5 {
            let v: Vec<f64> = raw.iter().filter_map(|r| r[f]).collect();
            anyhow::ensure!(!v.is_empty(), "no human has a value for `{}`", FEATURES[f]);
            mean[f] = v.iter().sum::<f64>() / v.len() as f64;
        }
        let imputed: Vec<[f64; 5]> = raw
            .iter()
            .map(|r| std::array::from_fn(|f| r[f].unwrap_or(mean[f])))
            .collect();
        let n = imputed.len() as f64;
        anyhow::ensure!(n >= 2.0, "archetypes need at least two human player-races");
        // The imputed mean equals the observed mean; the SD is of the imputed values.
        let std: [f64; 5] = std::array::from_fn(|f| {
            let m = imputed.iter().map(|r| r[f]).sum::<f64>() / n;
            (imputed.iter().map(|r| (r[f] - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        });
        let mean: [f64; 5] = std::array::from_fn(|f| imputed.iter().map(|r| r[f]).sum::<f64>() / n);
        for f in 0..5 {
            anyhow::ensure!(
                std[f] > 0.0,
                "the human feature `{}` does not vary",
                FEATURES[f]
            );
        }
        let z: Vec<[f64; 5]> = imputed
            .iter()
            .map(|r| std::array::from_fn(|f| (r[f] - mean[f]) / std[f]))
            .collect();
        let (labels, centroids, inertia) = kmeans(&z, K, SEED, N_INIT)?;
        let sizes: Vec<usize> = (0..K)
            .map(|j| labels.iter().filter(|&&l| l == j).count())
            .collect();
        let raw_centroids: Vec<[f64; 5]> = (0..K)
            .map(|j| {
                std::array::from_fn(|f| {
                    let v: Vec<f64> = imputed
                        .iter()
                        .zip(&labels)
                        .filter(|(_, &l)| l == j)
                        .map(|(r, _)| r[f])
                        .collect();
                    v.iter().sum::<f64>() / v.len().max(1) as f64
                })
            })
            .collect();
        let names = name_clusters(&raw_centroids);
        Ok(Self {
            mean,
            std,
            centroids,
            raw_centroids,
            names,
            inertia,
            human_labels: labels,
            sizes,
        })
    }

    /// The nearest human centroid of a player-race (missing features imputed
    /// with the human mean).
    pub fn assign(&self, p: &PlayerRace) -> usize {
        let raw = features(p);
        let z: [f64; 5] =
            std::array::from_fn(|f| (raw[f].unwrap_or(self.mean[f]) - self.mean[f]) / self.std[f]);
        let mut best = (0, f64::INFINITY);
        for (j, c) in self.centroids.iter().enumerate() {
            let d = dist2(&z, c);
            if d < best.1 {
                best = (j, d);
            }
        }
        best.0
    }
}

/// Names from raw centroids (see the module comment).
fn name_clusters(raw: &[[f64; 5]]) -> Vec<String> {
    let k = raw.len();
    let mut names = vec![String::new(); k];
    let mut left: Vec<usize> = (0..k).collect();
    let mut take = |left: &mut Vec<usize>, key: &dyn Fn(usize) -> f64, name: &str| {
        if let Some(&j) = left.iter().max_by(|&&a, &&b| key(a).total_cmp(&key(b))) {
            names[j] = name.to_string();
            left.retain(|&x| x != j);
        }
    };
    take(&mut left, &|j| -raw[j][4], "Cautious starter");
    take(&mut left, &|j| raw[j][3], "Persister");
    take(&mut left, &|j| raw[j][1], "Reciprocal catch-up");
    take(
        &mut left,
        &|j| raw[j][0],
        "Aggressive starter / reciprocator",
    );
    for (j, n) in names.iter_mut().enumerate() {
        if n.is_empty() {
            *n = format!("Cluster {j}");
        }
    }
    names
}
