package runlog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/pgstore"
)

// PostgresOptions tune a runner on PostgreSQL (OpenPostgresWith). The zero
// value of each field takes the default written next to it.
type PostgresOptions struct {
	// Node names this process among the nodes that share the database; it
	// must be unique among live nodes. Defaults to host-pid-random.
	Node string
	// Lease is how long an attempt stays this node's without a heartbeat;
	// once it expires, any node requeues the attempt as a failed attempt.
	// Defaults to 5s.
	Lease time.Duration
	// Heartbeat is how often the node renews the leases of its running
	// attempts; below Lease. Defaults to 1s.
	Heartbeat time.Duration
	// RescueEvery is how often the node looks for expired leases.
	// Defaults to 1s.
	RescueEvery time.Duration
	// PollEvery is how often the node looks for due jobs without a
	// notification. Defaults to 1s.
	PollEvery time.Duration
	// NoMigrate: do not apply missing schema migrations at open (apply them
	// with `runlog migrate`); open then fails on a database that lacks them.
	NoMigrate bool
	// MaxConns bounds the node's connection pool. Defaults to 10.
	MaxConns int32
}

// OpenPostgres opens a runner on the PostgreSQL database at url (a
// connection string such as postgres://user:pass@host:5432/db), applying
// missing schema migrations first, and starts running due jobs. Several
// runners (processes, hosts) may open the same database: they share the
// queue and the targets' breakers, each due job runs on one of them, and the
// attempts of a node that dies are requeued by the others once its lease
// expires (5 s by default), counted as failed attempts.
//
// Every node must register the handlers of every kind enqueued, since any
// node may claim any job. Close requeues the node's unfinished attempts at
// once. OpenPostgres is OpenPostgresWith with the default PostgresOptions.
func OpenPostgres(ctx context.Context, url string, cfg Config) (*Runner, error) {
	return OpenPostgresWith(ctx, url, cfg, PostgresOptions{})
}

// OpenPostgresWith is OpenPostgres with PostgreSQL options.
func OpenPostgresWith(ctx context.Context, url string, cfg Config, opts PostgresOptions) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	clock := cfg.Clock
	st, err := pgstore.Open(ctx, url, pgstore.Options{
		Circuit:     cfg.Breaker.circuit(),
		Now:         func() int64 { return clock.Now().UnixMilli() },
		Migrate:     !opts.NoMigrate,
		Node:        opts.Node,
		Lease:       opts.Lease,
		Heartbeat:   opts.Heartbeat,
		RescueEvery: opts.RescueEvery,
		PollEvery:   opts.PollEvery,
		Retention:   cfg.Retention.rules(),
		MaxConns:    opts.MaxConns,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("runlog: open postgres: %w", err)
	}
	return start(st, cfg), nil
}

// EnqueueTx adds one job inside the caller's own transaction tx on a
// database that runners opened with OpenPostgres use: the job exists if and
// only if tx commits, and the runners wake when it does. It needs no
// Runner. The request is validated as Enqueue validates it (a kind, the
// payload within the default Config.MaxPayload of 1 MiB, names within
// 1024 bytes, a valid retry policy); a job without its own Retry gets the
// default policy (10 attempts, 500ms doubling to 30s), not a runner's
// Config.Retry. The kind is not checked against any runner's handlers. A
// zero RunAt means now on the wall clock (there is no runner's Clock).
func EnqueueTx(ctx context.Context, tx pgx.Tx, req JobRequest) (EnqueueResult, error) {
	now := time.Now()
	job, err := validateRequest(&req, now)
	if err != nil {
		return EnqueueResult{}, err
	}
	res, err := pgstore.EnqueueTx(ctx, tx, now.UnixMilli(), []store.NewJob{job})
	if err != nil {
		return EnqueueResult{}, fmt.Errorf("runlog: enqueue in transaction: %w", err)
	}
	return EnqueueResult{ID: res[0].ID, Existing: res[0].Existing}, nil
}

// validateRequest checks req with the default Config as Enqueue would, but
// without a runner's handlers.
func validateRequest(req *JobRequest, now time.Time) (store.NewJob, error) {
	cfg := Config{}.withDefaults()
	// newJob checks only that the kind is registered; EnqueueTx has no
	// runner, so any non-empty kind is accepted.
	cfg.Handlers = map[string]Handler{req.Kind: nil}
	return (&Runner{cfg: cfg}).newJob(req, now)
}
