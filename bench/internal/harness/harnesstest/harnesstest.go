// Package harnesstest checks drivers against the harness's contract and
// provides an in-memory driver to test the harness itself.
package harnesstest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog/bench/internal/harness"
)

// Conformance runs small W1, W2 and W3 workloads against the driver that
// open returns for cfg (a fresh one per workload, each in its own
// directory) and fails t unless every job ran exactly as the workload
// asks.
func Conformance(t *testing.T, open harness.Factory, cfg harness.Config) {
	t.Helper()
	ctx := t.Context()
	openFor := func(t *testing.T, workload string, attempts int) harness.Driver {
		t.Helper()
		c := cfg
		c.Workload, c.Dir, c.Fresh, c.MaxAttempts = workload, t.TempDir(), true, attempts
		d, err := open(ctx, c)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := d.Close(cctx); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return d
	}
	t.Run("W1", func(t *testing.T) {
		d := openFor(t, harness.W1, 0)
		var r harness.Result
		if err := harness.RunW1(ctx, d, harness.W1Params{N: 200, Concurrency: cfg.Concurrency, BatchSize: 50, Limit: time.Minute}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Missing != 0 || r.Duplicates != 0 || r.ProcessRate <= 0 || r.EnqueueRate <= 0 {
			t.Fatalf("W1: %+v; want every job once and positive rates", r)
		}
		if len(d.Settings(ctx)) == 0 {
			t.Fatal("the driver reports no settings")
		}
	})
	t.Run("W2", func(t *testing.T) {
		d := openFor(t, harness.W2, 0)
		var r harness.Result
		if err := harness.RunW2(ctx, d, harness.W2Params{Duration: time.Second, Producers: 2, Concurrency: cfg.Concurrency, Outstanding: 32}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Completed == 0 || r.P50Millis <= 0 || r.P99Millis < r.P50Millis {
			t.Fatalf("W2: %+v; want completed jobs and p99 >= p50 > 0", r)
		}
	})
	t.Run("W3", func(t *testing.T) {
		d := openFor(t, harness.W3, 3)
		var r harness.Result
		if err := harness.RunW3(ctx, d, harness.W3Params{N: 30, Concurrency: cfg.Concurrency, BatchSize: 10, Limit: time.Minute, Settle: 100 * time.Millisecond}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Missing != 0 || r.Duplicates != 0 || r.ExtraAttempts != 0 || r.Completed != 30 {
			t.Fatalf("W3: %+v; want all 30 completed exactly once after 3 attempts", r)
		}
	})
}

// ConformanceModes runs Conformance in the default and the tuned mode.
func ConformanceModes(t *testing.T, open harness.Factory, cfg harness.Config) {
	t.Helper()
	for _, mode := range []harness.Mode{harness.ModeDefault, harness.ModeTuned} {
		t.Run(string(mode), func(t *testing.T) {
			c := cfg
			c.Mode = mode
			Conformance(t, open, c)
		})
	}
}

// MemoryOptions configure the in-memory driver.
type MemoryOptions struct {
	// Duplicate, if > 0, delivers every Duplicate-th successful job a
	// second time (a broken system, to test that the harness notices).
	Duplicate int64
	// NoBatch makes EnqueueBatch return harness.ErrNoBatch.
	NoBatch bool
}

// Memory returns a Factory of in-memory drivers: a channel queue, no
// durability. A failed job is queued again at once.
func Memory(o MemoryOptions) harness.Factory {
	return func(_ context.Context, cfg harness.Config) (harness.Driver, error) {
		return &memory{o: o, conc: max(cfg.Concurrency, 1), queue: make(chan harness.Payload, 1<<20)}, nil
	}
}

var _ harness.Driver = (*memory)(nil)

type memory struct {
	o     MemoryOptions
	conc  int
	queue chan harness.Payload
	stop  chan struct{}
	wg    sync.WaitGroup
}

func (m *memory) Enqueue(ctx context.Context, p harness.Payload) error {
	select {
	case m.queue <- p:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *memory) EnqueueBatch(ctx context.Context, ps []harness.Payload) error {
	if m.o.NoBatch {
		return harness.ErrNoBatch
	}
	for _, p := range ps {
		if err := m.Enqueue(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (m *memory) Start(ctx context.Context, h harness.Handler) error {
	if m.stop != nil {
		return errors.New("memory: already started")
	}
	m.stop = make(chan struct{})
	for range m.conc {
		m.wg.Go(func() {
			for {
				select {
				case <-m.stop:
					return
				case p := <-m.queue:
					if err := h(ctx, p); err != nil {
						m.queue <- p
						continue
					}
					if m.o.Duplicate > 0 && p.ID%m.o.Duplicate == 0 {
						_ = h(ctx, p)
					}
				}
			}
		})
	}
	return nil
}

func (m *memory) Stop(context.Context) error {
	if m.stop != nil {
		close(m.stop)
		m.wg.Wait()
		m.stop = nil
	}
	return nil
}

func (m *memory) Close(ctx context.Context) error { return m.Stop(ctx) }

func (m *memory) Settings(context.Context) []harness.Setting {
	return []harness.Setting{{Name: "memory", Value: "no durability"}}
}
