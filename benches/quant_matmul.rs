//! Speed of Joule's CPU quantised matrix products (`inference::quant_matmul`)
//! on random weights of the default model's shapes: for each 32-value type,
//! one activation row (decode: bound by reading the weights, reported in GB/s
//! of weight bytes) and 64 rows (prefill: reported in GMAC/s).
//! Run: `cargo bench --bench quant_matmul [-- THREADS [TYPE]]` (prints timings;
//! asserts nothing about speed). THREADS sets candle's worker pool
//! (`RAYON_NUM_THREADS`), default all cores.

use std::time::Instant;

use candle_core::quantized::GgmlDType;
use joule::inference::quant_matmul::{cpu_matrix, matmul};
use rand::{Rng, SeedableRng};

/// Random GGUF bytes for `n·k/32` blocks of `bytes` each, f16 scales sane.
fn random_tensor(rng: &mut impl Rng, n: usize, k: usize, block_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * k / 32 * block_bytes);
    for _ in 0..n * k / 32 {
        let mut b: Vec<u8> = (0..block_bytes).map(|_| rng.gen()).collect();
        b[..2].copy_from_slice(&half::f16::from_f32(rng.gen_range(0.001..0.05)).to_le_bytes());
        if block_bytes == 20 || block_bytes == 24 {
            b[2..4].copy_from_slice(&half::f16::from_f32(-0.1).to_le_bytes());
        }
        out.extend_from_slice(&b);
    }
    out
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
    let types = [
        (GgmlDType::Q4_0, 18),
        (GgmlDType::Q4_1, 20),
        (GgmlDType::Q5_0, 22),
        (GgmlDType::Q5_1, 24),
        (GgmlDType::Q8_0, 34),
    ];
    // SmolLM2's output head (larger than the caches) and a matrix that fits in L2/L3.
    let shapes = [("49152x576 (head)", 49152, 576), ("1536x1536", 1536, 1536)];
    println!("| type | matrix | MB | decode GB/s | prefill m=64 GMAC/s |");
    println!("| --- | --- | ---: | ---: | ---: |");
    let only = args.get(1);
    for (dtype, bb) in types {
        if only.is_some_and(|o| *o != format!("{dtype:?}")) {
            continue;
        }
        for (name, n, k) in shapes {
            let bytes = random_tensor(&mut rng, n, k, bb);
            let Some(w) = cpu_matrix(dtype, &bytes, n, k) else {
                continue;
            };
            let w = w?;
            let x1: Vec<f32> = (0..k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let x64: Vec<f32> = (0..64 * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            matmul(w.as_ref(), &x1)?;
            let reps = 20;
            let t = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(matmul(w.as_ref(), &x1)?);
            }
            let dec = bytes.len() as f64 * reps as f64 / t.elapsed().as_secs_f64() / 1e9;
            let reps = 3;
            let t = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(matmul(w.as_ref(), &x64)?);
            }
            let pre = (64 * n * k) as f64 * reps as f64 / t.elapsed().as_secs_f64() / 1e9;
            println!(
                "| {dtype:?} | {name} | {:.1} | {dec:.2} | {pre:.1} |",
                bytes.len() as f64 / 1e6
            );
        }
    }
    Ok(())
}
