//! A streaming GGUF (v3) writer: the whole header (metadata, tensor directory with every
//! tensor's offset) is written first, since each tensor's byte size follows from its shape
//! and type; then the tensors' data are written one after another, each produced on demand,
//! so a file never has to be held in memory. The writer checks that each tensor's data has
//! exactly the size its directory entry promised.

use anyhow::{bail, Context, Result};
use candle_core::quantized::GgmlDType;
use std::io::{Seek, Write};

/// The data section's alignment (GGUF's default; `general.alignment` is not written).
pub const ALIGNMENT: u64 = 32;

/// A metadata value, as GGUF stores it.
#[derive(Debug, Clone)]
pub enum Value {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    /// An array of values of one type (the type of the first item; empty arrays are i32).
    Array(Vec<Value>),
    /// Any other scalar or array copied from another file, kept in its own type.
    Other(candle_core::quantized::gguf_file::Value),
}

fn type_code(v: &Value) -> u32 {
    match v {
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::Str(_) => 8,
        Value::Array(_) => 9,
        Value::Other(o) => candle_type_code(o),
    }
}

fn candle_type_code(v: &candle_core::quantized::gguf_file::Value) -> u32 {
    use candle_core::quantized::gguf_file::Value as C;
    match v {
        C::U8(_) => 0,
        C::I8(_) => 1,
        C::U16(_) => 2,
        C::I16(_) => 3,
        C::U32(_) => 4,
        C::I32(_) => 5,
        C::F32(_) => 6,
        C::Bool(_) => 7,
        C::String(_) => 8,
        C::Array(_) => 9,
        C::U64(_) => 10,
        C::I64(_) => 11,
        C::F64(_) => 12,
    }
}

