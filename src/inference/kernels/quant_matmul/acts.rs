//! Activation rows quantised once to 8-bit blocks ([`Acts`]: `x ≈ d₈·q₈`, with
//! `s = d₈·Σq₈` kept per block), and for the k-quant matrices to 256-value blocks with per-16
//! sums ([`Q8K`]), as llama.cpp quantises them before its integer dot products; for the F16
//! and BF16 matrices (`floats`) rounded to f16 or bf16 and kept as f32 (exactly), as
//! llama.cpp converts them to the weight's type before its dot products.

use super::floats::{self, HalfType};
use super::kquants::{quantize_k, Q8K, QK};
use super::{ActsForm, Q8Ints, SendPtr, BLOCK, GROUP, PARALLEL_QUANTISE_ROWS};

/// The forms a product needs its activations in (one input can feed matrices of several
/// forms: [`super::matmul_many`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forms {
    /// 32-value 8-bit blocks (the 32-value types).
    pub blocks: bool,
    /// 256-value 8-bit blocks (the k-quants).
    pub supers: bool,
    /// Values rounded to f16 (F16 matrices).
    pub f16: bool,
    /// Values rounded to bf16 (BF16 matrices).
    pub bf16: bool,
}

impl Forms {
    /// The forms matrices of `forms` need.
    pub fn of(forms: impl IntoIterator<Item = ActsForm>) -> Self {
        let mut f = Forms::default();
        for form in forms {
            match form {
                ActsForm::Blocks => f.blocks = true,
                ActsForm::Supers => f.supers = true,
                ActsForm::F16 => f.f16 = true,
                ActsForm::Bf16 => f.bf16 = true,
            }
        }
        f
    }
}

/// Blocks of a row rounded up to whole groups (the stride of the scale arrays).
pub(super) fn padded(kb: usize) -> usize {
    kb.div_ceil(GROUP) * GROUP
}

