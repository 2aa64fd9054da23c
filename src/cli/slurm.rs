//! `joule sweep FILE --slurm | --cell INDEX | --status`: the command line of
//! `crate::sweep::slurm` (what each does is written there).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::energy_society::recorder::Recorder;
use crate::sweep::slurm::{
    array_spec, cell_status, mark_queued, now_unix, quote, run_tracked, sbatch_script, slurm_dir,
    ArrayJob, CellStatus, SbatchOptions,
};
use crate::sweep::{cells, out_dir};

/// The sbatch options of `joule sweep --slurm`.
#[derive(Args, Debug, Clone, Default)]
pub struct SlurmArgs {
    /// Slurm partition (`#SBATCH --partition`).
    #[arg(long, requires = "slurm")]
    pub partition: Option<String>,
    /// Time limit of each task, e.g. `04:00:00` (`#SBATCH --time`).
    #[arg(long, requires = "slurm")]
    pub time: Option<String>,
    /// GPUs per task (`#SBATCH --gpus-per-task`).
    #[arg(long, requires = "slurm")]
    pub gpus_per_task: Option<u32>,
    /// CPUs per task (`#SBATCH --cpus-per-task`).
    #[arg(long, requires = "slurm")]
    pub cpus_per_task: Option<u32>,
    /// At most this many tasks of the array run at once (`--array=...%N`).
    #[arg(long, requires = "slurm")]
    pub max_running: Option<u32>,
    /// More sbatch arguments, split like a shell would, each written as an
    /// `#SBATCH` line, e.g. `--extra '--mem=32G --qos=high'`.
    #[arg(long, requires = "slurm", allow_hyphen_values = true)]
    pub extra: Option<String>,
    /// Submit the script with `sbatch` after writing it.
    #[arg(long, requires = "slurm")]
    pub submit: bool,
}

impl SlurmArgs {
    /// The sbatch options these flags give.
    pub fn sbatch(&self) -> SbatchOptions {
        SbatchOptions {
            partition: self.partition.clone(),
            time: self.time.clone(),
            gpus_per_task: self.gpus_per_task,
            cpus_per_task: self.cpus_per_task,
            max_running: self.max_running,
            extra: self.extra.clone(),
        }
    }
}

