//! Wall time and bytes written of the scripted paper grid
//! (`configs/energy-society/sweep-paper.toml`: 12 conditions × 5 seeds, 60
//! runs of 30 rounds) with `joule sweep --jobs 1` and `--jobs 2`, through the
//! real binary (its allocator included). Run: `cargo bench --bench sweep_paper`
//! (prints timings; asserts nothing about speed). `JOULE_BENCH_REPS=N`
//! repeats each measurement N times (default 3) and prints each and the best.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn bytes(dir: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            n += if p.is_dir() {
                bytes(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
        }
    }
    n
}

fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sweep = root.join("configs/energy-society/sweep-paper.toml");
    let reps: usize = std::env::var("JOULE_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("scripted paper grid, {cores} cores available");
    for jobs in [1, 2] {
        let mut times = vec![];
        let mut size = 0;
        for _ in 0..reps {
            let tmp = tempfile::tempdir()?;
            let out: PathBuf = tmp.path().join("out");
            let t = Instant::now();
            let status = Command::new(env!("CARGO_BIN_EXE_joule"))
                .arg("sweep")
                .arg(&sweep)
                .arg("--jobs")
                .arg(jobs.to_string())
                .arg("--out")
                .arg(&out)
                .stdout(std::process::Stdio::null())
                .status()?;
            let secs = t.elapsed().as_secs_f64();
            anyhow::ensure!(status.success(), "joule sweep failed: {status}");
            size = bytes(&out);
            times.push(secs);
        }
        let best = times.iter().copied().fold(f64::INFINITY, f64::min);
        let shown: Vec<String> = times.iter().map(|t| format!("{t:.2}")).collect();
        println!(
            "--jobs {jobs}: {} s (best {best:.2} s), {:.1} MB written",
            shown.join(" / "),
            size as f64 / 1e6
        );
    }
    Ok(())
}
