//! Model architectures, one file per family, and the registry that loads a GGUF
//! file by its `general.architecture` ([`load_model`], [`ARCHITECTURES`]). `nn` holds the building blocks
//! every file uses (projections, norms, rotary tables, attention, the tensor
//! loader); `decoder` the standard decoder-only transformer that `llama_family`
//! (llama, qwen2 and qwen3, their differences as data) and `gemma3` configure;
//! hybrids have files of their own (`qwen35` over the gated delta rule in `delta_net`, `nemotron_h` over the
//! Mamba-2 scan in `mamba2`, `gemma4` with per-layer embeddings and shared
//! keys/values).

pub(crate) mod decoder;
pub(crate) mod delta_net;
pub(crate) mod gemma3;
pub(crate) mod gemma4;
pub(crate) mod llama_family;
pub(crate) mod mamba2;
pub(crate) mod nemotron_h;
pub(crate) mod nn;
pub(crate) mod qwen35;

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use candle_core::Device;

use crate::inference::engine::model::SharedModel;
use crate::inference::files::gguf_weights::{GgufFile, LoadError};

/// Architectures [`load_model`] implements.
pub const ARCHITECTURES: &[&str] = &[
    "llama",
    "qwen2",
    "qwen3",
    "gemma3",
    "gemma4",
    "qwen35",
    "nemotron_h",
];

/// Load the GGUF model at `path` onto `device`.
pub fn load_model(path: impl AsRef<Path>, device: &Device) -> Result<SharedModel> {
    load_model_from(&mut GgufFile::open(path)?, device)
}

/// Load the model of an already opened (and parsed) GGUF file onto `device`;
/// the caller can build the tokenizer and chat template from the same parse.
pub fn load_model_from(gguf: &mut GgufFile, device: &Device) -> Result<SharedModel> {
    let _purge = crate::inference::engine::load_purge::PurgeWhileLoading::start();
    let arch = gguf.architecture()?;
    if let Some(variant) = llama_family::Variant::of(&arch) {
        return Ok(Arc::new(llama_family::load(gguf, variant, device)?));
    }
    let model: SharedModel = match arch.as_str() {
        "nemotron_h" => Arc::new(nemotron_h::load(gguf, device)?),
        "gemma3" => Arc::new(gemma3::load(gguf, device)?),
        "gemma4" => Arc::new(gemma4::load(gguf, device)?),
        "qwen35" => Arc::new(qwen35::load(gguf, device)?),
        _ => {
            return Err(LoadError::UnsupportedArchitecture {
                path: gguf.path().to_path_buf(),
                arch,
                known: ARCHITECTURES.join(", "),
            }
            .into())
        }
    };
    Ok(model)
}
