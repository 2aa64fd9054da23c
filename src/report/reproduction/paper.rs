//! The paper's published figures as data: `src/report/reproduction/paper.toml`
//! (embedded with `include_str!`), every number of the paper's "Results" with
//! the sentence it comes from, and its claims as contrasts.

use serde::Deserialize;

use super::measures::Metric;

/// The embedded figures file.
pub const PAPER_TOML: &str = include_str!("paper.toml");

/// A condition the paper reports (spec §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaperCondition {
    /// Votes, no sabotage, memory, 4/4/4 jobs, α = 0.5.
    Baseline,
    /// The baseline with α = 0.
    NoSizePenalty,
}

impl PaperCondition {
    pub fn label(self) -> &'static str {
        match self {
            PaperCondition::Baseline => "baseline",
            PaperCondition::NoSizePenalty => "no size penalty",
        }
    }
}

/// comp or coop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    Comp,
    Coop,
}

impl Objective {
    pub fn label(self) -> &'static str {
        match self {
            Objective::Comp => "comp",
            Objective::Coop => "coop",
        }
    }
}

/// A (paper condition, objective) cell.
pub type Cell = (PaperCondition, Objective);

/// What the paper publishes for one figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Published {
    /// A mean and sample sd over `n` seeds.
    MeanSd { mean: f64, sd: f64, n: usize },
    /// Every one of the `n` runs had `value` (mean = value, sd = 0).
    Exact { value: f64, n: usize },
    /// A single number or a range or bound, as published (`low`/`high`), and
    /// the half unit of its last digit (`rounding`) that widens it. Each is
    /// a mean over `n` seeds published without its spread: `spread` is the
    /// sd of the reference runs of that condition (the runs the paper
    /// summarises) where they exist, else the runs' own sd is taken for it.
    Interval {
        low: f64,
        high: f64,
        rounding: f64,
        point: bool,
        n: usize,
        spread: Option<Spread>,
    },
}

/// The spread of a figure published without one: the sample sd of the
/// reference runs' values (faithful metrics) and how many runs gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub sd: f64,
    pub n: usize,
}

impl Published {
    /// The summary statistics of a mean ± sd or exact figure.
    pub fn summary(&self) -> Option<crate::stats::Summary> {
        match *self {
            Published::MeanSd { mean, sd, n } => Some(crate::stats::Summary { mean, sd, n }),
            Published::Exact { value, n } => Some(crate::stats::Summary {
                mean: value,
                sd: 0.0,
                n,
            }),
            Published::Interval { .. } => None,
        }
    }

    /// The interval a run's mean is compared with: [low − r, high + r].
    pub fn widened(&self) -> (f64, f64) {
        match *self {
            Published::MeanSd { mean, .. } => (mean, mean),
            Published::Exact { value, .. } => (value, value),
            Published::Interval {
                low,
                high,
                rounding,
                ..
            } => (low - rounding, high + rounding),
        }
    }

    /// The figure as the paper writes it (`14.0 ± 9.5 (n=5)`, `1.13–1.42`,
    /// `≤ 1`, `29%`), fractions as percentages when `percent`.
    pub fn text(&self, percent: bool) -> String {
        let f = |x: f64| super::fmt_value(x, percent);
        match *self {
            Published::MeanSd { mean, sd, n } => format!("{} ± {} (n={n})", f(mean), f(sd)),
            Published::Exact { value, n } => format!("{} in every run (n={n})", f(value)),
            Published::Interval {
                low, high, point, ..
            } => {
                if point {
                    f(low)
                } else if low == f64::NEG_INFINITY {
                    format!("≤ {}", f(high))
                } else if high == f64::INFINITY {
                    format!("≥ {}", f(low))
                } else {
                    format!("{}–{}", f(low), f(high))
                }
            }
        }
    }
}

/// One published figure.
#[derive(Debug, Clone)]
pub struct Figure {
    pub cell: Cell,
    pub metric: Metric,
    /// `None` for a condition-level metric (collisions, donations).
    pub agent: Option<String>,
    pub published: Published,
    pub sentence: String,
    pub also: Option<String>,
}

/// One side of a contrast: a metric of a cell, for one agent, the per-run
/// mean over several agents, or the whole condition.
#[derive(Debug, Clone)]
pub struct Side {
    pub cell: Cell,
    pub metric: Metric,
    pub agents: Vec<String>,
    /// The paper's value of this side, as summary statistics (mean ± sd or
    /// exact) or an interval.
    pub published: Published,
    /// The sentence a side stated only by implication comes from.
    pub implied_by: Option<String>,
}

