package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// TestPauseAcrossNodes: three nodes claim a queue's jobs as fast as they
// can while a fourth pauses it; once SetQueue has returned, no node starts
// a job of the queue (the claims in flight committed before it returned,
// the claims after it read the pause), and the bound of a queue holds
// across the nodes.
func TestPauseAcrossNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := openNodes(t, 4)
	const n = 3000
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Due: 1000, Spec: state.Spec{Kind: "k", Target: "t", Queue: "q", Policy: retry.DefaultPolicy()}}
	}
	if _, err := nodes[0].Enqueue(ctx, 1000, jobs); err != nil {
		t.Fatal(err)
	}
	var (
		stop    atomic.Bool
		claims  atomic.Int64
		started sync.Map // job id → true
		wg      sync.WaitGroup
	)
	for _, s := range nodes[:3] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				cs, err := s.Claim(ctx, 1000, store.Limits{Max: 3})
				if err != nil {
					t.Error(err)
					return
				}
				claims.Add(1)
				for _, c := range cs {
					started.Store(c.ID, true)
				}
			}
		}()
	}
	for claims.Load() < 30 {
		// Let the nodes claim a while before the pause.
		if _, err := nodes[3].Queues(ctx); err != nil {
			t.Fatal(err)
		}
	}
	paused := true
	if _, err := nodes[3].SetQueue(ctx, 1000, "q", nil, &paused, nil); err != nil {
		t.Fatal(err)
	}
	var atPause int
	if err := nodes[3].pool.QueryRow(ctx, "SELECT count(*) FROM runlog_jobs WHERE started > 0").Scan(&atPause); err != nil {
		t.Fatal(err)
	}
	for after := claims.Load(); claims.Load() < after+30; {
		// The nodes claim on, against the paused queue.
		if _, err := nodes[3].Queues(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	var now int
	if err := nodes[3].pool.QueryRow(ctx, "SELECT count(*) FROM runlog_jobs WHERE started > 0").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if atPause == 0 || atPause == n {
		t.Fatalf("%d of %d jobs started before the pause: the test saw no claims race the pause", atPause, n)
	}
	if now != atPause {
		t.Fatalf("%d jobs had started when the pause returned, %d after: a paused queue's job started", atPause, now)
	}

	// A bound of 5 across the nodes: resume, finish nothing, claim on
	// every node; the queue's running attempts stop at 5 in all.
	five, resume := 5, false
	if _, err := nodes[3].SetQueue(ctx, 1000, "q", &five, &resume, nil); err != nil {
		t.Fatal(err)
	}
	var more sync.WaitGroup
	for _, s := range nodes[:3] {
		more.Add(1)
		go func() {
			defer more.Done()
			for range 10 {
				if _, err := s.Claim(ctx, 1000, store.Limits{Max: 4}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	more.Wait()
	qs, err := nodes[3].Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "q" && q.Running != max(atPause, 5) {
			t.Fatalf("queue q runs %d attempts with a bound of 5 (%d ran before the bound)", q.Running, atPause)
		}
	}
}
