//! CPU matrix products for the GGUF weight types of the roster's files:
//! the 32-value types `Q4_0`, `Q4_1` (the default SmolLM2 model's type),
//! `Q5_0`, `Q5_1`, `Q8_0`, and the 256-value k-quants `Q4_K`, `Q5_K`, `Q6_K`
//! (Ollama's Q4_K_M files are Q4_K with Q6_K for part of `ffn_down`/`attn_v`
//! and the output; a Q4_K_M file whose rows are not a multiple of 256 values,
//! SmolLM2's, falls back to Q5_0/Q8_0). candle 0.11 computes Q4_1/Q5_0/Q5_1
//! dot products with scalar loops, which made prefill three times and decode
//! 1.4 times slower than llama.cpp here. Which types these kernels take is
//! [`DEFAULT_TYPES`] (those where they beat candle in
//! `benches/quant_matmul.rs`), and for [`SPLIT_TYPES`] (Q4_K, Q6_K) the
//! decode-sized segments of the rows while candle's repacked kernels take
//! prompts ([`split`], [`choose`]), unless `JOULE_CPU_KERNEL_TYPES` names the
//! types (then Joule's at every row count, the others candle's).
//!
//! The k-quants have their own matrix, [`kquants::KMatrix`]: a whole
//! 256-value super-block at a time against 256-value activation blocks with
//! per-16 sums (llama.cpp's q8_K), the sub-block scales applied in integers
//! and the super-block's `d`/`dmin` once (see `kquants.rs`). A second reading
//! of the format, a super-block as eight 32-value Q4_1-like blocks with
//! per-block float scales (`BlockQ4K` etc. in `blocks.rs`), is kept for the
//! tests.
//!
//! [`QuantMatrix`] (the 32-value types) holds a `[n, k]` weight as the file's bytes regrouped: each
//! 32-value block's integer payload (nibbles, fifth bits, bytes) in one array,
//! and the scales of each group of [`GROUP`] blocks of a row ([`GroupScales`]:
//! eight f16 `d` (and `m`), or a k-quant's super-block scales) in another,
//! rows padded to whole groups, so the scales of eight blocks are one vector
//! load and one conversion. The matrix takes the bytes of the file (plus that
//! padding; Q6_K's six-bit values take a byte each): decode reads every weight
//! once per step. A weight is either `d·u + m` with `u` unsigned
//! ([`WeightBlock::SIGNED`] false: Q4_0/Q5_0 as `m = −8d`/`−16d`, Q4_1/Q5_1
//! with their own `m`, Q4_K/Q5_K) or `d·s` with `s` a signed byte (Q8_0, Q6_K).
//!
//! With AVX-512 VNNI, Q4_0, Q5_0 and Q8_0 (the fallbacks of Q4_K_M files) are held with 16
//! weight rows in vector lanes instead ([`x86::qlanes512::QLanes`], chosen at load by
//! [`q_matrix`]; Q4_1 and Q5_1 stay row major), as the k-quants are ([`k_matrix`]).
//!
//! [`QuantMatrix::matmul`] computes `y = x · Wᵀ` for `m` activation rows the
//! way llama.cpp does: each activation row is quantised once to 8-bit blocks
//! ([`Acts`]: `x ≈ d₈·q₈`, with `s = d₈·Σq₈` kept), and a block's contribution
//! is `d·d₈·Σ u·q₈ + m·s`. The integer sums use AVX-512 VNNI (two blocks per
//! 512-bit register), AVX-VNNI or AVX2 when the CPU has them (checked at run
//! time; `JOULE_SIMD` picks another to compare) and a portable loop otherwise;
//! all give the same integer sums, so the paths differ only by float
//! summation order. The SIMD paths multiply the scales of eight blocks at once
//! (`d·d₈` for eight blocks in one product, the `m·s` terms of eight blocks in
//! one fused multiply-add), leaving per block (AVX-512: per pair of blocks)
//! and row only the integer product, its conversion, the scale's broadcast
//! and one fused multiply-add.
//!
//! Work is split over weight rows across candle's CPU worker pool. Each weight
//! block is unpacked once and multiplied with up to [`ROW_TILE`] activation
//! rows, so a batch of decode rows (several agents' next tokens) reads the
//! weights once: that is what makes batched decoding pay on a CPU. A row's
//! result does not depend on the tile it was computed in (the same operations
//! in the same order for every `(weight row, activation row)` pair), so a
//! sequence's logits do not depend on what it is batched with.
//! [`matmul_many`] multiplies one input with several matrices (a layer's
//! q/k/v, or gate/up) after quantising it once, in one pass of the pool. Up
//! to [`ROW_BLOCK`] activation rows (decode, a society's agents) the threads
//! take shrinking shares of the weight rows (`run_guided`), so they finish
//! within one 16-row unit of each other; longer inputs (prompts) go in fixed
//! items of (block of activation rows, chunk of weight rows).

use crate::inference::files::gguf_weights::ggml_name;
use anyhow::{bail, Context, Result};
use candle_core::quantized::GgmlDType;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::Range;

/// Values per quantisation block (GGUF's QK4_0 … QK8_0 and QK8_1).
pub const BLOCK: usize = 32;
/// Blocks whose scales are read, converted and multiplied as one vector.
pub const GROUP: usize = 8;
/// Activation rows multiplied with one unpacked weight block.
pub const ROW_TILE: usize = 4;
/// Activation rows per work item (their 8-bit blocks stay in L2).
const ROW_BLOCK: usize = 64;
/// Weight rows per work item (their blocks stay in L1).
const WEIGHT_CHUNK: usize = 16;
/// Activation rows from which quantising them is split over the worker pool.
const PARALLEL_QUANTISE_ROWS: usize = 16;

