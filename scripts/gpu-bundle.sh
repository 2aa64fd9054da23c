#!/usr/bin/env bash
# Prepare what scripts/gpu-check.sh needs on a GPU machine that has no Rust toolchain and no
# network: builds `--features cuda` here (no GPU needed; toolkit from
# scripts/fetch-cuda-toolkit.sh), and writes into .gpu-bundle/ (ignored by git):
#   bin/joule.xz, bin/<test>.xz   joule and the test executables gpu-check runs (the lib's unit
#                                 tests with the kernel tests, and the quick tier with golden_logits and roster_*), stripped
#   lib/                          system libraries joule links that a GPU image may lack
#   manifest-dir                  the folder they were built in (the tests read fixtures there;
#                                 gpu-check links it to the working tree)
#   vocab/*.gguf.xz, *.jinja      the vocabularies gpu-check's synthesized roster models copy in
#                                 (gemma-4, llama-bpe, qwen2, qwen35 from ../shared/data/tokenizers:
#                                 36 MB, 7.2 MB after xz) and Nemotron's chat template
#   runs.tar.xz                   the reference runs gpu-check's trace replays (the four JSON
#                                 files of each run under ../shared/data/reference-runs/
#                                 energy-society)
#   model/smollm2.part-*, sha256  the default model in parts of at most $JOULE_GPU_PART_MB MiB
#                                 (94 MiB; JOULE_GPU_BUNDLE_SMOLLM2=0 leaves it out: only
#                                 gpu-check's last, optional steps use it)
# JOULE_GPU_BUNDLE_TESTS (default "lib quick") picks the test executables: "lib"
# alone is enough for the kernel tests. Where the bundle must be small (a copy limited to 64 MiB):
# JOULE_GPU_BUNDLE_SMOLLM2=0 JOULE_GPU_BUNDLE_TESTS=lib keeps joule, the lib's tests and the
# vocabularies (the CPU build's joule is 7 MB after strip and xz; the CUDA build adds candle's
# kernels). CUDA_COMPUTE_CAP (default 90: H100/H200) is the one
# target candle's own kernels are built for.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
root=$(./scripts/fetch-cuda-toolkit.sh | tail -n1)
cache=${JOULE_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}
export CUDA_ROOT=$root CUDA_PATH=$root CUDA_HOME=$root PATH=$root/bin:$PATH
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
target=${JOULE_CUDA_TARGET:-$cache/target-cuda-$CUDA_COMPUTE_CAP}
out=${JOULE_GPU_BUNDLE:-$repo/.gpu-bundle}
part_mb=${JOULE_GPU_PART_MB:-40}
tests=${JOULE_GPU_BUNDLE_TESTS:-lib quick}
shared=$repo/../shared/data

model=""
[[ ${JOULE_GPU_BUNDLE_SMOLLM2:-1} == 1 ]] && model=$(./scripts/fetch-default-model.sh | tail -n1)
cargo build --release --features cuda --target-dir "$target" --bin joule
cargo test --release --features cuda --target-dir "$target" --no-run --message-format=json \
  >"$target/gpu-bundle-tests.json"

rm -rf "$out"
mkdir -p "$out/bin" "$out/model" "$out/vocab"
cp "$target/release/joule" "$out/bin/joule"
python3 - "$target/gpu-bundle-tests.json" "$tests" <<'EOF' | while IFS=$'\t' read -r name exe; do cp "$exe" "$out/bin/$name"; done
import fnmatch, json, sys
wanted = sys.argv[2].split()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except Exception:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"].get("test"):
        continue
    kind, name = m["target"]["kind"][0], m["target"]["name"]
    if kind == "lib":
        name = "lib"
    elif kind != "test":
        continue
    if any(fnmatch.fnmatch(name, w) for w in wanted):
        print(f"{name}\t{m['executable']}")
EOF
# System libraries joule links besides glibc, the C++ runtime and CUDA's (fontconfig and
# freetype for the report's plots): gpu-check falls back to these copies where the machine lacks
# them.
mkdir -p "$out/lib"
ldd "$out/bin/joule" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
  case $name in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
    libcuda.so*|libcudart.so*|libcublas*|libcurand.so*|libnvrtc*) ;;
    *) cp -L "$path" "$out/lib/$name" ;;
  esac
done
for f in "$out"/bin/*; do
  strip --strip-debug "$f" 2>/dev/null || true
  xz -T0 -6 "$f"
done
# The vocabularies and the chat template of gpu-check's synthesis (--vocab, --chat-template).
for v in gemma-4 llama-bpe qwen2 qwen35; do
  xz -T0 -6 -c "$shared/tokenizers/ggml-vocab-$v.gguf" >"$out/vocab/ggml-vocab-$v.gguf.xz"
done
cp "$shared/chat-templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja" "$out/vocab/"
echo "$repo" >"$out/manifest-dir"
# The reference runs of gpu-check's trace: only the files `joule bench trace` reads.
(cd "$shared/reference-runs/energy-society" &&
  find . -path '*/run_*/*' \( -name config.json -o -name transcript.json -o -name token_usage.json \
    -o -name agents.json \) -print0 | sort -z | tar --null -T - -cf - | xz -T0 -6 >"$out/runs.tar.xz")
if [[ -n $model ]]; then
  split -b "${part_mb}M" -d "$model" "$out/model/smollm2.part-"
  sha256sum "$model" | cut -d' ' -f1 >"$out/model/sha256"
fi
du -ah "$out" | sort -k2 >&2
echo "$out"
