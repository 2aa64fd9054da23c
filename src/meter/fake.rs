//! Test meters, for exercising metering end to end on a machine without a
//! real meter. Their names start with `fake-` and every record of their
//! numbers carries that name, so they are never mistaken for measurements.
//!
//! - [`FileMeter`] (`fake-file:PATH`): the file holds a cumulative joule count
//!   (a decimal number); each read reads it again. A test (or a person) can
//!   drive it, and can make a read fail by removing or garbling the file.
//! - [`PowerMeter`] (`fake-power:WATTS`): a constant power times the wall time
//!   since the meter was opened.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{EnergyMeter, MeterError};

/// A cumulative joule count read from a file.
pub struct FileMeter {
    path: PathBuf,
    start: f64,
}

fn read_joules(path: &Path) -> Result<f64, MeterError> {
    let err = |message: String| MeterError {
        meter: format!("fake-file:{}", path.display()),
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| err(format!("cannot read {}: {e}", path.display())))?;
    match text.trim().parse::<f64>() {
        Ok(j) if j.is_finite() && j >= 0.0 => Ok(j),
        _ => Err(err(format!(
            "{}: expected a cumulative joule count (a number >= 0), got `{}`",
            path.display(),
            text.trim()
        ))),
    }
}

impl FileMeter {
    pub fn open(path: &Path) -> Result<Self, MeterError> {
        let start = read_joules(path)?;
        Ok(FileMeter {
            path: path.to_path_buf(),
            start,
        })
    }
}

impl EnergyMeter for FileMeter {
    fn name(&self) -> String {
        format!("fake-file:{}", self.path.display())
    }

    fn joules(&mut self) -> Result<f64, MeterError> {
        let now = read_joules(&self.path)?;
        if now < self.start {
            return Err(MeterError {
                meter: self.name(),
                message: format!("the count went back below its first value {}", self.start),
            });
        }
        Ok(now - self.start)
    }
}

/// Constant watts × wall time.
pub struct PowerMeter {
    watts: f64,
    start: Instant,
}

impl PowerMeter {
    pub fn new(watts: f64) -> Self {
        PowerMeter {
            watts,
            start: Instant::now(),
        }
    }
}

impl EnergyMeter for PowerMeter {
    fn name(&self) -> String {
        format!("fake-power:{}", self.watts)
    }

    fn joules(&mut self) -> Result<f64, MeterError> {
        Ok(self.watts * self.start.elapsed().as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_meter_reads_the_count_and_fails_on_bad_text() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("joules");
        std::fs::write(&p, "10.5\n").unwrap();
        let mut m = FileMeter::open(&p).unwrap();
        assert!(m.name().starts_with("fake-file:"));
        std::fs::write(&p, "12").unwrap();
        assert_eq!(m.joules().unwrap(), 1.5);
        std::fs::write(&p, "lots").unwrap();
        let e = m.joules().unwrap_err();
        assert!(e.message.contains("got `lots`"), "{e}");
        std::fs::write(&p, "3").unwrap();
        assert!(m.joules().unwrap_err().message.contains("went back"));
        std::fs::remove_file(&p).unwrap();
        assert!(m.joules().unwrap_err().message.contains("cannot read"));
    }

    #[test]
    fn power_meter_grows_with_time() {
        let mut m = PowerMeter::new(100.0);
        let a = m.joules().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = m.joules().unwrap();
        assert!(b >= a + 0.4, "{a} {b}");
        assert_eq!(m.name(), "fake-power:100");
    }
}
