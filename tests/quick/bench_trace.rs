//! The trace benchmark (`joule bench trace`) on a shared reference run: the
//! prompts it sends are the faithful engine's replay prompts, byte for byte,
//! every call asks for its recorded count and the run is still reproduced;
//! Joule's engine generates exactly the count asked for (a tiny model with a
//! real vocabulary); and through a server (a fake OpenAI-compatible one here)
//! the same requests go out, one at a time in the reference's mode.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use joule::agency::{run_one, Driver};
use joule::backend::{
    Backend, FinishReason, ModelRequest, ModelResponse, ModelResult, OutputFormat, TokenUsage,
};
use joule::energy_society::condition::Overrides;
use joule::energy_society::replay::{Replay, ReplayBackend};
use joule::energy_society::trace::{Pace, TraceBackend};

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

fn run_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/reference-runs/energy-society/coop/exponent_0.5/run_1");
    assert!(
        d.is_dir(),
        "missing {}: tests read ../shared in place",
        d.display()
    );
    d
}

/// Records what the faithful replay asks its backend, each request with the tokens its
/// recorded answer carries (0 for a failed call).
struct Recording<'a> {
    inner: &'a mut ReplayBackend,
    seen: Vec<(ModelRequest, u32)>,
}

impl Backend for Recording<'_> {
    fn name(&self) -> String {
        "recording".into()
    }
    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        let out = self.inner.generate(batch);
        for (r, a) in batch.iter().zip(&out) {
            let tokens = a.as_ref().map(|a| a.usage.generated_tokens).unwrap_or(0);
            self.seen.push((r.clone(), tokens));
        }
        out
    }
}

/// Generates whatever length is asked for (a model that never stops early).
struct Lengths;

impl Backend for Lengths {
    fn name(&self) -> String {
        "lengths".into()
    }
    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        batch
            .iter()
            .map(|r| {
                Ok(ModelResponse {
                    text: "not the recorded answer".into(),
                    thinking: String::new(),
                    usage: TokenUsage {
                        prompt_tokens: 7,
                        generated_tokens: r.params.max_tokens,
                        thinking_tokens: 0,
                        charged_tokens: r.params.max_tokens,
                        eos_counted: false,
                    },
                    finish: FinishReason::Length,
                    rendered_prompt: None,
                    latency_ms: 0.0,
                    count_source: None,
                    measured: None,
                })
            })
            .collect()
    }
}

