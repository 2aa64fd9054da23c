//! `joule report` end to end on the shared reference runs: the markdown table,
//! the plots (SVG text and PNG pixels) and `--compare`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn condition_dir(cond: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society")
        .join(cond)
        .join("exponent_0.5")
}

fn joule(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(args)
        .output()
        .expect("running joule");
    assert!(
        out.status.success(),
        "joule failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

const MODELS: [&str; 5] = [
    "gemma4:e4b",
    "nemotron-3-nano:4b",
    "qwen3.5:4b",
    "qwen3:8b",
    "qwen3.5:9b",
];

/// The markdown row of an agent, split into cells.
fn row<'a>(md: &'a str, agent: &str) -> Vec<&'a str> {
    let line = md
        .lines()
        .find(|l| l.starts_with(&format!("| {agent} |")))
        .unwrap_or_else(|| panic!("no row for {agent}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

#[test]
fn report_of_one_condition_has_the_table_and_plots() {
    let out = tempfile::tempdir().unwrap();
    let stdout = joule(&[
        "report".as_ref(),
        condition_dir("comp_with_discussion").as_os_str(),
        "--out".as_ref(),
        out.path().as_os_str(),
    ]);
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    // The same table is printed to the terminal, split into parts that fit
    // 120 columns (every cell kept), with a line naming the full one's file.
    for cell in row(&md, "agent_4") {
        assert!(stdout.contains(cell), "{cell} in:\n{stdout}");
    }
    for l in stdout.lines().filter(|l| !l.starts_with("wrote ")) {
        assert!(l.chars().count() <= 120, "{l}");
    }
    assert!(stdout.contains("the full tables are in"), "{stdout}");
    assert!(md.contains("## Condition `comp_with_discussion/exponent_0.5`"));
    assert!(md.contains("seeds 12345, 19284, 47309, 98765, 42"));
    assert!(md.contains("Collisions per run: 12.80 ± 3.90 (range 9–19)"));
    let a4 = row(&md, "agent_4");
    assert_eq!(a4[1], "qwen3:8b");
    assert_eq!(a4[2], "8");
    assert_eq!(a4[3], "14.00 ± 9.46");
    assert_eq!(a4[4], "0.55 ± 0.29"); // gained/spent 0.5521794745667786 ± 0.29465409957109084
    assert_eq!(a4[5], "-"); // no donations in comp
    let a1 = row(&md, "agent_1");
    assert_eq!(a1[3], "30.00 ± 0.00");
    assert_eq!(a1[4], "1.39 ± 0.43");
    // success by difficulty: easy 0.95 ± 0.09999999999999998 (4 runs), hard 0.1866… ± 0.0727…
    assert_eq!(a1[7], "95.0% ± 10.0%");
    assert_eq!(a1[9], "18.7% ± 7.3%");
    assert!(out.path().join("aggregate/rounds_active.csv").is_file());

    // metrics.json carries the same numbers.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("metrics.json")).unwrap())
            .unwrap();
    let c = &json["conditions"][0];
    assert_eq!(
        c["summary"]["agents"][3]["rounds_active"]["std"],
        9.460443964212251
    );
    assert_eq!(c["aggregates"]["average_collisions"][0]["mean"], 12.8);
    assert_eq!(
        c["aggregates"]["energy_over_time"]
            .as_array()
            .unwrap()
            .len(),
        155
    );

    // SVG: titles, axis labels and every model name.
    let svg = std::fs::read_to_string(out.path().join("plots/energy_over_time.svg")).unwrap();
    assert!(svg.contains("Energy over time — comp_with_discussion/exponent_0.5"));
    assert!(svg.contains("Round (round 31 = final energy)"));
    assert!(svg.contains("Energy at round start (mean ± std over runs)"));
    energy_plot_matches_the_page(out.path(), &svg);
    for m in MODELS {
        assert!(svg.contains(m), "energy plot lacks {m}");
    }
    for (name, title) in [
        ("action_frequency", "Action frequency — "),
        ("difficulty", "Success rate by difficulty — "),
        ("donations", "Donations per run (all runs) — "),
    ] {
        let svg = std::fs::read_to_string(out.path().join(format!("plots/{name}.svg"))).unwrap();
        assert!(svg.contains(title), "{name}.svg lacks its title");
        assert!(
            svg.contains("Agent (model)"),
            "{name}.svg lacks its x label"
        );
        for m in MODELS {
            assert!(svg.contains(m), "{name}.svg lacks {m}");
        }
    }
    // PNG: size as drawn and real content (many non-white pixels, several colours).
    let img = image::open(out.path().join("plots/energy_over_time.png"))
        .unwrap()
        .to_rgb8();
    assert_eq!(img.dimensions(), (1000, 520));
    let non_white = img.pixels().filter(|p| p.0 != [255, 255, 255]).count();
    assert!(non_white > 20_000, "only {non_white} non-white pixels");
    let mut colours: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    colours.sort();
    colours.dedup();
    assert!(colours.len() > 20, "only {} colours", colours.len());
}

/// The HTML page's series colours (`COLORS` in page.js), as `#RRGGBB`.
fn page_colours() -> Vec<String> {
    let js = include_str!("../../src/report/html/page.js");
    let at = js.find("var COLORS = [").expect("COLORS in page.js");
    let list = &js[at..at + js[at..].find(']').unwrap()];
    list.split('\'')
        .filter(|s| s.starts_with('#'))
        .map(|s| s.to_uppercase())
        .collect()
}

/// `attr="…"` of an SVG tag.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    Some(&tag[at..at + tag[at..].find('"')?])
}

fn points(tag: &str) -> Vec<(f64, f64)> {
    attr(tag, "points")
        .unwrap()
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// The energy plot as the page draws it: agent k in the page's k-th colour
/// (SVG lines and PNG pixels), the band ± one standard deviation over runs
/// (not ± SEM), the x axis labelled with whole rounds only.
fn energy_plot_matches_the_page(out: &Path, svg: &str) {
    let colours = page_colours();
    assert_eq!(colours.len(), 10, "{colours:?}");
    let tags: Vec<&str> = svg.split('<').collect();
    // Agent 1's line is solid (one polyline), the others dashed (one polyline
    // per dash): the pieces in drawing order, one run of a colour per agent.
    let pieces: Vec<&str> = tags
        .iter()
        .copied()
        .filter(|t| t.starts_with("polyline") && attr(t, "stroke-width") == Some("2"))
        .collect();
    let mut lines: Vec<&str> = Vec::new();
    for p in &pieces {
        if lines.last().map(|l| attr(l, "stroke")) != Some(attr(p, "stroke")) {
            lines.push(p);
        }
    }
    assert_eq!(
        pieces
            .iter()
            .filter(|p| attr(p, "stroke") == attr(lines[0], "stroke"))
            .count(),
        1,
        "agent 1's line is solid"
    );
    let bands: Vec<&str> = tags
        .iter()
        .copied()
        .filter(|t| t.starts_with("polygon") && attr(t, "opacity") == Some("0.12"))
        .collect();
    assert_eq!(lines.len(), 5, "one line per agent");
    assert_eq!(bands.len(), 5, "one band per agent");
    for (k, (l, b)) in lines.iter().zip(&bands).enumerate() {
        assert_eq!(
            attr(l, "stroke"),
            Some(colours[k].as_str()),
            "agent {k}'s line"
        );
        assert_eq!(
            attr(b, "fill"),
            Some(colours[k].as_str()),
            "agent {k}'s band"
        );
    }
    let img = image::open(out.join("plots/energy_over_time.png"))
        .unwrap()
        .to_rgb8();
    for c in &colours[..5] {
        let rgb: Vec<u8> = (0..3)
            .map(|i| u8::from_str_radix(&c[1 + 2 * i..3 + 2 * i], 16).unwrap())
            .collect();
        let n = img.pixels().filter(|p| p.0[..] == rgb[..]).count();
        assert!(n > 20, "{c}: {n} pixels in the PNG");
    }
    // agent_1's mean and std per round from the aggregate table the plot draws.
    let csv = std::fs::read_to_string(out.join("aggregate/energy_over_time.csv")).unwrap();
    let mut rows = csv.lines();
    let head: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (ca, cr, cm, cs) = (
        col("agent_id"),
        col("round_num"),
        col("avg_energy"),
        col("std_energy"),
    );
    let mut a1: Vec<(f64, f64, f64)> = rows
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[ca] == "agent_1")
        .map(|f| {
            (
                f[cr].parse().unwrap(),
                f[cm].parse().unwrap(),
                f[cs].parse().unwrap_or(0.0),
            )
        })
        .collect();
    a1.sort_by(|p, q| p.0.total_cmp(&q.0));
    let line = points(lines[0]);
    let band = points(bands[0]);
    assert_eq!(line.len(), a1.len());
    assert_eq!(band.len(), 2 * a1.len());
    // Pixels per unit of energy, from the two most distant means.
    let (lo, hi) = (
        (0..a1.len())
            .min_by(|&i, &j| a1[i].1.total_cmp(&a1[j].1))
            .unwrap(),
        (0..a1.len())
            .max_by(|&i, &j| a1[i].1.total_cmp(&a1[j].1))
            .unwrap(),
    );
    let scale = (line[lo].1 - line[hi].1) / (a1[hi].1 - a1[lo].1);
    assert!(scale > 0.0);
    let k = (0..a1.len())
        .filter(|&i| a1[i].1 - a1[i].2 > 0.0)
        .max_by(|&i, &j| a1[i].2.total_cmp(&a1[j].2))
        .unwrap();
    let sd = a1[k].2;
    let up = (line[k].1 - band[k].1) / scale;
    let down = (band[2 * a1.len() - 1 - k].1 - line[k].1) / scale;
    let tol = 2.0 / scale + 0.02 * sd;
    assert!(
        (up - sd).abs() < tol && (down - sd).abs() < tol,
        "round {}: band +{up:.1} / -{down:.1}, std {sd:.1} (SEM would be {:.1})",
        a1[k].0,
        sd / 5f64.sqrt()
    );
    // Whole rounds on the x axis: no label with a fraction.
    for t in tags.iter().filter(|t| t.starts_with("text")) {
        let text = t.split_once('>').map_or("", |(_, x)| x.trim());
        if let Ok(v) = text.parse::<f64>() {
            let is_x = attr(t, "y")
                .and_then(|y| y.parse::<f64>().ok())
                .is_some_and(|y| y > 470.0);
            if is_x {
                assert!(!text.contains('.'), "x label {text}");
                assert_eq!(v, v.round());
            }
        }
    }
}

#[test]
fn compare_gives_differences_b_minus_a() {
    let out = tempfile::tempdir().unwrap();
    joule(&[
        "report".as_ref(),
        "--compare".as_ref(),
        condition_dir("comp_with_discussion").as_os_str(),
        condition_dir("coop").as_os_str(),
        "--out".as_ref(),
        out.path().as_os_str(),
        "--no-plots".as_ref(),
    ]);
    let csv = std::fs::read_to_string(out.path().join("compare.csv")).unwrap();
    // agent_4 rounds active: coop 19.2 − comp 14.0.
    assert!(csv.contains("agent_4,qwen3:8b,rounds_active,14.0,9.460443964212251,19.2,2.588435821108957,5.199999999999999\n"));
    // collisions per run: coop 8.6 − comp 12.8.
    assert!(csv.contains("all,-,collisions_per_run,12.8,3.8987177379235853,8.6,2.3021728866442674,-4.200000000000001\n"));
    let md = std::fs::read_to_string(out.path().join("compare.md")).unwrap();
    assert!(
        md.contains("| agent_4 | qwen3:8b | rounds_active | 14.00 ± 9.46 | 19.20 ± 2.59 | +5.20 |")
    );
    // Both conditions' aggregates are written.
    assert!(out
        .path()
        .join("comp_with_discussion_exponent_0.5/aggregate/rounds_active.csv")
        .is_file());
    assert!(out
        .path()
        .join("coop_exponent_0.5/aggregate/donations_made.csv")
        .is_file());
}