/// A `[n, k]` weight matrix this module multiplies, whatever its block type.
pub trait CpuMatmul: Debug + Send + Sync {
    /// Output features (rows of the weight).
    fn n(&self) -> usize;
    /// Input features (columns of the weight).
    fn k(&self) -> usize;
    /// The weight as f32, row major (for tests and reference checks).
    fn dequantize(&self) -> Vec<f32>;
    /// The form the matrix takes its activations in ([`Acts`]).
    fn acts_form(&self) -> ActsForm {
        ActsForm::Blocks
    }
    /// Bytes the matrix holds (its payloads and scales; the memory plan).
    fn resident_bytes(&self) -> u64;
    /// Weight rows per work item of [`matmul_many`] when `threads` workers share the
    /// product of more than [`ROW_BLOCK`] activation rows (a multiple of any row grouping
    /// the kernel needs; shorter products take shares in units of [`WEIGHT_CHUNK`] rows,
    /// so no kernel may need a grouping larger than that).
    fn chunk_rows(&self, _threads: usize) -> usize {
        WEIGHT_CHUNK
    }
    /// `y[r·n + j]` for activation rows `rows` of `acts` and weight rows `js`.
    ///
    /// # Safety
    /// `acts` must have rows of `k` values, `y` must point to `m·n` writable
    /// floats (`m` the rows of `acts`), and no other thread may write the same
    /// `(r, j)` while this runs.
    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32);
}

/// The form of the activations a [`CpuMatmul`] multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActsForm {
    /// 32-value 8-bit blocks (`Acts::qs`: the 32-value types).
    Blocks,
    /// 256-value 8-bit blocks with per-16 sums (`Acts::qk`: the k-quants).
    Supers,
    /// Values rounded to f16 (`Acts::f16s`: F16 matrices).
    F16,
    /// Values rounded to bf16 (`Acts::bf16s`: BF16 matrices).
    Bf16,
}

/// `y = x · Wᵀ` for `x` of `m = x.len() / k` rows; `y` row major (`[m, n]`).
pub fn matmul(w: &dyn CpuMatmul, x: &[f32]) -> Result<Vec<f32>> {
    matmul_many(&[w], x).map(|mut ys| ys.remove(0))
}

/// The products of one input with several weights of the same `k` (a
/// layer's q/k/v, or gate/up): the input is quantised once and every
/// matrix's work goes to the worker pool in one pass.
pub fn matmul_many(ws: &[&dyn CpuMatmul], x: &[f32]) -> Result<Vec<Vec<f32>>> {
    let Some(first) = ws.first() else {
        return Ok(Vec::new());
    };
    let k = first.k();
    if let Some(w) = ws.iter().find(|w| w.k() != k) {
        bail!(
            "weights of {} and {k} columns multiplied with one input",
            w.k()
        );
    }
    let forms = acts::Forms::of(ws.iter().map(|w| w.acts_form()));
    if k == 0 || (forms.blocks && k % BLOCK != 0) || x.len() % k != 0 {
        bail!(
            "activations of {} values are not rows of {k} for a [{}, {k}] weight",
            x.len(),
            first.n()
        );
    }
    let m = x.len() / k;
    if forms.supers && k % kquants::QK != 0 {
        bail!("k-quant weights of {k} columns are not whole super-blocks of 256");
    }
    let acts = Acts::prepare(x, k, forms);
    let mut ys: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; m * w.n()]).collect();
    let ptrs: Vec<SendPtr<f32>> = ys.iter_mut().map(|y| SendPtr(y.as_mut_ptr())).collect();
    // Run on candle's own worker pool, so its threads are not left spinning
    // while another pool works (its workers and this thread: no environment
    // read per product).
    let pool = candle_core::utils::barrier_pool();
    let threads = pool.n_workers() + 1;
    let row_blocks = m.div_ceil(ROW_BLOCK);
    if row_blocks == 1 {
        // SAFETY: `acts` has m rows of k values; `ys[wi]` holds m·n floats of matrix
        // `wi` and outlives the pass, written only through `ptrs[wi]`.
        unsafe { run_guided(pool, ws, &acts, m, &ptrs) };
        return Ok(ys);
    }
    // Longer inputs: work items are (matrix, block of activation rows, chunk
    // of weight rows): a block of activations stays in L2 and a chunk of
    // weights in L1 while every pair is multiplied.
    let wchunks: Vec<usize> = ws.iter().map(|w| w.chunk_rows(threads).max(1)).collect();
    let chunks: Vec<usize> = ws
        .iter()
        .zip(&wchunks)
        .map(|(w, c)| w.n().div_ceil(*c))
        .collect();
    let mut starts = Vec::with_capacity(ws.len() + 1);
    starts.push(0usize);
    for c in &chunks {
        starts.push(starts[starts.len() - 1] + row_blocks * c);
    }
    let total = starts[ws.len()];
    pool.execute_chunked(total, |items| {
        for item in items {
            let wi = starts.partition_point(|&s| s <= item) - 1;
            let local = item - starts[wi];
            let (rb, wc) = (local / chunks[wi], local % chunks[wi]);
            let w = ws[wi];
            let rows = rb * ROW_BLOCK..m.min((rb + 1) * ROW_BLOCK);
            let js = wc * wchunks[wi]..w.n().min((wc + 1) * wchunks[wi]);
            // SAFETY: `acts` has rows of k values; `ys[wi]` holds m·n floats
            // and outlives the pass; item (wi, rb, wc) is the only writer of
            // its rows and weight rows.
            unsafe { w.run_chunk(&acts, rows, js, ptrs[wi].get()) };
        }
    });
    Ok(ys)
}

/// One pass of at most [`ROW_BLOCK`] activation rows (decode: one row per sequence) over
/// `ws` on `pool`, split by guided self-scheduling: the weight rows of all the matrices in
/// units of [`WEIGHT_CHUNK`] (a lanes group), each grab a thread makes taking a share of what
/// is left (`left / (2·threads)` units, at least one), run as one `run_chunk` per matrix it
/// touches. Early grabs are long (few calls, each one's fixed costs spread over many
/// weights); the last ones are a single unit, so the threads finish within one unit of each
/// other (fixed items of up to 16 groups left one thread waiting for up to three items'
/// time at the end of every product).
///
/// # Safety
/// `acts` has `m` rows of the matrices' `k` values and `ys[wi]` points to `m·n` writable
/// floats of matrix `wi` that nothing else touches during the pass.
unsafe fn run_guided(
    pool: &candle_core::utils::BarrierPool,
    ws: &[&dyn CpuMatmul],
    acts: &Acts,
    m: usize,
    ys: &[SendPtr<f32>],
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = pool.n_workers() + 1;
    let mut ends = Vec::with_capacity(ws.len());
    let mut total = 0usize;
    for w in ws {
        total += w.n().div_ceil(WEIGHT_CHUNK);
        ends.push(total);
    }
    let cursor = AtomicUsize::new(0);
    let take = || {
        let mut at = cursor.load(Ordering::Relaxed);
        loop {
            if at >= total {
                return None;
            }
            let size = ((total - at) / (2 * threads)).max(1);
            match cursor.compare_exchange_weak(at, at + size, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(at..at + size),
                Err(now) => at = now,
            }
        }
    };
    // One task per thread; each takes grabs until none is left (run inline, all of them,
    // where the pool cannot take work).
    pool.execute_chunked(threads, |_| {
        while let Some(grab) = take() {
            let mut wi = ends.partition_point(|&e| e <= grab.start);
            let mut at = grab.start;
            while at < grab.end {
                let first = if wi == 0 { 0 } else { ends[wi - 1] };
                let to = grab.end.min(ends[wi]);
                let w = ws[wi];
                let js = (at - first) * WEIGHT_CHUNK..w.n().min((to - first) * WEIGHT_CHUNK);
                // SAFETY: the caller's conditions; grabs are disjoint, so this call is the
                // only writer of weight rows `js` of matrix `wi`.
                unsafe { w.run_chunk(acts, 0..m, js, ys[wi].get()) };
                at = to;
                wi += 1;
            }
        }
    });
}

