//! [`LlmBackend`]: the [`Backend`] that answers scenario requests with local
//! GGUF models on candle. For each request it renders the chat template,
//! tokenises, decodes (optionally constrained to the request's JSON schema),
//! splits thinking from the answer and returns exact token counts.
//!
//! Models are loaded once per model key and shared; every agent of every run
//! keeps its own sequence state (keyed by model, run and agent id:
//! keys/values, recurrent states and their snapshots), so the longest common
//! prefix of an agent's consecutive prompts that the state can return to is
//! not recomputed; a run's states are dropped when the run ends
//! ([`Backend::end_session`]). Beside them, each model has a
//! [`PrefixCache`] of computed prompt blocks shared by every call, agent and
//! run: a prompt resumes from whichever is longer, its agent's own state or
//! the cache. A batch ([`Backend::generate`]) is decoded together to its
//! end in a [`DecodeBatch`]; with continuous batching ([`Backend::stepwise`],
//! `[llm] batching = "continuous"`, the default) each model keeps one running
//! `DecodeBatch` that calls join as they are submitted and leave as they
//! finish; a call whose prompt shares at least [`MIN_WAIT_TOKENS`] more
//! with a running call's than the cache holds waits until that call has
//! computed the shared blocks (they go into the cache then) and starts from
//! them, so runs started together compute their common prefix once.
//! [`LlmBackend::stats`] counts tokens computed and reused and the time of
//! prefill, decode and everything else. With an energy meter (`[llm] meter`),
//! every forward step is metered and each response carries its measured
//! joules (`crate::meter::attribution`).

use crate::backend::KernelRecord;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use candle_core::Device;

use crate::backend::{
    Answer, Backend, BackendError, MemoryDemand, MemoryReport, ModelOrigin, ModelRequest,
    ModelResponse, ModelResult, OutputFormat, StepBackend,
};
use crate::inference::engine::generate::{
    BatchSeq, DecodeBatch, Finished, GenOptions, ThinkingDelims, TokenMask,
};
use crate::inference::engine::memory_plan::{
    device_memory, DeviceMemory, MemoryPlan, ModelNeed, StateFootprint, WeightEstimate,
};
use crate::inference::engine::model::{SeqState, SharedModel};
use crate::inference::engine::prefix_cache::{PrefixCache, PrefixStats};
use crate::inference::engine::state::KvCache;
use crate::inference::files::gguf_weights::GgufFile;
use crate::inference::models::load_model_from;
use crate::inference::text::chat_template::{ChatTemplate, ThinkingSupport};
use crate::inference::text::constrain::{JsonConstraint, JsonStyle, ThinkThenJson, TokenVocab};
use crate::inference::text::thinking::{split_thinking, ThinkingMarkers};
use crate::inference::text::tokenizer::Tokenizer;
use crate::meter::attribution::{MeasuredEnergy, MeterStatus, Metering, StepObserver, StepWork};
use crate::meter::MeterChoice;

/// How structured (JSON) requests are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StructuredMode {
    /// Constrained decoding: the answer always matches the schema.
    #[default]
    Constrained,
    /// Free text; the scenario parses it and retries (the reference's way).
    Free,
}

/// Options of the LLM backend.
#[derive(Debug, Clone)]
pub struct LlmOptions {
    pub structured: StructuredMode,
    /// Count the end-of-generation token as generated (Ollama's eval_count does).
    pub count_eos: bool,
    /// Most thinking tokens before the close marker is forced (constrained mode).
    pub max_thinking_tokens: Option<usize>,
    /// Overrides model keys with a file path (e.g. every roster model → SmolLM2).
    pub stand_in: Option<PathBuf>,
    /// Per-model overrides (model key → file), taking precedence over `stand_in`.
    pub stand_ins: std::collections::BTreeMap<String, PathBuf>,
    /// Longest string (in characters) constrained decoding allows where the
    /// schema sets no `maxLength`, so an answer completes within `max_tokens`.
    pub max_string_chars: Option<usize>,
    /// Which of a request's schemas constrained decoding enforces.
    pub schema: SchemaChoice,
    /// Tokens a sequence's state is planned for (`memory_plan`).
    pub plan_context: usize,
    /// Bytes each model's prefix cache may hold (0: no prefix cache).
    pub prefix_cache_bytes: usize,
    /// Bytes the agents' own sequence states may hold together; beyond it
    /// the least recently used go (their prefixes stay in the prefix cache).
    pub agent_state_bytes: usize,
    /// Continuous batching ([`Backend::stepwise`]): calls join the running
    /// batch at any step. Off: each batch is decoded to its end.
    pub continuous: bool,
    /// Continuous batching: prompt tokens one step feeds at most (whole
    /// prompt pieces; the oldest waiting piece always goes; 0 = no limit).
    pub prefill_step_tokens: usize,
    /// How every sequence state stores keys and values.
    pub kv_cache: KvCache,
}

/// Splits each forward step's time between prefill and decode (by the
/// tokens it fed) and passes the step on to the batch's energy meter.
struct StepTiming<'a> {
    meter: Option<&'a mut dyn StepObserver>,
    prefill_ms: f64,
    decode_ms: f64,
}

