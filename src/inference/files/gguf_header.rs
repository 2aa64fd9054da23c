//! A small, safe reader of GGUF headers: metadata, tensor descriptions and their bounds.
//!
//! It owns the checks that run on every model file before candle sees it. candle's own
//! reader trusts the counts and lengths in the header, so a corrupt file can make it panic
//! or try to allocate terabytes; here every count and length is first held against the
//! bytes that remain in the file, and each problem becomes a [`GgufError`] naming the file
//! and what was wrong (bad magic, unsupported version, truncated header, implausible count,
//! tensor data past the end of the file, ...). Nothing here panics on a file's content.
//!
//! Layout read (GGUF v1–v3, little-endian): magic `GGUF`, version (u32), tensor count and
//! metadata count (u32 in v1, u64 after), the metadata key/value pairs, the tensor
//! descriptions (name, dims, ggml type, offset), padding to `general.alignment` (default
//! 32), then the tensor data. Arrays longer than [`ReadOptions::max_array_items`] are
//! skipped and only their length is kept (a vocabulary has ~150k strings).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

/// The magic bytes at the start of every GGUF file.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// The alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML's limit on the number of dimensions of one tensor.
pub const MAX_DIMS: u32 = 4;
/// Arrays nested deeper than this are rejected (the format allows nesting; real files use none).
const MAX_NESTING: u32 = 4;

/// A problem with a GGUF file, with the file's path.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", .path.display())]
pub struct GgufError {
    pub path: PathBuf,
    pub problem: GgufProblem,
}

/// What was wrong with a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufProblem {
    #[error("cannot read the file: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a GGUF file: it starts with {found}, expected the magic \"GGUF\"")]
    BadMagic { found: String },
    #[error("unsupported GGUF version {0} (this reader knows versions 1, 2 and 3)")]
    BadVersion(u32),
    #[error(
        "truncated: {what} at byte {offset} needs {need} bytes, but the file ends at byte {len}"
    )]
    Truncated {
        what: String,
        offset: u64,
        need: u64,
        len: u64,
    },
    #[error("implausible {what}: {count}, but a file of {len} bytes can hold at most {max}")]
    ImplausibleCount {
        what: String,
        count: u64,
        max: u64,
        len: u64,
    },
    #[error("metadata key `{key}` has unknown value type {value_type} (known: 0..=12)")]
    BadValueType { key: String, value_type: u32 },
    #[error("metadata key `{0}` appears twice")]
    DuplicateKey(String),
    #[error("metadata key `{key}`: {what}")]
    BadMetadata { key: String, what: String },
    #[error("tensor `{name}`: {what}")]
    BadTensor { name: String, what: String },
    #[error("tensor `{0}` is described twice")]
    DuplicateTensor(String),
    #[error(
        "tensor `{name}`: its data ({bytes} bytes at byte {start}) runs past the end of the file \
         (byte {len}); the file is truncated or corrupt"
    )]
    TensorPastEnd {
        name: String,
        start: u64,
        bytes: u64,
        len: u64,
    },
}

/// The type of a metadata value, as numbered by the GGUF format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    fn from_code(code: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match code {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The smallest number of bytes one value of this type takes.
    fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    /// The exact size of one value of a fixed-size type.
    fn fixed_size(self) -> Option<u64> {
        match self {
            ValueType::String | ValueType::Array => None,
            t => Some(t.min_size()),
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    /// An array; `items` is `None` when it was longer than the reader's limit and skipped.
    Array {
        elem: ValueType,
        len: u64,
        items: Option<Vec<GgufValue>>,
    },
}

/// `s` quoted for a message, cut to its first `max_chars` characters (with
/// its full length) when longer: a long string never fills the terminal.
pub fn quoted_head(s: &str, max_chars: usize) -> String {
    let n = s.chars().count();
    if n <= max_chars {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(max_chars).collect();
        format!("{head:?}… ({n} chars)")
    }
}

impl GgufValue {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// A one-line rendering: long strings are cut to `max_chars` characters (with their
    /// full length), skipped arrays show their length only.
    pub fn display(&self, max_chars: usize) -> String {
        match self {
            GgufValue::String(s) => quoted_head(s, max_chars),
            GgufValue::Array { elem, len, items } => match items {
                Some(items) => {
                    let parts: Vec<String> = items.iter().map(|v| v.display(max_chars)).collect();
                    format!("[{}]", parts.join(", "))
                }
                None => format!("[{} × {}] (not shown)", len, elem.name()),
            },
            GgufValue::U8(v) => v.to_string(),
            GgufValue::I8(v) => v.to_string(),
            GgufValue::U16(v) => v.to_string(),
            GgufValue::I16(v) => v.to_string(),
            GgufValue::U32(v) => v.to_string(),
            GgufValue::I32(v) => v.to_string(),
            GgufValue::F32(v) => v.to_string(),
            GgufValue::Bool(v) => v.to_string(),
            GgufValue::U64(v) => v.to_string(),
            GgufValue::I64(v) => v.to_string(),
            GgufValue::F64(v) => v.to_string(),
        }
    }
}

impl fmt::Display for GgufValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display(120))
    }
}

