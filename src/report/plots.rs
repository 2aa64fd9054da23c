//! The report's figures, each written as SVG and PNG with `plotters`: energy over
//! time per agent with a shaded band of ± one standard deviation over runs (as the
//! HTML page draws it, in the page's colours),
//! action frequency, attempted difficulty and success rate by difficulty, and
//! donations. One panel per condition. Text is laid out with a system sans-serif
//! font (plotters' `ttf` feature, through font-kit); without one, drawing fails
//! and the report says so, keeping its tables.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::report::summary::{lookup, Summary};
use crate::report::table::{Cell, Table};

/// Series colours: the HTML page's (`html/page.js`, `COLORS`), in its order,
/// so agent k has one colour in the PNG, the SVG and the page
/// (tests/quick/report_output.rs compares them).
pub const COLORS: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Line dashes (dash, gap in pixels) after the first, solid series, so that
/// overlapping agents stay apart in print and in grey: the HTML page's
/// `DASHES` as near as plotters' even dashes come.
const DASHES: [(u32, u32); 4] = [(7, 4), (2, 3), (12, 4), (4, 6)];

/// Opacity of a ± sd band: the page's (`fill-opacity` in `html/page.js`), light
/// enough that five overlapping bands stay readable.
const BAND_ALPHA: f64 = 0.12;

pub use crate::figure::GRID;

/// The highest value axis drawn: plotters' tick search does not end on an
/// infinite range (and loses its way on huge ones), so a figure whose
/// values reach past this is not drawn, and the report says why.
const PLOT_MAX: f64 = 1e15;

/// The top of a value axis reaching `max`, with `headroom` (a factor);
/// an error naming `what` when that is past [`PLOT_MAX`] or not finite.
fn axis_top(what: &str, max: f64, headroom: f64) -> anyhow::Result<f64> {
    let top = max * headroom;
    if !(top.is_finite() && top <= PLOT_MAX) {
        anyhow::bail!(
            "{what} up to {} is too large to plot (the axes end at {} at most)",
            crate::energy_society::config::num(max),
            crate::energy_society::config::num(PLOT_MAX)
        );
    }
    Ok(if top > 0.0 { top } else { 1.0 })
}

/// A tick label with no more decimals than the value needs: `3`, `2.5`, `0.25`
/// (a whole-number axis reads as whole numbers).
fn tick(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        return format!("{}", v.round() as i64);
    }
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Agent `i`'s dash (dash, gap in pixels); `None`: solid.
fn dash(i: usize) -> Option<(u32, u32)> {
    i.checked_sub(1).map(|k| DASHES[k % DASHES.len()])
}

/// What the plots read: a condition's summary and aggregate tables.
pub struct PlotInput<'a> {
    pub summary: &'a Summary,
    pub tables: &'a [(&'static str, Table)],
}

impl PlotInput<'_> {
    fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|(n, _)| *n == name).map(|(_, t)| t)
    }
}

type DrawResult = anyhow::Result<()>;

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing failed: {e:?}")
}

/// The figures.
#[derive(Clone, Copy)]
enum Figure {
    EnergyOverTime,
    ActionFrequency,
    Difficulty,
    Donations,
}

/// Each figure's name, width and height of one panel, and what it draws.
const FIGURES: [(&str, (u32, u32), Figure); 4] = [
    ("energy_over_time", (1000, 520), Figure::EnergyOverTime),
    ("action_frequency", (1100, 480), Figure::ActionFrequency),
    ("difficulty", (1600, 480), Figure::Difficulty),
    ("donations", (1000, 480), Figure::Donations),
];

/// The files [`write_all`] writes, in its order.
pub fn file_names() -> Vec<String> {
    FIGURES
        .iter()
        .flat_map(|(name, ..)| [format!("{name}.svg"), format!("{name}.png")])
        .collect()
}

/// Write every figure as `<dir>/<name>.svg` and `.png`; returns the file names.
pub fn write_all(dir: &Path, inputs: &[PlotInput]) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let n = inputs.len().max(1) as u32;
    let mut files = Vec::new();
    for (name, (w, h), fig) in FIGURES {
        let size = (w, h * n);
        let svg: PathBuf = dir.join(format!("{name}.svg"));
        let drawn = (|| {
            let root = SVGBackend::new(&svg, size).into_drawing_area();
            draw_figure(&root, inputs, fig).with_context(|| format!("plot {name}.svg"))?;
            root.present().map_err(err)
        })();
        if let Err(e) = drawn {
            // The backend writes what it drew when dropped: no half figure.
            let _ = std::fs::remove_file(&svg);
            return Err(e);
        }
        let png: PathBuf = dir.join(format!("{name}.png"));
        {
            let root = BitMapBackend::new(&png, size).into_drawing_area();
            draw_figure(&root, inputs, fig).with_context(|| format!("plot {name}.png"))?;
            root.present().map_err(err)?;
        }
        files.push(format!("{name}.svg"));
        files.push(format!("{name}.png"));
    }
    Ok(files)
}

