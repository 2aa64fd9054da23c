//! Host side of `kernels/delta_net.cu`: Qwen3.5's gated delta-net core for a
//! whole batch on the GPU, from the `attn_qkv`, `ssm_alpha` and `ssm_beta`
//! projections to the per-head outputs and each sequence's new conv and
//! recurrent states, in four launches (conv + SiLU, new conv states, the
//! recurrent form for one-token steps, the chunked form for longer ones).
//! Same function as the host path in `models/qwen35.rs` (`host_core`) and
//! `models/delta_net.rs`, which the tests compare against.

use super::{cuda_device, function, tensor, upload, zeros, DevF32, DELTA_NET};
use crate::inference::models::delta_net::Dims;
use anyhow::{bail, Result};
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::Tensor;

/// Value columns per block and row groups per block (`TV`, `RY` in the kernel).
const TV: usize = 32;
const RY: usize = 8;
/// Dynamic shared memory every CUDA GPU gives a block without opting in.
const SMEM_LIMIT: usize = 48 * 1024;

/// The layer's weights on the device: conv `[conv_dim, kernel]`, `a` and
/// `dt_bias` `[n_v]`.
pub struct Weights<'a> {
    pub conv: &'a Tensor,
    pub a: &'a Tensor,
    pub dt_bias: &'a Tensor,
    pub conv_kernel: usize,
}

/// One sequence of the batch: its number of tokens and committed states
/// (conv `[kernel − 1, conv_dim]`, recurrent `[n_v, d_k, d_v]`; `None`
/// before its first token).
pub struct SeqIn<'a> {
    pub t: usize,
    pub conv: Option<&'a Tensor>,
    pub ssm: Option<&'a Tensor>,
}

/// One sequence's new states.
pub struct SeqOut {
    pub conv: Tensor,
    pub ssm: Tensor,
}

fn shared_recurrent(d_k: usize) -> usize {
    (d_k * TV + 2 * d_k + RY * TV + 4) * 4
}

fn shared_chunked(d_k: usize, l: usize) -> usize {
    (d_k * TV + 2 * l * (d_k + 1) + 2 * l * l + 2 * l * TV + 3 * l) * 4
}

/// The largest chunk (≤ 32 tokens) whose working set fits a block's shared
/// memory, if any.
fn chunk_len(d_k: usize) -> Option<usize> {
    [32, 16, 8, 4]
        .into_iter()
        .find(|&l| shared_chunked(d_k, l) <= SMEM_LIMIT)
}

/// Whether the kernels can run a layer of these sizes (else the caller
/// keeps the host path).
pub fn supported(d: &Dims, conv_kernel: usize) -> bool {
    conv_kernel >= 2 && shared_recurrent(d.d_k) <= SMEM_LIMIT && d.n_k > 0 && d.n_v % d.n_k == 0
}

fn i32s(v: impl IntoIterator<Item = usize>) -> Result<Vec<i32>> {
    v.into_iter()
        .map(|x| i32::try_from(x).map_err(|_| anyhow::anyhow!("{x} does not fit a CUDA int")))
        .collect()
}

