//! End to end against a real llama.cpp `llama-server` serving the default model
//! (SmolLM2-135M-Instruct) on loopback, through `[llm] backend = "openai"`:
//!
//! - a 2-agent, 1-round Energy Society completes, and the charged count of every
//!   call equals the usage the server reported for it (read from the server's own
//!   responses by a byte-copying loopback proxy in front of it);
//! - with a fixed seed, one server slot and one request at a time, two runs (each on a
//!   fresh server) give identical records (wall-clock latencies aside);
//! - a server killed during a sweep leaves recorded INVOKE_ERRORs and an incomplete
//!   cell, not a crash, and the same sweep resumes and completes once it is back;
//! - `joule models serve-check` lists the served model, and the paper's Ollama config
//!   pointed at a server that lacks its models stops before any round, naming them.
//!
//! llama-server is built the way a user builds it (`scripts/fetch-llama-cpp.sh`,
//! which `scripts/test.sh` runs and passes on as `JOULE_LLAMA_SERVER`); the model
//! comes from `scripts/fetch-default-model.sh`. Under CI a missing binary or model
//! fails the tests; elsewhere they say they were skipped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::default_model;
use joule::energy::CostModel;
use joule::energy_society::config::SocietyConfig;
use joule::energy_society::runner::{backend_for, job_source, run_society};
use joule::sweep::slurm::{cell_status, CellStatus};
use joule::sweep::{cells, out_dir, run_cells};
use serde_json::Value;

/// One llama-server at a time: they share two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn requirements() -> Option<(PathBuf, PathBuf)> {
    let ci = std::env::var_os("CI").is_some();
    let bin = std::env::var_os("JOULE_LLAMA_SERVER").map(PathBuf::from);
    let bin = match bin {
        Some(b) if b.is_file() => b,
        Some(b) => panic!("JOULE_LLAMA_SERVER={} is not a file", b.display()),
        None if ci => panic!(
            "JOULE_LLAMA_SERVER is not set: .ci/run must build llama-server with \
             scripts/fetch-llama-cpp.sh (scripts/test.sh does)"
        ),
        None => {
            eprintln!(
                "skipped: set JOULE_LLAMA_SERVER to a llama-server binary \
                 (JOULE_LLAMA_SERVER=$(scripts/fetch-llama-cpp.sh | tail -1)/llama-server)"
            );
            return None;
        }
    };
    default_model::cached().map(|model| (bin, model))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A llama-server child process on 127.0.0.1, killed on drop.
struct LlamaServer {
    child: Option<Child>,
    log: PathBuf,
}

