//! `joule bench matmul`: tokens/s of one real-shape weight matrix per GGUF type, on any
//! device, through the path a model's projections take (`models::nn::Proj`: candle's
//! quantised kernels on CUDA, Joule's or candle's on the CPU). For each type and number of
//! activation rows (1 = one sequence decoding, 16 or 64 = a society's agents decoding
//! together, 512 = a prompt) it times `x @ W^T` and reports rows per second (the tokens/s this
//! matrix alone allows), the weight bytes read per second, and the tokens/s a model of 8 B
//! parameters made of this type would get if every matrix ran at this rate (an estimate: rows/s
//! × the matrix's parameters / 8e9; attention and the rest of a step are not counted).
//! The weights are random blocks with sane scales (no quantisation step), so a run starts at
//! once; on CUDA each timing ends with a device synchronisation. Besides wall time it reports
//! the process's CPU time per product (all threads; on a loaded machine compare that, with
//! `--threads 1` and enough `--repetitions` for the clock's 10 ms ticks).

use super::bench_layers::cpu_seconds;
use crate::inference::engine::device::{device_name, select_device};
use crate::inference::kernels::quant_matmul::random_matrix;
use crate::inference::models::nn::Proj;
use anyhow::{bail, Context, Result};
use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType};
use candle_core::{Device, Tensor};
use clap::Args;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct MatmulBenchArgs {
    /// GGUF types (q4_k, q5_k, q6_k, q8_0, q5_0, q4_0, q4_1, q5_1, f16, bf16, f32),
    /// comma-separated;
    /// default: the types of the paper's Q4_K_M files and llama-quantize's fallbacks.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "q4_k,q5_k,q6_k,q8_0,q5_0"
    )]
    pub types: Vec<String>,
    /// The matrix, `N x K` (output rows x inner width); default Qwen3-8B's FFN up projection.
    #[arg(long, default_value = "12288x4096")]
    pub shape: String,
    /// Activation rows per product, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,512")]
    pub rows: Vec<usize>,
    /// Timed products per measurement (after one warm-up).
    #[arg(short = 'r', long = "repetitions", default_value_t = 20)]
    pub repetitions: usize,
    /// cpu, cuda or metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(short = 't', long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One type at one row count.
#[derive(Debug, Clone, Serialize)]
pub struct MatmulBench {
    pub backend: String,
    pub dtype: String,
    pub n: usize,
    pub k: usize,
    pub rows: usize,
    pub seconds: f64,
    /// Process CPU seconds per product (all threads).
    pub cpu_seconds: f64,
    /// Activation rows per second through this matrix.
    pub rows_per_s: f64,
    /// Weight bytes of the matrix × products per second, GB/s.
    pub weight_gbs: f64,
    /// rows/s × (N·K) / 8e9: tokens/s of an 8 B model of this type at this rate.
    pub est_8b_tps: f64,
    /// Whether Joule's CPU kernel (not candle's) multiplied the matrix.
    pub joule_kernel: bool,
}

/// The GGML type a `--types` entry names.
pub fn parse_type(s: &str) -> Result<GgmlDType> {
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "q4_k" | "q4k" => GgmlDType::Q4K,
        "q5_k" | "q5k" => GgmlDType::Q5K,
        "q6_k" | "q6k" => GgmlDType::Q6K,
        "q8_0" => GgmlDType::Q8_0,
        "q5_0" => GgmlDType::Q5_0,
        "q5_1" => GgmlDType::Q5_1,
        "q4_0" => GgmlDType::Q4_0,
        "q4_1" => GgmlDType::Q4_1,
        "f16" => GgmlDType::F16,
        "bf16" => GgmlDType::BF16,
        "f32" => GgmlDType::F32,
        other => bail!(
            "--types: `{other}` is not a type this benchmark knows (q4_k, q5_k, q6_k, q8_0, \
             q5_0, q5_1, q4_0, q4_1, f16, bf16, f32)"
        ),
    })
}

fn parse_shape(s: &str) -> Result<(usize, usize)> {
    let bad = || format!("--shape `{s}`: expected N x K, e.g. 12288x4096");
    let (n, k) = s.split_once(['x', 'X']).with_context(bad)?;
    let n: usize = n.trim().parse().with_context(bad)?;
    let k: usize = k.trim().parse().with_context(bad)?;
    if n == 0 || k == 0 || k % 256 != 0 {
        bail!("--shape `{s}`: N and K must be positive and K a multiple of 256");
    }
    Ok((n, k))
}

