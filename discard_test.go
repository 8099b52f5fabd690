package runlog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// TestDiscard checks that a finished job is removed for good with its key
// freed, that a pending job is refused with ErrNotFinished (an error that
// says to cancel it first), and that DiscardMatching counts with DryRun,
// then discards exactly the finished jobs of its filter.
func TestDiscard(t *testing.T) {
	t.Parallel()
	r := openRunner(t, t.TempDir(), runlog.Config{
		Retry: runlog.RetryPolicy{Attempts: 1, Base: time.Millisecond, Cap: time.Millisecond},
		Handlers: map[string]runlog.Handler{
			"work": runlog.Handle(func(ctx context.Context, p []byte) error {
				if strings.Contains(string(p), "fail") {
					return runlog.Permanent(errors.New("no"))
				}
				return nil
			}),
		},
	})
	ctx := context.Background()
	ok, err := r.Enqueue(ctx, "work", "ok", runlog.Key("once"))
	if err != nil {
		t.Fatal(err)
	}
	var failed []uint64
	for range 3 {
		id, err := r.Enqueue(ctx, "work", "fail", runlog.Target("partner"))
		if err != nil {
			t.Fatal(err)
		}
		failed = append(failed, id)
	}
	other, err := r.Enqueue(ctx, "work", "fail other", runlog.Target("elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append([]uint64{ok, other}, failed...) {
		if _, err := r.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	later, err := r.Enqueue(ctx, "work", "later", runlog.RunIn(time.Hour), runlog.Target("partner"))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Discard(ctx, later)
	if !errors.Is(err, runlog.ErrNotFinished) || !strings.Contains(err.Error(), "cancel it first") {
		t.Fatalf("Discard of a pending job: %v, want ErrNotFinished saying to cancel it first", err)
	}
	if err := r.Discard(ctx, 424242); !errors.Is(err, runlog.ErrNotFound) {
		t.Fatalf("Discard of an unknown id: %v, want ErrNotFound", err)
	}
	if err := r.Discard(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Job(ctx, ok); !errors.Is(err, runlog.ErrNotFound) {
		t.Fatalf("Job after Discard: %v, want ErrNotFound", err)
	}
	again, err := r.Enqueue(ctx, "work", "ok", runlog.Key("once"))
	if err != nil || again == ok {
		t.Fatalf("enqueue with the discarded job's key: id %d (discarded %d), %v; want a new job", again, ok, err)
	}
	// The stats at the end count it succeeded: wait for it (on PostgreSQL
	// its outcome is recorded apart from the attempt, and was still
	// running there at times, 2 runs in 4 on a loaded machine).
	if _, err := r.Wait(ctx, again); err != nil {
		t.Fatal(err)
	}

	if _, err := r.DiscardMatching(ctx, runlog.DiscardFilter{}); !errors.Is(err, runlog.ErrInvalid) {
		t.Fatalf("DiscardMatching without a filter: %v, want ErrInvalid", err)
	}
	if _, err := r.DiscardMatching(ctx, runlog.DiscardFilter{State: runlog.StatePending}); !errors.Is(err, runlog.ErrInvalid) {
		t.Fatalf("DiscardMatching of pending jobs: %v, want ErrInvalid", err)
	}
	f := runlog.DiscardFilter{Target: "partner", DryRun: true}
	res, err := r.DiscardMatching(ctx, f)
	if err != nil || res.Count != len(failed) {
		t.Fatalf("dry run: %+v, %v; want a count of %d (the pending job is not finished)", res, err, len(failed))
	}
	for _, id := range failed {
		if _, err := r.Job(ctx, id); err != nil {
			t.Fatalf("the dry run discarded job %d: %v", id, err)
		}
	}
	f.DryRun = false
	if res, err := r.DiscardMatching(ctx, f); err != nil || res.Count != len(failed) {
		t.Fatalf("DiscardMatching: %+v, %v; want %d", res, err, len(failed))
	}
	for _, id := range failed {
		if _, err := r.Job(ctx, id); !errors.Is(err, runlog.ErrNotFound) {
			t.Fatalf("job %d after DiscardMatching: %v", id, err)
		}
	}
	for _, id := range []uint64{other, later} {
		if _, err := r.Job(ctx, id); err != nil {
			t.Fatalf("job %d, outside the filter or pending, is gone: %v", id, err)
		}
	}
	st, err := r.Stats(ctx)
	if err != nil || st.Failed != 1 || st.Succeeded != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v, %v; want 1 failed (other), 1 succeeded (again), 1 pending", st, err)
	}
}
