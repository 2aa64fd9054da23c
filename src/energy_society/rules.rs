//! The pure rules of the Energy Society, each a small function that can be
//! held against the spec: grading (§3, QUIRK-11), reward splits (§3,
//! QUIRK-18), flat fees (§2, QUIRK-4), donations (§2, QUIRK-5/6/7) and the
//! end-of-round bookkeeping (§1, QUIRK-1). The round logic in `society.rs`
//! calls these; nothing here touches a model.

use crate::energy::py_round;

use super::config::Mode;

/// Is `answer` a success for a job whose correct option is `correct_text`
/// at 0-based `answer_index` among `options`?
///
/// Faithful (QUIRK-11): lower-case both; success when the correct text is a
/// substring of the answer, or the index written in decimal is a substring
/// ("1. 0.75" passes when the index is 7).
///
/// Corrected: the answer must be one integer index (optionally wrapped in
/// brackets or followed by a period) equal to `answer_index`, or the exact
/// option text after case and whitespace normalisation.
pub fn grade(
    answer: &str,
    options: &[String],
    correct_text: &str,
    answer_index: usize,
    mode: Mode,
) -> bool {
    match mode {
        Mode::Faithful => {
            let a = answer.to_lowercase();
            a.contains(&correct_text.to_lowercase()) || a.contains(&answer_index.to_string())
        }
        Mode::Corrected => {
            let norm = |s: &str| {
                s.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_lowercase()
            };
            let t = answer.trim();
            let bare = t
                .trim_start_matches(['(', '['])
                .trim_end_matches([')', ']', '.'])
                .trim();
            if let Ok(i) = bare.parse::<usize>() {
                return i == answer_index;
            }
            let n = norm(t);
            let _ = options;
            !n.is_empty() && norm(correct_text) == n
        }
    }
}

/// The payout to each of `n` successful solvers of a job worth `reward`.
///
/// Faithful: every solver gets `round(reward / n, 2)`, which can create
/// energy (3 × 266.67 = 800.01, QUIRK-18). Corrected: the reward is split in
/// whole cents and the leftover cents go to the first solvers in roster
/// order, so the payouts sum to exactly `reward`.
pub fn split_reward(reward: f64, n: usize, mode: Mode) -> Vec<f64> {
    if n == 0 {
        return vec![];
    }
    match mode {
        Mode::Faithful => vec![py_round(reward / n as f64, 2); n],
        Mode::Corrected => {
            let cents = (reward * 100.0).round() as i64;
            let base = cents / n as i64;
            let extra = (cents % n as i64) as usize;
            (0..n)
                .map(|i| (base + i64::from(i < extra)) as f64 / 100.0)
                .collect()
        }
    }
}

/// The amount a flat fee (IDLE, SABOTAGE_JOB, spec §2) records in memory,
/// given the `fee` and what the ledger actually `deducted` (it clamps at 0).
/// Faithful records the full fee even when clamped (QUIRK-4); corrected
/// records what was deducted.
pub fn recorded_fee(fee: f64, deducted: f64, mode: Mode) -> f64 {
    match mode {
        Mode::Faithful => fee,
        Mode::Corrected => deducted,
    }
}

/// The transfer of a DONATE decision (spec §2): `min(amount, donor's energy
/// now)`, no rounding, no fee. `None` when nothing moves (corrected mode
/// with a non-positive amount).
pub fn donation_transfer(amount: f64, donor_energy: f64, mode: Mode) -> Option<f64> {
    let actual = amount.min(donor_energy);
    match mode {
        // QUIRK-6: a negative amount reverses the transfer.
        Mode::Faithful => Some(actual),
        Mode::Corrected if actual > 0.0 => Some(actual),
        Mode::Corrected => None,
    }
}

/// The amount a DONATE memory entry records. Faithful (QUIRK-7):
/// `round(min(amount, energy after deciding), 2)`, whatever moved; corrected:
/// the transfer itself (0 when nothing moved).
pub fn recorded_donation(
    amount: f64,
    energy_after_deciding: f64,
    transferred: Option<f64>,
    mode: Mode,
) -> f64 {
    match mode {
        Mode::Faithful => py_round(amount.min(energy_after_deciding), 2),
        Mode::Corrected => transferred.unwrap_or(0.0),
    }
}

