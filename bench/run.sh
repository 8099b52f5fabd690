#!/usr/bin/env bash
# bench/run.sh: runlog side by side with River (PostgreSQL, SQLite), goqite
# (SQLite) and asynq (Redis) — issue 7.
#
#   bench/run.sh           the full matrix (~15 minutes on 2 cores); writes bench/RESULTS.md
#   bench/run.sh --smoke   tiny sizes, runlog and goqite only, no servers (< 1 minute);
#                          fails if a run failed or a job was lost or run twice;
#                          writes the report to $BENCH_OUT (default: a temp file) and prints it
#
# It installs what is missing (PostgreSQL 15, Redis, from Debian), starts
# the servers on loopback with their data in a temp dir, and stops them by
# pid on exit. Environment: BENCH_PG_PORT (55432), BENCH_REDIS_PORT (56379;
# the appendfsync everysec server uses the next port), BENCH_KEEP=1 keeps
# the temp dir, BENCH_SYSTEMS=runlog,goqite,... runs only those systems
# (for development: the report then covers only them).
set -euo pipefail

plan=full
case "${1:-}" in
--smoke) plan=smoke ;;
"") ;;
*) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
pg_port=${BENCH_PG_PORT:-55432}
redis_port=${BENCH_REDIS_PORT:-56379}
redis_port2=$((redis_port + 1))
pgbin=/usr/lib/postgresql/15/bin

say() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)" >&2; }

