#!/usr/bin/env bash
# The GPU check's logic on the CPU, so it cannot rot where no GPU is: runs
# `scripts/gpu-check.sh --cpu` (tiny models with the real vocabularies, every step on the CPU,
# one society) with this checkout's release build, prints its summary, and exits 1 unless every
# step of the real-size part passed: the five syntheses, each model's logits against the CPU and
# `joule bench` at 1, 16 and 64 sequences, the tokens/s per quant type, the kernel tests (their
# CUDA test skips here), the paper's workload (`joule bench trace` on one reference run's round
# 1) and the society with every agent on its own model, each with the grid's estimate. What only a GPU shows (CUDA numbers, the kernel tests on a device, the old steps 6)
# is not checked. Builds `joule` and the lib's tests first (cargo; a no-op when they are built).
#
#   scripts/gpu-check-dry-run.sh [OUT]     # default OUT: a temporary folder
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d "${TMPDIR:-/tmp}/joule-gpu-dry.XXXXXX")}
cargo build --release --bin joule >&2
lib_tests=$(cargo test --release --lib --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"][0] == "lib":
        print(m["executable"])')
target=${CARGO_TARGET_DIR:-$PWD/target}
JOULE_GPU_CHECK_BIN=$target/release/joule JOULE_GPU_CHECK_LIB_TESTS=$lib_tests \
  JOULE_GPU_CHECK_BUDGET=${JOULE_GPU_CHECK_BUDGET:-1800} JOULE_GPU_CHECK_SOCIETY_S=${JOULE_GPU_CHECK_SOCIETY_S:-600} \
  OUT=$out ./scripts/gpu-check.sh --cpu >&2 || true
cat "$out/summary.md"
python3 - "$out/summary.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
status = {s["step"]: s["status"] for s in doc["steps"]}
models = ["qwen3-8b", "qwen3.5-9b", "gemma4-e4b", "qwen3.5-4b", "nemotron-3-nano-4b"]
need = ["kernel-tests", "bench-matmul", "trace-roster", "bench-society-roster"]
need += [f"{k}-{m}" for m in models for k in ("synth", "logits-cpu", "logits", "bench")]
bad = [f"{n}: {status.get(n, 'missing')}" for n in need if status.get(n) != "pass"]
real = doc.get("real_size", {})
for m in models:
    cmp = ((real.get(m) or {}).get("logits") or {}).get("comparison") or {}
    # The dry run compares the CPU with itself on the same path (prompt then decode steps).
    if not cmp.get("pass"):
        bad.append(f"logits-{m}: comparison {cmp or 'missing'}")
    seqs = {r.get("seqs") for r in ((real.get(m) or {}).get("bench") or []) if isinstance(r, dict)}
    if seqs != {1, 16, 64}:
        bad.append(f"bench-{m}: sequences {sorted(seqs)}")
types = {r.get("dtype") for r in doc.get("matmul") or [] if isinstance(r, dict)}
if types != {"Q4K", "Q5K", "Q6K", "Q8_0", "Q5_0"}:
    bad.append(f"bench-matmul: types {sorted(types)}")
if not (doc.get("grid_estimate") or {}).get("hours"):
    bad.append("no grid estimate")
trace = doc.get("trace") or {}
if not (doc.get("trace_grid_estimate") or {}).get("hours"):
    bad.append(f"no grid estimate from the trace ({trace.get('error') or 'no hours'})")
if trace.get("replay_mismatches") != 0 or trace.get("failed_calls") != 0 or not trace.get("calls"):
    bad.append(f"trace-roster: calls {trace.get('calls')}, failed {trace.get('failed_calls')}, "
               f"replay mismatches {trace.get('replay_mismatches')}")
if bad:
    print("gpu-check dry run FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"gpu-check dry run: every step passed ({doc['elapsed_s']} s)", file=sys.stderr)
EOF
