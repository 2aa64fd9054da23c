#!/usr/bin/env bash
# The real workload on both engines, back to back on the same machine and file: `joule bench
# society` (N default Energy Societies of SmolLM2 agents on Joule's engine, one process) and the
# same N societies driven through llama.cpp's `llama-server -np N` (`--via`, Joule's
# OpenAI-compatible backend; the scenarios, prompts and records are Joule's in both runs, only
# the engine differs). Prints both JSON reports and the ratio of generated tokens per second.
#
# Usage: scripts/bench-society-vs-llama.sh [SIMS [ROUNDS [THREADS]]]   (defaults 16, 2, 2;
#        JOULE=path/to/joule to use a built binary instead of `cargo run --release`; MODEL=FILE.gguf
#        for another model than the default, e.g. a synthesized real-width one made with
#        `joule models synth NAME --vocab …` so that it has a tokenizer and chat template;
#        SLOTS=K for llama-server's parallel slots, default 5 per society, one per agent)
set -euo pipefail
cd "$(dirname "$0")/.."
sims=${1:-16}
rounds=${2:-2}
t=${3:-2}
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
model=${MODEL:-$(./scripts/fetch-default-model.sh | tail -1)}
if [[ -n ${JOULE:-} ]]; then joule() { "$JOULE" "$@"; }; else joule() { cargo run --release --quiet -- "$@"; }; fi
out=$(mktemp -d)
port=$((18000 + RANDOM % 1000))
server=""
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
joule bench society --gguf "$model" --sims "$sims" --rounds "$rounds" -t "$t" --json > "$out/joule.json"
cat "$out/joule.json"
# One slot per agent (SLOTS, default 5 per society: the driver sends each phase's calls of
# every agent at once, as Joule's engine batches them), 4,096 tokens of context per slot (the
# society's prompts are ~1,500 tokens).
slots=${SLOTS:-$((sims * 5))}
"$bin/llama-server" -m "$model" -a "$(basename "$model" .gguf)" -np "$slots" -c $((slots * 4096)) -t "$t" -tb "$t" \
    --host 127.0.0.1 --port "$port" > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
    sleep 1
done
joule bench society --gguf "$model" --via "http://127.0.0.1:$port/v1" --served-model "$(basename "$model" .gguf)" --sims "$sims" \
    --rounds "$rounds" --json > "$out/served.json"
cat "$out/served.json"
python3 - "$out/joule.json" "$out/served.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))[0]
s = json.load(open(sys.argv[2]))[0]
for k in ("wall_s", "generated_tokens", "generated_tps", "prompt_tokens", "prompt_tps"):
    print(f"{k}: joule {j[k]:.2f}  llama-server {s[k]:.2f}")
print(f"ratio generated t/s: {j['generated_tps'] / s['generated_tps']:.2f}")
print(f"ratio (prompt + generated) t/s: "
      f"{(j['prompt_tokens'] + j['generated_tokens']) / j['wall_s'] / ((s['prompt_tokens'] + s['generated_tokens']) / s['wall_s']):.2f}")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
