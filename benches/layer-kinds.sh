#!/usr/bin/env bash
# The recurrent and per-layer-embedding layer cores at real width, Joule
# (`joule bench layers`, src/cli/bench_layers.rs) against llama.cpp de3ff81's ggml graph for the
# same cores (scripts/llama-layer-kinds.cpp, built here against the tree that
# scripts/fetch-llama-cpp.sh makes): Qwen3.5-4B's gated delta net (16 key / 32 value heads of
# 128), Nemotron-3-Nano-4B's Mamba-2 conv + scan (96 heads x 80, state 128, 8 groups) and
# Gemma 4 E4B's per-layer inputs (the 262,144 x 42·256 table and the model projection, read
# from the real file), for decode (1 and 5 sequences, one token each, states carried) and a
# 512-token prompt. The projections around the cores are the shared matmul kernels and are
# not timed here.
#
# Each side runs ROUNDS times (default 2), back to back, under the shared benchmark lock
# (BENCH_LOCK), per thread count; the table gives the best round's milliseconds per layer call,
# wall clock and process CPU time (all threads), and llama.cpp's time over Joule's (above 1:
# Joule is faster). On a loaded machine compare the CPU column at THREADS=1 only.
#
#   benches/layer-kinds.sh                                 # THREADS="1 2", default files
#   THREADS=1 SECONDS_PER=1 benches/layer-kinds.sh         # under load: one thread, CPU time
#   JOULE=target/release/joule GEMMA=FILE KINDS=delta,mamba CASES=decode1 benches/layer-kinds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
joule=${JOULE:-${CARGO_TARGET_DIR:-target}/release/joule}
gemma=${GEMMA:-$HOME/.cache/joule/models/real/gemma4-e4b.Q4_K_M.gguf}
threads=${THREADS:-1 2}
rounds=${ROUNDS:-2}
secs=${SECONDS_PER:-2}
kinds=${KINDS:-delta,mamba,ple}
cases=${CASES:-decode1,decode5,prompt512}
lock=${BENCH_LOCK:-${TMPDIR:-/tmp}/joule-bench.lock}
[ -x "$joule" ] || { echo "no joule binary at $joule (cargo build --release, or JOULE=...)" >&2; exit 2; }
if [[ $kinds == *ple* && ! -f $gemma ]]; then
  echo "no Gemma 4 file at $gemma (GEMMA=...): leaving out kind ple" >&2
  kinds=$(echo "$kinds" | tr ',' '\n' | grep -v '^ple$' | paste -sd, -)
fi

# llama-layer-kinds, rebuilt when its source changes (as fetch-llama-cpp.sh does llama-logits).
bin=$(scripts/fetch-llama-cpp.sh | tail -1)
root=$(cd "$bin/../.." && pwd)
peer=$bin/llama-layer-kinds
sum=$(sha256sum scripts/llama-layer-kinds.cpp | cut -d' ' -f1)
if [[ ! -x $peer || $(cat "$peer.sha256" 2>/dev/null) != "$sum" ]]; then
  echo "layer-kinds: building $peer" >&2
  c++ -O2 -std=c++17 -I "$root/src/include" -I "$root/src/ggml/include" scripts/llama-layer-kinds.cpp \
    "$root/build/ggml/src/libggml.a" "$root/build/ggml/src/libggml-cpu.a" \
    "$root/build/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm -o "$peer.tmp.$$"
  mv "$peer.tmp.$$" "$peer"
  echo "$sum" >"$peer.sha256"
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
g=()
[[ $kinds == *ple* ]] && g=(--gemma "$gemma")
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC)" >&2
for t in $threads; do
  for _ in $(seq "$rounds"); do
    flock "$lock" "$peer" --kinds "$kinds" --cases "$cases" --threads "$t" --seconds "$secs" "${g[@]}" \
      2>/dev/null | sed "s/threads=[0-9]*/threads=$t/" | tee -a "$out" >&2
    flock "$lock" "$joule" bench layers --kinds "$kinds" --cases "$cases" --threads "$t" --seconds "$secs" "${g[@]}" \
      | sed "s/threads=[0-9]*/threads=$t/" | tee -a "$out" >&2
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%H:%M:%S) UTC)" >&2

# Best round per side, kind, case and thread count; then one row per kind, case, threads.
awk '
  {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    k = f["kind"] SUBSEP f["case"] SUBSEP f["threads"]
    if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    s = f["side"]
    if (!((s, k) in wall) || f["wall_ms"] + 0 < wall[s, k]) wall[s, k] = f["wall_ms"] + 0
    if (!((s, k) in cpu) || f["cpu_ms"] + 0 < cpu[s, k]) cpu[s, k] = f["cpu_ms"] + 0
  }
  END {
    print "| kind | case | threads | llama.cpp wall ms | Joule wall ms | wall: llama.cpp / Joule | llama.cpp CPU ms | Joule CPU ms | CPU: llama.cpp / Joule |"
    print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, SUBSEP)
      lw = wall["llama", k]; jw = wall["joule", k]; lc = cpu["llama", k]; jc = cpu["joule", k]
      printf "| %s | %s | %s | %.3f | %.3f | %.2fx | %.3f | %.3f | %.2fx |\n", p[1], p[2], p[3], lw, jw, (jw > 0 ? lw / jw : 0), lc, jc, (jc > 0 ? lc / jc : 0)
    }
  }' "$out"