fn measure(
    dev: &Device,
    dtype: GgmlDType,
    (n, k): (usize, usize),
    rows_list: &[usize],
    reps: usize,
) -> Result<Vec<MatmulBench>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let bytes = random_matrix(&mut rng, dtype, n, k);
    let weight_bytes = bytes.len();
    let q = qtensor_from_ggml(dtype, &bytes, vec![n, k], dev)?;
    drop(bytes);
    let proj = Proj::new(Arc::new(q), dev)?;
    let joule_kernel = matches!(proj, Proj::Cpu(_));
    let mut out = Vec::new();
    for &rows in rows_list {
        let x: Vec<f32> = (0..rows * k).map(|_| rng.gen_range(-1f32..1.0)).collect();
        let x = Tensor::from_vec(x, (1, rows, k), dev)?;
        let y = proj.forward(&x)?;
        let check: Vec<f32> = y
            .flatten_all()?
            .narrow(0, 0, n.min(8))?
            .to_device(&Device::Cpu)?
            .to_vec1()?;
        if check.iter().any(|v| !v.is_finite()) {
            bail!(
                "{dtype:?} x {rows} rows on {}: the product is not finite",
                device_name(dev)
            );
        }
        dev.synchronize()?;
        let (t0, c0) = (Instant::now(), cpu_seconds());
        for _ in 0..reps {
            let y = proj.forward(&x)?;
            std::hint::black_box(&y);
        }
        dev.synchronize()?;
        let seconds = t0.elapsed().as_secs_f64() / reps as f64;
        let cpu_seconds = (cpu_seconds() - c0) / reps as f64;
        let rows_per_s = rows as f64 / seconds;
        out.push(MatmulBench {
            backend: device_name(dev).to_string(),
            dtype: format!("{dtype:?}"),
            n,
            k,
            rows,
            seconds,
            cpu_seconds,
            rows_per_s,
            weight_gbs: weight_bytes as f64 / seconds / 1e9,
            est_8b_tps: rows_per_s * (n * k) as f64 / 8e9,
            joule_kernel,
        });
    }
    Ok(out)
}

pub fn run(args: MatmulBenchArgs) -> Result<ExitCode> {
    crate::threads::setup(args.threads, None)?;
    let shape = parse_shape(&args.shape)?;
    let types: Vec<GgmlDType> = args
        .types
        .iter()
        .map(|t| parse_type(t))
        .collect::<Result<_>>()?;
    if args.rows.is_empty() || args.rows.contains(&0) {
        bail!("--rows: give one or more counts of at least 1 (e.g. 1,16,64,512)");
    }
    let dev = select_device(&args.device)?;
    let reps = args.repetitions.max(1);
    let mut all = Vec::new();
    for (i, &t) in types.iter().enumerate() {
        let rs = measure(&dev, t, shape, &args.rows, reps)
            .with_context(|| format!("--types {}", args.types[i]))?;
        if !args.json {
            if all.is_empty() {
                crate::outln!("| backend | type | matrix | rows | ms | CPU ms | rows/s | weight GB/s | est. t/s, 8 B model | kernel |");
                crate::outln!(
                    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
                );
            }
            for r in &rs {
                crate::outln!(
                    "| {} | {} | {}x{} | {} | {:.3} | {:.3} | {:.0} | {:.1} | {:.1} | {} |",
                    r.backend,
                    r.dtype,
                    r.n,
                    r.k,
                    r.rows,
                    r.seconds * 1e3,
                    r.cpu_seconds * 1e3,
                    r.rows_per_s,
                    r.weight_gbs,
                    r.est_8b_tps,
                    if r.joule_kernel { "joule" } else { "candle" }
                );
            }
        }
        all.extend(rs);
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_types_parse_or_say_what_was_expected() {
        assert_eq!(parse_shape("12288x4096").unwrap(), (12288, 4096));
        assert!(parse_shape("12288x100").is_err());
        assert!(parse_shape("big").is_err());
        assert_eq!(parse_type("Q6_K").unwrap(), GgmlDType::Q6K);
        let e = parse_type("q3_k").unwrap_err().to_string();
        assert!(e.contains("q3_k") && e.contains("q4_k"), "{e}");
    }

    #[test]
    fn a_small_cpu_run_gives_finite_rates_for_every_default_type() {
        for t in ["q4_k", "q5_k", "q6_k", "q8_0", "q5_0", "f16", "bf16"] {
            let t = parse_type(t).unwrap();
            let r = measure(&Device::Cpu, t, (64, 512), &[1, 3], 2).unwrap();
            assert_eq!(r.len(), 2);
            for m in r {
                assert!(m.rows_per_s.is_finite() && m.rows_per_s > 0.0, "{m:?}");
                assert_eq!(m.dtype, format!("{t:?}"));
            }
        }
    }
}
