//! The memory plan against what the process really holds:
//! `joule models inspect FILE --memory --measure` runs the plan's workload in
//! its own process and reports the plan's difference to what it holds,
//! which must be within 5 % both ways: weights and states against the
//! resident memory at rest after the workload (RssAnon, /proc/self/status:
//! VmRSS without the binary's own pages; each prompt step hands its buffers
//! back, `inference::engine::load_purge`), and the whole plan (one step's
//! scratch too) against the peak (VmHWM):
//!
//! - `plan_matches_the_process_on_the_default_model`: SmolLM2-135M (Q4_1,
//!   Joule's own CPU kernels), 5 sequences of 4,096 tokens (the issue's);
//! - `plan_matches_the_process_at_real_width`: a one-layer Qwen3-8B
//!   synthesized at real width and with the real vocabulary (151,936 rows),
//!   Q4_K_M: candle's Q4_K/Q6_K kernels with their repacked copies, the
//!   embedding table and the output matrix at full size; 2 sequences of 512
//!   tokens; and the same run with the allocator told never to hand memory
//!   back (`JOULE_PURGE_DELAY=-1`, as the binary once was),
//!   which must hold more at rest (a quarter of the planned scratch) and fail
//!   the check: it fails if prompt steps' buffers stay resident again;
//! - `plan_matches_the_process_for_a_delta_net_hybrid_at_real_width`: a
//!   two-layer Qwen3.5-4B (one delta-net, one attention layer), real width
//!   and vocabulary, Q4_K_M; 2 sequences of 600 tokens (recurrent
//!   snapshots at 256 and 512 and before the last prompt token).
//!
//! Linux only (elsewhere `--measure` says it cannot read the resident memory).

use crate::default_model;

use joule::inference::files::manifest::Catalog;
use joule::inference::files::synth::recipe::FileType;
use joule::inference::files::synth::{synthesize, SynthOptions};
use std::path::Path;

/// What one `--measure` run printed.
#[derive(Debug, Clone, Copy)]
struct Measured {
    /// Planned at rest (RssAnon before + weights + states) and RssAnon after.
    planned: u64,
    anon: u64,
    diff: f64,
    /// Planned at the peak (VmRSS before + the whole plan) and VmHWM.
    peak_planned: u64,
    hwm: u64,
    diff_hwm: f64,
}

/// Run `--measure` on `file` (with `JOULE_PURGE_DELAY=delay` if given) and
/// return what it printed.
fn measure(file: &Path, tokens: usize, seqs: usize, delay: Option<&str>) -> Measured {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_joule"));
    cmd.args(["models", "inspect"])
        .arg(file)
        .args(["--memory", "--measure", "--tokens"])
        .arg(tokens.to_string())
        .arg("--seqs")
        .arg(seqs.to_string())
        .env_remove("JOULE_PURGE_DELAY");
    if let Some(d) = delay {
        cmd.env("JOULE_PURGE_DELAY", d);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("load")
                || l.starts_with("measure")
                || l.contains("Vm")
                || l.contains("total:")
        })
        .collect();
    eprintln!("{} (delay {delay:?}): {}", file.display(), shown.join("\n"));
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
    let m = Measured {
        planned: field("planned_bytes").parse().unwrap(),
        anon: field("anon_bytes").parse().unwrap(),
        diff: field("diff_pct").parse().unwrap(),
        peak_planned: field("peak_planned_bytes").parse().unwrap(),
        hwm: field("hwm_bytes").parse().unwrap(),
        diff_hwm: field("diff_hwm_pct").parse().unwrap(),
    };
    // The printed differences are the ones of the printed numbers.
    let pct = |p: u64, r: u64| (p as f64 - r as f64) / r as f64 * 100.0;
    assert!((m.diff - pct(m.planned, m.anon)).abs() < 0.01, "{line}");
    assert!(
        (m.diff_hwm - pct(m.peak_planned, m.hwm)).abs() < 0.01,
        "{line}"
    );
    m
}