work=$(mktemp -d /tmp/runlog-bench.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
	local rc=$?
	for pid in "${pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -INT "$pid" 2>/dev/null || true
			for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	if [ "${BENCH_KEEP:-}" = 1 ]; then
		echo "kept $work" >&2
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
need_pkg() { # need_pkg COMMAND-PATH PACKAGE
	if [ ! -x "$1" ] && ! command -v "$1" >/dev/null 2>&1; then
		say "installing $2"
		if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
	fi
}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin

say "building the benchmark"
tags=()
runlog_missing=
if ! build_err=$(cd "$root" && go build . 2>&1); then
	runlog_missing="the runlog engine (root package) did not compile when this ran: $(printf '%s' "$build_err" | grep -m1 -v '^#' || true)"
	tags=(-tags norunlog)
	echo "runlog does not compile; running the peers only" >&2
fi
(cd "$here" && go build "${tags[@]}" -o "$work/benchrun" ./cmd/benchrun)
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"

servers=()
args=()
if [ "$plan" = full ]; then
	need_pkg "$pgbin/initdb" postgresql-15
	need_pkg redis-server redis-server
	for p in "$pg_port" "$redis_port" "$redis_port2"; do
		port_free "$p" || { echo "port $p is in use; set BENCH_PG_PORT / BENCH_REDIS_PORT" >&2; exit 1; }
	done

	say "starting PostgreSQL 15 on 127.0.0.1:$pg_port"
	mkdir -p "$work/pg" "$work/pgsock"
	pg_user=postgres
	if [ "$(id -u)" = 0 ]; then
		chown postgres:postgres "$work/pg" "$work/pgsock"
		as_pg=(runuser -u postgres --)
	else
		pg_user=$(id -un)
		as_pg=()
	fi
	"${as_pg[@]}" "$pgbin/initdb" -D "$work/pg" -U "$pg_user" -A trust --no-sync >"$work/initdb.log" 2>&1 ||
		{ cat "$work/initdb.log" >&2; exit 1; }
	"${as_pg[@]}" "$pgbin/postgres" -D "$work/pg" -c listen_addresses=127.0.0.1 -p "$pg_port" \
		-k "$work/pgsock" -c fsync=on -c synchronous_commit=on -c full_page_writes=on \
		-c max_connections=200 >"$work/pg.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 100); do "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break; sleep 0.1; done
	"$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" || { cat "$work/pg.log" >&2; exit 1; }
	# Stop the postmaster itself (runuser does not pass signals on); its
	# wrapper exits with it.
	pids[${#pids[@]}-1]=$(head -n1 "$work/pg/postmaster.pid")
	"$pgbin/psql" -q -h 127.0.0.1 -p "$pg_port" -U "$pg_user" -d postgres -c "CREATE DATABASE bench"
	pg_url="postgres://$pg_user@127.0.0.1:$pg_port/bench?sslmode=disable"
	servers+=("PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}'), 127.0.0.1:$pg_port, data in a temp dir; fsync=on, synchronous_commit=on, full_page_writes=on (defaults), max_connections=200")

	start_redis() { # start_redis PORT APPENDFSYNC
		mkdir -p "$work/redis-$2"
		redis-server --bind 127.0.0.1 --port "$1" --dir "$work/redis-$2" --appendonly yes \
			--appendfsync "$2" --save "" --daemonize no --logfile "$work/redis-$2.log" &
		pids+=($!)
		for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
		cat "$work/redis-$2.log" >&2
		return 1
	}
	say "starting Redis on 127.0.0.1:$redis_port (appendfsync always) and :$redis_port2 (appendfsync everysec)"
	start_redis "$redis_port" always
	start_redis "$redis_port2" everysec
	rv=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
	servers+=("Redis $rv, 127.0.0.1:$redis_port: appendonly yes, appendfsync always, no RDB snapshots")
	servers+=("Redis $rv, 127.0.0.1:$redis_port2: appendonly yes, appendfsync everysec, no RDB snapshots")
	args=(-pg "$pg_url" -redis-always "127.0.0.1:$redis_port" -redis-everysec "127.0.0.1:$redis_port2")
else
	args=(-strict)
fi

# The build and initdb (--no-sync) leave tens of MB of dirty pages; flush
# them now, so that the first runs' fsyncs do not queue behind their
# writeback.
say "flushing the page cache's dirty pages"
sync
say "describing the machine"
"$work/benchrun" machine -dir "$TMPDIR" >"$work/machine.json"

say "running the $plan plan (one line per run)"
status=0
"$work/benchrun" all -plan "$plan" -out "$work/results.jsonl" -systems "${BENCH_SYSTEMS:-}" "${args[@]}" || status=$?

printf '%s\n' "${servers[@]}" >"$work/servers.txt"
out=$here/RESULTS.md
raw=$work
if [ "$plan" = smoke ]; then
	out=${BENCH_OUT:-$work/RESULTS-smoke.md}
else
	# Keep the raw results next to the report, so that it can be rendered
	# again (with bench/results/ANALYSIS.md, written by hand) without a rerun:
	#   go run ./cmd/benchrun report -in results/results.jsonl -machine results/machine.json \
	#     -servers-file results/servers.txt -analysis results/ANALYSIS.md -out RESULTS.md
	raw=$here/results
	mkdir -p "$raw"
	rm -f "$raw/ANALYSIS.md" # it was about the previous run
	cp "$work/results.jsonl" "$work/machine.json" "$work/servers.txt" "$raw/" 2>/dev/null || true
fi
report_args=(-in "$raw/results.jsonl" -machine "$raw/machine.json" -servers-file "$raw/servers.txt" -out "$out" -plan "$plan")
if [ "$plan" = smoke ]; then
	report_args+=(-command "bench/run.sh --smoke")
else
	report_args+=(
		-note "Sizes: W1 runs runlog with N = 20000 as the issue asks, and each peer with N = 5000, runlog-pg too (it is compared with River on PostgreSQL, on tables of the same size): the peers drain 150 to 6000 jobs/s here, and 20000 each would take the matrix well past its 15-minute budget (a smaller table is no handicap for a database-backed queue). W2 runs 10 s with 64 producers and 64 workers (as many producers as workers: with fewer, runlog is held back by its producers, each waiting ~2 ms for its durable enqueue), W2-paced 5 s at 100 jobs/s, W3 500 jobs, W4 2000 jobs at concurrency 16 with a 30 s window after the restart."
		-note "The machine has 2 cores shared with other work running at the same time (builds and tests), so single numbers carry noise of tens of percent; ratios of 2x or more are robust."
		-note "Peak RSS is the child process that ran the jobs (the client side); the PostgreSQL and Redis servers' memory is not included."
		-note "SQLite is modernc.org/sqlite (pure Go) for both SQLite peers; goqite's own tests use mattn/go-sqlite3 (cgo)."
	)
fi
[ -n "$runlog_missing" ] && report_args+=(-runlog-missing "$runlog_missing")
if [ -f "$raw/results.jsonl" ]; then
	"$work/benchrun" report "${report_args[@]}"
	say "wrote $out"
	if [ "$plan" = smoke ]; then cat "$out"; fi
fi
exit "$status"
