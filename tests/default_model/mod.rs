//! The default model (SmolLM2-135M-Instruct Q4_1) for the end-to-end tests,
//! obtained the way a user obtains it: `scripts/fetch-default-model.sh`,
//! which `.ci/run` calls first. Under CI a missing model fails the test;
//! elsewhere the test says it was skipped.

use std::path::{Path, PathBuf};

use joule::inference::files::manifest::{Catalog, DEFAULT_MODEL};
use joule::inference::files::sources::Sources;

/// The cached default model's file, or `None` (with a note) where it is not
/// cached outside CI.
pub fn cached() -> Option<PathBuf> {
    let catalog = Catalog::embedded().expect("embedded manifests");
    let manifest = catalog.get(DEFAULT_MODEL).expect("default manifest");
    match Sources::from_env().find_cached(manifest) {
        Some(found) => Some(found.path),
        None if std::env::var_os("CI").is_some() => panic!(
            "the default model is not cached: .ci/run must run scripts/fetch-default-model.sh first"
        ),
        None => {
            eprintln!("skipped: run scripts/fetch-default-model.sh to fetch {DEFAULT_MODEL}");
            None
        }
    }
}

/// A one-round society config: `agent_1` on the default model (`model`, as the stand-in for
/// `qwen3-8b`), `agent_2` scripted (`easiest`), one call each, 120 tokens at temperature 0
/// (tests/full/llm_society.rs and tests/full/progress_output.rs).
#[allow(dead_code)] // not every test that includes this module runs a society
pub fn one_round_society(name: &str, model: &Path) -> String {
    ONE_ROUND_SOCIETY
        .replace("__NAME__", name)
        .replace("__MODEL__", &model.display().to_string())
}

#[allow(dead_code)]
const ONE_ROUND_SOCIETY: &str = r#"
name = "__NAME__"
mode = "faithful"
objective = "comp"
use_votes = false
max_rounds = 1
seed = 7
max_calls = 1

[difficulty]
easy = 1
medium = 1
hard = 0

[jobs]
source = "procedural"

[generation]
max_tokens = 120
temperature = 0.0
thinking = false

[llm]
device = "cpu"
structured = "constrained"
stand_in = "__MODEL__"
max_string_chars = 60

[[roster]]
agent_id = "agent_1"
model = "qwen3-8b"
model_name = "qwen3:8b"
size = 8
init_energy = 1500.0

[[roster]]
agent_id = "agent_2"
model = "scripted:easiest"
model_name = "scripted"
size = 4
init_energy = 1500.0
"#;
