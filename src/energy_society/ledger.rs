//! The energy ledger: the only code that holds and changes the agents'
//! energies. Every change (a model call's token charge, an IDLE or
//! SABOTAGE_JOB fee, a donation and the revival it may cause, a job reward)
//! is applied to the account and written as a [`LedgerLine`] with the energy
//! before and after, in one step. A round's lines therefore chain each
//! account from its start-of-round energy to its end energy by
//! construction; [`check_conservation`] stays as the check of that, of the
//! zero sum of donations and of the society's total.
//!
//! An invocation (up to `max_calls` model calls run concurrently with other
//! agents' invocations) is charged on a [`Tab`]: each call's
//! `round(T · c, 2)` (the formula of [`crate::energy::token_charge`]),
//! clamped at 0, against the energy the tab was opened at. The ledger applies
//! the tab when the invocation returns, one line per charged call. Replay
//! uses the same tab to find the per-call split that reproduces a recorded
//! spend. Under `[cost] model = "measured"` a tab charges each call
//! `round(scale · J, 2)` for the joules measured for it instead
//! ([`Tab::charge_measured`]).

use serde::Serialize;

use crate::energy::{clamp_sub, joule_charge, token_charge};

/// What a ledger line is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerKind {
    /// Energy charged for the tokens of one vote/decide/act call.
    Tokens,
    /// IDLE or SABOTAGE_JOB fee.
    Fee,
    /// Donation out (negative) or in (positive).
    Donation,
    /// A donation received by an agent at 0, which it brings back.
    Revival,
    /// A job reward.
    Reward,
}

/// One change of one agent's energy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerLine {
    pub agent: usize,
    pub kind: LedgerKind,
    /// Signed change actually applied: `after − before`.
    pub delta: f64,
    pub before: f64,
    pub after: f64,
    /// The tokens charged ([`LedgerKind::Tokens`] lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// One charged call of a [`Tab`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Charge {
    pub tokens: u64,
    /// `round(tokens · c, 2)`, before the clamp.
    pub amount: f64,
    pub before: f64,
    pub after: f64,
}

/// The running bill of one invocation: the energy it started from and the
/// charges of its calls, applied to the account by [`Ledger::settle`].
#[derive(Debug, Clone, PartialEq)]
pub struct Tab {
    per_token: f64,
    /// The measured cost model's price of a joule (`None`: the formula).
    per_joule: Option<f64>,
    start: f64,
    energy: f64,
    charges: Vec<Charge>,
}

impl Tab {
    /// A tab for an agent paying `per_token` and holding `energy` now.
    pub fn open(per_token: f64, energy: f64) -> Self {
        Tab {
            per_token,
            per_joule: None,
            start: energy,
            energy,
            charges: vec![],
        }
    }

    /// Charge one call's `tokens`: `round(tokens · c, 2)`, never below 0.
    pub fn charge(&mut self, tokens: u64) -> Charge {
        let amount = token_charge(tokens, self.per_token);
        let before = self.energy;
        self.energy = clamp_sub(before, amount);
        let c = Charge {
            tokens,
            amount,
            before,
            after: self.energy,
        };
        self.charges.push(c);
        c
    }

    /// The same tab priced by measured joules (`[cost] model = "measured"`)
    /// when `per_joule` is given.
    pub fn priced_per_joule(mut self, per_joule: Option<f64>) -> Self {
        self.per_joule = per_joule;
        self
    }

    /// The price of a joule, when the tab charges measured energy.
    pub fn per_joule(&self) -> Option<f64> {
        self.per_joule
    }

    /// Charge one call of `tokens` tokens by its measured `joules`:
    /// `round(joules · scale, 2)`, never below 0 (formula tabs charge the tokens).
    pub fn charge_measured(&mut self, tokens: u64, joules: f64) -> Charge {
        let Some(per_joule) = self.per_joule else {
            return self.charge(tokens);
        };
        let amount = joule_charge(joules, per_joule);
        let before = self.energy;
        self.energy = clamp_sub(before, amount);
        let c = Charge {
            tokens,
            amount,
            before,
            after: self.energy,
        };
        self.charges.push(c);
        c
    }

    /// Take back every charge: the faithful INVOKE_ERROR charges nothing for
    /// the whole invocation (QUIRK-3).
    pub fn void(&mut self) {
        self.charges.clear();
        self.energy = self.start;
    }

    /// The energy the tab was opened at.
    pub fn start(&self) -> f64 {
        self.start
    }

    /// The energy after the charges so far.
    pub fn energy(&self) -> f64 {
        self.energy
    }

    pub fn per_token(&self) -> f64 {
        self.per_token
    }
}

/// A change the ledger refused: the account is not where the caller thinks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("energy ledger, round {round}, agent #{agent}: {detail}")]
pub struct LedgerError {
    pub round: u32,
    pub agent: usize,
    pub detail: String,
}

