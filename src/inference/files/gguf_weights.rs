//! Reading GGUF files for a model load: the header, typed metadata look-ups
//! and tensors with their shapes checked, every error naming the file and
//! what was wrong.
//!
//! A load parses the header once, with Joule's safe reader
//! ([`crate::inference::files::gguf_header`], which holds every count and length
//! against the bytes left before it allocates), and converts it into the
//! `gguf_file::Content` candle's tensor code reads from. The weights
//! ([`GgufFile::tensor`]), the tokenizer (`Tokenizer::for_gguf`) and the chat
//! template (`ChatTemplate::from_gguf_content`) all take that one parse; a
//! bad header gives the reader's messages (truncated at byte N, implausible
//! count, tensor data past the end, ...).

use candle_core::quantized::gguf_file::{self, Content, Value, VersionedMagic};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::inference::files::gguf_header::{
    GgmlType, GgufError, GgufInfo, GgufProblem, GgufValue, ReadOptions,
};

/// What can go wrong while loading a model file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// (`error` is part of the message, not a source: the cause is said once.)
    #[error("{path}: cannot open: {error}")]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: not a readable GGUF file: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: architecture `{arch}` is not implemented (implemented: {known})")]
    UnsupportedArchitecture {
        path: PathBuf,
        arch: String,
        known: String,
    },
    #[error("{path}: metadata key `{key}` is missing")]
    MissingKey { path: PathBuf, key: String },
    #[error("{path}: metadata key `{key}` has the wrong type: {message}")]
    BadKey {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("{path}: tensor `{name}` is missing")]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: tensor `{name}` has shape {got:?}, expected {expected:?}")]
    BadShape {
        path: PathBuf,
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{path}: tensor `{name}` cannot be read: {message}")]
    BadTensor {
        path: PathBuf,
        name: String,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// An open GGUF file: its parsed header and a reader for tensor data.
pub struct GgufFile {
    path: PathBuf,
    content: gguf_file::Content,
    reader: BufReader<File>,
    file_len: u64,
    /// The weight matrices a model load put behind a matrix product, in load
    /// order (`models::nn::Loader` notes each one).
    matmuls: Vec<MatmulUse>,
    /// What the model load keeps of each tensor it read, in bytes (the
    /// weights of the memory plan: [`Self::held_bytes`]).
    held: Vec<(String, u64)>,
}

/// One weight matrix a model load put behind a matrix product: its GGUF
/// type, its shape `[n, k]`, and whether Joule's CPU kernels multiply it
/// (`quant_matmul`), else candle's quantised matmul, or both split by the rows
/// of each sequence (`quant_matmul::split`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulUse {
    pub dtype: candle_core::quantized::GgmlDType,
    pub n: usize,
    pub k: usize,
    pub joule: bool,
    /// Joule's kernels for segments of up to `quant_matmul::SPLIT_ROWS` rows,
    /// candle's for longer ones (then `joule` is false).
    pub split: bool,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("tensors", &self.content.tensor_infos.len())
            .finish()
    }
}