/// The environment variable naming the GGUF types this module multiplies
/// (a comma-separated list of names such as `Q4_K,Q6_K`, or `all`); unset,
/// [`DEFAULT_TYPES`] (`crate::knobs::CPU_KERNEL_TYPES`).
pub const TYPES_ENV: &str = crate::knobs::CPU_KERNEL_TYPES.name;

/// The types this module takes by default at every row count, unless candle
/// repacks the matrix and rounds as llama.cpp does ([`leaves_to_candle`]; for
/// none of these types at present): those whose products it computes faster
/// than candle 0.11 (`benches/quant_matmul.rs`, both columns). Q4_K and Q6_K
/// are [`SPLIT_TYPES`] instead, Joule's by default too: its super-block kernels
/// decode faster (1.24× llama.cpp against candle's 1.03× on a real-width Q4_K_M
/// file) and hold the weights once, while candle's repacked 16-row tiles (and AMX)
/// multiplied prompts about 2× faster than Joule's 2×4 tile (before the AVX-512 prompt
/// path, `x86::kquants512::run_prompt_k512`) but hold about 4.5× the
/// file; see `benches/kquant-split.sh` and benches/RESULTS.md.
/// F16 and BF16 ([`floats`]) are held as 16-bit values where candle would hold f32, and
/// multiplied as llama.cpp does (benches/RESULTS.md).
pub const DEFAULT_TYPES: [GgmlDType; 8] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q5K,
    GgmlDType::F16,
    GgmlDType::BF16,
];

/// Whether candle 0.11.1 multiplies a `[n, k]` matrix of `dtype` with its
/// repacked x86 kernels (its `repack_x86::select`: `k` whole 256-value
/// super-blocks, `n` whole tiles of 16 rows, and for Q8_0 a CPU with
/// AVX-512 VNNI or AVX-VNNI). Its repacked Q8_0 was 2× faster than this
/// module's at the 4B FFN and 1536-wide shapes (prefill and decode), while
/// at SmolLM2's 576-wide output head, which candle does not repack, this
/// module's prefill was 2.3× candle's; a default Q8_0 matrix still stays
/// with this module, for its rounding ([`candle_repack_rounds_as_llama`]).
pub fn candle_repacks(dtype: GgmlDType, n: usize, k: usize) -> bool {
    const TILE_N: usize = 16;
    const QK_K: usize = 256;
    if k == 0 || n % TILE_N != 0 || k % QK_K != 0 {
        return false;
    }
    match dtype {
        GgmlDType::Q4K | GgmlDType::Q6K => true,
        #[cfg(target_arch = "x86_64")]
        GgmlDType::Q8_0 => {
            is_x86_feature_detected!("avxvnni")
                || (is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni"))
        }
        _ => false,
    }
}

/// Bytes candle 0.11.1 adds to a `[n, k]` CPU matrix of `dtype` that it
/// multiplies itself: its x86 kernels keep the file's blocks *and* build
/// repacked copies, lazily, on the first product that takes them
/// (`repack_x86::select` and `repack::try_matmul_f32`), and never free
/// either. Q4_K: a 16-row tile copy for products of fewer than 32 rows
/// (decode; 3,072 bytes per 16 rows × 256 values, 192 per super-block,
/// against the file's 144) and, on a CPU with AMX, an AMX tile copy for 32
/// rows and more (prefill; 5,120 per tile, 320 per super-block). Q6_K: a
/// tile copy for products of more than one row (5,120 per tile, 320 per
/// super-block, against 210). Q8_0 on an AVX-VNNI or AVX-512 VNNI CPU: a
/// tile copy of the same size as the blocks (544 bytes per 16 blocks).
/// These are the copies a society run makes (prompts of ≥ 32 tokens,
/// batched decode); a workload that never triggers one holds less.
pub fn candle_repack_bytes(dtype: GgmlDType, n: usize, k: usize) -> u64 {
    const TILE_N: usize = 16;
    const QK_K: usize = 256;
    if k == 0 || n % TILE_N != 0 || k % QK_K != 0 {
        return 0;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni");
        let vnni =
            avx512 || (is_x86_feature_detected!("avxvnni") && is_x86_feature_detected!("avx2"));
        let avx2 = vnni || (is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"));
        if !avx2 {
            return 0;
        }
        let tiles = (n / TILE_N) as u64;
        let supers = (k / QK_K) as u64;
        match dtype {
            GgmlDType::Q4K => {
                let amx = if avx512 && cpu_has_amx_int8() {
                    5120
                } else {
                    0
                };
                tiles * supers * (3072 + amx)
            }
            GgmlDType::Q6K => tiles * supers * 5120,
            GgmlDType::Q8_0 if vnni => tiles * (k / BLOCK) as u64 * 544,
            _ => 0,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = dtype;
        0
    }
}

/// [`candle_repack_bytes`] for the candle half of a [`SplitMatmul`]: candle
/// multiplies only segments of more than [`SPLIT_ROWS`] rows there, padded
/// to [`split::CANDLE_AMX_ROWS`] rows on an AMX CPU (`split_forward_many`),
/// so a Q4_K matrix gets the AMX tile copy alone, never the decode one.
pub fn candle_split_repack_bytes(dtype: GgmlDType, n: usize, k: usize) -> u64 {
    let all = candle_repack_bytes(dtype, n, k);
    #[cfg(target_arch = "x86_64")]
    if dtype == GgmlDType::Q4K && split::pads_for_amx() {
        // 3,072 decode + 5,120 AMX bytes per tile and super-block: the AMX part.
        return all / (3072 + 5120) * 5120;
    }
    all
}

/// Whether the CPU has AMX tiles and int8 (CPUID leaf 7, EDX bits 24, 25),
/// which candle's Q4_K prefill path uses on Linux.
#[cfg(target_arch = "x86_64")]
pub(crate) fn cpu_has_amx_int8() -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    // SAFETY: CPUID is available on every x86_64 CPU.
    #[allow(unused_unsafe)]
    let info = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
    info.edx & (1 << 25) != 0 && info.edx & (1 << 24) != 0
}

/// Every type this module can multiply.
pub const ALL_TYPES: [GgmlDType; 10] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::F16,
    GgmlDType::BF16,
];

/// The types a [`TYPES_ENV`] value names, or `None` when it names none
/// (unset, empty or [`SPLIT_SPEC`]: the default rule of [`choose`]).
pub fn kernel_types(spec: Option<&str>) -> Result<Option<Vec<GgmlDType>>> {
    let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if split_requested(Some(spec)) {
        return Ok(None);
    }
    if spec.eq_ignore_ascii_case("all") {
        return Ok(Some(ALL_TYPES.to_vec()));
    }
    spec.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            ALL_TYPES
                .into_iter()
                .find(|&d| ggml_name(d).is_some_and(|n| n.eq_ignore_ascii_case(t)))
                .ok_or_else(|| {
                    let names: Vec<&str> = ALL_TYPES.iter().filter_map(|&d| ggml_name(d)).collect();
                    anyhow::anyhow!(
                        "{TYPES_ENV}={spec:?}: {t:?} is not a type Joule's CPU kernels have \
                         (expected `all`, `{SPLIT_SPEC}` or a comma-separated list of {})",
                        names.join(", ")
                    )
                })
        })
        .collect::<Result<_>>()
        .map(Some)
}

