//! Host side of `kernels/attention.cu`: decode attention for many sequences
//! in one launch, each sequence with its own number of keys and its own
//! K/V buffers (the `SeqState` caches, read in place: `[n_kv, len, d]` views
//! of `[n_kv, capacity, d]` buffers, f32 or f16). Same function as
//! `nn::attention` with one query per sequence, which the test compares against.

use super::{cuda_device, function, tensor, upload, zeros, DevF32, ATTENTION};
use crate::inference::kernels::AttnParams;
use anyhow::{bail, Result};
use candle_core::cuda_backend::cudarc::driver::{
    CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use candle_core::{DType, Storage, Tensor};

/// Warps per block and value elements per lane (`AW`, `MAXV` in the kernel).
const AW: usize = 4;
const MAXV: usize = 8;

/// One sequence's keys and values (`[n_kv, len, head_dim]` and `[n_kv, len,
/// v_dim]`, this step's included; rows of one head contiguous).
pub struct SeqKv<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
}

/// Device address of element 0 of `t`, its stride between heads and its
/// dtype, for an f32 or f16 `[n, len, d]` tensor whose `[len, d]` part is
/// contiguous.
fn head_view(t: &Tensor, stream: &CudaStream) -> Result<(u64, i64, DType)> {
    let (_, _, d) = t.dims3()?;
    let (guard, layout) = t.storage_and_layout();
    let st = layout.stride();
    if st[2] != 1 || st[1] != d {
        bail!("decode attention: keys/values of one head must be contiguous (strides {st:?})");
    }
    let Storage::Cuda(cs) = &*guard else {
        bail!("decode attention: keys/values are not on a CUDA device");
    };
    let (base, size) = match t.dtype() {
        DType::F32 => (cs.as_cuda_slice::<f32>()?.device_ptr(stream).0, 4),
        DType::F16 => (cs.as_cuda_slice::<half::f16>()?.device_ptr(stream).0, 2),
        other => bail!("decode attention needs f32 or f16 keys and values, got {other:?}"),
    };
    Ok((
        base + (layout.start_offset() * size) as u64,
        st[0] as i64,
        t.dtype(),
    ))
}

/// Whether the kernel takes heads of these sizes.
pub fn supported(v_dim: usize) -> bool {
    v_dim <= 32 * MAXV
}

