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
#        SLOTS=K for llama-server's parallel slots, default 5 per society, one per agent;
#        MODELS=F1,F2,F3,F4,F5 puts each agent on its own model, GGUFs in roster order (gemma4-e4b,
#        nemotron-3-nano-4b, qwen3.5-4b, qwen3-8b, qwen3.5-9b; made with `joule models synth NAME
#        --vocab …`): Joule runs `--models`, and llama-server runs as its router (`--models-preset`,
#        one section per roster model answering to its `model_name`, one child server per model, every model loaded
#        before the clock starts) with SLOTS (default one per society) slots per model and
#        SERVER_THREADS (default THREADS) threads per child; TIME_LIMIT=S stops each side S
#        seconds after its start and rates what was answered by then (`--time-limit`))
set -euo pipefail
cd "$(dirname "$0")/.."
sims=${1:-16}
rounds=${2:-2}
t=${3:-2}
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)
per_agent=${MODELS:+1}
if [[ -n $per_agent ]]; then
  IFS=, read -r -a files <<<"$MODELS"
  # The served names: each roster agent's `model_name`, in roster order, as the embedded
  # default society names them (what `--via` sends without `--served-model`).
  mapfile -t names < <(sed -n 's/^model_name = "\(.*\)"$/\1/p' configs/energy-society/default-smollm2.toml)
  mapfile -t keys < <(sed -n 's/^model = "\(.*\)"$/\1/p' configs/energy-society/default-smollm2.toml)
  if ((${#files[@]} != ${#names[@]})); then
    echo "MODELS: ${#files[@]} files for ${#names[@]} roster agents (${names[*]}); give one per agent" >&2
    exit 2
  fi
  for f in "${files[@]}"; do [[ -f $f ]] || { echo "MODELS: $f: no such file" >&2; exit 2; }; done
  models=(--models "$MODELS")
else
  model=${MODEL:-$(./scripts/fetch-default-model.sh | tail -1)}
  models=(--gguf "$model")
fi
if [[ -n ${JOULE:-} ]]; then joule() { "$JOULE" "$@"; }; else joule() { cargo run --release --quiet -- "$@"; }; fi
limit=()
[[ -n ${TIME_LIMIT:-} ]] && limit=(--time-limit "$TIME_LIMIT")
out=$(mktemp -d)
port=$((18000 + RANDOM % 1000))
server=""
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null
  declare -F router_stop > /dev/null && router_stop
  rm -rf "$out"
}
trap cleanup EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
joule bench society "${models[@]}" --sims "$sims" --rounds "$rounds" -t "$t" "${limit[@]}" --json > "$out/joule.json"
cat "$out/joule.json"
if [[ -n $per_agent ]]; then
  # llama-server's router (scripts/llama-router.sh): one child server per roster model, each
  # with one slot per society (each model serves one agent of every society).
  source scripts/llama-router.sh
  router_keys=("${keys[@]}") router_names=("${names[@]}") router_files=("${files[@]}")
  router_start "$bin" "$out/server" "$port" "${SLOTS:-$sims}" 4096 "${SERVER_THREADS:-$t}" || exit 1
  joule bench society "${models[@]}" --via "http://127.0.0.1:$port/v1" --sims "$sims" \
      --rounds "$rounds" --max-concurrency $((sims * 5)) "${limit[@]}" --json > "$out/served.json"
else
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
  joule bench society "${models[@]}" --via "http://127.0.0.1:$port/v1" --served-model "$(basename "$model" .gguf)" --sims "$sims" \
      --rounds "$rounds" "${limit[@]}" --json > "$out/served.json"
fi
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
