//! CUDA against the CPU for every GGUF type of the real files' quant mixes (Q4_K,
//! Q5_K, Q6_K, Q8_0, Q5_0): the matrix products a model makes through `models::nn::Proj`
//! (decode: 1 to 8 activation rows, candle's vector kernels; prompts: more rows, candle's tiled
//! kernels) and the embedding lookup (`QTensor::embedding`), on the same quantised bytes, both
//! checked against an f64 product over the dequantised weights. Compiled in every build; on a
//! machine without a CUDA device (or a build without the `cuda` feature) the CUDA test prints
//! why it is skipped and passes, while the same comparison runs on the CPU so it cannot rot.
//! Its module path contains `kernels::cuda`, so `scripts/gpu-check.sh`'s kernel-tests step runs
//! it.

use crate::inference::models::nn::Proj;
use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The types of the paper's Q4_K_M files and of llama-quantize's fallbacks.
const TYPES: [GgmlDType; 5] = [
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8_0,
    GgmlDType::Q5_0,
];
/// Activation rows: decode of 1..16 sequences (candle switches kernels above 8) and a prompt.
const ROWS: [usize; 6] = [1, 2, 8, 9, 16, 67];
/// Output rows and inner width: 2,560 is a real hidden size (Gemma 4, Qwen3.5-4B) and not a
/// multiple of candle's CUDA row padding (512), so the padded path is exercised.
const N: usize = 200;
const K: usize = 2560;
/// Largest relative L2 error of a product against the dequantised f64 reference: both
/// devices quantise the activations to 8 bits (q8_1 or q8_K), which costs well under 1 %.
const TOL: f64 = 0.02;

/// Random weights quantised on the CPU: the GGUF bytes of a `[N, K]` matrix.
fn weight_bytes(dtype: GgmlDType, seed: u64) -> anyhow::Result<Vec<u8>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let w: Vec<f32> = (0..N * K).map(|_| rng.gen_range(-0.05f32..0.05)).collect();
    let t = Tensor::from_vec(w, (N, K), &Device::Cpu)?;
    Ok(QTensor::quantize(&t, dtype)?.data()?.into_owned())
}

fn rel_err(got: &[f32], reference: &[f64]) -> f64 {
    let num: f64 = got
        .iter()
        .zip(reference)
        .map(|(&g, &r)| (g as f64 - r).powi(2))
        .sum();
    let den: f64 = reference.iter().map(|r| r * r).sum();
    (num / den.max(1e-30)).sqrt()
}

/// `x @ W^T` for `rows` rows through `Proj` on `dev`, as f32 on the host.
fn product(
    bytes: &[u8],
    dtype: GgmlDType,
    dev: &Device,
    x: &[f32],
    rows: usize,
) -> anyhow::Result<Vec<f32>> {
    let q = qtensor_from_ggml(dtype, bytes, vec![N, K], dev)?;
    let p = Proj::new(Arc::new(q), dev)?;
    let xt = Tensor::from_slice(x, (1, rows, K), dev)?;
    let y = p.forward(&xt)?;
    Ok(y.flatten_all()?.to_device(&Device::Cpu)?.to_vec1::<f32>()?)
}

/// Every type and row count on `dev` (and on the CPU) against the reference; the failures.
fn compare_on(dev: &Device) -> anyhow::Result<Vec<String>> {
    let mut failures = Vec::new();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for (i, &dtype) in TYPES.iter().enumerate() {
        let bytes = weight_bytes(dtype, 100 + i as u64)?;
        let cpu_q = qtensor_from_ggml(dtype, &bytes, vec![N, K], &Device::Cpu)?;
        let w: Vec<f32> = cpu_q.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1()?;
        for rows in ROWS {
            let x: Vec<f32> = (0..rows * K).map(|_| rng.gen_range(-1f32..1.0)).collect();
            let reference: Vec<f64> = (0..rows)
                .flat_map(|r| {
                    let (x, w) = (&x, &w);
                    (0..N).map(move |n| {
                        (0..K)
                            .map(|k| x[r * K + k] as f64 * w[n * K + k] as f64)
                            .sum::<f64>()
                    })
                })
                .collect();
            let on_dev = product(&bytes, dtype, dev, &x, rows)?;
            let on_cpu = product(&bytes, dtype, &Device::Cpu, &x, rows)?;
            let (e_dev, e_cpu) = (rel_err(&on_dev, &reference), rel_err(&on_cpu, &reference));
            let cpu64: Vec<f64> = on_cpu.iter().map(|&v| v as f64).collect();
            let between = rel_err(&on_dev, &cpu64);
            let finite = on_dev.iter().all(|v| v.is_finite());
            eprintln!(
                "{dtype:?} rows {rows}: relative error {e_dev:.5} on {dev:?}, {e_cpu:.5} on the \
                 CPU, {between:.5} between them"
            );
            if !(finite && e_dev <= TOL && e_cpu <= TOL && between <= 2.0 * TOL) {
                failures.push(format!(
                    "{dtype:?} x {rows} rows: relative error {e_dev:.5} on {dev:?} (finite: \
                     {finite}), {e_cpu:.5} on the CPU, {between:.5} between them; limits {TOL} \
                     against the reference, {} between",
                    2.0 * TOL
                ));
            }
        }
        // The embedding lookup: rows of the dequantised matrix, exactly.
        let ids = [0u32, 3, 199, 42, 3];
        let q = qtensor_from_ggml(dtype, &bytes, vec![N, K], dev)?;
        let got: Vec<f32> = q
            .embedding(&Tensor::new(&ids[..], dev)?)?
            .to_dtype(candle_core::DType::F32)?
            .flatten_all()?
            .to_device(&Device::Cpu)?
            .to_vec1()?;
        let want: Vec<f32> = ids
            .iter()
            .flat_map(|&id| w[id as usize * K..(id as usize + 1) * K].iter().copied())
            .collect();
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        if got.len() != want.len() || worst > 1e-5 {
            failures.push(format!(
                "{dtype:?} embedding on {dev:?}: {} values (expected {}), largest difference {worst}",
                got.len(),
                want.len()
            ));
        }
    }
    Ok(failures)
}

#[test]
fn kernels_cuda_every_real_mix_type_matches_the_cpu() {
    let dev = match Device::new_cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "kernels_cuda_every_real_mix_type_matches_the_cpu: skipped, no CUDA device ({e})"
            );
            return;
        }
    };
    let failures = compare_on(&dev).unwrap();
    assert!(
        failures.is_empty(),
        "CUDA against the CPU:\n{}",
        failures.join("\n")
    );
}

/// The same comparison with the CPU as the device: what the CUDA test checks, kept working
/// where there is no GPU (Joule's or candle's CPU kernels per type, against the reference).
#[test]
fn the_per_type_comparison_holds_on_the_cpu() {
    let failures = compare_on(&Device::Cpu).unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