/// Every agent's energy and the current round's lines. Energies can be read,
/// never written, from outside:
///
/// ```compile_fail,E0615
/// use joule::energy_society::ledger::Ledger;
/// let mut ledger = Ledger::new(vec![1500.0]);
/// ledger.energy[0] = 0.0;
/// ```
///
/// ```
/// use joule::energy_society::ledger::Ledger;
/// let mut ledger = Ledger::new(vec![1500.0]);
/// ledger.begin_round(1);
/// ledger.fee(0, 10.0).unwrap();
/// assert_eq!(ledger.energy(0), 1490.0);
/// assert_eq!(ledger.close_round().unwrap().len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    energy: Vec<f64>,
    round: u32,
    start: Vec<f64>,
    lines: Vec<LedgerLine>,
}

impl Ledger {
    /// Accounts holding `initial` energies, before round 1.
    pub fn new(initial: Vec<f64>) -> Self {
        Ledger {
            start: initial.clone(),
            energy: initial,
            round: 0,
            lines: vec![],
        }
    }

    pub fn energy(&self, agent: usize) -> f64 {
        self.energy[agent]
    }

    pub fn energies(&self) -> &[f64] {
        &self.energy
    }

    /// "Active" means energy > 0 at the moment of the check (spec §1).
    pub fn active(&self, agent: usize) -> bool {
        self.energy[agent] > 0.0
    }

    pub fn len(&self) -> usize {
        self.energy.len()
    }

    /// Start round `round`: its start energies are today's energies.
    pub fn begin_round(&mut self, round: u32) {
        self.round = round;
        self.start = self.energy.clone();
        self.lines.clear();
    }

    #[cfg(test)]
    /// This round's lines so far.
    pub fn lines(&self) -> &[LedgerLine] {
        &self.lines
    }

    fn set(&mut self, agent: usize, kind: LedgerKind, after: f64, tokens: Option<u64>) {
        let before = self.energy[agent];
        self.energy[agent] = after;
        self.lines.push(LedgerLine {
            agent,
            kind,
            delta: after - before,
            before,
            after,
            tokens,
        });
    }

    fn check(&self, agent: usize) -> Result<(), LedgerError> {
        if agent < self.energy.len() {
            Ok(())
        } else {
            Err(LedgerError {
                round: self.round,
                agent,
                detail: format!("no such agent ({} accounts)", self.energy.len()),
            })
        }
    }

    /// A tab for `agent`'s next invocation, opened at its energy now.
    pub fn tab(&self, agent: usize, per_token: f64) -> Tab {
        Tab::open(per_token, self.energy[agent])
    }

    /// Apply an invocation's tab: one [`LedgerKind::Tokens`] line per
    /// charged call. The account must still hold what the tab opened at.
    pub fn settle(&mut self, agent: usize, tab: &Tab) -> Result<(), LedgerError> {
        self.check(agent)?;
        if self.energy[agent] != tab.start {
            return Err(LedgerError {
                round: self.round,
                agent,
                detail: format!(
                    "an invocation opened at {} settles on an account holding {}",
                    tab.start, self.energy[agent]
                ),
            });
        }
        for c in &tab.charges {
            self.set(agent, LedgerKind::Tokens, c.after, Some(c.tokens));
        }
        Ok(())
    }

    /// Subtract a flat `fee`, never below 0; returns what was deducted.
    pub fn fee(&mut self, agent: usize, fee: f64) -> Result<f64, LedgerError> {
        self.check(agent)?;
        let before = self.energy[agent];
        let after = clamp_sub(before, fee);
        self.set(agent, LedgerKind::Fee, after, None);
        Ok(before - after)
    }

    /// Move `amount` (signed, as the rules computed it) from `from` to `to`.
    /// Returns whether it revived `to` (0 before, above 0 after).
    pub fn donate(&mut self, from: usize, to: usize, amount: f64) -> Result<bool, LedgerError> {
        self.check(from)?;
        self.check(to)?;
        let was = self.energy[to];
        let donor = self.energy[from] - amount;
        self.set(from, LedgerKind::Donation, donor, None);
        let after = self.energy[to] + amount;
        let revived = was <= 0.0 && after > 0.0;
        let kind = if revived {
            LedgerKind::Revival
        } else {
            LedgerKind::Donation
        };
        self.set(to, kind, after, None);
        Ok(revived)
    }

    /// Add a job reward (unclamped, spec §3). A zero reward changes nothing
    /// and writes no line.
    pub fn reward(&mut self, agent: usize, amount: f64) -> Result<(), LedgerError> {
        self.check(agent)?;
        if amount != 0.0 {
            let after = self.energy[agent] + amount;
            self.set(agent, LedgerKind::Reward, after, None);
        }
        Ok(())
    }

