//! Speed of Joule's CPU quantised matrix products (`inference::quant_matmul`)
//! on random weights, for every type the module has (whether or not
//! `JOULE_CPU_KERNEL_TYPES` gives it to Joule's kernels by default), beside
//! candle's own quantised matmul on the same bytes: one activation row
//! (decode: bound by reading the weights, reported in GB/s of weight bytes)
//! and 64 rows (prefill: reported in GMAC/s), at SmolLM2's output head, a
//! matrix that fits in L2/L3, and a 4B model's FFN projection.
//! Run: `cargo bench --bench quant_matmul [-- THREADS [TYPE]]` (prints timings;
//! asserts nothing about speed).
//!
//! `cargo bench --bench quant_matmul -- THREADS rows [TYPE] [REPS]` instead prints the
//! kernel crossover table: Q4_K and Q6_K (or TYPE) at Qwen3-8B's real
//! widths (`[n, k]` = 4096×4096 q/o, 12288×4096 gate/up, 4096×12288 down, 151936×4096
//! output head), Joule's k-quant kernel against candle's repacked one for 1 to 64
//! activation rows, as µs per call and Joule's speed over candle's (the row count from
//! which candle wins is where `quant_matmul::SPLIT_ROWS` should sit). THREADS sets candle's worker pool
//! (`RAYON_NUM_THREADS`), default all cores; `JOULE_SIMD` picks Joule's
//! kernel (`portable`, `avx2`, `avxvnni`, `avx512vnni`).
//!
//! `cargo bench --bench quant_matmul -- THREADS forms [TYPE] [ROUNDS]` compares the form
//! this CPU loads (rows in lanes with AVX-512 VNNI) with the row-major form of the same
//! bytes (`quant_matmul::cpu_matrix_row_major`) at Nemotron-3-Nano-4B's real widths, for
//! Q5_0 and Q8_0 (llama-quantize's fallbacks in its Q4_K_M file) or TYPE, at 1, 5 and 16
//! activation rows: the two forms alternate call by call (this VM's separate runs differ
//! ±20 %), and the table gives the best µs per call of each and the decode GB/s of weights.
//!
//! `cargo bench --bench quant_matmul -- THREADS stream [TYPE] [ROUNDS]` puts the kernel beside
//! the machine's limit: Q4_K and Q6_K (or TYPE) at Gemma 4 E4B's and Qwen3-8B's decode shapes,
//! each in enough copies to pass the last-level cache (a model's step reads every matrix
//! from memory), one activation row, against a plain streaming read of the same bytes on the
//! same threads, alternating; best of ROUNDS passes (default 5).
//!
//! `cargo bench --bench quant_matmul -- THREADS pairs [TYPE] [ROUNDS]` times the same stream
//! shapes with decode's groups one after another and two at a time (two streams of weights per
//! thread, `quant_matmul::set_paired_streams`), alternating, and prints the median ratio.
//!
//! `cargo bench --bench quant_matmul -- THREADS hot TYPE N K ROWS CALLS` times the arithmetic
//! alone: one `[N, K]` matrix small enough to stay in the caches, ROWS activation rows (TYPE
//! any of the module's types by its `GgmlDType` name: Q4K, Q6K, Q5_0, F16, …).

use std::borrow::Cow;
use std::time::Instant;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{Module, Tensor};
use joule::inference::kernels::memory_read::{read_buffer, read_pass};
use joule::inference::kernels::quant_matmul::{
    cpu_matrix_of, cpu_matrix_row_major, matmul, ALL_TYPES,
};
use joule::inference::kernels::weight_memory::process_huge_bytes;
use rand::{Rng, SeedableRng};

/// Random GGUF bytes of an `[n, k]` matrix (`quant_matmul::random_matrix`).
fn random_tensor(rng: &mut impl Rng, n: usize, k: usize, dtype: GgmlDType) -> Vec<u8> {
    joule::inference::kernels::quant_matmul::random_matrix(rng, dtype, n, k)
}

