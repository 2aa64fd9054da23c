//! `joule sweep FILE`: run a grid of configs × seeds. Each cell writes its own
//! run folder `<out>/<config name>/seed_<seed>`; a cell whose folder holds
//! the completion marker is skipped, so an interrupted sweep resumes where
//! it stopped (an incomplete cell resumes from its last complete round). `--jobs N` runs N
//! all-scripted cells at once on N threads, and N cells with model-backed
//! agents at once on one driver, so their model calls batch together; cells
//! share a backend only when their whole backend configuration agrees
//! (`crate::sweep::backend_key`). The sweep itself is `crate::sweep`; this
//! file is its command line. `--slurm`, `--cell` and `--status` (cluster job
//! arrays, one cell, the state of every cell) live in `slurm.rs`. Every
//! config's roster is checked before any cell runs or is submitted; the
//! exit status is 3 when a cell completed with INVOKE_ERRORs, 130 or 143
//! when SIGINT or SIGTERM stopped it (`crate::interrupt`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::energy_society::call_errors::{CallErrors, EXIT_CALL_ERRORS};
use crate::energy_society::recorder::Recorder;
use crate::energy_society::runner::job_source;
use crate::sweep::{cells, check_cells, run_cells};

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// The sweep file (TOML: `configs`, `seeds`, optional `out`).
    pub file: PathBuf,
    /// Cells run at once: scripted cells on this many threads, cells with
    /// model-backed agents batched on one driver.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub jobs: usize,
    /// Output folder (overrides the file's `out`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only the cell with this index (config order, then seed order);
    /// what each task of a Slurm job array runs.
    #[arg(long, conflicts_with_all = ["slurm", "status"])]
    pub cell: Option<usize>,
    /// Show which cells are done, running, failed or pending, from the run folders.
    #[arg(long, conflicts_with = "slurm")]
    pub status: bool,
    /// Write an sbatch script for a Slurm job array of the cells still to run.
    #[arg(long)]
    pub slurm: bool,
    /// Worker threads that compute, at least 1; overrides the configs'
    /// `[llm] threads` (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub sbatch: super::slurm::SlurmArgs,
}

/// The `[llm] threads` the cells' configs set: one process computes on one
/// pool, so configs that set different counts need `--threads`.
fn config_threads(cells: &[crate::sweep::Cell]) -> anyhow::Result<Option<usize>> {
    let set: std::collections::BTreeMap<usize, &std::path::Path> = cells
        .iter()
        .filter_map(|c| c.config.llm.threads.map(|t| (t, c.file.as_path())))
        .collect();
    if set.len() > 1 {
        let each: Vec<String> = set
            .iter()
            .map(|(t, f)| format!("{t} ({})", f.display()))
            .collect();
        anyhow::bail!(
            "llm.threads: the sweep's configs set different counts of worker threads ({}); a sweep computes on one pool: give --threads N or make them agree",
            each.join(", ")
        );
    }
    Ok(set.keys().next().copied())
}

pub fn run(args: SweepArgs) -> anyhow::Result<ExitCode> {
    if args.status {
        return super::slurm::status(&args.file, args.out.as_deref());
    }
    // Every cell's config is checked before the first cell runs.
    let mut cells = cells(&args.file, args.out.as_deref())?;
    check_cells(&cells)?;
    if !args.slurm {
        let from_configs = match args.threads {
            Some(_) => None,
            None => config_threads(&cells)?,
        };
        let n = crate::threads::setup(args.threads, from_configs)?;
        // Every cell runs on this count (and cells that batch together agree on it).
        for c in &mut cells {
            c.config.llm.threads = Some(n);
        }
    }
    if let Some(i) = args.cell {
        return super::slurm::run_cell(&args.file, args.out.as_deref(), i);
    }
    if args.slurm {
        return super::slurm::write_array(
            &args.file,
            args.out.as_deref(),
            &args.sbatch,
            args.threads,
        );
    }
    let dirs: Vec<PathBuf> = cells.iter().map(|c| c.dir.clone()).collect();
    crate::interrupt::install();
    let ran = run_cells(cells, args.jobs, false, &job_source);
    if let Some(signal) = crate::interrupt::requested() {
        let complete = dirs.iter().filter(|d| Recorder::is_complete(d)).count();
        crate::errln!(
            "interrupted by {}: {complete} of {} cells are complete (each in its run folder); the cells under way keep their complete rounds, without a COMPLETE marker. To continue, run `joule sweep {}{}` again: complete cells are skipped, the others resume from their last complete round",
            crate::interrupt::signal_name(signal),
            dirs.len(),
            args.file.display(),
            args.out
                .as_ref()
                .map(|o| format!(" --out {}", o.display()))
                .unwrap_or_default()
        );
        return Ok(ExitCode::from(crate::interrupt::exit_status(signal)));
    }
    let (ran, skipped) = ran?;
    crate::outln!(
        "sweep {}: {ran} cell(s) run, {skipped} already complete",
        args.file.display()
    );
    // Cells that completed with INVOKE_ERRORs did not run as configured.
    let mut with_errors = Vec::new();
    for d in &dirs {
        if let Some(e) = CallErrors::read(d)? {
            if e.invoke_errors > 0 {
                with_errors.push(format!(
                    "{}: {} INVOKE_ERROR(s)",
                    d.display(),
                    e.invoke_errors
                ));
            }
        }
    }
    if with_errors.is_empty() {
        let all_out: Vec<String> = dirs
            .iter()
            .filter(|d| crate::energy_society::outcome::folder_all_out(d))
            .map(|d| crate::energy_society::outcome::warning(d))
            .collect();
        if all_out.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        let code = crate::energy_society::outcome::EXIT_ALL_OUT;
        crate::errln!(
            "warning: {} cell(s) had every agent out in round 1 (exit status {code}):\n  {}",
            all_out.len(),
            all_out.join("\n  ")
        );
        return Ok(ExitCode::from(code));
    }
    crate::errln!(
        "warning: {} cell(s) completed with INVOKE_ERRORs (exit status {EXIT_CALL_ERRORS}):\n  {}",
        with_errors.len(),
        with_errors.join("\n  ")
    );
    Ok(ExitCode::from(EXIT_CALL_ERRORS))
}
