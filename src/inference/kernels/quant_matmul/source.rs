//! Where a matrix's GGUF bytes come from while Joule's kernels build their copy of it, and
//! the conversion of its rows in parallel on candle's worker pool (the pool the products
//! run on, so a load uses as many threads as the run).
//!
//! A model load gives the matrix a [`RowSource::Read`]: each worker reads a piece of rows of
//! at most [`PIECE_BYTES`] from the file into a buffer of its own, reused for every piece
//! (it stays in the core's cache), and converts it straight into the matrix. The file's
//! bytes are read once and the matrix is the only large allocation: no buffer of the whole
//! tensor is allocated, filled and freed beside it (which, on a fresh anonymous mapping,
//! costs the kernel a zeroed page for every page read, and raised the load's peak by the
//! largest tensor). [`RowSource::Bytes`] converts bytes already in memory (a tensor candle
//! keeps too: a tied output's embedding table).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::{anyhow, Result};

pub use crate::inference::files::gguf_weights::{ReadAt, Slots};

/// Bytes of one piece of rows (a row larger than this is a piece of its own).
pub const PIECE_BYTES: usize = 256 * 1024;

/// The GGUF bytes of a `[n, k]` matrix, row major.
pub enum RowSource<'a> {
    /// All of them, in memory.
    Bytes(&'a [u8]),
    /// Read on demand (a file: `read(offset, buf)`).
    Read(&'a ReadAt<'a>),
}

thread_local! {
    /// Each worker's piece buffer, kept across pieces and matrices (at most
    /// [`PIECE_BYTES`] or one row per thread).
    static PIECE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Call `convert(first_row, bytes)` for pieces of rows covering `0..n` (`bytes` holds rows
/// `first_row..first_row + bytes.len() / row_bytes`, each `row_bytes` long), on candle's
/// worker pool; every row is in exactly one piece. The first read error stops the pieces
/// not yet started and is returned.
pub fn for_row_pieces(
    src: &RowSource<'_>,
    n: usize,
    row_bytes: usize,
    convert: impl Fn(usize, &[u8]) + Sync,
) -> Result<()> {
    for_row_groups(src, n, row_bytes, 1, convert)
}

/// [`for_row_pieces`] with every piece a whole number of groups of `group` rows (the last
/// may end early at `n`), so each piece's first row is a multiple of `group`: a layout that
/// interleaves `group` rows (`x86::klanes512`) builds each group from one piece.
pub fn for_row_groups(
    src: &RowSource<'_>,
    n: usize,
    row_bytes: usize,
    group: usize,
    convert: impl Fn(usize, &[u8]) + Sync,
) -> Result<()> {
    if n == 0 || row_bytes == 0 {
        return Ok(());
    }
    if let RowSource::Bytes(b) = src {
        if b.len() != n * row_bytes {
            return Err(anyhow!(
                "{n} rows of {row_bytes} bytes need {} bytes, got {}",
                n * row_bytes,
                b.len()
            ));
        }
    }
    let group = group.max(1);
    let rows_per_piece = (PIECE_BYTES / row_bytes).max(1).div_ceil(group) * group;
    let pieces = n.div_ceil(rows_per_piece);
    let failed = AtomicBool::new(false);
    let error: Mutex<Option<std::io::Error>> = Mutex::new(None);
    candle_core::utils::barrier_pool().execute_chunked(pieces, |range| {
        for p in range {
            if failed.load(Ordering::Relaxed) {
                return;
            }
            let r0 = p * rows_per_piece;
            let r1 = (r0 + rows_per_piece).min(n);
            let (start, end) = (r0 * row_bytes, r1 * row_bytes);
            match src {
                RowSource::Bytes(b) => convert(r0, &b[start..end]),
                RowSource::Read(read) => PIECE.with(|buf| {
                    let mut buf = buf.borrow_mut();
                    if buf.len() < end - start {
                        buf.resize(end - start, 0);
                    }
                    let piece = &mut buf[..end - start];
                    match read(start as u64, piece) {
                        Ok(()) => convert(r0, piece),
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            if let Ok(mut slot) = error.lock() {
                                slot.get_or_insert(e);
                            }
                        }
                    }
                }),
            }
        }
    });
    match error.into_inner() {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(e.into()),
        Err(_) => Err(anyhow!("a worker failed while reading a matrix")),
    }
}