/// Seconds per call of `f`, the mean of `reps` calls after one warm-up.
fn time(reps: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    f()?;
    let t = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

fn main() -> anyhow::Result<()> {
    // cargo adds `--bench`; the positional arguments are THREADS and TYPE.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let Some(t) = args.first().filter(|a| a.parse::<usize>().is_ok()) {
        std::env::set_var("RAYON_NUM_THREADS", t);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    if args.get(1).map(String::as_str) == Some("rows") {
        return rows(&mut rng, args.get(2), args.get(3));
    }
    if args.get(1).map(String::as_str) == Some("forms") {
        return forms(&mut rng, args.get(2), args.get(3));
    }
    if args.get(1).map(String::as_str) == Some("hot") {
        return hot(&mut rng, &args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("stream") {
        return stream(&mut rng, args.get(2), args.get(3));
    }
    if args.get(1).map(String::as_str) == Some("pairs") {
        return pairs(&mut rng, args.get(2), args.get(3));
    }
    if args.get(1).map(String::as_str) == Some("pages") {
        return pages(&mut rng, args.get(2), args.get(3));
    }
    // SmolLM2's output head (larger than the caches), a matrix that fits in
    // L2/L3, and a 4B model's FFN projection (rows of whole 256-value blocks).
    let shapes = [
        ("49152x576 (head)", 49152, 576),
        ("1536x1536", 1536, 1536),
        ("9728x2560 (4B FFN)", 9728, 2560),
    ];
    println!(
        "| type | matrix | MB | decode GB/s | prefill m=64 GMAC/s | candle decode GB/s | candle prefill GMAC/s |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    let only = args.get(1);
    let cpu = candle_core::Device::Cpu;
    for dtype in ALL_TYPES {
        if only.is_some_and(|o| *o != format!("{dtype:?}")) {
            continue;
        }
        for (name, n, k) in shapes {
            if k % dtype.block_size() != 0 {
                continue;
            }
            let bytes = random_tensor(&mut rng, n, k, dtype);
            let Some(w) = cpu_matrix_of(dtype, &bytes, n, k) else {
                continue;
            };
            let w = w?;
            let x1: Vec<f32> = (0..k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let x64: Vec<f32> = (0..64 * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let gb = bytes.len() as f64 / 1e9;
            let gmac = (64 * n * k) as f64 / 1e9;
            let dec = gb
                / time(20, || {
                    Ok(drop(std::hint::black_box(matmul(w.as_ref(), &x1)?)))
                })?;
            let pre = gmac
                / time(3, || {
                    Ok(drop(std::hint::black_box(matmul(w.as_ref(), &x64)?)))
                })?;
            // The same bytes through candle's own quantised matmul.
            let storage = QStorage::from_data(Cow::Borrowed(&bytes), &cpu, dtype)?;
            let q = QMatMul::from_qtensor(QTensor::new(storage, (n, k))?)?;
            let t1 = Tensor::from_slice(&x1, (1, k), &cpu)?;
            let t64 = Tensor::from_slice(&x64, (64, k), &cpu)?;
            let cdec = gb / time(20, || Ok(drop(std::hint::black_box(q.forward(&t1)?))))?;
            let cpre = gmac / time(3, || Ok(drop(std::hint::black_box(q.forward(&t64)?))))?;
            println!(
                "| {dtype:?} | {name} | {:.1} | {dec:.2} | {pre:.1} | {cdec:.2} | {cpre:.1} |",
                bytes.len() as f64 / 1e6
            );
        }
    }
    Ok(())
}

/// The crossover table (see the file's doc comment): for each type and real-width
/// shape, µs per call of Joule's kernel and candle's at each row count.
fn rows(rng: &mut impl Rng, only: Option<&String>, reps: Option<&String>) -> anyhow::Result<()> {
    let reps: usize = reps.and_then(|r| r.parse().ok()).unwrap_or(5);
    let shapes = [
        ("4096x4096 (q, o)", 4096, 4096),
        ("12288x4096 (gate, up)", 12288, 4096),
        ("4096x12288 (down)", 4096, 12288),
        ("151936x4096 (output)", 151936, 4096),
    ];
    let counts = [1usize, 2, 4, 8, 12, 16, 24, 32, 64];
    let cpu = candle_core::Device::Cpu;
    println!("µs per call, joule / candle (joule's speed over candle's in brackets)");
    println!();
    let head: Vec<String> = counts.iter().map(|m| format!("m={m}")).collect();
    println!("| type | matrix | {} |", head.join(" | "));
    println!("| --- | --- |{}", " ---: |".repeat(counts.len()));
    for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
        if only.is_some_and(|o| *o != format!("{dtype:?}")) {
            continue;
        }
        for (name, n, k) in shapes {
            let bytes = random_tensor(rng, n, k, dtype);
            let Some(w) = cpu_matrix_of(dtype, &bytes, n, k) else {
                continue;
            };
            let w = w?;
            let storage = QStorage::from_data(Cow::Borrowed(&bytes), &cpu, dtype)?;
            let q = QMatMul::from_qtensor(QTensor::new(storage, (n, k))?)?;
            let mut cells = Vec::new();
            for &m in &counts {
                let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let t = Tensor::from_slice(&x, (m, k), &cpu)?;
                let r = if m <= 8 { reps * 2 } else { reps };
                let ours = time(r, || {
                    Ok(drop(std::hint::black_box(matmul(w.as_ref(), &x)?)))
                })?;
                let theirs = time(r, || Ok(drop(std::hint::black_box(q.forward(&t)?))))?;
                cells.push(format!(
                    "{:.0} / {:.0} ({:.2}×)",
                    ours * 1e6,
                    theirs * 1e6,
                    theirs / ours
                ));
            }
            println!("| {dtype:?} | {name} | {} |", cells.join(" | "));
        }
    }
    Ok(())
}

/// The forms table (see the file's doc comment): the loaded form against the row-major
/// one, alternating call by call, best of `rounds` calls each.
fn forms(rng: &mut impl Rng, only: Option<&String>, rounds: Option<&String>) -> anyhow::Result<()> {
    let rounds: usize = rounds.and_then(|r| r.parse().ok()).unwrap_or(30);
    // Nemotron-3-Nano-4B: the Mamba-2 input projection, the MLP's up projection, its down
    // projection and the Mamba-2 output projection (hidden 3,136).
    let shapes = [
        ("17504x3136 (ssm_in)", 17504, 3136),
        ("12544x3136 (ffn_up)", 12544, 3136),
        ("3136x12544 (ffn_down)", 3136, 12544),
        ("3136x7680 (ssm_out)", 3136, 7680),
    ];
    let types = [GgmlDType::Q5_0, GgmlDType::Q8_0, GgmlDType::Q4_0];
    let only = only.filter(|o| !o.is_empty() && o.as_str() != "-");
    println!("best µs per call, loaded form / row-major (decode GB/s of weights for 1 row)");
    println!();
    println!("| type | matrix | MB | m=1 | GB/s | m=5 | m=16 |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for dtype in types {
        let named = only.is_some_and(|o| *o == format!("{dtype:?}"));
        if only.is_some() != named || (only.is_none() && dtype == GgmlDType::Q4_0) {
            continue;
        }
        for (name, n, k) in shapes {
            let bytes = random_tensor(rng, n, k, dtype);
            let (Some(a), Some(b)) = (
                cpu_matrix_of(dtype, &bytes, n, k),
                cpu_matrix_row_major(dtype, &bytes, n, k),
            ) else {
                continue;
            };
            let (a, b) = (a?, b?);
            let mut cells = Vec::new();
            for m in [1usize, 5, 16] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let (mut ta, mut tb) = (f64::MAX, f64::MAX);
                for _ in 0..rounds {
                    ta = ta.min(time(1, || {
                        Ok(drop(std::hint::black_box(matmul(a.as_ref(), &x)?)))
                    })?);
                    tb = tb.min(time(1, || {
                        Ok(drop(std::hint::black_box(matmul(b.as_ref(), &x)?)))
                    })?);
                }
                cells.push(format!("{:.0} / {:.0}", ta * 1e6, tb * 1e6));
                if m == 1 {
                    let gb = bytes.len() as f64 / 1e9;
                    cells.push(format!("{:.1} / {:.1}", gb / ta, gb / tb));
                }
            }
            println!(
                "| {dtype:?} | {name} | {:.1} | {} |",
                bytes.len() as f64 / 1e6,
                cells.join(" | ")
            );
        }
    }
    Ok(())
}

/// Gemma 4 E4B's and Qwen3-8B's decode-step matrices, `[n, k]`.
const STREAM_SHAPES: [(&str, usize, usize); 8] = [
    ("gemma q 2048x2560", 2048, 2560),
    ("gemma kv 512x2560", 512, 2560),
    ("gemma o 2560x2048", 2560, 2048),
    ("gemma up 10240x2560", 10240, 2560),
    ("gemma down 2560x10240", 2560, 10240),
    ("gemma ple 256x2560", 256, 2560),
    ("qwen3 up 12288x4096", 12288, 4096),
    ("qwen3 down 4096x12288", 4096, 12288),
];

/// One matrix's bytes in enough copies to pass the last-level cache (a model's step reads
/// every matrix from memory), beside a plain-read buffer of the same size.
struct StreamSet {
    mats: Vec<Box<dyn joule::inference::kernels::quant_matmul::CpuMatmul>>,
    buf: joule::inference::kernels::weight_memory::WeightVec<u64>,
}

impl StreamSet {
    /// Copies of `bytes` (an `[n, k]` matrix of `dtype`) to fill 256 MiB, at least two.
    fn copies(bytes: &[u8]) -> usize {
        (256usize << 20).div_ceil(bytes.len()).max(2)
    }

    fn build(dtype: GgmlDType, bytes: &[u8], n: usize, k: usize) -> anyhow::Result<Self> {
        let copies = Self::copies(bytes);
        let mats = (0..copies)
            .map(|_| cpu_matrix_of(dtype, bytes, n, k).expect("a k-quant type"))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(StreamSet {
            mats,
            buf: read_buffer(bytes.len() * copies / 8),
        })
    }

    /// Seconds of one product with every copy (cycling through them as a step cycles its
    /// layers) and of one plain read of as many bytes, in that order.
    fn time(&self, x: &[f32]) -> anyhow::Result<(f64, f64)> {
        let t = Instant::now();
        for m in &self.mats {
            std::hint::black_box(matmul(m.as_ref(), x)?);
        }
        let tk = t.elapsed().as_secs_f64();
        let t = Instant::now();
        std::hint::black_box(read_pass(&self.buf));
        Ok((tk, t.elapsed().as_secs_f64()))
    }
}

/// Each matrix of [`STREAM_SHAPES`] of Q4_K and Q6_K (or only the type `only` names) as a
/// [`StreamSet`] with a random activation row, handed to `f` with its type, name and the
/// bytes of all its copies: the rows of the stream and pairs tables.
fn each_stream_set(
    rng: &mut impl Rng,
    only: Option<&String>,
    mut f: impl FnMut(GgmlDType, &str, &StreamSet, &[f32], f64) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let only = only.filter(|o| !o.is_empty() && o.as_str() != "-");
    for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
        if only.is_some_and(|o| *o != format!("{dtype:?}")) {
            continue;
        }
        for (name, n, k) in STREAM_SHAPES {
            let bytes = random_tensor(rng, n, k, dtype);
            let set = StreamSet::build(dtype, &bytes, n, k)?;
            let x: Vec<f32> = (0..k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            f(dtype, name, &set, &x, (bytes.len() * set.mats.len()) as f64)?;
        }
    }
    Ok(())
}

/// The stream table: each matrix of [`STREAM_SHAPES`] as a [`StreamSet`], one activation
/// row, against a plain streaming read of the same bytes on the same threads. Best of
/// `rounds` passes.
fn stream(
    rng: &mut impl Rng,
    only: Option<&String>,
    rounds: Option<&String>,
) -> anyhow::Result<()> {
    let rounds: usize = rounds.and_then(|r| r.parse().ok()).unwrap_or(5);
    println!("| type | matrix | copies | µs per product | GB/s | read GB/s | kernel / read |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    each_stream_set(rng, only, |dtype, name, set, x, total| {
        let copies = set.mats.len();
        let (mut tk, mut tr) = (f64::MAX, f64::MAX);
        for _ in 0..rounds {
            let (k_s, r_s) = set.time(x)?;
            tk = tk.min(k_s);
            tr = tr.min(r_s);
        }
        println!(
            "| {dtype:?} | {name} | {copies} | {:.0} | {:.1} | {:.1} | {:.2} |",
            tk / copies as f64 * 1e6,
            total / tk / 1e9,
            total / tr / 1e9,
            tr / tk
        );
        Ok(())
    })
}

/// Build `f`'s value with transparent huge pages off for this process (`off`) or on where
/// advised: pages are chosen when first written, so what is built here keeps its pages.
/// Transparent huge pages are Linux's: elsewhere `f` runs as it is.
#[cfg(target_os = "linux")]
fn with_thp<T>(off: bool, f: impl FnOnce() -> T) -> T {
    // SAFETY: PR_SET_THP_DISABLE takes one integer argument; it flips a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, u64::from(off), 0, 0, 0) };
    let v = f();
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
    v
}

#[cfg(not(target_os = "linux"))]
fn with_thp<T>(_off: bool, f: impl FnOnce() -> T) -> T {
    f()
}

/// The pages table: the stream table's matrices built twice in one process, on 4 KiB pages
/// and on 2 MiB huge pages (`weight_memory::WeightVec`), with a plain read of each kind; the
/// two alternate call by call, best of `rounds`.
fn pages(rng: &mut impl Rng, only: Option<&String>, rounds: Option<&String>) -> anyhow::Result<()> {
    let rounds: usize = rounds.and_then(|r| r.parse().ok()).unwrap_or(5);
    // The stream table's shapes but Gemma 4's o, k/v and per-layer gate (the last two hold
    // no whole huge page).
    let shapes: Vec<_> = STREAM_SHAPES
        .into_iter()
        .filter(|(name, _, _)| {
            !name.contains(" kv ") && !name.contains(" ple ") && !name.contains(" o ")
        })
        .collect();
    let only = only.filter(|o| !o.is_empty() && o.as_str() != "-");
    println!("| type | matrix | 4 KiB: kernel / read GB/s | 2 MiB: kernel / read GB/s | kernel 2 MiB / 4 KiB | read 2 MiB / 4 KiB |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
        if only.is_some_and(|o| *o != format!("{dtype:?}")) {
            continue;
        }
        for &(name, n, k) in &shapes {
            let bytes = random_tensor(rng, n, k, dtype);
            let copies = StreamSet::copies(&bytes);
            let build = || StreamSet::build(dtype, &bytes, n, k);
            let small = with_thp(true, build)?;
            let before = process_huge_bytes().unwrap_or(0);
            let huge = with_thp(false, build)?;
            eprintln!(
                "{name}: {:.0} MB on huge pages after the 4 KiB set, {:.0} MB more after the 2 MiB set of {:.0} MB (matrices and read buffer)",
                before as f64 / 1e6,
                process_huge_bytes().unwrap_or(0).saturating_sub(before) as f64 / 1e6,
                (bytes.len() * copies * 2) as f64 / 1e6
            );
            let x: Vec<f32> = (0..k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let total = (bytes.len() * copies) as f64;
            let mut best = [f64::MAX; 4];
            for _ in 0..rounds {
                for (i, set) in [&small, &huge].into_iter().enumerate() {
                    let (k_s, r_s) = set.time(&x)?;
                    best[2 * i] = best[2 * i].min(k_s);
                    best[2 * i + 1] = best[2 * i + 1].min(r_s);
                }
            }
            let gb = |t: f64| total / t / 1e9;
            println!(
                "| {dtype:?} | {name} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2} | {:.2} |",
                gb(best[0]),
                gb(best[1]),
                gb(best[2]),
                gb(best[3]),
                best[0] / best[2],
                best[1] / best[3]
            );
        }
    }
    Ok(())
}

/// `hot TYPE N K ROWS CALLS`: one `[N, K]` matrix of TYPE (small enough to stay in the
/// caches), ROWS activation rows, CALLS products: the kernel's arithmetic alone, in GB/s of
/// weights per call.
fn hot(rng: &mut impl Rng, args: &[String]) -> anyhow::Result<()> {
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    // TYPE as the other modes name it (GgmlDType's Debug name: Q4K, Q6K, Q8_0, F16, …).
    let name = args.first().map(String::as_str).unwrap_or("Q4K");
    let Some(dtype) = ALL_TYPES.into_iter().find(|t| format!("{t:?}") == name) else {
        anyhow::bail!("hot: no type {name} (one of {ALL_TYPES:?})");
    };
    let (n, k, m, calls) = (arg(1, 1024), arg(2, 2560), arg(3, 1), arg(4, 20000));
    let bytes = random_tensor(rng, n, k, dtype);
    let w = cpu_matrix_of(dtype, &bytes, n, k).expect("a Joule type")?;
    let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = time(calls / 5, || {
            Ok(drop(std::hint::black_box(matmul(w.as_ref(), &x)?)))
        })?;
        best = best.min(t);
    }
    println!(
        "{dtype:?} {n}x{k} rows {m}: {:.2} µs per call, {:.1} GB/s of weights",
        best * 1e6,
        bytes.len() as f64 / best / 1e9
    );
    Ok(())
}

/// The pairs table: each matrix of [`STREAM_SHAPES`] as a [`StreamSet`], one activation row,
/// with decode's groups one after another and two at a time (`set_paired_streams`), the two
/// alternating; best of `rounds` each and the median of the rounds' ratios.
fn pairs(rng: &mut impl Rng, only: Option<&String>, rounds: Option<&String>) -> anyhow::Result<()> {
    use joule::inference::kernels::quant_matmul::set_paired_streams;
    let rounds: usize = rounds.and_then(|r| r.parse().ok()).unwrap_or(5).max(1);
    println!("| type | matrix | GB/s one after another | GB/s in pairs (the default rule) | read GB/s | median ratio |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    each_stream_set(rng, only, |dtype, name, set, x, total| {
        let (mut t1, mut t2, mut tr) = (f64::MAX, f64::MAX, f64::MAX);
        let mut ratios = Vec::new();
        for _ in 0..rounds {
            set_paired_streams(false);
            let (a, r1) = set.time(x)?;
            set_paired_streams(true);
            let (b, r2) = set.time(x)?;
            ratios.push(a / b);
            t1 = t1.min(a);
            t2 = t2.min(b);
            tr = tr.min(r1).min(r2);
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "| {dtype:?} | {name} | {:.1} | {:.1} | {:.1} | {:.3} |",
            total / t1 / 1e9,
            total / t2 / 1e9,
            total / tr / 1e9,
            ratios[ratios.len() / 2]
        );
        Ok(())
    })
}
