//! Every `JOULE_*` environment variable is read in `src/knobs.rs` alone: no
//! other file of `src/` calls `env::var`/`var_os` with a `JOULE_` name or a
//! constant that holds one, and every `JOULE_*` name `build.rs` reads is
//! listed in `knobs::BUILD`. (Reads the sources; sets no environment.)

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Each `env::var…(` call's text up to its closing parenthesis.
fn env_calls(text: &str) -> Vec<String> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("env::var") {
        let tail = &rest[i..];
        let Some(open) = tail.find('(') else { break };
        let mut depth = 0;
        let mut end = tail.len();
        for (j, c) in tail[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        calls.push(tail[..end].to_string());
        rest = &tail[end.min(tail.len())..];
    }
    calls
}

/// Names of constants in `text` whose value is a `JOULE_*` name (a literal
/// or a `knobs::…name`).
fn joule_consts(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub const ")
                .or_else(|| l.strip_prefix("pub(crate) const "))
                .or_else(|| l.strip_prefix("const "))?;
            let (name, value) = rest.split_once(':')?;
            (value.contains("\"JOULE_") || value.contains("knobs::"))
                .then(|| name.trim().to_string())
        })
        .collect()
}

#[test]
fn only_the_knobs_module_reads_joule_variables() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 50, "{} files", files.len());
    let knobs = root.join("src/knobs.rs");
    let texts: Vec<(PathBuf, String)> = files
        .iter()
        .map(|p| (p.clone(), std::fs::read_to_string(p).unwrap()))
        .collect();
    let consts: Vec<String> = texts
        .iter()
        .filter(|(p, _)| *p != knobs)
        .flat_map(|(_, t)| joule_consts(t))
        .collect();
    // The aliases kept for the error messages and docs of their modules.
    for c in ["SIMD_ENV", "TYPES_ENV", "MODELS_DIR_ENV"] {
        assert!(consts.iter().any(|x| x == c), "{c} not found: {consts:?}");
    }
    let mut bad = Vec::new();
    for (path, text) in &texts {
        if *path == knobs {
            assert!(text.contains("std::env::var(SIMD.name)"));
            continue;
        }
        for call in env_calls(text) {
            let reads_joule = call.contains("JOULE")
                || call.contains("knobs::")
                || call.starts_with("env::vars")
                || consts.iter().any(|c| call.contains(c.as_str()));
            if reads_joule {
                bad.push(format!("{}: {call}", path.display()));
            }
        }
        // A new JOULE_* name belongs in knobs.rs.
        for l in text.lines() {
            let l = l.trim();
            if l.contains("const") && l.contains("= \"JOULE_") {
                bad.push(format!("{}: {l}", path.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "JOULE_* variables read outside src/knobs.rs:\n{}",
        bad.join("\n")
    );
}

#[test]
fn build_time_variables_are_listed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = std::fs::read_to_string(root.join("build.rs")).unwrap();
    let mut names = Vec::new();
    for (i, _) in build.match_indices("\"JOULE_") {
        let name: String = build[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit())
            .collect();
        names.push(name);
    }
    assert!(names.contains(&"JOULE_CUDA_ARCHS".to_string()), "{names:?}");
    for n in names {
        let k = joule::knobs::find(&n).unwrap_or_else(|| panic!("{n} is not in knobs.rs"));
        assert!(
            joule::knobs::BUILD.contains(k),
            "{n} is not in knobs::BUILD"
        );
    }
}

#[test]
fn the_call_scanner_finds_calls_across_lines() {
    let calls = env_calls("let a = std::env::var_os(\n    FOO_ENV,\n);\nstd::env::var(\"X\")");
    assert_eq!(calls.len(), 2);
    assert!(calls[0].contains("FOO_ENV"));
    assert_eq!(calls[1], "env::var(\"X\")");
    assert_eq!(
        joule_consts("pub const A: &str = \"JOULE_A\";\nconst B: u8 = 1;"),
        ["A"]
    );
}
