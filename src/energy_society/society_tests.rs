//! Rule-by-rule tests of the round loop on small hand-built societies, in
//! both modes, with a backend whose answers each test writes by hand.

use serde_json::json;

use crate::agency::run_one;
use crate::backend::{
    Backend, BackendError, FinishReason, ModelRequest, ModelResponse, ModelResult, TokenUsage,
};

use super::config::{Mode, Objective, RosterEntry, SocietyConfig};
use super::job::{Difficulty, Job};
use super::layout::{MemoryEntry, RunFolder};
use super::listed_jobs::ListedJobs;
use super::recorder::Recorder;
use super::society::{Society, SocietyResult};

type Answer = Box<dyn FnMut(&ModelRequest) -> Result<(String, u32), String>>;

struct Hand {
    f: Answer,
    pub log: Vec<(String, String, u64)>,
}

impl Backend for Hand {
    fn name(&self) -> String {
        "hand".into()
    }
    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        batch
            .iter()
            .map(|r| {
                let call = r.observation["call"].as_u64().unwrap_or(0);
                self.log.push((r.tag.clone(), r.agent_id.clone(), call));
                match (self.f)(r) {
                    Ok((text, t)) => Ok(ModelResponse {
                        text,
                        thinking: String::new(),
                        usage: TokenUsage {
                            generated_tokens: t,
                            charged_tokens: t,
                            ..Default::default()
                        },
                        finish: FinishReason::Scripted,
                        rendered_prompt: None,
                        latency_ms: 0.0,
                        measured: None,
                        count_source: None,
                    }),
                    Err(m) => Err(BackendError {
                        model: r.model.clone(),
                        message: m,
                        partial_usage: Some(TokenUsage {
                            charged_tokens: 100,
                            ..Default::default()
                        }),
                    }),
                }
            })
            .collect()
    }
}

fn job(id: usize, d: Difficulty) -> Job {
    Job {
        id: format!("job_{id}"),
        question_id: id as i64,
        category: "math".into(),
        difficulty: d,
        reward: d.reward(),
        description: format!("question {id}"),
        options: vec!["a".into(), "b".into(), "c".into(), "d".into()],
        answer_index: 2,
    }
}

fn cfg(mode: Mode, energies: &[f64], votes: bool) -> SocietyConfig {
    let mut c = SocietyConfig::baseline("greedy");
    c.mode = mode;
    c.use_votes = votes;
    c.max_rounds = 1;
    c.roster = energies
        .iter()
        .enumerate()
        .map(|(i, &e)| RosterEntry {
            agent_id: format!("agent_{}", i + 1),
            model: "hand".into(),
            model_name: format!("m{}", i + 1),
            size: 4.0,
            init_energy: e,
        })
        .collect();
    c
}

fn play(
    c: SocietyConfig,
    jobs: Vec<Job>,
    f: Answer,
) -> (SocietyResult, Vec<(String, String, u64)>) {
    let rounds = vec![jobs; c.max_rounds as usize];
    let society = Society::new(
        c,
        Box::new(ListedJobs::new(rounds, "test")),
        Recorder::in_memory(),
    );
    let mut b = Hand { f, log: vec![] };
    let r = run_one(&mut b, |agency| society.run(agency)).unwrap();
    (r, b.log)
}

fn decision(action: &str, job: Option<&str>, target: Option<&str>, amount: Option<f64>) -> String {
    json!({"reasoning": "t", "action": action, "job_id": job, "target_agent": target, "amount": amount}).to_string()
}

fn vote(me: &str) -> String {
    json!({"voter_id": me, "overall_reasoning": "v", "recommendations": [
        {"agent_id": me, "recommended_action": "IDLE", "job_id": null, "target_agent": null, "amount": null}]})
    .to_string()
}

fn answer(a: &str) -> String {
    json!({"answer": a}).to_string()
}

fn mem<'a>(r: &'a SocietyResult, agent: usize) -> &'a [MemoryEntry] {
    &r.folder.agents[agent].memory
}

fn energy(r: &RunFolder, agent: usize) -> f64 {
    r.agents[agent].final_energy
}

#[test]
fn charges_per_call_are_rounded_and_phases_run_in_order() {
    let c = cfg(Mode::Faithful, &[1500.0, 1500.0], true);
    let (r, log) = play(
        c,
        vec![job(0, Difficulty::Easy), job(1, Difficulty::Hard)],
        Box::new(|req| {
            let me = req.agent_id.clone();
            Ok(match req.tag.as_str() {
                "vote" => (vote(&me), 1399),
                "decide" if me == "agent_1" => {
                    (decision("ATTEMPT_JOB", Some("1"), None, None), 100)
                }
                "decide" => (decision("IDLE", None, None, None), 3),
                _ => (answer("2"), 7),
            })
        }),
    );
    let tags: Vec<&str> = log.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(tags, ["vote", "vote", "decide", "decide", "act"]);
    let m = &mem(&r, 0)[0];
    assert_eq!(m.energy_spent_voting, Some(41.97));
    assert_eq!(m.energy_spent_deciding, Some(3.0));
    assert_eq!(m.energy_spent_on_action, Some(0.21));
    // "1" was prefixed to job_1 (spec §6), graded by index 2 in "2": success.
    assert_eq!(m.attempted_job.as_ref().unwrap().job_id, "job_1");
    assert_eq!((m.succeeded, m.energy_rewarded), (Some(true), Some(800.0)));
    assert_eq!(energy(&r.folder, 0), 1500.0 - 41.97 - 3.0 - 0.21 + 800.0);
    let idle = &mem(&r, 1)[0];
    assert_eq!(
        (idle.action.as_str(), idle.energy_spent_on_action),
        ("IDLE", Some(10.0))
    );
    assert_eq!(energy(&r.folder, 1), 1500.0 - 41.97 - 0.09 - 10.0);
    assert_eq!(r.folder.token_usage.len(), 5);
    assert_eq!(r.folder.transcript[0].phase, "vote");
}

