package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// quietLogger drops logs.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitState waits until job id is in state want and returns it.
func waitState(t testing.TB, r *runlog.Runner, id uint64, want runlog.State) runlog.Job {
	t.Helper()
	return testwait.Until(t, "job to be "+string(want), func() (runlog.Job, bool) {
		j, err := r.Job(context.Background(), id)
		if err != nil {
			t.Fatalf("Job(%d): %v", id, err)
		}
		return j, j.State == want
	})
}

// mustEnqueue enqueues one job or fails the test.
func mustEnqueue(t testing.TB, r *runlog.Runner, kind string, payload any, opts ...runlog.EnqueueOption) uint64 {
	t.Helper()
	id, err := r.Enqueue(context.Background(), kind, payload, opts...)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return id
}

// fixedClock is a runlog.Clock that stays at one time: jobs enqueued an
// hour after it never come due while it is the runner's clock.
type fixedClock struct{ now time.Time }

// Now returns the fixed time.
func (c fixedClock) Now() time.Time { return c.now }

// NewTimer fires at once for d <= 0, else never.
func (c fixedClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch, func() bool { return false }
	}
	return ch, func() bool { return true }
}

// noop is a handler that succeeds at once.
func noop(context.Context, []byte) error { return nil }

// payload50 is a 50-byte JSON payload, as in the engine's benchmarks.
var payload50 = []byte(`{"user":12345,"action":"noop","pad":"xxxxxxxxxxx"}`)
