//! Sweeps: a grid of Energy Society configs × seeds, run resumably. Each cell
//! writes its own run folder `<out>/<config name>/seed_<seed>`; a cell whose
//! folder holds the completion marker is skipped, so an interrupted sweep
//! resumes where it stopped (an incomplete cell resumes from its last
//! complete round, `energy_society::resume`).
//! [`run_cells`] runs all-scripted cells on worker threads and cells with
//! model-backed agents together on one driver, so their model calls batch;
//! cells share a backend only when their whole backend configuration agrees
//! ([`backend_key`]). [`slurm`]: the same cells as a Slurm job array, and the
//! state of every cell from its files. `joule sweep` is `crate::cli::sweep`.

pub mod slurm;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::backend::SCRIPTED_PREFIX;
use crate::energy_society::config::SocietyConfig;
use crate::energy_society::recorder::Recorder;
use crate::energy_society::runner::{
    backend_for, backend_for_all, check_roster, run_many, MakeJobs,
};

/// The sweep file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// Config files, relative to the sweep file.
    pub configs: Vec<PathBuf>,
    pub seeds: Vec<u64>,
    #[serde(default)]
    pub out: Option<PathBuf>,
}

impl SweepFile {
    /// Parse a sweep file's text; `file` names it in errors.
    pub fn from_toml_str(text: &str, file: &str) -> anyhow::Result<SweepFile> {
        toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{file}: {}",
                crate::energy_society::config::toml_message(&e, text)
            )
        })
    }
}

/// One cell of the grid.
#[derive(Debug, Clone)]
pub struct Cell {
    pub config: SocietyConfig,
    pub dir: PathBuf,
    /// The config file the cell's config was read from (named in errors).
    pub file: PathBuf,
}

fn read_sweep(file: &Path) -> anyhow::Result<SweepFile> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("{}: cannot read the sweep file: {e}", file.display()))?;
    SweepFile::from_toml_str(&text, &file.display().to_string())
}

fn sweep_out(file: &Path, sweep: &SweepFile, out_override: Option<&Path>) -> PathBuf {
    out_override
        .map(Path::to_path_buf)
        .or(sweep.out.clone())
        .unwrap_or_else(|| PathBuf::from("runs").join(SocietyConfig::folder_name(file)))
}

/// The sweep's output folder: `--out`, else the file's `out`, else `runs/<file name>`.
pub fn out_dir(file: &Path, out_override: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(sweep_out(file, &read_sweep(file)?, out_override))
}

/// Expand a sweep file into its cells (config order, then seed order).
pub fn cells(file: &Path, out_override: Option<&Path>) -> anyhow::Result<Vec<Cell>> {
    let sweep = read_sweep(file)?;
    for (key, empty) in [
        ("configs", sweep.configs.is_empty()),
        ("seeds", sweep.seeds.is_empty()),
    ] {
        anyhow::ensure!(
            !empty,
            "{}: key {key}: expected at least one entry, got an empty list (the sweep would \
             have no cells)",
            file.display()
        );
    }
    let base = file.parent().unwrap_or(Path::new("."));
    let out = sweep_out(file, &sweep, out_override);
    let mut cells = Vec::new();
    for c in &sweep.configs {
        let path = base.join(c);
        let mut cfg = SocietyConfig::load(&path)?;
        cfg.resolve_paths(path.parent().unwrap_or(base));
        for &seed in &sweep.seeds {
            let mut cfg = cfg.clone();
            cfg.seed = seed;
            cells.push(Cell {
                file: path.clone(),
                config: cfg,
                dir: out
                    .join(SocietyConfig::folder_name(&path))
                    .join(format!("seed_{seed}")),
            });
        }
    }
    // Two cells in one folder would write into each other's records.
    for (i, a) in cells.iter().enumerate() {
        if let Some(b) = cells[..i].iter().find(|b| b.dir == a.dir) {
            let what = if a.file == b.file {
                format!("seed {} is listed twice", a.config.seed)
            } else {
                format!(
                    "configs `{}` and `{}` share a file name",
                    b.file.display(),
                    a.file.display()
                )
            };
            anyhow::bail!(
                "{}: {what}, so two cells would share the folder {}; nothing was run. Give each config its own file name and each seed once",
                file.display(),
                a.dir.display()
            );
        }
    }
    Ok(cells)
}

/// Check every config of `cells` before the first cell runs: each roster
/// entry can run as configured (`runner::check_roster`). One error lists the
/// problems of every config file.
pub fn check_cells(cells: &[Cell]) -> anyhow::Result<()> {
    let mut seen: Vec<&Path> = Vec::new();
    let mut problems = Vec::new();
    for c in cells {
        if seen.contains(&c.file.as_path()) {
            continue;
        }
        seen.push(&c.file);
        if let Err(e) = check_roster(&c.config, &c.file.display().to_string()) {
            problems.push(format!("{e:#}"));
        }
    }
    match problems.len() {
        0 => Ok(()),
        1 => anyhow::bail!("{}", problems[0]),
        n => anyhow::bail!(
            "{n} configs of the sweep cannot run as configured:\n{}",
            problems.join("\n")
        ),
    }
}

