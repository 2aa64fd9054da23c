//! The race run folders an analysis reads ([`load`]: finished races and their
//! turns from `races.jsonl` and `turns.jsonl`, every finished race with all
//! its turns) and the Wilson interval every
//! rate table uses.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use crate::race::run::{race_missing_turns, read_races, read_turns};
use crate::race::scenario::{RaceRecord, TurnRecord};

/// z for a two-sided 95% interval.
pub const Z95: f64 = 1.959964;

/// Wilson score interval (§8): centre (p̂ + z²/2n)/(1 + z²/n), half-width
/// z·√(p̂(1−p̂)/n + z²/4n²)/(1 + z²/n).
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (kf, nf) = (k as f64, n as f64);
    let p = kf / nf;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / nf;
    let centre = (p + z2 / (2.0 * nf)) / denom;
    let half = Z95 * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Everything read from the run folders.
pub struct RunData {
    pub turns: Vec<TurnRecord>,
    pub races: Vec<RaceRecord>,
    /// The run folders, as given.
    pub sources: Vec<String>,
    /// Index into `sources` of each turn and each race.
    pub turn_sources: Vec<usize>,
    pub race_sources: Vec<usize>,
}

pub fn load(dirs: &[PathBuf]) -> anyhow::Result<RunData> {
    let mut turns = Vec::new();
    let mut races = Vec::new();
    let (mut turn_sources, mut race_sources) = (Vec::new(), Vec::new());
    for (src, d) in dirs.iter().enumerate() {
        let rp = d.join("races.jsonl");
        if !rp.is_file() {
            let what = if !d.exists() {
                "does not exist"
            } else if !d.is_dir() {
                "is not a folder"
            } else {
                "holds no races.jsonl"
            };
            anyhow::bail!(
                "{}: expected a race run folder (with races.jsonl and turns.jsonl, as `joule race run` \
                 or `joule race sweep` writes), but it {what}",
                d.display()
            );
        }
        let rs = read_races(&rp)?;
        let done: BTreeSet<String> = rs.iter().map(|r| r.game_id.clone()).collect();
        let tp = d.join("turns.jsonl");
        let mut counts = HashMap::new();
        for t in read_turns(&tp)? {
            if done.contains(&t.game_id) {
                *counts.entry(t.game_id.clone()).or_insert(0) += 1;
                turns.push(t);
                turn_sources.push(src);
            }
        }
        // Rates from a race with lost turns would silently differ.
        if let Some((game, want, found)) = race_missing_turns(&rs, &counts) {
            anyhow::bail!(
                "{}: game `{game}` is recorded as finished but has {found} of its {want} turns \
                 (its rounds times its seats); the file was cut short or edited. \
                 `joule race run --resume` on the folder plays such races again",
                tp.display()
            );
        }
        race_sources.extend(std::iter::repeat(src).take(rs.len()));
        races.extend(rs);
    }
    anyhow::ensure!(!races.is_empty(), "no finished races in {dirs:?}");
    Ok(RunData {
        turns,
        races,
        sources: dirs.iter().map(|d| d.display().to_string()).collect(),
        turn_sources,
        race_sources,
    })
}