/// A ggml tensor type: its name and block layout (elements per block, bytes per block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    pub code: u32,
    pub name: &'static str,
    pub block_elems: u64,
    pub block_bytes: u64,
}

/// The ggml tensor types (code, name, elements per block, bytes per block), as numbered in
/// ggml's `enum ggml_type`. Codes 4, 5 and 31–33 were retired and are absent.
const GGML_TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl GgmlType {
    /// The type with this code, if ggml knows it.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        GGML_TYPES
            .iter()
            .find(|t| t.0 == code)
            .map(|&(code, name, block_elems, block_bytes)| GgmlType {
                code,
                name,
                block_elems,
                block_bytes,
            })
    }
}

/// One tensor description from the header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions as stored (ggml order: the first is the fastest-varying).
    pub dims: Vec<u64>,
    /// The ggml type code.
    pub type_code: u32,
    /// The type, when ggml knows the code.
    pub ggml_type: Option<GgmlType>,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    pub n_elements: u64,
    /// Size of the data, when the type is known.
    pub n_bytes: Option<u64>,
}

impl TensorInfo {
    /// The type's name, or `type<code>` for a code this reader does not know.
    pub fn type_name(&self) -> String {
        match self.ggml_type {
            Some(t) => t.name.to_string(),
            None => format!("type{}", self.type_code),
        }
    }
}

/// How much of the file to keep while reading.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// Arrays with more items than this are skipped (only their length is kept).
    pub max_array_items: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_array_items: 64,
        }
    }
}

/// The header of a GGUF file: metadata and tensor descriptions, checked against the file size.
#[derive(Debug, Clone)]
pub struct GgufInfo {
    pub path: PathBuf,
    pub version: u32,
    pub file_size: u64,
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Byte offset of the data section (after the header and its padding).
    pub data_offset: u64,
}

/// Per-type totals of [`GgufInfo::type_histogram`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeTotals {
    pub tensors: u64,
    pub elements: u64,
    pub bytes: u64,
}

impl GgufInfo {
    /// Read and check the header of the file at `path`.
    pub fn read(path: &Path, opts: ReadOptions) -> Result<GgufInfo, GgufError> {
        read_file(path, opts).map_err(|problem| GgufError {
            path: path.to_path_buf(),
            problem,
        })
    }

    /// Read and check a header held in memory; `path` names it in errors.
    pub fn from_bytes(path: &Path, bytes: &[u8], opts: ReadOptions) -> Result<GgufInfo, GgufError> {
        read_from(std::io::Cursor::new(bytes), bytes.len() as u64, path, opts).map_err(|problem| {
            GgufError {
                path: path.to_path_buf(),
                problem,
            }
        })
    }

    /// Check a file before handing it to candle: the same reads with every array skipped.
    pub fn validate(path: &Path) -> Result<GgufInfo, GgufError> {
        GgufInfo::read(path, ReadOptions { max_array_items: 0 })
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// `general.architecture`, if present and a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(GgufValue::as_str)
    }

    /// `<architecture>.context_length`, if present.
    pub fn context_length(&self) -> Option<u64> {
        let arch = self.architecture()?;
        self.get(&format!("{arch}.context_length"))
            .and_then(GgufValue::as_u64)
    }

    /// Total number of weights (sum of every tensor's element count).
    pub fn parameter_count(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_elements).sum()
    }

    /// Tensors, elements and bytes per ggml type name, sorted by name.
    pub fn type_histogram(&self) -> BTreeMap<String, TypeTotals> {
        let mut out: BTreeMap<String, TypeTotals> = BTreeMap::new();
        for t in &self.tensors {
            let e = out.entry(t.type_name()).or_default();
            e.tensors += 1;
            e.elements += t.n_elements;
            e.bytes += t.n_bytes.unwrap_or(0);
        }
        out
    }
}

/// A reader that knows its position and the file length, so that every read is bounds-checked
/// before it allocates.
struct Reader<R> {
    inner: R,
    pos: u64,
    len: u64,
    version: u32,
}

