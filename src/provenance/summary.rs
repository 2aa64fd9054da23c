//! What produced a set of runs, from each run folder's `provenance.json` (`crate::provenance`):
//! the "Provenance" section of a report (the builds, machines, model files with their sha256,
//! and job sources, each with how many runs it served) and the warnings a reader must see
//! before citing a figure: one condition's agent answered by different files, runs of a build
//! whose sources differed from its commit, one condition played by builds of different
//! commits, runs that record no provenance. The Energy Society's report (`report::provenance`,
//! which also writes `provenance.csv`) and the race's (`race::report`) both use it.
//!
//! A run is counted once under each value any of its sessions had, so a run resumed on another
//! file or build is counted under both (and the condition is warned about).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use super::{Provenance, Session};
use crate::backend::ModelOrigin;

/// The provenance of one run as read.
pub struct RunProvenance {
    /// `condition/run_id`.
    pub run: String,
    pub condition: String,
    pub record: Result<Option<Provenance>, String>,
}

impl RunProvenance {
    /// Its sessions; none when it has no readable record.
    pub fn sessions(&self) -> &[Session] {
        match &self.record {
            Ok(Some(p)) => &p.sessions,
            _ => &[],
        }
    }
}

/// The records of folders that are each their own group (the race's experiment folders).
pub fn read_folders(dirs: &[std::path::PathBuf]) -> Vec<RunProvenance> {
    dirs.iter()
        .map(|d| RunProvenance {
            run: d.display().to_string(),
            condition: d.display().to_string(),
            record: Provenance::read(d).map_err(|e| format!("{e:#}")),
        })
        .collect()
}

/// How a model's answers are named in the section: the file's name, or the server's model.
fn answered_by(o: &ModelOrigin) -> String {
    match (&o.file, &o.served_name) {
        (Some(f), _) => std::path::Path::new(f)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| f.clone()),
        (None, Some(name)) => format!(
            "`{name}` served by {}",
            o.server.as_deref().unwrap_or("a server")
        ),
        (None, None) => "unknown".to_string(),
    }
}

/// The identity of a model's answers: the file's sha256, or the server and served name.
pub fn identity(o: &ModelOrigin) -> String {
    match (&o.sha256, &o.served_name) {
        (Some(sha), _) => sha.clone(),
        (None, Some(name)) => format!(
            "served: {name} @ {}{}",
            o.server.as_deref().unwrap_or(""),
            o.served_digest
                .as_deref()
                .map(|d| format!(" (Ollama digest {d})"))
                .unwrap_or_default()
        ),
        (None, None) => format!("file without sha256: {}", o.file.as_deref().unwrap_or("")),
    }
}

/// How the section and warnings name what they count: a condition's runs, or the race's
/// experiment folders.
#[derive(Debug, Clone, Copy)]
pub struct Wording {
    /// What groups records (`condition`).
    pub group: &'static str,
    /// One record's folder, singular and plural (`run`, `runs`).
    pub item: &'static str,
    pub items: &'static str,
}

/// The Energy Society's: runs, grouped by condition.
pub const RUNS: Wording = Wording {
    group: "condition",
    item: "run",
    items: "runs",
};

/// The race's: experiment folders, each its own group.
pub const EXPERIMENTS: Wording = Wording {
    group: "experiment",
    item: "experiment",
    items: "experiments",
};

/// Count, per key, the runs whose sessions have that key.
fn count<K: Ord>(runs: &[RunProvenance], keys: impl Fn(&Session) -> Vec<K>) -> BTreeMap<K, usize> {
    let mut out = BTreeMap::new();
    for r in runs {
        let mine: BTreeSet<K> = r.sessions().iter().flat_map(&keys).collect();
        for k in mine {
            *out.entry(k).or_default() += 1;
        }
    }
    out
}

/// The section's content: an introduction (names in backticks) and its tables; the HTML
/// report renders the same (`report::html::provenance_section`).
pub struct Overview {
    pub intro: String,
    pub tables: Vec<Grid>,
}