#[test]
fn votes_are_skipped_with_one_active_agent() {
    let (_, log) = play(
        cfg(Mode::Faithful, &[1500.0], true),
        vec![job(0, Difficulty::Easy)],
        Box::new(|_| Ok((decision("IDLE", None, None, None), 1))),
    );
    assert_eq!(log.len(), 1);
    assert!(log.iter().all(|l| l.0 == "decide"));
}

fn retry_then(tokens: [u32; 2]) -> Answer {
    Box::new(move |req| {
        Ok(
            match (req.tag.as_str(), req.observation["call"].as_u64().unwrap()) {
                ("decide", 0) => ("I think I will attempt something".into(), tokens[0]),
                ("decide", _) => (
                    decision("ATTEMPT_JOB", Some("job_0"), None, None),
                    tokens[1],
                ),
                _ => (answer("c"), 1),
            },
        )
    })
}

#[test]
fn invalid_answers_are_retried_in_the_same_invocation_and_charged_per_call() {
    // c = 0.045 (size 9): 1 token → 0.04 per call, twice = 0.08 (not 0.09).
    let mut c = cfg(Mode::Faithful, &[100.0], false);
    c.roster[0].size = 9.0;
    let (r, log) = play(c, vec![job(0, Difficulty::Easy)], retry_then([1, 1]));
    assert_eq!(
        log[0..2],
        [
            ("decide".into(), "agent_1".into(), 0),
            ("decide".into(), "agent_1".into(), 1)
        ]
    );
    assert_eq!(mem(&r, 0)[0].energy_spent_deciding, Some(0.08));
    assert_eq!(r.folder.token_usage[0].output_tokens, 2);
}

#[test]
fn quirk2_reaching_zero_mid_invocation_faithful_continues_corrected_aborts() {
    // 50 energy; first call costs 60 (clamped to 0), second call's answer is used.
    let (r, log) = play(
        cfg(Mode::Faithful, &[50.0], false),
        vec![job(0, Difficulty::Easy)],
        retry_then([2000, 10]),
    );
    let m = &mem(&r, 0)[0];
    assert_eq!(m.action, "ATTEMPT_JOB");
    assert_eq!(m.energy_spent_deciding, Some(50.0));
    // At 0 after deciding, the attempt is never executed (QUIRK-9 family).
    assert_eq!((m.succeeded, m.energy_rewarded), (None, None));
    assert_eq!(log.len(), 2);
    let (r, log) = play(
        cfg(Mode::Corrected, &[50.0], false),
        vec![job(0, Difficulty::Easy)],
        retry_then([2000, 10]),
    );
    assert_eq!(log.len(), 1);
    let m = &mem(&r, 0)[0];
    assert_eq!(m.action, "IDLE");
    assert_eq!(r.folder.agents[0].errors[0].error_type, "energy_exhausted");
    // Corrected records the fee actually deducted (QUIRK-4): 0 at 0 energy.
    assert_eq!(m.energy_spent_on_action, Some(0.0));
}

#[test]
fn format_errors_fall_back_and_are_charged() {
    let (r, log) = play(
        cfg(Mode::Faithful, &[1500.0], false),
        vec![job(0, Difficulty::Easy)],
        Box::new(|_| Ok(("no json here".into(), 10))),
    );
    assert_eq!(log.len(), 5);
    let m = &mem(&r, 0)[0];
    assert_eq!(m.action, "IDLE");
    assert_eq!(m.energy_spent_deciding, Some(1.5));
    assert_eq!(m.energy_spent_on_action, Some(10.0));
    assert_eq!(r.folder.agents[0].errors[0].error_type, "format_error");
    assert_eq!(r.folder.transcript[0].structured_response["action"], "IDLE");
}

#[test]
fn quirk3_invoke_errors_charge_nothing_in_faithful_partial_usage_in_corrected() {
    let f = || -> Answer {
        Box::new(|req| match req.tag.as_str() {
            "decide" => Err("timeout".into()),
            _ => Ok((answer("x"), 1)),
        })
    };
    let (r, _) = play(cfg(Mode::Faithful, &[1500.0], false), vec![], f());
    let m = &mem(&r, 0)[0];
    assert_eq!(
        (m.action.as_str(), m.energy_spent_deciding),
        ("IDLE", Some(0.0))
    );
    assert_eq!(r.folder.token_usage[0].output_tokens, 0);
    assert_eq!(r.folder.agents[0].errors[0].error_type, "invoke_error");
    let (r, _) = play(cfg(Mode::Corrected, &[1500.0], false), vec![], f());
    assert_eq!(mem(&r, 0)[0].energy_spent_deciding, Some(3.0));
    assert_eq!(r.folder.token_usage[0].output_tokens, 100);
}

fn decide_only(decisions: Vec<String>) -> Answer {
    Box::new(move |req| {
        let i: usize = req
            .agent_id
            .trim_start_matches("agent_")
            .parse::<usize>()
            .unwrap()
            - 1;
        Ok(match req.tag.as_str() {
            "decide" => (decisions[i].clone(), 0),
            _ => (answer("2"), 0),
        })
    })
}

