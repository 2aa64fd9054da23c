//! The reference's job draw (spec §3 "Sampling"), bit for bit: one
//! `numpy.random.default_rng(seed)` per run; every round, for easy, medium
//! and hard in that order, `rng.choice(len(pool), count, replace=False)`
//! picks pool positions; the three lists are concatenated, shuffled with
//! `rng.shuffle`, cut to `num_jobs` (all of them) and relabelled
//! `job_0…job_{n-1}`. Pools are the data set's rows of each tier in file
//! order ([`Dataset::pool`]).

use std::sync::Arc;

use anyhow::Context;

use super::dataset::Dataset;
use super::job::{Difficulty, Job, JobSource};
use super::layout::DifficultyCounts;
use crate::nprand::{self, Generator};

/// The MMLU-Pro-Stratified job source of the reference runs.
pub struct StratifiedDraw {
    dataset: Arc<Dataset>,
    seed: u64,
    counts: DifficultyCounts,
    rng: Generator,
    /// Row indices of each tier's pool, in `Difficulty::ALL` order.
    pools: [Vec<usize>; 3],
}

impl StratifiedDraw {
    pub fn new(dataset: Arc<Dataset>, seed: u64, counts: DifficultyCounts) -> Self {
        let pools = Difficulty::ALL.map(|d| dataset.pool(d));
        Self {
            dataset,
            seed,
            counts,
            rng: nprand::default_rng(seed as u128),
            pools,
        }
    }

    /// Refuse, before any round, a data set with fewer questions of a tier
    /// than one round draws of it (each round draws without replacement).
    pub fn check(&self) -> anyhow::Result<()> {
        for (t, tier) in Difficulty::ALL.into_iter().enumerate() {
            let (have, need) = (self.pools[t].len(), self.count(tier) as usize);
            if have < need {
                anyhow::bail!(
                    "key `difficulty.{0}`: {1} holds {have} {0} question(s), fewer than the {need} a round draws",
                    tier.as_str(),
                    self.dataset.source
                );
            }
        }
        Ok(())
    }

    fn count(&self, tier: Difficulty) -> u32 {
        match tier {
            Difficulty::Easy => self.counts.easy,
            Difficulty::Medium => self.counts.medium,
            Difficulty::Hard => self.counts.hard,
        }
    }
}

impl JobSource for StratifiedDraw {
    fn next_round(&mut self) -> anyhow::Result<Vec<Job>> {
        // (tier, row index) in concatenation order.
        let mut picked: Vec<(Difficulty, usize)> = Vec::new();
        for (t, tier) in Difficulty::ALL.into_iter().enumerate() {
            let pool = &self.pools[t];
            let n = self.count(tier) as usize;
            let draw = self
                .rng
                .choice_without_replacement(pool.len(), n)
                .with_context(|| {
                    format!(
                        "drawing {n} {} jobs from {}",
                        tier.as_str(),
                        self.dataset.source
                    )
                })?;
            picked.extend(draw.into_iter().map(|k| (tier, pool[k as usize])));
        }
        self.rng.shuffle(&mut picked);
        Ok(picked
            .into_iter()
            .enumerate()
            .map(|(i, (tier, row))| self.dataset.rows()[row].to_job(format!("job_{i}"), tier))
            .collect())
    }

    fn describe(&self) -> String {
        format!(
            "mmlu-pro-stratified seed={} easy={} medium={} hard={} source={}",
            self.seed, self.counts.easy, self.counts.medium, self.counts.hard, self.dataset.source
        )
    }

