//! Seeded token sampling: an optional allowed-token mask (constrained
//! decoding), repetition penalty, then greedy choice at temperature 0 or
//! top-k → top-p → min-p → temperature → a draw from the sequence's own RNG.
//!
//! The order of the filters is llama.cpp's default sampler chain (penalties,
//! top-k, top-p, min-p, temperature, distribution): the truncations look at
//! the untempered distribution. Each sequence owns a [`Sampler`] seeded from
//! `GenParams::seed`, so the same seed on the same device gives the same
//! tokens however sequences are batched.

use crate::backend::GenParams;
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The sampling part of [`GenParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 (or below) means greedy.
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    /// llama.cpp's `repeat_penalty`: positive logits of recent tokens are
    /// divided by it, negative ones multiplied. 1.0 or `None` is off.
    pub repeat_penalty: Option<f32>,
    /// How many recent tokens the penalty looks at (llama.cpp's default 64).
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl SamplingParams {
    pub fn from_gen_params(p: &GenParams) -> Self {
        Self {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            repeat_penalty: p.repeat_penalty,
            repeat_last_n: 64,
            seed: p.seed,
        }
    }

    #[cfg(test)]
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repeat_penalty: None,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

/// One sequence's sampler with its own RNG.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha20Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = ChaCha20Rng::seed_from_u64(params.seed);
        Self { params, rng }
    }

    /// Choose the next token from `logits` (one row, `vocab` long).
    /// `history` is the sequence so far (for the repetition penalty);
    /// `allowed`, when given, is a per-token mask (`true` = may be chosen)
    /// applied before anything else.
    pub fn sample(
        &mut self,
        logits: &[f32],
        history: &[u32],
        allowed: Option<&[bool]>,
    ) -> Result<u32> {
        if logits.is_empty() {
            bail!("sampler: empty logits");
        }
        let mut l = logits.to_vec();
        if let Some(mask) = allowed {
            if mask.len() < l.len() {
                bail!(
                    "sampler: allowed-token mask has {} entries for a vocabulary of {}",
                    mask.len(),
                    l.len()
                );
            }
            for (x, &ok) in l.iter_mut().zip(mask) {
                if !ok {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        if let Some(pen) = self.params.repeat_penalty.filter(|&p| p != 1.0 && p > 0.0) {
            let from = history.len().saturating_sub(self.params.repeat_last_n);
            let mut seen = std::collections::HashSet::new();
            for &tok in &history[from..] {
                if let Some(x) = l.get_mut(tok as usize) {
                    if seen.insert(tok) {
                        *x = if *x > 0.0 { *x / pen } else { *x * pen };
                    }
                }
            }
        }
        let best = argmax(&l);
        if !l[best].is_finite() && l[best] < 0.0 {
            bail!("sampler: every token is masked out");
        }
        if l[best].is_nan() {
            bail!("sampler: logits contain NaN");
        }
        if self.params.temperature <= 0.0 {
            return Ok(best as u32);
        }
        // Candidates by logit, descending (ties by id for determinism). Only
        // the head the filters and the draw look at is sorted (nearly all the
        // mass sits in a few dozen tokens); the rest is sorted on demand.
        let mut cand = match self.params.top_k.filter(|&k| k > 0 && k < l.len()) {
            // One pass that keeps the k largest: no candidate list the size of
            // the vocabulary.
            Some(k) => Candidates::top_k(&l, k),
            None => Candidates::new(
                l.iter()
                    .enumerate()
                    .filter(|(_, x)| x.is_finite())
                    .map(|(i, &x)| (i as u32, x))
                    .collect(),
            ),
        };
        if let Some(p) = self.params.top_p.filter(|&p| p < 1.0) {
            let z = cand.normaliser(1.0);
            let max = cand.max();
            let mut cum = 0.0;
            let mut keep = cand.len();
            let mut i = 0;
            while i < cand.len() {
                cum += (cand.get(i).1 as f64 - max).exp() / z;
                if cum >= p as f64 {
                    keep = i + 1;
                    break;
                }
                i += 1;
            }
            cand.truncate(keep.max(1));
        }
        if let Some(m) = self.params.min_p.filter(|&m| m > 0.0) {
            // p_i >= m * p_top  <=>  x_i >= x_top + ln(m)
            let max = cand.max();
            let cut = max + (m as f64).ln();
            let mut keep = 0;
            while keep < cand.len() && cand.get(keep).1 as f64 >= cut {
                keep += 1;
            }
            cand.truncate(keep.max(1));
        }
        let t = self.params.temperature as f64;
        let z = cand.normaliser(t);
        let max = cand.max() / t;
        let r: f64 = self.rng.gen();
        let mut cum = 0.0;
        for i in 0..cand.len() {
            cum += (cand.get(i).1 as f64 / t - max).exp() / z;
            if r < cum {
                return Ok(cand.get(i).0);
            }
        }
        Ok(cand.get(cand.len() - 1).0)
    }
}

/// Sampling candidates whose first `sorted` entries are the largest, in
/// descending order (ties by id); [`Self::get`] sorts the rest the first time
/// an index past the head is read.
struct Candidates {
    items: Vec<(u32, f32)>,
    sorted: usize,
}

/// How many candidates are sorted up front.
const SORTED_HEAD: usize = 64;

fn by_logit_desc(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

impl Candidates {
    fn new(mut items: Vec<(u32, f32)>) -> Self {
        let head = SORTED_HEAD.min(items.len());
        if head < items.len() && head > 0 {
            items.select_nth_unstable_by(head - 1, by_logit_desc);
        }
        items[..head].sort_by(by_logit_desc);
        Self {
            items,
            sorted: head,
        }
    }

    /// The `k` largest finite logits, sorted: one pass over `logits` with a
    /// heap of the `k` best so far, whose worst is replaced by anything
    /// larger (an equal logit comes later in id order, so it ranks below).
    fn top_k(logits: &[f32], k: usize) -> Self {
        /// Orders candidates so that the heap's top is the worst kept.
        struct Worst((u32, f32));
        impl PartialEq for Worst {
            fn eq(&self, other: &Self) -> bool {
                self.cmp(other).is_eq()
            }
        }
        impl Eq for Worst {}
        impl PartialOrd for Worst {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for Worst {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                by_logit_desc(&self.0, &other.0)
            }
        }
        let mut heap = std::collections::BinaryHeap::with_capacity(k + 1);
        let mut floor = f32::NEG_INFINITY;
        for (i, &x) in logits.iter().enumerate() {
            if !x.is_finite() {
                continue;
            }
            if heap.len() < k {
                heap.push(Worst((i as u32, x)));
                if heap.len() == k {
                    floor = heap.peek().map_or(floor, |w| w.0 .1);
                }
            } else if x > floor {
                if let Some(mut worst) = heap.peek_mut() {
                    *worst = Worst((i as u32, x));
                }
                floor = heap.peek().map_or(floor, |w| w.0 .1);
            }
        }
        let items: Vec<(u32, f32)> = heap.into_sorted_vec().into_iter().map(|w| w.0).collect();
        let sorted = items.len();
        Self { items, sorted }
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    /// The `i`-th largest candidate.
    fn get(&mut self, i: usize) -> (u32, f32) {
        if i >= self.sorted {
            self.items[self.sorted..].sort_by(by_logit_desc);
            self.sorted = self.items.len();
        }
        self.items[i]
    }

    /// The largest logit.
    fn max(&mut self) -> f64 {
        self.get(0).1 as f64
    }

    fn truncate(&mut self, n: usize) {
        self.items.truncate(n);
        self.sorted = self.sorted.min(n);
    }

    /// `Σ exp(x/t - max/t)` over every candidate (in f64).
    fn normaliser(&mut self, t: f64) -> f64 {
        let max = self.max() / t;
        self.items
            .iter()
            .map(|&(_, x)| (x as f64 / t - max).exp())
            .sum()
    }
}

/// Index of the largest value (the first one on ties).
pub fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] || xs[best].is_nan() {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: f32, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature: t,
            seed,
            ..SamplingParams::greedy()
        }
    }

    #[test]
    fn greedy_picks_the_largest_and_respects_the_mask() {
        let mut s = Sampler::new(params(0.0, 1));
        let logits = [0.1, 3.0, 2.0, -1.0];
        assert_eq!(s.sample(&logits, &[], None).unwrap(), 1);
        let mask = [true, false, true, true];
        assert_eq!(s.sample(&logits, &[], Some(&mask)).unwrap(), 2);
        let none = [false; 4];
        let err = s.sample(&logits, &[], Some(&none)).unwrap_err().to_string();
        assert!(err.contains("every token is masked"), "{err}");
    }

    #[test]
    fn same_seed_same_tokens_different_seed_differs() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 7) % 13) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(params(1.0, seed));
            (0..40)
                .map(|_| s.sample(&logits, &[], None).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_k_one_is_greedy_and_mask_holds_when_sampling() {
        let logits = [1.0, 2.0, 0.5, 1.9];
        let mut s = Sampler::new(SamplingParams {
            top_k: Some(1),
            ..params(1.5, 3)
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[], None).unwrap(), 1);
        }
        let mut s = Sampler::new(params(2.0, 4));
        let mask = [true, false, true, false];
        for _ in 0..50 {
            let t = s.sample(&logits, &[], Some(&mask)).unwrap();
            assert!(t == 0 || t == 2, "{t}");
        }
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() {
        // probs ~ [0.84, 0.11, 0.04, ...]: min_p 0.2 keeps only the top token.
        let logits = [5.0, 3.0, 2.0, 0.0];
        let mut s = Sampler::new(SamplingParams {
            min_p: Some(0.2),
            ..params(1.0, 5)
        });
        for _ in 0..30 {
            assert_eq!(s.sample(&logits, &[], None).unwrap(), 0);
        }
        let mut s = Sampler::new(SamplingParams {
            top_p: Some(0.9),
            ..params(1.0, 6)
        });
        for _ in 0..50 {
            assert!(s.sample(&logits, &[], None).unwrap() <= 1);
        }
    }

    #[test]
    fn repetition_penalty_changes_the_greedy_choice() {
        let logits = [2.0, 1.9, -1.0];
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: Some(1.5),
            ..params(0.0, 0)
        });
        // 2.0 / 1.5 = 1.33 < 1.9
        assert_eq!(s.sample(&logits, &[0], None).unwrap(), 1);
        assert_eq!(s.sample(&logits, &[], None).unwrap(), 0);
    }

    #[test]
    fn sampling_frequencies_follow_the_distribution() {
        // Two tokens, logits ln(3) and 0 -> p = 0.75 / 0.25 at temperature 1.
        let logits = [3f32.ln(), 0.0];
        let mut s = Sampler::new(params(1.0, 11));
        let n = 4000;
        let zeros = (0..n)
            .filter(|_| s.sample(&logits, &[], None).unwrap() == 0)
            .count();
        let f = zeros as f64 / n as f64;
        assert!((f - 0.75).abs() < 0.03, "{f}");
    }

    /// The straightforward sampler: sort everything, filter, draw.
    fn naive(p: &SamplingParams, logits: &[f32], r: f64) -> u32 {
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &x)| (i as u32, x))
            .collect();
        cand.sort_by(by_logit_desc);
        let soft = |c: &[(u32, f32)], t: f64| -> Vec<f64> {
            let m = c[0].1 as f64 / t;
            let e: Vec<f64> = c.iter().map(|&(_, x)| (x as f64 / t - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(|x| x / s).collect()
        };
        if let Some(k) = p.top_k {
            cand.truncate(k);
        }
        if let Some(tp) = p.top_p {
            let mut cum = 0.0;
            let keep = soft(&cand, 1.0)
                .iter()
                .position(|q| {
                    cum += q;
                    cum >= tp as f64
                })
                .map_or(cand.len(), |i| i + 1);
            cand.truncate(keep);
        }
        if let Some(m) = p.min_p {
            let q = soft(&cand, 1.0);
            let keep = q.iter().take_while(|&&x| x >= m as f64 * q[0]).count();
            cand.truncate(keep.max(1));
        }
        let q = soft(&cand, p.temperature as f64);
        let mut cum = 0.0;
        for (i, x) in q.iter().enumerate() {
            cum += x;
            if r < cum {
                return cand[i].0;
            }
        }
        cand[cand.len() - 1].0
    }

    #[test]
    fn top_k_pass_keeps_what_a_full_sort_keeps() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        // Few distinct values, so ties decide membership; some masked out.
        let mut logits: Vec<f32> = (0..3000)
            .map(|_| rng.gen_range(0..40) as f32 * 0.1)
            .collect();
        for i in (0..3000).step_by(7) {
            logits[i] = f32::NEG_INFINITY;
        }
        for k in [1, 2, 40, 64, 65, 500, 2571, 2572] {
            let got = Candidates::top_k(&logits, k).items;
            let mut all: Vec<(u32, f32)> = logits
                .iter()
                .enumerate()
                .filter(|(_, x)| x.is_finite())
                .map(|(i, &x)| (i as u32, x))
                .collect();
            all.sort_by(by_logit_desc);
            all.truncate(k);
            assert_eq!(got, all, "k = {k}");
        }
    }

    #[test]
    fn partial_sorting_draws_what_a_full_sort_draws() {
        let mut rng = ChaCha20Rng::seed_from_u64(99);
        // A flat-ish distribution over 5000 tokens, so draws land past the sorted head.
        let logits: Vec<f32> = (0..5000).map(|_| rng.gen_range(0.0..1.5)).collect();
        let variants = [
            params(1.0, 1),
            SamplingParams {
                top_k: Some(300),
                ..params(0.8, 2)
            },
            SamplingParams {
                top_k: Some(40),
                top_p: Some(0.9),
                ..params(0.7, 5)
            },
            SamplingParams {
                top_p: Some(0.5),
                ..params(1.2, 3)
            },
            SamplingParams {
                min_p: Some(0.5),
                ..params(0.7, 4)
            },
        ];
        for p in variants {
            let mut s = Sampler::new(p.clone());
            let mut draws = ChaCha20Rng::seed_from_u64(p.seed);
            let mut past_head = 0;
            for _ in 0..300 {
                let got = s.sample(&logits, &[], None).unwrap();
                let want = naive(&p, &logits, draws.gen());
                assert_eq!(got, want, "{p:?}");
                let rank = logits.iter().filter(|&&x| x > logits[got as usize]).count();
                past_head += usize::from(rank >= SORTED_HEAD);
            }
            if p.top_k.map_or(true, |k| k > SORTED_HEAD) {
                assert!(past_head > 0, "no draw past the sorted head for {p:?}");
            }
        }
    }
}