impl LlamaServer {
    /// Start on `port` with one slot and wait (at most 120 s) until `/health` answers 200.
    fn start(bin: &Path, model: &Path, port: u16, log_dir: &Path) -> Self {
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::SeqCst);
        let log = log_dir.join(format!("llama-server-{port}-{n}.log"));
        let file = std::fs::File::create(&log).expect("server log");
        let child = Command::new(bin)
            .args(["-m"])
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-np", "1", "-c", "4096", "-t", "2", "--alias", "smollm2"])
            .args(["--no-webui", "--no-warmup"])
            .stdout(Stdio::from(file.try_clone().expect("log handle")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("starting llama-server");
        let mut s = LlamaServer {
            child: Some(child),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(2))
            .build();
        loop {
            if let Ok(r) = agent.get(&format!("http://127.0.0.1:{port}/health")).call() {
                if r.status() == 200 {
                    return s;
                }
            }
            if let Some(Ok(Some(status))) = s.child.as_mut().map(|c| c.try_wait()) {
                panic!("llama-server exited ({status}):\n{}", s.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "llama-server not ready within 120 s:\n{}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback TCP proxy that copies bytes both ways and keeps what the server
/// sent on each connection, so a test can read the server's own responses.
struct Proxy {
    port: u16,
    captured: Arc<Mutex<Vec<Arc<Mutex<Vec<u8>>>>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy port");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().unwrap().port();
        let captured: Arc<Mutex<Vec<Arc<Mutex<Vec<u8>>>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (captured.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        };
                        let buf = Arc::new(Mutex::new(Vec::new()));
                        c.lock().unwrap().push(buf.clone());
                        let (c1, s1) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        std::thread::spawn(move || copy(c1, s1, None));
                        std::thread::spawn(move || copy(server, client, Some(buf)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            port,
            captured,
            stop,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// (completion_tokens, prompt_tokens) of every chat completion the server
    /// sent since the last call.
    fn take_usages(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let conns = std::mem::take(&mut *self.captured.lock().unwrap());
        for conn in conns.iter() {
            let bytes = conn.lock().unwrap().clone();
            for body in http_bodies(&bytes) {
                let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                    continue;
                };
                if v["object"] == "chat.completion" {
                    let u = &v["usage"];
                    out.push((
                        u["completion_tokens"].as_u64().expect("completion_tokens"),
                        u["prompt_tokens"].as_u64().expect("prompt_tokens"),
                    ));
                }
            }
        }
        out
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream, keep: Option<Arc<Mutex<Vec<u8>>>>) {
    let mut buf = [0u8; 16384];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(k) = &keep {
                    k.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// The bodies of the HTTP/1.1 responses in a byte stream (Content-Length framing).
fn http_bodies(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>())
            })
            .and_then(Result::ok)
            .unwrap_or(0);
        let start = end + 4;
        let stop = (start + len).min(bytes.len());
        out.push(bytes[start..stop].to_vec());
        bytes = &bytes[stop..];
    }
    out
}

/// `concurrency`: requests in flight at once. Runs repeat exactly only with 1: with
/// one server slot, concurrent requests reach it in no fixed order, and the server's
/// prompt cache makes each answer depend on the request served before it.
fn config(base_url: &str, rounds: u32, concurrency: usize) -> String {
    format!(
        r#"
name = "served-e2e"
mode = "faithful"
objective = "comp"
use_votes = false
max_rounds = {rounds}
seed = 7
max_calls = 2

[difficulty]
easy = 1
medium = 1
hard = 0

[jobs]
source = "procedural"

[generation]
max_tokens = 80
temperature = 0.8
thinking = false

[llm]
backend = "openai"
base_url = "{base_url}"
model = "smollm2"
max_concurrency = {concurrency}
timeout_s = 900
retries = 2
retry_backoff_s = 0.2
max_string_chars = 60

[[roster]]
agent_id = "agent_1"
model = "qwen3-8b"
model_name = "qwen3:8b"
size = 8
init_energy = 1500.0

[[roster]]
agent_id = "agent_2"
model = "qwen3.5-4b"
model_name = "qwen3.5:4b"
size = 4
init_energy = 1500.0
"#
    )
}

fn calls(dir: &Path) -> Vec<(Value, Value)> {
    let events = joule::record::read_jsonl(dir.join("events.jsonl")).expect("events");
    events
        .iter()
        .filter(|e| e["event"] == "invocation")
        .flat_map(|e| {
            e["calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |c| (e.clone(), c))
        })
        .collect()
}

/// events.jsonl without the wall-clock latency of each call.
fn events_without_latency(dir: &Path) -> Vec<Value> {
    let mut events = joule::record::read_jsonl(dir.join("events.jsonl")).expect("events");
    for e in &mut events {
        if let Some(calls) = e.get_mut("calls").and_then(Value::as_array_mut) {
            for c in calls {
                if let Some(o) = c.as_object_mut() {
                    o.remove("latency_ms");
                }
            }
        }
    }
    events
}

#[test]
fn a_served_society_charges_the_servers_counts_and_repeats_with_a_fixed_seed() {
    let Some((bin, model)) = requirements() else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let proxy = Proxy::start(port);
    let cfg_text = config(&proxy.url(), 1, 1);
    let cost = CostModel {
        k: 0.015,
        alpha: 0.5,
        ..Default::default()
    };

    let mut runs = Vec::new();
    let mut served_usage = Vec::new();
    for run in 0..2 {
        // A fresh server for each run, on the same port behind the same proxy.
        let server = LlamaServer::start(&bin, &model, port, tmp.path());
        let cfg = SocietyConfig::from_toml_str(&cfg_text, "served-e2e.toml").expect("config");
        let mut backend = backend_for(&cfg).expect("backend (the server serves smollm2)");
        let dir = tmp.path().join(format!("run{run}"));
        let result = run_society(cfg, backend.as_mut(), Some(&dir), |_| {})
            .unwrap_or_else(|e| panic!("run {run}: {e:#}\n{}", server.log_text()));
        assert_eq!(result.rounds_played, 1);
        assert!(dir.join("COMPLETE").is_file());
        runs.push(dir);
        served_usage.push(proxy.take_usages());
        drop(server);
    }

    // The provenance names the server, the served name and llama-server's own entry for it
    // (its meta: the parameter count of the file it loaded).
    let p = joule::provenance::Provenance::read(&runs[0])
        .unwrap()
        .expect("provenance.json");
    let origins = &p.sessions[0].models;
    assert!(!origins.is_empty());
    for o in origins {
        assert_eq!(o.server.as_deref(), Some(proxy.url().as_str()), "{o:?}");
        assert!(o.served_name.is_some() && o.sha256.is_none(), "{o:?}");
        assert!(
            o.served_entry
                .as_deref()
                .is_some_and(|e| e.contains("n_params")),
            "{o:?}"
        );
    }
    assert_eq!(p.sessions[0].machine.device.as_deref(), Some("server"));

    // Every call: charged = the server's completion_tokens, recorded as such, and
    // charged round(T · k · S^α, 2).
    let recorded = calls(&runs[0]);
    assert!(
        recorded.len() >= 2,
        "decisions of 2 agents: {}",
        recorded.len()
    );
    let mut ours = Vec::new();
    for (e, c) in &recorded {
        assert!(c["backend_error"].is_null(), "no call failed: {c}");
        let size = if e["agent"] == "agent_1" { 8.0 } else { 4.0 };
        let charged = c["charged_tokens"].as_u64().unwrap();
        assert!(charged > 0);
        assert_eq!(c["generated_tokens"].as_u64(), Some(charged));
        assert_eq!(
            c["charge"].as_f64(),
            Some(cost.charge(charged, size)),
            "{c}"
        );
        assert_eq!(c["count_source"]["charged"], "usage.completion_tokens");
        assert_eq!(
            c["count_source"]["counted_by"],
            format!("server {}", proxy.url())
        );
        ours.push((charged, c["prompt_tokens"].as_u64().unwrap()));
    }
    let mut theirs = served_usage[0].clone();
    assert_eq!(
        theirs.len(),
        ours.len(),
        "one server response per recorded call"
    );
    ours.sort_unstable();
    theirs.sort_unstable();
    assert_eq!(
        ours, theirs,
        "charged and prompt counts equal the server's usage"
    );

    let mut second = served_usage[1].clone();
    second.sort_unstable();
    assert_eq!(
        second, theirs,
        "the second run's server usage is the first's"
    );

    // Fixed seed, one slot, one request at a time, fresh servers: the same records.
    assert_eq!(
        events_without_latency(&runs[0]),
        events_without_latency(&runs[1])
    );
    for f in [
        "agents.json",
        "token_usage.json",
        "transcript.json",
        "config.resolved.toml",
    ] {
        assert_eq!(
            std::fs::read(runs[0].join(f)).unwrap(),
            std::fs::read(runs[1].join(f)).unwrap(),
            "{f} differs between the two runs"
        );
    }
    // The kernels were the server's choice, and the resolved config says so.
    let resolved = std::fs::read_to_string(runs[0].join("config.resolved.toml")).unwrap();
    assert!(
        resolved.contains("\n[kernels]\nbackend = \"openai\"\n")
            && resolved.contains("matmul = \"chosen by the server\""),
        "{resolved}"
    );
}

#[test]
fn a_killed_server_leaves_invoke_errors_and_a_resumable_sweep() {
    let Some((bin, model)) = requirements() else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/v1");
    std::fs::write(tmp.path().join("served.toml"), config(&url, 2, 2)).unwrap();
    let sweep = tmp.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        "configs = [\"served.toml\"]\nseeds = [3]\nout = \"out\"\n",
    )
    .unwrap();
    let out = out_dir(&sweep, None).unwrap();
    let out = if out.is_relative() {
        tmp.path().join(out)
    } else {
        out
    };
    let cell_dir = out.join("served").join("seed_3");

    let server = Arc::new(Mutex::new(LlamaServer::start(
        &bin,
        &model,
        port,
        tmp.path(),
    )));
    // Kill the server as soon as the first invocation is on disk (at most 300 s).
    let killer = {
        let (server, events) = (server.clone(), cell_dir.join("events.jsonl"));
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(300);
            while Instant::now() < deadline {
                let text = std::fs::read_to_string(&events).unwrap_or_default();
                if text.contains("\"event\":\"invocation\"") {
                    server.lock().unwrap().kill();
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        })
    };
    let first = run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &job_source);
    assert!(
        killer.join().unwrap(),
        "the run recorded no invocation to kill the server after"
    );
    let err = format!(
        "{:#}",
        first.expect_err("a run whose server died is not complete")
    );
    assert!(
        err.contains("stopped answering") && err.contains(&url),
        "{err}"
    );

    // What was written stays; the failed calls are recorded INVOKE_ERRORs.
    assert!(!cell_dir.join("COMPLETE").exists());
    let recorded = calls(&cell_dir);
    assert!(
        recorded
            .iter()
            .any(|(e, c)| e["status"]["status"] != "invoke_error"
                && c["charged_tokens"].as_u64() > Some(0)),
        "the calls answered before the kill are kept"
    );
    let failed: Vec<&(Value, Value)> = recorded
        .iter()
        .filter(|(e, _)| e["status"]["status"] == "invoke_error")
        .collect();
    assert!(!failed.is_empty(), "INVOKE_ERRORs recorded");
    for (e, c) in failed {
        let msg = c["backend_error"].as_str().unwrap_or("");
        assert!(msg.contains(&url), "the error names the server: {msg}");
        assert_eq!(
            c["charged_tokens"], 0,
            "nothing charged for a failed call: {e}"
        );
    }
    let cells_now = cells(&sweep, Some(&out)).unwrap();
    assert!(matches!(
        cell_status(&out, &cells_now[0], 0),
        CellStatus::Failed(_)
    ));

    // The server is back: the same sweep resumes and completes the cell.
    server.lock().unwrap().kill();
    let _back = LlamaServer::start(&bin, &model, port, tmp.path());
    assert_eq!(
        run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &job_source).expect("resumed"),
        (1, 0)
    );
    assert!(cell_dir.join("COMPLETE").is_file());
    assert!(calls(&cell_dir)
        .iter()
        .all(|(e, _)| e["status"]["status"] != "invoke_error"));
    assert_eq!(
        run_cells(cells(&sweep, Some(&out)).unwrap(), 1, true, &job_source).unwrap(),
        (0, 1)
    );
}

#[test]
fn serve_check_lists_models_and_a_missing_model_stops_before_any_round() {
    let Some((bin, model)) = requirements() else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = LlamaServer::start(&bin, &model, port, tmp.path());
    let url = format!("http://127.0.0.1:{port}/v1");
    let joule = env!("CARGO_BIN_EXE_joule");
    let paper =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/energy-society/ollama-paper-comp.toml");

    let ok_cfg = tmp.path().join("ok.toml");
    std::fs::write(&ok_cfg, config(&url, 1, 2)).unwrap();
    let out = Command::new(joule)
        .args(["models", "serve-check", &url, "--config"])
        .arg(&ok_cfg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("  smollm2"), "{stdout}");
    assert!(stdout.contains("ok       smollm2"), "{stdout}");

    let out = Command::new(joule)
        .args(["models", "serve-check", &url, "--config"])
        .arg(&paper)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stdout.contains("MISSING  qwen3:8b (model key qwen3-8b)"),
        "{stdout}"
    );
    assert!(stderr.contains("`gemma4:e4b`"), "{stderr}");

    // The paper's Ollama config aimed at this server: an error naming the model,
    // before any round (no run folder).
    let text = std::fs::read_to_string(&paper)
        .unwrap()
        .replace("http://127.0.0.1:11434/v1", &url);
    let cfg = tmp.path().join("ollama-paper-comp.toml");
    std::fs::write(&cfg, text).unwrap();
    let run_dir = tmp.path().join("run");
    let out = Command::new(joule)
        .arg("run")
        .arg(&cfg)
        .arg("--out")
        .arg(&run_dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("does not serve models `gemma4:e4b` (model key `gemma4-e4b`)"),
        "{stderr}"
    );
    assert!(stderr.contains("ollama pull gemma4:e4b"), "{stderr}");
    assert!(!run_dir.exists(), "no round was played");
}
