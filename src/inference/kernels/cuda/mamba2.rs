//! Host side of `kernels/mamba2.cu`: the Mamba-2 selective scan for a whole
//! batch of sequences in one launch, reading `x`, `B` and `C` in place from
//! the conv output's rows. Same function as `models/mamba2.rs` (`run`,
//! either form), which the test compares against. Not wired into
//! `nemotron_h.rs` yet: its conv and gating still run on the host.

use super::{cuda_device, function, slice_ptr, tensor, upload, zeros, DevF32, MAMBA2};
use crate::inference::models::mamba2::Dims;
use anyhow::{bail, Result};
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::Tensor;

/// Rows (warps) per block and state elements per lane (`RW`, `MAXN`).
const RW: usize = 8;
const MAXN: usize = 8;

/// Whether the kernel takes layers of these sizes.
pub fn supported(d: &Dims) -> bool {
    d.d_state <= 32 * MAXN && d.n_group > 0 && d.n_head % d.n_group == 0
}

/// Where `x`, `B` and `C` start in each row of the conv output `xbc`
/// (`[n_total, width]`): columns `x` .. `x + n_head·head_dim`, `b` ..
/// `b + n_group·d_state`, `c` likewise.
#[derive(Debug, Clone, Copy)]
pub struct Cols {
    pub x: usize,
    pub b: usize,
    pub c: usize,
}

/// One sequence: its tokens and committed state `[n_head, head_dim,
/// d_state]` (`None` before its first token).
pub struct SeqIn<'a> {
    pub t: usize,
    pub ssm: Option<&'a Tensor>,
}

