//! Cross-module tests of the race: prompts rendered from data, the scenario
//! through the agency and scripted backend, runs, resume and the report.

use std::cell::RefCell;
use std::rc::Rc;

use super::config::ExperimentConfig;
use super::engine::{Race, RaceRules};
use super::parser::CodeMapping;
use super::prompt::{persona, render_prompt, seat_names, PromptCondition, SeatView, GOAL_MARKER};
use super::rng::BASE_SEED;
use super::rules::Action::*;
use super::run::{run_experiment, scripted_backend};
use super::scenario::{play_race, position_of, Position, RaceSink, TurnRecord};
use crate::agency::run_one;
use crate::record::{read_jsonl, EventLog};

fn view_prompt(
    cond: &PromptCondition,
    race: &Race,
    seat: usize,
    personas: &[Option<super::prompt::Persona>],
    rep: u32,
) -> String {
    let names = seat_names(race.rules.n_players, cond);
    let view = SeatView {
        seat,
        names: &names,
        personas,
        p_max: race.rules.p_max,
        snapshot: race.snapshot(),
        history: race.history(),
    };
    render_prompt(cond, rep, &view).unwrap()
}

#[test]
fn canonical_prompt_follows_the_section_3_1_order() {
    let race = Race::new(RaceRules::new(2, 0.6).unwrap(), BASE_SEED);
    let r1 = persona("R1").unwrap();
    let p = view_prompt(
        &PromptCondition::default(),
        &race,
        0,
        &[r1.clone(), None],
        0,
    );
    let order = [
        "You are Company_1",
        "You are an executive who",
        "race to build a new technology",
        "'SAFE': advances 1 progress step",
        "'UNSAFE': advances 1.5 progress steps",
        "at least 5 rounds",
        "This is round 1.",
        "you get 2.4 and Company_2 gets 0.6",
        "prize of 100",
        "each company receives 50",
        "Its maximum is 60%",
        "can only strike a company that wins or ties",
        "Your total round payoff: 0",
        "Your progress minus Company_2's: 0",
        "No round has been played yet.",
        GOAL_MARKER,
        "ACTION: SAFE\nACTION: UNSAFE",
    ];
    let mut at = 0;
    for o in order {
        let i = p[at..]
            .find(o)
            .unwrap_or_else(|| panic!("missing or out of order: {o}\n{p}"));
        at += i;
    }
    assert!(p.ends_with("ACTION: UNSAFE\n"));
    assert!(!p.contains("\n\n\n"));
    // No persona for seat 1, and the opponent's persona is not disclosed.
    let q = view_prompt(&PromptCondition::default(), &race, 1, &[r1, None], 0);
    assert!(!q.contains("executive"));
    assert!(q.starts_with("You are Company_2"));
}

#[test]
fn both_seats_see_the_same_snapshot_and_history_modes_work() {
    let mut race = Race::new(RaceRules::new(2, 0.9).unwrap(), BASE_SEED);
    race.play_round(&[Unsafe, Safe]).unwrap();
    race.play_round(&[Safe, Safe]).unwrap();
    race.play_round(&[Unsafe, Unsafe]).unwrap();
    let cond = PromptCondition::default();
    let a = view_prompt(&cond, &race, 0, &[None, None], 0);
    let b = view_prompt(&cond, &race, 1, &[None, None], 0);
    assert!(a.contains("Your progress: 4") && a.contains("Company_2's progress: 3.5"));
    assert!(b.contains("Your progress: 3.5") && b.contains("Company_1's progress: 4"));
    assert!(a.contains("Your current private risk: 60%"));
    assert!(b.contains("Company_1's current private risk: 60%"));
    assert!(a.contains("Your progress minus Company_2's: 0.5"));
    // first_and_previous: rounds 1 and 3 only.
    assert!(a.contains(
        "Round 1: you chose UNSAFE, Company_2 chose SAFE; round payoffs: you 2.4, Company_2 0.6"
    ));
    assert!(!a.contains("Round 2:"));
    assert!(a.contains("Round 3: you chose UNSAFE"));
    let full = PromptCondition {
        history_mode: Some(super::prompt::HistoryMode::Full),
        ..Default::default()
    };
    assert!(view_prompt(&full, &race, 0, &[None, None], 0).contains("Round 2:"));
    let prev = PromptCondition {
        history_mode: Some(super::prompt::HistoryMode::PreviousRound),
        ..Default::default()
    };
    let p = view_prompt(&prev, &race, 0, &[None, None], 0);
    assert!(!p.contains("Round 1:") && p.contains("Round 3:"));
}

