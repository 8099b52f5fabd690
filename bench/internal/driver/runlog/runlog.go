// Package runlog drives the runlog engine (the root package of this
// repository) for the benchmark, as two systems: "runlog", the embedded
// journal (durability on: every enqueue and outcome is fdatasync'ed by
// group commit before it is acknowledged), and "runlog-pg", runlog on
// PostgreSQL (postgres.Open of github.com/runlog/runlog/postgres, on the server River runs on).
package runlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runlog/runlog"

	"github.com/runlog/runlog/bench/internal/harness"
)

// kind is the job kind of the no-op job.
const kind = "noop"

// errClosing ends the attempts still held back when the driver closes.
var errClosing = errors.New("bench: the driver is closing")

func init() {
	harness.Register(harness.System{Name: "runlog", Store: "embedded journal", Open: Open})
	harness.Register(harness.System{Name: "runlog-pg", Store: "PostgreSQL 15", NeedsPostgres: true, Open: OpenPostgres})
}

// syncCounter is the runner's Observer: it counts group commits.
type syncCounter struct {
	syncs, records atomic.Int64
}

func (*syncCounter) AttemptFinished(runlog.AttemptEvent) {}

func (s *syncCounter) JournalSynced(e runlog.SyncEvent) {
	s.syncs.Add(1)
	s.records.Add(int64(e.Records))
}

var (
	_ harness.Driver  = (*driver)(nil)
	_ runlog.Observer = (*syncCounter)(nil)
)

type driver struct {
	cfg   harness.Config
	r     *runlog.Runner
	retry runlog.RetryPolicy
	// breaker is the breaker config; nil keeps runlog's default.
	breaker *runlog.BreakerConfig
	obs     *syncCounter
	h       atomic.Pointer[harness.Handler]

	// runlog starts dispatching at Open and has no pause, so "workers
	// stopped" is a gate that attempts wait at: closed means open.
	// gate is read by every attempt, so it is an atomic pointer; mu
	// serialises Start and Stop, which replace or close it.
	mu      sync.Mutex
	gate    atomic.Pointer[chan struct{}]
	bodies  sync.RWMutex // held for reading while a job body runs
	closing chan struct{}
	once    sync.Once

	// settings lists the store's own settings (Settings adds the common
	// ones).
	settings func(context.Context) []harness.Setting
}

// breakerOff is a breaker that never opens: the peers have no circuit
// breaker, and W3's planned failures would otherwise open runlog's (5
// failures within 1m by default) and hold every job for its 30s cooldown.
// The 1 ms window keeps the breaker's list of recent failure times short:
// a closed breaker keeps up to Threshold of them, and copies the list on
// each failure.
var breakerOff = runlog.BreakerConfig{Threshold: math.MaxInt32, Window: time.Millisecond, Cooldown: time.Second, Probes: 1}

// newDriver returns the driver for cfg and the runner's config, before the
// runner is opened.
//
// runlog has no polling to tune: it dispatches as soon as a job is due.
// It runs with its defaults (retry base 500ms, cap 30s, 10 attempts;
// breaker 5 failures within 1m, cooldown 30s), except: W3 uses the
// smallest backoff (base 0) and no breaker in both modes, and W4 tuned
// uses base 0 and no breaker, the fastest recovery runlog can be
// configured for.
func newDriver(cfg harness.Config) (*driver, runlog.Config) {
	d := &driver{
		cfg:     cfg,
		obs:     &syncCounter{},
		closing: make(chan struct{}),
		retry:   runlog.RetryPolicy{Attempts: 10, Base: 500 * time.Millisecond, Cap: 30 * time.Second},
	}
	shut := make(chan struct{}) // workers stopped until Start
	d.gate.Store(&shut)
	if cfg.MaxAttempts > d.retry.Attempts {
		d.retry.Attempts = cfg.MaxAttempts
	}
	if cfg.Workload == harness.W3 || (cfg.Workload == harness.W4 && cfg.Mode == harness.ModeTuned) {
		d.retry.Base, d.retry.Cap = 0, 0
		d.breaker = &breakerOff
	}
	rc := runlog.Config{
		Concurrency: cfg.Concurrency,
		Retry:       d.retry,
		Handlers:    map[string]runlog.Handler{kind: runlog.Handle(d.run)},
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Observer:    d.obs,
	}
	if d.breaker != nil {
		rc.Breaker = *d.breaker
	}
	if os.Getenv(hooksEnv) == "1" {
		rc.Middleware = []runlog.Middleware{func(next runlog.AttemptFunc) runlog.AttemptFunc { return next }}
		rc.EnqueueMiddleware = []runlog.EnqueueMiddleware{func(next runlog.EnqueueFunc) runlog.EnqueueFunc { return next }}
	}
	return d, rc
}

