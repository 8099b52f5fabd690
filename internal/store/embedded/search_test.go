package embedded

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// TestSearchBeyondTheBound: a prefix that more than maxMemorySearch keys
// in memory start with is answered by the scan instead of the ordered
// keys; either way every page walk returns every match exactly once, in
// order, with no short page before the end.
func TestSearchBeyondTheBound(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), 1000)
	ctx := context.Background()
	n := maxMemorySearch + 40
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		key := fmt.Sprintf("many-%05d", i)
		if i%3 == 0 {
			key = fmt.Sprintf("few-%05d", i)
		}
		jobs[i] = store.NewJob{Due: 1000, Spec: state.Spec{Kind: "k", Target: "t", Key: key, Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}}
	}
	if _, err := s.Enqueue(ctx, 1000, jobs); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"many-", "few-", "many-0001", "m"} {
		var want []uint64
		s.mu.Lock()
		s.st.Scan(0, false, func(j *state.Job) bool {
			if strings.HasPrefix(j.Spec.Key, q) {
				want = append(want, j.ID)
			}
			return true
		})
		s.mu.Unlock()
		for _, oldest := range []bool{true, false} {
			w := slices.Clone(want)
			if !oldest {
				slices.Reverse(w)
			}
			var got []uint64
			f := store.Filter{Search: q, Oldest: oldest, Limit: 50}
			for {
				page, next, err := s.List(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range page {
					got = append(got, j.ID)
				}
				if next == 0 {
					break
				}
				if len(page) != f.Limit {
					t.Fatalf("search %q: a page of %d before the end", q, len(page))
				}
				f.After = next
			}
			if !slices.Equal(got, w) {
				t.Errorf("search %q (oldest %v): %d jobs, want %d", q, oldest, len(got), len(w))
			}
		}
	}
}