#[test]
fn quirk4_idle_fee_clamps_and_faithful_records_ten() {
    for (mode, recorded) in [(Mode::Faithful, 10.0), (Mode::Corrected, 4.0)] {
        let (r, _) = play(
            cfg(mode, &[4.0], false),
            vec![],
            decide_only(vec![decision("IDLE", None, None, None)]),
        );
        assert_eq!(energy(&r.folder, 0), 0.0);
        assert_eq!(mem(&r, 0)[0].energy_spent_on_action, Some(recorded));
    }
}

#[test]
fn donations_cap_move_and_revive() {
    // agent_1 (100) gives 150 to agent_2 (dead, revived); capped at 100.
    let mut c = cfg(Mode::Faithful, &[100.0, 50.0], false);
    c.max_rounds = 1;
    let d = vec![
        decision("DONATE", None, Some("agent_2"), Some(150.0)),
        decision("IDLE", None, None, None),
    ];
    let (r, _) = play(c, vec![], decide_only(d));
    assert_eq!(energy(&r.folder, 0), 0.0);
    assert_eq!(energy(&r.folder, 1), 50.0 - 10.0 + 100.0);
    let m = &mem(&r, 0)[0];
    assert_eq!(
        (m.donated_amount, m.energy_spent_on_action),
        (Some(100.0), Some(100.0))
    );
    assert_eq!(
        mem(&r, 1)[0].received_donations.as_ref().unwrap()[0].amount,
        100.0
    );
    assert_eq!(r.folder.agents[0].deactivated_at_round, Some(1));
}

#[test]
fn donation_to_self_is_a_noop_recorded_both_ways() {
    let (r, _) = play(
        cfg(Mode::Faithful, &[100.0], false),
        vec![],
        decide_only(vec![decision("DONATE", None, Some("agent_1"), Some(30.0))]),
    );
    assert_eq!(energy(&r.folder, 0), 100.0);
    let m = &mem(&r, 0)[0];
    assert_eq!(m.donated_amount, Some(30.0));
    assert_eq!(m.received_donations.as_ref().unwrap()[0].amount, 30.0);
}

#[test]
fn quirk5_unknown_target_is_recorded_but_nothing_moves() {
    for mode in [Mode::Faithful, Mode::Corrected] {
        let (r, _) = play(
            cfg(mode, &[100.0], false),
            vec![],
            decide_only(vec![decision("DONATE", None, Some("agent_9"), Some(30.0))]),
        );
        assert_eq!(energy(&r.folder, 0), 100.0);
        let want = if mode == Mode::Faithful { 30.0 } else { 0.0 };
        assert_eq!(mem(&r, 0)[0].donated_amount, Some(want));
    }
}

#[test]
fn quirk6_negative_donations_reverse_in_faithful_and_are_rejected_in_corrected() {
    let d = || {
        decide_only(vec![
            decision("DONATE", None, Some("agent_2"), Some(-20.0)),
            decision("DONATE", None, Some("agent_1"), Some(1.0)),
        ])
    };
    let (r, _) = play(cfg(Mode::Faithful, &[100.0, 10.0], false), vec![], d());
    // agent_1 takes 20 from agent_2, pushing it below 0; agent_2 is then
    // inactive, so its own donation is skipped.
    assert_eq!(energy(&r.folder, 0), 120.0);
    assert_eq!(energy(&r.folder, 1), -10.0);
    let (r, _) = play(cfg(Mode::Corrected, &[100.0, 10.0], false), vec![], d());
    // Five parse failures: IDLE for agent_1.
    assert_eq!(mem(&r, 0)[0].action, "IDLE");
    assert_eq!(energy(&r.folder, 0), 100.0 - 10.0 + 1.0);
}

#[test]
fn quirk7_recorded_donation_uses_energy_after_deciding() {
    // agent_1 ends deciding with 80, is then given 50 by nobody... use the
    // cap: agent_2 first revives agent_1? Roster order: agent_1 acts first.
    // agent_1: 80 after deciding, donates 100 -> moves 80, records 80.
    // agent_2 donates 1000 to agent_1 after it, from 60 -> moves 60, records 60.
    let mut c = cfg(Mode::Faithful, &[80.0, 60.0], false);
    c.max_rounds = 1;
    let (r, _) = play(
        c,
        vec![],
        decide_only(vec![
            decision("DONATE", None, Some("agent_2"), Some(100.0)),
            decision("DONATE", None, Some("agent_1"), Some(1000.0)),
        ]),
    );
    // agent_2 held 140 when it gave: moved 140, but memory records
    // round(min(1000, 60), 2) = 60 (QUIRK-7).
    assert_eq!(mem(&r, 1)[0].donated_amount, Some(60.0));
    assert_eq!(energy(&r.folder, 0), 140.0);
    assert_eq!(energy(&r.folder, 1), 0.0);
    let mut c = cfg(Mode::Corrected, &[80.0, 60.0], false);
    c.max_rounds = 1;
    let (r, _) = play(
        c,
        vec![],
        decide_only(vec![
            decision("DONATE", None, Some("agent_2"), Some(100.0)),
            decision("DONATE", None, Some("agent_1"), Some(1000.0)),
        ]),
    );
    assert_eq!(mem(&r, 1)[0].donated_amount, Some(140.0));
}

#[test]
fn quirk8_death_while_voting_leaves_no_row_in_faithful() {
    let f = || -> Answer {
        Box::new(|req| {
            Ok(match (req.tag.as_str(), req.agent_id.as_str()) {
                ("vote", "agent_2") => (vote("agent_2"), 10_000),
                ("vote", _) => (vote("agent_1"), 1),
                _ => (decision("IDLE", None, None, None), 1),
            })
        })
    };
    let (r, log) = play(cfg(Mode::Faithful, &[100.0, 100.0], true), vec![], f());
    assert!(!log.iter().any(|l| l.0 == "decide" && l.1 == "agent_2"));
    assert!(mem(&r, 1).is_empty());
    assert_eq!(r.folder.agents[1].deactivated_at_round, Some(1));
    let (r, _) = play(cfg(Mode::Corrected, &[100.0, 100.0], true), vec![], f());
    let m = &mem(&r, 1)[0];
    assert_eq!(
        (m.action.as_str(), m.energy_spent_voting),
        ("INACTIVE", Some(100.0))
    );
}

