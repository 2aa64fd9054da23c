//! The HTML page of AI-race runs (`joule race report --html`, `joule view`
//! on a race folder): the Unsafe-rate tables of `race::report` (the same rows
//! as `report.md` and `unsafe_rates.csv`, from `rate_tables`) with their 95%
//! Wilson intervals drawn as interval charts, and every race's trajectory:
//! progress per player over the rounds, and each turn's action, position,
//! reasoning, raw response and prompt (prompts as line ids into the page's
//! line table).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::data::LineTable;
use super::{esc, page, script_json};
use crate::race::analysis::runs::load;
use crate::race::report::{rate_tables, RateRow};

const TITLES: [&str; 6] = [
    "Unsafe rate by p_max",
    "Unsafe rate by number of players",
    "Unsafe rate by position (Leader = top or tied for top, Trailer = strictly last)",
    "Unsafe rate by persona band and position",
    "Unsafe rate by lineup, N and p_max",
    "Unsafe rate by model, persona band and position",
];

#[derive(Serialize)]
struct TableData<'a> {
    title: &'static str,
    /// Drawn as an interval chart (the p_max and position tables).
    chart: bool,
    rows: &'a [RateRow],
}

#[derive(Serialize)]
struct Turn {
    r: u32,
    /// Seat index.
    p: usize,
    a: &'static str,
    u: bool,
    pos: &'static str,
    after: f64,
    pf: bool,
    reason: String,
    raw: String,
    prompt: Vec<i64>,
}

#[derive(Serialize)]
struct RaceData {
    game_id: String,
    lineup: String,
    models: Vec<String>,
    players: Vec<String>,
    p_max: f64,
    persona: String,
    result: String,
    contaminated: bool,
    turns: Vec<Turn>,
}

#[derive(Serialize)]
struct PageData<'a> {
    kind: &'static str,
    tables: Vec<TableData<'a>>,
    races: Vec<RaceData>,
}

