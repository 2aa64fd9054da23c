//! Tests of the quantised matrix products: every type and SIMD path against a dequantised
//! reference, candle's matmul and ggml's dequantisation; tiles bit for bit.

use super::floats::HalfType;
use super::*;
use rand::{Rng, SeedableRng};

/// Random GGUF bytes of `n·k/VALUES` blocks of `B`: f16 scales in a sane
/// range where the layout has them, every other byte random.
fn random_blocks<B: WeightBlock>(rng: &mut impl Rng, n: usize, k: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..n * k / B::VALUES {
        let mut blk: Vec<u8> = (0..B::BYTES).map(|_| rng.gen()).collect();
        let d = half::f16::from_f32(rng.gen_range(0.001..0.05)).to_le_bytes();
        blk[..2].copy_from_slice(&d);
        if matches!(B::NAME, "Q4_1" | "Q5_1") {
            let m = half::f16::from_f32(rng.gen_range(-0.2..0.0)).to_le_bytes();
            blk[2..4].copy_from_slice(&m);
        }
        if matches!(B::NAME, "Q4_K" | "Q5_K") {
            // d is per 6-bit scale unit, dmin per 6-bit min unit.
            let d = half::f16::from_f32(rng.gen_range(0.0001..0.002)).to_le_bytes();
            let dmin = half::f16::from_f32(rng.gen_range(0.0..0.005)).to_le_bytes();
            blk[..2].copy_from_slice(&d);
            blk[2..4].copy_from_slice(&dmin);
        }
        if B::NAME == "Q6_K" {
            let d = half::f16::from_f32(rng.gen_range(0.0001..0.001)).to_le_bytes();
            // Q6_K starts with payload bytes, and keeps d at its end.
            blk[0] = rng.gen();
            blk[1] = rng.gen();
            blk[208..210].copy_from_slice(&d);
        }
        bytes.extend_from_slice(&blk);
    }
    bytes
}

