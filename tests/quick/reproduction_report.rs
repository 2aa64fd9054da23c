//! `joule report RUNS --against paper|DIR` end to end: the reference runs
//! against the paper and against themselves, a scripted sweep against the
//! paper, edited reference runs (a deviating run, another set-up), the
//! terminal's compact table, the files and the HTML section, and the errors.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn reference() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/reference-runs/energy-society")
}

fn condition_dir(cond: &str) -> PathBuf {
    reference().join(cond).join("exponent_0.5")
}

fn tmp(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("reproduction_report")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(args)
        .output()
        .expect("running joule")
}

fn joule(args: &[&OsStr]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "joule {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The level rows of a table: cells of every `| ... |` line after `## Levels`
/// up to the next blank line.
fn level_rows(md: &str) -> Vec<Vec<String>> {
    md.split("## Levels")
        .nth(1)
        .expect("a levels table")
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn verdict(row: &[String]) -> &str {
    row.last().unwrap().trim_matches('*')
}

/// `joule report ARGS --out DIR --no-plots`: the full Markdown of
/// reproduction.md, and what the terminal showed.
fn reproduce(name: &str, args: &[&OsStr]) -> (String, String) {
    let out = tmp(name);
    let mut all: Vec<&OsStr> = args.to_vec();
    all.extend([
        OsStr::new("--out"),
        out.as_os_str(),
        OsStr::new("--no-plots"),
    ]);
    let shown = joule(&all);
    let md = std::fs::read_to_string(out.join("reproduction.md")).expect("reproduction.md");
    (md, shown)
}

/// No row says higher or lower.
fn none_differs(rows: &[Vec<String>]) {
    for r in rows {
        let v = verdict(r);
        assert!(
            v == "consistent" || v == "inconclusive" || v.starts_with("not tested"),
            "{r:?}"
        );
    }
}

/// The reference runs of one condition copied into `dir` (agents.json
/// edited by `edit_agents`, config.json by `edit_config`).
fn edited_copy(
    cond: &str,
    dir: &Path,
    edit_agents: impl Fn(usize, &mut serde_json::Value),
    edit_config: impl Fn(&mut serde_json::Value),
) {
    for k in 1..=5 {
        let from = condition_dir(cond).join(format!("run_{k}"));
        let to = dir.join(format!("run_{k}"));
        std::fs::create_dir_all(&to).unwrap();
        for f in ["token_usage.json", "transcript.json"] {
            std::fs::copy(from.join(f), to.join(f)).unwrap();
        }
        let mut agents: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(from.join("agents.json")).unwrap())
                .unwrap();
        edit_agents(k, &mut agents);
        std::fs::write(to.join("agents.json"), agents.to_string()).unwrap();
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(from.join("config.json")).unwrap())
                .unwrap();
        edit_config(&mut config);
        std::fs::write(to.join("config.json"), config.to_string()).unwrap();
    }
}

/// The row with these (runs, metric label, agent prefix).
fn row_of<'a>(rows: &'a [Vec<String>], runs: &str, metric: &str, agent: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r[1] == runs && r[2] == metric && r[3].starts_with(agent))
        .unwrap_or_else(|| panic!("no row {runs} / {metric} / {agent}"))
}

/// The verdict of the row with these (runs, metric label, agent prefix).
fn verdict_of<'a>(rows: &'a [Vec<String>], runs: &str, metric: &str, agent: &str) -> &'a str {
    verdict(row_of(rows, runs, metric, agent))
}

