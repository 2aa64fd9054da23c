#!/usr/bin/env bash
# How long `joule models synth` takes for each roster model at full size, Q4_K_M, extrapolated
# from two reduced files (--layers A and B, real widths) so no full-size file is written: the
# CPU-seconds of a file are (fixed: embeddings, output) + layers x (per layer), both solved from
# the two runs' user+sys time; the full file's CPU-seconds divided by N cores (default 16, the
# GPU machine's) is the wall time there if the threads scale (they split every tensor's rows
# evenly, `synth::rows_per_task`), plus writing its bytes at W GB/s (default 2). Prints a
# Markdown table. Files go to a temporary folder and are removed.
#
#   scripts/synth-speed.sh [JOULE_BIN] [CORES] [WRITE_GBS]    # JOULE_SYNTH_SPEED_MODELS: a subset
# Take timings on a quiet machine: flock /work/notes/bench.lock scripts/synth-speed.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-target}/release/joule}
cores=${2:-16}
wgbs=${3:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/joule-synth-speed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
declare -A a=([gemma4-e4b]=6 [nemotron-3-nano-4b]=3 [qwen3.5-4b]=4 [qwen3.5-9b]=4 [qwen3-8b]=1)
declare -A b=([gemma4-e4b]=12 [nemotron-3-nano-4b]=9 [qwen3.5-4b]=8 [qwen3.5-9b]=8 [qwen3-8b]=3)
declare -A full=([gemma4-e4b]=42 [nemotron-3-nano-4b]=42 [qwen3.5-4b]=32 [qwen3.5-9b]=32 [qwen3-8b]=36)
echo "| model | layers A / B | CPU s A / B | bytes A / B | full: CPU s | full: GB | est. wall on $cores cores |"
echo "|---|---|---|---|---:|---:|---:|"
for m in ${JOULE_SYNTH_SPEED_MODELS:-qwen3-8b qwen3.5-9b gemma4-e4b qwen3.5-4b nemotron-3-nano-4b}; do
  cpu=() bytes=()
  for l in "${a[$m]}" "${b[$m]}"; do
    /usr/bin/time -f "%U %S" -o "$tmp/time" "$bin" models synth "$m" --out "$tmp/f.gguf" --quant q4_k_m --layers "$l" -q >/dev/null
    cpu+=("$(awk '{print $1 + $2}' "$tmp/time")")
    bytes+=("$(stat -c %s "$tmp/f.gguf")")
    rm -f "$tmp/f.gguf"
  done
  python3 - "$m" "${a[$m]}" "${b[$m]}" "${full[$m]}" "${cpu[@]}" "${bytes[@]}" "$cores" "$wgbs" <<'EOF'
import sys
m, la, lb, lf = sys.argv[1], *map(int, sys.argv[2:5])
ca, cb, ba, bb = map(float, sys.argv[5:9])
cores, wgbs = int(sys.argv[9]), float(sys.argv[10])
# Layer kinds repeat, so per-layer cost and bytes are linear in the layer count.
per_c, per_b = (cb - ca) / (lb - la), (bb - ba) / (lb - la)
cf, bf = ca + (lf - la) * per_c, ba + (lf - la) * per_b
wall = cf / cores + bf / 1e9 / wgbs
print(f"| {m} | {la} / {lb} | {ca:.1f} / {cb:.1f} | {ba / 1e9:.2f} / {bb / 1e9:.2f} GB | {cf:.0f} | {bf / 1e9:.2f} | {wall:.0f} s |")
EOF
done
