package runlog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runlog/runlog"
)

// TestQueueRateLimitRealClock is TestRateLimitRealClock for a queue's
// limit: 100/s with a burst of 10 on queue "mail" (Runner.SetQueueLimit),
// whose backlog spreads over 8 targets, with a restart half way: the
// starts of every window of 1 s lie within 110 (the bucket is not refilled
// by the restart).
func TestQueueRateLimitRealClock(t *testing.T) {
	t.Parallel()
	rateLimitRealClock(t, func(r *runlog.Runner) error {
		_, err := r.SetQueueLimit(context.Background(), "mail", runlog.Limit{Rate: 100, Burst: 10})
		return err
	}, func(i int) runlog.JobRequest {
		return runlog.JobRequest{Kind: "k", Target: fmt.Sprintf("api-%d", i%8), Queue: "mail"}
	})
}

// TestQueueLimitConfig: Config.QueueLimits sets the queues' limits at
// open (and a later open with another replaces it), invalid ones are
// refused with ErrInvalid, SetQueueLimit refuses a bad limit and keeps the
// queue's concurrency, and Queues shows the limit and its tokens.
func TestQueueLimitConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []runlog.Config{
		{QueueLimits: map[string]runlog.Limit{"mail": {Rate: -1}}},
		{QueueLimits: map[string]runlog.Limit{"mail": {Burst: 3}}},
		{QueueLimits: map[string]runlog.Limit{"a b": {Rate: 1}}},
		{QueueLimits: map[string]runlog.Limit{"mail": {Rate: 2e6}}},
	} {
		if _, err := runlog.Open(t.TempDir(), cfg); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("Open with %+v: %v, want ErrInvalid", cfg.QueueLimits, err)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	cfg := runlog.Config{
		Handlers:    map[string]runlog.Handler{"k": runlog.Handle(noop)},
		QueueLimits: map[string]runlog.Limit{"mail": {Rate: 2.5, Burst: 4}, runlog.DefaultQueue: {Rate: 1}},
		Logger:      quietLogger(),
	}
	r := openRunner(t, dir, cfg)
	queue := func(r *runlog.Runner, name string) runlog.QueueStats {
		t.Helper()
		qs, err := r.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == name {
				return q
			}
		}
		return runlog.QueueStats{}
	}
	if q := queue(r, "mail"); q.Limit != (runlog.Limit{Rate: 2.5, Burst: 4}) || q.Tokens != 4 {
		t.Fatalf("mail: %+v, want the configured limit with 4 tokens", q)
	}
	if q := queue(r, runlog.DefaultQueue); q.Limit != (runlog.Limit{Rate: 1, Burst: 1}) {
		t.Fatalf("default: %+v, want 1/s burst 1", q)
	}
	if _, err := r.SetQueueConcurrency(ctx, "mail", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetQueueLimit(ctx, "mail", runlog.Limit{Rate: 1, Burst: -1}); !errors.Is(err, runlog.ErrInvalid) {
		t.Fatalf("SetQueueLimit with burst -1: %v, want ErrInvalid", err)
	}
	if _, err := r.SetQueueLimit(ctx, "a b", runlog.Limit{Rate: 1}); !errors.Is(err, runlog.ErrInvalid) {
		t.Fatalf("SetQueueLimit of a bad name: %v, want ErrInvalid", err)
	}
	q, err := r.SetQueueLimit(ctx, "mail", runlog.Limit{Rate: 7})
	if err != nil || q.Limit != (runlog.Limit{Rate: 7, Burst: 1}) || q.Concurrency != 3 {
		t.Fatalf("SetQueueLimit: %+v, %v; want 7/s burst 1, concurrency 3 kept", q, err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A later open under another configuration replaces the limit.
	cfg.QueueLimits = map[string]runlog.Limit{"mail": {}}
	r = openRunner(t, dir, cfg)
	if q := queue(r, "mail"); q.Limit != (runlog.Limit{}) || q.Concurrency != 3 {
		t.Fatalf("mail after an open with a zero limit: %+v, want none, concurrency 3", q)
	}
	if q := queue(r, runlog.DefaultQueue); q.Limit != (runlog.Limit{Rate: 1, Burst: 1}) {
		t.Fatalf("default after an open that does not name it: %+v, want its limit kept", q)
	}
}
