//! `joule models synth` against llama.cpp: quant mixes and logits.
//!
//! - `quant_mix_matches_llama_quantize`: for every manifest with a `[synth]` table, at the real
//!   size (every layer, the real vocabulary), the type Joule gives each tensor for Q4_K_M,
//!   Q5_K_M, Q6_K and Q8_0 is the type `llama-quantize` chooses for the same f16 file (its
//!   `--dry-run` reads only the header, so the f16 file is written as a header with a sparse
//!   data section).
//! - `logits_match_llama_cpp`: for every model, files synthesized in Q8_0 and Q4_K_M at the
//!   real widths with the fewest layers that keep every kind of layer give llama.cpp's logits
//!   (scripts/llama-logits.cpp) at every position, in one pass and as a prefill followed by
//!   one-token decode steps: mean KL ≤ 0.01 and top-1 agreement ≥ 0.9. To fit CI's budget the
//!   vocabulary is cut to 32,768 rows (the embedding and output matrices dominate the cost and
//!   their width is unchanged); `logits_match_llama_cpp_real_vocabulary` (ignored by default)
//!   runs the same check with the real vocabularies.
//!
//! llama.cpp's binaries are found beside `JOULE_LLAMA_SERVER` (scripts/test.sh sets it to
//! `$(scripts/fetch-llama-cpp.sh | tail -1)/llama-server`; that script also builds
//! `llama-logits`). Without it the tests are skipped with a note, except in CI.

use candle_core::quantized::GgmlDType;
use joule::inference::files::manifest::Catalog;
use joule::inference::files::synth::recipe::FileType;
use joule::inference::files::synth::{
    gguf_writer, plan_file, synthesize, SynthConfig, SynthOptions,
};
use std::path::{Path, PathBuf};
use std::process::Command;

fn llama_bin() -> Option<PathBuf> {
    let ci = std::env::var_os("CI").is_some();
    match std::env::var_os("JOULE_LLAMA_SERVER").map(PathBuf::from) {
        Some(server) => {
            let dir = server.parent().map(Path::to_path_buf).unwrap_or_default();
            for tool in ["llama-quantize", "llama-logits"] {
                assert!(
                    dir.join(tool).is_file(),
                    "{} is missing: run scripts/fetch-llama-cpp.sh (it builds it)",
                    dir.join(tool).display()
                );
            }
            Some(dir)
        }
        None if ci => panic!(
            "JOULE_LLAMA_SERVER is not set: .ci/run must build llama.cpp with \
             scripts/fetch-llama-cpp.sh (scripts/test.sh does)"
        ),
        None => {
            eprintln!(
                "skipped: set JOULE_LLAMA_SERVER=$(scripts/fetch-llama-cpp.sh | tail -1)/llama-server \
                 to compare synthesized models with llama.cpp"
            );
            None
        }
    }
}

fn models() -> Vec<(String, String, SynthConfig)> {
    let catalog = Catalog::load(None).expect("manifests");
    let out: Vec<_> = catalog
        .iter()
        .filter_map(|m| {
            m.synth
                .clone()
                .map(|s| (m.name.clone(), m.architecture.clone(), s))
        })
        .collect();
    assert_eq!(
        out.len(),
        8,
        "every manifest in models/ has a [synth] table"
    );
    out
}

fn ggml_name(t: GgmlDType) -> &'static str {
    match t {
        GgmlDType::F32 => "f32",
        GgmlDType::F16 => "f16",
        GgmlDType::BF16 => "bf16",
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q5_1 => "q5_1",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q8_1 => "q8_1",
        GgmlDType::Q2K => "q2_K",
        GgmlDType::Q3K => "q3_K",
        GgmlDType::Q4K => "q4_K",
        GgmlDType::Q5K => "q5_K",
        GgmlDType::Q6K => "q6_K",
        GgmlDType::Q8K => "q8_K",
    }
}

fn options(out: PathBuf, file_type: FileType, layers: Option<u64>) -> SynthOptions {
    SynthOptions {
        out,
        file_type,
        layout: joule::inference::files::synth::Layout::LlamaCpp,
        layers,
        seed: 1,
        vocab: None,
        chat_template: None,
        quiet: true,
    }
}

/// `llama-quantize --dry-run`'s choice per tensor: (name, type name).
fn dry_run(bin: &Path, f16: &Path, ftype: &str) -> Vec<(String, String)> {
    let out = Command::new(bin.join("llama-quantize"))
        .arg("--dry-run")
        .arg(f16)
        .arg(ftype)
        .output()
        .expect("run llama-quantize");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "llama-quantize --dry-run {ftype} failed:\n{text}"
    );
    let mut types = Vec::new();
    for line in text.lines() {
        // [   1/ 291]                   output.weight - [ 4096, 151936, 1, 1], type =    f16, size = ... (q6_K)
        let Some(rest) = line.trim_start().strip_prefix('[') else {
            continue;
        };
        let Some((_, rest)) = rest.split_once(']') else {
            continue;
        };
        let Some((name, rest)) = rest.split_once(" - [") else {
            continue;
        };
        let Some((_, rest)) = rest.split_once("type =") else {
            continue;
        };
        let cur = rest.split(',').next().unwrap_or("").trim().to_string();
        let new = match (rest.rfind('('), rest.rfind(')')) {
            (Some(a), Some(b)) if b > a => rest[a + 1..b].trim().to_string(),
            _ => cur,
        };
        types.push((name.trim().to_string(), new));
    }
    types
}

