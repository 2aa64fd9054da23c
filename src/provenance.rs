//! A run's provenance: `provenance.json` in its folder says what produced its records, so a
//! result can be cited and checked. One *session* per time the run was played: the Joule build
//! (version, git commit, whether its sources differed from that commit, features), the machine
//! (CPU, cores, memory, the device, SIMD level and threads the kernels used), every model that
//! answered (its GGUF file with size, sha256, architecture and tensor types, or the server and
//! the name it serves), the job source (the questions' digest), the command line and when it
//! started. A resumed run appends a session saying from which round it went on, so a run
//! continued by another build or on another file says so.
//!
//! A race experiment's folder (`race::run`) holds one too, a session per start.
//!
//! The file is not one of the run's records: one config gives the same records on any machine,
//! thread count or build that plays the same rules, but not the same provenance (time, machine,
//! command), so record comparisons and resumes leave it out. Reports read it
//! (`report::provenance`).

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::backend::{KernelRecord, ModelOrigin};

pub mod summary;

/// The file's name in a run folder.
pub const FILE: &str = "provenance.json";

/// Every session that played the run, first to last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Provenance {
    pub sessions: Vec<Session>,
}

/// One time the run was played.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Session {
    /// The round it played from: 1, or the round after those a resume kept. For a race
    /// experiment (`race::run`), 1 + the races already finished when it started.
    pub from_round: u32,
    /// When the session started, UTC, RFC 3339 to the second.
    pub started_utc: String,
    /// The command line, program name first.
    pub command: Vec<String>,
    pub build: Build,
    pub machine: Machine,
    /// Where each model-backed agent's answers came from; empty when every agent is scripted.
    pub models: Vec<ModelOrigin>,
    pub jobs: Jobs,
}

/// The Joule build that played a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Build {
    /// The crate's version (`Cargo.toml`).
    pub version: String,
    /// The git commit it was built from; absent for a build outside a git checkout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Whether the build's sources (`src`, `kernels`, `models`, `configs`, the build files)
    /// differed from that commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty: Option<bool>,
    /// Cargo features compiled in (`cuda`, `metal`).
    pub features: Vec<String>,
    /// `release` or `debug`.
    pub profile: String,
}

impl Build {
    /// This binary.
    pub fn this() -> Build {
        let mut features = Vec::new();
        if cfg!(feature = "cuda") {
            features.push("cuda".to_string());
        }
        if cfg!(feature = "metal") {
            features.push("metal".to_string());
        }
        Build {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: option_env!("JOULE_GIT_COMMIT").map(str::to_string),
            dirty: option_env!("JOULE_GIT_DIRTY").map(|d| d == "1"),
            features,
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_string(),
        }
    }

    /// `joule 0.1.0 (commit 0123456789ab)`, with `, modified sources` for a dirty build and
    /// `(commit unknown)` without a commit.
    pub fn label(&self) -> String {
        format!("joule {}", self.version_text(12))
    }

    /// `0.1.0 (commit …)` with the commit's first `digits` hex digits, as [`Self::label`].
    pub fn version_text(&self, digits: usize) -> String {
        match &self.commit {
            Some(c) => format!(
                "{} (commit {}{})",
                self.version,
                c.chars().take(digits).collect::<String>(),
                if self.dirty == Some(true) {
                    ", modified sources"
                } else {
                    ""
                }
            ),
            None => format!("{} (commit unknown)", self.version),
        }
    }
}

/// What `joule --version` prints after the name: this build's version and its whole commit.
pub fn version_line() -> &'static str {
    static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LINE.get_or_init(|| Build::this().version_text(40))
}

/// The machine a session ran on, and how its kernels ran there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Machine {
    /// `linux`, `macos`, … and the CPU architecture (`x86_64`, `aarch64`).
    pub os: String,
    pub arch: String,
    /// The CPU's model name (Linux: `/proc/cpuinfo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Logical CPUs this process may use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<usize>,
    /// Total memory in GiB (Linux: `/proc/meminfo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<f64>,
    /// Where the models ran (`cpu`, `cuda`, `metal`, or `server` for a served backend); absent
    /// when every agent is scripted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The SIMD level of Joule's CPU kernels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simd: Option<String>,
    /// Worker threads of the kernels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
}

