//! Tests against llama.cpp's tokenizer test vectors (`../shared/data/tokenizers/`).

use super::*;
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/tokenizers")
        .join(name)
}

/// Inputs of a `.inp` file: separated by "\n__ggml_vocab_test__\n" (the file
/// ends with the separator), as llama.cpp's test-tokenizer-0 reads them.
pub(crate) fn read_inputs(path: &Path) -> Vec<String> {
    let raw = std::fs::read_to_string(path).unwrap();
    let sep = "\n__ggml_vocab_test__\n";
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].find(sep) {
            Some(i) => {
                out.push(raw[pos..pos + i].to_string());
                pos += i + sep.len();
            }
            None => {
                out.push(raw[pos..].to_string());
                break;
            }
        }
    }
    out
}

/// Expected ids: one line of space-separated ids per input.
pub(crate) fn read_outputs(path: &Path) -> Vec<Vec<u32>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect()
}

fn check_vectors(vocab: &str, inputs: &Path, outputs: &Path) {
    let tok = Tokenizer::from_gguf_file(data(vocab)).unwrap();
    let inputs = read_inputs(inputs);
    let expected = read_outputs(outputs);
    assert_eq!(
        inputs.len(),
        expected.len(),
        "{vocab}: inputs and outputs differ in count"
    );
    assert!(inputs.len() >= 10);
    let mut failures = Vec::new();
    for (text, want) in inputs.iter().zip(&expected) {
        let got = tok.encode(text, false, false).unwrap();
        if &got != want {
            failures.push(format!("{text:?}\n  want {want:?}\n  got  {got:?}"));
        }
        assert_eq!(
            tok.decode(&got, false),
            *text,
            "{vocab}: decode(encode(x)) != x"
        );
    }
    assert!(
        failures.is_empty(),
        "{vocab}: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn qwen2_matches_llama_cpp_vectors() {
    check_vectors(
        "ggml-vocab-qwen2.gguf",
        &data("ggml-vocab-qwen2.gguf.inp"),
        &data("ggml-vocab-qwen2.gguf.out"),
    );
}

#[test]
fn llama_bpe_matches_llama_cpp_vectors() {
    check_vectors(
        "ggml-vocab-llama-bpe.gguf",
        &data("ggml-vocab-llama-bpe.gguf.inp"),
        &data("ggml-vocab-llama-bpe.gguf.out"),
    );
}

#[test]
fn gpt2_matches_llama_cpp_vectors() {
    check_vectors(
        "ggml-vocab-gpt-2.gguf",
        &data("ggml-vocab-gpt-2.gguf.inp"),
        &data("ggml-vocab-gpt-2.gguf.out"),
    );
}

#[test]
fn qwen2_special_tokens_and_metadata() {
    let tok = Tokenizer::from_gguf_file(data("ggml-vocab-qwen2.gguf")).unwrap();
    assert_eq!(tok.vocab_size(), 151936);
    let im_start = tok.token_id("<|im_start|>").unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    assert_eq!((im_start, im_end), (151644, 151645));
    assert_eq!(tok.eos_id(), Some(151643));
    assert!(tok.eos_ids().contains(&im_end));
    assert!(tok.eos_ids().contains(&151643));
    assert!(!tok.eos_ids().contains(&im_start));
    assert!(tok.is_special(im_start));
    // parse_special: the marker becomes one token; without it, it is text.
    let with = tok.encode("<|im_start|>user", false, true).unwrap();
    assert_eq!(with[0], im_start);
    assert_eq!(tok.decode(&with, false), "<|im_start|>user");
    assert_eq!(tok.decode(&with, true), "user");
    let without = tok.encode("<|im_start|>user", false, false).unwrap();
    assert!(!without.contains(&im_start));
    assert_eq!(tok.decode(&without, false), "<|im_start|>user");
    // Qwen2 adds no BOS.
    assert_eq!(
        tok.encode("hi", true, false).unwrap(),
        tok.encode("hi", false, false).unwrap()
    );
}

#[test]
fn llama3_adds_bos_with_add_special() {
    let tok = Tokenizer::from_gguf_file(data("ggml-vocab-llama-bpe.gguf")).unwrap();
    assert_eq!(tok.bos_id(), Some(128000));
    let ids = tok.encode("Hello", true, false).unwrap();
    assert_eq!(ids, [128000, 9906]);
    assert_eq!(tok.decode(&ids, true), "Hello");
    assert!(tok.eos_ids().contains(&tok.token_id("<|eot_id|>").unwrap()));
}

#[test]
fn stream_decoder_holds_back_split_characters() {
    let tok = Tokenizer::from_gguf_file(data("ggml-vocab-qwen2.gguf")).unwrap();
    let text = "🦙 llamas: нещо ✅";
    let ids = tok.encode(text, false, false).unwrap();
    let mut dec = StreamDecoder::new(false);
    let mut out = String::new();
    let mut held_back = false;
    for &id in &ids {
        let piece = dec.push(&tok, id);
        held_back |= !dec.pending().is_empty();
        out.push_str(&piece);
    }
    out.push_str(&dec.finish());
    assert_eq!(out, text);
    // The llama emoji is split over several byte tokens in this vocabulary.
    assert!(held_back);
}

#[test]
fn token_bytes_are_raw_bytes() {
    let tok = Tokenizer::from_gguf_file(data("ggml-vocab-qwen2.gguf")).unwrap();
    let id = tok.token_id("Ġthe").unwrap();
    assert_eq!(tok.token_bytes(id), b" the");
    assert_eq!(tok.token_bytes(u32::MAX), b"");
}

#[test]
fn unknown_pre_tokenizer_is_an_error_naming_file_and_value() {
    let mut content = {
        let mut f = std::fs::File::open(data("ggml-vocab-gpt-2.gguf")).unwrap();
        Content::read(&mut f).unwrap()
    };
    content
        .metadata
        .insert("tokenizer.ggml.pre".into(), Value::String("falcon".into()));
    let err = Tokenizer::from_gguf_content(&content, "some/model.gguf")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("some/model.gguf") && err.contains("\"falcon\""),
        "{err}"
    );
    content
        .metadata
        .insert("tokenizer.ggml.model".into(), Value::String("t5".into()));
    let err = Tokenizer::from_gguf_content(&content, "some/model.gguf")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("some/model.gguf") && err.contains("\"t5\""),
        "{err}"
    );
    content
        .metadata
        .insert("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
    content.metadata.remove("tokenizer.ggml.pre");
    let err = Tokenizer::from_gguf_content(&content, "some/model.gguf")
        .unwrap_err()
        .to_string();
    assert!(err.contains("tokenizer.ggml.pre"), "{err}");
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenizers")
        .join(name)
}