/// What shapes a cell's backend: its whole `[llm]` and `[scripted]`
/// sections, serialized (so every field, including ones added later, counts),
/// and whether any agent is model-backed. Cells with equal keys can share
/// one backend; cells with different keys never do.
pub fn backend_key(cfg: &SocietyConfig) -> String {
    serde_json::json!({
        "llm": cfg.llm,
        "scripted": cfg.scripted,
        "model_backed": !scripted_only(cfg),
    })
    .to_string()
}

fn scripted_only(cfg: &SocietyConfig) -> bool {
    cfg.roster
        .iter()
        .all(|a| a.model.starts_with(SCRIPTED_PREFIX))
}

/// Run every incomplete cell; returns (ran, skipped).
///
/// Cells whose agents are all scripted are independent and cheap to set up,
/// so `jobs` worker threads run them, each cell on its own backend. Cells
/// with model-backed agents are grouped by [`backend_key`]; each group gets
/// one backend (one copy of each model in memory), and `jobs` of its cells
/// at a time run on one driver so their model calls batch together.
pub fn run_cells(
    cells: Vec<Cell>,
    jobs: usize,
    quiet: bool,
    make_jobs: MakeJobs,
) -> anyhow::Result<(usize, usize)> {
    let total = cells.len();
    let (done, todo): (Vec<Cell>, Vec<Cell>) = cells
        .into_iter()
        .partition(|c| Recorder::is_complete(&c.dir));
    if !quiet {
        for c in &done {
            if let Some(diff) =
                crate::energy_society::resume::complete_with_other_config(&c.dir, &c.config)
            {
                crate::errln!(
                    "warning: {} holds a complete run of another version of its config ({diff}); it is counted as done and kept. To run it with the sweep's config, move that folder away and run the sweep again",
                    c.dir.display()
                );
            }
        }
    }
    let skipped = total - todo.len();
    let ran = todo.len();
    let incomplete = todo.iter().filter(|c| c.dir.exists()).count();
    if incomplete > 0 && !quiet {
        crate::errln!(
            "note: {incomplete} cell folder(s) hold an incomplete run (no COMPLETE marker): each resumes from its last complete round (from round 1 when it has none or was made with another config)"
        );
    }
    let bar =
        crate::progress::calls::Tracker::cells(crate::progress::Mode::unless_quiet(quiet), ran);
    let jobs = jobs.max(1);
    let (scripted, model_backed): (Vec<Cell>, Vec<Cell>) =
        todo.into_iter().partition(|c| scripted_only(&c.config));
    let failures = Mutex::new(Vec::new());
    let fail = |dir: &Path, e: anyhow::Error| {
        if let Ok(mut f) = failures.lock() {
            f.push(format!("{}: {e:#}", dir.display()));
        }
    };

    // Scripted cells: a pool of `jobs` threads, one cell at a time each.
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(scripted.len()) {
            scope.spawn(|| loop {
                // Interrupted (SIGINT/SIGTERM): no new cell starts.
                if crate::interrupt::requested().is_some() {
                    break;
                }
                let Some(c) = scripted.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    break;
                };
                bar.unit_started();
                let started = std::time::Instant::now();
                match backend_for(&c.config) {
                    Ok(mut backend) => {
                        let r = run_many(
                            vec![(c.config.clone(), c.dir.clone())],
                            backend.as_mut(),
                            make_jobs,
                            |_| {},
                        );
                        for r in r {
                            if let Err(e) = r {
                                fail(&c.dir, e);
                            }
                        }
                    }
                    Err(e) => fail(&c.dir, e),
                }
                bar.unit_done(Some(&c.dir.display().to_string()), Some(started.elapsed()));
            });
        }
    });

    // Model-backed cells: one backend per backend key, `jobs` cells per driver.
    let mut groups: Vec<(String, Vec<Cell>)> = Vec::new();
    for c in model_backed {
        let key = backend_key(&c.config);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(c),
            None => groups.push((key, vec![c])),
        }
    }
    for (_, group) in groups {
        let configs: Vec<SocietyConfig> = group.iter().map(|c| c.config.clone()).collect();
        let mut backend = match backend_for_all(&configs) {
            Ok(b) => b,
            Err(e) => {
                for c in &group {
                    fail(&c.dir, anyhow::anyhow!("{e:#}"));
                    bar.unit_started();
                    bar.unit_done(Some(&c.dir.display().to_string()), None);
                }
                continue;
            }
        };
        for chunk in group.chunks(jobs) {
            if crate::interrupt::requested().is_some() {
                break;
            }
            let dirs: Vec<PathBuf> = chunk.iter().map(|c| c.dir.clone()).collect();
            chunk.iter().for_each(|_| bar.unit_started());
            let results = run_many(
                chunk
                    .iter()
                    .map(|c| (c.config.clone(), c.dir.clone()))
                    .collect(),
                &mut crate::progress::calls::Watched::new(backend.as_mut(), bar.clone()),
                make_jobs,
                |_| {},
            );
            for (dir, r) in dirs.iter().zip(results) {
                bar.unit_done(Some(&dir.display().to_string()), None);
                if let Err(e) = r {
                    fail(dir, e);
                }
            }
        }
        if let Some(status) = backend.metering() {
            bar.note(&status.summary());
        }
    }
    bar.finish();
    let failures = failures.into_inner().unwrap_or_default();
    if !failures.is_empty() {
        anyhow::bail!(
            "{} cell(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok((ran, skipped))
}