impl StepObserver for StepTiming<'_> {
    fn before_step(&mut self) {
        if let Some(m) = self.meter.as_mut() {
            m.before_step();
        }
    }

    fn after_step(&mut self, work: &[StepWork], ms: f64) {
        let (p, d) = work.iter().fold((0, 0), |(p, d), w| {
            if w.prefill {
                (p + w.tokens, d)
            } else {
                (p, d + w.tokens)
            }
        });
        let share = p as f64 / (p + d).max(1) as f64;
        self.prefill_ms += ms * share;
        self.decode_ms += ms * (1.0 - share);
        if let Some(m) = self.meter.as_mut() {
            m.after_step(work, ms);
        }
    }
}

/// Tokens per block of the prefix cache.
pub const PREFIX_BLOCK: usize = 64;

/// A call waits for a running call's prefill only when that saves at least
/// this many prompt tokens over what the prefix cache already holds.
pub const MIN_WAIT_TOKENS: usize = 2 * PREFIX_BLOCK;

/// Prompt tokens a continuous batch's step feeds at most unless `[llm]
/// prefill_step_tokens` says otherwise (eight 64-token blocks).
pub const DEFAULT_PREFILL_STEP_TOKENS: usize = 512;

/// What the backend computed so far (tokens and milliseconds, summed over calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct EngineStats {
    pub calls: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens reused from the agent's own state.
    pub reused_own_tokens: u64,
    /// Prompt tokens restored from the model's prefix cache.
    pub reused_prefix_tokens: u64,
    /// Calls that waited for a running call of the same model to compute
    /// the prefix they share before starting from its blocks (continuous
    /// batching with the prefix cache).
    pub waited_for_prefix: u64,
    pub generated_tokens: u64,
    /// Forward passes over prompt tokens (a step of both is split by tokens).
    pub prefill_ms: f64,
    /// Forward passes over sampled tokens.
    pub decode_ms: f64,
    /// Everything in the backend besides forward passes: templates,
    /// tokenising, constraint masks, sampling, cache copies.
    pub engine_ms: f64,
    pub prefix: PrefixStats,
}

impl EngineStats {
    /// Prompt tokens that went through the model.
    pub fn computed_prompt_tokens(&self) -> u64 {
        self.prompt_tokens - self.reused_own_tokens - self.reused_prefix_tokens
    }

    /// What was computed since `earlier` (a snapshot of the same backend);
    /// the prefix cache's state is this one's.
    pub fn since(&self, earlier: &EngineStats) -> EngineStats {
        EngineStats {
            calls: self.calls - earlier.calls,
            prompt_tokens: self.prompt_tokens - earlier.prompt_tokens,
            reused_own_tokens: self.reused_own_tokens - earlier.reused_own_tokens,
            reused_prefix_tokens: self.reused_prefix_tokens - earlier.reused_prefix_tokens,
            waited_for_prefix: self.waited_for_prefix - earlier.waited_for_prefix,
            generated_tokens: self.generated_tokens - earlier.generated_tokens,
            prefill_ms: self.prefill_ms - earlier.prefill_ms,
            decode_ms: self.decode_ms - earlier.decode_ms,
            engine_ms: self.engine_ms - earlier.engine_ms,
            prefix: self.prefix,
        }
    }
}

impl Default for LlmOptions {
    fn default() -> Self {
        Self {
            structured: StructuredMode::Constrained,
            count_eos: true,
            max_thinking_tokens: None,
            stand_in: None,
            stand_ins: Default::default(),
            max_string_chars: Some(240),
            schema: SchemaChoice::Strict,
            plan_context: DEFAULT_PLAN_CONTEXT,
            prefix_cache_bytes: 2048 << 20,
            agent_state_bytes: 2048 << 20,
            continuous: true,
            prefill_step_tokens: DEFAULT_PREFILL_STEP_TOKENS,
            kv_cache: KvCache::F32,
        }
    }
}

/// Tokens per sequence a memory plan reserves unless `[llm] plan_context`
/// says otherwise (the Energy Society's prompts and answers stay under 2,000).
pub const DEFAULT_PLAN_CONTEXT: usize = 4096;

/// Which schema of a JSON request constrained decoding enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SchemaChoice {
    /// The request's strict schema when it has one (only valid actions, ids
    /// of this round's jobs and agents), else its schema.
    #[default]
    Strict,
    /// The schema the reference gave its models (well-formed answers may
    /// still fail the scenario's checks and be retried).
    Reference,
}

struct Loaded {
    model: SharedModel,
    tokenizer: Arc<Tokenizer>,
    template: ChatTemplate,
    thinking: Option<(ThinkingSupport, ThinkingMarkers)>,
    vocab: Arc<TokenVocab>,
    mask_len: usize,
    options: GenOptions,
    /// The weights as the load holds them (for memory plans).
    weights: WeightEstimate,
    /// One sequence's state, measured on first use by a memory plan.
    footprint: Option<StateFootprint>,
    /// The weight matrices behind matrix products and whose kernels multiply them.
    matmuls: Vec<crate::inference::files::gguf_weights::MatmulUse>,
    /// The file the model came from, for a run's provenance (its sha256 is
    /// filled in when asked, `Backend::model_origins`), and its path.
    origin: ModelOrigin,
    path: PathBuf,
}

/// The decoding constraint of one structured request.
enum Constraint {
    Json(JsonConstraint),
    ThinkFirst(ThinkThenJson),
}

impl Constraint {
    fn advance(&mut self, token: u32) -> anyhow::Result<()> {
        match self {
            Constraint::Json(c) => c.advance(token),
            Constraint::ThinkFirst(c) => c.advance(token),
        }
    }