#[test]
fn reference_coop_runs_against_the_paper_print_the_table() {
    let (md, shown) = reproduce(
        "coop-paper",
        &[
            OsStr::new("report"),
            condition_dir("coop").as_os_str(),
            OsStr::new("--against"),
            OsStr::new("paper"),
        ],
    );
    assert!(md.starts_with("# Reproduction against the paper"), "{md}");
    assert!(md.contains("against the paper's baseline coop"), "{md}");
    let rows = level_rows(&md);
    // The paper's baseline coop figures: 8B and 9B rounds, agent 1's donations,
    // donations received by agents 4 and 5, "no agent > 1", collisions.
    assert_eq!(rows.len(), 11, "{md}");
    // These runs are the ones the paper summarises: nothing differs, and
    // with 5 runs most rows could not have told the paper's effects apart.
    none_differs(&rows);
    let r = rows
        .iter()
        .find(|r| r[2] == "rounds active" && r[3].starts_with("agent_4"))
        .unwrap();
    assert_eq!(r[4], "19.20 ± 2.59 (n=5)");
    assert_eq!(r[5], "19.20 ± 2.60 (n=5)");
    assert_eq!(r[6], "published sd");
    assert!(r[8].starts_with("Welch t"), "{r:?}");
    // The 9B agent's efficiency under the bound: five runs a side detect
    // a difference just above its margin of 0.48 (Welch's test at its own
    // random df, the variances median-unbiased), so even the runs the paper
    // summarises are inconclusive there, not consistent.
    let r9 = rows
        .iter()
        .find(|r| r[2] == "gained / spent" && r[3].starts_with("agent_5"))
        .unwrap();
    assert_eq!(r9[13], "0.48", "{r9:?}");
    let detectable: f64 = r9[12].parse().unwrap();
    assert!((0.48..0.65).contains(&detectable), "{r9:?}");
    assert_eq!(verdict(r9), "inconclusive", "{r9:?}");
    // "29%" is a mean of 5 seeds: its spread is the reference runs'.
    let share = rows
        .iter()
        .find(|r| r[2] == "DONATE share of actions")
        .unwrap();
    assert_eq!(share[6], "sd of the 5 reference runs", "{share:?}");
    assert!(md.contains("Holm over m = 11"), "{md}");
    assert!(md.contains("consistent, "), "{md}");
    assert!(
        !md.contains("bootstrap (") && !md.contains("resamples"),
        "{md}"
    );
    // Contrasts need conditions these runs do not have: said, not tested.
    assert!(
        md.contains("contrast `collisions_comp_vs_coop` not tested"),
        "{md}"
    );
    // The terminal's table: at most 120 columns, the condition named once
    // (after the report's own summary, which --out prints first).
    let shown = &shown[shown.find("Reproduction against").expect("the comparison")..];
    for l in shown.lines() {
        assert!(
            l.chars().count() <= 120,
            "{} columns: {l}",
            l.chars().count()
        );
    }
    assert_eq!(
        shown
            .matches("`coop/exponent_0.5` against baseline coop")
            .count(),
        1,
        "{shown}"
    );
    assert!(shown.contains("detectable"), "{shown}");
}

#[test]
fn reference_runs_against_themselves_are_consistent_everywhere() {
    // One condition against the same folder.
    let coop = condition_dir("coop");
    let (md, _) = reproduce(
        "coop-coop",
        &[
            OsStr::new("report"),
            coop.as_os_str(),
            OsStr::new("--against"),
            coop.as_os_str(),
        ],
    );
    let rows = level_rows(&md);
    assert!(rows.len() > 30, "{md}");
    none_differs(&rows);
    assert!(rows.iter().all(|r| r[8].starts_with("Welch t")), "{md}");
    // Rows with no spread on either side cannot differ: out of Holm's m.
    assert!(md.contains("row(s) that cannot differ"), "{md}");
    assert!(md.contains("No bootstrap"), "{md}");
    // Both conditions against the folder holding both: matched by condition,
    // and the paper's contrasts compared effect for effect.
    let (md, _) = reproduce(
        "both-both",
        &[
            OsStr::new("report"),
            condition_dir("comp_with_discussion").as_os_str(),
            coop.as_os_str(),
            OsStr::new("--against"),
            reference().as_os_str(),
        ],
    );
    let rows = level_rows(&md);
    assert!(rows.len() > 60, "{md}");
    none_differs(&rows);
    // agent_5 attempted a hard job in one comp run only: nothing to test there.
    let untested: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| verdict(r).starts_with("not tested"))
        .collect();
    assert_eq!(untested.len(), 1, "{untested:?}");
    assert_eq!(untested[0][2], "success on hard jobs");
    assert_eq!(
        verdict(untested[0]),
        "not tested (fewer than 2 runs with a value)"
    );
    let effects: Vec<&str> = md.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(effects.len(), 6, "{md}");
    for e in effects {
        assert!(
            e.ends_with("| **compatible** |") || e.ends_with("| **inconclusive** |"),
            "{e}"
        );
        assert!(e.contains("+0.00 ["), "{e}");
    }
}

