#!/usr/bin/env bash
# Measures http deliveries to runlog loadtest's no-op loopback receiver at
# concurrency 64 with signing off and on (runlog serve
# --signing-secret-file), alternating the two ROUNDS times on fresh data
# directories, and prints each run's enqueue and delivery lines, with the
# CPU time per job of the server and of the load test (its receiver). With
# BASELINE (a git revision, e.g. 6a4ec44), each round first runs that
# revision's server, built in a temporary worktree, signing off and (when
# BASELINE_SIGNS=1, for revisions that have --signing-secret-file) on, so
# that old and new alternate; the load test is this revision's in every
# run. Run it under flock /tmp/runlog-bench.lock so that no other benchmark
# shares the machine.
#
#   flock /tmp/runlog-bench.lock scripts/loadtest-signing.sh [ROUNDS] [DURATION] [BASELINE]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
duration=${2:-5s}
baseline=${3:-}
work=$(mktemp -d)
cleanup() {
  kill "${pid:-}" 2>/dev/null || true
  if [ -n "$baseline" ]; then git worktree remove --force "$work/baseline" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/runlog" ./cmd/runlog
modes=(off on)
if [ -n "$baseline" ]; then
  git worktree add --detach "$work/baseline" "$baseline" >/dev/null 2>&1
  (cd "$work/baseline" && go build -o "$work/runlog-baseline" ./cmd/runlog)
  modes=(baseline off on)
  if [ "${BASELINE_SIGNS:-0}" = 1 ]; then modes=(baseline baseline-on off on); fi
fi
echo "whsec_$(head -c 32 /dev/urandom | base64)" > "$work/secret"
chmod 600 "$work/secret"
port=17171
for round in $(seq "$rounds"); do
  for mode in "${modes[@]}"; do
    data="$work/data-$round-$mode"
    server=("$work/runlog")
    extra=()
    case $mode in
      on) extra=(--signing-secret-file "$work/secret") ;;
      baseline) server=("$work/runlog-baseline") ;;
      baseline-on) server=("$work/runlog-baseline"); extra=(--signing-secret-file "$work/secret") ;;
    esac
    "${server[@]}" serve --data "$data" --addr "127.0.0.1:$port" --concurrency 64 --log-level warn "${extra[@]}" &
    pid=$!
    for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
    case $mode in
      baseline) echo "round $round, $baseline (signing off):" ;;
      baseline-on) echo "round $round, $baseline (signing on):" ;;
      *) echo "round $round, signing $mode:" ;;
    esac
    "$work/runlog" loadtest --server "http://127.0.0.1:$port" --conns 64 --batch 100 --duration "$duration" --server-pid "$pid" | sed 's/^/  /'
    kill "$pid"; wait "$pid" || true
    pid=
    rm -rf "$data"
  done
done
