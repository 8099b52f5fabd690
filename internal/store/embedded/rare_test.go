package embedded

import (
	"context"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// BenchmarkListRareTarget times List of a target with few pending jobs (one
// in 50 000) among a backlog of RUNLOG_BENCH_HELD pending jobs (default
// 1 M) of another, the filter issue 16's paging once answered with a walk
// of the whole backlog: a target's own id list makes it a read of its
// jobs.
func BenchmarkListRareTarget(b *testing.B) {
	s, n := benchStore(b, b.TempDir())
	ctx := context.Background()
	const batch = 5000
	pol := retry.DefaultPolicy()
	var ids []uint64
	for k := 0; k < n; k += batch {
		jobs := make([]store.NewJob, batch)
		for i := range jobs {
			target := "big"
			if (k+i)%50_000 == 25_000 {
				target = "rare"
			}
			jobs[i] = store.NewJob{Due: 1_800_000_000_000, Spec: state.Spec{Kind: "k", Target: target, Payload: []byte("p"), Policy: pol}}
		}
		got, err := s.Enqueue(ctx, 1_700_000_000_000, jobs)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range got {
			ids = append(ids, e.ID)
		}
	}
	b.ResetTimer()
	for range b.N {
		timeFilters(b, s, []pagingFilter{{f: store.Filter{Target: "rare"}}, {f: store.Filter{Target: "rare", State: "pending"}}}, ids)
	}
}