impl Machine {
    /// This machine, with the device, SIMD level and threads of `kernels` (the run's kernel
    /// record, `Backend::kernels`).
    pub fn this(kernels: Option<&KernelRecord>) -> Machine {
        let host = host();
        Machine {
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            cpu: host.cpu.clone(),
            cpus: std::thread::available_parallelism().ok().map(|n| n.get()),
            memory_gib: host.memory_gib,
            device: kernels.map(|k| match &k.device {
                Some(d) => d.clone(),
                None => "server".to_string(),
            }),
            simd: kernels.and_then(|k| k.simd.clone()),
            threads: kernels.and_then(|k| k.threads),
        }
    }

    /// `Intel Xeon … (2 CPUs), cpu avx512vnni 2 threads`, as a report's table shows it.
    pub fn label(&self) -> String {
        let mut s = self.cpu.clone().unwrap_or_else(|| self.arch.clone());
        if let Some(n) = self.cpus {
            s.push_str(&format!(" ({n} CPUs)"));
        }
        if let Some(d) = &self.device {
            s.push_str(&format!(", {d}"));
            if let Some(simd) = &self.simd {
                s.push_str(&format!(" {simd}"));
            }
            if let Some(t) = self.threads {
                s.push_str(&format!(" {t} threads"));
            }
        }
        s
    }
}

/// What the host reports about itself, read once per process.
struct Host {
    cpu: Option<String>,
    memory_gib: Option<f64>,
}

fn host() -> &'static Host {
    static HOST: std::sync::OnceLock<Host> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|v| !v.is_empty());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<f64>().ok())
            .map(|kib| (kib / (1024.0 * 1024.0) * 10.0).round() / 10.0);
        Host { cpu, memory_gib }
    })
}

/// Where a run's jobs came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Jobs {
    /// The job source's own description (`procedural seed=42 …`, `mmlu-pro-stratified …`).
    pub source: String,
    /// The data file(s) read, for a data set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Questions in the data set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub questions: Option<usize>,
    /// The sha256 of the questions as read (`energy_society::dataset::Dataset::digest`): the same
    /// for the same questions in any file format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl Session {
    /// A session of this process starting at `from_round`, on the backend whose kernel record
    /// and model origins are given.
    pub fn now(
        from_round: u32,
        kernels: Option<&KernelRecord>,
        models: Vec<ModelOrigin>,
        jobs: Jobs,
    ) -> Session {
        Session {
            from_round,
            started_utc: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            build: Build::this(),
            machine: Machine::this(kernels),
            models,
            jobs,
        }
    }
}

/// How many sessions played the run in `dir` (0 without a readable `provenance.json`).
pub fn sessions_in(dir: &Path) -> usize {
    Provenance::read(dir)
        .ok()
        .flatten()
        .map_or(0, |p| p.sessions.len())
}

