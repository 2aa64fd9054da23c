//! Build script: with the `cuda` feature, compiles Joule's own CUDA kernels
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

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
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