#[test]
fn quirk9_a_donation_earlier_in_roster_order_revives_a_dead_decider() {
    // agent_2 hits 0 while deciding on IDLE; agent_1 donates to it first.
    let f = || -> Answer {
        Box::new(|req| {
            Ok(match req.agent_id.as_str() {
                "agent_1" => (decision("DONATE", None, Some("agent_2"), Some(50.0)), 0),
                _ => (decision("IDLE", None, None, None), 10_000),
            })
        })
    };
    let (r, _) = play(cfg(Mode::Faithful, &[500.0, 100.0], false), vec![], f());
    // Revived with 50, then pays the IDLE fee.
    assert_eq!(energy(&r.folder, 1), 40.0);
    let (r, _) = play(cfg(Mode::Corrected, &[500.0, 100.0], false), vec![], f());
    // Eligibility from the snapshot before R3: the IDLE is skipped.
    assert_eq!(energy(&r.folder, 1), 50.0);
}

#[test]
fn quirk10_a_solver_at_zero_is_paid_in_faithful_only() {
    let f = || -> Answer {
        Box::new(|req| {
            Ok(match req.tag.as_str() {
                "decide" => (decision("ATTEMPT_JOB", Some("job_0"), None, None), 0),
                _ => (answer("2"), 10_000),
            })
        })
    };
    let (r, _) = play(
        cfg(Mode::Faithful, &[100.0], false),
        vec![job(0, Difficulty::Medium)],
        f(),
    );
    assert_eq!(energy(&r.folder, 0), 500.0);
    assert_eq!(r.folder.agents[0].deactivated_at_round, None);
    let (r, _) = play(
        cfg(Mode::Corrected, &[100.0], false),
        vec![job(0, Difficulty::Medium)],
        f(),
    );
    assert_eq!(energy(&r.folder, 0), 0.0);
    assert_eq!(mem(&r, 0)[0].energy_rewarded, Some(0.0));
}

#[test]
fn collisions_split_with_python_rounding_and_failures_get_nothing() {
    let f = |ans: [&'static str; 4]| -> Answer {
        Box::new(move |req| {
            let i: usize = req
                .agent_id
                .trim_start_matches("agent_")
                .parse::<usize>()
                .unwrap()
                - 1;
            Ok(match req.tag.as_str() {
                "decide" => (decision("ATTEMPT_JOB", Some("job_0"), None, None), 0),
                _ => (answer(ans[i]), 0),
            })
        })
    };
    let (r, _) = play(
        cfg(Mode::Faithful, &[100.0; 4], false),
        vec![job(0, Difficulty::Hard)],
        f(["2", "c", "2", "0"]),
    );
    for i in 0..3 {
        assert_eq!(mem(&r, i)[0].energy_rewarded, Some(266.67));
    }
    assert_eq!(
        (mem(&r, 3)[0].succeeded, mem(&r, 3)[0].energy_rewarded),
        (Some(false), Some(0.0))
    );
    assert_eq!(energy(&r.folder, 0), 366.67);
    let (r, _) = play(
        cfg(Mode::Corrected, &[100.0; 4], false),
        vec![job(0, Difficulty::Hard)],
        f(["2", "c", "2", "0"]),
    );
    let total: f64 = (0..3).map(|i| mem(&r, i)[0].energy_rewarded.unwrap()).sum();
    assert!((total - 800.0).abs() < 1e-9);
}

#[test]
fn sabotage_zeroes_the_payout_and_names_the_hit_agents() {
    let mut c = cfg(Mode::Faithful, &[100.0, 100.0, 100.0], false);
    c.enable_sabotage = true;
    let (r, _) = play(
        c,
        vec![job(0, Difficulty::Hard), job(1, Difficulty::Easy)],
        Box::new(|req| {
            Ok(match (req.tag.as_str(), req.agent_id.as_str()) {
                ("decide", "agent_1") => (decision("SABOTAGE_JOB", Some("job_0"), None, None), 0),
                ("decide", "agent_2") => (decision("ATTEMPT_JOB", Some("job_0"), None, None), 0),
                ("decide", _) => (decision("SABOTAGE_JOB", Some("job_7"), None, None), 0),
                _ => (answer("2"), 0),
            })
        }),
    );
    let s = &mem(&r, 0)[0];
    assert_eq!(s.energy_spent_on_action, Some(10.0));
    assert_eq!(s.sabotage_successful, Some(Some(true)));
    assert_eq!(
        s.sabotage_hit_agents,
        Some(Some(vec!["agent_2".to_string()]))
    );
    let v = &mem(&r, 1)[0];
    assert_eq!((v.succeeded, v.energy_rewarded), (Some(true), Some(0.0)));
    assert_eq!(energy(&r.folder, 1), 100.0);
    // An invalid job id still costs the fee.
    assert_eq!(energy(&r.folder, 2), 90.0);
    assert_eq!(mem(&r, 2)[0].sabotaged_job, Some(None));
}