#[test]
fn opaque_codes_list_p_first_and_hide_safe_unsafe() {
    let mut race = Race::new(RaceRules::new(2, 0.1).unwrap(), BASE_SEED);
    race.play_round(&[Unsafe, Safe]).unwrap();
    for (rep, mapping) in [(0u32, CodeMapping::SafeP), (1, CodeMapping::SafeQ)] {
        let cond = PromptCondition {
            skin: Some("abstract_contest".into()),
            codes: Some("balanced".into()),
            ..Default::default()
        };
        assert_eq!(cond.mapping(rep).unwrap(), Some(mapping));
        let p = view_prompt(&cond, &race, 0, &[None, None], rep);
        assert!(!p.contains("SAFE"), "{p}");
        let ip = p.find("- 'P'").unwrap();
        let iq = p.find("- 'Q'").unwrap();
        assert!(ip < iq);
        assert!(p.contains("ACTION: P\nACTION: Q"));
        assert!(p.starts_with("You are Participant_1"));
        // The SAFE code is the one that carries no additional risk.
        let safe_code = mapping.code_of(Safe);
        assert!(p.contains(&format!(
            "'{safe_code}': advances 1 progress step and carries no additional risk"
        )));
        let own = mapping.code_of(Unsafe);
        assert!(p.contains(&format!("Round 1: you chose {own}")));
    }
}

#[test]
fn every_skin_renders_with_its_nouns() {
    for s in super::prompt::skins().unwrap() {
        let race = Race::new(RaceRules::new(2, 0.6).unwrap(), BASE_SEED);
        let cond = PromptCondition {
            skin: Some(s.id.clone()),
            ..Default::default()
        };
        let p = view_prompt(&cond, &race, 0, &[None, None], 0);
        assert!(
            p.contains(&s.intro) && p.contains(&s.setback) && p.contains(&s.reward),
            "{}",
            s.id
        );
        assert!(p.contains(GOAL_MARKER));
    }
    assert_eq!(super::prompt::skins().unwrap().len(), 8);
}

#[test]
fn decision_card_rows_show_payoff_progress_and_risk_after_the_round() {
    let mut race = Race::new(RaceRules::new(2, 0.6).unwrap(), BASE_SEED);
    race.play_round(&[Unsafe, Safe]).unwrap();
    race.play_round(&[Safe, Safe]).unwrap();
    let cond = PromptCondition {
        decision_card: true,
        ..Default::default()
    };
    let p = view_prompt(&cond, &race, 0, &[None, None], 0);
    let card = &p[p.find("[DECISION AID]").unwrap()..];
    assert!(p[..p.find("[DECISION AID]").unwrap()].ends_with("ACTION: UNSAFE\n\n"));
    // Own progress 2.5, n_U 1 after two rounds; risk after = 60·(1 + [U])/3.
    assert!(card.contains("- You SAFE, Company_2 SAFE: round payoff +1; your progress after the round 3.5; your private risk after the round 20%"), "{card}");
    assert!(card.contains("- You SAFE, Company_2 UNSAFE: round payoff +0.6;"));
    assert!(card.contains("- You UNSAFE, Company_2 SAFE: round payoff +2.4; your progress after the round 4; your private risk after the round 40%"));
    assert!(card.contains("- You UNSAFE, Company_2 UNSAFE: round payoff +2;"));
    assert!(card.trim_end().ends_with("[END DECISION AID]"));
    assert_eq!(cond.prompt_version(), "joule-race-v1:aid-calculator");
}

#[test]
fn n_player_prompt_lists_co_players_and_the_payoff_rule() {
    let mut race = Race::new(RaceRules::new(4, 0.1).unwrap(), BASE_SEED);
    race.play_round(&[Unsafe, Safe, Safe, Unsafe]).unwrap();
    let p = view_prompt(
        &PromptCondition::default(),
        &race,
        1,
        &[None, None, None, None],
        0,
    );
    assert!(p.contains("The other companies in the race are Company_1, Company_3, Company_4."));
    assert!(p.contains("If 0 of the 4 companies choose SAFE: each UNSAFE company gets 1."));
    assert!(p.contains("If 2 of the 4 companies choose SAFE: each SAFE company gets -0.2 and each UNSAFE company gets 1.2."));
    assert!(p.contains("If 4 of the 4 companies choose SAFE: each SAFE company gets 0."));
    assert!(p.contains("Your progress minus the leading competitor's progress: -0.5"));
    assert!(p.contains(
        "Round 1: you chose SAFE (payoff -0.2, +1); Company_1 chose UNSAFE (payoff 1.2, +1.5)"
    ));
}

