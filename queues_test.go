package runlog_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/postgres"
)

// queueStores opens a runner, and again on the same storage, on each
// store: the embedded journal in a temp dir, and PostgreSQL with its poll
// turned off (one an hour), so that only a wake-up can start a job.
var queueStores = map[string]func(t *testing.T) func(cfg runlog.Config) *runlog.Runner{
	"embedded": func(t *testing.T) func(cfg runlog.Config) *runlog.Runner {
		dir := t.TempDir()
		return func(cfg runlog.Config) *runlog.Runner {
			r, err := runlog.Open(dir, cfg)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return r
		}
	},
	"postgres": func(t *testing.T) func(cfg runlog.Config) *runlog.Runner {
		url := pgtest.URL(t)
		return func(cfg runlog.Config) *runlog.Runner {
			r, err := postgres.OpenWith(context.Background(), url, cfg, postgres.Options{PollEvery: time.Hour})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return r
		}
	},
}

// startLog records the jobs whose attempts started, in order.
type startLog struct {
	mu  sync.Mutex
	ids []uint64
}

func (l *startLog) add(id uint64) {
	l.mu.Lock()
	l.ids = append(l.ids, id)
	l.mu.Unlock()
}

func (l *startLog) started() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ids)
}

// TestQueuePauseResume is issue 17's test of pauses, on both stores: no
// attempt of a paused queue starts after the pause is acknowledged (the
// attempts running then finish, and their slots go to other queues); the
// pause holds across a restart; a resume starts the queue's due jobs
// without waiting for a poll (the clock never moves, and PostgreSQL's poll
// is off).
func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	for name, open := range queueStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testQueuePauseResume(t, open(t))
		})
	}
}