/// GGUF's own dequantisation of one block, written from the format's
/// definition (ggml's `dequantize_row_*`, not through this module's
/// payloads and scales).
fn gguf_dequant(name: &str, c: &[u8]) -> Vec<f32> {
    let f = |i: usize| half::f16::from_le_bytes([c[i], c[i + 1]]).to_f32();
    if name == "Q6_K" {
        let d = f(208);
        let mut y = vec![0f32; 256];
        for n in 0..2 {
            let (ql, qh, sc) = (&c[64 * n..], &c[128 + 32 * n..], &c[192 + 8 * n..]);
            let sc = |i: usize| f32::from(sc[i] as i8);
            for l in 0..32 {
                let is = l / 16;
                let q = |v: u8| f32::from(v as i8 - 32);
                let q1 = q((ql[l] & 0xf) | ((qh[l] & 3) << 4));
                let q2 = q((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4));
                let q3 = q((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                let q4 = q((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                y[128 * n + l] = d * sc(is) * q1;
                y[128 * n + l + 32] = d * sc(is + 2) * q2;
                y[128 * n + l + 64] = d * sc(is + 4) * q3;
                y[128 * n + l + 96] = d * sc(is + 6) * q4;
            }
        }
        return y;
    }
    if name == "Q4_K" || name == "Q5_K" {
        let (d, dmin, q) = (f(0), f(2), &c[4..16]);
        // ggml's get_scale_min_k4.
        let scale_min = |j: usize| {
            if j < 4 {
                (q[j] & 63, q[j + 4] & 63)
            } else {
                (
                    (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
                    (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
                )
            }
        };
        let (qh, ql) = if name == "Q5_K" {
            (&c[16..48], &c[48..176])
        } else {
            (&c[0..0], &c[16..144])
        };
        let mut out = Vec::with_capacity(256);
        for chunk in 0..4 {
            let qs = &ql[32 * chunk..32 * chunk + 32];
            for half in 0..2 {
                let is = 2 * chunk + half;
                let (sc, m) = scale_min(is);
                let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
                for l in 0..32 {
                    let mut u = (qs[l] >> (4 * half)) & 0xf;
                    if !qh.is_empty() && qh[l] & (1 << is) != 0 {
                        u += 16;
                    }
                    out.push(d1 * f32::from(u) - m1);
                }
            }
        }
        return out;
    }
    let mut out = vec![0f32; BLOCK];
    let qs = match name {
        "Q4_0" => &c[2..],
        "Q4_1" => &c[4..],
        "Q5_0" => &c[6..],
        "Q5_1" => &c[8..],
        _ => &c[2..],
    };
    for j in 0..16 {
        let (lo, hi) = (f32::from(qs[j] & 15), f32::from(qs[j] >> 4));
        let qh = |o: usize| u32::from_le_bytes([c[o], c[o + 1], c[o + 2], c[o + 3]]);
        let h = |o: usize, bit: usize| ((qh(o) >> bit) & 1) as f32 * 16.0;
        let (a, b) = match name {
            "Q4_0" => (f(0) * (lo - 8.0), f(0) * (hi - 8.0)),
            "Q4_1" => (f(0) * lo + f(2), f(0) * hi + f(2)),
            "Q5_0" => (
                f(0) * (lo + h(2, j) - 16.0),
                f(0) * (hi + h(2, j + 16) - 16.0),
            ),
            "Q5_1" => (
                f(0) * (lo + h(4, j)) + f(2),
                f(0) * (hi + h(4, j + 16)) + f(2),
            ),
            _ => (
                f(0) * f32::from(c[2 + j] as i8),
                f(0) * f32::from(c[2 + j + 16] as i8),
            ),
        };
        out[j] = a;
        out[j + 16] = b;
    }
    out
}

fn reference(wf: &[f32], x: &[f32], n: usize, k: usize) -> Vec<f32> {
    let m = x.len() / k;
    let mut y = vec![0f32; m * n];
    for r in 0..m {
        for j in 0..n {
            y[r * n + j] = (0..k)
                .map(|i| f64::from(x[r * k + i]) * f64::from(wf[j * k + i]))
                .sum::<f64>() as f32;
        }
    }
    y
}

/// Every path this CPU has against the dequantise-then-f32 product of
/// GGUF's own dequantisation, on random blocks and activations.
fn check_type<B: WeightBlock>(seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let shapes = if B::VALUES == BLOCK {
        [(37, 96), (9, 544)]
    } else {
        // 8 blocks (one group), 24 (three).
        [(37, 256), (9, 768)]
    };
    for (n, k) in shapes {
        check_shape::<B>(&mut rng, n, k);
    }
}

/// [`check_type`] for one shape.
fn check_shape<B: WeightBlock>(rng: &mut impl Rng, n: usize, k: usize) {
    let bytes = random_blocks::<B>(rng, n, k);
    let w = QuantMatrix::<B>::from_gguf_bytes(&bytes, n, k).unwrap();
    let wf: Vec<f32> = bytes
        .chunks_exact(B::BYTES)
        .flat_map(|c| gguf_dequant(B::NAME, c))
        .collect();
    assert_eq!(w.dequantize(), wf, "{}: dequantisation", B::NAME);
    let wmax = wf.iter().fold(0f32, |a, v| a.max(v.abs()));
    for m in [1usize, 3, 4, 5, 9] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let want = reference(&wf, &x, n, k);
        for simd in Simd::available() {
            let got = w.clone().with_simd(simd).matmul(&x).unwrap();
            assert_eq!(got.len(), m * n);
            for (g, e) in got.iter().zip(&want) {
                // 8-bit activations: error about Σ|w|·|x|/254 ≤ k·wmax/254.
                let tol = 0.01 * k as f32 * wmax;
                assert!(
                    (g - e).abs() < tol,
                    "{} {simd:?} m={m}: {g} vs {e}",
                    B::NAME
                );
            }
        }
    }
}

#[test]
fn every_type_and_path_matches_the_dequantized_product() {
    check_type::<BlockQ40>(1);
    check_type::<BlockQ41>(7);
    check_type::<BlockQ50>(2);
    check_type::<BlockQ51>(3);
    check_type::<BlockQ80>(4);
    check_type::<BlockQ4K>(5);
    check_type::<BlockQ5K>(6);
    check_type::<BlockQ6K>(8);
}

/// The SIMD paths give the portable path's integer sums: results agree
/// to float rounding, and a row's result is the same bits alone, in a
/// batch, and in every tile shape (rows of 9 blocks: a whole group of
/// scales and a partial one).
fn check_paths_agree<B: WeightBlock>(seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // Rows of 9 blocks (a whole group of scales and a partial one), or
    // for a k-quant 16 (two groups).
    let (n, k) = (20, if B::VALUES == BLOCK { 288 } else { 512 });
    let w = QuantMatrix::<B>::from_gguf_bytes(&random_blocks::<B>(&mut rng, n, k), n, k).unwrap();
    let x: Vec<f32> = (0..6 * k).map(|_| rng.gen_range(-3.0..3.0)).collect();
    let acts = Acts::quantize(&x, k);
    let batch = w.matmul(&x).unwrap();
    for r in 0..6 {
        let alone = w.matmul(&x[r * k..(r + 1) * k]).unwrap();
        assert_eq!(alone, batch[r * n..(r + 1) * n].to_vec(), "{}", B::NAME);
    }
    let paths: Vec<QuantMatrix<B>> = Simd::available()
        .into_iter()
        .map(|p| w.clone().with_simd(p))
        .collect();
    let rows = [0, 1, 2, 3];
    for j in 0..n {
        let want = paths[0].dot_tiles::<1, 4>([j], &acts, rows)[0];
        for p in &paths {
            let got = p.dot_tiles::<1, 4>([j], &acts, rows)[0];
            for (g, e) in got.iter().zip(&want) {
                assert!(
                    (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "{} {:?}: {g} vs {e}",
                    B::NAME,
                    p.simd
                );
            }
            for (i, &g) in got.iter().enumerate() {
                let one = p.dot_tiles::<1, 1>([j], &acts, [i])[0][0];
                assert_eq!(one.to_bits(), g.to_bits(), "{} {:?}", B::NAME, p.simd);
                let two = p.dot_tiles::<1, 2>([j], &acts, [i, 5])[0][0];
                assert_eq!(two.to_bits(), g.to_bits(), "{} {:?}", B::NAME, p.simd);
            }
            if j + 1 < n {
                // Two weight rows at once: each row's sums as when alone.
                let two = p.dot_tiles::<2, 4>([j, j + 1], &acts, rows);
                assert_eq!(two[0], got, "{} {:?}", B::NAME, p.simd);
                assert_eq!(
                    two[1],
                    p.dot_tiles::<1, 4>([j + 1], &acts, rows)[0],
                    "{} {:?}",
                    B::NAME,
                    p.simd
                );
            }
        }
        #[cfg(target_arch = "x86_64")]
        {
            let by = |s: Simd| paths.iter().find(|p| p.simd == s);
            if let (Some(a), Some(v)) = (by(Simd::Avx2), by(Simd::AvxVnni)) {
                // Same integer sums, same float operations: bit-identical.
                assert_eq!(
                    a.dot_tiles::<1, 4>([j], &acts, rows),
                    v.dot_tiles::<1, 4>([j], &acts, rows)
                );
            }
        }
    }
}

#[test]
fn simd_and_portable_paths_agree_for_every_type() {
    check_paths_agree::<BlockQ40>(11);
    check_paths_agree::<BlockQ41>(12);
    check_paths_agree::<BlockQ50>(13);
    check_paths_agree::<BlockQ51>(14);
    check_paths_agree::<BlockQ80>(15);
    check_paths_agree::<BlockQ4K>(16);
    check_paths_agree::<BlockQ5K>(17);
    check_paths_agree::<BlockQ6K>(18);
}

#[test]
fn one_input_times_several_matrices_equals_each_product() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
    let k = 64;
    let a = QuantMatrix::<BlockQ50>::from_gguf_bytes(
        &random_blocks::<BlockQ50>(&mut rng, 40, k),
        40,
        k,
    )
    .unwrap();
    let b =
        QuantMatrix::<BlockQ80>::from_gguf_bytes(&random_blocks::<BlockQ80>(&mut rng, 7, k), 7, k)
            .unwrap();
    let c = Q41Matrix::from_gguf_bytes(&random_blocks::<BlockQ41>(&mut rng, 16, k), 16, k).unwrap();
    for m in [1usize, 5, 70] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let ys = matmul_many(&[&a, &b, &c], &x).unwrap();
        assert_eq!(ys[0], a.matmul(&x).unwrap());
        assert_eq!(ys[1], b.matmul(&x).unwrap());
        assert_eq!(ys[2], c.matmul(&x).unwrap());
    }
    let short =
        Q41Matrix::from_gguf_bytes(&random_blocks::<BlockQ41>(&mut rng, 2, 32), 2, 32).unwrap();
    assert!(matmul_many(&[&a, &short], &[0f32; 64]).is_err());
}

/// llama.cpp's x86 `quantize_row_q8_0` / `q8_1`: `q = round-half-even(x · 127/max|x|)`, `d`
/// rounded to f16 (its blocks hold f16), `q8_1`'s `s` the f16 of the unrounded `d` times Σq.
#[test]
fn activation_blocks_round_as_llama_cpp() {
    // max 127: the multiplier is 1, so the halves show the rounding.
    let mut x = [0f32; BLOCK];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = 3.5;
    x[3] = -2.5;
    let (q, d, s, s1) = super::acts::quantize_block(&x);
    assert_eq!((q[0], q[1], q[2], q[3]), (127, 2, 4, -2));
    assert_eq!((d, s, s1), (1.0, 131.0, 131.0));
    // max 1: d = 1/127 is not an f16; the block holds its nearest f16.
    let mut x = [0.25f32; BLOCK];
    x[5] = -1.0;
    let (q, d, s, s1) = super::acts::quantize_block(&x);
    let exact = 1.0f32 / 127.0;
    let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
    assert_eq!(d, half::f16::from_f32(exact).to_f32());
    assert_ne!(d, exact);
    assert_eq!(s, d * sum as f32);
    assert_eq!(s1, half::f16::from_f32(exact * sum as f32).to_f32());
}

#[test]
fn rows_quantised_on_the_pool_equal_rows_quantised_alone() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
    let k = 96;
    let m = 2 * PARALLEL_QUANTISE_ROWS + 3;
    let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let all = Acts::quantize(&x, k);
    for r in [0, PARALLEL_QUANTISE_ROWS, m - 1] {
        let one = Acts::quantize(&x[r * k..(r + 1) * k], k);
        assert_eq!(one.qs[..], all.qs[r * all.kb..(r + 1) * all.kb]);
        assert_eq!(one.d[..], all.d[r * all.kbp..(r + 1) * all.kbp]);
        assert_eq!(one.s[..], all.s[r * all.kbp..(r + 1) * all.kbp]);
        assert_eq!(one.s1[..], all.s1[r * all.kbp..(r + 1) * all.kbp]);
    }
    let w = Q41Matrix::from_gguf_bytes(&random_blocks::<BlockQ41>(&mut rng, 5, k), 5, k).unwrap();
    let y = w.matmul(&x).unwrap();
    assert_eq!(y[(m - 1) * 5..], w.matmul(&x[(m - 1) * k..]).unwrap()[..]);
}

/// candle's quantiser and dequantiser (an implementation of GGUF's types
/// independent of this module's) against this module's view of the same
/// bytes, for every type it takes.
#[test]
fn every_type_dequantises_as_candle_does() {
    use candle_core::quantized::QTensor;
    use candle_core::{Device, Tensor};
    let dev = Device::Cpu;
    let (n, k) = (8, 512);
    let w = Tensor::randn(0f32, 0.5, (n, k), &dev).unwrap();
    for dt in ALL_TYPES {
        let q = QTensor::quantize(&w, dt).unwrap();
        let ours = cpu_matrix_of(dt, &q.data().unwrap(), n, k)
            .unwrap()
            .unwrap()
            .dequantize();
        let theirs: Vec<f32> = q
            .dequantize(&dev)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(ours, theirs, "{dt:?}");
    }
}

#[test]
fn repacked_shapes_are_left_to_candle() {
    // Not whole 256-value super-blocks, or not whole 16-row tiles.
    assert!(!candle_repacks(GgmlDType::Q8_0, 49152, 576));
    assert!(!candle_repacks(GgmlDType::Q4K, 40, 256));
    assert!(candle_repacks(GgmlDType::Q4K, 9728, 2560));
    assert!(candle_repacks(GgmlDType::Q6K, 32, 512));
    assert!(!candle_repacks(GgmlDType::Q4_1, 9728, 2560));
    assert!(!candle_repacks(GgmlDType::Q5K, 9728, 2560));
    // Candle's repacked k-quants round the activations as llama.cpp does (q8_K); its
    // repacked Q8_0 does not (q8_K where llama.cpp uses q8_0 blocks of 32).
    assert!(candle_repack_rounds_as_llama(GgmlDType::Q4K));
    assert!(candle_repack_rounds_as_llama(GgmlDType::Q6K));
    assert!(!candle_repack_rounds_as_llama(GgmlDType::Q8_0));
    assert!(!leaves_to_candle(GgmlDType::Q8_0, 9728, 2560));
    if crate::knobs::cpu_kernel_types().is_none() {
        // So a Q8_0 matrix stays with this module even where candle would repack it.
        let bytes = vec![0u8; 16 * 8 * 34];
        assert!(cpu_matrix(GgmlDType::Q8_0, &bytes, 16, 256).is_some());
        assert!(cpu_matrix(GgmlDType::Q8_0, &bytes[..8 * 34], 1, 256).is_some());
    }
}

#[test]
fn takes_follows_the_named_types_or_the_default_rule() {
    // Named: whatever the shape.
    assert!(takes(Some("Q4_K"), GgmlDType::Q4K, 16, 256).unwrap());
    assert!(!takes(Some("Q4_K"), GgmlDType::Q4_1, 16, 256).unwrap());
    assert!(takes(Some("all"), GgmlDType::Q6K, 16, 256).unwrap());
    // Unset: the defaults, less what candle repacks.
    assert!(takes(None, GgmlDType::Q4_1, 16, 256).unwrap());
    // Q4_K/Q6_K: Joule's (one copy of the weights; candle keeps the file's blocks and its
    // repacked copies); `split`: split by rows where candle repacks them.
    let repacked = |spec, t| {
        (
            choose(spec, t, 4096, 4096).unwrap(),
            choose(spec, t, 151936, 4096).unwrap(),
        )
    };
    if candle_repacks(GgmlDType::Q4K, 4096, 4096) {
        assert_eq!(
            repacked(Some(""), GgmlDType::Q4K),
            (Choice::Joule, Choice::Joule)
        );
        assert_eq!(
            repacked(None, GgmlDType::Q6K),
            (Choice::Joule, Choice::Joule)
        );
        assert_eq!(
            repacked(Some("split"), GgmlDType::Q4K),
            (Choice::Split, Choice::Split)
        );
        assert_eq!(
            repacked(Some(" Split "), GgmlDType::Q6K),
            (Choice::Split, Choice::Split)
        );
    }
    assert_eq!(choose(None, GgmlDType::Q4K, 1, 256).unwrap(), Choice::Joule);
    assert_eq!(
        choose(Some("split"), GgmlDType::Q4K, 1, 256).unwrap(),
        Choice::Joule
    );
    assert_eq!(
        choose(Some("split"), GgmlDType::Q4_1, 16, 256).unwrap(),
        choose(None, GgmlDType::Q4_1, 16, 256).unwrap()
    );
    assert!(takes(None, GgmlDType::Q6K, 16, 256).unwrap());
    // Named or left out, the variable overrides the row rule.
    assert_eq!(
        choose(Some("Q4_K"), GgmlDType::Q4K, 4096, 4096).unwrap(),
        Choice::Joule
    );
    assert_eq!(
        choose(Some("Q4_K"), GgmlDType::Q6K, 4096, 4096).unwrap(),
        Choice::Candle
    );
    assert_eq!(
        choose(Some("Q4_1"), GgmlDType::Q5K, 4096, 4096).unwrap(),
        Choice::Candle
    );
    assert_eq!(
        choose(None, GgmlDType::F32, 16, 256).unwrap(),
        Choice::Candle
    );
    // F16/BF16: Joule's (16-bit, where candle holds f32), unless the named types leave
    // them out.
    assert_eq!(
        choose(None, GgmlDType::F16, 10752, 2560).unwrap(),
        Choice::Joule
    );
    assert_eq!(
        choose(None, GgmlDType::BF16, 16, 256).unwrap(),
        Choice::Joule
    );
    assert_eq!(
        choose(Some("Q4_K,Q6_K"), GgmlDType::F16, 10752, 2560).unwrap(),
        Choice::Candle
    );
    assert!(takes(Some("f16"), GgmlDType::F16, 3, 7).unwrap());
    // Q8_0 whatever the shape and CPU (see `candle_repack_rounds_as_llama`).
    assert!(takes(None, GgmlDType::Q8_0, 16, 256).unwrap());
    assert!(takes(None, GgmlDType::Q8_0, 9728, 2560).unwrap());
    assert!(takes(None, GgmlDType::Q8_0, 1, 256).unwrap());
    // Named types without Q8_0 give it back to candle.
    assert!(!takes(Some("Q4_1,Q5_K"), GgmlDType::Q8_0, 9728, 2560).unwrap());
    let err = takes(Some("Q9"), GgmlDType::Q4_1, 16, 256)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("JOULE_CPU_KERNEL_TYPES") && err.contains("Q9"),
        "{err}"
    );
}

#[test]
fn kernel_types_take_defaults_all_or_a_list_and_name_a_bad_one() {
    assert_eq!(kernel_types(None).unwrap(), None);
    assert_eq!(kernel_types(Some(" ")).unwrap(), None);
    assert_eq!(kernel_types(Some("all")).unwrap(), Some(ALL_TYPES.to_vec()));
    assert_eq!(
        kernel_types(Some("q4_k, Q6_K")).unwrap(),
        Some(vec![GgmlDType::Q4K, GgmlDType::Q6K])
    );
    let err = kernel_types(Some("Q4_K,IQ2_XS")).unwrap_err().to_string();
    assert!(
        err.contains(TYPES_ENV) && err.contains("IQ2_XS") && err.contains("Q6_K"),
        "{err}"
    );
}

#[test]
fn joule_simd_names_a_kernel_this_cpu_has() {
    let fastest = *Simd::available().last().unwrap();
    assert_eq!(Simd::chosen(None).unwrap(), fastest);
    assert_eq!(Simd::chosen(Some("")).unwrap(), fastest);
    for simd in Simd::available() {
        assert_eq!(Simd::chosen(Some(simd.name())).unwrap(), simd);
    }
    let err = Simd::chosen(Some("avx9000")).unwrap_err().to_string();
    assert!(
        err.contains("JOULE_SIMD") && err.contains("avx9000") && err.contains("portable"),
        "{err}"
    );
}

#[test]
fn extreme_q8_0_weights_do_not_overflow() {
    // −128 and 127 weights against ±127 activations: the sign trick must
    // neither saturate nor flip (|−128| is 128 as an unsigned byte).
    let mut bytes = half::f16::from_f32(1.0).to_le_bytes().to_vec();
    bytes.extend((0..32).map(|i| if i % 2 == 0 { 0x80u8 } else { 0x7f }));
    let w = QuantMatrix::<BlockQ80>::from_gguf_bytes(&bytes, 1, 32).unwrap();
    let x: Vec<f32> = (0..32)
        .map(|i| if i % 2 == 0 { -1.0 } else { 1.0 })
        .collect();
    for simd in Simd::available() {
        let y = w.clone().with_simd(simd).matmul(&x).unwrap();
        // 16·128 + 16·127 = 4080 (activations quantise to exactly ±127, with the block's
        // `d`, 1/127, held as its nearest f16 as llama.cpp holds it).
        let expect = 4080.0 * 127.0 * half::f16::from_f32(1.0 / 127.0).to_f32();
        assert!(
            (y[0] - expect).abs() < 1e-2,
            "{simd:?}: {} vs {expect}",
            y[0]
        );
    }
}

#[test]
fn types_candle_keeps_are_not_taken_and_bad_shapes_are_errors() {
    assert!(cpu_matrix(GgmlDType::F32, &[], 1, 256).is_none());
    assert!(cpu_matrix_of(GgmlDType::F32, &[], 1, 256).is_none());
    // An F16 matrix needs 2 bytes a value.
    let err = cpu_matrix_of(GgmlDType::F16, &[0u8; 511], 1, 256)
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("512"), "{err}");
    assert!(cpu_matrix_of(GgmlDType::Q4K, &[0u8; 144], 1, 256)
        .unwrap()
        .is_ok());
    // A k-quant matrix of the wrong byte count names its type and the bytes it needs.
    for (t, name, bytes) in [(GgmlDType::Q4K, "Q4_K", 144), (GgmlDType::Q6K, "Q6_K", 210)] {
        let err = cpu_matrix_of(t, &vec![0u8; bytes - 1], 1, 256)
            .unwrap()
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains(name) && msg.contains(&bytes.to_string()),
            "{msg}"
        );
    }
    // A k-quant row is whole super-blocks of 256 values.
    let err = QuantMatrix::<BlockQ4K>::from_gguf_bytes(&[0u8; 144], 1, 128).unwrap_err();
    assert!(err.to_string().contains("256"), "{err}");
    assert!(QuantMatrix::<BlockQ5K>::from_gguf_bytes(&[0u8; 175], 1, 256).is_err());
    assert!(cpu_matrix_of(GgmlDType::Q6K, &[0u8; 210], 1, 256)
        .unwrap()
        .is_ok());
    assert!(cpu_matrix(GgmlDType::Q5_0, &[0u8; 22], 1, 32)
        .unwrap()
        .is_ok());
    assert!(Q41Matrix::from_gguf_bytes(&[0u8; 20], 1, 30).is_err());
    assert!(Q41Matrix::from_gguf_bytes(&[0u8; 19], 1, 32).is_err());
    assert!(QuantMatrix::<BlockQ50>::from_gguf_bytes(&[0u8; 21], 1, 32).is_err());
    let w = Q41Matrix::from_gguf_bytes(&[0u8; 40], 2, 32).unwrap();
    assert!(w.matmul(&[0f32; 33]).is_err());
}

