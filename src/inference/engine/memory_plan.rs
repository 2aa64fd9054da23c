//! Memory planning: what a run or a sweep will hold on its device — the weights of
//! every distinct model once, plus one sequence state per model-backed agent of
//! every concurrent run — against what the device has free, before anything is
//! played.
//!
//! The rules, so a reader can check a plan by hand:
//! - **Weights**, as the model load holds them ([`WeightEstimate::loaded`],
//!   tensor by tensor as the loader read them: `GgufFile::held_bytes`):
//!   quantised tensors stay as stored; float tensors (F32, F16, BF16) become
//!   f32 (candle's matmul dequantises float weights; norms and biases are
//!   read as f32); a matrix that Joule's CPU kernels multiply is held as
//!   their regrouped copy instead (about its stored size; an F16/BF16 matrix
//!   2 bytes per weight, `quant_matmul::floats`); a quantised matrix
//!   that candle multiplies on the CPU is held *with* candle's repacked
//!   copies (`quant_matmul::candle_repack_bytes`: Q4_K 144 bytes per
//!   super-block in the file + 192 (decode tiles) + 320 (AMX prefill tiles,
//!   on CPUs with AMX); Q6_K 210 + 320; Q8_0 twice its size). So on an
//!   AMX CPU a Q4_K_M file needs about 4.5 times its size, on a GPU its
//!   size. [`WeightEstimate::from_info`] is the header-only estimate
//!   (without the kernels' copies, float tensors as f32: it cannot tell a
//!   matrix from a table) for files not loaded.
//! - **Sequence state** (measured on the loaded model, one token through a fresh
//!   [`SeqState`]): keys and values cost `kv_per_token` bytes per position of the
//!   cache's capacity, which grows in powers of two from 64
//!   ([`SeqState::kv_capacity`]), so a plan for a context of `C` tokens reserves
//!   `kv_capacity(C)` positions (allocated once per prompt:
//!   [`SeqState::reserve_kv`]); a recurrent state (delta-net, Mamba-2) costs
//!   its size twice — the committed state and the one a step stages beside
//!   it until every layer has run (freed at the commit, but the allocator
//!   keeps the memory for the next step) — plus one copy per snapshot it
//!   keeps for prefix reuse (at most [`SnapshotPolicy::keep`], one every
//!   [`SnapshotPolicy::every`] prompt tokens and one before the last prompt
//!   token).
//! - **Sequences**: one per model-backed agent of every concurrent run (each
//!   agent keeps its state between calls for prefix reuse).
//! - **Scratch** ([`step_scratch`]): the activations of the largest forward
//!   step ([`step_rows`]: a piece of every sequence's prompt within `[llm]
//!   prefill_step_tokens`; hidden states, q/k/v, the MLP's gate, up and
//!   product, quantised copies for the kernels, as the allocator holds them)
//!   and the logits rows.
//! - **Margin** for the allocator and the runtime: 10 % of the total
//!   plus 512 MiB on a GPU, 10 % plus 256 MiB on the CPU. [`MemoryPlan::planned`]
//!   is the total without it: what `joule models inspect --memory --measure`
//!   compares with the process's resident memory.
//!
//! - **Free memory** is the device's (`MemAvailable`, `cuMemGetInfo`) read
//!   after the plan's models were loaded, plus their weights
//!   ([`DeviceMemory::held`]): the plan counts those among what it needs, and
//!   the process already holds them.
//!
//! On a GPU a plan that does not fit stops the run before round 1 and says how
//! many concurrent runs would fit; on the CPU it is a warning (the OS can page).

use anyhow::{bail, Result};
use candle_core::Device;

use crate::inference::engine::model::{CausalLm, SeqStep};
use crate::inference::engine::state::{KvCache, SeqState, SnapshotPolicy};
use crate::inference::files::gguf_header::GgufInfo;

const MIB: u64 = 1024 * 1024;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

