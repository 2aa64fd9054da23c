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
//! `compare.csv`; every energy line of every reference run ends in the round
//! after the agent's last record (no line through rounds without one) and the
//! tooltip calls the agent inactive there; the timeline links only rounds with
//! calls, naming how many; a one-run page is titled after the run; and at a
//! phone's width (390 px, the page in an iframe: headless windows are at least
//! 500 px wide) and at 1280 px, what a navigation link jumps to is below the
//! header and no two x-axis labels overlap. Screenshots are kept under Cargo's
//! target tmp folder (`target/tmp/html_report/coop/report.png`,
//! `target/tmp/html_report/phone/report-390.png`; the paths are printed).
//! Without Chromium the page checks that need no browser still run and the
//! browser part is skipped with a note.

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
    load_sized(chrome, page, query, shot, (1280, 1500))
}

/// [`load`] with the page in a `size.0` × `size.1` viewport: headless
/// Chromium's windows are at least 500 pixels wide, so the page is loaded in
/// an iframe of that size inside a wrapper page that copies the self-test's
/// result out (file pages may read each other with
/// `--allow-file-access-from-files`). The screenshot is cropped to the frame.
fn load_in_frame(chrome: &Path, page: &Path, query: &str, shot: &Path, size: (u32, u32)) -> Loaded {
    let dir = page.parent().unwrap();
    let frame_url = url(page, query);
    let wrapper = dir.join(format!("frame-{}.html", size.0));
    std::fs::write(
        &wrapper,
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"></head><body style=\"margin:0\">\
             <iframe id=\"f\" src=\"{frame_url}\" style=\"width:{w}px;height:{h}px;border:0;display:block\"></iframe>\
             <pre id=\"selftest-result\"></pre><script>\
             var f = document.getElementById('f'), out = document.getElementById('selftest-result');\
             function poll() {{ try {{ var r = f.contentDocument && f.contentDocument.getElementById('selftest-result');\
             if (r && r.textContent) {{ out.textContent = r.textContent; return; }} }}\
             catch (e) {{ out.textContent = JSON.stringify({{ errors: ['wrapper: ' + e] }}); return; }}\
             setTimeout(poll, 50); }} poll();</script></body></html>",
            w = size.0,
            h = size.1
        ),
    )
    .unwrap();
    let wrapper_url = format!("file://{}", wrapper.canonicalize().unwrap().display());
    let window = format!("--window-size={},{}", size.0.max(500), size.1 + 40);
    let run = |profile: &str, extra: &[String]| {
        let out = headless(chrome, &dir.join(profile))
            .args([
                "--allow-file-access-from-files",
                "--virtual-time-budget=3000",
            ])
            .arg(&window)
            .args(extra)
            .arg(&wrapper_url)
            .output()
            .expect("running chromium");
        assert!(
            out.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let out = run(
        "profile-frame-dom",
        &[
            "--enable-logging=stderr".into(),
            "--v=0".into(),
            "--dump-dom".into(),
        ],
    );
    let console = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    let full = dir.join(format!("frame-{}-window.png", size.0));
    run(
        "profile-frame-shot",
        &[format!("--screenshot={}", full.display())],
    );
    let img = image::open(&full).expect("the screenshot").to_rgb8();
    let (w, h) = (size.0.min(img.width()), size.1.min(img.height()));
    image::imageops::crop_imm(&img, 0, 0, w, h)
        .to_image()
        .save(shot)
        .unwrap();
    eprintln!("screenshot: {}", shot.display());
    Loaded {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        console,
    }
}

/// [`load`] in a window of `size` (width, height in CSS pixels; Chromium
/// makes it at least 500 wide).
fn load_sized(
    chrome: &Path,
    page: &Path,
    query: &str,
    shot: Option<&Path>,
    size: (u32, u32),
) -> Loaded {
    let dir = page.parent().unwrap();
    let window = format!("--window-size={},{}", size.0, size.1);
    let out = headless(chrome, &dir.join("profile-dom"))
        .args(["--enable-logging=stderr", "--v=0", "--dump-dom"])
        .arg(&window)
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
            .arg(&window)
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
    energy_lines_end_at_deactivation(&cond, &st);
    timeline_links_only_to_calls(&cond, &st);
    targets_clear_of_the_header(&st, 1500.0);
}

/// The recorded rounds of each agent of a reference run: (agent, rounds with
/// a recorded energy, last recorded round, deactivation round).
fn recorded_rounds(run: &Path) -> Vec<(String, Vec<u64>, u64, Option<u64>)> {
    let agents: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("agents.json")).unwrap()).unwrap();
    agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let mem = a["memory"].as_array().unwrap();
            let with_e: Vec<u64> = mem
                .iter()
                .filter(|m| m["energy_at_start_of_round"].is_number())
                .map(|m| m["round_num"].as_u64().unwrap())
                .collect();
            let last = mem
                .iter()
                .map(|m| m["round_num"].as_u64().unwrap())
                .max()
                .unwrap_or(0);
            (
                a["agent_id"].as_str().unwrap().to_string(),
                with_e,
                last,
                a["deactivated_at_round"].as_u64(),
            )
        })
        .collect()
}