// hooksEnv, set to 1, runs runlog with a no-op attempt middleware, a no-op
// enqueue middleware and one subscriber to every event (subscribe), to
// measure what they cost.
const hooksEnv = "BENCH_RUNLOG_HOOKS"

// subscribe starts the subscriber of hooksEnv: it reads every event until
// the runner closes.
func subscribe(r *runlog.Runner) {
	if os.Getenv(hooksEnv) != "1" {
		return
	}
	sub := r.Subscribe(0)
	go func() {
		for range sub.Events() {
		}
	}()
}

// Open opens a runlog journal in cfg.Dir/journal (see newDriver for the
// settings).
func Open(ctx context.Context, cfg harness.Config) (harness.Driver, error) {
	d, rc := newDriver(cfg)
	dir := filepath.Join(cfg.Dir, "journal")
	if cfg.Fresh {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("runlog: empty %s: %w", dir, err)
		}
	}
	r, err := runlog.Open(dir, rc)
	if err != nil {
		return nil, fmt.Errorf("runlog: open %s: %w", dir, err)
	}
	d.r = r
	subscribe(r)
	d.settings = d.embeddedSettings
	return d, nil
}

// run is the runlog handler: it waits at the gate, then runs the harness
// handler.
func (d *driver) run(ctx context.Context, raw json.RawMessage) error {
	p, err := harness.ParsePayload(raw)
	if err != nil {
		return runlog.Permanent(err)
	}
	for {
		d.bodies.RLock()
		gate := *d.gate.Load()
		select {
		case <-gate:
			err := (*d.h.Load())(ctx, p)
			d.bodies.RUnlock()
			return err
		default:
		}
		d.bodies.RUnlock()
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.closing:
			return errClosing
		}
	}
}

func (d *driver) Enqueue(ctx context.Context, p harness.Payload) error {
	_, err := d.r.Enqueue(ctx, kind, p.Marshal())
	return err
}

// EnqueueBatch uses EnqueueMany: one durable batch.
func (d *driver) EnqueueBatch(ctx context.Context, ps []harness.Payload) error {
	reqs := make([]runlog.JobRequest, len(ps))
	for i, p := range ps {
		reqs[i] = runlog.JobRequest{Kind: kind, Payload: p.Marshal()}
	}
	_, err := d.r.EnqueueMany(ctx, reqs)
	return err
}

func (d *driver) Start(_ context.Context, h harness.Handler) error {
	d.h.Store(&h)
	d.mu.Lock()
	defer d.mu.Unlock()
	gate := *d.gate.Load()
	select {
	case <-gate:
		return errors.New("runlog: workers already started")
	default:
		close(gate)
	}
	return nil
}

// Stop closes the gate and waits for the bodies that passed it.
func (d *driver) Stop(context.Context) error {
	d.mu.Lock()
	select {
	case <-*d.gate.Load():
		closed := make(chan struct{})
		d.gate.Store(&closed)
	default:
	}
	d.mu.Unlock()
	d.bodies.Lock()
	defer d.bodies.Unlock()
	return nil
}

func (d *driver) Close(ctx context.Context) error {
	d.once.Do(func() { close(d.closing) })
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return d.r.Close(ctx)
}

func (d *driver) Settings(ctx context.Context) []harness.Setting {
	out := d.settings(ctx)
	out = append(out,
		harness.Setting{Name: "runlog retry", Value: fmt.Sprintf("attempts %d, base %s, cap %s", d.retry.Attempts, d.retry.Base, d.retry.Cap)},
		harness.Setting{Name: "runlog breaker", Value: "default (opens after 5 failures within 1m, cooldown 30s)"},
	)
	if d.breaker != nil {
		out[len(out)-1].Value = "off (threshold 2^31-1; the peers have none)"
	}
	return out
}

// embeddedSettings are the journal's settings.
func (d *driver) embeddedSettings(context.Context) []harness.Setting {
	out := []harness.Setting{
		{Name: "runlog durability", Value: "fdatasync per group commit before every ack (not configurable)"},
		{Name: "runlog polling", Value: "none: dispatch on enqueue and on due time"},
	}
	if s := d.obs.syncs.Load(); s > 0 {
		out = append(out, harness.Setting{Name: "runlog group commit", Value: fmt.Sprintf("%d fdatasyncs, %.1f records each", s, float64(d.obs.records.Load())/float64(s))})
	}
	return out
}