#[test]
fn positions_leader_middle_trailer() {
    assert_eq!(position_of(&[1.0, 1.0], 0), Position::Leader);
    assert_eq!(position_of(&[1.0, 1.5], 0), Position::Trailer);
    assert_eq!(position_of(&[1.0, 1.5, 1.0], 0), Position::Middle);
    assert_eq!(position_of(&[1.0, 1.5, 2.0], 0), Position::Trailer);
    assert_eq!(position_of(&[1.5, 1.5, 2.0], 1), Position::Middle);
    assert_eq!(position_of(&[2.0, 1.5, 2.0], 2), Position::Leader);
}

fn spec(models: &[&str], p: f64, rep: u32) -> super::scenario::GameSpec {
    let cfg = ExperimentConfig {
        name: "t".into(),
        repetitions: rep + 1,
        base_seed: BASE_SEED,
        p_max: vec![p],
        n_players: vec![models.len()],
        lineups: vec![super::config::Lineup {
            name: "l".into(),
            seats: models.iter().map(|s| s.to_string()).collect(),
        }],
        personas: vec![super::config::PersonaCondition {
            name: "none".into(),
            seats: vec![],
        }],
        prompt: Default::default(),
        max_parse_retries: 3,
        temperature: 0.7,
        max_tokens: 32,
        sampling_seed_applied: true,
        run_phase: "pilot".into(),
        scripted_tokens: None,
        llm: Default::default(),
    };
    cfg.games().unwrap().pop().unwrap()
}

#[test]
fn scripted_au_vs_cs_through_the_agency_matches_the_engine_table() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Rc::new(RefCell::new(RaceSink {
        turns: EventLog::append(dir.path().join("turns.jsonl")).unwrap(),
        races: EventLog::append(dir.path().join("races.jsonl")).unwrap(),
    }));
    let mut backend = scripted_backend(None);
    let s = spec(&["scripted:AU", "scripted:CS"], 0.1, 1);
    let sink2 = sink.clone();
    let rec = run_one(&mut backend, move |agency| play_race(agency, s, sink2)).unwrap();
    assert_eq!(rec.result.n_rounds, 7);
    assert!((rec.result.seats[0].final_payoff - 114.4).abs() < 1e-9);
    assert!((rec.result.seats[1].final_payoff - 12.6).abs() < 1e-9);
    assert!(!rec.any_parse_failure);
    let turns: Vec<TurnRecord> = read_jsonl(dir.path().join("turns.jsonl"))
        .unwrap()
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    assert_eq!(turns.len(), 14);
    let t0 = &turns[0];
    assert_eq!(t0.sampling_seed, Some(302_796_336 + 100_000));
    assert_eq!(t0.raw_response, "ACTION: UNSAFE");
    assert!(t0.prompt.contains("This is round 1."));
    // CS copies AU from round 2 on; the pre-round state is recorded.
    let cs2 = turns
        .iter()
        .find(|t| t.round == 2 && t.player_index == 1)
        .unwrap();
    assert_eq!(cs2.action, Unsafe);
    assert_eq!(cs2.opponent_prev_action, Some(Unsafe));
    assert_eq!(cs2.own_progress_before, 1.0);
    assert_eq!(cs2.progress_gap_before, -0.5);
    assert_eq!(cs2.position, Position::Trailer);
    let last = turns.last().unwrap();
    assert!(last.stopped && last.stop_draw.is_some());
    let v = read_jsonl(dir.path().join("turns.jsonl")).unwrap();
    assert_eq!(v[0]["unsafe"], true);
}

#[test]
fn sloppy_answers_are_retried_unchanged_and_final_failures_contaminate() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Rc::new(RefCell::new(RaceSink {
        turns: EventLog::append(dir.path().join("turns.jsonl")).unwrap(),
        races: EventLog::append(dir.path().join("races.jsonl")).unwrap(),
    }));
    let mut backend = scripted_backend(None);
    let mut contaminated = 0;
    let mut retried = 0;
    for rep in 0..12 {
        let s = spec(&["scripted:sloppy", "scripted:sloppy"], 0.6, rep);
        let sink2 = sink.clone();
        let rec = run_one(&mut backend, move |agency| play_race(agency, s, sink2)).unwrap();
        contaminated += rec.any_parse_failure as usize;
        assert_eq!(
            rec.any_parse_failure,
            rec.exclusion_reasons
                .contains(&"any_parse_failure".to_string())
        );
    }
    let turns: Vec<TurnRecord> = read_jsonl(dir.path().join("turns.jsonl"))
        .unwrap()
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    for t in &turns {
        assert_eq!(t.retry_count as usize + 1, t.attempt_history.len());
        assert!(t.attempt_history.len() <= 4);
        let last = t.attempt_history.last().unwrap();
        assert_eq!(t.parse_failed, last.parse_failed);
        if t.parse_failed {
            assert_eq!(t.action, Safe, "fallback is SAFE");
            assert_eq!(t.attempt_history.len(), 4);
            assert_eq!(t.reasoning, "I weigh the risk first.");
        }
        for (i, a) in t.attempt_history.iter().enumerate() {
            let expect = super::rng::sampling_seed(t.game_seed, t.round, t.player_index, i as u32);
            assert_eq!(a.sampling_seed, Some(expect));
            assert!(i + 1 == t.attempt_history.len() || a.parse_failed);
        }
        retried += (t.retry_count > 0) as usize;
    }
    assert!(retried > 0, "sloppy answers should need retries");
    // P(four failures) = 1/16 per turn: over ~200 turns some races are contaminated.
    assert!(contaminated > 0);
}

