//! The RAPL meter: Linux's powercap interface to the CPU's Running Average
//! Power Limit energy counters, `/sys/class/powercap/intel-rapl:N/energy_uj`
//! (microjoules; AMD CPUs appear under the same name).
//!
//! Only top-level package zones (`name` = `package-N`) are summed: their
//! sub-zones (`intel-rapl:N:M`: cores, uncore, DRAM) and `psys` (the whole
//! platform) overlap them, and `intel-rapl-mmio` zones are a second view of
//! the same packages. A machine whose only zone is `psys` is metered by it.
//! Each counter wraps at its `max_energy_range_uj`; [`super::counter_delta`]
//! adds one wrap between two reads (Joule reads at every forward step, far
//! more often than the minutes a wrap takes).
//!
//! Since Linux 5.10 `energy_uj` is readable by root only (the Platypus
//! side channel); [`RaplMeter::open`] says so when that is why it fails.

use std::path::{Path, PathBuf};

use super::{counter_delta, EnergyMeter, MeterError};

/// Where the kernel exposes powercap zones.
pub const POWERCAP: &str = "/sys/class/powercap";

#[derive(Debug)]
struct Zone {
    dir: PathBuf,
    name: String,
    max_range: u64,
    last: u64,
    total_uj: u128,
}

/// The sum of the package zones' counters.
#[derive(Debug)]
pub struct RaplMeter {
    zones: Vec<Zone>,
}

fn read_u64(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            format!(
                "no permission to read {} (since Linux 5.10 only root may read RAPL counters; run as root, or `chmod a+r` the file)",
                path.display()
            )
        } else {
            format!("cannot read {}: {e}", path.display())
        }
    })?;
    text.trim().parse::<u64>().map_err(|_| {
        format!(
            "{}: expected an unsigned integer, got `{}`",
            path.display(),
            text.trim()
        )
    })
}

/// Top-level zone folders (`intel-rapl:N`) under `root`, by name.
fn top_zones(root: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(root).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "{} does not exist: the kernel exposes no powercap interface (not Linux, a VM or container without RAPL, or the intel_rapl driver is not loaded)",
                root.display()
            )
        } else {
            format!("cannot list {}: {e}", root.display())
        }
    })?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.strip_prefix("intel-rapl:")
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}

