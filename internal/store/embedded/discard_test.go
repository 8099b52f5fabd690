package embedded

import (
	"context"
	"errors"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// TestDiscardEvicted discards a finished job the spiller has already moved
// to the table: it is gone at once (before the spiller deletes its keys),
// its key is free, its payload too, and a reopen agrees.
func TestDiscardEvicted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{Now: 1000, PayloadCacheBytes: 4}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	sp := state.Spec{Kind: "k", Target: "t", Key: "once", Payload: []byte("a payload over the cache"), Policy: retry.Policy{Attempts: 1}}
	out, err := s.Enqueue(ctx, 1000, []store.NewJob{{Spec: sp, Due: 1000}, {Spec: state.Spec{Kind: "k", Policy: retry.Policy{Attempts: 1}}, Due: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	id := out[0].ID
	cs, err := s.Claim(ctx, 1000, store.Limits{Max: 10})
	if err != nil || len(cs) != 2 {
		t.Fatalf("Claim: %v, %v", cs, err)
	}
	if _, err := s.Finish(ctx, 1001, func() uint32 { return 0 }, []store.Outcome{{ID: cs[0].ID, Attempt: 1, Class: retry.Permanent, AfterMS: -1, Error: "no"}, {ID: cs[1].ID, Attempt: 1, Class: retry.Success, AfterMS: -1}}, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	_, inMemory := s.st.Job(id)
	s.mu.Unlock()
	if inMemory {
		t.Fatal("the failed job is still in memory after settle")
	}
	// Hold the spiller so that the table still has the job's keys while
	// the discard returns.
	s.sp.stop()
	if err := s.Discard(ctx, 1002, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Job(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Job after the discard: %v, want ErrNotFound", err)
	}
	page, _, err := s.List(ctx, store.Filter{State: "failed"})
	if err != nil || len(page) != 0 {
		t.Fatalf("List(failed) after the discard: %d jobs, %v", len(page), err)
	}
	page, _, err = s.List(ctx, store.Filter{Search: "once"})
	if err != nil || len(page) != 0 {
		t.Fatalf("List(search once) after the discard: %d jobs, %v", len(page), err)
	}
	again, err := s.Enqueue(ctx, 1003, []store.NewJob{{Spec: sp, Due: 99999}})
	if err != nil || again[0].Existing {
		t.Fatalf("enqueue with the discarded job's key: %+v, %v; want a new job", again, err)
	}
	if st, _ := s.Stats(ctx); st.Counts.Failed != 0 || st.Counts.Succeeded != 1 || st.Counts.Pending != 1 {
		t.Fatalf("counts after the discard: %+v", st.Counts)
	}
	// The spiller is stopped, so Close skips its final snapshot: the
	// reopen replays the discard from the journal.
	_ = s.Close()
	s, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Job(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Job after a reopen: %v, want ErrNotFound", err)
	}
	// The table no longer holds the job's record nor its payload.
	for _, k := range [][]byte{payloadKey(id)} {
		if v, err := s.tbl.get(k); err != nil || v != nil {
			t.Fatalf("the table still holds key %x: %q, %v", k, v, err)
		}
	}
	parts, _ := s.st.Parts()
	if j, err := s.tbl.finished(id, parts); err != nil || j != nil {
		t.Fatalf("the table still holds the discarded job: %v, %v", j, err)
	}
	if st, _ := s.Stats(ctx); st.Counts.Failed != 0 || st.Counts.Succeeded != 1 || st.Counts.Pending != 1 {
		t.Fatalf("counts after a reopen: %+v", st.Counts)
	}
}
