//! `joule bench layers`: the time of the recurrent and per-layer-embedding layer cores at real
//! width on the CPU, the peer of `llama-layer-kinds` (scripts/llama-layer-kinds.cpp, llama.cpp's
//! ggml graph for the same cores; benches/layer-kinds.sh runs both and prints the table).
//!
//! Each kind is the code a model runs for one layer between its projections (which are the
//! shared matmul kernels, measured by `joule bench matmul`), for one layer:
//! - `delta`: Qwen3.5-4B's gated delta net (16 key heads, 32 value heads of 128, conv kernel 4):
//!   `qwen35::host_core_from` (conv + SiLU, q/k L2 norms, softplus/sigmoid gates, the delta
//!   rule), with the conv and delta states read in place from tensors and the new ones put
//!   back as tensors, as `Qwen35::delta_net` does.
//! - `mamba`: Nemotron-3-Nano-4B's Mamba-2 core (96 heads x 80, state 128, 8 groups, conv kernel
//!   4): `nemotron_h::host_core_from` (conv + bias + SiLU, softplus dt, the scan with its `D` skip),
//!   the states likewise.
//! - `ple`: Gemma 4's per-layer inputs from a real file's tensors (`--gemma FILE`): the gather
//!   from `per_layer_token_embd`, the `per_layer_model_proj` product, its norm, the sum.
//!
//! Cases: `decode1` (one sequence, one token), `decode5` (five sequences, one token each, one
//! after another as the models run them), `prompt512` (one sequence, 512 tokens). States carry
//! over between repetitions. Inputs are random (seeded), states start at zero. Each
//! measurement repeats until both `--reps` repetitions and `--seconds` of wall time are done,
//! after one warm-up, and reports wall and process CPU milliseconds per repetition.

use crate::inference::files::gguf_weights::GgufFile;
use crate::inference::models::delta_net;
use crate::inference::models::gemma4::PerLayerProbe;
use crate::inference::models::mamba2;
use crate::inference::models::nemotron_h;
use crate::inference::models::nn::with_host_f32;
use crate::inference::models::qwen35;
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use clap::Args;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct LayersBenchArgs {
    /// Layer kinds (delta, mamba, ple), comma-separated; `ple` needs --gemma.
    #[arg(long, value_delimiter = ',', default_value = "delta,mamba,ple")]
    pub kinds: Vec<String>,
    /// Cases (decode1, decode5, prompt512), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "decode1,decode5,prompt512"
    )]
    pub cases: Vec<String>,
    /// A Gemma 4 GGUF file with per-layer embeddings (for kind `ple`).
    #[arg(long)]
    pub gemma: Option<PathBuf>,
    /// At least this many timed repetitions per measurement (after one warm-up).
    #[arg(short = 'r', long = "reps", default_value_t = 20)]
    pub reps: usize,
    /// And at least this many seconds of wall time per measurement.
    #[arg(long, default_value_t = 0.0)]
    pub seconds: f64,
    /// Worker threads that compute, at least 1 (default: RAYON_NUM_THREADS if set, else every core).
    #[arg(short = 't', long, value_name = "N", value_parser = crate::threads::parse_threads)]
    pub threads: Option<usize>,
}

/// One case: sequences, tokens per sequence.
fn case(name: &str) -> Result<(usize, usize)> {
    Ok(match name {
        "decode1" => (1, 1),
        "decode5" => (5, 1),
        "prompt512" => (1, 512),
        other => bail!("--cases: `{other}` is not a case (decode1, decode5, prompt512)"),
    })
}

/// User plus system CPU seconds of this process, all threads (`/proc/self/stat`, in clock
/// ticks of 1/100 s; measurements last long enough for that to be fine).
pub(crate) fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; `f` starts at field 3.
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (tick(11) + tick(12)) / 100.0
}