/// Whose kernel multiplies a loaded matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Joule's, at every row count.
    Joule,
    /// candle's, at every row count.
    Candle,
    /// Joule's for segments (the rows one sequence feeds in a step) of up to
    /// [`split::SPLIT_ROWS`] rows, candle's for longer ones ([`split`]).
    Split,
}

/// The types that are [`Choice::Split`] where candle repacks them and [`TYPES_ENV`] is
/// [`SPLIT_SPEC`]: Joule's super-block kernels for decode, candle's repacked (and AMX) tiles
/// for prompts, which were faster until Joule's AVX-512 VNNI prompt path (with it,
/// Joule's default beats the split at prompts too; benches/RESULTS.md). Not the default:
/// a split matrix is held by both (Joule's copy, and candle's file blocks with its repacked
/// copies, together about 5.5× a Q4_K_M file), too much for a roster of five models.
pub const SPLIT_TYPES: [GgmlDType; 2] = [GgmlDType::Q4K, GgmlDType::Q6K];

/// The [`TYPES_ENV`] value that asks for the split of [`SPLIT_TYPES`] (the default for
/// every other type).
pub const SPLIT_SPEC: &str = "split";

/// Whether a [`TYPES_ENV`] value asks for [`SPLIT_SPEC`].
pub fn split_requested(spec: Option<&str>) -> bool {
    spec.is_some_and(|s| s.trim().eq_ignore_ascii_case(SPLIT_SPEC))
}

/// The kernel of a `[n, k]` matrix of `dtype` when [`TYPES_ENV`] is `spec`: a type it
/// names is Joule's at every row count and one it leaves out candle's; unset, a type of
/// [`DEFAULT_TYPES`] is Joule's unless [`leaves_to_candle`], a type of [`SPLIT_TYPES`] is
/// Joule's (one copy of the weights: candle 0.11 keeps the file's blocks and its repacked
/// copies, about 4.5× a Q4_K_M file's size), anything else candle's. [`SPLIT_SPEC`] is the
/// default except that a [`SPLIT_TYPES`] matrix candle repacks is split by rows.
pub fn choose(spec: Option<&str>, dtype: GgmlDType, n: usize, k: usize) -> Result<Choice> {
    let split = split_requested(spec);
    Ok(match kernel_types(spec)? {
        Some(types) if types.contains(&dtype) => Choice::Joule,
        Some(_) => Choice::Candle,
        None if SPLIT_TYPES.contains(&dtype) => match (candle_repacks(dtype, n, k), split) {
            (true, true) => Choice::Split,
            _ => Choice::Joule,
        },
        None if DEFAULT_TYPES.contains(&dtype) && !leaves_to_candle(dtype, n, k) => Choice::Joule,
        None => Choice::Candle,
    })
}

/// [`choose`] with [`TYPES_ENV`] as it is set now.
pub fn choice(dtype: GgmlDType, n: usize, k: usize) -> Result<Choice> {
    choose(crate::knobs::cpu_kernel_types().as_deref(), dtype, n, k)
}

/// This module's matrix for a GGUF tensor of `dtype` when [`choice`] gives it to
/// Joule's kernel at every row count, or `None` (a matrix it leaves to candle, or
/// splits with candle: [`choice`]).
pub fn cpu_matrix(
    dtype: GgmlDType,
    bytes: &[u8],
    n: usize,
    k: usize,
) -> Option<Result<Box<dyn CpuMatmul>>> {
    match choice(dtype, n, k) {
        Ok(Choice::Joule) => cpu_matrix_of(dtype, bytes, n, k),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    }
}

/// Whether [`choose`] gives a `[n, k]` matrix of `dtype` to Joule's kernel at every
/// row count when [`TYPES_ENV`] is `spec`.
pub fn takes(spec: Option<&str>, dtype: GgmlDType, n: usize, k: usize) -> Result<bool> {
    Ok(choose(spec, dtype, n, k)? == Choice::Joule)
}

/// Whether a matrix of a default type is left to candle: candle repacks it
/// ([`candle_repacks`]) and its repacked kernel rounds the activations as
/// llama.cpp does for that type ([`candle_repack_rounds_as_llama`]).
pub fn leaves_to_candle(dtype: GgmlDType, n: usize, k: usize) -> bool {
    candle_repacks(dtype, n, k) && candle_repack_rounds_as_llama(dtype)
}