    /// The round's start energies.
    pub fn start(&self) -> &[f64] {
        &self.start
    }

    /// Check the round's conservation and hand back its lines.
    pub fn close_round(&mut self) -> Result<Vec<LedgerLine>, ConservationError> {
        check_conservation(self.round, &self.start, &self.energy, &self.lines)?;
        Ok(std::mem::take(&mut self.lines))
    }
}

/// A failed conservation check: which round and what did not add up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("energy conservation violated in round {round}: {detail}")]
pub struct ConservationError {
    pub round: u32,
    pub detail: String,
}

/// Tolerance of the totals at a society's ordinary size. Energies are sums of
/// cents held in doubles; the totals add the same deltas in a different order,
/// so they can differ by a few ulps of ~10⁴ (≈ 10⁻¹²), never by anything near
/// a cent. The chain of each account is checked exactly.
pub const CONSERVATION_TOLERANCE: f64 = 1e-6;

/// The totals' tolerance for one round: [`CONSERVATION_TOLERANCE`], plus the
/// rounding of a sum of `terms` doubles as large as the largest energy or
/// change seen. The faithful rules move any amount a model names, negative ones
/// included (QUIRK-6), so a donation of −5·10¹⁵ is a legal move whose sums
/// round by more than a cent; at 1,500 the second term is ~10⁻¹².
fn total_tolerance(before: &[f64], after: &[f64], ledger: &[LedgerLine]) -> f64 {
    let lines = ledger.iter().flat_map(|l| [l.before, l.after, l.delta]);
    let largest = before
        .iter()
        .chain(after)
        .copied()
        .chain(lines)
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let terms = (2 * before.len() + ledger.len() + 4) as f64;
    CONSERVATION_TOLERANCE + largest * f64::EPSILON * terms
}