/// Attention of one new query per sequence: `q` `[n_seq, n_head,
/// head_dim]` (normed and rotated) against each sequence's keys and values.
/// Returns `[n_seq, n_head · v_dim]`.
pub fn decode(q: &Tensor, kv: &[SeqKv<'_>], p: AttnParams) -> Result<Tensor> {
    let dev = cuda_device(q.device())?;
    let stream = dev.cuda_stream();
    let (n_seq, n_head, hd) = q.dims3()?;
    if kv.len() != n_seq || n_seq == 0 {
        bail!(
            "decode attention: {n_seq} queries for {} sequences",
            kv.len()
        );
    }
    let (n_kv, _, khd) = kv[0].k.dims3()?;
    let vd = kv[0].v.dim(2)?;
    if n_kv == 0 || n_head % n_kv != 0 || khd != hd || !supported(vd) {
        bail!("decode attention: {n_head} heads of {hd} over {n_kv} key/value heads of {khd}/{vd}");
    }
    let q = q.contiguous()?;
    let qd = DevF32::new(&q)?;
    // Tensors stay borrowed (so their storage lives) until after the launch.
    let mut kp = Vec::with_capacity(n_seq);
    let mut vp = Vec::with_capacity(n_seq);
    let mut khs = Vec::with_capacity(n_seq);
    let mut vhs = Vec::with_capacity(n_seq);
    let mut lens = Vec::with_capacity(n_seq);
    for s in kv {
        let (kn, kl, kd) = s.k.dims3()?;
        let (vn, vl, vdd) = s.v.dims3()?;
        if kn != n_kv || vn != n_kv || kd != hd || vdd != vd || kl != vl || kl == 0 {
            bail!("decode attention: a sequence's keys/values do not match the batch's sizes");
        }
        let (k, ks, kt) = head_view(s.k, &stream)?;
        let (v, vs, vt) = head_view(s.v, &stream)?;
        if kt != vt || kt != kv[0].k.dtype() {
            bail!(
                "decode attention: the batch's keys and values are not all {:?}",
                kv[0].k.dtype()
            );
        }
        kp.push(k);
        vp.push(v);
        khs.push(ks);
        vhs.push(vs);
        lens.push(i32::try_from(kl)?);
    }
    let (kp_d, vp_d) = (upload(&stream, &kp)?, upload(&stream, &vp)?);
    let (khs_d, vhs_d) = (upload(&stream, &khs)?, upload(&stream, &vhs)?);
    let lens_d = upload(&stream, &lens)?;
    let mut out = zeros(dev, n_seq * n_head * vd)?;
    let q_p = qd.ptr(&stream)?;
    let (nh, nkv, hd_i, vd_i) = (n_head as i32, n_kv as i32, hd as i32, vd as i32);
    let softcap = p.softcap.unwrap_or(0.0);
    let window = match p.window {
        Some(w) => i32::try_from(w).unwrap_or(i32::MAX),
        None => 0,
    };
    let name = if kv[0].k.dtype() == DType::F16 {
        "attn_decode_f16"
    } else {
        "attn_decode"
    };
    let f = function(dev, ATTENTION, name)?;
    {
        let mut b = stream.launch_builder(&f);
        b.arg(&q_p)
            .arg(&kp_d)
            .arg(&vp_d)
            .arg(&khs_d)
            .arg(&vhs_d)
            .arg(&lens_d)
            .arg(&nh)
            .arg(&nkv)
            .arg(&hd_i)
            .arg(&vd_i)
            .arg(&p.scale)
            .arg(&softcap)
            .arg(&window)
            .arg(&mut out);
        let cfg = LaunchConfig {
            grid_dim: (n_head as u32, n_seq as u32, 1),
            block_dim: ((32 * AW) as u32, 1, 1),
            shared_mem_bytes: ((hd + 2 * AW + AW * vd) * 4) as u32,
        };
        unsafe { b.launch(cfg) }?;
    }
    drop(qd);
    Ok(tensor(dev, out, (n_seq, n_head * vd)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::kernels::cuda::test_device;
    use crate::inference::models::nn::attention;
    use candle_core::Device;

    /// Sequences of different lengths, K/V as views of larger cache buffers
    /// (f32 and f16), grouped-query heads, with and without window and
    /// soft-capping, on the GPU in one launch and one by one through
    /// `nn::attention` on the host.
    #[test]
    fn cuda_decode_attention_matches_host() {
        let Some(gpu) = test_device("cuda_decode_attention_matches_host") else {
            return;
        };
        let (n_head, n_kv, hd, vd) = (8, 2, 64, 64);
        let lens = [1usize, 7, 130, 33, 600];
        let plain = AttnParams {
            scale: 0.125,
            softcap: None,
            window: None,
        };
        let capped = AttnParams {
            softcap: Some(50.0),
            window: Some(32),
            ..plain
        };
        for (p, dtype) in [
            (plain, DType::F32),
            (capped, DType::F32),
            (plain, DType::F16),
            (capped, DType::F16),
        ] {
            let mut host_out = Vec::new();
            let mut caches = Vec::new();
            let mut qs = Vec::new();
            for (i, &len) in lens.iter().enumerate() {
                let cap = len + 17;
                let cache = |d: usize| {
                    Tensor::randn(0f32, 1.0, (n_kv, cap, d), &Device::Cpu)
                        .and_then(|t| t.to_dtype(dtype))
                        .unwrap()
                };
                let (kc, vc) = (cache(hd), cache(vd));
                let q = Tensor::randn(0f32, 1.0, (n_head, 1, hd), &Device::Cpu).unwrap();
                let (k, v) = (kc.narrow(1, 0, len).unwrap(), vc.narrow(1, 0, len).unwrap());
                host_out.push(attention(&q, &k, &v, p).unwrap());
                caches.push((
                    kc.to_device(&gpu).unwrap(),
                    vc.to_device(&gpu).unwrap(),
                    len,
                ));
                qs.push(q.reshape((1, n_head, hd)).unwrap());
                let _ = i;
            }
            let q = Tensor::cat(&qs, 0).unwrap().to_device(&gpu).unwrap();
            let views: Vec<(Tensor, Tensor)> = caches
                .iter()
                .map(|(kc, vc, len)| {
                    (
                        kc.narrow(1, 0, *len).unwrap(),
                        vc.narrow(1, 0, *len).unwrap(),
                    )
                })
                .collect();
            let kv: Vec<SeqKv> = views.iter().map(|(k, v)| SeqKv { k, v }).collect();
            let got = decode(&q, &kv, p).unwrap().to_device(&Device::Cpu).unwrap();
            let want = Tensor::cat(&host_out, 0).unwrap();
            let diff = (got - &want)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(
                diff < 1e-4,
                "decode attention differs by {diff} ({p:?}, {dtype:?})"
            );
        }
    }
}
