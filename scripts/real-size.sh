#!/usr/bin/env bash
# The paper's models at their real size on this machine: for each
# model, smallest first, `joule models synth` writes the full-size Q4_K_M file (and a Q8_0 one
# for the logits check) under ${JOULE_HOME:-~/.cache/joule}/models/real/, then:
#   - file size;
#   - load time: Joule (`joule models inspect --memory`'s `load:` line: header, every tensor read
#     once into the memory it stays in, kernels' copies) against llama.cpp (`llama-logits
#     --load-only`: llama_model_load_from_file + a 4,096-token context; mmap'd, and --no-mmap,
#     which reads like Joule). The page cache is warm for both (the file was just written);
#   - memory: the plan and, unless the plan exceeds what the machine has available, what the
#     process holds after TOKENS-position prompts in SEQS sequences (`--measure`: VmHWM, and the
#     plan's difference to it);
#   - speed: `joule bench -p 512 -n 128` and `llama-bench -p 512 -n 128 -fa 0,1`, THREADS threads,
#     REPS repetitions;
#   - logits: a 32-token prompt through `llama-logits` (one pass) and `joule logits` on the Q4_K_M
#     and Q8_0 files, in one pass and as 16 tokens in one pass then 16 steps of one (the
#     two modes): mean KL(llama.cpp ‖ Joule) and top-1 agreement over the 32 positions,
#     and llama.cpp's own one pass against its own prefill + steps (the drift two correct
#     engines' rounding reaches on this synthesized model: random weights amplify it with depth);
# and deletes the files (--keep keeps the Q4_K_M file for a later pass, e.g. --no-measure
# --no-logits for the speed columns on a quiet machine; the Q8_0 file is always deleted). Each model's row is appended to the markdown table in
# OUT as soon as it is done, so a run cut short keeps what it measured.
#
# Usage: scripts/real-size.sh [--keep] [--models "m1 m2"] [--tokens N] [--seqs N] [--reps N]
#                             [--threads N] [--no-measure] [--no-bench] [--no-logits] [--out FILE]
# Defaults: every model, --tokens 1024 --seqs 5 (the issue's check is --tokens 4096: 4× the
# prefill time), --reps 2, --threads 2, OUT=$JOULE_HOME/models/real/real-size.md.
# JOULE=path/to/joule uses a built binary (else target/release/joule or $CARGO_TARGET_DIR's).
#
# Time per model on the 2-core AVX-512 machine (a 9 B prefill runs at ~30 tokens/s there):
# synthesis ~1-3 min (Q4_K_M + Q8_0), loads ~1 min, the memory workload SEQS×TOKENS/prefill rate
# (5×1,024 tokens: ~3 min for a 9 B model, ~1.5 min for a 4 B one; 5×4,096: ~11 and ~5 min),
# benches ~2 min (Joule) + ~4 min (llama.cpp, two fa settings) at 2 repetitions, logits ~1 min.
# So ~15-20 min for a 9 B model and ~8-10 min for a 4 B one with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0 measure=1 bench=1 logits=1 tokens=1024 seqs=5 reps=2 threads=2
models="smollm2-135m-instruct qwen3.5-4b nemotron-3-nano-4b gemma4-e4b qwen2.5-7b-instruct qwen3-8b qwen3.5-9b"
home=${JOULE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}
dir=$home/models/real
out=$dir/real-size.md
while [[ $# -gt 0 ]]; do
    case $1 in
        --keep) keep=1 ;;
        --models) models=$2; shift ;;
        --tokens) tokens=$2; shift ;;
        --seqs) seqs=$2; shift ;;
        --reps) reps=$2; shift ;;
        --threads) threads=$2; shift ;;
        --no-measure) measure=0 ;;
        --no-bench) bench=0 ;;
        --no-logits) logits=0 ;;
        --out) out=$2; shift ;;
        *) echo "real-size.sh: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$dir"

if [[ -z ${JOULE:-} ]]; then
    JOULE=${CARGO_TARGET_DIR:-target}/release/joule
fi
[[ -x $JOULE ]] || { echo "real-size.sh: no joule binary at $JOULE (cargo build --release, or set JOULE)" >&2; exit 1; }
llama=$(./scripts/fetch-llama-cpp.sh | tail -1)
# A private copy: another checkout's fetch-llama-cpp.sh rebuilds llama-logits from its own source.
cp "$llama/llama-logits" "$dir/llama-logits"
if ! { "$dir/llama-logits" "$dir/none.gguf" --load-only 2>&1 || true; } | grep -q "cannot load"; then
    echo "real-size.sh: $llama/llama-logits has no --load-only (rebuild it: scripts/fetch-llama-cpp.sh)" >&2
    exit 1
