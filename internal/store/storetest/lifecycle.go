package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// lifecycleCases are the cases of the endpoint lifecycle: a target
// disabled by a gone answer or by failing for Config.DisableAfterMS, its
// jobs held, and enabled by hand.
var lifecycleCases = []struct {
	name string
	run  func(t *testing.T, open Opener)
}{
	{"TargetGoneDisables", testTargetGone},
	{"TargetFailingTimeDisables", testTargetFailingTime},
}

// lifeOf returns target's lifecycle and load as Targets lists them.
func lifeOf(t *testing.T, s store.Store, target string) store.TargetInfo {
	t.Helper()
	ts, err := s.Targets(ctx)
	if err != nil {
		t.Fatalf("Targets: %v", err)
	}
	for _, ti := range ts {
		if ti.Target == target {
			return ti
		}
	}
	return store.TargetInfo{Target: target}
}

// wantHeld checks that none of ids is claimed at now, that each is still
// pending with its due time and attempts unchanged (held, not deferred),
// and that NextDue does not offer them (the dispatcher would spin).
func wantHeld(t *testing.T, s store.Store, now int64, ids ...uint64) {
	t.Helper()
	before := make(map[uint64]state.Job)
	for _, id := range ids {
		before[id] = job(t, s, id)
	}
	for _, c := range claim(t, s, now, all) {
		if _, ok := before[c.ID]; ok {
			t.Fatalf("job %d of a disabled target was claimed", c.ID)
		}
		finish(t, s, now, outcome(c, retry.Success, ""))
	}
	if due, ok := s.NextDue(); ok && due <= now {
		t.Errorf("NextDue %d with only a disabled target's jobs due: the dispatcher would spin", due-T0)
	}
	for _, id := range ids {
		j := wantState(t, s, id, state.Pending)
		if b := before[id]; j.Due != b.Due || j.Started() != b.Started() {
			t.Fatalf("held job %d changed: due %d started %d, was %d %d", id, j.Due-T0, j.Started(), b.Due-T0, b.Started())
		}
	}
}

