//! Jobs given as explicit per-round lists: the replay of a recorded run
//! (whose files keep only attempted or sabotaged jobs) and hand-built test
//! states. Round `r` gets `rounds[r - 1]`; past the end, rounds are empty.

use super::job::{Job, JobSource};

/// A [`JobSource`] that hands out prepared lists.
#[derive(Debug, Clone, Default)]
pub struct ListedJobs {
    rounds: Vec<Vec<Job>>,
    next: usize,
    label: String,
}

impl ListedJobs {
    pub fn new(rounds: Vec<Vec<Job>>, label: impl Into<String>) -> Self {
        ListedJobs {
            rounds,
            next: 0,
            label: label.into(),
        }
    }
}

impl JobSource for ListedJobs {
    fn next_round(&mut self) -> anyhow::Result<Vec<Job>> {
        let jobs = self.rounds.get(self.next).cloned().unwrap_or_default();
        self.next += 1;
        Ok(jobs)
    }

    fn describe(&self) -> String {
        format!("listed jobs ({})", self.label)
    }
}
