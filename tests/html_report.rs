//! `joule report --html` / `joule view` in a real browser: headless Chromium
//! (Debian's `chromium`; `scripts/test.sh` installs it on CI) loads each page
//! from `file://`, and the test reads the DOM Chromium dumps after the page's
//! scripts ran. The page's self-test hook (`#selftest=<query>`) searches every
//! run's calls for the query and writes what it found into `#selftest-result`.
//!
//! Checked: the summary numbers shown equal `metrics.json` (rounds active,
//! donations, collisions) for a shared reference condition; the call browser
//! finds a known text at the right (run, round, phase, agent), for a reference
//! transcript and for a known prompt line of a Joule run, with the number of
//! hits the records give; the charts, timeline and race views are drawn; no
//! console message and no script error; the comparison page shows every row of
//! `compare.csv`. A screenshot of the reference page is kept under Cargo's
//! target tmp folder (`target/tmp/html_report/coop/report.png`; the path is
//! printed). Without Chromium the page checks that need no browser
//! still run and the browser part is skipped with a note.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

fn shared(cond: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society")
        .join(cond)
        .join("exponent_0.5")
}

fn artefacts(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("html_report")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn joule(args: &[&str]) -> String {
    let out = Command::new(JOULE)
        .args(args)
        .output()
        .expect("running joule");
    assert!(
        out.status.success(),
        "joule {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The Chromium executable: `JOULE_CHROMIUM`, else `chromium`,
/// `chromium-browser` or `google-chrome` on the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("JOULE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

struct Loaded {
    dom: String,
    console: Vec<String>,
}

fn url(page: &Path, query: &str) -> String {
    let q: String = query
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!(
        "file://{}#selftest={q}",
        page.canonicalize().unwrap().display()
    )
}

fn headless(chrome: &Path, profile: &Path) -> Command {
    let mut c = Command::new(chrome);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--hide-scrollbars",
        "--virtual-time-budget=1000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Load `page` with the self-test query and dump the DOM; with `shot`, also
/// write a screenshot there.
fn load(chrome: &Path, page: &Path, query: &str, shot: Option<&Path>) -> Loaded {
    let dir = page.parent().unwrap();
    let out = headless(chrome, &dir.join("profile-dom"))
        .args(["--enable-logging=stderr", "--v=0", "--dump-dom"])
        .arg(url(page, query))
        .output()
        .expect("running chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let console = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    if let Some(shot) = shot {
        let st = headless(chrome, &dir.join("profile-shot"))
            .args(["--window-size=1280,1500"])
            .arg(format!("--screenshot={}", shot.display()))
            .arg(url(page, query))
            .output()
            .expect("running chromium");
        assert!(st.status.success() && shot.is_file(), "no screenshot");
        eprintln!("screenshot: {}", shot.display());
    }
    Loaded {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        console,
    }
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The text of the element with `id` (no nested elements).
fn text_of(dom: &str, id: &str) -> String {
    let key = format!("id=\"{id}\"");
    let at = dom
        .find(&key)
        .unwrap_or_else(|| panic!("no element with id {id}"));
    let start = at + dom[at..].find('>').unwrap() + 1;
    let end = start + dom[start..].find('<').unwrap();
    unescape(&dom[start..end])
}

fn selftest(l: &Loaded) -> Value {
    let v: Value = serde_json::from_str(&text_of(&l.dom, "selftest-result"))
        .expect("the self-test result is JSON");
    assert_eq!(v["errors"], serde_json::json!([]), "script errors: {v}");
    assert!(l.console.is_empty(), "console messages: {:?}", l.console);
    v
}

fn mean_std(v: &Value) -> String {
    match (v["mean"].as_f64(), v["std"].as_f64()) {
        (None, _) => "-".into(),
        (Some(m), None) => format!("{m:.2}"),
        (Some(m), Some(s)) => format!("{m:.2} ± {s:.2}"),
    }
}

/// A page must not reach outside itself.
fn assert_self_contained(html: &str) {
    for bad in ["src=\"http", "href=\"http", "<link", "@import", "src=\"//"] {
        assert!(!html.contains(bad), "the page references {bad}");
    }
}

#[test]
fn reference_condition_numbers_and_transcript_search() {
    let dir = artefacts("coop");
    let cond = shared("coop");
    joule(&[
        "report",
        cond.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--html",
        "--no-plots",
    ]);
    let page = dir.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("metrics.json")).unwrap()).unwrap();
    let summary = &metrics["conditions"][0]["summary"];

    // A known text: the first line of the reasoning of run_1's third vote.
    let tr: Value =
        serde_json::from_str(&std::fs::read_to_string(cond.join("run_1/transcript.json")).unwrap())
            .unwrap();
    let entry = &tr[2];
    let query: String = entry["reasoning_content"]
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.len() > 30)
        .unwrap()
        .chars()
        .take(60)
        .collect();

    let Some(chrome) = chromium() else {
        eprintln!("note: chromium not found (apt-get install chromium, or set JOULE_CHROMIUM); the browser checks are skipped");
        return;
    };
    let l = load(&chrome, &page, &query, Some(&dir.join("report.png")));
    let st = selftest(&l);
    eprintln!("page drawn {} ms after navigation start", st["ready_ms"]);
    let dom = &l.dom;
    let agents = summary["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 5);
    for a in agents {
        let id = a["agent_id"].as_str().unwrap();
        assert_eq!(
            text_of(dom, &format!("sum-0-{id}-rounds_active")),
            mean_std(&a["rounds_active"]),
            "{id} rounds active"
        );
        for (key, total) in [
            ("donations_made", "donations_made_total"),
            ("donations_received", "donations_received_total"),
        ] {
            let want = if a[key]["mean"].is_null() {
                "-".to_string()
            } else {
                format!("{} ({})", mean_std(&a[key]), a[total].as_i64().unwrap())
            };
            assert_eq!(
                text_of(dom, &format!("sum-0-{id}-{key}")),
                want,
                "{id} {key}"
            );
        }
    }
    assert_eq!(
        text_of(dom, "sum-0-collisions"),
        mean_std(&summary["collisions"])
    );
    assert_eq!(text_of(dom, "sum-0-runs"), summary["n_runs"].to_string());

    // The search found the vote, first, in the right place.
    assert!(st["hits"].as_u64().unwrap() >= 1, "{st}");
    let first = &st["first"];
    assert_eq!(first["run"], "run_1", "{st}");
    assert_eq!(first["round"], entry["round_num"], "{st}");
    assert_eq!(first["phase"], entry["phase"], "{st}");
    assert_eq!(first["agent"], entry["agent_id"], "{st}");
    assert_eq!(st["detail_has_query"], true, "{st}");
    // Five agents in the run chart; five runs and the mean in the agent chart.
    assert_eq!(st["chart_run_lines"], 5, "{st}");
    assert_eq!(st["chart_agent_lines"], 6, "{st}");
    assert_eq!(st["timeline_rows"], 30, "{st}");
}

/// One Joule run (scripted, 4 rounds) viewed with `joule view`: a known prompt
/// line is found in the call that first used it, with the right hit count.
#[test]
fn joule_run_call_browser_finds_a_known_prompt() {
    let dir = artefacts("joule-run");
    let run = dir.join("run");
    let cfg =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/energy-society/baseline-comp.toml");
    joule(&[
        "run",
        cfg.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--rounds",
        "4",
    ]);
    let printed = joule(&[
        "view",
        run.to_str().unwrap(),
        "--out",
        dir.join("view").to_str().unwrap(),
    ]);
    let page = PathBuf::from(printed.trim());
    assert!(page.ends_with("report.html") && page.is_file(), "{printed}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);

    // Every call's texts, in order, from the recorded events.
    let events = joule::energy_society::recorder::read_events(run.join("events.jsonl")).unwrap();
    struct C {
        round: u64,
        phase: String,
        agent: String,
        prompt: String,
        other: String,
    }
    let mut calls = Vec::new();
    for e in events.iter().filter(|e| e["event"] == "invocation") {
        for c in e["calls"].as_array().unwrap() {
            let prompt: Vec<&str> = c["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["content"].as_str().unwrap())
                .collect();
            calls.push(C {
                round: e["round"].as_u64().unwrap(),
                phase: e["phase"].as_str().unwrap().into(),
                agent: e["agent"].as_str().unwrap().into(),
                prompt: prompt.join("\n"),
                other: format!(
                    "{}\n{}",
                    c["text"].as_str().unwrap_or(""),
                    c["thinking"].as_str().unwrap_or("")
                ),
            });
        }
    }
    // A prompt line of round 3's decision of agent_2 that no earlier call holds.
    let target = calls
        .iter()
        .position(|c| c.round == 3 && c.phase == "decide" && c.agent == "agent_2")
        .expect("the round-3 decision of agent_2");
    let query = calls[target]
        .prompt
        .lines()
        .filter(|l| {
            l.len() > 20
                && !calls[target]
                    .other
                    .to_lowercase()
                    .contains(&l.to_lowercase())
        })
        .find(|l| {
            let q = l.to_lowercase();
            calls[..target].iter().all(|c| {
                !c.prompt.to_lowercase().contains(&q) && !c.other.to_lowercase().contains(&q)
            })
        })
        .expect("a prompt line new in that call")
        .to_string();
    let q = query.to_lowercase();
    let want_hits = calls
        .iter()
        .filter(|c| c.prompt.to_lowercase().contains(&q) || c.other.to_lowercase().contains(&q))
        .count();

    let Some(chrome) = chromium() else {
        eprintln!("note: chromium not found (apt-get install chromium, or set JOULE_CHROMIUM); the browser checks are skipped");
        return;
    };
    let l = load(&chrome, &page, &query, None);
    let st = selftest(&l);
    assert_eq!(st["hits"].as_u64().unwrap() as usize, want_hits, "{st}");
    let first = &st["first"];
    assert_eq!(first["round"], 3, "{st}");
    assert_eq!(first["phase"], "decide", "{st}");
    assert_eq!(first["agent"], "agent_2", "{st}");
    assert_eq!(first["where"], "prompt", "{st}");
    assert_eq!(st["detail_has_query"], true, "{st}");
    assert!(st["marks"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(st["chart_run_lines"], 5, "{st}");
    assert_eq!(st["timeline_rows"], 4, "{st}");
}

/// `--compare A B`: one page with both summaries and every comparison row.
#[test]
fn compare_page_shows_every_row() {
    let dir = artefacts("compare");
    joule(&[
        "report",
        "--compare",
        shared("coop").to_str().unwrap(),
        shared("comp_with_discussion").to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--html",
        "--no-plots",
    ]);
    let page = dir.join("report.html");
    let rows = std::fs::read_to_string(dir.join("compare.csv"))
        .unwrap()
        .lines()
        .count()
        - 1;
    let Some(chrome) = chromium() else {
        eprintln!("note: chromium not found; the browser checks are skipped");
        return;
    };
    let l = load(&chrome, &page, "agent_3", None);
    let st = selftest(&l);
    let table_at = l
        .dom
        .find("id=\"compare-table\"")
        .expect("the comparison table");
    let table = &l.dom[table_at..table_at + l.dom[table_at..].find("</table>").unwrap()];
    assert_eq!(table.matches("<tr>").count(), rows + 1, "header + rows");
    assert!(l.dom.contains("id=\"sum-1-agent_1-rounds_active\""));
    assert!(st["hits"].as_u64().unwrap() > 0, "{st}");
    assert!(l.dom.contains("id=\"chart-compare\""));
    assert!(
        l.dom[l.dom.find("id=\"chart-compare\"").unwrap()..].contains("path class=\"series\"")
            || l.dom.contains("class=\"series\""),
        "the comparison chart is drawn"
    );
}

/// A scripted race run: rate charts with intervals and a race's trajectory.
#[test]
fn race_page_draws_rates_and_trajectories() {
    let dir = artefacts("race");
    let runs = dir.join("runs");
    let cfg = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/ai-race/baseline-scripted.toml");
    joule(&[
        "race",
        "run",
        cfg.to_str().unwrap(),
        "--out",
        runs.to_str().unwrap(),
    ]);
    joule(&[
        "race",
        "report",
        runs.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--html",
    ]);
    let page = dir.join("report.html");
    assert_self_contained(&std::fs::read_to_string(&page).unwrap());
    // The first p_max row of unsafe_rates.csv, as the table shows it.
    let csv = std::fs::read_to_string(dir.join("unsafe_rates.csv")).unwrap();
    let row: Vec<&str> = csv
        .lines()
        .find(|l| l.starts_with("by_pmax,"))
        .unwrap()
        .split(',')
        .collect();
    let rate: f64 = row[5].parse().unwrap();
    let Some(chrome) = chromium() else {
        eprintln!("note: chromium not found; the browser checks are skipped");
        return;
    };
    let l = load(&chrome, &page, "", None);
    let st = selftest(&l);
    assert_eq!(st["rate_charts"], 2, "{st}");
    assert!(st["races"].as_u64().unwrap() > 0, "{st}");
    assert!(st["race_lines"].as_u64().unwrap() >= 2, "{st}");
    assert!(st["turn_rows"].as_u64().unwrap() > 0, "{st}");
    let table_at = l.dom.find("id=\"rates-0\"").unwrap();
    assert!(
        l.dom[table_at..].contains(&format!("{:.1}%", 100.0 * rate)),
        "the p_max table shows {rate}"
    );
}
