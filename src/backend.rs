//! The boundary between scenarios and inference: what a scenario asks for
//! ([`ModelRequest`]), what it gets back ([`ModelResponse`]), and the
//! [`Backend`] trait that turns a batch of requests into responses.
//!
//! Scenarios never own a model. They build requests (chat messages, an output
//! format, sampling parameters, and a structured `observation` that scripted
//! agents read instead of the prompt) and hand them to an [`crate::agency::Agency`].
//! A backend — candle, an OpenAI-compatible server, or scripted policies —
//! answers whole batches, so calls from many agents and many simulations can be
//! decoded together.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Who speaks a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One chat message of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// What shape the answer must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputFormat {
    /// Free text.
    #[default]
    Text,
    /// A JSON object matching `schema` (a JSON Schema). Backends that support
    /// constrained decoding guarantee the match; others are parsed by the scenario.
    Json {
        name: String,
        schema: serde_json::Value,
        /// A tighter schema every answer of which the scenario accepts (each
        /// action with only its own fields, ids drawn from this round's
        /// jobs and agents). Constrained decoding may use it instead of
        /// `schema` (`[llm] schema = "strict"`), so a small model cannot
        /// produce a well-formed but invalid answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<serde_json::Value>,
    },
}

/// `x` as the f64 of its shortest decimal: 0.7, where widening the f32 gives
/// 0.699999988079071. Formats that hold only f64 (TOML) then write a value
/// as it was written, and it reads back to the same f32.
pub fn f32_as_f64_written(x: f32) -> f64 {
    if x.is_finite() {
        x.to_string().parse().unwrap_or(f64::from(x))
    } else {
        f64::from(x)
    }
}

/// Serializes an f32 as it was written ([`f32_as_f64_written`]).
pub fn f32_as_written<S: serde::Serializer>(x: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(f32_as_f64_written(*x))
}

/// Deserializes an f32 from a number a 32-bit float holds: a finite one
/// past its range (`1e40`) is refused with the value as written, instead of
/// becoming infinity.
pub fn f32_in_range<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
    let v = <f64 as serde::Deserialize>::deserialize(d)?;
    if v.is_finite() && v.abs() > f64::from(f32::MAX) {
        return Err(serde::de::Error::custom(format!(
            "expected a number a 32-bit float holds (at most about 3.4e38), got {}",
            crate::output::num(v)
        )));
    }
    Ok(v as f32)
}

/// Serializes an optional f32 as it was written ([`f32_as_f64_written`]).
pub fn opt_f32_as_written<S: serde::Serializer>(x: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(v) => s.serialize_some(&f32_as_f64_written(*v)),
        None => s.serialize_none(),
    }
}

/// Sampling and length parameters of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenParams {
    pub max_tokens: u32,
    #[serde(serialize_with = "f32_as_written")]
    pub temperature: f32,
    pub top_k: Option<usize>,
    #[serde(serialize_with = "opt_f32_as_written")]
    pub top_p: Option<f32>,
    #[serde(serialize_with = "opt_f32_as_written")]
    pub min_p: Option<f32>,
    #[serde(serialize_with = "opt_f32_as_written")]
    pub repeat_penalty: Option<f32>,
    /// Sampling seed; the same seed on the same device gives the same tokens.
    pub seed: u64,
    pub stop: Vec<String>,
    /// Ask the chat template for a thinking block where it supports one.
    pub thinking: bool,
    /// Never end at an end-of-generation token (they are never sampled): the
    /// call generates exactly `max_tokens` unless a stop string or the
    /// context ends it (a trace replay's recorded count; llama-server's
    /// `ignore_eos`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignore_eos: bool,
}

impl Default for GenParams {
    fn default() -> Self {
        Self {
            max_tokens: 8000,
            temperature: 0.7,
            top_k: None,
            top_p: None,
            min_p: None,
            repeat_penalty: None,
            seed: 0,
            stop: Vec::new(),
            thinking: true,
            ignore_eos: false,
        }
    }
}

