//! Test helpers that write altered copies of GGUF fixtures (a tensor missing,
//! of another shape or type, a metadata key changed) and read the load error
//! they must give.

#![allow(dead_code)]

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::Device;
use joule::inference::models::load_model;
use std::path::Path;

/// Rewrite `src` into `out` with `edit` applied to its metadata (sorted by
/// key) and its tensors (sorted by name).
pub fn rewrite(
    src: &Path,
    out: &Path,
    edit: impl FnOnce(&mut Vec<(String, gguf_file::Value)>, &mut Vec<(String, QTensor)>),
) {
    let mut f = std::fs::File::open(src).unwrap();
    let c = gguf_file::Content::read(&mut f).unwrap();
    let mut meta: Vec<(String, gguf_file::Value)> = c
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    let mut names: Vec<&String> = c.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, QTensor)> = names
        .into_iter()
        .map(|n| (n.clone(), c.tensor(&mut f, n, &Device::Cpu).unwrap()))
        .collect();
    edit(&mut meta, &mut tensors);
    let m: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut w = std::fs::File::create(out).unwrap();
    gguf_file::write(&mut w, &m, &t).unwrap();
}

/// The error loading `p` gives (panics if it loads).
pub fn load_err(p: &Path) -> String {
    match load_model(p, &Device::Cpu) {
        Ok(_) => panic!("{} loaded", p.display()),
        Err(e) => format!("{e:#}"),
    }
}
