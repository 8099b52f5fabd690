package embedded

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/testwait"
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
			spilled[id] = j.Spilled()
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

// TestSpillQueueBounded: a burst of jobs due later, whose payloads all go
// to the table, holds at most spillQueueBytes of them in memory on their
// way there, however roomy the cache: with the spiller held back, the
// enqueue that takes the queue over the bound waits, and every enqueue
// returns with the queue under it.
func TestSpillQueueBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{Now: 1000, PayloadCacheBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gate := make(chan struct{})
	s.sp.gate.Store(&gate)
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.sp.gate.Store(nil)
			close(gate)
		})
	}
	defer release() // before Close, which waits for the spiller
	payload := bytes.Repeat([]byte("p"), 1<<10)
	batch := make([]store.NewJob, 64)
	for i := range batch {
		batch[i] = store.NewJob{Spec: state.Spec{Kind: "k", Target: "t", Payload: payload, Policy: retry.Policy{Attempts: 1}}, Due: 1000 + spillAhead + 1}
	}
	cost := int64(len(batch)) * cachedCost(payload)
	rounds := int(3*spillQueueBytes/cost) + 1
	queued := func() int64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sp.queued
	}
	done := make(chan error, 1)
	go func() {
		for range rounds {
			if _, err := s.Enqueue(ctx, 1000, batch); err != nil {
				done <- err
				return
			}
			if q := queued(); q > spillQueueBytes {
				done <- fmt.Errorf("an enqueue returned with %d bytes of payloads queued for the table; the bound is %d", q, spillQueueBytes)
				return
			}
		}
		done <- nil
	}()
	testwait.For(t, "an enqueue held by the queue of payloads", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sp.throttled > 0
	})
	if q := queued(); q <= spillQueueBytes {
		t.Errorf("an enqueue waits with %d bytes queued, within the bound of %d", q, spillQueueBytes)
	}
	release()
	if err := testwait.Recv(t, done, "the enqueues"); err != nil {
		t.Fatal(err)
	}
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	q, resident := s.sp.queued, s.sp.resident
	s.mu.Unlock()
	if q != 0 || resident != 0 {
		t.Errorf("settled with %d bytes queued and %d in memory; want both 0 (every payload in the table)", q, resident)
	}
}
