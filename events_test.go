package runlog_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// fastRetry retries at once, nearly: 1 ms waits.
var fastRetry = runlog.WithRetry(runlog.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: time.Millisecond})

// recvEvents takes events from s until a job's last event has come, for
// each of n jobs (done says which event ends a job).
func recvEvents(t *testing.T, s *runlog.Subscription, jobs int, done func(runlog.Event) bool) map[uint64][]runlog.Event {
	t.Helper()
	byJob := map[uint64][]runlog.Event{}
	for ended := 0; ended < jobs; {
		ev := testwait.Recv(t, s.Events(), "an event")
		byJob[ev.JobID] = append(byJob[ev.JobID], ev)
		if done(ev) {
			ended++
		}
	}
	return byJob
}

// describe renders events as "type/attempt/outcome" for comparison.
func describe(evs []runlog.Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s/%d/%s", e.Type, e.Attempt, e.Outcome)
	}
	return b.String()
}

func TestSubscribeReportsEachJobsLife(t *testing.T) {
	t.Parallel()
	var flakyCalls atomic.Int32
	r := openRunner(t, t.TempDir(), runlog.Config{Handlers: map[string]runlog.Handler{
		"flaky": runlog.Handle(func(ctx context.Context, _ []byte) error {
			if flakyCalls.Add(1) == 1 {
				return errors.New("503 from upstream")
			}
			return nil
		}),
		"bad":    runlog.Handle(func(context.Context, []byte) error { return runlog.Permanent(errors.New("invalid address")) }),
		"broken": runlog.Handle(func(context.Context, []byte) error { return errors.New("still down") }),
		"ok":     runlog.Handle(noop),
	}})
	s := r.Subscribe(0)
	defer s.Close()
	ctx := context.Background()
	flaky := mustEnqueue(t, r, "flaky", nil, fastRetry, runlog.Target("api"))
	bad := mustEnqueue(t, r, "bad", nil, fastRetry)
	broken := mustEnqueue(t, r, "broken", nil, runlog.WithRetry(runlog.RetryPolicy{Attempts: 2, Base: time.Millisecond, Cap: time.Millisecond}))
	later := mustEnqueue(t, r, "ok", nil, runlog.RunIn(time.Hour))
	if err := r.Cancel(ctx, later, "not needed"); err != nil {
		t.Fatal(err)
	}
	terminal := func(e runlog.Event) bool {
		return e.Type == runlog.EventSucceeded || e.Type == runlog.EventFailed || e.Type == runlog.EventCancelled
	}
	byJob := recvEvents(t, s, 4, terminal)
	// One job's events in order of attempt, then of phase within it (see
	// Subscription: a busy runner may report them out of that order).
	phase := func(t runlog.EventType) int {
		switch t {
		case runlog.EventEnqueued:
			return 0
		case runlog.EventStarted:
			return 1
		}
		return 2
	}
	sortByTime := func(evs []runlog.Event) []runlog.Event {
		slices.SortStableFunc(evs, func(a, b runlog.Event) int {
			return cmp.Or(cmp.Compare(a.Attempt, b.Attempt), cmp.Compare(phase(a.Type), phase(b.Type)))
		})
		return evs
	}
	cases := []struct {
		name string
		id   uint64
		want string
	}{
		{"retried, then succeeded", flaky, "enqueued/0/ started/1/ retried/1/retryable started/2/ succeeded/2/success"},
		{"permanent failure", bad, "enqueued/0/ started/1/ failed/1/permanent"},
		{"attempts spent", broken, "enqueued/0/ started/1/ retried/1/retryable started/2/ failed/2/retryable"},
		{"cancelled while pending", later, "enqueued/0/ cancelled/0/"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := sortByTime(byJob[c.id])
			if got := describe(evs); got != c.want {
				t.Fatalf("events %s\nwant   %s", got, c.want)
			}
		})
	}
	retried := byJob[flaky][2]
	if retried.Kind != "flaky" || retried.Target != "api" || retried.Error != "503 from upstream" || retried.Duration <= 0 || retried.At.IsZero() {
		t.Fatalf("retried event %+v", retried)
	}
	if f := byJob[broken][4]; !strings.Contains(f.Error, "still down") {
		t.Fatalf("failed event's reason %q", f.Error)
	}
	if c := byJob[later][1]; c.Error != "not needed" || c.Kind != "ok" {
		t.Fatalf("cancelled event %+v", c)
	}
	if s.Dropped() != 0 {
		t.Fatalf("dropped %d with a large buffer", s.Dropped())
	}
}

