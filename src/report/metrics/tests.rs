//! Each metric quirk (QUIRK-14 to 17) behaves differently in the faithful and
//! the corrected mode, on small hand-made rows.

use super::{donations, energy, jobs, recommendations, Mode};
use crate::report::load::{MemRow, VoteRow};
use crate::report::summary::lookup;
use crate::report::table::Table;

/// A memory row of `agent` (model `m`) in `run`, round `round`; zero costs.
fn mem(run: &str, agent: &str, round: i64, action: &str) -> MemRow {
    MemRow {
        run_id: run.into(),
        agent_id: agent.into(),
        model_name: "m".into(),
        round_num: round,
        action: action.into(),
        energy_start: 100.0,
        vote: 0.0,
        decide: 0.0,
        act: 0.0,
        rewarded: 0.0,
        succeeded: None,
        job_difficulty: None,
        job_category: None,
        job_id: None,
        target_agent: None,
        donated_amount: f64::NAN,
        any_error: false,
        spent: 0.0,
        net: 0.0,
        received: 0.0,
        sabotaged_job_id: None,
    }
}

/// Fill `spent` and `net` as the loader does.
fn costs(mut m: MemRow, vote: f64, decide: f64, act: f64, rewarded: f64) -> MemRow {
    m.vote = vote;
    m.decide = decide;
    m.act = act;
    m.rewarded = rewarded;
    m.spent = vote + decide + act;
    m.net = rewarded - m.spent;
    m
}

fn attempt(run: &str, agent: &str, round: i64, job: &str, succeeded: Option<bool>) -> MemRow {
    let mut m = mem(run, agent, round, "ATTEMPT_JOB");
    m.job_id = Some(job.into());
    m.job_difficulty = Some("easy".into());
    m.job_category = Some("math".into());
    m.succeeded = succeeded;
    m
}

fn donate(run: &str, agent: &str, round: i64, target: &str, amount: f64) -> MemRow {
    let mut m = costs(mem(run, agent, round, "DONATE"), 0.0, 0.0, amount, 0.0);
    m.target_agent = Some(target.into());
    m.donated_amount = amount;
    m
}

fn vote(voter: &str, rec: &str, action: &str, job: Option<&str>) -> VoteRow {
    VoteRow {
        run_id: "run_1".into(),
        run_dir: "runs/run_1".into(),
        experiment: "comp".into(),
        seed: 1,
        max_rounds: 30,
        round_num: 1,
        voter: voter.into(),
        voter_model: Some("m".into()),
        rec_agent: Some(rec.into()),
        rec_model: Some("m".into()),
        index: 1,
        action: Some(action.into()),
        job_id: job.map(str::to_string),
        target_agent: None,
        amount: f64::NAN,
        target_type: if voter == rec { "self" } else { "other" },
    }
}

fn get(t: &Table, key: &[(&str, &str)], col: &str) -> Option<f64> {
    lookup(t, key, col)
}

const A1: [(&str, &str); 2] = [("agent_id", "agent_1"), ("model_name", "m")];
const A2: [(&str, &str); 2] = [("agent_id", "agent_2"), ("model_name", "m")];

#[test]
fn quirk_14_donations_are_spending_only_when_faithful() {
    // Round 1: donates 50 (vote 1, decide 2). Round 2: solves for 100 (vote 1,
    // decide 2, solve 5) and receives 30.
    let mut solve = costs(
        attempt("run_1", "agent_1", 2, "job_1", Some(true)),
        1.0,
        2.0,
        5.0,
        100.0,
    );
    solve.received = 30.0;
    let mut give = donate("run_1", "agent_1", 1, "agent_2", 50.0);
    give = costs(give, 1.0, 2.0, 50.0, 0.0);
    give.target_agent = Some("agent_2".into());
    give.donated_amount = 50.0;
    let rows = vec![give, solve];

    let f = energy::energy_gained_per_spent(&rows, Mode::Faithful);
    assert_eq!(get(&f, &A1, "avg_energy_rewarded"), Some(100.0));
    assert_eq!(get(&f, &A1, "avg_energy_spent"), Some(61.0));
    assert_eq!(get(&f, &A1, "avg_gained_per_spent"), Some(100.0 / 61.0));
    let c = energy::energy_gained_per_spent(&rows, Mode::Corrected);
    assert_eq!(get(&c, &A1, "avg_energy_rewarded"), Some(130.0));
    assert_eq!(get(&c, &A1, "avg_energy_spent"), Some(11.0));
    assert_eq!(get(&c, &A1, "avg_gained_per_spent"), Some(130.0 / 11.0));

    let f = energy::energy_spent_per_phase(&rows, Mode::Faithful);
    assert_eq!(get(&f, &A1, "energy_act_mean"), Some(27.5));
    assert_eq!(get(&f, &A1, "total_energy_spent_mean"), Some(30.5));
    assert_eq!(get(&f, &A1, "energy_decide_mean"), Some(2.0));
    let c = energy::energy_spent_per_phase(&rows, Mode::Corrected);
    assert_eq!(get(&c, &A1, "energy_act_mean"), Some(2.5));
    assert_eq!(get(&c, &A1, "total_energy_spent_mean"), Some(5.5));
    assert_eq!(get(&c, &A1, "energy_decide_mean"), Some(2.0));
}