fn random(rng: &mut rand_chacha::ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

/// Wall and CPU milliseconds per repetition of `step`, after one warm-up.
fn time(reps: usize, seconds: f64, mut step: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    step()?;
    let (w0, c0) = (Instant::now(), cpu_seconds());
    let mut n = 0usize;
    while n < reps || w0.elapsed().as_secs_f64() < seconds {
        step()?;
        n += 1;
    }
    let wall = w0.elapsed().as_secs_f64() / n as f64;
    let cpu = (cpu_seconds() - c0) / n as f64;
    Ok((wall * 1e3, cpu * 1e3))
}

/// Per-sequence recurrent states as the models keep them: two tensors (conv, recurrent).
struct States {
    conv: Vec<Tensor>,
    ssm: Vec<Tensor>,
}

impl States {
    fn zeros(n_seqs: usize, conv_len: usize, ssm_len: usize) -> Result<Self> {
        let z = |n: usize| Tensor::zeros(n, candle_core::DType::F32, &Device::Cpu);
        Ok(Self {
            conv: (0..n_seqs)
                .map(|_| z(conv_len))
                .collect::<candle_core::Result<_>>()?,
            ssm: (0..n_seqs)
                .map(|_| z(ssm_len))
                .collect::<candle_core::Result<_>>()?,
        })
    }

    /// `f` of sequence `s`'s conv and recurrent states, read where they are (borrowed from the
    /// tensors), as a model's step reads them.
    fn with<R>(&self, s: usize, f: impl FnOnce(&[f32], &[f32]) -> R) -> Result<R> {
        Ok(with_host_f32(&self.conv[s], |c| {
            with_host_f32(&self.ssm[s], |r| f(c, r))
        })??)
    }

    /// Sequence `s`'s new states back into tensors, as a model's step stages them.
    fn put(&mut self, s: usize, conv: Vec<f32>, ssm: Vec<f32>) -> Result<()> {
        let (nc, ns) = (conv.len(), ssm.len());
        self.conv[s] = Tensor::from_vec(conv, nc, &Device::Cpu)?;
        self.ssm[s] = Tensor::from_vec(ssm, ns, &Device::Cpu)?;
        Ok(())
    }
}

/// Qwen3.5-4B's delta-net core: `n_seqs` sequences of `t` tokens.
fn bench_delta(n_seqs: usize, t: usize, reps: usize, seconds: f64) -> Result<(f64, f64)> {
    let dims = delta_net::Dims {
        n_k: 16,
        n_v: 32,
        d_k: 128,
        d_v: 128,
        tiled: true,
    };
    let kc = 4;
    let conv_dim = 2 * dims.n_k * dims.d_k + dims.n_v * dims.d_v;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let conv = random(&mut rng, conv_dim * kc, -0.5, 0.5);
    let a = random(&mut rng, dims.n_v, -8.0, -0.5);
    let dt_bias = random(&mut rng, dims.n_v, -1.0, 1.0);
    let m = qwen35::HostMixer {
        conv: &conv,
        a: &a,
        dt_bias: &dt_bias,
        kc,
        dims,
    };
    let rows = n_seqs * t;
    let qkv = random(&mut rng, rows * conv_dim, -1.0, 1.0);
    let alpha = random(&mut rng, rows * dims.n_v, -2.0, 2.0);
    let beta = random(&mut rng, rows * dims.n_v, -2.0, 2.0);
    let mut st = States::zeros(n_seqs, (kc - 1) * conv_dim, dims.state_len())?;
    let mut sink = 0f32;
    let r = time(reps, seconds, || {
        for s in 0..n_seqs {
            let (r0, r1) = (s * t, (s + 1) * t);
            let (o, new_conv, ssm) = st.with(s, |conv_state, ssm| {
                qwen35::host_core_from(
                    &m,
                    &qkv[r0 * conv_dim..r1 * conv_dim],
                    &alpha[r0 * dims.n_v..r1 * dims.n_v],
                    &beta[r0 * dims.n_v..r1 * dims.n_v],
                    conv_state,
                    ssm,
                )
            })?;
            sink += o[0];
            st.put(s, new_conv, ssm)?;
        }
        Ok(())
    })?;
    if !sink.is_finite() {
        bail!("delta: the output is not finite");
    }
    Ok(r)
}

/// Nemotron-3-Nano-4B's Mamba-2 core: `n_seqs` sequences of `t` tokens.
fn bench_mamba(n_seqs: usize, t: usize, reps: usize, seconds: f64) -> Result<(f64, f64)> {
    let dims = mamba2::Dims {
        n_head: 96,
        head_dim: 80,
        d_state: 128,
        n_group: 8,
    };
    let kc = 4;
    let inner = dims.inner();
    let conv_dim = inner + 2 * dims.n_group * dims.d_state;
    let width = inner + conv_dim + dims.n_head;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let conv = random(&mut rng, conv_dim * kc, -0.5, 0.5);
    let conv_bias = random(&mut rng, conv_dim, -0.1, 0.1);
    let dt_bias = random(&mut rng, dims.n_head, -3.0, -1.0);
    let a = random(&mut rng, dims.n_head, -8.0, -0.5);
    let d = random(&mut rng, dims.n_head, 0.5, 1.5);
    let m = nemotron_h::HostMixer {
        conv: &conv,
        conv_bias: &conv_bias,
        dt_bias: &dt_bias,
        a: &a,
        d: &d,
        kc,
        dims,
    };
    let zxbcdt = random(&mut rng, n_seqs * t * width, -1.0, 1.0);
    let mut st = States::zeros(n_seqs, (kc - 1) * conv_dim, dims.state_len())?;
    let mut sink = 0f32;
    let r = time(reps, seconds, || {
        for s in 0..n_seqs {
            let (y, new_conv, ssm) = st.with(s, |conv_state, ssm| {
                nemotron_h::host_core_from(
                    &m,
                    &zxbcdt[s * t * width..(s + 1) * t * width],
                    conv_state,
                    ssm,
                )
            })?;
            sink += y[0];
            st.put(s, new_conv, ssm)?;
        }
        Ok(())
    })?;
    if !sink.is_finite() {
        bail!("mamba: the output is not finite");
    }
    Ok(r)
}

/// Gemma 4's per-layer inputs for `n` tokens.
fn bench_ple(p: &PerLayerProbe, n: usize, reps: usize, seconds: f64) -> Result<(f64, f64)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let vocab = p.vocab() as u32;
    let ids: Vec<u32> = (0..n).map(|_| rng.gen_range(0..vocab)).collect();
    let ids = Tensor::new(ids.as_slice(), &Device::Cpu)?;
    let x = Tensor::from_vec(
        random(&mut rng, n * p.n_embd, -1.0, 1.0),
        (n, p.n_embd),
        &Device::Cpu,
    )?;
    let mut sink = 0f32;
    let r = time(reps, seconds, || {
        let out = p.run(&ids, &x)?;
        sink += out.flatten_all()?.get(0)?.to_scalar::<f32>()?;
        Ok(())
    })?;
    if !sink.is_finite() {
        bail!("ple: the output is not finite");
    }
    Ok(r)
}