/// Run the core over the batch. `qkv` `[n_total, conv_dim]`, `alpha`,
/// `beta` `[n_total, n_v]` (f32, before softplus/sigmoid), rows stacked in
/// the order of `seqs`. Returns the outputs `[n_total, n_v, d_v]` and the
/// sequences' new states. Steps of one token use the recurrent form, longer
/// ones the chunked form (as the host path does).
pub fn forward(
    d: &Dims,
    w: &Weights<'_>,
    qkv: &Tensor,
    alpha: &Tensor,
    beta: &Tensor,
    seqs: &[SeqIn<'_>],
) -> Result<(Tensor, Vec<SeqOut>)> {
    let dev = cuda_device(qkv.device())?;
    let stream = dev.cuda_stream();
    let kc = w.conv_kernel;
    if !supported(d, kc) {
        bail!("delta-net sizes {d:?} with conv kernel {kc} are beyond the CUDA kernels");
    }
    let keep = kc - 1;
    let c = 2 * d.n_k * d.d_k + d.n_v * d.d_v;
    let n_total: usize = seqs.iter().map(|s| s.t).sum();
    let n_seq = seqs.len();
    if n_seq == 0 || n_total == 0 {
        bail!("delta-net CUDA step with no tokens");
    }
    let qkv = qkv.contiguous()?;
    let alpha = alpha.contiguous()?;
    let beta = beta.contiguous()?;
    let (x_in, al, be) = (
        DevF32::new(&qkv)?,
        DevF32::new(&alpha)?,
        DevF32::new(&beta)?,
    );
    let (cw, aw, dtb) = (
        DevF32::new(w.conv)?,
        DevF32::new(w.a)?,
        DevF32::new(w.dt_bias)?,
    );
    if x_in.len() != n_total * c
        || al.len() != n_total * d.n_v
        || be.len() != n_total * d.n_v
        || cw.len() != c * kc
        || aw.len() != d.n_v
        || dtb.len() != d.n_v
    {
        bail!("delta-net CUDA inputs do not match {n_total} rows of {d:?}");
    }
    // Committed states (read-locked while the kernels run).
    let mut conv_in = Vec::with_capacity(n_seq);
    let mut ssm_in = Vec::with_capacity(n_seq);
    for s in seqs {
        let cv = s.conv.map(DevF32::new).transpose()?;
        let sv = s.ssm.map(DevF32::new).transpose()?;
        if cv.as_ref().is_some_and(|v| v.len() != keep * c)
            || sv.as_ref().is_some_and(|v| v.len() != d.state_len())
        {
            bail!("a sequence's delta-net state does not match {d:?}");
        }
        conv_in.push(cv);
        ssm_in.push(sv);
    }
    let ptr_or_null = |v: &Option<DevF32<'_>>| -> Result<u64> {
        match v {
            Some(v) => v.ptr(&stream),
            None => Ok(0),
        }
    };
    let conv_in_p: Vec<u64> = conv_in.iter().map(ptr_or_null).collect::<Result<_>>()?;
    let ssm_in_p: Vec<u64> = ssm_in.iter().map(ptr_or_null).collect::<Result<_>>()?;

    // Fresh outputs: per-sequence states are buffers of their own, so that a
    // snapshot of one sequence keeps no other sequence's memory alive.
    let conv_out: Vec<_> = (0..n_seq)
        .map(|_| zeros(dev, keep * c))
        .collect::<Result<_>>()?;
    let ssm_out: Vec<_> = (0..n_seq)
        .map(|_| zeros(dev, d.state_len()))
        .collect::<Result<_>>()?;
    let conv_out_p: Vec<u64> = conv_out
        .iter()
        .map(|s| super::slice_ptr(s, &stream))
        .collect();
    let ssm_out_p: Vec<u64> = ssm_out
        .iter()
        .map(|s| super::slice_ptr(s, &stream))
        .collect();
    let mut xs = zeros(dev, n_total * c)?;
    let mut core = zeros(dev, n_total * d.n_v * d.d_v)?;

    let mut offs = Vec::with_capacity(n_seq + 1);
    let mut row_seq = Vec::with_capacity(n_total);
    let mut acc = 0usize;
    for (i, s) in seqs.iter().enumerate() {
        offs.push(acc);
        row_seq.extend(std::iter::repeat_n(i, s.t));
        acc += s.t;
    }
    offs.push(acc);
    let seq_off = upload(&stream, &i32s(offs.iter().copied())?)?;
    let row_seq = upload(&stream, &i32s(row_seq)?)?;
    let conv_in_d = upload(&stream, &conv_in_p)?;
    let conv_out_d = upload(&stream, &conv_out_p)?;
    let (c_i, kc_i) = (c as i32, kc as i32);
    let (qkv_p, cw_p) = (x_in.ptr(&stream)?, cw.ptr(&stream)?);

    // 1. Causal conv + SiLU over every row; 2. the new conv states.
    {
        let f = function(dev, DELTA_NET, "gdn_conv_silu")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&qkv_p)
            .arg(&conv_in_d)
            .arg(&cw_p)
            .arg(&seq_off)
            .arg(&row_seq)
            .arg(&c_i)
            .arg(&kc_i)
            .arg(&mut xs);
        let cfg = LaunchConfig {
            grid_dim: (n_total as u32, c.div_ceil(256) as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        unsafe { b.launch(cfg) }?;
    }
    {
        let f = function(dev, DELTA_NET, "gdn_conv_state")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&qkv_p)
            .arg(&conv_in_d)
            .arg(&conv_out_d)
            .arg(&seq_off)
            .arg(&c_i)
            .arg(&kc_i);
        let cfg = LaunchConfig {
            grid_dim: (c.div_ceil(256) as u32, keep as u32, n_seq as u32),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        unsafe { b.launch(cfg) }?;
    }

    // 3./4. The delta rule: one-token steps recurrent, longer steps chunked.
    let (al_p, be_p, a_p, dt_p) = (
        al.ptr(&stream)?,
        be.ptr(&stream)?,
        aw.ptr(&stream)?,
        dtb.ptr(&stream)?,
    );
    let dims_i = [d.n_k, d.n_v, d.d_k, d.d_v].map(|x| x as i32);
    let tiled = d.tiled as i32;
    for chunked in [false, true] {
        let group: Vec<usize> = (0..n_seq).filter(|&i| (seqs[i].t > 1) == chunked).collect();
        if group.is_empty() {
            continue;
        }
        let rows = upload(&stream, &i32s(group.iter().map(|&i| offs[i]))?)?;
        let lens = upload(&stream, &i32s(group.iter().map(|&i| seqs[i].t))?)?;
        let s_in = upload(
            &stream,
            &group.iter().map(|&i| ssm_in_p[i]).collect::<Vec<_>>(),
        )?;
        let s_out = upload(
            &stream,
            &group.iter().map(|&i| ssm_out_p[i]).collect::<Vec<_>>(),
        )?;
        let (name, smem, l) = if chunked {
            match chunk_len(d.d_k) {
                Some(l) => ("gdn_chunked", shared_chunked(d.d_k, l), l as i32),
                None => ("gdn_recurrent", shared_recurrent(d.d_k), 0),
            }
        } else {
            ("gdn_recurrent", shared_recurrent(d.d_k), 0)
        };
        let f = function(dev, DELTA_NET, name)?;
        let mut b = stream.launch_builder(&f);
        b.arg(&xs)
            .arg(&al_p)
            .arg(&be_p)
            .arg(&a_p)
            .arg(&dt_p)
            .arg(&rows)
            .arg(&lens)
            .arg(&s_in)
            .arg(&s_out)
            .arg(&dims_i[0])
            .arg(&dims_i[1])
            .arg(&dims_i[2])
            .arg(&dims_i[3])
            .arg(&tiled);
        if name == "gdn_chunked" {
            b.arg(&l);
        }
        b.arg(&mut core);
        let cfg = LaunchConfig {
            grid_dim: (d.n_v as u32, group.len() as u32, d.d_v.div_ceil(TV) as u32),
            block_dim: (TV as u32, RY as u32, 1),
            shared_mem_bytes: smem as u32,
        };
        unsafe { b.launch(cfg) }?;
    }
    drop((x_in, al, be, cw, aw, dtb, conv_in, ssm_in));

    let core = tensor(dev, core, (n_total, d.n_v, d.d_v));
    let outs = conv_out
        .into_iter()
        .zip(ssm_out)
        .map(|(cv, sv)| SeqOut {
            conv: tensor(dev, cv, (keep, c)),
            ssm: tensor(dev, sv, (d.n_v, d.d_k, d.d_v)),
        })
        .collect();
    Ok((core, outs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::kernels::cuda::test_device;
    use crate::inference::models::qwen35::{host_core, HostMixer};
    use rand::{Rng, SeedableRng};

    fn random(n: usize, rng: &mut rand_chacha::ChaCha8Rng, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(lo..hi)).collect()
    }

    fn max_rel(a: &[f32], b: &[f32]) -> f32 {
        let scale = b.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
            / scale
    }

    /// A batch mixing fresh and continued sequences, one-token and long
    /// steps (several chunks, the last partial), tiled and grouped value
    /// heads, on the GPU and on the host from the same states.
    #[test]
    fn cuda_delta_net_matches_host() {
        let Some(gpu) = test_device("cuda_delta_net_matches_host") else {
            return;
        };
        for (tiled, d_k, d_v) in [(true, 128, 128), (false, 32, 48)] {
            let d = Dims {
                n_k: 2,
                n_v: 4,
                d_k,
                d_v,
                tiled,
            };
            let kc = 4;
            let c = 2 * d.n_k * d.d_k + d.n_v * d.d_v;
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
            let conv = random(c * kc, &mut rng, -0.5, 0.5);
            let a: Vec<f32> = random(d.n_v, &mut rng, 0.1, 2.0)
                .iter()
                .map(|x| -x)
                .collect();
            let dt_bias = random(d.n_v, &mut rng, -1.0, 1.0);
            // (tokens, has a previous state)
            let shape = [(1, true), (37, false), (1, false), (70, true), (2, true)];
            let n_total: usize = shape.iter().map(|s| s.0).sum();
            let qkv = random(n_total * c, &mut rng, -2.0, 2.0);
            let alpha = random(n_total * d.n_v, &mut rng, -3.0, 3.0);
            let beta = random(n_total * d.n_v, &mut rng, -3.0, 3.0);
            let states: Vec<Option<(Vec<f32>, Vec<f32>)>> = shape
                .iter()
                .map(|&(_, has)| {
                    has.then(|| {
                        (
                            random((kc - 1) * c, &mut rng, -1.0, 1.0),
                            random(d.state_len(), &mut rng, -0.5, 0.5),
                        )
                    })
                })
                .collect();

            let up = |v: &[f32], shape: &[usize]| Tensor::from_slice(v, shape, &gpu).unwrap();
            let (conv_t, a_t, dt_t) = (
                up(&conv, &[c, kc]),
                up(&a, &[d.n_v]),
                up(&dt_bias, &[d.n_v]),
            );
            let w = Weights {
                conv: &conv_t,
                a: &a_t,
                dt_bias: &dt_t,
                conv_kernel: kc,
            };
            let st_t: Vec<Option<(Tensor, Tensor)>> = states
                .iter()
                .map(|s| {
                    s.as_ref()
                        .map(|(cv, sv)| (up(cv, &[kc - 1, c]), up(sv, &[d.n_v, d.d_k, d.d_v])))
                })
                .collect();
            let seqs: Vec<SeqIn> = shape
                .iter()
                .zip(&st_t)
                .map(|(&(t, _), s)| SeqIn {
                    t,
                    conv: s.as_ref().map(|x| &x.0),
                    ssm: s.as_ref().map(|x| &x.1),
                })
                .collect();
            let (core, outs) = forward(
                &d,
                &w,
                &up(&qkv, &[n_total, c]),
                &up(&alpha, &[n_total, d.n_v]),
                &up(&beta, &[n_total, d.n_v]),
                &seqs,
            )
            .unwrap();
            let core = core.flatten_all().unwrap().to_vec1::<f32>().unwrap();

            let hm = HostMixer {
                conv: &conv,
                a: &a,
                dt_bias: &dt_bias,
                kc,
                dims: d,
            };
            let mut off = 0;
            for (i, &(t, _)) in shape.iter().enumerate() {
                let (cs, mut ss) = match &states[i] {
                    Some((cv, sv)) => (cv.clone(), sv.clone()),
                    None => (vec![0f32; (kc - 1) * c], vec![0f32; d.state_len()]),
                };
                let (o, new_conv) = host_core(
                    &hm,
                    &qkv[off * c..(off + t) * c],
                    &alpha[off * d.n_v..(off + t) * d.n_v],
                    &beta[off * d.n_v..(off + t) * d.n_v],
                    &cs,
                    &mut ss,
                );
                let vd = d.n_v * d.d_v;
                let got = &core[off * vd..(off + t) * vd];
                let e = max_rel(got, &o);
                assert!(
                    e < 1e-4,
                    "seq {i} ({t} tokens, tiled {tiled}): outputs differ by {e}"
                );
                let gc = outs[i]
                    .conv
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap();
                assert_eq!(gc, new_conv, "seq {i}: conv state");
                let gs = outs[i].ssm.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let e = max_rel(&gs, &ss);
                assert!(e < 1e-4, "seq {i}: recurrent state differs by {e}");
                off += t;
            }
        }
    }

    #[test]
    fn chunk_length_fits_shared_memory() {
        assert_eq!(chunk_len(128), Some(16));
        assert!(shared_chunked(128, 16) <= SMEM_LIMIT);
        assert!(shared_recurrent(128) <= SMEM_LIMIT);
        assert_eq!(chunk_len(4096), None);
    }
}
