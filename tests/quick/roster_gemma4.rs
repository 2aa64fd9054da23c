//! Gemma 4 (`gemma4`, agent 1) against transformers: the golden fixture
//! converted by llama.cpp's converter (f32 and q8_0); one pass, prefill then
//! decode, batches of sequences of different lengths (the prompt is longer
//! than the sliding window; both kinds of layer share keys/values); the
//! `joule logits` binary; vision/audio towers in the same file; bad files;
//! the manifest and its chat template with thinking on and off.

use crate::gguf_edit;
use crate::roster_common;
use gguf_edit::{load_err, rewrite};

use roster_common::*;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use joule::backend::ChatMessage;
use joule::inference::engine::logits::compute;
use joule::inference::engine::model::{logits_to_vec, Logits, SeqStep, SlotKind};
use joule::inference::files::manifest::{Catalog, ChatTemplate as TemplateSource, Source};
use joule::inference::models::load_model;
use joule::inference::text::chat_template::ChatTemplate;
use joule::inference::text::tokenizer::Tokenizer;

const ARCH: &str = "gemma4";
const F32: &str = "gemma4.f32.gguf";

#[test]
fn f32_matches_transformers_in_one_pass_and_decoding() {
    check_one_pass_and_decode(F32, ARCH);
}

#[test]
fn q8_0_is_close() {
    check_quantised("gemma4.q8_0.gguf", ARCH, 0.98);
    // Closer still to transformers run with the dequantised Q8_0 weights.
    let m = load("gemma4.q8_0.gguf");
    let (_, s) = sequences(ARCH).remove(0);
    let (_, want) = joule::npy::read_f32(&fixture("gemma4.q8_0.logits.main.npy")).unwrap();
    let got = compute(m.as_ref(), &s.ids, None).unwrap();
    let c = mean_cos(&got, &want, s.vocab);
    assert!(c >= 0.995, "mean cosine to the q8_0 reference {c}");
}

#[test]
fn batch_of_different_lengths_equals_each_alone() {
    check_batch_equals_alone(F32, ARCH);
}

/// Steps that want only the last logits skip the shared-KV layers' other
/// rows; in a batch mixing such steps with all-rows ones every sequence
/// still gets its own logits, equal to the reference.
#[test]
fn last_row_steps_in_a_mixed_batch() {
    let m = load(F32);
    let seqs = sequences(ARCH);
    let mut states: Vec<_> = seqs.iter().map(|_| m.new_state()).collect();
    let modes = [Logits::Last, Logits::All, Logits::Last];
    let cuts = [60, 30, 41];
    let mut steps: Vec<SeqStep<'_>> = seqs
        .iter()
        .zip(states.iter_mut())
        .zip(modes.iter().zip(cuts))
        .map(|(((_, s), st), (&mode, cut))| SeqStep {
            tokens: &s.ids[..cut],
            state: st,
            logits: mode,
        })
        .collect();
    let out = m.forward(&mut steps).unwrap();
    drop(steps);
    for (i, (name, s)) in seqs.iter().enumerate() {
        let v = s.vocab;
        let got = logits_to_vec(&out[i]).unwrap();
        let want = match modes[i] {
            Logits::Last => &s.logits[(cuts[i] - 1) * v..cuts[i] * v],
            Logits::All => &s.logits[..cuts[i] * v],
        };
        let e = rel_err(&got, want);
        assert!(e < F32_TOL, "{name}: rel err {e}");
    }
    // Then two more tokens each, last rows only: the state is complete.
    let mut steps: Vec<SeqStep<'_>> = seqs
        .iter()
        .zip(states.iter_mut())
        .zip(cuts)
        .map(|(((_, s), st), cut)| SeqStep::new(&s.ids[cut..cut + 2], st))
        .collect();
    let out = m.forward(&mut steps).unwrap();
    for (i, (name, s)) in seqs.iter().enumerate() {
        let v = s.vocab;
        let got = logits_to_vec(&out[i]).unwrap();
        let e = rel_err(&got, &s.logits[(cuts[i] + 1) * v..(cuts[i] + 2) * v]);
        assert!(e < F32_TOL, "{name} after decoding: rel err {e}");
    }
}