pub use crate::inference::files::gguf_weights::resident_tensor_bytes;

fn is_float_type(name: &str) -> bool {
    matches!(name, "F32" | "F16" | "BF16")
}

/// The weights of a model as stored in its file and as loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WeightEstimate {
    pub file_bytes: u64,
    pub resident_bytes: u64,
}

impl WeightEstimate {
    /// From a header read by Joule's GGUF reader.
    pub fn from_info(info: &GgufInfo) -> Self {
        let mut w = WeightEstimate::default();
        for t in &info.tensors {
            let stored = t.n_bytes.unwrap_or(0);
            w.file_bytes += stored;
            w.resident_bytes += resident_tensor_bytes(
                t.n_elements,
                stored,
                t.ggml_type.is_some_and(|g| is_float_type(g.name)),
            );
        }
        w
    }

    /// What a model load really holds: the file's tensor bytes and what the
    /// loader kept of each tensor it read, kernels' copies included (call
    /// after the model of `gguf` was loaded).
    pub fn loaded(gguf: &crate::inference::files::gguf_weights::GgufFile) -> Self {
        WeightEstimate {
            file_bytes: Self::from_content(gguf.content()).file_bytes,
            resident_bytes: gguf.held_bytes(),
        }
    }

    /// From the header candle's loader holds (the same numbers as [`Self::from_info`]).
    pub fn from_content(content: &candle_core::quantized::gguf_file::Content) -> Self {
        use candle_core::quantized::GgmlDType;
        let mut w = WeightEstimate::default();
        for t in content.tensor_infos.values() {
            let elements = t.shape.elem_count() as u64;
            let stored =
                elements / t.ggml_dtype.block_size() as u64 * t.ggml_dtype.type_size() as u64;
            w.file_bytes += stored;
            let float = matches!(
                t.ggml_dtype,
                GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
            );
            w.resident_bytes += resident_tensor_bytes(elements, stored, float);
        }
        w
    }
}

/// What one sequence of a model holds, measured on the loaded model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateFootprint {
    /// Key and value bytes per cached position, all attention layers together.
    pub kv_per_token: u64,
    /// Bytes of the recurrent states of all recurrent layers (0 for attention-only models).
    pub recurrent: u64,
    pub snapshots: SnapshotPolicy,
}

impl StateFootprint {
    /// Run one token through a fresh state of `model` (keys and values
    /// stored as `kv`) and read what it holds.
    pub fn probe(model: &dyn CausalLm, kv: KvCache) -> Result<Self> {
        let mut st = model.new_state().with_kv_cache(kv);
        let tokens = [0u32];
        model.forward(&mut [SeqStep::new(&tokens, &mut st)])?;
        Ok(Self::of_state(&st))
    }

    /// The footprint of a state that has run at least one token.
    pub fn of_state(st: &SeqState) -> Self {
        StateFootprint {
            kv_per_token: st.kv_bytes_per_token() as u64,
            recurrent: st.recurrent_bytes() as u64,
            snapshots: st.policy(),
        }
    }

    /// Recurrent snapshots a sequence of `context` tokens can hold at once:
    /// its prompt (at most `context − 1` tokens, one is decoded) is cut at
    /// every multiple of the interval below its last token and just before
    /// that token (`generate::prompt_pieces`), at most `keep` of them kept.
    pub fn snapshots_at(&self, context: usize) -> u64 {
        if self.recurrent == 0 {
            return 0;
        }
        let every = self.snapshots.every.max(1);
        ((context.saturating_sub(2) / every + 1) as u64).min(self.snapshots.keep as u64)
    }

    /// Bytes one sequence of up to `context` tokens holds: its keys and
    /// values at the cache's capacity, its recurrent state twice (committed
    /// and staged by a step) and its snapshots.
    pub fn per_sequence(&self, context: usize) -> u64 {
        SeqState::kv_capacity(context) as u64 * self.kv_per_token
            + self.recurrent * (2 + self.snapshots_at(context))
    }
}

