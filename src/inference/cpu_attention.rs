//! Fused decode attention on the CPU: one new query per sequence for every
//! sequence of a step, each against its own keys and values (the `SeqState`
//! caches read in place: `[n_kv, len, d]` views of `[n_kv, capacity, d]`
//! buffers, each sequence with its own `len`), in one pass over candle's
//! worker pool. Work items are (sequence, key/value head) pairs: the query
//! heads that share a key/value head read each key and value row once
//! together, scores, softmax and the weighted sum of values stay in the
//! worker's cache, and nothing is copied or allocated per key. The same
//! function as `nn::attention` with one query per sequence (softcap and
//! sliding window included), which the tests compare against; candle's path
//! copies each sequence's values to a contiguous tensor and runs several
//! small matrix products per sequence and layer.

use crate::inference::models::nn::AttnParams;
use anyhow::{bail, Result};
use candle_core::{CpuStorage, DType, Storage, Tensor};

/// One sequence's keys and values (`[n_kv, len, head_dim]` and `[n_kv, len,
/// v_dim]`, this step's included; rows of one head contiguous).
pub struct SeqKv<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
}

/// A borrowed f32 `[n, len, d]` view: element (h, i, j) at `off + h·hs + i·d + j`.
struct HeadView<'a> {
    data: &'a [f32],
    off: usize,
    head_stride: usize,
    len: usize,
}

impl HeadView<'_> {
    fn row(&self, h: usize, i: usize, d: usize) -> &[f32] {
        let s = self.off + h * self.head_stride + i * d;
        &self.data[s..s + d]
    }
}

