#!/usr/bin/env bash
# A few minutes on a real GPU: build (or take prebuilt) `--features cuda` executables, run the
# CUDA kernel tests and the golden-logits tests of every architecture on CUDA, `joule bench` on
# SmolLM2 at 1, 16 and 64 sequences (and `joule bench society --sims 64` if it exists), the
# measured joules per prompt and generated token (NVML) of SmolLM2 and the roster and golden
# fixtures at batch 1 and 64 (`joule calibrate`), and one default society on CUDA (metered);
# write summary.md and summary.json under $OUT. For a Linux machine with
# an NVIDIA GPU and driver, many cores and no network. Stops itself after JOULE_GPU_CHECK_BUDGET
# seconds (default 480) whatever happened, keeping what it measured: the summary is rewritten
# after each step and on exit. $OUT gets four files: summary.md, summary.json, gpu-check.log (all
# output) and logs.tar.gz (each step's log, steps.jsonl, env.json, the bench JSON).
#
# What it needs, all local:
# - this repository's working tree (tests/fixtures/ for the golden tests);
# - the default model, SmolLM2-135M-Instruct Q4_1: in Joule's cache ($JOULE_HOME/models or
#   ~/.cache/joule/models), at $JOULE_GPU_MODEL, or as parts in the bundle (below);
# - executables, either
#   a) built here: cargo with every crate already present (~/.cargo registry or a vendored
#      source set up in .cargo/config.toml; the build runs --offline) and a CUDA toolkit
#      (nvcc on PATH, $CUDA_HOME, /usr/local/cuda, or a carried one from
#      scripts/fetch-cuda-toolkit.sh at $JOULE_CUDA_ROOT), or
#   b) prebuilt by scripts/gpu-bundle.sh on another machine, in $JOULE_GPU_BUNDLE (default
#      .gpu-bundle/): joule and the test executables, plus the model in parts. Used when that
#      folder exists, or when (a) is impossible.
# - at run time, the CUDA libraries candle links (libcudart, libcublas, libcublasLt, libcurand,
#   libnvrtc of CUDA 13): found in the toolkit, in pip's nvidia/cu13/lib folders of python3, or
#   on the loader's path.
#
#   OUT=/tmp/gpu-out scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
start=$(date +%s)
budget=${JOULE_GPU_CHECK_BUDGET:-480}
deadline=$((start + budget))
OUT=${OUT:-$repo/gpu-check-out}
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/joule-gpu-check.XXXXXX")
mkdir -p "$work/logs"
steps=$work/logs/steps.jsonl
: >"$steps"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
L=$work/logs
bundle=${JOULE_GPU_BUNDLE:-$repo/.gpu-bundle}
jobs=${JOULE_GPU_JOBS:-$(nproc)}

say() { echo "gpu-check [$(($(date +%s) - start))s]: $*"; }
left() { echo $((deadline - $(date +%s))); }

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

