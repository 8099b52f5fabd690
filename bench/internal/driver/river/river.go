// Package river drives River (github.com/riverqueue/river) for the
// benchmark, on PostgreSQL (riverpgxv5) and on SQLite (riversqlite).
package river

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/runlog/runlog/bench/internal/driver/pgdb"
	"github.com/runlog/runlog/bench/internal/driver/sqlitedb"
	"github.com/runlog/runlog/bench/internal/harness"
)

// poolSize is the PostgreSQL connection pool of River's client (pgxpool's
// own default is max(4, cores), too small for 256 producers).
const poolSize = 32

func init() {
	harness.Register(harness.System{Name: "river-pg", Store: "PostgreSQL 15", NeedsPostgres: true, Open: OpenPostgres})
	harness.Register(harness.System{Name: "river-sqlite", Store: "SQLite", Open: OpenSQLite})
}

// Args are the River job args: the harness payload's fields, so the
// encoded args are the same 50 bytes of JSON the other systems store.
type Args struct {
	ID         int64  `json:"i"`
	EnqueuedAt int64  `json:"t"`
	Pad        string `json:"p"`
}

// Kind is the River job kind of Args.
func (Args) Kind() string { return "noop" }

func argsOf(p harness.Payload) Args {
	p = p.Padded()
	return Args{ID: p.ID, EnqueuedAt: p.EnqueuedAt, Pad: p.Pad}
}

// worker calls the harness handler that the running client was started with.
type worker struct {
	river.WorkerDefaults[Args]
	h atomic.Pointer[harness.Handler]
}

func (w *worker) Work(ctx context.Context, job *river.Job[Args]) error {
	h := w.h.Load()
	if h == nil {
		return errors.New("river: no handler set")
	}
	return (*h)(ctx, harness.Payload{ID: job.Args.ID, EnqueuedAt: job.Args.EnqueuedAt})
}

// immediateRetry retries a failed job at once: the smallest backoff River
// allows (a retry time before "now" makes River fall back to its default
// policy).
type immediateRetry struct{}

func (immediateRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().UTC() }

var (
	_ harness.Driver          = (*driver[pgx.Tx])(nil)
	_ harness.Driver          = (*driver[*sql.Tx])(nil)
	_ river.ClientRetryPolicy = immediateRetry{}
)

// driver is generic over River's transaction type, pgx.Tx or *sql.Tx.
type driver[TTx any] struct {
	cfg      harness.Config
	rcfg     *river.Config
	rdriver  riverdriver.Driver[TTx]
	worker   *worker
	inserter *river.Client[TTx]
	running  *river.Client[TTx]
	settings func(ctx context.Context) []harness.Setting
	closeDB  func()
}

// config builds River's client config for cfg.
//
// Defaults: FetchCooldown 100ms, FetchPollInterval 1s, River's default
// retry policy (attempt^4 seconds), JobTimeout 1m, RescueStuckJobsAfter
// 1h. Tuned: FetchCooldown and FetchPollInterval at River's minimum, 1ms.
// W3 retries at once in both modes (the smallest backoff); W4 tuned sets
// JobTimeout and RescueStuckJobsAfter to 1s, the fastest rescue.
func config(cfg harness.Config, w *worker) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	rc := &river.Config{
		Workers:     workers,
		MaxAttempts: cfg.MaxAttempts,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if cfg.Mode == harness.ModeTuned {
		rc.FetchCooldown = river.FetchCooldownMin
		rc.FetchPollInterval = river.FetchPollIntervalMin
	}
	if cfg.Workload == harness.W3 {
		rc.RetryPolicy = immediateRetry{}
	}
	if cfg.Workload == harness.W4 && cfg.Mode == harness.ModeTuned {
		rc.JobTimeout = time.Second
		rc.RescueStuckJobsAfter = time.Second
	}
	return rc
}