#[test]
fn quirk_15_unexecuted_attempts_count_only_when_faithful() {
    // Both attempt job_1 in round 1; agent_2's attempt never ran.
    let rows = vec![
        attempt("run_1", "agent_1", 1, "job_1", Some(true)),
        attempt("run_1", "agent_2", 1, "job_1", None),
    ];
    let key = [("metric", "total_collisions")];
    let f = jobs::average_collisions(&rows, Mode::Faithful);
    assert_eq!(get(&f, &key, "mean"), Some(1.0));
    let c = jobs::average_collisions(&rows, Mode::Corrected);
    assert_eq!(get(&c, &key, "mean"), Some(0.0));
    assert_eq!(
        jobs::collisions_per_run(&rows, Mode::Faithful),
        vec![("run_1".to_string(), Some(1))]
    );
    assert_eq!(
        jobs::collisions_per_run(&rows, Mode::Corrected),
        vec![("run_1".to_string(), None)]
    );

    let e2 = [A2[0], A2[1], ("job_difficulty", "easy")];
    let f = jobs::success_rate_by_difficulty(&rows, Mode::Faithful);
    assert_eq!(get(&f, &e2, "attempted"), Some(1.0));
    assert_eq!(get(&f, &e2, "avg_success_rate_per_run"), Some(0.0));
    let c = jobs::success_rate_by_difficulty(&rows, Mode::Corrected);
    assert_eq!(get(&c, &e2, "attempted"), None);
    let e1 = [A1[0], A1[1], ("job_difficulty", "easy")];
    assert_eq!(get(&c, &e1, "avg_success_rate_per_run"), Some(1.0));

    let f = jobs::attempted_difficulty_distribution(&rows, Mode::Faithful);
    assert_eq!(get(&f, &e2, "count"), Some(1.0));
    let c = jobs::attempted_difficulty_distribution(&rows, Mode::Corrected);
    assert_eq!(get(&c, &e2, "count"), Some(0.0));
    // NaN: agent_2 has no executed attempts.
    assert!(get(&c, &e2, "avg_frequency_per_run").map_or(true, f64::is_nan));

    let cat = [
        A2[0],
        A2[1],
        ("job_category", "math"),
        ("job_difficulty", "easy"),
    ];
    let f = jobs::category_difficulty_attempts(&rows, Mode::Faithful);
    assert_eq!(get(&f, &cat, "total_attempts"), Some(1.0));
    let c = jobs::category_difficulty_attempts(&rows, Mode::Corrected);
    assert_eq!(get(&c, &cat, "total_attempts"), None);
}