/// A k-quant's matrix of [`KMatrix`] and the 32-value-block view of the same bytes
/// ([`QuantMatrix`] of `Old`, the kernels k-quants had before): both dequantise as GGUF
/// does, and every path of the super-block kernels matches the dequantised product.
fn check_k_type<B: kquants::KBlock, Old: WeightBlock>(seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // One super-block per row, three, and eight.
    for (n, k) in [(37, 256), (9, 768), (5, 2048)] {
        let bytes = random_blocks::<Old>(&mut rng, n, k);
        let w = kquants::KMatrix::<B>::from_gguf_bytes(&bytes, n, k).unwrap();
        let wf: Vec<f32> = bytes
            .chunks_exact(Old::BYTES)
            .flat_map(|c| gguf_dequant(Old::NAME, c))
            .collect();
        assert_eq!(w.dequantize(), wf, "{}: dequantisation", B::NAME);
        let old = QuantMatrix::<Old>::from_gguf_bytes(&bytes, n, k).unwrap();
        assert_eq!(old.dequantize(), wf, "{}: 32-value view", B::NAME);
        let wmax = wf.iter().fold(0f32, |a, v| a.max(v.abs()));
        for m in [1usize, 3, 4, 5, 9, 16, 21] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let want = reference(&wf, &x, n, k);
            for simd in Simd::available() {
                let got = matmul(&w.clone().with_simd(simd), &x).unwrap();
                assert_eq!(got.len(), m * n);
                for (g, e) in got.iter().zip(&want) {
                    // 8-bit activations per 256 values: error about Σ|w|·|x|/254.
                    let tol = 0.01 * k as f32 * wmax;
                    assert!(
                        (g - e).abs() < tol,
                        "{} {simd:?} m={m}: {g} vs {e}",
                        B::NAME
                    );
                }
            }
        }
    }
}

#[test]
fn k_quant_super_block_kernels_match_the_dequantized_product() {
    check_k_type::<kquants::KQ4, BlockQ4K>(41);
    check_k_type::<kquants::KQ5, BlockQ5K>(42);
    check_k_type::<kquants::KQ6, BlockQ6K>(43);
}