/// Whether candle 0.11.1's repacked x86 kernel for `dtype` quantises the
/// activations the way llama.cpp's CPU backend does for that weight type.
/// For Q4_K and Q6_K it does (both: 256-value q8_K blocks). For Q8_0 it does
/// not: candle quantises the activations of its repacked Q8_0 in 256-value
/// q8_K blocks (one scale per 256 values), llama.cpp in 32-value q8_0 blocks
/// (one scale per 32, as [`Acts`] does), so an activation block with one
/// large value loses the precision of the other 255. On a synthesized
/// real-width Qwen3.5-4B Q8_0 file (`tests/full/synth_vs_llama.rs`)
/// that rounding alone made the mean KL against llama.cpp 0.009 instead of
/// 0.0007. So Q8_0 stays with this module whatever its shape, although
/// candle's repacked Q8_0 was about 2× faster at 4B shapes (see
/// [`candle_repacks`]); naming types in [`TYPES_ENV`] without Q8_0 gives
/// Q8_0 back to candle.
pub fn candle_repack_rounds_as_llama(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q4K | GgmlDType::Q6K)
}

/// [`cpu_matrix`] for any type this module has, whatever [`TYPES_ENV`] says.
pub fn cpu_matrix_of(
    dtype: GgmlDType,
    bytes: &[u8],
    n: usize,
    k: usize,
) -> Option<Result<Box<dyn CpuMatmul>>> {
    matrix_from(dtype, &source::RowSource::Bytes(bytes), n, k, false)
}

/// [`cpu_matrix_of`] for a matrix whose bytes are read as it is built (a model load:
/// [`source::RowSource::Read`]): every type Joule multiplies converts its rows as they
/// are read, so the tensor is never whole in memory beside its matrix; `None` for the
/// others (the caller reads the tensor whole).
pub fn cpu_matrix_read(
    dtype: GgmlDType,
    read: &source::ReadAt<'_>,
    n: usize,
    k: usize,
) -> Option<Result<Box<dyn CpuMatmul>>> {
    matrix_from(dtype, &source::RowSource::Read(read), n, k, false)
}

/// The row-major form of a matrix of a type this module has (what a CPU without AVX-512
/// VNNI runs), whatever this CPU would choose: to compare it with the form [`cpu_matrix_of`]
/// gives (`benches/quant_matmul.rs`).
pub fn cpu_matrix_row_major(
    dtype: GgmlDType,
    bytes: &[u8],
    n: usize,
    k: usize,
) -> Option<Result<Box<dyn CpuMatmul>>> {
    matrix_from(dtype, &source::RowSource::Bytes(bytes), n, k, true)
}

/// The matrix of a `[n, k]` tensor of `dtype` whose GGUF bytes `src` hands over, in the
/// form this CPU multiplies fastest ([`q_matrix`], [`k_matrix`]) or, with `row_major`, row
/// major; `None` for a type this module does not have. A wrong byte count names the type,
/// the shape and the bytes it needs.
fn matrix_from(
    dtype: GgmlDType,
    src: &source::RowSource<'_>,
    n: usize,
    k: usize,
    row_major: bool,
) -> Option<Result<Box<dyn CpuMatmul>>> {
    type Built = Result<Box<dyn CpuMatmul>>;
    fn rows<B: WeightBlock>(src: &source::RowSource<'_>, n: usize, k: usize) -> Built {
        let m = QuantMatrix::<B>::from_source(src, n, k)
            .with_context(|| format!("{} tensor [{n}, {k}]", B::NAME))?;
        Ok(Box::new(m))
    }
    fn lanes<B: LaneBlock>(src: &source::RowSource<'_>, n: usize, k: usize, rm: bool) -> Built {
        if rm {
            rows::<B>(src, n, k)
        } else {
            q_matrix::<B>(src, n, k)
        }
    }
    fn supers<B: kquants::KBlock>(
        src: &source::RowSource<'_>,
        n: usize,
        k: usize,
        rm: bool,
    ) -> Built {
        if !rm {
            return k_matrix::<B>(src, n, k);
        }
        let m = kquants::KMatrix::<B>::from_source(src, n, k)
            .with_context(|| format!("{} tensor [{n}, {k}]", B::NAME))?;
        Ok(Box::new(m))
    }
    fn halves<H: floats::HalfType>(src: &source::RowSource<'_>, n: usize, k: usize) -> Built {
        Ok(Box::new(floats::FloatMatrix::<H>::from_source(src, n, k)?))
    }
    Some(match dtype {
        GgmlDType::Q4_0 => lanes::<BlockQ40>(src, n, k, row_major),
        GgmlDType::Q4_1 => rows::<BlockQ41>(src, n, k),
        GgmlDType::Q5_0 => lanes::<BlockQ50>(src, n, k, row_major),
        GgmlDType::Q5_1 => rows::<BlockQ51>(src, n, k),
        GgmlDType::Q8_0 => lanes::<BlockQ80>(src, n, k, row_major),
        GgmlDType::Q4K => supers::<kquants::KQ4>(src, n, k, row_major),
        GgmlDType::Q5K => supers::<kquants::KQ5>(src, n, k, row_major),
        GgmlDType::Q6K => supers::<kquants::KQ6>(src, n, k, row_major),
        GgmlDType::F16 => halves::<floats::F16>(src, n, k),
        GgmlDType::BF16 => halves::<floats::Bf16>(src, n, k),
        _ => return None,
    })
}

/// A k-quant matrix as this CPU multiplies it fastest: with AVX-512 VNNI with its rows in
/// lanes ([`x86::klanes512::KLanes`], the same bits), else row major ([`kquants::KMatrix`]). Q6_K goes in lanes only where the CPU also has GFNI (its six-bit values
/// unpack with `vgf2p8affineqb`); elsewhere it stays row-major. On a 2-vCPU AVX-512 EPYC,
/// one thread, per 12,288 × 4,096 product, best of 12 on a shared machine: Q6_K in lanes
/// 2.29 ms against 4.01 row-major for one activation row, 5.49 against 7.34 for 5, 11.1
/// against 13.0 for 16; Q4_K 1.59 against 3.20, Q5_K 2.16 against 3.68.
///
/// Built straight from the GGUF rows (`KLanes::from_source`): the row-major matrix is never
/// held whole beside the lanes.
fn k_matrix<B: kquants::KBlock>(
    src: &source::RowSource<'_>,
    n: usize,
    k: usize,
) -> Result<Box<dyn CpuMatmul>> {
    #[cfg(target_arch = "x86_64")]
    {
        let simd = Simd::detect()?;
        if x86::klanes512::available::<B>(simd) {
            let lanes = x86::klanes512::KLanes::<B>::from_source(src, n, k, simd)
                .with_context(|| format!("{} tensor [{n}, {k}]", B::NAME))?;
            return Ok(Box::new(lanes));
        }
    }
    let rows = kquants::KMatrix::<B>::from_source(src, n, k)
        .with_context(|| format!("{} tensor [{n}, {k}]", B::NAME))?;
    Ok(Box::new(rows))
}