// testTargetGone: an outcome that says gone fails its job and disables
// the target in the same write; the target's other jobs (pending, running
// then requeued, enqueued after) are held, not attempted, across a
// reopen, until EnableTarget; other targets go on.
func testTargetGone(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit, DisableAfterMS: 3_600_000})
	const gone = "http://gone.example/hook"
	a := enqueueOne(t, s, T0, T0, spec("a", gone))
	b := enqueueOne(t, s, T0, T0, spec("b", gone))
	c := enqueueOne(t, s, T0, T0+1, spec("c", gone))
	u := enqueueOne(t, s, T0, T0, spec("u", "other"))
	cs := claim(t, s, T0, store.Limits{Max: 3})
	if !slices.Equal(ids(cs), []uint64{a, b, u}) {
		t.Fatalf("claimed %v, want [%d %d %d]", ids(cs), a, b, u)
	}
	o := outcome(cs[0], retry.Permanent, "target answered HTTP 410 Gone")
	o.Gone = true
	// The claim in the outcome's own write already holds the target's
	// due job c.
	more, err := s.Finish(ctx, T0+10, fixedRandom, []store.Outcome{o}, store.Limits{Max: 10})
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if len(more) != 0 {
		t.Fatalf("the write that disabled the target claimed %v", ids(more))
	}
	if j := wantState(t, s, a, state.Failed); !strings.Contains(j.Reason(), "410") {
		t.Fatalf("job %d failed with %q", a, j.Reason())
	}
	ti := lifeOf(t, s, gone)
	if !ti.Life.Disabled || ti.Life.DisabledAt != T0+10 || !strings.Contains(ti.Life.Reason, "gone") || !strings.Contains(ti.Life.Reason, "410") {
		t.Fatalf("target after a gone answer: %+v", ti.Life)
	}
	if lifeOf(t, s, "other").Life.Disabled {
		t.Fatal("another target was disabled")
	}
	// The attempt running at the disable ends with a retry: held too.
	finish(t, s, T0+20, outcome(cs[1], retry.Retryable, "503"), outcome(cs[2], retry.Success, ""))
	d := enqueueOne(t, s, T0+30, T0+30, spec("d", gone))
	wantHeld(t, s, T0+1000, b, c, d)
	if ti := lifeOf(t, s, gone); ti.Pending != 3 || ti.Running != 0 {
		t.Fatalf("disabled target's load %d pending %d running, want 3 and 0", ti.Pending, ti.Running)
	}
	if _, err := s.EnableTarget(ctx, T0+1000, "never-seen"); !errors.Is(err, store.ErrNotDisabled) {
		t.Fatalf("EnableTarget of an unknown target: %v, want ErrNotDisabled", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	if ti := lifeOf(t, s, gone); !ti.Life.Disabled {
		t.Fatalf("the disable did not survive a reopen: %+v", ti.Life)
	}
	wantHeld(t, s, T0+2000, b, c, d)
	ti, err = s.EnableTarget(ctx, T0+2000, gone)
	if err != nil {
		t.Fatalf("EnableTarget: %v", err)
	}
	if ti.Target != gone || ti.Life.Disabled || ti.Pending != 3 {
		t.Fatalf("EnableTarget answered %+v", ti)
	}
	if l := lifeOf(t, s, gone).Life; !l.IsZero() {
		t.Fatalf("after the enable the target's lifecycle is %+v", l)
	}
	if due, ok := s.NextDue(); !ok || due > T0+2000 {
		t.Errorf("NextDue after the enable: %d %v", due-T0, ok)
	}
	// In due order: c (T0+1), d (T0+30), b (retried at T0+20 + 57).
	if got := claim(t, s, T0+2000, all); !slices.Equal(ids(got), []uint64{c, d, b}) {
		t.Fatalf("claim after the enable: %v, want [%d %d %d]", ids(got), c, d, b)
	}
	if _, err := s.EnableTarget(ctx, T0+2001, gone); !errors.Is(err, store.ErrNotDisabled) {
		t.Fatalf("a second EnableTarget: %v, want ErrNotDisabled", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	if l := lifeOf(t, s, gone).Life; l.Disabled {
		t.Fatalf("the enable did not survive a reopen: %+v", l)
	}
}

// testTargetFailingTime: failures that count against the breaker start a
// failing run; a success ends it; a target failing for DisableAfterMS with
// no success is disabled by the failure that reaches it; a permanent
// failure (not the target's fault) neither starts nor ends a run.
func testTargetFailingTime(t *testing.T, open Opener) {
	// A breaker that never opens here: the failures are to be attempted.
	s, reopen := open(t, Config{Circuit: retry.Circuit{Threshold: 1000, WindowMS: 1000, CooldownMS: 500, Probes: 1}, DisableAfterMS: 1000})
	const bad = "http://bad.example/hook"
	// run enqueues a job of one attempt to bad, due at now, claims it at
	// now and ends its attempt with class; it returns the job.
	run := func(now int64, class retry.Class) uint64 {
		t.Helper()
		sp := spec("a", bad)
		sp.Policy = retry.Policy{Attempts: 1}
		id := enqueueOne(t, s, now, now, sp)
		cs := claim(t, s, now, all)
		if !slices.Equal(ids(cs), []uint64{id}) {
			t.Fatalf("claimed %v at T0+%d, want [%d]", ids(cs), now-T0, id)
		}
		finish(t, s, now, outcome(cs[0], class, "http 503"))
		return id
	}
	run(T0, retry.Retryable)
	if l := lifeOf(t, s, bad).Life; !l.Failing || l.FailingSince != T0 || l.Disabled {
		t.Fatalf("after the first failure: %+v", l)
	}
	run(T0+500, retry.Unsafe)
	if l := lifeOf(t, s, bad).Life; !l.Failing || l.FailingSince != T0 {
		t.Fatalf("after the second failure: %+v", l)
	}
	run(T0+700, retry.Success)
	if l := lifeOf(t, s, bad).Life; !l.IsZero() {
		t.Fatalf("a success did not end the failing run: %+v", l)
	}
	run(T0+800, retry.Retryable)
	run(T0+900, retry.Permanent)
	if l := lifeOf(t, s, bad).Life; !l.Failing || l.FailingSince != T0+800 {
		t.Fatalf("the run after the success: %+v, want failing since T0+800", l)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	if l := lifeOf(t, s, bad).Life; !l.Failing || l.FailingSince != T0+800 {
		t.Fatalf("the failing run after a reopen: %+v", l)
	}
	run(T0+1799, retry.Retryable)
	if l := lifeOf(t, s, bad).Life; l.Disabled {
		t.Fatalf("disabled after 999 ms of failing: %+v", l)
	}
	// A job with attempts left: its failure disables the target, and it
	// is held pending.
	sp := spec("a", bad)
	sp.Policy = retry.Policy{Attempts: 5, BaseMS: 10, CapMS: 10}
	a := enqueueOne(t, s, T0+1800, T0+1800, sp)
	cs := claim(t, s, T0+1800, all)
	if !slices.Equal(ids(cs), []uint64{a}) {
		t.Fatalf("claimed %v, want [%d]", ids(cs), a)
	}
	finish(t, s, T0+1800, outcome(cs[0], retry.Retryable, "http 503"))
	l := lifeOf(t, s, bad).Life
	if !l.Disabled || l.DisabledAt != T0+1800 || !strings.Contains(l.Reason, "failing for 1s") {
		t.Fatalf("after 1000 ms of failing: %+v", l)
	}
	wantHeld(t, s, T0+5000, a)
	if _, err := s.EnableTarget(ctx, T0+5000, bad); err != nil {
		t.Fatal(err)
	}
	// The enable starts the failing time afresh: the next failure starts
	// a new run, and does not disable at once.
	cs = claim(t, s, T0+5000, all)
	if !slices.Equal(ids(cs), []uint64{a}) {
		t.Fatalf("claimed %v after the enable, want [%d]", ids(cs), a)
	}
	finish(t, s, T0+5000, outcome(cs[0], retry.Retryable, "http 503"))
	if l := lifeOf(t, s, bad).Life; l.Disabled || l.FailingSince != T0+5000 {
		t.Fatalf("the first failure after the enable: %+v", l)
	}
}
