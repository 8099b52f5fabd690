package runlog

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/postgres"

	"github.com/runlog/runlog/bench/internal/driver/pgdb"
	"github.com/runlog/runlog/bench/internal/harness"
)

// pgSchema is the schema runlog-pg keeps its tables in, so that emptying
// them is dropping the schema, and River's tables in the same database are
// never touched.
const pgSchema = "runlog_bench"

// pgPool is runlog-pg's connection pool, River-PG's size (the driver
// river.poolSize), so that both enqueue through as many connections.
const pgPool = 32

// Tuned W4 lease settings: the fastest rescue runlog-pg is configured for
// here, as River's tuned W4 sets RescueStuckJobsAfter to 1s.
const (
	tunedLease     = time.Second
	tunedHeartbeat = 250 * time.Millisecond
	tunedRescue    = 250 * time.Millisecond
)

// OpenPostgres opens runlog on the PostgreSQL server at cfg.PostgresURL,
// its tables in the schema runlog_bench (dropped and created again when
// cfg.Fresh; runlog applies its migrations at open). The settings are
// newDriver's; the node id is runlog's default (host-pid-random), so a W4
// worker restarted after kill -9 is a new node and the killed node's
// attempts are rescued when their lease expires (default 5s), not at once
// as a node that restarts under its old id would have them. W4 tuned also
// shortens the lease to 1s.
func OpenPostgres(ctx context.Context, cfg harness.Config) (harness.Driver, error) {
	u, err := url.Parse(cfg.PostgresURL)
	if err != nil {
		return nil, fmt.Errorf("runlog-pg: bad PostgreSQL URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", pgSchema) // pgx sends it as a run-time parameter
	u.RawQuery = q.Encode()
	pgURL := u.String()
	if err := prepareSchema(ctx, pgURL, cfg.Fresh); err != nil {
		return nil, err
	}
	d, rc := newDriver(cfg)
	opts := postgres.Options{MaxConns: pgPool}
	if cfg.Workload == harness.W4 && cfg.Mode == harness.ModeTuned {
		opts.Lease, opts.Heartbeat, opts.RescueEvery = tunedLease, tunedHeartbeat, tunedRescue
	}
	r, err := postgres.OpenWith(ctx, pgURL, rc, opts)
	if err != nil {
		return nil, fmt.Errorf("runlog-pg: open: %w", err)
	}
	d.r = r
	subscribe(r)
	d.settings = func(ctx context.Context) []harness.Setting {
		var out []harness.Setting
		if conn, err := pgx.Connect(ctx, pgURL); err != nil {
			out = append(out, harness.Setting{Name: "postgres", Value: "unknown: " + err.Error()})
		} else {
			out = pgdb.Settings(ctx, conn)
			conn.Close(context.WithoutCancel(ctx))
		}
		lease := "lease 5s, heartbeat 1s, rescue scan every 1s (defaults)"
		if opts.Lease != 0 {
			lease = fmt.Sprintf("lease %s, heartbeat %s, rescue scan every %s", opts.Lease, opts.Heartbeat, opts.RescueEvery)
		}
		return append(out,
			harness.Setting{Name: "runlog-pg pgx pool", Value: fmt.Sprint(pgPool)},
			harness.Setting{Name: "runlog-pg polling", Value: "LISTEN/NOTIFY wake-ups, fallback poll every 1s (default)"},
			harness.Setting{Name: "runlog-pg leases", Value: lease},
		)
	}
	return d, nil
}

// prepareSchema creates runlog-pg's schema if it is missing, after
// dropping it (every job, breaker and migration row) when fresh.
func prepareSchema(ctx context.Context, pgURL string, fresh bool) error {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("runlog-pg: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if fresh {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgSchema+" CASCADE"); err != nil {
			return fmt.Errorf("runlog-pg: drop schema %s: %w", pgSchema, err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgSchema); err != nil {
		return fmt.Errorf("runlog-pg: create schema %s: %w", pgSchema, err)
	}
	return nil
}
