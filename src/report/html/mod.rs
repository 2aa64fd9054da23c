//! `joule report --html` and `joule view`: one self-contained, offline
//! `report.html` per condition (or one page for `--compare A B`, or for race
//! runs). Every script and style is embedded (`page.js`, `page.css`, Joule's
//! own small SVG charts: no library, no CDN), so the page loads from
//! `file://`.
//!
//! The summary and comparison tables are written here as HTML by the same
//! code and formatting as `report.md` (`markdown`, `compare::shown`), never
//! recomputed in the page. The rest (energy charts, the per-round timeline,
//! the call browser) is drawn by `page.js` from one JSON blob of
//! [`data::ConditionData`] and, per run, one blob of its calls, parsed only
//! when that run's calls are browsed. Prompts are line ids into one line
//! table per page ([`data::LineTable`]), its own blob, parsed on first use.
//!
//! A URL hash `#selftest=<query>` makes the page search every run's calls for
//! the query and write what it shows (search hits, chart and timeline counts,
//! errors caught) as JSON into `#selftest-result`: the hook the browser test
//! (`tests/full/html_report.rs`) reads from Chromium's dumped DOM.

pub mod data;
pub mod race;

use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::report::compare::{self, CompareRow};
use crate::report::markdown::{donation_cell, fmt_range, fmt_size};
use crate::report::summary::Summary;
use crate::report::ConditionReport;
use data::LineTable;

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// Escape text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// JSON for a `<script type="application/json">` element: `<` only occurs
/// inside JSON strings, where `\u003c` means the same, so no `</script>` or
/// `<!--` can end the element early.
pub fn script_json<T: Serialize>(v: &T) -> anyhow::Result<String> {
    let s = serde_json::to_string(v).context("serializing the page data")?;
    Ok(s.replace('<', "\\u003c"))
}

/// An id-safe form of an agent id or metric name.
fn id_part(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The summary of condition number `ci`: its facts and the agent table, with
/// the cells `report.md` shows. Cells carry ids `sum-<ci>-<agent>-<metric>`
/// (and `sum-<ci>-collisions`) for tests and links.
pub fn summary_html(ci: usize, s: &Summary) -> String {
    let mut out = String::new();
    let seeds: Vec<String> = s.seeds.iter().map(|x| x.to_string()).collect();
    let _ = write!(
        out,
        "<h3>Condition <code>{}</code></h3>\n<dl class=\"facts\">\
         <dt>Runs</dt><dd id=\"sum-{ci}-runs\">{}</dd>\
         <dt>Experiment</dt><dd>{}</dd><dt>Seeds</dt><dd>{}</dd>\
         <dt>Folder</dt><dd><code>{}</code></dd>\
         <dt>Collisions per run</dt><dd><span id=\"sum-{ci}-collisions\">{}</span> (range {})</dd>",
        esc(&s.condition),
        s.n_runs,
        esc(&s.experiment.join(", ")),
        esc(&seeds.join(", ")),
        esc(&s.dir),
        esc(&s.collisions.fmt(2, 1.0, "")),
        esc(&fmt_range(s.collisions_min, s.collisions_max)),
    );
    if s.mode == crate::report::metrics::Mode::Corrected {
        out.push_str(
            "<dt>Metric mode</dt><dd>corrected (QUIRK-14 to 17 fixed; not comparable with the reference's CSVs)</dd>",
        );
    }
    out.push_str("</dl>\n");
    let _ = write!(
        out,
        "<div class=\"scroll\"><table class=\"summary\" id=\"summary-{ci}\">\
         <caption>Per agent: mean ± sample std over runs (as in report.md and metrics.json)</caption>\
         <thead><tr><th scope=\"col\">Agent</th><th scope=\"col\">Model</th><th scope=\"col\">Size</th>\
         <th scope=\"col\">Rounds active</th><th scope=\"col\">Gained / spent</th>\
         <th scope=\"col\">Donations made / run (total)</th><th scope=\"col\">Donations received / run (total)</th>\
         <th scope=\"col\">Success easy</th><th scope=\"col\">Success medium</th><th scope=\"col\">Success hard</th>\
         </tr></thead><tbody>"
    );
    for a in &s.agents {
        let id = id_part(&a.agent_id);
        let cell = |key: &str, text: String| {
            format!(
                "<td id=\"sum-{ci}-{id}-{key}\" class=\"num\">{}</td>",
                esc(&text)
            )
        };
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td class=\"num\">{}</td>{}{}{}{}{}{}{}</tr>",
            esc(&a.agent_id),
            esc(&a.model_label()),
            esc(&fmt_size(a.model_size)),
            cell("rounds_active", a.rounds_active.fmt(2, 1.0, "")),
            cell("gained_per_spent", a.gained_per_spent.fmt(2, 1.0, "")),
            cell(
                "donations_made",
                donation_cell(&a.donations_made, a.donations_made_total)
            ),
            cell(
                "donations_received",
                donation_cell(&a.donations_received, a.donations_received_total)
            ),
            cell("success_easy", a.success_rate[0].fmt(1, 100.0, "%")),
            cell("success_medium", a.success_rate[1].fmt(1, 100.0, "%")),
            cell("success_hard", a.success_rate[2].fmt(1, 100.0, "%")),
        );
    }
    out.push_str("</tbody></table></div>\n<p class=\"note\">Donations per run count only runs with at least one donation (spec QUIRK-16); success rates count only runs with an attempt at that difficulty.</p>\n");
    out
}