func TestSubscribeDropsTheNewestWhenFull(t *testing.T) {
	t.Parallel()
	r := openRunner(t, t.TempDir(), runlog.Config{Handlers: map[string]runlog.Handler{"ok": runlog.Handle(noop)}})
	s := r.Subscribe(2, runlog.EventEnqueued)
	reqs := make([]runlog.JobRequest, 5)
	for i := range reqs {
		reqs[i] = runlog.JobRequest{Kind: "ok", Delay: time.Hour}
	}
	res, err := r.EnqueueMany(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	// The enqueue's events are sent before it returns: two fit, three are
	// dropped, and the runner did not wait for the reader.
	if d := s.Dropped(); d != 3 {
		t.Fatalf("dropped %d, want 3", d)
	}
	for i := range 2 {
		if ev := testwait.Recv(t, s.Events(), "a buffered event"); ev.JobID != res[i].ID || ev.Type != runlog.EventEnqueued {
			t.Fatalf("buffered event %d: %+v, want the enqueue of job %d", i, ev, res[i].ID)
		}
	}
	// Read, the buffer takes events again.
	id := mustEnqueue(t, r, "ok", nil, runlog.RunIn(time.Hour))
	if ev := testwait.Recv(t, s.Events(), "the next event"); ev.JobID != id {
		t.Fatalf("event %+v, want job %d", ev, id)
	}
	s.Close()
	s.Close() // idempotent
	if _, ok := <-s.Events(); ok {
		t.Fatal("a closed subscription's channel gave an event")
	}
	mustEnqueue(t, r, "ok", nil, runlog.RunIn(time.Hour)) // no send on the closed channel
}

func TestSubscribeFiltersTypesAndEndsAtClose(t *testing.T) {
	t.Parallel()
	r, err := runlog.Open(t.TempDir(), runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{"ok": runlog.Handle(noop)}})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Subscribe(16, runlog.EventSucceeded)
	id := mustEnqueue(t, r, "ok", nil)
	ev := testwait.Recv(t, s.Events(), "the success")
	if ev.Type != runlog.EventSucceeded || ev.JobID != id || ev.Attempt != 1 || ev.Outcome != "success" {
		t.Fatalf("event %+v", ev)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for ev := range s.Events() { // ends: Close closed the channel
		t.Fatalf("an event of a type not asked for: %+v", ev)
	}
	late := r.Subscribe(1)
	if _, ok := <-late.Events(); ok {
		t.Fatal("a subscription to a closed runner is open")
	}
}

func TestSubscribeReportsBreakerChanges(t *testing.T) {
	t.Parallel()
	r := openRunner(t, t.TempDir(), runlog.Config{
		Breaker: runlog.BreakerConfig{Threshold: 1, Window: time.Minute, Cooldown: time.Hour, Probes: 1},
		Handlers: map[string]runlog.Handler{"call": runlog.Handle(func(context.Context, []byte) error {
			return errors.New("503")
		})},
	})
	s := r.Subscribe(16, runlog.EventBreaker)
	defer s.Close()
	mustEnqueue(t, r, "call", nil, runlog.Target("https://api.example.com:443"))
	ev := testwait.Recv(t, s.Events(), "the breaker to open")
	if ev.Type != runlog.EventBreaker || ev.Target != "https://api.example.com:443" || ev.Breaker.From != "closed" || ev.Breaker.To != "open" || ev.Breaker.OpenUntil.IsZero() {
		t.Fatalf("event %+v", ev)
	}
}

func TestWaitForAJobsEnd(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	clock := newFakeClock()
	r := openRunner(t, t.TempDir(), runlog.Config{Clock: clock, Handlers: map[string]runlog.Handler{
		"ok":    runlog.Handle(noop),
		"held":  runlog.Handle(func(context.Context, []byte) error { <-release; return nil }),
		"bad":   runlog.Handle(func(context.Context, []byte) error { return runlog.Permanent(errors.New("no")) }),
		"later": runlog.Handle(noop),
	}})
	ctx := context.Background()
	wait := func(t *testing.T, id uint64) runlog.Job {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, testwait.Timeout)
		defer cancel()
		j, err := r.Wait(ctx, id)
		if err != nil {
			t.Fatalf("Wait(%d): %v", id, err)
		}
		return j
	}

	t.Run("ended before the call", func(t *testing.T) {
		id := mustEnqueue(t, r, "ok", nil)
		waitState(t, r, id, runlog.StateSucceeded)
		if j := wait(t, id); j.State != runlog.StateSucceeded {
			t.Fatalf("state %s", j.State)
		}
	})
	t.Run("ends during the call", func(t *testing.T) {
		id := mustEnqueue(t, r, "held", nil)
		waitState(t, r, id, runlog.StateRunning)
		got := make(chan runlog.Job, 1)
		go func() {
			j, _ := r.Wait(ctx, id)
			got <- j
		}()
		close(release)
		if j := testwait.Recv(t, got, "Wait to return"); j.State != runlog.StateSucceeded || j.ID != id {
			t.Fatalf("Wait returned %+v", j)
		}
	})
	t.Run("failed", func(t *testing.T) {
		id := mustEnqueue(t, r, "bad", nil)
		if j := wait(t, id); j.State != runlog.StateFailed || !strings.Contains(j.Reason, "no") {
			t.Fatalf("job %+v", j)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		id := mustEnqueue(t, r, "later", nil, runlog.RunIn(time.Hour))
		got := make(chan runlog.Job, 1)
		go func() {
			j, _ := r.Wait(ctx, id)
			got <- j
		}()
		if err := r.Cancel(ctx, id, "stop"); err != nil {
			t.Fatal(err)
		}
		if j := testwait.Recv(t, got, "Wait to return"); j.State != runlog.StateCancelled {
			t.Fatalf("state %s", j.State)
		}
	})
	t.Run("dead at its due time, with no attempt", func(t *testing.T) {
		// No attempt ends: Wait sees the end by looking (WaitPoll).
		id := mustEnqueue(t, r, "ok", nil, runlog.RunAt(clock.Now().Add(-time.Minute)),
			runlog.WithRetry(runlog.RetryPolicy{Attempts: 3, Base: time.Second, Cap: time.Second, Deadline: time.Second}))
		if j := wait(t, id); j.State != runlog.StateFailed || j.Attempts != 0 {
			t.Fatalf("job %+v", j)
		}
	})
	t.Run("unknown job", func(t *testing.T) {
		if _, err := r.Wait(ctx, 1<<40); !errors.Is(err, runlog.ErrNotFound) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("context ends first", func(t *testing.T) {
		id := mustEnqueue(t, r, "later", nil, runlog.RunIn(time.Hour))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		j, err := r.Wait(cctx, id)
		// The job as last seen comes with the error (none if the store
		// refused the first look already, as PostgreSQL does).
		if !errors.Is(err, context.Canceled) || (j.ID != 0 && j.State != runlog.StatePending) {
			t.Fatalf("Wait: %+v, %v", j, err)
		}
	})
}

func TestWaitEndsWhenTheRunnerCloses(t *testing.T) {
	t.Parallel()
	r, err := runlog.Open(t.TempDir(), runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{"ok": runlog.Handle(noop)}})
	if err != nil {
		t.Fatal(err)
	}
	id := mustEnqueue(t, r, "ok", nil, runlog.RunIn(time.Hour))
	errc := make(chan error, 1)
	go func() {
		_, err := r.Wait(context.Background(), id)
		errc <- err
	}()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, errc, "Wait to return"); !errors.Is(err, runlog.ErrClosed) {
		t.Fatalf("Wait: %v, want ErrClosed", err)
	}
}