impl GgufFile {
    /// Open `path` and parse its header, once, with Joule's safe reader.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref().to_path_buf();
        let (content, file_len) = read_header(&path)?;
        let file = File::open(&path).map_err(|error| LoadError::Open {
            path: path.clone(),
            error,
        })?;
        Ok(Self {
            path,
            content,
            reader: BufReader::new(file),
            file_len,
            matmuls: Vec::new(),
            held: Vec::new(),
        })
    }

    /// Bytes the loaded model holds for the tensors read from this file: each
    /// tensor as [`Self::tensor`] read it (quantised as stored, float as f32)
    /// unless the loader said otherwise ([`Self::set_held`], [`Self::add_held`]:
    /// a matrix dequantised, repacked for a kernel, or held twice).
    pub fn held_bytes(&self) -> u64 {
        self.held.iter().map(|(_, b)| b).sum()
    }

    /// Bytes the loaded model holds on account of tensor `name` (every read of it and every
    /// kernel's copy).
    pub fn held_of(&self, name: &str) -> u64 {
        self.held
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, b)| b)
            .sum()
    }

    /// Set what the model keeps of tensor `name` (its latest read).
    pub fn set_held(&mut self, name: &str, bytes: u64) {
        if let Some(h) = self.held.iter_mut().rev().find(|(n, _)| n == name) {
            h.1 = bytes;
        }
    }

    /// Add `bytes` held on account of tensor `name` (a kernel's copy of it).
    pub fn add_held(&mut self, name: &str, bytes: u64) {
        self.held.push((name.to_string(), bytes));
    }

    /// Note a weight matrix the model being loaded multiplies, and by whose kernel.
    pub fn note_matmul(&mut self, m: MatmulUse) {
        self.matmuls.push(m);
    }

    /// The matrices noted by [`Self::note_matmul`] (those of the model loaded from this file).
    pub fn matmuls(&self) -> &[MatmulUse] {
        &self.matmuls
    }

    /// The file's size in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn content(&self) -> &gguf_file::Content {
        &self.content
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<String, LoadError> {
        self.string("general.architecture")
    }

    fn value(&self, key: &str) -> Result<&gguf_file::Value, LoadError> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| LoadError::MissingKey {
                path: self.path.clone(),
                key: key.to_string(),
            })
    }

    fn bad_key(&self, key: &str, e: impl std::fmt::Display) -> LoadError {
        LoadError::BadKey {
            path: self.path.clone(),
            key: key.to_string(),
            message: e.to_string(),
        }
    }

    /// The GGUF types of the file's tensors with their counts, by type name
    /// (`F32 65, Q4_K 197, Q6_K 28`).
    pub fn tensor_types(&self) -> String {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for info in self.content.tensor_infos.values() {
            let name = ggml_name(info.ggml_dtype)
                .map(str::to_string)
                .unwrap_or_else(|| format!("{:?}", info.ggml_dtype));
            *counts.entry(name).or_default() += 1;
        }
        counts
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.content.metadata.contains_key(key)
    }

    /// A string value.
    pub fn string(&self, key: &str) -> Result<String, LoadError> {
        self.value(key)?
            .to_string()
            .cloned()
            .map_err(|e| self.bad_key(key, e))
    }

    /// An unsigned integer value of any integer width.
    pub fn usize(&self, key: &str) -> Result<usize, LoadError> {
        use gguf_file::Value as V;
        let v = self.value(key)?;
        let n: i128 = match v {
            V::U8(x) => *x as i128,
            V::I8(x) => *x as i128,
            V::U16(x) => *x as i128,
            V::I16(x) => *x as i128,
            V::U32(x) => *x as i128,
            V::I32(x) => *x as i128,
            V::U64(x) => *x as i128,
            V::I64(x) => *x as i128,
            other => return Err(self.bad_key(key, format!("expected an integer, found {other:?}"))),
        };
        usize::try_from(n).map_err(|_| self.bad_key(key, format!("{n} is not a valid count")))
    }

    /// A float value (f32 or f64 stored).
    pub fn f32(&self, key: &str) -> Result<f32, LoadError> {
        use gguf_file::Value as V;
        match self.value(key)? {
            V::F32(x) => Ok(*x),
            V::F64(x) => Ok(*x as f32),
            other => Err(self.bad_key(key, format!("expected a float, found {other:?}"))),
        }
    }

    /// An optional key: `Ok(None)` when absent, an error when of the wrong type.
    pub fn opt<T>(
        &self,
        key: &str,
        get: impl Fn(&Self, &str) -> Result<T, LoadError>,
    ) -> Result<Option<T>, LoadError> {
        if self.has_key(key) {
            get(self, key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The raw metadata value, for keys of variable type (arrays).
    pub fn raw(&self, key: &str) -> Option<&gguf_file::Value> {
        self.content.metadata.get(key)
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Shape of a tensor in candle's order (outermost first: `[rows, cols]`
    /// for a matrix applied as `x @ W^T`).
    pub fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.content
            .tensor_infos
            .get(name)
            .map(|i| i.shape.dims().to_vec())
    }

    /// The GGUF type of a tensor.
    pub fn tensor_dtype(&self, name: &str) -> Option<candle_core::quantized::GgmlDType> {
        self.content.tensor_infos.get(name).map(|i| i.ggml_dtype)
    }

    /// Load tensor `name`, checking its shape against `expected` (candle order).
    pub fn tensor(
        &mut self,
        name: &str,
        expected: &[usize],
        device: &Device,
    ) -> Result<QTensor, LoadError> {
        let info = self.checked_info(name, expected)?;
        let elements = info.shape.elem_count() as u64;
        let float = matches!(
            info.ggml_dtype,
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
        );
        let stored =
            elements / info.ggml_dtype.block_size() as u64 * info.ggml_dtype.type_size() as u64;
        let bad = |e: &dyn std::fmt::Display| LoadError::BadTensor {
            path: self.path.clone(),
            name: name.to_string(),
            message: e.to_string(),
        };
        let q = if device.is_cpu() {
            read_cpu_tensor(
                self.reader.get_ref(),
                info,
                self.content.tensor_data_offset,
                self.file_len,
            )
            .map_err(|e| bad(&e))?
        } else {
            self.content
                .tensor(&mut self.reader, name, device)
                .map_err(|e| bad(&e))?
        };
        self.held.push((
            name.to_string(),
            resident_tensor_bytes(elements, stored, float),
        ));
        Ok(q)
    }

    /// The description of tensor `name`, its shape checked against `expected` (candle order).
    fn checked_info(
        &self,
        name: &str,
        expected: &[usize],
    ) -> Result<&gguf_file::TensorInfo, LoadError> {
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| LoadError::MissingTensor {
                path: self.path.clone(),
                name: name.to_string(),
            })?;
        if info.shape.dims() != expected {
            return Err(LoadError::BadShape {
                path: self.path.clone(),
                name: name.to_string(),
                got: info.shape.dims().to_vec(),
                expected: expected.to_vec(),
            });
        }
        Ok(info)
    }

    /// Tensor `name` (shape checked against `expected`) built by `build` from its bytes as
    /// it reads them (`build(dtype, read)`, `read(offset, buf)` filling `buf` from byte
    /// `offset` of the tensor's data, from any thread): a matrix that Joule's kernels hold
    /// in place of the tensor, converted as it is read, with no buffer of the whole tensor
    /// (`quant_matmul::source`). `Ok(None)` when `build` does not take the tensor's type.
    /// What the model holds for it is noted as for [`Self::tensor`] (the caller corrects
    /// it: [`Self::set_held`]).
    pub fn read_tensor_with<T>(
        &mut self,
        name: &str,
        expected: &[usize],
        build: impl FnOnce(GgmlDType, &ReadAt<'_>) -> Option<anyhow::Result<T>>,
    ) -> Result<Option<T>, LoadError> {
        let info = self.checked_info(name, expected)?;
        let dtype = info.ggml_dtype;
        let elements = info.shape.elem_count() as u64;
        let bad = |e: &dyn std::fmt::Display| LoadError::BadTensor {
            path: self.path.clone(),
            name: name.to_string(),
            message: e.to_string(),
        };
        let (start, size) = tensor_span(info, self.content.tensor_data_offset, self.file_len)
            .map_err(|e| bad(&e))?;
        let file = self.reader.get_ref();
        let read = |offset: u64, buf: &mut [u8]| -> std::io::Result<()> {
            if offset.saturating_add(buf.len() as u64) > size {
                return Err(std::io::Error::other(format!(
                    "{} bytes at {offset} are past the tensor's {size}",
                    buf.len()
                )));
            }
            read_exact_at(file, buf, start + offset)
        };
        let built = match build(dtype, &read) {
            None => return Ok(None),
            Some(r) => r.map_err(|e| bad(&format!("{e:#}")))?,
        };
        self.held.push((
            name.to_string(),
            resident_tensor_bytes(elements, size, false),
        ));
        Ok(Some(built))
    }

    /// Like [`Self::tensor`] but `Ok(None)` when the tensor is absent.
    pub fn opt_tensor(
        &mut self,
        name: &str,
        expected: &[usize],
        device: &Device,
    ) -> Result<Option<QTensor>, LoadError> {
        if self.has_tensor(name) {
            self.tensor(name, expected, device).map(Some)
        } else {
            Ok(None)
        }
    }

    /// An `Invalid` error naming this file.
    pub fn invalid(&self, message: impl Into<String>) -> LoadError {
        LoadError::Invalid {
            path: self.path.clone(),
            message: message.into(),
        }
    }
}

/// Bytes one tensor occupies once loaded, before any kernel's copy (the memory plan's rule,
/// `engine::memory_plan`): float tensors (`float`: F32/F16/BF16) as f32, quantised ones as
/// stored.
pub fn resident_tensor_bytes(elements: u64, stored_bytes: u64, float: bool) -> u64 {
    if float {
        elements * 4
    } else {
        stored_bytes
    }
}

/// Fill `buf` from byte `offset` of `file` (positioned reads: any thread, the file's cursor
/// untouched).
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let (mut buf, mut offset) = (buf, offset);
        while !buf.is_empty() {
            match std::os::windows::fs::FileExt::seek_read(file, buf, offset) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file ended before the tensor",
                    ))
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Where tensor `info`'s data lies in the file: its first byte and its size, checked
/// against the file's length.
fn tensor_span(
    info: &gguf_file::TensorInfo,
    data_offset: u64,
    file_len: u64,
) -> anyhow::Result<(u64, u64)> {
    let dtype = info.ggml_dtype;
    let elements = info.shape.elem_count();
    let block = dtype.block_size();
    if !elements.is_multiple_of(block) {
        anyhow::bail!("{elements} values are not whole blocks of {block} ({dtype:?})");
    }
    let size = (elements / block) as u64 * dtype.type_size() as u64;
    let start = data_offset.saturating_add(info.offset);
    if start.saturating_add(size) > file_len {
        anyhow::bail!(
            "tensor data of {size} bytes at offset {start} runs past the end of the file ({file_len} bytes)"
        );
    }
    Ok((start, size))
}

/// Bytes one worker reads at a time when a tensor is read whole ([`read_cpu_tensor`]).
const READ_PIECE: usize = 4 << 20;

/// Read a tensor for the CPU straight into the storage candle keeps: one
/// read from the file into the final allocation, in pieces read in parallel on
/// candle's worker pool (the kernel's copy and the first touch of each fresh page
/// shared by the threads). (candle's own reader reads into a byte buffer and then
/// copies it into a typed vector: every weight byte copied twice and, for a moment,
/// held twice.)
fn read_cpu_tensor(
    file: &File,
    info: &gguf_file::TensorInfo,
    data_offset: u64,
    file_len: u64,
) -> anyhow::Result<QTensor> {
    use candle_core::quantized::k_quants::*;
    use candle_core::quantized::{GgmlType, QStorage};

    fn read_blocks<T: GgmlType + Send + Sync + 'static>(
        file: &File,
        start: u64,
        blocks: usize,
        type_size: usize,
    ) -> anyhow::Result<QStorage> {
        if std::mem::size_of::<T>() != type_size {
            anyhow::bail!(
                "candle's block of {} bytes is not ggml's {type_size}",
                std::mem::size_of::<T>()
            );
        }
        let mut v: Vec<T> = Vec::with_capacity(blocks);
        let bytes = blocks * std::mem::size_of::<T>();
        let base = Slots::of(&mut v);
        let failed = std::sync::Mutex::new(None);
        candle_core::utils::barrier_pool().execute_chunked(bytes.div_ceil(READ_PIECE), |ps| {
            for p in ps {
                let (a, b) = (p * READ_PIECE, ((p + 1) * READ_PIECE).min(bytes));
                // SAFETY: pieces are disjoint byte ranges of the capacity (`bytes` bytes);
                // `read_exact_at` fills each before `set_len` exposes them.
                let buf = unsafe { base.bytes(a..b) };
                if let Err(e) = read_exact_at(file, buf, start + a as u64) {
                    if let Ok(mut f) = failed.lock() {
                        f.get_or_insert(e);
                    }
                    return;
                }
            }
        });
        match failed.into_inner() {
            Ok(None) => {}
            Ok(Some(e)) => return Err(e.into()),
            Err(_) => anyhow::bail!("a worker failed while reading the tensor"),
        }
        // SAFETY: every byte was read (no piece failed), and every bit pattern is
        // a valid block (they are plain integers and halves, `#[repr(C)]`
        // like ggml's, which is how candle reads them too).
        unsafe { v.set_len(blocks) };
        Ok(QStorage::Cpu(Box::new(v)))
    }

    let dtype = info.ggml_dtype;
    let (start, _) = tensor_span(info, data_offset, file_len)?;
    let blocks = info.shape.elem_count() / dtype.block_size();
    let ts = dtype.type_size();
    let storage = match dtype {
        GgmlDType::F32 => read_blocks::<f32>(file, start, blocks, ts)?,
        GgmlDType::F16 => read_blocks::<half::f16>(file, start, blocks, ts)?,
        GgmlDType::BF16 => read_blocks::<half::bf16>(file, start, blocks, ts)?,
        GgmlDType::Q4_0 => read_blocks::<BlockQ4_0>(file, start, blocks, ts)?,
        GgmlDType::Q4_1 => read_blocks::<BlockQ4_1>(file, start, blocks, ts)?,
        GgmlDType::Q5_0 => read_blocks::<BlockQ5_0>(file, start, blocks, ts)?,
        GgmlDType::Q5_1 => read_blocks::<BlockQ5_1>(file, start, blocks, ts)?,
        GgmlDType::Q8_0 => read_blocks::<BlockQ8_0>(file, start, blocks, ts)?,
        GgmlDType::Q8_1 => read_blocks::<BlockQ8_1>(file, start, blocks, ts)?,
        GgmlDType::Q2K => read_blocks::<BlockQ2K>(file, start, blocks, ts)?,
        GgmlDType::Q3K => read_blocks::<BlockQ3K>(file, start, blocks, ts)?,
        GgmlDType::Q4K => read_blocks::<BlockQ4K>(file, start, blocks, ts)?,
        GgmlDType::Q5K => read_blocks::<BlockQ5K>(file, start, blocks, ts)?,
        GgmlDType::Q6K => read_blocks::<BlockQ6K>(file, start, blocks, ts)?,
        GgmlDType::Q8K => read_blocks::<BlockQ8K>(file, start, blocks, ts)?,
        #[allow(unreachable_patterns)]
        other => anyhow::bail!("ggml type {other:?} cannot be read by this loader"),
    };
    Ok(QTensor::new(storage, info.shape.clone())?)
}