/// The bits of each value (so that a NaN or a signed zero cannot hide a difference).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// The super-block kernels' paths agree to float rounding; on each path a row's result is
/// the same bits alone, in a batch (the prompt paths) and in every tile shape; the SIMD
/// paths (AVX2, AVX-VNNI, AVX-512 VNNI) give the same bits as each other.
fn check_k_paths_agree<B: kquants::KBlock, Old: WeightBlock>(seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (n, k) = (20, 512);
    let w = kquants::KMatrix::<B>::from_gguf_bytes(&random_blocks::<Old>(&mut rng, n, k), n, k)
        .unwrap();
    // 70 rows: on AVX-512 VNNI the prompt path, 8-row steps, a 4-row and a 2-row step,
    // for a whole 16-row weight group and a group of 4 (n = 20); more rows than a lanes
    // group holds at once (64), so a work item of all rows is split.
    let rows_in = 70;
    let x: Vec<f32> = (0..rows_in * k).map(|_| rng.gen_range(-3.0..3.0)).collect();
    let acts = Acts::quantize_for(&x, k, false, true);
    let paths: Vec<_> = Simd::available()
        .into_iter()
        .map(|p| w.clone().with_simd(p))
        .collect();
    // Every path: the batch (the prompt paths of AVX2 and AVX-VNNI, 8 weight rows per
    // register, in steps of several rows then single rows, for two whole 8-row weight
    // groups and a group of 4) against each row alone (the tiles), bit for bit.
    let mut batches = Vec::new();
    for p in &paths {
        let batch = matmul(p, &x).unwrap();
        for r in 0..rows_in {
            let alone = matmul(p, &x[r * k..(r + 1) * k]).unwrap();
            let (a, b) = (bits(&alone), bits(&batch[r * n..(r + 1) * n]));
            assert_eq!(a, b, "{} {:?} row {r}", B::NAME, p.simd);
        }
        batches.push((p.simd, batch));
    }
    // The SIMD paths share the arithmetic (exact integers per super-block, then the same
    // fused multiply-adds): the same bits on every level.
    let simd: Vec<_> = batches
        .iter()
        .filter(|(s, _)| *s != Simd::Portable)
        .collect();
    for (s, b) in &simd {
        assert_eq!(bits(b), bits(&simd[0].1), "{} {s:?}", B::NAME);
    }
    // Rows in lanes (AVX-512 VNNI's stored form): the same weights, and the same bits as
    // the row-major paths for the batch, for each row alone, and for every weight-row
    // range a work item may take (unaligned ones included).
    #[cfg(target_arch = "x86_64")]
    if super::x86::klanes512::available::<B>(Simd::detect().unwrap()) {
        let lanes = super::x86::klanes512::KLanes::from_kmatrix(&w).unwrap();
        assert_eq!(
            bits(&lanes.dequantize()),
            bits(&w.dequantize()),
            "{}",
            B::NAME
        );
        let batch = matmul(&lanes, &x).unwrap();
        assert_eq!(bits(&batch), bits(&simd[0].1), "{} in lanes", B::NAME);
        for r in 0..rows_in {
            let alone = matmul(&lanes, &x[r * k..(r + 1) * k]).unwrap();
            assert_eq!(
                bits(&alone),
                bits(&batch[r * n..(r + 1) * n]),
                "{} row {r}",
                B::NAME
            );
        }
        // Every pass width (1 to 8 activation rows over a super-block's lines at once):
        // the first m rows alone, the same bits as in the batch.
        for m in 1..=8 {
            let first = matmul(&lanes, &x[..m * k]).unwrap();
            assert_eq!(bits(&first), bits(&batch[..m * n]), "{} {m} rows", B::NAME);
        }
        for (j0, j1, r0, r1) in [
            (3, 19, 0, 37),
            (0, 1, 5, 6),
            (15, 17, 2, 9),
            (16, 20, 30, 37),
            (0, 20, 0, 70),
        ] {
            let mut y = vec![f32::NAN; rows_in * n];
            // SAFETY: acts has rows_in rows of k values; y holds rows_in·n floats.
            unsafe { lanes.run_chunk(&acts, r0..r1, j0..j1, y.as_mut_ptr()) };
            for r in 0..rows_in {
                for j in 0..n {
                    let (got, want) = (y[r * n + j], batch[r * n + j]);
                    if (r0..r1).contains(&r) && (j0..j1).contains(&j) {
                        assert_eq!(got.to_bits(), want.to_bits(), "{} ({r}, {j})", B::NAME);
                    } else {
                        assert!(
                            got.is_nan(),
                            "{} wrote ({r}, {j}) outside its range",
                            B::NAME
                        );
                    }
                }
            }
        }
    }
    let rows = [0, 1, 2, 3];
    for j in 0..n {
        let want = paths[0].dot_tiles::<1, 4>([j], &acts, rows)[0];
        for p in &paths {
            let got = p.dot_tiles::<1, 4>([j], &acts, rows)[0];
            for (g, e) in got.iter().zip(&want) {
                assert!(
                    (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "{} {:?}: {g} vs {e}",
                    B::NAME,
                    p.simd
                );
            }
            for (i, &g) in got.iter().enumerate() {
                let one = p.dot_tiles::<1, 1>([j], &acts, [i])[0][0];
                assert_eq!(one.to_bits(), g.to_bits(), "{} {:?}", B::NAME, p.simd);
                let two = p.dot_tiles::<1, 2>([j], &acts, [i, 5])[0][0];
                assert_eq!(two.to_bits(), g.to_bits(), "{} {:?}", B::NAME, p.simd);
            }
            if j + 1 < n {
                let two = p.dot_tiles::<2, 4>([j, j + 1], &acts, rows);
                assert_eq!(two[0], got, "{} {:?}", B::NAME, p.simd);
                let next = p.dot_tiles::<1, 4>([j + 1], &acts, rows)[0];
                assert_eq!(two[1], next, "{} {:?}", B::NAME, p.simd);
            }
        }
        #[cfg(target_arch = "x86_64")]
        {
            let by = |s: Simd| paths.iter().find(|p| p.simd == s);
            if let (Some(a), Some(v)) = (by(Simd::Avx2), by(Simd::AvxVnni)) {
                assert_eq!(
                    a.dot_tiles::<2, 4>([j, (j + 1) % n], &acts, rows),
                    v.dot_tiles::<2, 4>([j, (j + 1) % n], &acts, rows),
                    "{}",
                    B::NAME
                );
            }
        }
    }
}

#[test]
fn k_quant_paths_agree_and_tiles_are_bit_identical() {
    check_k_paths_agree::<kquants::KQ4, BlockQ4K>(51);
    check_k_paths_agree::<kquants::KQ5, BlockQ5K>(52);
    check_k_paths_agree::<kquants::KQ6, BlockQ6K>(53);
}

/// Decode of one activation row with the groups taken in pairs (two streams of weights per
/// thread) gives the bits of the groups one after another, for whole and partial work items
/// of an odd and an even number of groups, and writes nothing outside its rows.
#[cfg(target_arch = "x86_64")]
fn check_lanes_in_pairs<B: kquants::KBlock, Old: WeightBlock>(seed: u64) {
    use super::x86::klanes512::{available, KLanes, Pairing};
    if !available::<B>(Simd::detect().unwrap()) {
        return;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // 149 weight rows: 10 groups, the last of 5 rows.
    let (n, k) = (149, 512);
    let w = kquants::KMatrix::<B>::from_gguf_bytes(&random_blocks::<Old>(&mut rng, n, k), n, k)
        .unwrap();
    let lanes = KLanes::from_kmatrix(&w).unwrap();
    let x: Vec<f32> = (0..2 * k).map(|_| rng.gen_range(-3.0..3.0)).collect();
    let acts = Acts::quantize_for(&x, k, false, true);
    for (j0, j1) in [
        (0, 149),
        (3, 147),
        (16, 80),
        (5, 70),
        (40, 100),
        (0, 64),
        (17, 18),
    ] {
        for row in 0..2 {
            let run = |pairing| {
                let mut y = vec![f32::NAN; 2 * n];
                // SAFETY: acts has 2 rows of k values; y holds 2·n floats.
                unsafe {
                    lanes.run_chunk_with(&acts, row..row + 1, j0..j1, y.as_mut_ptr(), pairing)
                };
                y
            };
            let (one, pairs) = (run(Pairing::Off), run(Pairing::Always));
            assert_eq!(
                bits(&pairs),
                bits(&one),
                "{} rows {j0}..{j1}, row {row}",
                B::NAME
            );
            for (i, v) in one.iter().enumerate() {
                let inside = i / n == row && (j0..j1).contains(&(i % n));
                assert_eq!(
                    v.is_nan(),
                    !inside,
                    "{} wrote {i} for rows {j0}..{j1}",
                    B::NAME
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn k_quant_lanes_in_pairs_give_the_bits_of_one_group_at_a_time() {
    check_lanes_in_pairs::<kquants::KQ4, BlockQ4K>(61);
    check_lanes_in_pairs::<kquants::KQ5, BlockQ5K>(62);
    check_lanes_in_pairs::<kquants::KQ6, BlockQ6K>(63);
}

/// Rows in lanes built straight from the file's rows (a model load: pieces of whole 16-row
/// groups, several pieces, a partial last group; from bytes and from a reader) hold the same
/// weights as the lanes built from the row-major matrix.
#[cfg(target_arch = "x86_64")]
fn check_lanes_from_source<B: kquants::KBlock, Old: WeightBlock>(seed: u64) {
    use super::source::RowSource;
    use super::x86::klanes512::{available, KLanes};
    let simd = Simd::detect().unwrap();
    if !available::<B>(simd) {
        return;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // 256-value rows: 1,248–1,820 rows per 256 KiB piece, so 3,000 rows are two or three
    // pieces, the last group 8 rows
    let (n, k) = (3000, 256);
    let bytes = random_blocks::<Old>(&mut rng, n, k);
    let from_matrix =
        KLanes::from_kmatrix(&kquants::KMatrix::<B>::from_gguf_bytes(&bytes, n, k).unwrap())
            .unwrap()
            .dequantize();
    let from_bytes = KLanes::<B>::from_source(&RowSource::Bytes(&bytes), n, k, simd)
        .unwrap()
        .dequantize();
    assert_eq!(
        bits(&from_bytes),
        bits(&from_matrix),
        "{} from bytes",
        B::NAME
    );
    let read = |at: u64, buf: &mut [u8]| -> std::io::Result<()> {
        let at = at as usize;
        buf.copy_from_slice(&bytes[at..at + buf.len()]);
        Ok(())
    };
    let from_read = KLanes::<B>::from_source(&RowSource::Read(&read), n, k, simd)
        .unwrap()
        .dequantize();
    assert_eq!(
        bits(&from_read),
        bits(&from_matrix),
        "{} from a reader",
        B::NAME
    );
    assert!(KLanes::<B>::from_source(&RowSource::Bytes(&bytes), n, k + 1, simd).is_err());
}

#[test]
#[cfg(target_arch = "x86_64")]
fn k_quant_lanes_build_straight_from_the_file_rows() {
    check_lanes_from_source::<kquants::KQ4, BlockQ4K>(61);
    check_lanes_from_source::<kquants::KQ5, BlockQ5K>(62);
    check_lanes_from_source::<kquants::KQ6, BlockQ6K>(63);
}

/// Q6_K blocks at the ends of their ranges: every value 63 with every scale −128, every
/// value 0 with scales 127, and random values with scales drawn from −128, −1, 0, 63, 127;
/// `d` random. One row per super-block takes each kind in turn.
fn extreme_q6_k_bytes(rng: &mut impl Rng, n: usize, k: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for b in 0..n * k / 256 {
        let mut blk: Vec<u8> = (0..210).map(|_| rng.gen()).collect();
        let kind = b % 4;
        let fill = match kind {
            0 => Some(0xff),
            1 => Some(0x00),
            _ => None,
        };
        if let Some(v) = fill {
            blk[..192].fill(v);
        }
        for sc in &mut blk[192..208] {
            *sc = match kind {
                0 => 0x80,
                1 => 127,
                2 => [0x80, 0xff, 0, 63, 127][rng.gen_range(0..5)],
                _ => [0x80, 127][rng.gen_range(0..2)],
            };
        }
        let d = half::f16::from_f32(rng.gen_range(0.0001..0.001)).to_le_bytes();
        blk[208..210].copy_from_slice(&d);
        bytes.extend_from_slice(&blk);
    }
    bytes
}

/// Q6_K in lanes (AVX-512 VNNI with GFNI) gives the row-major paths' bits on blocks with
/// extreme values and scales against extreme activations, for the batch, each row alone
/// and unaligned weight-row ranges; CPUs or levels without it keep the row-major matrix.
#[test]
fn q6_k_in_lanes_gives_the_row_major_bits_on_extreme_blocks() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(57);
    let (n, k) = (37, 768);
    let bytes = extreme_q6_k_bytes(&mut rng, n, k);
    let w = kquants::KMatrix::<kquants::KQ6>::from_gguf_bytes(&bytes, n, k).unwrap();
    // The largest activations of each sign, alternating signs, and random rows: 21 rows
    // (in lanes: steps of 8, 8, 4, 1).
    let rows_in = 21;
    let x: Vec<f32> = (0..rows_in)
        .flat_map(|r| {
            let row: Vec<f32> = match r {
                0 => vec![3.0; k],
                1 => vec![-3.0; k],
                2 => (0..k)
                    .map(|i| if i % 2 == 0 { 3.0 } else { -3.0 })
                    .collect(),
                _ => (0..k).map(|_| rng.gen_range(-3.0..3.0)).collect(),
            };
            row
        })
        .collect();
    let wf = w.dequantize();
    let want = reference(&wf, &x, n, k);
    // 8-bit activations per 256 values (|x| <= 3): error about Σ|w|·|x|/254.
    let tol = 0.03 * k as f32 * wf.iter().fold(0f32, |a, v| a.max(v.abs()));
    for simd in Simd::available() {
        let m = w.clone().with_simd(simd);
        let got = matmul(&m, &x).unwrap();
        for (g, e) in got.iter().zip(&want) {
            assert!((g - e).abs() < tol, "{simd:?}: {g} vs {e}");
        }
        #[cfg(target_arch = "x86_64")]
        if simd != Simd::Avx512Vnni {
            assert!(!super::x86::klanes512::available::<kquants::KQ6>(simd));
            assert!(!super::x86::klanes512::available::<kquants::KQ4>(simd));
            assert!(super::x86::klanes512::KLanes::from_kmatrix(&m).is_err());
        }
    }
    #[cfg(target_arch = "x86_64")]
    if super::x86::klanes512::available::<kquants::KQ6>(Simd::detect().unwrap()) {
        let rm = w.clone().with_simd(Simd::Avx512Vnni);
        let lanes = super::x86::klanes512::KLanes::from_kmatrix(&rm).unwrap();
        assert_eq!(bits(&lanes.dequantize()), bits(&wf));
        let batch = matmul(&rm, &x).unwrap();
        assert_eq!(bits(&matmul(&lanes, &x).unwrap()), bits(&batch), "batch");
        for r in 0..rows_in {
            let row = &x[r * k..(r + 1) * k];
            let (a, b) = (matmul(&lanes, row).unwrap(), matmul(&rm, row).unwrap());
            assert_eq!(bits(&a), bits(&b), "row {r} alone");
            assert_eq!(bits(&a), bits(&batch[r * n..(r + 1) * n]), "row {r}");
        }
        let acts = Acts::quantize_for(&x, k, false, true);
        // Row steps of 8, 8, 4, 1; 1; 8, 4, 2; 2, 1; 2; 4; 4, 2, 1.
        for (j0, j1, r0, r1) in [
            (1, 36, 0, 21),
            (17, 18, 3, 4),
            (30, 37, 5, 19),
            (0, 16, 0, 3),
            (15, 33, 10, 12),
            (2, 5, 1, 5),
            (16, 37, 14, 21),
        ] {
            let mut y = vec![f32::NAN; rows_in * n];
            // SAFETY: acts has rows_in rows of k values; y holds rows_in·n floats.
            unsafe { lanes.run_chunk(&acts, r0..r1, j0..j1, y.as_mut_ptr()) };
            for r in 0..rows_in {
                for j in 0..n {
                    let got = y[r * n + j];
                    if (r0..r1).contains(&r) && (j0..j1).contains(&j) {
                        assert_eq!(got.to_bits(), batch[r * n + j].to_bits(), "({r}, {j})");
                    } else {
                        assert!(got.is_nan(), "wrote ({r}, {j}) outside its range");
                    }
                }
            }
        }
    }
}

#[test]
fn extreme_k_quant_values_do_not_overflow() {
    // Q6_K's largest 4-value sum (4·63·127) and largest scales (−128) against ±127
    // activations, and Q5_K's largest values and scales: the 16-bit steps must not wrap.
    let mut q6 = vec![0xffu8; 192];
    q6.extend([0x80u8; 16]);
    q6.extend(half::f16::from_f32(1.0).to_le_bytes());
    let mut q5 = half::f16::from_f32(1.0).to_le_bytes().to_vec();
    q5.extend(half::f16::from_f32(1.0).to_le_bytes());
    q5.extend([0xffu8; 172]);
    let x: Vec<f32> = (0..256)
        .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
        .collect();
    for (dt, bytes) in [(GgmlDType::Q6K, q6), (GgmlDType::Q5K, q5)] {
        let w = cpu_matrix_of(dt, &bytes, 1, 256).unwrap().unwrap();
        let want = reference(&w.dequantize(), &x, 1, 256)[0];
        for simd in Simd::available() {
            let m: Box<dyn CpuMatmul> = match dt {
                GgmlDType::Q6K => Box::new(
                    kquants::KMatrix::<kquants::KQ6>::from_gguf_bytes(&bytes, 1, 256)
                        .unwrap()
                        .with_simd(simd),
                ),
                _ => Box::new(
                    kquants::KMatrix::<kquants::KQ5>::from_gguf_bytes(&bytes, 1, 256)
                        .unwrap()
                        .with_simd(simd),
                ),
            };
            let y = matmul(m.as_ref(), &x).unwrap()[0];
            assert!(
                (y - want).abs() <= 1e-3 * want.abs(),
                "{dt:?} {simd:?}: {y} vs {want}"
            );
            // Nine rows (the prompt paths), among them all +1 and all −1 (the largest
            // sums of the 16-bit steps): each the bits of the row alone.
            let rows: Vec<Vec<f32>> = (0..9)
                .map(|r| match r {
                    0 => vec![1.0; 256],
                    1 => vec![-1.0; 256],
                    _ => x.iter().map(|v| v * (r as f32 - 4.5)).collect(),
                })
                .collect();
            let batch = matmul(m.as_ref(), &rows.concat()).unwrap();
            for (r, row) in rows.iter().enumerate() {
                let alone = matmul(m.as_ref(), row).unwrap()[0];
                assert_eq!(
                    batch[r].to_bits(),
                    alone.to_bits(),
                    "{dt:?} {simd:?} row {r}"
                );
                let want = reference(&w.dequantize(), row, 1, 256)[0];
                assert!(
                    (alone - want).abs() <= 1e-3 * want.abs().max(1.0),
                    "{dt:?} {simd:?} row {r}: {alone} vs {want}"
                );
            }
        }
    }
}

#[test]
fn k_quant_and_32_value_matrices_share_one_input() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(61);
    let k = 512;
    let a = kquants::KMatrix::<kquants::KQ4>::from_gguf_bytes(
        &random_blocks::<BlockQ4K>(&mut rng, 24, k),
        24,
        k,
    )
    .unwrap();
    let b =
        QuantMatrix::<BlockQ80>::from_gguf_bytes(&random_blocks::<BlockQ80>(&mut rng, 7, k), 7, k)
            .unwrap();
    let c = kquants::KMatrix::<kquants::KQ6>::from_gguf_bytes(
        &random_blocks::<BlockQ6K>(&mut rng, 16, k),
        16,
        k,
    )
    .unwrap();
    for m in [1usize, 5, 70] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let ys = matmul_many(&[&a, &b, &c], &x).unwrap();
        assert_eq!(ys[0], matmul(&a, &x).unwrap());
        assert_eq!(ys[1], matmul(&b, &x).unwrap());
        assert_eq!(ys[2], matmul(&c, &x).unwrap());
    }
}

/// Decode's guided shares (`run_guided`): grabs that cross from one matrix into the next
/// and end inside a lanes group's run give each matrix the bits of its whole product in one
/// call, for every pass width up to a full block of activation rows.
#[test]
fn guided_shares_over_several_matrices_give_each_whole_products_bits() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(71);
    let k = 512;
    // 13 + 3 + 19 units of 16 rows: the first grabs take several units each.
    let shapes = [
        (GgmlDType::Q4K, 200),
        (GgmlDType::Q8_0, 37),
        (GgmlDType::Q6K, 300),
    ];
    let ws: Vec<Box<dyn CpuMatmul>> = shapes
        .iter()
        .map(|&(dt, n)| {
            let bytes = random_matrix(&mut rng, dt, n, k);
            cpu_matrix_of(dt, &bytes, n, k).unwrap().unwrap()
        })
        .collect();
    let refs: Vec<&dyn CpuMatmul> = ws.iter().map(|w| w.as_ref()).collect();
    for m in [1usize, 3, 5, 8, 64] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let ys = matmul_many(&refs, &x).unwrap();
        for (w, y) in refs.iter().zip(&ys) {
            let acts = Acts::prepare(&x, k, acts::Forms::of([w.acts_form()]));
            let mut whole = vec![f32::NAN; m * w.n()];
            // SAFETY: acts has m rows of k values; `whole` holds m·n floats.
            unsafe { w.run_chunk(&acts, 0..m, 0..w.n(), whole.as_mut_ptr()) };
            assert_eq!(bits(y), bits(&whole), "{w:?}, {m} rows");
        }
    }
}

/// Why Q8_0 stays with this module ([`candle_repack_rounds_as_llama`]): activations whose
/// 256-value blocks each hold one large value. Rounded in blocks of 32, as llama.cpp does and
/// [`Acts`] does, only the 32 values beside the large one lose precision; rounded in blocks of
/// 256 (candle's repacked Q8_0, on a CPU where candle repacks it), all 256 do.
#[test]
fn q8_0_activations_are_rounded_in_blocks_of_32() {
    use candle_core::quantized::{QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};
    let dev = Device::Cpu;
    let (n, k) = (16, 1024);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(26);
    let wf: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    let q = QTensor::quantize(
        &Tensor::from_vec(wf, (n, k), &dev).unwrap(),
        GgmlDType::Q8_0,
    )
    .unwrap();
    let ours_w = cpu_matrix_of(GgmlDType::Q8_0, &q.data().unwrap(), n, k)
        .unwrap()
        .unwrap();
    let wd = ours_w.dequantize();
    let x: Vec<f32> = (0..k)
        .map(|i| {
            if i % 256 == 7 {
                50.0
            } else {
                rng.gen_range(-0.5f32..0.5)
            }
        })
        .collect();
    let exact = reference(&wd, &x, n, k);
    let err = |y: &[f32]| {
        y.iter()
            .zip(&exact)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max)
    };
    // The bound of rounding each value to the nearest step of its 32-value block.
    let bound = (0..n)
        .map(|j| {
            x.chunks_exact(BLOCK)
                .zip(wd[j * k..(j + 1) * k].chunks_exact(BLOCK))
                .map(|(xb, wb)| {
                    let step = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                    wb.iter().map(|w| w.abs()).sum::<f32>() * step / 2.0
                })
                .sum::<f32>()
        })
        .fold(0f32, f32::max);
    let ours = matmul(ours_w.as_ref(), &x).unwrap();
    assert!(
        err(&ours) <= bound * 1.01,
        "joule's Q8_0 error {} exceeds rounding in blocks of 32 ({bound})",
        err(&ours)
    );
    if candle_repacks(GgmlDType::Q8_0, n, k) {
        let mm = QMatMul::from_qtensor(q).unwrap();
        let xt = Tensor::from_vec(x.clone(), (1, k), &dev).unwrap();
        let theirs: Vec<f32> = mm
            .forward(&xt)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!(
            err(&theirs) > 4.0 * err(&ours),
            "candle's repacked Q8_0 (error {}) now rounds like blocks of 32 (joule {}): \
             candle_repack_rounds_as_llama may be true for Q8_0 again",
            err(&theirs),
            err(&ours)
        );
    }
}

/// The k-quant super-block as [`kquants::KBlock::parse`] split it before its current form, value
/// by value from the format's definition: `(payload bytes, Q5_K fifth-bit masks)`. The
/// parse of today (whole bytes at a time) must give the same bits.
fn k_parse_reference(name: &str, c: &[u8]) -> (Vec<u8>, [u64; 4]) {
    let k_nibbles = |ql: &[u8]| -> Vec<u8> {
        let value = |v: usize| (ql[32 * (v / 64) + v % 32] >> (4 * ((v / 32) % 2))) & 0x0f;
        (0..128)
            .map(|b| {
                let (h, l) = (b / 64, b % 64);
                value(128 * h + l) | value(128 * h + 64 + l) << 4
            })
            .collect()
    };
    match name {
        "Q4_K" => (k_nibbles(&c[16..144]), [0; 4]),
        "Q5_K" => {
            let qh = &c[16..48];
            let bit = |v: usize| u64::from((qh[v % 32] >> (v / 32)) & 1);
            let masks =
                std::array::from_fn(|g| (0..64).fold(0u64, |m, l| m | bit(64 * g + l) << l));
            (k_nibbles(&c[48..176]), masks)
        }
        _ => {
            let value = |v: usize| {
                let (n, t, l) = (v / 128, (v % 128) / 32, v % 32);
                let low = (c[64 * n + l + 32 * (t % 2)] >> (4 * (t / 2))) & 0x0f;
                let high = (c[128 + 32 * n + l] >> (2 * t)) & 3;
                low | high << 4
            };
            let mut out: Vec<u8> = (0..128)
                .map(|b| {
                    let (h, l) = (b / 64, b % 64);
                    (value(128 * h + l) & 0x0f) | (value(128 * h + 64 + l) & 0x0f) << 4
                })
                .collect();
            out.extend(
                (0..64).map(|l| (0..4).fold(0u8, |q, g| q | (value(64 * g + l) >> 4) << (2 * g))),
            );
            (out, [0; 4])
        }
    }
}

#[test]
fn k_quant_parse_gives_the_bits_of_the_value_by_value_parse() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(47);
    for _ in 0..200 {
        let c: Vec<u8> = (0..210).map(|_| rng.gen()).collect();
        let (q, _) = <kquants::KQ4 as kquants::KBlock>::parse(&c[..144]);
        assert_eq!(q.0.to_vec(), k_parse_reference("Q4_K", &c).0, "Q4_K");
        let (q, m) = <kquants::KQ5 as kquants::KBlock>::parse(&c[..176]);
        assert_eq!((q.0.to_vec(), m.qh), k_parse_reference("Q5_K", &c), "Q5_K");
        let (q, _) = <kquants::KQ6 as kquants::KBlock>::parse(&c);
        let mut got = q.ql.0.to_vec();
        got.extend_from_slice(&q.qh);
        assert_eq!(got, k_parse_reference("Q6_K", &c).0, "Q6_K");
    }
}

/// A matrix read piece by piece from a reader (a model load) is the matrix built from the
/// same bytes in memory, bit for bit, for row counts below, at and across the piece size;
/// a reader's error is the build's error.
fn check_k_read<B: kquants::KBlock, Old: WeightBlock>(seed: u64) {
    use source::{RowSource, PIECE_BYTES};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let k = 2048;
    let row = k / 256 * B::BYTES;
    for n in [
        1,
        3,
        PIECE_BYTES / row,
        PIECE_BYTES / row + 1,
        3 * PIECE_BYTES / row + 5,
    ] {
        let bytes = random_blocks::<Old>(&mut rng, n, k);
        let whole = kquants::KMatrix::<B>::from_gguf_bytes(&bytes, n, k).unwrap();
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let read = |off: u64, buf: &mut [u8]| -> std::io::Result<()> {
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let off = off as usize;
            buf.copy_from_slice(&bytes[off..off + buf.len()]);
            Ok(())
        };
        let got = kquants::KMatrix::<B>::from_source(&RowSource::Read(&read), n, k).unwrap();
        assert_eq!(
            reads.into_inner(),
            (n * row).div_ceil(PIECE_BYTES / row * row),
            "{} n={n}: pieces",
            B::NAME
        );
        // SAFETY: the payload and scale types are plain bytes, integers and floats without
        // padding (sizes 128, 192; 24, 56, 20), so their bytes are all initialised.
        let raw = |m: &kquants::KMatrix<B>| unsafe {
            let bytes = |p: *const u8, len: usize| std::slice::from_raw_parts(p, len).to_vec();
            (
                bytes(m.qs.as_ptr() as *const u8, std::mem::size_of_val(&m.qs[..])),
                bytes(
                    m.meta.as_ptr() as *const u8,
                    std::mem::size_of_val(&m.meta[..]),
                ),
            )
        };
        assert!(raw(&got) == raw(&whole), "{} n={n}: stored bits", B::NAME);
        assert_eq!(got.dequantize(), whole.dequantize(), "{} n={n}", B::NAME);
        assert_eq!(got.resident_bytes(), whole.resident_bytes());
        same_products(&got, &whole, &mut rng, 3, &format!("{} n={n}", B::NAME));
    }
    let err = kquants::KMatrix::<B>::from_source(&RowSource::Read(&no_bytes), 40, k).unwrap_err();
    assert!(err.to_string().contains("no bytes at"), "{err}");
}

/// `rows` random activation rows through `a` and `b` give the same products, bit for bit.
fn same_products(
    a: &dyn CpuMatmul,
    b: &dyn CpuMatmul,
    rng: &mut impl Rng,
    rows: usize,
    what: &str,
) {
    let x: Vec<f32> = (0..rows * a.k())
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let (pa, pb) = (matmul(a, &x).unwrap(), matmul(b, &x).unwrap());
    assert!(
        pa.iter().zip(&pb).all(|(p, q)| p.to_bits() == q.to_bits()),
        "{what}: products"
    );
}

/// A file read that always fails.
fn no_bytes(off: u64, _: &mut [u8]) -> std::io::Result<()> {
    Err(std::io::Error::other(format!("no bytes at {off}")))
}

#[test]
fn k_quant_matrices_read_piece_by_piece_equal_those_built_whole() {
    check_k_read::<kquants::KQ4, BlockQ4K>(51);
    check_k_read::<kquants::KQ5, BlockQ5K>(52);
    check_k_read::<kquants::KQ6, BlockQ6K>(53);
}

/// Random 16-bit weights of `H` for an `[n, k]` matrix (GGUF bytes), with a few zeros,
/// negative zeros and extreme values among ordinary ones.
fn random_floats<H: floats::HalfType>(rng: &mut impl Rng, n: usize, k: usize) -> Vec<u8> {
    (0..n * k)
        .flat_map(|_| {
            let v: f32 = match rng.gen_range(0..50) {
                0 => 0.0,
                1 => -0.0,
                2 => 1000.0,
                3 => 1e-6,
                _ => rng.gen_range(-0.5..0.5),
            };
            let bits = if H::NAME == "F16" {
                half::f16::from_f32(v).to_bits()
            } else {
                half::bf16::from_f32(v).to_bits()
            };
            bits.to_le_bytes()
        })
        .collect()
}

/// The dot product as llama.cpp's tinyBLAS computes it, written from the definition on the
/// natural order of the values (not through `arrange`/`dot_portable`): 16 lanes, F16 value
/// `i` into lane `i mod 16`, BF16 of each 32 the pair `2l + 1`, `2l` into lane `l`; then the
/// lanes' tree.
fn tinyblas_dot<H: floats::HalfType>(w: &[f32], x: &[f32]) -> f32 {
    let k = w.len();
    let at = |v: &[f32], i: usize| if i < k { v[i] } else { 0.0 };
    let mut l = [0f32; 16];
    let kp = H::padded(k);
    if H::NAME == "F16" {
        for i in 0..kp {
            l[i % 16] = at(w, i).mul_add(H::round(at(x, i)), l[i % 16]);
        }
    } else {
        for c in (0..kp).step_by(32) {
            for (lane, acc) in l.iter_mut().enumerate() {
                let (o, e) = (c + 2 * lane + 1, c + 2 * lane);
                *acc = at(w, o).mul_add(H::round(at(x, o)), *acc);
                *acc = at(w, e).mul_add(H::round(at(x, e)), *acc);
            }
        }
    }
    let s8: Vec<f32> = (0..8).map(|i| l[i] + l[i + 8]).collect();
    let s4: Vec<f32> = (0..4).map(|i| s8[i] + s8[i + 4]).collect();
    (s4[0] + s4[2]) + (s4[1] + s4[3])
}

/// An F16/BF16 matrix: dequantises to the file's values; on every path, every row count
/// and every tile the products are the bits of [`tinyblas_dot`] (so the paths, the tiles
/// and a row alone or batched agree bit for bit), and close to the f64 product.
fn check_floats<H: floats::HalfType>(seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // Whole steps, a partial last step, fewer values than one step; 4-row weight tiles
    // and a remainder.
    for (n, k) in [(11, 256), (6, 80), (5, 7), (9, 2560)] {
        let bytes = random_floats::<H>(&mut rng, n, k);
        let wf: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|b| H::to_f32(u16::from_le_bytes([b[0], b[1]])))
            .collect();
        let w = floats::FloatMatrix::<H>::from_gguf_bytes(&bytes, n, k).unwrap();
        assert_eq!(bits(&w.dequantize()), bits(&wf), "{} [{n}, {k}]", H::NAME);
        assert_eq!(w.resident_bytes(), (n * H::padded(k) * 2) as u64);
        let m = 11;
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let want: Vec<f32> = (0..m)
            .flat_map(|r| {
                let (wf, x) = (&wf, &x);
                (0..n).map(move |j| {
                    tinyblas_dot::<H>(&wf[j * k..(j + 1) * k], &x[r * k..(r + 1) * k])
                })
            })
            .collect();
        // Against the f64 product: the activations' rounding (2⁻¹¹ or 2⁻⁸ of each value)
        // bounds the error by that share of Σ|w·x|.
        let exact = reference(&wf, &x, n, k);
        let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
        let mag = reference(&abs(&wf), &abs(&x), n, k);
        let rel = if H::NAME == "F16" {
            2f32.powi(-11)
        } else {
            2f32.powi(-8)
        };
        for ((g, e), s) in want.iter().zip(&exact).zip(&mag) {
            assert!(
                (g - e).abs() <= 1.01 * rel * s + 1e-4,
                "{}: {g} vs {e}",
                H::NAME
            );
        }
        for simd in Simd::available() {
            let p = w.clone().with_simd(simd);
            let all = matmul(&p, &x).unwrap();
            assert_eq!(bits(&all), bits(&want), "{} {simd:?} [{n}, {k}]", H::NAME);
            for rows in [1, 2, 3, 5] {
                let part = matmul(&p, &x[..rows * k]).unwrap();
                assert_eq!(
                    bits(&part),
                    bits(&want[..rows * n]),
                    "{} {simd:?} {rows} rows",
                    H::NAME
                );
            }
            // Uneven chunks of weight rows and activation rows.
            let acts = Acts::prepare(&x, k, acts::Forms::of([H::FORM]));
            let mut y = vec![f32::NAN; m * n];
            for (js, rows) in [(0..3, 0..5), (3..n, 0..5), (0..1, 5..m), (1..n, 5..m)] {
                // SAFETY: the rows exist, y holds m·n values, one writer.
                unsafe { p.run_chunk(&acts, rows, js, y.as_mut_ptr()) };
            }
            assert_eq!(bits(&y), bits(&want), "{} {simd:?} chunks", H::NAME);
        }
    }
}

