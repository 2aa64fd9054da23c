#!/usr/bin/env bash
# One-thread CPU time of prompt processing (pp512) for one or more joule
# binaries against llama.cpp de3ff81, and of decode (tg64) and one Q4_K / Q6_K matrix at 512
# rows for each joule binary: for a loaded machine, where wall-clock speed means nothing but
# user CPU seconds per unit of work still compare. Each run twice, back to back, under the
# shared benchmark lock (BENCH_LOCK); prints the load before and after. Results go to
# benches/results/ by hand (one JSON record per run).
#
#   benches/cputime.sh JOULE_BIN [JOULE_BIN...]    # e.g. a build of main and of a branch
#   GGUF=file P=512 benches/cputime.sh target/release/joule
#
# The user seconds cover the whole process (model load, one warm-up and -r 2 timed runs):
# compare them between binaries on the same file, not as seconds per token.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 JOULE_BIN [JOULE_BIN...]" >&2; exit 2; }
f=${GGUF:-$HOME/.cache/joule/models/bench/qwen3-8b-4L.Q4_K_M.gguf}
p=${P:-512}
lock=${BENCH_LOCK:-${TMPDIR:-/tmp}/joule-bench.lock}
[ -f "$f" ] || { echo "no benchmark file $f (see benches/kquant-split.sh)" >&2; exit 2; }
for j in "$@"; do [ -x "$j" ] || { echo "no joule binary at $j" >&2; exit 2; }; done
bin=$(scripts/fetch-llama-cpp.sh | tail -1)
t() { flock "$lock" /usr/bin/time -f "$1: user %U s, wall %e s" "${@:2}"; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC), file $f"
for _ in 1 2; do
  t "llama.cpp pp$p" "$bin/llama-bench" -m "$f" -p "$p" -n 0 -t 1 -r 2 -fa 0 2>&1 | grep -E "pp$p|user"
  for j in "$@"; do
    t "$j pp$p" "$j" bench --gguf "$f" -p "$p" -n 0 -t 1 -r 2 2>&1 | grep -E "pp$p |user"
  done
done
for _ in 1 2; do
  for j in "$@"; do
    t "$j tg64" "$j" bench --gguf "$f" -p 0 -n 64 -t 1 -r 2 2>&1 | grep -E "tg64 |user"
  done
done
for ty in q4_k q6_k; do
  for j in "$@"; do
    t "$j matmul $ty" "$j" bench matmul --types "$ty" --rows 512 -t 1 -r 5 2>&1 | grep -E "^\| cpu|user"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC)"