/// Qwen3.5's vocabulary on llama.cpp's qwen2 inputs; expected ids from
/// Hugging Face `tokenizers` (scripts/gen_tokenizer_fixtures.py).
#[test]
fn qwen35_matches_hf_tokenizers_fixture() {
    check_vectors(
        "ggml-vocab-qwen35.gguf",
        &data("ggml-vocab-qwen2.gguf.inp"),
        &fixture("ggml-vocab-qwen35.gguf.out"),
    );
}

/// More inputs (Devanagari, Thai, combining marks, CJK, JSON, emoji
/// sequences) for every byte-level vocabulary; expected ids from Hugging Face
/// `tokenizers` (scripts/gen_tokenizer_fixtures.py).
#[test]
fn extra_inputs_match_hf_tokenizers_fixtures() {
    for vocab in [
        "ggml-vocab-qwen2.gguf",
        "ggml-vocab-qwen35.gguf",
        "ggml-vocab-llama-bpe.gguf",
        "ggml-vocab-gpt-2.gguf",
        "ggml-vocab-gemma-4.gguf",
    ] {
        check_vectors(
            vocab,
            &fixture("extra.inp"),
            &fixture(&format!("{vocab}.extra.out")),
        );
    }
}

/// Gemma 4 (BPE over raw UTF-8, spaces as U+2581, byte fallback) on
/// llama.cpp's qwen2 inputs; expected ids from Hugging Face `tokenizers` set
/// up as llama.cpp runs this vocabulary (scripts/gen_tokenizer_fixtures.py).
#[test]
fn gemma4_matches_hf_tokenizers_fixture() {
    check_vectors(
        "ggml-vocab-gemma-4.gguf",
        &data("ggml-vocab-qwen2.gguf.inp"),
        &fixture("ggml-vocab-gemma-4.gguf.out"),
    );
}