fn rate_table_html(i: usize, title: &str, rows: &[RateRow]) -> String {
    let mut out = format!("<h3>{}</h3>", esc(title));
    let Some(first) = rows.first() else {
        return out + "<p>(no decisions)</p>";
    };
    let _ = write!(
        out,
        "<div class=\"scroll\"><table id=\"rates-{i}\"><thead><tr>"
    );
    for (k, _) in &first.group {
        let _ = write!(out, "<th scope=\"col\">{}</th>", esc(k));
    }
    out.push_str("<th scope=\"col\">races</th><th scope=\"col\">n</th><th scope=\"col\">Unsafe</th><th scope=\"col\">95% CI</th><th scope=\"col\">parse failures</th><th scope=\"col\">contaminated races</th></tr></thead><tbody>");
    for r in rows {
        out.push_str("<tr>");
        for (_, v) in &r.group {
            let _ = write!(out, "<th scope=\"row\">{}</th>", esc(v));
        }
        let mark = if r.decisions < 20 { "†" } else { "" };
        let _ = write!(
            out,
            "<td class=\"num\">{}</td><td class=\"num\">{}{mark}</td><td class=\"num\">{:.1}%</td><td class=\"num\">{:.1}–{:.1}%</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            r.races,
            r.decisions,
            100.0 * r.unsafe_rate,
            100.0 * r.ci_low,
            100.0 * r.ci_high,
            r.parse_failures,
            r.contaminated_races
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

/// The page of the race runs in `dirs`.
pub fn race_page(dirs: &[PathBuf]) -> anyhow::Result<String> {
    let data = load(dirs)?;
    let tables = rate_tables(&data);
    let mut lines = LineTable::default();
    let mut by_game: BTreeMap<&str, Vec<&crate::race::scenario::TurnRecord>> = BTreeMap::new();
    for t in &data.turns {
        by_game.entry(t.game_id.as_str()).or_default().push(t);
    }
    let mut races = Vec::new();
    for r in &data.races {
        let mut turns = by_game.get(r.game_id.as_str()).cloned().unwrap_or_default();
        turns.sort_by_key(|t| (t.round, t.player_index));
        let mut players: Vec<String> = Vec::new();
        for t in &turns {
            if players.len() <= t.player_index {
                players.resize(t.player_index + 1, String::new());
            }
            players[t.player_index] = t.player.clone();
        }
        let res = &r.result;
        let result = match (res.winner, res.tie) {
            (Some(w), _) => format!(
                "winner {} after {} rounds",
                players
                    .get(w)
                    .cloned()
                    .unwrap_or_else(|| format!("seat {w}")),
                res.n_rounds
            ),
            (None, true) => format!("tie after {} rounds", res.n_rounds),
            (None, false) => format!("no winner after {} rounds", res.n_rounds),
        } + if res.stop_forced { ", stop forced" } else { "" };
        races.push(RaceData {
            game_id: r.game_id.clone(),
            lineup: r.lineup.clone(),
            models: r.models.clone(),
            players,
            p_max: r.max_private_risk,
            persona: r.persona_condition.clone(),
            result,
            contaminated: r.any_parse_failure,
            turns: turns
                .iter()
                .map(|t| Turn {
                    r: t.round,
                    p: t.player_index,
                    a: t.action.label(),
                    u: t.unsafe_,
                    pos: match t.position {
                        crate::race::scenario::Position::Leader => "Leader",
                        crate::race::scenario::Position::Middle => "Middle",
                        crate::race::scenario::Position::Trailer => "Trailer",
                    },
                    after: t.own_progress_after,
                    pf: t.parse_failed,
                    reason: t.reasoning.clone(),
                    raw: t.raw_response.clone(),
                    prompt: lines.intern(&t.prompt),
                })
                .collect(),
        });
    }
    let n_races = data.races.len();
    let bad = data.races.iter().filter(|r| r.any_parse_failure).count();
    let mut body = format!(
        "<section id=\"rates\" aria-labelledby=\"h-rates\"><h2 id=\"h-rates\">Unsafe rates</h2>\
         <p>Runs: {}. {} races, {} decisions; {} races contaminated by a final parse failure (excluded from rates). \
         Rates are over uncontaminated races; † marks cells with n &lt; 20.</p><div id=\"rate-charts\"></div>",
        esc(&dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")),
        n_races,
        data.turns.len(),
        bad
    );
    for (i, (title, rows)) in TITLES.iter().zip(&tables).enumerate() {
        body.push_str(&rate_table_html(i, title, rows));
    }
    body.push_str(
        "</section>\n<section id=\"races\" aria-labelledby=\"h-races\"><h2 id=\"h-races\">Races</h2>\
         <div class=\"controls\"><label>Filter <input type=\"search\" id=\"race-filter\" placeholder=\"game id, lineup, p_max, persona\"></label>\
         <label>Race <select id=\"race-pick\"></select></label></div>\
         <div id=\"race-chart\" class=\"chart\"></div><div id=\"race-turns\" class=\"scroll\"></div></section>\n",
    );
    // What played the races (`crate::provenance`), one record per experiment folder.
    let origins = crate::provenance::summary::read_folders(dirs);
    let wording = crate::provenance::summary::EXPERIMENTS;
    let provenance = super::provenance_html(
        crate::provenance::summary::overview(&origins, wording),
        &crate::provenance::summary::warnings(&origins, wording),
    );
    let mut nav = vec![("rates", "Unsafe rates"), ("races", "Races")];
    if !provenance.is_empty() {
        body.push_str(&provenance);
        nav.push(("provenance", "Provenance"));
    }
    let page_data = PageData {
        kind: "race",
        tables: TITLES
            .iter()
            .zip(&tables)
            .enumerate()
            .map(|(i, (title, rows))| TableData {
                title,
                chart: i == 0 || i == 2,
                rows,
            })
            .collect(),
        races,
    };
    let blobs = vec![
        ("joule-data".to_string(), script_json(&page_data)?),
        ("joule-lines".to_string(), script_json(&lines.lines)?),
    ];
    Ok(page("AI development race", &nav, &body, &blobs))
}

/// Write the race page to `out/report.html` and return its path.
pub fn write_race(dirs: &[PathBuf], out: &Path) -> anyhow::Result<PathBuf> {
    let path = out.join("report.html");
    super::write_page(&path, &race_page(dirs)?)?;
    Ok(path)
}