/// How a matrix of `dtype` is held and multiplied when Joule's kernel takes it on a CPU
/// running `simd` ([`q_matrix`], [`k_matrix`]): `rows in lanes (AVX-512 VNNI)` for Q4_0,
/// Q5_0, Q8_0, Q4_K, Q5_K (and Q6_K where the CPU has GFNI), `row major` for the other
/// block types, `16-bit rows` for F16/BF16; `None` for a type this module does not have.
pub fn cpu_form(dtype: GgmlDType, simd: Simd) -> Option<&'static str> {
    const LANES: &str = "rows in lanes (AVX-512 VNNI)";
    #[cfg(target_arch = "x86_64")]
    let lanes = match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q5_0 | GgmlDType::Q8_0 => x86::qlanes512::available(simd),
        GgmlDType::Q4K => x86::klanes512::available::<kquants::KQ4>(simd),
        GgmlDType::Q5K => x86::klanes512::available::<kquants::KQ5>(simd),
        GgmlDType::Q6K => x86::klanes512::available::<kquants::KQ6>(simd),
        _ => false,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = {
        let _ = simd;
        false
    };
    match dtype {
        _ if lanes => Some(LANES),
        GgmlDType::F16 | GgmlDType::BF16 => Some("16-bit rows"),
        t if ALL_TYPES.contains(&t) => Some("row major"),
        _ => None,
    }
}

/// A Q4_0, Q5_0 or Q8_0 matrix as this CPU multiplies it fastest: with AVX-512 VNNI with
/// its rows in lanes ([`x86::qlanes512::QLanes`]: a block's exact integer sum, then one
/// fused multiply-add per block; built straight from the GGUF rows), else row major
/// ([`QuantMatrix`]). Measured with `cargo bench --bench quant_matmul -- T forms`.
fn q_matrix<B: LaneBlock>(
    src: &source::RowSource<'_>,
    n: usize,
    k: usize,
) -> Result<Box<dyn CpuMatmul>> {
    #[cfg(target_arch = "x86_64")]
    {
        let simd = Simd::detect()?;
        if x86::qlanes512::available(simd) {
            let lanes = x86::qlanes512::QLanes::<B>::from_source(src, n, k, simd)
                .with_context(|| format!("{} tensor [{n}, {k}]", B::NAME))?;
            return Ok(Box::new(lanes));
        }
    }
    let rows = QuantMatrix::<B>::from_source(src, n, k)
        .with_context(|| format!("{} tensor [{n}, {k}]", B::NAME))?;
    Ok(Box::new(rows))
}

mod acts;
mod blocks;
mod dispatch;
pub(crate) mod floats;
pub(crate) mod kquants;
pub mod source;
pub mod split;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use acts::padded;
pub use acts::Acts;
pub(crate) use blocks::*;
pub use split::{segments, split_forward_many, SplitMatmul, SPLIT_ROWS};

/// A `[n, k]` weight of block type `B` ready for [`CpuMatmul::matmul`].
#[derive(Clone)]
pub(crate) struct QuantMatrix<B: WeightBlock> {
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// 32-value blocks per row, and that rounded up to whole groups.
    pub(crate) kb: usize,
    pub(crate) kbp: usize,
    /// `n·kb` payloads, row major.
    pub(crate) ints: crate::inference::kernels::weight_memory::WeightVec<B::Ints>,
    /// `n·kbp/GROUP` group scales, row major (zero in the padding).
    pub(crate) scales: crate::inference::kernels::weight_memory::WeightVec<B::Scales>,
    /// The dot-product implementation, chosen for this CPU at load.
    pub(crate) simd: Simd,
    pub(crate) _block: PhantomData<B>,
}

impl<B: WeightBlock> Debug for QuantMatrix<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "QuantMatrix<{}>[{}, {}] ({:?})",
            B::NAME,
            self.n,
            self.k,
            self.simd
        )
    }
}

#[cfg(test)]
/// The default model's type, by its old name.
pub(crate) type Q41Matrix = QuantMatrix<BlockQ41>;

impl<B: WeightBlock> QuantMatrix<B> {
    /// Build from GGUF block bytes of a `[n, k]` tensor (row major).
    #[cfg(test)]
    pub fn from_gguf_bytes(bytes: &[u8], n: usize, k: usize) -> Result<Self> {
        Self::check_k(k)?;
        let need = n * (k / B::VALUES) * B::BYTES;
        if bytes.len() != need {
            bail!(
                "{} tensor [{n}, {k}] needs {need} bytes, got {}",
                B::NAME,
                bytes.len()
            );
        }
        Self::from_source(&source::RowSource::Bytes(bytes), n, k)
    }

    fn check_k(k: usize) -> Result<()> {
        if k == 0 || k % B::VALUES != 0 {
            bail!(
                "{} rows of {k} values are not whole blocks of {}",
                B::NAME,
                B::VALUES
            );
        }
        Ok(())
    }