/// One model of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelNeed {
    /// The model's key (manifest name or stand-in file).
    pub model: String,
    pub weights: WeightEstimate,
    pub state: StateFootprint,
    /// Sequences of this model that live at once.
    pub sequences: usize,
    /// Bytes the model's prefix cache may hold (its budget, reached as
    /// prompts are cached; 0: no prefix cache). Shared by every run.
    pub prefix_cache: u64,
    /// Activations of one forward step ([`step_scratch`]).
    pub scratch: u64,
}

/// The token rows of the largest prompt step a batch runs
/// (`generate::DecodeBatch`): each prefilling sequence feeds its next piece
/// of the prompt, pieces end at multiples of `block` (the prefix cache's,
/// when it is on), and pieces join a step while they fit `budget` prompt
/// tokens (`[llm] prefill_step_tokens`, 0 = no budget) except the first,
/// which always goes. So with a block the rows are at most `sequences`
/// blocks within the budget (5 sequences of 64-token blocks: 320 rows under
/// the default 512); without one a whole prompt of `context` tokens can be
/// one piece, a step on its own.
pub fn step_rows(budget: usize, sequences: usize, block: usize, context: usize) -> usize {
    let budget = if budget == 0 { usize::MAX } else { budget };
    let piece = if block == 0 {
        context.max(1)
    } else {
        block.min(context.max(1))
    };
    sequences
        .max(1)
        .saturating_mul(piece)
        .min(budget.max(piece))
}

/// What the process holds at a step's peak for each byte of activations
/// alive at once ([`step_scratch`]'s count). Freed buffers stay with the
/// allocator until the step ends (`load_purge` hands them back after prompt
/// steps), and a buffer of one size is not reused for another, so the
/// process holds each size's largest set once: measured with `joule models
/// inspect --memory --measure` on real-width Q4_K_M files (one-layer
/// Qwen3-8B, two-layer Qwen3.5-4B and Gemma 4, four-layer Nemotron-H) at
/// 64–320 rows, 1.7–2.0 times the count. On a GPU (candle's CUDA allocator)
/// it is not measured yet; the factor stays there too, erring on the side of
/// room.
pub const HELD_PER_LIVE_BYTE: usize = 2;

/// The memory one forward step of `rows` token rows holds beyond weights
/// and states, for a model whose hidden size is `n_embd` and whose matrices
/// (`[n, k]` pairs, the output head excluded by `vocab`) are `matmuls`, with
/// `sequences` rows of logits of `vocab` values. Alive at once: the hidden
/// state, its norm and the residual, the attention's output (two
/// hidden-sized rows), and for the widest matrix (the MLP's gate and up,
/// `n_ff`) three rows of its width (the two outputs and the activation, the
/// product replacing one), all f32, plus each kernel's 8-bit copy of its
/// input; that [`HELD_PER_LIVE_BYTE`] times; plus the logits, their f32
/// copy and the sampler's, per sequence.
pub fn step_scratch(
    matmuls: &[(usize, usize)],
    n_embd: usize,
    vocab: usize,
    rows: usize,
    sequences: usize,
) -> u64 {
    let widest = matmuls
        .iter()
        .filter(|&&(n, _)| n != vocab)
        .map(|&(n, k)| n.max(k))
        .max()
        .unwrap_or(n_embd);
    let per_row = 2 * n_embd + 3 * widest;
    let live = rows * per_row * 4 + rows * (n_embd + widest);
    (live * HELD_PER_LIVE_BYTE + sequences * vocab * 4 * 3) as u64
}

/// Where the free memory came from.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMemory {
    /// Free as the device reported it when the plan was made.
    pub free: u64,
    pub total: u64,
    /// `cudaMemGetInfo`, `/proc/meminfo MemAvailable`, ...
    pub source: String,
    /// Bytes of the plan's own weights the process already held when `free` was read (a
    /// plan loads its models first, to measure their states): the plan counts them among
    /// what it needs, so they count as free for it too ([`DeviceMemory::for_plan`]).
    pub held: u64,
}

