package embedded

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// TestCloseSpillsPendingPayloads: the final snapshot of a Close holds no
// payload (they go to the table first), so that a reopen reads only the
// memory tier; the jobs reopened share their Specs where nothing of their
// own is in them; and every claim after the reopen gets its own payload,
// read back from the table, as does Job.
func TestCloseSpillsPendingPayloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const now = 1_700_000_000_000
	s := openStore(t, dir, now)
	ctx := context.Background()
	pol := retry.DefaultPolicy()
	var jobs []store.NewJob
	for i := range 200 {
		sp := state.Spec{Kind: "k", Target: fmt.Sprintf("t%d", i%3), Payload: []byte(fmt.Sprintf("payload %d", i)), Policy: pol}
		if i%10 == 0 {
			sp.Key = fmt.Sprintf("key %d", i) // a key keeps its Spec its own
		}
		jobs = append(jobs, store.NewJob{Spec: sp, Due: now})
	}
	if _, err := s.Enqueue(ctx, now, jobs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, now)
	defer s.Close()
	s.mu.Lock()
	specs := make(map[*state.Spec]int)
	for id := uint64(1); id <= 200; id++ {
		j, ok := s.st.Job(id)
		if !ok || !j.Spilled || j.Spec.Payload != nil {
			s.mu.Unlock()
			t.Fatalf("job %d after the reopen: held %v, spilled %v, payload %q; want its payload in the table only", id, ok, ok && j.Spilled, j.Spec.Payload)
		}
		specs[j.Spec]++
	}
	s.mu.Unlock()
	// 20 keyed jobs with their own Specs, 180 sharing one per target.
	if len(specs) != 20+3 {
		t.Errorf("%d distinct Specs for 200 jobs, want 23 (20 keyed, one per target for the rest)", len(specs))
	}
	j, err := s.Job(ctx, 7)
	if err != nil || !bytes.Equal(j.Spec.Payload, []byte("payload 6")) {
		t.Fatalf("Job(7): payload %q, %v", j.Spec.Payload, err)
	}
	seen := 0
	for seen < 200 {
		claims, err := s.Claim(ctx, now, store.Limits{Max: 64})
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) == 0 {
			t.Fatalf("%d jobs claimed, then none", seen)
		}
		for _, c := range claims {
			if want := fmt.Sprintf("payload %d", c.ID-1); string(c.Payload) != want {
				t.Errorf("claim of job %d: payload %q, want %q", c.ID, c.Payload, want)
			}
		}
		seen += len(claims)
	}
}