impl GenParams {
    /// Checks the length and sampling values against their ranges: at least
    /// one token, a finite temperature >= 0, `top_k` at least 1, `top_p` in
    /// (0, 1], `min_p` in [0, 1] and a finite positive `repeat_penalty`.
    /// The error names the field (`top_p`) and what was expected, for the
    /// caller to prefix with its own name for it (a config key, a flag).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_tokens == 0 {
            return Err(("max_tokens", "expected at least 1, got 0".into()));
        }
        let t = self.temperature;
        if !(t >= 0.0 && t.is_finite()) {
            return Err(("temperature", format!("expected a number >= 0, got {t}")));
        }
        if self.top_k == Some(0) {
            return Err(("top_k", "expected at least 1, got 0".into()));
        }
        for (key, v, lo_open) in [("top_p", self.top_p, true), ("min_p", self.min_p, false)] {
            if let Some(v) = v {
                let ok = if lo_open { v > 0.0 } else { v >= 0.0 } && v <= 1.0;
                if !ok {
                    let range = if lo_open { "(0, 1]" } else { "[0, 1]" };
                    return Err((key, format!("expected a number in {range}, got {v}")));
                }
            }
        }
        if let Some(v) = self.repeat_penalty {
            if !(v > 0.0 && v.is_finite()) {
                return Err((
                    "repeat_penalty",
                    format!("expected a positive number, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

/// Prefix of model keys answered by scripted policies (`scripted:<policy>`).
pub const SCRIPTED_PREFIX: &str = "scripted:";

/// A request for one model call, as a scenario yields it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Model key: a manifest name (`qwen3-8b`) or `scripted:<policy>`.
    pub model: String,
    /// The agent this call belongs to (its KV cache and its energy account).
    pub agent_id: String,
    /// The run (session) the call belongs to: the [`crate::agency::Driver`]
    /// stamps every request of a scenario with that scenario's id, unique in
    /// the process, so backends keep per-(run, agent) state and two runs
    /// with the same agent ids never share it. 0 = not stamped.
    #[serde(default)]
    pub session: u64,
    /// What the call is for, e.g. `vote`, `decide`, `act`, `race.decide`.
    pub tag: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub format: OutputFormat,
    #[serde(default)]
    pub params: GenParams,
    /// Structured view of the same information the prompt gives, for scripted
    /// (non-LLM) agents. LLM backends ignore it.
    #[serde(default)]
    pub observation: serde_json::Value,
}

/// Exact token counts of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TokenUsage {
    /// Tokens of the rendered prompt.
    pub prompt_tokens: u32,
    /// Every token the model generated, thinking included, end-of-sequence
    /// token included only when `eos_counted`.
    pub generated_tokens: u32,
    /// Of `generated_tokens`, those inside the thinking block.
    pub thinking_tokens: u32,
    /// The count the energy charge uses (by default `generated_tokens`, as
    /// the reference charged Ollama's generated-token count).
    pub charged_tokens: u32,
    /// Whether the end-of-sequence token is part of `generated_tokens`.
    pub eos_counted: bool,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End-of-sequence token.
    Eos,
    /// A stop string or stop token.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// Scripted answer (no decoding happened).
    Scripted,
}

/// The answer to one [`ModelRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The visible answer (thinking removed).
    pub text: String,
    /// The thinking text, if the model produced any.
    #[serde(default)]
    pub thinking: String,
    pub usage: TokenUsage,
    pub finish: FinishReason,
    /// The prompt exactly as the model saw it (after the chat template), when
    /// the backend renders one.
    #[serde(default)]
    pub rendered_prompt: Option<String>,
    /// Wall-clock milliseconds of this call.
    #[serde(default)]
    pub latency_ms: f64,
    /// Who counted the tokens and which count the charge uses (recorded with the call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_source: Option<CountSource>,
    /// The joules an energy meter measured for this call (local models with a
    /// meter only; `crate::meter::attribution`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<crate::meter::attribution::MeasuredEnergy>,
}

/// Where a response's token counts come from: which count is charged, and
/// who counted it. Every recorded call carries one, so a charge can be traced
/// to its origin (this process's decoder, a scripted draw, or a server's
/// `usage` object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountSource {
    /// The count charged, named as its source names it
    /// (`generated_tokens`, `usage.completion_tokens`, ...).
    pub charged: String,
    /// Who counted: `joule` (the local decoder), `scripted`, `replay`, or
    /// `server <base_url>` for a served model.
    pub counted_by: String,
    /// Where `thinking_tokens` comes from, or why it is 0 (`not reported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
}

/// A call that failed inside the backend (the reference's INVOKE_ERROR).
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("model `{model}` failed: {message}")]
pub struct BackendError {
    pub model: String,
    pub message: String,
    /// Tokens generated before the failure, when known.
    #[serde(default)]
    pub partial_usage: Option<TokenUsage>,
}

pub type ModelResult = Result<ModelResponse, BackendError>;