    fn allowed(&mut self) -> anyhow::Result<crate::inference::text::constrain::TokenMask> {
        match self {
            Constraint::Json(c) => c.allowed_tokens(),
            Constraint::ThinkFirst(c) => c.allowed_tokens(),
        }
    }
}

/// What a running call needs besides its sequence to become a response.
struct CallInfo {
    model: String,
    thinking: bool,
    rendered: String,
    /// Prompt tokens restored from the prefix cache.
    restored: usize,
    /// The agent state it took (given back when it finishes).
    cache_key: Option<(String, u64, String)>,
    started: Instant,
}

/// A call in the continuous batch.
struct Flight {
    key: String,
    request: ModelRequest,
    info: CallInfo,
    /// Measured energy so far, `None` once a step of it went unmeasured.
    measured: Option<MeasuredEnergy>,
}

/// A call of the continuous batch waiting for a running call (its
/// `leader`) to compute the first `target` tokens of its prompt.
struct Waiting {
    ticket: u64,
    leader: u64,
    target: usize,
    seq: BatchSeq<'static>,
    flight: Flight,
}

/// Continuous batching state: one running batch per model key.
#[derive(Default)]
struct Running {
    batches: std::collections::BTreeMap<String, DecodeBatch<'static>>,
    /// Calls in a running batch.
    flights: HashMap<u64, Flight>,
    /// Calls waiting for a running call's prefill, in submission order.
    waiting: Vec<Waiting>,
    /// Answers ready without a step (failed before decoding).
    ready: Vec<Answer>,
    /// The previous step left sequences running (the time until the next
    /// step is the engine's, not idle).
    busy: bool,
}

/// Maps [`StepWork::seq`] from a sequence's id to its position in the
/// step's meter.
struct Remap<'a> {
    inner: &'a mut dyn StepObserver,
    ids: &'a [u64],
}

impl StepObserver for Remap<'_> {
    fn before_step(&mut self) {
        self.inner.before_step();
    }
    fn after_step(&mut self, work: &[StepWork], ms: f64) {
        let work: Vec<StepWork> = work
            .iter()
            .map(|w| StepWork {
                seq: self
                    .ids
                    .iter()
                    .position(|&id| id as usize == w.seq)
                    .unwrap_or(usize::MAX),
                ..*w
            })
            .collect();
        self.inner.after_step(&work, ms);
    }
}

/// The prefix cache of model `key` in `prefixes` (made empty, with `budget`
/// bytes, on first use).
fn prefix_cache<'a>(
    prefixes: &'a mut HashMap<String, PrefixCache>,
    key: &str,
    budget: usize,
) -> &'a mut PrefixCache {
    prefixes
        .entry(key.to_string())
        .or_insert_with(|| PrefixCache::new(PREFIX_BLOCK, budget))
}

fn backend_error(r: &ModelRequest, e: &anyhow::Error) -> BackendError {
    BackendError {
        model: r.model.clone(),
        message: format!("{e:#}"),
        partial_usage: None,
    }
}

/// Add one step's measured energy of a call to what it had.
fn add_measured(
    acc: Option<MeasuredEnergy>,
    step: Option<MeasuredEnergy>,
) -> Option<MeasuredEnergy> {
    let (mut a, s) = (acc?, step?);
    a.prefill_j += s.prefill_j;
    a.decode_j += s.decode_j;
    a.prefill_tokens += s.prefill_tokens;
    a.decode_tokens += s.decode_tokens;
    Some(a)
}

/// Local models on candle behind the [`Backend`] interface.
pub struct LlmBackend {
    device: Device,
    options: LlmOptions,
    loaded: HashMap<String, Loaded>,
    /// The energy meter and what it measured (`crate::meter`), or why there is none.
    metering: Option<Metering>,
    unmetered: String,
    /// Sequence states per (model key, run, agent), with when each was last used.
    caches: HashMap<(String, u64, String), (SeqState, u64)>,
    /// Prefix caches per model key.
    prefixes: HashMap<String, PrefixCache>,
    /// Agent states in use by a running call (a second call of the same
    /// agent meanwhile gets a fresh state).
    taken: std::collections::HashSet<(String, u64, String)>,
    /// Continuous batching: the running batch of each model and its calls.
    running: Running,
    clock: u64,
    stats: EngineStats,
}

impl LlmBackend {
    pub fn new(device: Device, options: LlmOptions) -> Self {
        Self {
            device,
            options,
            loaded: HashMap::new(),
            caches: HashMap::new(),
            prefixes: HashMap::new(),
            taken: Default::default(),
            running: Running::default(),
            clock: 0,
            stats: EngineStats::default(),
            metering: None,
            unmetered: "no energy meter was opened".into(),
        }
    }

    /// Meter every batch with the meter `choice` names (an explicitly named
    /// meter that is missing is an error; `auto` without one measures nothing).
    pub fn with_meter(mut self, choice: &MeterChoice) -> Result<Self, String> {
        let (meter, why) = crate::meter::open(choice)?;
        self.metering = meter.map(Metering::new);
        self.unmetered = why;
        Ok(self)
    }

    fn batch(&mut self, batch: &[ModelRequest]) -> anyhow::Result<Vec<ModelResult>> {
        let mut metering = self.metering.take();
        let out = self.batch_metered(batch, metering.as_mut());
        self.metering = metering;
        out
    }

