//! The product's text speaks of the product: the sources, tests, scripts,
//! benchmarks, configs, model manifests and the documentation carry no
//! references to the project's work log (numbered work sessions, numbered
//! issues, `#N` issue links, file names that carry an issue number). Such a
//! reference says when or why something happened, which belongs in the git
//! history and CHANGELOG.md (not scanned); the text should say what the code
//! or the measurement is.
//!
//! Each failure names `file:line` and the matched text.

use std::path::{Path, PathBuf};

use fancy_regex::Regex;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The patterns of a work-log reference, each with what it denotes.
fn patterns() -> Vec<(Regex, &'static str)> {
    let p = |re: &str, what: &'static str| (Regex::new(re).expect("pattern compiles"), what);
    vec![
        // "session N", "sessions N-M", "Session N"
        p(r"(?i)\bsessions?\s+\d+", "a work session number"),
        // "issue #N", "issues #N items 2, 3", "issue N"
        p(r"(?i)\bissues?\s+#?\d+(?![\w-])", "an issue number"),
        // "(#N)", "see #N", "PR #N": a bare `#N` where it denotes an issue or pull
        // request. Ordinals ("agent #1", "[[source]] #1"), upstream links ("GH#53606"),
        // hex colours ("#fff", "#444;" in CSS, which is not scanned for this) and
        // markdown anchors ("(#the-method)") do not match.
        p(
            r"(?i)(?:\(|\b(?:see|fixes|fixed|closes|closed|per|and|from|pr|pull request|pull)\s+)#\d+(?![\w-])",
            "an issue link",
        ),
        // "issueN-single.sh", "issueN"
        p(r"(?i)issue\d+", "a name carrying an issue number"),
        // an item of an issue's list: "issue item" and its number
        p(r"(?i)\bissues?\s+items?\s+\d+", "an issue's item"),
    ]
}

/// Files whose text is looked at: everything but build output, version control
/// and binary files. CSS and SVG are scanned, but not for `#N` (colours).
fn files_under(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "target" || name == ".git" || name == "node_modules" {
            continue;
        }
        files_under(&p, out);
    }
}

/// A line without its indentation and comment or quote marker (`//!`, `///`,
/// `//`, `#`, `*`, `--`, `>`), as it continues the line before it in running text.
fn continuation(line: &str) -> &str {
    let t = line.trim_start();
    let t = ["//!", "///", "//", "#", "*", "--", ">"]
        .iter()
        .find_map(|m| t.strip_prefix(m))
        .unwrap_or(t);
    t.trim_start()
}

/// Every work-log reference in `text` (the file at `rel`), as `rel:line: match (what)`:
/// within a line, and across a line break in wrapped text or comments (the
/// reference is reported on the line where it ends).
fn scan_text(rel: &str, text: &str, pats: &[(Regex, &'static str)]) -> Vec<String> {
    let colours = rel.ends_with(".css") || rel.ends_with(".svg") || rel.ends_with(".html");
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let wrapped = lines.get(i + 1).map(|next| {
            let head = line.trim_end();
            (head.len(), format!("{head} {}", continuation(next)))
        });
        for (k, (re, what)) in pats.iter().enumerate() {
            if k == 2 && colours {
                continue;
            }
            if let Ok(Some(m)) = re.find(line) {
                found.push(format!("{rel}:{}: `{}` ({what})", i + 1, m.as_str()));
                break;
            }
            if let Some((cut, joined)) = &wrapped {
                if let Ok(Some(m)) = re.find(joined) {
                    if m.start() < *cut && m.end() > cut + 1 {
                        found.push(format!("{rel}:{}: `{}` ({what})", i + 2, m.as_str()));
                        break;
                    }
                }
            }
        }
    }
    found
}

/// Every work-log reference under the given paths (relative to the crate root),
/// in file names and in file text.
fn scan(paths: &[&str]) -> Vec<String> {
    let root = root();
    let pats = patterns();
    let name_pat = &pats[3].0;
    let mut files = Vec::new();
    for p in paths {
        files_under(&root.join(p), &mut files);
    }
    let mut found = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&root)
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        if rel == "CHANGELOG.md" {
            continue;
        }
        if let Ok(Some(m)) = name_pat.find(&rel) {
            found.push(format!(
                "{rel}: file name `{}` carries an issue number",
                m.as_str()
            ));
        }
        let Ok(bytes) = std::fs::read(&f) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue; // binary
        };
        found.extend(scan_text(&rel, &text, &pats));
    }
    found
}

fn assert_clean(paths: &[&str]) {
    let found = scan(paths);
    assert!(
        found.is_empty(),
        "{} work-log reference(s) (session or issue numbers) in the product's text; \
         say what the code or measurement is instead, and leave the history to git and \
         CHANGELOG.md:\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

#[test]
fn code_scripts_benches_and_configs_carry_no_work_log_references() {
    assert_clean(&["src", "tests", "scripts", "benches", "configs", "models"]);
}

#[test]
fn documentation_carries_no_work_log_references() {
    assert_clean(&["README.md", "docs", "ARCHITECTURE.md"]);
}

/// The scanner finds what it is for and spares ordinary text. The planted
/// references are assembled at run time so that this file does not hold them.
#[test]
fn scanner_flags_planted_references_and_spares_ordinary_text() {
    let pats = patterns();
    let planted = [
        ["measured in sess", "ion 12"].concat(),
        ["Sessi", "ons 14–23 ran here"].concat(),
        ["(iss", "ue #27 item 4)"].concat(),
        ["see iss", "ues 26 and 27"].concat(),
        ["fixed upstream (", "#31)"].concat(),
        ["benches/iss", "ue27-single.sh FILE"].concat(),
        ["closes ", "#9"].concat(),
        ["//! as measured until sess", "ion\n//! 10, the kernel"].concat(),
        ["see the notes of iss", "ue\n# 27 for the numbers"].concat(),
        ["//! Race files (iss", "ue item 6): one"].concat(),
    ];
    for text in &planted {
        let found = scan_text("x.rs", text, &pats);
        assert_eq!(found.len(), 1, "not flagged: {text:?}");
    }
    let ordinary = [
        "this is a known issue with huge pages",
        "issues with the tokenizer are reported as errors",
        "[[source]] #1 (kind = \"hf\"): missing key `file`",
        "assert!(e.detail.contains(\"agent #1\"))",
        "#[derive(Debug, Clone)]",
        "color: #444; background: #fff;",
        "see [the method](#the-method) and [results](#1-results)",
        "pandas GH#53606: an infinite value must not turn the sum into NaN",
        "a session with 5 agents",
        "let session = 3;",
        "/// one call per session\n/// and 5 agents per run",
        "the issue\n\n27 runs",
    ];
    for text in &ordinary {
        let found = scan_text("x.rs", text, &pats);
        assert!(found.is_empty(), "false positive: {found:?}");
    }
    // Colours in CSS are not read as issue links.
    assert!(scan_text("page.css", "  border: 1px solid #333;", &pats).is_empty());
}