impl DeviceMemory {
    /// What the plan may use: the reported free memory plus what the process already holds
    /// of what the plan counts.
    pub fn for_plan(&self) -> u64 {
        self.free + self.held
    }
}

/// The memory a set of concurrent runs needs on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// `cpu`, `cuda`, `metal`.
    pub device: String,
    /// Concurrent runs the sequences belong to.
    pub runs: usize,
    /// Tokens each sequence's state is planned for.
    pub context: usize,
    pub models: Vec<ModelNeed>,
    /// `None` where the device's free memory cannot be read.
    pub memory: Option<DeviceMemory>,
}

impl crate::backend::MemoryReport for MemoryPlan {
    fn device(&self) -> &str {
        &self.device
    }
    fn render(&self) -> String {
        MemoryPlan::render(self)
    }
    fn check(&self) -> Result<Option<String>> {
        MemoryPlan::check(self)
    }
}

impl MemoryPlan {
    pub fn weights(&self) -> u64 {
        self.models.iter().map(|m| m.weights.resident_bytes).sum()
    }

    /// The prefix caches' budgets, every model together.
    pub fn caches(&self) -> u64 {
        self.models.iter().map(|m| m.prefix_cache).sum()
    }

    /// The scratch of one forward step, the largest model's (one step runs at a time).
    pub fn scratch(&self) -> u64 {
        self.models.iter().map(|m| m.scratch).max().unwrap_or(0)
    }

    /// Weights + prefix caches + states + scratch: what the plan expects the
    /// process to hold for its models, before the margin.
    pub fn planned(&self) -> u64 {
        self.weights() + self.caches() + self.states() + self.scratch()
    }

    pub fn states(&self) -> u64 {
        self.models
            .iter()
            .map(|m| m.sequences as u64 * m.state.per_sequence(self.context))
            .sum()
    }

    fn gpu(&self) -> bool {
        self.device != "cpu"
    }

    fn headroom(&self) -> u64 {
        if self.gpu() {
            512 * MIB
        } else {
            256 * MIB
        }
    }

    /// Weights + caches + states + scratch + margin (module doc).
    pub fn required(&self) -> u64 {
        let sub = self.planned();
        sub + sub / 10 + self.headroom()
    }

    /// How many runs of this plan's shape fit in the free memory (`None` when it is unknown).
    pub fn runs_that_fit(&self) -> Option<usize> {
        let free = self.memory.as_ref()?.for_plan();
        let w = self.weights() + self.caches() + self.scratch();
        let fixed = w + w / 10 + self.headroom();
        if free <= fixed {
            return Some(0);
        }
        let per_run = if self.runs == 0 {
            0
        } else {
            let s = self.states() / self.runs as u64;
            s + s / 10
        };
        if per_run == 0 {
            return Some(usize::MAX);
        }
        Some(((free - fixed) / per_run) as usize)
    }

    /// Whether the plan fits (unknown free memory counts as fitting).
    pub fn fits(&self) -> bool {
        self.memory
            .as_ref()
            .is_none_or(|m| self.required() <= m.for_plan())
    }