summary() {
  python3 - "$work/logs" "$OUT" "$start" <<'EOF' || true
import json, os, sys, time
logs, dest, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
out = logs
steps = []
for line in open(os.path.join(out, "steps.jsonl")):
    line = line.strip()
    if line:
        steps.append(json.loads(line))
env = {}
try:
    env = json.load(open(os.path.join(out, "env.json")))
except Exception:
    pass
bench = {}
for s in steps:
    if s["step"].startswith("bench") and s["status"] == "pass" and s["output"]:
        try:
            bench[s["step"]] = json.load(open(os.path.join(out, s["output"])))
        except Exception as e:
            bench[s["step"]] = {"error": str(e)}
doc = {"elapsed_s": round(time.time() - start, 1), "env": env, "steps": steps, "bench": bench}
json.dump(doc, open(os.path.join(dest, "summary.json"), "w"), indent=2)
md = ["# Joule GPU check", ""]
if env:
    md += [f"- GPU: {env.get('gpu', '?')} (compute capability {env.get('compute_cap', '?')}, "
           f"{env.get('memory', '?')}), driver {env.get('driver', '?')}",
           f"- commit: {env.get('commit', '?')}; executables: {env.get('executables', '?')}", ""]
md += [f"Elapsed: {doc['elapsed_s']} s", "", "| step | status | seconds | note |", "|---|---|---|---|"]
for s in steps:
    md.append(f"| {s['step']} | {s['status']} | {s['seconds']:.1f} | {s['note']} |")
joules = {}
for s in steps:
    if s["step"].startswith("joules-") and s["status"] == "pass" and s["output"]:
        try:
            joules[s["step"]] = json.load(open(os.path.join(out, s["output"])))
        except Exception as e:
            joules[s["step"]] = {"error": str(e)}
doc["joules"] = joules
json.dump(doc, open(os.path.join(dest, "summary.json"), "w"), indent=2)
rows = []
for name, res in bench.items():
    if isinstance(res, list):
        for r in res:
            rows.append(f"| {name} | {r.get('test')} | {r.get('seqs')} | "
                        f"{r.get('avg_ts', 0):.1f} ± {r.get('stddev_ts', 0):.1f} |")
if rows:
    md += ["", "## joule bench (SmolLM2-135M-Instruct Q4_1, CUDA)", "",
           "| run | test | sequences | tokens/s |", "|---|---|---|---|"] + rows
jrows = []
for name, res in joules.items():
    for p in (res.get("points") or []) if isinstance(res, dict) else []:
        jrows.append(f"| {p.get('model')} | {p.get('size_b', 0):.4f} | {p.get('batch')} | "
                     f"{p.get('j_per_prompt_token', 0):.6f} | {p.get('j_per_generated_token', 0):.6f} |")
if jrows:
    meter = next((r.get("meter") for r in joules.values() if isinstance(r, dict) and r.get("meter")), "?")
    md += ["", f"## Joules per token (joule calibrate, meter {meter}, CUDA)", "",
           "| model | S (B) | batch | J/prompt token | J/generated token |", "|---|---|---|---|---|"] + jrows
open(os.path.join(dest, "summary.md"), "w").write("\n".join(md) + "\n")
EOF
  tar -czf "$OUT/logs.tar.gz" -C "$work" logs 2>/dev/null || true
}

# step NAME OUTFILE CMD...: run CMD with the time that is left (at most), output to OUTFILE.
step() {
  local name=$1 outfile=$2
  shift 2
  local t0 rem rc status note
  rem=$(left)
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
    note="stopped at the time limit"
  elif ((rc != 0)); then
    status=fail
    note="exit $rc: $(tail -n 3 "$L/$outfile" "$L/$outfile.err" 2>/dev/null | grep -v '^==>' | tr '\n|' ' /' | cut -c1-200)"
  fi
  record "$name" "$status" "$(($(date +%s) - t0))" "$note" "$outfile"
  say "$name: $status"
  [[ $status == pass ]]
}

# A last resort past the per-step limits: end the script (the EXIT trap still writes the summary).
(sleep $((budget + 20)) && kill -TERM $$ 2>/dev/null) &
watchdog=$!
trap 'kill $watchdog 2>/dev/null; summary; say "done; summary in $OUT/summary.md"' EXIT
trap 'exit 143' TERM INT

# ---- The machine.
if ! command -v nvidia-smi >/dev/null; then
  say "nvidia-smi not found: not an NVIDIA machine"
  record env fail 0 "nvidia-smi not found" ""
  exit 1
fi
IFS=, read -r gpu_name driver mem cap < <(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | head -n1)
cap_num=$(echo "$cap" | tr -d ' .')
python3 - "$L/env.json" "$gpu_name" "$driver" "$mem" "$cap" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'EOF'
import json, sys
p, gpu, driver, mem, cap, commit = [a.strip() for a in sys.argv[1:]]
json.dump({"gpu": gpu, "driver": driver, "memory": mem, "compute_cap": cap, "commit": commit}, open(p, "w"))
EOF
say "GPU: $gpu_name, driver $driver, compute capability $cap"

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

# ---- The model.
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
[[ -n $model ]] && say "model: $model" || say "no SmolLM2 model found: bench and society steps are skipped"

