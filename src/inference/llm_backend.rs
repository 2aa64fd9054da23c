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
//! the cache. A batch is decoded together with [`generate_batch_observed`];
//! [`LlmBackend::stats`] counts tokens computed and reused and the time of
//! prefill, decode and everything else. With an energy meter (`[llm] meter`),
//! every forward step is metered and each response carries its measured
//! joules (`crate::meter::attribution`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use candle_core::Device;

use crate::backend::{
    Backend, BackendError, MemoryDemand, ModelRequest, ModelResponse, ModelResult, OutputFormat,
};
use crate::inference::chat_template::{ChatTemplate, ThinkingSupport};
use crate::inference::constrain::{JsonConstraint, JsonStyle, ThinkThenJson, TokenVocab};
use crate::inference::generate::{generate_batch_observed, GenOptions, GenSeq, ThinkingDelims};
use crate::inference::gguf::GgufFile;
use crate::inference::memory_plan::{
    device_memory, MemoryPlan, ModelNeed, StateFootprint, WeightEstimate,
};
use crate::inference::model::{load_model_from, SeqState, SharedModel};
use crate::inference::prefix_cache::{PrefixCache, PrefixStats};
use crate::inference::thinking::{split_thinking, ThinkingMarkers};
use crate::inference::tokenizer::Tokenizer;
use crate::meter::attribution::{MeterStatus, Metering, StepObserver, StepWork};
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

