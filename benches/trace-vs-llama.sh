#!/usr/bin/env bash
# The paper's recorded workload on Joule's engine and on llama.cpp's llama-server, back to back on
# the same model files and threads: `joule bench trace` (reference runs replayed at their recorded
# lengths, every agent on its roster model) locally, then the identical requests through
# llama-server's router (one child server per roster model) in both served modes: `best` (every
# call of a wave at once, every slot busy) and `reference` (one call at a time, as the reference
# ran it). Each served mode gets a server of its own, started and loaded before its clock starts:
# a server that answered the other mode's identical requests would find every prompt in its
# prompt cache. Prints the three JSON reports, then one table with the ratios and each side's
# estimate of the paper's 60-run grid on this machine.
#
# Usage: benches/trace-vs-llama.sh [RUN_DIR...]     (default ../shared/data/reference-runs)
# Environment:
#   THREADS=T       threads of Joule and of each llama-server child in `reference` mode (default 2)
#   BEST_THREADS=B  threads of each llama-server child in `best` mode, where the five children
#                   compute at once (default THREADS / 5, at least 1: more oversubscribes the
#                   cores; on a 2-core Xeon 1 thread per child beat 2 by 1.26×)
#   RUNS=N          runs at once (default 1); llama-server gets N slots per model
#   ROUNDS=A..B     rounds sent to the models (default every round)
#   TOKEN_SCALE=F   every call generates its recorded count times F (default 1)
#   MAX_RUNS=K      the first K runs found only
#   LAYERS=L        synthesize the roster's models with L layers (real widths), for machines that
#                   cannot hold all five at full depth (the output says so: it is in the file names)
#   MODELS=F1,...,F5  your own GGUF files in roster order instead of synthesized ones
#   CTX=C           llama-server's context per slot (default 16384: the longest recorded call,
#                   10,181 tokens, and its prompt)
#   JOULE=path      a built joule binary (default: `cargo run --release`)
#   OUT=dir         keep the reports there (default: a temporary folder, removed)
#   SMOKE=1         a check that everything works, not a measurement: the first run only, round
#                   1, token scale 0.02, and the roster's models at tiny widths (hidden 256) with
#                   their real vocabularies and the fewest layers that hold every kind of layer
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dirs=("$@")
((${#dirs[@]})) || dirs=("$repo/../shared/data/reference-runs")
t=${THREADS:-2}
runs=${RUNS:-1}
ctx=${CTX:-16384}
trace_args=(--runs "$runs" -t "$t")
roster=(gemma4-e4b nemotron-3-nano-4b qwen3.5-4b qwen3-8b qwen3.5-9b)
names=("gemma4:e4b" "nemotron-3-nano:4b" "qwen3.5:4b" "qwen3:8b" "qwen3.5:9b")
declare -A layers=()
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
cleanup() {
  declare -F router_stop > /dev/null && router_stop
  [[ -z ${OUT:-} ]] && rm -rf "$out"
  return 0
}
trap cleanup EXIT
if [[ -n ${SMOKE:-} ]]; then
  trace_args+=(--max-runs 1 --rounds 1 --token-scale 0.02)
  layers=([gemma4-e4b]=4 [nemotron-3-nano-4b]=3 [qwen3.5-4b]=2 [qwen3.5-9b]=2 [qwen3-8b]=1)
  ctx=${CTX:-8192}
  # Tiny widths, real vocabularies: manifests that replace the built-in ones (as
  # scripts/gpu-check.sh's dry run makes them), and files of their own.
  export JOULE_MODELS_DIR=$out/manifests
  mkdir -p "$JOULE_MODELS_DIR"
  python3 "$repo/scripts/tiny-manifests.py" "$repo/models" "$JOULE_MODELS_DIR" "${roster[@]}"
  SYNTH_DIR=${SYNTH_DIR:-$out/synth}
else
  [[ -n ${MAX_RUNS:-} ]] && trace_args+=(--max-runs "$MAX_RUNS")
  [[ -n ${ROUNDS:-} ]] && trace_args+=(--rounds "$ROUNDS")
  [[ -n ${TOKEN_SCALE:-} ]] && trace_args+=(--token-scale "$TOKEN_SCALE")
  if [[ -n ${LAYERS:-} ]]; then
    for m in "${roster[@]}"; do layers[$m]=$LAYERS; done
  fi
fi
if [[ -n ${JOULE:-} ]]; then joule() { "$JOULE" "$@"; }; else joule() { cargo run --release --quiet -- "$@"; }; fi
bin=$(./scripts/fetch-llama-cpp.sh | tail -1)

# The model files: given, or the roster's synthesized at real width (Q4_K_M) with their
# vocabularies, once, where `joule bench trace` keeps its own.
if [[ -n ${MODELS:-} ]]; then
  IFS=, read -r -a files <<<"$MODELS"
  if ((${#files[@]} != ${#roster[@]})); then
    echo "MODELS: ${#files[@]} files for ${#roster[@]} roster models (${roster[*]})" >&2
    exit 2
  fi
else
  sdir=${SYNTH_DIR:-${JOULE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}/models/synth}
  mkdir -p "$sdir"
  vdir=$repo/../shared/data/tokenizers
  declare -A vocab=([gemma4-e4b]=ggml-vocab-gemma-4.gguf [nemotron-3-nano-4b]=ggml-vocab-llama-bpe.gguf
    [qwen3.5-4b]=ggml-vocab-qwen35.gguf [qwen3.5-9b]=ggml-vocab-qwen35.gguf [qwen3-8b]=ggml-vocab-qwen2.gguf)
  files=()
  for m in "${roster[@]}"; do
    l=${layers[$m]:-}
    f=$sdir/$m-q4_k_m${l:+-${l}l}.gguf
    if [[ ! -f $f ]]; then
      args=(models synth "$m" --out "$f.part" --force --quant q4_k_m -q --vocab "$vdir/${vocab[$m]}")
      [[ $m == nemotron-3-nano-4b ]] &&
        args+=(--chat-template "$repo/../shared/data/chat-templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja")
      [[ -n $l ]] && args+=(--layers "$l")
      echo "synthesizing $m${l:+ ($l layers)}" >&2
      joule "${args[@]}" >&2
      mv "$f.part" "$f"
    fi
    files+=("$f")
  done
fi
models=$(IFS=,; echo "${files[*]}")

port=$((18000 + RANDOM % 1000))
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
joule bench trace "${dirs[@]}" "${trace_args[@]}" --models "$models" --json > "$out/joule.json"
cat "$out/joule.json"

# llama-server's router (scripts/llama-router.sh): one child per roster model, each with one slot
# per run at once (each model serves one agent of every run), answering to the agent's
# `model_name`. A fresh server per mode (see the top).
best_t=${BEST_THREADS:-$((t / ${#roster[@]} > 0 ? t / ${#roster[@]} : 1))}
source "$repo/scripts/llama-router.sh"
router_keys=("${roster[@]}") router_names=("${names[@]}") router_files=("${files[@]}")
for mode in best reference; do
  mt=$([[ $mode == best ]] && echo "$best_t" || echo "$t")
  router_start "$bin" "$out/server-$mode" "$port" "$runs" "$ctx" "$mt" || exit 1
  echo "llama-server $mode: $mt thread(s) per child" >&2
  joule bench trace "${dirs[@]}" "${trace_args[@]}" --via "http://127.0.0.1:$port/v1" \
    --served-mode "$mode" --json > "$out/served-$mode.json"
  cat "$out/served-$mode.json"
  router_stop
done
python3 - "$out/joule.json" "$out/served-best.json" "$out/served-reference.json" <<'PY'
import json, sys
rows = [json.load(open(p)) for p in sys.argv[1:]]
j = rows[0]
print(f"\ntrace: {len(j['runs'])} run(s), {j['runs_at_once']} at once, rounds "
      f"{j['rounds'][0]}..{j['rounds'][1]}, token scale {j['token_scale']}, {j['threads']} threads")
for k, f in j["models"]:
    print(f"  {k}: {f}")
print("\n| engine | mode | wall s | calls | generated | gen t/s | prompt t/s | short calls | grid h |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r, name in zip(rows, ["joule", "llama-server", "llama-server"]):
    print(f"| {name} | {r['mode']} | {r['wall_s']:.1f} | {r['calls']} | {r['generated_tokens']} | "
          f"{r['generated_tps']:.1f} | {r['prompt_tps']:.1f} | {r['short_calls']} | {r['grid']['hours']:.1f} |")
for r in rows[1:]:
    print(f"joule / llama-server {r['mode']}: wall {r['wall_s'] / j['wall_s']:.2f}x, "
          f"generated t/s {j['generated_tps'] / max(r['generated_tps'], 1e-9):.2f}x")
print("grid estimate (joule): " + "; ".join(j["grid"]["assumptions"]))
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
