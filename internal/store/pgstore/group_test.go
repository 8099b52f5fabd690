package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// groupSpec is job i of the grouped-enqueue tests: every column that a
// single-job enqueue writes differs from job to job.
func groupSpec(i int) state.Spec {
	sp := state.Spec{
		Kind: fmt.Sprintf("kind-%d", i), Target: fmt.Sprintf("target-%d", i%7), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)),
		Policy:    retry.Policy{Attempts: 1 + i%5, BaseMS: int64(10 + i), CapMS: int64(1000 + i), DeadlineMS: int64(i % 3 * 60000)},
		TimeoutMS: int64(i % 4 * 1000), Queue: fmt.Sprintf("q%d", i%3), Priority: int32(i%5 - 2), ReplayOf: uint64(i % 2 * 7),
	}
	if i%2 == 0 {
		sp.Metadata = []state.Meta{{Key: "i", Value: fmt.Sprint(i)}}
	}
	return sp
}

// TestGroupedEnqueue: 300 concurrent enqueues of one job each are inserted
// in fewer statements than jobs, each job whole (every column its own) under
// its own distinct id, its own enqueue time kept.
func TestGroupedEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	const n = 300
	ids := make([]uint64, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			out, err := s.Enqueue(ctx, int64(5000+i), []store.NewJob{{Spec: groupSpec(i), Due: int64(9000 + i)}})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = out[0].ID
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := slices.Compact(slices.Sorted(slices.Values(ids))); len(got) != n {
		t.Fatalf("%d jobs answered %d distinct ids", n, len(got))
	}
	for i, id := range ids {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %d (id %d): %v", i, id, err)
		}
		want, got := groupSpec(i), *j.Spec
		if fmt.Sprint(got) != fmt.Sprint(want) || j.Due != int64(9000+i) || j.EnqueuedAt != int64(5000+i) || j.State != state.Pending {
			t.Fatalf("job %d (id %d) reads back as %+v due %d enqueued %d %v, want %+v due %d enqueued %d pending",
				i, id, got, j.Due, j.EnqueuedAt, j.State, want, 9000+i, 5000+i)
		}
	}
	s.groups.mu.Lock()
	inserts, running, waiting := s.groups.inserts, s.groups.running, len(s.groups.waiting)
	s.groups.mu.Unlock()
	if inserts >= n || running != 0 || waiting != 0 {
		t.Fatalf("%d jobs took %d inserts (want fewer: grouped), %d still running, %d waiting", n, inserts, running, waiting)
	}
	t.Logf("%d concurrent enqueues, %d inserts", n, inserts)
}

// TestGroupedInsertRefusedJob: a group with a job the server refuses (a
// NUL in its kind) inserts every other job of the group, and only that one
// fails.
func TestGroupedInsertRefusedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	var batch []*groupedJob
	for i := range 5 {
		sp := groupSpec(i)
		if i == 2 {
			sp.Kind = "bad\x00kind"
		}
		batch = append(batch, &groupedJob{now: 100, job: &store.NewJob{Spec: sp, Due: 200}})
	}
	s.insertGroup(batch)
	for i, p := range batch {
		if i == 2 {
			if p.err == nil {
				t.Fatal("the job with a NUL in its kind was inserted")
			}
			continue
		}
		if p.err != nil {
			t.Fatalf("job %d failed with the refused one: %v", i, p.err)
		}
		j, err := s.Job(ctx, uint64(p.id))
		if err != nil || j.Spec.Kind != groupSpec(i).Kind {
			t.Fatalf("job %d (id %d): %+v, %v", i, p.id, j.Spec, err)
		}
	}
	if st, err := s.Stats(ctx); err != nil || st.Counts.Pending != 4 {
		t.Fatalf("stats %+v, %v: want the 4 good jobs pending", st, err)
	}
}

// TestGroupedEnqueueCancelledWhileWaiting: a caller whose context ends
// while its job waits for an insert gets the context's error and adds
// nothing; the job leaves the queue of waiting jobs.
func TestGroupedEnqueueCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	s.groups.mu.Lock()
	s.groups.running = maxInsertGroups // every insert busy: the job waits
	s.groups.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Enqueue(ctx, 1, []store.NewJob{{Spec: groupSpec(1), Due: 1}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Enqueue with a cancelled context while every insert is busy: %v, want context.Canceled", err)
	}
	s.groups.mu.Lock()
	waiting := len(s.groups.waiting)
	s.groups.running = 0
	s.groups.mu.Unlock()
	if waiting != 0 {
		t.Fatalf("%d jobs still waiting after their caller gave up", waiting)
	}
	if st, err := s.Stats(context.Background()); err != nil || st.Counts.Pending != 0 {
		t.Fatalf("stats %+v, %v: want nothing added", st, err)
	}
}
