//! The memory plan against what the process really holds (issue #26, item 3):
//! `joule models inspect FILE --memory --measure` runs the plan's workload in
//! its own process and reports the plan's difference to the resident memory
//! after it (RssAnon, /proc/self/status: VmRSS without the binary's own
//! pages), which must be within 5 %:
//!
//! - `plan_matches_the_process_on_the_default_model` (ignored until the gap
//!   its attribute names is closed): SmolLM2-135M (Q4_1, Joule's own CPU
//!   kernels), 5 sequences of 1,024 tokens;
//! - `plan_matches_the_process_at_real_width`: a one-layer Qwen3-8B
//!   synthesized at real width and with the real vocabulary (151,936 rows),
//!   Q4_K_M: candle's Q4_K/Q6_K kernels with their repacked copies, the
//!   embedding table and the output matrix at full size; 2 sequences of 512
//!   tokens.
//!
//! Linux only (elsewhere `--measure` says it cannot read the resident memory).

mod default_model;

use joule::inference::files::manifest::Catalog;
use joule::inference::files::synth::recipe::FileType;
use joule::inference::files::synth::{synthesize, SynthOptions};
use std::path::Path;

/// Run `--measure` on `file` and return (planned, VmHWM, difference %), printing the output.
fn measure(file: &Path, tokens: usize, seqs: usize) -> (u64, u64, f64) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["models", "inspect"])
        .arg(file)
        .args(["--memory", "--measure", "--tokens"])
        .arg(tokens.to_string())
        .arg("--seqs")
        .arg(seqs.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("load") || l.starts_with("measure") || l.contains("Vm"))
        .collect();
    eprintln!("{}: {}", file.display(), shown.join("\n"));
    let line = text
        .lines()
        .find(|l| l.starts_with("measure: "))
        .unwrap_or_else(|| panic!("no `measure:` line in\n{text}"));
    let field = |name: &str| -> String {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in {line}"))
            .to_string()
    };
    let planned: u64 = field("planned_bytes").parse().unwrap();
    let rss: u64 = field("anon_bytes").parse().unwrap();
    let diff: f64 = field("diff_pct").parse().unwrap();
    // The printed difference is the one of the printed numbers.
    let expect = (planned as f64 - rss as f64) / rss as f64 * 100.0;
    assert!((diff - expect).abs() < 0.01, "{line}");
    (planned, rss, diff)
}

fn check(what: &str, (planned, rss, diff): (u64, u64, f64)) {
    assert!(
        diff.abs() <= 5.0,
        "{what}: the plan ({planned} bytes) is {diff:+.1} % off the process's resident memory ({rss} bytes)"
    );
}

#[test]
#[ignore = "issue #26 item 3, open: on SmolLM2 the plan is 12-30 % under RssAnon (5 × 1,024 \
            tokens: plan ~372 MiB, RssAnon 416-533 MiB). About 20 MiB is mimalloc committing \
            ahead (MIMALLOC_EAGER_COMMIT=0 MIMALLOC_ARENA_EAGER_COMMIT=0 removes it), the rest \
            (10-50 MiB per sequence of 1,024 tokens) buffers the keys and values outgrew, which \
            mimalloc keeps (src/main.rs). At real width (the test below) they are small."]
fn plan_matches_the_process_on_the_default_model() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: resident memory is read from Linux's /proc");
        return;
    }
    let Some(model) = default_model::cached() else {
        return;
    };
    check("SmolLM2-135M Q4_1", measure(&model, 1024, 5));
}

#[test]
fn plan_matches_the_process_at_real_width() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: resident memory is read from Linux's /proc");
        return;
    }
    let catalog = Catalog::load(None).expect("manifests");
    let m = catalog.get("qwen3-8b").expect("the qwen3-8b manifest");
    let cfg = m.synth.clone().expect("qwen3-8b has a [synth] table");
    assert_eq!(cfg.vocab, 151_936, "the real vocabulary");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("qwen3-8b.1L.Q4_K_M.gguf");
    synthesize(
        &m.name,
        &m.architecture,
        &cfg,
        &SynthOptions {
            out: file.clone(),
            file_type: FileType::Q4KM,
            layers: Some(1),
            seed: 1,
            vocab: None,
            chat_template: None,
            quiet: true,
        },
    )
    .unwrap();
    check("qwen3-8b, 1 layer, Q4_K_M", measure(&file, 512, 2));
}
