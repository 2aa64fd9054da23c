//! Bad model files must give errors that name the file and what is wrong,
//! never a panic: truncated data, a corrupted header, an unknown
//! architecture, a missing tensor, a tensor of the wrong shape.

use crate::gguf_edit;
use gguf_edit::load_err;

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::{Device, Tensor};
use joule::inference::files::gguf_weights::LoadError;
use joule::inference::models::load_model;
use std::path::{Path, PathBuf};

fn llama_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden/llama.gguf")
}

/// Rewrite the llama fixture with `edit` applied to its metadata and tensors.
fn rewrite(
    out: &Path,
    edit: impl FnOnce(&mut Vec<(String, gguf_file::Value)>, &mut Vec<(String, QTensor)>),
) {
    gguf_edit::rewrite(&llama_fixture(), out, edit)
}

#[test]
fn truncated_file_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cut.gguf");
    let bytes = std::fs::read(llama_fixture()).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_err(&p);
    assert!(e.contains("cut.gguf") && e.contains("truncated"), "{e}");
    // Cut inside the header too.
    std::fs::write(&p, &bytes[..200]).unwrap();
    let e = load_err(&p);
    assert!(
        e.contains("cut.gguf") && e.contains("not a readable GGUF"),
        "{e}"
    );
}

#[test]
fn corrupted_header_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.gguf");
    let mut bytes = std::fs::read(llama_fixture()).unwrap();
    bytes[0..4].copy_from_slice(b"XXXX");
    std::fs::write(&p, &bytes).unwrap();
    let e = load_err(&p);
    assert!(
        e.contains("bad.gguf") && e.contains("not a readable GGUF"),
        "{e}"
    );
    // A tensor count far beyond what the file can hold.
    let mut bytes = std::fs::read(llama_fixture()).unwrap();
    bytes[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let e = load_err(&p);
    assert!(
        e.contains("bad.gguf") && e.contains("not a readable GGUF"),
        "{e}"
    );
    // Not a file at all.
    let e = load_err(&dir.path().join("absent.gguf"));
    assert!(
        e.contains("absent.gguf") && e.contains("cannot open"),
        "{e}"
    );
}

#[test]
fn unknown_architecture_names_file_and_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rwkv7.gguf");
    rewrite(&p, |meta, _| {
        for (k, v) in meta.iter_mut() {
            if k == "general.architecture" {
                *v = gguf_file::Value::String("rwkv7".into());
            }
        }
    });
    let err = load_model(&p, &Device::Cpu).err().unwrap();
    match err.downcast_ref::<LoadError>() {
        Some(LoadError::UnsupportedArchitecture { path, arch, .. }) => {
            assert_eq!(path, &p);
            assert_eq!(arch, "rwkv7");
        }
        other => panic!("unexpected error {other:?}: {err:#}"),
    }
    assert!(format!("{err:#}").contains("`rwkv7` is not implemented"));
}

#[test]
fn missing_tensor_and_wrong_shape_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("missing.gguf");
    rewrite(&p, |_, tensors| {
        tensors.retain(|(n, _)| n != "blk.1.ffn_up.weight")
    });
    let e = load_err(&p);
    assert!(
        e.contains("missing.gguf") && e.contains("`blk.1.ffn_up.weight` is missing"),
        "{e}"
    );

    let p = dir.path().join("shape.gguf");
    rewrite(&p, |_, tensors| {
        for (n, t) in tensors.iter_mut() {
            if n == "blk.0.attn_k.weight" {
                let wrong = Tensor::zeros((16, 64), candle_core::DType::F32, &Device::Cpu).unwrap();
                *t = QTensor::quantize(&wrong, candle_core::quantized::GgmlDType::F32).unwrap();
            }
        }
    });
    let e = load_err(&p);
    assert!(
        e.contains("shape.gguf")
            && e.contains("`blk.0.attn_k.weight` has shape [16, 64], expected [32, 64]"),
        "{e}"
    );

    let p = dir.path().join("nokey.gguf");
    rewrite(&p, |meta, _| meta.retain(|(k, _)| k != "llama.block_count"));
    let e = load_err(&p);
    assert!(
        e.contains("nokey.gguf") && e.contains("`llama.block_count` is missing"),
        "{e}"
    );
}
