//! Qwen3.5 (`qwen35`, agents 3 and 5) against transformers: the golden
//! fixture converted by llama.cpp's converter (f32 and q8_0) and the same
//! weights in Ollama's layout; one pass, prefill then decode, batches of
//! sequences of different lengths, snapshot restore; generation reusing a
//! snapshot; an Energy Society round on the fixture; bad files.

use crate::gguf_edit;
use crate::roster_common;
use roster_common::*;

use candle_core::quantized::QTensor;
use candle_core::Device;
use joule::backend::GenParams;
use joule::inference::engine::generate::{generate, GenOptions, GenSeq};
use joule::inference::engine::model::SlotKind;
use joule::inference::models::load_model;
use std::path::Path;

const ARCH: &str = "qwen35";

#[test]
fn f32_matches_transformers_in_one_pass_and_decoding() {
    check_one_pass_and_decode("qwen35.f32.gguf", ARCH);
}

#[test]
fn ollama_layout_matches_transformers() {
    check_one_pass_and_decode("qwen35.ollama.f32.gguf", ARCH);
    // The vision tower and MTP tensors of Ollama's file are not parameters
    // of the text model.
    let a = load("qwen35.f32.gguf");
    let b = load("qwen35.ollama.f32.gguf");
    assert_eq!(a.info().n_params, b.info().n_params);
}

#[test]
fn q8_0_is_close() {
    check_quantised("qwen35.q8_0.gguf", ARCH, 0.98);
}

#[test]
fn batch_of_different_lengths_equals_each_alone() {
    check_batch_equals_alone("qwen35.f32.gguf", ARCH);
}

#[test]
fn snapshot_restore_equals_recompute() {
    check_snapshot_restore("qwen35.f32.gguf", ARCH);
}

#[test]
fn state_layout_is_hybrid() {
    let m = load("qwen35.f32.gguf");
    let layout = m.state_layout();
    // 8 text layers (the converter's 9th block is the MTP head), every fourth full attention.
    assert_eq!(layout.len(), 8);
    for (i, k) in layout.iter().enumerate() {
        let want = if (i + 1) % 4 == 0 {
            SlotKind::Kv
        } else {
            SlotKind::Recurrent
        };
        assert_eq!(*k, want, "layer {i}");
    }
}

/// Generating twice from the same prompt: the second call resumes from the
/// snapshot taken before the prompt's last token and gives the same tokens.
#[test]
fn generation_resumes_from_a_snapshot() {
    let m = load("qwen35.f32.gguf");
    let (_, s) = sequences(ARCH).remove(0);
    let prompt = &s.ids[..90];
    let params = GenParams {
        max_tokens: 12,
        temperature: 0.0,
        ..GenParams::default()
    };
    let options = GenOptions::default();
    let mut state = m.new_state();
    let run = |state: &mut joule::inference::engine::model::SeqState| {
        generate(
            m.as_ref(),
            GenSeq {
                prompt,
                state,
                params: &params,
                options: &options,
                decode: None,
                mask: None,
            },
        )
        .expect("generate")
    };
    let first = run(&mut state);
    assert_eq!(first.cached_prompt_tokens, 0);
    assert!(
        state.snapshot_positions().contains(&89),
        "snapshot before the last prompt token"
    );
    let again = run(&mut state);
    assert_eq!(again.cached_prompt_tokens, 89);
    assert_eq!(again.tokens, first.tokens, "resumed generation differs");
    let mut fresh = m.new_state();
    assert_eq!(run(&mut fresh).tokens, first.tokens);
}

/// Rewrite `src` into `out` with `edit` applied to its tensors.
fn rewrite(src: &Path, out: &Path, edit: impl FnOnce(&mut Vec<(String, QTensor)>)) {
    gguf_edit::rewrite(src, out, |_, t| edit(t))
}

#[test]
fn bad_files_name_the_tensor_and_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("qwen35.f32.gguf");
    let missing = dir.path().join("missing.gguf");
    rewrite(&src, &missing, |t| {
        t.retain(|(n, _)| n != "blk.1.ssm_beta.weight")
    });
    let e = format!(
        "{:#}",
        load_model(&missing, &Device::Cpu).err().expect("loads")
    );
    assert!(
        e.contains("blk.1.ssm_beta.weight") && e.contains("missing"),
        "{e}"
    );
    assert!(e.contains("missing.gguf"), "names the file: {e}");

    let shaped = dir.path().join("shape.gguf");
    rewrite(&src, &shaped, |t| {
        for (n, q) in t.iter_mut() {
            if n == "blk.0.ssm_a" {
                let v =
                    candle_core::Tensor::zeros(5, candle_core::DType::F32, &Device::Cpu).unwrap();
                *q = QTensor::quantize(&v, candle_core::quantized::GgmlDType::F32).unwrap();
            }
        }
    });
    let e = format!(
        "{:#}",
        load_model(&shaped, &Device::Cpu).err().expect("loads")
    );
    assert!(
        e.contains("blk.0.ssm_a") && e.contains("[5]") && e.contains("[4]"),
        "{e}"
    );
}

/// The same weights stored as F16 and BF16 (as HF GGUF repos ship them;
/// 1-D and recurrent tensors stay F32, as in real files) load and run.
#[test]
fn f16_and_bf16_files_run() {
    use candle_core::quantized::GgmlDType;
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("qwen35.f32.gguf");
    let (_, s) = sequences(ARCH).remove(0);
    for (dt, min_cos) in [(GgmlDType::F16, 0.999), (GgmlDType::BF16, 0.99)] {
        let out = dir.path().join(format!("{dt:?}.gguf"));
        rewrite(&src, &out, |t| {
            for (n, q) in t.iter_mut() {
                if q.shape().dims().len() == 2 && !n.contains("ssm_conv1d") {
                    let d = q.dequantize(&Device::Cpu).unwrap();
                    *q = QTensor::quantize(&d, dt).unwrap();
                }
            }
        });
        let m = load_model(&out, &Device::Cpu).expect("loads");
        let lg = joule::inference::engine::logits::compute(m.as_ref(), &s.ids, None).unwrap();
        let c = mean_cos(&lg, &s.logits, s.vocab);
        assert!(c >= min_cos, "{dt:?}: mean cosine {c}");
    }
}
