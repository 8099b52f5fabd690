package runlog_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// TestReplay checks that a finished job (succeeded, failed, cancelled) is
// re-sent as a new job with the same kind, target, payload, policy and
// metadata, no key, linked by ReplayOf, that runs; that the original is
// unchanged; and that a pending job or an unknown id is refused.
func TestReplay(t *testing.T) {
	t.Parallel()
	runs := make(chan string, 16)
	r := openRunner(t, t.TempDir(), runlog.Config{
		Retry: runlog.RetryPolicy{Attempts: 1, Base: time.Millisecond, Cap: time.Millisecond},
		Handlers: map[string]runlog.Handler{
			"work": runlog.Handle(func(ctx context.Context, p []byte) error {
				runs <- string(p)
				if string(p) == `"fail"` {
					return runlog.Permanent(errors.New("no"))
				}
				return nil
			}),
		},
	})
	ctx := context.Background()
	md := map[string]string{"tenant": "acme"}
	ok, err := r.Enqueue(ctx, "work", "ok", runlog.Key("once"), runlog.Target("partner"), runlog.WithMetadata(md))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := r.Enqueue(ctx, "work", "fail")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{ok, bad} {
		if _, err := r.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	<-runs
	<-runs
	before, _ := r.Job(ctx, ok)
	for _, id := range []uint64{ok, bad} {
		orig, _ := r.Job(ctx, id)
		nid, err := r.Replay(ctx, id)
		if err != nil {
			t.Fatalf("Replay(%d): %v", id, err)
		}
		j, err := r.Wait(ctx, nid)
		if err != nil {
			t.Fatal(err)
		}
		if got := <-runs; got != string(orig.Payload) {
			t.Fatalf("the replay of %d ran with payload %s, want %s", id, got, orig.Payload)
		}
		if j.ReplayOf != id || j.Kind != orig.Kind || j.Target != orig.Target || string(j.Payload) != string(orig.Payload) ||
			j.Retry != orig.Retry || !maps.Equal(j.Metadata, orig.Metadata) || j.Key != "" || j.State != orig.State {
			t.Fatalf("replay of %d: %+v; want the original's kind, target, payload, policy and metadata, no key, replay_of %d, ending %s like it", id, j, id, orig.State)
		}
	}
	if after, _ := r.Job(ctx, ok); after.State != before.State || after.Attempts != before.Attempts || after.ReplayOf != 0 || !after.FinishedAt.Equal(before.FinishedAt) {
		t.Fatalf("the original changed: %+v, was %+v", after, before)
	}
	later, err := r.Enqueue(ctx, "work", "later", runlog.RunIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Replay(ctx, later); !errors.Is(err, runlog.ErrNotReplayable) {
		t.Fatalf("Replay of a pending job: %v, want ErrNotReplayable", err)
	}
	if _, err := r.Replay(ctx, 424242); !errors.Is(err, runlog.ErrNotFound) {
		t.Fatalf("Replay of an unknown id: %v, want ErrNotFound", err)
	}
}

// TestReplayMatching checks the re-send of a target's jobs finished since a
// time, by state, with a dry run first; other targets, earlier jobs and
// other states are left alone; a filter without target or since, or with
// a state that is not an end state, is refused.
func TestReplayMatching(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r := openRunner(t, t.TempDir(), runlog.Config{
		Clock: clock,
		Retry: runlog.RetryPolicy{Attempts: 1, Base: time.Millisecond, Cap: time.Millisecond},
		Handlers: map[string]runlog.Handler{
			"work": runlog.Handle(func(ctx context.Context, p []byte) error {
				if string(p) == `"fail"` {
					return runlog.Permanent(errors.New("no"))
				}
				return nil
			}),
		},
	})
	ctx := context.Background()
	run := func(target, payload string) uint64 {
		t.Helper()
		id, err := r.Enqueue(ctx, "work", payload, runlog.Target(target))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	run("a", "ok") // finished before since
	clock.Advance(time.Minute)
	since := clock.Now()
	okA, failA := run("a", "ok"), run("a", "fail")
	run("b", "fail") // another target
	dry, err := r.ReplayMatching(ctx, runlog.ReplayFilter{Target: "a", Since: since, DryRun: true})
	if err != nil || dry.Count != 2 || len(dry.IDs) != 0 {
		t.Fatalf("dry run: %+v, %v; want a count of 2 and no ids", dry, err)
	}
	res, err := r.ReplayMatching(ctx, runlog.ReplayFilter{Target: "a", Since: since, State: runlog.StateFailed})
	if err != nil || res.Count != 1 || len(res.IDs) != 1 {
		t.Fatalf("replay of the failed: %+v, %v; want one new job", res, err)
	}
	if j, _ := r.Wait(ctx, res.IDs[0]); j.ReplayOf != failA {
		t.Fatalf("the replay is of job %d, want %d", j.ReplayOf, failA)
	}
	res, err = r.ReplayMatching(ctx, runlog.ReplayFilter{Target: "a", Since: since, State: runlog.StateSucceeded})
	if err != nil || len(res.IDs) != 1 {
		t.Fatalf("replay of the succeeded: %+v, %v", res, err)
	}
	if j, _ := r.Wait(ctx, res.IDs[0]); j.ReplayOf != okA {
		t.Fatalf("the replay is of job %d, want %d", j.ReplayOf, okA)
	}
	for _, f := range []runlog.ReplayFilter{{Since: since}, {Target: "a"}, {Target: "a", Since: since, State: runlog.StatePending}} {
		if _, err := r.ReplayMatching(ctx, f); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("ReplayMatching(%+v) = %v, want ErrInvalid", f, err)
		}
	}
}
