//! The per-row-count choice between Joule's k-quant kernels and candle's repacked ones:
//! Joule's super-block kernels read fewer bytes per weight and win
//! decode and small batches; candle's repacked 16-row tiles (and AMX on CPUs that have
//! it) win prompts. A [`SplitMatmul`] holds both forms of one matrix and sends each
//! *segment* of its input to one of them: a segment is the rows one sequence feeds in a
//! step (one row when it decodes, a prompt piece's tokens when it prefills), so the
//! choice depends on the sequence alone, never on what it is batched with.
//!
//! Batch invariance, the reason for segments: a row's result from Joule's kernel and
//! from candle's differ in their last bits (different float summation orders), so a
//! rule by the number of rows *in the call* would give a decoding sequence other logits
//! when a prompt shares its step. Per segment: a segment of up to [`SPLIT_ROWS`] rows
//! goes to Joule's kernel (whose rows are the same bits whatever the tile), a longer one
//! to candle's (whose repacked and AMX paths compute each output element by the same
//! sequence of operations at every row count from 2 on; a long segment has more than 1
//! row). The segments are declared by the model's forward pass ([`segments`]), a scoped
//! thread-local read by [`long_rows`]; an input whose rows the declared segments do not
//! cover exactly (no declaration, or a product over other rows, e.g. the last position of
//! each sequence) goes wholly to Joule's kernel, which is row-invariant by construction.

use std::cell::RefCell;
use std::ops::Range;

use candle_core::quantized::QMatMul;
use candle_core::{DType, Module, Tensor};

use super::{matmul_many, CpuMatmul};

/// Longest segment (rows one sequence feeds in a step) that a [`SplitMatmul`] gives to
/// Joule's kernel; longer ones go to candle's. Decode of one society's agents is one row
/// per sequence; a prompt piece is tens to hundreds of rows. Kernel crossover: `cargo bench --bench
/// quant_matmul -- THREADS rows` and `benches/kquant-split.sh`.
pub const SPLIT_ROWS: usize = 16;

thread_local! {
    static SEGMENTS: RefCell<Option<Vec<usize>>> = const { RefCell::new(None) };
}

/// While alive, the rows of this thread's matrix products are the declared segments
/// (their lengths, in row order); dropping it restores what was declared before.
#[must_use = "the segments hold only while the guard lives"]
pub struct Segments {
    prev: Option<Vec<usize>>,
}

/// Declare the segments of the stacked rows of the products that follow on this thread.
pub fn segments(lens: impl IntoIterator<Item = usize>) -> Segments {
    let lens: Vec<usize> = lens.into_iter().collect();
    let prev = SEGMENTS.with(|s| s.borrow_mut().replace(lens));
    Segments { prev }
}

impl Drop for Segments {
    fn drop(&mut self) {
        let prev = self.prev.take();
        SEGMENTS.with(|s| *s.borrow_mut() = prev);
    }
}

/// The row ranges of an `m`-row input that candle's kernel takes: the declared segments
/// longer than `limit`, when the declared segments cover exactly `m` rows; none
/// otherwise (then every row goes to Joule's kernel).
pub fn long_rows(m: usize, limit: usize) -> Vec<Range<usize>> {
    SEGMENTS.with(|s| {
        let s = s.borrow();
        let Some(lens) = s.as_ref().filter(|l| l.iter().sum::<usize>() == m) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut off = 0;
        for &t in lens {
            if t > limit {
                out.push(off..off + t);
            }
            off += t;
        }
        out
    })
}

/// Rows from which candle 0.11.1 multiplies a Q4_K matrix with AMX tiles (on a CPU
/// with AMX); fewer rows take its 16-row decode tiles, a second repacked copy of the
/// matrix (`quant_matmul::candle_repack_bytes`) that candle builds on first use and
/// keeps. The candle half of a split matrix is padded to this many rows on such a
/// CPU so it never builds that copy (each output row is the same: candle's tile and
/// AMX paths compute a row the same way at every row count from 2 on).
pub const CANDLE_AMX_ROWS: usize = 32;

