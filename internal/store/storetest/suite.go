package storetest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// Config is what the suite asks of each store it opens.
type Config struct {
	// Circuit configures every target's breaker.
	Circuit retry.Circuit
	// Retention is how long finished jobs are kept (nil: forever).
	Retention *state.Retention
	// DisableAfterMS disables a target failing this long (0: never).
	DisableAfterMS int64
	// Limits are the configured rate limits (nil: none).
	Limits *state.LimitConfig
}

// Opener opens a new, empty store under cfg for one subtest, and returns
// with it a func that opens the same storage again (the suite closes the
// first store before calling it). The opener cleans up after t.
type Opener func(t *testing.T, cfg Config) (s store.Store, reopen func(t *testing.T) store.Store)

// Circuit is the breaker configuration the suite runs under unless a case
// says otherwise: open after 2 failures within 1 s, 500 ms of cooldown, 1
// probe.
var Circuit = retry.Circuit{Threshold: 2, WindowMS: 1000, CooldownMS: 500, Probes: 1}

// T0 is the suite's epoch: every case starts at this time (ms).
const T0 int64 = 1_700_000_000_000

// Run holds a store to the contract of store.Store: each case opens a fresh
// store with open and drives it through its methods with explicit times,
// checking what the engine relies on (ids and keys, due order, limits,
// outcomes, retries, deadlines, breakers, cancel and retry by hand, listing and
// paging, stats, retention, and that what a method acknowledged survives a
// reopen). Both stores run it, so a rule that one of them breaks fails
// here.
func Run(t *testing.T, open Opener) {
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener)
	}{
		{"EnqueueThenJob", testEnqueueThenJob},
		{"Metadata", testMetadata},
		{"IdempotencyKeys", testIdempotencyKeys},
		{"ClaimDueOrder", testClaimDueOrder},
		{"ClaimMax", testClaimMax},
		{"ClaimPerTarget", testClaimPerTarget},
		{"ClaimBoundsDecisions", testClaimBoundsDecisions},
		{"Success", testSuccess},
		{"FinishClaimsMore", testFinishClaimsMore},
		{"RetryThenGiveUp", testRetryThenGiveUp},
		{"RetryAfter", testRetryAfter},
		{"PermanentAndUnsafe", testPermanentAndUnsafe},
		{"StaleOutcomeIgnored", testStaleOutcomeIgnored},
		{"OutcomeOfEarlierAttempt", testOutcomeOfEarlierAttempt},
		{"Deadline", testDeadline},
		{"Breaker", testBreaker},
		{"Cancel", testCancel},
		{"Retry", testRetry},
		{"Discard", testDiscard},
		{"StatsAndNextDue", testStatsAndNextDue},
		{"ListFiltersAndPages", testList},
		{"ListKindAndKeyPages", testListKindAndKeyPages},
		{"Expire", testExpire},
		{"DurableAcrossReopen", testDurable},
		{"Closed", testClosed},
		{"RateLimit", testRateLimit},
		{"RateLimitConfigured", testRateLimitConfigured},
		{"TargetHold", testTargetHold},
		{"RateLimitWindows", testRateLimitWindows},
		{"SlowStart", testSlowStart},
		{"SlowStartSnooze", testSlowStartSnooze},
		{"FlowSettledAtExpire", testFlowSettledAtExpire},
	}
	cases = append(cases, queueCases...)
	cases = append(cases, queueLimitCases...)
	cases = append(cases, scheduleCases...)
	cases = append(cases, lifecycleCases...)
	cases = append(cases, verdictCases...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, open) })
	}
}

var ctx = context.Background()

// policy is a job policy with a fixed backoff of 100 ms (jittered to
// 50-100 ms).
func policy(attempts int) retry.Policy {
	return retry.Policy{Attempts: attempts, BaseMS: 100, CapMS: 100}
}

func spec(kind, target string) state.Spec {
	return state.Spec{Kind: kind, Target: target, Payload: []byte("p-" + kind), Policy: policy(3)}
}

func openDefault(t *testing.T, open Opener) store.Store {
	t.Helper()
	s, _ := open(t, Config{Circuit: Circuit})
	return s
}

func enqueue(t *testing.T, s store.Store, now int64, jobs ...store.NewJob) []store.Enqueued {
	t.Helper()
	out, err := s.Enqueue(ctx, now, jobs)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if len(out) != len(jobs) {
		t.Fatalf("Enqueue answered %d results for %d jobs", len(out), len(jobs))
	}
	return out
}

func enqueueOne(t *testing.T, s store.Store, now, due int64, sp state.Spec) uint64 {
	t.Helper()
	return enqueue(t, s, now, store.NewJob{Spec: sp, Due: due})[0].ID
}

func claim(t *testing.T, s store.Store, now int64, lim store.Limits) []store.Claim {
	t.Helper()
	cs, err := s.Claim(ctx, now, lim)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return cs
}