#[test]
fn invalid_attempt_ids_cost_nothing_beyond_deciding() {
    let (r, log) = play(
        cfg(Mode::Faithful, &[100.0], false),
        vec![job(0, Difficulty::Easy)],
        decide_only(vec![decision("ATTEMPT_JOB", Some("\"job_0\""), None, None)]),
    );
    assert!(!log.iter().any(|l| l.0 == "act"));
    let m = &mem(&r, 0)[0];
    assert_eq!(
        (
            m.attempted_job.clone(),
            m.succeeded,
            m.energy_spent_on_action
        ),
        (None, None, Some(0.0))
    );
    // Corrected strips the quotes and attempts job_0.
    let (_, log) = play(
        cfg(Mode::Corrected, &[100.0], false),
        vec![job(0, Difficulty::Easy)],
        decide_only(vec![decision("ATTEMPT_JOB", Some("\"job_0\""), None, None)]),
    );
    assert!(log.iter().any(|l| l.0 == "act"));
}

#[test]
fn quirk1_bookkeeping_in_both_modes() {
    // agent_1 idles to death in round 1 and is revived by agent_2 in round 2
    // (no decision that round); agent_2 burns out deciding in round 3.
    let f = || -> Answer {
        Box::new(|req| {
            let round = req.observation["round"].as_u64().unwrap();
            Ok(match (req.agent_id.as_str(), round) {
                ("agent_2", 2) => (decision("DONATE", None, Some("agent_1"), Some(100.0)), 0),
                ("agent_2", r) => (
                    decision("IDLE", None, None, None),
                    if r >= 3 { 20_000 } else { 0 },
                ),
                _ => (decision("IDLE", None, None, None), 0),
            })
        })
    };
    let mut c = cfg(Mode::Faithful, &[5.0, 500.0], false);
    c.max_rounds = 5;
    let (r, _) = play(c.clone(), vec![], f());
    assert_eq!(r.rounds_played, 5);
    let (a1, a2) = (&r.folder.agents[0], &r.folder.agents[1]);
    // Round 1 ends at 0 (not counted); round 2 is counted (revived, did nothing).
    assert_eq!((a1.rounds_active, a1.deactivated_at_round), (4, Some(1)));
    assert_eq!((a2.rounds_active, a2.deactivated_at_round), (2, Some(3)));
    assert_eq!(a1.final_energy, 70.0);
    assert_eq!(a1.memory[1].action, "INACTIVE");
    assert_eq!(a1.memory[1].energy_spent_voting, None);
    assert_eq!(a1.memory[1].energy_at_start_of_round, Some(0.0));
    // QUIRK-4: agent_2's skipped IDLE in round 3 still records 10.
    assert_eq!(a2.memory[2].energy_spent_on_action, Some(10.0));
    assert_eq!(a2.memory.len(), 3);

    c.mode = Mode::Corrected;
    let (r, _) = play(c, vec![], f());
    let (a1, a2) = (&r.folder.agents[0], &r.folder.agents[1]);
    // Counted: active at start or acted. agent_1 misses round 2 only.
    assert_eq!((a1.rounds_active, a1.deactivated_at_round), (4, Some(1)));
    assert_eq!((a2.rounds_active, a2.deactivated_at_round), (3, Some(3)));
    assert_eq!(a2.memory[2].energy_spent_on_action, Some(0.0));
    // QUIRK-8 corrected: a row every round for everyone.
    assert_eq!(a2.memory.len(), 5);
}

#[test]
fn the_game_stops_when_everyone_is_inactive() {
    let mut c = cfg(Mode::Faithful, &[5.0, 5.0], false);
    c.max_rounds = 30;
    let (r, _) = play(
        c,
        vec![],
        Box::new(|_| Ok((decision("IDLE", None, None, None), 0))),
    );
    assert_eq!(r.rounds_played, 1);
    assert_eq!(r.folder.agents[0].rounds_active, 0);
}

#[test]
fn comp_and_coop_prompts_differ_in_the_objective() {
    use super::prompts::{decide_messages, AgentView, View};
    let agents = vec![AgentView {
        agent_id: "agent_1",
        model_name: "m",
        energy: 12.345,
        init_energy: 1500.0,
        size: 8.0,
        per_token: 0.042426406871192854,
        memory: &[],
    }];
    let jobs = vec![job(0, Difficulty::Easy)];
    let mut v = View {
        round: 3,
        mode: Mode::Faithful,
        objective: Objective::Competitive,
        sabotage: false,
        memory: true,
        idle_fee: 10.0,
        sabotage_fee: 10.0,
        me: 0,
        agents: &agents,
        jobs: &jobs,
    };
    let (s1, u1) = decide_messages(&v, &[]);
    assert!(s1.contains("YOUR OWN energy") && s1.contains("0.0424"));
    assert!(u1.contains("12.35") && u1.contains("No memory yet.") && !u1.contains("OPTIONS"));
    v.objective = Objective::Cooperative;
    v.memory = false;
    let (s2, u2) = decide_messages(&v, &[]);
    assert!(s2.contains("TOTAL energy of all agents") && !u2.contains("No memory yet."));
}

#[test]
fn same_seed_gives_identical_event_logs() {
    use super::policies::scripted_backend;
    let dir = tempfile::tempdir().unwrap();
    let mut texts = vec![];
    for k in 0..2 {
        let mut c = SocietyConfig::baseline("greedy");
        c.max_rounds = 4;
        c.roster[4].model = "scripted:donor".into();
        c.roster[3].model = "scripted:random".into();
        let out = dir.path().join(format!("run{k}"));
        let rounds = (0..4)
            .map(|r| {
                (0..6)
                    .map(|i| job(i, Difficulty::ALL[(i + r) % 3]))
                    .collect()
            })
            .collect();
        let rec = Recorder::create(&out, &c).unwrap();
        let mut b = scripted_backend(c.scripted.tokens.clone(), c.scripted.skill);
        let s = Society::new(c, Box::new(ListedJobs::new(rounds, "t")), rec);
        run_one(&mut b, |agency| s.run(agency)).unwrap();
        // The layout is written; the COMPLETE marker is the runner's last
        // file, after call_errors.json and meter.json.
        assert!(!Recorder::is_complete(&out));
        RunFolder::read(&out).unwrap();
        texts.push(std::fs::read_to_string(out.join("events.jsonl")).unwrap());
    }
    assert!(texts[0].lines().count() > 20);
    assert_eq!(texts[0], texts[1]);
}

