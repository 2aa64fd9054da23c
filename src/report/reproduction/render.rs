//! The reproduction as Markdown (`reproduction.md`, and what the terminal
//! shows), CSV (`reproduction.csv`, one row per test) and an HTML section
//! for `report.html`.

use std::fmt::Write;

use super::stats::Summary;
use super::{fmt_value, Reproduction, Verdict};
use crate::report::html::esc;

/// `14.00 ± 9.46 (n=5)`.
pub fn mean_sd(s: &Summary, percent: bool) -> String {
    if s.n == 0 {
        return "— (n=0)".into();
    }
    if s.sd.is_nan() {
        return format!("{} (n={})", fmt_value(s.mean, percent), s.n);
    }
    format!(
        "{} ± {} (n={})",
        fmt_value(s.mean, percent),
        fmt_value(s.sd, percent),
        s.n
    )
}

fn signed(x: f64, percent: bool) -> String {
    if x.is_nan() {
        return "—".into();
    }
    let v = fmt_value(x, percent);
    if x >= 0.0 && !v.starts_with('-') {
        format!("+{v}")
    } else {
        v
    }
}

fn diff_cell(d: f64, ci: (f64, f64), percent: bool) -> String {
    if d.is_nan() {
        return "—".into();
    }
    format!(
        "{} [{}, {}]",
        signed(d, percent),
        signed(ci.0, percent),
        signed(ci.1, percent)
    )
}

fn p_cell(p: f64, ph: f64) -> String {
    if p.is_nan() {
        return "—".into();
    }
    format!("{} ({})", fmt_p(p), fmt_p(ph))
}

/// A p-value with three significant digits (`<1e-4` below).
pub fn fmt_p(p: f64) -> String {
    if p.is_nan() {
        "—".into()
    } else if p < 1e-4 {
        "<0.0001".into()
    } else if p >= 0.01 {
        format!("{p:.3}")
    } else {
        format!("{p:.4}")
    }
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The lines under the tables: what the verdicts mean, the tests, Holm.
pub fn method_note(r: &Reproduction) -> String {
    let n_levels = r.levels.iter().filter(|l| !l.p.is_nan()).count();
    let n_contrasts = 2 * r.contrasts.len();
    let family = if n_contrasts == 0 {
        format!("the {n_levels} tests of the levels table")
    } else {
        format!(
            "the {n_levels} tests of the levels table, and separately over the {n_contrasts} tests (a sign \
             test and a size test per contrast) of the effects table"
        )
    };
    format!(
        "Verdicts: *consistent* when the Holm-adjusted p-value is ≥ {alpha}; otherwise *higher* or *lower* \
         (the runs' value against the reference). Multiple comparisons: Holm's step-down adjustment over \
         {family}; the p column shows the raw p and (in brackets) the Holm-adjusted one. The 95 % intervals \
         are not adjusted. Tests: *Welch t* from the published mean ± sd with the paper's n = 5 seeds (scipy's \
         `ttest_ind_from_stats`, unequal variances); *one-sample t* where the paper says every run had the \
         value (sd 0); *bootstrap*: percentile intervals over runs ({b} resamples, seed {seed}), a single \
         published number widened by half a unit of its last digit, and for a range or single number the \
         difference is the distance from it (0 inside). With 5 runs a percentile interval is somewhat too \
         narrow, so a verdict near the threshold is weak evidence either way. Metric mode: {mode:?}.",
        alpha = r.alpha,
        b = r.bootstrap.resamples,
        seed = r.bootstrap.seed,
        mode = r.mode,
    )
}

/// The whole comparison as Markdown.
pub fn markdown(r: &Reproduction) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Reproduction against {}\n", r.against);
    for c in &r.conditions {
        let _ = writeln!(md, "- {c}");
    }
    md.push('\n');
    let _ = writeln!(md, "## Levels\n");
    if let Some(n) = &r.notice {
        let _ = writeln!(md, "> **{n}**\n");
    }
    md.push_str(
        "| reference | runs | metric | agent | runs: mean ± sd (n) | reference | difference [95 % CI] | test | p (Holm) | verdict |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for l in &r.levels {
        let pc = l.metric.percent();
        let agent = match (&l.agent, &l.model) {
            (Some(a), Some(m)) => format!("{a} ({m})"),
            (Some(a), None) => a.clone(),
            _ => "—".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** |",
            md_escape(&l.reference_condition),
            md_escape(&l.run_condition),
            l.metric.label(),
            md_escape(&agent),
            mean_sd(&l.run, pc),
            md_escape(&l.reference),
            diff_cell(l.difference, l.ci, pc),
            md_escape(&l.test),
            p_cell(l.p, l.p_holm),
            l.verdict.text()
        );
    }
    md.push('\n');
    let counts = |v: &str| r.levels.iter().filter(|l| l.verdict.text() == v).count();
    let untested = r
        .levels
        .iter()
        .filter(|l| matches!(l.verdict, Verdict::NotTested(_)))
        .count();
    let _ = writeln!(
        md,
        "{} consistent, {} higher, {} lower, {} not tested.\n",
        counts("consistent"),
        counts("higher"),
        counts("lower"),
        untested
    );
    if !r.contrasts.is_empty() {
        let _ = writeln!(md, "## Effects (the paper's claims as contrasts)\n");
        if let Some(n) = &r.notice {
            let _ = writeln!(md, "> **{n}**\n");
        }
        md.push_str(
            "| contrast | runs (a − b) | runs' effect [95 % CI] | reference effect | sign | run − reference [95 % CI] | test | p sign (Holm) | p size (Holm) | size |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for c in &r.contrasts {
            let _ = writeln!(
                md,
                "| `{}` | {} − {}{} | {} | {} | **{}** | {} | {} | {} | {} | **{}** |",
                c.id,
                md_escape(&c.runs.0),
                md_escape(&c.runs.1),
                if c.paired { " (paired by run)" } else { "" },
                diff_cell(c.run_effect.mean, c.run_ci, false),
                md_escape(&c.reference_effect),
                c.sign,
                diff_cell(c.size_difference, c.size_ci, false),
                md_escape(&c.test),
                p_cell(c.p_sign, c.p_sign_holm),
                p_cell(c.p_size, c.p_size_holm),
                c.size
            );
        }
        md.push('\n');
    }
    md.push_str(&method_note(r));
    md.push('\n');
    if !r.notes.is_empty() {
        md.push_str("\nNot compared:\n\n");
        for n in &r.notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        format!("{x}")
    }
}