/// End-of-round bookkeeping (spec §1 R6) for one agent.
///
/// Faithful (QUIRK-1): `rounds_active` counts rounds at whose end the agent
/// has energy; `deactivated_at_round` is the first round ending at 0 and is
/// never reset. Corrected: `rounds_active` counts rounds in which the agent
/// was active at the start or acted; deactivation is set the same way.
pub fn end_of_round(
    mode: Mode,
    round: u32,
    energy_end: f64,
    active_at_start: bool,
    acted: bool,
    rounds_active: &mut u32,
    deactivated_at_round: &mut Option<u32>,
) {
    let alive = energy_end > 0.0;
    if !alive && deactivated_at_round.is_none() {
        *deactivated_at_round = Some(round);
    }
    let counts = match mode {
        Mode::Faithful => alive,
        Mode::Corrected => active_at_start || acted,
    };
    if counts {
        *rounds_active += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Vec<String> {
        (0..10)
            .map(|i| format!("{}", i as f64 * 0.25 + 0.5))
            .collect()
    }

    #[test]
    fn faithful_grading_is_a_substring_match_on_text_or_index() {
        let o = opts(); // index 7 -> "2.25"
        assert!(grade("7", &o, "2.25", 7, Mode::Faithful));
        assert!(grade("The answer is 2.25", &o, "2.25", 7, Mode::Faithful));
        // The false positive of QUIRK-11: "1. 0.75" contains "7".
        assert!(grade("1. 0.75", &o, "2.25", 7, Mode::Faithful));
        assert!(!grade("1. 0.75", &o, "2.25", 7, Mode::Corrected));
        assert!(grade("7", &o, "2.25", 7, Mode::Corrected));
        assert!(grade("(7)", &o, "2.25", 7, Mode::Corrected));
        assert!(grade(" 2.25 ", &o, "2.25", 7, Mode::Corrected));
        assert!(!grade("17", &o, "2.25", 7, Mode::Corrected));
        assert!(grade("17", &o, "2.25", 7, Mode::Faithful));
        assert!(!grade("", &o, "2.25", 7, Mode::Faithful));
        // Case-insensitive text match.
        assert!(grade(
            "ANSWER: NO2- ONLY",
            &["NO2- only".to_string()],
            "NO2- only",
            0,
            Mode::Faithful
        ));
    }

    #[test]
    fn splits_round_in_faithful_and_sum_exactly_when_corrected() {
        assert_eq!(split_reward(800.0, 3, Mode::Faithful), vec![266.67; 3]);
        let c = split_reward(800.0, 3, Mode::Corrected);
        assert_eq!(c, vec![266.67, 266.67, 266.66]);
        assert_eq!(
            (c.iter().map(|x| (x * 100.0).round() as i64).sum::<i64>()),
            80000
        );
        assert_eq!(split_reward(500.0, 2, Mode::Faithful), vec![250.0, 250.0]);
        assert_eq!(split_reward(200.0, 1, Mode::Faithful), vec![200.0]);
        assert!(split_reward(200.0, 0, Mode::Faithful).is_empty());
    }

    #[test]
    fn fees_clamp_and_record_per_mode() {
        assert_eq!(recorded_fee(10.0, 4.0, Mode::Faithful), 10.0);
        assert_eq!(recorded_fee(10.0, 4.0, Mode::Corrected), 4.0);
        assert_eq!(recorded_fee(10.0, 10.0, Mode::Faithful), 10.0);
    }

    #[test]
    fn donations_cap_reverse_and_record_per_mode() {
        assert_eq!(donation_transfer(100.0, 60.0, Mode::Faithful), Some(60.0));
        assert_eq!(donation_transfer(-5.0, 60.0, Mode::Faithful), Some(-5.0));
        assert_eq!(donation_transfer(-5.0, 60.0, Mode::Corrected), None);
        assert_eq!(donation_transfer(10.0, 0.0, Mode::Corrected), None);
        // QUIRK-7: faithful records min(amount, energy after deciding), rounded.
        assert_eq!(
            recorded_donation(100.0, 74.781, Some(50.0), Mode::Faithful),
            74.78
        );
        assert_eq!(
            recorded_donation(100.0, 74.781, Some(50.0), Mode::Corrected),
            50.0
        );
    }

    #[test]
    fn bookkeeping_per_mode() {
        // Acts and dies this round: faithful does not count it (QUIRK-1).
        let (mut ra, mut d) = (0, None);
        end_of_round(Mode::Faithful, 3, 0.0, true, true, &mut ra, &mut d);
        assert_eq!((ra, d), (0, Some(3)));
        let (mut ra, mut d) = (0, None);
        end_of_round(Mode::Corrected, 3, 0.0, true, true, &mut ra, &mut d);
        assert_eq!((ra, d), (1, Some(3)));
        // Dead, revived by a donation, did nothing: faithful counts it.
        let (mut ra, mut d) = (0, Some(2));
        end_of_round(Mode::Faithful, 4, 100.0, false, false, &mut ra, &mut d);
        assert_eq!((ra, d), (1, Some(2)));
        let (mut ra, mut d) = (0, Some(2));
        end_of_round(Mode::Corrected, 4, 100.0, false, false, &mut ra, &mut d);
        assert_eq!((ra, d), (0, Some(2)));
    }
}