/// One panel per condition, stacked vertically.
fn draw_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    inputs: &[PlotInput],
    fig: Figure,
) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((inputs.len().max(1), 1));
    for (area, input) in panels.iter().zip(inputs) {
        match fig {
            Figure::EnergyOverTime => energy_over_time(area, input)?,
            Figure::ActionFrequency => action_frequency(area, input)?,
            Figure::Difficulty => difficulty(area, input)?,
            Figure::Donations => donations(area, input)?,
        }
    }
    Ok(())
}

fn agent_label(id: &str, model: &str) -> String {
    format!("{id} ({model})")
}

fn str_at(row: &[Cell], i: usize) -> &str {
    match &row[i] {
        Cell::Str(s) => s,
        _ => "",
    }
}

fn energy_over_time<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    input: &PlotInput,
) -> DrawResult {
    let s = input.summary;
    let title = format!("Energy over time — {}", s.condition);
    let Some(t) = input
        .table("energy_over_time")
        .filter(|t| !t.rows.is_empty())
    else {
        return no_data(area, &title);
    };
    let c = |n: &str| {
        t.col(n)
            .ok_or_else(|| anyhow!("energy_over_time lacks {n}"))
    };
    let (ca, cr, cm, csd) = (
        c("agent_id")?,
        c("round_num")?,
        c("avg_energy")?,
        c("std_energy")?,
    );
    let mut x_max = 1.0f64;
    let mut y_max = 0.0f64;
    let mut series = Vec::new();
    for a in &s.agents {
        let mut pts: Vec<(f64, f64, f64)> = Vec::new();
        for row in t.rows.iter().filter(|r| str_at(r, ca) == a.agent_id) {
            let x = row[cr].as_f64().unwrap_or(0.0);
            let m = row[cm].as_f64().unwrap_or(f64::NAN);
            // The band is ± one standard deviation over runs, as on the page.
            let sd = row[csd].as_f64().filter(|v| !v.is_nan()).unwrap_or(0.0);
            pts.push((x, m, sd));
            x_max = x_max.max(x);
            y_max = y_max.max(m + sd);
        }
        pts.sort_by(|p, q| p.0.total_cmp(&q.0));
        series.push((agent_label(&a.agent_id, &a.model_name), pts));
    }
    let mut chart = ChartBuilder::on(area)
        .caption(&title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        // Headroom above the highest band for the legend (five rows take about a
        // quarter of the panel).
        .build_cartesian_2d(1.0..x_max, 0.0..axis_top("energy", y_max, 1.3)?)
        .map_err(err)?;
    // Rounds are whole numbers: labels only at integers, at most 15 of them.
    let n_labels = ((x_max - 1.0).max(1.0) as usize).min(15);
    let round_label = |v: &f64| {
        if (v - v.round()).abs() < 1e-9 {
            format!("{}", v.round() as i64)
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .max_light_lines(0)
        .bold_line_style(GRID)
        .x_labels(n_labels)
        .x_label_formatter(&round_label)
        .y_label_formatter(&tick)
        .x_desc(format!("Round (round {x_max:.0} = final energy)"))
        .y_desc("Energy at round start (mean ± std over runs)")
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    // Every band first, then every line on top, so no band hides a line.
    for (i, (_, pts)) in series.iter().enumerate() {
        let band: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| (p.0, p.1 + p.2))
            .chain(pts.iter().rev().map(|p| (p.0, (p.1 - p.2).max(0.0))))
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(
                band,
                color(i).mix(BAND_ALPHA).filled(),
            )))
            .map_err(err)?;
    }
    for (i, (label, pts)) in series.iter().enumerate() {
        let style = color(i).stroke_width(2);
        let line = pts.iter().map(|p| (p.0, p.1));
        let anno = match dash(i) {
            None => chart.draw_series(LineSeries::new(line, style)),
            Some((d, g)) => chart.draw_series(DashedLineSeries::new(line, d, g, style)),
        }
        .map_err(err)?;
        // The legend's sample is the line's, solid or with its dash (a little
        // wider, which also tells it from the line in the SVG).
        let sample = color(i).stroke_width(3);
        anno.label(label.as_str()).legend(move |(x, y)| {
            let path = vec![(x, y), (x + 30, y)];
            match dash(i) {
                None => PathElement::new(path, sample).into_dyn(),
                Some((d, g)) => DashedPathElement::new(path.into_iter(), d, g, sample).into_dyn(),
            }
        });
    }
    // Upper left: every agent starts round 1 at the same energy, so that
    // corner is free of lines; the sample area fits a whole dash pattern.
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .legend_area_size(40)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn no_data<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str) -> DrawResult {
    let (w, h) = area.dim_in_pixel();
    area.draw(&Text::new(
        format!("{title}: no data"),
        (w as i32 / 2 - 150, h as i32 / 2),
        ("sans-serif", 20).into_font(),
    ))
    .map_err(err)?;
    Ok(())
}

