package runlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// stepRunner opens a runner on clock whose "job" handler reports the name
// it was given on the returned channel.
func stepRunner(t *testing.T, clock *fakeClock) (*runlog.Runner, <-chan string) {
	started := make(chan string, 16)
	r := openRunner(t, t.TempDir(), runlog.Config{Concurrency: 4, Clock: clock, Handlers: map[string]runlog.Handler{
		"job": runlog.Handle(func(ctx context.Context, name string) error { started <- name; return nil }),
	}})
	return r, started
}

// waitStarted waits until every name in want has started (without moving
// the fake clock: only a real, prompt start counts).
func waitStarted(t *testing.T, started <-chan string, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	begin := time.Now()
	timeout := time.After(5 * time.Second)
	for len(missing) > 0 {
		select {
		case n := <-started:
			delete(missing, n)
		case <-timeout:
			t.Fatalf("jobs %v did not start within 5 s", missing)
		}
	}
	t.Logf("%v started %v after the wait began", want, time.Since(begin))
}

// TestClockStepForwardEnqueueRunsAtOnce (issue 14 item 10): job A is due in
// 30 min and the dispatcher sleeps for it; the wall clock steps 1 h forward
// and job B is enqueued due now. B, and A (now overdue), start at once, not
// when the timer set before the step fires.
func TestClockStepForwardEnqueueRunsAtOnce(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r, started := stepRunner(t, clock)
	ctx := context.Background()
	if _, err := r.Enqueue(ctx, "job", "A", runlog.RunAt(clock.Now().Add(30*time.Minute))); err != nil {
		t.Fatal(err)
	}
	clock.waitTimerCount(t, 2) // the janitor's, and the dispatcher's for A
	clock.Step(time.Hour)
	if _, err := r.Enqueue(ctx, "job", "B"); err != nil {
		t.Fatal(err)
	}
	waitStarted(t, started, "A", "B")
}

// TestClockStepForwardNoticedWithinBound: with no enqueue to wake it, a
// dispatcher without a wall-clock timer (here: a Config.Clock of the
// caller's) notices within 10 s of its own timers that a forward step made
// A due.
func TestClockStepForwardNoticedWithinBound(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r, started := stepRunner(t, clock)
	if _, err := r.Enqueue(context.Background(), "job", "A", runlog.RunAt(clock.Now().Add(30*time.Minute))); err != nil {
		t.Fatal(err)
	}
	clock.waitTimerCount(t, 2)
	clock.Step(time.Hour)
	clock.Advance(10 * time.Second)
	waitStarted(t, started, "A")
}

// TestClockStepBackwardWaitsItOut: a backward step delays a due time by the
// step: A, due in 1 min, does not start when its timer would have fired, and
// starts once the wall clock reaches its due time again.
func TestClockStepBackwardWaitsItOut(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r, started := stepRunner(t, clock)
	id, err := r.Enqueue(context.Background(), "job", "A", runlog.RunAt(clock.Now().Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	clock.waitTimerCount(t, 2)
	clock.Step(-time.Hour)
	clock.Advance(time.Minute) // the dispatcher's timers fire; A is not due by the wall clock
	clock.waitTimerCount(t, 2) // the dispatcher looked and went back to sleep
	if j, err := r.Job(context.Background(), id); err != nil || j.State != runlog.StatePending {
		t.Fatalf("after a 1 h backward step, A is %v (%v); want pending until the clock is back at its due time", j.State, err)
	}
	clock.Advance(time.Hour)
	waitStarted(t, started, "A")
}
