//! The report's markdown: per condition, the paper's agent table (mean ± sample
//! std over runs), the collisions per run, and which runs and seeds it covers.

use std::fmt::Write;

use crate::report::summary::Summary;
use crate::shown::md_cell;

pub fn fmt_size(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

pub fn fmt_range(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("{a:.0}–{b:.0}"),
        _ => "-".into(),
    }
}

/// A donations cell: `mean ± std (total)`, `-` without data.
pub fn donation_cell(m: &crate::report::summary::MeanStd, total: i64) -> String {
    if m.mean.is_none() {
        "-".to_string()
    } else {
        format!("{} ({total})", m.fmt(2, 1.0, ""))
    }
}

/// The agent table of one condition (markdown; also printed to the terminal);
/// ids and model names are escaped cells ([`md_cell`]).
pub fn agent_table(s: &Summary) -> String {
    let mut out = String::new();
    out.push_str(
        "| Agent | Model | Size | Rounds active | Gained / spent | Donations made / run (total) \
         | Donations received / run (total) | Success easy | Success medium | Success hard |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for a in &s.agents {
        let don = donation_cell;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            md_cell(&a.agent_id),
            md_cell(&a.model_label()),
            fmt_size(a.model_size),
            a.rounds_active.fmt(2, 1.0, ""),
            a.gained_per_spent.fmt(2, 1.0, ""),
            don(&a.donations_made, a.donations_made_total),
            don(&a.donations_received, a.donations_received_total),
            a.success_rate[0].fmt(1, 100.0, "%"),
            a.success_rate[1].fmt(1, 100.0, "%"),
            a.success_rate[2].fmt(1, 100.0, "%"),
        );
    }
    out
}

/// One condition's section.
pub fn condition_section(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Condition `{}`\n", s.condition);
    let seeds: Vec<String> = s.seeds.iter().map(|x| x.to_string()).collect();
    let _ = writeln!(
        out,
        "- Runs: {} (experiment `{}`), seeds {}\n- Folder: `{}`\n- Collisions per run: {} (range {})\n",
        s.n_runs,
        s.experiment.join("`, `"),
        seeds.join(", "),
        s.dir,
        s.collisions.fmt(2, 1.0, ""),
        fmt_range(s.collisions_min, s.collisions_max),
    );
    if s.agents.iter().any(|a| !a.answered_by.is_empty()) {
        out.push_str(
            "- Models: not the paper's models. The calls were answered by the models the Model column names after \"answered by\" (stand-ins, served models or scripted policies); each agent kept its paper model's name and size S, which set its prices\n\n",
        );
    }
    if s.mode == crate::report::metrics::Mode::Corrected {
        out.push_str(
            "- Metric mode: corrected (QUIRK-14 to 17 fixed; not comparable with the reference's CSVs)\n\n",
        );
    }
    out.push_str(&agent_table(s));
    out.push_str(
        "\nEach cell is the mean ± sample std (ddof = 1) over runs. Donations per run \
         count only runs with at least one donation (spec QUIRK-16); success rates count \
         only runs with an attempt at that difficulty.\n",
    );
    out
}

/// The report with a further section after each condition's (`extra[i]`
/// follows condition i: the measured energy).
pub fn report_with(summaries: &[Summary], extra: &[String], plots: &[String]) -> String {
    let mut out = String::from("# Energy Society report\n\n");
    for (i, s) in summaries.iter().enumerate() {
        out.push_str(&condition_section(s));
        out.push('\n');
        if let Some(e) = extra.get(i) {
            out.push_str(e);
        }
    }
    if !plots.is_empty() {
        out.push_str("## Plots\n\n");
        for p in plots {
            let _ = writeln!(out, "![{p}]({p})");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::summary::{AgentSummary, MeanStd};

    fn agent(id: &str, model: &str, answered_by: &[&str]) -> AgentSummary {
        let m = MeanStd {
            mean: Some(3.0),
            std: None,
        };
        AgentSummary {
            agent_id: id.into(),
            model_name: model.into(),
            answered_by: answered_by.iter().map(|s| s.to_string()).collect(),
            model_size: 8.0,
            n_runs: 1,
            rounds_active: m,
            gained_per_spent: m,
            donations_made: m,
            donations_made_total: 3,
            donations_received: m,
            donations_received_total: 3,
            success_rate: [m; 3],
            attempts_per_run: [m; 3],
        }
    }

    /// A `|` or a newline in an id or a model name stays inside its cell:
    /// every row keeps the header's ten columns, on one line.
    #[test]
    fn names_with_pipes_and_newlines_keep_the_agent_tables_columns() {
        let s = Summary {
            condition: "c".into(),
            mode: crate::report::metrics::Mode::Faithful,
            dir: "d".into(),
            experiment: vec!["e".into()],
            seeds: vec![1],
            n_runs: 1,
            agents: vec![
                agent("team|blue", "qwen3 | 8b", &[]),
                agent("agent_2", "gemma4\ne4b", &["served|x"]),
                agent("agent_3", "plain", &[]),
            ],
            collisions: MeanStd {
                mean: None,
                std: None,
            },
            collisions_min: None,
            collisions_max: None,
        };
        let t = agent_table(&s);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2 + 3, "{t}");
        for l in &lines {
            assert_eq!(crate::shown::md_cells(l).len(), 10, "{l}");
        }
        assert_eq!(
            crate::shown::md_cells(lines[2])[..2],
            ["team|blue", "qwen3 | 8b"]
        );
        assert_eq!(
            crate::shown::md_cells(lines[3])[1],
            "gemma4\\ne4b (answered by served|x)"
        );
        assert_eq!(crate::shown::md_cells(lines[2])[4], "3.00");
    }
}