# ---- Executables: built here, or the bundle's.
bin_joule=""
declare -A test_bins=()
if [[ -d $bundle/bin ]]; then
  mode=bundle
  for f in "$bundle"/bin/*.xz; do [[ -e $f ]] && xz -dkf "$f"; done
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
  target=${JOULE_CUDA_TARGET:-$repo/target-cuda}
  step build build.log cargo build --release --offline -j "$jobs" --features cuda --target-dir "$target" --bin joule || exit 1
  step build-tests build-tests.log cargo test --release --offline -j "$jobs" --features cuda --target-dir "$target" --no-run --message-format=json || exit 1
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
  record build fail 0 "neither cargo nor prebuilt executables ($bundle/bin)" ""
  exit 1
fi
python3 - "$L/env.json" "$mode" <<'EOF'
import json, sys
p = sys.argv[1]; d = json.load(open(p)); d["executables"] = sys.argv[2]; json.dump(d, open(p, "w"))
EOF

# ---- Kernel tests (the lib's unit tests under inference::kernels::cuda): they must not skip.
if [[ -n ${test_bins[lib]:-} ]]; then
  step kernel-tests kernel-tests.log env RUST_TEST_THREADS=1 "${test_bins[lib]}" kernels::cuda --nocapture
  if grep -q "skipped, no CUDA device" "$L/kernel-tests.log"; then
    record kernel-tests-ran fail 0 "the kernel tests found no CUDA device" kernel-tests.log
  fi
else
  record kernel-tests skip 0 "no lib test executable" ""
fi

# ---- Golden logits on CUDA, every architecture (tests/golden_logits.rs, tests/roster_*.rs).
for name in golden_logits $(printf '%s\n' "${!test_bins[@]}" | grep '^roster_' | grep -v roster_society | sort); do
  exe=${test_bins[$name]:-}
  if [[ -z $exe ]]; then
    record "golden-$name" skip 0 "no test executable" ""
    continue
  fi
  step "golden-$name" "golden-$name.log" env JOULE_TEST_DEVICE=cuda RUST_TEST_THREADS=4 "$exe"
done

# ---- joule bench on SmolLM2 at 1, 16 and 64 sequences (and 64 with f16 caches).
if [[ -n $model ]]; then
  for s in 1 16 64; do
    step "bench-s$s" "bench-s$s.json" "$bin_joule" bench --gguf "$model" --device cuda -p 512 -n 128 -r 3 -s "$s" --json
  done
  # f16 key/value caches (the f16 decode-attention kernel) at 64 sequences.
  step "bench-s64-f16" "bench-s64-f16.json" "$bin_joule" bench --gguf "$model" --device cuda -p 512 -n 128 -r 3 -s 64 --kv-cache f16 --json
  if "$bin_joule" bench society --help >/dev/null 2>&1; then
    step bench-society bench-society.log "$bin_joule" bench society --sims 64 --device cuda
  else
    record bench-society skip 0 "joule bench society does not exist in this build" ""
  fi
else
  for n in bench-s1 bench-s16 bench-s64 bench-s64-f16; do record "$n" skip 0 "no model" ""; done
fi

# ---- Energy meters, and measured joules per token at batch 1 and 64 (NVML's counter).
step meters meters.log "$bin_joule" meters
jmodels=()
[[ -n $model ]] && jmodels+=("$model")
for f in tests/fixtures/roster/*.q8_0.gguf tests/fixtures/golden/*.gguf; do
  [[ -f $f ]] && jmodels+=("$f")
done
for f in "${jmodels[@]}"; do
  n=$(basename "$f" .gguf)
  step "joules-$n" "joules-$n.json" "$bin_joule" calibrate --gguf "$f" --device cuda --meter nvml \
    --batch 1,64 -p 128 -n 32 -r 2 --json
done

if [[ -n $model ]]; then
  # ---- One default society on CUDA.
  cfg=$work/default-cuda.toml
  sed 's/^device = "cpu"/device = "cuda"/' configs/energy-society/default-smollm2.toml >"$cfg"
  step society society.log "$bin_joule" run "$cfg" --out "$work/society-run"
  # What the meter measured in the society (per call in events.jsonl; totals here).
  cp "$work/society-run/meter.json" "$L/society-meter.json" 2>/dev/null || true
else
  record society skip 0 "no model" ""
fi
exit 0