    /// Tokens and time so far, every model together.
    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats;
        for p in self.prefixes.values() {
            let q = p.stats();
            s.prefix.lookups += q.lookups;
            s.prefix.reused_tokens += q.reused_tokens;
            s.prefix.blocks_inserted += q.blocks_inserted;
            s.prefix.blocks_evicted += q.blocks_evicted;
            s.prefix.blocks += q.blocks;
            s.prefix.bytes += q.bytes;
        }
        s
    }

    /// Sequence states held for agents (for tests: per-run states go when the run ends).
    pub fn agent_states(&self) -> usize {
        self.caches.len()
    }

    fn load(&mut self, key: &str) -> anyhow::Result<()> {
        if self.loaded.contains_key(key) {
            return Ok(());
        }
        let stage = crate::progress::Stage::start(format!("loading model {key}"));
        let path = match key.strip_prefix("stand-in:") {
            Some(p) => PathBuf::from(p),
            None => crate::inference::files::sources::resolve_model(key)
                .with_context(|| format!("locating model `{key}`"))?,
        };
        // One parse of the header for the weights, the tokenizer and the template.
        let mut gguf = GgufFile::open(&path)?;
        let model = load_model_from(&mut gguf, &self.device)?;
        let weights = WeightEstimate::loaded(&gguf);
        let origin = ModelOrigin {
            model: key.to_string(),
            file: Some(path.display().to_string()),
            bytes: Some(gguf.file_len()),
            architecture: gguf.architecture().ok(),
            name: gguf.string("general.name").ok(),
            tensor_types: Some(gguf.tensor_types()),
            ..ModelOrigin::default()
        };
        let tokenizer = Tokenizer::for_gguf(&gguf)?;
        let template =
            ChatTemplate::from_gguf_content(gguf.content(), &tokenizer)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: the GGUF file has no tokenizer.chat_template",
                    path.display()
                )
            })?;
        let thinking = match template.thinking() {
            Some(s) => ThinkingMarkers::resolve(&s, &tokenizer)
                .ok()
                .map(|m| (s, m)),
            None => None,
        };
        let n = tokenizer.vocab_size();
        let token_bytes: Vec<Vec<u8>> = (0..n as u32)
            .map(|i| tokenizer.token_bytes(i).to_vec())
            .collect();
        let eos_ids = tokenizer.eos_ids();
        let special: Vec<u32> = (0..n as u32)
            .filter(|&i| tokenizer.is_special(i) && !eos_ids.contains(&i))
            .collect();
        let vocab = Arc::new(TokenVocab::new(token_bytes, eos_ids.clone(), special)?);
        let mask_len = n.max(model.info().vocab_size);
        let options = GenOptions {
            eos_ids: tokenizer.eos_id().into_iter().collect(),
            stop_ids: eos_ids
                .into_iter()
                .filter(|&e| Some(e) != tokenizer.eos_id())
                .collect(),
            count_eos: self.options.count_eos,
            thinking: thinking.as_ref().map(|(s, m)| ThinkingDelims {
                start: m.open,
                end: m.close,
                starts_inside: s.prompt_opens_block,
            }),
            block: if self.options.prefix_cache_bytes > 0 {
                PREFIX_BLOCK
            } else {
                0
            },
        };
        self.loaded.insert(
            key.to_string(),
            Loaded {
                model,
                tokenizer: Arc::new(tokenizer),
                template,
                thinking,
                vocab,
                mask_len,
                options,
                weights,
                footprint: None,
                matmuls: gguf.matmuls().to_vec(),
                origin,
                path,
            },
        );
        stage.done();
        Ok(())
    }

    /// The kernels of `models` (model names; scripted ones skipped): this
    /// device's paths and, per model loaded so far, whose kernels multiply
    /// its weight matrices (`engine::kernel_record`).
    pub fn kernel_record(&self, models: &[&str]) -> KernelRecord {
        let mut loaded: Vec<(String, &[crate::inference::files::gguf_weights::MatmulUse])> =
            Vec::new();
        for m in models {
            if m.starts_with(crate::backend::SCRIPTED_PREFIX) {
                continue;
            }
            let key = self.model_key(m);
            let name = key.strip_prefix("stand-in:").unwrap_or(&key).to_string();
            if let Some(l) = self.loaded.get(&key) {
                if !loaded.iter().any(|(n, _)| *n == name) {
                    loaded.push((name, &l.matmuls));
                }
            }
        }
        KernelRecord::local(&self.device, self.options.kv_cache, &loaded)
    }

    /// The memory plan of `demand` on this backend's device: loads each
    /// model (requests' models share the loads), measures one sequence's state,
    /// and reads the device's free memory.
    pub fn memory_plan(&mut self, demand: &MemoryDemand) -> anyhow::Result<MemoryPlan> {
        let mut per_key: std::collections::BTreeMap<String, usize> = Default::default();
        for (model, n) in &demand.sequences {
            *per_key.entry(self.model_key(model)).or_default() += n;
        }
        let mut models = Vec::new();
        for (key, sequences) in per_key {
            self.load(&key)?;
            let loaded = self
                .loaded
                .get_mut(&key)
                .ok_or_else(|| anyhow::anyhow!("model `{key}` not loaded"))?;
            let state = match loaded.footprint {
                Some(f) => f,
                None => {
                    let f = StateFootprint::probe(loaded.model.as_ref(), self.options.kv_cache)
                        .with_context(|| format!("measuring a sequence state of `{key}`"))?;
                    loaded.footprint = Some(f);
                    f
                }
            };
            let info = loaded.model.info();
            let shapes: Vec<(usize, usize)> = loaded.matmuls.iter().map(|m| (m.n, m.k)).collect();
            models.push(ModelNeed {
                model: key.strip_prefix("stand-in:").unwrap_or(&key).to_string(),
                weights: loaded.weights,
                state,
                sequences,
                prefix_cache: self.options.prefix_cache_bytes as u64,
                scratch: crate::inference::engine::memory_plan::step_scratch(
                    &shapes,
                    info.n_embd,
                    info.vocab_size,
                    crate::inference::engine::memory_plan::step_rows(
                        self.options.prefill_step_tokens,
                        sequences,
                        if self.options.prefix_cache_bytes > 0 {
                            PREFIX_BLOCK
                        } else {
                            0
                        },
                        self.options.plan_context,
                    ),
                    sequences,
                ),
            });
        }
        // The models were loaded above (or before): their weights are already held, so
        // the free memory read now lacks them while the plan counts them.
        let held = models.iter().map(|m| m.weights.resident_bytes).sum();
        Ok(MemoryPlan {
            device: crate::inference::engine::device::device_name(&self.device).to_string(),
            runs: demand.runs,
            context: self.options.plan_context,
            models,
            memory: device_memory(&self.device)?.map(|m| DeviceMemory { held, ..m }),
        })
    }

    /// The key a request's model is loaded and batched under: its own
    /// stand-in file, else the stand-in that replaces every model, else the
    /// model name.
    fn model_key(&self, model: &str) -> String {
        match self
            .options
            .stand_ins
            .get(model)
            .or(self.options.stand_in.as_ref())
        {
            Some(p) => format!("stand-in:{}", p.display()),
            None => model.to_string(),
        }
    }

    /// Render, tokenise and constrain one request and give it a sequence
    /// state: with the prefix cache a fresh one that [`Self::resume`]
    /// fills from the cache (block-aligned, so results never depend on
    /// what the cache held); without it the agent's own state of this run,
    /// or a fresh one while that is in use by another call.
    fn prepare(
        &mut self,
        key: &str,
        r: &ModelRequest,
    ) -> anyhow::Result<(BatchSeq<'static>, CallInfo)> {
        let started = Instant::now();
        let lm = self
            .loaded
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("model `{key}` not loaded"))?;
        let thinking = lm.thinking.as_ref().map(|_| r.params.thinking);
        let rendered = lm.template.render(&r.messages, true, thinking)?;
        let prompt = lm.tokenizer.encode(&rendered, false, true)?;

        // The constraint of a structured request in constrained mode.
        let constraint = match (&r.format, self.options.structured) {
            (OutputFormat::Json { schema, strict, .. }, StructuredMode::Constrained) => {
                let schema = match (self.options.schema, strict) {
                    (SchemaChoice::Strict, Some(s)) => s,
                    _ => schema,
                };
                let style = JsonStyle {
                    default_max_string_len: self.options.max_string_chars,
                    ..JsonStyle::default()
                };
                let json = JsonConstraint::with_style(schema, lm.vocab.clone(), &style)?;
                Some(match &lm.thinking {
                    Some((_, m)) if r.params.thinking => Constraint::ThinkFirst(
                        ThinkThenJson::new(json, m.close, self.options.max_thinking_tokens)?
                            .with_open_think(m.open),
                    ),
                    _ => Constraint::Json(json),
                })
            }
            _ => None,
        };
        let mask_len = lm.mask_len;
        let mask: Option<Box<dyn TokenMask>> = constraint.map(|mut c| {
            let mut fed = 0usize;
            Box::new(
                move |generated: &[u32]| -> anyhow::Result<Option<Vec<bool>>> {
                    while fed < generated.len() {
                        c.advance(generated[fed])?;
                        fed += 1;
                    }
                    let mut m = c.allowed()?.to_bools();
                    m.resize(mask_len, false);
                    Ok(Some(m))
                },
            ) as Box<dyn TokenMask>
        });
        let tokenizer = lm.tokenizer.clone();
        let decode = Box::new(move |ids: &[u32]| tokenizer.decode(ids, false));
        let options = lm.options.clone();
        let mut state = lm.model.new_state().with_kv_cache(self.options.kv_cache);

        let use_prefix = self.options.prefix_cache_bytes > 0;
        let mut cache_key = None;
        if !use_prefix {
            let k = (key.to_string(), r.session, r.agent_id.clone());
            if !self.taken.contains(&k) {
                if let Some((c, _)) = self.caches.remove(&k) {
                    state = c;
                }
                self.taken.insert(k.clone());
                cache_key = Some(k);
            }
        }

        let info = CallInfo {
            model: r.model.clone(),
            thinking: r.params.thinking,
            rendered,
            restored: 0,
            cache_key,
            started,
        };
        let seq = BatchSeq {
            prompt,
            state,
            params: r.params.clone(),
            options,
            decode: Some(decode),
            mask,
        };
        Ok((seq, info))
    }

    /// Resume a prepared sequence from the model's prefix cache where the
    /// cache reaches further than the state it has (nothing without a
    /// prefix cache).
    fn resume(
        &mut self,
        key: &str,
        seq: &mut BatchSeq<'static>,
        info: &mut CallInfo,
    ) -> anyhow::Result<()> {
        let n = seq.prompt.len();
        let state = &mut seq.state;
        if self.options.prefix_cache_bytes == 0 || n < 2 || n >= state.max_len() {
            return Ok(());
        }
        let prefix = prefix_cache(&mut self.prefixes, key, self.options.prefix_cache_bytes);
        let limit = n - 1;
        let own = state.reachable(state.common_prefix(&seq.prompt).min(limit));
        if prefix.reach(&seq.prompt, limit, state.is_recurrent()) > own {
            let room = (n + seq.params.max_tokens as usize + 1).min(state.max_len());
            info.restored = prefix.restore(state, &seq.prompt, limit, room)?;
        }
        Ok(())
    }

    /// Continuous batching with the prefix cache: the running call of
    /// model `key` that shares the longest block-aligned prefix with
    /// `prompt` beyond what the cache holds, if it saves at least
    /// [`MIN_WAIT_TOKENS`]. Its blocks computed so far go into the cache at
    /// once; the call is returned, with the shared length, only when it
    /// has not yet computed all of it (the new call waits for it).
    fn share_running(
        &mut self,
        key: &str,
        prompt: &[u32],
        recurrent: bool,
    ) -> Option<(u64, usize)> {
        if self.options.prefix_cache_bytes == 0 || prompt.len() < 2 {
            return None;
        }
        let batch = self.running.batches.get(key)?;
        let limit = prompt.len() - 1;
        let cached = self
            .prefixes
            .get(key)
            .map(|p| p.reach(prompt, limit, recurrent))
            .unwrap_or(0);
        let mut best: Option<(u64, usize)> = None;
        for id in batch.running_ids() {
            let Some((theirs, _)) = batch.sequence(id) else {
                continue;
            };
            let shared = theirs
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count()
                .min(limit);
            let shared = shared - shared % PREFIX_BLOCK;
            if shared >= cached + MIN_WAIT_TOKENS && best.is_none_or(|(_, s)| shared > s) {
                best = Some((id, shared));
            }
        }
        let (leader, shared) = best?;
        let (theirs, state) = batch.sequence(leader)?;
        let computed = state.common_prefix(theirs);
        let prefix = prefix_cache(&mut self.prefixes, key, self.options.prefix_cache_bytes);
        // A failed copy only means the blocks are not shared.
        let _ = prefix.insert(state, theirs);
        (computed < shared).then_some((leader, shared))
    }

    /// Start the waiting calls whose leader has computed what they share
    /// (its blocks go into the prefix cache first) or is no longer running.
    fn start_waiting(&mut self) {
        let waiting = std::mem::take(&mut self.running.waiting);
        for w in waiting {
            let key = &w.flight.key;
            let batch = self.running.batches.get(key);
            let leader = batch.and_then(|b| b.sequence(w.leader));
            if let Some((theirs, state)) = leader {
                if state.common_prefix(theirs) < w.target {
                    self.running.waiting.push(w);
                    continue;
                }
                if let Some(prefix) = self.prefixes.get_mut(key) {
                    let _ = prefix.insert(state, theirs);
                }
            }
            self.start(w.ticket, w.seq, w.flight);
        }
    }

    /// Resume a call's sequence from the prefix cache and add it to its
    /// model's running batch (or answer it with the error).
    fn start(&mut self, ticket: u64, mut seq: BatchSeq<'static>, mut flight: Flight) {
        let key = flight.key.clone();
        let model = match self.loaded.get(&key) {
            Some(l) => Ok(l.model.clone()),
            None => Err(anyhow::anyhow!("model `{key}` not loaded")),
        };
        match model.and_then(|m| self.resume(&key, &mut seq, &mut flight.info).map(|_| m)) {
            Ok(model) => {
                self.running
                    .batches
                    .entry(key)
                    .or_insert_with(|| DecodeBatch::new(self.options.prefill_step_tokens))
                    .add(model.as_ref(), ticket, seq);
                self.running.flights.insert(ticket, flight);
            }
            Err(e) => {
                let result = Err(backend_error(&flight.request, &e));
                self.running.ready.push(Answer {
                    ticket,
                    request: flight.request,
                    result,
                });
            }
        }
    }

    /// Turn a finished sequence into its response: put its blocks in the
    /// prefix cache, give the agent its state back, count, decode.
    fn respond(
        &mut self,
        key: &str,
        info: CallInfo,
        f: Finished,
        measured: Option<MeasuredEnergy>,
    ) -> ModelResult {
        let use_prefix = self.options.prefix_cache_bytes > 0;
        if use_prefix && f.result.is_ok() {
            if let Some(prefix) = self.prefixes.get_mut(key) {
                // A failed copy only means this prompt is not cached.
                let _ = prefix.insert(&f.state, &f.prompt);
            }
        }
        self.clock += 1;
        if let Some(k) = info.cache_key {
            self.taken.remove(&k);
            self.caches.insert(k, (f.state, self.clock));
        }
        let g = match f.result {
            Ok(g) => g,
            Err(e) => {
                return Err(BackendError {
                    model: info.model,
                    message: format!("{e:#}"),
                    partial_usage: None,
                })
            }
        };
        let Some(lm) = self.loaded.get(key) else {
            return Err(BackendError {
                model: info.model,
                message: format!("model `{key}` not loaded"),
                partial_usage: None,
            });
        };
        let raw = lm.tokenizer.decode(g.text_tokens(&lm.options), false);
        let (thinking, text) = match &lm.thinking {
            Some((s, _)) if info.thinking => {
                split_thinking(&raw, &s.open, &s.close, s.prompt_opens_block)
            }
            _ => (String::new(), raw),
        };
        let mut usage = g.usage();
        usage.prompt_tokens = f.prompt.len() as u32;
        self.stats.calls += 1;
        self.stats.prompt_tokens += f.prompt.len() as u64;
        let reused = g.cached_prompt_tokens as u64;
        let from_prefix = (info.restored as u64).min(reused);
        self.stats.reused_prefix_tokens += from_prefix;
        self.stats.reused_own_tokens += reused - from_prefix;
        self.stats.generated_tokens += g.generated_tokens as u64;
        Ok(ModelResponse {
            text,
            thinking,
            usage,
            finish: g.finish,
            rendered_prompt: Some(info.rendered),
            latency_ms: info.started.elapsed().as_secs_f64() * 1000.0,
            count_source: Some(crate::backend::CountSource {
                charged: "generated_tokens".into(),
                counted_by: "joule".into(),
                thinking: None,
            }),
            measured,
        })
    }

    /// One batch, decoded together to its end (every sequence feeds its
    /// next prompt piece in every step; [`Backend::generate`]).
    fn batch_metered(
        &mut self,
        batch: &[ModelRequest],
        metering: Option<&mut Metering>,
    ) -> anyhow::Result<Vec<ModelResult>> {
        let key = self.model_key(&batch[0].model);
        self.load(&key)?;
        let model = self.loaded[&key].model.clone();
        let start = Instant::now();
        let mut out: Vec<Option<ModelResult>> = (0..batch.len()).map(|_| None).collect();
        let mut infos: Vec<Option<CallInfo>> = (0..batch.len()).map(|_| None).collect();
        let mut running = DecodeBatch::new(0);
        for (i, r) in batch.iter().enumerate() {
            let prepared = self.prepare(&key, r).and_then(|(mut seq, mut info)| {
                self.resume(&key, &mut seq, &mut info)?;
                Ok((seq, info))
            });
            match prepared {
                Ok((seq, info)) => {
                    running.add(model.as_ref(), i as u64, seq);
                    infos[i] = Some(info);
                }
                Err(e) => out[i] = Some(Err(backend_error(r, &e))),
            }
        }
        let mut meter = metering.map(|m| m.begin_batch(batch.len()));
        let mut timing = StepTiming {
            meter: meter.as_mut().map(|m| m as &mut dyn StepObserver),
            prefill_ms: 0.0,
            decode_ms: 0.0,
        };
        let mut finished = running.take_finished();
        while !running.is_empty() {
            finished.extend(running.step(model.as_ref(), &mut timing));
        }
        let (prefill_ms, decode_ms) = (timing.prefill_ms, timing.decode_ms);
        let mut measured = meter.map(|m| m.finish()).unwrap_or_default();
        finished.sort_by_key(|f| f.id);
        for f in finished {
            let i = f.id as usize;
            let Some(info) = infos.get_mut(i).and_then(Option::take) else {
                continue;
            };
            let m = measured.get_mut(i).and_then(Option::take);
            out[i] = Some(self.respond(&key, info, f, m));
        }
        self.trim_agent_states();
        self.stats.prefill_ms += prefill_ms;
        self.stats.decode_ms += decode_ms;
        self.stats.engine_ms +=
            (start.elapsed().as_secs_f64() * 1000.0 - prefill_ms - decode_ms).max(0.0);
        Ok(batch
            .iter()
            .zip(out)
            .map(|(r, o)| {
                o.unwrap_or_else(|| {
                    Err(BackendError {
                        model: r.model.clone(),
                        message: "generation returned no result".into(),
                        partial_usage: None,
                    })
                })
            })
            .collect())
    }

    /// Drop the least recently used agent states beyond the budget (ties
    /// by key, so the choice never depends on hash order).
    fn trim_agent_states(&mut self) {
        let mut total: usize = self.caches.values().map(|(s, _)| s.bytes()).sum();
        if total <= self.options.agent_state_bytes {
            return;
        }
        let mut order: Vec<(u64, (String, u64, String))> = self
            .caches
            .iter()
            .map(|(k, (_, t))| (*t, k.clone()))
            .collect();
        order.sort();
        for (_, k) in order {
            if total <= self.options.agent_state_bytes {
                break;
            }
            if let Some((s, _)) = self.caches.remove(&k) {
                total -= s.bytes();
            }
        }
    }
}