fn round_of(r: &ModelRequest) -> u64 {
    r.observation
        .get("round")
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// (round, phase, agent, messages as JSON, tokens) of each request, sorted.
fn prompts(reqs: &[(ModelRequest, u32)]) -> Vec<(u64, String, String, String, u32)> {
    let mut v: Vec<_> = reqs
        .iter()
        .map(|(r, tokens)| {
            (
                round_of(r),
                r.tag.clone(),
                r.agent_id.clone(),
                serde_json::to_string(&r.messages).unwrap(),
                *tokens,
            )
        })
        .collect();
    v.sort();
    v
}

/// The trace of the whole run on `inner`, from round `first`: the requests sent and the replay's
/// mismatches and values checked.
fn trace_run(first: u32) -> (Vec<ModelRequest>, usize, usize, Replay) {
    let (replay, backend) = Replay::prepare(&run_dir(), &Overrides::default()).unwrap();
    let mut cfg = replay.config.clone();
    for a in cfg.roster.iter_mut() {
        a.model = a.model_name.clone();
    }
    let society = replay.society(Some(cfg));
    let mut driver = Driver::new();
    driver.spawn(move |agency| society.run(agency));
    let session = driver.sessions()[0];
    let mut inner = Lengths;
    let mut trace = TraceBackend::new(&mut inner, 1.0, first, Pace::Together);
    trace.keep_requests();
    trace.add_run(session, backend);
    let mut results = driver.run(&mut trace, |_| {});
    let result = results.remove(0).unwrap();
    let sent = trace.sent().to_vec();
    let calls = trace.calls().to_vec();
    assert_eq!(calls.len(), sent.len());
    assert!(calls
        .iter()
        .all(|c| c.generated == c.requested && c.error.is_none()));
    let mut backs = trace.into_runs();
    let back = backs.remove(&session).unwrap();
    let report = replay.report(&back, Some(&result), None);
    let shown: Vec<String> = report
        .mismatches
        .iter()
        .take(5)
        .map(|m| m.to_string())
        .collect();
    assert!(report.mismatches.is_empty(), "{}", shown.join("\n"));
    (sent, report.mismatches.len(), report.values_checked, replay)
}

#[test]
fn the_trace_sends_the_faithful_replays_prompts_and_the_recorded_counts() {
    // The faithful engine's own replay: the prompts it renders at every call.
    let (replay, mut backend) = Replay::prepare(&run_dir(), &Overrides::default()).unwrap();
    let society = replay.society(None);
    let mut rec = Recording {
        inner: &mut backend,
        seen: Vec::new(),
    };
    run_one(&mut rec, |agency| society.run(agency)).unwrap();
    let faithful = prompts(&rec.seen);
    assert!(faithful.len() > 100, "{} calls", faithful.len());

    let (sent, mismatches, checked, replay) = trace_run(1);
    assert_eq!(mismatches, 0);
    assert!(checked > 1000, "{checked} values checked");
    // Byte for byte the faithful replay's messages, call for call, each asking for the tokens
    // the replay charges it; calls that generate nothing (an invocation's retries after its
    // recorded tokens are spent, failed calls) are not sent.
    let with_tokens: Vec<(ModelRequest, u32)> = sent
        .iter()
        .map(|r| (r.clone(), r.params.max_tokens))
        .collect();
    let expected: Vec<_> = faithful.into_iter().filter(|p| p.4 > 0).collect();
    assert_eq!(prompts(&with_tokens), expected);
    // Each call asks for exactly its recorded count (an invocation's calls sum to it), with
    // end-of-sequence ignored, no stop strings and no grammar.
    let mut asked: BTreeMap<(u64, String, String), u64> = BTreeMap::new();
    for r in &sent {
        assert!(r.params.ignore_eos && r.params.stop.is_empty());
        assert_eq!(r.format, OutputFormat::Text);
        // The reference server's default truncation, since the config sets none.
        assert_eq!((r.params.top_k, r.params.top_p), (Some(40), Some(0.9)));
        *asked
            .entry((round_of(r), r.tag.clone(), r.agent_id.clone()))
            .or_default() += r.params.max_tokens as u64;
    }
    let recorded: BTreeMap<(u64, String, String), u64> = replay
        .run
        .token_usage
        .iter()
        .filter(|u| u.output_tokens > 0)
        .map(|u| {
            (
                (u.round_num as u64, u.phase.clone(), u.agent_id.clone()),
                u.output_tokens,
            )
        })
        .collect();
    assert_eq!(asked, recorded);
}

#[test]
fn rounds_before_the_first_are_answered_from_the_record_alone() {
    let (sent, mismatches, _, _) = trace_run(29);
    assert_eq!(mismatches, 0);
    assert!(!sent.is_empty());
    assert!(
        sent.iter().all(|r| round_of(r) >= 29),
        "only rounds 29 and 30 are sent"
    );
}

/// A tiny Qwen3-shaped model (1 layer, hidden 256) with Qwen2's real vocabulary and template.
fn tiny_model(dir: &Path) -> PathBuf {
    use joule::inference::files::manifest::Catalog;
    use joule::inference::files::synth::{recipe::FileType, synthesize, Layout, SynthOptions};
    let catalog = Catalog::embedded().unwrap();
    let m = catalog.get("qwen3-8b").unwrap();
    let mut cfg = m.synth.clone().unwrap();
    cfg.hidden = 256;
    cfg.heads = 2;
    cfg.kv_heads = 1;
    cfg.head_dim = 128;
    cfg.ffn = 512;
    let out = dir.join("tiny-qwen3.gguf");
    let vocab = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/tokenizers/ggml-vocab-qwen2.gguf");
    synthesize(
        &m.name,
        &m.architecture,
        &cfg,
        &SynthOptions {
            out: out.clone(),
            file_type: FileType::parse("q8_0").unwrap(),
            layout: Layout::parse("llama.cpp").unwrap(),
            layers: Some(1),
            seed: 1,
            vocab: Some(vocab),
            chat_template: None,
            quiet: true,
        },
    )
    .unwrap();
    out
}

fn joule(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(JOULE)
        .args(args)
        .env("JOULE_PROGRESS", "off")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "joule {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout)))
}

/// `joule bench trace` of the reference run with every agent on a tiny model, on 2 threads,
/// with `extra` options; its JSON report.
fn trace_on_tiny_models(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let m = model.display().to_string();
    let models = [m.as_str(); 5].join(",");
    let run = run_dir().display().to_string();
    let mut args = vec![
        "bench", "trace", &run, "--models", &models, "-t", "2", "--json",
    ];
    args.extend_from_slice(extra);
    joule(&args)
}

#[test]
fn the_engine_generates_exactly_each_calls_count() {
    let r = trace_on_tiny_models(&["--rounds", "1", "--token-scale", "0.02"]);
    let calls = r["calls"].as_u64().unwrap();
    assert!(calls >= 15, "{r}");
    assert_eq!(r["failed_calls"], 0, "{r}");
    assert_eq!(r["short_calls"], 0, "{r}");
    assert_eq!(r["replay_mismatches"], 0, "{r}");
    assert_eq!(r["requested_tokens"], r["generated_tokens"], "{r}");
    assert!(r["prompt_tokens"].as_u64().unwrap() > 1000 * calls, "{r}");
    for phase in ["vote", "decide", "act"] {
        assert!(
            r["per_phase"][phase]["calls"].as_u64().unwrap() >= 5,
            "{phase}: {r}"
        );
    }
    assert!(r["grid"]["hours"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["memory"]["planned_bytes"].as_u64().unwrap() > 0, "{r}");
}

/// `--time-limit` ends a trace that would run far longer (every round) in about that time,
/// exit 0, saying it is incomplete and how many calls in flight it dropped; no call counts as
/// failed and the grid estimate says which way it errs.
#[test]
fn a_time_limit_ends_the_trace_in_time_and_says_so() {
    let t0 = std::time::Instant::now();
    let r = trace_on_tiny_models(&["--token-scale", "0.02", "--time-limit", "4"]);
    let took = t0.elapsed().as_secs_f64();
    assert!(took < 60.0, "took {took:.1} s");
    assert_eq!(r["complete"], false, "{r}");
    assert_eq!(r["failed_calls"], 0, "{r}");
    assert_eq!(r["replay_mismatches"], 0, "{r}");
    let cut = r["cut_calls"].as_u64().unwrap();
    assert!(cut >= 1, "{r}");
    assert!(r["calls"].as_u64().unwrap() < 300, "{r}");
    // With calls answered, the estimate says the cut calls make it err long; with none, that
    // there is no estimate and what to change.
    let said = |what: &str| {
        r["grid"]["assumptions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains(what))
    };
    if r["calls"].as_u64().unwrap() > 0 {
        assert!(said(&format!("{cut} call(s) in flight")), "{r}");
        assert!(r["grid"]["hours"].as_f64().unwrap() > 0.0, "{r}");
    } else {
        assert!(said("no estimate") && said("--time-limit"), "{r}");
        assert!(r["grid"]["hours"].is_null(), "{r}");
    }
}

/// A fake OpenAI-compatible server: lists `names`, answers every chat request with the tokens
/// it asked for, after `delay_ms`; keeps each body and the most requests it held at once.
struct Fake {
    url: String,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
    most: Arc<AtomicUsize>,
}

fn fake_server(names: &[&str], delay_ms: u64) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let most = Arc::new(AtomicUsize::new(0));
    let now = Arc::new(AtomicUsize::new(0));
    let models = serde_json::json!({
        "object": "list",
        "data": names.iter().map(|n| serde_json::json!({"id": n, "object": "model"})).collect::<Vec<_>>(),
    })
    .to_string();
    let (b, m) = (bodies.clone(), most.clone());
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(s) = s else { return };
            let (bodies, most, now, models) = (b.clone(), m.clone(), now.clone(), models.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                r.read_line(&mut first).unwrap();
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let reply = if first.starts_with("GET") {
                    models
                } else {
                    let held = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(held, Ordering::SeqCst);
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let n = v["max_tokens"].as_u64().unwrap();
                    bodies.lock().unwrap().push(v);
                    std::thread::sleep(std::time::Duration::from_millis(delay_ms));
                    now.fetch_sub(1, Ordering::SeqCst);
                    serde_json::json!({
                        "object": "chat.completion",
                        "choices": [{"message": {"content": "x"}, "finish_reason": "length"}],
                        "usage": {"prompt_tokens": 11, "completion_tokens": n},
                    })
                    .to_string()
                };
                let mut s = s;
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            });
        }
    });
    Fake { url, bodies, most }
}