/// What the fixture must exercise for these tests to mean anything: a
/// prompt longer than the sliding window, and shared-KV layers of both
/// kinds, which keep no state of their own.
#[test]
fn fixture_exercises_window_and_shared_layers() {
    let mut f = std::fs::File::open(fixture(F32)).unwrap();
    let c = gguf_file::Content::read(&mut f).unwrap();
    let window = c.metadata["gemma4.attention.sliding_window"]
        .to_u32()
        .unwrap() as usize;
    let (_, main) = sequences(ARCH).remove(0);
    assert!(main.ids.len() > 4 * window, "window {window}");
    let m = load(F32);
    let layout = m.state_layout();
    assert_eq!(layout.len(), 18);
    for (i, k) in layout.iter().enumerate() {
        let want = if i < 10 { SlotKind::Kv } else { SlotKind::None };
        assert_eq!(*k, want, "layer {i}");
    }
    assert!(c.tensor_infos.contains_key("per_layer_token_embd.weight"));
}

#[test]
fn logits_binary_writes_the_reference() {
    let (_, s) = sequences(ARCH).remove(0);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g4.npy");
    let ids: Vec<String> = s.ids.iter().map(|i| i.to_string()).collect();
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["logits", "--gguf"])
        .arg(fixture(F32))
        .args(["--ids", &ids.join(" "), "--prefill", "50", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let (shape, got) = joule::npy::read_f32(&out).unwrap();
    assert_eq!(shape, [s.ids.len(), s.vocab]);
    let e = rel_err(&got, &s.logits);
    assert!(e < F32_TOL, "rel err {e}");
}

fn f32_tensor(shape: &[usize]) -> QTensor {
    let t = Tensor::ones(shape, DType::F32, &Device::Cpu).unwrap();
    QTensor::quantize(&t, GgmlDType::F32).unwrap()
}

/// Ollama's files carry the vision and audio towers: they are skipped and
/// do not count as parameters of the text model.
#[test]
fn bundled_towers_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let bundled = dir.path().join("bundled.gguf");
    rewrite(&fixture(F32), &bundled, |meta, t| {
        meta.push(("gemma4.vision.block_count".into(), gguf_file::Value::U32(1)));
        for name in [
            "v.blk.0.attn_q.weight",
            "a.blk.0.attn_q.weight",
            "mm.input_projection.weight",
        ] {
            t.push((name.into(), f32_tensor(&[8, 32])));
        }
    });
    let plain = load(F32);
    let m = load_model(&bundled, &Device::Cpu).unwrap();
    assert_eq!(m.info().n_params, plain.info().n_params);
    let (_, s) = sequences(ARCH).remove(1);
    let got = compute(m.as_ref(), &s.ids, None).unwrap();
    assert!(rel_err(&got, &s.logits) < F32_TOL);
}