/// Every request of a game: (tag, agent, round, system, user).
type Seen = std::rc::Rc<std::cell::RefCell<Vec<(String, String, u64, String, String)>>>;

fn seen_prompt<'a>(
    seen: &'a [(String, String, u64, String, String)],
    tag: &str,
    agent: &str,
    round: u64,
) -> &'a (String, String, u64, String, String) {
    seen.iter()
        .find(|s| s.0 == tag && s.1 == agent && s.2 == round)
        .unwrap_or_else(|| panic!("no {tag} prompt of {agent} in round {round}"))
}

/// Round 1: agent_1 sabotages job_0, agent_2 solves it, agent_3 idles.
/// Round 2: everyone idles. Returns the result and every prompt seen.
fn sabotage_game(
    mode: Mode,
    memory: bool,
) -> (SocietyResult, Vec<(String, String, u64, String, String)>) {
    let mut c = cfg(mode, &[1500.0, 1500.0, 1500.0], true);
    c.enable_sabotage = true;
    c.memory = memory;
    c.max_rounds = 2;
    let seen: Seen = Default::default();
    let log = seen.clone();
    let (r, _) = play(
        c,
        vec![job(0, Difficulty::Hard), job(1, Difficulty::Easy)],
        Box::new(move |req| {
            let round = req.observation["round"].as_u64().unwrap();
            log.borrow_mut().push((
                req.tag.clone(),
                req.agent_id.clone(),
                round,
                req.messages[0].content.clone(),
                req.messages[1].content.clone(),
            ));
            Ok(match (req.tag.as_str(), req.agent_id.as_str(), round) {
                ("vote", me, _) => (vote(me), 0),
                ("decide", "agent_1", 1) => {
                    (decision("SABOTAGE_JOB", Some("job_0"), None, None), 0)
                }
                ("decide", "agent_2", 1) => (decision("ATTEMPT_JOB", Some("job_0"), None, None), 0),
                ("decide", _, _) => (decision("IDLE", None, None, None), 0),
                _ => (answer("2"), 0),
            })
        }),
    );
    let seen = seen.borrow().clone();
    (r, seen)
}

const SABOTAGE_VISIBLE: &str = "Afterwards it is visible";
const SABOTAGE_HIDDEN: &str = "Afterwards it stays hidden";

#[test]
fn quirk12_sabotage_shows_afterwards_and_only_corrected_prompts_say_so() {
    for mode in [Mode::Faithful, Mode::Corrected] {
        let (r, seen) = sabotage_game(mode, true);
        // The environment's records are the same in both modes.
        let s = &mem(&r, 0)[0];
        assert_eq!(
            s.sabotage_hit_agents,
            Some(Some(vec!["agent_2".to_string()]))
        );
        let v = &mem(&r, 1)[0];
        assert_eq!((v.succeeded, v.energy_rewarded), (Some(true), Some(0.0)));
        // What shows in round 2, in both modes: the saboteur's hits ...
        let (_, _, _, _, u1) = seen_prompt(&seen, "decide", "agent_1", 2);
        assert!(
            u1.contains("SABOTAGE_JOB (math / hard") && u1.contains("SUCCESSFUL, hit agent_2"),
            "{mode:?}: {u1}"
        );
        // ... the victim's success worth 0.00 ...
        let (_, _, _, _, u2) = seen_prompt(&seen, "decide", "agent_2", 2);
        assert!(
            u2.contains("ATTEMPT_JOB (math / hard) -> SUCCESS: rewarded 0.00"),
            "{mode:?}: {u2}"
        );
        // ... and the saboteur's entry among the Recent Actions others see.
        let (_, _, _, _, u3) = seen_prompt(&seen, "decide", "agent_3", 2);
        let block = &u3[u3.find("agent_1 (m1)").expect("agent_1's block")..];
        assert!(
            block.contains("SABOTAGE_JOB") && block.contains("hit agent_2"),
            "{mode:?}: {u3}"
        );
        // The sabotage text of every vote and decide prompt: faithful only
        // says "invisible beforehand" (QUIRK-12); corrected also says what
        // shows afterwards, which the lines above make true.
        for (tag, agent, round, system, _) in &seen {
            if tag == "act" {
                continue;
            }
            assert!(
                system.contains("Nobody can see beforehand which jobs are sabotaged."),
                "{tag} {agent} {round}"
            );
            assert!(!system.contains(SABOTAGE_HIDDEN));
            assert_eq!(
                system.contains(SABOTAGE_VISIBLE),
                mode == Mode::Corrected,
                "{mode:?} {tag} {agent} round {round}: {system}"
            );
        }
    }
}

#[test]
fn quirk12_without_memory_nothing_shows_and_corrected_prompts_say_so() {
    for mode in [Mode::Faithful, Mode::Corrected] {
        let (r, seen) = sabotage_game(mode, false);
        // Memory is still recorded ...
        assert_eq!(mem(&r, 1)[0].energy_rewarded, Some(0.0));
        // ... but no round-2 prompt shows the sabotage.
        for (tag, agent, round, system, user) in &seen {
            assert!(
                !user.contains("SABOTAGE_JOB") && !user.contains("SUCCESS"),
                "{tag} {agent} {round}: {user}"
            );
            if tag != "act" {
                assert!(!system.contains(SABOTAGE_VISIBLE));
                assert_eq!(system.contains(SABOTAGE_HIDDEN), mode == Mode::Corrected);
            }
        }
    }
}