#[test]
fn sweep_runs_resumes_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
name = "tiny"
repetitions = 2
p_max = [0.1, 0.9]
n_players = [2, 3]
[[lineups]]
name = "random"
seats = ["scripted:random"]
[[lineups]]
name = "AU-CS"
seats = ["scripted:AU", "scripted:CS"]
[[personas]]
name = "none"
[[personas]]
name = "R1-R6"
seats = ["R1", "R6"]
"#;
    let cfg_path = dir.path().join("tiny.toml");
    std::fs::write(&cfg_path, text).unwrap();
    let cfg = ExperimentConfig::load(&cfg_path).unwrap();
    let out = dir.path().join("run");
    let mut b = scripted_backend(None);
    let s = run_experiment(&cfg, &out, false, &mut b).unwrap();
    assert_eq!(s.total_races, 2 * 2 * 2 * 2 * 2);
    assert_eq!(s.played_races, 32);
    // All races advance in lockstep: round 1 of the 16 `random` races is one
    // batch of 8·2 + 8·3 = 40 requests.
    assert_eq!(s.largest_batch, 40);
    // A fresh `run` refuses to overwrite; a resume skips finished races.
    assert!(run_experiment(&cfg, &out, false, &mut b).is_err());
    // A scripted race records no kernels; a config.json that holds them (a
    // model-backed start) still resumes.
    let written = std::fs::read_to_string(out.join("config.json")).unwrap();
    assert!(!written.contains("\"kernels\""), "{written}");
    let mut with_kernels: serde_json::Value = serde_json::from_str(&written).unwrap();
    with_kernels["kernels"] = serde_json::json!({"backend": "candle", "simd": "avx2"});
    std::fs::write(out.join("config.json"), with_kernels.to_string()).unwrap();
    let s2 = run_experiment(&cfg, &out, true, &mut b).unwrap();
    assert_eq!((s2.played_races, s2.skipped_races), (0, 32));
    // Another thread count resumes (config.json then records this start's);
    // another value that counts does not.
    let mut threads = cfg.clone();
    threads.llm.threads = Some(7);
    let s3 = run_experiment(&threads, &out, true, &mut b).unwrap();
    assert_eq!((s3.played_races, s3.skipped_races), (0, 32));
    let written = std::fs::read_to_string(out.join("config.json")).unwrap();
    assert!(written.contains("\"threads\": 7"), "{written}");
    let mut other = cfg.clone();
    other.repetitions = 3;
    let e = run_experiment(&other, &out, true, &mut b).unwrap_err();
    assert!(format!("{e:#}").contains("different config"), "{e:#}");
    let races = read_jsonl(out.join("races.jsonl")).unwrap();
    assert_eq!(races.len(), 32);
    // Same rep → same horizon at every p_max (common random numbers).
    let w =
        |id: &str| races.iter().find(|r| r["game_id"] == id).unwrap()["result"]["n_rounds"].clone();
    assert_eq!(
        w("n2__p0.1__random__none__rep0001"),
        w("n2__p0.9__AU-CS__R1-R6__rep0001")
    );
    let csv = std::fs::read_to_string(out.join("players.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 16 * 2 + 16 * 3);
    let rep_dir = dir.path().join("report");
    let md = super::report::write_report(&[out.clone()], &rep_dir).unwrap();
    assert!(md.contains("## Unsafe rate by p_max"));
    // One start played every race; the two with nothing left to play record no session.
    let p = crate::provenance::Provenance::read(&out).unwrap().unwrap();
    assert_eq!(p.sessions.len(), 1);
    assert_eq!(p.sessions[0].build, crate::provenance::Build::this());
    assert!(
        md.contains("## Provenance") && md.contains("1 of 1 experiments record it."),
        "{md}"
    );
    assert!(md.contains("| low | Leader |") || md.contains("| low | Trailer |"));
    for f in [
        "unsafe_rates.csv",
        "trajectories.csv",
        "unsafe_by_position.png",
        "unsafe_by_position.svg",
        "report.md",
    ] {
        assert!(rep_dir.join(f).exists(), "{f}");
    }
    let traj = std::fs::read_to_string(rep_dir.join("trajectories.csv")).unwrap();
    assert_eq!(traj.lines().count(), 1 + 16 * 2 + 16 * 3);
    assert!(traj
        .lines()
        .next()
        .unwrap()
        .ends_with("gap_1,gap_2,gap_3,gap_4,gap_5"));
    // AU vs CS at N = 2: AU is UNSAFE every round, CS copies from round 2.
    let row = traj
        .lines()
        .find(|l| l.starts_with("n2__p0.1__AU-CS__none__rep0000,") && l.contains(",0,false,"))
        .unwrap();
    assert!(
        row.ends_with("1,1,1,1,1,0,1,1,1,1,0,0.5,0.5,0.5,0.5"),
        "{row}"
    );
}

/// A small scripted experiment (8 races of 2 seats), run into `out`.
fn small_run(out: &std::path::Path) -> ExperimentConfig {
    let cfg = ExperimentConfig::from_toml_str(
        r#"
name = "small"
repetitions = 2
p_max = [0.1, 0.9]
[[lineups]]
name = "AU-CS"
seats = ["scripted:AU", "scripted:CS"]
[[lineups]]
name = "AS"
seats = ["scripted:AS"]
"#,
        "small.toml",
    )
    .unwrap();
    let s = run_experiment(&cfg, out, false, &mut scripted_backend(None)).unwrap();
    assert_eq!(s.played_races, 8);
    cfg
}

/// Rewrite the first record of a JSONL file with `edit`.
fn edit_first(path: &std::path::Path, edit: impl Fn(&mut serde_json::Value)) {
    let mut lines = read_jsonl(path).unwrap();
    edit(&mut lines[0]);
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A kept race whose lists do not match its seats (or whose seat count is
/// out of range) is refused on resume, naming races.jsonl, the game and the
/// field, before any race is played or appended.
#[test]
fn a_kept_race_that_does_not_match_its_seats_is_refused_before_any_race() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let cfg = small_run(&out);
    let races = out.join("races.jsonl");
    let lines = read_jsonl(&races).unwrap();
    // Leave some races to play, so a resume would append.
    let kept: String = lines[..5].iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(&races, &kept).unwrap();
    let game = lines[0]["game_id"].as_str().unwrap().to_string();
    for (field, value, want) in [
        (
            "models",
            serde_json::json!([]),
            "`models` has 0 entries for 2 seats",
        ),
        (
            "personas",
            serde_json::json!([]),
            "`personas` has 0 entries for 2 seats",
        ),
        (
            "n_players",
            serde_json::json!(4_000_000_000u64),
            "`n_players` is 4000000000",
        ),
    ] {
        std::fs::write(&races, &kept).unwrap();
        edit_first(&races, |r| r[field] = value.clone());
        let before = std::fs::read(&races).unwrap();
        let e = run_experiment(&cfg, &out, true, &mut scripted_backend(None)).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("races.jsonl: record 1") && e.contains(&game) && e.contains(want),
            "{field}: {e}"
        );
        assert_eq!(
            std::fs::read(&races).unwrap(),
            before,
            "{field}: races.jsonl changed"
        );
        // The report refuses it the same way.
        let e = super::report::write_report(&[out.clone()], &dir.path().join("rep")).unwrap_err();
        assert!(format!("{e:#}").contains(want), "{field}: {e:#}");
    }
}

/// A race folder another process is writing is refused, the folder as it was.
#[test]
fn a_race_folder_another_process_is_writing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let cfg = small_run(&out);
    let before = std::fs::read(out.join("races.jsonl")).unwrap();
    let held = crate::record::FolderLock::acquire(&out).unwrap();
    let e = run_experiment(&cfg, &out, true, &mut scripted_backend(None)).unwrap_err();
    assert!(
        format!("{e:#}").contains("being written by another joule process"),
        "{e:#}"
    );
    assert_eq!(std::fs::read(out.join("races.jsonl")).unwrap(), before);
    drop(held);
    run_experiment(&cfg, &out, true, &mut scripted_backend(None)).unwrap();
}