/// Activation rows quantised to 8 bits the way llama.cpp's x86 `quantize_row_q8_0` and
/// `quantize_row_q8_1` do (`q = round-half-even(x · 127/max|x|)`; `d = max|x| / 127` stored
/// rounded to f16, as their blocks hold it), `d`, `s = d·Σq` (exact: the `q8_0` pairing of
/// Q4_0/Q5_0) and `s1` (`d·Σq` with the unrounded `d`, rounded to f16: `q8_1`'s, paired with
/// Q4_1/Q5_1) kept as f32 in per-row arrays padded with zeros to whole groups. Keeping `d` in
/// f32 instead moved a 2,560-wide FFN's output by 0.2 % from llama.cpp's, which 32 layers of a
/// synthesized model amplified to a mean KL of 0.2 (`tests/full/synth_vs_llama.rs`).
#[derive(Debug, Clone)]
pub struct Acts {
    /// Blocks per row, and the padded stride of `d` and `s`.
    pub(crate) kb: usize,
    pub(crate) kbp: usize,
    pub(crate) qs: Vec<Q8Ints>,
    pub(crate) d: Vec<f32>,
    pub(crate) s: Vec<f32>,
    pub(crate) s1: Vec<f32>,
    /// 256-value blocks per row (when quantised for k-quant matrices), their bytes and
    /// sums, and their `d` (empty when not asked for).
    pub(crate) kbs: usize,
    pub(crate) qk: Vec<Q8K>,
    pub(crate) dk: Vec<f32>,
    /// Rows rounded to f16 ([`floats::F16`]'s layout, [`HalfType::arrange`]) and their
    /// stride (`k` rounded up to whole chunks, zeros after `k`); empty when not asked for.
    pub(crate) kf16: usize,
    pub(crate) f16s: Vec<f32>,
    /// Rows rounded to bf16 ([`floats::Bf16`]'s layout) and their stride.
    pub(crate) kbf16: usize,
    pub(crate) bf16s: Vec<f32>,
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
        Self::prepare(
            x,
            k,
            Forms {
                blocks,
                supers,
                ..Forms::default()
            },
        )
    }

    /// `x` (rows of `k` values) in every form of `forms`: 32-value blocks (`k` a multiple
    /// of 32), 256-value blocks (`k` a multiple of 256), f16 or bf16 rows (any `k`).
    pub fn prepare(x: &[f32], k: usize, forms: Forms) -> Self {
        let Forms {
            blocks,
            supers,
            f16,
            bf16,
        } = forms;
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
            s1: vec![0f32; mb * kbp],
            kbs,
            qk: vec![Q8K::default(); m * kbs],
            dk: vec![0f32; m * kbs],
            kf16: floats::F16::padded(k),
            f16s: vec![0f32; if f16 { m * floats::F16::padded(k) } else { 0 }],
            kbf16: floats::Bf16::padded(k),
            bf16s: vec![0f32; if bf16 { m * floats::Bf16::padded(k) } else { 0 }],
        };
        let (qp, dp, sp, s1p) = (
            SendPtr(acts.qs.as_mut_ptr()),
            SendPtr(acts.d.as_mut_ptr()),
            SendPtr(acts.s.as_mut_ptr()),
            SendPtr(acts.s1.as_mut_ptr()),
        );
        let (kp, kdp) = (SendPtr(acts.qk.as_mut_ptr()), SendPtr(acts.dk.as_mut_ptr()));
        let (kf16, kbf16) = (acts.kf16, acts.kbf16);
        let (f16p, bf16p) = (
            SendPtr(acts.f16s.as_mut_ptr()),
            SendPtr(acts.bf16s.as_mut_ptr()),
        );
        let row = |r: usize| {
            let xr = &x[r * k..(r + 1) * k];
            if f16 {
                // SAFETY: row r's values are written by this call alone, inside the
                // vector sized above.
                let out = unsafe { std::slice::from_raw_parts_mut(f16p.get().add(r * kf16), kf16) };
                floats::F16::arrange(xr, out);
            }
            if bf16 {
                // SAFETY: as above.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(bf16p.get().add(r * kbf16), kbf16) };
                floats::Bf16::arrange(xr, out);
            }
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
                let (q, d, s, s1) =
                    quantize_block(&x[(r * kb + b) * BLOCK..(r * kb + b + 1) * BLOCK]);
                // SAFETY: row r's entries are written by this call alone, and
                // every index is inside the vectors sized above.
                unsafe {
                    *qp.get().add(r * kb + b) = Q8Ints(q);
                    *dp.get().add(r * kbp + b) = d;
                    *sp.get().add(r * kbp + b) = s;
                    *s1p.get().add(r * kbp + b) = s1;
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

    /// The per-block sums the `m` terms multiply: `s1` for weights with their own `m`
    /// (Q4_1, Q5_1: llama.cpp's `q8_1`), `s` otherwise.
    pub(crate) fn sums(&self, own_m: bool) -> &[f32] {
        if own_m {
            &self.s1
        } else {
            &self.s
        }
    }

    pub(super) fn rows(&self) -> usize {
        [
            self.qs.len().checked_div(self.kb),
            self.qk.len().checked_div(self.kbs),
            self.f16s.len().checked_div(self.kf16),
            self.bf16s.len().checked_div(self.kbf16),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
    }
}

/// One block of 32 activations: 8-bit values, `d` (rounded to f16), `s = d·Σq` (exact) and
/// `s1` (f16 of the unrounded `d` times `Σq`), as llama.cpp's x86 `quantize_row_q8_0` /
/// `quantize_row_q8_1` make them (the multiplier is `127/max|x|`, rounding half to even).
pub(super) fn quantize_block(x: &[f32]) -> ([i8; BLOCK], f32, f32, f32) {
    // max |x| in eight lanes (vectorised; a plain fold stays scalar).
    let mut lanes = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v.abs());
        }
    }
    let amax = lanes.iter().fold(0f32, |a, &v| a.max(v));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut qs = [0i8; BLOCK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let r = (v * id).round_ties_even() as i32;
        *q = r as i8;
        sum += r;
    }
    let dh = half::f16::from_f32(d).to_f32();
    let s1 = half::f16::from_f32(d * sum as f32).to_f32();
    (qs, dh, dh * sum as f32, s1)
}