#[test]
fn quant_mix_matches_llama_quantize() {
    let Some(bin) = llama_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    for (name, arch, cfg) in models() {
        // the f16 file: header, then a sparse data section of the right length
        let f16 = dir.path().join(format!("{name}.f16.gguf"));
        let (meta, entries, _, _) = plan_file(
            &name,
            &arch,
            &cfg,
            &options(f16.clone(), FileType::F16, None),
        )
        .unwrap();
        let mut file = std::fs::File::create(&f16).unwrap();
        let total = gguf_writer::write_header(&mut file, &meta, &entries).unwrap();
        file.set_len(total).unwrap();
        drop(file);
        for (ft, llama_name) in [
            (FileType::Q4KM, "Q4_K_M"),
            (FileType::Q5KM, "Q5_K_M"),
            (FileType::Q6K, "Q6_K"),
            (FileType::Q8_0, "Q8_0"),
        ] {
            let (_, ours, _, _) =
                plan_file(&name, &arch, &cfg, &options(f16.clone(), ft, None)).unwrap();
            let theirs = dry_run(&bin, &f16, llama_name);
            assert_eq!(
                theirs.len(),
                ours.len(),
                "{name} {llama_name}: tensor count"
            );
            let mut bad = Vec::new();
            for (tname, ttype) in &theirs {
                let mine = ours.iter().find(|e| &e.name == tname);
                match mine {
                    Some(e) if ggml_name(e.dtype) == ttype => {}
                    Some(e) => bad.push(format!(
                        "{tname}: joule {}, llama-quantize {ttype}",
                        ggml_name(e.dtype)
                    )),
                    None => bad.push(format!("{tname}: not in joule's file")),
                }
            }
            assert!(
                bad.is_empty(),
                "{name} {llama_name}: {} tensors differ:\n{}",
                bad.len(),
                bad.join("\n")
            );
            eprintln!(
                "{name} {llama_name}: {} tensors, types as llama-quantize",
                ours.len()
            );
        }
        std::fs::remove_file(&f16).unwrap();
    }
}

/// The fewest layers that keep every kind of layer of the architecture.
fn small_layers(arch: &str) -> u64 {
    match arch {
        "qwen35" => 2,     // delta-net, full attention (+ the MTP layer)
        "nemotron_h" => 3, // Mamba-2, attention, MLP
        "gemma4" => 4,     // sliding, full, and a KV-shared layer of each
        _ => 1,
    }
}

/// Positions compared per file. The top of the synthesized next-token distribution is a few
/// dozen boosted "frequent" tokens (`synth::layout`, logits spread over about ±6), and at a
/// few positions in a hundred two of them are within the rounding noise of 8-bit activations:
/// Nemotron-3-Nano-4B Q8_0 over 16 positions had 2 disagreements, at llama.cpp margins of 0.13
/// and 0.002, so top-1 was 0.875 < 0.9 from two near-ties (with Q8_0 rounded as llama.cpp
/// does); over 64 positions the same file agrees at all 64. Top-1 >= 0.9 over 16 positions
/// allows one tie, over 64 six. So 64, of which the last 16 are decoded one at a time.
const N_IDS: usize = 64;
const PREFILL: usize = 48;

/// `N_IDS` distinct token ids spread over the first 32,767 (the test's vocabulary cut).
fn ids() -> Vec<u32> {
    (0..N_IDS as u64)
        .map(|i| 1 + (i * 2_654_435_761 % 32_767) as u32)
        .collect()
}

