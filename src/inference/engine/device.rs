//! Device selection (`--device cpu|cuda|metal`) through the crate's `cuda`
//! and `metal` cargo features, which forward to candle's.

use anyhow::{bail, Context, Result};
use candle_core::Device;

/// Open the named device: `cpu`, `cuda` (or `cuda:N`), `metal` (or `metal:N`).
///
/// `cuda` needs a build with `--features cuda`, `metal` one with
/// `--features metal`; without the feature this returns an error that says so.
pub fn select_device(name: &str) -> Result<Device> {
    let (kind, ordinal) = match name.split_once(':') {
        Some((k, n)) => (
            k,
            n.parse::<usize>()
                .with_context(|| format!("device `{name}`: `{n}` is not a device number"))?,
        ),
        None => (name, 0),
    };
    match kind {
        "cpu" => Ok(Device::Cpu),
        "cuda" => {
            if !cfg!(feature = "cuda") {
                bail!("device `{name}`: this joule was built without the `cuda` feature (rebuild with `cargo build --release --features cuda`)");
            }
            Device::new_cuda(ordinal).with_context(|| format!("opening CUDA device {ordinal}"))
        }
        "metal" => {
            if !cfg!(feature = "metal") {
                bail!("device `{name}`: this joule was built without the `metal` feature (rebuild with `cargo build --release --features metal`)");
            }
            Device::new_metal(ordinal).with_context(|| format!("opening Metal device {ordinal}"))
        }
        other => bail!("unknown device `{other}`: expected cpu, cuda or metal"),
    }
}

/// A short name of a device for logs and bench tables.
pub fn device_name(device: &Device) -> &'static str {
    if device.is_cuda() {
        "cuda"
    } else if device.is_metal() {
        "metal"
    } else {
        "cpu"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_opens_and_unknown_names_fail() {
        assert!(select_device("cpu").unwrap().is_cpu());
        let err = select_device("tpu").unwrap_err().to_string();
        assert!(err.contains("unknown device `tpu`"), "{err}");
        let err = select_device("cuda:x").unwrap_err().to_string();
        assert!(err.contains("not a device number"), "{err}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_says_how_to_build() {
        let err = select_device("cuda").unwrap_err().to_string();
        assert!(err.contains("--features cuda"), "{err}");
    }
}
