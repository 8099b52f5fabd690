package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// testDiscard: a finished job (succeeded, failed, cancelled) is removed for
// good: Job answers ErrNotFound, List leaves it out, the counts drop, its
// key is free for a new job, and all of it survives a reopen; a pending or
// running job, and a job cancelled while running whose attempt has not
// ended, are refused with ErrNotFinished and left as they were.
func testDiscard(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	one := func(kind, key string) state.Spec {
		sp := spec(kind, "t")
		sp.Key, sp.Policy = key, policy(1)
		return sp
	}
	ok := enqueueOne(t, s, T0, T0, one("ok", "key-ok"))
	bad := enqueueOne(t, s, T0, T0, one("bad", "key-bad"))
	long := enqueueOne(t, s, T0, T0, one("long", ""))
	c := claim(t, s, T0, all)
	if len(c) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(c))
	}
	byID := map[uint64]store.Claim{}
	for _, cl := range c {
		byID[cl.ID] = cl
	}
	finish(t, s, T0+1, outcome(byID[ok], retry.Success, ""), outcome(byID[bad], retry.Permanent, "404"))
	pending := enqueueOne(t, s, T0+2, T0+99999, one("later", "key-later"))
	cancelled := enqueueOne(t, s, T0+2, T0+99999, one("later", ""))
	if _, err := s.Cancel(ctx, T0+3, cancelled, "not needed"); err != nil {
		t.Fatal(err)
	}

	for _, id := range []uint64{pending, long} {
		before := job(t, s, id)
		if err := s.Discard(ctx, T0+4, id); !errors.Is(err, store.ErrNotFinished) {
			t.Fatalf("Discard of %v job %d: %v, want ErrNotFinished", before.State, id, err)
		}
		wantState(t, s, id, before.State)
	}
	// Cancelled while running: refused until its attempt ends.
	if _, err := s.Cancel(ctx, T0+5, long, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, T0+6, long); !errors.Is(err, store.ErrNotFinished) {
		t.Fatalf("Discard of a job cancelled while its attempt runs: %v, want ErrNotFinished", err)
	}
	finish(t, s, T0+7, outcome(byID[long], retry.Retryable, "cut"))

	before, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{ok, bad, cancelled, long} {
		if err := s.Discard(ctx, T0+8, id); err != nil {
			t.Fatalf("Discard of job %d: %v", id, err)
		}
		if _, err := s.Job(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Job(%d) after its discard: %v, want ErrNotFound", id, err)
		}
		if err := s.Discard(ctx, T0+9, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a second Discard of job %d: %v, want ErrNotFound", id, err)
		}
	}
	check := func(s store.Store, when string) {
		t.Helper()
		st, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := before.Counts
		want.Succeeded--
		want.Failed--
		want.Cancelled -= 2
		if st.Counts != want {
			t.Fatalf("%s: counts %+v, want %+v", when, st.Counts, want)
		}
		for _, f := range []store.Filter{{}, {State: "failed"}, {Kind: "bad"}, {Target: "t"}, {Search: "key-"}} {
			ids := listAll(t, s, f, 2)
			for _, id := range []uint64{ok, bad, cancelled, long} {
				if slices.Contains(ids, id) {
					t.Fatalf("%s: List(%+v) = %v shows discarded job %d", when, f, ids, id)
				}
			}
		}
		wantState(t, s, pending, state.Pending)
	}
	check(s, "after the discards")
	// The keys are free: a new job takes key-ok and key-bad.
	for _, key := range []string{"key-ok", "key-bad"} {
		out := enqueue(t, s, T0+10, store.NewJob{Spec: one("again", key), Due: T0 + 99999})
		if out[0].Existing || out[0].ID == ok || out[0].ID == bad {
			t.Fatalf("enqueue with key %s after the discard of its job answered %+v, want a new job", key, out[0])
		}
	}
	// key-later is still held by the pending job.
	if out := enqueue(t, s, T0+10, store.NewJob{Spec: one("again", "key-later"), Due: T0}); !out[0].Existing || out[0].ID != pending {
		t.Fatalf("enqueue with key-later answered %+v, want job %d (its holder)", out[0], pending)
	}
	before.Counts.Pending += 2
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	check(s, "after a reopen")
	for _, id := range []uint64{ok, bad} {
		if _, err := s.Job(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Job(%d) after a reopen: %v, want ErrNotFound", id, err)
		}
	}
}