#[test]
fn f16_and_bf16_matrices_multiply_as_tinyblas_on_every_path_and_tile() {
    check_floats::<floats::F16>(61);
    check_floats::<floats::Bf16>(62);
}

#[test]
fn f16_and_bf16_activations_round_to_nearest_even() {
    // Halfway cases round to even; NaN stays NaN; overflow goes to infinity.
    let one = 1.0f32;
    let f16_half_ulp = one + 2f32.powi(-11);
    let x = [
        f16_half_ulp,
        one + 3.0 * 2f32.powi(-11),
        70000.0,
        f32::NAN,
        -0.0,
    ];
    let mut out = vec![0f32; floats::F16::padded(x.len())];
    floats::F16::arrange(&x, &mut out);
    assert_eq!(out[0], 1.0);
    assert_eq!(out[1], one + 2.0 * 2f32.powi(-10));
    assert_eq!(out[2], f32::INFINITY);
    assert!(out[3].is_nan());
    assert_eq!(out[4].to_bits(), (-0.0f32).to_bits());
    assert!(out[5..].iter().all(|&v| v.to_bits() == 0));
    // BF16: 8 significant bits; the odd values of each 32 first, then the even ones.
    let x: Vec<f32> = (0..40).map(|i| i as f32).collect();
    let mut out = vec![0f32; floats::Bf16::padded(x.len())];
    floats::Bf16::arrange(&x, &mut out);
    assert_eq!(out.len(), 64);
    assert_eq!(&out[..3], &[1.0, 3.0, 5.0]);
    assert_eq!(&out[16..19], &[0.0, 2.0, 4.0]);
    assert_eq!(&out[32..36], &[33.0, 35.0, 37.0, 39.0]);
    assert!(out[36..48].iter().all(|&v| v == 0.0));
    assert_eq!(&out[48..52], &[32.0, 34.0, 36.0, 38.0]);
    let mut one_val = vec![0f32; 32];
    floats::Bf16::arrange(&[0.0, 1.0 + 2f32.powi(-8)], &mut one_val);
    assert_eq!(one_val[0], 1.0, "halfway rounds to even");
    floats::Bf16::arrange(&[0.0, 1.0 + 3.0 * 2f32.powi(-8)], &mut one_val);
    assert_eq!(one_val[0], 1.0 + 2.0 * 2f32.powi(-7));
}

