package storetest

import (
	"os"
	"slices"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// The cases of the targets' flow control (state.Flow): rate limits, the
// target's own wait and the slow start after an outage. Run lists them.

// targetOf returns the store's info on target (zero if it lists none).
func targetOf(t *testing.T, s store.Store, target string) store.TargetInfo {
	t.Helper()
	ts, err := s.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Target == target {
			return ti
		}
	}
	return store.TargetInfo{}
}

func setLimit(t *testing.T, s store.Store, now int64, target string, l retry.Limit) {
	t.Helper()
	if err := s.SetLimit(ctx, now, target, l); err != nil {
		t.Fatalf("SetLimit(%q, %+v): %v", target, l, err)
	}
}

func enqueueN(t *testing.T, s store.Store, now, due int64, sp state.Spec, n int) []uint64 {
	t.Helper()
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Spec: sp, Due: due}
	}
	var out []uint64
	for _, e := range enqueue(t, s, now, jobs...) {
		out = append(out, e.ID)
	}
	return out
}

// testRateLimit: a limit set at run time (10/s, burst 2) starts the
// burst, defers the rest of the backlog one token apart with no attempt
// counted, starts each at its token, leaves other targets alone, survives
// a reopen (the bucket is not refilled) and is removed by a zero limit.
func testRateLimit(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	setLimit(t, s, T0, "t", retry.Limit{RateMilli: 10_000, Burst: 2})
	if ti := targetOf(t, s, "t"); ti.Limit != (retry.Limit{RateMilli: 10_000, Burst: 2}) || !ti.Flow.LimitSet {
		t.Fatalf("Targets shows t as %+v, want its limit", ti)
	}
	backlog := enqueueN(t, s, T0, T0, spec("k", "t"), 5)
	free := enqueueOne(t, s, T0, T0, spec("k", "u"))
	got := claim(t, s, T0, all)
	if want := []uint64{backlog[0], backlog[1], free}; !slices.Equal(sortedIDs(got), want) {
		t.Fatalf("claimed %v, want t's burst %v and u's job", sortedIDs(got), want)
	}
	for i, id := range backlog[2:] {
		j := wantState(t, s, id, state.Pending)
		if want := T0 + 100*int64(i+1); j.Due != want || j.Started() != 0 || j.Fails() != 0 {
			t.Fatalf("job %d held back by the limit: due T0+%d, started %d, fails %d; want due T0+%d, nothing counted", id, j.Due-T0, j.Started(), j.Fails(), want-T0)
		}
	}
	if c := claim(t, s, T0+99, all); len(c) != 0 {
		t.Fatalf("claimed %v before the next token", ids(c))
	}
	c := claim(t, s, T0+100, all)
	if len(c) != 1 || c[0].ID != backlog[2] {
		t.Fatalf("at the next token claimed %v, want job %d", ids(c), backlog[2])
	}
	var outs []store.Outcome
	for _, cl := range append(got, c...) {
		outs = append(outs, outcome(cl, retry.Success, ""))
	}
	finish(t, s, T0+101, outs...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	if ti := targetOf(t, s, "t"); ti.Limit.RateMilli != 10_000 || ti.Flow.Bucket.Tokens(ti.Limit, T0+100) != 0 {
		t.Fatalf("after a reopen Targets shows t as %+v: want the limit and an empty bucket", ti)
	}
	late := enqueueOne(t, s, T0+150, T0+150, spec("k", "t"))
	if c := claim(t, s, T0+150, all); len(c) != 0 {
		t.Fatalf("after a reopen claimed %v: the bucket was refilled", ids(c))
	}
	setLimit(t, s, T0+150, "t", retry.Limit{})
	if ti := targetOf(t, s, "t"); !ti.Limit.IsZero() {
		t.Fatalf("after removal Targets shows t as %+v", ti)
	}
	again := enqueueOne(t, s, T0+150, T0+150, spec("k", "t"))
	if c := claim(t, s, T0+150, all); !slices.Contains(ids(c), again) {
		t.Fatalf("without a limit claimed %v, want job %d among them (late %d)", ids(c), again, late)
	}
}

// testRateLimitConfigured: the configured default limits every target;
// a zero limit set at run time lifts it for one.
func testRateLimitConfigured(t *testing.T, open Opener) {
	s, _ := open(t, Config{Circuit: Circuit, Limits: &state.LimitConfig{Default: retry.Limit{RateMilli: 1000, Burst: 1}}})
	enqueueN(t, s, T0, T0, spec("k", "a"), 2)
	enqueueN(t, s, T0, T0, spec("k", "b"), 2)
	if c := claim(t, s, T0, all); len(c) != 2 {
		t.Fatalf("under a default of 1/s burst 1 claimed %v, want one job of each target", ids(c))
	}
	if ti := targetOf(t, s, "a"); ti.Limit != (retry.Limit{RateMilli: 1000, Burst: 1}) || ti.Flow.LimitSet {
		t.Fatalf("Targets shows a as %+v, want the configured limit", ti)
	}
	setLimit(t, s, T0, "c", retry.Limit{})
	enqueueN(t, s, T0, T0, spec("k", "c"), 3)
	if c := claim(t, s, T0, all); len(c) != 3 {
		t.Fatalf("a target whose limit was lifted claimed %v, want its 3 jobs", ids(c))
	}
}

// testTargetHold: a retryable failure with a server wait holds its whole
// target until then: its other due job is deferred there with no attempt
// counted, another target runs, and the target is shown holding.
func testTargetHold(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	a := enqueueOne(t, s, T0, T0, spec("k", "t"))
	b := enqueueOne(t, s, T0, T0+1, spec("k", "t"))
	u := enqueueOne(t, s, T0, T0+1, spec("k", "u"))
	c := claim(t, s, T0, all)
	if len(c) != 1 || c[0].ID != a {
		t.Fatalf("claimed %v, want job %d", ids(c), a)
	}
	out := outcome(c[0], retry.Retryable, "HTTP 429")
	out.AfterMS = 300_000
	finish(t, s, T0+1, out)
	if ti := targetOf(t, s, "t"); ti.Flow.Hold != T0+300_001 {
		t.Fatalf("Targets shows t as %+v, want a hold until T0+300001", ti)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	c = claim(t, s, T0+2, all)
	if len(c) != 1 || c[0].ID != u {
		t.Fatalf("while t holds claimed %v, want only u's job %d", ids(c), u)
	}
	if j := wantState(t, s, b, state.Pending); j.Due != T0+300_001 || j.Started() != 0 || j.Fails() != 0 {
		t.Fatalf("t's other job: due T0+%d, started %d, fails %d; want deferred to the hold's end, nothing counted", j.Due-T0, j.Started(), j.Fails())
	}
	if c := claim(t, s, T0+300_000, all); len(c) != 0 {
		t.Fatalf("claimed %v before the hold ended", ids(c))
	}
	if c := claim(t, s, T0+300_001, all); !slices.Equal(sortedIDs(c), []uint64{a, b}) {
		t.Fatalf("at the hold's end claimed %v, want %d and %d", sortedIDs(c), a, b)
	}
}

// testSlowStart: when an open breaker closes, its target's deferred
// backlog is admitted 1, 2, 4 attempts at once (one more per success),
// the ramp survives a reopen, and ends at SlowStart.
func testSlowStart(t *testing.T, open Opener) {
	cir := Circuit
	cir.SlowStart = 8
	s, reopen := open(t, Config{Circuit: cir})
	enqueueN(t, s, T0, T0, spec("k", "t"), 2)
	c := claim(t, s, T0, all)
	finish(t, s, T0+1, outcome(c[0], retry.Retryable, "down"), outcome(c[1], retry.Retryable, "down"))
	if br := breakerOf(t, s, "t"); br.State != retry.Open {
		t.Fatalf("breaker %+v, want open", br)
	}
	enqueueN(t, s, T0+1, T0+1, spec("k", "t"), 30)
	c = claim(t, s, T0+501, all) // half-open: one probe; the rest deferred by the cooldown
	if len(c) != 1 {
		t.Fatalf("half-open claimed %d, want the probe", len(c))
	}
	finish(t, s, T0+502, outcome(c[0], retry.Success, ""))
	if ti := targetOf(t, s, "t"); ti.Flow.Ramp != (retry.Ramp{Window: 1}) || ti.Breaker.State != retry.Closed {
		t.Fatalf("after the probe succeeded Targets shows t as %+v, want closed with a ramp of window 1", ti)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	now := T0 + 1001 // every deferred job is due
	var curve []int
	for range 6 {
		c := claim(t, s, now, all)
		curve = append(curve, len(c))
		var outs []store.Outcome
		for _, cl := range c {
			outs = append(outs, outcome(cl, retry.Success, ""))
		}
		finish(t, s, now+1, outs...)
		now += 10
		if targetOf(t, s, "t").Flow.Ramp.IsZero() {
			break
		}
	}
	if !slices.Equal(curve, []int{1, 2, 4}) {
		t.Fatalf("attempts started per round after the outage: %v, want [1 2 4] and the ramp over at 8", curve)
	}
	if c := claim(t, s, now, all); len(c) == 0 {
		t.Fatal("after the ramp nothing was claimed")
	}
}

// testSlowStartSnooze: an attempt that snoozes during a slow start frees
// its place in the ramp (widening nothing), so that the target's next due
// job starts; were the place kept, snoozes alone would hold the target
// for good.
func testSlowStartSnooze(t *testing.T, open Opener) {
	cir := Circuit
	cir.SlowStart = 8
	s, _ := open(t, Config{Circuit: cir})
	enqueueN(t, s, T0, T0, spec("k", "t"), 2)
	c := claim(t, s, T0, all)
	finish(t, s, T0+1, outcome(c[0], retry.Retryable, "down"), outcome(c[1], retry.Retryable, "down"))
	enqueueN(t, s, T0+1, T0+1, spec("k", "t"), 5)
	c = claim(t, s, T0+501, all) // half-open: the probe
	if len(c) != 1 {
		t.Fatalf("half-open claimed %d, want the probe", len(c))
	}
	finish(t, s, T0+502, outcome(c[0], retry.Success, ""))
	now := T0 + 1001 // every deferred job is due
	for round := range 3 {
		c := claim(t, s, now, all)
		if len(c) != 1 {
			t.Fatalf("round %d: claimed %v in a ramp of window 1 with a free place, want one job", round, ids(c))
		}
		finish(t, s, now+1, store.Outcome{ID: c[0].ID, Attempt: c[0].Attempt, Snooze: true, AfterMS: 0})
		if ti := targetOf(t, s, "t"); ti.Flow.Ramp != (retry.Ramp{Window: 1}) {
			t.Fatalf("round %d: after a snooze Targets shows t as %+v, want a ramp of window 1 with none busy", round, ti)
		}
		now += 10
	}
}

// testFlowSettledAtExpire: an expiry settles every target's flow
// (state.Flow.Settle), even with no finished job to drop: a hold that has
// run out is no longer shown, as the next op of its target would drop it.
func testFlowSettledAtExpire(t *testing.T, open Opener) {
	s, _ := open(t, Config{Circuit: Circuit, Retention: &state.Retention{SucceededMS: 100, CancelledMS: 100, FailedMS: 100}})
	enqueueN(t, s, T0, T0, spec("k", "t"), 1)
	c := claim(t, s, T0, all)
	out := outcome(c[0], retry.Retryable, "HTTP 503")
	out.AfterMS = 1000
	finish(t, s, T0+1, out)
	if ti := targetOf(t, s, "t"); ti.Flow.Hold != T0+1001 {
		t.Fatalf("Targets shows t as %+v, want a hold until T0+1001", ti)
	}
	if err := s.Expire(ctx, T0+1000); err != nil {
		t.Fatal(err)
	}
	if ti := targetOf(t, s, "t"); ti.Flow.Hold != T0+1001 {
		t.Fatalf("after an expiry before its end Targets shows t as %+v, want the hold kept", ti)
	}
	if err := s.Expire(ctx, T0+1001); err != nil {
		t.Fatal(err)
	}
	if ti := targetOf(t, s, "t"); ti.Flow != (state.Flow{}) {
		t.Fatalf("after an expiry at the hold's end Targets shows t as %+v, want no flow", ti)
	}
}

func sortedIDs(cs []store.Claim) []uint64 {
	out := ids(cs)
	slices.Sort(out)
	return out
}

// EnvLongLimit, set to 1, runs RateLimitWindows at the size: 20 k
// jobs over 60 s of the suite's clock (else 2 k jobs over 6 s).
const EnvLongLimit = "RUNLOG_TEST_LIMIT_60S"

// testRateLimitWindows: a limit of 100/s with a burst of 10 over a backlog
// far larger than it lets through, driven like an engine (a claim every
// 5 ms of the suite's clock, every attempt succeeding at once) with a
// reopen half way: in every window of 1 s at most 110 attempts start, and
// the total is within 5 % of 100 per second.
func testRateLimitWindows(t *testing.T, open Opener) {
	jobs, span := 2_000, int64(6_000)
	if os.Getenv(EnvLongLimit) == "1" {
		jobs, span = 20_000, 60_000
	}
	s, reopen := open(t, Config{Circuit: Circuit})
	setLimit(t, s, T0, "t", retry.Limit{RateMilli: 100_000, Burst: 10})
	for i := 0; i < jobs; i += 1000 {
		enqueueN(t, s, T0, T0, spec("k", "t"), min(1000, jobs-i))
	}
	var starts []int64
	for now := T0; now < T0+span; now += 5 {
		if now == T0+span/2 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = reopen(t)
		}
		c, err := s.Claim(ctx, now, store.Limits{Max: 64})
		if err != nil {
			t.Fatalf("Claim at T0+%d: %v", now-T0, err)
		}
		var outs []store.Outcome
		for _, cl := range c {
			starts = append(starts, now)
			outs = append(outs, outcome(cl, retry.Success, ""))
		}
		if len(outs) > 0 {
			finish(t, s, now, outs...)
		}
	}
	j := 0
	worst := 0
	for i := range starts {
		for starts[i]-starts[j] >= 1000 {
			j++
		}
		worst = max(worst, i-j+1)
	}
	want := float64(span) / 1000 * 100
	t.Logf("%d starts over %d ms (want %.0f ± 5 %%); at most %d in a window of 1 s", len(starts), span, want, worst)
	if worst > 110 {
		t.Errorf("%d attempts started within 1 s; the limit of 100/s with a burst of 10 allows 110", worst)
	}
	if n := float64(len(starts)); n < want*0.95 || n > want*1.05 {
		t.Errorf("%d attempts started over %d ms; want %.0f ± 5 %%", len(starts), span, want)
	}
}