/// A turn naming a seat its race does not have is refused by the report
/// (and `joule view`), naming turns.jsonl and `player_index`.
#[test]
fn a_turn_of_a_seat_past_the_race_is_refused_by_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    small_run(&out);
    edit_first(&out.join("turns.jsonl"), |t| {
        t["player_index"] = serde_json::json!(4_000_000_000u64)
    });
    let e = super::analysis::runs::load(&[out.clone()]).err().unwrap();
    let e = format!("{e:#}");
    assert!(
        e.contains("turns.jsonl: record 1") && e.contains("`player_index` is 4000000000"),
        "{e}"
    );
}

/// A race recorded twice in races.jsonl is refused by the report (not
/// counted twice), naming the file, the record and the game.
#[test]
fn a_race_recorded_twice_is_refused_by_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    small_run(&out);
    let path = out.join("races.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let first = text.lines().next().unwrap().to_string();
    std::fs::write(&path, format!("{text}{first}\n")).unwrap();
    let game = read_jsonl(&path).unwrap()[0]["game_id"]
        .as_str()
        .unwrap()
        .to_string();
    let e = super::analysis::runs::load(&[out.clone()]).err().unwrap();
    let e = format!("{e:#}");
    assert!(
        e.contains("races.jsonl: record 9")
            && e.contains(&format!("game `{game}`"))
            && e.contains("recorded twice (first as record 1)"),
        "{e}"
    );
}

