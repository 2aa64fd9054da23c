//! Humans versus models (spec §8): the section `joule race
//! report --human FILE` opens with. Over two-player races (the human
//! experiment's design) of the runs' uncontaminated canonical races and over
//! the human data set: Unsafe rates by p_max and by position (Leader = ahead
//! or tied entering the round, Trailer = behind) with Wilson intervals,
//! archetype shares (human k-means, models at the nearest human centroid),
//! the strategy mix (nearest of AS/AU/CS/CAS, ties kept), and the six
//! cluster-robust logits for the models (clustered on the CRN block
//! `source_run::model::rep`, controls only where they vary) beside the human
//! reference (clustered on the pair, with its demographic and
//! risk-preference controls). Writes `logit.csv`, `logit_sample.csv`,
//! `archetypes.csv`, `archetype_centroids.csv`, `strategies.csv`,
//! `humans_vs_models.csv` (every rate, archetype share and strategy share the
//! section shows, at full precision) and the archetype plot
//! (`archetypes.png`/`.svg`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use super::archetype::{features, Archetypes, FEATURES};
use super::logit::{fit_all, Control, Decision, Fit, REPORT_TERMS};
use super::runs::{wilson, RunData};
use super::strategy::{classify_player, mix_label};
use super::trajectory::{from_runs, PlayerRace};
use crate::csv::{csv_line, CsvText};
use crate::race::rules::{fmt_num, PROGRESS_TOL};

/// The logit sample of model runs and the controls that vary in it.
pub struct ModelSample {
    pub decisions: Vec<Decision>,
    pub controls: Vec<Control>,
    pub notes: Vec<String>,
}

/// Rounds ≥ 2 of uncontaminated canonical two-player races; controls
/// `C(model)`, `C(prompt_version)`, `C(run_phase)` when each takes more than
/// one value, and `C(persona_condition)` when persona varies within a
/// protocol signature (run folder × model × prompt version).
pub fn model_sample(players: &[PlayerRace]) -> ModelSample {
    let used: Vec<&PlayerRace> = players
        .iter()
        .filter(|p| p.included && p.n_players == 2)
        .collect();
    let decisions: Vec<Decision> = used.iter().flat_map(|p| p.decisions()).collect();
    let distinct = |k: &str| -> usize {
        decisions
            .iter()
            .filter_map(|d| d.categorical.get(k))
            .collect::<BTreeSet<_>>()
            .len()
    };
    let mut controls = Vec::new();
    let mut notes = Vec::new();
    for k in ["model", "prompt_version", "run_phase"] {
        if distinct(k) > 1 {
            controls.push(Control::Categorical(k.into()));
        }
    }
    if distinct("persona_condition") > 1 {
        let mut per_sig: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
        for d in &decisions {
            let g = |k: &str| d.categorical.get(k).cloned().unwrap_or_default();
            per_sig
                .entry((g("source_run"), g("model"), g("prompt_version")))
                .or_default()
                .insert(g("persona_condition"));
        }
        if per_sig.values().any(|s| s.len() > 1) {
            controls.push(Control::Categorical("persona_condition".into()));
        } else {
            notes.push(
                "persona condition varies only between protocol signatures (run folder × model × \
                 prompt version), never within one: it is confounded with them and not controlled"
                    .into(),
            );
        }
    }
    ModelSample {
        decisions,
        controls,
        notes,
    }
}

/// The model logit sample as CSV (the fixture format of
/// `scripts/gen_race_analysis_fixtures.py`).
pub fn sample_csv(s: &ModelSample) -> String {
    let controls: Vec<String> = s.controls.iter().map(|c| c.formula()).collect();
    let mut out = CsvText::new();
    out.record(
        "unsafe,max_private_risk,own_prev_unsafe,opponent_prev_unsafe,progress_gap_before,first_round_unsafe,cluster,model,prompt_version,run_phase,persona_condition,controls"
            .split(','),
    );
    for d in &s.decisions {
        let g = |k: &str| d.categorical.get(k).cloned().unwrap_or_default();
        out.record([
            (d.unsafe_ as u8).to_string(),
            d.p_max.to_string(),
            (d.own_prev_unsafe as u8).to_string(),
            (d.opponent_prev_unsafe as u8).to_string(),
            d.progress_gap_before.to_string(),
            (d.first_round_unsafe as u8).to_string(),
            d.cluster.clone(),
            g("model"),
            g("prompt_version"),
            g("run_phase"),
            g("persona_condition"),
            controls.join(";"),
        ]);
    }
    out.into_string()
}

