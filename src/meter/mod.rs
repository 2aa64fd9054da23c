//! Energy meters: what a call really cost in joules, beside the formula's
//! charge. One small trait, [`EnergyMeter`], with one implementation per
//! counter this machine may have:
//!
//! - [`nvml`]: NVIDIA GPUs, NVML's total-energy counter (millijoules since the
//!   driver loaded), through `nvml-wrapper`, which opens `libnvidia-ml.so` at run
//!   time; a build or a machine without the NVIDIA driver simply has no NVML meter;
//! - [`rapl`]: Linux CPUs, RAPL through `/sys/class/powercap/intel-rapl*/energy_uj`
//!   (package zones, microjoules, wrapping at `max_energy_range_uj`);
//! - Apple silicon: no meter. Apple documents no energy counter an
//!   unprivileged program can read (the IOReport energy channels `powermetrics`
//!   uses are a private, undocumented interface, and `powermetrics` itself
//!   needs root and is a sampling tool, not a counter), so Joule reports it as missing;
//! - [`fake`]: test meters, labelled as such in every record: `fake-file:PATH`
//!   reads a cumulative joule count from a file, `fake-power:WATTS` integrates
//!   a constant power over wall time. They exist to test the whole path on a
//!   machine without a meter; their numbers are not measurements.
//!
//! Every meter is machine-wide: it counts everything the GPUs or CPU
//! packages consumed, not only Joule's work. [`probe`] lists which meters
//! this machine has and why a missing one is missing; [`open`] opens the
//! meter a [`MeterChoice`] names. [`attribution`] splits the energy of each
//! batched forward step among the step's sequences; [`run_meter`] keeps a
//! run folder's `meter.json`, one record per session that played the run.

pub mod attribution;
pub(crate) mod fake;
pub(crate) mod fit;
pub(crate) mod nvml;
pub(crate) mod rapl;
pub mod run_meter;

use serde::{Deserialize, Serialize};

/// A meter read that failed (the counter vanished, permission, bad text).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("energy meter `{meter}`: {message}")]
pub struct MeterError {
    pub meter: String,
    pub message: String,
}

/// A cumulative energy counter.
pub trait EnergyMeter: Send {
    /// A short label recorded with every measurement (`rapl`, `nvml`, `fake-power:50`).
    fn name(&self) -> String;
    /// Joules consumed since the meter was opened (never decreasing: counter
    /// wrap-around is handled inside, as long as reads are less than one
    /// wrap period apart).
    fn joules(&mut self) -> Result<f64, MeterError>;
}

/// Which meter to use (`[llm] meter`, `--meter`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum MeterChoice {
    /// Every meter this machine has, summed (GPUs and CPU packages); none if it has none.
    #[default]
    Auto,
    /// No metering.
    None,
    Nvml,
    Rapl,
    /// A test meter reading a cumulative joule count from a file.
    FakeFile(std::path::PathBuf),
    /// A test meter: constant watts × wall time.
    FakePower(f64),
}

impl std::str::FromStr for MeterChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "none" => Ok(Self::None),
            "nvml" => Ok(Self::Nvml),
            "rapl" => Ok(Self::Rapl),
            _ => {
                if let Some(p) = s.strip_prefix("fake-file:") {
                    if p.is_empty() {
                        return Err("expected a file after `fake-file:`".into());
                    }
                    Ok(Self::FakeFile(p.into()))
                } else if let Some(w) = s.strip_prefix("fake-power:") {
                    match w.parse::<f64>() {
                        Ok(w) if w >= 0.0 && w.is_finite() => Ok(Self::FakePower(w)),
                        _ => Err(format!(
                            "expected watts (a number >= 0) after `fake-power:`, got `{w}`"
                        )),
                    }
                } else {
                    Err(format!(
                        "expected `auto`, `none`, `nvml`, `rapl`, `fake-file:PATH` or `fake-power:WATTS`, got `{s}`"
                    ))
                }
            }
        }
    }
}

impl std::fmt::Display for MeterChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => write!(f, "auto"),
            Self::None => write!(f, "none"),
            Self::Nvml => write!(f, "nvml"),
            Self::Rapl => write!(f, "rapl"),
            Self::FakeFile(p) => write!(f, "fake-file:{}", p.display()),
            Self::FakePower(w) => write!(f, "fake-power:{w}"),
        }
    }
}

impl Serialize for MeterChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for MeterChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether one kind of meter is present here, and if not, why not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    /// `nvml`, `rapl`, `apple`.
    pub kind: &'static str,
    /// What it measures when present (`2 GPUs: NVIDIA H100 …`), or why it is missing.
    pub detail: String,
    pub available: bool,
}

/// Every real meter kind and whether this machine has it.
pub fn probe() -> Vec<Probe> {
    let mut out = Vec::new();
    out.push(match nvml::NvmlMeter::open() {
        Ok(m) => Probe {
            kind: "nvml",
            detail: m.describe(),
            available: true,
        },
        Err(why) => Probe {
            kind: "nvml",
            detail: why,
            available: false,
        },
    });
    out.push(
        match rapl::RaplMeter::open(std::path::Path::new(rapl::POWERCAP)) {
            Ok(m) => Probe {
                kind: "rapl",
                detail: m.describe(),
                available: true,
            },
            Err(why) => Probe {
                kind: "rapl",
                detail: why,
                available: false,
            },
        },
    );
    out.push(Probe {
        kind: "apple",
        detail: apple_reason().into(),
        available: false,
    });
    out
}

