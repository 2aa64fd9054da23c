use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::energy_society::recorder::Recorder;
use crate::energy_society::runner::job_source;
use crate::record::write_json_atomic;

use super::{run_cells, Cell};

/// How often a running cell refreshes its heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// A heartbeat older than this means the task is gone (killed, node lost).
pub const STALE_AFTER: Duration = Duration::from_secs(120);

/// The sbatch options of a job array (`joule sweep --slurm`'s flags).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SbatchOptions {
    /// `#SBATCH --partition`.
    pub partition: Option<String>,
    /// Time limit of each task, e.g. `04:00:00` (`#SBATCH --time`).
    pub time: Option<String>,
    /// `#SBATCH --gpus-per-task`.
    pub gpus_per_task: Option<u32>,
    /// `#SBATCH --cpus-per-task`.
    pub cpus_per_task: Option<u32>,
    /// At most this many tasks of the array run at once (`--array=...%N`).
    pub max_running: Option<u32>,
    /// More sbatch arguments, split like a shell would, each an `#SBATCH` line.
    pub extra: Option<String>,
}

/// What `--status` says about one cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CellStatus {
    Done,
    Running(String),
    Failed(String),
    /// Never started; the note says when it is queued in a submitted array.
    Pending(String),
}

impl CellStatus {
    /// `done`, `running`, `failed` or `pending`.
    pub fn label(&self) -> &'static str {
        match self {
            CellStatus::Done => "done",
            CellStatus::Running(_) => "running",
            CellStatus::Failed(_) => "failed",
            CellStatus::Pending(_) => "pending",
        }
    }

    /// Cells a new submission runs.
    pub fn to_run(&self) -> bool {
        matches!(self, CellStatus::Failed(_) | CellStatus::Pending(_))
    }
}

/// The state file of a cell run with `--cell`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellState {
    pub cell: usize,
    pub dir: PathBuf,
    /// `queued` (in a submitted array), `running`, `done` or `failed`.
    pub state: String,
    pub host: String,
    pub pid: u32,
    /// `SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID` (or `SLURM_JOB_ID`) when run by Slurm.
    #[serde(default)]
    pub slurm_job: Option<String>,
    pub started_unix: u64,
    pub heartbeat_unix: u64,
    #[serde(default)]
    pub error: Option<String>,
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `<out>/slurm`: the sbatch script, the task logs and the cell states.
pub fn slurm_dir(out: &Path) -> PathBuf {
    out.join("slurm")
}

/// Where the state of the cell whose run folder is `dir` lives.
pub fn state_path(out: &Path, dir: &Path) -> PathBuf {
    let rel = dir.strip_prefix(out).unwrap_or(dir);
    let mut p = slurm_dir(out).join("state");
    for c in rel.components() {
        if let std::path::Component::Normal(s) = c {
            p.push(s);
        }
    }
    p.set_extension("json");
    p
}