    /// Build from the GGUF block bytes of a `[n, k]` tensor (row major) as `src` hands
    /// them over, rows converted in pieces on the worker pool: read from a file
    /// ([`source::RowSource::Read`]), the tensor is never whole in memory beside the
    /// matrix (a model load holds the file's bytes once).
    pub fn from_source(src: &source::RowSource<'_>, n: usize, k: usize) -> Result<Self> {
        Self::check_k(k)?;
        let kb = k / BLOCK;
        let kbp = padded(kb);
        let per_row = k / B::VALUES;
        let row_bytes = per_row * B::BYTES;
        let groups = kbp / GROUP;
        let sub = B::VALUES / BLOCK;
        let mut ints =
            crate::inference::kernels::weight_memory::WeightVec::<B::Ints>::with_capacity(n * kb);
        let mut scales =
            crate::inference::kernels::weight_memory::WeightVec::<B::Scales>::with_capacity(
                n * groups,
            );
        let (ints_at, scales_at) = (source::Slots::of(&mut ints), source::Slots::of(&mut scales));
        source::for_row_pieces(src, n, row_bytes, |r0, bytes| {
            let mut row_ints: Vec<B::Ints> = Vec::with_capacity(kb);
            let mut row_scales = vec![B::Scales::default(); groups];
            for (i, row) in bytes.chunks_exact(row_bytes).enumerate() {
                row_ints.clear();
                row_scales.fill(B::Scales::default());
                for (c, block) in row.chunks_exact(B::BYTES).enumerate() {
                    // The first 32-value block of GGUF block c, within its row.
                    let b = c * sub;
                    B::parse(block, b % GROUP, &mut row_scales[b / GROUP], &mut row_ints);
                }
                let j = r0 + i;
                // SAFETY: the piece's rows are its own: payloads j·kb .. + kb and groups
                // j·groups .. + groups, below the capacities n·kb and n·groups.
                unsafe {
                    for (t, x) in row_ints.iter().enumerate() {
                        ints_at.put(j * kb + t, *x);
                    }
                    for (g, x) in row_scales.iter().enumerate() {
                        scales_at.put(j * groups + g, *x);
                    }
                }
            }
        })?;
        // SAFETY: `for_row_pieces` returned Ok: every row's payloads and groups were written
        // (`parse` pushes `sub` payloads per GGUF block: kb per row).
        unsafe {
            ints.set_len(n * kb);
            scales.set_len(n * groups);
        }
        Ok(Self {
            n,
            k,
            kb,
            kbp,
            ints,
            scales,
            simd: Simd::detect()?,
            _block: PhantomData,
        })
    }

    #[cfg(test)]
    fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd;
        self
    }

    /// The scales of the group holding block `b` of row `j`.
    fn group(&self, j: usize, b: usize) -> &B::Scales {
        &self.scales[j * (self.kbp / GROUP) + b / GROUP]
    }

    /// `(d, m)` of block `b` of row `j`.
    fn dm_at(&self, j: usize, b: usize) -> (f32, f32) {
        self.group(j, b).block(b % GROUP)
    }

    #[cfg(test)]
    /// `y = x · Wᵀ` (see [`matmul`]).
    pub fn matmul(&self, x: &[f32]) -> Result<Vec<f32>> {
        matmul(self, x)
    }
}

impl<B: WeightBlock> Tiles for QuantMatrix<B> {
    fn dot_tiles<const W: usize, const N: usize>(
        &self,
        js: [usize; W],
        acts: &Acts,
        rows: [usize; N],
    ) -> [[f32; N]; W] {
        match self.simd {
            Simd::Portable => std::array::from_fn(|w| {
                std::array::from_fn(|i| self.dot_portable(js[w], acts, rows[i]))
            }),
            // SAFETY: `detect` checked that the CPU has AVX2, FMA and F16C;
            // `run_chunk`'s caller guarantees the rows exist.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { x86::avx2::dot_tile(self, js, acts, rows) },
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::AvxVnni => unsafe { x86::avx2::dot_tile_vnni(self, js, acts, rows) },
            // SAFETY: `detect` checked AVX2, FMA, F16C and AVX-512 F, BW, VNNI.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512Vnni => unsafe { x86::avx512::dot_tile_512(self, js, acts, rows) },
        }
    }
}

impl<B: WeightBlock> QuantMatrix<B> {
    fn dot_portable(&self, j: usize, a: &Acts, r: usize) -> f32 {
        let mut acc = 0f32;
        for b in 0..self.kb {
            let q = &self.ints[j * self.kb + b];
            let x = &a.qs[r * a.kb + b].0;
            let ints = q.ints();
            let isum = |v: Range<usize>| -> i32 { v.map(|i| ints[i] * i32::from(x[i])).sum() };
            let (d, m) = self.dm_at(j, b);
            let d8 = a.d[r * a.kbp + b];
            if <B::Scales as GroupScales>::SPLIT {
                let dh = self.group(j, b).high_d(b % GROUP);
                acc += d * d8 * isum(0..16) as f32 + dh * d8 * isum(16..32) as f32;
            } else {
                let s = a.sums(<B::Scales as GroupScales>::OWN_M)[r * a.kbp + b];
                acc += d * d8 * isum(0..BLOCK) as f32 + m * s;
            }
        }
        acc
    }
}

impl<B: WeightBlock> CpuMatmul for QuantMatrix<B> {
    fn n(&self) -> usize {
        self.n
    }

    fn resident_bytes(&self) -> u64 {
        (self.ints.capacity() * std::mem::size_of::<B::Ints>()
            + self.scales.capacity() * std::mem::size_of::<B::Scales>()) as u64
    }

    fn k(&self) -> usize {
        self.k
    }

    fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n * self.k);
        for j in 0..self.n {
            for b in 0..self.kb {
                let (d, m) = self.dm_at(j, b);
                let dh = self.group(j, b).high_d(b % GROUP);
                out.extend(
                    self.ints[j * self.kb + b]
                        .ints()
                        .iter()
                        .enumerate()
                        .map(|(i, &q)| if i < 16 { d } else { dh } * q as f32 + m),
                );
            }
        }
        out
    }

    unsafe fn run_chunk(&self, acts: &Acts, rows: Range<usize>, js: Range<usize>, y: *mut f32) {
        debug_assert!(acts.kb == self.kb && rows.end <= acts.rows());
        // SAFETY: as the caller guarantees.
        unsafe { run_tiles(self, self.n, rows, js, acts, y) }
    }
}

/// A matrix whose dot products come in tiles of `W` weight rows by `N` activation rows.
pub(crate) trait Tiles {
    /// Dot products of weight rows `js` with activation rows `rows` of `acts`; a pair's
    /// result is the same bits whatever the tile's shape.
    fn dot_tiles<const W: usize, const N: usize>(
        &self,
        js: [usize; W],
        acts: &Acts,
        rows: [usize; N],
    ) -> [[f32; N]; W];
}