/// Dot product in eight independent lanes (the compiler vectorises it).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Attention of one new query per sequence: `q` `[n_seq, n_head, head_dim]`
/// (normed and rotated) against each sequence's keys and values. Returns
/// `[n_seq, n_head · v_dim]` on the CPU.
pub fn decode(q: &Tensor, kv: &[SeqKv<'_>], p: AttnParams) -> Result<Tensor> {
    let (n_seq, n_head, hd) = q.dims3()?;
    if kv.len() != n_seq || n_seq == 0 {
        bail!(
            "decode attention: {n_seq} queries for {} sequences",
            kv.len()
        );
    }
    let (n_kv, _, khd) = kv[0].k.dims3()?;
    let vd = kv[0].v.dim(2)?;
    if n_kv == 0 || n_head % n_kv != 0 || khd != hd {
        bail!("decode attention: {n_head} heads of {hd} over {n_kv} key/value heads of {khd}/{vd}");
    }
    let rep = n_head / n_kv;
    let qv = q.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    // The guards keep every cache's storage borrowed until the pass ends.
    let mut guards = Vec::with_capacity(2 * n_seq);
    let mut shapes = Vec::with_capacity(n_seq);
    for s in kv {
        let (kn, kl, kd) = s.k.dims3()?;
        let (vn, vl, vdd) = s.v.dims3()?;
        if kn != n_kv || vn != n_kv || kd != hd || vdd != vd || kl != vl || kl == 0 {
            bail!("decode attention: a sequence's keys/values do not match the batch's sizes");
        }
        for t in [s.k, s.v] {
            if t.dtype() != DType::F32 {
                bail!(
                    "CPU decode attention needs f32 keys and values, got {:?}",
                    t.dtype()
                );
            }
            let (guard, layout) = t.storage_and_layout();
            let st = layout.stride();
            let d = t.dim(2)?;
            if st[2] != 1 || st[1] != d {
                bail!(
                    "decode attention: keys/values of one head must be contiguous (strides {st:?})"
                );
            }
            if !matches!(&*guard, Storage::Cpu(CpuStorage::F32(_))) {
                bail!("CPU decode attention: keys/values are not f32 CPU tensors");
            }
            shapes.push((layout.start_offset(), st[0], kl, d));
            guards.push(guard);
        }
    }
    let views: Vec<HeadView<'_>> = guards
        .iter()
        .zip(&shapes)
        .map(|(g, &(off, head_stride, len, _))| {
            let data: &[f32] = match &**g {
                Storage::Cpu(CpuStorage::F32(v)) => v,
                _ => &[],
            };
            HeadView {
                data,
                off,
                head_stride,
                len,
            }
        })
        .collect();
    for (v, &(_, _, _, d)) in views.iter().zip(&shapes) {
        if v.data.len() < v.off + (n_kv - 1) * v.head_stride + v.len * d {
            bail!("decode attention: a key/value view reaches past its storage");
        }
    }
    let mut out = vec![0f32; n_seq * n_head * vd];
    let out_ptr = SendPtr(out.as_mut_ptr());
    let items = n_seq * n_kv;
    candle_core::utils::barrier_pool().execute_chunked(items, |range| {
        let mut scores: Vec<f32> = Vec::new();
        let mut acc = vec![0f32; rep * vd];
        for item in range {
            let (s, h) = (item / n_kv, item % n_kv);
            let (kview, vview) = (&views[2 * s], &views[2 * s + 1]);
            let len = kview.len;
            // Keys at distance < window from the query (at position len − 1).
            let k0 = p.window.map_or(0, |w| len.saturating_sub(w));
            let n = len - k0;
            scores.clear();
            scores.resize(rep * n, 0.0);
            let qs = |r: usize| {
                let o = (s * n_head + h * rep + r) * hd;
                &qv[o..o + hd]
            };
            for i in 0..n {
                let krow = kview.row(h, k0 + i, hd);
                for r in 0..rep {
                    scores[r * n + i] = dot(qs(r), krow) * p.scale;
                }
            }
            acc.iter_mut().for_each(|a| *a = 0.0);
            for r in 0..rep {
                let sc = &mut scores[r * n..(r + 1) * n];
                if let Some(cap) = p.softcap {
                    sc.iter_mut().for_each(|x| *x = (*x / cap).tanh() * cap);
                }
                let mx = sc.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let mut sum = 0f32;
                sc.iter_mut().for_each(|x| {
                    *x = (*x - mx).exp();
                    sum += *x;
                });
                let inv = 1.0 / sum;
                sc.iter_mut().for_each(|x| *x *= inv);
            }
            for i in 0..n {
                let vrow = vview.row(h, k0 + i, vd);
                for r in 0..rep {
                    let w = scores[r * n + i];
                    let a = &mut acc[r * vd..(r + 1) * vd];
                    a.iter_mut().zip(vrow).for_each(|(a, &v)| *a += w * v);
                }
            }
            for r in 0..rep {
                let o = (s * n_head + h * rep + r) * vd;
                // SAFETY: item (s, h) is the only writer of its rep heads of
                // sequence s; every index is < n_seq·n_head·vd and `out`
                // outlives the pass.
                unsafe {
                    std::ptr::copy_nonoverlapping(acc[r * vd..].as_ptr(), out_ptr.get().add(o), vd);
                }
            }
        }
    });
    drop(views);
    drop(guards);
    Ok(Tensor::from_vec(out, (n_seq, n_head * vd), q.device())?)
}

/// A raw output pointer shared by the pool's workers (each writes its own heads).
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: workers write disjoint ranges; see `decode`.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::models::nn::attention;
    use candle_core::{Device, IndexOp};

    /// Caches as `SeqState` keeps them: `[n_kv, cap, d]` buffers viewed to `len`.
    fn cache(n_kv: usize, cap: usize, len: usize, d: usize) -> Tensor {
        let dev = Device::Cpu;
        let full = Tensor::randn(0f32, 1.0, (n_kv, cap, d), &dev).unwrap();
        full.narrow(1, 0, len).unwrap()
    }

    fn check(p: AttnParams, lens: &[usize], n_head: usize, n_kv: usize, hd: usize) {
        let dev = Device::Cpu;
        let n_seq = lens.len();
        let q = Tensor::randn(0f32, 1.0, (n_seq, n_head, hd), &dev).unwrap();
        let ks: Vec<Tensor> = lens.iter().map(|&l| cache(n_kv, l + 7, l, hd)).collect();
        let vs: Vec<Tensor> = lens.iter().map(|&l| cache(n_kv, l + 7, l, hd)).collect();
        let seqs: Vec<SeqKv<'_>> = ks.iter().zip(&vs).map(|(k, v)| SeqKv { k, v }).collect();
        let got = decode(&q, &seqs, p).unwrap();
        assert_eq!(got.dims(), &[n_seq, n_head * hd]);
        for s in 0..n_seq {
            let qs = q.i(s).unwrap().reshape((n_head, 1, hd)).unwrap();
            let want = attention(&qs, &ks[s], &vs[s], p).unwrap();
            let d = (got.i(s).unwrap() - want.reshape(n_head * hd).unwrap())
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(d < 1e-4, "{p:?} lens {lens:?} seq {s}: max abs diff {d}");
        }
    }

    #[test]
    fn matches_the_per_sequence_path_for_every_length() {
        let plain = AttnParams {
            scale: 0.125,
            softcap: None,
            window: None,
        };
        check(plain, &[1, 5, 37, 130], 9, 3, 64);
        check(plain, &[300], 4, 4, 32);
        check(plain, &[3, 17], 6, 1, 20);
    }

    #[test]
    fn softcap_and_sliding_window_match_the_per_sequence_path() {
        let p = AttnParams {
            scale: 0.2,
            softcap: Some(5.0),
            window: Some(8),
        };
        check(p, &[1, 8, 9, 40], 4, 2, 16);
        check(
            AttnParams {
                window: Some(1),
                ..p
            },
            &[2, 10],
            2,
            1,
            8,
        );
    }

    #[test]
    fn mismatched_batches_are_errors() {
        let dev = Device::Cpu;
        let q = Tensor::zeros((2, 4, 8), DType::F32, &dev).unwrap();
        let k = Tensor::zeros((2, 3, 8), DType::F32, &dev).unwrap();
        let one = [SeqKv { k: &k, v: &k }];
        let p = AttnParams {
            scale: 1.0,
            softcap: None,
            window: None,
        };
        assert!(decode(&q, &one, p).is_err());
        let k16 = k.to_dtype(DType::F16).unwrap();
        let q1 = q.narrow(0, 0, 1).unwrap();
        assert!(decode(&q1, &[SeqKv { k: &k16, v: &k16 }], p).is_err());
    }
}