/// A torn last race (an interrupted write) is cut before the resume appends:
/// every race is then readable, once.
#[test]
fn a_torn_last_race_is_cut_before_the_resume_appends() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let cfg = small_run(&out);
    let races = out.join("races.jsonl");
    let text = std::fs::read_to_string(&races).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(
        &races,
        format!("{}\n{}", lines[..3].join("\n"), &lines[3][..50]),
    )
    .unwrap();
    let s = run_experiment(&cfg, &out, true, &mut scripted_backend(None)).unwrap();
    assert_eq!((s.skipped_races, s.played_races), (3, 5));
    let all = read_jsonl(&races).unwrap();
    assert_eq!(all.len(), 8);
    let ids: std::collections::BTreeSet<String> =
        all.iter().map(|r| r["game_id"].to_string()).collect();
    assert_eq!(ids.len(), 8);
    assert_eq!(std::fs::read_to_string(&races).unwrap().lines().count(), 8);
}

/// A race folder whose turns.jsonl lost its tail: the report refuses it,
/// naming the game and its expected and found turns; a resume plays the
/// races missing turns again (each recorded once, with all its turns), and
/// the report then reads the same as the uncut run's.
#[test]
fn races_whose_turns_were_lost_are_refused_by_the_report_and_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let cfg = small_run(&out);
    let races_before = std::fs::read_to_string(out.join("races.jsonl")).unwrap();
    let turns_path = out.join("turns.jsonl");
    let turns_before = std::fs::read_to_string(&turns_path).unwrap();
    std::fs::write(&turns_path, &turns_before[..turns_before.len() / 4]).unwrap();
    let e = format!(
        "{:#}",
        super::analysis::runs::load(&[out.clone()]).err().unwrap()
    );
    assert!(
        e.contains("turns.jsonl: game `") && e.contains("is recorded as finished but has"),
        "{e}"
    );
    let s = run_experiment(&cfg, &out, true, &mut scripted_backend(None)).unwrap();
    assert!(
        s.played_races > 0 && s.skipped_races + s.played_races == 8,
        "{s:?}"
    );
    let sorted = |text: &str| {
        let mut v: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        v.sort_by_key(|r| r.to_string());
        v
    };
    assert_eq!(
        sorted(&std::fs::read_to_string(out.join("races.jsonl")).unwrap()),
        sorted(&races_before)
    );
    assert_eq!(
        sorted(&std::fs::read_to_string(&turns_path).unwrap()),
        sorted(&turns_before)
    );
    super::analysis::runs::load(&[out.clone()]).unwrap();
}

/// The report names the game, the turns it should have and the turns found
/// when one race lost a turn.
#[test]
fn a_race_missing_one_turn_is_refused_by_the_report_with_its_counts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    small_run(&out);
    let races = read_jsonl(out.join("races.jsonl")).unwrap();
    let last = races.last().unwrap();
    let game = last["game_id"].as_str().unwrap().to_string();
    let want = last["result"]["n_rounds"].as_u64().unwrap() * last["n_players"].as_u64().unwrap();
    let turns_path = out.join("turns.jsonl");
    let turns = read_jsonl(&turns_path).unwrap();
    let drop_at = turns
        .iter()
        .rposition(|t| t["game_id"].as_str() == Some(game.as_str()))
        .unwrap();
    let text: String = turns
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != drop_at)
        .map(|(_, v)| format!("{v}\n"))
        .collect();
    std::fs::write(&turns_path, text).unwrap();
    let e = format!(
        "{:#}",
        super::analysis::runs::load(&[out.clone()]).err().unwrap()
    );
    assert!(
        e.contains(&format!("game `{game}`"))
            && e.contains(&format!("has {} of its {want} turns", want - 1)),
        "{e}"
    );
}