/// The header of `path` as candle's `Content` (every metadata array whole),
/// read once by Joule's safe reader, and the file's size.
fn read_header(path: &Path) -> Result<(Content, u64), LoadError> {
    let info = GgufInfo::read(
        path,
        ReadOptions {
            max_array_items: u64::MAX,
        },
    )
    .map_err(load_error)?;
    let len = info.file_size;
    Ok((content_of(info)?, len))
}

/// The metadata and tensor descriptions of a GGUF file (no tensor data), as
/// candle's `Content`, for code that needs only the metadata (a tokenizer of
/// a vocabulary-only file).
pub fn read_content(path: impl AsRef<Path>) -> Result<Content, LoadError> {
    read_header(path.as_ref()).map(|(c, _)| c)
}

fn load_error(e: GgufError) -> LoadError {
    match e.problem {
        GgufProblem::Io(error) => LoadError::Open {
            path: e.path,
            error,
        },
        problem => LoadError::Corrupt {
            path: e.path,
            message: problem.to_string(),
        },
    }
}

/// ggml's name of one of candle's types (`Q4_K`, where candle's Debug says `Q4K`).
pub fn ggml_name(dtype: GgmlDType) -> Option<&'static str> {
    (0..64)
        .find(|&code| candle_dtype(code) == Some(dtype))
        .and_then(GgmlType::from_code)
        .map(|t| t.name)
}

