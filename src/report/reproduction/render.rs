//! The reproduction as Markdown (`reproduction.md`, the full tables), a
//! compact table for the terminal (at most 120 columns, each condition named
//! once), CSV (`reproduction.csv`, one row per test, with its statistic,
//! df, standard error and detectable difference) and an HTML section for
//! `report.html`.

use std::fmt::Write;

use super::verdict::{Reference, RunsForMargin, Spread, MOST_RUNS};
use super::{fmt_value, LevelRow, Reproduction, Verdict};
use crate::report::html::esc;
use crate::shown::md_cell;
use crate::stats::{fmt_p, Summary};

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

/// `t (df)` of a row, `—` where there is none.
fn t_cell(t: f64, df: f64) -> String {
    if t.is_nan() {
        "—".into()
    } else if df.is_nan() {
        format!("{t:.2}")
    } else {
        format!("{t:.2} ({df:.1})")
    }
}

/// The detectable difference of a level row (a share of runs for an
/// every-run claim).
fn detectable_cell(l: &LevelRow) -> String {
    if l.detectable.is_nan() {
        return "—".into();
    }
    if l.deviating.is_some() {
        return format!("{:.0}% of runs", 100.0 * l.detectable);
    }
    fmt_value(l.detectable, l.metric.percent())
}

/// The runs' column of an every-run claim shows how many deviate.
fn runs_cell(l: &LevelRow) -> String {
    let pc = l.metric.percent();
    match l.deviating {
        Some(k) => format!("{} — {k} of {} runs deviate", mean_sd(&l.run, pc), l.run.n),
        None => mean_sd(&l.run, pc),
    }
}

fn verdict_cell(v: &Verdict, mismatch: bool) -> String {
    if mismatch {
        format!("{} (mismatch)", v.text())
    } else {
        v.text()
    }
}

