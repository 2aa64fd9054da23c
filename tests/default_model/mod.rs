//! The default model (SmolLM2-135M-Instruct Q4_1) for the end-to-end tests,
//! obtained the way a user obtains it: `scripts/fetch-default-model.sh`,
//! which `.ci/run` calls first. Under CI a missing model fails the test;
//! elsewhere the test says it was skipped.

use std::path::PathBuf;

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
