//! Joule's own CUDA kernels (`kernels/*.cu`, compiled by `build.rs` into fat
//! binaries for sm_80 and sm_90 with compute_80 PTX for newer GPUs) on
//! candle's CUDA device: loading each module once per device, and the small
//! plumbing the launches share (device pointers of candle tensors, fresh
//! device buffers wrapped back into tensors). Only built with the `cuda`
//! feature.
//!
//! - [`delta_net`]: Qwen3.5's gated delta-net (conv + SiLU, recurrent and
//!   chunked delta rule) for a whole batch of sequences;
//! - [`attention`]: decode attention over many sequences with their own
//!   lengths and K/V buffers;
//! - [`mamba2`]: Nemotron-H's Mamba-2 selective scan for a whole batch.
//!
//! Every kernel has a test against its CPU version (`tests` of each
//! module); the tests run where a CUDA device opens and print a note and
//! pass otherwise.

pub mod attention;
pub mod delta_net;
// Tested against the CPU scan; Nemotron-H does not call it yet (docs/gpu.md).
#[cfg_attr(not(test), allow(dead_code))]
pub mod mamba2;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
};
use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
use candle_core::cuda_backend::{CudaDevice, CudaStorage, DeviceId};
use candle_core::op::BackpropOp;
use candle_core::{DType, Device, Shape, Storage, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The embedded fat binaries, one per `kernels/*.cu`.
pub(crate) const DELTA_NET: (&str, &[u8]) = (
    "delta_net",
    include_bytes!(concat!(env!("OUT_DIR"), "/delta_net.fatbin")),
);
pub(crate) const ATTENTION: (&str, &[u8]) = (
    "attention",
    include_bytes!(concat!(env!("OUT_DIR"), "/attention.fatbin")),
);
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const MAMBA2: (&str, &[u8]) = (
    "mamba2",
    include_bytes!(concat!(env!("OUT_DIR"), "/mamba2.fatbin")),
);

type ModuleKey = (DeviceId, &'static str);

fn modules() -> &'static Mutex<HashMap<ModuleKey, Arc<CudaModule>>> {
    static M: OnceLock<Mutex<HashMap<ModuleKey, Arc<CudaModule>>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The CUDA device of `device`, or an error naming what was expected.
pub fn cuda_device(device: &Device) -> Result<&CudaDevice> {
    match device {
        Device::Cuda(d) => Ok(d),
        _ => bail!("Joule's CUDA kernels need a CUDA device, got {device:?}"),
    }
}

/// Function `name` of the embedded module `(module, image)`, loading the
/// module on `dev` the first time.
pub(crate) fn function(
    dev: &CudaDevice,
    (module, image): (&'static str, &'static [u8]),
    name: &str,
) -> Result<CudaFunction> {
    let key = (dev.id(), module);
    let mut map = modules()
        .lock()
        .map_err(|_| anyhow!("CUDA module cache poisoned"))?;
    let m = match map.get(&key) {
        Some(m) => m.clone(),
        None => {
            let ctx = dev.cuda_stream().context().clone();
            let m = ctx
                .load_module(Ptx::from_binary(image.to_vec()))
                .with_context(|| format!("loading Joule's CUDA module `{module}`"))?;
            map.insert(key, m.clone());
            m
        }
    };
    m.load_function(name)
        .with_context(|| format!("CUDA function `{name}` of module `{module}`"))
}

/// A contiguous f32 tensor on a CUDA device, read-locked while its device
/// pointer is in use.
pub(crate) struct DevF32<'a> {
    guard: candle_core::StorageRef<'a>,
    start: usize,
    len: usize,
}

impl<'a> DevF32<'a> {
    /// `t` must be f32, contiguous (any start offset) and on a CUDA device.
    pub fn new(t: &'a Tensor) -> Result<Self> {
        if t.dtype() != DType::F32 {
            bail!("CUDA kernel input must be f32, got {:?}", t.dtype());
        }
        let (guard, layout) = t.storage_and_layout();
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!("CUDA kernel input must be contiguous");
        };
        if !matches!(&*guard, Storage::Cuda(_)) {
            bail!("CUDA kernel input is not on a CUDA device");
        }
        Ok(Self {
            guard,
            start,
            len: end - start,
        })
    }

    fn slice(&self) -> Result<&CudaSlice<f32>> {
        match &*self.guard {
            Storage::Cuda(cs) => Ok(cs.as_cuda_slice::<f32>()?),
            _ => bail!("CUDA kernel input is not on a CUDA device"),
        }
    }

    /// The raw device address of the first element (valid while `self` lives).
    pub fn ptr(&self, stream: &CudaStream) -> Result<u64> {
        let s = self.slice()?;
        let (base, _sync) = s.device_ptr(stream);
        Ok(base + (self.start * std::mem::size_of::<f32>()) as u64)
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

/// A fresh zeroed f32 buffer of `n` elements on `dev`.
pub(crate) fn zeros(dev: &CudaDevice, n: usize) -> Result<CudaSlice<f32>> {
    Ok(dev.alloc_zeros::<f32>(n.max(1))?)
}

/// The raw device address of a buffer (valid while it lives).
pub(crate) fn slice_ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// Upload a small host array (pointers, offsets) for one launch.
pub(crate) fn upload<T: DeviceRepr>(stream: &Arc<CudaStream>, v: &[T]) -> Result<CudaSlice<T>> {
    Ok(stream.clone_htod(v)?)
}

/// Wrap a buffer of `shape.elem_count()` (or more) f32 into a tensor.
pub(crate) fn tensor(dev: &CudaDevice, s: CudaSlice<f32>, shape: impl Into<Shape>) -> Tensor {
    let st = CudaStorage::wrap_cuda_slice(s, dev.clone());
    Tensor::from_storage(Storage::Cuda(st), shape, BackpropOp::none(), false)
}

/// Open CUDA device 0 for a kernel test, or print why the test is skipped.
#[cfg(test)]
pub(crate) fn test_device(test: &str) -> Option<Device> {
    match Device::new_cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("{test}: skipped, no CUDA device ({e})");
            None
        }
    }
}