pub fn run(args: LayersBenchArgs) -> Result<ExitCode> {
    let threads = args.threads.unwrap_or(0);
    crate::threads::setup(args.threads, None)?;
    let cases: Vec<(String, (usize, usize))> = args
        .cases
        .iter()
        .map(|c| Ok((c.clone(), case(c)?)))
        .collect::<Result<_>>()?;
    let reps = args.reps.max(1);
    let mut ple: Option<PerLayerProbe> = None;
    for kind in &args.kinds {
        if kind == "ple" && ple.is_none() {
            let Some(path) = &args.gemma else {
                bail!("--kinds ple needs --gemma FILE (a Gemma 4 GGUF with per-layer embeddings)");
            };
            let mut g = GgufFile::open(path)?;
            ple = Some(
                PerLayerProbe::load(&mut g, &Device::Cpu)
                    .with_context(|| format!("--gemma {}", path.display()))?,
            );
        }
        for (name, (n_seqs, t)) in &cases {
            let (wall, cpu) = match kind.as_str() {
                "delta" => bench_delta(*n_seqs, *t, reps, args.seconds)?,
                "mamba" => bench_mamba(*n_seqs, *t, reps, args.seconds)?,
                "ple" => match &ple {
                    Some(p) => bench_ple(p, n_seqs * t, reps, args.seconds)?,
                    None => bail!("--kinds ple: the Gemma 4 file did not load"),
                },
                other => bail!("--kinds: `{other}` is not a kind (delta, mamba, ple)"),
            };
            crate::outln!(
                "side=joule kind={kind} case={name} threads={threads} wall_ms={wall:.4} cpu_ms={cpu:.4}"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_parse_or_name_the_choices() {
        assert_eq!(case("decode5").unwrap(), (5, 1));
        assert_eq!(case("prompt512").unwrap(), (1, 512));
        let e = case("decode2").unwrap_err().to_string();
        assert!(e.contains("decode2") && e.contains("prompt512"), "{e}");
    }

    #[test]
    fn the_cpu_clock_advances_with_work() {
        let c0 = cpu_seconds();
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed().as_secs_f64() < 0.1 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let used = cpu_seconds() - c0;
        assert!(used.is_finite() && used > 0.0, "{used}");
    }
}
