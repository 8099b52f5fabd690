package storetest

import (
	"slices"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// queueCases are the cases of the queues, priorities and snooze.
var queueCases = []struct {
	name string
	run  func(t *testing.T, open Opener)
}{
	{"QueueAndPriorityKept", testQueueAndPriorityKept},
	{"QueuePause", testQueuePause},
	{"QueueConcurrency", testQueueConcurrency},
	{"PriorityOrder", testPriorityOrder},
	{"Snooze", testSnooze},
}

func inQueue(kind, queue string, priority int32) state.Spec {
	sp := spec(kind, "")
	sp.Queue, sp.Priority = queue, priority
	return sp
}

func queues(t *testing.T, s store.Store) map[string]state.QueueInfo {
	t.Helper()
	qs, err := s.Queues(ctx)
	if err != nil {
		t.Fatalf("Queues: %v", err)
	}
	out := make(map[string]state.QueueInfo, len(qs))
	for i, qi := range qs {
		if i > 0 && qs[i-1].Name >= qi.Name {
			t.Errorf("Queues not sorted by name: %v", qs)
		}
		out[qi.Name] = qi
	}
	if _, ok := out[""]; !ok {
		t.Errorf("Queues lacks the default queue: %v", qs)
	}
	return out
}

func setQueue(t *testing.T, s store.Store, now int64, name string, conc *int, paused *bool) state.QueueInfo {
	t.Helper()
	qi, err := s.SetQueue(ctx, now, name, conc, paused, nil)
	if err != nil {
		t.Fatalf("SetQueue(%q): %v", name, err)
	}
	return qi
}

func ptr[T any](v T) *T { return &v }

// testQueueAndPriorityKept: a job's queue and priority are read back, also
// after a reopen.
func testQueueAndPriorityKept(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	a := enqueueOne(t, s, T0, T0, inQueue("a", "mail", -3))
	b := enqueue(t, s, T0, store.NewJob{Spec: inQueue("b", "bulk", 7), Due: T0}, store.NewJob{Spec: inQueue("c", "", 0), Due: T0})[0].ID
	check := func(s store.Store) {
		t.Helper()
		if j := job(t, s, a); j.Spec.Queue != "mail" || j.Spec.Priority != -3 {
			t.Errorf("job %d: queue %q priority %d, want mail -3", a, j.Spec.Queue, j.Spec.Priority)
		}
		if j := job(t, s, b); j.Spec.Queue != "bulk" || j.Spec.Priority != 7 {
			t.Errorf("job %d: queue %q priority %d, want bulk 7", b, j.Spec.Queue, j.Spec.Priority)
		}
		qs := queues(t, s)
		if qs["mail"].Pending != 1 || qs["bulk"].Pending != 1 || qs[""].Pending != 1 {
			t.Errorf("queue counts %v, want one pending job in each", qs)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(reopen(t))
}

// testQueuePause: a paused queue accepts jobs and starts none, its due
// jobs do not count for NextDue, the pause holds across a reopen, and
// the resume lets its jobs start.
func testQueuePause(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	if qi := setQueue(t, s, T0, "mail", nil, ptr(true)); !qi.Paused || qi.Name != "mail" {
		t.Fatalf("pause answered %+v", qi)
	}
	m1 := enqueueOne(t, s, T0, T0-5, inQueue("m1", "mail", 9))
	d1 := enqueueOne(t, s, T0, T0, inQueue("d1", "", 0))
	if got := claim(t, s, T0, all); !slices.Equal(ids(got), []uint64{d1}) {
		t.Fatalf("claim with mail paused: %v, want only the default queue's [%d]", ids(got), d1)
	}
	if due, ok := s.NextDue(); ok && due <= T0 {
		t.Errorf("NextDue %d with only a paused queue's job due: the dispatcher would spin", due)
	}
	if qs := queues(t, s); !qs["mail"].Paused || qs["mail"].Pending != 1 || qs[""].Running != 1 {
		t.Errorf("queues %v: want mail paused with 1 pending, default 1 running", qs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	if got := claim(t, s, T0+10, all); slices.Contains(ids(got), m1) {
		t.Fatalf("after a reopen the paused queue's job %d started", m1)
	}
	if qs := queues(t, s); !qs["mail"].Paused {
		t.Fatalf("the pause did not survive a reopen: %v", qs)
	}
	if qi := setQueue(t, s, T0+20, "mail", nil, ptr(false)); qi.Paused {
		t.Fatalf("resume answered %+v", qi)
	}
	if due, ok := s.NextDue(); !ok || due != T0-5 {
		t.Errorf("NextDue after the resume: %d %v, want T0-5", due-T0, ok)
	}
	if got := claim(t, s, T0+20, all); !slices.Equal(ids(got), []uint64{m1}) {
		t.Fatalf("claim after the resume: %v, want [%d]", ids(got), m1)
	}
	if qs := queues(t, s); qs["mail"].Paused || qs["mail"].Running != 1 {
		t.Errorf("queues after the resume: %v", qs)
	}
}

// testQueueConcurrency: a queue with a concurrency runs at most that many
// attempts; the others of the queue wait, due order kept, and other queues
// are not held back.
func testQueueConcurrency(t *testing.T, open Opener) {
	s := openDefault(t, open)
	setQueue(t, s, T0, "bulk", ptr(2), nil)
	var bulk []uint64
	for i := range 4 {
		bulk = append(bulk, enqueueOne(t, s, T0, T0+int64(i), inQueue("b", "bulk", 0)))
	}
	d := enqueueOne(t, s, T0, T0+10, inQueue("d", "", 0))
	got := claim(t, s, T0+20, all)
	if want := []uint64{bulk[0], bulk[1], d}; !slices.Equal(ids(got), want) {
		t.Fatalf("claim with bulk at concurrency 2: %v, want %v", ids(got), want)
	}
	if more := claim(t, s, T0+21, all); len(more) != 0 {
		t.Fatalf("claim while bulk runs its concurrency: %v", ids(more))
	}
	cs, err := s.Finish(ctx, T0+22, fixedRandom, []store.Outcome{outcome(got[0], retry.Success, "")}, all)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(cs), []uint64{bulk[2]}) {
		t.Fatalf("finish of one bulk attempt claimed %v, want [%d]", ids(cs), bulk[2])
	}
	setQueue(t, s, T0+23, "bulk", ptr(0), nil)
	if more := claim(t, s, T0+24, all); !slices.Equal(ids(more), []uint64{bulk[3]}) {
		t.Fatalf("claim once bulk is unbounded: %v, want [%d]", ids(more), bulk[3])
	}
	if qs := queues(t, s); qs["bulk"].Running != 3 || qs["bulk"].Concurrency != 0 {
		t.Errorf("queues %v: want bulk running 3, concurrency 0", qs)
	}
	if _, err := s.SetQueue(ctx, T0, "bulk", ptr(-1), nil, nil); err == nil {
		t.Errorf("SetQueue accepted a concurrency of -1")
	}
}

// testPriorityOrder: among the due jobs a higher priority starts first,
// equal priorities in (due, id) order; a job not due yet waits whatever
// its priority.
func testPriorityOrder(t *testing.T, open Opener) {
	s := openDefault(t, open)
	low := enqueueOne(t, s, T0, T0-100, inQueue("low", "q", -1))
	zero1 := enqueueOne(t, s, T0, T0-50, inQueue("z1", "q", 0))
	high := enqueueOne(t, s, T0, T0, inQueue("high", "q", 5))
	zero0 := enqueueOne(t, s, T0, T0-60, inQueue("z0", "q", 0))
	later := enqueueOne(t, s, T0, T0+100, inQueue("later", "q", 50))
	mid := enqueueOne(t, s, T0, T0-1, inQueue("mid", "q", 5))
	first := claim(t, s, T0, store.Limits{Max: 3})
	if want := []uint64{mid, high, zero0}; !slices.Equal(ids(first), want) {
		t.Fatalf("claim of 3: %v, want %v (priority, then due, then id)", ids(first), want)
	}
	if rest := claim(t, s, T0, all); !slices.Equal(ids(rest), []uint64{zero1, low}) {
		t.Fatalf("claim of the rest: %v, want [%d %d]", ids(rest), zero1, low)
	}
	if more := claim(t, s, T0+100, all); !slices.Equal(ids(more), []uint64{later}) {
		t.Fatalf("claim when the high-priority job is due: %v, want [%d]", ids(more), later)
	}
}

// testSnooze: a snoozed attempt ends, the job is pending again at now +
// the wait with no failure counted, and the breaker takes no failure.
func testSnooze(t *testing.T, open Opener) {
	s := openDefault(t, open)
	sp := spec("k", "t")
	sp.Policy = policy(1)
	id := enqueueOne(t, s, T0, T0, sp)
	for n := range 3 {
		now := T0 + int64(n)*1000
		c := claim(t, s, now, all)
		if len(c) != 1 || c[0].ID != id || c[0].Attempt != uint32(n+1) {
			t.Fatalf("claim %d: %+v", n, c)
		}
		finish(t, s, now+1, store.Outcome{ID: id, Attempt: c[0].Attempt, Snooze: true, AfterMS: 999})
		j := wantState(t, s, id, state.Pending)
		if j.Fails() != 0 || j.Due != now+1000 {
			t.Fatalf("after snooze %d: fails %d, due T0+%d; want 0, T0+%d", n, j.Fails(), j.Due-T0, now+1000-T0)
		}
		if a := j.Attempts()[len(j.Attempts())-1]; !a.Ended || a.EndedAt != now+1 {
			t.Fatalf("the snoozed attempt reads %+v: want ended at the snooze", a)
		}
		if more := claim(t, s, now+999, all); len(more) != 0 {
			t.Fatalf("claim before the snooze ran out: %v", ids(more))
		}
		if br := breakerOf(t, s, "t"); len(br.Fails) != 0 || br.State != retry.Closed {
			t.Fatalf("snooze fed the breaker: %+v", br)
		}
	}
	// With 1 attempt in its policy, the job still has its attempt.
	c := claim(t, s, T0+3000, all)
	finish(t, s, T0+3001, outcome(c[0], retry.Success, ""))
	wantState(t, s, id, state.Succeeded)
}
