//! The NVML meter: NVIDIA's total-energy counter of every GPU this machine
//! has (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since the driver
//! loaded; Volta and newer), summed. `nvml-wrapper` opens the NVML library
//! with `dlopen` when the meter is opened, so Joule builds and runs without
//! any NVIDIA library present: there the meter is missing and says why.
//!
//! The library is looked up as `libnvidia-ml.so.1` (what the driver
//! installs, and what containers with GPU access mount) and then as
//! `libnvidia-ml.so` (the development link).

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::{EnergyMeter, MeterError};

/// The GPUs' summed energy counters.
pub struct NvmlMeter {
    nvml: Nvml,
    /// `(index, name, first reading in mJ)`.
    gpus: Vec<(u32, String, u64)>,
    last_mj: Vec<u64>,
}

fn why(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => {
            "the NVIDIA driver's NVML library (libnvidia-ml.so.1) is not installed: no NVIDIA GPU or driver here".into()
        }
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".into(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".into(),
        NvmlError::NotSupported => {
            "the GPU has no total-energy counter (NVML supports it on Volta and newer)".into()
        }
        other => format!("NVML: {other}"),
    }
}

fn init() -> Result<Nvml, NvmlError> {
    match Nvml::builder()
        .lib_path("libnvidia-ml.so.1".as_ref())
        .init()
    {
        Ok(n) => Ok(n),
        Err(_) => Nvml::init(),
    }
}

impl NvmlMeter {
    /// Open every GPU's counter; the error says why there is no NVML meter.
    pub fn open() -> Result<Self, String> {
        let nvml = init().map_err(|e| why(&e))?;
        let n = nvml.device_count().map_err(|e| why(&e))?;
        if n == 0 {
            return Err("NVML found no NVIDIA GPU".into());
        }
        let mut gpus = Vec::new();
        for i in 0..n {
            let d = nvml
                .device_by_index(i)
                .map_err(|e| format!("GPU {i}: {}", why(&e)))?;
            let name = d.name().unwrap_or_else(|_| "unknown GPU".into());
            let mj = d
                .total_energy_consumption()
                .map_err(|e| format!("GPU {i} ({name}): {}", why(&e)))?;
            gpus.push((i, name, mj));
        }
        let last_mj = gpus.iter().map(|g| g.2).collect();
        Ok(NvmlMeter {
            nvml,
            gpus,
            last_mj,
        })
    }

    /// The GPUs it sums, for `joule meters`.
    pub fn describe(&self) -> String {
        let names: Vec<String> = self
            .gpus
            .iter()
            .map(|(i, n, _)| format!("GPU {i} {n}"))
            .collect();
        format!("{} GPU(s): {}", self.gpus.len(), names.join(", "))
    }
}

impl EnergyMeter for NvmlMeter {
    fn name(&self) -> String {
        "nvml".into()
    }

    fn joules(&mut self) -> Result<f64, MeterError> {
        let err = |message: String| MeterError {
            meter: "nvml".into(),
            message,
        };
        let mut total_mj: u64 = 0;
        for (k, (i, name, first)) in self.gpus.iter().enumerate() {
            let d = self
                .nvml
                .device_by_index(*i)
                .map_err(|e| err(format!("GPU {i}: {}", why(&e))))?;
            let now = d
                .total_energy_consumption()
                .map_err(|e| err(format!("GPU {i} ({name}): {}", why(&e))))?;
            if now < self.last_mj[k] {
                return Err(err(format!(
                    "GPU {i} ({name}): the energy counter went back from {} to {now} mJ (driver reloaded?)",
                    self.last_mj[k]
                )));
            }
            self.last_mj[k] = now;
            total_mj += now - first;
        }
        Ok(total_mj as f64 / 1e3)
    }
}