impl Provenance {
    /// The provenance in `dir`: `Ok(None)` when the folder has none (a run recorded before Joule
    /// wrote provenance, or a reference run); an error naming the file when it cannot be read.
    pub fn read(dir: &Path) -> anyhow::Result<Option<Provenance>> {
        let path = dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("{}: not a provenance record", path.display()))
    }

    /// Write `session` as the only session of the run in `dir` (a run starting from round 1).
    pub fn start(dir: &Path, session: Session) -> anyhow::Result<()> {
        Provenance {
            sessions: vec![session],
        }
        .write(dir)
    }

    /// Append `session` to the provenance in `dir` (a resumed run). A missing or unreadable
    /// file is replaced by one holding this session alone, with a note: the records are the
    /// run's, the provenance only describes them.
    pub fn append(dir: &Path, session: Session) -> anyhow::Result<()> {
        let mut p = match Provenance::read(dir) {
            Ok(Some(p)) => p,
            Ok(None) => Provenance::default(),
            Err(e) => {
                crate::errln!("note: {e:#}; it is written again with this session only");
                Provenance::default()
            }
        };
        p.sessions.push(session);
        p.write(dir)
    }

    fn write(&self, dir: &Path) -> anyhow::Result<()> {
        crate::record::write_json_atomic(dir.join(FILE), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(from_round: u32) -> Session {
        Session::now(
            from_round,
            None,
            vec![ModelOrigin {
                model: "m".into(),
                file: Some("/x/m.gguf".into()),
                sha256: Some("ab".repeat(32)),
                ..Default::default()
            }],
            Jobs {
                source: "procedural seed=1".into(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn this_build_names_its_version_and_the_commit_it_was_built_from() {
        let b = Build::this();
        assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
        // Built from a git checkout (the tests run in one): the commit of HEAD when built.
        let head = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if let Some(head) = head {
            assert_eq!(b.commit.as_deref(), Some(head.as_str()));
            assert!(b.dirty.is_some());
            assert!(b.label().contains(&head[..12]), "{}", b.label());
        }
        let unknown = Build {
            commit: None,
            ..b.clone()
        };
        assert!(unknown.label().ends_with("(commit unknown)"));
        let dirty = Build {
            commit: Some("0123456789abcdef".repeat(2) + "01234567"),
            dirty: Some(true),
            ..b
        };
        assert!(dirty.label().contains("0123456789ab, modified sources"));
    }

    #[test]
    fn a_resume_appends_a_session_and_a_fresh_run_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Provenance::read(dir.path()).unwrap(), None);
        Provenance::start(dir.path(), session(1)).unwrap();
        Provenance::append(dir.path(), session(4)).unwrap();
        let p = Provenance::read(dir.path()).unwrap().unwrap();
        assert_eq!(
            p.sessions.iter().map(|s| s.from_round).collect::<Vec<_>>(),
            [1, 4]
        );
        assert_eq!(
            p.sessions[1].models[0].sha256.as_deref(),
            Some(&*"ab".repeat(32))
        );
        assert!(
            p.sessions[0].started_utc.ends_with('Z'),
            "{}",
            p.sessions[0].started_utc
        );
        Provenance::start(dir.path(), session(1)).unwrap();
        assert_eq!(
            Provenance::read(dir.path())
                .unwrap()
                .unwrap()
                .sessions
                .len(),
            1
        );
        // A corrupt file is named when read, and replaced by a resume.
        std::fs::write(dir.path().join(FILE), "{not json").unwrap();
        let e = format!("{:#}", Provenance::read(dir.path()).unwrap_err());
        assert!(
            e.contains(FILE) && e.contains("not a provenance record"),
            "{e}"
        );
        Provenance::append(dir.path(), session(7)).unwrap();
        assert_eq!(
            Provenance::read(dir.path()).unwrap().unwrap().sessions[0].from_round,
            7
        );
    }

    #[test]
    fn fields_a_later_build_adds_are_no_error() {
        let text = r#"{"sessions":[{"from_round":1,"future":true,"build":{"version":"9.9.9","x":1}}],"y":2}"#;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), text).unwrap();
        let p = Provenance::read(dir.path()).unwrap().unwrap();
        assert_eq!(p.sessions[0].build.version, "9.9.9");
    }

    #[test]
    fn the_machine_label_says_where_the_kernels_ran() {
        let mut k = KernelRecord::served("openai");
        assert_eq!(Machine::this(Some(&k)).device.as_deref(), Some("server"));
        k.device = Some("cpu".into());
        k.simd = Some("avx2".into());
        k.threads = Some(2);
        let m = Machine {
            cpu: Some("Some CPU".into()),
            cpus: Some(4),
            ..Machine::this(Some(&k))
        };
        assert_eq!(m.label(), "Some CPU (4 CPUs), cpu avx2 2 threads");
        assert_eq!(Machine::this(None).device, None);
    }
}