impl Backend for LlmBackend {
    fn plan_memory(
        &mut self,
        demand: &MemoryDemand,
    ) -> anyhow::Result<Option<Box<dyn MemoryReport>>> {
        if demand.sequences.is_empty() {
            return Ok(None);
        }
        Ok(Some(Box::new(self.memory_plan(demand)?)))
    }

    fn name(&self) -> String {
        format!(
            "candle-{}",
            crate::inference::engine::device::device_name(&self.device)
        )
    }

    fn batch_key(&self, model: &str) -> String {
        self.model_key(model)
    }

    fn kernels(&self, models: &[&str]) -> Option<KernelRecord> {
        Some(self.kernel_record(models))
    }

    fn model_origins(&self, models: &[&str]) -> Vec<ModelOrigin> {
        let sources = crate::inference::files::sources::Sources::from_env();
        let mut out: Vec<ModelOrigin> = Vec::new();
        for m in models {
            if m.starts_with(crate::backend::SCRIPTED_PREFIX) {
                continue;
            }
            let Some(l) = self.loaded.get(&self.model_key(m)) else {
                continue;
            };
            if out.iter().any(|o| o.model == *m) {
                continue;
            }
            let sha256 = match sources.file_sha256(&l.path) {
                Ok(sha) => Some(sha),
                Err(e) => {
                    crate::errln!(
                        "note: the run's provenance names {} without its sha256: {e:#}",
                        l.path.display()
                    );
                    None
                }
            };
            out.push(ModelOrigin {
                model: m.to_string(),
                sha256,
                ..l.origin.clone()
            });
        }
        out
    }

