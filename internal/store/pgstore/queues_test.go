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

// TestPacedLockedLate: a node whose last claim found no queue with a
// setting does not lock the paced queues' rows in its claim's first round
// trip (startReads.lockPaced); a claim of it that finds a rate-limited
// queue locks them late and reads the pace another node left there, so the
// bucket is shared: node B spends the burst of 2, and node A's claim at the
// same instant starts none of the queue's jobs enqueued since (it defers
// them to the bucket's next slots), where a zero pace would start 2.
func TestPacedLockedLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	enqueue := func(s *Store, queue string, n int) {
		t.Helper()
		jobs := make([]store.NewJob, n)
		for i := range jobs {
			jobs[i] = store.NewJob{Due: 1000, Spec: state.Spec{Kind: "k", Target: "t", Queue: queue, Policy: retry.DefaultPolicy()}}
		}
		if _, err := s.Enqueue(ctx, 1000, jobs); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(s *Store, now int64) int {
		t.Helper()
		cs, err := s.Claim(ctx, now, store.Limits{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	// A claims with no queue setting anywhere: its next claim is plain.
	enqueue(a, "", 1)
	if got := claim(a, 1000); got != 1 {
		t.Fatalf("node A started %d jobs of the default queue, want 1", got)
	}
	if _, err := b.SetQueue(ctx, 1000, "limited", nil, nil, &retry.Limit{RateMilli: 1000, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	enqueue(b, "limited", 2)
	if got := claim(b, 1000); got != 2 {
		t.Fatalf("node B started %d jobs of a queue with a burst of 2, want 2", got)
	}
	enqueue(b, "limited", 3)
	if !a.plainQueues() {
		t.Fatal("node A's last claim found no queue with a setting, yet its next claim is not plain: the test would not lock late")
	}
	if got := claim(a, 1000); got != 0 {
		t.Fatalf("node A started %d jobs of the limited queue right after node B spent its burst: its claim did not read the pace under the lock", got)
	}
	if got := claim(a, 2000); got != 1 {
		t.Fatalf("node A started %d jobs of the limited queue a second later at 1/s, want 1", got)
	}
}