/// (agent's served model, messages as JSON, max_tokens) of each request body, sorted.
fn bodies_key(bodies: &[serde_json::Value]) -> Vec<(String, String, u64)> {
    let mut v: Vec<_> = bodies
        .iter()
        .map(|b| {
            assert_eq!(b["ignore_eos"], true, "{b}");
            assert!(b.get("response_format").is_none(), "no grammar: {b}");
            assert!(b.get("stop").is_none(), "{b}");
            assert_eq!(
                (b["top_k"].as_u64(), b["top_p"].as_f64()),
                (Some(40), Some(0.9f32 as f64)),
                "{b}"
            );
            (
                b["model"].as_str().unwrap().to_string(),
                b["messages"].to_string(),
                b["max_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_server_gets_the_same_requests_in_both_modes() {
    // What the trace sends (through any backend) for rounds 1-2 of the run.
    let (replay, _) = Replay::prepare(&run_dir(), &Overrides::default()).unwrap();
    let served: BTreeMap<String, String> = replay
        .config
        .roster
        .iter()
        .map(|a| (a.model_name.clone(), a.model_name.clone()))
        .collect();
    let (sent, _, _, _) = trace_run(1);
    let expected: Vec<(String, String, u64)> = {
        let mut v: Vec<_> = sent
            .iter()
            .filter(|r| round_of(r) <= 2)
            .map(|r| {
                let msgs: Vec<serde_json::Value> = r
                    .messages
                    .iter()
                    .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
                    .collect();
                (
                    served[&r.model].clone(),
                    serde_json::Value::from(msgs).to_string(),
                    r.params.max_tokens as u64,
                )
            })
            .collect();
        v.sort();
        v
    };
    let names: Vec<&str> = served.keys().map(String::as_str).collect();
    let run = run_dir().display().to_string();
    for mode in ["reference", "best"] {
        let fake = fake_server(&names, 15);
        let r = joule(&[
            "bench",
            "trace",
            &run,
            "--rounds",
            "2",
            "--via",
            &fake.url,
            "--served-mode",
            mode,
            "--json",
        ]);
        assert_eq!(r["mode"], mode, "{r}");
        assert_eq!(r["replay_mismatches"], 0, "{r}");
        let bodies = fake.bodies.lock().unwrap().clone();
        assert_eq!(bodies_key(&bodies), expected, "{mode}");
        let most = fake.most.load(Ordering::SeqCst);
        if mode == "reference" {
            assert_eq!(most, 1, "one call at a time");
            // Within a phase, the roster's order (agent_1 … agent_5), as the reference called.
            let order: Vec<String> = bodies
                .iter()
                .take(5)
                .map(|b| b["model"].as_str().unwrap().to_string())
                .collect();
            let roster: Vec<String> = replay
                .config
                .roster
                .iter()
                .map(|a| a.model_name.clone())
                .collect();
            assert_eq!(order, roster);
        } else {
            assert!(most > 1, "every slot busy: at most {most} at once");
        }
    }
}

/// The roster's manifests at tiny widths (their real vocabularies), as a folder of manifests
/// that replaces the built-in ones.
fn tiny_manifests(dir: &Path) {
    let common: &[(&str, &str)] = &[
        ("hidden", "256"),
        ("heads", "2"),
        ("kv_heads", "1"),
        ("head_dim", "128"),
        ("ffn", "512"),
    ];
    let own: &[(&str, &[(&str, &str)])] = &[
        (
            "gemma4-e4b",
            &[("head_dim_swa", "64"), ("per_layer_dim", "32")],
        ),
        (
            "nemotron-3-nano-4b",
            &[
                ("ssm_state", "16"),
                ("ssm_groups", "2"),
                ("ssm_heads", "8"),
                ("ssm_head_dim", "32"),
            ],
        ),
        (
            "qwen3.5-4b",
            &[
                ("ssm_state", "64"),
                ("ssm_groups", "2"),
                ("ssm_heads", "4"),
                ("rope_dims", "32"),
                ("rope_sections", "[6, 5, 5, 0]"),
            ],
        ),
        (
            "qwen3.5-9b",
            &[
                ("ssm_state", "64"),
                ("ssm_groups", "2"),
                ("ssm_heads", "4"),
                ("rope_dims", "32"),
                ("rope_sections", "[6, 5, 5, 0]"),
            ],
        ),
        ("qwen3-8b", &[]),
    ];
    std::fs::create_dir_all(dir).unwrap();
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    for (name, keys) in own {
        let text = std::fs::read_to_string(models.join(format!("{name}.toml"))).unwrap();
        let (head, synth) = text.split_once("[synth]").unwrap();
        let synth: Vec<String> = synth
            .lines()
            .map(|l| {
                let key = l.split('=').next().unwrap_or("").trim();
                match common.iter().chain(keys.iter()).find(|(k, _)| *k == key) {
                    Some((k, v)) => format!("{k} = {v}"),
                    None => l.to_string(),
                }
            })
            .collect();
        std::fs::write(
            dir.join(format!("{name}.toml")),
            format!("{head}[synth]{}\n", synth.join("\n")),
        )
        .unwrap();
    }
}

#[test]
fn without_models_the_roster_is_synthesized_with_its_vocabularies() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    tiny_manifests(&manifests);
    let synth = dir.path().join("synth");
    let run = run_dir().display().to_string();
    let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/tokenizers");
    let out = std::process::Command::new(JOULE)
        .args([
            "bench",
            "trace",
            &run,
            "--rounds",
            "1",
            "--token-scale",
            "0.01",
            "--layers",
        ])
        .args(["4", "--synth-dir", synth.to_str().unwrap(), "--vocab-dir"])
        .args([vocab.to_str().unwrap(), "-t", "2", "--json"])
        .env("JOULE_MODELS_DIR", &manifests)
        .env("JOULE_PROGRESS", "off")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let models = r["models"].as_array().unwrap();
    assert_eq!(models.len(), 5, "{r}");
    for m in models {
        let (key, file) = (m[0].as_str().unwrap(), m[1].as_str().unwrap());
        assert_eq!(
            Path::new(file),
            synth.join(format!("{key}-q4_k_m-4l.gguf")),
            "{r}"
        );
        assert!(Path::new(file).is_file());
    }
    assert!(r["calls"].as_u64().unwrap() >= 15, "{r}");
    assert_eq!(r["short_calls"], 0, "{r}");
    assert_eq!(r["replay_mismatches"], 0, "{r}");
    let per_model = r["per_model"].as_object().unwrap();
    assert_eq!(per_model.len(), 5, "every roster model answered: {r}");
}

/// Inputs that would trace nothing or count tokens no call generates are
/// refused before any model loads (no model is given: none is needed to refuse).
#[test]
fn a_trace_of_nothing_or_of_counts_without_calls_is_refused() {
    let refused = |args: &[&str]| {
        let out = std::process::Command::new(JOULE)
            .args(args)
            .env("JOULE_PROGRESS", "off")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let run = run_dir().display().to_string();
    let e = refused(&["bench", "trace", &run, "--rounds", "40..50"]);
    assert!(e.contains("the runs have at most 30 rounds"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("run_1");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(run_dir()).unwrap() {
        let f = f.unwrap();
        if f.path().is_file() {
            std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
        }
    }
    let usage = copy.join("token_usage.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&usage).unwrap()).unwrap();
    let mut ghost = v[0].clone();
    ghost["agent_id"] = "agent_9".into();
    ghost["output_tokens"] = 999_999.into();
    v.as_array_mut().unwrap().push(ghost);
    std::fs::write(&usage, v.to_string()).unwrap();
    let e = refused(&["bench", "trace", copy.to_str().unwrap(), "--rounds", "1"]);
    assert!(
        e.contains("agent_9") && e.contains("no call in transcript.json"),
        "{e}"
    );
}
