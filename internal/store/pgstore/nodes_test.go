package pgstore

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/retry"
)

// openNodes opens n stores (nodes) on one fresh database.
func openNodes(t *testing.T, n int) []*Store {
	t.Helper()
	first, url := openTest(t, Options{Node: "n0"})
	nodes := []*Store{first}
	for i := 1; i < n; i++ {
		s, err := Open(context.Background(), url, Options{Node: "n" + string(rune('0'+i)), Circuit: testCircuit})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		nodes = append(nodes, s)
	}
	return nodes
}

// TestConcurrentClaimsStartEachJobOnce: nodes claiming the same due jobs at
// once (SKIP LOCKED) start each job exactly once.
func TestConcurrentClaimsStartEachJobOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := openNodes(t, 3)
	const n = 600
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Due: 1000, Spec: state.Spec{Kind: "k", Target: "t", Policy: retry.DefaultPolicy()}}
	}
	if _, err := nodes[0].Enqueue(ctx, 1000, jobs); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		started = make(map[uint64]int)
		wg      sync.WaitGroup
	)
	for _, s := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cs, err := s.Claim(ctx, 1000, store.Limits{Max: 7})
				if err != nil {
					t.Error(err)
					return
				}
				if len(cs) == 0 {
					return
				}
				outs := make([]store.Outcome, len(cs))
				mu.Lock()
				for i, c := range cs {
					started[c.ID]++
					outs[i] = store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}
				}
				mu.Unlock()
				if _, err := s.Finish(ctx, 1001, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(started) != n {
		t.Fatalf("%d jobs started, want %d", len(started), n)
	}
	for id, k := range started {
		if k != 1 {
			t.Fatalf("job %d started %d times", id, k)
		}
	}
	st, err := nodes[1].Stats(ctx)
	if err != nil || st.Counts.Succeeded != n {
		t.Fatalf("stats %+v %v, want %d succeeded", st, err, n)
	}
}

// TestBreakerSharedByNodes: failures recorded by one node open the target's
// breaker for every node: another node defers the target's jobs, counting no
// attempt, until the cooldown ends.
func TestBreakerSharedByNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	spec := state.Spec{Kind: "k", Target: "down", Policy: retry.Policy{Attempts: 5, BaseMS: 1, CapMS: 1}}
	var jobs []store.NewJob
	for range 4 {
		jobs = append(jobs, store.NewJob{Due: 1000, Spec: spec})
	}
	if _, err := a.Enqueue(ctx, 1000, jobs); err != nil {
		t.Fatal(err)
	}
	cs, err := a.Claim(ctx, 1000, store.Limits{Max: testCircuit.Threshold})
	if err != nil || len(cs) != testCircuit.Threshold {
		t.Fatalf("claim on a: %v %v", cs, err)
	}
	var outs []store.Outcome
	for _, c := range cs {
		outs = append(outs, store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Retryable, AfterMS: -1, Error: "503"})
	}
	if _, err := a.Finish(ctx, 1010, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	targets, err := b.Targets(ctx)
	if err != nil || len(targets) != 1 || targets[0].Breaker.State != retry.Open || targets[0].Breaker.Until != 1010+testCircuit.CooldownMS {
		t.Fatalf("breaker seen by b: %+v %v", targets, err)
	}
	if cs, err := b.Claim(ctx, 1100, store.Limits{Max: 10}); err != nil || len(cs) != 0 {
		t.Fatalf("claim on b while open: %v %v", cs, err)
	}
	j, err := b.Job(ctx, 4)
	if err != nil || j.State != state.Pending || j.Started() != 0 || j.Due != 1010+testCircuit.CooldownMS {
		t.Fatalf("job deferred by b: %+v %v", j, err)
	}
	// After the cooldown one probe is admitted, on whichever node asks.
	if cs, err := b.Claim(ctx, 1010+testCircuit.CooldownMS, store.Limits{Max: 10}); err != nil || len(cs) != 1 {
		t.Fatalf("claim on b after the cooldown: %v %v", cs, err)
	}
	if targets, _ := a.Targets(ctx); len(targets) != 1 || targets[0].Breaker.State != retry.HalfOpen || targets[0].Breaker.Busy != 1 {
		t.Fatalf("breaker seen by a after b's probe: %+v", targets)
	}
}