    fn origin(&self) -> crate::provenance::Jobs {
        crate::provenance::Jobs {
            source: self.describe(),
            data: Some(self.dataset.source.clone()),
            questions: Some(self.dataset.rows().len()),
            digest: Some(self.dataset.digest()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::energy_society::layout::RunFolder;

    fn shared() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared")
    }

    fn dataset() -> Arc<Dataset> {
        Arc::new(Dataset::load_json(shared().join("data/mmlu-pro-stratified.json")).unwrap())
    }

    fn counts(n: u32) -> DifficultyCounts {
        DifficultyCounts {
            easy: n,
            medium: n,
            hard: n,
        }
    }

    #[test]
    fn a_data_set_too_small_for_one_round_is_refused_before_any_round() {
        let ds = dataset();
        let easy = ds.pool(Difficulty::Easy).len() as u32;
        assert!(StratifiedDraw::new(ds.clone(), 1, counts(4))
            .check()
            .is_ok());
        let too_many = DifficultyCounts {
            easy: easy + 1,
            medium: 4,
            hard: 4,
        };
        let e = StratifiedDraw::new(ds, 1, too_many)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("key `difficulty.easy`") && e.contains(&format!("holds {easy} easy")),
            "{e}"
        );
    }

    #[test]
    fn thirty_rounds_match_numpy_for_the_paper_seeds() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/numpy/jobs.json");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let runs = v["data"]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 10);
        let ds = dataset();
        for run in runs {
            let seed = run["seed"].as_u64().unwrap();
            let n = run["counts"]["easy"].as_u64().unwrap() as u32;
            let want: Vec<Vec<i64>> = serde_json::from_value(run["question_ids"].clone()).unwrap();
            assert_eq!(want.len(), 30);
            let mut src = StratifiedDraw::new(ds.clone(), seed, counts(n));
            for (r, want) in want.iter().enumerate() {
                let jobs = src.next_round().unwrap();
                let got: Vec<i64> = jobs.iter().map(|j| j.question_id).collect();
                assert_eq!(&got, want, "seed {seed}, {n} per tier, round {}", r + 1);
                for (i, j) in jobs.iter().enumerate() {
                    assert_eq!(j.id, format!("job_{i}"));
                }
                for d in Difficulty::ALL {
                    assert_eq!(jobs.iter().filter(|j| j.difficulty == d).count() as u32, n);
                }
            }
        }
    }

    /// Every job attempted in the shared reference runs is the job with that
    /// id in our draw for that round: same text, options and correct answer.
    #[test]
    fn every_attempted_reference_job_is_the_drawn_job() {
        let ds = dataset();
        let root = shared().join("data/reference-runs/energy-society");
        let mut checked = 0;
        for cond in ["comp_with_discussion", "coop"] {
            for k in 1..=5 {
                let dir = root
                    .join(cond)
                    .join("exponent_0.5")
                    .join(format!("run_{k}"));
                let run = RunFolder::read(&dir).unwrap_or_else(|e| panic!("{e:#}"));
                let cfg = &run.config;
                let mut src =
                    StratifiedDraw::new(ds.clone(), cfg.seed, cfg.difficulty_distribution);
                let rounds: Vec<HashMap<String, Job>> = (0..cfg.max_rounds)
                    .map(|_| {
                        src.next_round()
                            .unwrap()
                            .into_iter()
                            .map(|j| (j.id.clone(), j))
                            .collect()
                    })
                    .collect();
                for agent in &run.agents {
                    for m in &agent.memory {
                        let Some(a) = &m.attempted_job else { continue };
                        let ctx = format!(
                            "{} {} round {} {}",
                            dir.display(),
                            agent.agent_id,
                            m.round_num,
                            a.job_id
                        );
                        let job = rounds[m.round_num as usize - 1]
                            .get(&a.job_id)
                            .unwrap_or_else(|| panic!("{ctx}: no such job"));
                        assert_eq!(job.description, a.description, "{ctx}");
                        assert_eq!(job.options, a.options, "{ctx}");
                        assert_eq!(job.correct_answer(), a.correct_answer, "{ctx}");
                        assert_eq!(job.category, a.category, "{ctx}");
                        assert_eq!(job.difficulty.as_str(), a.difficulty, "{ctx}");
                        assert_eq!(job.reward as f64, a.reward, "{ctx}");
                        checked += 1;
                    }
                }
            }
        }
        // All attempts of the ten baseline runs (counted with Python).
        assert_eq!(checked, 1006);
    }

    #[test]
    fn too_small_a_pool_is_an_error_naming_the_tier() {
        let ds = Arc::new(Dataset::from_rows("tiny", dataset().rows()[..3].to_vec()));
        let mut src = StratifiedDraw::new(ds, 1, counts(4));
        let msg = format!("{:#}", src.next_round().unwrap_err());
        assert!(msg.contains("easy") && msg.contains("tiny"), "{msg}");
    }
}
