#!/usr/bin/env bash
# Sequences decoding together at depth 1,300 (one society phase), Joule's
# `joule bench -p 0 -n 32 -d 1300 -s N` against `llama-batched-bench -npp 1300 -ntg 32 -npl N
# -pps` (llama.cpp prefills the 1,300 tokens once and shares them; Joule fills each cache
# untimed; only decode is compared), back to back on the same file and threads, llama.cpp at its
# best of flash attention off/on. Prints both tables and the ratio of decode t/s (all sequences).
#
# Usage: benches/batched-decode.sh FILE.gguf [SEQS [THREADS]]   (defaults 5 and 2;
#        JOULE=path/to/joule, default target/release/joule; PPS=0 for a hybrid model (Nemotron,
#        Qwen3.5), whose recurrent memory `-pps` fails on: llama.cpp then prefills every
#        sequence's 1,300 tokens itself, untimed in S_TG, which takes SEQS times as long)
set -euo pipefail
cd "$(dirname "$0")/.."
f=${1:?usage: benches/batched-decode.sh FILE.gguf [SEQS [THREADS]]}
n=${2:-5}
t=${3:-2}
joule=${JOULE:-target/release/joule}
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
ctx=$(( (n * (1300 + 32) + 1023) / 1024 * 1024 ))
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
best=0
for fa in 0 1; do
    pps=-pps
    [[ ${PPS:-1} == 0 ]] && pps=""
    l=$("$bin/llama-batched-bench" -m "$f" -c "$ctx" -b 2048 -ub 512 -npp 1300 -ntg 32 -npl "$n" $pps -fa "$fa" -t "$t" 2>/dev/null)
    echo "$l" | grep -E '^\|' || true
    # S_TG t/s is the fourth column from the end of the row for PP=1300
    a=$(grep -E '^\|\s+1300' <<<"$l" | tail -1 | awk -F'|' '{print $(NF-3)}' | awk '{print $1}')
    echo "llama.cpp -fa $fa: S_TG $a t/s"
    best=$(awk -v a="$a" -v b="$best" 'BEGIN{print (a > b) ? a : b}')
done
j=$("$joule" bench --gguf "$f" -p 0 -n 32 -d 1300 -s "$n" -t "$t" -r 1 2>/dev/null)
echo "$j"
b=$(grep -E " tg32 " <<<"$j" | tail -1 | awk -F'|' '{print $(NF-1)}' | awk '{print $1}')
echo "ratio tg32 @ d1300 x$n: joule $b / llama.cpp best S_TG $best = $(awk -v a="$best" -v b="$b" 'BEGIN{printf "%.2f", b/a}')"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