fi

log=$dir/real-size.log
echo "== $(date -u +%FT%TZ) real-size.sh tokens=$tokens seqs=$seqs reps=$reps threads=$threads load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
if [[ ! -s $out ]]; then
    {
        echo "| model | file (Q4_K_M) | Joule load | llama.cpp load (mmap / read) | plan | measured RssAnon (plan vs), VmHWM | seqs × tokens | Joule pp512 / tg128 | llama.cpp pp512 / tg128 fa0 | fa1 | logits Q4_K_M KL / top-1 (one pass; prefill 16 + 16 steps; llama.cpp's own two modes) | Q8_0 KL / top-1 (same) | load avg |"
        echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    } >"$out"
fi

gib() { awk -v b="$1" 'BEGIN{printf "%.2f GiB", b/1073741824}'; }
bytes() { awk -v s="$1" 'BEGIN{split(s, p, " "); m = p[2] == "GiB" ? 2^30 : (p[2] == "MiB" ? 2^20 : 2^10); printf "%d", p[1] * m}'; }
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }
ids="1 5 900 33 2048 77 15000 8 91 4000 123 64 7 300 2500 11 42 19 6000 250 3 8191 512 70 1234 99 30000 16 777 5555 21 640"
prefill=16  # the decode check: 16 ids in one pass, then 16 steps of one

# mean KL(a ‖ b) and top-1 agreement of two [n, vocab] float32 .npy files (no numpy needed),
# and "DEGENERATE" when a's top token is the position's own input id at half the positions or
# more (a tied head reading back the token's own embedding: any two engines agree on that).
compare() {
    python3 - "$1" "$2" "$ids" <<'EOF'
import array, ast, math, sys
def load(p):
    with open(p, 'rb') as f:
        assert f.read(6) == b'\x93NUMPY'
        major = f.read(2)[0]
        hl = int.from_bytes(f.read(2 if major == 1 else 4), 'little')
        h = ast.literal_eval(f.read(hl).decode())
        a = array.array('f'); a.frombytes(f.read())
        return h['shape'], a
(sa, a), (sb, b) = load(sys.argv[1]), load(sys.argv[2])
assert sa == sb, (sa, sb)
n, v = sa
ids = [int(t) for t in sys.argv[3].split()]
kl = agree = echo = 0.0
for i in range(n):
    x, y = a[i*v:(i+1)*v], b[i*v:(i+1)*v]
    mx, my = max(x), max(y)
    lx = mx + math.log(sum(math.exp(t - mx) for t in x))
    ly = my + math.log(sum(math.exp(t - my) for t in y))
    kl += sum(math.exp(p - lx) * ((p - lx) - (q - ly)) for p, q in zip(x, y))
    agree += x.index(mx) == y.index(my)
    echo += i < len(ids) and x.index(mx) == ids[i]
print(f"{kl / n:.4f} / {agree / n:.2f}" + (f" DEGENERATE (input echoed at {echo:.0f} of {n})" if 2 * echo >= n else ""))
EOF
}

logit_check() { # FILE → "KL / top-1"
    "$dir/llama-logits" "$1" --ids "$ids" --out "$dir/llama.npy" --threads "$threads" >>"$log" 2>&1 || { echo "llama-logits failed"; return; }
    "$JOULE" logits --gguf "$1" --ids "$ids" --out "$dir/joule.npy" --force >>"$log" 2>&1 || { echo "joule logits failed"; return; }
    "$JOULE" logits --gguf "$1" --ids "$ids" --prefill "$prefill" --out "$dir/joule-decode.npy" --force >>"$log" 2>&1 || { echo "joule logits --prefill failed"; return; }
    # llama.cpp against itself (its one pass against its own prefill + steps): how far the
    # synthesized model lets two correct engines' rounding drift apart.
    "$dir/llama-logits" "$1" --ids "$ids" --prefill "$prefill" --out "$dir/llama-decode.npy" --threads "$threads" >>"$log" 2>&1 || { echo "llama-logits --prefill failed"; return; }
    echo "$(compare "$dir/llama.npy" "$dir/joule.npy"); $(compare "$dir/llama.npy" "$dir/joule-decode.npy"); llama.cpp itself $(compare "$dir/llama.npy" "$dir/llama-decode.npy")"
}