/// [`CpuMatmul::run_chunk`] for a [`Tiles`] matrix of `n` rows: two weight rows at a
/// time (each activation block loaded once for both), each against up to [`ROW_TILE`]
/// activation rows.
///
/// # Safety
/// As [`CpuMatmul::run_chunk`].
unsafe fn run_tiles<T: Tiles>(
    t: &T,
    n: usize,
    rows: Range<usize>,
    js: Range<usize>,
    acts: &Acts,
    y: *mut f32,
) {
    // SAFETY: the caller owns y[r, j] for these rows and weight rows.
    let put = |r: usize, j: usize, v: f32| unsafe { *y.add(r * n + j) = v };
    let mut j = js.start;
    while j < js.end {
        let two = j + 1 < js.end;
        let mut r = rows.start;
        while r + ROW_TILE <= rows.end {
            let a: [usize; ROW_TILE] = std::array::from_fn(|i| r + i);
            if two {
                let d = t.dot_tiles::<2, ROW_TILE>([j, j + 1], acts, a);
                for (w, dw) in d.iter().enumerate() {
                    dw.iter()
                        .enumerate()
                        .for_each(|(i, &v)| put(r + i, j + w, v));
                }
            } else {
                let d = t.dot_tiles::<1, ROW_TILE>([j], acts, a);
                d[0].iter().enumerate().for_each(|(i, &v)| put(r + i, j, v));
            }
            r += ROW_TILE;
        }
        while r + 2 <= rows.end {
            if two {
                let d = t.dot_tiles::<2, 2>([j, j + 1], acts, [r, r + 1]);
                for (w, dw) in d.iter().enumerate() {
                    put(r, j + w, dw[0]);
                    put(r + 1, j + w, dw[1]);
                }
            } else {
                let d = t.dot_tiles::<1, 2>([j], acts, [r, r + 1]);
                put(r, j, d[0][0]);
                put(r + 1, j, d[0][1]);
            }
            r += 2;
        }
        if r < rows.end {
            if two {
                let d = t.dot_tiles::<2, 1>([j, j + 1], acts, [r]);
                put(r, j, d[0][0]);
                put(r, j + 1, d[1][0]);
            } else {
                put(r, j, t.dot_tiles::<1, 1>([j], acts, [r])[0][0]);
            }
        }
        j += if two { 2 } else { 1 };
    }
}

/// A raw output pointer shared by the pool's workers (each writes its own rows).
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: workers write disjoint ranges; see `matmul_many` and `Acts::quantize`.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// The environment variable that picks a kernel by [`Simd::name`]
/// (`crate::knobs::SIMD`).
pub const SIMD_ENV: &str = crate::knobs::SIMD.name;

/// Which dot-product implementation the CPU supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// Two blocks per 512-bit register, one VNNI instruction per pair.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

impl Simd {
    /// Every implementation this CPU can run, slowest first.
    pub fn available() -> Vec<Self> {
        #[allow(unused_mut)]
        let mut paths = vec![Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                paths.push(Simd::Avx2);
                if is_x86_feature_detected!("avxvnni") {
                    paths.push(Simd::AvxVnni);
                }
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
                {
                    paths.push(Simd::Avx512Vnni);
                }
            }
        }
        paths
    }

    /// The name `JOULE_SIMD` takes for this implementation.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Simd::AvxVnni => "avxvnni",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512Vnni => "avx512vnni",
        }
    }

    /// The fastest implementation this CPU can run, or the one the
    /// environment variable [`SIMD_ENV`] names (to compare paths on one
    /// machine); a name this CPU cannot run is an error.
    pub fn detect() -> Result<Self> {
        Self::chosen(crate::knobs::simd().as_deref())
    }

    /// The implementation `name` names (unset or empty: the fastest).
    pub fn chosen(name: Option<&str>) -> Result<Self> {
        let available = Self::available();
        match name {
            Some(name) if !name.is_empty() => available
                .iter()
                .copied()
                .find(|s| s.name() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = available.iter().map(|s| s.name()).collect();
                    anyhow::anyhow!(
                        "{SIMD_ENV}={name:?}: expected one of {} (the kernels this CPU can run)",
                        names.join(", ")
                    )
                }),
            _ => Ok(available.last().copied().unwrap_or(Simd::Portable)),
        }
    }
}

/// Random GGUF bytes of an `[n, k]` matrix of `dtype`, with each block's scales small enough
/// that products stay finite (the quantised values themselves are random bits): the inputs of
/// `joule bench matmul` and `benches/quant_matmul.rs`.
pub fn random_matrix(rng: &mut impl rand::Rng, dtype: GgmlDType, n: usize, k: usize) -> Vec<u8> {
    let (values, block_bytes) = (dtype.block_size(), dtype.type_size());
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    let blocks = n * k / values;
    let mut out = Vec::with_capacity(blocks * block_bytes);
    for _ in 0..blocks {
        let mut b: Vec<u8> = (0..block_bytes).map(|_| rng.gen()).collect();
        match dtype {
            GgmlDType::F32 => {
                b = rng.gen_range(-0.05f32..0.05).to_le_bytes().to_vec();
            }
            GgmlDType::F16 => b = f16(rng.gen_range(-0.05f32..0.05)).to_vec(),
            GgmlDType::BF16 => {
                b = half::bf16::from_f32(rng.gen_range(-0.05f32..0.05))
                    .to_le_bytes()
                    .to_vec()
            }
            GgmlDType::Q4_1 | GgmlDType::Q5_1 => {
                b[..2].copy_from_slice(&f16(rng.gen_range(0.001..0.05)));
                b[2..4].copy_from_slice(&f16(-0.1));
            }
            GgmlDType::Q4K | GgmlDType::Q5K => {
                b[..2].copy_from_slice(&f16(rng.gen_range(0.0001..0.002)));
                b[2..4].copy_from_slice(&f16(0.002));
            }
            GgmlDType::Q6K => b[208..210].copy_from_slice(&f16(rng.gen_range(0.0001..0.001))),
            _ => b[..2].copy_from_slice(&f16(rng.gen_range(0.001..0.05))),
        }
        out.extend_from_slice(&b);
    }
    out
}

/// Whether decode's k-quant kernels in lanes take a work item's 16-row groups two at a time
/// (two streams of weights per thread; on by default, where it pays: `klanes512::Pairing`).
/// The results are the same bits either way: for benchmarks that compare the two orders.
/// Other architectures have one order only, so this does nothing there.
pub fn set_paired_streams(on: bool) {
    #[cfg(target_arch = "x86_64")]
    x86::klanes512::PAIRED.store(on, std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = on;
}