/// Turns batches of requests into responses. A backend may decode a batch
/// together or one request at a time; it must return exactly one result per
/// request, in order, and must be deterministic for a fixed seed and device.
pub trait Backend {
    /// A short name for logs (`candle-cpu`, `scripted`, ...).
    fn name(&self) -> String;
    /// Answer every request of the batch, in order. All requests of a batch
    /// have the same [`Self::batch_key`].
    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult>;
    /// Requests whose models have the same key can share a batch. By default
    /// the key is the model name; a backend that runs several names on one
    /// model (a stand-in) returns the same key for them.
    fn batch_key(&self, model: &str) -> String {
        model.to_string()
    }
    /// `Some(reason)` once the backend can answer nothing more (its server
    /// stopped answering). The driver then stops every unfinished scenario at
    /// its next model call, after the failed calls have been recorded, so a
    /// run is left incomplete (and is rerun by a resumed sweep) instead of
    /// being played to the end on errors.
    fn unavailable(&self) -> Option<String> {
        None
    }
    /// The run `session` finished: it sends nothing more, so any per-run
    /// state (caches, snapshots) it holds can be dropped.
    fn end_session(&mut self, _session: u64) {}
    /// The memory `demand` needs on this backend's device, for backends that
    /// hold models themselves (`None`: nothing to plan — scripted policies, a
    /// model server). May load the models it plans for.
    fn plan_memory(
        &mut self,
        _demand: &MemoryDemand,
    ) -> anyhow::Result<Option<Box<dyn MemoryReport>>> {
        Ok(None)
    }
    /// What this backend's energy meter measured so far, or why it measures
    /// nothing; `None` for backends that run no model here (scripted agents).
    fn metering(&self) -> Option<crate::meter::attribution::MeterStatus> {
        None
    }
    /// The kernels that compute the logits of `models` (model keys; scripted
    /// ones are skipped) on this backend, for a run's resolved config: `None`
    /// for backends that run no model (scripted policies). Reports the models
    /// loaded so far (a memory plan loads them before round 1).
    fn kernels(&self, _models: &[&str]) -> Option<KernelRecord> {
        None
    }
    /// Where the answers to `models` (model keys; scripted ones are skipped)
    /// come from, for a run's provenance (`crate::provenance`): a local
    /// model's file with its sha256, or a server and the name it serves. The
    /// models loaded so far (a memory plan loads them before round 1);
    /// nothing for backends that run no model.
    fn model_origins(&self, _models: &[&str]) -> Vec<ModelOrigin> {
        Vec::new()
    }
    /// Continuous batching, for backends that have it: requests join the
    /// running batch at any step and come back as each finishes. `None`
    /// (the default): the driver sends whole batches to [`Self::generate`].
    fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
        None
    }
}

/// One answer of a [`StepBackend`]: the ticket it was submitted under, the
/// request handed back, and its result.
#[derive(Debug)]
pub struct Answer {
    pub ticket: u64,
    pub request: ModelRequest,
    pub result: ModelResult,
}

/// A backend that takes new requests while others are decoding
/// ([`Backend::stepwise`]). Determinism: a request's result must depend on
/// the request alone (on a fixed device), never on which other requests
/// were running, when it was submitted, or how many steps it waited.
pub trait StepBackend {
    /// Queue a request; it joins the running work at the next step.
    /// Requests submitted between two steps join in submission order.
    fn submit(&mut self, ticket: u64, request: ModelRequest);
    /// Advance the running work by one step and hand back every request
    /// that finished in it (and any answered without a step: scripted
    /// agents, failures), in a fixed order.
    fn step(&mut self) -> Vec<Answer>;
    /// Requests submitted and not yet handed back.
    fn in_flight(&self) -> usize;
    /// Tokens sampled so far by the requests not yet handed back, for
    /// progress only (0 when the backend does not say).
    fn sampling(&mut self) -> u64 {
        0
    }
}

/// A backend's memory plan as the boundary sees it (the local engine's is
/// `inference::engine::memory_plan::MemoryPlan`): a table for people and a verdict.
pub trait MemoryReport: std::fmt::Debug {
    /// `cpu`, `cuda`, `metal`.
    fn device(&self) -> &str;
    /// The plan as a table.
    fn render(&self) -> String;
    /// `Ok(None)`: it fits; `Ok(Some(warning))`: it may not fit where the OS
    /// can page (the CPU); `Err`: it does not fit on a GPU (the error says how
    /// many runs would).
    fn check(&self) -> anyhow::Result<Option<String>>;
}

/// The most seconds a `--time-limit` can give (a year): far past any
/// measurement, and an instant the clock can hold.
pub const MAX_TIME_LIMIT_S: f64 = 365.0 * 24.0 * 3600.0;

/// The instant a benchmark's `--time-limit` of `seconds` (counted from now)
/// ends, or an error naming the flag for a value that is not a number of
/// seconds in (0, [`MAX_TIME_LIMIT_S`]].
pub fn time_limit_deadline(seconds: Option<f64>) -> anyhow::Result<Option<std::time::Instant>> {
    match seconds {
        None => Ok(None),
        Some(s) if s > 0.0 && s <= MAX_TIME_LIMIT_S => Ok(Some(
            std::time::Instant::now() + std::time::Duration::from_secs_f64(s),
        )),
        Some(s) => anyhow::bail!(
            "--time-limit {s}: expected a number of seconds above 0 and at most {MAX_TIME_LIMIT_S} \
             (a year)"
        ),
    }
}