#[test]
fn quirk12_no_sabotage_text_when_sabotage_is_off() {
    for mode in [Mode::Faithful, Mode::Corrected] {
        let (_, log) = play(
            cfg(mode, &[1500.0, 1500.0], true),
            vec![job(0, Difficulty::Easy)],
            Box::new(|req| {
                assert!(
                    !req.messages[0].content.contains("SABOTAGE"),
                    "{}",
                    req.messages[0].content
                );
                Ok(match req.tag.as_str() {
                    "vote" => (vote(&req.agent_id), 0),
                    _ => (decision("IDLE", None, None, None), 0),
                })
            }),
        );
        assert!(log.iter().any(|l| l.0 == "decide"));
    }
}

fn one_agent_view<'a>(
    agents: &'a [super::prompts::AgentView<'a>],
    jobs: &'a [Job],
    mode: Mode,
    objective: Objective,
) -> super::prompts::View<'a> {
    super::prompts::View {
        round: 2,
        mode,
        objective,
        sabotage: false,
        memory: true,
        idle_fee: 10.0,
        sabotage_fee: 10.0,
        me: 0,
        agents,
        jobs,
    }
}

#[test]
fn quirk13_solve_and_decide_prompts_carry_the_objective_only_when_corrected() {
    use super::prompts::{decide_messages, solve_messages, AgentView};
    let agents = vec![AgentView {
        agent_id: "agent_1",
        model_name: "m",
        energy: 100.0,
        init_energy: 1500.0,
        size: 4.0,
        per_token: 0.03,
        memory: &[],
    }];
    let jobs = vec![job(0, Difficulty::Easy)];
    const OWN: &str = "maximise your own energy";
    const OWN_CAPS: &str = "maximise YOUR OWN energy";
    const TOTAL: &str = "maximise the TOTAL energy of all agents";
    for (mode, objective, solve_has, solve_lacks, checklist) in [
        // Faithful: the solve prompt is self-interested in coop too, and the
        // coop decide checklist asks about COMPETITION (QUIRK-13).
        (
            Mode::Faithful,
            Objective::Cooperative,
            OWN,
            TOTAL,
            "COMPETITION",
        ),
        (
            Mode::Faithful,
            Objective::Competitive,
            OWN,
            TOTAL,
            "COMPETITION",
        ),
        (
            Mode::Corrected,
            Objective::Cooperative,
            TOTAL,
            OWN,
            "COORDINATION",
        ),
        (
            Mode::Corrected,
            Objective::Competitive,
            OWN_CAPS,
            TOTAL,
            "COMPETITION",
        ),
    ] {
        let v = one_agent_view(&agents, &jobs, mode, objective);
        let (system, user) = solve_messages(&v, &jobs[0]);
        assert!(
            system.contains(solve_has),
            "{mode:?} {objective:?}: {system}"
        );
        assert!(
            !system.contains(solve_lacks),
            "{mode:?} {objective:?}: {system}"
        );
        assert!(user.contains("  2. c"));
        let (system, _) = decide_messages(&v, &[]);
        assert!(
            system.contains(checklist),
            "{mode:?} {objective:?}: {system}"
        );
        let other = if checklist == "COMPETITION" {
            "COORDINATION"
        } else {
            "COMPETITION"
        };
        assert!(!system.contains(other), "{mode:?} {objective:?}: {system}");
    }
}

#[test]
fn quirk13_a_coop_game_sends_the_coop_objective_to_solvers_only_when_corrected() {
    for mode in [Mode::Faithful, Mode::Corrected] {
        let mut c = cfg(mode, &[1500.0], false);
        c.objective = Objective::Cooperative;
        let seen: Seen = Default::default();
        let log = seen.clone();
        play(
            c,
            vec![job(0, Difficulty::Easy)],
            Box::new(move |req| {
                log.borrow_mut().push((
                    req.tag.clone(),
                    req.agent_id.clone(),
                    1,
                    req.messages[0].content.clone(),
                    String::new(),
                ));
                Ok(match req.tag.as_str() {
                    "decide" => (decision("ATTEMPT_JOB", Some("job_0"), None, None), 0),
                    _ => (answer("2"), 0),
                })
            }),
        );
        let seen = seen.borrow();
        let (_, _, _, act, _) = seen_prompt(&seen, "act", "agent_1", 1);
        let (_, _, _, decide, _) = seen_prompt(&seen, "decide", "agent_1", 1);
        match mode {
            Mode::Faithful => {
                assert!(act.contains("maximise your own energy") && !act.contains("TOTAL"));
                assert!(decide.contains("COMPETITION"));
            }
            Mode::Corrected => {
                assert!(
                    act.contains("TOTAL energy of all agents") && !act.contains("your own energy")
                );
                assert!(decide.contains("COORDINATION") && !decide.contains("COMPETITION"));
            }
        }
    }
}

/// Play `c` into a run folder and return its events.
fn play_events(c: SocietyConfig, jobs: Vec<Job>, f: Answer) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let rounds = vec![jobs; c.max_rounds as usize];
    let rec = Recorder::create(dir.path(), &c).unwrap();
    let society = Society::new(c, Box::new(ListedJobs::new(rounds, "test")), rec);
    let mut b = Hand { f, log: vec![] };
    run_one(&mut b, |agency| society.run(agency)).unwrap();
    super::recorder::read_events(dir.path().join("events.jsonl")).unwrap()
}

