package embedded

import (
	"bytes"
	"context"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// TestSpillAhead: a job due more than spillAhead after its enqueue has its
// payload moved to the table however roomy the cache, and then shares its
// Spec with jobs like it; a job due now keeps its payload in memory. Both
// read back their payload, before and after a reopen, and the one in the
// table comes back when it is claimed.
func TestSpillAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{Now: 1000, PayloadCacheBytes: 1 << 20}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	spec := func(p string) state.Spec {
		return state.Spec{Kind: "k", Target: "t", Payload: []byte(p), Policy: retry.Policy{Attempts: 1}}
	}
	later := int64(1000 + spillAhead + 1)
	out, err := s.Enqueue(ctx, 1000, []store.NewJob{
		{Spec: spec("now"), Due: 1000},
		{Spec: spec("later-1"), Due: later},
		{Spec: spec("later-2"), Due: later},
		{Spec: spec("edge"), Due: 1000 + spillAhead},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]struct {
		payload string
		spilled bool
	}{out[0].ID: {"now", false}, out[1].ID: {"later-1", true}, out[2].ID: {"later-2", true}, out[3].ID: {"edge", false}}
	check := func(when string) {
		t.Helper()
		s.mu.Lock()
		a, _ := s.st.Job(out[1].ID)
		b, _ := s.st.Job(out[2].ID)
		shared := a.Spec == b.Spec
		spilled := make(map[uint64]bool)
		for id := range want {
			j, _ := s.st.Job(id)
			spilled[id] = j.Spilled
		}
		s.mu.Unlock()
		for id, w := range want {
			if spilled[id] != w.spilled {
				t.Errorf("%s: job %d (%s) spilled %v, want %v", when, id, w.payload, spilled[id], w.spilled)
			}
			j, err := s.Job(ctx, id)
			if err != nil || !bytes.Equal(j.Spec.Payload, []byte(w.payload)) {
				t.Errorf("%s: job %d reads payload %q, %v; want %q", when, id, j.Spec.Payload, err, w.payload)
			}
		}
		if !shared {
			t.Errorf("%s: the two jobs due later with their payloads in the table do not share a Spec", when)
		}
	}
	check("live")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	check("after a reopen")
	cs, err := s.Claim(ctx, later, store.Limits{Max: 10})
	if err != nil || len(cs) != 4 {
		t.Fatalf("Claim: %d claims, %v", len(cs), err)
	}
	for _, c := range cs {
		if string(c.Payload) != want[c.ID].payload {
			t.Errorf("claim of job %d carries payload %q, want %q", c.ID, c.Payload, want[c.ID].payload)
		}
	}
}