/// A grouped bar chart: one group per agent, one bar per series.
#[allow(clippy::too_many_arguments)]
fn grouped_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
    y_max: Option<f64>,
    percent: bool,
) -> DrawResult {
    let n = groups.len().max(1);
    let top = match y_max {
        Some(top) => top,
        None => {
            let max = series
                .iter()
                .flat_map(|s| s.1.iter().copied())
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max);
            axis_top(y_desc, max, 1.15)?
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..top)
        .map_err(err)?;
    let fmt_y = |v: &f64| {
        if percent {
            format!("{:.0}%", v * 100.0)
        } else {
            tick(v)
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(0)
        .bold_line_style(GRID)
        .x_labels(0)
        .y_desc(y_desc)
        .x_desc("Agent (model)")
        .y_label_formatter(&fmt_y)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    let k = series.len().max(1) as f64;
    let width = 0.8 / k;
    for (si, (label, vals)) in series.iter().enumerate() {
        let col = color(si);
        chart
            .draw_series(
                vals.iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite())
                    .map(|(g, v)| {
                        let x0 = g as f64 + 0.1 + si as f64 * width;
                        Rectangle::new([(x0, 0.0), (x0 + width * 0.92, *v)], col.filled())
                    }),
            )
            .map_err(err)?
            .label(label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], col.filled()));
    }
    // Group names under the axis, centred on each group.
    for (g, name) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
        let (ox, oy) = area.get_base_pixel();
        let style = ("sans-serif", 14).into_font().into_text_style(area).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            ),
        );
        // "agent_1 (model)" on two lines so that neighbouring groups do not overlap.
        let (first, second) = name.split_once(' ').unwrap_or((name.as_str(), ""));
        for (line, text) in [first, second].into_iter().enumerate() {
            area.draw(&Text::new(
                text.to_string(),
                (px - ox, py - oy + 6 + 17 * line as i32),
                style.clone(),
            ))
            .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn agent_groups(s: &Summary) -> Vec<String> {
    s.agents
        .iter()
        .map(|a| agent_label(&a.agent_id, &a.model_name))
        .collect()
}

fn action_frequency<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    input: &PlotInput,
) -> DrawResult {
    let s = input.summary;
    let title = format!("Action frequency — {}", s.condition);
    let Some(t) = input
        .table("action_frequency")
        .filter(|t| !t.rows.is_empty())
    else {
        return no_data(area, &title);
    };
    let ci = t
        .col("action")
        .ok_or_else(|| anyhow!("action_frequency lacks action"))?;
    let mut actions: Vec<String> = Vec::new();
    for r in &t.rows {
        let a = str_at(r, ci).to_string();
        if !actions.contains(&a) {
            actions.push(a);
        }
    }
    let series: Vec<(String, Vec<f64>)> = actions
        .iter()
        .map(|act| {
            let vals = s
                .agents
                .iter()
                .map(|a| {
                    let k = [
                        ("agent_id", a.agent_id.as_str()),
                        ("model_name", a.model_name.as_str()),
                        ("action", act.as_str()),
                    ];
                    lookup(t, &k, "avg_frequency_per_run").unwrap_or(0.0)
                })
                .collect();
            (act.clone(), vals)
        })
        .collect();
    grouped_bars(
        area,
        &title,
        "Share of rounds (mean over runs)",
        &agent_groups(s),
        &series,
        Some(1.15),
        true,
    )
}

fn difficulty<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, input: &PlotInput) -> DrawResult {
    let s = input.summary;
    let halves = area.split_evenly((1, 2));
    let groups = agent_groups(s);
    let diffs = ["easy", "medium", "hard"];
    let attempts: Vec<(String, Vec<f64>)> = diffs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            (
                d.to_string(),
                s.agents
                    .iter()
                    .map(|a| a.attempts_per_run[i].mean.unwrap_or(0.0))
                    .collect(),
            )
        })
        .collect();
    let success: Vec<(String, Vec<f64>)> = diffs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            (
                d.to_string(),
                s.agents
                    .iter()
                    .map(|a| a.success_rate[i].mean.unwrap_or(f64::NAN))
                    .collect(),
            )
        })
        .collect();
    grouped_bars(
        &halves[0],
        &format!("Attempted difficulty — {}", s.condition),
        "Attempts per run (mean)",
        &groups,
        &attempts,
        None,
        false,
    )?;
    grouped_bars(
        &halves[1],
        &format!("Success rate by difficulty — {}", s.condition),
        "Success rate per run (mean)",
        &groups,
        &success,
        Some(1.15),
        true,
    )
}

fn donations<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, input: &PlotInput) -> DrawResult {
    let s = input.summary;
    let runs = s.n_runs.max(1) as f64;
    // Per run over all runs (zero-filled), so bars compare across agents.
    let series = vec![
        (
            "made".to_string(),
            s.agents
                .iter()
                .map(|a| a.donations_made_total as f64 / runs)
                .collect(),
        ),
        (
            "received".to_string(),
            s.agents
                .iter()
                .map(|a| a.donations_received_total as f64 / runs)
                .collect(),
        ),
    ];
    grouped_bars(
        area,
        &format!("Donations per run (all runs) — {}", s.condition),
        "Donations per run",
        &agent_groups(s),
        &series,
        None,
        false,
    )
}