#[test]
fn quirk_16_donation_averages_cover_all_runs_only_when_corrected() {
    // agent_1 gives agent_2 10 twice in run_1 and nothing in run_2; agent_2
    // is in both runs.
    let rows = vec![
        donate("run_1", "agent_1", 1, "agent_2", 10.0),
        donate("run_1", "agent_1", 2, "agent_2", 10.0),
        mem("run_1", "agent_2", 1, "IDLE"),
        mem("run_2", "agent_1", 1, "IDLE"),
        mem("run_2", "agent_2", 1, "IDLE"),
    ];
    let f = donations::donations_made(&rows, Mode::Faithful);
    assert_eq!(get(&f, &A1, "avg_donations_made"), Some(2.0));
    assert_eq!(get(&f, &A1, "avg_energy_donated_per_run"), Some(20.0));
    assert_eq!(get(&f, &A1, "n_runs"), Some(1.0));
    assert_eq!(get(&f, &A2, "n_runs"), None);
    let c = donations::donations_made(&rows, Mode::Corrected);
    assert_eq!(get(&c, &A1, "avg_donations_made"), Some(1.0));
    assert_eq!(get(&c, &A1, "avg_energy_donated_per_run"), Some(10.0));
    assert_eq!(get(&c, &A1, "total_donations_made"), Some(2.0));
    assert_eq!(get(&c, &A1, "avg_energy_per_donation"), Some(10.0));
    assert_eq!(get(&c, &A1, "n_runs"), Some(2.0));
    assert_eq!(get(&c, &A2, "avg_donations_made"), Some(0.0));

    let f = donations::donations_received(&rows, Mode::Faithful);
    assert_eq!(get(&f, &A2, "avg_donations_received"), Some(2.0));
    assert_eq!(get(&f, &A2, "n_runs"), Some(1.0));
    let c = donations::donations_received(&rows, Mode::Corrected);
    assert_eq!(get(&c, &A2, "avg_donations_received"), Some(1.0));
    assert_eq!(get(&c, &A2, "avg_energy_received_per_run"), Some(10.0));
    assert_eq!(get(&c, &A2, "total_donations_received"), Some(2.0));
    assert_eq!(get(&c, &A2, "n_runs"), Some(2.0));
}

#[test]
fn quirk_17_normalised_ids_and_strict_sabotage_only_when_corrected() {
    let mut sab = mem("run_1", "agent_2", 1, "SABOTAGE_JOB");
    sab.sabotaged_job_id = Some("job_5".into());
    let rows = vec![attempt("run_1", "agent_1", 1, "job_3", Some(true)), sab];
    let votes = vec![
        vote("agent_1", "agent_1", "ATTEMPT_JOB", Some("3")),
        vote("agent_1", "agent_2", "SABOTAGE_JOB", Some("job_5")),
        vote("agent_2", "agent_2", "SABOTAGE_JOB", Some("job_6")),
    ];
    let own = [
        ("voter_agent_id", "agent_1"),
        ("voter_model_name", "m"),
        ("target_type", "self"),
        ("recommended_action", "ATTEMPT_JOB"),
    ];
    let other = [
        ("voter_agent_id", "agent_1"),
        ("voter_model_name", "m"),
        ("target_type", "other"),
        ("recommended_action", "SABOTAGE_JOB"),
    ];
    let wrong = [
        ("voter_agent_id", "agent_2"),
        ("voter_model_name", "m"),
        ("target_type", "self"),
        ("recommended_action", "SABOTAGE_JOB"),
    ];
    let col = "strict_followed";
    let f = recommendations::recommendation_follow_rate(&votes, &rows, Mode::Faithful);
    assert_eq!(get(&f, &own, col), Some(0.0));
    assert_eq!(get(&f, &other, col), Some(0.0));
    assert_eq!(get(&f, &other, "action_only_followed"), Some(1.0));
    assert_eq!(get(&f, &wrong, col), Some(0.0));
    let c = recommendations::recommendation_follow_rate(&votes, &rows, Mode::Corrected);
    assert_eq!(get(&c, &own, col), Some(1.0));
    assert_eq!(get(&c, &other, col), Some(1.0));
    assert_eq!(get(&c, &other, "action_only_followed"), Some(1.0));
    assert_eq!(get(&c, &wrong, col), Some(0.0)); // sabotaged job_5, not job_6

    let f = recommendations::recommendation_decision_follow_source(&votes, &rows, Mode::Faithful);
    assert_eq!(get(&f, &A1, "own_followed_decisions"), Some(0.0));
    assert_eq!(get(&f, &A2, "other_followed_decisions"), Some(0.0));
    let c = recommendations::recommendation_decision_follow_source(&votes, &rows, Mode::Corrected);
    assert_eq!(get(&c, &A1, "own_followed_decisions"), Some(1.0));
    assert_eq!(get(&c, &A2, "other_followed_decisions"), Some(1.0));

    let f = recommendations::enacted_recommendation_net_energy(&votes, &rows, Mode::Faithful);
    assert!(f.rows.is_empty());
    let c = recommendations::enacted_recommendation_net_energy(&votes, &rows, Mode::Corrected);
    assert_eq!(get(&c, &own, "enacted_recommendations"), Some(1.0));
}
