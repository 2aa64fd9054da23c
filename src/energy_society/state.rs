//! The mutable state of a society: each agent's energy account and history
//! (memory, errors, bookkeeping), and the per-round energy ledger with the
//! conservation check that runs at the end of every round (spec §2).

use super::config::RosterEntry;
use super::layout::{ErrorRecord, MemoryEntry};

/// One agent's account.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub spec: RosterEntry,
    /// Unrounded per-token price `k · S^α`.
    pub per_token: f64,
    pub energy: f64,
    pub rounds_active: u32,
    pub deactivated_at_round: Option<u32>,
    pub memory: Vec<MemoryEntry>,
    pub errors: Vec<ErrorRecord>,
}

impl Agent {
    pub fn new(spec: RosterEntry, per_token: f64) -> Self {
        Agent {
            energy: spec.init_energy,
            spec,
            per_token,
            rounds_active: 0,
            deactivated_at_round: None,
            memory: vec![],
            errors: vec![],
        }
    }
    pub fn id(&self) -> &str {
        &self.spec.agent_id
    }
    /// "Active" means energy > 0 at the moment of the check (spec §1).
    pub fn active(&self) -> bool {
        self.energy > 0.0
    }
}

/// What a ledger line is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerKind {
    /// Energy charged for the tokens of a vote/decide/act invocation.
    Tokens,
    /// IDLE or SABOTAGE_JOB fee.
    Fee,
    /// Donation out (negative) or in (positive).
    Donation,
    /// A job reward.
    Reward,
}

/// One change of one agent's energy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LedgerLine {
    pub agent: usize,
    pub kind: LedgerKind,
    /// Signed change actually applied.
    pub delta: f64,
}

/// A failed conservation check: which round and what did not add up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("energy conservation violated in round {round}: {detail}")]
pub struct ConservationError {
    pub round: u32,
    pub detail: String,
}

/// Tolerance of the check. Energies are sums of cents held in doubles; the
/// ledger adds the same deltas in a different order, so the two totals can
/// differ by a few ulps of ~10⁴ (≈ 10⁻¹²), never by anything near a cent.
pub const CONSERVATION_TOLERANCE: f64 = 1e-6;

/// Check that every agent's energy moved exactly by its ledger lines, that
/// the society total equals previous + rewards − charges − fees, and that
/// donations net to zero.
pub fn check_conservation(
    round: u32,
    before: &[f64],
    after: &[f64],
    ledger: &[LedgerLine],
) -> Result<(), ConservationError> {
    let fail = |detail: String| Err(ConservationError { round, detail });
    if before.len() != after.len() {
        return fail(format!(
            "{} agents before, {} after",
            before.len(),
            after.len()
        ));
    }
    let mut per_agent = vec![0.0f64; before.len()];
    let (mut rewards, mut charges, mut fees, mut donations) = (0.0, 0.0, 0.0, 0.0);
    for l in ledger {
        let Some(slot) = per_agent.get_mut(l.agent) else {
            return fail(format!(
                "ledger names agent #{} that does not exist",
                l.agent
            ));
        };
        *slot += l.delta;
        match l.kind {
            LedgerKind::Reward => rewards += l.delta,
            LedgerKind::Tokens => charges -= l.delta,
            LedgerKind::Fee => fees -= l.delta,
            LedgerKind::Donation => donations += l.delta,
        }
    }
    for (i, ((b, a), d)) in before.iter().zip(after).zip(&per_agent).enumerate() {
        let expected = b + d;
        if (expected - a).abs() > CONSERVATION_TOLERANCE {
            return fail(format!(
                "agent #{i}: {b} + ledger {d} = {expected}, but the account holds {a} (mismatch {})",
                a - expected
            ));
        }
    }
    if donations.abs() > CONSERVATION_TOLERANCE {
        return fail(format!("donations do not net to zero: {donations}"));
    }
    let total_before: f64 = before.iter().sum();
    let total_after: f64 = after.iter().sum();
    let expected = total_before + rewards - charges - fees;
    if (expected - total_after).abs() > CONSERVATION_TOLERANCE {
        return fail(format!(
            "total {total_before} + rewards {rewards} - charges {charges} - fees {fees} = {expected}, but agents hold {total_after}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Vec<LedgerLine> {
        vec![
            LedgerLine {
                agent: 0,
                kind: LedgerKind::Tokens,
                delta: -41.97,
            },
            LedgerLine {
                agent: 1,
                kind: LedgerKind::Fee,
                delta: -10.0,
            },
            LedgerLine {
                agent: 1,
                kind: LedgerKind::Donation,
                delta: -100.0,
            },
            LedgerLine {
                agent: 0,
                kind: LedgerKind::Donation,
                delta: 100.0,
            },
            LedgerLine {
                agent: 0,
                kind: LedgerKind::Reward,
                delta: 266.67,
            },
        ]
    }

    #[test]
    fn a_true_ledger_passes() {
        let before = [1500.0, 200.0];
        let after = [1500.0 - 41.97 + 100.0 + 266.67, 90.0];
        check_conservation(4, &before, &after, &ledger()).unwrap();
    }

    #[test]
    fn a_tampered_ledger_fails_loudly_with_the_round() {
        let before = [1500.0, 200.0];
        let after = [1500.0 - 41.97 + 100.0 + 266.67, 90.0];
        let mut l = ledger();
        l[4].delta = 266.68;
        let e = check_conservation(7, &before, &after, &l).unwrap_err();
        assert_eq!(e.round, 7);
        assert!(e.to_string().contains("round 7") && e.to_string().contains("agent #0"));
        // A one-sided donation breaks the zero-sum rule even if accounts match.
        let mut l = ledger();
        l.remove(3);
        let after2 = [1500.0 - 41.97 + 266.67, 90.0];
        let e = check_conservation(2, &before, &after2, &l).unwrap_err();
        assert!(e.detail.contains("donations"), "{e}");
    }
}