/// The lines under the tables: what the verdicts mean, the tests that were
/// run, the Holm families.
pub fn method_note(r: &Reproduction) -> String {
    let mut parts: Vec<String> = Vec::new();
    parts.push(format!(
        "Verdicts: *higher* or *lower* when the Holm-adjusted p is below {a} (the runs against the \
         reference); otherwise *consistent* when the row could have detected a difference of its \
         margin (at least 80 % power for Welch's test itself, its standard error and df as random \
         as the variances they come from, each variance at its median-unbiased value, at Holm's \
         first step, α/m: a single true difference in the family has the smallest p and meets \
         that threshold first; 87–92 % in simulations at 5 vs 5 runs), \
         and *inconclusive* when it could not: \
         the runs neither contradict the reference nor would have. The margins are declared per \
         metric in paper.toml: the smallest effect the paper reports on it ({margins}); a \
         contrast's margin is the size of the reference effect.",
        a = r.alpha,
        margins = super::paper::Paper::embedded()
            .margins
            .iter()
            .map(|(m, v)| format!("{} {}", m.name(), fmt_value(*v, m.percent())))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut tests: Vec<String> = Vec::new();
    let has = |f: &dyn Fn(&LevelRow) -> bool| r.levels.iter().any(|l| !l.test.is_empty() && f(l));
    let paper = r.against.starts_with("the paper");
    if paper {
        if has(&|l| {
            matches!(l.compared_with, Some(Reference::Mean { lo, hi, spread: Spread::Known { .. } }) if lo == hi)
                && l.spread == "published sd"
        }) {
            tests.push("*Welch t* against a published mean ± sd over the paper's seeds (scipy's `ttest_ind_from_stats`, unequal variances)".into());
        }
        if has(&|l| l.spread.starts_with("sd of the")) {
            tests.push("*Welch t* against a single published number or range, which is a mean of the paper's seeds published without its spread: its sd is that of the reference runs of the condition (the runs the paper summarises, faithful metrics), and a range (e.g. across agents) is tested from its nearest end, widened by half a unit of its last digit".into());
        }
        if has(&|l| l.spread.starts_with("runs' own")) {
            tests.push("*t, equal variances* against a single published number or range without reference runs: its sd is taken to be the runs' own (df of the runs)".into());
        }
        if has(&|l| l.deviating.is_some()) {
            tests.push("*counts* for a claim that every run had a value: any deviating run contradicts it; these rows are not in Holm's families, and are consistent when their runs would catch deviations in half the runs with 80 % power (3 runs or more)".into());
        }
    } else if has(&|_| true) {
        tests.push("*Welch t* of the runs' mean against the reference runs' mean (unequal variances). No bootstrap: at 3–10 runs a side a percentile bootstrap rejects too often (about 12 % at 5 vs 5 for a nominal 5 %)".into());
    }
    if !r.contrasts.is_empty() {
        tests.push("effects: *t* of the runs' effect against 0 (sign) and against the reference effect (size), Welch–Satterthwaite df over every variance component; sides in the same runs paired by run".into());
    }
    if !tests.is_empty() {
        parts.push(format!("Tests: {}.", tests.join("; ")));
    }
    if !r.families.is_empty() {
        parts.push(format!(
            "Holm families (declared, whatever else is passed; a declared test the runs cannot form counts as p = 1): {}. The p column shows the raw p and (in brackets) the Holm-adjusted one; the 95 % intervals are not adjusted.",
            r.families.join("; ")
        ));
    }
    if r.allow_mismatch {
        parts.push("`--allow-mismatch`: rows marked (mismatch) compare runs whose set-up differs from the reference condition's (see the conditions above); their verdicts are not a reproduction's.".into());
    }
    parts.push(format!("Metric mode: {:?}.", r.mode));
    parts.join(" ")
}

/// The runs an inconclusive row needs: `12`, `> 1000`, or `none` when not
/// computed.
fn runs_for_margin_cell(x: Option<RunsForMargin>, none: &str) -> String {
    match x {
        Some(RunsForMargin::Runs(n)) => n.to_string(),
        Some(RunsForMargin::Beyond(n)) => format!("> {n}"),
        None => none.to_string(),
    }
}

/// What more runs would settle: the range of runs the inconclusive rows
/// need, and how many no number of runs would (None without such rows).
fn more_runs_line(r: &Reproduction) -> Option<String> {
    // Only inconclusive rows have one (`finish_family`).
    let needs: Vec<RunsForMargin> = r.levels.iter().filter_map(|l| l.runs_for_margin).collect();
    let runs: Vec<usize> = needs
        .iter()
        .filter_map(|x| match x {
            RunsForMargin::Runs(n) => Some(*n),
            RunsForMargin::Beyond(_) => None,
        })
        .collect();
    let beyond = needs.len() - runs.len();
    if needs.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if let (Some(lo), Some(hi)) = (runs.iter().min(), runs.iter().max()) {
        parts.push(format!(
            "{} inconclusive row(s) would reach their margins with {} runs, the spreads as they are",
            runs.len(),
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}–{hi}")
            }
        ));
    }
    if beyond > 0 {
        parts.push(format!(
            "{beyond} would not even with {MOST_RUNS}: the reference's own uncertainty (its spread over its runs) is too wide for the margin"
        ));
    }
    Some(format!("More runs: {}.", parts.join("; ")))
}

