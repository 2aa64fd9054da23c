#!/usr/bin/env bash
# A few minutes on a real GPU, most valuable numbers first. In order:
#  1. the roster's five models synthesized at full size, Q4_K_M (`joule models synth`, on this
#     machine's CPUs, in the background at low priority while steps 2-3 use the GPU);
#  2. the CUDA kernel tests (they must not skip), among them CUDA against the CPU for every type
#     of the real quant mixes (Q4_K, Q5_K, Q6_K, Q8_0, Q5_0: decode and prompt products,
#     embedding rows);
#  3. tokens/s per quant type on the GPU (`joule bench matmul`);
#  4. per model, as soon as its file is written (order: JOULE_GPU_CHECK_MODELS): its logits on
#     CUDA against the CPU's, both a prompt of 16 then 16 decode steps (`joule logits
#     --against`; the same path on both, so only the device differs), and
#     `joule bench` at 1, 16 and 64 sequences;
#  5. the paper's workload (`joule bench trace`): round 1 of every reference run at once, each
#     call generating its recorded length times JOULE_GPU_CHECK_TRACE_SCALE (default 0.1) on the
#     agent's own real-size roster model, and the estimated time of the paper's 60-run grid it
#     prints; then one round of 60 concurrent societies with every agent on its own real-size
#     model (`joule bench society --models`, random weights: its token counts are not the
#     paper's) and the grid estimate from its generated tokens/s; step 4 stops early enough to
#     leave these two JOULE_GPU_CHECK_SOCIETY_S seconds (default 240), the trace at most half;
#  6. with the time left: the golden-logits tests of every architecture on CUDA, `joule bench` on
#     SmolLM2, the measured joules per token (NVML), one default society.
# Writes summary.md and summary.json under $OUT (scripts/gpu-check-summary.py). For a Linux
# machine with an NVIDIA GPU and driver, many cores, ~30 GB of free disk and no network. Stops
# itself after JOULE_GPU_CHECK_BUDGET seconds (default 480) whatever happened, keeping what it
# measured: the summary is rewritten after each step and on exit. $OUT gets four files:
# summary.md, summary.json, gpu-check.log (all output) and logs.tar.gz (each step's log,
# steps.jsonl, env.json, the JSON outputs).
#
# CPU dry run: `scripts/gpu-check.sh --cpu` (or JOULE_GPU_CHECK_DEVICE=cpu) runs the same steps
# on the CPU with tiny models (the real vocabularies, small widths from manifests written to a
# JOULE_MODELS_DIR, few layers), smaller benches and one society, so the script's logic is
# tested on any machine (scripts/gpu-check-dry-run.sh checks that every step passed); the CUDA
# kernel test skips there, and steps 6 are left out.
#
# What it needs, all local:
# - this repository's working tree (tests/fixtures/ for the golden tests);
# - the vocabulary GGUFs and Nemotron's chat template the synthesis copies in (`--vocab`,
#   `--chat-template`): in $JOULE_GPU_VOCAB_DIR, the bundle's vocab/, or ../shared/data;
# - the reference runs the trace replays: in $JOULE_GPU_RUNS_DIR, the bundle's runs.tar.xz, or
#   ../shared/data/reference-runs/energy-society;
# - optionally the default model, SmolLM2-135M-Instruct Q4_1, for step 6: in Joule's cache
#   ($JOULE_HOME/models or ~/.cache/joule/models), at $JOULE_GPU_MODEL, or as parts in the bundle;
# - executables, either
#   a) given: JOULE_GPU_CHECK_BIN (joule) and JOULE_GPU_CHECK_LIB_TESTS (the lib's test
#      executable; without it the kernel tests are skipped);
#   b) prebuilt by scripts/gpu-bundle.sh on another machine, in $JOULE_GPU_BUNDLE (default
#      .gpu-bundle/): joule and the test executables, the vocabularies, the model in parts; or
#   c) built here: cargo with every crate already present (~/.cargo registry or a vendored
#      source set up in .cargo/config.toml; the build runs --offline) and a CUDA toolkit
#      (nvcc on PATH, $CUDA_HOME, /usr/local/cuda, or a carried one from
#      scripts/fetch-cuda-toolkit.sh at $JOULE_CUDA_ROOT);
# - at run time, the CUDA libraries candle links (libcudart, libcublas, libcublasLt, libcurand,
#   libnvrtc of CUDA 13): found in the toolkit, in pip's nvidia/cu13/lib folders of python3, or
#   on the loader's path.
#
# Knobs: JOULE_GPU_CHECK_MODELS (priority order, default "qwen3-8b qwen3.5-9b gemma4-e4b
# qwen3.5-4b nemotron-3-nano-4b"), JOULE_GPU_CHECK_BENCH (joule bench sizes, default
# "-p 256 -n 32 -r 2"), JOULE_GPU_CHECK_SIMS (default 60), JOULE_GPU_CHECK_MODEL_DIR (where the
# synthesized files go, default a folder in $TMPDIR removed at the end unless
# JOULE_GPU_CHECK_KEEP=1), JOULE_GRID_TOKENS / JOULE_GRID_RUNS (the grid of the estimate).
#
#   OUT=/tmp/gpu-out scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dry=0
[[ ${JOULE_GPU_CHECK_DEVICE:-cuda} == cpu ]] && dry=1
for a in "$@"; do
  case $a in
    --cpu) dry=1 ;;
    *) echo "gpu-check: unknown argument $a (expected --cpu)" >&2; exit 2 ;;
  esac
