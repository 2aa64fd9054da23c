//! An offline, seeded source of multiple-choice jobs with exact answers, so
//! the Energy Society runs on a fresh machine with no data set. It keeps the
//! reference's round shape (spec §3): `count` jobs per tier, shuffled,
//! relabelled `job_0…`; each job has 10 distinct options, one of them right.
//!
//! Tiers and templates (every answer is an integer, computed exactly):
//! - easy (`arithmetic`): `What is A + B?`, `What is A - B?`, `What is A × B?`;
//! - medium (`percentages`, `unit conversion`): `What is P% of N?`,
//!   `Convert Q km to m.` (and h→min, kg→g, min→s, m→cm, L→mL);
//! - hard (`algebra`, `sequences`, `multi-step word problems`):
//!   `Solve for x: A·x + B = C.`, a sequence `t(n+1) = M·t(n) + K` asking
//!   for the next term, and a discount-on-a-bulk-purchase problem.
//!
//! Distractors are the typical slips of each template (wrong operation,
//! misplaced decimal, off by one step) topped up with nearby values.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::job::{Difficulty, Job, JobSource};
use super::layout::DifficultyCounts;

/// Options per job, as in most MMLU-Pro questions.
pub const NUM_OPTIONS: usize = 10;

/// Unit conversions of the medium tier: (from, to, factor).
pub const CONVERSIONS: [(&str, &str, i64); 6] = [
    ("km", "m", 1000),
    ("h", "min", 60),
    ("kg", "g", 1000),
    ("min", "s", 60),
    ("m", "cm", 100),
    ("L", "mL", 1000),
];

/// The procedural job source. Deterministic given `seed` and `counts`.
pub struct ProceduralJobs {
    seed: u64,
    counts: DifficultyCounts,
    rng: ChaCha8Rng,
    next_serial: i64,
}

impl ProceduralJobs {
    pub fn new(seed: u64, counts: DifficultyCounts) -> Self {
        Self {
            seed,
            counts,
            rng: ChaCha8Rng::seed_from_u64(seed),
            next_serial: 0,
        }
    }

    fn make(&mut self, tier: Difficulty) -> Job {
        let (category, description, answer, slips) = match tier {
            Difficulty::Easy => easy(&mut self.rng),
            Difficulty::Medium => medium(&mut self.rng),
            Difficulty::Hard => hard(&mut self.rng),
        };
        let (options, answer_index) = options_for(&mut self.rng, answer, &slips);
        let question_id = self.next_serial;
        self.next_serial += 1;
        Job {
            id: String::new(),
            question_id,
            category: category.to_string(),
            difficulty: tier,
            reward: tier.reward(),
            description,
            options,
            answer_index,
        }
    }
}

impl JobSource for ProceduralJobs {
    fn next_round(&mut self) -> anyhow::Result<Vec<Job>> {
        let mut jobs = Vec::new();
        for (tier, n) in [
            (Difficulty::Easy, self.counts.easy),
            (Difficulty::Medium, self.counts.medium),
            (Difficulty::Hard, self.counts.hard),
        ] {
            for _ in 0..n {
                jobs.push(self.make(tier));
            }
        }
        jobs.shuffle(&mut self.rng);
        for (i, job) in jobs.iter_mut().enumerate() {
            job.id = format!("job_{i}");
        }
        Ok(jobs)
    }

    fn describe(&self) -> String {
        format!(
            "procedural seed={} easy={} medium={} hard={}",
            self.seed, self.counts.easy, self.counts.medium, self.counts.hard
        )
    }
}