/// candle's type for a ggml type code, where candle can read it.
fn candle_dtype(code: u32) -> Option<GgmlDType> {
    Some(match code {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

/// A string as candle's reader returns it: without trailing NUL bytes (some
/// converters write them).
fn candle_string(mut s: String) -> String {
    while s.ends_with('\0') {
        s.pop();
    }
    s
}

fn candle_value(v: GgufValue, key: &str, path: &Path) -> Result<Value, LoadError> {
    Ok(match v {
        GgufValue::U8(x) => Value::U8(x),
        GgufValue::I8(x) => Value::I8(x),
        GgufValue::U16(x) => Value::U16(x),
        GgufValue::I16(x) => Value::I16(x),
        GgufValue::U32(x) => Value::U32(x),
        GgufValue::I32(x) => Value::I32(x),
        GgufValue::U64(x) => Value::U64(x),
        GgufValue::I64(x) => Value::I64(x),
        GgufValue::F32(x) => Value::F32(x),
        GgufValue::F64(x) => Value::F64(x),
        GgufValue::Bool(x) => Value::Bool(x),
        GgufValue::String(s) => Value::String(candle_string(s)),
        GgufValue::Array {
            items: Some(items), ..
        } => Value::Array(
            items
                .into_iter()
                .map(|x| candle_value(x, key, path))
                .collect::<Result<_, _>>()?,
        ),
        GgufValue::Array { items: None, .. } => {
            return Err(LoadError::Invalid {
                path: path.to_path_buf(),
                message: format!("metadata key `{key}`: array was not read"),
            })
        }
    })
}

/// Convert a header read by [`GgufInfo`] into candle's `Content`.
fn content_of(info: GgufInfo) -> Result<Content, LoadError> {
    let path = info.path;
    let magic = match info.version {
        1 => VersionedMagic::GgufV1,
        2 => VersionedMagic::GgufV2,
        _ => VersionedMagic::GgufV3,
    };
    let mut metadata = HashMap::with_capacity(info.metadata.len());
    for (key, value) in info.metadata {
        let value = candle_value(value, &key, &path)?;
        metadata.insert(candle_string(key), value);
    }
    let mut tensor_infos = HashMap::with_capacity(info.tensors.len());
    for t in info.tensors {
        let ggml_dtype = candle_dtype(t.type_code).ok_or_else(|| LoadError::BadTensor {
            path: path.clone(),
            name: t.name.clone(),
            message: format!("ggml type {} cannot be read by this loader", t.type_name()),
        })?;
        // ggml lists dimensions fastest-varying first; candle outermost first.
        let dims = t
            .dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| LoadError::BadTensor {
                path: path.clone(),
                name: t.name.clone(),
                message: format!("dimensions {:?} do not fit in memory", t.dims),
            })?;
        tensor_infos.insert(
            candle_string(t.name),
            gguf_file::TensorInfo {
                ggml_dtype,
                shape: candle_core::Shape::from(dims),
                offset: t.offset,
            },
        );
    }
    Ok(Content {
        magic,
        metadata,
        tensor_infos,
        tensor_data_offset: info.data_offset,
    })
}

/// Fills a buffer with a tensor's bytes from a byte offset within the tensor.
pub type ReadAt<'a> = dyn Fn(u64, &mut [u8]) -> std::io::Result<()> + Sync + 'a;

/// A pointer to a vector's spare capacity that workers write disjoint elements through.
pub struct Slots<T>(*mut T);

// SAFETY: the workers (`read_tensor_with`, `quant_matmul::source::for_row_pieces`) write disjoint elements (each row's, once).
unsafe impl<T: Send> Send for Slots<T> {}
unsafe impl<T: Send> Sync for Slots<T> {}

impl<T> Slots<T> {
    /// The spare capacity of `v` (empty: its length is 0).
    pub fn of(v: &mut Vec<T>) -> Self {
        debug_assert!(v.is_empty());
        Slots(v.as_mut_ptr())
    }

    /// Write element `i`.
    ///
    /// # Safety
    /// `i` is below the vector's capacity and no other thread writes or reads it meanwhile.
    #[inline(always)]
    pub unsafe fn put(&self, i: usize, x: T) {
        unsafe { self.0.add(i).write(x) }
    }

    /// Bytes `r` of the capacity, to be filled (their contents are unspecified until then).
    ///
    /// # Safety
    /// `r` lies within the capacity's bytes and no other thread touches them meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes(&self, r: std::ops::Range<usize>) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut((self.0 as *mut u8).add(r.start), r.len()) }
    }
}