/// The scan over the batch. `a`, `d_skip` `[n_head]`; `dt` `[n_total,
/// n_head]` (after bias and softplus). Returns `y` `[n_total, n_head,
/// head_dim]` (the `D` skip included) and each sequence's new state.
pub fn scan(
    d: &Dims,
    a: &Tensor,
    d_skip: &Tensor,
    xbc: &Tensor,
    cols: Cols,
    dt: &Tensor,
    seqs: &[SeqIn<'_>],
) -> Result<(Tensor, Vec<Tensor>)> {
    let dev = cuda_device(xbc.device())?;
    let stream = dev.cuda_stream();
    if !supported(d) {
        bail!("Mamba-2 sizes {d:?} are beyond the CUDA kernel");
    }
    let n_total: usize = seqs.iter().map(|s| s.t).sum();
    let (rows, width) = xbc.dims2()?;
    let gs = d.n_group * d.d_state;
    if rows != n_total
        || cols.x + d.inner() > width
        || cols.b + gs > width
        || cols.c + gs > width
        || seqs.is_empty()
    {
        bail!("Mamba-2 CUDA inputs: {rows}×{width} rows for {n_total} tokens of {d:?}");
    }
    let xbc = xbc.contiguous()?;
    let dt = dt.contiguous()?;
    let (xd, dtd, ad, dd) = (
        DevF32::new(&xbc)?,
        DevF32::new(&dt)?,
        DevF32::new(a)?,
        DevF32::new(d_skip)?,
    );
    if dtd.len() != n_total * d.n_head || ad.len() != d.n_head || dd.len() != d.n_head {
        bail!("Mamba-2 CUDA inputs do not match {d:?}");
    }
    let mut ins = Vec::with_capacity(seqs.len());
    for s in seqs {
        let v = s.ssm.map(DevF32::new).transpose()?;
        if v.as_ref().is_some_and(|v| v.len() != d.state_len()) {
            bail!("a sequence's Mamba-2 state does not match {d:?}");
        }
        ins.push(v);
    }
    let in_p: Vec<u64> = ins
        .iter()
        .map(|v| v.as_ref().map_or(Ok(0), |v| v.ptr(&stream)))
        .collect::<Result<_>>()?;
    let outs: Vec<_> = seqs
        .iter()
        .map(|_| zeros(dev, d.state_len()))
        .collect::<Result<_>>()?;
    let out_p: Vec<u64> = outs.iter().map(|s| slice_ptr(s, &stream)).collect();
    let mut y = zeros(dev, n_total * d.inner())?;
    let mut row = Vec::with_capacity(seqs.len());
    let mut acc = 0usize;
    for s in seqs {
        row.push(i32::try_from(acc)?);
        acc += s.t;
    }
    let lens: Vec<i32> = seqs
        .iter()
        .map(|s| i32::try_from(s.t))
        .collect::<Result<_, _>>()?;
    let (row_d, len_d) = (upload(&stream, &row)?, upload(&stream, &lens)?);
    let (in_d, out_d) = (upload(&stream, &in_p)?, upload(&stream, &out_p)?);
    let base = xd.ptr(&stream)?;
    let f32b = std::mem::size_of::<f32>() as u64;
    let (x_p, b_p, c_p) = (
        base + cols.x as u64 * f32b,
        base + cols.b as u64 * f32b,
        base + cols.c as u64 * f32b,
    );
    let (dt_p, a_p, d_p) = (dtd.ptr(&stream)?, ad.ptr(&stream)?, dd.ptr(&stream)?);
    let dims = [d.n_head, d.head_dim, d.d_state, d.n_group].map(|v| v as i32);
    let stride = width as i64;
    let f = function(dev, MAMBA2, "mamba2_scan")?;
    {
        let mut b = stream.launch_builder(&f);
        b.arg(&x_p)
            .arg(&b_p)
            .arg(&c_p)
            .arg(&dt_p)
            .arg(&a_p)
            .arg(&d_p)
            .arg(&row_d)
            .arg(&len_d)
            .arg(&in_d)
            .arg(&out_d)
            .arg(&dims[0])
            .arg(&dims[1])
            .arg(&dims[2])
            .arg(&dims[3])
            .arg(&stride)
            .arg(&stride)
            .arg(&mut y);
        let cfg = LaunchConfig {
            grid_dim: (
                d.head_dim.div_ceil(RW) as u32,
                d.n_head as u32,
                seqs.len() as u32,
            ),
            block_dim: ((32 * RW) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        unsafe { b.launch(cfg) }?;
    }
    drop((xd, dtd, ad, dd, ins));
    let y = tensor(dev, y, (n_total, d.n_head, d.head_dim));
    let states = outs
        .into_iter()
        .map(|s| tensor(dev, s, (d.n_head, d.head_dim, d.d_state)))
        .collect();
    Ok((y, states))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::kernels::cuda::test_device;
    use crate::inference::models::mamba2::{run, Inputs, Params};
    use rand::{Rng, SeedableRng};

    fn random(n: usize, rng: &mut rand_chacha::ChaCha8Rng, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(lo..hi)).collect()
    }

    /// Fresh and continued sequences of 1 to 150 tokens, x/B/C read from
    /// inside wider rows, against the host scan (chunked for long steps).
    #[test]
    fn cuda_mamba2_scan_matches_host() {
        let Some(gpu) = test_device("cuda_mamba2_scan_matches_host") else {
            return;
        };
        let d = Dims {
            n_head: 8,
            head_dim: 16,
            d_state: 128,
            n_group: 2,
        };
        let gs = d.n_group * d.d_state;
        let (pad, width) = (5, 5 + d.inner() + 2 * gs + 3);
        let cols = Cols {
            x: pad,
            b: pad + d.inner(),
            c: pad + d.inner() + gs,
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let a: Vec<f32> = random(d.n_head, &mut rng, 0.1, 3.0)
            .iter()
            .map(|v| -v)
            .collect();
        let dsk = random(d.n_head, &mut rng, -1.0, 1.0);
        let shape = [(1, true), (150, false), (3, true), (1, false), (64, true)];
        let n_total: usize = shape.iter().map(|s| s.0).sum();
        let xbc = random(n_total * width, &mut rng, -1.0, 1.0);
        let dt = random(n_total * d.n_head, &mut rng, 0.01, 1.0);
        let states: Vec<Option<Vec<f32>>> = shape
            .iter()
            .map(|&(_, has)| has.then(|| random(d.state_len(), &mut rng, -1.0, 1.0)))
            .collect();
        let up = |v: &[f32], s: &[usize]| Tensor::from_slice(v, s, &gpu).unwrap();
        let st_t: Vec<Option<Tensor>> = states
            .iter()
            .map(|s| {
                s.as_ref()
                    .map(|v| up(v, &[d.n_head, d.head_dim, d.d_state]))
            })
            .collect();
        let seqs: Vec<SeqIn> = shape
            .iter()
            .zip(&st_t)
            .map(|(&(t, _), s)| SeqIn { t, ssm: s.as_ref() })
            .collect();
        let (y, outs) = scan(
            &d,
            &up(&a, &[d.n_head]),
            &up(&dsk, &[d.n_head]),
            &up(&xbc, &[n_total, width]),
            cols,
            &up(&dt, &[n_total, d.n_head]),
            &seqs,
        )
        .unwrap();
        let y = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let mut off = 0;
        for (i, &(t, _)) in shape.iter().enumerate() {
            let pick = |col: usize, n: usize| -> Vec<f32> {
                (off..off + t)
                    .flat_map(|r| xbc[r * width + col..r * width + col + n].to_vec())
                    .collect()
            };
            let (x, b, c) = (pick(cols.x, d.inner()), pick(cols.b, gs), pick(cols.c, gs));
            let dts = dt[off * d.n_head..(off + t) * d.n_head].to_vec();
            let mut s = states[i]
                .clone()
                .unwrap_or_else(|| vec![0f32; d.state_len()]);
            let want = run(
                &d,
                &Params { a: &a, d: &dsk },
                &Inputs {
                    x: &x,
                    b: &b,
                    c: &c,
                    dt: &dts,
                },
                &mut s,
                t > 1,
            );
            let got = &y[off * d.inner()..(off + t) * d.inner()];
            let err = got
                .iter()
                .zip(&want)
                .map(|(p, q)| (p - q).abs() / (1.0 + q.abs()))
                .fold(0.0, f32::max);
            assert!(err < 1e-4, "seq {i} ({t} tokens): y differs by {err}");
            let gs_ = outs[i].flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let err = gs_
                .iter()
                .zip(&s)
                .map(|(p, q)| (p - q).abs() / (1.0 + q.abs()))
                .fold(0.0, f32::max);
            assert!(err < 1e-4, "seq {i}: state differs by {err}");
            off += t;
        }
    }
}