// TestConcurrentKeys: nodes enqueueing the same idempotency key at once
// get one job; every node answers its id.
func TestConcurrentKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := openNodes(t, 3)
	for round := range 20 {
		key := "order-" + string(rune('a'+round))
		ids := make([]store.Enqueued, len(nodes))
		var wg sync.WaitGroup
		for i, s := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Enqueue(ctx, 1000, []store.NewJob{{Due: 1000, Spec: state.Spec{Kind: "k", Target: "t", Key: key, Policy: retry.DefaultPolicy()}}})
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = res[0]
			}()
		}
		wg.Wait()
		fresh := 0
		for _, e := range ids {
			if e.ID != ids[0].ID {
				t.Fatalf("key %s: ids %+v, want one job", key, ids)
			}
			if !e.Existing {
				fresh++
			}
		}
		if fresh != 1 {
			t.Fatalf("key %s: %d enqueues added the job, want 1: %+v", key, fresh, ids)
		}
	}
	if st, err := nodes[0].Stats(ctx); err != nil || st.Counts.Pending != 20 {
		t.Fatalf("stats %+v %v, want 20 pending", st, err)
	}
}

// TestRescueOfLastAttemptFails: a job whose last attempt's node stopped
// renewing its lease is requeued as a failed attempt, and the next claim
// fails it as spent, with the reason, never silently.
func TestRescueOfLastAttemptFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := openTest(t, Options{Node: "a", Lease: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond, RescueEvery: time.Hour})
	b, err := Open(ctx, url, Options{Node: "b", Circuit: testCircuit, RescueEvery: time.Hour, Now: func() int64 { return 3000 }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}
	if _, err := a.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := a.Claim(ctx, 1000, store.Limits{Max: 1})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	// While a heartbeats, its lease holds.
	time.Sleep(900 * time.Millisecond) // under test: three times the lease passes
	if n, err := b.Rescue(ctx); err != nil || n != 0 {
		t.Fatalf("rescue of a heartbeating node: %d %v", n, err)
	}
	a.mu.Lock()
	delete(a.inflight, cs[0].ID) // a stops renewing the lease
	a.mu.Unlock()
	testwait.UntilWithin(t, 10*time.Second, "the expired lease to be rescued", func() (int, bool) {
		n, err := b.Rescue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n, n == 1
	})
	if cs, err := b.Claim(ctx, 3000, store.Limits{Max: 1}); err != nil || len(cs) != 0 {
		t.Fatalf("claim of a spent job: %v %v", cs, err)
	}
	j, err := b.Job(ctx, cs[0].ID)
	if err != nil || j.State != state.Failed || j.Reason() != "gave up after 1 attempts: interrupted: node a stopped renewing its lease during attempt 1" {
		t.Fatalf("spent job: %+v %v", j, err)
	}
}

// TestListenerReconnects: when the notification connection dies, the node
// reconnects, and notifications wake it again (the poll is an hour, so only
// a notification can).
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{PollEvery: time.Hour, Logger: quietLogger()})
	wakes := make(chan struct{}, 100)
	s.SetNotify(store.Notify{Wake: func() { wakes <- struct{}{} }, CancelAttempt: func(uint64) {}})
	listener := func() (pid int32) {
		err := s.pool.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN runlog_wake%' AND datname = current_database()").Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	var first int32
	testwait.ForWithin(t, 10*time.Second, "the listener", func() bool { first = listener(); return first != 0 })
	if _, err := s.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", first); err != nil {
		t.Fatal(err)
	}
	testwait.ForWithin(t, 10*time.Second, "a new listener", func() bool { p := listener(); return p != 0 && p != first })
	// The reconnect wakes the node once, just after its LISTEN. That
	// wake-up looks like the first connection's (which may or may not have
	// come before SetNotify), so no event says it is in; a pause lets it
	// land before the drain, or the check below could pass on it.
	time.Sleep(50 * time.Millisecond)
	for len(wakes) > 0 {
		<-wakes
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify('runlog_wake', '')"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wakes:
	case <-time.After(10 * time.Second):
		t.Fatal("a notification after the reconnect did not wake the node")
	}
}

