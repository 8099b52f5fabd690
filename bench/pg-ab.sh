#!/bin/sh
# pg-ab.sh OLD NEW ROUNDS PG_URL: runlog-pg of two builds of benchrun (OLD
# and NEW, e.g. built from two commits with `go build -o … ./cmd/benchrun`)
# and River on PostgreSQL tuned (from NEW), side by side on one PostgreSQL:
# W1 at 16 and 256 slots (5 000 jobs), W2 (10 s, 64 producers, 64 slots,
# 256 outstanding) and W3 (500 jobs, 16 slots), the three systems in turn
# within each round. One line per run: round system workload slots rate
# (W1: processing jobs/s; W2, W3: completed jobs/s), then the lost and
# duplicated jobs and the extra attempts. Run it under
# `flock /tmp/bench.lock` so that no other benchmark runs at once.
set -eu
old=$1 new=$2 rounds=$3 pg=$4
for round in $(seq 1 "$rounds"); do
	for w in "W1 16 -n 5000" "W1 256 -n 5000" "W2 64 -duration 10s -producers 64 -outstanding 256" "W3 16 -n 500"; do
		set -- $w
		wl=$1 conc=$2
		shift 2
		for sys in old new river; do
			case $sys in
			old) bin=$old a="-system runlog-pg" ;;
			new) bin=$new a="-system runlog-pg" ;;
			river) bin=$new a="-system river-pg -mode tuned" ;;
			esac
			# shellcheck disable=SC2086
			line=$("$bin" run $a -workload "$wl" -conc "$conc" "$@" -pg "$pg" 2>/dev/null | tail -1)
			printf '%s %s %s %s %s\n' "$round" "$sys" "$wl" "$conc" "$(printf '%s' "$line" | python3 -c 'import json, sys
d = json.load(sys.stdin)
print(round(d.get("process_rate") or d.get("complete_rate") or 0), "missing", d.get("missing"), "dup", d.get("duplicates"), "extra", d.get("extra_attempts"), d.get("error", ""))')"
		done
	done
done
