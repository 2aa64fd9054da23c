//! A model load parses its GGUF header once, with Joule's safe reader, and
//! hands that parse to the weights, the tokenizer and the chat template; a
//! bad header gets that reader's messages wherever it is read.

use candle_core::Device;
use joule::energy_society::config::SocietyConfig;
use joule::energy_society::runner::{backend_for, run_society};
use joule::inference::files::gguf_header::header_reads;
use joule::inference::models::load_model;
use joule::inference::text::tokenizer::Tokenizer;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

const CONFIG: &str = r#"
use_votes = false
max_rounds = 1
max_calls = 1

[difficulty]
easy = 1
medium = 0
hard = 0

[generation]
max_tokens = 24
temperature = 0.0
thinking = false

[llm]
stand_in = "__GGUF__"
max_string_chars = 4

[[roster]]
agent_id = "agent_1"
model = "qwen3-8b"
model_name = "qwen3:8b"
size = 8
"#;

#[test]
fn an_llm_run_parses_its_model_file_once() {
    let gguf = fixture("roster/qwen3.f32.gguf");
    let text = CONFIG.replace("__GGUF__", &gguf.display().to_string());
    let cfg = SocietyConfig::from_toml_str(&text, "single.toml").unwrap();
    // Building the backend locates and checks the stand-in (one read);
    // the model is loaded at the first call.
    let mut backend = backend_for(&cfg).unwrap();
    let before = header_reads();
    let r = run_society(cfg, backend.as_mut(), None, |_| {}).unwrap();
    assert_eq!(r.rounds_played, 1);
    let calls = r.folder.token_usage.len();
    assert!(calls >= 1, "the model-backed agent made no call");
    // The model loaded and answered (a random tiny model may still miss the
    // JSON within max_tokens: a format error, not an invoke error).
    let errors = &r.folder.agents[0].errors;
    assert!(
        errors.iter().all(|e| e.error_type != "invoke_error"),
        "{errors:?}"
    );
    assert_eq!(
        header_reads() - before,
        1,
        "weights, tokenizer and chat template must share one parse of the header"
    );
}

#[test]
fn a_bad_header_reads_the_same_to_the_loader_and_the_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("roster/qwen3.q8_0.gguf")).unwrap();
    for (cut, what) in [(10, "truncated: the tensor count at byte 8"), (300, "300")] {
        let p = dir.path().join(format!("cut{cut}.gguf"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let load = format!("{:#}", load_model(&p, &Device::Cpu).err().unwrap());
        let tok = format!("{:#}", Tokenizer::from_gguf_file(&p).err().unwrap());
        for e in [&load, &tok] {
            // Joule's reader: what was cut, at which byte, how long the file is.
            assert!(
                e.contains(&format!("cut{cut}.gguf: not a readable GGUF file: "))
                    && e.contains(what)
                    && (e.contains("truncated") || e.contains("implausible")),
                "{e}"
            );
        }
        assert_eq!(load, tok);
    }
}