#[test]
fn every_energy_change_is_one_ledger_line_chained_through_the_round() {
    // Round 1: agent_1 retries its decision (two charged calls) and donates
    // to agent_3, who idled to 0 while voting... agent_2 solves job_0.
    // agent_3 starts at 12: its vote costs 12 (clamped), so it is dead
    // when the donation revives it. Round 2: agent_2's decide call fails
    // (faithful: nothing charged), agent_1 idles.
    let mut c = cfg(Mode::Faithful, &[1500.0, 1500.0, 12.0], true);
    c.max_rounds = 2;
    let mut decide_calls = 0;
    let events = play_events(
        c,
        vec![job(0, Difficulty::Hard), job(1, Difficulty::Easy)],
        Box::new(move |req| {
            let round = req.observation["round"].as_u64().unwrap();
            Ok(match (req.tag.as_str(), req.agent_id.as_str(), round) {
                ("vote", "agent_3", 1) => (vote("agent_3"), 1000),
                ("vote", me, _) => (vote(me), 333),
                ("decide", "agent_1", 1) => {
                    decide_calls += 1;
                    if decide_calls == 1 {
                        ("not json".into(), 77)
                    } else {
                        (decision("DONATE", None, Some("agent_3"), Some(40.0)), 101)
                    }
                }
                ("decide", "agent_2", 1) => {
                    (decision("ATTEMPT_JOB", Some("job_0"), None, None), 250)
                }
                ("decide", "agent_2", 2) => return Err("backend down".into()),
                ("decide", _, _) => (decision("IDLE", None, None, None), 50),
                _ => (answer("c"), 400),
            })
        }),
    );
    let mut kinds = std::collections::BTreeSet::new();
    let mut start: Vec<f64> = vec![];
    let mut expected: Vec<(u64, String, f64, f64, Option<u64>)> = vec![];
    let agent_no = |id: &serde_json::Value| -> u64 {
        id.as_str()
            .unwrap()
            .trim_start_matches("agent_")
            .parse::<u64>()
            .unwrap()
            - 1
    };
    let mut rounds = 0;
    for e in &events {
        match e["event"].as_str().unwrap() {
            "round_start" => {
                start = serde_json::from_value(e["energy"].clone()).unwrap();
                expected.clear();
            }
            // What each event says moved must be a ledger line, in order.
            "invocation" => {
                for call in e["calls"].as_array().unwrap() {
                    let (b, a) = (
                        call["energy_before"].as_f64().unwrap(),
                        call["energy_after"].as_f64().unwrap(),
                    );
                    if e["status"]["status"] == "invoke_error" {
                        assert_eq!(e["energy_after"], e["energy_before"], "{e}");
                        continue;
                    }
                    expected.push((
                        agent_no(&e["agent"]),
                        "tokens".into(),
                        b,
                        a,
                        call["charged_tokens"].as_u64(),
                    ));
                }
            }
            "fee" if e["executed"] == true => expected.push((
                agent_no(&e["agent"]),
                "fee".into(),
                e["energy_before"].as_f64().unwrap(),
                e["energy_after"].as_f64().unwrap(),
                None,
            )),
            "donation" if !e["moved"].is_null() => {
                let (a, t) = (agent_no(&e["agent"]), agent_no(&e["target"]));
                let x = e["moved"].as_f64().unwrap();
                let b = e["energy_before"].as_f64().unwrap();
                expected.push((a, "donation".into(), b, b - x, None));
                let ta = e["target_energy_after"].as_f64().unwrap();
                let kind = if e["revived"] == true {
                    "revival"
                } else {
                    "donation"
                };
                expected.push((t, kind.into(), ta - x, ta, None));
            }
            "reward" if e["paid"].as_f64().unwrap() != 0.0 => expected.push((
                agent_no(&e["agent"]),
                "reward".into(),
                e["energy_before"].as_f64().unwrap(),
                e["energy_after"].as_f64().unwrap(),
                None,
            )),
            "round_end" => {
                rounds += 1;
                let end: Vec<f64> = serde_json::from_value(e["energy"].clone()).unwrap();
                let lines = e["ledger"].as_array().unwrap();
                let mut at = start.clone();
                let mut got = vec![];
                for l in lines {
                    let i = l["agent"].as_u64().unwrap();
                    let (b, a) = (l["before"].as_f64().unwrap(), l["after"].as_f64().unwrap());
                    assert_eq!(
                        b, at[i as usize],
                        "line {l} does not start where agent #{i} was"
                    );
                    assert_eq!(l["delta"].as_f64().unwrap(), a - b);
                    at[i as usize] = a;
                    let kind = l["kind"].as_str().unwrap().to_string();
                    kinds.insert(kind.clone());
                    got.push((i, kind, b, a, l["tokens"].as_u64()));
                }
                assert_eq!(at, end, "the lines end where the accounts are");
                // Same changes; the order of tokens lines within a parallel
                // phase is the settle order, so compare as sorted lists.
                let key = |v: &(u64, String, f64, f64, Option<u64>)| {
                    (v.0, v.1.clone(), v.2.to_bits(), v.3.to_bits(), v.4)
                };
                let mut want: Vec<_> = expected.iter().map(key).collect();
                let mut have: Vec<_> = got.iter().map(key).collect();
                want.sort();
                have.sort();
                assert_eq!(have, want, "round {}", e["round"]);
            }
            _ => {}
        }
    }
    assert_eq!(rounds, 2);
    for k in ["tokens", "donation", "revival", "fee", "reward"] {
        assert!(kinds.contains(k), "no {k} line in {kinds:?}");
    }
}