done
dev=cuda
((dry)) && dev=cpu
start=$(date +%s)
budget=${JOULE_GPU_CHECK_BUDGET:-480}
deadline=$((start + budget))
society_reserve=${JOULE_GPU_CHECK_SOCIETY_S:-240}
OUT=${OUT:-$repo/gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/joule-gpu-check.XXXXXX")
mkdir -p "$work/logs" "$work/synth"
steps=$work/logs/steps.jsonl
: >"$steps"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
L=$work/logs
bundle=${JOULE_GPU_BUNDLE:-$repo/.gpu-bundle}
jobs=${JOULE_GPU_JOBS:-$(nproc)}
mdir=${JOULE_GPU_CHECK_MODEL_DIR:-$work/models}
mkdir -p "$mdir"
synth_pid=""

say() { echo "gpu-check [$(($(date +%s) - start))s]: $*"; }
left() { echo $((deadline - $(date +%s))); }

summary() {
  python3 "$repo/scripts/gpu-check-summary.py" "$L" "$OUT" "$start" || true
  local tmp="$OUT/.logs.tar.gz.$BASHPID"
  tar -czf "$tmp" -C "$work" logs 2>/dev/null && mv -f "$tmp" "$OUT/logs.tar.gz" || rm -f "$tmp"
}

# One JSON line per step: name, status (pass/fail/skip/timeout), seconds, note, and the path of
# an output file (in the logs) where there is one.
record() {
  python3 - "$steps" "$@" <<'EOF'
import json, sys
path, name, status, secs, note, out = sys.argv[1:7]
with open(path, "a") as f:
    f.write(json.dumps({"step": name, "status": status, "seconds": float(secs),
                        "note": note, "output": out}) + "\n")
EOF
  summary
}

# step NAME OUTFILE CMD...: run CMD with the time that is left (at most; CAP=N limits it to N
# seconds, RESERVE=N keeps N seconds of the budget for later steps), output to OUTFILE.
step() {
  local name=$1 outfile=$2
  shift 2
  local t0 rem rc status note
  rem=$(( $(left) - ${RESERVE:-0} ))
  if [[ -n ${CAP:-} ]] && ((CAP < rem)); then rem=$CAP; fi
  if ((rem < 5)); then
    record "$name" timeout 0 "no time left" ""
    return 1
  fi
  say "$name (at most ${rem}s)"
  t0=$(date +%s)
  if [[ $outfile == *.json ]]; then
    timeout --kill-after=5 "$rem" "$@" >"$L/$outfile" 2>"$L/$outfile.err"
  else
    timeout --kill-after=5 "$rem" "$@" >"$L/$outfile" 2>&1
  fi
  rc=$?
  status=pass
  note=""
  if ((rc == 124 || rc == 137)); then
    status=timeout
    note="stopped at the time limit (${rem}s)"
  elif ((rc != 0)); then
    status=fail
    note="exit $rc: $(tail -n 3 "$L/$outfile" "$L/$outfile.err" 2>/dev/null | grep -v '^==>' | tr '\n|' ' /' | cut -c1-200)"
  fi
  record "$name" "$status" "$(($(date +%s) - t0))" "$note" "$outfile"
  say "$name: $status"
  [[ $status == pass ]]
}

cleanup() {
  kill "$watchdog" 2>/dev/null
  if [[ -n $synth_pid ]]; then
    pkill -TERM -P "$synth_pid" 2>/dev/null
    kill "$synth_pid" 2>/dev/null
  fi
  summary
  if [[ ${JOULE_GPU_CHECK_KEEP:-0} != 1 ]]; then
    rm -f "$mdir"/*.gguf "$mdir"/*.gguf.partial "$work"/*.npy 2>/dev/null
  fi
  say "done; summary in $OUT/summary.md"
}

# A last resort past the per-step limits: end the script (the EXIT trap still writes the summary).
(sleep $((budget + 20)) && kill -TERM $$ 2>/dev/null) &
watchdog=$!
trap cleanup EXIT
trap 'exit 143' TERM INT

# ---- The machine.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if ((dry)); then
  gpu_name="none (CPU dry run)" driver="-" mem="$(free -g 2>/dev/null | awk '/^Mem:/{print $2 " GiB RAM"}')" cap="-"
  cap_num=0
else
  if ! command -v nvidia-smi >/dev/null; then
    say "nvidia-smi not found: not an NVIDIA machine (scripts/gpu-check.sh --cpu is the CPU dry run)"
    record env fail 0 "nvidia-smi not found" ""
    exit 1
  fi
  IFS=, read -r gpu_name driver mem cap < <(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | head -n1)
  cap_num=$(echo "$cap" | tr -d ' .')
fi
python3 - "$L/env.json" "$gpu_name" "$driver" "$mem" "$cap" "$commit" "$dev" "$dry" "$(nproc)" <<'EOF'
import json, sys
p, gpu, driver, mem, cap, commit, dev, dry, cpus = [a.strip() for a in sys.argv[1:]]
json.dump({"gpu": gpu, "driver": driver, "memory": mem, "compute_cap": cap, "commit": commit,
           "device": dev, "dry_run": dry == "1", "cpus": int(cpus)}, open(p, "w"))
EOF
say "device $dev; GPU: $gpu_name, driver $driver, compute capability $cap; $(nproc) CPUs"

# ---- CUDA libraries for the run time loader.
libdirs=()
for d in "${JOULE_CUDA_ROOT:-}" "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [[ -n $d && -d $d/lib64 ]] && libdirs+=("$d/lib64")
  [[ -n $d && -d $d/lib ]] && libdirs+=("$d/lib")
done
while IFS= read -r d; do libdirs+=("$d"); done < <(python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "*", "*", "lib")):
        print(d)
EOF
)
export LD_LIBRARY_PATH="$(IFS=:; echo "${libdirs[*]:-}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The bundle's copies of system libraries (fontconfig, freetype, ...) come last: the machine's own win.
[[ -d $bundle/lib ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$bundle/lib"

# ---- Executables: given, the bundle's, or built here.
bin_joule=""
declare -A test_bins=()
if [[ -n ${JOULE_GPU_CHECK_BIN:-} ]]; then
  mode=given
  bin_joule=$JOULE_GPU_CHECK_BIN
  [[ -n ${JOULE_GPU_CHECK_LIB_TESTS:-} ]] && test_bins[lib]=$JOULE_GPU_CHECK_LIB_TESTS
  record build pass 0 "given executables ($bin_joule)" ""
elif [[ -d $bundle/bin ]]; then
  mode=bundle
  for f in "$bundle"/bin/*.xz "$bundle"/vocab/*.xz; do [[ -e $f ]] && xz -dkf "$f"; done
  chmod +x "$bundle"/bin/* 2>/dev/null
  bin_joule=$bundle/bin/joule
  for f in "$bundle"/bin/*; do
    n=$(basename "$f")
    [[ $n == joule || $n == *.xz ]] && continue
    test_bins[$n]=$f
  done
  # The test executables find their fixtures under the folder they were built in.
  if [[ -f $bundle/manifest-dir ]]; then
    built_in=$(cat "$bundle/manifest-dir")
    if [[ $built_in != "$repo" && ! -e $built_in ]]; then
      mkdir -p "$(dirname "$built_in")" && ln -s "$repo" "$built_in"
    fi
  fi
  record build pass 0 "prebuilt executables from $bundle" ""
elif command -v cargo >/dev/null; then
  mode=built
  features=()
  if ((!dry)); then
    nvcc_bin=$(command -v nvcc || true)
    for d in "${JOULE_CUDA_ROOT:-}" "${CUDA_HOME:-}" /usr/local/cuda; do
      [[ -z $nvcc_bin && -n $d && -x $d/bin/nvcc ]] && nvcc_bin=$d/bin/nvcc
    done
    if [[ -z $nvcc_bin ]]; then
      record build fail 0 "no nvcc found (PATH, JOULE_CUDA_ROOT, CUDA_HOME, /usr/local/cuda)" ""
      exit 1
    fi
    root=$(dirname "$(dirname "$nvcc_bin")")
    export CUDA_ROOT=$root CUDA_PATH=$root CUDA_HOME=$root PATH=$root/bin:$PATH
    export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-$cap_num} CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$jobs}
    features=(--features cuda)
  fi
  target=${JOULE_CUDA_TARGET:-$repo/target-cuda}
  ((dry)) && target=${CARGO_TARGET_DIR:-$repo/target}
  step build build.log cargo build --release --offline -j "$jobs" "${features[@]}" --target-dir "$target" --bin joule || exit 1
  step build-tests build-tests.log cargo test --release --offline -j "$jobs" "${features[@]}" --target-dir "$target" --no-run --message-format=json || exit 1
  bin_joule=$target/release/joule
  while IFS=$'\t' read -r name exe; do
    test_bins[$name]=$exe
  done < <(python3 - "$L/build-tests.log" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except Exception:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"].get("test"):
        kind = m["target"]["kind"][0]
        name = "lib" if kind == "lib" else m["target"]["name"]
        print(f"{name}\t{m['executable']}")
EOF
)
else
  record build fail 0 "neither given nor prebuilt executables ($bundle/bin), nor cargo" ""
  exit 1
fi
python3 - "$L/env.json" "$mode" <<'EOF'
import json, sys
p = sys.argv[1]; d = json.load(open(p)); d["executables"] = sys.argv[2]; json.dump(d, open(p, "w"))
EOF

# ---- 1. The roster's models, synthesized in the background (lowest CPU priority).
read -r -a models <<<"${JOULE_GPU_CHECK_MODELS:-qwen3-8b qwen3.5-9b gemma4-e4b qwen3.5-4b nemotron-3-nano-4b}"
roster=(gemma4-e4b nemotron-3-nano-4b qwen3.5-4b qwen3-8b qwen3.5-9b)
vdir=${JOULE_GPU_VOCAB_DIR:-}
if [[ -z $vdir ]]; then
  if [[ -d $bundle/vocab ]]; then vdir=$bundle/vocab; else vdir=$repo/../shared/data/tokenizers; fi
fi
tdir=$vdir
[[ -f $tdir/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja ]] || tdir=$repo/../shared/data/chat-templates
declare -A vocab=(
  [gemma4-e4b]=ggml-vocab-gemma-4.gguf
  [nemotron-3-nano-4b]=ggml-vocab-llama-bpe.gguf
  [qwen3.5-4b]=ggml-vocab-qwen35.gguf
  [qwen3.5-9b]=ggml-vocab-qwen35.gguf
  [qwen3-8b]=ggml-vocab-qwen2.gguf
)
# Nemotron's own vocabulary is not among them: Llama 3's (128,256 tokens, padded to the
# model's 131,072 rows) with Nemotron's chat template.
declare -A template=([nemotron-3-nano-4b]=NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja)
# The dry run: every kind of layer, as few layers as that takes (tests/full/synth_vs_llama.rs).
declare -A small=([gemma4-e4b]=4 [nemotron-3-nano-4b]=3 [qwen3.5-4b]=2 [qwen3.5-9b]=2 [qwen3-8b]=1)

if ((dry)); then
  # Tiny widths, real vocabularies: manifests that replace the built-in ones.
  export JOULE_MODELS_DIR=$work/manifests
  mkdir -p "$JOULE_MODELS_DIR"
  python3 "$repo/scripts/tiny-manifests.py" "$repo/models" "$JOULE_MODELS_DIR" "${roster[@]}"
fi

synth_all() {
  local m st t0 rem args
  for m in "${models[@]}"; do
    rem=$(left)
    if ((rem < 10)); then
      record "synth-$m" timeout 0 "no time left" ""
      echo timeout >"$work/synth/$m"
      continue
    fi
    args=(models synth "$m" --out "$mdir/$m.gguf" --force --quant q4_k_m -q --vocab "$vdir/${vocab[$m]}")
    [[ -n ${template[$m]:-} ]] && args+=(--chat-template "$tdir/${template[$m]}")
    ((dry)) && args+=(--layers "${small[$m]}")
    t0=$(date +%s)
    timeout --kill-after=5 "$rem" nice -n "$synth_nice" "$bin_joule" "${args[@]}" >"$L/synth-$m.log" 2>&1
    case $? in
      0) st=pass ;;
      124 | 137) st=timeout ;;
      *) st=fail ;;
    esac
    local note
    if [[ $st == pass ]]; then
      note="$(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1])/1e9:.2f} GB')" "$mdir/$m.gguf")"
    else
      note="$(tail -n 2 "$L/synth-$m.log" | tr '\n|' ' /' | cut -c1-200)"
    fi
    record "synth-$m" "$st" "$(($(date +%s) - t0))" "$note" "synth-$m.log"
    echo "$st" >"$work/synth/$m"
  done
}
# On a GPU machine the synthesis must not slow the GPU steps' host threads; in the dry run the
# foreground mostly waits for it.
synth_nice=19
((dry)) && synth_nice=0
say "synthesizing ${models[*]} in the background into $mdir (vocabularies from $vdir)"
synth_all &
synth_pid=$!

# Waits for model $1's file; true when it was written.
wait_model() {
  while [[ ! -f $work/synth/$1 ]] && (($(left) > 0)); do sleep 1; done
  [[ $(cat "$work/synth/$1" 2>/dev/null) == pass ]]
}

# ---- 2. Kernel tests (the lib's unit tests whose path holds kernels::cuda): they must not skip.
if [[ -n ${test_bins[lib]:-} ]]; then
  RESERVE=$society_reserve step kernel-tests kernel-tests.log env RUST_TEST_THREADS=1 "${test_bins[lib]}" kernels::cuda --nocapture
  if ((!dry)) && grep -q "skipped, no CUDA device" "$L/kernel-tests.log"; then
    record kernel-tests-ran fail 0 "the kernel tests found no CUDA device" kernel-tests.log
  fi
else
  record kernel-tests skip 0 "no lib test executable" ""
fi

# ---- 3. Tokens/s per quant type.
if ((dry)); then
  mm=(--shape 1024x1024 -r 3)
else
  mm=(-r 20)
fi
CAP=60 RESERVE=$society_reserve step bench-matmul bench-matmul.json "$bin_joule" bench matmul --device "$dev" "${mm[@]}" --json

# ---- 4. Per model: logits against the CPU, then joule bench at 1, 16 and 64 sequences.
ids="1 5 900 33 2048 77 15000 8 91 4000 123 64 7 300 2500 11 42 1000 17 60000 3 250 9000 12 480 31 7000 2 99 100000 55 640"
read -r -a bench_args <<<"${JOULE_GPU_CHECK_BENCH:-$( ((dry)) && echo "-p 16 -n 4 -r 1" || echo "-p 256 -n 32 -r 2")}"
for m in "${models[@]}"; do
  if ! wait_model "$m"; then
    record "logits-$m" skip 0 "no synthesized file ($(cat "$work/synth/$m" 2>/dev/null || echo 'not written'))" ""
    continue
  fi
  f=$mdir/$m.gguf
  if (($(left) < society_reserve + 20)); then
    record "logits-$m" skip 0 "time kept for the society step" ""
    record "bench-$m" skip 0 "time kept for the society step" ""
    continue
  fi
  CAP=90 RESERVE=$society_reserve step "logits-cpu-$m" "logits-cpu-$m.log" "$bin_joule" logits --gguf "$f" --ids "$ids" --prefill 16 --device cpu --out "$work/ref-$m.npy" &&
    CAP=60 RESERVE=$society_reserve step "logits-$m" "logits-$m.json" "$bin_joule" logits --gguf "$f" --ids "$ids" --prefill 16 --device "$dev" --against "$work/ref-$m.npy" --json
  rm -f "$work/ref-$m.npy"
  CAP=120 RESERVE=$society_reserve step "bench-$m" "bench-$m.json" "$bin_joule" bench --gguf "$f" --device "$dev" "${bench_args[@]}" -s 1,16,64 --json
done

# ---- 5. The paper's workload (the reference runs' round 1 at once), then 60 concurrent
# societies, every agent on its own real-size model (one round).
pairs=()
for m in "${roster[@]}"; do
  [[ $(cat "$work/synth/$m" 2>/dev/null) == pass ]] && pairs+=("$m=$mdir/$m.gguf")
done
rdir=${JOULE_GPU_RUNS_DIR:-}
if [[ -z $rdir && -f $bundle/runs.tar.xz ]]; then
  rdir=$work/runs
  mkdir -p "$rdir" && tar -xJf "$bundle/runs.tar.xz" -C "$rdir"
fi
[[ -z $rdir ]] && rdir=$repo/../shared/data/reference-runs/energy-society
if ((${#pairs[@]} != ${#roster[@]})); then
  record trace-roster skip 0 "not every roster model was synthesized (${#pairs[@]} of ${#roster[@]})" ""
elif [[ ! -d $rdir ]]; then
  record trace-roster skip 0 "no reference runs ($rdir)" ""
else
  # --time-limit (counted from the command's start, loading included) ends the trace, keeping
  # what was answered, within half of what is left, so the society step keeps its share.
  limit=$(( ($(left) - 25) / 2 ))
  ((!dry && limit > 270)) && limit=270
  trace_scale=${JOULE_GPU_CHECK_TRACE_SCALE:-0.1}
  ((dry)) && trace_scale=0.02
  trace() {
    step "$1" "$1.json" "$bin_joule" bench trace "$rdir" --models "$(IFS=,; echo "${pairs[*]}")" \
      --rounds 1 --runs "$2" --max-runs "$2" --token-scale "$trace_scale" --device "$dev" \
      --time-limit "$limit" --json
  }
  trace_n=${JOULE_GPU_CHECK_TRACE_RUNS:-10}
  ((dry)) && trace_n=1
  if ! trace trace-roster "$trace_n"; then
    # A memory plan that does not fit on the GPU says how many runs would: trace those.
    fit=$(grep -o 'at most [0-9]* concurrent run' "$L/trace-roster.json.err" 2>/dev/null | grep -o '[0-9][0-9]*' | head -n1)
    if [[ -n $fit ]] && ((fit > 0 && fit < trace_n)); then
      limit=$(( ($(left) - 25) / 2 ))
      ((limit > 270)) && limit=270
      trace trace-roster-fit "$fit"
    fi
  fi
fi
if ((${#pairs[@]} == ${#roster[@]})); then
  sims=${JOULE_GPU_CHECK_SIMS:-$( ((dry)) && echo 1 || echo 60)}
  # --time-limit (counted from the command's start, loading included) ends the societies,
  # keeping what was answered, before the step's own limit, and before the steps 6 when there
  # is time for them.
  limit=$(( $(left) - 25 ))
  ((!dry && limit > 270)) && limit=270
  society() {
    step "$1" "$1.json" "$bin_joule" bench society --models "$(IFS=,; echo "${pairs[*]}")" \
      --sims "$2" --rounds 1 --device "$dev" --plan-context 2048 --time-limit "$limit" --json
  }
  if ! society bench-society-roster "$sims"; then
    # A memory plan that does not fit on the GPU says how many runs would: measure those.
    fit=$(grep -o 'at most [0-9]* concurrent run' "$L/bench-society-roster.json.err" 2>/dev/null | grep -o '[0-9][0-9]*' | head -n1)
    if [[ -n $fit ]] && ((fit > 0 && fit < sims)); then
      limit=$(( $(left) - 25 ))
      ((limit > 270)) && limit=270
      society bench-society-roster-fit "$fit"
    fi
  fi
else
  record bench-society-roster skip 0 "not every roster model was synthesized (${#pairs[@]} of ${#roster[@]})" ""
fi
rm -f "$mdir"/*.gguf 2>/dev/null
((dry)) && exit 0

# ---- 6. With the time left: golden logits on CUDA, SmolLM2, joules per token, a default society.
model=${JOULE_GPU_MODEL:-}
export JOULE_HOME=${JOULE_HOME:-$HOME/.cache/joule}
cached=$JOULE_HOME/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -z $model && -f $cached ]]; then model=$cached; fi
if [[ -z $model ]] && compgen -G "$bundle/model/*.part*" >/dev/null; then
  mkdir -p "$(dirname "$cached")"
  cat "$bundle"/model/*.part* >"$cached.tmp"
  if [[ -f $bundle/model/sha256 ]] && [[ "$(sha256sum "$cached.tmp" | cut -d' ' -f1)" != "$(cat "$bundle/model/sha256")" ]]; then
    say "the model's parts do not add up to the recorded sha256"
    rm -f "$cached.tmp"
  else
    mv "$cached.tmp" "$cached"
    model=$cached
  fi
fi
[[ -n $model ]] && say "SmolLM2: $model" || say "no SmolLM2 model found: its bench and society steps are skipped"

# Golden logits on CUDA, every architecture (tests/quick/golden_logits.rs, tests/quick/roster_*.rs:
# modules of the quick test binary, run by their path).
quick=${test_bins[quick]:-}
golden=(golden_logits)
[[ -n $quick ]] && golden+=($("$quick" --list 2>/dev/null | grep -o '^roster_[a-z0-9_]*::' | grep -v '^roster_society::' | sort -u | sed 's/::$//'))
for name in "${golden[@]}"; do
  if [[ -z $quick ]]; then
    record "golden-$name" skip 0 "no test executable" ""
    continue
  fi
  CAP=60 step "golden-$name" "golden-$name.log" env JOULE_TEST_DEVICE=cuda RUST_TEST_THREADS=4 "$quick" "$name::"
done

if [[ -n $model ]]; then
  CAP=90 step smollm2-bench smollm2-bench.json "$bin_joule" bench --gguf "$model" --device cuda -p 512 -n 128 -r 3 -s 1,16,64 --json
  CAP=60 step smollm2-bench-f16 smollm2-bench-f16.json "$bin_joule" bench --gguf "$model" --device cuda -p 512 -n 128 -r 3 -s 64 --kv-cache f16 --json
else
  for n in smollm2-bench smollm2-bench-f16; do record "$n" skip 0 "no model" ""; done
fi

# Energy meters, and measured joules per token at batch 1 and 64 (NVML's counter).
step meters meters.log "$bin_joule" meters
jmodels=()
[[ -n $model ]] && jmodels+=("$model")
for f in tests/fixtures/roster/*.q8_0.gguf tests/fixtures/golden/*.gguf; do
  [[ -f $f ]] && jmodels+=("$f")
done
for f in "${jmodels[@]}"; do
  n=$(basename "$f" .gguf)
  CAP=60 step "joules-$n" "joules-$n.json" "$bin_joule" calibrate --gguf "$f" --device cuda --meter nvml \
    --batch 1,64 -p 128 -n 32 -r 2 --json
done

if [[ -n $model ]]; then
  # One default society on CUDA (metered; its meter.json goes to the logs).
  cfg=$work/default-cuda.toml
  sed 's/^device = "cpu"/device = "cuda"/' configs/energy-society/default-smollm2.toml >"$cfg"
  step society society.log "$bin_joule" run "$cfg" --out "$work/society-run"
  cp "$work/society-run/meter.json" "$L/society-meter.json" 2>/dev/null || true
else
  record society skip 0 "no model" ""
fi
exit 0
