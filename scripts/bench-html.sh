#!/usr/bin/env bash
# Open time of the HTML report (benches/README.md): writes the
# page of the shared reference condition coop/exponent_0.5 (5 runs of 30
# rounds, transcripts) and of a 60-run scripted condition (full call records),
# loads each in headless Chromium N times (default 3) and prints the page size,
# the time from navigation start to the drawn page (`ready_ms`: HTML parsed,
# data parsed, charts, timeline and the first run's call list drawn) and the
# time of a search over every call of every run (`search_ms`), from the page's
# `#selftest=` hook. Usage: scripts/bench-html.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-3}
chrome=${JOULE_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome)}
cargo build --release --bin joule >/dev/null 2>&1
joule=target/release/joule
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$joule report ../shared/data/reference-runs/energy-society/coop/exponent_0.5 --out "$work/coop" --html --no-plots >/dev/null
for i in $(seq 1 60); do
    $joule run configs/energy-society/baseline-comp.toml --seed "$i" --out "$work/c60/cond/run_$i" >/dev/null
done
$joule report "$work/c60/cond" --out "$work/c60/report" --html --no-plots >/dev/null
for page in "$work/coop/report.html" "$work/c60/report/report.html"; do
    echo "$page: $(du -h "$page" | cut -f1)"
    for r in $(seq 1 "$n"); do
        "$chrome" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" \
            --dump-dom "file://$page#selftest=energy" 2>/dev/null |
            grep -o '"runs":[0-9]*,"ready_ms":[0-9]*,"search_ms":[0-9]*' || echo "no result"
    done
done