for m in $models; do
    f=$dir/$m.Q4_K_M.gguf
    echo "== $m $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
    [[ -s $f ]] || "$JOULE" models synth "$m" --out "$f" --quant q4_k_m --quiet >>"$log" 2>&1
    size=$(stat -c %s "$f")
    # The plan (and Joule's load time) without the workload first: is there room to run it?
    plan_out=$("$JOULE" models inspect "$f" --memory --tokens "$tokens" --seqs "$seqs" 2>>"$log")
    echo "$plan_out" | grep -E "^(load|memory plan|  |measure)" >>"$log"
    jload=$(sed -n 's/^load: \([0-9.]*\) s.*/\1/p' <<<"$plan_out")
    planned=$(grep -o 'with margin [0-9.]* [GMK]iB' <<<"$plan_out" | head -1)
    plan_total=$(grep -o '= [0-9.]* [GMK]iB, with margin' <<<"$plan_out" | awk '{print $2, $3}' | tr -d ,)
    # The synthesized files' pages may still be dirty, which MemAvailable does not count as
    # available until they are written back (it read 2 GiB of 23 here right after a synthesis).
    sync
    avail=$(awk '/MemAvailable/ {printf "%.0f", $2 * 1024}' /proc/meminfo)  # %d overflows at 2^31 in mawk
    need=$(bytes "$plan_total")
    fits=1
    (( need < avail * 9 / 10 )) || fits=0
    l_mmap=$("$dir/llama-logits" "$f" --load-only --threads "$threads" 2>>"$log" | field load_ms)
    l_read=$("$dir/llama-logits" "$f" --load-only --no-mmap --threads "$threads" 2>>"$log" | field load_ms)
    meas="not run" diff=""
    if (( measure && fits )); then
        mo=$("$JOULE" models inspect "$f" --memory --measure --tokens "$tokens" --seqs "$seqs" 2>>"$log")
        echo "$mo" | grep -E "^(load|measure|  VmHWM|  process)" >>"$log"
        line=$(grep '^measure:' <<<"$mo")
        meas="$(gib "$(field anon_bytes <<<"$line")") ($(field diff_pct <<<"$line") %), VmHWM $(gib "$(field hwm_bytes <<<"$line")") ($(field diff_hwm_pct <<<"$line") %)"
        jload=$(field load_s <<<"$line")
    elif (( measure )); then
        meas="not run: plan $plan_total > 90 % of $(gib "$avail") available"
    fi
    jb="not run" lb0="not run" lb1="not run"
    if (( bench && fits )); then
        jo=$("$JOULE" bench --gguf "$f" -p 512 -n 128 -t "$threads" -r "$reps" 2>>"$log") || jo=""
        echo "$jo" >>"$log"
        tps() { grep -E " $1 " | tail -1 | awk -F'|' '{print $(NF-1)}' | awk '{print $1}'; }
        jb="$(tps pp512 <<<"$jo") / $(tps tg128 <<<"$jo")"
    fi
    if (( bench )); then
        lo=$("$llama/llama-bench" -m "$f" -p 512 -n 128 -fa 0,1 -t "$threads" -r "$reps" -o jsonl 2>>"$log") || lo=""
        echo "$lo" >>"$log"
        pick() { # fa n_prompt n_gen → avg t/s
            python3 -c '
import json, sys
fa, p, n = sys.argv[1:4]
for l in sys.stdin:
    l = l.strip()
    if not l.startswith("{"): continue
    r = json.loads(l)
    if str(int(r.get("flash_attn", 0))) == fa and str(r["n_prompt"]) == p and str(r["n_gen"]) == n:
        print("%.2f" % r["avg_ts"])' "$@" <<<"$lo"
        }
        lb0="$(pick 0 512 0) / $(pick 0 0 128)"
        lb1="$(pick 1 512 0) / $(pick 1 0 128)"
    fi
    lq4="not run" lq8="not run"
    if (( logits && fits )); then
        lq4=$(logit_check "$f")
    fi
    (( keep )) || rm -f "$f"
    if (( logits )); then
        f8=$dir/$m.Q8_0.gguf
        [[ -s $f8 ]] || "$JOULE" models synth "$m" --out "$f8" --quant q8_0 --quiet >>"$log" 2>&1
        p8=$("$JOULE" models inspect "$f8" --memory --tokens 64 --seqs 1 2>>"$log" | grep -o '= [0-9.]* [GMK]iB, with margin' | awk '{print $2, $3}' | tr -d ,)
        if (( $(bytes "$p8") < avail * 9 / 10 )); then
            lq8=$(logit_check "$f8")
        else
            lq8="not run: plan $p8"
        fi
        rm -f "$f8"
    fi
    echo "| $m | $(gib "$size") | ${jload:-?} s | ${l_mmap:-?} / ${l_read:-?} ms | $plan_total ($planned) | $meas | $seqs × $tokens | $jb | $lb0 | $lb1 | $lq4 | $lq8 | $(cut -d' ' -f1 /proc/loadavg) |" | tee -a "$out"
done
echo "== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg); table: $out" | tee -a "$log"