#[test]
fn gemma4_special_tokens() {
    let tok = Tokenizer::from_gguf_file(data("ggml-vocab-gemma-4.gguf")).unwrap();
    assert_eq!(tok.model_name(), "gemma4");
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(2), Some(1)));
    assert!(tok.add_bos());
    let turn_end = tok.token_id("<turn|>").unwrap();
    let eos = tok.eos_ids();
    assert!(eos.contains(&1) && eos.contains(&turn_end));
    // `</s>` is an ordinary token in Gemma 4.
    assert!(!eos.contains(&tok.token_id("</s>").unwrap()));
    // Control tokens need parse_special; user-defined ones (<|channel>) do not.
    let ids = tok
        .encode("<|turn>model\n<|channel>thought", true, true)
        .unwrap();
    assert_eq!(&ids[..2], &[2, tok.token_id("<|turn>").unwrap()]);
    assert!(ids.contains(&tok.token_id("<|channel>").unwrap()));
    let plain = tok.encode("<|turn>x<|channel>", false, false).unwrap();
    assert!(!plain.contains(&tok.token_id("<|turn>").unwrap()));
    assert!(plain.contains(&tok.token_id("<|channel>").unwrap()));
    assert_eq!(tok.decode(&plain, false), "<|turn>x<|channel>");
    // Spaces are U+2581 in the vocabulary and come back as spaces.
    let hello = tok.encode(" Hello", false, false).unwrap();
    assert_eq!(hello, [tok.token_id("▁Hello").unwrap()]);
    assert_eq!(tok.token_bytes(hello[0]), b" Hello");
}

/// A small SentencePiece (`tokenizer.ggml.model = "llama"`) vocabulary built
/// in memory: scores decide the merges, a space is prefixed, missing
/// characters are spelled with byte tokens.
fn tiny_spm() -> Tokenizer {
    use candle_core::quantized::gguf_file::VersionedMagic;
    let mut tokens: Vec<(String, f32, i32)> = vec![
        ("<unk>".into(), 0.0, 2),
        ("<s>".into(), 0.0, 3),
        ("</s>".into(), 0.0, 3),
    ];
    for b in 0..=255u8 {
        tokens.push((format!("<0x{b:02X}>"), 0.0, 6));
    }
    for (t, s) in [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("he", -3.0),
        ("ll", -1.5),
        ("llo", -1.2),
        ("▁he", -4.0),
        ("▁hello", -5.0),
        ("hello", -6.0),
        ("▁w", -3.0),
    ] {
        tokens.push((t.into(), s, 1));
    }
    let mut md = HashMap::new();
    md.insert(
        "tokenizer.ggml.model".to_string(),
        Value::String("llama".into()),
    );
    md.insert(
        "tokenizer.ggml.tokens".to_string(),
        Value::Array(tokens.iter().map(|t| Value::String(t.0.clone())).collect()),
    );
    md.insert(
        "tokenizer.ggml.scores".to_string(),
        Value::Array(tokens.iter().map(|t| Value::F32(t.1)).collect()),
    );
    md.insert(
        "tokenizer.ggml.token_type".to_string(),
        Value::Array(tokens.iter().map(|t| Value::I32(t.2)).collect()),
    );
    let content = Content {
        magic: VersionedMagic::GgufV3,
        metadata: md,
        tensor_infos: HashMap::new(),
        tensor_data_offset: 0,
    };
    Tokenizer::from_gguf_content(&content, "tiny-spm.gguf").unwrap()
}

