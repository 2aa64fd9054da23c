#!/usr/bin/env bash
# Issue #27 item 4, single stream: decode (tg) of Joule against llama.cpp's `llama-bench` on the
# same file and threads, in ROUNDS alternating rounds (llama.cpp at fa 0 and 1, then Joule), so
# that a VM whose memory bandwidth moves minute to minute moves both sides alike. Prints each
# round's ratio (Joule over llama.cpp's better fa), the median of those, and Joule's decode as a
# percentage of the reads beside each repetition (`joule bench`'s adjacent reads).
#
# Usage: benches/issue27-single.sh FILE.gguf [ROUNDS [THREADS [TOKENS]]]   (defaults 3, 2, 64;
#        JOULE=path/to/joule, default target/release/joule)
set -euo pipefail
cd "$(dirname "$0")/.."
f=${1:?usage: benches/issue27-single.sh FILE.gguf [ROUNDS [THREADS [TOKENS]]]}
rounds=${2:-3}
t=${3:-2}
n=${4:-64}
joule=${JOULE:-target/release/joule}
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
ratios=()
for r in $(seq "$rounds"); do
    echo "== round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    l=$("$bin/llama-bench" -m "$f" -p 0 -n "$n" -r 2 -t "$t" -fa 0,1 2>/dev/null | grep -E "\| +tg$n +\|")
    # the t/s column is the last: "6.62 ± 0.15"
    best=$(awk -F'|' '{split($(NF-1), a, " "); if (a[1] > b) b = a[1]} END {print b}' <<<"$l")
    j=$("$joule" bench --gguf "$f" -p 0 -n "$n" -r 2 -t "$t" 2>/dev/null)
    ts=$(grep -E "\| tg$n \|" <<<"$j" | awk -F'|' '{split($(NF-1), a, " "); print a[1]}')
    adj=$(grep -E "^tg$n: .* of the reads beside" <<<"$j" | awk '{print $2}')
    ratio=$(awk -v a="$ts" -v b="$best" 'BEGIN{printf "%.3f", a/b}')
    ratios+=("$ratio")
    echo "llama.cpp best of fa: $best t/s; joule: $ts t/s ($adj % of the adjacent reads); ratio $ratio"
done
med=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
echo "tg$n ratios: ${ratios[*]}; median $med"
