// Package goqite drives maragu.dev/goqite (SQLite) through its jobs
// runner for the benchmark.
package goqite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"

	"github.com/runlog/runlog/bench/internal/driver/sqlitedb"
	"github.com/runlog/runlog/bench/internal/harness"
)

// schema is goqite v0.4.0's schema_sqlite.sql (the module does not export
// it).
const schema = `
create table if not exists goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger if not exists goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index if not exists goqite_queue_priority_created_idx on goqite (queue, priority desc, created);
`

// jobName is the name the no-op job is registered under.
const jobName = "noop"

func init() {
	harness.Register(harness.System{Name: "goqite", Store: "SQLite", Open: Open})
}

var _ harness.Driver = (*driver)(nil)

type driver struct {
	db    *sql.DB
	queue *goqite.Queue
	cfg   harness.Config
	// poll, timeout and extend are the runner's and queue's settings.
	poll, timeout, extend time.Duration
	maxReceive            int
	cancel                context.CancelFunc
	stopped               chan struct{}
}

// Open opens goqite on a SQLite file in cfg.Dir.
//
// Defaults: poll interval 100ms, message timeout 5s (the redelivery delay
// after a failure or crash), extend 5s, max receive 3. Tuned: poll
// interval 1ms. W3 (the smallest backoff) sets the message timeout to
// 100ms in both modes; W4 tuned sets timeout and extend to 1s.
func Open(ctx context.Context, cfg harness.Config) (harness.Driver, error) {
	db, err := sqlitedb.Open(filepath.Join(cfg.Dir, "goqite.db"))
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("goqite schema: %w", err)
	}
	if cfg.Fresh {
		if _, err := db.ExecContext(ctx, "delete from goqite"); err != nil {
			db.Close()
			return nil, fmt.Errorf("goqite: empty the queue: %w", err)
		}
	}
	d := &driver{db: db, cfg: cfg, poll: 100 * time.Millisecond, timeout: 5 * time.Second, extend: 5 * time.Second, maxReceive: 3}
	if cfg.Mode == harness.ModeTuned {
		d.poll = time.Millisecond
	}
	switch {
	case cfg.Workload == harness.W3:
		d.timeout = 100 * time.Millisecond
	case cfg.Workload == harness.W4 && cfg.Mode == harness.ModeTuned:
		d.timeout, d.extend = time.Second, time.Second
	}
	if cfg.MaxAttempts > d.maxReceive {
		d.maxReceive = cfg.MaxAttempts
	}
	d.queue = goqite.New(goqite.NewOpts{DB: db, Name: "bench", MaxReceive: d.maxReceive, Timeout: d.timeout})
	return d, nil
}

func (d *driver) Enqueue(ctx context.Context, p harness.Payload) error {
	_, err := jobs.Create(ctx, d.queue, jobName, goqite.Message{Body: p.Marshal()})
	return err
}

// EnqueueBatch sends the batch in one SQLite transaction (one commit).
func (d *driver) EnqueueBatch(ctx context.Context, ps []harness.Payload) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if _, err := jobs.CreateTx(ctx, tx, d.queue, jobName, goqite.Message{Body: p.Marshal()}); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

func (d *driver) Start(ctx context.Context, h harness.Handler) error {
	if d.cancel != nil {
		return fmt.Errorf("goqite: workers already started")
	}
	r := jobs.NewRunner(jobs.NewRunnerOpts{
		Extend:       d.extend,
		Limit:        d.cfg.Concurrency,
		PollInterval: d.poll,
		Queue:        d.queue,
	})
	r.Register(jobName, func(ctx context.Context, m []byte) error {
		p, err := harness.ParsePayload(m)
		if err != nil {
			return err
		}
		return h(ctx, p)
	})
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel, d.stopped = cancel, make(chan struct{})
	go func() {
		defer close(d.stopped)
		r.Start(rctx)
	}()
	return nil
}

func (d *driver) Stop(ctx context.Context) error {
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	d.cancel = nil
	select {
	case <-d.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("goqite: runner did not stop: %w", ctx.Err())
	}
}

func (d *driver) Close(ctx context.Context) error {
	err := d.Stop(ctx)
	if cerr := d.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func (d *driver) Settings(ctx context.Context) []harness.Setting {
	return append(sqlitedb.Settings(ctx, d.db),
		harness.Setting{Name: "goqite poll interval", Value: d.poll.String()},
		harness.Setting{Name: "goqite message timeout (redelivery delay)", Value: d.timeout.String()},
		harness.Setting{Name: "goqite extend", Value: d.extend.String()},
		harness.Setting{Name: "goqite max receive", Value: fmt.Sprint(d.maxReceive)},
	)
}
