#!/usr/bin/env bash
# One-thread user CPU seconds of pp512 and tg64 for two or more
# joule binaries with the kernel level forced (JOULE_SIMD: avx2, avxvnni, avx512vnni,
# portable), back to back, each twice, under the shared benchmark lock (BENCH_LOCK); for a
# loaded machine, where wall-clock speed means nothing but user CPU per unit of work still
# compares. The user seconds cover the whole process (model load, one warm-up, -r 2 timed
# runs): compare them between binaries, not as seconds per token. Results go to
# benches/results/ by hand (one JSON record per run).
#
#   SIMDS="avx2 avxvnni" benches/simd-levels-cputime.sh BASE_BIN NEW_BIN
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 JOULE_BIN [JOULE_BIN...]" >&2; exit 2; }
f=${GGUF:-$HOME/.cache/joule/models/bench/qwen3-8b-4L.Q4_K_M.gguf}
lock=${BENCH_LOCK:-${TMPDIR:-/tmp}/joule-bench.lock}
[ -f "$f" ] || { echo "no benchmark file $f (see benches/kquant-split.sh)" >&2; exit 2; }
for j in "$@"; do [ -x "$j" ] || { echo "no joule binary at $j" >&2; exit 2; }; done
t() { flock "$lock" /usr/bin/time -f "$1: user %U s, wall %e s" "${@:2}"; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC), file $f"
for simd in ${SIMDS:-avx2 avxvnni}; do
  for _ in 1 2; do
    for j in "$@"; do
      JOULE_SIMD=$simd t "$simd $j pp512" "$j" bench --gguf "$f" -p 512 -n 0 -t 1 -r 2 2>&1 | grep -E "pp512 |user"
    done
  done
  for _ in 1 2; do
    for j in "$@"; do
      JOULE_SIMD=$simd t "$simd $j tg64" "$j" bench --gguf "$f" -p 0 -n 64 -t 1 -r 2 2>&1 | grep -E "tg64 |user"
    done
  done
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC)"
done
