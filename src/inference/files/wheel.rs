//! Reading one file out of a Python wheel (a zip archive): the central directory, and an
//! entry's data inflated and CRC-checked as it streams.
//!
//! Only what wheels use is supported: stored (0) and deflated (8) entries, no encryption, no
//! zip64 (a wheel is far below 4 GiB). Every offset and size is checked against the archive's
//! length, so a corrupt wheel is an error naming the file, never a panic. (The `zip` crate
//! would do this too, but turning on its deflate feature changes the `zip` build that
//! candle-core depends on and forces candle to be recompiled.)

use anyhow::{bail, Context};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// One entry of the central directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelEntry {
    pub name: String,
    pub method: u16,
    pub flags: u16,
    pub crc32: u32,
    pub compressed_size: u64,
    pub size: u64,
    pub local_header_offset: u64,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The entries of the archive at `path`.
pub fn entries(path: &Path) -> anyhow::Result<Vec<WheelEntry>> {
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    entries_of(&mut f)
        .with_context(|| format!("{}: not a readable wheel (zip) file", path.display()))
}

fn entries_of(f: &mut File) -> anyhow::Result<Vec<WheelEntry>> {
    let len = f.metadata()?.len();
    if len < 22 {
        bail!("{len} bytes is too short for a zip archive");
    }
    let tail_len = len.min(22 + 65535);
    f.seek(SeekFrom::Start(len - tail_len))?;
    let mut tail = vec![0u8; tail_len as usize];
    f.read_exact(&mut tail)?;
    let eocd = (0..=tail.len() - 22)
        .rev()
        .find(|&i| tail[i..i + 4] == *b"PK\x05\x06")
        .context("no end-of-central-directory record")?;
    let count = u16_at(&tail, eocd + 10);
    let cd_size = u32_at(&tail, eocd + 12);
    let cd_offset = u32_at(&tail, eocd + 16);
    if count == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_offset == 0xFFFF_FFFF {
        bail!("zip64 archives are not supported");
    }
    let (cd_size, cd_offset) = (u64::from(cd_size), u64::from(cd_offset));
    if cd_offset + cd_size > len {
        bail!("central directory ({cd_size} bytes at {cd_offset}) runs past the end ({len} bytes)");
    }
    f.seek(SeekFrom::Start(cd_offset))?;
    let mut cd = vec![0u8; cd_size as usize];
    f.read_exact(&mut cd)?;
    let mut out = Vec::with_capacity(usize::from(count));
    let mut i = 0usize;
    for n in 0..count {
        if i + 46 > cd.len() || cd[i..i + 4] != *b"PK\x01\x02" {
            bail!("central directory entry {n} is corrupt");
        }
        let name_len = usize::from(u16_at(&cd, i + 28));
        let extra_len = usize::from(u16_at(&cd, i + 30));
        let comment_len = usize::from(u16_at(&cd, i + 32));
        let end = i + 46 + name_len + extra_len + comment_len;
        if end > cd.len() {
            bail!("central directory entry {n} runs past the directory");
        }
        let compressed_size = u32_at(&cd, i + 20);
        let size = u32_at(&cd, i + 24);
        let local = u32_at(&cd, i + 42);
        if [compressed_size, size, local].contains(&0xFFFF_FFFF) {
            bail!("zip64 entries are not supported");
        }
        out.push(WheelEntry {
            name: String::from_utf8_lossy(&cd[i + 46..i + 46 + name_len]).into_owned(),
            flags: u16_at(&cd, i + 8),
            method: u16_at(&cd, i + 10),
            crc32: u32_at(&cd, i + 16),
            compressed_size: compressed_size.into(),
            size: size.into(),
            local_header_offset: local.into(),
        });
        i = end;
    }
    Ok(out)
}

/// Stream the data of `entry` of the archive at `path` into `sink` (called with each chunk),
/// checking its size and CRC-32.
pub fn read_entry(
    path: &Path,
    entry: &WheelEntry,
    mut sink: impl FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let ctx = || format!("{}: entry {}", path.display(), entry.name);
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata()?.len();
    if entry.flags & 1 != 0 {
        bail!("{}: encrypted", ctx());
    }
    let mut local = [0u8; 30];
    if entry.local_header_offset + 30 > len {
        bail!("{}: local header past the end of the archive", ctx());
    }
    f.seek(SeekFrom::Start(entry.local_header_offset))?;
    f.read_exact(&mut local)?;
    if local[..4] != *b"PK\x03\x04" {
        bail!("{}: corrupt local header", ctx());
    }
    let data_start = entry.local_header_offset
        + 30
        + u64::from(u16_at(&local, 26))
        + u64::from(u16_at(&local, 28));
    if data_start + entry.compressed_size > len {
        bail!("{}: data runs past the end of the archive", ctx());
    }
    f.seek(SeekFrom::Start(data_start))?;
    let raw = f.take(entry.compressed_size);
    let mut reader: Box<dyn Read> = match entry.method {
        0 => Box::new(raw),
        8 => Box::new(flate2::read::DeflateDecoder::new(raw)),
        m => bail!(
            "{}: compression method {m} (only stored and deflate are supported)",
            ctx()
        ),
    };
    let mut crc = flate2::Crc::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("{}: corrupt data", ctx()))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > entry.size {
            bail!(
                "{}: inflates to more than its stated {} bytes",
                ctx(),
                entry.size
            );
        }
        crc.update(&buf[..n]);
        sink(&buf[..n])?;
    }
    if total != entry.size {
        bail!("{}: {total} bytes, the archive says {}", ctx(), entry.size);
    }
    if crc.sum() != entry.crc32 {
        bail!(
            "{}: CRC-32 {:08x}, the archive says {:08x}",
            ctx(),
            crc.sum(),
            entry.crc32
        );
    }
    Ok(())
}
