#!/bin/sh
# postgres.sh starts or stops a throwaway PostgreSQL server for the tests.
#
#   eval "$(.ci/postgres.sh start)"   # prints: export RUNLOG_TEST_POSTGRES_URL=...; export RUNLOG_PG_DIR=...
#   .ci/postgres.sh stop "$RUNLOG_PG_DIR"
#
# start installs the server package if initdb is missing (apt-get, as root),
# initializes a cluster in a new temporary directory (owned by the postgres
# user when run as root, since initdb refuses root), starts it on a free
# loopback port with durable settings (fsync and synchronous_commit on),
# and prints the export lines. Tests (internal/pgtest) then create one
# database per test on it. Logs go to DIR/log.
set -eu

bin=${RUNLOG_PG_BIN:-/usr/lib/postgresql/15/bin}

die() { echo "postgres.sh: $*" >&2; exit 1; }

# as_pg runs a command as the server's user.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		if command -v runuser >/dev/null 2>&1; then
			runuser -u postgres -- "$@"
		else
			su postgres -s /bin/sh -c "$(printf '%s ' "$@")"
		fi
	else
		"$@"
	fi
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null ||
		echo $((20000 + $$ % 20000))
}

start() {
	if [ ! -x "$bin/initdb" ]; then
		[ "$(id -u)" = 0 ] || die "no $bin/initdb and not root: install postgresql-15 (apt-get install -y postgresql-15) or set RUNLOG_PG_BIN"
		echo "postgres.sh: installing postgresql-15" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2
		apt-get install -y -qq postgresql-15 >&2 || apt-get install -y -qq postgresql >&2
		[ -x "$bin/initdb" ] || die "installed, but $bin/initdb is still missing; set RUNLOG_PG_BIN to the server's bin directory"
	fi
	dir=$(mktemp -d "${TMPDIR:-/tmp}/runlog-pg-XXXXXX")
	chmod 755 "$dir"
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || die "running as root and there is no postgres user to run the server as"
		chown postgres: "$dir"
	fi
	port=$(free_port)
	as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; die "initdb failed"; }
	as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
		-o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=300 -c fsync=on -c synchronous_commit=on" \
		start >&2 || { cat "$dir/log" >&2; die "pg_ctl start failed"; }
	echo "export RUNLOG_TEST_POSTGRES_URL='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
	echo "export RUNLOG_PG_DIR='$dir'"
}

stop() {
	dir=${1:-}
	[ -n "$dir" ] && [ -d "$dir/data" ] || die "usage: postgres.sh stop DIR (the RUNLOG_PG_DIR that start printed)"
	as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
	rm -rf "$dir"
}

case "${1:-}" in
start) start ;;
stop) stop "${2:-}" ;;
*) die "usage: postgres.sh start | postgres.sh stop DIR" ;;
esac