#[test]
fn sentencepiece_merges_by_score_with_byte_fallback() {
    let tok = tiny_spm();
    let id = |t: &str| tok.token_id(t).unwrap();
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.unk_id()),
        (Some(1), Some(2), Some(0))
    );
    // "▁hello": ll (-1.5) first, then llo (-1.2), he (-3), ▁he (-4), ▁hello (-5).
    assert_eq!(tok.encode("hello", false, false).unwrap(), [id("▁hello")]);
    // BOS added; "!" is not in the vocabulary: spelled as <0x21>.
    let ids = tok.encode("hello w!", true, false).unwrap();
    assert_eq!(ids, [1, id("▁hello"), id("▁w"), id("<0x21>")]);
    assert_eq!(tok.decode(&ids, true), "hello w!");
    // Non-ASCII characters are spelled byte by byte and decode back.
    let ids = tok.encode("hé", false, false).unwrap();
    assert_eq!(ids, [id("▁"), id("h"), id("<0xC3>"), id("<0xA9>")]);
    assert_eq!(tok.decode(&ids, false), "hé");
    // Control tokens in text with parse_special; a space is prefixed after them.
    let ids = tok.encode("<s>hello", false, true).unwrap();
    assert_eq!(ids, [1, id("▁hello")]);
}

/// A `tokenizer.json` beside the model file is used for encoding. The file is
/// written here from the qwen2 GGUF vocabulary with Qwen2's pre-tokenizer (as
/// in Qwen's own tokenizer.json) and must give llama.cpp's vectors too.
#[test]
fn tokenizer_json_beside_the_model_is_used() {
    let gguf = data("ggml-vocab-qwen2.gguf");
    let content = Content::read(&mut std::fs::File::open(&gguf).unwrap()).unwrap();
    let base = Tokenizer::from_gguf_content(&content, &gguf).unwrap();
    let Value::Array(merges) = &content.metadata["tokenizer.ggml.merges"] else {
        panic!()
    };
    let merges: Vec<&str> = merges
        .iter()
        .map(|m| m.to_string().unwrap().as_str())
        .collect();
    let mut vocab = serde_json::Map::new();
    let mut added = Vec::new();
    for id in 0..base.vocab_size() as u32 {
        let text = base.token_text(id).unwrap();
        if base.is_special(id) {
            added.push(serde_json::json!({"id": id, "content": text, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": base.kind(id) == TokenKind::Control}));
        }
        // Special tokens stay in the model's vocab too: some merges (e.g. to `</s>`) end in them.
        vocab.insert(text.to_string(), id.into());
    }
    let regex = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges},
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), json.to_string()).unwrap();
    let model = dir.path().join("model.gguf");
    std::os::unix::fs::symlink(&gguf, &model).unwrap();

    let tok = Tokenizer::for_model_file(&model).unwrap();
    assert_eq!(
        tok.tokenizer_json(),
        Some(dir.path().join("tokenizer.json").as_path())
    );
    let inputs = read_inputs(&data("ggml-vocab-qwen2.gguf.inp"));
    let expected = read_outputs(&data("ggml-vocab-qwen2.gguf.out"));
    for (text, want) in inputs.iter().zip(&expected) {
        assert_eq!(&tok.encode(text, false, false).unwrap(), want, "{text:?}");
    }
    let im_start = tok.token_id("<|im_start|>").unwrap();
    assert_eq!(
        tok.encode("<|im_start|>user", false, true).unwrap()[0],
        im_start
    );
    assert!(!tok
        .encode("<|im_start|>user", false, false)
        .unwrap()
        .contains(&im_start));
    // Without the file, the GGUF rules are used.
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    assert_eq!(
        Tokenizer::for_model_file(&model).unwrap().tokenizer_json(),
        None
    );
}
