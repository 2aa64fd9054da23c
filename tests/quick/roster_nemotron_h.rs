//! Nemotron-H (GGUF arch `nemotron_h`) against transformers: the tiny random
//! `NemotronHForCausalLM` of tests/fixtures/roster (made by
//! scripts/gen_roster_fixtures.py; Mamba-2, attention and MLP layers, two
//! SSM groups, prompts longer than one SSD chunk), converted by llama.cpp's
//! own converter to f32 and q8_0 GGUF, and transformers' logits at every
//! position of three id sequences (`main` 100, `b37`, `b53`).
//!
//! Checked here: one pass and prefill-then-decode (f32 within 1e-3 relative,
//! q8_0 by cosine), sequences of different lengths batched in one forward
//! equal to each alone, a state rewound to a snapshot and continued equal
//! to a recompute, the `joule logits` binary, bad files, and the tokenizer
//! and chat template read from the fixture's metadata.

use crate::gguf_edit;
use gguf_edit::load_err;

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::Device;
use joule::backend::{ChatMessage, Role};
use joule::inference::engine::logits::compute;
use joule::inference::engine::model::{logits_to_vec, CausalLm, Logits, SeqStep, SlotKind};
use joule::inference::models::load_model;
use joule::inference::text::chat_template::ChatTemplate;
use joule::inference::text::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/roster")
}

fn gguf(kind: &str) -> PathBuf {
    dir().join(format!("nemotron_h.{kind}.gguf"))
}