/// Whether [`split_forward_many`] pads candle's rows to [`CANDLE_AMX_ROWS`]: on an
/// x86 CPU with AMX int8 (where candle 0.11.1 uses it).
pub fn pads_for_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::cpu_has_amx_int8()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `w`'s product with `x` (`[m, k]`) through candle's kernel, `x` padded with zero
/// rows to [`CANDLE_AMX_ROWS`] where [`pads_for_amx`] and `w` is Q4_K.
fn candle_forward(w: &SplitMatmul, x: &Tensor) -> candle_core::Result<Tensor> {
    let m = x.dim(0)?;
    let q4k = matches!(&w.candle, QMatMul::QTensor(t) if t.dtype() == candle_core::quantized::GgmlDType::Q4K);
    if m >= CANDLE_AMX_ROWS || !q4k || !pads_for_amx() {
        return w.candle.forward(x);
    }
    let pad = Tensor::zeros((CANDLE_AMX_ROWS - m, x.dim(1)?), x.dtype(), x.device())?;
    w.candle
        .forward(&Tensor::cat(&[x, &pad], 0)?)?
        .narrow(0, 0, m)
}

/// One matrix in both forms: Joule's (for segments of up to [`SPLIT_ROWS`] rows) and
/// candle's (for longer ones).
#[derive(Debug, Clone)]
pub struct SplitMatmul {
    pub joule: std::sync::Arc<dyn CpuMatmul>,
    pub candle: QMatMul,
}

fn msg(e: anyhow::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("{e:#}"))
}