#[test]
fn both_reference_conditions_against_the_paper_give_the_effects() {
    let (md, _) = reproduce(
        "both-paper",
        &[
            OsStr::new("report"),
            condition_dir("comp_with_discussion").as_os_str(),
            condition_dir("coop").as_os_str(),
            OsStr::new("--against"),
            OsStr::new("paper"),
        ],
    );
    let rows = level_rows(&md);
    assert_eq!(rows.len(), 23, "{md}");
    none_differs(&rows);
    // "4B agents survive all 30 rounds", "zero donations": counted, 0 of 5
    // runs deviate, and 5 runs would catch deviations in half the runs.
    let every: Vec<&Vec<String>> = rows.iter().filter(|r| r[6] == "every run").collect();
    assert_eq!(every.len(), 4, "{md}");
    for r in every {
        assert!(r[4].ends_with("0 of 5 runs deviate"), "{r:?}");
        assert_eq!(verdict(r), "consistent", "{r:?}");
    }
    // The 8B agent's rounds (14.0 ± 9.5) could only show a difference far
    // beyond the margin of 5.2 rounds: inconclusive, not consistent.
    let comp = "comp_with_discussion/exponent_0.5";
    let r8 = row_of(&rows, comp, "rounds active", "agent_4");
    assert_eq!(verdict(r8), "inconclusive", "{r8:?}");
    // More runs: the 9B agent's rounds in comp would reach its margin with 6
    // runs; the 8B agent's never would (the paper's own spread over 5 seeds).
    let r9 = row_of(&rows, comp, "rounds active", "agent_5");
    assert_eq!(
        (verdict(r9), r9[14].as_str()),
        ("inconclusive", "6"),
        "{r9:?}"
    );
    assert_eq!(r8[14], "> 1000", "{r8:?}");
    assert!(
        md.contains("More runs: 1 inconclusive row(s) would reach their margins with 6 runs"),
        "{md}"
    );
    assert!(
        md.contains("Holm over m = 8") && md.contains("Holm over m = 11"),
        "{md}"
    );
    let effect = |id: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| `{id}`")))
            .unwrap_or_else(|| panic!("no contrast {id}: {md}"))
    };
    // The paper's effects come from these runs: no size differs.
    for id in [
        "collisions_comp_vs_coop",
        "small_vs_8b_rounds_active_comp",
        "small_vs_9b_rounds_active_comp",
        "8b_rounds_active_coop_vs_comp",
        "9b_rounds_active_coop_vs_comp",
        "8b_donations_received_coop_vs_comp",
    ] {
        let e = effect(id);
        assert!(
            e.ends_with("| **compatible** |") || e.ends_with("| **inconclusive** |"),
            "{e}"
        );
    }
    // 30 − 5.2 ± 1.6 active rounds: clear in five runs, and its size too.
    assert!(effect("small_vs_9b_rounds_active_comp").contains("**same sign**"));
    assert!(effect("small_vs_9b_rounds_active_comp").ends_with("| **compatible** |"));
    // 12.8 ± 3.9 against 8.6 ± 2.3 collisions: five seeds could not show a
    // difference of 4.2 collisions at all.
    assert!(effect("collisions_comp_vs_coop").contains("**inconclusive**"));
}

#[test]
fn out_writes_the_tables_and_the_html_section() {
    let out = tmp("files");
    joule(&[
        OsStr::new("report"),
        condition_dir("coop").as_os_str(),
        OsStr::new("--against"),
        OsStr::new("paper"),
        OsStr::new("--out"),
        out.as_os_str(),
        OsStr::new("--no-plots"),
        OsStr::new("--html"),
    ]);
    let md = std::fs::read_to_string(out.join("reproduction.md")).unwrap();
    assert_eq!(level_rows(&md).len(), 11);
    let csv = std::fs::read_to_string(out.join("reproduction.csv")).unwrap();
    assert!(csv.starts_with("table,reference_condition,run_condition,metric,agent,"));
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    for col in [
        "statistic",
        "df",
        "se",
        "detectable",
        "margin",
        "family_m",
        "deviating",
    ] {
        assert!(header.contains(&col), "{col} missing: {header:?}");
    }
    assert_eq!(csv.lines().filter(|l| l.starts_with("level,")).count(), 11);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("reproduction.json")).unwrap())
            .unwrap();
    let levels = json["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 11);
    for l in levels {
        assert!(l["detectable"].as_f64().is_some_and(|d| d > 0.0), "{l}");
        assert!(
            l["df"].as_f64().is_some() && l["se"].as_f64().is_some(),
            "{l}"
        );
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<a href=\"#reproduction\">Reproduction</a>"));
    assert!(html.contains("<table id=\"reproduction-levels\">"));
    assert_eq!(
        html.matches("<tr class=\"consistent\">").count()
            + html.matches("<tr class=\"inconclusive\">").count(),
        11
    );
    // The section sits in <main>, before the energy charts.
    let sec = html.find("id=\"reproduction\"").unwrap();
    assert!(
        sec > html.find("<main").unwrap() && sec < html.find("<section id=\"energy\"").unwrap()
    );
}