fn llama_logits(bin: &Path, gguf: &Path, out: &Path, prefill: Option<usize>) -> Vec<f32> {
    let ids: Vec<String> = ids().iter().map(u32::to_string).collect();
    let mut cmd = Command::new(bin.join("llama-logits"));
    cmd.arg(gguf)
        .arg("--ids")
        .arg(ids.join(" "))
        .arg("--out")
        .arg(out);
    if let Some(k) = prefill {
        cmd.arg("--prefill").arg(k.to_string());
    }
    let o = cmd.output().expect("run llama-logits");
    assert!(
        o.status.success(),
        "llama-logits failed on {}:\n{}",
        gguf.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let (shape, data) = joule::npy::read_f32(out).unwrap();
    assert_eq!(shape[0], N_IDS);
    data
}

/// (mean KL(llama ‖ joule), top-1 agreement) over positions. Fails if llama.cpp's logits are
/// degenerate: flat, or echoing the input (its top token the position's own input token at
/// half the positions or more: a tied head reading back the token's own embedding row, which
/// any two engines agree on whatever the layers compute).
fn compare(theirs: &[f32], ours: &[f32], vocab: usize, input: &[u32]) -> (f64, f64) {
    assert_eq!(theirs.len(), ours.len());
    let n = theirs.len() / vocab;
    let argmax = |x: &[f32]| {
        x.iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |m, (j, &v)| if v > m.1 { (j, v) } else { m },
            )
            .0
    };
    let mut echo = 0usize;
    for (i, a) in theirs.chunks_exact(vocab).enumerate() {
        let std = |x: &[f32]| {
            let m = x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64;
            (x.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
        };
        assert!(
            std(a) > 0.5,
            "llama.cpp's logits are degenerate at {i} (std {})",
            std(a)
        );
        echo += usize::from(input.get(i).is_some_and(|&t| t as usize == argmax(a)));
    }
    assert!(
        2 * echo < n,
        "llama.cpp's top token is the input token at {echo} of {n} positions: the synthesized \
         model is degenerate (it echoes its input)"
    );
    // `joule logits --against`'s comparison (errors on Joule's non-finite logits)
    let g = joule::cli::logits::agreement(theirs, ours, vocab)
        .unwrap_or_else(|e| panic!("joule's logits: {e:#}"));
    (g.mean_kl, g.top1)
}

fn logits_check(vocab_rows: Option<u64>) {
    let Some(bin) = llama_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, arch, mut cfg) in models() {
        if let Some(v) = vocab_rows {
            cfg.vocab = cfg.vocab.min(v);
        }
        for ft in [FileType::Q8_0, FileType::Q4KM] {
            let gguf = dir.path().join(format!("{name}.{ft:?}.gguf"));
            let s = synthesize(
                &name,
                &arch,
                &cfg,
                &options(gguf.clone(), ft, Some(small_layers(&arch))),
            )
            .unwrap();
            let model = joule::inference::models::load_model(&gguf, &candle_core::Device::Cpu)
                .unwrap_or_else(|e| panic!("joule cannot load {name} {ft:?}: {e:#}"));
            let vocab = model.info().vocab_size;
            assert_eq!(vocab as u64, cfg.vocab);
            for prefill in [None, Some(PREFILL)] {
                let theirs = llama_logits(&bin, &gguf, &dir.path().join("llama.npy"), prefill);
                let ours =
                    joule::inference::engine::logits::compute(model.as_ref(), &ids(), prefill)
                        .unwrap();
                let (kl, top1) = compare(&theirs, &ours, vocab, &ids());
                let how = if prefill.is_some() {
                    "prefill+decode"
                } else {
                    "one pass"
                };
                eprintln!(
                    "{name} {ft:?} ({} layers {}), {how}: mean KL {kl:.5}, top-1 {top1:.3}",
                    s.block_count, s.kinds
                );
                let line = format!("{name} {ft:?} {how}: mean KL {kl:.5}, top-1 {top1:.3}");
                let known = KNOWN_GAPS
                    .iter()
                    .any(|&(n, f, h)| n == name && f == format!("{ft:?}") && h == how);
                if !(kl <= 0.01 && top1 >= 0.9) {
                    if known {
                        eprintln!("known gap (see KNOWN_GAPS): {line}");
                    } else {
                        failures.push(line);
                    }
                } else if known {
                    eprintln!("known gap now passes: remove it from KNOWN_GAPS: {line}");
                }
            }
            drop(model);
            std::fs::remove_file(&gguf).unwrap();
        }
    }
    assert!(
        failures.is_empty(),
        "against llama.cpp:\n{}",
        failures.join("\n")
    );
}

/// Cases below the thresholds, still open, reported but not failed on (every other
/// case fails the test): none. Measured 2026-12-02 (llama.cpp de3ff81, vocabulary cut to
/// 32,768, 64 positions): every model and type passes with mean KL <= 0.0015 and top-1 >=
/// 0.969 (with 8-bit activation scales held as f16 as llama.cpp holds them;
/// Qwen3.5-4B Q8_0 0.0006). Before Joule's own Q8_0 kernel, Joule's Q8_0 matrices of whole 256-value blocks went to candle's repacked
/// kernel, which rounds the activations in blocks of 256 where llama.cpp rounds in blocks of 32
/// (`quant_matmul::candle_repack_rounds_as_llama`): Qwen3.5-4B Q8_0 was at mean KL 0.009 (16
/// positions; 0.0075 over 64). Nemotron-3-Nano-4B Q8_0 failed top-1 (0.875 over 16 positions)
/// at two near-ties, with either rounding: hence 64 positions ([`N_IDS`]).
const KNOWN_GAPS: &[(&str, &str, &str)] = &[];

#[test]
fn logits_match_llama_cpp() {
    logits_check(Some(32_768));
}

#[test]
#[ignore = "minutes and ~10 GB of disk: the real vocabularies"]
fn logits_match_llama_cpp_real_vocabulary() {
    logits_check(None);
}