type Made = (&'static str, String, i64, Vec<i64>);

fn easy(rng: &mut ChaCha8Rng) -> Made {
    match rng.gen_range(0..3) {
        0 => {
            let (a, b) = (rng.gen_range(12..100), rng.gen_range(12..100));
            let slips = vec![a - b, a + b + 10, a + b - 10, a * b];
            ("arithmetic", format!("What is {a} + {b}?"), a + b, slips)
        }
        1 => {
            let b = rng.gen_range(11..80);
            let a = b + rng.gen_range(5..90);
            let slips = vec![a + b, b - a, a - b + 10, a - b - 10];
            ("arithmetic", format!("What is {a} - {b}?"), a - b, slips)
        }
        _ => {
            let (a, b) = (rng.gen_range(3..20), rng.gen_range(3..13));
            let slips = vec![a + b, a * (b + 1), (a + 1) * b, a * b + 10];
            ("arithmetic", format!("What is {a} × {b}?"), a * b, slips)
        }
    }
}

fn medium(rng: &mut ChaCha8Rng) -> Made {
    if rng.gen_bool(0.5) {
        // P% of N with P a multiple of 5 and N a multiple of 20: always exact.
        let p = 5 * rng.gen_range(1..20);
        let n = 20 * rng.gen_range(2..50);
        let ans = p * n / 100;
        let slips = vec![p * n / 10, p * n / 1000, n - ans, ans + p, n + ans];
        ("percentages", format!("What is {p}% of {n}?"), ans, slips)
    } else {
        let (from, to, f) = CONVERSIONS[rng.gen_range(0..CONVERSIONS.len())];
        // Q = tenths / 10 with one decimal; f is a multiple of 10, so Q·f is whole.
        let tenths: i64 = rng.gen_range(11..200);
        let q = if tenths % 10 == 0 {
            format!("{}", tenths / 10)
        } else {
            format!("{}.{}", tenths / 10, tenths % 10)
        };
        let ans = tenths * f / 10;
        let other = if f == 60 { 100 } else { 60 };
        let slips = vec![ans / 10, ans * 10, tenths * other / 10, ans / f.max(1)];
        (
            "unit conversion",
            format!("Convert {q} {from} to {to}."),
            ans,
            slips,
        )
    }
}

fn hard(rng: &mut ChaCha8Rng) -> Made {
    match rng.gen_range(0..3) {
        0 => {
            let a = rng.gen_range(2..13);
            let x = rng.gen_range(-20..31);
            let b = rng.gen_range(-60..61);
            let c = a * x + b;
            let slips = vec![-x, (c + b) / a, c - b, x + 1, x - 1];
            (
                "algebra",
                format!("Solve for x: {a}·x {} = {c}.", signed(b)),
                x,
                slips,
            )
        }
        1 => {
            let m = rng.gen_range(2..4);
            let k = rng.gen_range(-5..8);
            let mut t = vec![rng.gen_range(1..7)];
            for _ in 0..4 {
                let last = *t.last().unwrap_or(&0);
                t.push(m * last + k);
            }
            let ans = m * t[4] + k;
            let shown = t.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            let slips = vec![t[4] + (t[4] - t[3]), m * t[4], ans + k, ans - 1];
            (
                "sequences",
                format!(
                    "Each term of the sequence {shown}, … is {m} times the previous term {} {}. What is the next term?",
                    if k < 0 { "minus" } else { "plus" },
                    k.abs()
                ),
                ans,
                slips,
            )
        }
        _ => {
            // price·count·(100 − discount)/100 is whole when price is a multiple of 4
            // and the discount a multiple of 25.
            let price = 4 * rng.gen_range(2..30);
            let count = rng.gen_range(3..25);
            let d = 25 * rng.gen_range(1..4);
            let total = price * count;
            let ans = total * (100 - d) / 100;
            let slips = vec![total, total * d / 100, ans - price, total - d];
            (
                "multi-step word problems",
                format!(
                    "Pens cost {price} cents each. A customer buys {count} pens and gets {d}% off the total. How many cents does the customer pay?"
                ),
                ans,
                slips,
            )
        }
    }
}

fn signed(b: i64) -> String {
    if b < 0 {
        format!("- {}", -b)
    } else {
        format!("+ {b}")
    }
}

/// Ten distinct options containing `answer` once, at a random position:
/// the template's slips first, then nearby values.
fn options_for(rng: &mut ChaCha8Rng, answer: i64, slips: &[i64]) -> (Vec<String>, usize) {
    let mut values: Vec<i64> = Vec::with_capacity(NUM_OPTIONS);
    let push = |v: i64, values: &mut Vec<i64>| {
        if v != answer && !values.contains(&v) && values.len() < NUM_OPTIONS - 1 {
            values.push(v);
        }
    };
    for &s in slips {
        push(s, &mut values);
    }
    let spread = (answer.abs() / 5).max(9);
    while values.len() < NUM_OPTIONS - 1 {
        let d = rng.gen_range(1..=spread);
        let v = if rng.gen_bool(0.5) {
            answer + d
        } else {
            answer - d
        };
        push(v, &mut values);
    }
    values.shuffle(rng);
    let at = rng.gen_range(0..NUM_OPTIONS);
    values.insert(at, answer);
    (values.iter().map(i64::to_string).collect(), at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STD: DifficultyCounts = DifficultyCounts {
        easy: 4,
        medium: 4,
        hard: 4,
    };

    /// Recompute a job's answer from its text alone.
    fn solve(desc: &str) -> i64 {
        let num = |s: &str| -> i64 {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{s:?} in {desc}"))
        };
        if let Some(rest) = desc.strip_prefix("What is ") {
            let rest = rest.trim_end_matches('?');
            if let Some((p, n)) = rest.split_once("% of ") {
                return num(p) * num(n) / 100;
            }
            // "A op B": split on the spaces around the operator.
            let parts: Vec<&str> = rest.split(' ').collect();
            let (a, op, b) = (num(parts[0]), parts[1], num(parts[2]));
            return match op {
                "+" => a + b,
                "-" => a - b,
                "×" => a * b,
                _ => panic!("operator {op}"),
            };
        }
        if let Some(rest) = desc.strip_prefix("Convert ") {
            let parts: Vec<&str> = rest.trim_end_matches('.').split(' ').collect();
            let q: f64 = parts[0].parse().unwrap();
            let (_, _, f) = CONVERSIONS
                .iter()
                .find(|(a, b, _)| *a == parts[1] && *b == parts[3])
                .unwrap();
            return (q * *f as f64).round() as i64;
        }
        if let Some(rest) = desc.strip_prefix("Solve for x: ") {
            let rest = rest.trim_end_matches('.');
            let (lhs, c) = rest.split_once(" = ").unwrap();
            let (a, b) = lhs.split_once("·x ").unwrap();
            let b = num(&b.replace(' ', ""));
            let (a, c) = (num(a), num(c));
            assert_eq!((c - b) % a, 0);
            return (c - b) / a;
        }
        if let Some(rest) = desc.strip_prefix("Each term of the sequence ") {
            let (terms, rule) = rest.split_once(", … is ").unwrap();
            let terms: Vec<i64> = terms.split(", ").map(num).collect();
            let words: Vec<&str> = rule.split(' ').collect();
            let m = num(words[0]);
            let k = num(words[6].trim_end_matches('.'));
            let k = if words[5] == "minus" { -k } else { k };
            for w in terms.windows(2) {
                assert_eq!(w[1], m * w[0] + k, "{desc}");
            }
            return m * terms[terms.len() - 1] + k;
        }
        if let Some(rest) = desc.strip_prefix("Pens cost ") {
            let words: Vec<&str> = rest.split(' ').collect();
            let price = num(words[0]);
            let count = num(words[6]);
            let d = num(words[10].trim_end_matches('%'));
            let total = price * count;
            assert_eq!(total * (100 - d) % 100, 0);
            return total * (100 - d) / 100;
        }
        panic!("unknown template: {desc}");
    }

    #[test]
    fn same_seed_same_jobs_other_seed_other_jobs() {
        let mut a = ProceduralJobs::new(7, STD);
        let mut b = ProceduralJobs::new(7, STD);
        let mut c = ProceduralJobs::new(8, STD);
        let ra: Vec<_> = (0..3).map(|_| a.next_round().unwrap()).collect();
        let rb: Vec<_> = (0..3).map(|_| b.next_round().unwrap()).collect();
        let rc: Vec<_> = (0..3).map(|_| c.next_round().unwrap()).collect();
        assert_eq!(ra, rb);
        assert_ne!(ra, rc);
        assert_ne!(ra[0], ra[1]);
    }

    #[test]
    fn every_answer_recomputes_and_options_are_distinct() {
        let mut seen_templates = std::collections::BTreeSet::new();
        for seed in 0..20 {
            let mut src = ProceduralJobs::new(seed, STD);
            for _ in 0..10 {
                for job in src.next_round().unwrap() {
                    let want = solve(&job.description);
                    assert_eq!(job.correct_answer(), want.to_string(), "{job:?}");
                    assert_eq!(job.options.len(), NUM_OPTIONS);
                    let uniq: std::collections::BTreeSet<_> = job.options.iter().collect();
                    assert_eq!(uniq.len(), NUM_OPTIONS, "{job:?}");
                    assert_eq!(
                        job.options
                            .iter()
                            .filter(|o| **o == want.to_string())
                            .count(),
                        1
                    );
                    seen_templates.insert(job.description.split(' ').next().unwrap().to_string());
                    seen_templates.insert(job.category.clone());
                }
            }
        }
        for c in [
            "arithmetic",
            "percentages",
            "unit conversion",
            "algebra",
            "sequences",
            "multi-step word problems",
        ] {
            assert!(seen_templates.contains(c), "{c} never generated");
        }
    }

    #[test]
    fn counts_per_tier_ids_and_rewards() {
        for counts in [
            STD,
            DifficultyCounts {
                easy: 2,
                medium: 2,
                hard: 2,
            },
            DifficultyCounts {
                easy: 0,
                medium: 3,
                hard: 1,
            },
        ] {
            let mut src = ProceduralJobs::new(3, counts);
            let jobs = src.next_round().unwrap();
            let n = |d: Difficulty| jobs.iter().filter(|j| j.difficulty == d).count() as u32;
            assert_eq!(n(Difficulty::Easy), counts.easy);
            assert_eq!(n(Difficulty::Medium), counts.medium);
            assert_eq!(n(Difficulty::Hard), counts.hard);
            for (i, j) in jobs.iter().enumerate() {
                assert_eq!(j.id, format!("job_{i}"));
                assert_eq!(j.reward, j.difficulty.reward());
                let cats: &[&str] = match j.difficulty {
                    Difficulty::Easy => &["arithmetic"],
                    Difficulty::Medium => &["percentages", "unit conversion"],
                    Difficulty::Hard => &["algebra", "sequences", "multi-step word problems"],
                };
                assert!(cats.contains(&j.category.as_str()), "{j:?}");
            }
        }
        assert!(ProceduralJobs::new(3, STD).describe().contains("seed=3"));
    }
}