/// The status of one cell at unix time `now`, from its files. Text read
/// from the state file (host, job, error) comes with control characters
/// escaped; a heartbeat more than `STALE_AFTER` in the future (clock skew)
/// is aged by the state file's modification time instead; a state file
/// that cannot be read or parsed is named in the note.
pub fn cell_status(out: &Path, cell: &Cell, now: u64) -> CellStatus {
    if Recorder::is_complete(&cell.dir) {
        return CellStatus::Done;
    }
    let path = state_path(out, &cell.dir);
    let (state, bad): (Option<CellState>, Option<String>) = match std::fs::read_to_string(&path) {
        Ok(t) => match serde_json::from_str(&t) {
            Ok(s) => (Some(s), None),
            Err(e) => (
                None,
                Some(format!(
                    "{} is not a valid state file ({e})",
                    path.display()
                )),
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
        Err(e) => (None, Some(format!("cannot read {}: {e}", path.display()))),
    };
    match state {
        Some(s) if s.state == "failed" => CellStatus::Failed(
            s.error
                .map(|e| crate::shown::terminal(e.lines().next().unwrap_or("")))
                .unwrap_or_else(|| "failed".into()),
        ),
        Some(s) if s.state == "running" => {
            let who = format!(
                "{}{} pid {}",
                crate::shown::terminal(&s.host),
                s.slurm_job
                    .map(|j| format!(" job {}", crate::shown::terminal(&j)))
                    .unwrap_or_default(),
                s.pid
            );
            let tolerance = STALE_AFTER.as_secs();
            let (age, skew) = if s.heartbeat_unix > now.saturating_add(tolerance) {
                // The writer's clock is ahead (or the file lies): age the
                // heartbeat by when the file last changed, by this clock.
                let written = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                let age = if written > now.saturating_add(tolerance) {
                    u64::MAX
                } else {
                    now.saturating_sub(written)
                };
                let ahead = age_text(s.heartbeat_unix - now);
                (
                    age,
                    format!(" (heartbeat {ahead} in the future: clock skew?)"),
                )
            } else {
                (now.saturating_sub(s.heartbeat_unix), String::new())
            };
            if age <= tolerance {
                CellStatus::Running(format!(
                    "{who}, for {}{skew}",
                    age_text(now.saturating_sub(s.started_unix))
                ))
            } else if skew.is_empty() {
                CellStatus::Failed(format!(
                    "no heartbeat from {who} for {} (killed?)",
                    age_text(age)
                ))
            } else {
                CellStatus::Failed(format!(
                    "no heartbeat from {who} for over {}{skew}",
                    age_text(tolerance)
                ))
            }
        }
        // Queued by a submission, and not started (else the cell would say so).
        Some(s) if s.state == "queued" => CellStatus::Pending(format!(
            "queued in job {}",
            s.slurm_job
                .map_or_else(|| "?".into(), |j| crate::shown::terminal(&j))
        )),
        // `done` without COMPLETE: the folder was changed since; or no state.
        _ if cell.dir.exists() => CellStatus::Failed(match bad {
            Some(b) => format!("run folder incomplete (interrupted); {b}"),
            None => "run folder incomplete (interrupted)".into(),
        }),
        _ => CellStatus::Pending(bad.unwrap_or_default()),
    }
}

/// A duration in seconds, in words (`45 s`, `12 min`, `3.5 h`).
pub fn age_text(s: u64) -> String {
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into())
}

fn slurm_job() -> Option<String> {
    match (
        std::env::var("SLURM_ARRAY_JOB_ID"),
        std::env::var("SLURM_ARRAY_TASK_ID"),
    ) {
        (Ok(j), Ok(t)) => Some(format!("{j}_{t}")),
        _ => std::env::var("SLURM_JOB_ID").ok(),
    }
}

/// Slurm's array syntax for sorted indices: `0-3,7,9-10`.
pub fn array_spec(indices: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// Everything an sbatch script needs.
#[derive(Debug, Clone)]
pub struct ArrayJob {
    pub name: String,
    /// Cell indices the array runs.
    pub indices: Vec<usize>,
    pub joule: PathBuf,
    pub sweep_file: PathBuf,
    pub out: PathBuf,
    pub workdir: PathBuf,
    pub options: SbatchOptions,
}

/// `p` quoted for a POSIX shell.
pub fn quote(p: &str) -> anyhow::Result<String> {
    Ok(shlex::try_quote(p)
        .map_err(|e| anyhow::anyhow!("cannot quote `{p}` for the shell: {e}"))?
        .into_owned())
}

/// The sbatch script of a job array.
pub fn sbatch_script(job: &ArrayJob) -> anyhow::Result<String> {
    anyhow::ensure!(!job.indices.is_empty(), "no cells to run");
    let mut array = array_spec(&job.indices);
    if let Some(n) = job.options.max_running {
        anyhow::ensure!(n > 0, "--max-running: expected at least 1, got 0");
        array += &format!("%{n}");
    }
    let logs = slurm_dir(&job.out).join("logs");
    let mut s = String::new();
    s += "#!/bin/bash\n";
    s += &format!(
        "# Written by `joule sweep --slurm`: one array task per cell still to run of\n# {}.\n",
        job.sweep_file.display()
    );
    s += "# Each task runs that cell exactly as a local `joule sweep` does; see its state with\n";
    s += &format!(
        "#   joule sweep {} --out {} --status\n",
        quote(&job.sweep_file.display().to_string())?,
        quote(&job.out.display().to_string())?
    );
    // Each `#SBATCH` line with the flag or path it came from: a value is one
    // word on one line (a line break would start a shell command of its own).
    let mut lines: Vec<(&str, String)> = vec![
        ("the sweep's name", format!("--job-name={}", job.name)),
        ("the array", format!("--array={array}")),
        (
            "--out",
            format!("--output={}", logs.join("%A_%a.out").display()),
        ),
        (
            "the working folder",
            format!("--chdir={}", job.workdir.display()),
        ),
        ("", "--ntasks=1".into()),
    ];
    if let Some(p) = &job.options.partition {
        anyhow::ensure!(
            !p.is_empty() && !p.chars().any(|c| c.is_whitespace() || c.is_control()),
            "--partition: expected a partition name without spaces or line breaks, got {p:?}"
        );
        lines.push(("--partition", format!("--partition={p}")));
    }
    if let Some(t) = &job.options.time {
        lines.push(("--time", format!("--time={t}")));
    }
    if let Some(g) = job.options.gpus_per_task {
        lines.push(("--gpus-per-task", format!("--gpus-per-task={g}")));
    }
    if let Some(c) = job.options.cpus_per_task {
        lines.push(("--cpus-per-task", format!("--cpus-per-task={c}")));
    }
    if let Some(extra) = &job.options.extra {
        let args = shlex::split(extra).ok_or_else(|| {
            anyhow::anyhow!("--extra: cannot split `{extra}` into arguments (unbalanced quotes?)")
        })?;
        for a in args {
            anyhow::ensure!(
                a.starts_with('-'),
                "--extra: expected sbatch options such as `--mem=32G`, got `{a}` (write \
                 options with their value joined by `=`)"
            );
            lines.push(("--extra", a));
        }
    }
    for (from, line) in lines {
        anyhow::ensure!(
            !line.chars().any(|c| c.is_control()),
            "{from}: an sbatch option cannot hold a line break or other control character: \
             {line:?}"
        );
        s += "#SBATCH ";
        s += &line;
        s.push('\n');
    }
    s += "set -euo pipefail\n";
    s += &format!(
        "exec {} sweep {} --out {} --cell \"$SLURM_ARRAY_TASK_ID\"\n",
        quote(&job.joule.display().to_string())?,
        quote(&job.sweep_file.display().to_string())?,
        quote(&job.out.display().to_string())?
    );
    Ok(s)
}

/// Run one cell through [`run_cells`] (as a local sweep does), keeping its
/// state file at [`state_path`] with a heartbeat every [`HEARTBEAT`]; at the
/// end the file says `done`, or `failed` with the error.
pub fn run_tracked(out: &Path, index: usize, cell: Cell) -> anyhow::Result<()> {
    // A cell another task is running is refused before its state file is
    // touched, so that task's state stays its own (the run takes the hold
    // again, for its whole length, in `run_cells`).
    drop(crate::record::FolderLock::acquire(&cell.dir)?);
    let path = state_path(out, &cell.dir);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let started = now_unix();
    let mut state = CellState {
        cell: index,
        dir: cell.dir.clone(),
        state: "running".into(),
        host: hostname(),
        pid: std::process::id(),
        slurm_job: slurm_job(),
        started_unix: started,
        heartbeat_unix: started,
        error: None,
    };
    write_json_atomic(&path, &state)?;
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let beat = {
        let (path, mut state) = (path.clone(), state.clone());
        std::thread::spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(HEARTBEAT)
            {
                state.heartbeat_unix = now_unix();
                // A failed heartbeat write only makes the status look stale.
                let _ = write_json_atomic(&path, &state);
            }
        })
    };
    let result = run_cells(vec![cell], 1, false, &job_source);
    let _ = stop.send(());
    let _ = beat.join();
    state.heartbeat_unix = now_unix();
    match result {
        Ok(_) => {
            state.state = "done".into();
            write_json_atomic(&path, &state)?;
            Ok(())
        }
        Err(e) => {
            state.state = "failed".into();
            state.error = Some(format!("{e:#}"));
            write_json_atomic(&path, &state)?;
            Err(e)
        }
    }
}