#[test]
fn float_matrices_read_piece_by_piece_equal_those_built_whole() {
    use source::{RowSource, PIECE_BYTES};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(63);
    let k = 1000;
    for n in [1, PIECE_BYTES / (2 * k) + 1, 3 * PIECE_BYTES / (2 * k) + 5] {
        let bytes = random_floats::<floats::F16>(&mut rng, n, k);
        let whole = floats::FloatMatrix::<floats::F16>::from_gguf_bytes(&bytes, n, k).unwrap();
        let read = |off: u64, buf: &mut [u8]| -> std::io::Result<()> {
            let off = off as usize;
            buf.copy_from_slice(&bytes[off..off + buf.len()]);
            Ok(())
        };
        let got =
            floats::FloatMatrix::<floats::F16>::from_source(&RowSource::Read(&read), n, k).unwrap();
        assert_eq!(got.w, whole.w, "n={n}");
        assert_eq!(got.resident_bytes(), whole.resident_bytes());
    }
    let fail = |off: u64, _: &mut [u8]| -> std::io::Result<()> {
        Err(std::io::Error::other(format!("no bytes at {off}")))
    };
    let err = floats::FloatMatrix::<floats::Bf16>::from_source(&RowSource::Read(&fail), 4, 64)
        .unwrap_err();
    assert!(err.to_string().contains("no bytes at"), "{err}");
}