/// The comparison table, B − A, formatted as `compare.md` formats it.
pub fn compare_html(a: &Summary, b: &Summary, rows: &[CompareRow]) -> String {
    let mut out = format!(
        "<p>A = <code>{}</code> (seeds {}), B = <code>{}</code> (seeds {}). Differences are B − A of the means.</p>\
         <div class=\"scroll\"><table class=\"compare\" id=\"compare-table\"><caption>Condition A against B</caption>\
         <thead><tr><th scope=\"col\">Agent</th><th scope=\"col\">Model</th><th scope=\"col\">Metric</th>\
         <th scope=\"col\">A</th><th scope=\"col\">B</th><th scope=\"col\">B − A</th></tr></thead><tbody>",
        esc(&a.condition),
        esc(&format!("{:?}", a.seeds)),
        esc(&b.condition),
        esc(&format!("{:?}", b.seeds)),
    );
    for r in rows {
        let [sa, sb, d] = compare::shown(r);
        let sign = match r.diff {
            Some(x) if x > 0.0 => " class=\"num up\"",
            Some(x) if x < 0.0 => " class=\"num down\"",
            _ => " class=\"num\"",
        };
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td{sign}>{}</td></tr>",
            esc(&r.agent_id),
            esc(&r.model_name),
            esc(&r.metric),
            esc(&sa),
            esc(&sb),
            esc(&d)
        );
    }
    out.push_str("</tbody></table></div>\n");
    out
}

/// The page frame around `body` (sections), the JSON blobs and the script.
pub fn page(title: &str, nav: &[(&str, &str)], body: &str, blobs: &[(String, String)]) -> String {
    let mut out =
        String::with_capacity(body.len() + blobs.iter().map(|b| b.1.len()).sum::<usize>() + 64_000);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"generator\" content=\"joule {}\"><title>{}</title><style>{CSS}</style></head>\n<body>\
         <a class=\"skip\" href=\"#main\">Skip to content</a>\n<header><h1>{}</h1><nav aria-label=\"Sections\"><ul>",
        env!("CARGO_PKG_VERSION"),
        esc(title),
        esc(title)
    );
    for (id, label) in nav {
        let _ = write!(out, "<li><a href=\"#{id}\">{}</a></li>", esc(label));
    }
    out.push_str("</ul></nav></header>\n<main id=\"main\" tabindex=\"-1\">\n");
    out.push_str(body);
    let _ = write!(
        out,
        "</main>\n<footer>Written by joule {} from the recorded runs; works offline.</footer>\n\
         <div id=\"tooltip\" role=\"status\" aria-live=\"polite\" hidden></div>\n<pre id=\"selftest-result\" hidden></pre>\n",
        env!("CARGO_PKG_VERSION")
    );
    for (id, json) in blobs {
        let _ = writeln!(
            out,
            "<script type=\"application/json\" id=\"{id}\">{json}</script>"
        );
    }
    let _ = write!(out, "<script>{JS}</script>\n</body></html>\n");
    out
}

/// The main data blob of a society page.
#[derive(Serialize)]
struct PageData<'a> {
    kind: &'static str,
    conditions: Vec<&'a data::ConditionData>,
}