#[test]
fn a_bad_against_is_a_clear_error() {
    let missing = tmp("bad").join("no-such-folder");
    let out = run(&[
        OsStr::new("report"),
        condition_dir("coop").as_os_str(),
        OsStr::new("--against"),
        missing.as_os_str(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(
        err.contains("expected `paper` or a folder of runs in the reference layout"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let empty = tmp("empty");
    let out = run(&[
        OsStr::new("report"),
        condition_dir("coop").as_os_str(),
        OsStr::new("--against"),
        empty.as_os_str(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&empty.display().to_string()), "{err}");
    assert!(err.contains("no run folders"), "{err}");

    // Without --out and --against there is nothing to do.
    let out = run(&[OsStr::new("report"), condition_dir("coop").as_os_str()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--out"));
}

#[test]
fn a_scripted_sweep_against_the_paper_shows_the_known_differences() {
    // The paper's four published conditions with the scripted baselines of
    // configs/energy-society (greedy in comp, cooperative in coop; procedural jobs),
    // three seeds each: under a second.
    let dir = tmp("sweep");
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/energy-society");
    let names = [
        "baseline-comp",
        "baseline-coop",
        "no-size-penalty-comp",
        "no-size-penalty-coop",
        "no-memory-comp",
        "scarcity-coop",
    ];
    let list: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                "{:?}",
                configs.join(format!("{n}.toml")).display().to_string()
            )
        })
        .collect();
    let sweep = dir.join("sweep.toml");
    std::fs::write(
        &sweep,
        format!(
            "out = {:?}\nseeds = [1, 2, 3]\nconfigs = [{}]\n",
            dir.join("out").display().to_string(),
            list.join(", ")
        ),
    )
    .unwrap();
    joule(&[OsStr::new("sweep"), sweep.as_os_str()]);
    let (md, _) = reproduce(
        "sweep-report",
        &[
            OsStr::new("report"),
            dir.join("out").as_os_str(),
            OsStr::new("--against"),
            OsStr::new("paper"),
        ],
    );
    let rows = level_rows(&md);
    // Conditions the paper gives no figures for are named, not compared (the
    // memory switch read from the run's config.resolved.toml).
    assert!(md.contains("no-memory-comp ("), "{md}");
    assert!(md.contains("is not a condition the paper gives figures for (baseline or no size penalty): no memory"), "{md}");
    assert!(md.contains("jobs 2/2/2"), "{md}");
    assert!(!rows
        .iter()
        .any(|r| r[1] == "no-memory-comp" || r[1] == "scarcity-coop"));
    // Every run of a sweep cell is its own run (they share run_number 1).
    assert!(
        md.contains("`baseline-comp` (3 runs) against the paper's baseline comp"),
        "{md}"
    );
    assert!(
        md.contains("agent_5 qwen3.5:9b (answered by scripted:greedy)"),
        "{md}"
    );
    for r in &rows {
        if !r[4].starts_with("—") {
            assert!(r[4].contains("(n=3)"), "{r:?}");
        }
    }
    // Certain by the policies: greedy never donates, so "zero donations" holds.
    // The cooperative policy donates in 10.5 % of decisions, the paper's rate
    // over all agents, so agent 1 (gemma4:e4b) stays below the paper's 29%
    // (12.2 % here); with three runs that difference is not significant after
    // Holm, and the row could not have detected the paper's margin: inconclusive,
    // never consistent.
    assert_eq!(
        verdict_of(&rows, "baseline-comp", "donations / run (all agents)", "—"),
        "consistent"
    );
    assert_eq!(
        verdict_of(&rows, "baseline-coop", "DONATE share of actions", "agent_1"),
        "inconclusive"
    );
    // Scripted agents spend ~600 tokens a call whatever their size, and all
    // survive: the large agents' short lives, the paper's size effect, are not
    // produced (fixed seeds, so these are exact outcomes of these runs).
    assert_eq!(
        verdict_of(&rows, "baseline-comp", "rounds active", "agent_5"),
        "higher"
    );
    assert_eq!(
        verdict_of(&rows, "baseline-coop", "rounds active", "agent_5"),
        "higher"
    );
    for n in ["no-size-penalty-comp", "no-size-penalty-coop"] {
        for a in ["agent_1", "agent_2", "agent_3", "agent_4", "agent_5"] {
            assert_eq!(verdict_of(&rows, n, "rounds active", a), "consistent");
        }
    }
    // Greedy never attempts a hard job: that figure cannot be tested.
    assert!(verdict_of(
        &rows,
        "no-size-penalty-comp",
        "success on hard jobs",
        "agent_5"
    )
    .starts_with("not tested"));
    let effect = |id: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| `{id}`")))
            .unwrap_or_else(|| panic!("no contrast {id}: {md}"))
    };
    assert!(effect("small_vs_9b_rounds_active_comp").contains("**no clear effect**"));
    assert!(effect("small_vs_9b_rounds_active_comp").ends_with("| **lower** |"));
    assert!(
        effect("agent_5_rounds_without_vs_with_size_penalty_comp").contains("**no clear effect**")
    );
}

#[test]
fn an_every_run_claim_is_contradicted_by_one_deviating_run() {
    // The comp reference runs with agent_1 out one round early in run 2:
    // "4B agents survive all 30 rounds" no longer holds, although a mean of
    // 29.8 ± 0.4 would pass a t test against 30.
    let dir = tmp("deviating").join("comp");
    edited_copy(
        "comp_with_discussion",
        &dir,
        |k, agents| {
            if k == 2 {
                agents[0]["rounds_active"] = serde_json::json!(29);
            }
        },
        |_| {},
    );
    let (md, _) = reproduce(
        "deviating-report",
        &[
            OsStr::new("report"),
            dir.as_os_str(),
            OsStr::new("--against"),
            OsStr::new("paper"),
        ],
    );
    let rows = level_rows(&md);
    let r = rows
        .iter()
        .find(|r| r[2] == "rounds active" && r[3].starts_with("agent_1"))
        .unwrap();
    assert!(r[4].ends_with("1 of 5 runs deviate"), "{r:?}");
    assert_eq!(verdict(r), "lower", "{r:?}");
    let r2 = rows
        .iter()
        .find(|r| r[2] == "rounds active" && r[3].starts_with("agent_2"))
        .unwrap();
    assert_eq!(verdict(r2), "consistent", "{r2:?}");
}

#[test]
fn runs_of_another_set_up_are_refused_or_marked() {
    // The comp reference runs recorded as 2-round runs.
    let dir = tmp("two-rounds").join("comp");
    edited_copy(
        "comp_with_discussion",
        &dir,
        |_, _| {},
        |config| config["max_rounds"] = serde_json::json!(2),
    );
    let against = condition_dir("comp_with_discussion");
    let out = run(&[
        OsStr::new("report"),
        dir.as_os_str(),
        OsStr::new("--against"),
        against.as_os_str(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not comparable"), "{err}");
    assert!(err.contains("2 rounds (reference: 30)"), "{err}");
    assert!(err.contains("--allow-mismatch"), "{err}");
    // Against the paper: the same reason, no condition left.
    let out = run(&[
        OsStr::new("report"),
        dir.as_os_str(),
        OsStr::new("--against"),
        OsStr::new("paper"),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2 rounds (reference: 30)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With --allow-mismatch: compared, and every row says so.
    let (md, _) = reproduce(
        "two-rounds-report",
        &[
            OsStr::new("report"),
            dir.as_os_str(),
            OsStr::new("--against"),
            against.as_os_str(),
            OsStr::new("--allow-mismatch"),
        ],
    );
    let rows = level_rows(&md);
    assert!(rows.len() > 30, "{md}");
    for r in &rows {
        assert!(verdict(r).ends_with("(mismatch)"), "{r:?}");
    }
    assert!(
        md.contains("MISMATCH, compared with --allow-mismatch: 2 rounds (reference: 30)"),
        "{md}"
    );
}

#[test]
fn the_spread_of_single_published_numbers_is_the_reference_runs_sd() {
    use joule::report::reproduction::paper::{Paper, Published};
    use joule::report::reproduction::{paper_cell, side_values};
    use joule::stats::Summary;
    let paper = Paper::embedded();
    let mut checked = 0;
    for cond in ["comp_with_discussion", "coop"] {
        let mut conds = joule::report::load::discover(&[condition_dir(cond)]).unwrap();
        let r = joule::report::analyse_with(conds.remove(0), joule::report::Mode::Faithful);
        let (cell, _) = paper_cell(&r.condition).unwrap();
        for f in paper.figures.iter().filter(|f| f.cell == cell) {
            let Published::Interval { spread, .. } = f.published else {
                continue;
            };
            let spread = spread.expect("a figure of a condition with reference runs has their sd");
            let agents: Vec<String> = f.agent.iter().cloned().collect();
            let xs: Vec<f64> = side_values(&r, f.metric, &agents, joule::report::Mode::Faithful)
                .into_iter()
                .map(|(_, x)| x)
                .collect();
            let s = Summary::of(&xs);
            assert_eq!(spread.n, s.n, "{cond} {:?}", f.metric);
            assert!(
                (spread.sd - s.sd).abs() < 5e-7,
                "{cond} {} {:?}: paper.toml {} against the reference runs' {}",
                f.metric.name(),
                f.agent,
                spread.sd,
                s.sd
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 11);
}
