//! Every `JOULE_*` environment variable Joule reads, in one place: its name,
//! what it changes and the values it takes ([`Knob`], [`RUNTIME`], [`BUILD`]),
//! and the only calls of `std::env::var("JOULE_…")` in the crate (the reading
//! functions below; `tests/quick/knobs_env.rs` checks that no other file of `src/`
//! reads one). Three of them choose the kernels that compute the logits
//! ([`SIMD`], [`CPU_KERNEL_TYPES`], [`CANDLE_KERNELS_ONLY`]); the values of
//! every one that is set go into the `[kernels]` table of a model-backed run's
//! resolved config (`inference::engine::kernel_record`), beside the kernels used.
//!
//! Each variable is read when it always was: nothing is cached here, so a
//! reader sees the environment as it is at the call (the kernel choices are
//! read at each model load and, for `JOULE_CANDLE_KERNELS_ONLY`, at each
//! attention call; the model places when `Sources`/`Catalog` are built).
//! What a value means beyond "set or not" (a SIMD name this CPU can run, a
//! list of GGUF types) is checked where it is used, which gives the error
//! naming the variable and the values it takes.
//!
//! This module imports nothing of the crate.

use std::ffi::OsString;
use std::path::PathBuf;

/// One environment variable: its name, what it changes, the values it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    pub name: &'static str,
    pub what: &'static str,
    pub values: &'static str,
}

/// Picks the SIMD level of Joule's CPU kernels (`quant_matmul::Simd`).
pub const SIMD: Knob = Knob {
    name: "JOULE_SIMD",
    what: "the SIMD level of Joule's CPU matmul kernels (unset: the fastest this CPU runs)",
    values: "portable, avx2, avxvnni, avx512vnni (one this CPU can run; unset or empty: detected)",
};

/// Names the GGUF types Joule's CPU kernels take (`quant_matmul::kernel_types`).
pub const CPU_KERNEL_TYPES: Knob = Knob {
    name: "JOULE_CPU_KERNEL_TYPES",
    what: "the GGUF types Joule's CPU kernels multiply, whatever the shape and at every row \
           count; the others go to candle's quantised matmul (unset: Q4_0, Q4_1, Q5_0, Q5_1, \
           Q5_K, F16, BF16, Q8_0, Q4_K, Q6_K; `split`: the default, \
           but Q4_K and Q6_K that candle repacks are split by each sequence's rows in a step, \
           Joule's kernels for 1-16 and candle's repacked ones for more, holding those weights \
           twice)",
    values: "`all`, `split`, or a comma-separated list of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, \
             Q5_K, Q6_K, F16, BF16 (unset or empty: the default)",
};

/// Sends every projection and attention to candle's own kernels.
pub const CANDLE_KERNELS_ONLY: Knob = Knob {
    name: "JOULE_CANDLE_KERNELS_ONLY",
    what: "run every projection and every attention through candle's kernels instead of \
           Joule's CPU kernels (to compare speed and numerics)",
    values: "any value, even empty (set: candle only; unset: Joule's kernels where they apply)",
};

/// Joule's cache folder (`inference::files::sources`).
pub const HOME: Knob = Knob {
    name: "JOULE_HOME",
    what: "Joule's cache: model files are kept in $JOULE_HOME/models",
    values: "a folder (unset or empty: <user cache>/joule, ~/.cache/joule on Linux)",
};

/// Never download model files (`inference::files::sources`).
pub const OFFLINE: Knob = Knob {
    name: "JOULE_OFFLINE",
    what: "never download model files (as --offline or HF_HUB_OFFLINE=1)",
    values: "1, true, yes or on (anything else: downloads allowed)",
};

/// A folder of user model manifests (`inference::files::manifest::Catalog`).
pub const MODELS_DIR: Knob = Knob {
    name: "JOULE_MODELS_DIR",
    what: "a folder of model manifests (*.toml) that add models or replace built-in ones, \
           when --models-dir is not given",
    values: "a folder (unset or empty: the built-in manifests only)",
};

/// The list of CUDA machine-code targets (`build.rs`, read by cargo at build
/// time with the `cuda` feature; it changes the binary, not a run).
pub const CUDA_ARCHS: Knob = Knob {
    name: "JOULE_CUDA_ARCHS",
    what: "build time, `cuda` feature only (read by build.rs): the sm_XX machine-code targets \
           of Joule's CUDA kernels",
    values: "comma-separated compute capabilities such as 80,90,100 (unset: 80,90)",
};

/// How progress is shown on standard error (`crate::progress::Mode`).
pub const PROGRESS: Knob = Knob {
    name: "JOULE_PROGRESS",
    what: "how long operations show progress on standard error: bars, plain lines (one per \
           round, cell or stage) or nothing; never changes standard output or any file",
    values: "off, plain or bars (unset or anything else: bars when standard error is a \
             terminal, plain lines otherwise)",
};

/// mimalloc's purge delay for the `joule` binary (`src/main.rs`).
pub const PURGE_DELAY: Knob = Knob {
    name: "JOULE_PURGE_DELAY",
    what: "milliseconds the `joule` binary's allocator (mimalloc) keeps freed memory committed \
           before handing it back to the system by itself (set once at start-up; it also hands \
           it back after each prompt step and each load, `inference::engine::load_purge`); \
           -1: never, not even at those points",
    values: "an integer of milliseconds, -1 or more (unset, empty or not such a number: \
             3600000, an hour)",
};

