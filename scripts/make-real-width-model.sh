#!/usr/bin/env bash
# Make the real-width Q4_K_M benchmark file: a dense `llama` model with Qwen3-8B's
# widths (hidden 4096, FFN 12288, 32/8 heads of 128, vocabulary 151,936), LAYERS layers
# (default 4) of random weights, written in f16 by scripts/make-real-width-model.py with
# llama.cpp's own gguf-py and quantised by its `llama-quantize` to Q4_K_M (Q4_K matrices, Q6_K
# for the output head and part of attn_v/ffn_down). Cached outside the repository
# (${JOULE_HOME:-~/.cache/joule}/models/bench/); a second run does nothing.
#
# Usage: scripts/make-real-width-model.sh [LAYERS]   (prints the file's path as the last line)
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-4}
home=${JOULE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}
out=$home/models/bench/real-width-${layers}L.Q4_K_M.gguf
if [[ -s $out ]]; then
    echo "$out"
    exit 0
fi
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
gguf_py=${GGUF_PY:-$home/llama.cpp-de3ff81/src/gguf-py}
[[ -d $gguf_py ]] || { echo "gguf-py not found at $gguf_py (set GGUF_PY)" >&2; exit 1; }
tok=${JOULE_Q41_MODEL:-$home/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf}
[[ -s $tok ]] || tok=$(./scripts/fetch-default-model.sh | tail -1)
mkdir -p "$(dirname "$out")"
f16=$out.f16.tmp
python3 scripts/make-real-width-model.py "$gguf_py" "$tok" "$f16" "$layers" >&2
"$bin/llama-quantize" "$f16" "$out.tmp" Q4_K_M 2 >&2
rm -f "$f16"
mv "$out.tmp" "$out"
echo "$out"