#[test]
fn bad_files_name_the_tensor_and_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture(F32);
    let p = dir.path().join("missing.gguf");
    rewrite(&src, &p, |_, t| {
        t.retain(|(n, _)| n != "blk.3.attn_k_norm.weight")
    });
    let e = load_err(&p);
    assert!(
        e.contains("missing.gguf") && e.contains("`blk.3.attn_k_norm.weight` is missing"),
        "{e}"
    );

    let p = dir.path().join("ple.gguf");
    rewrite(&src, &p, |_, t| {
        t.retain(|(n, _)| n != "blk.12.inp_gate.weight")
    });
    let e = load_err(&p);
    assert!(e.contains("`blk.12.inp_gate.weight` is missing"), "{e}");

    let p = dir.path().join("shape.gguf");
    rewrite(&src, &p, |_, t| {
        for (n, q) in t.iter_mut() {
            if n == "blk.5.attn_q.weight" {
                *q = f32_tensor(&[64, 64]);
            }
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("shape.gguf")
            && e.contains("`blk.5.attn_q.weight` has shape [64, 64], expected [128, 64]"),
        "{e}"
    );

    let p = dir.path().join("table.gguf");
    rewrite(&src, &p, |_, t| {
        for (n, q) in t.iter_mut() {
            if n == "per_layer_token_embd.weight" {
                *q = f32_tensor(&[512, 64]);
            }
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("`per_layer_token_embd.weight` has shape [512, 64], expected [512, 576]"),
        "{e}"
    );

    // Every layer sharing keys/values: none computes them.
    let p = dir.path().join("shared.gguf");
    rewrite(&src, &p, |meta, _| {
        for (k, v) in meta.iter_mut() {
            if k == "gemma4.attention.shared_kv_layers" {
                *v = gguf_file::Value::U32(18);
            }
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("shared.gguf") && e.contains("shared_kv_layers 18"),
        "{e}"
    );

    let p = dir.path().join("pattern.gguf");
    rewrite(&src, &p, |meta, _| {
        for (k, v) in meta.iter_mut() {
            if k == "gemma4.attention.sliding_window_pattern" {
                *v = gguf_file::Value::Array(vec![gguf_file::Value::Bool(true); 3]);
            }
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("sliding_window_pattern has 3 entries for 18 layers"),
        "{e}"
    );
}

/// The manifest is implemented and points at Ollama's tag and a Hugging
/// Face GGUF; the file's chat template (the real Gemma 4 one) thinks when
/// the manifest's switch is on and writes an empty thought block when off.
#[test]
fn manifest_and_chat_template_thinking_on_and_off() {
    let c = Catalog::embedded().unwrap();
    let m = c.get("gemma4-e4b").unwrap();
    m.ensure_implemented().unwrap();
    assert_eq!(m.architecture, ARCH);
    assert_eq!(m.size_b, 4.0);
    assert_eq!(m.ollama_tag(), Some("gemma4:e4b"));
    assert!(m.sources.iter().any(|s| matches!(s, Source::Hf { .. })));
    assert_eq!(m.chat_template, TemplateSource::Gguf);
    let switch = m.thinking.template_switch.as_deref();
    assert_eq!(switch, Some("enable_thinking"));

    let path = fixture(F32);
    let mut f = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let tok = Tokenizer::from_gguf_content(&content, &path).unwrap();
    let t = ChatTemplate::from_gguf_content(&content, &tok)
        .unwrap()
        .expect("the fixture has the chat template");
    let conv = [
        ChatMessage::system("You are agent_1."),
        ChatMessage::user("Choose a job."),
    ];
    let on = t.render(&conv, true, Some(true)).unwrap();
    let off = t.render(&conv, true, Some(false)).unwrap();
    let default = t.render(&conv, true, None).unwrap();
    assert_eq!(
        on,
        "<bos><|turn>system\n<|think|>\nYou are agent_1.<turn|>\n\
         <|turn>user\nChoose a job.<turn|>\n<|turn>model\n"
    );
    let (start, end) = (
        m.thinking.start.as_deref().unwrap(),
        m.thinking.end.as_deref().unwrap(),
    );
    assert!(!off.contains("<|think|>"), "{off}");
    assert!(
        off.ends_with(&format!("<|turn>model\n{start}{end}")),
        "{off}"
    );
    assert_eq!(default, off, "the template's default is thinking off");
    assert!(!m.thinking.default_on);
    // The markers the engine splits on are single tokens of the vocabulary.
    let s = t.thinking().expect("thinking markers");
    for marker in [&s.open, &s.close] {
        assert_eq!(
            tok.encode(marker, false, true).unwrap().len(),
            1,
            "{marker}"
        );
    }
}
