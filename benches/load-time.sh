#!/usr/bin/env bash
# Load time of GGUF files: Joule (`joule models inspect FILE --memory`'s `load:` line) against
# llama.cpp's `llama-logits FILE --load-only` (mmap'd, then --no-mmap), page cache warm, each
# side REPS times, with wall, user and system seconds and the peak resident set from
# /usr/bin/time, and the load average before each run. Run it on a quiet
# machine, inside the bench lock:
#
#   JOULE=target/release/joule flock /work/notes/bench.lock benches/load-time.sh \
#       ~/.cache/joule/models/real/qwen3.5-4b.Q4_K_M.gguf
#
# THREADS (default 2) sets both sides' threads (Joule: RAYON_NUM_THREADS, read by candle's
# worker pool, which a load converts on); LLAMA_LOGITS names llama-logits (default
# ~/.cache/joule/models/real/llama-logits, built by scripts/real-size.sh).
set -euo pipefail
if [ $# -eq 0 ]; then
    echo "usage: benches/load-time.sh FILE.gguf..." >&2
    exit 2
fi
joule=${JOULE:-target/release/joule}
llama=${LLAMA_LOGITS:-$HOME/.cache/joule/models/real/llama-logits}
threads=${THREADS:-2}
reps=${REPS:-2}
for f in "$@"; do
    echo "== $f ($(stat -c %s "$f") bytes), $threads threads"
    cat "$f" >/dev/null # page cache warm
    for i in $(seq "$reps"); do
        echo "load average $(cut -d' ' -f1 /proc/loadavg)"
        RAYON_NUM_THREADS=$threads /usr/bin/time -f "joule: wall %e s, user %U s, sys %S s, max RSS %M KiB" \
            "$joule" models inspect "$f" --memory 2>&1 | grep -E '^(load:|joule:)'
        if [ -x "$llama" ]; then
            for how in "" --no-mmap; do
                /usr/bin/time -f "llama.cpp ${how:-mmap}: wall %e s, user %U s, sys %S s, max RSS %M KiB" \
                    "$llama" "$f" --load-only $how --threads "$threads" 2>&1 |
                    grep -E 'load_ms|^llama.cpp' || true
            done
        fi
    done
done