fn summary_line(r: &Reproduction) -> String {
    let counts = |v: &str| r.levels.iter().filter(|l| l.verdict.text() == v).count();
    let untested = r
        .levels
        .iter()
        .filter(|l| matches!(l.verdict, Verdict::NotTested(_)))
        .count();
    format!(
        "{} consistent, {} inconclusive, {} higher, {} lower, {} not tested.",
        counts("consistent"),
        counts("inconclusive"),
        counts("higher"),
        counts("lower"),
        untested
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
    for w in &r.warnings {
        let _ = writeln!(md, "> **Warning:** {w}\n");
    }
    let _ = writeln!(md, "## Levels\n");
    if let Some(n) = &r.notice {
        let _ = writeln!(md, "> **{n}**\n");
    }
    md.push_str(
        "| reference | runs | metric | agent | runs: mean ± sd (n) | reference | reference's spread | difference [95 % CI] | test | t (df) | se | p (Holm) | detectable (80 %) | margin | runs for the margin | verdict |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for l in &r.levels {
        let pc = l.metric.percent();
        let agent = match (&l.agent, &l.model) {
            (Some(a), Some(m)) => format!("{a} ({m})"),
            (Some(a), None) => a.clone(),
            _ => "—".into(),
        };
        let margin = if l.deviating.is_some() {
            format!("{:.0}% of runs", 100.0 * super::verdict::EVERY_RUN_MARGIN)
        } else {
            fmt_value(l.margin, pc)
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** |",
            md_cell(&l.reference_condition),
            md_cell(&l.run_condition),
            l.metric.label(),
            md_cell(&agent),
            runs_cell(l),
            md_cell(&l.reference),
            md_cell(&l.spread),
            diff_cell(l.difference, l.ci, pc),
            md_cell(&l.test),
            t_cell(l.statistic, l.df),
            fmt_value(l.se, pc),
            p_cell(l.p, l.p_holm),
            detectable_cell(l),
            margin,
            runs_for_margin_cell(l.runs_for_margin, "—"),
            verdict_cell(&l.verdict, l.mismatch.is_some())
        );
    }
    md.push('\n');
    let _ = writeln!(md, "{}\n", summary_line(r));
    if let Some(more) = more_runs_line(r) {
        let _ = writeln!(md, "{more}\n");
    }
    if !r.contrasts.is_empty() {
        let _ = writeln!(md, "## Effects (the paper's claims as contrasts)\n");
        if let Some(n) = &r.notice {
            let _ = writeln!(md, "> **{n}**\n");
        }
        md.push_str(
            "| contrast | runs (a − b) | runs' effect [95 % CI] | reference effect | sign | run − reference [95 % CI] | test | t sign (df) | t size (df) | p sign (Holm) | p size (Holm) | detectable sign / size (80 %) | margin | size |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for c in &r.contrasts {
            let _ = writeln!(
                md,
                "| `{}` | {} − {}{} | {} | {} | **{}** | {} | {} | {} | {} | {} | {} | {} / {} | {} | **{}** |",
                c.id,
                md_cell(&c.runs.0),
                md_cell(&c.runs.1),
                if c.paired { " (paired by run)" } else { "" },
                diff_cell(c.run_effect.mean, c.run_ci, false),
                md_cell(&c.reference_effect),
                c.sign,
                diff_cell(c.size_test.difference, c.size_test.ci, false),
                md_cell(&c.size_test.test),
                t_cell(c.sign_test.statistic, c.sign_test.df),
                t_cell(c.size_test.statistic, c.size_test.df),
                p_cell(c.sign_test.p, c.p_sign_holm),
                p_cell(c.size_test.p, c.p_size_holm),
                fmt_value(c.sign_detectable, false),
                fmt_value(c.size_detectable, false),
                fmt_value(c.margin, false),
                if c.mismatch.is_some() {
                    format!("{} (mismatch)", c.size)
                } else {
                    c.size.clone()
                }
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

/// The widest line the terminal table writes.
pub const TERMINAL_WIDTH: usize = 120;

/// Cut `s` to `w` characters (an ellipsis at the end when cut).
fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Wrap `s` at spaces to lines of at most `w` characters.
fn wrap(s: &str, w: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        let len = line.chars().count() + 1 + word.chars().count();
        if !line.is_empty() && len > w {
            out.push_str(&line);
            out.push('\n');
            line = format!("{indent}{word}");
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    if !line.is_empty() {
        out.push_str(&fit(&line, w));
        out.push('\n');
    }
    out
}

/// The compact table the terminal shows: one block per compared condition
/// (named once), a row per test with the runs, the reference, the
/// difference, the detectable difference, the Holm p and the verdict; the
/// effects; the counts. Every line at most [`TERMINAL_WIDTH`] columns; the
/// Markdown file holds the full tables and the method.
pub fn terminal(r: &Reproduction) -> String {
    let w = TERMINAL_WIDTH;
    let mut out = String::new();
    out.push_str(&wrap(
        &format!("Reproduction against {}", r.against),
        w,
        "  ",
    ));
    if let Some(n) = &r.notice {
        out.push_str(&wrap(n, w, "  "));
    }
    for warning in &r.warnings {
        out.push_str(&wrap(&format!("warning: {warning}"), w, "  "));
    }
    let mut block = String::new();
    for l in &r.levels {
        let head = format!("{} against {}", l.run_condition, l.reference_condition);
        if head != block {
            out.push('\n');
            out.push_str(&wrap(
                &format!(
                    "`{}` against {} ({}, m = {}){}",
                    l.run_condition,
                    l.reference_condition,
                    if l.family.is_empty() {
                        "no family"
                    } else {
                        "Holm"
                    },
                    l.family_m,
                    if l.mismatch.is_some() {
                        " — MISMATCH, see reproduction.md"
                    } else {
                        ""
                    }
                ),
                w,
                "  ",
            ));
            let _ = writeln!(
                out,
                "  {:<18} {:<7} {:<19} {:<19} {:>8} {:>10} {:>7}  verdict",
                "metric", "agent", "runs mean ± sd", "reference", "diff", "detectable", "p Holm"
            );
            block = head;
        }
        let pc = l.metric.percent();
        let runs = match l.deviating {
            Some(k) => format!("{k}/{} deviate", l.run.n),
            None if l.run.sd.is_nan() => fmt_value(l.run.mean, pc),
            None => format!(
                "{} ± {}",
                fmt_value(l.run.mean, pc),
                fmt_value(l.run.sd, pc)
            ),
        };
        let reference = l.reference.replace(" in every run", " every run");
        let reference = reference.split(" (n=").next().unwrap_or("").to_string();
        let verdict = match &l.verdict {
            Verdict::NotTested(_) => "not tested".to_string(),
            v => v.text(),
        };
        let line = format!(
            "  {:<18} {:<7} {:<19} {:<19} {:>8} {:>10} {:>7}  {}{}",
            fit(l.metric.name(), 18),
            fit(l.agent.as_deref().unwrap_or("—"), 7),
            fit(&runs, 19),
            fit(&reference, 19),
            fit(&signed(l.difference, pc), 8),
            fit(&detectable_cell(l).replace(" of runs", " runs"), 10),
            fmt_p(l.p_holm),
            verdict,
            if l.mismatch.is_some() { " !" } else { "" }
        );
        out.push_str(&fit(&line, w));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&wrap(&summary_line(r), w, "  "));
    if let Some(more) = more_runs_line(r) {
        out.push_str(&wrap(&more, w, "  "));
    }
    if !r.contrasts.is_empty() {
        out.push_str("\nEffects (a − b)\n");
        let _ = writeln!(
            out,
            "  {:<54} {:>8} {:>8} {:>8}  {:<15} size",
            "contrast", "runs", "ref", "detect.", "sign"
        );
        for c in &r.contrasts {
            let line = format!(
                "  {:<54} {:>8} {:>8} {:>8}  {:<15} {}{}",
                fit(&c.id, 54),
                fit(&signed(c.run_effect.mean, false), 8),
                fit(&signed(c.reference_value, false), 8),
                fit(&fmt_value(c.size_detectable, false), 8),
                c.sign,
                c.size,
                if c.mismatch.is_some() { " !" } else { "" }
            );
            out.push_str(&fit(&line, w));
            out.push('\n');
        }
    }
    for n in &r.notes {
        out.push_str(&wrap(&format!("not compared: {n}"), w, "  "));
    }
    if r.allow_mismatch {
        out.push_str(&wrap(
            "!: the runs' set-up differs from the reference condition's (--allow-mismatch; what differs: above and in reproduction.md)",
            w,
            "  ",
        ));
    }
    out.push_str(&wrap(
        "detectable: the smallest difference the row detects with at least 80 % power at Holm's first step; \
         consistent: could have detected its margin, inconclusive: could not. \
         The full tables, the tests and the Holm families: reproduction.md (with --out).",
        w,
        "  ",
    ));
    out
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
/// (or the reference runs') effect, and `source` the claim). Each row has
/// its statistic (t), df, standard error, the difference detectable with
/// 80 % power at Holm's first step and the margin it is weighed against
/// (for an every-run claim: `deviating` runs, and shares of runs).
pub fn csv(r: &Reproduction) -> String {
    let mut out = crate::csv::CsvText::new();
    out.record(
        "table,reference_condition,run_condition,metric,agent,model,run_mean,run_sd,run_n,reference,reference_mean,reference_sd,reference_n,reference_spread,difference,ci_low,ci_high,test,statistic,df,se,p,p_holm,family,family_m,in_family,deviating,detectable,margin,runs_for_margin,verdict,mismatch,source"
            .split(','),
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
            l.spread.clone(),
            num(l.difference),
            num(l.ci.0),
            num(l.ci.1),
            l.test.clone(),
            num(l.statistic),
            num(l.df),
            num(l.se),
            num(l.p),
            num(l.p_holm),
            l.family.clone(),
            l.family_m.to_string(),
            l.in_family.to_string(),
            l.deviating.map_or(String::new(), |k| k.to_string()),
            num(l.detectable),
            if l.deviating.is_some() {
                num(super::verdict::EVERY_RUN_MARGIN)
            } else {
                num(l.margin)
            },
            runs_for_margin_cell(l.runs_for_margin, ""),
            l.verdict.text(),
            l.mismatch.clone().unwrap_or_default(),
            l.source.clone(),
        ];
        out.record(&fields);
    }
    for c in &r.contrasts {
        for (kind, t, ph, det, verdict) in [
            (
                "contrast_sign",
                &c.sign_test,
                c.p_sign_holm,
                c.sign_detectable,
                &c.sign,
            ),
            (
                "contrast_size",
                &c.size_test,
                c.p_size_holm,
                c.size_detectable,
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
                String::new(),
                num(t.difference),
                num(t.ci.0),
                num(t.ci.1),
                t.test.clone(),
                num(t.statistic),
                num(t.df),
                num(t.se),
                num(t.p),
                num(ph),
                format!("{} tests of the contrasts", &kind[9..]),
                String::new(),
                (!t.cannot_differ).to_string(),
                String::new(),
                num(det),
                num(c.margin),
                String::new(),
                verdict.clone(),
                c.mismatch.clone().unwrap_or_default(),
                c.claim.clone(),
            ];
            out.record(&fields);
        }
    }
    out.into_string()
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
    for w in &r.warnings {
        let _ = write!(
            h,
            "<p class=\"notice\"><strong>Warning:</strong> {}</p>\n",
            esc(&w.replace('`', ""))
        );
    }
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
        "t (df)",
        "p (Holm)",
        "Detectable (80 %)",
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
            Verdict::Inconclusive => "inconclusive",
            Verdict::Higher | Verdict::Lower => "differs",
            Verdict::NotTested(_) => "untested",
        };
        let _ = write!(
            h,
            "<tr class=\"{class}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td title=\"{}\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td><strong>{}</strong></td></tr>",
            esc(&l.reference_condition),
            esc(&l.run_condition),
            esc(l.metric.label()),
            esc(&agent),
            esc(&runs_cell(l)),
            esc(&l.source),
            esc(&l.reference),
            esc(&diff_cell(l.difference, l.ci, pc)),
            esc(&format!("{} ({})", l.test, l.spread)),
            esc(&t_cell(l.statistic, l.df)),
            esc(&p_cell(l.p, l.p_holm)),
            esc(&detectable_cell(l)),
            esc(&verdict_cell(&l.verdict, l.mismatch.is_some()))
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
                esc(&diff_cell(c.size_test.difference, c.size_test.ci, false)),
                esc(&c.size_test.test),
                esc(&p_cell(c.sign_test.p, c.p_sign_holm)),
                esc(&p_cell(c.size_test.p, c.p_size_holm)),
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