fn sidecar() -> serde_json::Value {
    let text = std::fs::read_to_string(dir().join("nemotron_h.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(seq: &str) -> Vec<u32> {
    sidecar()["sequences"][seq]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// transformers' logits `[n, vocab]` of a sequence.
fn reference(seq: &str) -> (Vec<usize>, Vec<f32>) {
    joule::npy::read_f32(&dir().join(format!("nemotron_h.logits.{seq}.npy"))).unwrap()
}

/// max |a − b| / max |b|.
fn rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    d / b.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

fn mean_cosine(a: &[f32], b: &[f32], vocab: usize) -> f32 {
    let rows: Vec<f32> = a
        .chunks(vocab)
        .zip(b.chunks(vocab))
        .map(|(x, y)| {
            let dot: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
            let n = |v: &[f32]| v.iter().map(|p| p * p).sum::<f32>().sqrt();
            dot / (n(x) * n(y))
        })
        .collect();
    rows.iter().sum::<f32>() / rows.len() as f32
}

fn model(kind: &str) -> std::sync::Arc<dyn CausalLm> {
    load_model(gguf(kind), &Device::Cpu).unwrap()
}

#[test]
fn layers_and_state_layout_follow_the_per_layer_arrays() {
    let m = model("f32");
    let info = m.info();
    assert_eq!(info.arch, "nemotron_h");
    assert_eq!((info.n_layer, info.n_embd, info.vocab_size), (11, 64, 512));
    assert_eq!((info.n_head, info.n_kv_head, info.head_dim), (4, 2, 32));
    // hybrid_override_pattern "M-M*-MM*-M-" (M Mamba-2, * attention, - MLP).
    let (r, k, n) = (SlotKind::Recurrent, SlotKind::Kv, SlotKind::None);
    assert_eq!(m.state_layout(), vec![r, n, r, k, n, r, r, k, n, r, n]);
}

#[test]
fn f32_matches_transformers_in_one_pass_and_step_by_step() {
    let m = model("f32");
    for seq in ["main", "b37", "b53"] {
        let (shape, want) = reference(seq);
        let ids = ids(seq);
        assert_eq!(shape, vec![ids.len(), 512]);
        let prefills: &[Option<usize>] = if seq == "main" {
            // 100 tokens: two SSD chunks in one pass; a prefill inside the
            // second chunk; a one-token prefill (decode all the way).
            &[None, Some(70), Some(1)]
        } else {
            &[None, Some(20)]
        };
        for &pf in prefills {
            let got = compute(m.as_ref(), &ids, pf).unwrap();
            let r = rel(&got, &want);
            assert!(r < 1e-3, "{seq} prefill {pf:?}: relative difference {r}");
        }
    }
}

#[test]
fn q8_0_is_close_to_transformers() {
    let m = model("q8_0");
    let (_, want) = reference("main");
    let ids = ids("main");
    for pf in [None, Some(40)] {
        let got = compute(m.as_ref(), &ids, pf).unwrap();
        let c = mean_cosine(&got, &want, 512);
        assert!(c >= 0.98, "prefill {pf:?}: mean cosine {c}");
    }
}

/// main, b37 and b53 go through the model together, each at its own
/// position and with its own number of new tokens per step, and give what
/// each gives alone.
#[test]
fn batched_sequences_of_different_lengths_equal_each_alone() {
    let m = model("f32");
    let seqs: Vec<Vec<u32>> = ["main", "b37", "b53"].iter().map(|s| ids(s)).collect();
    let alone: Vec<Vec<f32>> = seqs
        .iter()
        .map(|s| compute(m.as_ref(), s, None).unwrap())
        .collect();
    let mut states: Vec<_> = seqs.iter().map(|_| m.new_state()).collect();
    let mut got: Vec<Vec<f32>> = vec![Vec::new(); seqs.len()];
    // Step 1: prompts of 70, 5 and 1 tokens in one forward (chunked and
    // recurrent scans in the same batch).
    let mut cut = [70usize, 5, 1];
    {
        let mut steps: Vec<SeqStep> = states
            .iter_mut()
            .zip(&seqs)
            .zip(cut)
            .map(|((st, s), c)| SeqStep {
                tokens: &s[..c],
                state: st,
                logits: Logits::All,
            })
            .collect();
        let out = m.forward(&mut steps).unwrap();
        for (g, o) in got.iter_mut().zip(&out) {
            g.extend(logits_to_vec(o).unwrap());
        }
    }
    // Then rounds in which every unfinished sequence takes 1, 2 or 3 tokens.
    let mut round = 0;
    while cut.iter().zip(&seqs).any(|(c, s)| *c < s.len()) {
        round += 1;
        let mut steps = Vec::new();
        let mut who = Vec::new();
        for (i, (st, s)) in states.iter_mut().zip(&seqs).enumerate() {
            if cut[i] >= s.len() {
                continue;
            }
            let n = (1 + (i + round) % 3).min(s.len() - cut[i]);
            steps.push(SeqStep {
                tokens: &s[cut[i]..cut[i] + n],
                state: st,
                logits: Logits::All,
            });
            who.push((i, n));
        }
        let out = m.forward(&mut steps).unwrap();
        for ((i, n), o) in who.into_iter().zip(&out) {
            got[i].extend(logits_to_vec(o).unwrap());
            cut[i] += n;
        }
    }
    for (i, (g, a)) in got.iter().zip(&alone).enumerate() {
        let r = rel(g, a);
        assert!(r < 1e-4, "sequence {i}: batched differs from alone by {r}");
        assert_eq!(states[i].len(), seqs[i].len());
    }
}

/// A state fed in pieces with a snapshot, rewound past later tokens and
/// continued, gives what a recompute from scratch gives; the batch is not
/// changed by a failed step.
#[test]
fn rewound_state_continues_like_a_recompute() {
    let m = model("f32");
    let ids = ids("main");
    let whole = compute(m.as_ref(), &ids, None).unwrap();
    let mut st = m.new_state();
    let feed = |st: &mut joule::inference::engine::model::SeqState, toks: &[u32]| -> Vec<f32> {
        let mut step = [SeqStep {
            tokens: toks,
            state: st,
            logits: Logits::All,
        }];
        logits_to_vec(&m.forward(&mut step).unwrap()[0]).unwrap()
    };
    feed(&mut st, &ids[..30]);
    st.snapshot();
    // Go on with other tokens than the sequence's own.
    let other: Vec<u32> = ids[30..60].iter().map(|t| (t * 7 + 3) % 512).collect();
    feed(&mut st, &other);
    // A step that fails (token outside the vocabulary) changes nothing.
    {
        let bad = [5u32, 9999];
        let mut step = [SeqStep::new(&bad, &mut st)];
        assert!(m.forward(&mut step).is_err());
    }
    assert_eq!(st.len(), 60);
    // Back to 45: the newest snapshot at or before it is at 30.
    assert_eq!(st.rewind(45), 30);
    assert_eq!(st.tokens(), &ids[..30]);
    let cont = feed(&mut st, &ids[30..]);
    let r = rel(&cont, &whole[30 * 512..]);
    assert!(
        r < 1e-4,
        "continued after rewind differs from recompute by {r}"
    );
}

#[test]
fn joule_logits_binary_runs_on_the_fixture() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("nh.npy");
    let ids = ids("b53");
    let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_joule"))
        .arg("logits")
        .arg("--gguf")
        .arg(gguf("f32"))
        .args(["--ids", &list.join(" "), "--prefill", "17", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let (shape, got) = joule::npy::read_f32(&out).unwrap();
    assert_eq!(shape, vec![53, 512]);
    let (_, want) = reference("b53");
    let r = rel(&got, &want);
    assert!(r < 1e-3, "relative difference {r}");
}

/// Rewrite the f32 fixture with `edit` applied to its metadata and tensors.
fn rewrite(
    out: &Path,
    edit: impl FnOnce(&mut Vec<(String, gguf_file::Value)>, &mut Vec<(String, QTensor)>),
) {
    gguf_edit::rewrite(&gguf("f32"), out, edit)
}

#[test]
fn bad_files_name_the_file_tensor_and_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    // A Mamba tensor missing.
    let p = tmp.path().join("no_conv.gguf");
    rewrite(&p, |_, t| t.retain(|(n, _)| n != "blk.5.ssm_conv1d.weight"));
    let e = load_err(&p);
    assert!(
        e.contains("no_conv.gguf") && e.contains("`blk.5.ssm_conv1d.weight` is missing"),
        "{e}"
    );
    // A tensor of the wrong shape: the in-projection of a Mamba layer
    // replaced by the out-projection.
    let p = tmp.path().join("bad_shape.gguf");
    rewrite(&p, |_, t| {
        let out = t
            .iter()
            .position(|(n, _)| n == "blk.2.ssm_out.weight")
            .unwrap();
        let w = t.remove(out).1;
        for (n, q) in t.iter_mut() {
            if n == "blk.2.ssm_in.weight" {
                *q = QTensor::quantize(&w.dequantize(&Device::Cpu).unwrap(), w.dtype()).unwrap();
            }
        }
        t.push(("blk.2.ssm_out.weight".into(), w));
    });
    let e = load_err(&p);
    assert!(
        e.contains("bad_shape.gguf")
            && e.contains("`blk.2.ssm_in.weight` has shape [64, 128], expected [328, 64]"),
        "{e}"
    );
    // An attention tensor missing.
    let p = tmp.path().join("no_k.gguf");
    rewrite(&p, |_, t| t.retain(|(n, _)| n != "blk.7.attn_k.weight"));
    let e = load_err(&p);
    assert!(e.contains("`blk.7.attn_k.weight` is missing"), "{e}");
    // The per-layer arrays disagree with the tensors: layer 1 claimed as
    // Mamba-2 has no Mamba tensors.
    let p = tmp.path().join("pattern.gguf");
    rewrite(&p, |m, _| {
        for (k, v) in m.iter_mut() {
            if k == "nemotron_h.feed_forward_length" {
                // Was [0, 128, 0, 0, 128, 0, 0, 0, 128, 0, 128].
                let ff = [0i32, 0, 0, 0, 128, 0, 0, 0, 128, 0, 128];
                *v = gguf_file::Value::Array(ff.into_iter().map(gguf_file::Value::I32).collect());
            }
        }
    });
    let e = load_err(&p);
    assert!(e.contains("`blk.1.ssm_in.weight` is missing"), "{e}");
    // An array shorter than the layer count.
    let p = tmp.path().join("short.gguf");
    rewrite(&p, |m, _| {
        for (k, v) in m.iter_mut() {
            if k == "nemotron_h.attention.head_count_kv" {
                *v = gguf_file::Value::Array(vec![gguf_file::Value::I32(0); 4]);
            }
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("short.gguf") && e.contains("head_count_kv has 4 entries for 11 layers"),
        "{e}"
    );
}

#[test]
fn mixture_of_experts_files_are_not_implemented() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("moe.gguf");
    rewrite(&p, |m, _| {
        for (k, v) in m.iter_mut() {
            if k == "general.architecture" {
                *v = gguf_file::Value::String("nemotron_h_moe".into());
            }
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("moe.gguf") && e.contains("architecture `nemotron_h_moe` is not implemented"),
        "{e}"
    );
    // A `nemotron_h` file with experts is refused too, not half-loaded.
    let p = tmp.path().join("experts.gguf");
    rewrite(&p, |m, _| {
        m.push(("nemotron_h.expert_count".into(), gguf_file::Value::U32(8)))
    });
    let e = load_err(&p);
    assert!(
        e.contains("experts.gguf") && e.contains("Mixture-of-Experts layers"),
        "{e}"
    );
}

#[test]
fn tokenizer_loads_from_the_fixture_metadata() {
    let tok = Tokenizer::from_gguf_file(gguf("f32")).unwrap();
    assert_eq!(tok.pre_name(), Some("pixtral"));
    assert_eq!(tok.vocab_size(), 512);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(4));
    assert!(tok.add_bos());
    let checks = sidecar()["tokenizer_checks"].as_array().unwrap().clone();
    assert_eq!(checks.len(), 4);
    for c in checks {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(text, false, false).unwrap(), want, "{text:?}");
        assert_eq!(tok.decode(&want, false), text);
    }
    // Special tokens of the chat format are single tokens.
    let chat = tok
        .encode("<|im_start|>user\n<think></think>", false, true)
        .unwrap();
    assert_eq!(
        (chat[0], chat[chat.len() - 2], chat[chat.len() - 1]),
        (3, 5, 6)
    );
    assert_eq!(tok.token_id("<think>"), Some(5));
    assert_eq!(tok.token_id("</think>"), Some(6));
}

#[test]
fn chat_template_renders_with_thinking_on_and_off() {
    let path = gguf("f32");
    let tok = Tokenizer::from_gguf_file(&path).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let t = ChatTemplate::from_gguf_content(&content, &tok)
        .unwrap()
        .expect("the fixture has a chat template");
    let s = t.thinking().expect("the template thinks");
    assert_eq!((s.open.as_str(), s.close.as_str()), ("<think>", "</think>"));
    assert!(s.switchable && s.prompt_opens_block);
    let conv = [
        ChatMessage {
            role: Role::System,
            content: "You are agent_2. Energy: 12.5 J.".into(),
        },
        ChatMessage {
            role: Role::User,
            content: "Round 1: donate or keep? Reply in JSON.".into(),
        },
    ];
    let head = "<|im_start|>system\nYou are agent_2. Energy: 12.5 J.<|im_end|>\n\
                <|im_start|>user\nRound 1: donate or keep? Reply in JSON.<|im_end|>\n";
    let on = t.render(&conv, true, Some(true)).unwrap();
    assert_eq!(on, format!("{head}<|im_start|>assistant\n<think>\n"));
    let off = t.render(&conv, true, Some(false)).unwrap();
    assert_eq!(off, format!("{head}<|im_start|>assistant\n<think></think>"));
    // Not told: the template's default, thinking on (as the manifest says).
    assert_eq!(t.render(&conv, true, None).unwrap(), on);
    let catalog = joule::inference::files::manifest::Catalog::embedded().unwrap();
    let m = catalog.get("nemotron-3-nano:4b").unwrap();
    assert!(m.implemented && m.thinking.default_on);
    assert_eq!(m.architecture, "nemotron_h");
}