    fn metering(&self) -> Option<MeterStatus> {
        Some(match &self.metering {
            Some(m) => MeterStatus::Measured(m.totals.clone()),
            None => MeterStatus::NotMeasured {
                reason: self.unmetered.clone(),
            },
        })
    }

    fn end_session(&mut self, session: u64) {
        self.caches.retain(|(_, s, _), _| *s != session);
    }

    fn stepwise(&mut self) -> Option<&mut dyn StepBackend> {
        if self.options.continuous {
            Some(self)
        } else {
            None
        }
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        if batch.is_empty() {
            return Vec::new();
        }
        match self.batch(batch) {
            Ok(v) => v,
            Err(e) => batch
                .iter()
                .map(|r| {
                    Err(BackendError {
                        model: r.model.clone(),
                        message: format!("{e:#}"),
                        partial_usage: None,
                    })
                })
                .collect(),
        }
    }
}

impl StepBackend for LlmBackend {
    fn submit(&mut self, ticket: u64, request: ModelRequest) {
        let key = self.model_key(&request.model);
        let loaded = self.load(&key);
        let start = Instant::now();
        let prepared = loaded.and_then(|_| self.prepare(&key, &request));
        match prepared {
            Ok((seq, info)) => {
                let measured = self.metering.as_ref().map(|m| MeasuredEnergy {
                    meter: m.name(),
                    prefill_j: 0.0,
                    decode_j: 0.0,
                    prefill_tokens: 0,
                    decode_tokens: 0,
                });
                let flight = Flight {
                    key: key.clone(),
                    request,
                    info,
                    measured,
                };
                let recurrent = seq.state.is_recurrent();
                match self.share_running(&key, &seq.prompt, recurrent) {
                    Some((leader, target)) => {
                        self.stats.waited_for_prefix += 1;
                        self.running.waiting.push(Waiting {
                            ticket,
                            leader,
                            target,
                            seq,
                            flight,
                        });
                    }
                    None => self.start(ticket, seq, flight),
                }
            }
            Err(e) => {
                let result = Err(backend_error(&request, &e));
                self.running.ready.push(Answer {
                    ticket,
                    request,
                    result,
                });
            }
        }
        self.stats.engine_ms += start.elapsed().as_secs_f64() * 1000.0;
    }