func open[TTx any](ctx context.Context, cfg harness.Config, rd riverdriver.Driver[TTx]) (*driver[TTx], error) {
	migrator, err := rivermigrate.New(rd, nil)
	if err != nil {
		return nil, fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	d := &driver[TTx]{cfg: cfg, rdriver: rd, worker: &worker{}}
	d.rcfg = config(cfg, d.worker)
	// The inserter has no queues: it only inserts, so it can be used while
	// no worker client runs.
	d.inserter, err = river.NewClient(rd, d.rcfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return d, nil
}

// OpenPostgres opens River on the PostgreSQL server at cfg.PostgresURL,
// migrating its schema and, when cfg.Fresh, emptying its tables.
func OpenPostgres(ctx context.Context, cfg harness.Config) (harness.Driver, error) {
	pc, err := pgxpool.ParseConfig(cfg.PostgresURL)
	if err != nil {
		return nil, fmt.Errorf("river-pg: bad PostgreSQL URL: %w", err)
	}
	pc.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("river-pg: connect: %w", err)
	}
	d, err := open(ctx, cfg, riverdriver.Driver[pgx.Tx](riverpgxv5.New(pool)))
	if err != nil {
		pool.Close()
		return nil, err
	}
	d.closeDB = pool.Close
	if cfg.Fresh {
		if _, err := pool.Exec(ctx, "TRUNCATE river_job, river_leader, river_queue"); err != nil {
			pool.Close()
			return nil, fmt.Errorf("river-pg: empty the tables: %w", err)
		}
	}
	d.settings = func(ctx context.Context) []harness.Setting {
		return append(pgdb.Settings(ctx, pool), harness.Setting{Name: "river pgx pool", Value: fmt.Sprint(poolSize)})
	}
	return d, nil
}

// OpenSQLite opens River on a SQLite file in cfg.Dir.
func OpenSQLite(ctx context.Context, cfg harness.Config) (harness.Driver, error) {
	db, err := sqlitedb.Open(filepath.Join(cfg.Dir, "river.db"))
	if err != nil {
		return nil, err
	}
	d, err := open(ctx, cfg, riverdriver.Driver[*sql.Tx](riversqlite.New(db)))
	if err != nil {
		db.Close()
		return nil, err
	}
	d.closeDB = func() { db.Close() }
	if cfg.Fresh {
		for _, t := range []string{"river_job", "river_leader", "river_queue"} {
			if _, err := db.ExecContext(ctx, "DELETE FROM "+t); err != nil {
				db.Close()
				return nil, fmt.Errorf("river-sqlite: empty %s: %w", t, err)
			}
		}
	}
	d.settings = func(ctx context.Context) []harness.Setting { return sqlitedb.Settings(ctx, db) }
	return d, nil
}

func (d *driver[TTx]) Enqueue(ctx context.Context, p harness.Payload) error {
	_, err := d.inserter.Insert(ctx, argsOf(p), nil)
	return err
}

// EnqueueBatch uses InsertManyFast: COPY FROM on PostgreSQL, one
// transaction on SQLite.
func (d *driver[TTx]) EnqueueBatch(ctx context.Context, ps []harness.Payload) error {
	params := make([]river.InsertManyParams, len(ps))
	for i, p := range ps {
		params[i] = river.InsertManyParams{Args: argsOf(p)}
	}
	_, err := d.inserter.InsertManyFast(ctx, params)
	return err
}

func (d *driver[TTx]) Start(ctx context.Context, h harness.Handler) error {
	if d.running != nil {
		return errors.New("river: workers already started")
	}
	d.worker.h.Store(&h)
	rc := *d.rcfg
	rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: d.cfg.Concurrency}}
	c, err := river.NewClient(d.rdriver, &rc)
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("river start: %w", err)
	}
	d.running = c
	return nil
}

func (d *driver[TTx]) Stop(ctx context.Context) error {
	if d.running == nil {
		return nil
	}
	c := d.running
	d.running = nil
	return c.Stop(ctx)
}

func (d *driver[TTx]) Close(ctx context.Context) error {
	err := d.Stop(ctx)
	d.closeDB()
	return err
}

func (d *driver[TTx]) Settings(ctx context.Context) []harness.Setting {
	rc := d.rcfg
	poll, cool := rc.FetchPollInterval, rc.FetchCooldown
	if poll == 0 {
		poll = river.FetchPollIntervalDefault
	}
	if cool == 0 {
		cool = river.FetchCooldownDefault
	}
	out := append(d.settings(ctx),
		harness.Setting{Name: "river FetchPollInterval", Value: poll.String()},
		harness.Setting{Name: "river FetchCooldown", Value: cool.String()},
	)
	if d.cfg.Workload == harness.W3 {
		out = append(out, harness.Setting{Name: "river retry policy", Value: "retry at once (available immediately)"})
	}
	if d.cfg.Workload == harness.W4 {
		v := "default (1h; rescuer runs every 30s on the leader)"
		if rc.RescueStuckJobsAfter > 0 {
			v = rc.RescueStuckJobsAfter.String() + " (JobTimeout " + rc.JobTimeout.String() + "; rescuer runs every 30s on the leader)"
		}
		out = append(out, harness.Setting{Name: "river RescueStuckJobsAfter", Value: v})
	}
	return out
}
