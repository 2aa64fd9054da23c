#!/usr/bin/env bash
# Single stream: decode (tg) of Joule against llama.cpp's `llama-bench` on the
# same file and threads, in ROUNDS alternating rounds (llama.cpp at fa 0 and 1, then Joule), so
# that a VM whose memory bandwidth moves minute to minute moves both sides alike. Prints each
# round's ratio (Joule over llama.cpp's better fa), the median of those, and Joule's decode as a
# percentage of the reads beside each repetition (`joule bench`'s adjacent reads). llama.cpp's
# run is put against the same limit: a plain read (`joule bench read`, the buffer `joule bench`
# reads) just before and just after llama-bench, its tokens/s times the weight bytes a step
# reads (Joule's figure for the same file) as a percentage of the better of the two (a 1 GB
# buffer: past the caches, as Joule's of the step's size is).
#
# Usage: benches/single-stream.sh FILE.gguf [ROUNDS [THREADS [TOKENS]]]   (defaults 3, 2, 64;
#        JOULE=path/to/joule, default target/release/joule)
set -euo pipefail
cd "$(dirname "$0")/.."
f=${1:?usage: benches/single-stream.sh FILE.gguf [ROUNDS [THREADS [TOKENS]]]}
rounds=${2:-3}
t=${3:-2}
n=${4:-64}
joule=${JOULE:-target/release/joule}
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
ratios=()
for r in $(seq "$rounds"); do
    echo "== round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    r0=$("$joule" bench read --mb 1024 -t "$t" | awk '{print $2}')
    l=$("$bin/llama-bench" -m "$f" -p 0 -n "$n" -r 2 -t "$t" -fa 0,1 2>/dev/null | grep -E "\| +tg$n +\|")
    r1=$("$joule" bench read --mb 1024 -t "$t" | awk '{print $2}')
    # the t/s column is the last: "6.62 ± 0.15"
    best=$(awk -F'|' '{split($(NF-1), a, " "); if (a[1] > b) b = a[1]} END {print b}' <<<"$l")
    j=$("$joule" bench --gguf "$f" -p 0 -n "$n" -r 2 -t "$t" 2>/dev/null)
    ts=$(grep -E "\| tg$n \|" <<<"$j" | awk -F'|' '{split($(NF-1), a, " "); print a[1]}')
    adj=$(grep -E "^tg$n: .* of the reads beside" <<<"$j" | awk '{print $2}')
    # "tg64: 36.85 GB/s of weights (4369.2 MB × 8.43 steps/s) = ..."
    mb=$(grep -E "^tg$n: .* GB/s of weights" <<<"$j" | sed -E 's/.*\(([0-9.]+) MB.*/\1/')
    lgbs=$(awk -v t="$best" -v m="$mb" 'BEGIN{printf "%.1f", t*m/1000}')
    lpct=$(awk -v g="$lgbs" -v a="$r0" -v b="$r1" 'BEGIN{m=(a>b)?a:b; printf "%.1f", 100*g/m}')
    ratio=$(awk -v a="$ts" -v b="$best" 'BEGIN{printf "%.3f", a/b}')
    ratios+=("$ratio")
    echo "llama.cpp best of fa: $best t/s ($lgbs GB/s of weights, $lpct % of the reads beside it: $r0, $r1 GB/s); joule: $ts t/s ($adj % of the adjacent reads); ratio $ratio"
done
med=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
echo "tg$n ratios: ${ratios[*]}; median $med"
