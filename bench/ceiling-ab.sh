#!/bin/sh
# ceiling-ab.sh BENCHRUN ROUNDS PG_URL: W1's processing rate (5 000 jobs) of
# runlog-pg and River on PostgreSQL tuned (both from the benchrun build
# BENCHRUN), next to PostgreSQL's own ceiling for the same jobs (cmd/pgceiling:
# the claim and outcome writes alone, claims of as many rows as the slots, two
# connections), at 16 and 256 slots, in turn within each round. One line per
# run: round system slots jobs/s. Run it under `flock /tmp/runlog-bench.lock`.
set -eu
bin=$1 rounds=$2 pg=$3
ceiling=$(dirname "$bin")/pgceiling
[ -x "$ceiling" ] || (cd "$(dirname "$0")" && go build -o "$ceiling" ./cmd/pgceiling)
for round in $(seq 1 "$rounds"); do
	for conc in 16 256; do
		for sys in runlog-pg river ceiling; do
			case $sys in
			runlog-pg) rate=$("$bin" run -system runlog-pg -workload W1 -conc "$conc" -n 5000 -pg "$pg" 2>/dev/null | tail -1) ;;
			river) rate=$("$bin" run -system river-pg -mode tuned -workload W1 -conc "$conc" -n 5000 -pg "$pg" 2>/dev/null | tail -1) ;;
			ceiling) rate=$("$ceiling" -pg "$pg" -n 5000 -batch "$conc" -workers 2) ;;
			esac
			printf '%s %s %s %s\n' "$round" "$sys" "$conc" "$(printf '%s' "$rate" | python3 -c 'import json, sys
d = json.load(sys.stdin)
print(round(d.get("process_rate") or d.get("jobs_per_s") or 0))')"
		done
	done
	uptime
done