/// A folder holding only what a race run's write cut short left (its
/// `config.json.tmp`, maybe empty) counts as empty: the run starts there.
/// Another `.tmp` file is not the run's, and is refused as before.
#[test]
fn a_folder_with_only_a_race_runs_own_temporary_file_takes_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_run(&dir.path().join("first"));
    let out = dir.path().join("run");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("config.json.tmp"), "").unwrap();
    let s = run_experiment(&cfg, &out, false, &mut scripted_backend(None)).unwrap();
    assert_eq!(s.played_races, 8);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.tmp"), "mine").unwrap();
    let e = format!(
        "{:#}",
        run_experiment(&cfg, &other, false, &mut scripted_backend(None)).unwrap_err()
    );
    assert!(e.contains("not a race run folder"), "{e}");
}

/// `race run` writes only into a new or empty folder, or a race folder of
/// the same config: another program's folder, another config's folder and
/// kept races without a config.json are refused, and nothing is written.
#[test]
fn race_run_refuses_a_folder_it_cannot_match_to_its_config() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let cfg = small_run(&out);
    let mut b = scripted_backend(None);
    // An Energy Society run folder.
    let society = dir.path().join("society");
    std::fs::create_dir(&society).unwrap();
    std::fs::write(
        society.join("config.json"),
        r#"{"name": "baseline", "rounds": 3}"#,
    )
    .unwrap();
    std::fs::write(society.join("provenance.json"), "{}").unwrap();
    let e = format!(
        "{:#}",
        run_experiment(&cfg, &society, false, &mut b).unwrap_err()
    );
    assert!(e.contains("not a race run's config"), "{e}");
    assert_eq!(
        std::fs::read_to_string(society.join("config.json")).unwrap(),
        r#"{"name": "baseline", "rounds": 3}"#
    );
    assert_eq!(
        std::fs::read_to_string(society.join("provenance.json")).unwrap(),
        "{}"
    );
    // A folder of other files.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let e = format!(
        "{:#}",
        run_experiment(&cfg, &other, false, &mut b).unwrap_err()
    );
    assert!(e.contains("not a race run folder"), "{e}");
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
    // Another config's folder whose races were all unfinished.
    let mut changed = cfg.clone();
    changed.temperature = 0.1;
    std::fs::remove_file(out.join("races.jsonl")).unwrap();
    let e = format!(
        "{:#}",
        run_experiment(&changed, &out, false, &mut b).unwrap_err()
    );
    assert!(e.contains("different config"), "{e}");
    // Kept races without config.json cannot be matched to a config.
    let races = dir.path().join("races");
    small_run(&races);
    std::fs::remove_file(races.join("config.json")).unwrap();
    let before = std::fs::read(races.join("races.jsonl")).unwrap();
    let e = format!(
        "{:#}",
        run_experiment(&changed, &races, true, &mut b).unwrap_err()
    );
    assert!(
        e.contains("holds 8 finished races") && e.contains("config.json"),
        "{e}"
    );
    assert_eq!(std::fs::read(races.join("races.jsonl")).unwrap(), before);
    assert!(!races.join("config.json").exists());
    // An empty folder takes a run.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    run_experiment(&cfg, &empty, false, &mut b).unwrap();
}

