package runlog_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/postgres"
	"github.com/runlog/runlog/runlogtest"
)

// fakeClock is a Clock that moves only when the test advances it.
type fakeClock struct{ *runlogtest.Clock }

// newFakeClock returns a fake clock at a fixed time.
func newFakeClock() *fakeClock { return &fakeClock{runlogtest.NewClock()} }

// waitTimers waits until the timers set (when they fire) satisfy ok (or
// fails the test, naming what): the event by which a goroutine that waits
// on the clock shows that it has done its work and gone back to waiting.
func (c *fakeClock) waitTimers(t testing.TB, what string, ok func(at []time.Time) bool) {
	t.Helper()
	timeout := time.After(testwait.Timeout)
	for {
		at, changed := c.Timers()
		if ok(at) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out after %v waiting for %s", testwait.Timeout, what)
		}
	}
}

// waitTimerAt waits until a timer is set to fire at exactly at.
func (c *fakeClock) waitTimerAt(t testing.TB, at time.Time, what string) {
	t.Helper()
	c.waitTimers(t, fmt.Sprintf("%s (a timer at %v)", what, at), func(timers []time.Time) bool {
		return slices.ContainsFunc(timers, at.Equal)
	})
}

// waitTimerCount waits until at least n timers are set.
func (c *fakeClock) waitTimerCount(t testing.TB, n int) {
	t.Helper()
	c.waitTimers(t, fmt.Sprintf("%d timers to be set", n), func(timers []time.Time) bool { return len(timers) >= n })
}

// quietLogger drops logs.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// envTestStore selects the store openRunner opens: "postgres" runs the
// engine's tests on a fresh PostgreSQL database each (see internal/pgtest);
// anything else, the embedded journal in dir.
const envTestStore = "RUNLOG_TEST_STORE"

// embeddedOnly names the tests that are about the embedded journal itself
// (its directory lock, its replay after a crash): openRunner opens the
// journal for them under either store. TestScheduleTicksOnTheClock reopens
// the directory it made with runlog.Open.
var embeddedOnly = map[string]bool{"TestSecondOpenRefused": true, "TestCrashRecovery": true, "TestScheduleTicksOnTheClock": true}

// pgDatabases maps a test's directory to its PostgreSQL database
// (openRunner under RUNLOG_TEST_STORE=postgres).
var pgDatabases sync.Map

// openRunner opens a runner on a temp dir (or, with RUNLOG_TEST_STORE=postgres,
// on the PostgreSQL database of dir, fresh at its first open) and closes it
// at the end of the test.
func openRunner(t testing.TB, dir string, cfg runlog.Config) *runlog.Runner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.SegmentSize == 0 {
		cfg.SegmentSize = 1 << 20 // small segments: quick to preallocate, and rollovers get exercised
	}
	var (
		r   *runlog.Runner
		err error
	)
	if os.Getenv(envTestStore) == "postgres" && !embeddedOnly[t.Name()] {
		// One database per directory, so that a test that closes and
		// reopens its directory reopens its database.
		url, _ := pgDatabases.LoadOrStore(dir, sync.OnceValue(func() string { return pgtest.URL(t) }))
		r, err = postgres.Open(context.Background(), url.(func() string)(), cfg)
	} else {
		r, err = runlog.Open(dir, cfg)
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

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

// mustEnqueue enqueues or fails the test.
func mustEnqueue(t testing.TB, r *runlog.Runner, kind string, payload any, opts ...runlog.EnqueueOption) uint64 {
	t.Helper()
	id, err := r.Enqueue(context.Background(), kind, payload, opts...)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return id
}