/// `[x · Wᵀ for W in ws]` for split matrices of the same `k`: the rows of segments
/// longer than [`SPLIT_ROWS`] through candle's kernels, the others quantised once and
/// through Joule's in one pass ([`matmul_many`]); each output row in its input row's place.
pub fn split_forward_many(ws: &[&SplitMatmul], x: &Tensor) -> candle_core::Result<Vec<Tensor>> {
    let dims = x.dims().to_vec();
    let k = dims.last().copied().unwrap_or(0);
    let m = x.elem_count().checked_div(k).unwrap_or(0);
    let long = long_rows(m, SPLIT_ROWS);
    let out_dims = |n: usize| {
        let mut d = dims.clone();
        if let Some(last) = d.last_mut() {
            *last = n;
        }
        d
    };
    let joule: Vec<&dyn CpuMatmul> = ws.iter().map(|w| w.joule.as_ref()).collect();
    if long.is_empty() {
        let flat = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        return matmul_many(&joule, &flat)
            .map_err(msg)?
            .into_iter()
            .zip(&joule)
            .map(|(y, w)| Tensor::from_vec(y, out_dims(w.n()), x.device()))
            .collect();
    }
    let x2 = x.to_dtype(DType::F32)?.reshape((m, k))?;
    let long_count: usize = long.iter().map(|r| r.len()).sum();
    if long_count == m {
        return ws
            .iter()
            .map(|w| candle_forward(w, &x2)?.reshape(out_dims(w.joule.n())))
            .collect();
    }
    // The short rows, in order, between the long ranges.
    let mut short = Vec::new();
    let mut at = 0;
    for r in long.iter().chain(std::iter::once(&(m..m))) {
        if r.start > at {
            short.push(at..r.start);
        }
        at = r.end;
    }
    let pick = |ranges: &[Range<usize>]| -> candle_core::Result<Tensor> {
        let parts = ranges
            .iter()
            .map(|r| x2.narrow(0, r.start, r.len()))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&parts, 0)
    };
    let xs = pick(&short)?.flatten_all()?.to_vec1::<f32>()?;
    let ys_short = matmul_many(&joule, &xs).map_err(msg)?;
    let xl = pick(&long)?;
    let mut out = Vec::with_capacity(ws.len());
    for (w, ys) in ws.iter().zip(ys_short) {
        let n = w.joule.n();
        let yl = candle_forward(w, &xl)?.flatten_all()?.to_vec1::<f32>()?;
        let mut y = vec![0f32; m * n];
        let mut copy = |ranges: &[Range<usize>], src: &[f32]| {
            let mut i = 0;
            for r in ranges {
                y[r.start * n..r.end * n].copy_from_slice(&src[i * n..(i + r.len()) * n]);
                i += r.len();
            }
        };
        copy(&short, &ys);
        copy(&long, &yl);
        out.push(Tensor::from_vec(y, out_dims(n), x.device())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::kernels::quant_matmul::cpu_matrix_of;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::Device;
    use std::sync::Arc;

    /// A `[n, k]` tensor of values uniform in `(-s, s)` from `seed`.
    fn random(n: usize, k: usize, s: f32, seed: u64) -> Tensor {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let v: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-s..s)).collect();
        Tensor::from_vec(v, (n, k), &Device::Cpu).unwrap()
    }

    fn split(dtype: GgmlDType, n: usize, k: usize, seed: u64) -> SplitMatmul {
        let w = random(n, k, 0.5, seed);
        let q = QTensor::quantize(&w, dtype).unwrap();
        let joule = cpu_matrix_of(dtype, &q.data().unwrap(), n, k)
            .unwrap()
            .unwrap();
        SplitMatmul {
            joule: Arc::from(joule),
            candle: QMatMul::from_arc(Arc::new(q)).unwrap(),
        }
    }

    fn rows(x: &Tensor, r: Range<usize>) -> Tensor {
        x.narrow(0, r.start, r.len()).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        v.into_iter().map(f32::to_bits).collect()
    }

    fn run(ws: &[&SplitMatmul], x: &Tensor, segs: Option<&[usize]>) -> Vec<Tensor> {
        let _g = segs.map(|s| segments(s.iter().copied()));
        split_forward_many(ws, x).unwrap()
    }

    #[test]
    fn long_rows_are_the_declared_long_segments_when_they_cover_the_input() {
        assert!(long_rows(5, 2).is_empty());
        let _g = segments([1, 3, 1, 4]);
        assert_eq!(long_rows(9, 2), vec![1..4, 5..9]);
        // Rows the segments do not cover: none to candle.
        assert!(long_rows(4, 2).is_empty());
        {
            let _inner = segments([1, 1]);
            assert!(long_rows(9, 2).is_empty());
        }
        assert_eq!(long_rows(9, 3), vec![5..9]);
    }

    /// A decoding sequence's row is the same bits alone, beside other decode rows, and
    /// beside prompts (which take candle's kernel); a prompt's rows are the same bits
    /// alone and beside other prompts and decode rows, including across candle's switch to
    /// AMX at 32 rows on CPUs that have it.
    #[test]
    fn each_sequences_rows_are_the_same_bits_whatever_it_is_batched_with() {
        let (k, long) = (512, SPLIT_ROWS + 4);
        for (i, dtype) in [GgmlDType::Q4K, GgmlDType::Q6K].into_iter().enumerate() {
            let a = split(dtype, 48, k, 10 + i as u64);
            let b = split(dtype, 32, k, 20 + i as u64);
            let ws = [&a, &b];
            // Segments: decode, prompt, decode, 3-row piece, prompt.
            let segs = [1, long, 1, 3, long];
            let m: usize = segs.iter().sum();
            let x = random(m, k, 1.0, 30 + i as u64);
            let together = run(&ws, &x, Some(&segs));
            let mut off = 0;
            for &t in &segs {
                let xr = rows(&x, off..off + t);
                let alone = run(&ws, &xr, Some(&[t]));
                for (w, (y, y1)) in together.iter().zip(&alone).enumerate() {
                    assert_eq!(
                        bits(&rows(y, off..off + t)),
                        bits(y1),
                        "{dtype:?} matrix {w}, segment of {t} at row {off}"
                    );
                }
                let want = if t > SPLIT_ROWS {
                    ws.iter().map(|w| w.candle.forward(&xr).unwrap()).collect()
                } else {
                    run(&ws, &xr, None)
                };
                for (y1, y2) in alone.iter().zip(&want) {
                    assert_eq!(bits(y1), bits(y2), "{dtype:?}: segment of {t}, kernel");
                }
                off += t;
            }
            // Two prompts together (candle at 2·long ≥ 32 rows: AMX where the CPU has it).
            let x2 = random(2 * long, k, 1.0, 40 + i as u64);
            let both = run(&ws, &x2, Some(&[long, long]));
            let first = run(&ws, &rows(&x2, 0..long), Some(&[long]));
            for (y, y1) in both.iter().zip(&first) {
                assert_eq!(bits(&rows(y, 0..long)), bits(y1), "{dtype:?}: two prompts");
            }
            // Undeclared rows: Joule's kernel for all, whatever their number.
            let all = run(&ws, &x, None);
            let flat: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
            let joule = matmul_many(&[a.joule.as_ref(), b.joule.as_ref()], &flat).unwrap();
            for (y, j) in all.iter().zip(&joule) {
                let yb = bits(y);
                assert_eq!(yb, j.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            }
            // Joule's and candle's rows differ (else the segments would not matter),
            // and both are close to the product.
            let c = a.candle.forward(&x).unwrap();
            assert_ne!(bits(&all[0]), bits(&c), "{dtype:?}");
            let d = (&all[0] - &c).unwrap().abs().unwrap().max_all().unwrap();
            let scale = c.abs().unwrap().max_all().unwrap();
            let (d, scale) = (
                d.to_scalar::<f32>().unwrap(),
                scale.to_scalar::<f32>().unwrap(),
            );
            assert!(d <= 1e-4 * scale, "{dtype:?}: {d} against {scale}");
        }
    }
}
