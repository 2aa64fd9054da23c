#!/usr/bin/env bash
# The test command of the README: build and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release 2>&1
