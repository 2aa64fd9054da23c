//! NumPy `.npy` files of little-endian float32 arrays (format version 1.0,
//! C order): written by `joule logits`, read by the golden tests that
//! compare against logits transformers saved with `numpy.save`.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8] = b"\x93NUMPY";

/// Write `data` (row-major, `shape` dims) as a float32 `.npy` file.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let n: usize = shape.iter().product();
    if n != data.len() {
        bail!("npy: shape {shape:?} holds {n} values, got {}", data.len());
    }
    let dims = match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(&out)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Read a float32 (`<f4`), C-order `.npy` file: its shape and values.
pub fn read_f32(path: &Path) -> Result<(Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let bad = |m: &str| anyhow::anyhow!("{}: not a float32 .npy file: {m}", path.display());
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad("no NUMPY magic"));
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(&format!("format version {v}"))),
    };
    let header = bytes
        .get(hstart..hstart + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("truncated header"))?;
    if !header.contains("'descr': '<f4'") {
        return Err(bad("dtype is not '<f4'"));
    }
    if header.contains("'fortran_order': True") {
        return Err(bad("Fortran order"));
    }
    let shape_txt = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let shape: Vec<usize> = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| bad(&format!("shape entry `{s}`")))
        })
        .collect::<Result<_>>()?;
    let n: usize = shape.iter().product();
    let body = &bytes[hstart + hlen..];
    if body.len() != n * 4 {
        return Err(bad(&format!(
            "shape {shape:?} needs {} bytes of data, the file has {}",
            n * 4,
            body.len()
        )));
    }
    let data = body
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((shape, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
        write_f32(&p, &[2, 3], &data).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!((bytes.len() - 24) % 64, 0, "header padded to 64 bytes");
        assert_eq!(read_f32(&p).unwrap(), (vec![2, 3], data));
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(read_f32(&p)
            .unwrap_err()
            .to_string()
            .contains("needs 24 bytes"));
        std::fs::write(&p, b"junk").unwrap();
        assert!(read_f32(&p).is_err());
        assert!(write_f32(&p, &[2, 2], &[1.0]).is_err());
    }
}