#[test]
fn float_k_quant_and_32_value_matrices_share_one_input() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(64);
    let (n, k) = (12, 512);
    let f16 = floats::FloatMatrix::<floats::F16>::from_gguf_bytes(
        &random_floats::<floats::F16>(&mut rng, n, k),
        n,
        k,
    )
    .unwrap();
    let bf16 = floats::FloatMatrix::<floats::Bf16>::from_gguf_bytes(
        &random_floats::<floats::Bf16>(&mut rng, n, k),
        n,
        k,
    )
    .unwrap();
    let q6 = kquants::KMatrix::<kquants::KQ6>::from_gguf_bytes(
        &random_blocks::<BlockQ6K>(&mut rng, n, k),
        n,
        k,
    )
    .unwrap();
    let q8 =
        QuantMatrix::<BlockQ80>::from_gguf_bytes(&random_blocks::<BlockQ80>(&mut rng, n, k), n, k)
            .unwrap();
    let x: Vec<f32> = (0..3 * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let ws: [&dyn CpuMatmul; 4] = [&f16, &q6, &bf16, &q8];
    let many = matmul_many(&ws, &x).unwrap();
    for (w, y) in ws.iter().zip(&many) {
        assert_eq!(bits(y), bits(&matmul(*w, &x).unwrap()));
    }
}

