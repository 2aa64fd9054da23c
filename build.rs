//! Build script: records the git commit the binary is built from (for the
//! provenance every run records, `crate::provenance`) and, with the `cuda`
//! feature, compiles Joule's own CUDA kernels
//! (`kernels/*.cu`) with nvcc into fat binaries (machine code for sm_80 and
//! sm_90, i.e. A100 and H100/H200, plus compute_80 PTX that the driver
//! compiles for any newer GPU) that `src/inference/kernels/cuda` embeds and loads at
//! run time. Without the feature it does nothing.
//!
//! nvcc is found at `$NVCC`, else `bin/nvcc` under `$CUDA_ROOT`, `$CUDA_PATH`
//! or `$CUDA_HOME`, else on `PATH` (`scripts/fetch-cuda-toolkit.sh` makes a
//! toolkit without a GPU). `JOULE_CUDA_ARCHS` (e.g. `80,90,100`) replaces
//! the list of machine-code targets.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn nvcc() -> PathBuf {
    if let Some(p) = env::var_os("NVCC") {
        return PathBuf::from(p);
    }
    for var in ["CUDA_ROOT", "CUDA_PATH", "CUDA_HOME"] {
        if let Some(root) = env::var_os(var) {
            let p = Path::new(&root).join("bin").join("nvcc");
            if p.is_file() {
                return p;
            }
        }
    }
    PathBuf::from("nvcc")
}

/// The paths whose contents make the binary: a build from a checkout whose
/// files here differ from its commit is recorded as `dirty`.
const SOURCES: [&str; 7] = [
    "src",
    "kernels",
    "models",
    "configs",
    "build.rs",
    "Cargo.toml",
    "Cargo.lock",
];

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `JOULE_GIT_COMMIT` (the commit, 40 hex digits) and `JOULE_GIT_DIRTY`
/// (`1` when a file of [`SOURCES`] differs from it) for `env!`/`option_env!`;
/// neither is set outside a git checkout (a source archive). The script
/// runs again when the checked-out commit or a source file changes.
fn record_commit() {
    for p in SOURCES {
        println!("cargo:rerun-if-changed={p}");
    }
    let Some(commit) = git(&["rev-parse", "--verify", "HEAD"]) else {
        return;
    };
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return;
    }
    // Only files that exist: cargo runs the script at every build for a missing one.
    let mut watch: Vec<String> = vec!["HEAD".into(), "packed-refs".into()];
    watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watch {
        if let Some(p) = git(&["rev-parse", "--git-path", &name]) {
            if Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(SOURCES);
    let dirty = git(&status).map(|s| !s.is_empty());
    println!("cargo:rustc-env=JOULE_GIT_COMMIT={commit}");
    if let Some(d) = dirty {
        println!("cargo:rustc-env=JOULE_GIT_DIRTY={}", u8::from(d));
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    record_commit();
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    println!("cargo:rerun-if-changed=kernels");
    for var in [
        "NVCC",
        "CUDA_ROOT",
        "CUDA_PATH",
        "CUDA_HOME",
        "JOULE_CUDA_ARCHS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let archs: Vec<String> = env::var("JOULE_CUDA_ARCHS")
        .unwrap_or_else(|_| "80,90".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let lowest = archs
        .iter()
        .filter_map(|a| a.parse::<u32>().ok())
        .min()
        .unwrap_or(80);
    let nvcc = nvcc();
    let mut sources: Vec<PathBuf> = fs::read_dir("kernels")
        .expect("kernels/ folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    for src in &sources {
        println!("cargo:rerun-if-changed={}", src.display());
        let stem = src
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("kernel file name");
        let out = out_dir.join(format!("{stem}.fatbin"));
        let mut cmd = Command::new(&nvcc);
        cmd.arg("--fatbin")
            .args(["-O3", "-std=c++17", "-lineinfo"])
            .arg("-o")
            .arg(&out)
            .arg(src);
        for a in &archs {
            cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
        }
        cmd.arg(format!(
            "-gencode=arch=compute_{lowest},code=compute_{lowest}"
        ));
        let status = cmd.status().unwrap_or_else(|e| {
            panic!(
                "cannot run nvcc ({}): {e}. Set NVCC or CUDA_ROOT, or run scripts/fetch-cuda-toolkit.sh",
                nvcc.display()
            )
        });
        if !status.success() {
            panic!("nvcc failed on {} ({status})", src.display());
        }
    }
}