impl<R: Read + Seek> Reader<R> {
    fn need(&self, n: u64, what: &dyn Fn() -> String) -> Result<(), GgufProblem> {
        if self.len.saturating_sub(self.pos) < n {
            return Err(GgufProblem::Truncated {
                what: what(),
                offset: self.pos,
                need: n,
                len: self.len,
            });
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufProblem> {
        self.need(N as u64, what)?;
        let mut buf = [0u8; N];
        self.inner.read_exact(&mut buf)?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn skip(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<(), GgufProblem> {
        self.need(n, what)?;
        let step = i64::try_from(n).map_err(|_| GgufProblem::Truncated {
            what: what(),
            offset: self.pos,
            need: n,
            len: self.len,
        })?;
        self.inner.seek_relative(step)?;
        self.pos += n;
        Ok(())
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufProblem> {
        Ok(u32::from_le_bytes(self.bytes(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufProblem> {
        Ok(u64::from_le_bytes(self.bytes(what)?))
    }

    /// A count or length: u32 in GGUF v1, u64 after.
    fn count(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufProblem> {
        if self.version == 1 {
            Ok(self.u32(what)?.into())
        } else {
            self.u64(what)
        }
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufProblem> {
        let n = self.count(&|| format!("length of {}", what()))?;
        self.need(n, what)?;
        let mut buf = vec![0u8; n as usize];
        self.inner.read_exact(&mut buf)?;
        self.pos += n;
        Ok(match String::from_utf8(buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    fn skip_string(&mut self, what: &dyn Fn() -> String) -> Result<(), GgufProblem> {
        let n = self.count(&|| format!("length of {}", what()))?;
        self.skip(n, what)
    }

    fn value(
        &mut self,
        ty: ValueType,
        key: &str,
        opts: ReadOptions,
        depth: u32,
    ) -> Result<GgufValue, GgufProblem> {
        let what = || format!("value of `{key}`");
        Ok(match ty {
            ValueType::U8 => GgufValue::U8(u8::from_le_bytes(self.bytes(&what)?)),
            ValueType::I8 => GgufValue::I8(i8::from_le_bytes(self.bytes(&what)?)),
            ValueType::U16 => GgufValue::U16(u16::from_le_bytes(self.bytes(&what)?)),
            ValueType::I16 => GgufValue::I16(i16::from_le_bytes(self.bytes(&what)?)),
            ValueType::U32 => GgufValue::U32(u32::from_le_bytes(self.bytes(&what)?)),
            ValueType::I32 => GgufValue::I32(i32::from_le_bytes(self.bytes(&what)?)),
            ValueType::F32 => GgufValue::F32(f32::from_le_bytes(self.bytes(&what)?)),
            ValueType::Bool => GgufValue::Bool(self.bytes::<1>(&what)?[0] != 0),
            ValueType::String => GgufValue::String(self.string(&what)?),
            ValueType::U64 => GgufValue::U64(u64::from_le_bytes(self.bytes(&what)?)),
            ValueType::I64 => GgufValue::I64(i64::from_le_bytes(self.bytes(&what)?)),
            ValueType::F64 => GgufValue::F64(f64::from_le_bytes(self.bytes(&what)?)),
            ValueType::Array => self.array(key, opts, depth)?,
        })
    }

    fn array(
        &mut self,
        key: &str,
        opts: ReadOptions,
        depth: u32,
    ) -> Result<GgufValue, GgufProblem> {
        if depth >= MAX_NESTING {
            return Err(GgufProblem::BadMetadata {
                key: key.to_string(),
                what: format!("arrays nested deeper than {MAX_NESTING} levels"),
            });
        }
        let code = self.u32(&|| format!("array item type of `{key}`"))?;
        let elem = ValueType::from_code(code).ok_or_else(|| GgufProblem::BadValueType {
            key: key.to_string(),
            value_type: code,
        })?;
        let len = self.count(&|| format!("array length of `{key}`"))?;
        let remaining = self.len.saturating_sub(self.pos);
        let max = remaining / elem.min_size();
        if len > max {
            return Err(GgufProblem::ImplausibleCount {
                what: format!("length of array `{key}`"),
                count: len,
                max,
                len: self.len,
            });
        }
        if len > opts.max_array_items {
            match elem.fixed_size() {
                Some(size) => self.skip(len * size, &|| format!("items of array `{key}`"))?,
                None if elem == ValueType::String => {
                    for i in 0..len {
                        self.skip_string(&|| format!("item {i} of array `{key}`"))?;
                    }
                }
                None => {
                    for _ in 0..len {
                        self.array(key, ReadOptions { max_array_items: 0 }, depth + 1)?;
                    }
                }
            }
            return Ok(GgufValue::Array {
                elem,
                len,
                items: None,
            });
        }
        let mut items = Vec::with_capacity(len as usize);
        for _ in 0..len {
            items.push(self.value(elem, key, opts, depth + 1)?);
        }
        Ok(GgufValue::Array {
            elem,
            len,
            items: Some(items),
        })
    }
}

fn read_file(path: &Path, opts: ReadOptions) -> Result<GgufInfo, GgufProblem> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    read_from(BufReader::with_capacity(1 << 16, file), len, path, opts)
}

thread_local! {
    static HEADER_READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many GGUF headers this thread has parsed so far (every read goes
/// through this reader): tests check that a model load parses its file once.
pub fn header_reads() -> u64 {
    HEADER_READS.with(|c| c.get())
}

/// Parse a header from `inner`, which holds `len` bytes.
fn read_from<R: Read + Seek>(
    inner: R,
    len: u64,
    path: &Path,
    opts: ReadOptions,
) -> Result<GgufInfo, GgufProblem> {
    HEADER_READS.with(|c| c.set(c.get() + 1));
    let mut r = Reader {
        inner,
        pos: 0,
        len,
        version: 3,
    };

    let magic: [u8; 4] = r.bytes(&|| "the magic \"GGUF\"".to_string())?;
    if &magic != GGUF_MAGIC {
        let found = if magic.iter().all(|b| b.is_ascii_graphic()) {
            format!("{:?}", String::from_utf8_lossy(&magic))
        } else {
            format!("bytes {}", hex::encode(magic))
        };
        return Err(GgufProblem::BadMagic { found });
    }
    let version = r.u32(&|| "the version".to_string())?;
    if !(1..=3).contains(&version) {
        return Err(GgufProblem::BadVersion(version));
    }
    r.version = version;
    let tensor_count = r.count(&|| "the tensor count".to_string())?;
    let kv_count = r.count(&|| "the metadata count".to_string())?;

    // Each key/value pair takes at least 13 bytes (key length, type, one byte of value);
    // each tensor description at least 24 (name length, dim count, type, offset).
    let remaining = len - r.pos;
    let (kv_min, tensor_min) = if version == 1 { (9, 20) } else { (13, 24) };
    if kv_count > remaining / kv_min {
        return Err(GgufProblem::ImplausibleCount {
            what: "metadata count".into(),
            count: kv_count,
            max: remaining / kv_min,
            len,
        });
    }
    if tensor_count > remaining / tensor_min {
        return Err(GgufProblem::ImplausibleCount {
            what: "tensor count".into(),
            count: tensor_count,
            max: remaining / tensor_min,
            len,
        });
    }

    let mut metadata: Vec<(String, GgufValue)> = Vec::with_capacity(kv_count as usize);
    let mut seen = std::collections::HashSet::new();
    for i in 0..kv_count {
        let key = r.string(&|| format!("key of metadata entry {i}"))?;
        let code = r.u32(&|| format!("value type of `{key}`"))?;
        let ty = ValueType::from_code(code).ok_or_else(|| GgufProblem::BadValueType {
            key: key.clone(),
            value_type: code,
        })?;
        let value = r.value(ty, &key, opts, 0)?;
        if !seen.insert(key.clone()) {
            return Err(GgufProblem::DuplicateKey(key));
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            _ => {
                return Err(GgufProblem::BadMetadata {
                    key: "general.alignment".into(),
                    what: format!("{v} is not a positive power of two"),
                })
            }
        },
    };

    let mut tensors = Vec::with_capacity(tensor_count as usize);
    let mut names = std::collections::HashSet::new();
    for i in 0..tensor_count {
        let name = r.string(&|| format!("name of tensor {i}"))?;
        let bad = |what: String| GgufProblem::BadTensor {
            name: name.clone(),
            what,
        };
        let n_dims = r.u32(&|| format!("dimension count of tensor `{name}`"))?;
        if n_dims > MAX_DIMS {
            return Err(bad(format!(
                "{n_dims} dimensions, ggml allows at most {MAX_DIMS}"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(r.count(&|| format!("dimension {d} of tensor `{name}`"))?);
        }
        let type_code = r.u32(&|| format!("type of tensor `{name}`"))?;
        let offset = r.u64(&|| format!("offset of tensor `{name}`"))?;
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("dimensions {dims:?} overflow the element count")))?;
        let ggml_type = GgmlType::from_code(type_code);
        let n_bytes = match ggml_type {
            None => None,
            Some(t) => {
                let first = dims.first().copied().unwrap_or(1);
                if first % t.block_elems != 0 {
                    return Err(bad(format!(
                        "first dimension {first} is not a multiple of the {} block size {}",
                        t.name, t.block_elems
                    )));
                }
                Some(
                    (n_elements / t.block_elems)
                        .checked_mul(t.block_bytes)
                        .ok_or_else(|| {
                            bad(format!("dimensions {dims:?} overflow the byte size"))
                        })?,
                )
            }
        };
        if offset % alignment != 0 {
            return Err(bad(format!(
                "offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        if !names.insert(name.clone()) {
            return Err(GgufProblem::DuplicateTensor(name));
        }
        tensors.push(TensorInfo {
            name,
            dims,
            type_code,
            ggml_type,
            offset,
            n_elements,
            n_bytes,
        });
    }

    let data_offset = r.pos.div_ceil(alignment) * alignment;
    for t in &tensors {
        if let Some(bytes) = t.n_bytes {
            let start = data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(bytes));
            if end.is_none_or(|e| e > len) {
                return Err(GgufProblem::TensorPastEnd {
                    name: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    bytes,
                    len,
                });
            }
        }
    }

    Ok(GgufInfo {
        path: path.to_path_buf(),
        version,
        file_size: len,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Builds small GGUF files byte by byte, for tests here and in `sources`.
#[cfg(test)]
pub(crate) mod test_file {
    /// A GGUF file under construction: metadata pairs and tensors (data filled with a pattern).
    pub struct TestGguf {
        pub version: u32,
        kv: Vec<u8>,
        n_kv: u64,
        tensors: Vec<(String, Vec<u64>, u32, u64)>,
    }

    fn s(out: &mut Vec<u8>, text: &str) {
        out.extend((text.len() as u64).to_le_bytes());
        out.extend(text.as_bytes());
    }

    impl TestGguf {
        pub fn new() -> TestGguf {
            TestGguf {
                version: 3,
                kv: Vec::new(),
                n_kv: 0,
                tensors: Vec::new(),
            }
        }

        /// A raw pair: key, type code, encoded value.
        pub fn kv_raw(mut self, key: &str, ty: u32, value: &[u8]) -> TestGguf {
            s(&mut self.kv, key);
            self.kv.extend(ty.to_le_bytes());
            self.kv.extend(value);
            self.n_kv += 1;
            self
        }

        pub fn kv_str(self, key: &str, value: &str) -> TestGguf {
            let mut v = Vec::new();
            s(&mut v, value);
            self.kv_raw(key, 8, &v)
        }

        pub fn kv_u32(self, key: &str, value: u32) -> TestGguf {
            self.kv_raw(key, 4, &value.to_le_bytes())
        }

        pub fn kv_str_array(self, key: &str, items: &[&str]) -> TestGguf {
            let mut v = Vec::new();
            v.extend(8u32.to_le_bytes());
            v.extend((items.len() as u64).to_le_bytes());
            for i in items {
                s(&mut v, i);
            }
            self.kv_raw(key, 9, &v)
        }

        /// A tensor of ggml type `ty` with `bytes` bytes of data.
        pub fn tensor(mut self, name: &str, dims: &[u64], ty: u32, bytes: u64) -> TestGguf {
            self.tensors
                .push((name.to_string(), dims.to_vec(), ty, bytes));
            self
        }

        /// The file's bytes, plus the offset where the data section starts.
        pub fn build_with_offset(&self) -> (Vec<u8>, usize) {
            let mut out = Vec::new();
            out.extend(b"GGUF");
            out.extend(self.version.to_le_bytes());
            out.extend((self.tensors.len() as u64).to_le_bytes());
            out.extend(self.n_kv.to_le_bytes());
            out.extend(&self.kv);
            let mut offset = 0u64;
            for (name, dims, ty, bytes) in &self.tensors {
                s(&mut out, name);
                out.extend((dims.len() as u32).to_le_bytes());
                for d in dims {
                    out.extend(d.to_le_bytes());
                }
                out.extend(ty.to_le_bytes());
                out.extend(offset.to_le_bytes());
                offset += bytes.div_ceil(32) * 32;
            }
            while out.len() % 32 != 0 {
                out.push(0);
            }
            let data_start = out.len();
            for (i, (_, _, _, bytes)) in self.tensors.iter().enumerate() {
                let start = out.len();
                out.extend((0..*bytes).map(|b| (b as u8).wrapping_add(i as u8)));
                while (out.len() - start) % 32 != 0 {
                    out.push(0);
                }
            }
            (out, data_start)
        }

        pub fn build(&self) -> Vec<u8> {
            self.build_with_offset().0
        }
    }

    /// A small, valid model file of architecture `arch`: two F32 tensors and a Q8_0 one.
    pub fn tiny_model(arch: &str) -> Vec<u8> {
        TestGguf::new()
            .kv_str("general.architecture", arch)
            .kv_u32(&format!("{arch}.context_length"), 128)
            .kv_str_array("tokenizer.ggml.tokens", &["a", "b", "c"])
            .tensor("token_embd.weight", &[4, 3], 0, 48)
            .tensor("output_norm.weight", &[4], 0, 16)
            .tensor("blk.0.attn_q.weight", &[32, 2], 8, 68)
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::test_file::{tiny_model, TestGguf};
    use super::*;
    use rand::{Rng, SeedableRng};

    fn shared() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared")
    }

    fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn problem(bytes: &[u8]) -> GgufProblem {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "m.gguf", bytes);
        let err = GgufInfo::read(&p, ReadOptions::default()).unwrap_err();
        assert_eq!(err.path, p);
        assert!(err.to_string().starts_with(&p.display().to_string()));
        err.problem
    }

    /// The file written by the reference `gguf` Python package (scripts/make_gguf_fixture.py).
    #[test]
    fn reads_the_reference_writers_file() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf/tiny-llama.gguf");
        let info = GgufInfo::read(&p, ReadOptions::default()).unwrap();
        assert_eq!(info.version, 3);
        assert_eq!(info.file_size, 2784);
        assert_eq!(info.architecture(), Some("llama"));
        assert_eq!(info.context_length(), Some(256));
        assert_eq!(info.metadata.len(), 16);
        assert_eq!(info.get("test.u8"), Some(&GgufValue::U8(200)));
        assert_eq!(info.get("test.i8"), Some(&GgufValue::I8(-100)));
        assert_eq!(info.get("test.u16"), Some(&GgufValue::U16(60000)));
        assert_eq!(info.get("test.i16"), Some(&GgufValue::I16(-30000)));
        assert_eq!(info.get("test.i32"), Some(&GgufValue::I32(-2_000_000_000)));
        assert_eq!(info.get("test.f32"), Some(&GgufValue::F32(0.5)));
        assert_eq!(info.get("test.bool"), Some(&GgufValue::Bool(true)));
        assert_eq!(info.get("test.u64"), Some(&GgufValue::U64((1 << 40) + 3)));
        assert_eq!(info.get("test.i64"), Some(&GgufValue::I64(-(1 << 40) - 3)));
        assert_eq!(info.get("test.f64"), Some(&GgufValue::F64(0.125)));
        assert_eq!(
            info.get("test.string").and_then(GgufValue::as_str),
            Some("héllo")
        );
        match info.get("test.small_array") {
            Some(GgufValue::Array {
                len: 3,
                items: Some(items),
                ..
            }) => assert_eq!(
                items
                    .iter()
                    .filter_map(GgufValue::as_u64)
                    .collect::<Vec<_>>(),
                [1, 2, 3]
            ),
            other => panic!("small array read as {other:?}"),
        }
        // Longer than the default limit of 64: skipped, length kept.
        assert_eq!(
            info.get("test.big_array"),
            Some(&GgufValue::Array {
                elem: ValueType::String,
                len: 100,
                items: None
            })
        );
        let summary: Vec<(String, String, Vec<u64>, u64, Option<u64>, u64)> = info
            .tensors
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.type_name(),
                    t.dims.clone(),
                    t.n_elements,
                    t.n_bytes,
                    info.data_offset + t.offset,
                )
            })
            .collect();
        // Values printed by the reference reader (gguf.GGUFReader) for the same file.
        let expect = [
            ("f32", "F32", vec![5, 3], 15, 60, 2048),
            ("f16", "F16", vec![8, 2], 16, 32, 2112),
            ("q8_0", "Q8_0", vec![64, 2], 128, 136, 2144),
            ("q4_1", "Q4_1", vec![32, 1], 32, 20, 2304),
            ("q4_k", "Q4_K", vec![256, 3], 768, 432, 2336),
        ];
        assert_eq!(summary.len(), expect.len());
        for (got, want) in summary.iter().zip(expect) {
            assert_eq!(
                got,
                &(
                    want.0.to_string(),
                    want.1.to_string(),
                    want.2,
                    want.3,
                    Some(want.4),
                    want.5
                )
            );
        }
        assert_eq!(info.parameter_count(), 959);
        let hist = info.type_histogram();
        assert_eq!(hist.len(), 5);
        assert_eq!(
            hist["Q8_0"],
            TypeTotals {
                tensors: 1,
                elements: 128,
                bytes: 136
            }
        );
    }

    /// A vocabulary-only file from llama.cpp: ~150k tokens, skipped without being kept.
    #[test]
    fn reads_a_real_vocabulary_file() {
        let p = shared().join("data/tokenizers/ggml-vocab-qwen2.gguf");
        let info = GgufInfo::validate(&p).unwrap();
        assert_eq!(info.architecture(), Some("qwen2"));
        assert_eq!(info.context_length(), Some(32768));
        assert_eq!(info.metadata.len(), 20);
        assert!(info.tensors.is_empty());
        assert_eq!(info.parameter_count(), 0);
        match info.get("tokenizer.ggml.tokens") {
            Some(GgufValue::Array { len, items, .. }) => {
                assert_eq!(*len, 151936);
                assert!(items.is_none());
            }
            other => panic!("tokens read as {other:?}"),
        }
        assert_eq!(
            info.get("tokenizer.ggml.eos_token_id")
                .and_then(GgufValue::as_u64),
            Some(151643)
        );
        let full = GgufInfo::read(
            &p,
            ReadOptions {
                max_array_items: 200_000,
            },
        )
        .unwrap();
        match full.get("tokenizer.ggml.tokens") {
            Some(GgufValue::Array {
                items: Some(items), ..
            }) => {
                assert_eq!(items.len(), 151936);
                assert_eq!(items[0].as_str(), Some("!"));
                assert_eq!(items[2].as_str(), Some("#"));
            }
            other => panic!("tokens read as {other:?}"),
        }
    }

    #[test]
    fn reads_what_the_test_builder_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "m.gguf", &tiny_model("qwen3"));
        let info = GgufInfo::validate(&p).unwrap();
        assert_eq!(info.architecture(), Some("qwen3"));
        assert_eq!(info.context_length(), Some(128));
        assert_eq!(info.tensors.len(), 3);
        assert_eq!(info.parameter_count(), 12 + 4 + 64);
        assert_eq!(info.tensors[2].n_bytes, Some(68));
    }

    #[test]
    fn bad_magic_is_named() {
        let mut bytes = tiny_model("llama");
        bytes[..4].copy_from_slice(b"GGML");
        match problem(&bytes) {
            GgufProblem::BadMagic { found } => assert_eq!(found, "\"GGML\""),
            other => panic!("{other:?}"),
        }
        let mut bytes = tiny_model("llama");
        bytes[..4].copy_from_slice(&[0, 1, 2, 0xff]);
        let p = problem(&bytes);
        assert_eq!(
            p.to_string(),
            "not a GGUF file: it starts with bytes 000102ff, expected the magic \"GGUF\""
        );
    }

    #[test]
    fn unsupported_version_is_named() {
        let mut bytes = tiny_model("llama");
        bytes[4..8].copy_from_slice(&7u32.to_le_bytes());
        assert!(matches!(problem(&bytes), GgufProblem::BadVersion(7)));
        bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(problem(&bytes), GgufProblem::BadVersion(0)));
    }

    #[test]
    fn empty_and_tiny_files_are_truncated() {
        assert!(matches!(
            problem(b""),
            GgufProblem::Truncated {
                offset: 0,
                need: 4,
                ..
            }
        ));
        match problem(b"GGUF\x03\x00") {
            GgufProblem::Truncated {
                what,
                offset,
                need,
                len,
            } => {
                assert_eq!((what.as_str(), offset, need, len), ("the version", 4, 4, 6));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let bytes = tiny_model("llama");
        let (_, data_start) = TestGguf::new()
            .kv_str("general.architecture", "llama")
            .kv_u32("llama.context_length", 128)
            .kv_str_array("tokenizer.ggml.tokens", &["a", "b", "c"])
            .tensor("token_embd.weight", &[4, 3], 0, 48)
            .tensor("output_norm.weight", &[4], 0, 16)
            .tensor("blk.0.attn_q.weight", &[32, 2], 8, 68)
            .build_with_offset();
        for cut in 0..bytes.len() {
            // Cutting only the trailing alignment padding (< 32 bytes after the
            // last tensor's data) leaves a complete, readable file.
            if cut + 31 >= bytes.len() {
                let dir = tempfile::tempdir().unwrap();
                let p = write(&dir, "m.gguf", &bytes[..cut]);
                if GgufInfo::read(&p, ReadOptions::default()).is_ok() {
                    continue;
                }
            }
            let p = problem(&bytes[..cut]);
            if cut < data_start - 31 {
                // Inside the header (up to its padding): a truncated read, or counts
                // that cannot fit in what is left of the file (checked before reading them).
                assert!(
                    matches!(
                        p,
                        GgufProblem::Truncated { .. } | GgufProblem::ImplausibleCount { .. }
                    ),
                    "cut at {cut}: {p:?}"
                );
            } else if cut >= data_start {
                // Inside the data: some tensor runs past the end.
                assert!(
                    matches!(p, GgufProblem::TensorPastEnd { .. }),
                    "cut at {cut}: {p:?}"
                );
            }
        }
        // The last tensor's data cut short.
        let cut = &bytes[..bytes.len() - 40];
        match problem(cut) {
            GgufProblem::TensorPastEnd {
                name, bytes, len, ..
            } => {
                assert_eq!(name, "blk.0.attn_q.weight");
                assert_eq!(bytes, 68);
                assert_eq!(len, cut.len() as u64);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn absurd_counts_are_refused_before_allocating() {
        let mut bytes = tiny_model("llama");
        bytes[8..16].copy_from_slice(&(u64::MAX / 3).to_le_bytes());
        match problem(&bytes) {
            GgufProblem::ImplausibleCount {
                what,
                count,
                max,
                len,
            } => {
                assert_eq!(what, "tensor count");
                assert_eq!(count, u64::MAX / 3);
                assert_eq!(len, bytes.len() as u64);
                assert_eq!(max, (bytes.len() as u64 - 24) / 24);
            }
            other => panic!("{other:?}"),
        }
        let mut bytes = tiny_model("llama");
        bytes[16..24].copy_from_slice(&1_000_000u64.to_le_bytes());
        match problem(&bytes) {
            GgufProblem::ImplausibleCount { what, .. } => assert_eq!(what, "metadata count"),
            other => panic!("{other:?}"),
        }
        // An array claiming 2^60 strings.
        let mut v = Vec::new();
        v.extend(8u32.to_le_bytes());
        v.extend((1u64 << 60).to_le_bytes());
        let bytes = TestGguf::new()
            .kv_raw("tokenizer.ggml.tokens", 9, &v)
            .build();
        match problem(&bytes) {
            GgufProblem::ImplausibleCount { what, count, .. } => {
                assert_eq!(what, "length of array `tokenizer.ggml.tokens`");
                assert_eq!(count, 1 << 60);
            }
            other => panic!("{other:?}"),
        }
        // A key claiming a length of 2^62 bytes.
        let mut bytes = TestGguf::new().kv_u32("a", 1).build();
        bytes[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes());
        match problem(&bytes) {
            GgufProblem::Truncated { what, need, .. } => {
                assert_eq!(what, "key of metadata entry 0");
                assert_eq!(need, 1 << 62);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_tensor_descriptions_are_named() {
        let five_dims = TestGguf::new().tensor("x", &[1, 1, 1, 1, 1], 0, 4).build();
        assert_eq!(
            problem(&five_dims).to_string(),
            "tensor `x`: 5 dimensions, ggml allows at most 4"
        );
        let overflow = TestGguf::new()
            .tensor("x", &[u64::MAX / 2, 4], 0, 4)
            .build();
        assert!(matches!(problem(&overflow), GgufProblem::BadTensor { .. }));
        let bad_block = TestGguf::new().tensor("q", &[33, 1], 8, 34).build();
        assert_eq!(
            problem(&bad_block).to_string(),
            "tensor `q`: first dimension 33 is not a multiple of the Q8_0 block size 32"
        );
        let twice = TestGguf::new()
            .tensor("x", &[4], 0, 16)
            .tensor("x", &[4], 0, 16)
            .build();
        assert!(matches!(problem(&twice), GgufProblem::DuplicateTensor(n) if n == "x"));
        let bad_type = TestGguf::new().kv_raw("k", 13, &[0; 8]).build();
        assert!(matches!(
            problem(&bad_type),
            GgufProblem::BadValueType { value_type: 13, .. }
        ));
        let dup = TestGguf::new().kv_u32("k", 1).kv_u32("k", 2).build();
        assert!(matches!(problem(&dup), GgufProblem::DuplicateKey(k) if k == "k"));
    }

    #[test]
    fn unknown_tensor_types_are_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "m.gguf",
            &TestGguf::new().tensor("x", &[4], 99, 16).build(),
        );
        let info = GgufInfo::validate(&p).unwrap();
        assert_eq!(info.tensors[0].type_name(), "type99");
        assert_eq!(info.tensors[0].n_bytes, None);
        assert_eq!(info.type_histogram()["type99"].tensors, 1);
    }

    /// Random corruption of the header: the reader answers with an error or a header, and
    /// never panics or runs away with memory.
    #[test]
    fn random_corruption_never_panics() {
        let clean = tiny_model("llama");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let header_len = 300.min(clean.len());
        let mut errors = 0;
        for _ in 0..400 {
            let mut bytes = clean.clone();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..header_len);
                bytes[i] = rng.gen();
            }
            std::fs::write(&p, &bytes).unwrap();
            if GgufInfo::read(&p, ReadOptions::default()).is_err() {
                errors += 1;
            }
        }
        assert!(errors > 100, "only {errors} of 400 corruptions were caught");
    }

    #[test]
    fn value_display_cuts_long_strings_and_skipped_arrays() {
        let s = GgufValue::String("x".repeat(500));
        assert_eq!(s.display(3), "\"xxx\"… (500 chars)");
        let a = GgufValue::Array {
            elem: ValueType::String,
            len: 151936,
            items: None,
        };
        assert_eq!(a.to_string(), "[151936 × string] (not shown)");
    }
}