/// The whole page of `reports` (one condition, or A and B with `compare`).
pub fn society_page(reports: &[&ConditionReport], compare: bool) -> anyhow::Result<String> {
    let mut lines = LineTable::default();
    let mut built = Vec::new();
    for r in reports {
        built.push(data::build(&r.condition, &r.tables, &mut lines)?);
    }
    let mut body = String::from(
        "<section id=\"summary\" aria-labelledby=\"h-summary\"><h2 id=\"h-summary\">Summary</h2>\n",
    );
    for (ci, r) in reports.iter().enumerate() {
        if reports.len() > 1 {
            let _ = write!(
                body,
                "<p class=\"tag\">{}</p>",
                ["A", "B", "C", "D"].get(ci).unwrap_or(&"")
            );
        }
        body.push_str(&summary_html(ci, &r.summary));
    }
    body.push_str("</section>\n");
    let mut nav = vec![("summary", "Summary")];
    if compare && reports.len() >= 2 {
        let (a, b) = (&reports[0].summary, &reports[1].summary);
        let rows = compare::compare(a, b);
        body.push_str("<section id=\"compare\" aria-labelledby=\"h-compare\"><h2 id=\"h-compare\">Comparison</h2>\n");
        body.push_str(&compare_html(a, b, &rows));
        body.push_str("<h3>Mean energy, A (solid) against B (dashed)</h3><div class=\"controls\"><label>Agent <select id=\"cmp-agent\"></select></label></div><div id=\"chart-compare\" class=\"chart\"></div></section>\n");
        nav.push(("compare", "Comparison"));
    }
    body.push_str(SOCIETY_SECTIONS);
    nav.extend([
        ("energy", "Energy"),
        ("timeline", "Timeline"),
        ("calls", "Model calls"),
    ]);
    let origins = crate::report::provenance::read(reports.iter().map(|r| &r.condition));
    let provenance = provenance_section(&origins, &crate::report::provenance::warnings(&origins));
    if !provenance.is_empty() {
        body.push_str(&provenance);
        nav.push(("provenance", "Provenance"));
    }
    let page_data = PageData {
        kind: "society",
        conditions: built.iter().map(|b| &b.data).collect(),
    };
    let mut blobs = vec![
        ("joule-data".to_string(), script_json(&page_data)?),
        ("joule-lines".to_string(), script_json(&lines.lines)?),
    ];
    for (ci, b) in built.iter().enumerate() {
        for (ri, calls) in b.calls.iter().enumerate() {
            blobs.push((format!("joule-calls-{ci}-{ri}"), script_json(calls)?));
        }
    }
    let title = match reports {
        // A page of one run is named after the run (its folder), the
        // condition folder beside it.
        [one] if one.condition.runs.len() == 1 => {
            let dir = &one.condition.runs[0].dir;
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| one.condition.runs[0].run_id.clone());
            format!("Energy Society: {name} ({})", one.condition.label)
        }
        [one] => format!("Energy Society: {}", one.condition.label),
        [a, b, ..] if compare => format!(
            "Energy Society: {} against {}",
            a.condition.label, b.condition.label
        ),
        _ => "Energy Society report".to_string(),
    };
    Ok(page(&title, &nav, &body, &blobs))
}

/// The report's Provenance section (`report::provenance`) for the HTML page, with `warnings` under it; empty when there are no
/// runs. Tables scroll sideways on a narrow screen.
pub fn provenance_section(
    runs: &[crate::report::provenance::RunProvenance],
    warnings: &[String],
) -> String {
    provenance_html(crate::report::provenance::overview(runs), warnings)
}