fn apple_reason() -> &'static str {
    if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        "Apple silicon has no documented energy counter a program can read (IOReport is private; powermetrics needs root and samples power, it is no counter)"
    } else {
        "not Apple silicon (and Apple documents no energy counter to read there either)"
    }
}

/// Several meters read as one (GPUs and CPU packages together).
struct Sum(Vec<Box<dyn EnergyMeter>>);

impl EnergyMeter for Sum {
    fn name(&self) -> String {
        self.0
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join("+")
    }
    fn joules(&mut self) -> Result<f64, MeterError> {
        let mut total = 0.0;
        for m in &mut self.0 {
            total += m.joules()?;
        }
        Ok(total)
    }
}

/// Open the meter `choice` names. `Ok(None)`: no metering (`none`, or `auto`
/// on a machine without meters; the second string says why, for the
/// message that nothing was measured). A meter named explicitly that is
/// missing is an error saying why.
pub fn open(choice: &MeterChoice) -> Result<(Option<Box<dyn EnergyMeter>>, String), String> {
    match choice {
        MeterChoice::None => Ok((None, "metering is off (meter = \"none\")".into())),
        MeterChoice::Auto => {
            let mut found: Vec<Box<dyn EnergyMeter>> = Vec::new();
            let mut missing = Vec::new();
            match nvml::NvmlMeter::open() {
                Ok(m) => found.push(Box::new(m)),
                Err(why) => missing.push(format!("nvml: {why}")),
            }
            match rapl::RaplMeter::open(std::path::Path::new(rapl::POWERCAP)) {
                Ok(m) => found.push(Box::new(m)),
                Err(why) => missing.push(format!("rapl: {why}")),
            }
            missing.push(format!("apple: {}", apple_reason()));
            let why = format!("no energy meter on this machine ({})", missing.join("; "));
            Ok(match found.len() {
                0 => (None, why),
                1 => (found.pop(), String::new()),
                _ => (Some(Box::new(Sum(found))), String::new()),
            })
        }
        MeterChoice::Nvml => nvml::NvmlMeter::open()
            .map(|m| (Some(Box::new(m) as Box<dyn EnergyMeter>), String::new()))
            .map_err(|why| format!("meter `nvml`: {why}")),
        MeterChoice::Rapl => rapl::RaplMeter::open(std::path::Path::new(rapl::POWERCAP))
            .map(|m| (Some(Box::new(m) as Box<dyn EnergyMeter>), String::new()))
            .map_err(|why| format!("meter `rapl`: {why}")),
        MeterChoice::FakeFile(p) => fake::FileMeter::open(p)
            .map(|m| (Some(Box::new(m) as Box<dyn EnergyMeter>), String::new()))
            .map_err(|e| e.to_string()),
        MeterChoice::FakePower(w) => Ok((Some(Box::new(fake::PowerMeter::new(*w))), String::new())),
    }
}

/// The increase of a counter that counts up to `max_range` and then starts
/// again at 0: `now − prev`, or `max_range − prev + now` when it wrapped
/// (one wrap at most between two reads; RAPL's convention, as `turbostat`
/// and the powercap documentation use it).
pub fn counter_delta(prev: u64, now: u64, max_range: u64) -> u64 {
    if now >= prev {
        now - prev
    } else {
        max_range.saturating_sub(prev).saturating_add(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_delta_handles_wrap_around() {
        assert_eq!(counter_delta(100, 250, 1000), 150);
        assert_eq!(counter_delta(900, 50, 1000), 150);
        assert_eq!(counter_delta(1000, 0, 1000), 0);
        assert_eq!(counter_delta(7, 7, 1000), 0);
    }

    #[test]
    fn meter_choices_parse_and_print_back() {
        for s in [
            "auto",
            "none",
            "nvml",
            "rapl",
            "fake-file:/tmp/x",
            "fake-power:50",
        ] {
            let c: MeterChoice = s.parse().unwrap();
            assert_eq!(c.to_string(), s);
        }
        let e = "gpu".parse::<MeterChoice>().unwrap_err();
        assert!(e.contains("expected `auto`"), "{e}");
        assert!("fake-power:-1".parse::<MeterChoice>().is_err());
        assert!("fake-power:x".parse::<MeterChoice>().is_err());
        assert!("fake-file:".parse::<MeterChoice>().is_err());
    }

    #[test]
    fn probe_names_every_kind_and_says_why_when_missing() {
        let p = probe();
        let kinds: Vec<_> = p.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, ["nvml", "rapl", "apple"]);
        for x in &p {
            assert!(!x.detail.is_empty(), "{x:?}");
        }
        assert!(!p[2].available);
    }

    #[test]
    fn explicit_missing_meter_is_an_error_and_none_measures_nothing() {
        let (m, why) = open(&MeterChoice::None).unwrap();
        assert!(m.is_none());
        assert!(why.contains("off"));
        if !probe()[1].available {
            let e = open(&MeterChoice::Rapl).err().unwrap();
            assert!(e.starts_with("meter `rapl`: "), "{e}");
        }
    }
}
