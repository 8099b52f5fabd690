package pgstore

import (
	"context"
	"sync"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// TestConcurrentTicksMakeOneJob: three nodes with no leader deal with the
// same ticks of two schedules at once, at times that mostly coincide and
// sometimes lag: every tick makes exactly one job (catch-up all: none is
// skipped), and each schedule's position is its latest tick.
func TestConcurrentTicksMakeOneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := openNodes(t, 3)
	const t0 = int64(1_700_000_000_000)
	for _, name := range []string{"a", "b"} {
		_, err := nodes[0].ChangeSchedule(ctx, t0, state.ScheduleChange{Action: state.SchedCreate, Name: name,
			Def: &state.ScheduleDef{EveryMS: 1000, CatchUp: state.CatchUpAll, Job: state.Spec{Kind: "k", Target: "t", Policy: retry.DefaultPolicy()}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	const steps = 40
	var wg sync.WaitGroup
	for n, s := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= steps; i++ {
				now := t0 + int64(i)*1000 + int64(n*300) // node n lags n*300 ms
				if _, _, _, err := s.Tick(ctx, now); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, name := range []string{"a", "b"} {
		seen := map[int64]uint64{}
		page, _, err := nodes[1].List(ctx, store.Filter{Schedule: name, Limit: 1000, Oldest: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			if other, dup := seen[j.Spec.Tick]; dup {
				t.Fatalf("schedule %s: tick %d made jobs %d and %d", name, j.Spec.Tick-t0, other, j.ID)
			}
			seen[j.Spec.Tick] = j.ID
		}
		for i := 1; i <= steps; i++ {
			if _, ok := seen[t0+int64(i)*1000]; !ok {
				t.Fatalf("schedule %s: tick %d made no job (%d jobs)", name, i*1000, len(page))
			}
		}
		if len(seen) != steps {
			t.Fatalf("schedule %s: %d jobs for %d ticks", name, len(seen), steps)
		}
		sc, err := nodes[2].Schedule(ctx, name)
		if err != nil || sc.LastTick != t0+steps*1000 {
			t.Fatalf("schedule %s position %+v, %v", name, sc, err)
		}
	}
}