/// A rate with its Wilson interval.
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    k: usize,
    n: usize,
}

impl Rate {
    fn cell(&self) -> String {
        if self.n == 0 {
            return "—".into();
        }
        let (lo, hi) = wilson(self.k, self.n);
        format!(
            "{:.1}% ({:.1}–{:.1}), n={}",
            100.0 * self.k as f64 / self.n as f64,
            100.0 * lo,
            100.0 * hi,
            self.n
        )
    }
}

fn position(gap: f64) -> &'static str {
    if gap >= -PROGRESS_TOL {
        "Leader"
    } else {
        "Trailer"
    }
}

/// Everything the comparison computes, for the report and the tests.
pub struct Comparison {
    pub markdown: String,
    pub model_fits: Vec<Result<Fit, String>>,
    pub human_fits: Vec<Result<Fit, String>>,
    pub archetypes: Option<Archetypes>,
}

fn fit_cell(f: &Result<Fit, String>, term: &str) -> String {
    match f {
        Ok(f) => match f.get(term) {
            Some(c) => format!("{:.3} ({:.3}) z={:.2} p={:.3}", c.coef, c.se, c.z, c.p),
            None => String::new(),
        },
        Err(_) => String::new(),
    }
}

fn regression_md(models: &[Result<Fit, String>], humans: Option<&[Result<Fit, String>]>) -> String {
    let mut md = String::from(
        "## Cluster-robust logits of Unsafe (rounds ≥ 2)\n\nEach cell: coefficient (cluster-robust SE) z p. \
         Models: uncontaminated two-player races, SEs clustered on the CRN block `source_run::model::rep`, \
         reference risk 0.1, progress gap uncentred. Humans: the paper's Table 1 sample, SEs clustered on \
         the pair, gap and age centred, controls C(sex) + age_c + C(nationality_group) + risk_gamble_choice \
         (their coefficients are in `logit.csv`).\n\n",
    );
    for spec in 1..=6 {
        let m = &models[spec - 1];
        let h = humans.map(|h| &h[spec - 1]);
        let head = |f: &Result<Fit, String>| match f {
            Ok(f) => format!(
                "N={}, clusters={}, logL={:.2}",
                f.nobs, f.n_clusters, f.log_likelihood
            ),
            Err(e) => format!("not fitted: {e}"),
        };
        md.push_str(&format!("### Specification {spec}\n\n"));
        match m {
            Ok(f) => md.push_str(&format!("Models: `{}`; {}\n\n", f.formula, head(m))),
            Err(_) => md.push_str(&format!("Models: {}\n\n", head(m))),
        }
        if let Some(h) = h {
            md.push_str(&format!("Humans: {}\n\n", head(h)));
        }
        let mut terms: Vec<String> = REPORT_TERMS
            .iter()
            .filter(|t| {
                m.as_ref().ok().and_then(|f| f.get(t)).is_some()
                    || h.and_then(|h| h.as_ref().ok())
                        .and_then(|f| f.get(t))
                        .is_some()
            })
            .map(|t| t.to_string())
            .collect();
        if let Ok(f) = m {
            for c in &f.coefs {
                if !terms.contains(&c.term) {
                    terms.push(c.term.clone());
                }
            }
        }
        if terms.is_empty() {
            continue;
        }
        if h.is_some() {
            md.push_str("| term | models | humans |\n|---|---|---|\n");
        } else {
            md.push_str("| term | models |\n|---|---|\n");
        }
        for t in &terms {
            match h {
                Some(h) => md.push_str(&format!(
                    "| `{t}` | {} | {} |\n",
                    fit_cell(m, t),
                    fit_cell(h, t)
                )),
                None => md.push_str(&format!("| `{t}` | {} |\n", fit_cell(m, t))),
            }
        }
        md.push('\n');
    }
    md
}

