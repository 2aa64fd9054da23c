#!/usr/bin/env bash
# Make the Q4_K_M benchmark file: the default model (SmolLM2-135M-Instruct Q4_1) requantised to
# Q4_K_M by llama.cpp's own `llama-quantize --allow-requantize` (Ollama's files are Q4_K_M; this
# gives the k-quant kernels a real file of that mix: Q4_K and Q6_K matrices, Q8_0/Q5_0 fallbacks
# where a row length is not a multiple of 256). The file is cached outside the repository
# (${JOULE_HOME:-~/.cache/joule}/models/bench/), never committed; a second run does nothing.
#
# Usage: scripts/make-q4km-model.sh   (prints the file's path as the last line of stdout)
set -euo pipefail
cd "$(dirname "$0")/.."
home=${JOULE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}
out=$home/models/bench/SmolLM2-135M-Instruct.Q4_K_M.gguf
if [[ -s $out ]]; then
    echo "$out"
    exit 0
fi
src=${JOULE_Q41_MODEL:-$home/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf}
[[ -s $src ]] || src=$(./scripts/fetch-default-model.sh | tail -1)
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
mkdir -p "$(dirname "$out")"
"$bin/llama-quantize" --allow-requantize "$src" "$out.tmp" Q4_K_M 2 >&2
mv "$out.tmp" "$out"
echo "$out"