/// Every test as one CSV row: `table` = `level`, or `contrast_sign` /
/// `contrast_size` (two rows per contrast; there `reference_condition` holds
/// the contrast id, `run_condition` the runs' conditions a − b, the run
/// columns the runs' effect, `reference` and `reference_mean` the paper's
/// (or the reference runs') effect, and `source` the claim).
pub fn csv(r: &Reproduction) -> String {
    let mut out = String::from(
        "table,reference_condition,run_condition,metric,agent,model,run_mean,run_sd,run_n,reference,reference_mean,reference_sd,reference_n,difference,ci_low,ci_high,test,p,p_holm,verdict,source\n",
    );
    for l in &r.levels {
        let rs = l.reference_summary;
        let fields = [
            "level".to_string(),
            l.reference_condition.clone(),
            l.run_condition.clone(),
            l.metric.name().to_string(),
            l.agent.clone().unwrap_or_default(),
            l.model.clone().unwrap_or_default(),
            num(l.run.mean),
            num(l.run.sd),
            l.run.n.to_string(),
            l.reference.clone(),
            rs.map_or(String::new(), |s| num(s.mean)),
            rs.map_or(String::new(), |s| num(s.sd)),
            rs.map_or(String::new(), |s| s.n.to_string()),
            num(l.difference),
            num(l.ci.0),
            num(l.ci.1),
            l.test.clone(),
            num(l.p),
            num(l.p_holm),
            l.verdict.text(),
            l.source.clone(),
        ];
        out.push_str(
            &fields
                .iter()
                .map(|f| csv_field(f))
                .collect::<Vec<_>>()
                .join(","),
        );
        out.push('\n');
    }
    for c in &r.contrasts {
        for (kind, p, ph, d, ci, verdict) in [
            (
                "contrast_sign",
                c.p_sign,
                c.p_sign_holm,
                c.run_effect.mean,
                c.run_ci,
                &c.sign,
            ),
            (
                "contrast_size",
                c.p_size,
                c.p_size_holm,
                c.size_difference,
                c.size_ci,
                &c.size,
            ),
        ] {
            let fields = [
                kind.to_string(),
                c.id.clone(),
                format!("{} − {}", c.runs.0, c.runs.1),
                String::new(),
                String::new(),
                String::new(),
                num(c.run_effect.mean),
                num(c.run_effect.sd),
                c.run_effect.n.to_string(),
                c.reference_effect.clone(),
                num(c.reference_value),
                String::new(),
                String::new(),
                num(d),
                num(ci.0),
                num(ci.1),
                c.test.clone(),
                num(p),
                num(ph),
                verdict.clone(),
                c.claim.clone(),
            ];
            out.push_str(
                &fields
                    .iter()
                    .map(|f| csv_field(f))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            out.push('\n');
        }
    }
    out
}

/// The "Reproduction" section of `report.html`.
pub fn html_section(r: &Reproduction) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<section id=\"reproduction\" aria-labelledby=\"h-reproduction\"><h2 id=\"h-reproduction\">Reproduction</h2>\n<p>Against {}.</p><ul>",
        esc(&r.against)
    );
    for c in &r.conditions {
        let _ = write!(h, "<li>{}</li>", esc(&c.replace('`', "")));
    }
    h.push_str("</ul>\n");
    let notice = |h: &mut String| {
        if let Some(n) = &r.notice {
            let _ = write!(h, "<p class=\"notice\"><strong>{}</strong></p>\n", esc(n));
        }
    };
    notice(&mut h);
    h.push_str("<div class=\"scroll\"><table id=\"reproduction-levels\"><caption>Levels: the runs against the reference, per condition and metric</caption><thead><tr>");
    for t in [
        "Reference",
        "Runs",
        "Metric",
        "Agent",
        "Runs: mean ± sd (n)",
        "Reference",
        "Difference [95 % CI]",
        "Test",
        "p (Holm)",
        "Verdict",
    ] {
        let _ = write!(h, "<th scope=\"col\">{t}</th>");
    }
    h.push_str("</tr></thead><tbody>");
    for l in &r.levels {
        let pc = l.metric.percent();
        let agent = match (&l.agent, &l.model) {
            (Some(a), Some(m)) => format!("{a} ({m})"),
            (Some(a), None) => a.clone(),
            _ => "—".into(),
        };
        let class = match l.verdict {
            Verdict::Consistent => "consistent",
            Verdict::Higher | Verdict::Lower => "differs",
            Verdict::NotTested(_) => "untested",
        };
        let _ = write!(
            h,
            "<tr class=\"{class}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td title=\"{}\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td><strong>{}</strong></td></tr>",
            esc(&l.reference_condition),
            esc(&l.run_condition),
            esc(l.metric.label()),
            esc(&agent),
            esc(&mean_sd(&l.run, pc)),
            esc(&l.source),
            esc(&l.reference),
            esc(&diff_cell(l.difference, l.ci, pc)),
            esc(&l.test),
            esc(&p_cell(l.p, l.p_holm)),
            esc(&l.verdict.text())
        );
    }
    h.push_str("</tbody></table></div>\n");
    if !r.contrasts.is_empty() {
        notice(&mut h);
        h.push_str("<div class=\"scroll\"><table id=\"reproduction-effects\"><caption>Effects: the paper's claims as contrasts (a − b)</caption><thead><tr>");
        for t in [
            "Contrast",
            "Runs (a − b)",
            "Runs' effect [95 % CI]",
            "Reference effect",
            "Sign",
            "Run − reference [95 % CI]",
            "Test",
            "p sign (Holm)",
            "p size (Holm)",
            "Size",
        ] {
            let _ = write!(h, "<th scope=\"col\">{t}</th>");
        }
        h.push_str("</tr></thead><tbody>");
        for c in &r.contrasts {
            let _ = write!(
                h,
                "<tr><td title=\"{}\"><code>{}</code></td><td>{} − {}{}</td><td class=\"num\">{}</td><td>{}</td><td><strong>{}</strong></td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td><strong>{}</strong></td></tr>",
                esc(&c.claim),
                esc(&c.id),
                esc(&c.runs.0),
                esc(&c.runs.1),
                if c.paired { " (paired)" } else { "" },
                esc(&diff_cell(c.run_effect.mean, c.run_ci, false)),
                esc(&c.reference_effect),
                esc(&c.sign),
                esc(&diff_cell(c.size_difference, c.size_ci, false)),
                esc(&c.test),
                esc(&p_cell(c.p_sign, c.p_sign_holm)),
                esc(&p_cell(c.p_size, c.p_size_holm)),
                esc(&c.size)
            );
        }
        h.push_str("</tbody></table></div>\n");
    }
    let _ = write!(
        h,
        "<p class=\"note\">{}</p>",
        esc(&method_note(r).replace('*', "").replace('`', ""))
    );
    if !r.notes.is_empty() {
        h.push_str("<p class=\"note\">Not compared:</p><ul class=\"note\">");
        for n in &r.notes {
            let _ = write!(h, "<li>{}</li>", esc(&n.replace('`', "")));
        }
        h.push_str("</ul>");
    }
    h.push_str("</section>\n");
    h
}

/// Put `section` into a page written by `report::html` (before the energy
/// charts, with a link in the navigation); `None` when the page does not have
/// the expected structure.
pub fn insert_into_page(page: &str, section: &str) -> Option<String> {
    let nav_end = page.find("</ul></nav>")?;
    let at = page
        .find("<section id=\"energy\"")
        .or_else(|| page.find("</main>"))?;
    if at < nav_end {
        return None;
    }
    let mut out = String::with_capacity(page.len() + section.len() + 64);
    out.push_str(&page[..nav_end]);
    out.push_str("<li><a href=\"#reproduction\">Reproduction</a></li>");
    out.push_str(&page[nav_end..at]);
    out.push_str(section);
    out.push_str(&page[at..]);
    Some(out)
}