/// Transparent huge pages for the `joule` binary's heap (`inference::engine::huge_pages`).
pub const HUGE_PAGES: Knob = Knob {
    name: "JOULE_HUGE_PAGES",
    what: "let the kernel back the `joule` binary's whole heap with transparent huge pages \
           (set once at start-up; without it only the weights get them): the process then \
           holds up to ~10 % more than the memory plan, by an amount no plan predicts",
    values: "1, true, yes or on (anything else or unset: off, the process holds what is planned)",
};

/// Every variable a run reads.
pub const RUNTIME: [Knob; 8] = [
    SIMD,
    CPU_KERNEL_TYPES,
    CANDLE_KERNELS_ONLY,
    HOME,
    OFFLINE,
    MODELS_DIR,
    PURGE_DELAY,
    HUGE_PAGES,
];

/// Variables that change only what is drawn on standard error. A run reads
/// them but does not record them (a run's files are the same whatever they
/// say), so they are not in [`RUNTIME`].
pub const DISPLAY: [Knob; 1] = [PROGRESS];

/// Variables read when the crate is built (by `build.rs`, which cannot use
/// this module), listed here so that every `JOULE_*` variable is.
pub const BUILD: [Knob; 1] = [CUDA_ARCHS];

/// The value of [`SIMD`] as `quant_matmul::Simd::detect` reads it (on each
/// call; a value that is not Unicode counts as unset).
pub fn simd() -> Option<String> {
    std::env::var(SIMD.name).ok()
}

/// The value of [`CPU_KERNEL_TYPES`] as `quant_matmul::cpu_matrix` reads it
/// (on each call; a value that is not Unicode counts as unset).
pub fn cpu_kernel_types() -> Option<String> {
    std::env::var(CPU_KERNEL_TYPES.name).ok()
}

/// Whether [`CANDLE_KERNELS_ONLY`] is set (to anything, even empty); read on
/// each call.
pub fn candle_kernels_only() -> bool {
    std::env::var_os(CANDLE_KERNELS_ONLY.name).is_some()
}

/// [`HOME`] as a folder: `None` when unset or empty.
pub fn home() -> Option<PathBuf> {
    path_value(std::env::var_os(HOME.name))
}

/// Whether [`OFFLINE`] says never to download.
pub fn offline() -> bool {
    flag(std::env::var(OFFLINE.name).ok().as_deref())
}

/// [`MODELS_DIR`] as a folder: `None` when unset or empty.
pub fn models_dir() -> Option<PathBuf> {
    path_value(std::env::var_os(MODELS_DIR.name))
}

/// [`PURGE_DELAY`] in milliseconds; `None` when unset, empty, not an
/// integer or below -1 (the binary then uses its default).
pub fn purge_delay() -> Option<i64> {
    std::env::var(PURGE_DELAY.name)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|&d| d >= -1)
}

/// Whether [`HUGE_PAGES`] allows transparent huge pages.
pub fn huge_pages() -> bool {
    flag(std::env::var(HUGE_PAGES.name).ok().as_deref())
}

/// A switch's value: on for `1`, `true`, `yes` or `on` (exactly those
/// spellings), off for anything else or unset.
pub fn flag(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v, "1" | "true" | "yes" | "on"))
}

/// A folder's value: `None` when unset or empty.
pub fn path_value(value: Option<OsString>) -> Option<PathBuf> {
    value.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The value of [`PROGRESS`] (read on each call; not Unicode counts as unset).
pub fn progress() -> Option<String> {
    std::env::var(PROGRESS.name).ok()
}

/// The name and value of every [`RUNTIME`] variable that is set now, in
/// [`RUNTIME`]'s order (a value that is not Unicode is written lossily).
pub fn set() -> Vec<(&'static str, String)> {
    RUNTIME
        .iter()
        .filter_map(|k| {
            std::env::var_os(k.name).map(|v| (k.name, v.to_string_lossy().into_owned()))
        })
        .collect()
}

/// The knob named `name`, runtime, display or build time.
pub fn find(name: &str) -> Option<&'static Knob> {
    RUNTIME
        .iter()
        .chain(DISPLAY.iter())
        .chain(BUILD.iter())
        .find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_is_named_once_and_documented() {
        let all: Vec<&Knob> = RUNTIME
            .iter()
            .chain(DISPLAY.iter())
            .chain(BUILD.iter())
            .collect();
        for (i, k) in all.iter().enumerate() {
            assert!(k.name.starts_with("JOULE_"), "{}", k.name);
            assert!(!k.what.is_empty() && !k.values.is_empty(), "{}", k.name);
            assert!(all[i + 1..].iter().all(|o| o.name != k.name), "{}", k.name);
            assert_eq!(find(k.name), Some(*k));
        }
        assert_eq!(RUNTIME.len(), 8);
        assert_eq!(find("JOULE_NOPE"), None);
    }

    #[test]
    fn offline_takes_exactly_four_spellings() {
        for on in ["1", "true", "yes", "on"] {
            assert!(flag(Some(on)), "{on}");
        }
        for off in ["", "0", "false", "no", "off", "TRUE", "On", " 1", "2"] {
            assert!(!flag(Some(off)), "{off:?}");
        }
        assert!(!flag(None));
    }

    #[test]
    fn folders_are_unset_when_empty() {
        assert_eq!(path_value(None), None);
        assert_eq!(path_value(Some(OsString::new())), None);
        assert_eq!(
            path_value(Some(OsString::from("/tmp/j"))),
            Some(PathBuf::from("/tmp/j"))
        );
    }
}