/// `joule sweep FILE --status`.
pub fn status(file: &Path, out_override: Option<&Path>) -> anyhow::Result<ExitCode> {
    let out = out_dir(file, out_override)?;
    let cells = cells(file, out_override)?;
    let now = now_unix();
    let statuses: Vec<CellStatus> = cells.iter().map(|c| cell_status(&out, c, now)).collect();
    let count = |l: &str| statuses.iter().filter(|s| s.label() == l).count();
    crate::outln!(
        "sweep {}: {} cells: {} done, {} running, {} failed, {} pending",
        file.display(),
        cells.len(),
        count("done"),
        count("running"),
        count("failed"),
        count("pending")
    );
    for (i, (c, s)) in cells.iter().zip(&statuses).enumerate() {
        let note = match s {
            CellStatus::Done => continue,
            CellStatus::Pending(n) if n.is_empty() => String::new(),
            CellStatus::Pending(n) | CellStatus::Running(n) | CellStatus::Failed(n) => {
                format!("  {n}")
            }
        };
        crate::outln!("  {:<8} {:>4}  {}{note}", s.label(), i, c.dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `joule sweep FILE --cell INDEX`: run one cell, keeping its state file.
pub fn run_cell(
    file: &Path,
    out_override: Option<&Path>,
    index: usize,
) -> anyhow::Result<ExitCode> {
    let out = out_dir(file, out_override)?;
    let mut all = cells(file, out_override)?;
    let n = all.len();
    anyhow::ensure!(
        index < n,
        "--cell {index}: the sweep {} has {n} cells (indices 0 to {})",
        file.display(),
        n.saturating_sub(1)
    );
    let mut cell = all.swap_remove(index);
    // The worker threads `joule sweep` chose (`crate::threads`), recorded.
    cell.config.llm.threads = Some(crate::threads::current());
    if Recorder::is_complete(&cell.dir) {
        crate::outln!("cell {index} ({}) is already complete", cell.dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let dir = cell.dir.clone();
    match run_tracked(&out, index, cell) {
        Ok(()) => {
            crate::outln!("cell {index} ({}) complete", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e.context(format!("cell {index} ({})", dir.display()))),
    }
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("resolving {}", p.display()))
}

/// `joule sweep FILE --slurm ...`: write (and with `--submit`, submit) the script.
pub fn write_array(
    file: &Path,
    out_override: Option<&Path>,
    options: &SlurmArgs,
    threads: Option<usize>,
) -> anyhow::Result<ExitCode> {
    let out = absolute(&out_dir(file, out_override)?)?;
    let cells = cells(file, Some(&out))?;
    let now = now_unix();
    let indices: Vec<usize> = cells
        .iter()
        .enumerate()
        .filter(|(_, c)| cell_status(&out, c, now).to_run())
        .map(|(i, _)| i)
        .collect();
    if indices.is_empty() {
        crate::outln!(
            "sweep {}: nothing to submit, every one of its {} cells is done or running (see --status)",
            file.display(),
            cells.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let stem = crate::energy_society::config::SocietyConfig::folder_name(file);
    let job = ArrayJob {
        name: format!("joule-{}", stem.display()),
        indices: indices.clone(),
        joule: std::env::current_exe().context("locating the joule binary")?,
        sweep_file: absolute(file)?,
        out: out.clone(),
        workdir: std::env::current_dir().context("reading the current folder")?,
        options: options.sbatch(),
    };
    let mut script = sbatch_script(&job)?;
    // `--threads N` goes on to every task's `joule sweep --cell`.
    if let Some(n) = threads {
        let cell = " --cell \"$SLURM_ARRAY_TASK_ID\"";
        anyhow::ensure!(
            script.contains(cell),
            "the sbatch script has no `--cell` line"
        );
        script = script.replacen(cell, &format!(" --threads {n}{cell}"), 1);
    }
    let dir = slurm_dir(&out);
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("creating {}", dir.join("logs").display()))?;
    let path = dir.join(format!("{}.sbatch", stem.display()));
    std::fs::write(&path, &script).with_context(|| format!("writing {}", path.display()))?;
    crate::outln!(
        "wrote {}: a job array of {} of the sweep's {} cells (indices {})",
        path.display(),
        indices.len(),
        cells.len(),
        array_spec(&indices)
    );
    if indices.iter().any(|&i| i > 1000) {
        crate::outln!(
            "note: indices above 1000 need the cluster's MaxArraySize raised above {}",
            indices.last().copied().unwrap_or(0)
        );
    }
    if !options.submit {
        crate::outln!(
            "submit it with:\n  sbatch {}",
            quote(&path.display().to_string())?
        );
        crate::outln!(
            "and follow it with:\n  joule sweep {} --out {} --status",
            quote(&file.display().to_string())?,
            quote(&out.display().to_string())?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let res = std::process::Command::new("sbatch")
        .arg(&path)
        .output()
        .context("running `sbatch` (is Slurm installed on this machine?)")?;
    let stdout = String::from_utf8_lossy(&res.stdout);
    if !res.status.success() {
        anyhow::bail!(
            "sbatch {} failed ({}): {}",
            path.display(),
            res.status,
            String::from_utf8_lossy(&res.stderr).trim()
        );
    }
    crate::out!("{stdout}");
    // Mark the array's cells queued, so --status tells them from cells never submitted.
    let job_id = stdout
        .split_whitespace()
        .last()
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .map(String::from);
    mark_queued(&out, &cells, &indices, job_id.as_deref())?;
    Ok(ExitCode::SUCCESS)
}
