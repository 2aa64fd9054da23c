#!/usr/bin/env bash
# Compile Joule with `--features cuda` on a machine without a GPU (CI does this so the GPU path
# cannot rot): the toolkit from scripts/fetch-cuda-toolkit.sh; candle's kernels built for the one
# target CUDA_COMPUTE_CAP (default 80), Joule's own for sm_80 and sm_90 plus PTX; a target folder
# of its own outside the repository ($JOULE_CUDA_TARGET, default <cache>/target-cuda-<cap>), so it
# is cached across fresh clones and never invalidates the CPU build. A cold build is long (candle
# compiles llama.cpp-derived quantised matmul kernels with nvcc, CUDAFORGE_THREADS at a time);
# later ones rebuild the joule crate only. Compile and link only: a CUDA build needs the NVIDIA driver
# (libcuda.so.1) to start, so nothing built here is run.
#
#   scripts/build-cuda.sh            # the joule binary
#   scripts/build-cuda.sh --tests    # also the library's unit tests (the kernel tests among them)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(./scripts/fetch-cuda-toolkit.sh | tail -n1)
cache=${JOULE_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}
export CUDA_ROOT=$root CUDA_PATH=$root CUDA_HOME=$root PATH=$root/bin:$PATH
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-80}
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
target=${JOULE_CUDA_TARGET:-$cache/target-cuda-$CUDA_COMPUTE_CAP}
start=$(date +%s)
cargo build --release --features cuda --target-dir "$target" --bin joule
if [[ "${1:-}" == "--tests" ]]; then
  cargo test --release --features cuda --target-dir "$target" --lib --no-run
fi
echo "build-cuda: --features cuda compiled in $(($(date +%s) - start)) s (target $target, compute cap $CUDA_COMPUTE_CAP)" >&2
