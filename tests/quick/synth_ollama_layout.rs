//! `joule models synth --layout ollama` against `--layout llama.cpp`: for
//! every model Ollama converts, the two files of one seed hold the same model, so Joule gives
//! the same logits on both, in one pass and as a prefill followed by one-token decode steps.
//!
//! Where every tensor has the same type in both files the logits must be bit-identical: the
//! same values in the same order reach the same kernels. Where a type differs they must agree
//! closely (mean KL ≤ 0.001, top-1 agreement ≥ 0.9: measured at most 2.1e-4 and 11 of 12, one
//! near-tie, for Nemotron-H Q8_0 whose three tensors are BF16), and the test names the tensors: Nemotron-H's `ssm_a`, `ssm_d` and
//! `ssm_norm` are 2-D, so Ollama stores them in the float type (F16 here) where llama.cpp keeps
//! F32; Gemma 4's Q8_0 differs in `per_layer_token_embd` (Ollama leaves it in the float type)
//! and `per_layer_model_proj` (Ollama quantizes it). f16 and q8_0 are the types both tools
//! write with the same mix for the other models; Q4_K_M mixes differ by design (Ollama's own
//! quantizer), so they hold different models and are not compared.
//!
//! To run in seconds the widths are cut (hidden 512, FFN ≤ 1,024, vocabulary 4,096; Llama and
//! Qwen2 keep their head size and GQA ratio with one KV head) and the layer counts are the
//! fewest that keep every kind of layer: the layouts do not depend on the widths.

use joule::inference::files::manifest::Catalog;
use joule::inference::files::synth::recipe::FileType;
use joule::inference::files::synth::{plan_file, synthesize, Layout, SynthConfig, SynthOptions};
use std::collections::HashMap;
use std::path::PathBuf;

/// Positions compared, of which the last `N_IDS - PREFILL` are decoded one at a time.
const N_IDS: usize = 12;
const PREFILL: usize = 8;
const VOCAB: u64 = 4096;

fn ids() -> Vec<u32> {
    (0..N_IDS as u64)
        .map(|i| 1 + (i * 2_654_435_761 % (VOCAB - 1)) as u32)
        .collect()
}

/// The models Ollama converts (qwen3 is refused: see `synth::ollama`).
fn models() -> Vec<(String, String, SynthConfig)> {
    let catalog = Catalog::load(None).expect("manifests");
    catalog
        .iter()
        .filter_map(|m| {
            m.synth
                .clone()
                .map(|s| (m.name.clone(), m.architecture.clone(), s))
        })
        .filter(|(_, arch, _)| arch != "qwen3")
        .collect()
}

fn shrink(arch: &str, cfg: &SynthConfig) -> SynthConfig {
    let mut c = cfg.clone();
    c.vocab = c.vocab.min(VOCAB);
    c.ffn = c.ffn.min(1024);
    match arch {
        // head size = hidden / heads in these files
        "llama" | "qwen2" => {
            let group = c.heads / c.kv_heads;
            c.kv_heads = 1;
            c.heads = group;
            c.hidden = group * c.head_dim;
        }
        _ => c.hidden = 512,
    }
    c
}

fn layers(arch: &str) -> u64 {
    match arch {
        "qwen35" => 2,     // delta-net, full attention
        "nemotron_h" => 3, // Mamba-2, attention, MLP
        "gemma4" => 4,     // sliding, full, and a KV-shared layer of each
        _ => 2,
    }
}

fn options(out: PathBuf, file_type: FileType, layout: Layout, layers: u64) -> SynthOptions {
    SynthOptions {
        out,
        file_type,
        layout,
        layers: Some(layers),
        seed: 7,
        vocab: None,
        chat_template: None,
        quiet: true,
    }
}

/// Tensors whose type differs between the layouts, by llama.cpp name; panics on a tensor of
/// Ollama's file that has no llama.cpp counterpart.
fn type_differences(name: &str, arch: &str, cfg: &SynthConfig, ft: FileType) -> Vec<String> {
    let n = layers(arch);
    let plan = |layout| {
        plan_file(
            name,
            arch,
            cfg,
            &options(PathBuf::from("unused"), ft, layout, n),
        )
        .unwrap()
    };
    let (_, l_entries, _, _) = plan(Layout::LlamaCpp);
    let (_, o_entries, o_inits, _) = plan(Layout::Ollama);
    let llama: HashMap<&str, _> = l_entries
        .iter()
        .map(|e| (e.name.as_str(), (e.dtype, &e.ne)))
        .collect();
    let mut diffs = Vec::new();
    for (e, (_, seed)) in o_entries.iter().zip(&o_inits) {
        let (dtype, ne) = llama
            .get(seed.as_str())
            .unwrap_or_else(|| panic!("{name}: {} has no llama.cpp counterpart", e.name));
        assert_eq!(&e.ne, *ne, "{name}: shape of {}", e.name);
        if e.dtype != *dtype {
            diffs.push(format!("{seed} ({:?} vs {:?})", e.dtype, dtype));
        }
    }
    // what Ollama's file lacks is Qwen3.5's MTP block only
    let seeds: Vec<&str> = o_inits.iter().map(|(_, s)| s.as_str()).collect();
    for e in &l_entries {
        if !seeds.contains(&e.name.as_str()) {
            assert!(
                arch == "qwen35" && e.name.starts_with(&format!("blk.{n}.")),
                "{name}: {} is missing from Ollama's file",
                e.name
            );
        }
    }
    diffs
}