/// Check that each agent's lines chain exactly from its start energy to its
/// end energy (each line starting where the previous one ended, with
/// `delta = after − before`), that donations net to zero, and that the
/// society total equals previous + rewards − charges − fees.
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
    let mut at = before.to_vec();
    let (mut rewards, mut charges, mut fees, mut donations) = (0.0, 0.0, 0.0, 0.0);
    for (k, l) in ledger.iter().enumerate() {
        let Some(slot) = at.get_mut(l.agent) else {
            return fail(format!(
                "ledger line {k} names agent #{} that does not exist",
                l.agent
            ));
        };
        if l.before != *slot {
            return fail(format!(
                "ledger line {k} ({:?}) of agent #{} starts at {}, but the account held {}",
                l.kind, l.agent, l.before, slot
            ));
        }
        if l.delta != l.after - l.before {
            return fail(format!(
                "ledger line {k} ({:?}) of agent #{}: delta {} is not {} - {}",
                l.kind, l.agent, l.delta, l.after, l.before
            ));
        }
        *slot = l.after;
        match l.kind {
            LedgerKind::Reward => rewards += l.delta,
            LedgerKind::Tokens => charges -= l.delta,
            LedgerKind::Fee => fees -= l.delta,
            LedgerKind::Donation | LedgerKind::Revival => donations += l.delta,
        }
    }
    for (i, (a, e)) in after.iter().zip(&at).enumerate() {
        if a != e {
            return fail(format!(
                "agent #{i}: its ledger lines end at {e}, but the account holds {a} (mismatch {})",
                a - e
            ));
        }
    }
    let tolerance = total_tolerance(before, after, ledger);
    if donations.abs() > tolerance {
        return fail(format!("donations do not net to zero: {donations}"));
    }
    let total_before: f64 = before.iter().sum();
    let total_after: f64 = after.iter().sum();
    let expected = total_before + rewards - charges - fees;
    if (expected - total_after).abs() > tolerance {
        let lines: Vec<String> = ledger
            .iter()
            .map(|l| format!("#{} {:?} {} -> {}", l.agent, l.kind, l.before, l.after))
            .collect();
        return fail(format!(
            "total {total_before} + rewards {rewards} - charges {charges} - fees {fees} = {expected}, but agents hold {total_after} (start {before:?}, end {after:?}; lines: {})",
            lines.join("; ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round: a call's charge, a fee, a donation that revives, a reward.
    fn round() -> Ledger {
        let mut l = Ledger::new(vec![1500.0, 0.0, 5.0]);
        l.begin_round(4);
        let mut tab = l.tab(0, 0.03);
        assert_eq!(tab.charge(1399).amount, 41.97);
        l.settle(0, &tab).unwrap();
        assert_eq!(l.fee(2, 10.0).unwrap(), 5.0);
        assert!(l.donate(0, 1, 100.0).unwrap());
        assert!(l.donate(0, 2, 50.0).unwrap());
        l.reward(1, 266.67).unwrap();
        l
    }

    #[test]
    fn every_change_is_one_line_chained_from_the_start_energy() {
        let mut l = round();
        assert_eq!(l.energy(0), 1500.0 - 41.97 - 100.0 - 50.0);
        assert_eq!(l.energy(1), 366.67);
        assert_eq!(l.energy(2), 50.0);
        let kinds: Vec<LedgerKind> = l.lines().iter().map(|x| x.kind).collect();
        use LedgerKind::*;
        // agent_3 was at 0 after its fee, so the 50 revives it too.
        assert_eq!(
            kinds,
            [Tokens, Fee, Donation, Revival, Donation, Revival, Reward]
        );
        assert_eq!(l.lines()[0].tokens, Some(1399));
        let lines = l.close_round().unwrap();
        assert_eq!(lines.len(), 7);
        assert!(l.lines().is_empty());
    }

    #[test]
    fn a_voided_tab_charges_nothing_and_a_stale_tab_is_refused() {
        let mut l = Ledger::new(vec![100.0]);
        l.begin_round(1);
        let mut tab = l.tab(0, 0.045);
        tab.charge(2);
        tab.charge(5000);
        assert_eq!(tab.energy(), 0.0);
        let stale = tab.clone();
        tab.void();
        l.settle(0, &tab).unwrap();
        assert_eq!(l.energy(0), 100.0);
        assert!(l.lines().is_empty());
        l.fee(0, 10.0).unwrap();
        let e = l.settle(0, &stale).unwrap_err();
        assert!(e.to_string().contains("opened at 100"), "{e}");
        assert!(l.fee(3, 1.0).is_err());
    }

    /// Faithful rules move what the model asked for, negative amounts included (QUIRK-6): a
    /// donation of −5.2·10¹⁵ (a served model's answer) takes energies to a size
    /// where a cent is below the doubles' rounding. The round still closes; at an ordinary
    /// size a charge passed off as a donation still fails the check.
    #[test]
    fn a_donation_of_any_size_still_balances_and_a_mislabelled_charge_does_not() {
        let mut l = Ledger::new(vec![1500.0; 5]);
        l.begin_round(1);
        for (agent, tokens) in [(0, 560), (1, 584), (2, 800), (2, 104), (3, 80), (4, 203)] {
            let mut tab = l.tab(agent, 0.015);
            tab.charge(tokens);
            l.settle(agent, &tab).unwrap();
        }
        l.donate(1, 2, -5_210_876_249_110_128.22).unwrap();
        l.donate(4, 0, 5.0).unwrap();
        let mut tab = l.tab(0, 0.03);
        tab.charge(24);
        l.settle(0, &tab).unwrap();
        assert!(l.energy(2) < -5e15, "{}", l.energy(2));
        let start = l.start().to_vec();
        let end = l.energies().to_vec();
        let lines = l.close_round().expect("the round balances");
        check_conservation(1, &start, &end, &lines).unwrap();
        // At 1,500, a charge passed off as a donation leaves the donations 41.97 short.
        let mut ordinary = round();
        let start = ordinary.start().to_vec();
        let end = ordinary.energies().to_vec();
        let mut lines = ordinary.close_round().unwrap();
        lines[0].kind = LedgerKind::Donation;
        let e = check_conservation(4, &start, &end, &lines).unwrap_err();
        assert!(e.detail.contains("donations"), "{e}");
    }

    #[test]
    fn the_check_catches_a_tampered_or_broken_chain() {
        let mut l = round();
        let start = l.start().to_vec();
        let end = l.energies().to_vec();
        let lines = l.close_round().unwrap();
        check_conservation(4, &start, &end, &lines).unwrap();
        // A changed amount breaks the chain of that account.
        let mut bad = lines.clone();
        bad[6].after += 0.01;
        bad[6].delta += 0.01;
        let e = check_conservation(7, &start, &end, &bad).unwrap_err();
        assert_eq!(e.round, 7);
        assert!(e.detail.contains("agent #1"), "{e}");
        // A lost line: the next line of that agent starts elsewhere.
        let mut bad = lines.clone();
        bad.remove(2);
        let e = check_conservation(4, &start, &end, &bad).unwrap_err();
        assert!(e.detail.contains("starts at"), "{e}");
        // A one-sided donation whose accounts chain still fails the zero sum.
        let line = |agent, before: f64, after: f64| LedgerLine {
            agent,
            kind: LedgerKind::Donation,
            delta: after - before,
            before,
            after,
            tokens: None,
        };
        let e = check_conservation(
            2,
            &[1500.0, 0.0],
            &[1400.0, 50.0],
            &[line(0, 1500.0, 1400.0), line(1, 0.0, 50.0)],
        )
        .unwrap_err();
        assert!(e.detail.contains("donations"), "{e}");
    }
}
