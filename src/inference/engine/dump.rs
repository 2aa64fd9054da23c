//! Hidden states written layer by layer, for finding where two engines part
//! (`joule logits --dump DIR`; llama.cpp's side is `scripts/llama-logits.cpp --dump DIR`).
//!
//! Off unless [`set_dir`] was called (only `joule logits` calls it); then a model's forward
//! pass writes each named tensor as `DIR/NAME.npy`, float32 `[rows, last dimension]`, with
//! llama.cpp's graph names so the two folders compare file by file: `attn_residual-IL` (the
//! stream after the mixer's residual add), `linear_attn_out-IL` (a delta-net mixer's output),
//! `attn_out-IL`, `ffn_out-IL`, `l_out-IL` (the stream after layer IL) and `result_norm` (the
//! final norm's output for the rows whose logits are wanted). A later pass overwrites an
//! earlier one's files, so use it with one pass (no `--prefill`).

use anyhow::{Context, Result};
use candle_core::{DType, Tensor};
use std::path::PathBuf;
use std::sync::OnceLock;

static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Turns dumping on for this process, into `dir` (created if missing).
pub fn set_dir(dir: PathBuf) -> Result<()> {
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("--dump {}: cannot create the folder", dir.display()))?;
    let _ = DIR.set(dir);
    Ok(())
}

/// Writes `t` as `NAME.npy` when dumping is on; nothing otherwise. The name comes as
/// `format_args!` so a forward pass with dumping off formats nothing.
pub fn tensor(name: std::fmt::Arguments<'_>, t: &Tensor) -> Result<()> {
    let Some(dir) = DIR.get() else {
        return Ok(());
    };
    let dims = t.dims();
    let cols = dims.last().copied().unwrap_or(1).max(1);
    let data: Vec<f32> = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    let path = dir.join(format!("{name}.npy"));
    crate::npy::write_f32(&path, &[data.len() / cols, cols], &data)
        .with_context(|| format!("writing {}", path.display()))
}