    fn sampling(&mut self) -> u64 {
        self.running.batches.values().map(|b| b.sampled()).sum()
    }

    fn step(&mut self) -> Vec<Answer> {
        let start = Instant::now();
        let mut out = std::mem::take(&mut self.running.ready);
        let keys: Vec<String> = self.running.batches.keys().cloned().collect();
        let (mut prefill_ms, mut decode_ms) = (0.0, 0.0);
        let mut metering = self.metering.take();
        for key in keys {
            let Some(model) = self.loaded.get(&key).map(|l| l.model.clone()) else {
                continue;
            };
            let Some(batch) = self.running.batches.get_mut(&key) else {
                continue;
            };
            let ids = batch.running_ids();
            let mut meter = metering
                .as_mut()
                .map(|m| m.begin_step(ids.len(), self.running.busy));
            let mut remap;
            let mut timing = StepTiming {
                meter: match meter.as_mut() {
                    Some(m) => {
                        remap = Remap {
                            inner: m as &mut dyn StepObserver,
                            ids: &ids,
                        };
                        Some(&mut remap as &mut dyn StepObserver)
                    }
                    None => None,
                },
                prefill_ms: 0.0,
                decode_ms: 0.0,
            };
            let finished = batch.step(model.as_ref(), &mut timing);
            prefill_ms += timing.prefill_ms;
            decode_ms += timing.decode_ms;
            if let Some(m) = meter {
                for (id, e) in ids.iter().zip(m.finish()) {
                    if let Some(f) = self.running.flights.get_mut(id) {
                        f.measured = add_measured(f.measured.take(), e);
                    }
                }
            }
            if batch.is_empty() {
                self.running.batches.remove(&key);
            }
            for f in finished {
                let ticket = f.id;
                let Some(flight) = self.running.flights.remove(&ticket) else {
                    continue;
                };
                let result = self.respond(&flight.key, flight.info, f, flight.measured);
                out.push(Answer {
                    ticket,
                    request: flight.request,
                    result,
                });
            }
        }
        self.metering = metering;
        self.start_waiting();
        out.append(&mut self.running.ready);
        self.running.busy = !self.running.flights.is_empty();
        self.trim_agent_states();
        self.stats.prefill_ms += prefill_ms;
        self.stats.decode_ms += decode_ms;
        self.stats.engine_ms +=
            (start.elapsed().as_secs_f64() * 1000.0 - prefill_ms - decode_ms).max(0.0);
        out
    }

    fn in_flight(&self) -> usize {
        self.running.flights.len() + self.running.waiting.len() + self.running.ready.len()
    }
}