/// Every energy line of every run: not drawn through rounds without a record
/// (one piece per run of consecutive rounds), ending in the round after the
/// agent's last record when it has none in the last rounds (run_4's agent_1,
/// deactivated in round 12, ends there and not at the end of the run), and
/// the tooltip at round 30 lists every agent, the inactive ones as such.
fn energy_lines_end_at_deactivation(cond: &Path, st: &Value) {
    let runs = st["energy"].as_array().expect("the energy self-test");
    assert_eq!(runs.len(), 5, "{st}");
    let mut ended = 0;
    for r in runs {
        let id = r["run"].as_str().unwrap();
        let rec = recorded_rounds(&cond.join(id));
        let lines = r["lines"].as_array().unwrap();
        assert_eq!(lines.len(), rec.len(), "{id}: {r}");
        let tip: Vec<&str> = r["tip"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(
            tip.len(),
            1 + rec.len(),
            "{id}: one tooltip line per agent: {tip:?}"
        );
        for (agent, with_e, last, deact) in &rec {
            let l = lines
                .iter()
                .find(|l| l["agent"] == agent.as_str())
                .unwrap_or_else(|| panic!("{id}: no line of {agent}"));
            let gaps = with_e.windows(2).filter(|w| w[1] != w[0] + 1).count();
            assert_eq!(l["pieces"], 1 + gaps as u64, "{id} {agent}: {l}");
            let t = tip
                .iter()
                .find(|t| t.starts_with(&format!("{agent}:")))
                .unwrap_or_else(|| panic!("{id}: {agent} not in the tooltip {tip:?}"));
            if *last < 30 {
                ended += 1;
                assert_eq!(l["last_x"], last + 1, "{id} {agent}: {l}");
                assert!(t.contains("inactive"), "{id} {agent}: {t}");
                if *deact == Some(last + 1) {
                    assert_eq!(l["last_x"].as_u64(), *deact, "{id} {agent}");
                }
            } else {
                assert_eq!(l["last_x"], 31, "{id} {agent}: {l}");
                assert!(!t.contains("inactive"), "{id} {agent}: {t}");
            }
        }
    }
    assert!(
        ended >= 5,
        "only {ended} agents went inactive before the end"
    );
    let run4 = runs.iter().find(|r| r["run"] == "run_4").unwrap();
    let a1 = run4["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["agent"] == "agent_1")
        .unwrap();
    assert_eq!(
        a1["last_x"], 12,
        "run_4's agent_1 deactivated in round 12: {a1}"
    );
}

/// The timeline of run_1 links a cell to its calls only when it has some,
/// and says how many: as many as the run's transcript holds for that agent
/// and round. Its inactive rounds (memory records without a call) have no link.
fn timeline_links_only_to_calls(cond: &Path, st: &Value) {
    let t = &st["timeline_links"];
    let links = t["links"].as_array().expect("the timeline self-test");
    for l in links {
        let n = l["calls"].as_u64().unwrap();
        assert!(n > 0, "a link to no calls: {l}");
        let want = format!("{n} call{}", if n == 1 { "" } else { "s" });
        assert_eq!(l["text"], want.as_str(), "{l}");
    }
    let run = cond.join("run_1");
    let tr: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("transcript.json")).unwrap())
            .unwrap();
    let agents: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("agents.json")).unwrap()).unwrap();
    let mut cells = std::collections::BTreeSet::new();
    let mut with_calls = std::collections::BTreeSet::new();
    for a in agents.as_array().unwrap() {
        for m in a["memory"].as_array().unwrap() {
            cells.insert((
                a["agent_id"].as_str().unwrap(),
                m["round_num"].as_u64().unwrap(),
            ));
        }
    }
    for e in tr.as_array().unwrap() {
        let k = (
            e["agent_id"].as_str().unwrap(),
            e["round_num"].as_u64().unwrap(),
        );
        if cells.contains(&k) {
            with_calls.insert(k);
        }
    }
    assert!(
        with_calls.len() < cells.len(),
        "run_1 has no recorded round without calls to check"
    );
    assert_eq!(links.len(), with_calls.len(), "{t}");
}