#[test]
fn f16_products_match_candles_f32_product() {
    use candle_core::{Device, Module, Tensor};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(65);
    let (n, k, m) = (24, 768, 3);
    let bytes = random_matrix(&mut rng, GgmlDType::F16, n, k);
    let w = cpu_matrix_of(GgmlDType::F16, &bytes, n, k)
        .unwrap()
        .unwrap();
    let q = candle_core::quantized::ggml_file::qtensor_from_ggml(
        GgmlDType::F16,
        &bytes,
        vec![n, k],
        &Device::Cpu,
    )
    .unwrap();
    let qm = candle_core::quantized::QMatMul::from_qtensor(q).unwrap();
    let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let want = qm
        .forward(&Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let got = matmul(w.as_ref(), &x).unwrap();
    for (g, e) in got.iter().zip(&want) {
        // Activations rounded to f16: a relative 2⁻¹¹ per value, |w| ≤ 0.05.
        assert!((g - e).abs() < 0.05 * k as f32 * 1e-3, "{g} vs {e}");
    }
}

/// A 32-value matrix read piece by piece from a file (a model load, `cpu_matrix_read`) holds
/// GGUF's own values (`gguf_dequant`) and multiplies bit for bit as one built from the
/// bytes whole; a read error stops it.
fn check_32_value_read<B: WeightBlock>(seed: u64) {
    use source::{RowSource, PIECE_BYTES};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let k = 3136; // Nemotron-H's hidden size: 98 blocks, a last group of two
    let row = k / B::VALUES * B::BYTES;
    for n in [1, PIECE_BYTES / row + 1, 2 * PIECE_BYTES / row + 3] {
        let bytes = random_blocks::<B>(&mut rng, n, k);
        let read = |off: u64, buf: &mut [u8]| -> std::io::Result<()> {
            let off = off as usize;
            buf.copy_from_slice(&bytes[off..off + buf.len()]);
            Ok(())
        };
        let got = QuantMatrix::<B>::from_source(&RowSource::Read(&read), n, k).unwrap();
        let want: Vec<f32> = bytes
            .chunks_exact(B::BYTES)
            .flat_map(|c| gguf_dequant(B::NAME, c))
            .collect();
        assert_eq!(got.dequantize(), want, "{} n={n}", B::NAME);
        let whole = QuantMatrix::<B>::from_gguf_bytes(&bytes, n, k).unwrap();
        assert_eq!(got.resident_bytes(), whole.resident_bytes());
        same_products(&got, &whole, &mut rng, 2, &format!("{} n={n}", B::NAME));
    }
    let err = QuantMatrix::<B>::from_source(&RowSource::Read(&no_bytes), 40, k).unwrap_err();
    assert!(err.to_string().contains("no bytes at"), "{err}");
}

#[test]
fn thirty_two_value_matrices_read_piece_by_piece_hold_gguf_values() {
    check_32_value_read::<BlockQ40>(71);
    check_32_value_read::<BlockQ41>(72);
    check_32_value_read::<BlockQ50>(73);
    check_32_value_read::<BlockQ51>(74);
    check_32_value_read::<BlockQ80>(75);
}

/// Rows in lanes of the 32-value types (AVX-512 VNNI's stored form of Q4_0, Q5_0 and Q8_0,
/// `x86::qlanes512`), built from the bytes whole and from a reader piece by piece: they hold
/// GGUF's values; their products match the dequantised product to 8-bit rounding and the
/// row-major paths to float rounding; a row's result is the same bits alone, in a batch and
/// in every weight-row range a work item may take; blocks at the ends of the range (Q8_0's
/// −128 and 127 against activations of ±127) do not overflow; a read error stops the build.
#[cfg(target_arch = "x86_64")]
fn check_32_value_lanes<B: LaneBlock>(seed: u64) {
    use super::source::{RowSource, PIECE_BYTES};
    use super::x86::qlanes512::{available, QLanes};
    let simd = Simd::detect().unwrap();
    if !available(simd) {
        return;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // Rows of 9 blocks (a pair holding one block) and a partial last group; Nemotron-H's
    // 3,136 values (98 blocks) in several pieces.
    let big = 2 * PIECE_BYTES / (3136 / BLOCK * B::BYTES) + 5;
    for (n, k) in [(37, 288), (big, 3136)] {
        let mut bytes = random_blocks::<B>(&mut rng, n, k);
        if B::BITS == 8 {
            // Row 1 all −128, row 2 all 127 (scales kept).
            for (r, v) in [(1usize, 0x80u8), (2, 0x7f)] {
                for blk in bytes[r * k / BLOCK * B::BYTES..(r + 1) * k / BLOCK * B::BYTES]
                    .chunks_exact_mut(B::BYTES)
                {
                    blk[2..].fill(v);
                }
            }
        }
        let what = format!("{} [{n}, {k}] in lanes", B::NAME);
        let lanes = QLanes::<B>::from_source(&RowSource::Bytes(&bytes), n, k, simd).unwrap();
        let wf: Vec<f32> = bytes
            .chunks_exact(B::BYTES)
            .flat_map(|c| gguf_dequant(B::NAME, c))
            .collect();
        assert_eq!(bits(&lanes.dequantize()), bits(&wf), "{what}: values");
        let read = |off: u64, buf: &mut [u8]| -> std::io::Result<()> {
            let off = off as usize;
            buf.copy_from_slice(&bytes[off..off + buf.len()]);
            Ok(())
        };
        let from_read = QLanes::<B>::from_source(&RowSource::Read(&read), n, k, simd).unwrap();
        assert_eq!(from_read.resident_bytes(), lanes.resident_bytes());
        let rows_in = if n < 100 { 70 } else { 5 };
        let mut x: Vec<f32> = (0..rows_in * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        // Activation row 0 at the ends of the 8-bit range: every value ±1 (q₈ = ±127).
        for v in &mut x[..k] {
            *v = if rng.gen() { 1.0 } else { -1.0 };
        }
        let batch = matmul(&lanes, &x).unwrap();
        assert_eq!(
            bits(&matmul(&from_read, &x).unwrap()),
            bits(&batch),
            "{what}: read piece by piece"
        );
        let row_major = QuantMatrix::<B>::from_gguf_bytes(&bytes, n, k).unwrap();
        let rm = row_major.matmul(&x).unwrap();
        let want = reference(&wf, &x, n, k);
        let wmax = wf.iter().fold(0f32, |a, v| a.max(v.abs()));
        for (i, ((g, r), e)) in batch.iter().zip(&rm).zip(&want).enumerate() {
            assert!(
                (g - r).abs() <= 1e-5 * k as f32 * wmax,
                "{what} ({}, {}): {g} vs row-major {r}",
                i / n,
                i % n
            );
            assert!((g - e).abs() < 0.01 * k as f32 * wmax, "{what}: {g} vs {e}");
        }
        for r in [0, 1, rows_in - 1] {
            let alone = matmul(&lanes, &x[r * k..(r + 1) * k]).unwrap();
            assert_eq!(
                bits(&alone),
                bits(&batch[r * n..(r + 1) * n]),
                "{what}: row {r}"
            );
        }
        // Every pass width (1 to 8 activation rows over a pair's lines at once).
        for m in 1..=rows_in.min(8) {
            let first = matmul(&lanes, &x[..m * k]).unwrap();
            assert_eq!(bits(&first), bits(&batch[..m * n]), "{what}: {m} rows");
        }
        let acts = Acts::quantize(&x, k);
        let ranges: &[(usize, usize, usize, usize)] = if n < 100 {
            &[
                (3, 19, 0, 37),
                (0, 1, 5, 6),
                (15, 17, 2, 9),
                (16, 37, 30, 37),
                (0, 37, 0, 70),
            ]
        } else {
            &[(3, 19, 0, 5), (n - 9, n, 1, 3)]
        };
        for &(j0, j1, r0, r1) in ranges {
            let mut y = vec![f32::NAN; rows_in * n];
            // SAFETY: acts has rows_in rows of k values; y holds rows_in·n floats.
            unsafe { lanes.run_chunk(&acts, r0..r1, j0..j1, y.as_mut_ptr()) };
            for r in 0..rows_in {
                for j in 0..n {
                    let (got, want) = (y[r * n + j], batch[r * n + j]);
                    if (r0..r1).contains(&r) && (j0..j1).contains(&j) {
                        assert_eq!(got.to_bits(), want.to_bits(), "{what} ({r}, {j})");
                    } else {
                        assert!(got.is_nan(), "{what} wrote ({r}, {j}) outside its range");
                    }
                }
            }
        }
    }
    assert!(QLanes::<B>::from_source(&RowSource::Bytes(&[]), 1, 40, simd).is_err());
    let err = QLanes::<B>::from_source(&RowSource::Read(&no_bytes), 40, 3136, simd).unwrap_err();
    assert!(err.to_string().contains("no bytes at"), "{err}");
}

#[test]
#[cfg(target_arch = "x86_64")]
fn thirty_two_value_lanes_hold_gguf_values_and_tiles_are_bit_identical() {
    check_32_value_lanes::<BlockQ40>(81);
    check_32_value_lanes::<BlockQ50>(82);
    check_32_value_lanes::<BlockQ80>(83);
}
