//! Property and fuzz tests on stable Rust: seeded mutation loops over every
//! reader of files and model output. Each bad input must give an error that
//! names what was wrong, never a panic; each good one must read back the same.
//!
//! - the GGUF header reader: truncation at every byte of real headers, random
//!   bit flips, huge counts written over every position of a header;
//! - the TOML configs (Energy Society, race, sweep files): line and byte
//!   mutations of every shipped config, and the round trip of what parses;
//! - the Energy Society's and the race's response parsers on arbitrary and
//!   adversarial model output;
//! - the GGUF tokenizers on arbitrary bytes and arbitrary token ids;
//! - the JSONL readers (`read_jsonl`, a run's `read_events`) on torn and
//!   corrupt lines.
//!
//! The loops are deterministic (fixed seeds). `JOULE_FUZZ=N` multiplies the
//! iterations (default 1: a few seconds per test in a release build, as CI
//! runs; `JOULE_FUZZ=100 cargo test --release --test fuzz` for a long local
//! run). `JOULE_FUZZ_SEED=S` changes the seeds.

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn scale() -> usize {
    std::env::var("JOULE_FUZZ")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn rng(stream: u64) -> ChaCha8Rng {
    let seed: u64 = std::env::var("JOULE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    ChaCha8Rng::seed_from_u64(seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn shared() -> PathBuf {
    let p = root().join("../shared/data");
    assert!(
        p.exists(),
        "missing {}: tests read ../shared in place",
        p.display()
    );
    p
}

/// Random bytes, some of them valid UTF-8 text.
fn random_bytes(r: &mut ChaCha8Rng, max: usize) -> Vec<u8> {
    let n = r.gen_range(0..=max);
    (0..n).map(|_| r.gen()).collect()
}

/// One random edit of `bytes`: flip bits, overwrite, insert, delete, cut or
/// duplicate a span.
fn mutate(r: &mut ChaCha8Rng, bytes: &mut Vec<u8>) {
    let n = bytes.len();
    match r.gen_range(0..6) {
        0 if n > 0 => {
            let i = r.gen_range(0..n);
            bytes[i] ^= 1 << r.gen_range(0..8);
        }
        1 if n > 0 => {
            let i = r.gen_range(0..n);
            bytes[i] = r.gen();
        }
        2 => {
            let i = r.gen_range(0..=n);
            let b: u8 = r.gen();
            bytes.insert(i, b);
        }
        3 if n > 0 => {
            let i = r.gen_range(0..n);
            let j = (i + r.gen_range(1..16)).min(n);
            bytes.drain(i..j);
        }
        4 if n > 0 => bytes.truncate(r.gen_range(0..n)),
        _ if n > 0 => {
            let i = r.gen_range(0..n);
            let j = (i + r.gen_range(1..32)).min(n);
            let span = bytes[i..j].to_vec();
            let k = r.gen_range(0..=bytes.len());
            bytes.splice(k..k, span);
        }
        _ => bytes.push(r.gen()),
    }
}

// --- GGUF ---------------------------------------------------------------------------------

mod gguf {
    use super::*;
    use joule::inference::files::gguf_header::{GgufInfo, ReadOptions};

    const ALL: ReadOptions = ReadOptions {
        max_array_items: u64::MAX,
    };

    /// Real files: the golden models (written by a converter) and two vocabularies.
    fn files() -> Vec<PathBuf> {
        let golden = root().join("tests/fixtures/golden");
        let mut v: Vec<PathBuf> = ["llama", "qwen2", "qwen3", "gemma3"]
            .iter()
            .map(|m| golden.join(format!("{m}.gguf")))
            .collect();
        v.push(root().join("tests/fixtures/gguf/tiny-llama.gguf"));
        v
    }

    fn check(path: &Path, bytes: &[u8], opts: ReadOptions) -> Result<GgufInfo, String> {
        GgufInfo::from_bytes(path, bytes, opts).map_err(|e| {
            let s = e.to_string();
            assert!(
                s.starts_with(&path.display().to_string()) && s.len() > path.as_os_str().len() + 4,
                "an error that does not name the file and the problem: {s}"
            );
            s
        })
    }

    #[test]
    fn truncation_at_every_byte_of_real_headers_is_an_error() {
        for path in files() {
            let bytes = std::fs::read(&path).unwrap();
            let full = check(&path, &bytes, ALL).unwrap();
            let end = (full.data_offset as usize).min(bytes.len());
            for cut in 0..end {
                for opts in [ALL, ReadOptions::default()] {
                    let e = check(&path, &bytes[..cut], opts)
                        .err()
                        .unwrap_or_else(|| panic!("{}: cut at {cut} read", path.display()));
                    assert!(
                        e.contains("truncated")
                            || e.contains("implausible")
                            || e.contains("past the end"),
                        "cut at {cut}: {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn truncation_of_real_vocabularies_is_an_error() {
        let mut r = rng(1);
        for name in ["ggml-vocab-gpt-2.gguf", "ggml-vocab-qwen2.gguf"] {
            let path = shared().join("tokenizers").join(name);
            let bytes = std::fs::read(&path).unwrap();
            let info = check(&path, &bytes, ALL).unwrap();
            assert!(info.tensors.is_empty());
            // Every byte of the fixed part of the header, then random cuts.
            let mut cuts: Vec<usize> = (0..2048).collect();
            cuts.extend((0..40 * scale()).map(|_| r.gen_range(0..bytes.len())));
            for cut in cuts {
                let opts = if cut % 2 == 0 {
                    ReadOptions::default()
                } else {
                    ALL
                };
                let e = check(&path, &bytes[..cut], opts);
                assert!(e.is_err(), "{name}: cut at {cut} read");
            }
        }
    }

    #[test]
    fn random_bit_flips_never_panic() {
        let mut r = rng(2);
        for path in files() {
            let clean = std::fs::read(&path).unwrap();
            let header = check(&path, &clean, ALL).unwrap().data_offset as usize;
            let (mut ok, mut bad) = (0, 0);
            for _ in 0..300 * scale() {
                let mut bytes = clean.clone();
                for _ in 0..r.gen_range(1..=8) {
                    let i = r.gen_range(0..header.min(bytes.len()));
                    bytes[i] ^= 1 << r.gen_range(0..8);
                }
                match check(&path, &bytes, ALL) {
                    Ok(info) => {
                        ok += 1;
                        // What reads is consistent with the file.
                        for t in &info.tensors {
                            if let Some(n) = t.n_bytes {
                                assert!(info.data_offset + t.offset + n <= bytes.len() as u64);
                            }
                        }
                    }
                    Err(_) => bad += 1,
                }
            }
            assert!(bad > 0 && ok + bad == 300 * scale());
        }
    }

    #[test]
    fn huge_counts_anywhere_in_a_header_are_refused_without_allocating() {
        for path in files() {
            let clean = std::fs::read(&path).unwrap();
            let header = check(&path, &clean, ALL).unwrap().data_offset as usize;
            let step = if scale() > 1 { 1 } else { 3 };
            for at in (0..header.saturating_sub(8)).step_by(step) {
                for huge in [u64::MAX, 1 << 62, 1 << 40, u32::MAX as u64] {
                    let mut bytes = clean.clone();
                    bytes[at..at + 8].copy_from_slice(&huge.to_le_bytes());
                    // An error or a header; either way no panic and no
                    // allocation of `huge` items (this would abort or hang).
                    let _ = check(&path, &bytes, ALL);
                }
            }
        }
    }

    /// The model loader reads headers through the same reader: every cut of
    /// a real model's header and random flips are errors naming the file.
    #[test]
    fn the_model_loader_on_cut_and_flipped_headers() {
        use joule::inference::models::load_model;
        let dir = tempfile::tempdir().unwrap();
        let path = root().join("tests/fixtures/golden/llama.gguf");
        let clean = std::fs::read(&path).unwrap();
        let header = check(&path, &clean, ALL).unwrap().data_offset as usize;
        let p = dir.path().join("model.gguf");
        let mut r = rng(4);
        let step = if scale() > 1 { 1 } else { 7 };
        let mut cases: Vec<Vec<u8>> = (0..header)
            .step_by(step)
            .map(|c| clean[..c].to_vec())
            .collect();
        for _ in 0..100 * scale() {
            let mut b = clean.clone();
            for _ in 0..r.gen_range(1..=4) {
                let i = r.gen_range(0..header);
                b[i] ^= 1 << r.gen_range(0..8);
            }
            cases.push(b);
        }
        for bytes in cases {
            std::fs::write(&p, &bytes).unwrap();
            if let Err(e) = load_model(&p, &candle_core::Device::Cpu) {
                let s = format!("{e:#}");
                assert!(s.contains("model.gguf") && s.len() > 40, "{s}");
            }
        }
    }

    #[test]
    fn random_files_are_errors() {
        let mut r = rng(3);
        let path = Path::new("random.gguf");
        for _ in 0..2000 * scale() {
            let mut bytes = random_bytes(&mut r, 200);
            if r.gen_bool(0.5) && bytes.len() >= 8 {
                bytes[..4].copy_from_slice(b"GGUF");
                bytes[4..8].copy_from_slice(&r.gen_range(0u32..5).to_le_bytes());
            }
            let _ = check(path, &bytes, ALL);
        }
    }
}

// --- TOML configs -------------------------------------------------------------------------

mod toml_configs {
    use super::*;
    use joule::energy_society::config::SocietyConfig;
    use joule::race::config::ExperimentConfig;
    use joule::sweep::SweepFile;

    fn configs(dir: &str) -> Vec<(PathBuf, String)> {
        let mut v: Vec<(PathBuf, String)> = std::fs::read_dir(root().join("configs").join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| {
                let t = std::fs::read_to_string(&p).unwrap();
                (p, t)
            })
            .collect();
        v.sort();
        v
    }

    const TOKENS: &[&str] = &[
        "-1",
        "0",
        "1",
        "nan",
        "inf",
        "-inf",
        "1e309",
        "18446744073709551616",
        "-0.0",
        "\"\"",
        "\"x\"",
        "[]",
        "{}",
        "true",
        "[[roster]]",
        "[llm]",
        "=",
        "\"",
        "'''",
        "#",
        "\\u0000",
        "1.5",
        "[1, 2]",
        "\"scripted:\"",
        "\"faithful\"",
        "\"coop\"",
    ];

    /// A line-level or byte-level mutation of a TOML text.
    fn mutate_toml(r: &mut ChaCha8Rng, text: &str) -> String {
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let n = lines.len().max(1);
        match r.gen_range(0..6) {
            0 if !lines.is_empty() => {
                lines.remove(r.gen_range(0..lines.len()));
            }
            1 if !lines.is_empty() => {
                let i = r.gen_range(0..lines.len());
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => {
                // Replace a value.
                let i = r.gen_range(0..n).min(lines.len().saturating_sub(1));
                if let Some(l) = lines.get_mut(i) {
                    if let Some((k, _)) = l.split_once('=') {
                        *l = format!("{k}= {}", TOKENS[r.gen_range(0..TOKENS.len())]);
                    }
                }
            }
            3 => {
                let i = r.gen_range(0..=lines.len());
                lines.insert(i, TOKENS[r.gen_range(0..TOKENS.len())].to_string());
            }
            4 if !lines.is_empty() => {
                let i = r.gen_range(0..lines.len());
                let k = format!("unknown_{} = 1", r.gen_range(0..9));
                lines.insert(i, k);
            }
            _ => {
                let mut b = text.as_bytes().to_vec();
                for _ in 0..r.gen_range(1..4) {
                    mutate(r, &mut b);
                }
                return String::from_utf8_lossy(&b).into_owned();
            }
        }
        lines.join("\n")
    }

    #[test]
    fn energy_society_configs() {
        let mut r = rng(10);
        let (mut ok, mut bad) = (0, 0);
        for (path, text) in configs("energy-society") {
            if text.contains("seeds") {
                continue; // the sweep file
            }
            let name = path.display().to_string();
            let good = SocietyConfig::from_toml_str(&text, &name).unwrap();
            // Round trip of a good config.
            let back = SocietyConfig::from_toml_str(&good.to_toml().unwrap(), &name).unwrap();
            assert_eq!(back, good, "{name}");
            for _ in 0..150 * scale() {
                let mut t = text.clone();
                for _ in 0..r.gen_range(1..=3) {
                    t = mutate_toml(&mut r, &t);
                }
                match SocietyConfig::from_toml_str(&t, &name) {
                    Ok(c) => {
                        ok += 1;
                        c.validate(&name).unwrap();
                        let again = SocietyConfig::from_toml_str(&c.to_toml().unwrap(), &name)
                            .unwrap_or_else(|e| panic!("{e}\nfrom:\n{t}"));
                        assert_eq!(again, c, "round trip of:\n{t}");
                    }
                    Err(e) => {
                        bad += 1;
                        assert!(
                            !e.key.is_empty() && !e.message.is_empty(),
                            "{e:?} from:\n{t}"
                        );
                        assert!(e.to_string().starts_with(&name), "{e}");
                    }
                }
            }
        }
        assert!(ok > 0 && bad > 0, "ok {ok}, bad {bad}");
    }

    #[test]
    fn race_configs() {
        let mut r = rng(11);
        for (path, text) in configs("ai-race") {
            let name = path.display().to_string();
            let parsed = ExperimentConfig::from_toml_str(&text, &name);
            if text.contains("configs = [") || parsed.is_err() {
                // A race sweep file (a list of configs), not an experiment.
                assert!(toml::from_str::<toml::Value>(&text).is_ok(), "{name}");
                continue;
            }
            for _ in 0..150 * scale() {
                let mut t = text.clone();
                for _ in 0..r.gen_range(1..=3) {
                    t = mutate_toml(&mut r, &t);
                }
                match ExperimentConfig::from_toml_str(&t, &name) {
                    Ok(c) => {
                        assert!(c.temperature.is_finite() && c.temperature >= 0.0, "{t}");
                        let again = toml::to_string(&c)
                            .map_err(anyhow::Error::from)
                            .and_then(|s| ExperimentConfig::from_toml_str(&s, &name))
                            .unwrap_or_else(|e| panic!("{e:#}\nfrom:\n{t}"));
                        assert_eq!(format!("{again:?}"), format!("{c:?}"), "{t}");
                    }
                    Err(e) => {
                        let s = format!("{e:#}");
                        assert!(s.contains(&name) && s.len() > name.len() + 10, "{s}");
                    }
                }
            }
        }
    }

    #[test]
    fn sweep_files() {
        let mut r = rng(12);
        let text = std::fs::read_to_string(root().join("configs/energy-society/sweep-paper.toml"))
            .unwrap();
        SweepFile::from_toml_str(&text, "sweep.toml").unwrap();
        for _ in 0..500 * scale() {
            let t = mutate_toml(&mut r, &text);
            if let Err(e) = SweepFile::from_toml_str(&t, "sweep.toml") {
                let s = e.to_string();
                assert!(
                    s.starts_with("sweep.toml: ") && s.len() > 16,
                    "{s} from:\n{t}"
                );
            }
        }
    }
}

// --- model output parsers -----------------------------------------------------------------

mod responses {
    use super::*;
    use joule::energy_society::config::Mode;
    use joule::energy_society::schema::{parse_decision, parse_solution, parse_vote};
    use joule::race::parser::{clean_lines, parse_action, parse_code_action, CodeMapping};

    const SEEDS: &[&str] = &[
        r#"{"reasoning": "r", "action": "ATTEMPT_JOB", "job_id": "job_3", "target_agent": null, "amount": null}"#,
        r#"{"reasoning": "r", "action": "DONATE", "job_id": null, "target_agent": "agent_2", "amount": -5}"#,
        r#"{"reasoning": "r", "action": "SABOTAGE_JOB", "job_id": "7", "target_agent": null, "amount": "12.5"}"#,
        r#"{"voter_id": "agent_1", "overall_reasoning": "o", "recommendations": [{"agent_id": "agent_2", "recommended_action": "IDLE", "job_id": null, "target_agent": null, "amount": null}]}"#,
        r#"{"answer": "2"}"#,
        "```json\n{\"answer\": 3}\n```",
        "Thinking... {\"answer\": \"B\"} trailing } junk",
        "ACTION: SAFE",
        "  action :  unsafe  ",
        "I choose\nACTION: UNSAFE",
        "ACTION: P",
    ];

    /// Model output: random bytes, mutated seeds, deep nesting, huge
    /// numbers, long strings, several objects, control characters.
    fn output(r: &mut ChaCha8Rng) -> String {
        match r.gen_range(0..7) {
            0 => String::from_utf8_lossy(&random_bytes(r, 300)).into_owned(),
            1 | 2 => {
                let mut b = SEEDS[r.gen_range(0..SEEDS.len())].as_bytes().to_vec();
                for _ in 0..r.gen_range(1..6) {
                    mutate(r, &mut b);
                }
                String::from_utf8_lossy(&b).into_owned()
            }
            3 => {
                let d = r.gen_range(1..5000);
                let (o, c) = if r.gen() {
                    ("[", "]")
                } else {
                    ("{\"a\":", "}")
                };
                format!("{}{}", o.repeat(d), c.repeat(r.gen_range(0..=d)))
            }
            4 => format!(
                r#"{{"answer": {}, "action": "{}", "amount": {}}}"#,
                [
                    "1e999",
                    "-1e999",
                    "NaN",
                    "184467440737095516160",
                    "0x10",
                    "\"\\ud800\""
                ][r.gen_range(0..6)],
                "A".repeat(r.gen_range(0..10_000)),
                ["null", "0", "-0", "1e-400", "\"inf\"", "\"nan\""][r.gen_range(0..6)]
            ),
            5 => {
                let n = r.gen_range(1..5);
                (0..n)
                    .map(|_| SEEDS[r.gen_range(0..SEEDS.len())])
                    .collect::<Vec<_>>()
                    .join(if r.gen() { "\n" } else { "" })
            }
            _ => {
                let chars = [
                    '\u{0}', '\r', '\u{85}', '\u{2028}', '{', '}', '"', '\\', 'é', '😀',
                ];
                (0..r.gen_range(0..200))
                    .map(|_| chars[r.gen_range(0..chars.len())])
                    .collect()
            }
        }
    }

    #[test]
    fn energy_society_parsers_never_panic_and_name_the_problem() {
        let mut r = rng(20);
        let mut parsed = 0;
        for i in 0..8000 * scale() {
            let text = output(&mut r);
            let mode = if i % 2 == 0 {
                Mode::Faithful
            } else {
                Mode::Corrected
            };
            let sabotage = i % 3 == 0;
            match parse_decision(&text, sabotage, mode) {
                Ok(d) => {
                    parsed += 1;
                    // What parsed reads back the same from its own JSON.
                    let again = parse_decision(&serde_json::to_string(&d).unwrap(), sabotage, mode);
                    assert_eq!(again.as_ref(), Ok(&d), "{text:?}");
                }
                Err(e) => assert!(!e.trim().is_empty()),
            }
            match parse_vote(&text, sabotage, mode) {
                Ok(v) => {
                    let again = parse_vote(&serde_json::to_string(&v).unwrap(), sabotage, mode);
                    assert_eq!(again.as_ref(), Ok(&v), "{text:?}");
                }
                Err(e) => assert!(!e.trim().is_empty()),
            }
            match parse_solution(&text) {
                Ok(s) => assert_eq!(
                    parse_solution(&serde_json::to_string(&s).unwrap()).as_ref(),
                    Ok(&s)
                ),
                Err(e) => assert!(!e.trim().is_empty()),
            }
        }
        assert!(parsed > 0);
    }

    #[test]
    fn race_parsers_never_misread() {
        let mut r = rng(21);
        for _ in 0..20_000 * scale() {
            let text = output(&mut r);
            let p = parse_action(&text);
            let lines = clean_lines(&text);
            if !p.parse_failed {
                // Valid only as exactly one line naming the action parsed.
                assert_eq!(lines.len(), 1, "{text:?}");
                let line = lines[0].to_uppercase();
                let label = format!("{:?}", p.action).to_uppercase();
                assert!(line.contains(&label), "{text:?} parsed as {:?}", p.action);
                assert!(line.contains("UNSAFE") == (label == "UNSAFE"), "{text:?}");
            }
            for m in [CodeMapping::SafeP, CodeMapping::SafeQ] {
                let (p, code) = parse_code_action(&text, m);
                assert_eq!(p.parse_failed, code.is_none(), "{text:?}");
            }
        }
    }
}

// --- tokenizers ---------------------------------------------------------------------------

mod tokenizers {
    use super::*;
    use joule::inference::text::tokenizer::Tokenizer;

    /// Text from arbitrary bytes, with special-token spellings and odd
    /// characters mixed in.
    fn text(r: &mut ChaCha8Rng, tok: &Tokenizer) -> String {
        let mut s = String::from_utf8_lossy(&random_bytes(r, 120)).into_owned();
        for _ in 0..r.gen_range(0..4) {
            let piece: String = match r.gen_range(0..4) {
                0 => {
                    let id = r.gen_range(0..tok.vocab_size() as u32);
                    tok.token_text(id).unwrap_or("").to_string()
                }
                1 => [
                    "<|im_start|>",
                    "<s>",
                    "</s>",
                    "<think>",
                    "\u{2581}",
                    " ",
                    "\n\n",
                ][r.gen_range(0..7)]
                .to_string(),
                2 => "a".repeat(r.gen_range(0..300)),
                _ => ['\u{0}', '\u{feff}', '\u{10ffff}', 'ß', '中', '🙂', '\t'][r.gen_range(0..7)]
                    .to_string(),
            };
            let at = r.gen_range(0..=s.len());
            let at = (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
            s.insert_str(at, &piece);
        }
        s
    }

    #[test]
    fn arbitrary_text_and_ids_never_panic_and_plain_text_round_trips() {
        let mut r = rng(30);
        for name in [
            "ggml-vocab-gpt-2.gguf",
            "ggml-vocab-llama-bpe.gguf",
            "ggml-vocab-qwen2.gguf",
            "ggml-vocab-gemma-4.gguf",
        ] {
            let tok = Tokenizer::from_gguf_file(shared().join("tokenizers").join(name)).unwrap();
            let n = tok.vocab_size() as u32;
            let spm = tok.model_name() != "gpt2";
            for i in 0..150 * scale() {
                let s = text(&mut r, &tok);
                let parse_special = i % 2 == 0;
                let ids = tok
                    .encode(&s, i % 3 == 0, parse_special)
                    .unwrap_or_else(|e| panic!("{name}: {s:?}: {e:#}"));
                assert!(ids.iter().all(|&id| id < n), "{name}: id out of range");
                // SentencePiece writes spaces as U+2581, so a literal U+2581
                // decodes as a space (llama.cpp does the same).
                if !parse_special && !(spm && s.contains('\u{2581}')) {
                    // Without special tokens, decoding gives the text back.
                    let plain = tok.encode(&s, false, false).unwrap();
                    assert_eq!(tok.decode(&plain, false), s, "{name}: {s:?}");
                }
                // Arbitrary ids, in and out of the vocabulary.
                let ids: Vec<u32> = (0..r.gen_range(0..50))
                    .map(|_| {
                        if r.gen_bool(0.9) {
                            r.gen_range(0..n)
                        } else {
                            r.gen()
                        }
                    })
                    .collect();
                let _ = tok.decode(&ids, r.gen());
            }
        }
    }
}

// --- JSONL --------------------------------------------------------------------------------

mod jsonl {
    use super::*;
    use joule::energy_society::recorder::read_events;
    use joule::record::read_jsonl;

    #[test]
    fn a_torn_last_line_is_ignored_and_a_corrupt_line_is_named() {
        let mut r = rng(40);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        for _ in 0..300 * scale() {
            let n = r.gen_range(1..12);
            let lines: Vec<String> = (0..n)
                .map(|i| {
                    serde_json::json!({"i": i, "text": "é😀\"\\\n".repeat(r.gen_range(0..4))})
                        .to_string()
                })
                .collect();
            let whole = lines.join("\n") + "\n";
            // A torn write: any prefix reads as the complete lines before it.
            let cut = r.gen_range(0..=whole.len());
            std::fs::write(&p, &whole.as_bytes()[..cut]).unwrap();
            let got = read_jsonl(&p).unwrap_or_else(|e| panic!("cut at {cut}: {e:#}"));
            let complete = whole.as_bytes()[..cut]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            assert!(
                got.len() == complete || got.len() == complete + 1,
                "cut at {cut}"
            );
            for (k, v) in got.iter().enumerate() {
                assert_eq!(v["i"], k);
            }
            // A corrupt line before the last: an error naming the file and line.
            if n > 1 {
                let k = r.gen_range(0..n - 1);
                let mut bad = lines.clone();
                let mut b = bad[k].as_bytes().to_vec();
                b.truncate(r.gen_range(0..b.len()));
                if r.gen() {
                    b.push(0xff); // not UTF-8
                }
                bad[k] = String::from_utf8_lossy(&b).into_owned();
                let mut raw = bad.join("\n").into_bytes();
                if r.gen_bool(0.3) {
                    let at = raw.iter().position(|&c| c == b'\n').unwrap_or(0);
                    raw.insert(at, 0xc3); // half of a two-byte character
                }
                raw.push(b'\n');
                std::fs::write(&p, &raw).unwrap();
                if let Err(e) = read_jsonl(&p) {
                    let s = format!("{e:#}");
                    assert!(s.contains("x.jsonl") && s.contains("line "), "{s}");
                }
            }
        }
    }

    #[test]
    fn a_runs_events_read_back_from_any_torn_prefix() {
        use joule::energy_society::config::SocietyConfig;
        use joule::energy_society::runner::run_society;
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = SocietyConfig::baseline("greedy");
        cfg.max_rounds = 2;
        let mut backend = joule::energy_society::runner::backend_for(&cfg).unwrap();
        run_society(cfg, backend.as_mut(), Some(dir.path()), |_| {}).unwrap();
        let path = dir.path().join("events.jsonl");
        let whole = std::fs::read(&path).unwrap();
        let all = read_events(&path).unwrap();
        let torn = dir.path().join("torn.jsonl");
        let mut r = rng(41);
        let cuts: Vec<usize> = (0..100 * scale())
            .map(|_| r.gen_range(0..=whole.len()))
            .collect();
        for cut in cuts {
            std::fs::write(&torn, &whole[..cut]).unwrap();
            let got = read_events(&torn).unwrap_or_else(|e| panic!("cut at {cut}: {e:#}"));
            assert!(got.len() <= all.len());
            assert_eq!(got[..], all[..got.len()], "cut at {cut}");
        }
        // A flipped byte somewhere: the events read, or an error naming where.
        for _ in 0..100 * scale() {
            let mut bytes = whole.clone();
            mutate(&mut r, &mut bytes);
            std::fs::write(&torn, &bytes).unwrap();
            if let Err(e) = read_events(&torn) {
                let s = format!("{e:#}");
                assert!(s.contains("torn.jsonl"), "{s}");
            }
        }
    }
}