/// A Provenance section's content (`provenance::summary::overview`) as HTML, with `warnings`
/// under it; empty without content.
pub fn provenance_html(
    overview: Option<crate::provenance::summary::Overview>,
    warnings: &[String],
) -> String {
    let Some(o) = overview else {
        return String::new();
    };
    // `name` in the introduction becomes <code>name</code>.
    let intro: String = esc(&o.intro)
        .split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            1 => format!("<code>{part}</code>"),
            _ => part.to_string(),
        })
        .collect();
    let mut out = format!(
        "<section id=\"provenance\" aria-labelledby=\"h-provenance\"><h2 id=\"h-provenance\">Provenance</h2>\n<p>{intro}</p>\n"
    );
    for t in &o.tables {
        out.push_str("<div class=\"scroll\"><table><thead><tr>");
        for h in &t.header {
            let _ = write!(out, "<th>{}</th>", esc(h.as_str()));
        }
        out.push_str("</tr></thead><tbody>");
        for r in &t.rows {
            out.push_str("<tr>");
            for c in r {
                let _ = write!(out, "<td>{}</td>", esc(c));
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table></div>\n");
    }
    for w in warnings {
        let _ = writeln!(
            out,
            "<p class=\"notice\"><strong>Before citing:</strong> {}</p>",
            esc(w)
        );
    }
    out.push_str("</section>\n");
    out
}

/// The sections `page.js` fills in.
const SOCIETY_SECTIONS: &str = r#"<section id="energy" aria-labelledby="h-energy"><h2 id="h-energy">Energy over time</h2>
<div class="controls"><label class="cond-pick" hidden>Condition <select class="cond-select"></select></label>
<label>Run <select id="energy-run"></select></label></div>
<div id="chart-run" class="chart"></div>
<div class="controls"><label>Agent <select id="energy-agent"></select></label></div>
<div id="chart-agent" class="chart"></div>
<p class="note">Energy at the start of each round; the last point is the final energy. Hover a chart, or focus it and use the arrow keys, for the round's energy, action and charge. Each line has its own dash pattern and an end label.</p>
</section>
<section id="timeline" aria-labelledby="h-timeline"><h2 id="h-timeline">Timeline</h2>
<div class="controls"><label class="cond-pick" hidden>Condition <select class="cond-select"></select></label>
<label>Run <select id="timeline-run"></select></label></div>
<div id="timeline-table" class="scroll"></div>
<p class="note">Per round and agent: the vote (recommendations by agent number), the decision, the job (difficulty, reward), the grade (✓ correct, ✗ wrong), the reward, donations and sabotage. Activate a cell to see its calls.</p>
</section>
<section id="calls" aria-labelledby="h-calls"><h2 id="h-calls">Model calls</h2>
<form class="controls" id="call-filters" role="search" onsubmit="return false">
<label class="cond-pick" hidden>Condition <select class="cond-select"></select></label>
<label>Run <select id="calls-run"></select></label>
<label>Round <select id="calls-round"><option value="">all</option></select></label>
<label>Phase <select id="calls-phase"><option value="">all</option><option>vote</option><option>decide</option><option>act</option></select></label>
<label>Agent <select id="calls-agent"><option value="">all</option></select></label>
<label>Search <input type="search" id="calls-search" placeholder="prompt, output or thinking text"></label>
<label><input type="checkbox" id="calls-all-runs"> all runs</label>
</form>
<p id="calls-status" role="status" aria-live="polite"></p>
<div class="calls"><ol id="call-list" class="call-list" aria-label="Calls"></ol>
<div id="call-detail" class="call-detail" tabindex="-1"></div></div>
</section>
"#;

/// Write one page per condition (or one for `--compare`): `dirs[i]` is the
/// output folder of `reports[i]`. Returns the pages written.
pub fn write_society(
    reports: &[ConditionReport],
    dirs: &[PathBuf],
    out: &Path,
    compare: bool,
) -> anyhow::Result<Vec<PathBuf>> {
    let paths = page_paths(reports.len(), dirs, out, compare);
    if compare && reports.len() >= 2 {
        let html = society_page(&[&reports[0], &reports[1]], true)?;
        write_page(&paths[0], &html)?;
        return Ok(paths);
    }
    for (r, path) in reports.iter().zip(&paths) {
        let html = society_page(&[r], false)?;
        write_page(path, &html)?;
    }
    Ok(paths)
}

/// The pages [`write_society`] writes for `n` conditions: `out/report.html`
/// for a comparison, else `report.html` in each condition's folder `dirs[i]`.
pub fn page_paths(n: usize, dirs: &[PathBuf], out: &Path, compare: bool) -> Vec<PathBuf> {
    if compare && n >= 2 {
        return vec![out.join("report.html")];
    }
    dirs.iter().take(n).map(|d| d.join("report.html")).collect()
}

/// Write a page (the folder created if needed).
pub fn write_page(path: &Path, html: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script_element() {
        let hostile = serde_json::json!({"out": "</script><script>alert(1)</script><!--"});
        let s = script_json(&hostile).unwrap();
        assert!(!s.contains('<'), "{s}");
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, hostile);
    }

    #[test]
    fn text_is_escaped_for_html() {
        assert_eq!(
            esc("<b a=\"x\">'&'</b>"),
            "&lt;b a=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/b&gt;"
        );
    }
}
