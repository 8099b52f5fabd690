// Package postgres runs runlog on PostgreSQL: many runlog processes (nodes)
// share one database, its queue and its targets' breakers. Open starts a
// runlog.Runner on a database, EnqueueTx adds a job inside the
// application's own transaction, Migrate applies the schema.
//
// It is a package of its own so that a program that embeds the journal
// (runlog.Open) does not link the PostgreSQL driver.
package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/bridge"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/pgstore"
)

// Options tune a runner on PostgreSQL (OpenWith). The zero
// value of each field takes the default written next to it.
type Options struct {
	// Node names this process among the nodes that share the database; it
	// must be unique among live nodes. Defaults to host-pid-random.
	Node string
	// Lease is how long an attempt stays this node's without a heartbeat;
	// once it expires, any node requeues the attempt as a failed attempt.
	// Defaults to 5s; at least 300ms (MinLeaseHeartbeats heartbeats of at
	// least MinHeartbeat). A shorter lease brings a dead node's jobs back
	// sooner, and runs more jobs twice when renewals are late (see
	// docs/postgres.md, "Choosing a lease").
	Lease time.Duration
	// Heartbeat is how often the node renews the leases of its running
	// attempts: from MinHeartbeat to Lease / MinLeaseHeartbeats. Defaults
	// to Lease / 5 within [MinHeartbeat, 1s] (1s with the default lease).
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

// Open opens a runner on the PostgreSQL database at url (a
// connection string such as postgres://user:pass@host:5432/db), applying
// missing schema migrations first, and starts running due jobs. Several
// runners (processes, hosts) may open the same database: they share the
// queue and the targets' breakers, each due job runs on one of them, and the
// attempts of a node that dies are requeued by the others once its lease
// expires (5 s by default), counted as failed attempts.
//
// Every node must register the handlers of every kind enqueued, since any
// node may claim any job. Close requeues the node's unfinished attempts at
// once. Open is OpenWith with the default Options.
func Open(ctx context.Context, url string, cfg runlog.Config) (*runlog.Runner, error) {
	return OpenWith(ctx, url, cfg, Options{})
}

// OpenWith is Open with PostgreSQL options.
func OpenWith(ctx context.Context, url string, cfg runlog.Config, opts Options) (*runlog.Runner, error) {
	r, err := bridge.Start(cfg, func(o bridge.StoreOptions) (store.Store, error) {
		st, err := pgstore.Open(ctx, url, pgstore.Options{
			Circuit:        o.Circuit,
			DisableAfterMS: o.DisableAfter,
			Limits:         o.Limits,
			Now:            o.Now,
			Migrate:        !opts.NoMigrate,
			Node:           opts.Node,
			Lease:          opts.Lease,
			Heartbeat:      opts.Heartbeat,
			RescueEvery:    opts.RescueEvery,
			PollEvery:      opts.PollEvery,
			Retention:      o.Retention,
			MaxConns:       opts.MaxConns,
			Logger:         o.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("runlog: open postgres: %w", err)
		}
		return st, nil
	})
	if err != nil {
		return nil, err
	}
	return r.(*runlog.Runner), nil
}

// The safe range of Options.Lease and Options.Heartbeat: OpenWith refuses
// a Heartbeat below MinHeartbeat, or a Lease shorter than
// MinLeaseHeartbeats heartbeats, with an error that says the range.
const (
	// MinHeartbeat is the shortest Heartbeat: what one lease renewal (an
	// UPDATE and its commit's WAL flush) can take on a busy server.
	MinHeartbeat = pgstore.MinHeartbeat
	// MinLeaseHeartbeats is how many heartbeats a Lease spans at least,
	// so that late or failed renewals do not hand a running attempt to
	// another node.
	MinLeaseHeartbeats = pgstore.MinLeaseHeartbeats
)

// EnqueueTx adds one job inside the caller's own transaction tx on a
// database that runners opened with Open use: the job exists if and
// only if tx commits, and the runners wake when it does. It needs no
// Runner. The request is validated as Enqueue validates it (a kind, the
// payload within the default runlog.Config.MaxPayload of 1 MiB, names within
// 1024 bytes, a valid retry policy); a job without its own Retry gets the
// default policy (10 attempts, 500ms doubling to 30s), not a runner's
// runlog.Config.Retry. The kind is not checked against any runner's handlers. A
// zero RunAt means now on the wall clock (there is no runner's Clock).
func EnqueueTx(ctx context.Context, tx pgx.Tx, req runlog.JobRequest) (runlog.EnqueueResult, error) {
	now := time.Now()
	job, err := bridge.NewJob(&req, now)
	if err != nil {
		return runlog.EnqueueResult{}, err
	}
	res, err := pgstore.EnqueueTx(ctx, tx, now.UnixMilli(), []store.NewJob{job})
	if err != nil {
		return runlog.EnqueueResult{}, fmt.Errorf("runlog: enqueue in transaction: %w", err)
	}
	return runlog.EnqueueResult{ID: res[0].ID, Existing: res[0].Existing}, nil
}

// Migrate applies the schema migrations that the database at url lacks
// and returns the schema version it is at. It is idempotent, and
// concurrent runs wait for each other (an advisory lock). On a database a
// newer build migrated, it changes nothing, and fails unless that build's
// migrations let nodes of this one run on it (see docs/postgres.md,
// "Rolling upgrades"). Open migrates by
// itself unless Options.NoMigrate is set; `runlog migrate --postgres URL`
// calls this.
func Migrate(ctx context.Context, url string) (int, error) {
	return pgstore.Migrate(ctx, url)
}