/// What the backend computed so far (tokens and milliseconds, summed over calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct EngineStats {
    pub calls: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens reused from the agent's own state.
    pub reused_own_tokens: u64,
    /// Prompt tokens restored from the model's prefix cache.
    pub reused_prefix_tokens: u64,
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
    tokenizer: Tokenizer,
    template: ChatTemplate,
    thinking: Option<(ThinkingSupport, ThinkingMarkers)>,
    vocab: Arc<TokenVocab>,
    mask_len: usize,
    options: GenOptions,
    /// The weights as the header describes them (for memory plans).
    weights: WeightEstimate,
    /// One sequence's state, measured on first use by a memory plan.
    footprint: Option<StateFootprint>,
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

    fn allowed(&mut self) -> anyhow::Result<crate::inference::constrain::TokenMask> {
        match self {
            Constraint::Json(c) => c.allowed_tokens(),
            Constraint::ThinkFirst(c) => c.allowed_tokens(),
        }
    }
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
        let path = match key.strip_prefix("stand-in:") {
            Some(p) => PathBuf::from(p),
            None => crate::inference::sources::resolve_model(key)
                .with_context(|| format!("locating model `{key}`"))?,
        };
        // One parse of the header for the weights, the tokenizer and the template.
        let mut gguf = GgufFile::open(&path)?;
        let weights = WeightEstimate::from_content(gguf.content());
        let model = load_model_from(&mut gguf, &self.device)?;
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
                tokenizer,
                template,
                thinking,
                vocab,
                mask_len,
                options,
                weights,
                footprint: None,
            },
        );
        Ok(())
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
                    let f = StateFootprint::probe(loaded.model.as_ref())
                        .with_context(|| format!("measuring a sequence state of `{key}`"))?;
                    loaded.footprint = Some(f);
                    f
                }
            };
            models.push(ModelNeed {
                model: key.strip_prefix("stand-in:").unwrap_or(&key).to_string(),
                weights: loaded.weights,
                state,
                sequences,
                prefix_cache: self.options.prefix_cache_bytes as u64,
            });
        }
        Ok(MemoryPlan {
            device: crate::inference::device::device_name(&self.device).to_string(),
            runs: demand.runs,
            context: self.options.plan_context,
            models,
            memory: device_memory(&self.device)?,
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

    fn batch_metered(
        &mut self,
        batch: &[ModelRequest],
        metering: Option<&mut Metering>,
    ) -> anyhow::Result<Vec<ModelResult>> {
        let mut meter = metering.map(|m| m.begin_batch(batch.len()));
        let key = self.model_key(&batch[0].model);
        self.load(&key)?;
        let lm = &self.loaded[&key];
        let start = Instant::now();

        // Render and tokenise every request.
        let mut prompts = Vec::with_capacity(batch.len());
        let mut rendered = Vec::with_capacity(batch.len());
        for r in batch {
            let thinking = lm.thinking.as_ref().map(|_| r.params.thinking);
            let text = lm.template.render(&r.messages, true, thinking)?;
            prompts.push(lm.tokenizer.encode(&text, false, true)?);
            rendered.push(text);
        }

        // Constraints (structured requests in constrained mode).
        let mut constraints: Vec<Option<Constraint>> = Vec::with_capacity(batch.len());
        for r in batch {
            let c = match (&r.format, self.options.structured) {
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
            constraints.push(c);
        }

        // With the prefix cache, every call starts from a fresh state that
        // the cache fills (block-aligned, so results never depend on what
        // the cache held). Without it, each agent of each run keeps its own
        // state; a second request of the same agent in one batch gets a fresh one.
        let use_prefix = self.options.prefix_cache_bytes > 0;
        let mut caches: Vec<SeqState> = Vec::with_capacity(batch.len());
        let mut keys: Vec<Option<(String, u64, String)>> = Vec::with_capacity(batch.len());
        for r in batch {
            if use_prefix {
                caches.push(lm.model.new_state());
                keys.push(None);
                continue;
            }
            let k = (key.clone(), r.session, r.agent_id.clone());
            match self.caches.remove(&k) {
                Some((c, _)) => {
                    caches.push(c);
                    keys.push(Some(k));
                }
                None if keys.iter().any(|x| x.as_ref() == Some(&k)) => {
                    caches.push(lm.model.new_state());
                    keys.push(None);
                }
                None => {
                    caches.push(lm.model.new_state());
                    keys.push(Some(k));
                }
            }
        }

        // Resume from the prefix cache where it reaches further than the agent's own state.
        let prefix = self
            .prefixes
            .entry(key.clone())
            .or_insert_with(|| PrefixCache::new(PREFIX_BLOCK, self.options.prefix_cache_bytes));
        let mut restored = vec![0usize; batch.len()];
        for (i, (r, (prompt, state))) in batch
            .iter()
            .zip(prompts.iter().zip(caches.iter_mut()))
            .enumerate()
        {
            let n = prompt.len();
            if !use_prefix || n < 2 || n >= state.max_len() {
                continue;
            }
            let limit = n - 1;
            let own = state.reachable(state.common_prefix(prompt).min(limit));
            if prefix.reach(prompt, limit, state.is_recurrent()) > own {
                let room = (n + r.params.max_tokens as usize + 1).min(state.max_len());
                restored[i] = prefix.restore(state, prompt, limit, room)?;
            }
        }

        let tokenizer = &lm.tokenizer;
        let decode = |ids: &[u32]| tokenizer.decode(ids, false);
        let mask_len = lm.mask_len;
        let mut masks: Vec<Box<dyn FnMut(&[u32]) -> anyhow::Result<Option<Vec<bool>>>>> =
            constraints
                .into_iter()
                .map(
                    |c| -> Box<dyn FnMut(&[u32]) -> anyhow::Result<Option<Vec<bool>>>> {
                        match c {
                            None => Box::new(|_: &[u32]| Ok(None)),
                            Some(mut c) => {
                                let mut fed = 0usize;
                                Box::new(move |generated: &[u32]| {
                                    while fed < generated.len() {
                                        c.advance(generated[fed])?;
                                        fed += 1;
                                    }
                                    let mut m = c.allowed()?.to_bools();
                                    m.resize(mask_len, false);
                                    Ok(Some(m))
                                })
                            }
                        }
                    },
                )
                .collect();

        let mut seqs: Vec<GenSeq<'_>> = Vec::with_capacity(batch.len());
        for ((r, (prompt, cache)), mask) in batch
            .iter()
            .zip(prompts.iter().zip(caches.iter_mut()))
            .zip(masks.iter_mut())
        {
            seqs.push(GenSeq {
                prompt,
                state: cache,
                params: &r.params,
                options: &lm.options,
                decode: Some(&decode),
                mask: Some(mask as &mut dyn crate::inference::generate::TokenMask),
            });
        }
        let mut timing = StepTiming {
            meter: meter.as_mut().map(|m| m as &mut dyn StepObserver),
            prefill_ms: 0.0,
            decode_ms: 0.0,
        };
        let results = generate_batch_observed(lm.model.as_ref(), &mut seqs, &mut timing);
        let (prefill_ms, decode_ms) = (timing.prefill_ms, timing.decode_ms);
        drop(seqs);
        let mut measured = meter.map(|m| m.finish()).unwrap_or_default();
        for (res, (state, prompt)) in results.iter().zip(caches.iter().zip(&prompts)) {
            if use_prefix && res.is_ok() {
                // A failed copy only means this prompt is not cached.
                let _ = prefix.insert(state, prompt);
            }
        }
        let latency_ms = start.elapsed().as_secs_f64() * 1000.0 / batch.len() as f64;

        let mut out = Vec::with_capacity(batch.len());
        for (i, res) in results.into_iter().enumerate() {
            let r = &batch[i];
            out.push(match res {
                Ok(g) => {
                    let raw = tokenizer.decode(g.text_tokens(&lm.options), false);
                    let (thinking, text) = match &lm.thinking {
                        Some((s, _)) if r.params.thinking => {
                            split_thinking(&raw, &s.open, &s.close, s.prompt_opens_block)
                        }
                        _ => (String::new(), raw),
                    };
                    let mut usage = g.usage();
                    usage.prompt_tokens = prompts[i].len() as u32;
                    self.stats.calls += 1;
                    self.stats.prompt_tokens += prompts[i].len() as u64;
                    let reused = g.cached_prompt_tokens as u64;
                    let from_prefix = (restored[i] as u64).min(reused);
                    self.stats.reused_prefix_tokens += from_prefix;
                    self.stats.reused_own_tokens += reused - from_prefix;
                    self.stats.generated_tokens += g.generated_tokens as u64;
                    Ok(ModelResponse {
                        text,
                        thinking,
                        usage,
                        finish: g.finish,
                        rendered_prompt: Some(rendered[i].clone()),
                        latency_ms,
                        count_source: Some(crate::backend::CountSource {
                            charged: "generated_tokens".into(),
                            counted_by: "joule".into(),
                            thinking: None,
                        }),
                        measured: measured.get_mut(i).and_then(Option::take),
                    })
                }
                Err(e) => Err(BackendError {
                    model: r.model.clone(),
                    message: format!("{e:#}"),
                    partial_usage: None,
                }),
            });
        }
        self.clock += 1;
        for (k, c) in keys.into_iter().zip(caches) {
            if let Some(k) = k {
                self.caches.insert(k, (c, self.clock));
            }
        }
        self.trim_agent_states();
        self.stats.prefill_ms += prefill_ms;
        self.stats.decode_ms += decode_ms;
        self.stats.engine_ms +=
            (start.elapsed().as_secs_f64() * 1000.0 - prefill_ms - decode_ms).max(0.0);
        Ok(out)
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
    fn plan_memory(&mut self, demand: &MemoryDemand) -> anyhow::Result<Option<MemoryPlan>> {
        if demand.sequences.is_empty() {
            return Ok(None);
        }
        self.memory_plan(demand).map(Some)
    }

    fn name(&self) -> String {
        format!(
            "candle-{}",
            crate::inference::device::device_name(&self.device)
        )
    }

    fn batch_key(&self, model: &str) -> String {
        self.model_key(model)
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

/// Routes `scripted:` keys to a scripted backend and every other key to the
/// model backend (local [`LlmBackend`] by default, or a served one), so one
/// roster can mix scripted and model-backed agents.
pub struct MixedBackend<L = LlmBackend> {
    pub scripted: crate::scripted::ScriptedBackend,
    pub llm: L,
}

impl<L: Backend> Backend for MixedBackend<L> {
    fn name(&self) -> String {
        format!("scripted+{}", self.llm.name())
    }

    fn batch_key(&self, model: &str) -> String {
        if model.starts_with(crate::scripted::SCRIPTED_PREFIX) {
            self.scripted.batch_key(model)
        } else {
            self.llm.batch_key(model)
        }
    }

    fn generate(&mut self, batch: &[ModelRequest]) -> Vec<ModelResult> {
        // The driver batches per batch key, so a batch is all one kind.
        match batch.first() {
            Some(r) if r.model.starts_with(crate::scripted::SCRIPTED_PREFIX) => {
                self.scripted.generate(batch)
            }
            Some(_) => self.llm.generate(batch),
            None => Vec::new(),
        }
    }

    fn unavailable(&self) -> Option<String> {
        self.llm.unavailable()
    }

    fn plan_memory(&mut self, demand: &MemoryDemand) -> anyhow::Result<Option<MemoryPlan>> {
        self.llm.plan_memory(demand)
    }

    fn metering(&self) -> Option<MeterStatus> {
        self.llm.metering()
    }

    fn end_session(&mut self, session: u64) {
        self.scripted.end_session(session);
        self.llm.end_session(session);
    }
}

/// The `[llm]` section of an experiment config: how model-backed agents run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// `cpu`, `cuda[:N]` or `metal[:N]` (GPU ones need the matching cargo feature).
    pub device: String,
    /// Constrained JSON decoding, or free text parsed with retries.
    pub structured: StructuredMode,
    /// Count the end-of-generation token as generated (Ollama's eval_count does).
    pub count_eos: bool,
    /// Most thinking tokens before the close marker is forced (constrained mode).
    pub max_thinking_tokens: Option<usize>,
    /// Run every model-backed agent on this model (a manifest name or GGUF path)
    /// instead of its own, keeping each agent's size S for the costs.
    pub stand_in: Option<String>,
    /// Per-model stand-ins (`[llm.stand_ins]`: roster model → manifest name
    /// or GGUF path), taking precedence over `stand_in`.
    pub stand_ins: std::collections::BTreeMap<String, String>,
    /// Longest string constrained decoding allows where the schema sets no maxLength.
    pub max_string_chars: Option<usize>,
    /// `strict` (default): constrained decoding enforces the scenario's strict
    /// schema (valid actions and ids only); `reference`: the reference's schema.
    pub schema: SchemaChoice,
    // The fields below choose and configure a served backend (`src/served/`);
    // `crate::served::config::validate` checks them.
    /// `local` (default): models on candle in this process; `openai`: an
    /// OpenAI-compatible server (Ollama, vLLM, llama-server).
    pub backend: crate::served::config::BackendKind,
    /// openai: the server's API root, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: Option<String>,
    /// openai: the environment variable that holds the API key (sent as a bearer token).
    pub api_key_env: Option<String>,
    /// openai: the served model name for every model-backed agent (else each
    /// agent's roster `model_name`).
    pub model: Option<String>,
    /// openai: most requests in flight at once (a batch becomes that many concurrent requests).
    pub max_concurrency: usize,
    /// openai: seconds one request may take before it counts as failed.
    pub timeout_s: f64,
    /// openai: retries after a refused connection, a timeout, HTTP 5xx or malformed JSON.
    pub retries: u32,
    /// openai: seconds before the first retry, doubled for each next one (at most 30).
    pub retry_backoff_s: f64,
    /// openai: how a request turns thinking on or off.
    pub thinking_switch: crate::served::config::ThinkingSwitch,
    /// local: tokens each sequence's state is planned for when Joule checks,
    /// before round 1, that the models and every agent's state fit the device.
    pub plan_context: usize,
    /// local: the energy meter (`auto`: every meter this machine has, none
    /// if it has none; `none`, `nvml`, `rapl`; `fake-file:PATH` and
    /// `fake-power:WATTS` are test meters). See `joule meters`.
    pub meter: MeterChoice,
    /// local: MiB each model's prefix cache (computed prompt blocks shared
    /// by every call, agent and run) may hold; 0 turns it off.
    pub prefix_cache_mib: usize,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            device: "cpu".into(),
            structured: StructuredMode::Constrained,
            count_eos: true,
            max_thinking_tokens: Some(512),
            stand_in: None,
            stand_ins: Default::default(),
            max_string_chars: Some(240),
            schema: SchemaChoice::Strict,
            backend: Default::default(),
            base_url: None,
            api_key_env: None,
            model: None,
            max_concurrency: 8,
            timeout_s: 900.0,
            retries: 4,
            retry_backoff_s: 1.0,
            thinking_switch: Default::default(),
            plan_context: DEFAULT_PLAN_CONTEXT,
            meter: MeterChoice::Auto,
            prefix_cache_mib: 2048,
        }
    }
}

impl LlmConfig {
    /// Build the backend: resolves (and fetches if needed) the stand-in model.
    pub fn backend(&self) -> anyhow::Result<LlmBackend> {
        let device = crate::inference::device::select_device(&self.device)?;
        let stand_in = match &self.stand_in {
            Some(s) => Some(
                crate::inference::sources::resolve_model(s)
                    .with_context(|| format!("llm.stand_in = `{s}`"))?,
            ),
            None => None,
        };
        let mut stand_ins = std::collections::BTreeMap::new();
        for (model, s) in &self.stand_ins {
            let path = crate::inference::sources::resolve_model(s)
                .with_context(|| format!("llm.stand_ins.\"{model}\" = `{s}`"))?;
            stand_ins.insert(model.clone(), path);
        }
        Ok(LlmBackend::new(
            device,
            LlmOptions {
                structured: self.structured,
                count_eos: self.count_eos,
                max_thinking_tokens: self.max_thinking_tokens,
                stand_in,
                stand_ins,
                max_string_chars: self.max_string_chars,
                schema: self.schema,
                plan_context: self.plan_context,
                prefix_cache_bytes: self.prefix_cache_mib << 20,
                ..LlmOptions::default()
            },
        )
        .with_meter(&self.meter)
        .map_err(|e| anyhow::anyhow!("llm.meter = \"{}\": {e}", self.meter))?)
    }
}