/// Why a benchmark's backend is unavailable once its `--time-limit` passed:
/// `Some` from `deadline` on (`Backend::unavailable`, which stops the driver).
pub fn time_limit_passed(deadline: Option<std::time::Instant>) -> Option<String> {
    deadline
        .filter(|d| std::time::Instant::now() >= *d)
        .map(|_| "the time limit (--time-limit) passed".to_string())
}

/// Plan the memory `demand` needs on `backend`'s device before anything
/// runs: on a GPU a plan that does not fit is an error naming how many runs
/// fit; on the CPU it is a warning. A model that cannot be loaded or
/// measured is not a memory question: its calls report the load error as
/// they always have, so the plan is skipped with a note.
pub fn check_memory(backend: &mut dyn Backend, demand: &MemoryDemand) -> anyhow::Result<()> {
    let plan = match backend.plan_memory(demand) {
        Ok(Some(plan)) => plan,
        Ok(None) => return Ok(()),
        Err(e) => {
            crate::errln!("note: no memory plan ({e:#})");
            return Ok(());
        }
    };
    if plan.device() != "cpu" {
        crate::err!("{}", plan.render());
    }
    if let Some(warning) = plan.check()? {
        crate::errln!("warning: {warning}");
    }
    Ok(())
}

/// The sequences a set of concurrent runs keeps alive: per model name, the
/// model-backed agents of every run together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryDemand {
    pub runs: usize,
    pub sequences: std::collections::BTreeMap<String, usize>,
}

impl MemoryDemand {
    /// Add one run whose model-backed agents use `models` (scripted ones are skipped).
    pub fn add_run<'a>(&mut self, models: impl IntoIterator<Item = &'a str>) {
        self.runs += 1;
        for m in models {
            if !m.starts_with(SCRIPTED_PREFIX) {
                *self.sequences.entry(m.to_string()).or_default() += 1;
            }
        }
    }
}

/// Where one model key's answers come from (`Backend::model_origins`): a
/// local GGUF file, identified by its sha256, or a model on a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ModelOrigin {
    /// The model key as the roster (or its stand-in) names it.
    pub model: String,
    /// The GGUF file the answers came from (local models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Its size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The file's sha256 (lowercase hex), or why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `general.architecture` of the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// `general.name` of the file, as its maker wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The GGUF types of its tensors with their counts (`F32 65, Q4_K 197, Q6_K 28`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_types: Option<String>,
    /// The server's base URL (served models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The model name sent to the server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_name: Option<String>,
    /// The server's own entry for that name in its model list, as JSON (llama-server: the
    /// parameter count and file size; vLLM: the weights it loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_entry: Option<String>,
    /// Ollama's digest of the tag (what it names, whichever quantization it is), with its
    /// details (format, family, parameter size, quantization level) as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_details: Option<String>,
}

/// What computes a run's logits (`Backend::kernels`; built by
/// `inference::engine::kernel_record` for local models, by the served backend for a server). Every field has a default, so a record
/// written by another version of Joule still reads back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct KernelRecord {
    /// `candle` (local models) or `openai` (a model server).
    pub backend: String,
    /// `cpu`, `cuda` or `metal` (local models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The SIMD level of Joule's CPU matmul kernels (`portable`, `avx2`,
    /// `avxvnni`, `avx512vnni`), or the error a bad `JOULE_SIMD` gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simd: Option<String>,
    /// `detected` (the fastest this CPU runs) or `JOULE_SIMD`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simd_from: Option<String>,
    /// The SIMD levels this CPU can run, slowest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub simd_available: Vec<String>,
    /// Whose kernels multiply the weight matrices.
    pub matmul: String,
    /// When a default type goes to candle after all (its repacked kernels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candle_repacks: Option<String>,
    /// Whose attention runs.
    pub attention: String,
    /// How sequence caches store keys and values (`[llm] kv_cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<String>,
    /// Worker threads that computed (`--threads`, `[llm] threads`, `crate::threads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Other kernels of Joule's that apply on this device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other: Option<String>,
    /// Per GGUF type Joule's CPU kernels have: `joule`, `candle`, or `joule
    /// unless candle repacks` (see `candle_repacks`); every other type: candle.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub types: BTreeMap<String, String>,
    /// Per GGUF type Joule's CPU kernels have, how this CPU holds and multiplies a matrix
    /// of it when Joule's kernel takes it (`rows in lanes (AVX-512 VNNI)` or `row major`,
    /// `quant_matmul::cpu_form`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub forms: BTreeMap<String, String>,
    /// Per model loaded for the run, per GGUF type of its weight matrices:
    /// whose kernel multiplies how many of them (`joule (210 matrices)`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, BTreeMap<String, String>>,
    /// Every `JOULE_*` variable that was set, with its value.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}