/// Config values that would give clashing game ids, no races, a path for a
/// name or more races than fit are refused, naming the key.
#[test]
fn race_configs_with_clashing_empty_or_oversized_values_are_refused() {
    let base =
        "repetitions = 2\n[[lineups]]\nname = \"a\"\nseats = [\"scripted:AU\", \"scripted:CS\"]\n";
    let ok = format!("name = \"x\"\n{base}");
    ExperimentConfig::from_toml_str(&ok, "ok.toml").unwrap();
    // The last repetition's game_seed is exactly i64::MAX.
    ExperimentConfig::from_toml_str(&format!("base_seed = 9223372036854775806\n{ok}"), "ok.toml")
        .unwrap();
    for (text, want) in [
        (
            format!("name = \"../x\"\n{base}"),
            "`name` must be a plain file name",
        ),
        (
            format!("name = \"/tmp/x\"\n{base}"),
            "`name` must be a plain file name",
        ),
        (
            format!("name = \"\"\n{base}"),
            "`name` must be a plain file name",
        ),
        (
            format!("name = \"..\"\n{base}"),
            "`name` must be a plain file name",
        ),
        (
            format!("{ok}[[lineups]]\nname = \"a\"\nseats = [\"scripted:AS\"]\n"),
            "`lineups` lists name `a` twice",
        ),
        (
            format!("p_max = [0.1, 0.10]\n{ok}"),
            "`p_max` lists value `0.1` twice",
        ),
        (
            format!("n_players = [2, 2]\n{ok}"),
            "`n_players` lists value `2` twice",
        ),
        (
            format!("n_players = []\n{ok}"),
            "`n_players` must not be empty",
        ),
        (
            format!("personas = []\n{ok}"),
            "`personas` must list at least one",
        ),
        (
            format!("{ok}[[personas]]\nname = \"p\"\n[[personas]]\nname = \"p\"\n"),
            "`personas` lists name `p` twice",
        ),
        (
            format!("max_parse_retries = 4294967295\n{ok}"),
            "`max_parse_retries` expected at most 100 (each retry is a model call), got 4294967295",
        ),
        (
            format!("temperature = 1e40\n{ok}"),
            "expected a number a 32-bit float holds (at most about 3.4e38), got 1e40",
        ),
        (
            format!("max_parse_retries = 101\n{ok}"),
            "`max_parse_retries` expected at most 100",
        ),
        (
            ok.replace("repetitions = 2", "repetitions = 4000000000"),
            "`repetitions` must be 1..=10000",
        ),
        (
            format!("base_seed = 9223372036854775807\n{ok}"),
            "`base_seed` must leave room for its 2 repetitions",
        ),
        (
            format!(
                "p_max = [{}]\n{}",
                (0..21)
                    .map(|i| format!("{}", i as f64 / 20.0))
                    .collect::<Vec<_>>()
                    .join(", "),
                ok.replace("repetitions = 2", "repetitions = 10000")
            ),
            "at most 200000 fit one run",
        ),
    ] {
        let e = format!(
            "{:#}",
            ExperimentConfig::from_toml_str(&text, "bad.toml").unwrap_err()
        );
        assert!(e.contains("bad.toml") && e.contains(want), "{text}\n{e}");
    }
}

/// Lineup, persona and experiment names and the run phase with a control
/// character (a newline, an escape) are refused, naming the key.
#[test]
fn race_names_with_control_characters_are_refused() {
    let base = "name = \"x\"\n[[lineups]]\nname = \"a\"\nseats = [\"scripted:AU\"]\n";
    for (text, key) in [
        (
            base.replace("name = \"a\"", "name = \"CS\\nCAS\""),
            "`lineups[0].name`",
        ),
        (
            format!("{base}[[personas]]\nname = \"p\\u001b[31m\"\n"),
            "`personas[0].name`",
        ),
        (format!("run_phase = \"pilot\\r\"\n{base}"), "`run_phase`"),
        (base.replace("name = \"x\"", "name = \"x\\ty\""), "`name`"),
    ] {
        let e = format!(
            "{:#}",
            ExperimentConfig::from_toml_str(&text, "bad.toml").unwrap_err()
        );
        assert!(
            e.contains("bad.toml")
                && e.contains(&format!(
                    "{key}: expected a name without control characters"
                )),
            "{text}\n{e}"
        );
    }
    // A `|` is no control character: reports escape it.
    ExperimentConfig::from_toml_str(&base.replace("name = \"a\"", "name = \"AU|CS\""), "ok.toml")
        .unwrap();
}

/// `race egt` refuses a selection intensity or population the solve cannot
/// finish with, naming the flag.
#[test]
fn egt_parameters_the_solve_cannot_finish_with_are_refused() {
    use super::egt::PopulationParams;
    let ok = PopulationParams {
        z: 100,
        beta: 2.0,
        mu: 0.02,
    };
    ok.check().unwrap();
    for (p, want) in [
        (
            PopulationParams {
                beta: f64::NAN,
                ..ok
            },
            "--beta",
        ),
        (PopulationParams { beta: 1e308, ..ok }, "--beta"),
        (PopulationParams { beta: -5.0, ..ok }, "--beta"),
        (PopulationParams { z: 2000, ..ok }, "--z must be 2..=200"),
        (PopulationParams { z: 1, ..ok }, "--z"),
        (PopulationParams { mu: f64::NAN, ..ok }, "--mu"),
    ] {
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains(want), "{p:?}: {e}");
    }
}