// quietLogger drops logs (the reconnect warning is expected).
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestRestartUnderSameNodeRequeues: a node reopened under the same id
// requeues at once the attempts its previous process left running.
func TestRestartUnderSameNodeRequeues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, url := openTest(t, Options{Node: "w1"})
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}
	if _, err := old.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := old.Claim(ctx, 1000, store.Limits{Max: 1})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	// The old process is gone (its lease is 5 s and still runs).
	s, err := Open(ctx, url, Options{Node: "w1", Circuit: testCircuit, Now: func() int64 { return 2000 }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := s.Job(ctx, cs[0].ID)
	if err != nil || j.State != state.Pending || j.Fails() != 1 || j.Due != 1000 || !strings.Contains(j.LastError(), "node w1 restarted") {
		t.Fatalf("job after the restart: %+v %v", j, err)
	}
}

// TestEnqueueWakesOtherNodes: a node's enqueue, committed without a NOTIFY
// in its transaction, still wakes another node at once (through the
// notifier), not at its poll.
func TestEnqueueWakesOtherNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := openTest(t, Options{Node: "a", PollEvery: time.Hour})
	b, err := Open(ctx, url, Options{Node: "b", Circuit: testCircuit, PollEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	woken := make(chan struct{}, 1)
	b.SetNotify(store.Notify{Wake: func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	}, CancelAttempt: func(uint64) {}})
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 1}}
	for _, batch := range [][]store.NewJob{{{Spec: spec, Due: 1000}}, {{Spec: spec, Due: 1000}, {Spec: spec, Due: 1000}}} {
		// b's listener wakes it once when it connects: wait until both
		// nodes listen (the event), give b's connect wake-up a moment to
		// land (it looks like the enqueue's, so no event says it is in),
		// drain it, and then wait for the enqueue's wake-up.
		testwait.ForWithin(t, 10*time.Second, "both nodes to listen", func() bool {
			var n int
			err := b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN runlog_wake%' AND state = 'idle' AND datname = current_database()").Scan(&n)
			return err == nil && n == 2
		})
		time.Sleep(50 * time.Millisecond)
		select {
		case <-woken:
		default:
		}
		if _, err := a.Enqueue(ctx, 1000, batch); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woken:
		case <-time.After(10 * time.Second):
			t.Fatalf("node b was not woken by node a's enqueue of %d jobs", len(batch))
		}
		if d, ok := b.NextDue(); !ok || d != 1000 {
			t.Fatalf("b's next due time after the wake-up: %d %v", d, ok)
		}
	}
}

// TestHeartbeatSkipsHeldRows: the heartbeat renews the leases of the rows
// it can lock at once and skips those another transaction holds (an outcome
// batch settling them) instead of waiting for it, which deadlocked with
// outcome batches that lock the same rows in another order.
func TestHeartbeatSkipsHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _ := openTest(t, Options{Node: "a", Lease: 3 * time.Hour, Heartbeat: time.Hour, RescueEvery: time.Hour})
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 1}}
	if _, err := a.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}, {Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := a.Claim(ctx, 1000, store.Limits{Max: 2})
	if err != nil || len(cs) != 2 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	leases := func() (held, free time.Time) {
		t.Helper()
		if err := a.pool.QueryRow(ctx, "SELECT (SELECT lease_until FROM runlog_jobs WHERE id = $1), (SELECT lease_until FROM runlog_jobs WHERE id = $2)",
			int64(cs[0].ID), int64(cs[1].ID)).Scan(&held, &free); err != nil {
			t.Fatal(err)
		}
		return held, free
	}
	held0, free0 := leases()
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM runlog_jobs WHERE id = $1 FOR UPDATE", int64(cs[0].ID)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // under test: the database clock moves on, so a renewal shows
	done := make(chan struct{})
	go func() { a.heartbeat(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat waited for a row another transaction holds")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	held1, free1 := leases()
	if !held1.Equal(held0) || !free1.After(free0) {
		t.Fatalf("leases: held %v → %v (want unchanged), free %v → %v (want renewed)", held0, held1, free0, free1)
	}
}