/// A claim of the paper as an effect: mean(a) − mean(b).
#[derive(Debug, Clone)]
pub struct Contrast {
    pub id: String,
    pub claim: String,
    pub a: Side,
    pub b: Side,
}

/// The whole file.
#[derive(Debug, Clone)]
pub struct Paper {
    pub source: String,
    pub seeds: usize,
    pub figures: Vec<Figure>,
    pub contrasts: Vec<Contrast>,
    /// The declared margin of each metric (`[margins]`): the smallest effect
    /// the paper reports on it. A row that could not detect a difference of
    /// this size is *inconclusive*, not *consistent*.
    pub margins: Vec<(Metric, f64)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    source: String,
    seeds: usize,
    figure: Vec<RawFigure>,
    #[serde(default)]
    contrast: Vec<RawContrast>,
    margins: std::collections::BTreeMap<String, f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFigure {
    condition: PaperCondition,
    objective: Objective,
    metric: Metric,
    agent: Option<String>,
    mean: Option<f64>,
    sd: Option<f64>,
    n: Option<usize>,
    exact: Option<f64>,
    value: Option<f64>,
    low: Option<f64>,
    high: Option<f64>,
    decimals: Option<u32>,
    reference_sd: Option<f64>,
    reference_n: Option<usize>,
    sentence: String,
    also: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSide {
    condition: PaperCondition,
    objective: Objective,
    metric: Metric,
    #[serde(default)]
    agents: Vec<String>,
    exact: Option<f64>,
    implied_by: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContrast {
    id: String,
    claim: String,
    a: RawSide,
    b: RawSide,
}

fn published(f: &RawFigure, seeds: usize) -> Result<Published, String> {
    let rounding = f.decimals.map_or(0.0, |d| 0.5 * 10f64.powi(-(d as i32)));
    let spread = match (f.reference_sd, f.reference_n) {
        (Some(sd), Some(n)) if sd >= 0.0 && n >= 2 => Some(Spread { sd, n }),
        (None, None) => None,
        _ => return Err("reference_sd (≥ 0) and reference_n (≥ 2) go together".into()),
    };
    if spread.is_some() && f.value.is_none() && f.low.is_none() && f.high.is_none() {
        return Err(
            "reference_sd belongs to a figure published without a spread (value, low/high)".into(),
        );
    }
    let n = f.n.unwrap_or(seeds);
    match (f.mean, f.sd, f.exact, f.value, f.low, f.high) {
        (Some(mean), Some(sd), None, None, None, None) => Ok(Published::MeanSd {
            mean,
            sd,
            n: f.n.unwrap_or(seeds),
        }),
        (None, None, Some(value), None, None, None) => Ok(Published::Exact {
            value,
            n: f.n.unwrap_or(seeds),
        }),
        (None, None, None, Some(v), None, None) => Ok(Published::Interval {
            low: v,
            high: v,
            rounding,
            point: true,
            n,
            spread,
        }),
        (None, None, None, None, lo, hi) if lo.is_some() || hi.is_some() => {
            Ok(Published::Interval {
                low: lo.unwrap_or(f64::NEG_INFINITY),
                high: hi.unwrap_or(f64::INFINITY),
                rounding,
                point: false,
                n,
                spread,
            })
        }
        _ => Err("give exactly one of mean + sd, exact, value, or low/high".into()),
    }
}

impl Paper {
    /// The embedded figures.
    pub fn embedded() -> Paper {
        // The file is part of the crate; `tests` parse it, so this cannot fail
        // in a built binary.
        Paper::parse(PAPER_TOML).expect("src/report/reproduction/paper.toml is valid")
    }

    /// Parse and check a figures file.
    pub fn parse(text: &str) -> Result<Paper, String> {
        let raw: RawFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut figures = Vec::new();
        for (i, f) in raw.figure.iter().enumerate() {
            let p = published(f, raw.seeds).map_err(|e| format!("figure {}: {e}", i + 1))?;
            if f.metric.per_agent() != f.agent.is_some() {
                return Err(format!(
                    "figure {}: metric {} {} an agent",
                    i + 1,
                    f.metric.name(),
                    if f.metric.per_agent() {
                        "needs"
                    } else {
                        "takes no"
                    }
                ));
            }
            figures.push(Figure {
                cell: (f.condition, f.objective),
                metric: f.metric,
                agent: f.agent.clone(),
                published: p,
                sentence: f.sentence.clone(),
                also: f.also.clone(),
            });
        }
        let mut contrasts = Vec::new();
        for c in &raw.contrast {
            let side = |s: &RawSide| -> Result<Side, String> {
                let cell = (s.condition, s.objective);
                if let Some(v) = s.exact {
                    if s.implied_by.is_none() {
                        return Err(format!(
                            "contrast {}: an `exact` side needs `implied_by`",
                            c.id
                        ));
                    }
                    return Ok(Side {
                        cell,
                        metric: s.metric,
                        agents: s.agents.clone(),
                        published: Published::Exact {
                            value: v,
                            n: raw.seeds,
                        },
                        implied_by: s.implied_by.clone(),
                    });
                }
                let find = |agent: Option<&str>| {
                    figures
                        .iter()
                        .find(|f| {
                            f.cell == cell && f.metric == s.metric && f.agent.as_deref() == agent
                        })
                        .map(|f| f.published)
                        .ok_or_else(|| {
                            format!(
                                "contrast {}: no figure for {} {} {} {}",
                                c.id,
                                cell.0.label(),
                                cell.1.label(),
                                s.metric.name(),
                                agent.unwrap_or("")
                            )
                        })
                };
                let published = if s.agents.is_empty() {
                    find(None)?
                } else if s.agents.len() == 1 {
                    find(Some(&s.agents[0]))?
                } else {
                    // Several agents: only exact figures of one value combine exactly.
                    let ps: Vec<Published> = s
                        .agents
                        .iter()
                        .map(|a| find(Some(a)))
                        .collect::<Result<_, _>>()?;
                    match ps.as_slice() {
                        [Published::Exact { value, n }, rest @ ..]
                            if rest.iter().all(|p| *p == ps[0]) =>
                        {
                            Published::Exact { value: *value, n: *n }
                        }
                        _ => {
                            return Err(format!(
                                "contrast {}: several agents combine only when each is the same exact figure",
                                c.id
                            ))
                        }
                    }
                };
                Ok(Side {
                    cell,
                    metric: s.metric,
                    agents: s.agents.clone(),
                    published,
                    implied_by: None,
                })
            };
            contrasts.push(Contrast {
                id: c.id.clone(),
                claim: c.claim.clone(),
                a: side(&c.a)?,
                b: side(&c.b)?,
            });
        }
        let mut margins = Vec::new();
        for (k, v) in &raw.margins {
            let m = Metric::ALL
                .into_iter()
                .find(|m| m.name() == k)
                .ok_or_else(|| format!("margins: {k} is not a metric"))?;
            if !(*v > 0.0 && v.is_finite()) {
                return Err(format!("margins: {k} = {v}, expected a positive number"));
            }
            margins.push((m, *v));
        }
        if let Some(m) = Metric::ALL
            .into_iter()
            .find(|m| !margins.iter().any(|(x, _)| x == m))
        {
            return Err(format!("margins: no margin for {}", m.name()));
        }
        Ok(Paper {
            source: raw.source,
            seeds: raw.seeds,
            figures,
            contrasts,
            margins,
        })
    }

    /// The declared margin of `metric`.
    pub fn margin(&self, metric: Metric) -> f64 {
        self.margins
            .iter()
            .find(|(m, _)| *m == metric)
            .map_or(f64::NAN, |(_, v)| *v)
    }

    /// The cells the paper reports, in order of first appearance.
    pub fn cells(&self) -> Vec<Cell> {
        let mut out: Vec<Cell> = Vec::new();
        for f in &self.figures {
            if !out.contains(&f.cell) {
                out.push(f.cell);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_figures_parse_and_cover_the_results_list() {
        let p = Paper::embedded();
        assert_eq!(p.seeds, 5);
        assert_eq!(p.cells().len(), 4);
        // Every figure's sentence is quoted from the paper's Results.
        let seed = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/seeds/002_3760e6cb0ada987f.txt"),
        );
        if let Ok(seed) = seed {
            let plain = seed
                .replace("\\(", "")
                .replace("\\)", "")
                .replace("\\pm", "±")
                .replace("\\approx ", "≈")
                .replace("\\to", "→")
                .replace("\\%", "%")
                .replace("\\times", "×");
            let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
            for f in &p.figures {
                for part in f.sentence.split("...").chain(f.also.as_deref()) {
                    let part = part.split_whitespace().collect::<Vec<_>>().join(" ");
                    assert!(
                        plain.contains(part.trim()),
                        "sentence not in the paper: {part:?}"
                    );
                }
            }
        }
        assert!(p.contrasts.len() >= 10);
    }

    #[test]
    fn a_figure_without_a_value_is_an_error() {
        let bad = "source = \"x\"\nseeds = 5\nmargins = {}\n[[figure]]\ncondition = \"baseline\"\nobjective = \"comp\"\nmetric = \"collisions\"\nsentence = \"s\"\n";
        assert!(Paper::parse(bad).unwrap_err().contains("exactly one"));
    }
}
