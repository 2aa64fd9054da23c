#!/usr/bin/env bash
# Joule's default, split (JOULE_CPU_KERNEL_TYPES=split) and
# all-Joule Q4_K/Q6_K kernels against llama.cpp de3ff81 on
# a synthesized real-width file, back to back, 2 threads, under the shared benchmark lock, and
# the kernel crossover table. Prints the load before and after; refuses to time above LOAD_MAX
# (default 2.5) unless FORCE=1. Results go to benches/results/ by hand (one JSON record per run).
#
#   benches/kquant-split.sh [GGUF]        # default: the synthesized Qwen3-8B-width 4-layer file
#   CROSSOVER=1 benches/kquant-split.sh   # also the kernel crossover (cargo bench … rows)
#
# The file, once (about 1.2 GiB, outside the repo):
#   joule models synth qwen3-8b --quant q4_k_m --layers 4 \
#     --out ~/.cache/joule/models/bench/qwen3-8b-4L.Q4_K_M.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
f=${1:-$HOME/.cache/joule/models/bench/qwen3-8b-4L.Q4_K_M.gguf}
joule=${JOULE:-${CARGO_TARGET_DIR:-target}/release/joule}
reps=${REPS:-2}
p=${P:-512}   # P, N: smaller only to try the script (FORCE=1 P=16 N=2 REPS=1)
n=${N:-128}
[ -f "$f" ] || { echo "no benchmark file $f (see the comment at the top)" >&2; exit 2; }
[ -x "$joule" ] || { echo "no joule binary at $joule (cargo build --release, or set JOULE)" >&2; exit 2; }
bin=$(scripts/fetch-llama-cpp.sh | tail -1)
load=$(cut -d' ' -f1 /proc/loadavg)
echo "load before: $load ($(date -u +%H:%M) UTC), file $f, joule $(git rev-parse --short HEAD)"
if [ "${FORCE:-0}" != 1 ] && awk -v l="$load" -v m="${LOAD_MAX:-2.5}" 'BEGIN{exit !(l>=m)}'; then
  echo "load $load is not below ${LOAD_MAX:-2.5}: not timing (FORCE=1 to time anyway)" >&2
  exit 3
fi
# One benchmark at a time on this machine (a lock file shared by whoever runs this script).
run() {
  flock "${TMPDIR:-/tmp}/joule-bench.lock" "$@"
}
run "$bin/llama-bench" -m "$f" -p "$p" -n "$n" -r "$reps" -t 2 -fa 0,1
run "$joule" bench --gguf "$f" -p "$p" -n "$n" -r "$reps" -t 2
run env JOULE_CPU_KERNEL_TYPES=split "$joule" bench --gguf "$f" -p "$p" -n "$n" -r "$reps" -t 2
run env JOULE_CPU_KERNEL_TYPES=all "$joule" bench --gguf "$f" -p "$p" -n "$n" -r "$reps" -t 2
run "$bin/llama-bench" -m "$f" -p "$p" -n "$n" -r "$reps" -t 2 -fa 0,1
if [ "${CROSSOVER:-0}" = 1 ]; then
  run cargo bench --bench quant_matmul -- 2 rows
fi
echo "load after: $(cut -d' ' -f1 /proc/loadavg) ($(date -u +%H:%M) UTC)"
