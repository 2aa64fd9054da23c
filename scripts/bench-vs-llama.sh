#!/usr/bin/env bash
# Single-stream speed of `joule bench` against llama.cpp's `llama-bench`, run back to back on the
# same machine, same GGUF and thread count: pp512 and tg128 on the default model (Q4_1) and on
# its Q4_K_M requantisation (scripts/make-q4km-model.sh), then 16 sequences decoding at depth
# 1,300 against `llama-batched-bench` at the same shape (`-pps`: llama.cpp prefills
# the 1,300 tokens once and shares them; joule fills each cache untimed; only decode is
# compared). Prints each tool's table and the ratios.
#
# Usage: scripts/bench-vs-llama.sh [THREADS [REPS]]   (defaults 2 and 5; JOULE=path/to/joule
#        to use a built binary instead of `cargo run --release`; SKIP_BATCHED=1 skips the
#        16-sequence test, which prefills 16 × 1,300 tokens per repetition)
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-2}
r=${2:-5}
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
home=${JOULE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}
q41=$home/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -s $q41 ]] || q41=$(./scripts/fetch-default-model.sh | tail -1)
q4km=$(./scripts/make-q4km-model.sh | tail -1)
if [[ -n ${JOULE:-} ]]; then joule() { "$JOULE" "$@"; }; else joule() { cargo run --release --quiet -- "$@"; }; fi
tps() { # the t/s column's mean of a markdown table row matching $1
    grep -E "$1" | tail -1 | awk -F'|' '{print $(NF-1)}' | awk '{print $1}'
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for m in "$q41" "$q4km"; do
    echo "== $(basename "$m"), $t threads, $r repetitions"
    l=$("$bin/llama-bench" -m "$m" -p 512 -n 128 -t "$t" -r "$r" 2>/dev/null)
    j=$(joule bench --gguf "$m" -p 512 -n 128 -t "$t" -r "$r" 2>/dev/null)
    echo "$l"
    echo "$j"
    for test in pp512 tg128; do
        a=$(tps " $test " <<<"$l")
        b=$(tps " $test " <<<"$j")
        echo "ratio $test: joule $b / llama.cpp $a = $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')"
    done
done
if [[ -z ${SKIP_BATCHED:-} ]]; then
    echo "== 16 sequences at depth 1300, tg32, $(basename "$q41")"
    l=$("$bin/llama-batched-bench" -m "$q41" -c 21504 -b 2048 -ub 512 -npp 1300 -ntg 32 -npl 16 -pps -t "$t" 2>/dev/null)
    j=$(joule bench --gguf "$q41" -p 0 -n 32 -d 1300 -s 16 -t "$t" -r 1 2>/dev/null)
    echo "$l"
    echo "$j"
    a=$(grep -E '^\|\s+1300' <<<"$l" | tail -1 | awk -F'|' '{print $(NF-3)}' | awk '{print $1}')
    b=$(tps "tg32" <<<"$j")
    echo "ratio tg32 @ d1300 x16: joule $b / llama.cpp S_TG $a = $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2f", b/a}')"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