fn draw_shares<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    groups: &[String],
    shares: &[Vec<f64>],
    names: &[String],
) -> anyhow::Result<()> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    let colors = [
        RGBColor(37, 99, 235),
        RGBColor(13, 148, 136),
        RGBColor(245, 158, 11),
        RGBColor(220, 38, 38),
    ];
    root.fill(&WHITE).map_err(e)?;
    let ng = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Share of player-races nearest to each human archetype",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5f64..ng - 0.5, 0.0f64..1.3)
        .map_err(e)?;
    let labels = groups.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(0)
        .bold_line_style(crate::figure::GRID)
        .x_labels(groups.len().max(1))
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("share")
        .y_label_formatter(&|y| {
            if *y <= 1.0 + 1e-9 {
                format!("{:.0}%", y * 100.0)
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    for (c, name) in names.iter().enumerate() {
        let color = colors[c % colors.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = shares
            .iter()
            .enumerate()
            .map(|(g, s)| {
                let bottom: f64 = s[..c].iter().sum();
                Rectangle::new(
                    [(g as f64 - 0.3, bottom), (g as f64 + 0.3, bottom + s[c])],
                    color.filled(),
                )
            })
            .collect();
        // An archetype no group comes nearest to has no legend entry.
        if shares.iter().all(|s| s[c] <= 0.0) {
            continue;
        }
        chart
            .draw_series(bars)
            .map_err(e)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

fn plot_shares(
    path: &Path,
    svg: bool,
    groups: &[String],
    shares: &[Vec<f64>],
    names: &[String],
) -> anyhow::Result<()> {
    let size = (200 + 140 * groups.len() as u32, 520);
    if svg {
        draw_shares(
            SVGBackend::new(path, size).into_drawing_area(),
            groups,
            shares,
            names,
        )
    } else {
        draw_shares(
            BitMapBackend::new(path, size).into_drawing_area(),
            groups,
            shares,
            names,
        )
    }
    .with_context(|| format!("drawing {}", path.display()))
}

/// Build the comparison section and write its files into `out`.
pub fn compare(data: &RunData, human: Option<&Path>, out: &Path) -> anyhow::Result<Comparison> {
    let players = from_runs(data);
    let sample = model_sample(&players);
    write_lines_file(out, "logit_sample.csv", sample_csv(&sample))?;
    let model_fits = fit_all(&sample.decisions, &sample.controls);
    let (humans, human_fits) = read_humans(human)?;
    let have_h = human.is_some();
    let groups = Groups::new(&humans, &players, have_h);

    let mut csv = vec!["table,group,key,count,n,share,ci_low,ci_high".to_string()];
    let mut md = unsafe_rate_section(&groups, have_h, out, &mut csv)?;
    let archetypes = if have_h {
        Some(Archetypes::fit(&humans)?)
    } else {
        None
    };
    md.push_str(&archetype_section(
        &groups,
        archetypes.as_ref(),
        out,
        &mut csv,
    )?);
    md.push_str(&strategy_section(&humans, &players, out, &mut csv)?);
    write_lines_file(out, "humans_vs_models.csv", csv.join("\n") + "\n")?;
    let human_fits_used = have_h.then_some(human_fits.as_slice());
    md.push_str(&regression_md(&model_fits, human_fits_used));
    for n in &sample.notes {
        md.push_str(&format!("Note: {n}.\n\n"));
    }
    write_logit_csv(&model_fits, human_fits_used, out)?;
    Ok(Comparison {
        markdown: md,
        model_fits,
        human_fits,
        archetypes,
    })
}

/// Write `text` to `out/name`, the error naming the file.
fn write_lines_file(out: &Path, name: &str, text: String) -> anyhow::Result<()> {
    std::fs::write(out.join(name), text)
        .with_context(|| format!("writing {}/{name}", out.display()))
}

/// The human data set, when given: its player-races and the six logits fitted
/// on its logit sample with its controls (none of either without one).
fn read_humans(
    human: Option<&Path>,
) -> anyhow::Result<(Vec<PlayerRace>, Vec<Result<Fit, String>>)> {
    match human {
        Some(path) => {
            let rows = super::human::read(path)?;
            let fits = fit_all(
                &super::human::logit_sample(&rows)?,
                &super::human::controls(),
            );
            Ok((super::human::player_races(&rows)?, fits))
        }
        None => Ok((Vec::new(), Vec::new())),
    }
}

/// The groups the tables compare and the player-races in them.
struct Groups<'a> {
    /// `human` first (when the human data set is given), then the models in
    /// name order.
    names: Vec<String>,
    /// Every human player-race, then the models' included two-player ones.
    all: Vec<&'a PlayerRace>,
    /// How many of `all` are human (they come first).
    n_humans: usize,
}

impl<'a> Groups<'a> {
    /// Humans first, then models in name order (two-player, included).
    fn new(humans: &'a [PlayerRace], players: &'a [PlayerRace], have_h: bool) -> Self {
        let models: Vec<&PlayerRace> = players
            .iter()
            .filter(|p| p.included && p.n_players == 2)
            .collect();
        let mut names: Vec<String> = Vec::new();
        if have_h {
            names.push("human".into());
        }
        let model_names: BTreeSet<&str> = models.iter().map(|p| p.group.as_str()).collect();
        names.extend(model_names.iter().map(|s| s.to_string()));
        let all: Vec<&PlayerRace> = humans.iter().chain(models.iter().copied()).collect();
        Groups {
            names,
            all,
            n_humans: humans.len(),
        }
    }
}

/// A group's name in a markdown table: `Humans`, or the model name as code.
fn group_label(g: &str) -> String {
    if g == "human" {
        "Humans".to_string()
    } else {
        format!("`{}`", crate::shown::md_cell(g))
    }
}

/// The section's heading and the Unsafe rates by p_max and by position, one
/// column per group; their cells go to `csv` (`humans_vs_models.csv`: `count`
/// Unsafe decisions of `n`, `share` the rate, with its Wilson interval).
fn unsafe_rate_section(
    groups: &Groups,
    have_h: bool,
    out: &Path,
    csv: &mut Vec<String>,
) -> anyhow::Result<String> {
    let mut md = String::new();
    if have_h {
        md.push_str(
            "## Humans versus models\n\nTwo-player races only; models over uncontaminated canonical races \
             (every decision), humans over every participant-round of the data set. Cells: Unsafe rate \
             (95% Wilson CI), decisions.\n\n",
        );
    } else {
        md.push_str(
            "## Two-player races by model\n\nUncontaminated canonical races, every decision (`--human FILE` \
             adds the human experiment beside them). Cells: Unsafe rate (95% Wilson CI), decisions.\n\n",
        );
    }
    let mut risks: Vec<f64> = groups.all.iter().map(|p| p.p_max).collect();
    risks.sort_by(|a, b| a.total_cmp(b));
    risks.dedup();
    let risk_keys: Vec<String> = risks.iter().map(|&p| fmt_num(p)).collect();
    rate_table(
        groups,
        "p_max",
        &risk_keys,
        &|p, _| fmt_num(p.p_max),
        &mut md,
        csv,
    );
    rate_table(
        groups,
        "position",
        &["Leader".to_string(), "Trailer".to_string()],
        &|p, i| position(p.rounds[i].gap_before).to_string(),
        &mut md,
        csv,
    );
    if have_h {
        md.push_str(&unsafe_tests_section(groups, &risk_keys, out)?);
    }
    Ok(md)
}

/// Each model's Unsafe rate against the humans' by p_max and by position
/// ([`super::unsafe_rates`]): the table, and `unsafe_tests.csv`.
fn unsafe_tests_section(
    groups: &Groups,
    risk_keys: &[String],
    out: &Path,
) -> anyhow::Result<String> {
    let positions = ["Leader".to_string(), "Trailer".to_string()];
    let obs: Vec<super::unsafe_rates::Obs> = groups
        .all
        .iter()
        .flat_map(|p| {
            p.rounds.iter().map(move |r| super::unsafe_rates::Obs {
                group: &p.group,
                cluster: &p.cluster,
                keys: vec![fmt_num(p.p_max), position(r.gap_before).to_string()],
                unsafe_: r.unsafe_,
            })
        })
        .collect();
    let (tmd, tcsv) = super::unsafe_rates::section(
        &obs,
        "human",
        &[("p_max", risk_keys), ("position", &positions)],
    );
    std::fs::write(out.join("unsafe_tests.csv"), tcsv)
        .with_context(|| format!("writing {}/unsafe_tests.csv", out.display()))?;
    Ok(tmd)
}

/// One table of Unsafe rates: a row per key (`key_of` a player-race's round),
/// a column per group; its markdown goes to `md`, its cells to `csv`.
fn rate_table(
    groups: &Groups,
    title: &str,
    keys: &[String],
    key_of: &dyn Fn(&PlayerRace, usize) -> String,
    md: &mut String,
    csv: &mut Vec<String>,
) {
    let mut cells: BTreeMap<(String, String), Rate> = BTreeMap::new();
    for p in &groups.all {
        for (i, r) in p.rounds.iter().enumerate() {
            let c = cells.entry((p.group.clone(), key_of(p, i))).or_default();
            c.n += 1;
            c.k += r.unsafe_ as usize;
        }
    }
    md.push_str(&format!("### Unsafe rate by {title}\n\n| {title} |"));
    for g in &groups.names {
        md.push_str(&format!(" {} |", group_label(g)));
    }
    md.push_str(&format!("\n|---|{}\n", "---|".repeat(groups.names.len())));
    for k in keys {
        md.push_str(&format!("| {k} |"));
        for g in &groups.names {
            let r = cells
                .get(&(g.clone(), k.clone()))
                .copied()
                .unwrap_or_default();
            md.push_str(&format!(" {} |", r.cell()));
            let (lo, hi) = wilson(r.k, r.n);
            let share = if r.n == 0 {
                0.0
            } else {
                r.k as f64 / r.n as f64
            };
            csv.push(csv_line([
                title.to_string(),
                g.clone(),
                k.clone(),
                r.k.to_string(),
                r.n.to_string(),
                share.to_string(),
                lo.to_string(),
                hi.to_string(),
            ]));
        }
        md.push('\n');
    }
    md.push('\n');
}

/// The archetype shares (with the human archetypes only): the table and the
/// plot (`archetypes.png`/`.svg`); writes `archetypes.csv` (one row per
/// player-race, only its header without archetypes) and
/// `archetype_centroids.csv` (the centroids, raw and z-scored, and the human
/// mean and SD the z-scores use, at full precision); the shares go to `csv`.
fn archetype_section(
    groups: &Groups,
    archetypes: Option<&Archetypes>,
    out: &Path,
    csv: &mut Vec<String>,
) -> anyhow::Result<String> {
    let mut md = String::new();
    let mut arch_csv = vec![format!(
        "key,group,p_max,{},cluster,archetype",
        FEATURES.join(",")
    )];
    let mut centroid_csv = vec![format!("row,cluster,archetype,size,{}", FEATURES.join(","))];
    if let Some(a) = archetypes {
        let counts = assign_archetypes(groups, a, &mut arch_csv);
        let shares = archetype_shares(groups, a, &counts);
        md.push_str(&archetype_md(groups, a, &counts, &shares));
        plot_archetypes(groups, a, &shares, out)?;
        for (gi, g) in groups.names.iter().enumerate() {
            let c = counts.get(g.as_str());
            let n: usize = c.map(|c| c.iter().sum()).unwrap_or(0);
            for (j, name) in a.names.iter().enumerate() {
                csv.push(csv_line([
                    "archetype".to_string(),
                    g.clone(),
                    name.clone(),
                    c.map(|c| c[j]).unwrap_or(0).to_string(),
                    n.to_string(),
                    shares[gi][j].to_string(),
                    String::new(),
                    String::new(),
                ]));
            }
        }
        let row = |head: [String; 4], v: &[f64; 5]| {
            csv_line(head.into_iter().chain(v.iter().map(|x| x.to_string())))
        };
        for (j, name) in a.names.iter().enumerate() {
            for (kind, v) in [
                ("centroid_raw", &a.raw_centroids[j]),
                ("centroid_z", &a.centroids[j]),
            ] {
                centroid_csv.push(row(
                    [
                        kind.to_string(),
                        j.to_string(),
                        name.clone(),
                        a.sizes[j].to_string(),
                    ],
                    v,
                ));
            }
        }
        for (kind, v) in [("z_mean", &a.mean), ("z_sd", &a.std)] {
            let blank = String::new;
            centroid_csv.push(row([kind.to_string(), blank(), blank(), blank()], v));
        }
        write_lines_file(
            out,
            "archetype_centroids.csv",
            centroid_csv.join("\n") + "\n",
        )?;
    }
    write_lines_file(out, "archetypes.csv", arch_csv.join("\n") + "\n")?;
    Ok(md)
}

/// Each player-race's archetype (humans their k-means label, models the
/// nearest human centroid), one `archetypes.csv` row each; the count of each
/// archetype per group.
fn assign_archetypes<'g>(
    groups: &'g Groups,
    a: &Archetypes,
    arch_csv: &mut Vec<String>,
) -> BTreeMap<&'g str, Vec<usize>> {
    let mut counts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, p) in groups.all.iter().enumerate() {
        let c = if i < groups.n_humans {
            a.human_labels[i]
        } else {
            a.assign(p)
        };
        counts
            .entry(p.group.as_str())
            .or_insert_with(|| vec![0; a.names.len()])[c] += 1;
        let f = features(p);
        arch_csv.push(csv_line(
            [p.key.clone(), p.group.clone(), p.p_max.to_string()]
                .into_iter()
                .chain(
                    f.iter()
                        .map(|x| x.map(|v| v.to_string()).unwrap_or_default()),
                )
                .chain([c.to_string(), a.names[c].clone()]),
        ));
    }
    counts
}

/// The share of each archetype in each group (in `groups.names` order).
fn archetype_shares(
    groups: &Groups,
    a: &Archetypes,
    counts: &BTreeMap<&str, Vec<usize>>,
) -> Vec<Vec<f64>> {
    let mut shares: Vec<Vec<f64>> = Vec::new();
    for g in &groups.names {
        let c = counts
            .get(g.as_str())
            .cloned()
            .unwrap_or_else(|| vec![0; a.names.len()]);
        let n: usize = c.iter().sum();
        shares.push(c.iter().map(|&x| x as f64 / n.max(1) as f64).collect());
    }
    shares
}

/// The archetype-share table: a row per archetype with its raw centroid, a
/// column per group (share and count), then the plot.
/// The five features' names in the report's words, in `FEATURES` order.
const FEATURE_LABELS: [&str; 5] = [
    "Unsafe rate",
    "reciprocity",
    "position sensitivity",
    "own autocorrelation",
    "first-round Unsafe",
];

fn archetype_md(
    groups: &Groups,
    a: &Archetypes,
    counts: &BTreeMap<&str, Vec<usize>>,
    shares: &[Vec<f64>],
) -> String {
    let mut md = String::from(
        "### Archetype shares\n\nk-means (k = 4) on the humans' five features (z-scored with the human \
         mean and SD); each model player-race goes to the nearest human centroid. Centroids in raw \
         units: Unsafe rate / reciprocity / position sensitivity / own autocorrelation / first-round \
         Unsafe.\n\n| archetype | centroid |",
    );
    for g in &groups.names {
        md.push_str(&format!(" {} |", group_label(g)));
    }
    md.push_str(&format!(
        "\n|---|---|{}\n",
        "---|".repeat(groups.names.len())
    ));
    for (j, name) in a.names.iter().enumerate() {
        md.push_str(&format!(
            "| {name} | {} |",
            a.raw_centroids[j]
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" / ")
        ));
        for (gi, g) in groups.names.iter().enumerate() {
            let c = counts.get(g.as_str()).map(|c| c[j]).unwrap_or(0);
            md.push_str(&format!(" {:.1}% ({c}) |", 100.0 * shares[gi][j]));
        }
        md.push('\n');
    }
    md.push_str(
        "\nThe z-scores use the human mean and SD (n − 1) of each feature (a missing feature \
         takes the mean); full precision in `archetype_centroids.csv`.\n\n| z-score | ",
    );
    md.push_str(&FEATURE_LABELS.join(" | "));
    md.push_str(" |\n|---|---|---|---|---|---|\n");
    for (label, v) in [("human mean", &a.mean), ("human SD", &a.std)] {
        md.push_str(&format!(
            "| {label} | {} |\n",
            v.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    md.push_str("\n![archetypes](archetypes.png)\n\n");
    md
}

/// The archetype-share plot, `archetypes.png` then `archetypes.svg`.
fn plot_archetypes(
    groups: &Groups,
    a: &Archetypes,
    shares: &[Vec<f64>],
    out: &Path,
) -> anyhow::Result<()> {
    let glabels: Vec<String> = groups
        .names
        .iter()
        .map(|g| {
            if g == "human" {
                "Humans".into()
            } else {
                g.clone()
            }
        })
        .collect();
    plot_shares(
        &out.join("archetypes.png"),
        false,
        &glabels,
        shares,
        &a.names,
    )?;
    plot_shares(
        &out.join("archetypes.svg"),
        true,
        &glabels,
        shares,
        &a.names,
    )
}

/// The strategy mix of every group (humans and every included model
/// player-race, any N): writes `strategies.csv` (one row per player-race),
/// then the table of shares.
fn strategy_section(
    humans: &[PlayerRace],
    players: &[PlayerRace],
    out: &Path,
    csv: &mut Vec<String>,
) -> anyhow::Result<String> {
    let mut strat_csv = vec![
        "key,group,p_max,n_players,horizon,best,unique_best,AS,AU,CS,CAS,behind_unsafe_exploratory"
            .to_string(),
    ];
    let mut mix: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for p in humans.iter().chain(players.iter().filter(|p| p.included)) {
        let c = classify_player(p);
        *mix.entry(p.group.clone())
            .or_default()
            .entry(mix_label(&c).to_string())
            .or_default() += 1;
        let m = |s: &str| {
            c.matches
                .iter()
                .find(|m| m.strategy == s)
                .map(|m| m.mismatches.to_string())
                .unwrap_or_default()
        };
        strat_csv.push(csv_line([
            p.key.clone(),
            p.group.clone(),
            p.p_max.to_string(),
            p.n_players.to_string(),
            c.horizon.to_string(),
            c.best.join("|"),
            c.unique_best.clone().unwrap_or_default(),
            m("AS"),
            m("AU"),
            m("CS"),
            m("CAS"),
            m(super::strategy::EXPLORATORY_BEHIND),
        ]));
    }
    write_lines_file(out, "strategies.csv", strat_csv.join("\n") + "\n")?;
    for (g, m) in mix_order(&mix) {
        let n: usize = m.values().sum();
        for s in STRATEGY_COLUMNS {
            let c = m.get(s).copied().unwrap_or(0);
            csv.push(csv_line([
                "strategy".to_string(),
                g.clone(),
                s.to_string(),
                c.to_string(),
                n.to_string(),
                (c as f64 / n.max(1) as f64).to_string(),
                String::new(),
                String::new(),
            ]));
        }
    }
    Ok(strategy_md(&mix))
}

/// The strategy-mix columns, in the table's order.
const STRATEGY_COLUMNS: [&str; 5] = ["AS", "AU", "CS", "CAS", "tie"];

/// The groups of a strategy mix, humans first, then by name.
fn mix_order(
    mix: &BTreeMap<String, BTreeMap<String, usize>>,
) -> Vec<(&String, &BTreeMap<String, usize>)> {
    let mut v: Vec<_> = mix.iter().collect();
    v.sort_by_key(|(g, _)| (g.as_str() != "human", g.to_string()));
    v
}

/// The strategy-mix table: a row per group (humans first, then by name), the
/// share of each strategy label and the number of player-races.
fn strategy_md(mix: &BTreeMap<String, BTreeMap<String, usize>>) -> String {
    let mut md = String::from(
        "### Strategy mix\n\nNearest reference strategy by Hamming distance (all races of the group, any N; \
         N-player races use AS/AU/CS); `tie` when several are nearest.\n\n| group | AS | AU | CS | CAS | tie | player-races |\n|---|---|---|---|---|---|---|\n",
    );
    for (g, m) in mix_order(mix) {
        let n: usize = m.values().sum();
        md.push_str(&format!("| {} |", group_label(g)));
        for s in STRATEGY_COLUMNS {
            let c = m.get(s).copied().unwrap_or(0);
            md.push_str(&format!(" {:.1}% |", 100.0 * c as f64 / n.max(1) as f64));
        }
        md.push_str(&format!(" {n} |\n"));
    }
    md.push('\n');
    md
}

/// `logit.csv`: every coefficient of the models' fits, then the humans'.
fn write_logit_csv(
    model_fits: &[Result<Fit, String>],
    human_fits: Option<&[Result<Fit, String>]>,
    out: &Path,
) -> anyhow::Result<()> {
    let mut logit_csv = vec![
        "sample,specification,term,coef,se,z,p,nobs,n_clusters,log_likelihood,note".to_string(),
    ];
    logit_csv.extend(super::logit::csv_rows("models", model_fits));
    if let Some(h) = human_fits {
        logit_csv.extend(super::logit::csv_rows("humans", h));
    }
    write_lines_file(out, "logit.csv", logit_csv.join("\n") + "\n")
}