/// Mark the cells `indices` of a submitted array `queued` (job `job_id`), so
/// `--status` tells them from cells never submitted.
pub fn mark_queued(
    out: &Path,
    cells: &[Cell],
    indices: &[usize],
    job_id: Option<&str>,
) -> anyhow::Result<()> {
    let started = now_unix();
    for &i in indices {
        let Some(cell) = cells.get(i) else {
            continue;
        };
        let path = state_path(out, &cell.dir);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        write_json_atomic(
            &path,
            &CellState {
                cell: i,
                dir: cell.dir.clone(),
                state: "queued".into(),
                host: hostname(),
                pid: std::process::id(),
                slurm_job: job_id.map(|j| format!("{j}_{i}")),
                started_unix: started,
                heartbeat_unix: started,
                error: None,
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(options: SbatchOptions) -> ArrayJob {
        ArrayJob {
            name: "joule-sweep-paper".into(),
            indices: vec![0, 1, 2, 5, 7, 8],
            joule: "/opt/joule/bin/joule".into(),
            sweep_file: "/home/a b/sweep.toml".into(),
            out: "/scratch/runs/sweep".into(),
            workdir: "/home/a b".into(),
            options,
        }
    }

    #[test]
    fn array_specs_compress_runs() {
        assert_eq!(array_spec(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(array_spec(&[4]), "4");
        assert_eq!(array_spec(&[]), "");
    }

    #[test]
    fn the_script_runs_each_task_as_one_cell() {
        let s = sbatch_script(&job(SbatchOptions {
            partition: Some("gpu".into()),
            time: Some("04:00:00".into()),
            gpus_per_task: Some(1),
            cpus_per_task: Some(8),
            max_running: Some(4),
            extra: Some("--mem=32G --qos='high prio'".into()),
        }))
        .unwrap();
        let sbatch: Vec<&str> = s.lines().filter(|l| l.starts_with("#SBATCH")).collect();
        assert_eq!(
            sbatch,
            vec![
                "#SBATCH --job-name=joule-sweep-paper",
                "#SBATCH --array=0-2,5,7-8%4",
                "#SBATCH --output=/scratch/runs/sweep/slurm/logs/%A_%a.out",
                "#SBATCH --chdir=/home/a b",
                "#SBATCH --ntasks=1",
                "#SBATCH --partition=gpu",
                "#SBATCH --time=04:00:00",
                "#SBATCH --gpus-per-task=1",
                "#SBATCH --cpus-per-task=8",
                "#SBATCH --mem=32G",
                "#SBATCH --qos=high prio",
            ]
        );
        assert!(s.starts_with("#!/bin/bash\n"));
        assert_eq!(
            s.lines().last().unwrap(),
            "exec /opt/joule/bin/joule sweep '/home/a b/sweep.toml' --out /scratch/runs/sweep --cell \"$SLURM_ARRAY_TASK_ID\""
        );
        // The #SBATCH lines come before the first command, as sbatch requires.
        let lines: Vec<&str> = s.lines().collect();
        let first_cmd = lines.iter().position(|l| l.starts_with("set ")).unwrap();
        let last_sbatch = lines
            .iter()
            .rposition(|l| l.starts_with("#SBATCH"))
            .unwrap();
        assert!(last_sbatch < first_cmd);
    }

    #[test]
    fn bad_extra_arguments_are_refused() {
        let with = |e: &str| {
            sbatch_script(&job(SbatchOptions {
                extra: Some(e.into()),
                ..Default::default()
            }))
        };
        assert!(with("--mem=1G").is_ok());
        assert!(format!("{:#}", with("--qos 'x").unwrap_err()).contains("unbalanced"));
        assert!(format!("{:#}", with("--mem 32G").unwrap_err()).contains("`32G`"));
        assert!(format!("{:#}", with("'--mem=1G\necho x'").unwrap_err()).contains("line break"));
        let opts = |partition: &str, time: &str| {
            sbatch_script(&job(SbatchOptions {
                partition: Some(partition.into()),
                time: Some(time.into()),
                ..Default::default()
            }))
        };
        assert!(opts("gpu", "04:00:00").is_ok());
        let e = format!("{:#}", opts("gpu\necho INJECTED", "1:00").unwrap_err());
        assert!(
            e.contains("--partition") && e.contains("line breaks"),
            "{e}"
        );
        assert!(opts("", "1:00").is_err());
        let e = format!("{:#}", opts("gpu", "1:00\necho INJECTED").unwrap_err());
        assert!(e.starts_with("--time"), "{e}");
        let e = sbatch_script(&ArrayJob {
            indices: vec![],
            ..job(SbatchOptions::default())
        });
        assert!(e.is_err());
    }

    /// A task given a cell another task is running leaves that task's state
    /// file alone and says why it stopped.
    #[test]
    fn a_task_for_a_running_cell_is_refused_before_it_touches_the_state() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let mut config = crate::energy_society::config::SocietyConfig::baseline("greedy");
        config.max_rounds = 1;
        let cell = Cell {
            config,
            dir: out.join("baseline").join("seed_1"),
            file: "baseline.toml".into(),
        };
        let held = crate::record::FolderLock::acquire(&cell.dir).unwrap();
        let e = run_tracked(&out, 0, cell.clone()).unwrap_err().to_string();
        assert!(e.contains("being written by another joule process"), "{e}");
        assert!(!state_path(&out, &cell.dir).exists());
        drop(held);
        run_tracked(&out, 0, cell.clone()).unwrap();
        assert!(cell.dir.join("COMPLETE").is_file());
    }

    /// Write `c`'s state file in `out` as a task does (host n01, pid 7, job
    /// 12_3, heartbeat `beat`), after `edit`; its path.
    fn write_state(
        out: &Path,
        c: &Cell,
        state: &str,
        beat: u64,
        edit: impl FnOnce(&mut CellState),
    ) -> PathBuf {
        let p = state_path(out, &c.dir);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let mut s = CellState {
            cell: 0,
            dir: c.dir.clone(),
            state: state.into(),
            host: "n01".into(),
            pid: 7,
            slurm_job: Some("12_3".into()),
            started_unix: beat,
            heartbeat_unix: beat,
            error: None,
        };
        edit(&mut s);
        write_json_atomic(&p, &s).unwrap();
        p
    }

    #[test]
    fn status_reads_markers_and_heartbeats() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let cell = |name: &str| Cell {
            config: crate::energy_society::config::SocietyConfig::baseline("greedy"),
            dir: out.join("baseline").join(name),
            file: "baseline.toml".into(),
        };
        let now = 1_000_000;
        let write = |c: &Cell, state: &str, beat: u64, error: Option<&str>| {
            write_state(&out, c, state, beat, |s| s.error = error.map(String::from));
        };
        let pending = cell("seed_1");
        assert_eq!(
            cell_status(&out, &pending, now),
            CellStatus::Pending(String::new())
        );
        let queued = cell("seed_7");
        write(&queued, "queued", now - 9999, None);
        let s = cell_status(&out, &queued, now);
        assert_eq!(s, CellStatus::Pending("queued in job 12_3".into()));
        assert!(s.to_run());

        let done = cell("seed_2");
        std::fs::create_dir_all(&done.dir).unwrap();
        std::fs::write(done.dir.join("COMPLETE"), "complete\n").unwrap();
        write(&done, "running", 0, None);
        assert_eq!(cell_status(&out, &done, now), CellStatus::Done);

        let running = cell("seed_3");
        write(&running, "running", now - 20, None);
        let s = cell_status(&out, &running, now);
        assert!(
            matches!(&s, CellStatus::Running(n) if n.contains("job 12_3")),
            "{s:?}"
        );
        assert!(!s.to_run());

        let killed = cell("seed_4");
        write(&killed, "running", now - 600, None);
        let s = cell_status(&out, &killed, now);
        assert!(
            matches!(&s, CellStatus::Failed(n) if n.contains("killed")),
            "{s:?}"
        );
        assert!(s.to_run());

        let failed = cell("seed_5");
        write(&failed, "failed", now, Some("server unreachable\nmore"));
        assert_eq!(
            cell_status(&out, &failed, now),
            CellStatus::Failed("server unreachable".into())
        );

        let interrupted = cell("seed_6");
        std::fs::create_dir_all(&interrupted.dir).unwrap();
        assert!(matches!(
            cell_status(&out, &interrupted, now),
            CellStatus::Failed(_)
        ));

        assert_eq!(
            state_path(&out, &running.dir),
            out.join("slurm/state/baseline/seed_3.json")
        );
    }

    #[test]
    fn status_doubts_future_heartbeats_and_escapes_state_text() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let cell = |name: &str| Cell {
            config: crate::energy_society::config::SocietyConfig::baseline("greedy"),
            dir: out.join("baseline").join(name),
            file: "baseline.toml".into(),
        };
        let now = now_unix();
        let write = |c: &Cell, state: &str, beat: u64, host: &str, error: Option<&str>| {
            write_state(&out, c, state, beat, |s| {
                s.host = host.into();
                s.slurm_job = None;
                s.error = error.map(String::from);
            })
        };
        // A day ahead, written just now: running, with the skew noted.
        let skewed = cell("seed_1");
        let p = write(&skewed, "running", now + 86_400, "n1", None);
        let s = cell_status(&out, &skewed, now);
        assert!(
            matches!(&s, CellStatus::Running(n) if n.contains("clock skew?")),
            "{s:?}"
        );
        // Not written for ten minutes: stale, to run again.
        let old = SystemTime::now() - Duration::from_secs(600);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let s = cell_status(&out, &skewed, now);
        assert!(
            matches!(&s, CellStatus::Failed(n) if n.contains("clock skew?")),
            "{s:?}"
        );
        assert!(s.to_run());

        let failed = cell("seed_2");
        write(&failed, "failed", now, "n1", Some("\u{1b}[2JALL GOOD\u{7}"));
        assert_eq!(
            cell_status(&out, &failed, now),
            CellStatus::Failed("\\u{1b}[2JALL GOOD\\u{7}".into())
        );
        let host = cell("seed_3");
        write(&host, "running", now, "n\u{1b}[31m1", None);
        let s = cell_status(&out, &host, now);
        assert!(
            matches!(&s, CellStatus::Running(n) if n.starts_with("n\\u{1b}[31m1 pid 7")),
            "{s:?}"
        );

        // A state file that is not JSON is named, not silently pending.
        let garbled = cell("seed_4");
        let p = state_path(&out, &garbled.dir);
        std::fs::write(&p, "{\"cell\":").unwrap();
        let s = cell_status(&out, &garbled, now);
        assert!(
            matches!(&s, CellStatus::Pending(n) if n.contains("seed_4.json is not a valid state file")),
            "{s:?}"
        );
        std::fs::create_dir_all(&garbled.dir).unwrap();
        let s = cell_status(&out, &garbled, now);
        assert!(
            matches!(&s, CellStatus::Failed(n) if n.contains("interrupted") && n.contains("seed_4.json")),
            "{s:?}"
        );
    }
}