fn check(what: &str, m: Measured) {
    assert!(
        m.diff.abs() <= 5.0,
        "{what}: the plan at rest ({} bytes) is {:+.1} % off the process's resident memory after the workload ({} bytes)",
        m.planned,
        m.diff,
        m.anon
    );
    assert!(
        m.diff_hwm.abs() <= 5.0,
        "{what}: the plan with its scratch ({} bytes) is {:+.1} % off the process's peak (VmHWM {} bytes)",
        m.peak_planned,
        m.diff_hwm,
        m.hwm
    );
}

/// The workload (5 sequences of 4,096 tokens) on the default model.
/// With transparent huge pages (the binary's former setting) the
/// plan fell 10.8 % short here, 11 % at the peak; without them 1.3 %. At 5 ×
/// 1,024 it is still 10.7 % short (42 MiB; 1 × 1,024: 5 %, 5 × 2,048: 4.2 %),
/// a residue that shrinks as the sequences grow; not explained (the
/// suspect: allocator pages that hold a live key/value buffer beside a freed
/// step buffer of the same size class, which cannot be handed back). That is
/// not the workload, so it is written down here, not tested.
#[test]
fn plan_matches_the_process_on_the_default_model() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: resident memory is read from Linux's /proc");
        return;
    }
    let Some(model) = default_model::cached() else {
        return;
    };
    check("SmolLM2-135M Q4_1", measure(&model, 4096, 5, None));
}

/// A real-width file of the roster model `name` with its first `layers`
/// layers (their kinds in the model's proportions), Q4_K_M, in `dir`.
fn synth_real_width(name: &str, layers: u64, dir: &Path, vocab: u64) -> std::path::PathBuf {
    let catalog = Catalog::load(None).expect("manifests");
    let m = catalog
        .get(name)
        .unwrap_or_else(|_| panic!("the {name} manifest"));
    let cfg = m
        .synth
        .clone()
        .unwrap_or_else(|| panic!("{name} has a [synth] table"));
    assert_eq!(cfg.vocab, vocab, "{name}: the real vocabulary");
    let file = dir.join(format!("{name}.{layers}L.Q4_K_M.gguf"));
    synthesize(
        &m.name,
        &m.architecture,
        &cfg,
        &SynthOptions {
            out: file.clone(),
            file_type: FileType::Q4KM,
            layout: joule::inference::files::synth::Layout::LlamaCpp,
            layers: Some(layers),
            seed: 1,
            vocab: None,
            chat_template: None,
            quiet: true,
        },
    )
    .unwrap();
    file
}

#[test]
fn plan_matches_the_process_at_real_width() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: resident memory is read from Linux's /proc");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = synth_real_width("qwen3-8b", 1, dir.path(), 151_936);
    let handed_back = measure(&file, 512, 2, None);
    check("qwen3-8b, 1 layer, Q4_K_M", handed_back);
    // Kept for good (the binary's former setting), the prompt
    // steps' buffers stay resident: 46-54 MiB more at rest here, about half
    // the planned scratch (the peak plan less the plan at rest, less the few
    // MiB VmRSS had beyond RssAnon before loading), which on this file is
    // ~5 % of the plan: measured -4.99 to -5.3 % against the plan, so the
    // 5 % line itself is not the test; the plan falling at least 2.5 points
    // further than with the buffers handed back is.
    let kept = measure(&file, 512, 2, Some("-1"));
    let scratch = kept.peak_planned.saturating_sub(kept.planned);
    assert!(
        kept.anon > handed_back.anon + scratch / 4 && kept.diff < handed_back.diff - 2.5,
        "with the purge delay at -1 the process should keep its prompt steps' buffers and the \
         plan fall 2.5 points further short (RssAnon {} bytes, plan {:+.1} %, against {} and \
         {:+.1} % when they are handed back; planned scratch ~{scratch})",
        kept.anon,
        kept.diff,
        handed_back.anon,
        handed_back.diff
    );
}

/// Qwen3.5's hybrid: a delta-net layer (its recurrent state held live,
/// staged by each step and snapshotted every 256 prompt tokens) and a gated
/// attention layer, at real width with the real 248,320-token vocabulary.
#[test]
fn plan_matches_the_process_for_a_delta_net_hybrid_at_real_width() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: resident memory is read from Linux's /proc");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = synth_real_width("qwen3.5-4b", 2, dir.path(), 248_320);
    check("qwen3.5-4b, 2 layers, Q4_K_M", measure(&file, 600, 2, None));
}
