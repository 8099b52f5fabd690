package storetest

import (
	"slices"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// The cases of a queue's rate limit (state/queuepace.go). Run lists them.
var queueLimitCases = []struct {
	name string
	run  func(*testing.T, Opener)
}{
	{"QueueRateLimit", testQueueRateLimit},
	{"QueueRateLimitOwnDeferrals", testQueueRateLimitOwnDeferrals},
}

func setQueueLimit(t *testing.T, s store.Store, now int64, name string, l retry.Limit) state.QueueInfo {
	t.Helper()
	qi, err := s.SetQueue(ctx, now, name, nil, nil, &l)
	if err != nil {
		t.Fatalf("SetQueue(%q, limit %+v): %v", name, l, err)
	}
	return qi
}

func queued(sp state.Spec, queue string) state.Spec {
	sp.Queue = queue
	return sp
}

// testQueueRateLimit: a queue's limit (10/s, burst 2) starts its burst
// whatever the jobs' targets, defers the rest of its backlog one token
// apart with no attempt counted, starts each at its token (also through
// Finish), leaves other queues alone, keeps its bucket across a reopen
// (not refilled), keeps the queue's other settings, is refused when
// invalid, and is removed by a zero limit, bucket and all.
func testQueueRateLimit(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	lim := retry.Limit{RateMilli: 10_000, Burst: 2}
	setQueue(t, s, T0, "mail", ptr(5), nil)
	if qi := setQueueLimit(t, s, T0, "mail", lim); qi.Limit != lim || qi.Concurrency != 5 {
		t.Fatalf("SetQueue returned %+v, want the limit and concurrency 5", qi)
	}
	if _, err := s.SetQueue(ctx, T0, "mail", nil, nil, &retry.Limit{RateMilli: 1000}); err == nil {
		t.Fatalf("SetQueue accepted a limit of burst 0")
	}
	var backlog []uint64
	for i := range 5 {
		backlog = append(backlog, enqueueOne(t, s, T0, T0, queued(spec("k", []string{"a", "b"}[i%2]), "mail")))
	}
	free := enqueueOne(t, s, T0, T0, spec("k", "a"))
	got := claim(t, s, T0, all)
	if want := []uint64{backlog[0], backlog[1], free}; !slices.Equal(sortedIDs(got), want) {
		t.Fatalf("claimed %v, want mail's burst %v and the default queue's job", sortedIDs(got), want)
	}
	for i, id := range backlog[2:] {
		j := wantState(t, s, id, state.Pending)
		if want := T0 + 100*int64(i+1); j.Due != want || j.Started() != 0 || j.Fails() != 0 {
			t.Fatalf("job %d held back by mail's limit: due T0+%d, started %d, fails %d; want due T0+%d, nothing counted", id, j.Due-T0, j.Started(), j.Fails(), want-T0)
		}
	}
	if qi := queues(t, s)["mail"]; qi.Limit != lim || qi.Pace.Bucket.Admits(lim, T0+99) || qi.Pace.Reserved == 0 {
		t.Fatalf("Queues shows mail as %+v: want its limit, an empty bucket and a reservation", qi)
	}
	if c := claim(t, s, T0+99, all); len(c) != 0 {
		t.Fatalf("claimed %v before mail's next token", ids(c))
	}
	// The next token, through a Finish that claims.
	more, err := s.Finish(ctx, T0+100, fixedRandom, []store.Outcome{outcome(got[0], retry.Success, "")}, store.Limits{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(more), []uint64{backlog[2]}) {
		t.Fatalf("at mail's next token Finish claimed %v, want [%d]", ids(more), backlog[2])
	}
	// Nothing left running: a reopen would requeue it.
	finish(t, s, T0+101, outcome(got[1], retry.Success, ""), outcome(got[2], retry.Success, ""), outcome(more[0], retry.Success, ""))
	before := queues(t, s)["mail"]
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	if qi := queues(t, s)["mail"]; qi.Limit != lim || qi.Pace != before.Pace || qi.Concurrency != 5 {
		t.Fatalf("after a reopen Queues shows mail as %+v, want %+v", qi, before)
	}
	late := enqueueOne(t, s, T0+150, T0+150, queued(spec("k", "c"), "mail"))
	if c := claim(t, s, T0+150, all); len(c) != 0 {
		t.Fatalf("after a reopen claimed %v: mail's bucket was refilled", ids(c))
	}
	if c := claim(t, s, T0+200, all); !slices.Equal(ids(c), []uint64{backlog[3]}) {
		t.Fatalf("after a reopen at the next token claimed %v, want [%d]", ids(c), backlog[3])
	}
	if qi := setQueueLimit(t, s, T0+210, "mail", retry.Limit{}); !qi.Limit.IsZero() || qi.Pace != (state.Pace{}) || qi.Concurrency != 5 {
		t.Fatalf("after removal SetQueue returned %+v, want no limit, no pace, concurrency 5", qi)
	}
	if c := claim(t, s, T0+400, all); !slices.Equal(sortedIDs(c), []uint64{backlog[4], late}) {
		t.Fatalf("without a limit claimed %v, want [%d %d]", sortedIDs(c), backlog[4], late)
	}
	setQueue(t, s, T0+410, "mail", ptr(0), nil)
	if qi, ok := queues(t, s)["mail"]; ok && qi.QueueSetting != (state.QueueSetting{Name: "mail"}) {
		t.Fatalf("mail back to the zero setting is shown as %+v", qi)
	}
}

// testQueueRateLimitOwnDeferrals: a job its target's breaker defers
// moves no reservation of its queue: the queue's next job still starts at
// its own token, not after the breaker's cooldown.
func testQueueRateLimitOwnDeferrals(t *testing.T, open Opener) {
	s := openDefault(t, open)
	lim := retry.Limit{RateMilli: 10_000, Burst: 1}
	setQueueLimit(t, s, T0, "q", lim)
	// Two failures open down's breaker (threshold 2); each job takes one
	// of q's tokens.
	for i := range int64(2) {
		sp := queued(spec("k", "down"), "q")
		sp.Policy = policy(1) // failed for good: not due again
		bad := enqueueOne(t, s, T0+100*i, T0+100*i, sp)
		c := claim(t, s, T0+100*i, all)
		if !slices.Equal(ids(c), []uint64{bad}) {
			t.Fatalf("claimed %v, want [%d]", ids(c), bad)
		}
		finish(t, s, T0+100*i+1, outcome(c[0], retry.Retryable, "503"))
	}
	first := enqueueOne(t, s, T0+200, T0+200, queued(spec("k", "up"), "q"))
	again := enqueueOne(t, s, T0+200, T0+200, queued(spec("k", "down"), "q"))
	other := enqueueOne(t, s, T0+200, T0+200, queued(spec("k", "up"), "q"))
	// first takes q's token, the breaker defers again past its cooldown,
	// and other, finding no token, is deferred to q's next one: T0+300,
	// not after again's due time.
	if got := claim(t, s, T0+200, all); !slices.Equal(ids(got), []uint64{first}) {
		t.Fatalf("claimed %v, want [%d]", ids(got), first)
	}
	if j := wantState(t, s, again, state.Pending); j.Due <= T0+300 {
		t.Fatalf("job %d of the open breaker's target due at T0+%d; want it deferred past its cooldown", again, j.Due-T0)
	}
	if o := wantState(t, s, other, state.Pending); o.Due != T0+300 {
		t.Fatalf("job %d of q deferred to T0+%d, want T0+300 (its queue's next token)", other, o.Due-T0)
	}
}