/// (mean KL(a ‖ b), top-1 agreement) over positions (`joule logits --against`'s
/// comparison); panics on degenerate logits.
fn compare(a: &[f32], b: &[f32], vocab: usize) -> (f64, f64) {
    for (i, x) in a.chunks_exact(vocab).enumerate() {
        let spread =
            x.iter().cloned().fold(f32::MIN, f32::max) - x.iter().cloned().fold(f32::MAX, f32::min);
        assert!(spread > 1.0, "degenerate logits at {i}");
    }
    let g = joule::cli::logits::agreement(a, b, vocab).unwrap();
    (g.mean_kl, g.top1)
}

#[test]
fn ollama_layout_holds_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = Vec::new();
    for (name, arch, real) in models() {
        let cfg = shrink(&arch, &real);
        for ft in [FileType::F16, FileType::Q8_0] {
            let diffs = type_differences(&name, &arch, &cfg, ft);
            let mut logits = Vec::new();
            for layout in [Layout::LlamaCpp, Layout::Ollama] {
                let path = dir.path().join(format!("{name}.{ft:?}.{layout:?}.gguf"));
                synthesize(
                    &name,
                    &arch,
                    &cfg,
                    &options(path.clone(), ft, layout, layers(&arch)),
                )
                .unwrap_or_else(|e| panic!("{name} {ft:?} {layout:?}: {e:#}"));
                let model = joule::inference::models::load_model(&path, &candle_core::Device::Cpu)
                    .unwrap_or_else(|e| {
                        panic!("joule cannot load {name} {ft:?} {layout:?}: {e:#}")
                    });
                assert_eq!(model.info().vocab_size as u64, cfg.vocab);
                let mut per = Vec::new();
                for prefill in [None, Some(PREFILL)] {
                    per.push(
                        joule::inference::engine::logits::compute(model.as_ref(), &ids(), prefill)
                            .unwrap(),
                    );
                }
                logits.push(per);
                drop(model);
                std::fs::remove_file(&path).unwrap();
            }
            let vocab = cfg.vocab as usize;
            for (how, (a, b)) in ["one pass", "prefill+decode"]
                .iter()
                .zip(logits[0].iter().zip(&logits[1]))
            {
                assert_eq!(a.len(), b.len());
                let max = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                let (kl, top1) = compare(a, b, vocab);
                if diffs.is_empty() {
                    assert!(
                        a == b,
                        "{name} {ft:?} {how}: same types, but logits differ by up to {max}"
                    );
                } else {
                    // another rounding of a few tensors: the same distribution, nearly
                    assert!(
                        kl <= 1e-3 && top1 >= 0.9,
                        "{name} {ft:?} {how}: mean KL {kl:e}, top-1 {top1}, types differ in {}",
                        diffs.join(", ")
                    );
                }
                eprintln!(
                    "{name} {ft:?} {how}: {} (max |Δlogit| {max:.2e}, mean KL {kl:.1e}, top-1 \
                     {top1}){}",
                    if a == b { "bit-identical" } else { "close" },
                    if diffs.is_empty() {
                        String::new()
                    } else {
                        format!("; types differ in {}", diffs.join(", "))
                    }
                );
            }
            checked.push((name.clone(), ft, diffs.is_empty()));
        }
    }
    assert_eq!(
        checked.len(),
        14,
        "seven models Ollama converts, two types each"
    );
    // the expected exceptions, and only those
    let inexact: Vec<String> = checked
        .iter()
        .filter(|c| !c.2)
        .map(|c| format!("{} {:?}", c.0, c.1))
        .collect();
    assert_eq!(
        inexact,
        [
            "gemma4-e4b Q8_0",
            "nemotron-3-nano-4b F16",
            "nemotron-3-nano-4b Q8_0"
        ]
    );
}

#[test]
fn the_cli_refuses_what_ollama_does_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    for (model, quant, says) in [
        ("qwen3-8b", "q4_k_m", "Qwen3ForCausalLM"),
        ("qwen2.5-7b-instruct", "q6_k", "q4_k_m, q8_0"),
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
            .args([
                "models", "synth", model, "--layout", "ollama", "--quant", quant,
            ])
            .arg("--layers")
            .arg("1")
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{model}: {err}");
        assert!(!out.exists());
    }
}

#[test]
fn the_cli_refuses_an_existing_out_file_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("precious.gguf");
    std::fs::write(&out, "not a model: precious data").unwrap();
    let synth = |force: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_joule"));
        c.args([
            "models",
            "synth",
            "smollm2-135m-instruct",
            "--layers",
            "1",
            "-q",
        ])
        .arg("--out")
        .arg(&out);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    let o = synth(false);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains(&out.display().to_string())
            && err.contains("exists")
            && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "not a model: precious data"
    );
    let o = synth(true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"GGUF");
}
