#!/usr/bin/env bash
# The Slurm test: on a real single-node cluster (scripts/slurm-local.sh: Debian's slurmctld,
# slurmd and munge on localhost), a scripted sweep submitted as a job array with
# `joule sweep --slurm --submit` finishes, `--status` reports every cell done, and the run
# folders are identical to those of the same sweep run locally (and `joule report` gives the
# same tables for both). Then a cell whose run was cut short is the only one the next
# submission runs, and it completes identically.
#
# Needs root (it installs the Slurm packages when missing and starts the daemons).
# scripts/test.sh runs it as root unless JOULE_SLURM_TEST=0. Takes about a minute after the packages
# are installed.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet
joule=$(realpath "${CARGO_TARGET_DIR:-target}")/release/joule
work=$(mktemp -d "${TMPDIR:-/tmp}/joule-slurm-test.XXXXXX")
cluster=$work/cluster
cleanup() {
    ./scripts/slurm-local.sh stop "$cluster" || true
    rm -rf "$work"
}
trap cleanup EXIT
eval "$(./scripts/slurm-local.sh start "$cluster" | tail -1)"

fail() { echo "slurm-test: FAILED: $*" >&2; exit 1; }

# A scripted sweep: 2 configs x 2 seeds, 4 rounds each.
for c in baseline-comp scarcity-coop; do
    sed 's/^max_rounds = 30$/max_rounds = 4/' "configs/energy-society/$c.toml" >"$work/$c.toml"
done
cat >"$work/sweep.toml" <<'EOF'
configs = ["baseline-comp.toml", "scarcity-coop.toml"]
seeds = [1, 2]
EOF
sweep=$work/sweep.toml
on_cluster=$work/on-cluster
local_out=$work/local

wait_all_done() {
    local status=""
    for _ in $(seq 240); do
        status=$("$joule" sweep "$sweep" --out "$on_cluster" --status)
        if grep -q "4 cells: 4 done, 0 running, 0 failed, 0 pending" <<<"$status"; then
            echo "$status"
            return 0
        fi
        if grep -q " failed" <<<"$status" && ! grep -q "0 failed" <<<"$status"; then
            echo "$status" >&2
            cat "$on_cluster"/slurm/logs/* >&2 || true
            fail "a cell failed on the cluster"
        fi
        sleep 0.5
    done
    echo "$status" >&2
    squeue >&2 || true
    fail "the array did not finish within 120 s"
}

same_cell() {
    local rel=$1 f
    for f in events.jsonl config.resolved.toml agents.json config.json token_usage.json transcript.json COMPLETE; do
        cmp -s "$on_cluster/$rel/$f" "$local_out/$rel/$f" || fail "$rel/$f differs between the cluster and the local sweep"
    done
}

# 1. Submit the whole sweep as an array; every cell finishes.
"$joule" sweep "$sweep" --out "$on_cluster" --slurm --submit --time 00:10:00 --cpus-per-task 1 \
    --extra '--mem=200M' | tee "$work/submit.txt"
grep -q "Submitted batch job" "$work/submit.txt" || fail "sbatch did not accept the array"
grep -q -- "--array=0-3" "$on_cluster/slurm/sweep.sbatch" || fail "the array does not hold cells 0-3"
wait_all_done

# 2. The same sweep locally: identical run folders.
"$joule" sweep "$sweep" --out "$local_out" >/dev/null
cells=(baseline-comp/seed_1 baseline-comp/seed_2 scarcity-coop/seed_1 scarcity-coop/seed_2)
for rel in "${cells[@]}"; do same_cell "$rel"; done
grep -q '"state": "done"' "$on_cluster/slurm/state/baseline-comp/seed_1.json" || fail "no done state recorded"

# `joule report` reads the cluster's folders as it reads local ones.
"$joule" report "$on_cluster/baseline-comp" --out "$work/report-cluster" >/dev/null
"$joule" report "$local_out/baseline-comp" --out "$work/report-local" >/dev/null
for f in "$work"/report-local/aggregate/*.csv; do
    name=$(basename "$f")
    # These two hold the run folders' paths.
    [[ $name == runs.csv || $name == recommendations_raw.csv ]] && continue
    cmp -s "$f" "$work/report-cluster/aggregate/$name" || fail "report table $name differs"
done

# 3. A cell cut short (its folder without COMPLETE, as a killed task leaves it) is the only one
#    the next submission runs.
rm "$on_cluster/scarcity-coop/seed_1/COMPLETE"
"$joule" sweep "$sweep" --out "$on_cluster" --status | grep -q "failed      2  " \
    || fail "--status does not report cell 2 as failed"
"$joule" sweep "$sweep" --out "$on_cluster" --slurm --submit --time 00:10:00 >/dev/null
grep -q -- "--array=2$" "$on_cluster/slurm/sweep.sbatch" || fail "the resubmission does not hold exactly cell 2"
wait_all_done
same_cell scarcity-coop/seed_1

# 4. Nothing left to run: no script is written.
"$joule" sweep "$sweep" --out "$on_cluster" --slurm | grep -q "nothing to submit" || fail "a done sweep was resubmitted"
echo "slurm-test: passed"
