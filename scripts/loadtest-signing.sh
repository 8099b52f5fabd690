#!/usr/bin/env bash
# Measures http deliveries to runlog loadtest's no-op loopback receiver at
# concurrency 64 with signing off and on (runlog serve
# --signing-secret-file), alternating the two ROUNDS times on fresh data
# directories, and prints each run's enqueue and delivery lines. Run it
# under flock /tmp/bench.lock so that no other benchmark shares the
# machine.
#
#   flock /tmp/bench.lock scripts/loadtest-signing.sh [ROUNDS] [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
duration=${2:-5s}
work=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/runlog" ./cmd/runlog
echo "whsec_$(head -c 32 /dev/urandom | base64)" > "$work/secret"
chmod 600 "$work/secret"
port=17171
for round in $(seq "$rounds"); do
  for mode in off on; do
    data="$work/data-$round-$mode"
    extra=()
    [ "$mode" = on ] && extra=(--signing-secret-file "$work/secret")
    "$work/runlog" serve --data "$data" --addr "127.0.0.1:$port" --concurrency 64 --log-level warn "${extra[@]}" &
    pid=$!
    for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
    echo "round $round, signing $mode:"
    "$work/runlog" loadtest --server "http://127.0.0.1:$port" --conns 64 --batch 100 --duration "$duration" | sed 's/^/  /'
    kill "$pid"; wait "$pid" || true
    pid=
  done
done