fn write_str<W: Write>(w: &mut W, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_candle<W: Write>(w: &mut W, v: &candle_core::quantized::gguf_file::Value) -> Result<()> {
    use candle_core::quantized::gguf_file::Value as C;
    match v {
        C::U8(x) => w.write_all(&[*x])?,
        C::I8(x) => w.write_all(&x.to_le_bytes())?,
        C::U16(x) => w.write_all(&x.to_le_bytes())?,
        C::I16(x) => w.write_all(&x.to_le_bytes())?,
        C::U32(x) => w.write_all(&x.to_le_bytes())?,
        C::I32(x) => w.write_all(&x.to_le_bytes())?,
        C::F32(x) => w.write_all(&x.to_le_bytes())?,
        C::U64(x) => w.write_all(&x.to_le_bytes())?,
        C::I64(x) => w.write_all(&x.to_le_bytes())?,
        C::F64(x) => w.write_all(&x.to_le_bytes())?,
        C::Bool(x) => w.write_all(&[u8::from(*x)])?,
        C::String(s) => write_str(w, s)?,
        C::Array(items) => {
            let code = items.first().map(candle_type_code).unwrap_or(5);
            w.write_all(&code.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            for it in items {
                if candle_type_code(it) != code {
                    bail!("a metadata array mixes value types");
                }
                write_candle(w, it)?;
            }
        }
    }
    Ok(())
}

fn write_value<W: Write>(w: &mut W, v: &Value) -> Result<()> {
    match v {
        Value::U32(x) => w.write_all(&x.to_le_bytes())?,
        Value::I32(x) => w.write_all(&x.to_le_bytes())?,
        Value::F32(x) => w.write_all(&x.to_le_bytes())?,
        Value::Bool(x) => w.write_all(&[u8::from(*x)])?,
        Value::Str(s) => write_str(w, s)?,
        Value::Array(items) => {
            let code = items.first().map(type_code).unwrap_or(5);
            w.write_all(&code.to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            for it in items {
                if type_code(it) != code {
                    bail!("a metadata array mixes value types");
                }
                write_value(w, it)?;
            }
        }
        Value::Other(o) => write_candle(w, o)?,
    }
    Ok(())
}

/// GGML's type code of a candle dtype (as GGUF's tensor directory stores it).
pub fn ggml_code(t: GgmlDType) -> u32 {
    match t {
        GgmlDType::F32 => 0,
        GgmlDType::F16 => 1,
        GgmlDType::Q4_0 => 2,
        GgmlDType::Q4_1 => 3,
        GgmlDType::Q5_0 => 6,
        GgmlDType::Q5_1 => 7,
        GgmlDType::Q8_0 => 8,
        GgmlDType::Q8_1 => 9,
        GgmlDType::Q2K => 10,
        GgmlDType::Q3K => 11,
        GgmlDType::Q4K => 12,
        GgmlDType::Q5K => 13,
        GgmlDType::Q6K => 14,
        GgmlDType::Q8K => 15,
        GgmlDType::BF16 => 30,
    }
}

/// Bytes of a tensor of `n` elements of type `t` (`n` a multiple of the block size).
pub fn tensor_bytes(t: GgmlDType, n: u64) -> u64 {
    n / t.block_size() as u64 * t.type_size() as u64
}

/// One entry of the tensor directory.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    pub name: String,
    /// ggml order: `ne[0]` (the contiguous dimension) first.
    pub ne: Vec<u64>,
    pub dtype: GgmlDType,
}

impl TensorEntry {
    pub fn elements(&self) -> u64 {
        self.ne.iter().product()
    }
    pub fn bytes(&self) -> u64 {
        tensor_bytes(self.dtype, self.elements())
    }
}

fn pad_to(pos: u64) -> u64 {
    (ALIGNMENT - pos % ALIGNMENT) % ALIGNMENT
}

/// Writes the header; returns the total file size the data section will make.
pub fn write_header<W: Write + Seek>(
    w: &mut W,
    metadata: &[(String, Value)],
    tensors: &[TensorEntry],
) -> Result<u64> {
    w.write_all(b"GGUF")?;
    w.write_all(&3u32.to_le_bytes())?;
    w.write_all(&(tensors.len() as u64).to_le_bytes())?;
    w.write_all(&(metadata.len() as u64).to_le_bytes())?;
    for (key, value) in metadata {
        write_str(w, key)?;
        w.write_all(&type_code(value).to_le_bytes())?;
        write_value(w, value).with_context(|| format!("metadata key {key}"))?;
    }
    let mut offset = 0u64;
    for t in tensors {
        let block = t.dtype.block_size() as u64;
        if t.ne.first().is_none_or(|&n0| n0 % block != 0) {
            bail!(
                "tensor {}: row length {:?} is not a multiple of {:?}'s block of {block}",
                t.name,
                t.ne.first(),
                t.dtype
            );
        }
        write_str(w, &t.name)?;
        w.write_all(&(t.ne.len() as u32).to_le_bytes())?;
        for d in &t.ne {
            w.write_all(&d.to_le_bytes())?;
        }
        w.write_all(&ggml_code(t.dtype).to_le_bytes())?;
        w.write_all(&offset.to_le_bytes())?;
        offset += t.bytes();
        offset += pad_to(offset);
    }
    let pos = w.stream_position()?;
    w.write_all(&vec![0u8; pad_to(pos) as usize])?;
    Ok(w.stream_position()? + offset)
}

/// Writes one tensor's data (exactly `entry.bytes()` bytes, checked) and its padding.
pub struct TensorSink<'a, W: Write> {
    w: &'a mut W,
    left: u64,
    name: &'a str,
}

impl<'a, W: Write> TensorSink<'a, W> {
    pub fn new(w: &'a mut W, entry: &'a TensorEntry) -> Self {
        TensorSink {
            w,
            left: entry.bytes(),
            name: &entry.name,
        }
    }
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() as u64 > self.left {
            bail!(
                "tensor {}: more data than its shape and type hold",
                self.name
            );
        }
        self.w.write_all(bytes)?;
        self.left -= bytes.len() as u64;
        Ok(())
    }
    /// Checks the size and writes the padding after the tensor.
    pub fn finish(self, total: u64) -> Result<()> {
        if self.left != 0 {
            bail!("tensor {}: {} bytes missing", self.name, self.left);
        }
        self.w.write_all(&vec![0u8; pad_to(total) as usize])?;
        Ok(())
    }
}