/// One table: its column names and rows of cells.
pub struct Grid {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Grid {
    /// A table whose last column counts `w.items`.
    fn new(header: &[&str], w: Wording) -> Grid {
        let mut header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
        header.push(w.items.to_string());
        Grid {
            header,
            rows: Vec::new(),
        }
    }
}

/// What the section says of `runs`; `None` when there are no runs.
pub fn overview(runs: &[RunProvenance], w: Wording) -> Option<Overview> {
    if runs.is_empty() {
        return None;
    }
    let with = runs.iter().filter(|r| !r.sessions().is_empty()).count();
    let intro = format!(
        "What produced the {items}, from each {item} folder's `provenance.json`: {with} of {} {items} record it{}. Each {item} is counted under every value one of its sessions had (a resumed {item} may have two).",
        runs.len(),
        if with < runs.len() {
            " (the others were recorded before Joule wrote provenance, or are reference runs)"
        } else {
            ""
        },
        items = w.items,
        item = w.item,
    );
    let mut tables = Vec::new();
    if with == 0 {
        return Some(Overview { intro, tables });
    }
    let mut builds = Grid::new(&["build"], w);
    for (b, n) in count(runs, |s| vec![s.build.label()]) {
        builds.rows.push(vec![b, n.to_string()]);
    }
    tables.push(builds);
    let mut machines = Grid::new(&["machine"], w);
    for (m, n) in count(runs, |s| vec![s.machine.label()]) {
        machines.rows.push(vec![m, n.to_string()]);
    }
    tables.push(machines);
    let models = count(runs, |s| {
        s.models
            .iter()
            .map(|o| {
                (
                    o.model.clone(),
                    answered_by(o),
                    match (&o.sha256, &o.served_name, &o.served_digest) {
                        (Some(sha), _, _) => sha.clone(),
                        (None, Some(_), Some(d)) => format!("the server's (Ollama digest {d})"),
                        (None, Some(_), None) => "the server's".to_string(),
                        (None, None, _) => "not computed".to_string(),
                    },
                    o.tensor_types
                        .clone()
                        .or_else(|| o.served_details.clone())
                        .unwrap_or_default(),
                )
            })
            .collect()
    });
    if !models.is_empty() {
        let mut grid = Grid::new(&["model", "answered by", "sha256", "tensor types"], w);
        for ((model, by, sha, types), n) in models {
            grid.rows.push(vec![model, by, sha, types, n.to_string()]);
        }
        tables.push(grid);
    }
    let mut jobs = Grid::new(&["jobs", "questions", "digest"], w);
    let counted = count(runs, |s| {
        // The seed varies by run; the source without it is what runs share.
        let source = s
            .jobs
            .source
            .split_whitespace()
            .filter(|w| !w.starts_with("seed="))
            .collect::<Vec<_>>()
            .join(" ");
        vec![(
            source,
            s.jobs.questions.map(|q| q.to_string()).unwrap_or_default(),
            s.jobs.digest.clone().unwrap_or_default(),
        )]
    });
    for ((source, q, digest), n) in counted {
        jobs.rows.push(vec![source, q, digest, n.to_string()]);
    }
    tables.push(jobs);
    Some(Overview { intro, tables })
}

/// The report's "Provenance" section (markdown), empty when there are no runs.
pub fn section(runs: &[RunProvenance], w: Wording) -> String {
    overview(runs, w).map(|o| markdown(&o)).unwrap_or_default()
}

/// The warnings under a report's Provenance section, as markdown; empty without any.
pub fn cautions_markdown(cautions: &[String]) -> String {
    if cautions.is_empty() {
        return String::new();
    }
    let text: String = cautions.iter().map(|n| format!("- {n}\n")).collect();
    format!("Before citing these figures:\n\n{text}\n")
}

/// An overview as a markdown section.
pub fn markdown(o: &Overview) -> String {
    let mut out = format!("## Provenance\n\n{}\n\n", o.intro);
    for t in &o.tables {
        let row = |cells: &[String]| {
            let cells: Vec<String> = cells.iter().map(|c| crate::shown::md_cell(c)).collect();
            format!("| {} |", cells.join(" | "))
        };
        let _ = writeln!(out, "{}", row(&t.header));
        let _ = writeln!(out, "|{}", " --- |".repeat(t.header.len()));
        for r in &t.rows {
            let _ = writeln!(out, "{}", row(r));
        }
        out.push('\n');
    }
    out
}

/// Sentences a reader must see before citing the report's figures.
pub fn warnings(runs: &[RunProvenance], w: Wording) -> Vec<String> {
    let Wording { group, items, .. } = w;
    let mut out = Vec::new();
    for r in runs {
        if let Err(e) = &r.record {
            out.push(format!(
                "{} {}: its provenance could not be read ({e})",
                w.item, r.run
            ));
        }
    }
    let mut conditions: Vec<&str> = runs.iter().map(|r| r.condition.as_str()).collect();
    conditions.dedup();
    for c in conditions {
        let mine: Vec<&RunProvenance> = runs.iter().filter(|r| r.condition == c).collect();
        let missing = mine.iter().filter(|r| matches!(r.record, Ok(None))).count();
        if missing > 0 && missing < mine.len() {
            out.push(format!(
                "{group} {c}: {missing} of {} {items} record no provenance, so what answered them cannot be checked",
                mine.len()
            ));
        }
        let mut files: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let mut commits: BTreeSet<String> = BTreeSet::new();
        let mut dirty = 0;
        for r in &mine {
            let sessions = r.sessions();
            for s in sessions {
                for o in &s.models {
                    files
                        .entry(o.model.as_str())
                        .or_default()
                        .insert(identity(o));
                }
                commits.insert(s.build.label());
            }
            if sessions.iter().any(|s| s.build.dirty == Some(true)) {
                dirty += 1;
            }
        }
        for (model, ids) in files {
            if ids.len() > 1 {
                let short: Vec<String> = ids
                    .iter()
                    .map(|i| match i.len() {
                        64 if i.bytes().all(|b| b.is_ascii_hexdigit()) => {
                            format!("sha256 {}…", &i[..12])
                        }
                        _ => i.clone(),
                    })
                    .collect();
                out.push(format!(
                    "{group} {c}: model {model} was answered by {} different files or servers ({}); its {items} do not share one model",
                    ids.len(),
                    short.join(", ")
                ));
            }
        }
        if commits.len() > 1 {
            out.push(format!(
                "{group} {c}: its {items} were played by {} builds ({}); runs of one config give the same records on every build that plays the same rules, so compare their records before pooling them",
                commits.len(),
                commits.into_iter().collect::<Vec<_>>().join("; ")
            ));
        }
        if dirty > 0 {
            out.push(format!(
                "{group} {c}: {dirty} of {} {items} were played by a build whose sources differed from its commit, so the commit alone does not reproduce them",
                mine.len()
            ));
        }
    }
    out
}

/// The CSV beside the section: one row per run (per experiment for the race), the values of
/// its sessions joined by `; ` where they differ, empty cells for a run without a record.
pub fn csv(runs: &[RunProvenance], w: Wording) -> String {
    let mut out = crate::csv::CsvText::new();
    out.record([
        w.group,
        w.item,
        "sessions",
        "from_rounds",
        "started_utc",
        "builds",
        "dirty",
        "machines",
        "models",
        "jobs_digest",
    ]);
    for r in runs {
        let s = r.sessions();
        let join = |f: &dyn Fn(&Session) -> String| -> String {
            let mut v: Vec<String> = Vec::new();
            for x in s {
                let x = f(x);
                if !v.contains(&x) {
                    v.push(x);
                }
            }
            v.join("; ")
        };
        out.record([
            r.condition.clone(),
            r.run.rsplit('/').next().unwrap_or_default().to_string(),
            s.len().to_string(),
            join(&|x| x.from_round.to_string()),
            join(&|x| x.started_utc.clone()),
            join(&|x| {
                format!(
                    "{} {}",
                    x.build.version,
                    x.build.commit.as_deref().unwrap_or("unknown")
                )
            }),
            match s.is_empty() {
                true => String::new(),
                false => match s.iter().any(|x| x.build.dirty == Some(true)) {
                    true => "True".to_string(),
                    false => "False".to_string(),
                },
            },
            join(&|x| x.machine.label()),
            join(&|x| {
                x.models
                    .iter()
                    .map(|o| format!("{}={}", o.model, identity(o)))
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
            join(&|x| x.jobs.digest.clone().unwrap_or_default()),
        ]);
    }
    out.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::{Build, Jobs};

    fn origin(model: &str, sha: &str) -> ModelOrigin {
        ModelOrigin {
            model: model.into(),
            file: Some(format!("/m/{model}.gguf")),
            sha256: Some(sha.repeat(64 / sha.len())),
            tensor_types: Some("Q4_K 3".into()),
            ..Default::default()
        }
    }

    fn session(commit: &str, dirty: bool, sha: &str) -> Session {
        Session {
            from_round: 1,
            build: Build {
                version: "0.1.0".into(),
                commit: Some(commit.repeat(40 / commit.len())),
                dirty: Some(dirty),
                ..Default::default()
            },
            models: vec![origin("qwen3-8b", sha)],
            jobs: Jobs {
                source: "procedural seed=3 easy=4".into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn run(condition: &str, id: &str, sessions: Vec<Session>) -> RunProvenance {
        RunProvenance {
            run: format!("{condition}/{id}"),
            condition: condition.into(),
            record: Ok(Some(Provenance { sessions })),
        }
    }

    /// A served model name with a `|` or a newline stays in its cell, inside
    /// its backticks too.
    #[test]
    fn names_with_pipes_and_newlines_keep_the_provenance_tables_columns() {
        let o = Overview {
            intro: "i".into(),
            tables: vec![Grid {
                header: vec!["model".into(), "answered by".into(), "runs".into()],
                rows: vec![vec![
                    "qwen3|8b".into(),
                    "`a|b\nc` served by http://x".into(),
                    "2".into(),
                ]],
            }],
        };
        let md = markdown(&o);
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 3, "{md}");
        for r in &rows {
            assert_eq!(crate::shown::md_cells(r).len(), 3, "{r}");
        }
        assert_eq!(
            crate::shown::md_cells(rows[2]),
            ["qwen3|8b", "`a|b\\nc` served by http://x", "2"]
        );
    }

    #[test]
    fn one_file_and_one_clean_build_give_no_warning() {
        let runs = vec![
            run("comp", "run_1", vec![session("a", false, "1")]),
            run("comp", "run_2", vec![session("a", false, "1")]),
        ];
        assert_eq!(warnings(&runs, RUNS), Vec::<String>::new());
        let md = section(&runs, RUNS);
        assert!(md.contains("2 of 2 runs record it"), "{md}");
        assert!(
            md.contains("| joule 0.1.0 (commit aaaaaaaaaaaa) | 2 |"),
            "{md}"
        );
        assert!(
            md.contains(&format!(
                "| qwen3-8b | qwen3-8b.gguf | {} | Q4_K 3 | 2 |",
                "1".repeat(64)
            )),
            "{md}"
        );
        // The seed is left out of the job source the runs share.
        assert!(md.contains("| procedural easy=4 |  |  | 2 |"), "{md}");
        let csv = csv(&runs, RUNS);
        assert!(csv.starts_with("condition,run,sessions,"), "{csv}");
        assert!(
            csv.contains(&format!("comp,run_2,1,1,,0.1.0 {},False,", "a".repeat(40))),
            "{csv}"
        );
    }

    #[test]
    fn mixed_files_builds_dirty_sources_and_missing_records_are_warned_about() {
        let runs = vec![
            run("comp", "run_1", vec![session("a", false, "1")]),
            // Resumed by another build on another file: both counted, both warned about.
            run(
                "comp",
                "run_2",
                vec![session("a", false, "1"), {
                    let mut s = session("b", true, "2");
                    s.from_round = 4;
                    s
                }],
            ),
            RunProvenance {
                run: "comp/run_3".into(),
                condition: "comp".into(),
                record: Ok(None),
            },
            RunProvenance {
                run: "coop/run_1".into(),
                condition: "coop".into(),
                record: Err("provenance.json: not a provenance record".into()),
            },
        ];
        let w = warnings(&runs, RUNS).join("\n");
        assert!(
            w.contains("run coop/run_1: its provenance could not be read"),
            "{w}"
        );
        assert!(
            w.contains("condition comp: 1 of 3 runs record no provenance"),
            "{w}"
        );
        assert!(
            w.contains("model qwen3-8b was answered by 2 different files or servers (sha256 111111111111…, sha256 222222222222…)"),
            "{w}"
        );
        assert!(
            w.contains("condition comp: its runs were played by 2 builds"),
            "{w}"
        );
        assert!(
            w.contains("condition comp: 1 of 3 runs were played by a build whose sources differed"),
            "{w}"
        );
        let md = section(&runs, RUNS);
        assert!(md.contains("2 of 4 runs record it (the others"), "{md}");
        assert!(
            md.contains("| joule 0.1.0 (commit aaaaaaaaaaaa) | 2 |"),
            "{md}"
        );
        assert!(
            md.contains("| joule 0.1.0 (commit bbbbbbbbbbbb, modified sources) | 1 |"),
            "{md}"
        );
        let csv = csv(&runs, RUNS);
        assert!(csv.contains("comp,run_2,2,1; 4,,"), "{csv}");
        assert!(csv.contains("comp,run_3,0,,,,,,,"), "{csv}");
    }

    #[test]
    fn the_html_section_holds_the_same_tables_and_the_warnings() {
        let runs = vec![run("comp", "run_1", vec![session("a", false, "1")])];
        let h =
            crate::report::html::provenance_section(&runs, &["condition comp: <b>".to_string()]);
        assert!(h.starts_with("<section id=\"provenance\""), "{h}");
        assert!(
            h.contains("from each run folder&#39;s <code>provenance.json</code>: 1 of 1 runs"),
            "{h}"
        );
        assert!(h.contains(&format!("<td>{}</td>", "1".repeat(64))), "{h}");
        assert!(
            h.contains("<div class=\"scroll\"><table><thead><tr><th>build</th>"),
            "{h}"
        );
        assert!(
            h.contains("<strong>Before citing:</strong> condition comp: &lt;b&gt;</p>"),
            "{h}"
        );
        assert_eq!(crate::report::html::provenance_section(&[], &[]), "");
    }

    #[test]
    fn hostile_records_are_shown_without_a_panic() {
        // Multibyte text where hex digits belong: 64 bytes of "ü", a commit of "é".
        let mut a = session("é", true, "ü");
        a.models[0].sha256 = Some("ü".repeat(32));
        let b = session("a", false, "1");
        let runs = vec![run("c", "run_1", vec![a]), run("c", "run_2", vec![b])];
        let w = warnings(&runs, RUNS).join("\n");
        assert!(w.contains(&"ü".repeat(32)), "{w}");
        assert!(section(&runs, RUNS)
            .contains(&format!("(commit {}, modified sources)", "é".repeat(12))));
    }

    #[test]
    fn a_served_model_is_named_by_its_server() {
        let mut s = session("a", false, "1");
        s.models = vec![ModelOrigin {
            model: "qwen3-8b".into(),
            server: Some("http://127.0.0.1:8080".into()),
            served_name: Some("qwen3:8b".into()),
            ..Default::default()
        }];
        let md = section(&[run("comp", "run_1", vec![s])], RUNS);
        assert!(
            md.contains(
                "| qwen3-8b | `qwen3:8b` served by http://127.0.0.1:8080 | the server's |  | 1 |"
            ),
            "{md}"
        );
    }
}