/// Each section a navigation link jumps to shows its heading and its first
/// controls below the header and inside a `height`-pixel window, and no two
/// x-axis labels of a chart overlap.
fn targets_clear_of_the_header(st: &Value, height: f64) {
    let lay = &st["layout"];
    let targets = lay["targets"].as_array().expect("the layout self-test");
    assert!(targets.len() >= 2, "{lay}");
    for t in targets {
        assert!(t["missing"].is_null(), "a link to nothing: {t}");
        let hb = t["header_bottom"].as_f64().unwrap();
        let h = t["heading_top"].as_f64().unwrap();
        assert!(h >= hb - 0.5 && h < height, "heading hidden: {t}");
        if let Some(c) = t["controls_top"].as_f64() {
            assert!(c >= hb - 0.5 && c < height, "controls hidden: {t}");
        }
    }
    assert!(lay["x_labels"].as_u64().unwrap() > 0, "{lay}");
    assert_eq!(lay["x_label_overlaps"], 0, "{lay}");
}

/// At a phone's width (390 px) the page keeps what a link jumps to clear of
/// the header and its x-axis labels apart; a screenshot is kept under the
/// test's temporary folder (`target/tmp/html_report/phone/report-390.png`).
#[test]
fn phone_width_keeps_link_targets_and_axis_labels_clear() {
    let dir = artefacts("phone");
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
    let Some(chrome) = chromium() else {
        eprintln!("note: chromium not found; the browser checks are skipped");
        return;
    };
    let shot = dir.join("report-390.png");
    let l = load_in_frame(&chrome, &page, "agent_3", &shot, (390, 844));
    let st = selftest(&l);
    assert_eq!(st["layout"]["width"], 390, "{st}");
    targets_clear_of_the_header(&st, 844.0);
    fits_the_width(&st, 390);
    energy_lines_end_at_deactivation(&cond, &st);
    let img = image::open(&shot).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (390, 844));
    let non_white = img.pixels().filter(|p| p.0 != [255, 255, 255]).count();
    assert!(non_white > 5_000, "the screenshot is nearly blank");
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
    // A page of one run is named after the run, not its parent folder.
    assert!(
        html.contains("<title>Energy Society: run (joule-run)</title>"),
        "{}",
        &html[..html.find("</title>").map_or(0, |i| i + 8).min(html.len())]
    );

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

    // The run's provenance has its section, and its tables do not widen a phone's page.
    let build = joule::provenance::Build::this().label();
    assert!(
        html.contains("<h2 id=\"h-provenance\">Provenance</h2>")
            && html.contains(&format!("<td>{build}</td>")),
        "no provenance section naming {build}"
    );
    let shot = dir.join("view-390.png");
    let l = load_in_frame(&chrome, &page, "", &shot, (390, 844));
    fits_the_width(&selftest(&l), 390);
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
    // The report in a folder of its own (`race report --out` refuses one holding the runs).
    let report = dir.join("report");
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
        report.to_str().unwrap(),
        "--html",
    ]);
    let page = report.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);
    // The experiment's provenance closes the page (its width is checked at 390 px below).
    assert!(
        html.contains("<h2 id=\"h-provenance\">Provenance</h2>")
            && html.contains("1 of 1 experiments record it"),
        "no provenance section"
    );
    // The first p_max row of unsafe_rates.csv, as the table shows it.
    let csv = std::fs::read_to_string(report.join("unsafe_rates.csv")).unwrap();
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
    targets_clear_of_the_header(&st, 1500.0);
    // At a phone's width too.
    let l = load_in_frame(&chrome, &page, "", &dir.join("report-390.png"), (390, 844));
    let st = selftest(&l);
    assert_eq!(st["layout"]["width"], 390, "{st}");
    targets_clear_of_the_header(&st, 844.0);
    fits_the_width(&st, 390);
}

/// The page is no wider than the screen (nothing to scroll sideways but the
/// tables' own scrollers) and no chart text (title, bar label, value) is cut
/// by its chart's edge.
fn fits_the_width(st: &Value, width: u64) {
    let lay = &st["layout"];
    assert_eq!(
        lay["page_width"].as_u64(),
        Some(width),
        "the page is wider than the screen: {lay}"
    );
    assert_eq!(
        lay["clipped_texts"],
        serde_json::json!([]),
        "chart texts cut: {lay}"
    );
}