impl RaplMeter {
    /// Open the package zones under `root` (normally [`POWERCAP`]); the
    /// error says why there is no RAPL meter.
    pub fn open(root: &Path) -> Result<Self, String> {
        let dirs = top_zones(root)?;
        if dirs.is_empty() {
            return Err(format!(
                "no intel-rapl zones under {} (the CPU or the VM exposes no RAPL counters)",
                root.display()
            ));
        }
        let mut zones = Vec::new();
        for dir in dirs {
            let name = std::fs::read_to_string(dir.join("name"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            zones.push((dir, name));
        }
        let packages: Vec<_> = zones
            .iter()
            .filter(|(_, n)| n.starts_with("package"))
            .cloned()
            .collect();
        let chosen = if packages.is_empty() {
            zones.into_iter().filter(|(_, n)| n == "psys").collect()
        } else {
            packages
        };
        if chosen.is_empty() {
            return Err(format!(
                "no package or psys zone under {} (zones found, none of them a CPU package)",
                root.display()
            ));
        }
        let mut out = Vec::new();
        for (dir, name) in chosen {
            let max_range = read_u64(&dir.join("max_energy_range_uj"))?;
            let last = read_u64(&dir.join("energy_uj"))?;
            out.push(Zone {
                dir,
                name,
                max_range,
                last,
                total_uj: 0,
            });
        }
        Ok(RaplMeter { zones: out })
    }

    /// The zones it sums, for `joule meters`.
    pub fn describe(&self) -> String {
        let names: Vec<String> = self
            .zones
            .iter()
            .map(|z| format!("{} ({})", z.name, z.dir.display()))
            .collect();
        format!("CPU packages: {}", names.join(", "))
    }
}

impl EnergyMeter for RaplMeter {
    fn name(&self) -> String {
        "rapl".into()
    }

    fn joules(&mut self) -> Result<f64, MeterError> {
        let mut total: u128 = 0;
        for z in &mut self.zones {
            let now = read_u64(&z.dir.join("energy_uj")).map_err(|message| MeterError {
                meter: "rapl".into(),
                message,
            })?;
            z.total_uj += counter_delta(z.last, now, z.max_range) as u128;
            z.last = now;
            total += z.total_uj;
        }
        Ok(total as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, dir: &str, name: &str, energy: u64, max: u64) {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(d.join("energy_uj"), format!("{energy}\n")).unwrap();
        std::fs::write(d.join("max_energy_range_uj"), format!("{max}\n")).unwrap();
    }

    fn set(root: &Path, dir: &str, energy: &str) {
        std::fs::write(root.join(dir).join("energy_uj"), energy).unwrap();
    }

    #[test]
    fn sums_package_zones_only_and_handles_wrap_around() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        zone(r, "intel-rapl:0", "package-0", 1_000_000, 10_000_000);
        zone(r, "intel-rapl:1", "package-1", 9_500_000, 10_000_000);
        // Overlapping zones that must not be added.
        zone(r, "intel-rapl:0:0", "core", 5, 10_000_000);
        zone(r, "intel-rapl-mmio:0", "package-0", 5, 10_000_000);
        zone(r, "intel-rapl:2", "psys", 5, 10_000_000);
        let mut m = RaplMeter::open(r).unwrap();
        assert_eq!(m.zones.len(), 2);
        assert_eq!(m.joules().unwrap(), 0.0);
        set(r, "intel-rapl:0", "3000000\n");
        // package-1 wraps: 9.5 J → 10 J → 0 → 1 J = 1.5 J.
        set(r, "intel-rapl:1", "1000000\n");
        set(r, "intel-rapl:0:0", "9999999\n");
        assert_eq!(m.joules().unwrap(), 2.0 + 1.5);
        set(r, "intel-rapl:1", "1250000\n");
        assert_eq!(m.joules().unwrap(), 3.75);
        assert!(m.describe().contains("package-0"));
    }

    #[test]
    fn psys_alone_is_used() {
        let t = tempfile::tempdir().unwrap();
        zone(t.path(), "intel-rapl:0", "psys", 0, 100);
        let m = RaplMeter::open(t.path()).unwrap();
        assert_eq!(m.zones[0].name, "psys");
    }

    #[test]
    fn says_why_there_is_no_meter() {
        let t = tempfile::tempdir().unwrap();
        let e = RaplMeter::open(&t.path().join("powercap")).unwrap_err();
        assert!(e.contains("does not exist") && e.contains("VM"), "{e}");
        let e = RaplMeter::open(t.path()).unwrap_err();
        assert!(e.contains("no intel-rapl zones"), "{e}");
        zone(t.path(), "intel-rapl:0", "package-0", 0, 100);
        set(t.path(), "intel-rapl:0", "twelve");
        let e = RaplMeter::open(t.path()).unwrap_err();
        assert!(
            e.contains("expected an unsigned integer, got `twelve`"),
            "{e}"
        );
    }

    #[test]
    fn a_read_failing_mid_run_is_an_error_not_a_number() {
        let t = tempfile::tempdir().unwrap();
        zone(t.path(), "intel-rapl:0", "package-0", 10, 1000);
        let mut m = RaplMeter::open(t.path()).unwrap();
        std::fs::remove_file(t.path().join("intel-rapl:0/energy_uj")).unwrap();
        let e = m.joules().unwrap_err();
        assert_eq!(e.meter, "rapl");
        assert!(e.message.contains("cannot read"), "{e}");
    }
}