    /// An error on a GPU where the plan does not fit; `Ok(Some(warning))` on the CPU.
    pub fn check(&self) -> Result<Option<String>> {
        if self.fits() {
            return Ok(None);
        }
        let m = self.memory.as_ref().map(|m| m.for_plan()).unwrap_or(0);
        let fit = self.runs_that_fit().unwrap_or(0);
        let msg = format!(
            "{} concurrent run(s) need {:.2} GiB on {} (weights {:.2} GiB, prefix caches {:.2} GiB, sequence states {:.2} GiB at {} tokens each, margin), but it has {:.2} GiB free: {}",
            self.runs,
            self.required() as f64 / GIB,
            self.device,
            self.weights() as f64 / GIB,
            self.caches() as f64 / GIB,
            self.states() as f64 / GIB,
            self.context,
            m as f64 / GIB,
            if fit == 0 {
                "not even one run fits (the weights and prefix caches alone are too large); use a smaller quantisation, a smaller `[llm] prefix_cache_mib` or another device".to_string()
            } else {
                format!(
                    "at most {fit} concurrent run(s) fit; run fewer at once (`joule sweep --jobs {fit}`, `joule bench trace --runs {fit}`, `joule bench society --sims {fit}`), lower `[llm] plan_context`{}",
                    if self.caches() > self.states() {
                        " or give the prefix caches less (`[llm] prefix_cache_mib`, `--prefix-cache-mib`), which hold more than the sequences"
                    } else {
                        ""
                    }
                )
            }
        );
        if self.gpu() {
            bail!(msg)
        }
        Ok(Some(msg))
    }

    /// A table of the plan for people.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "memory plan on {}: {} run(s), sequences planned for {} tokens\n",
            self.device, self.runs, self.context
        ));
        s.push_str("  model                              weights (file → loaded)   KV/token   recurrent   per sequence   sequences\n");
        for m in &self.models {
            s.push_str(&format!(
                "  {:34} {:>9} → {:>9}   {:>8}   {:>9}   {:>12}   {:>9}\n",
                m.model,
                human(m.weights.file_bytes),
                human(m.weights.resident_bytes),
                human(m.state.kv_per_token),
                human(m.state.recurrent),
                human(m.state.per_sequence(self.context)),
                m.sequences
            ));
        }
        if self.caches() > 0 {
            s.push_str(&format!(
                "  prefix caches (budget, `[llm] prefix_cache_mib`): {}\n",
                human(self.caches())
            ));
        }
        s.push_str(&format!(
            "  total: weights {} + prefix caches {} + states {} + scratch {} = {}, with margin {}",
            human(self.weights()),
            human(self.caches()),
            human(self.states()),
            human(self.scratch()),
            human(self.planned()),
            human(self.required())
        ));
        match &self.memory {
            Some(m) => {
                s.push_str(&format!(
                    "; free {} of {} ({}{})\n",
                    human(m.for_plan()),
                    human(m.total),
                    m.source,
                    if m.held > 0 {
                        format!(
                            " {} + {} of these weights already loaded",
                            human(m.free),
                            human(m.held)
                        )
                    } else {
                        String::new()
                    }
                ));
                if let Some(n) = self.runs_that_fit() {
                    if n == usize::MAX {
                        s.push_str("  runs that fit: any number (no per-run state)\n");
                    } else {
                        s.push_str(&format!("  runs that fit: {n}\n"));
                    }
                }
            }
            None => s.push_str("; free memory of this device unknown\n"),
        }
        s
    }
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.2} GiB", b / GIB)
    } else if bytes >= MIB {
        format!("{:.1} MiB", b / MIB as f64)
    } else if bytes >= 1024 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// The free and total memory of `device`: `cudaMemGetInfo` on CUDA,
/// `MemAvailable`/`MemTotal` of `/proc/meminfo` on the CPU (Linux), `None`
/// elsewhere (Metal, other systems).
pub fn device_memory(device: &Device) -> Result<Option<DeviceMemory>> {
    match device {
        Device::Cpu => Ok(std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| parse_meminfo(&s))),
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => {
            use anyhow::Context;
            let (free, total) = dev
                .cuda_stream()
                .context()
                .mem_get_info()
                .context("asking the CUDA driver for free memory")?;
            Ok(Some(DeviceMemory {
                free: free as u64,
                total: total as u64,
                source: "cuMemGetInfo".into(),
                held: 0,
            }))
        }
        #[allow(unreachable_patterns)]
        _ => Ok(None),
    }
}

