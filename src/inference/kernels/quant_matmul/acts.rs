//! Activation rows quantised once to 8-bit blocks ([`Acts`]: `x ≈ d₈·q₈`, with
//! `s = d₈·Σq₈` kept per block), and for the k-quant matrices to 256-value blocks with per-16
//! sums ([`Q8K`]), as llama.cpp quantises them before its integer dot products.

use super::kquants::{quantize_k, Q8K, QK};
use super::{Q8Ints, SendPtr, BLOCK, GROUP, PARALLEL_QUANTISE_ROWS};

/// Blocks of a row rounded up to whole groups (the stride of the scale arrays).
pub(super) fn padded(kb: usize) -> usize {
    kb.div_ceil(GROUP) * GROUP
}

/// Activation rows quantised to 8 bits the way llama.cpp's
/// `quantize_row_q8_1` does (round to nearest, `d = max|x| / 127`), `d` and
/// `s = d·Σq` kept in f32 in per-row arrays padded with zeros to whole groups.
#[derive(Debug, Clone)]
pub struct Acts {
    /// Blocks per row, and the padded stride of `d` and `s`.
    pub(crate) kb: usize,
    pub(crate) kbp: usize,
    pub(crate) qs: Vec<Q8Ints>,
    pub(crate) d: Vec<f32>,
    pub(crate) s: Vec<f32>,
    /// 256-value blocks per row (when quantised for k-quant matrices), their bytes and
    /// sums, and their `d` (empty when not asked for).
    pub(crate) kbs: usize,
    pub(crate) qk: Vec<Q8K>,
    pub(crate) dk: Vec<f32>,
}

impl Acts {
    /// Quantise `x` (rows of `k` values, `k` a multiple of 32) to 32-value blocks; rows
    /// are split over the worker pool when there are many.
    pub fn quantize(x: &[f32], k: usize) -> Self {
        Self::quantize_for(x, k, true, false)
    }

    /// Quantise `x` to 32-value blocks (`blocks`), to 256-value blocks (`supers`, `k` a
    /// multiple of 256), or both.
    pub fn quantize_for(x: &[f32], k: usize, blocks: bool, supers: bool) -> Self {
        let kb = k / BLOCK;
        let kbp = padded(kb);
        let kbs = if supers { k / QK } else { 0 };
        let m = x.len().checked_div(k).unwrap_or(0);
        let mb = if blocks { m } else { 0 };
        let mut acts = Acts {
            kb,
            kbp,
            qs: vec![Q8Ints([0i8; BLOCK]); mb * kb],
            d: vec![0f32; mb * kbp],
            s: vec![0f32; mb * kbp],
            kbs,
            qk: vec![Q8K::default(); m * kbs],
            dk: vec![0f32; m * kbs],
        };
        let (qp, dp, sp) = (
            SendPtr(acts.qs.as_mut_ptr()),
            SendPtr(acts.d.as_mut_ptr()),
            SendPtr(acts.s.as_mut_ptr()),
        );
        let (kp, kdp) = (SendPtr(acts.qk.as_mut_ptr()), SendPtr(acts.dk.as_mut_ptr()));
        let row = |r: usize| {
            for b in 0..kbs {
                let (q, d) = quantize_k(&x[(r * kbs + b) * QK..(r * kbs + b + 1) * QK]);
                // SAFETY: as below.
                unsafe {
                    *kp.get().add(r * kbs + b) = q;
                    *kdp.get().add(r * kbs + b) = d;
                }
            }
            if !blocks {
                return;
            }
            for b in 0..kb {
                let (q, d, s) = quantize_block(&x[(r * kb + b) * BLOCK..(r * kb + b + 1) * BLOCK]);
                // SAFETY: row r's entries are written by this call alone, and
                // every index is inside the vectors sized above.
                unsafe {
                    *qp.get().add(r * kb + b) = Q8Ints(q);
                    *dp.get().add(r * kbp + b) = d;
                    *sp.get().add(r * kbp + b) = s;
                }
            }
        };
        if m >= PARALLEL_QUANTISE_ROWS {
            candle_core::utils::barrier_pool().execute_chunked(m, |rows| rows.for_each(row));
        } else {
            (0..m).for_each(row);
        }
        acts
    }

    pub(super) fn rows(&self) -> usize {
        (self.qs.len().checked_div(self.kb))
            .max(self.qk.len().checked_div(self.kbs))
            .unwrap_or(0)
    }
}

/// One block of 32 activations: 8-bit values, `d`, and `s = d·Σq`.
pub(super) fn quantize_block(x: &[f32]) -> ([i8; BLOCK], f32, f32) {
    // max |x| in eight lanes (vectorised; a plain fold stays scalar).
    let mut lanes = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v.abs());
        }
    }
    let amax = lanes.iter().fold(0f32, |a, &v| a.max(v));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; BLOCK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let r = (v * id).round() as i32;
        *q = r as i8;
        sum += r;
    }
    (qs, d, d * sum as f32)
}
