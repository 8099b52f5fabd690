package runlog_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/postgres"
)

// fakeClock is a Clock that moves only when the test advances it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*fakeTimer]struct{}
	changed chan struct{} // closed (and replaced) when a timer is set; see waitTimers
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.UnixMilli(1_700_000_000_000), timers: map[*fakeTimer]struct{}{}}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t.ch, func() bool { return false }
	}
	c.timers[t] = struct{}{}
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
	return t.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[t]
		delete(c.timers, t)
		return ok
	}
}

// Advance moves the clock by d and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
			delete(c.timers, t)
		}
	}
}

// waitTimers waits until the timers set satisfy ok (or fails the test,
// naming what): the event by which a goroutine that waits on the clock
// shows that it has done its work and gone back to waiting.
func (c *fakeClock) waitTimers(t testing.TB, what string, ok func(timers map[*fakeTimer]struct{}) bool) {
	t.Helper()
	timeout := time.After(testwait.Timeout)
	for {
		c.mu.Lock()
		if ok(c.timers) {
			c.mu.Unlock()
			return
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("timed out after %v waiting for %s", testwait.Timeout, what)
		}
	}
}

// waitTimerAt waits until a timer is set to fire at exactly at.
func (c *fakeClock) waitTimerAt(t testing.TB, at time.Time, what string) {
	t.Helper()
	c.waitTimers(t, fmt.Sprintf("%s (a timer at %v)", what, at), func(timers map[*fakeTimer]struct{}) bool {
		for tm := range timers {
			if tm.at.Equal(at) {
				return true
			}
		}
		return false
	})
}

// waitTimerCount waits until at least n timers are set.
func (c *fakeClock) waitTimerCount(t testing.TB, n int) {
	t.Helper()
	c.waitTimers(t, fmt.Sprintf("%d timers to be set", n), func(timers map[*fakeTimer]struct{}) bool { return len(timers) >= n })
}

// quietLogger drops logs.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// envTestStore selects the store openRunner opens: "postgres" runs the
// engine's tests on a fresh PostgreSQL database each (see internal/pgtest);
// anything else, the embedded journal in dir.
const envTestStore = "RUNLOG_TEST_STORE"

// embeddedOnly names the tests that are about the embedded journal itself
// (its directory lock, its replay after a crash): openRunner opens the
// journal for them under either store.
var embeddedOnly = map[string]bool{"TestSecondOpenRefused": true, "TestCrashRecovery": true}

// openRunner opens a runner on a temp dir (or, with RUNLOG_TEST_STORE=postgres,
// on a fresh PostgreSQL database) and closes it at the end of the test.
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
		r, err = postgres.Open(context.Background(), pgtest.URL(t), cfg)
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