/// `MemAvailable` and `MemTotal` (kB) of a `/proc/meminfo` text.
pub fn parse_meminfo(text: &str) -> Option<DeviceMemory> {
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb = rest.trim().strip_suffix("kB")?.trim();
            kb.parse::<u64>().ok().map(|k| k * 1024)
        })
    };
    Some(DeviceMemory {
        free: field("MemAvailable")?,
        total: field("MemTotal")?,
        source: "/proc/meminfo MemAvailable".into(),
        held: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(kv: u64, rec: u64) -> StateFootprint {
        StateFootprint {
            kv_per_token: kv,
            recurrent: rec,
            snapshots: SnapshotPolicy::default(),
        }
    }

    fn plan(free: Option<u64>, runs: usize, device: &str) -> MemoryPlan {
        MemoryPlan {
            device: device.into(),
            runs,
            context: 2000,
            models: vec![ModelNeed {
                model: "m".into(),
                weights: WeightEstimate {
                    file_bytes: 1024 * MIB,
                    resident_bytes: 1024 * MIB,
                },
                state: fp(1024, 0),
                sequences: 5 * runs,
                prefix_cache: 0,
                scratch: 0,
            }],
            memory: free.map(|f| DeviceMemory {
                free: f,
                total: f,
                source: "test".into(),
                held: 0,
            }),
        }
    }

    #[test]
    fn float_matrices_load_as_f32_and_quantised_ones_as_stored() {
        assert_eq!(resident_tensor_bytes(100, 200, true), 400);
        assert_eq!(resident_tensor_bytes(256, 144, false), 144);
    }

    #[test]
    fn per_sequence_uses_the_cache_capacity_and_snapshots() {
        // 2,000 tokens: capacity 2,048 positions.
        assert_eq!(fp(10, 0).per_sequence(2000), 20_480);
        // Recurrent: live + staged + min(keep 8, 1998/256 + 1 = 8) snapshots.
        assert_eq!(fp(0, 100).per_sequence(2000), 1000);
        // 100 tokens: one snapshot (before the last prompt token).
        assert_eq!(fp(0, 100).per_sequence(100), 300);
        assert_eq!(fp(0, 100).per_sequence(100_000), 1000);
        // 1,024 tokens: a prompt of at most 1,023 is cut at 256, 512, 768 and before its last.
        assert_eq!(fp(0, 100).snapshots_at(1024), 4);
        assert_eq!(fp(0, 100).snapshots_at(1026), 5);
    }

    #[test]
    fn weights_already_loaded_count_as_free_for_the_plan_that_counts_them() {
        // Weights 1 GiB, one run of 5 × 2,048 × 1 KiB: 1.1 GiB + 11 MiB + 512 MiB needed.
        let mut p = plan(Some(1200 * MIB), 1, "cuda");
        assert!(!p.fits());
        // The device reported 1,200 MiB free after the plan's 1 GiB of weights was loaded.
        if let Some(m) = p.memory.as_mut() {
            m.held = 1024 * MIB;
        }
        assert!(p.fits(), "{}", p.render());
        assert!(p.check().unwrap().is_none());
        let r = p.render();
        assert!(
            r.contains("free 2.17 GiB of 1.17 GiB (test 1.17 GiB + 1.00 GiB of these weights already loaded)"),
            "{r}"
        );
    }

    #[test]
    fn a_plan_that_does_not_fit_fails_on_a_gpu_with_the_runs_that_fit() {
        // Weights 1 GiB; a run: 5 sequences × 2,048 × 1 KiB = 10 MiB.
        let p = plan(Some(2048 * MIB), 100, "cuda");
        assert!(!p.fits());
        let n = p.runs_that_fit().unwrap();
        // (2048 − 1024·1.1 − 512) / 11 MiB
        assert_eq!(n, ((2048 - 1126 - 512) as f64 / 11.0).floor() as usize);
        let err = p.check().unwrap_err().to_string();
        assert!(
            err.contains(&format!("at most {n} concurrent run(s) fit"))
                && err.contains(&format!("bench trace --runs {n}")),
            "{err}"
        );
        // No prefix caches here: the hint does not name them.
        assert!(!err.contains("prefix_cache_mib"), "{err}");
        // A prefix-cache budget of 1 GiB, more than 50 runs' states (500 MiB): named.
        let mut c = plan(Some(3072 * MIB), 50, "cuda");
        c.models[0].prefix_cache = 1024 * MIB;
        let err = c.check().unwrap_err().to_string();
        assert!(
            err.contains("at most 27 concurrent run(s) fit")
                && err.contains("`[llm] prefix_cache_mib`"),
            "{err}"
        );
        let q = plan(Some(2048 * MIB), n, "cuda");
        assert!(q.fits(), "{}", q.render());
        assert!(q.check().unwrap().is_none());
        // The CPU warns instead.
        assert!(plan(Some(2048 * MIB), 100, "cpu")
            .check()
            .unwrap()
            .is_some());
        // Unknown free memory fits.
        assert!(plan(None, 100, "metal").check().unwrap().is_none());
        // Weights alone too large.
        let err = plan(Some(1024 * MIB), 1, "cuda")
            .check()
            .unwrap_err()
            .to_string();
        assert!(err.contains("not even one run fits"), "{err}");
    }

    #[test]
    fn a_prefix_cache_budget_is_fixed_memory_shared_by_every_run() {
        let mut p = plan(Some(4096 * MIB), 10, "cuda");
        let before = (p.required(), p.runs_that_fit().unwrap());
        p.models[0].prefix_cache = 1024 * MIB;
        assert_eq!(p.caches(), 1024 * MIB);
        // Counted once with its margin, not per run.
        assert_eq!(p.required(), before.0 + 1024 * MIB + 1024 * MIB / 10);
        // (4096 − (1024 + 1024)·1.1 − 512) / 11 MiB runs instead of (4096 − 1126 − 512) / 11.
        let fixed = (2048 * MIB + 2048 * MIB / 10 + 512 * MIB) / MIB;
        assert_eq!(
            p.runs_that_fit().unwrap(),
            ((4096 - fixed) as f64 / 11.0).floor() as usize
        );
        assert!(p.runs_that_fit().unwrap() < before.1);
        assert!(p.render().contains("prefix caches"), "{}", p.render());
    }

    #[test]
    fn a_step_runs_a_piece_of_every_sequence_within_the_budget() {
        // Pieces of 64-token blocks: one per sequence, within 512.
        assert_eq!(step_rows(512, 1, 64, 4096), 64);
        assert_eq!(step_rows(512, 5, 64, 4096), 320);
        assert_eq!(step_rows(512, 60, 64, 4096), 512);
        // No budget: every sequence's piece.
        assert_eq!(step_rows(0, 60, 64, 4096), 3840);
        // A budget below one block: the first piece still goes.
        assert_eq!(step_rows(32, 5, 64, 4096), 64);
        // A prompt shorter than a block.
        assert_eq!(step_rows(512, 5, 64, 10), 50);
        // Without blocks a whole prompt is one piece, a step on its own.
        assert_eq!(step_rows(512, 5, 0, 4096), 4096);
        assert_eq!(step_rows(512, 5, 0, 100), 500);
        assert_eq!(step_rows(0, 5, 0, 4096), 20480);
    }

    #[test]
    fn meminfo_is_parsed() {
        let m = parse_meminfo(
            "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   12000000 kB\n",
        )
        .unwrap();
        assert_eq!(m.total, 24_000_000 * 1024);
        assert_eq!(m.free, 12_000_000 * 1024);
        assert!(parse_meminfo("MemTotal: 1 kB\n").is_none());
        assert!(device_memory(&Device::Cpu).unwrap().is_some());
    }
}
