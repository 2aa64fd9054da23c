//! Reading GGUF files: the header, typed metadata look-ups and tensors with
//! their shapes checked, every error naming the file and what was wrong.
//!
//! candle's reader (`candle_core::quantized::gguf_file`) bounds-checks the
//! header against the file size; this module adds the checks a model loader
//! needs (tensor data inside the file, expected shapes, required keys) so a
//! truncated or foreign file is an error, never a panic.

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::Device;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// What can go wrong while loading a model file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot open: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
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
    /// Open and parse the header of `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| LoadError::Open {
            path: path.clone(),
            source,
        })?;
        let file_len = file
            .metadata()
            .map_err(|source| LoadError::Open {
                path: path.clone(),
                source,
            })?
            .len();
        let mut reader = BufReader::new(file);
        let content = gguf_file::Content::read(&mut reader).map_err(|e| LoadError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let this = Self {
            path,
            content,
            reader,
            file_len,
        };
        this.check_tensor_extents()?;
        Ok(this)
    }

    /// Every tensor's data must lie inside the file: a truncated download is
    /// reported at open time, naming the first tensor that is cut off.
    fn check_tensor_extents(&self) -> Result<(), LoadError> {
        let mut names: Vec<&String> = self.content.tensor_infos.keys().collect();
        names.sort();
        for name in names {
            let info = &self.content.tensor_infos[name];
            let elems = info.shape.elem_count();
            let block = info.ggml_dtype.block_size();
            if elems % block != 0 {
                return Err(LoadError::BadTensor {
                    path: self.path.clone(),
                    name: name.clone(),
                    message: format!(
                        "{elems} elements is not a multiple of the {:?} block size {block}",
                        info.ggml_dtype
                    ),
                });
            }
            let bytes = (elems / block) as u64 * info.ggml_dtype.type_size() as u64;
            let start = self.content.tensor_data_offset.saturating_add(info.offset);
            let end = start.saturating_add(bytes);
            if end > self.file_len {
                return Err(LoadError::Corrupt {
                    path: self.path.clone(),
                    message: format!(
                        "tensor `{name}` needs bytes {start}..{end} but the file has {} bytes (truncated file?)",
                        self.file_len
                    ),
                });
            }
        }
        Ok(())
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

    /// Load tensor `name`, checking its shape against `expected` (candle order).
    pub fn tensor(
        &mut self,
        name: &str,
        expected: &[usize],
        device: &Device,
    ) -> Result<QTensor, LoadError> {
        let got = self
            .tensor_shape(name)
            .ok_or_else(|| LoadError::MissingTensor {
                path: self.path.clone(),
                name: name.to_string(),
            })?;
        if got != expected {
            return Err(LoadError::BadShape {
                path: self.path.clone(),
                name: name.to_string(),
                got,
                expected: expected.to_vec(),
            });
        }
        self.content
            .tensor(&mut self.reader, name, device)
            .map_err(|e| LoadError::BadTensor {
                path: self.path.clone(),
                name: name.to_string(),
                message: e.to_string(),
            })
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
