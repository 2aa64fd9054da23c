//! Jobs of the Energy Society: one multiple-choice question with a
//! difficulty and a reward (spec §3). Where jobs come from (the
//! MMLU-Pro-Stratified draw that reproduces the reference, or the offline
//! procedural generator) is behind [`JobSource`].

use serde::{Deserialize, Serialize};

/// Difficulty tier of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Difficulty {
    Easy,
    Medium,
    Hard,
}

impl Difficulty {
    pub const ALL: [Difficulty; 3] = [Difficulty::Easy, Difficulty::Medium, Difficulty::Hard];

    /// Reward for solving a job of this tier: 200 / 500 / 800.
    pub fn reward(self) -> u32 {
        match self {
            Difficulty::Easy => 200,
            Difficulty::Medium => 500,
            Difficulty::Hard => 800,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Difficulty::Easy => "easy",
            Difficulty::Medium => "medium",
            Difficulty::Hard => "hard",
        }
    }
}

/// One job offered in one round. `id` (`job_0`…) means something only inside its round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    /// The data set's `question_id` (or the generator's serial number).
    pub question_id: i64,
    pub category: String,
    pub difficulty: Difficulty,
    pub reward: u32,
    pub description: String,
    pub options: Vec<String>,
    /// 0-based index of the correct option.
    pub answer_index: usize,
}

impl Job {
    /// The correct option's text (the reference stores the answer as text).
    pub fn correct_answer(&self) -> &str {
        self.options
            .get(self.answer_index)
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// Gives each round its jobs. Implementations are deterministic given their seed.
pub trait JobSource {
    /// The jobs of the next round, relabelled `job_0…job_{n-1}`.
    fn next_round(&mut self) -> anyhow::Result<Vec<Job>>;
    /// A short description for records (`mmlu-pro-stratified seed=42`).
    fn describe(&self) -> String;
    /// Where the jobs come from, for the run's provenance: the description,
    /// and for a data set its files, size and digest.
    fn origin(&self) -> crate::provenance::Jobs {
        crate::provenance::Jobs {
            source: self.describe(),
            ..Default::default()
        }
    }
}