func finish(t *testing.T, s store.Store, now int64, outs ...store.Outcome) {
	t.Helper()
	if _, err := s.Finish(ctx, now, fixedRandom, outs, store.Limits{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

// fixedRandom is the jitter source of the suite: the backoff of 100 ms
// jitters to 50 + 7 mod 51 = 57 ms.
func fixedRandom() uint32 { return 7 }

func job(t *testing.T, s store.Store, id uint64) state.Job {
	t.Helper()
	j, err := s.Job(ctx, id)
	if err != nil {
		t.Fatalf("Job(%d): %v", id, err)
	}
	return j
}

func ids(cs []store.Claim) []uint64 {
	out := make([]uint64, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func wantState(t *testing.T, s store.Store, id uint64, want state.JobState) state.Job {
	t.Helper()
	j := job(t, s, id)
	if j.State != want {
		t.Fatalf("job %d is %v, want %v (reason %q, last error %q)", id, j.State, want, j.Reason(), j.LastError())
	}
	return j
}

func outcome(c store.Claim, class retry.Class, errText string) store.Outcome {
	return store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: class, AfterMS: -1, Error: errText}
}

var all = store.Limits{Max: 100}

func testEnqueueThenJob(t *testing.T, open Opener) {
	s := openDefault(t, open)
	sp := state.Spec{Kind: "email", Target: "smtp", Payload: []byte(`{"to":"ada"}`), Key: "welcome-ada",
		Policy: retry.Policy{Attempts: 4, BaseMS: 10, CapMS: 80, DeadlineMS: 60000}, TimeoutMS: 1500}
	out := enqueue(t, s, T0,
		store.NewJob{Spec: sp, Due: T0 + 10},
		store.NewJob{Spec: spec("a", ""), Due: T0},
		store.NewJob{Spec: spec("b", "t"), Due: T0 - 5})
	for i := range out {
		if out[i].Existing || out[i].ID == 0 || (i > 0 && out[i].ID <= out[i-1].ID) {
			t.Fatalf("Enqueue answered %+v: want new ids, ascending in the batch's order", out)
		}
	}
	j := wantState(t, s, out[0].ID, state.Pending)
	if !reflect.DeepEqual(*j.Spec, sp) {
		t.Errorf("spec read back\n%+v\nwant\n%+v", *j.Spec, sp)
	}
	if j.Due != T0+10 || j.FirstDue() != T0+10 || j.EnqueuedAt != T0 || j.FinishedAt() != 0 || j.Started() != 0 || j.Fails() != 0 || len(j.Attempts()) != 0 {
		t.Errorf("a new job reads %+v: want due and first due %d, enqueued at %d, nothing started", j, T0+10, T0)
	}
	next := enqueueOne(t, s, T0+1, T0, spec("c", ""))
	if next <= out[2].ID {
		t.Errorf("a later enqueue got id %d, not above the earlier %d", next, out[2].ID)
	}
	if _, err := s.Job(ctx, next+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Job of an unknown id: %v, want ErrNotFound", err)
	}
}

// testMetadata: a job's metadata and replay link are kept as enqueued (a
// single job and a batch mixing jobs with and without them), read back by
// Job and List, the metadata given to the claim that runs it, and survive a
// reopen.
func testMetadata(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	md := []state.Meta{{Key: "tenant", Value: "acme"}, {Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	withMD := func(kind string, md []state.Meta) store.NewJob {
		sp := spec(kind, "")
		sp.Metadata = md
		return store.NewJob{Spec: sp, Due: T0}
	}
	replay := withMD("one", md)
	replay.Spec.ReplayOf = 1 << 40
	one := enqueueOne(t, s, T0, T0, replay.Spec)
	replayToo := withMD("two", md[:1])
	replayToo.Spec.ReplayOf = 7
	batch := enqueue(t, s, T0, withMD("plain", nil), replayToo, withMD("plain", nil))
	wantReplay := map[uint64]uint64{one: 1 << 40, batch[1].ID: 7}
	want := map[uint64][]state.Meta{one: md, batch[0].ID: nil, batch[1].ID: md[:1], batch[2].ID: nil}
	check := func(s store.Store, when string) {
		t.Helper()
		for id, w := range want {
			sp := job(t, s, id).Spec
			if !reflect.DeepEqual(sp.Metadata, w) || sp.ReplayOf != wantReplay[id] {
				t.Fatalf("%s: job %d has metadata %+v, replay of %d; want %+v, %d", when, id, sp.Metadata, sp.ReplayOf, w, wantReplay[id])
			}
		}
		page, _, err := s.List(ctx, store.Filter{Limit: 10})
		if err != nil {
			t.Fatalf("%s: List: %v", when, err)
		}
		if len(page) != len(want) {
			t.Fatalf("%s: List shows %d jobs, want %d", when, len(page), len(want))
		}
		for _, j := range page {
			if !reflect.DeepEqual(j.Spec.Metadata, want[j.ID]) {
				t.Fatalf("%s: List shows job %d with metadata %+v, want %+v", when, j.ID, j.Spec.Metadata, want[j.ID])
			}
		}
	}
	check(s, "live")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	check(s, "after a reopen")
	for _, c := range claim(t, s, T0, all) {
		if !reflect.DeepEqual(c.Metadata, want[c.ID]) {
			t.Fatalf("the claim of job %d carries metadata %+v, want %+v", c.ID, c.Metadata, want[c.ID])
		}
	}
}

func testIdempotencyKeys(t *testing.T, open Opener) {
	s := openDefault(t, open)
	withKey := func(key, payload string) store.NewJob {
		sp := spec("k", "")
		sp.Key, sp.Payload = key, []byte(payload)
		return store.NewJob{Spec: sp, Due: T0}
	}
	first := enqueue(t, s, T0, withKey("order-1", "a"))[0]
	again := enqueue(t, s, T0+1, withKey("order-1", "b"), withKey("order-2", "c"), withKey("order-2", "d"))
	if !again[0].Existing || again[0].ID != first.ID {
		t.Errorf("a held key answered %+v, want Existing with id %d", again[0], first.ID)
	}
	if again[1].Existing || !again[2].Existing || again[2].ID != again[1].ID {
		t.Errorf("a key repeated within one batch answered %+v, %+v: want the first new, the second Existing with its id", again[1], again[2])
	}
	if p := job(t, s, first.ID).Spec.Payload; string(p) != "a" {
		t.Errorf("the holder's payload became %q: an Existing answer must change nothing", p)
	}
	// Keys compare as the bytes given: no case folding, no Unicode
	// normalization (U+00E9 against e + U+0301), no trimming.
	distinct := []string{"K", "k", "caf\u00e9", "cafe\u0301", "k ", " k"}
	seen := map[uint64]string{}
	for _, key := range distinct {
		e := enqueue(t, s, T0+2, withKey(key, key))[0]
		if e.Existing {
			t.Errorf("key %q collided with %q (id %d)", key, seen[e.ID], e.ID)
		}
		seen[e.ID] = key
	}
	c := claim(t, s, T0+3, store.Limits{Max: 1})
	if len(c) != 1 || c[0].ID != first.ID {
		t.Fatalf("claim %v, want job %d", ids(c), first.ID)
	}
	finish(t, s, T0+4, outcome(c[0], retry.Success, ""))
	if e := enqueue(t, s, T0+5, withKey("order-1", "z"))[0]; !e.Existing || e.ID != first.ID {
		t.Errorf("a finished job's key answered %+v: the key stays held until retention drops the job", e)
	}
}

func testClaimDueOrder(t *testing.T, open Opener) {
	s := openDefault(t, open)
	a := enqueueOne(t, s, T0, T0, spec("a", ""))
	b := enqueueOne(t, s, T0, T0-10, spec("b", ""))
	c := enqueueOne(t, s, T0, T0+1000, spec("c", ""))
	d := enqueueOne(t, s, T0, T0-10, spec("d", "x"))
	got := claim(t, s, T0, all)
	if want := []uint64{b, d, a}; !slices.Equal(ids(got), want) {
		t.Fatalf("claim at T0: %v, want the due jobs in (due, id) order %v", ids(got), want)
	}
	for _, cl := range got {
		j := wantState(t, s, cl.ID, state.Running)
		if cl.Attempt != 1 || cl.Kind != j.Spec.Kind || cl.Target != j.Spec.Target || !bytes.Equal(cl.Payload, j.Spec.Payload) || cl.TimeoutMS != j.Spec.TimeoutMS {
			t.Errorf("claim %+v does not carry its job's attempt 1, kind, target, payload and timeout (%+v)", cl, *j.Spec)
		}
		if j.Started() != 1 || len(j.Attempts()) != 1 || j.Attempts()[0].N != 1 || j.Attempts()[0].StartedAt != T0 || j.Attempts()[0].Ended {
			t.Errorf("a started job reads %+v: want attempt 1 open, started at T0", j)
		}
	}
	if more := claim(t, s, T0+999, all); len(more) != 0 {
		t.Errorf("claim before the last job is due: %v", ids(more))
	}
	if more := claim(t, s, T0+1000, all); !slices.Equal(ids(more), []uint64{c}) {
		t.Errorf("claim when the last job is due: %v, want [%d]", ids(more), c)
	}
	if more := claim(t, s, T0+5000, all); len(more) != 0 {
		t.Errorf("a second claim started running jobs again: %v", ids(more))
	}
}

func testClaimMax(t *testing.T, open Opener) {
	s := openDefault(t, open)
	var want []uint64
	for i := range 5 {
		want = append(want, enqueueOne(t, s, T0, T0+int64(i), spec("k", "")))
	}
	if got := claim(t, s, T0+10, store.Limits{Max: 0}); len(got) != 0 {
		t.Errorf("claim with Max 0 started %v", ids(got))
	}
	first := claim(t, s, T0+10, store.Limits{Max: 2})
	rest := claim(t, s, T0+10, store.Limits{Max: 10})
	if !slices.Equal(ids(first), want[:2]) || !slices.Equal(ids(rest), want[2:]) {
		t.Errorf("claims of 2 then 10: %v, %v; want %v, %v", ids(first), ids(rest), want[:2], want[2:])
	}
}

func testClaimPerTarget(t *testing.T, open Opener) {
	s := openDefault(t, open)
	a1 := enqueueOne(t, s, T0, T0, spec("k", "a"))
	a2 := enqueueOne(t, s, T0, T0, spec("k", "a"))
	b1 := enqueueOne(t, s, T0, T0+1, spec("k", "b"))
	a3 := enqueueOne(t, s, T0, T0+2, spec("k", "a"))
	running := map[string]int{}
	lim := store.Limits{Max: 10, PerTarget: 1, Running: func(target string) int { return running[target] }}
	got := claim(t, s, T0+5, lim)
	if want := []uint64{a1, b1}; !slices.Equal(ids(got), want) {
		t.Fatalf("claim with one per target: %v, want %v (the first due job of each target)", ids(got), want)
	}
	running["a"], running["b"] = 1, 1
	if more := claim(t, s, T0+6, lim); len(more) != 0 {
		t.Fatalf("claim while every target runs its limit: %v", ids(more))
	}
	for _, id := range []uint64{a2, a3} {
		if j := wantState(t, s, id, state.Pending); j.Started() != 0 {
			t.Errorf("job %d held back by the per-target limit has %d attempts", id, j.Started())
		}
	}
	running["a"] = 0
	if more := claim(t, s, T0+7, lim); !slices.Equal(ids(more), []uint64{a2}) {
		t.Errorf("claim once target a has room: %v, want [%d] (due order kept)", ids(more), a2)
	}
}

// testClaimBoundsDecisions: one claim makes at most 4096 deferrals and
// failures; the due jobs after them wait for the next claim, even a job
// of a healthy target.
func testClaimBoundsDecisions(t *testing.T, open Opener) {
	s := openDefault(t, open)
	for range 2 {
		enqueueOne(t, s, T0, T0, spec("k", "down"))
	}
	c := claim(t, s, T0, all)
	finish(t, s, T0+5, outcome(c[0], retry.Retryable, "refused"), outcome(c[1], retry.Retryable, "refused"))
	if br := breakerOf(t, s, "down"); br.State != retry.Open {
		t.Fatalf("breaker after %d failures: %+v, want open", Circuit.Threshold, br)
	}
	const behind = 4100
	jobs := make([]store.NewJob, behind, behind+1)
	for i := range jobs {
		jobs[i] = store.NewJob{Spec: spec("k", "down"), Due: T0 + 10}
	}
	jobs = append(jobs, store.NewJob{Spec: spec("k", "up"), Due: T0 + 10})
	up := enqueue(t, s, T0+6, jobs...)[behind].ID
	if got := claim(t, s, T0+10, all); len(got) != 0 {
		t.Fatalf("the first claim behind %d jobs its breaker refuses started %v: it may decide only 4096", behind, ids(got))
	}
	var due int
	for _, id := range listAll(t, s, store.Filter{State: "pending", Target: "down", Oldest: true}, 1000) {
		if job(t, s, id).Due <= T0+10 {
			due++
		}
	}
	if due != behind-4096 {
		t.Errorf("after the first claim %d jobs of target down are still due, want %d: 4096 deferred", due, behind-4096)
	}
	if got := claim(t, s, T0+10, all); !slices.Equal(ids(got), []uint64{up}) {
		t.Errorf("the second claim started %v, want [%d] once the last %d deferrals are made", ids(got), up, behind-4096)
	}
}

func testSuccess(t *testing.T, open Opener) {
	s := openDefault(t, open)
	id := enqueueOne(t, s, T0, T0, spec("k", "t"))
	c := claim(t, s, T0, all)
	out := outcome(c[0], retry.Success, "")
	out.Output = []byte("done")
	finish(t, s, T0+30, out)
	j := wantState(t, s, id, state.Succeeded)
	if j.FinishedAt() != T0+30 || len(j.Attempts()) != 1 {
		t.Fatalf("a succeeded job reads %+v", j)
	}
	a := j.Attempts()[0]
	if !a.Ended || a.Class != retry.Success || a.EndedAt != T0+30 || string(a.Output) != "done" {
		t.Errorf("its attempt reads %+v: want ended at T0+30, success, output kept", a)
	}
	if err := s.Retry(ctx, T0+40, id); !errors.Is(err, store.ErrNotFailed) {
		t.Errorf("Retry of a succeeded job: %v, want ErrNotFailed", err)
	}
}

func testFinishClaimsMore(t *testing.T, open Opener) {
	s := openDefault(t, open)
	first := enqueueOne(t, s, T0, T0, spec("k", ""))
	second := enqueueOne(t, s, T0, T0+5, spec("k", ""))
	third := enqueueOne(t, s, T0, T0+6, spec("k", ""))
	c := claim(t, s, T0, all)
	more, err := s.Finish(ctx, T0+10, fixedRandom, []store.Outcome{outcome(c[0], retry.Success, "")}, store.Limits{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(more), []uint64{second}) {
		t.Fatalf("Finish with room for one more claimed %v, want [%d]", ids(more), second)
	}
	wantState(t, s, first, state.Succeeded)
	wantState(t, s, second, state.Running)
	wantState(t, s, third, state.Pending)
}

func testRetryThenGiveUp(t *testing.T, open Opener) {
	s := openDefault(t, open)
	sp := spec("k", "")
	sp.Policy = policy(2)
	id := enqueueOne(t, s, T0, T0, sp)
	c := claim(t, s, T0, all)
	finish(t, s, T0+10, outcome(c[0], retry.Retryable, "boom 1"))
	j := wantState(t, s, id, state.Pending)
	if j.Due != T0+10+57 || j.Fails() != 1 || j.LastError() != "boom 1" {
		t.Fatalf("after a retryable failure: due %d (want %d: 100 ms jittered by the random 7), fails %d, last error %q", j.Due-T0, 10+57, j.Fails(), j.LastError())
	}
	if a := j.Attempts()[0]; !a.Ended || a.Class != retry.Retryable || a.Error != "boom 1" {
		t.Errorf("the failed attempt reads %+v", a)
	}
	if early := claim(t, s, j.Due-1, all); len(early) != 0 {
		t.Fatalf("claimed during the backoff: %v", ids(early))
	}
	c = claim(t, s, j.Due, all)
	if len(c) != 1 || c[0].Attempt != 2 {
		t.Fatalf("the retry claimed %+v, want attempt 2", c)
	}
	finish(t, s, j.Due+1, outcome(c[0], retry.Retryable, "boom 2"))
	j = wantState(t, s, id, state.Failed)
	if j.Fails() != 2 || j.FinishedAt() != j.Due+1 && j.FinishedAt() == 0 || !strings.Contains(j.Reason(), "gave up after 2 attempts") || !strings.Contains(j.Reason(), "boom 2") {
		t.Errorf("a job out of attempts reads fails %d, reason %q, finished at %d", j.Fails(), j.Reason(), j.FinishedAt())
	}
}

func testRetryAfter(t *testing.T, open Opener) {
	s := openDefault(t, open)
	sp := spec("k", "")
	sp.Policy = retry.Policy{Attempts: 3, BaseMS: 10, CapMS: 300}
	a := enqueueOne(t, s, T0, T0, sp)
	b := enqueueOne(t, s, T0, T0, sp)
	c := claim(t, s, T0, all)
	outA, outB := outcome(c[0], retry.Retryable, "429"), outcome(c[1], retry.Retryable, "503")
	outA.AfterMS, outB.AfterMS = 40, 10_000
	finish(t, s, T0+5, outA, outB)
	if j := wantState(t, s, a, state.Pending); j.Due != T0+5+40 {
		t.Errorf("the server's wait of 40 ms gave due T0+%d, want T0+45", j.Due-T0)
	}
	if j := wantState(t, s, b, state.Pending); j.Due != T0+5+10_000 {
		t.Errorf("a server's wait above the cap gave due T0+%d, want T0+10005 (its own wait: the backoff's cap does not bound it)", j.Due-T0)
	}
}

func testPermanentAndUnsafe(t *testing.T, open Opener) {
	s := openDefault(t, open)
	p := enqueueOne(t, s, T0, T0, spec("k", "t"))
	u := enqueueOne(t, s, T0, T0, spec("k", "t"))
	c := claim(t, s, T0, all)
	finish(t, s, T0+1, outcome(c[0], retry.Permanent, "bad request"), outcome(c[1], retry.Unsafe, "timeout after send"))
	if j := wantState(t, s, p, state.Failed); !strings.Contains(j.Reason(), "permanent") || !strings.Contains(j.Reason(), "bad request") || j.Started() != 1 {
		t.Errorf("a permanent failure reads reason %q after %d attempts", j.Reason(), j.Started())
	}
	if j := wantState(t, s, u, state.Failed); !strings.Contains(j.Reason(), "unsafe") || !strings.Contains(j.Reason(), "timeout after send") || j.Started() != 1 {
		t.Errorf("an unsafe failure reads reason %q after %d attempts", j.Reason(), j.Started())
	}
	// The unsafe failure counted against the breaker, the permanent one
	// did not: one failure, below the threshold of 2.
	br := breakerOf(t, s, "t")
	if br.State != retry.Closed || len(br.Fails) != 1 {
		t.Errorf("breaker after a permanent and an unsafe failure: %+v, want closed with one failure", br)
	}
}

func testStaleOutcomeIgnored(t *testing.T, open Opener) {
	s := openDefault(t, open)
	id := enqueueOne(t, s, T0, T0, spec("k", ""))
	c := claim(t, s, T0, all)
	stale := c[0]
	stale.Attempt = 2
	finish(t, s, T0+1, outcome(stale, retry.Success, ""))
	wantState(t, s, id, state.Running)
	finish(t, s, T0+2, outcome(c[0], retry.Success, ""))
	finish(t, s, T0+3, outcome(c[0], retry.Retryable, "late duplicate"))
	j := wantState(t, s, id, state.Succeeded)
	if j.FinishedAt() != T0+2 || j.Fails() != 0 {
		t.Errorf("a second outcome of an ended attempt changed the job: %+v", j)
	}
	if len(j.Attempts()) != 1 || j.Attempts()[0].Class != retry.Success || j.Attempts()[0].EndedAt != T0+2 || j.Attempts()[0].Error != "" {
		t.Errorf("a second outcome of an ended attempt rewrote its history: %+v", j.Attempts())
	}
}

// testOutcomeOfEarlierAttempt: the attempt of a job cancelled while it ran
// stays open; when its outcome comes after the job was retried and started
// again, it ends that attempt in the history and changes nothing else: the
// job runs its new attempt, whose outcome decides.
func testOutcomeOfEarlierAttempt(t *testing.T, open Opener) {
	s := openDefault(t, open)
	id := enqueueOne(t, s, T0, T0, spec("k", "t"))
	first := claim(t, s, T0, all)
	if _, err := s.Cancel(ctx, T0+1, id, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, T0+2, id); err != nil {
		t.Fatal(err)
	}
	second := claim(t, s, T0+2, all)
	if len(first) != 1 || len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("claims %+v then %+v, want attempt 1 then 2 of job %d", first, second, id)
	}
	finish(t, s, T0+3, outcome(first[0], retry.Success, ""))
	j := wantState(t, s, id, state.Running)
	if j.Started() != 2 || len(j.Attempts()) != 2 || !j.Attempts()[0].Ended || j.Attempts()[0].Class != retry.Success || j.Attempts()[1].Ended || j.FinishedAt() != 0 {
		t.Fatalf("after the outcome of attempt 1 while attempt 2 runs: %+v, want attempt 1 ended, attempt 2 open, the job running", j)
	}
	finish(t, s, T0+4, outcome(second[0], retry.Retryable, "again"))
	if j := wantState(t, s, id, state.Pending); j.Fails() != 1 || j.LastError() != "again" || !j.Attempts()[1].Ended {
		t.Errorf("after the outcome of attempt 2: %+v, want pending with one failure", j)
	}
}

func testDeadline(t *testing.T, open Opener) {
	s := openDefault(t, open)
	sp := spec("k", "")
	sp.Policy.DeadlineMS = 100
	late := enqueueOne(t, s, T0, T0, sp)
	if got := claim(t, s, T0+100, all); len(got) != 0 {
		t.Fatalf("claimed %v at the deadline", ids(got))
	}
	if j := wantState(t, s, late, state.Failed); j.Started() != 0 || !strings.Contains(j.Reason(), "deadline passed") {
		t.Errorf("a job past its deadline reads reason %q, %d attempts", j.Reason(), j.Started())
	}
	// A retry whose wait reaches past the deadline fails at once.
	retried := enqueueOne(t, s, T0, T0+200, func() state.Spec { sp := sp; sp.Policy.DeadlineMS = 30; return sp }())
	c := claim(t, s, T0+200, all)
	if len(c) != 1 || c[0].ID != retried {
		t.Fatalf("claim: %v, want [%d]", ids(c), retried)
	}
	finish(t, s, T0+210, outcome(c[0], retry.Retryable, "slow"))
	if j := wantState(t, s, retried, state.Failed); !strings.Contains(j.Reason(), "deadline passed") || !strings.Contains(j.Reason(), "slow") {
		t.Errorf("a retry past the deadline reads reason %q", j.Reason())
	}
}

func breakerOf(t *testing.T, s store.Store, target string) retry.Breaker {
	t.Helper()
	ts, err := s.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Target == target {
			return ti.Breaker
		}
	}
	return retry.Breaker{}
}

func testBreaker(t *testing.T, open Opener) {
	s := openDefault(t, open)
	for range 2 {
		enqueueOne(t, s, T0, T0, spec("k", "down"))
	}
	waiting := enqueueOne(t, s, T0, T0+10, spec("k", "down"))
	other := enqueueOne(t, s, T0, T0+10, spec("k", "up"))
	c := claim(t, s, T0, all)
	if len(c) != 2 {
		t.Fatalf("claimed %d, want 2", len(c))
	}
	finish(t, s, T0+5, outcome(c[0], retry.Retryable, "refused"), outcome(c[1], retry.Retryable, "refused"))
	br := breakerOf(t, s, "down")
	if br.State != retry.Open || br.Until != T0+5+Circuit.CooldownMS {
		t.Fatalf("breaker after %d failures: %+v, want open until T0+%d", Circuit.Threshold, br, 5+Circuit.CooldownMS)
	}
	got := claim(t, s, T0+10, all)
	if !slices.Equal(ids(got), []uint64{other}) {
		t.Fatalf("claim behind an open breaker: %v, want only the other target's job %d", ids(got), other)
	}
	j := wantState(t, s, waiting, state.Pending)
	if j.Started() != 0 || j.Due < br.Until {
		t.Errorf("a job its breaker refused reads due T0+%d, %d attempts: want deferred to the breaker's T0+%d, no attempt counted", j.Due-T0, j.Started(), br.Until-T0)
	}
	// Past the cooldown the breaker admits one probe; the retries of the
	// two failed jobs wait behind it.
	probe := claim(t, s, br.Until+200, all)
	if len(probe) != 1 || probe[0].Target != "down" {
		t.Fatalf("claim after the cooldown: %+v, want one probe of target down", probe)
	}
	if br := breakerOf(t, s, "down"); br.State != retry.HalfOpen || br.Busy != 1 {
		t.Errorf("breaker with its probe out: %+v, want half-open, 1 busy", br)
	}
	finish(t, s, br.Until+210, outcome(probe[0], retry.Success, ""))
	if br := breakerOf(t, s, "down"); br.State != retry.Closed || len(br.Fails) != 0 {
		t.Errorf("breaker after a successful probe: %+v, want closed with no failures", br)
	}
	rest := claim(t, s, br.Until+1000, all)
	if len(rest) != 2 {
		t.Errorf("claim after the breaker closed: %v, want the two remaining jobs of target down", ids(rest))
	}
}

func testCancel(t *testing.T, open Opener) {
	s := openDefault(t, open)
	pending := enqueueOne(t, s, T0, T0+1000, spec("k", ""))
	running := enqueueOne(t, s, T0, T0, spec("k", "t"))
	c := claim(t, s, T0, all)
	if r, err := s.Cancel(ctx, T0+1, pending, "not needed"); err != nil || r {
		t.Fatalf("Cancel of a pending job: running %v, %v", r, err)
	}
	if j := wantState(t, s, pending, state.Cancelled); j.Reason() != "not needed" || j.FinishedAt() != T0+1 {
		t.Errorf("a cancelled job reads reason %q, finished at T0+%d", j.Reason(), j.FinishedAt()-T0)
	}
	if r, err := s.Cancel(ctx, T0+2, running, "stop it"); err != nil || !r {
		t.Fatalf("Cancel of a running job: running %v, %v; want running true", r, err)
	}
	wantState(t, s, running, state.Cancelled)
	// The cancelled attempt still ends: its outcome goes into the history
	// and the breaker, and the job stays cancelled.
	finish(t, s, T0+3, outcome(c[0], retry.Retryable, "context canceled"))
	j := wantState(t, s, running, state.Cancelled)
	if a := j.Attempts()[len(j.Attempts())-1]; !a.Ended || a.Class != retry.Retryable {
		t.Errorf("the cancelled job's attempt reads %+v, want ended retryable", a)
	}
	if _, err := s.Cancel(ctx, T0+4, pending, "again"); !errors.Is(err, store.ErrFinished) {
		t.Errorf("Cancel of a cancelled job: %v, want ErrFinished", err)
	}
	if _, err := s.Cancel(ctx, T0+4, running+1000, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Cancel of an unknown job: %v, want ErrNotFound", err)
	}
	if got := claim(t, s, T0+5000, all); len(got) != 0 {
		t.Errorf("claimed cancelled jobs: %v", ids(got))
	}
}

func testRetry(t *testing.T, open Opener) {
	s := openDefault(t, open)
	sp := spec("k", "")
	sp.Policy = policy(1)
	id := enqueueOne(t, s, T0, T0, sp)
	c := claim(t, s, T0, all)
	finish(t, s, T0+1, outcome(c[0], retry.Retryable, "no"))
	wantState(t, s, id, state.Failed)
	if err := s.Retry(ctx, T0+50, id); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	j := wantState(t, s, id, state.Pending)
	if j.Due != T0+50 || j.FirstDue() != T0+50 || j.Fails() != 0 || j.FinishedAt() != 0 || j.Reason() != "" {
		t.Errorf("a retried job reads %+v: want due now with a fresh budget", j)
	}
	if err := s.Retry(ctx, T0+51, id); !errors.Is(err, store.ErrNotFailed) {
		t.Errorf("Retry of a pending job: %v, want ErrNotFailed", err)
	}
	if err := s.Retry(ctx, T0+51, id+1000); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Retry of an unknown job: %v, want ErrNotFound", err)
	}
	c = claim(t, s, T0+50, all)
	if len(c) != 1 || c[0].Attempt != 2 {
		t.Fatalf("the retried job claimed as %+v, want attempt 2 (attempt numbers keep growing)", c)
	}
	finish(t, s, T0+60, outcome(c[0], retry.Success, ""))
	j = wantState(t, s, id, state.Succeeded)
	if len(j.Attempts()) != 2 || j.Attempts()[0].N != 1 || j.Attempts()[1].N != 2 {
		t.Errorf("history after a retry: %+v, want attempts 1 and 2", j.Attempts())
	}
	cancelled := enqueueOne(t, s, T0+70, T0+9999, spec("k", ""))
	if _, err := s.Cancel(ctx, T0+71, cancelled, "oops"); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, T0+72, cancelled); err != nil {
		t.Fatalf("Retry of a cancelled job: %v", err)
	}
	if j := wantState(t, s, cancelled, state.Pending); j.Due != T0+72 {
		t.Errorf("a retried cancelled job is due T0+%d, want T0+72", j.Due-T0)
	}
}

func testStatsAndNextDue(t *testing.T, open Opener) {
	s := openDefault(t, open)
	if _, ok := s.NextDue(); ok {
		t.Error("an empty store reports a due job")
	}
	st, err := s.Stats(ctx)
	if err != nil || st.HasDue || st.Counts.Total() != 0 {
		t.Fatalf("Stats of an empty store: %+v, %v", st, err)
	}
	sp1 := spec("k", "")
	sp1.Policy = policy(1)
	for i := range 6 {
		enqueueOne(t, s, T0, T0+int64(i), sp1)
	}
	enqueueOne(t, s, T0, T0+500, sp1)
	c := claim(t, s, T0+10, store.Limits{Max: 5})
	finish(t, s, T0+11, outcome(c[0], retry.Success, ""), outcome(c[1], retry.Retryable, "x"))
	if _, err := s.Cancel(ctx, T0+12, c[2].ID, "c"); err != nil {
		t.Fatal(err)
	}
	st, err = s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := state.Counts{Pending: 2, Running: 2, Succeeded: 1, Failed: 1, Cancelled: 1}
	if st.Counts != want || !st.HasDue || st.OldestDue != T0+5 {
		t.Errorf("Stats: %+v, want counts %+v and oldest due T0+5", st, want)
	}
	if due, ok := s.NextDue(); !ok || due != T0+5 {
		t.Errorf("NextDue: T0+%d %v, want T0+5", due-T0, ok)
	}
}

// listAll pages through f with page size n and returns the ids; a page
// is full but at the end.
func listAll(t *testing.T, s store.Store, f store.Filter, n int) []uint64 {
	t.Helper()
	f.Limit = n
	var out []uint64
	for range 1000 {
		page, next, err := s.List(ctx, f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		if len(page) > n {
			t.Fatalf("List with Limit %d answered %d jobs", n, len(page))
		}
		for _, j := range page {
			out = append(out, j.ID)
		}
		if next == 0 {
			return out
		}
		if len(page) != n {
			t.Fatalf("List(%+v): a page of %d before the end", f, len(page))
		}
		f.After = next
	}
	t.Fatalf("List(%+v) did not end after 1000 pages", f)
	return nil
}

func testList(t *testing.T, open Opener) {
	s := openDefault(t, open)
	var every []uint64
	byKind := map[string][]uint64{}
	byTarget := map[string][]uint64{}
	for i := range 23 {
		kind := []string{"email", "sms", "hook"}[i%3]
		target := []string{"a", "b"}[i%2]
		sp := spec(kind, target)
		sp.Policy = policy(1)
		if i%5 == 0 {
			sp.Key = "order-" + string(rune('a'+i))
		}
		id := enqueueOne(t, s, T0, T0+int64(i), sp)
		every = append(every, id)
		byKind[kind] = append(byKind[kind], id)
		byTarget[target] = append(byTarget[target], id)
	}
	c := claim(t, s, T0+100, store.Limits{Max: 4})
	finish(t, s, T0+101, outcome(c[0], retry.Retryable, "x"), outcome(c[1], retry.Permanent, "y"), outcome(c[2], retry.Success, ""))
	failed := []uint64{c[0].ID, c[1].ID}

	desc := slices.Clone(every)
	slices.Reverse(desc)
	for _, n := range []int{1, 4, 100} {
		if got := listAll(t, s, store.Filter{Oldest: true}, n); !slices.Equal(got, every) {
			t.Errorf("all jobs oldest first in pages of %d: %v, want %v", n, got, every)
		}
		if got := listAll(t, s, store.Filter{}, n); !slices.Equal(got, desc) {
			t.Errorf("all jobs newest first in pages of %d: %v, want %v", n, got, desc)
		}
	}
	checks := []struct {
		f    store.Filter
		want []uint64
	}{
		{store.Filter{State: "failed", Oldest: true}, failed},
		{store.Filter{State: "succeeded", Oldest: true}, []uint64{c[2].ID}},
		{store.Filter{State: "running", Oldest: true}, []uint64{c[3].ID}},
		{store.Filter{Kind: "sms", Oldest: true}, byKind["sms"]},
		{store.Filter{Target: "b", Oldest: true}, byTarget["b"]},
		{store.Filter{Kind: "email", Target: "a", Oldest: true}, intersect(byKind["email"], byTarget["a"])},
		{store.Filter{Search: "order-k", Oldest: true}, []uint64{every[10]}},
		{store.Filter{Kind: "nope", Oldest: true}, nil},
	}
	for _, ck := range checks {
		for _, n := range []int{2, 50} {
			if got := listAll(t, s, ck.f, n); !slices.Equal(got, ck.want) {
				t.Errorf("List %+v in pages of %d: %v, want %v", ck.f, n, got, ck.want)
			}
		}
	}
	// Search matches the decimal id too, and a prefix of a key.
	id := every[len(every)-1]
	got := listAll(t, s, store.Filter{Search: uintString(id), Oldest: true}, 50)
	if !slices.Equal(got, []uint64{id}) {
		t.Errorf("searching for %d found %v, want that job only", id, got)
	}
	if got := listAll(t, s, store.Filter{Search: "order-", Oldest: true}, 2); !slices.Equal(got, []uint64{every[0], every[5], every[10], every[15], every[20]}) {
		t.Errorf("searching for the key prefix order- found %v", got)
	}
}

func intersect(a, b []uint64) []uint64 {
	var out []uint64
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func uintString(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func testExpire(t *testing.T, open Opener) {
	ret := &state.Retention{SucceededMS: 100, CancelledMS: 50, FailedMS: 300,
		PerKind: []state.KindRetention{{Kind: "keep", SucceededMS: 0, CancelledMS: 0, FailedMS: 0}}}
	s, _ := open(t, Config{Circuit: Circuit, Retention: ret})
	keyed := spec("k", "")
	keyed.Key = "once"
	keyed.Policy = policy(1)
	ok := enqueueOne(t, s, T0, T0, keyed)
	bad := enqueueOne(t, s, T0, T0, func() state.Spec { sp := spec("k", ""); sp.Policy = policy(1); return sp }())
	kept := enqueueOne(t, s, T0, T0, spec("keep", ""))
	pending := enqueueOne(t, s, T0, T0+1_000_000, spec("k", ""))
	c := claim(t, s, T0, all)
	if len(c) != 3 {
		t.Fatalf("claimed %d, want 3", len(c))
	}
	outs := map[uint64]store.Outcome{ok: outcome(c[0], retry.Success, ""), bad: outcome(c[1], retry.Retryable, "x"), kept: outcome(c[2], retry.Success, "")}
	for _, cl := range c {
		o := outs[cl.ID]
		o.Attempt = cl.Attempt
		o.ID = cl.ID
		finish(t, s, T0+10, o)
	}
	expire := func(at int64) {
		t.Helper()
		if err := s.Expire(ctx, at); err != nil {
			t.Fatalf("Expire: %v", err)
		}
	}
	gone := func(id uint64) bool {
		_, err := s.Job(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err != nil
	}
	// A store keeps a finished job at least its retention and may keep it
	// up to a sixteenth of it longer (the embedded store drops whole
	// expiry partitions, state.PartOf).
	late := func(ttl int64) int64 { return ttl + ttl/16 + 1 }
	expire(T0 + 10 + 99)
	if gone(ok) || gone(bad) {
		t.Fatal("Expire dropped jobs before their retention ran out")
	}
	expire(T0 + 10 + late(100))
	if !gone(ok) || gone(bad) || gone(kept) || gone(pending) {
		t.Fatalf("Expire at the succeeded TTL: gone %v %v %v %v, want only the succeeded job gone", gone(ok), gone(bad), gone(kept), gone(pending))
	}
	if e := enqueue(t, s, T0+200, store.NewJob{Spec: keyed, Due: T0 + 200})[0]; e.Existing || e.ID == ok {
		t.Errorf("the key of an expired job answered %+v: want it released, a new job", e)
	}
	expire(T0 + 10 + late(300))
	if !gone(bad) || gone(kept) || gone(pending) {
		t.Errorf("Expire at the failed TTL: failed gone %v, kept-kind gone %v, pending gone %v", gone(bad), gone(kept), gone(pending))
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts.Succeeded != 1 || st.Counts.Failed != 0 {
		t.Errorf("counts after expiry: %+v, want the kept kind's success only", st.Counts)
	}
}

// Snapshot is everything a store shows: every job (as View), the targets
// with a non-zero breaker or load, and the stats.
type Snapshot struct {
	Jobs    []JobView
	Targets []store.TargetInfo
	Stats   store.Stats
}

// Dump reads everything s shows, for comparing two stores or one store
// before and after a reopen.
func Dump(t testing.TB, s store.Store) Snapshot {
	t.Helper()
	var d Snapshot
	var after uint64
	for {
		page, next, err := s.List(ctx, store.Filter{After: after, Limit: 7, Oldest: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			d.Jobs = append(d.Jobs, View(j))
		}
		if next == 0 {
			break
		}
		after = next
	}
	ts, err := s.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if len(ti.Breaker.Fails) == 0 {
			ti.Breaker.Fails = nil
		}
		if ti.Breaker.IsZero() && ti.Pending == 0 && ti.Running == 0 {
			continue
		}
		d.Targets = append(d.Targets, ti)
	}
	if d.Stats, err = s.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

func testDurable(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	sp := spec("k", "t")
	sp.Key = "k1"
	a := enqueueOne(t, s, T0, T0, sp)
	for range 3 {
		enqueueOne(t, s, T0, T0, spec("k", "t"))
	}
	enqueueOne(t, s, T0, T0+5000, spec("later", "u"))
	c := claim(t, s, T0, store.Limits{Max: 4})
	out := outcome(c[0], retry.Success, "")
	out.Output = []byte("out")
	finish(t, s, T0+1, out, outcome(c[1], retry.Retryable, "r"), outcome(c[2], retry.Unsafe, "u"), outcome(c[3], retry.Retryable, "r2"))
	if _, err := s.Cancel(ctx, T0+2, c[3].ID, "cancelled"); err != nil {
		t.Fatal(err)
	}
	before := Dump(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = reopen(t)
	after := Dump(t, s)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("after a reopen the store shows\n%+v\nbefore it\n%+v", after, before)
	}
	if e := enqueue(t, s, T0+3, store.NewJob{Spec: sp, Due: T0})[0]; !e.Existing || e.ID != a {
		t.Errorf("a key after a reopen answered %+v, want Existing %d", e, a)
	}
	if next := enqueueOne(t, s, T0+3, T0, spec("k", "")); next <= before.Jobs[len(before.Jobs)-1].Job.ID {
		t.Errorf("an id after a reopen (%d) is not above every earlier one", next)
	}
}

func testClosed(t *testing.T, open Opener) {
	s := openDefault(t, open)
	id := enqueueOne(t, s, T0, T0, spec("k", ""))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Enqueue(ctx, T0, []store.NewJob{{Spec: spec("k", ""), Due: T0}}); err == nil {
		t.Error("Enqueue on a closed store succeeded")
	}
	if _, err := s.Claim(ctx, T0, all); err == nil {
		t.Error("Claim on a closed store succeeded")
	}
	if _, err := s.Cancel(ctx, T0, id, "x"); err == nil {
		t.Error("Cancel on a closed store succeeded")
	}
}