func testQueuePauseResume(t *testing.T, open func(runlog.Config) *runlog.Runner) {
	ctx := context.Background()
	clock := newFakeClock()
	var log startLog
	gate := make(chan struct{})
	cfg := runlog.Config{
		Concurrency: 4, Clock: clock, Logger: quietLogger(),
		Handlers: map[string]runlog.Handler{
			"mail": runlog.Handle(func(ctx context.Context, _ struct{}) error {
				info, _ := runlog.AttemptFrom(ctx)
				log.add(info.JobID)
				<-gate
				return nil
			}),
			"marker": runlog.Handle(func(ctx context.Context, _ struct{}) error { return nil }),
		},
	}
	r := open(cfg)
	var mail []uint64
	for range 20 {
		mail = append(mail, mustEnqueue(t, r, "mail", struct{}{}, runlog.WithQueue("mail")))
	}
	testwait.For(t, "4 mail attempts to run", func() bool { return len(log.started()) == 4 })
	q, err := r.PauseQueue(ctx, "mail")
	if err != nil || !q.Paused || q.Name != "mail" {
		t.Fatalf("PauseQueue: %+v, %v", q, err)
	}
	// Every attempt that started before the pause was acknowledged shows
	// as started now; none may start after.
	var before []uint64
	for _, id := range mail {
		if j, err := r.Job(ctx, id); err != nil {
			t.Fatal(err)
		} else if j.Attempts > 0 {
			before = append(before, id)
		}
	}
	close(gate) // the running attempts end: their slots are free
	marker := mustEnqueue(t, r, "marker", struct{}{})
	waitState(t, r, marker, runlog.StateSucceeded)
	for _, id := range before {
		waitState(t, r, id, runlog.StateSucceeded)
	}
	// A claim after the marker's enqueue saw the mail jobs (enqueued
	// earlier, due as early) and left them.
	if got := log.started(); !sameSet(got, before) {
		t.Fatalf("attempts of the paused queue: %v; only those started before the pause may run (%v)", got, before)
	}
	if qs := queueNamed(t, r, "mail"); !qs.Paused || qs.Pending != 20-len(before) || qs.Running != 0 {
		t.Fatalf("queue after the pause: %+v", qs)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	r = open(cfg)
	defer r.Close(ctx)
	marker = mustEnqueue(t, r, "marker", struct{}{})
	waitState(t, r, marker, runlog.StateSucceeded)
	if got := log.started(); !sameSet(got, before) {
		t.Fatalf("after a restart the paused queue started %v", got)
	}
	if qs := queueNamed(t, r, "mail"); !qs.Paused {
		t.Fatalf("the pause did not hold across the restart: %+v", qs)
	}
	if q, err := r.ResumeQueue(ctx, "mail"); err != nil || q.Paused {
		t.Fatalf("ResumeQueue: %+v, %v", q, err)
	}
	for _, id := range mail {
		waitState(t, r, id, runlog.StateSucceeded)
	}
}

func sameSet(a, b []uint64) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func queueNamed(t *testing.T, r *runlog.Runner, name string) runlog.QueueStats {
	t.Helper()
	qs, err := r.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("no queue %q in %+v", name, qs)
	return runlog.QueueStats{}
}

// TestQueueConcurrencyAndPriority: a queue's concurrency bounds its
// attempts in flight inside the pool, and a higher priority starts first:
// within a claim, and across claims on a queue that runs one at a time.
func TestQueueConcurrencyAndPriority(t *testing.T) {
	t.Parallel()
	for name, open := range queueStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var log startLog
			var mu sync.Mutex
			inFlight, most := 0, 0
			release := make(chan struct{})
			cfg := runlog.Config{
				Concurrency: 8, Clock: newFakeClock(), Logger: quietLogger(),
				QueueConcurrency: map[string]int{"bulk": 2},
				Handlers: map[string]runlog.Handler{
					"bulk": runlog.Handle(func(ctx context.Context, _ struct{}) error {
						info, _ := runlog.AttemptFrom(ctx)
						log.add(info.JobID)
						mu.Lock()
						inFlight++
						most = max(most, inFlight)
						mu.Unlock()
						<-release
						mu.Lock()
						inFlight--
						mu.Unlock()
						return nil
					}),
				},
			}
			r := open(t)(cfg)
			defer r.Close(ctx)
			// enqueuePaused enqueues three jobs of priority 0, then three
			// of priority 5, while the queue is paused.
			enqueuePaused := func() (low, high []uint64) {
				t.Helper()
				if _, err := r.PauseQueue(ctx, "bulk"); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					low = append(low, mustEnqueue(t, r, "bulk", struct{}{}, runlog.WithQueue("bulk")))
				}
				for range 3 {
					high = append(high, mustEnqueue(t, r, "bulk", struct{}{}, runlog.WithQueue("bulk"), runlog.WithPriority(5)))
				}
				return low, high
			}
			low, high := enqueuePaused()
			if j, err := r.Job(ctx, high[0]); err != nil || j.Queue != "bulk" || j.Priority != 5 {
				t.Fatalf("Job: %+v %v", j, err)
			}
			if _, err := r.ResumeQueue(ctx, "bulk"); err != nil {
				t.Fatal(err)
			}
			testwait.For(t, "2 attempts", func() bool { return len(log.started()) == 2 })
			if got := log.started(); !sameSet(got, high[:2]) {
				t.Fatalf("first starts %v, want the two first of priority 5 %v", got, high[:2])
			}
			close(release)
			for _, id := range append(low, high...) {
				waitState(t, r, id, runlog.StateSucceeded)
			}
			// Past the first two, the order of starts is not checked
			// here: two attempts that end together free two slots, and
			// the claim that takes the last job of priority 5 and the
			// first of priority 0 starts both at once, in either order
			// (seen as [4 5 1 6 2 3]).
			if most > 2 {
				t.Errorf("%d attempts of the queue ran at once, its concurrency is 2", most)
			}

			// One at a time, every claim takes one job: all of priority 5
			// start before any of priority 0.
			if _, err := r.SetQueueConcurrency(ctx, "bulk", 1); err != nil {
				t.Fatal(err)
			}
			before := len(log.started())
			low, high = enqueuePaused()
			if _, err := r.ResumeQueue(ctx, "bulk"); err != nil {
				t.Fatal(err)
			}
			for _, id := range append(low, high...) {
				waitState(t, r, id, runlog.StateSucceeded)
			}
			if got, want := log.started()[before:], append(high, low...); !slices.Equal(got, want) {
				t.Errorf("one at a time, the jobs started in the order %v, want %v (priority 5 first, then by id)", got, want)
			}

			if _, err := r.SetQueueConcurrency(ctx, "bulk", -1); !errors.Is(err, runlog.ErrInvalid) {
				t.Errorf("SetQueueConcurrency(-1): %v, want ErrInvalid", err)
			}
			if _, err := r.Enqueue(ctx, "bulk", struct{}{}, runlog.WithQueue("bad name")); !errors.Is(err, runlog.ErrInvalid) {
				t.Errorf("a queue named %q: %v, want ErrInvalid", "bad name", err)
			}
			if _, err := r.Enqueue(ctx, "bulk", struct{}{}, runlog.WithPriority(runlog.MaxPriority+1)); !errors.Is(err, runlog.ErrInvalid) {
				t.Errorf("priority above the maximum: %v, want ErrInvalid", err)
			}
		})
	}
}

// TestSnooze: a handler's Snooze puts the job back, due after the wait,
// with no attempt counted against its budget.
func TestSnooze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	var calls atomic.Int32
	r := openRunner(t, t.TempDir(), runlog.Config{
		Clock: clock,
		Retry: runlog.RetryPolicy{Attempts: 1},
		Handlers: map[string]runlog.Handler{"k": runlog.Handle(func(ctx context.Context, _ struct{}) error {
			if calls.Add(1) <= 2 {
				return runlog.Snooze(time.Minute)
			}
			return nil
		})},
	})
	id := mustEnqueue(t, r, "k", struct{}{})
	for n := 1; n <= 2; n++ {
		j := testwait.Until(t, "the snooze", func() (runlog.Job, bool) {
			j, err := r.Job(ctx, id)
			return j, err == nil && j.Attempts == n && j.State == runlog.StatePending
		})
		if due := j.DueAt.Sub(clock.Now()); due != time.Minute {
			t.Fatalf("snoozed job due in %v, want 1m", due)
		}
		if h := j.History[len(j.History)-1]; h.Outcome != "snoozed" {
			t.Fatalf("the snoozed attempt reads %+v", h)
		}
		clock.Advance(time.Minute)
	}
	// Two snoozes did not spend the policy's single attempt.
	waitState(t, r, id, runlog.StateSucceeded)
}
