package state

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/runlog/runlog/retry"
)

var testCircuit = retry.Circuit{Threshold: 2, WindowMS: 10000, CooldownMS: 300, Probes: 1}

func newTestState() *State { return New(Config{Circuit: testCircuit}) }

// apply applies ops in order and fails the test if an invariant breaks.
func apply(t testing.TB, s *State, ops ...Op) {
	t.Helper()
	for i := range ops {
		s.Apply(&ops[i])
		if err := s.Check(); err != nil {
			t.Fatalf("after op %d %+v: %v", i, ops[i], err)
		}
	}
}

func enq(id uint64, due int64, target, key string, p retry.Policy) Op {
	return Op{Kind: OpEnqueue, ID: id, At: due - 10, Due: due, Spec: &Spec{Kind: "k", Target: target, Payload: []byte("p"), Key: key, Policy: p}}
}

var pol3 = retry.Policy{Attempts: 3, BaseMS: 100, CapMS: 1000}

func mustJob(t testing.TB, s *State, id uint64) *Job {
	t.Helper()
	j, ok := s.Job(id)
	if !ok {
		t.Fatalf("job %d missing", id)
	}
	return j
}

// TestApply pins the effect of every op, and the no-op cases, on one job.
func TestApply(t *testing.T) {
	t.Parallel()
	start1 := Op{Kind: OpStart, ID: 1, At: 1000, Attempt: 1}
	tests := []struct {
		name  string
		ops   []Op
		check func(t *testing.T, s *State, j *Job)
	}{
		{"enqueue", []Op{enq(1, 1000, "a", "k1", pol3)}, func(t *testing.T, s *State, j *Job) {
			want := Job{ID: 1, State: Pending, Due: 1000, EnqueuedAt: 990}
			if j.State != want.State || j.Due != want.Due || j.FirstDue() != want.FirstDue() || j.EnqueuedAt != want.EnqueuedAt || j.Spec.Key != "k1" {
				t.Fatalf("job %+v", j)
			}
			if id, ok := s.ByKey("k1"); !ok || id != 1 {
				t.Fatalf("ByKey = %d, %v", id, ok)
			}
			if s.NextID() != 2 {
				t.Fatalf("NextID = %d", s.NextID())
			}
		}},
		{"enqueue of an existing id is a no-op", []Op{enq(1, 1000, "a", "", pol3), enq(1, 5, "b", "x", pol3)}, func(t *testing.T, s *State, j *Job) {
			if j.Due != 1000 || j.Spec.Target != "a" || s.Len() != 1 {
				t.Fatalf("job %+v, len %d", j, s.Len())
			}
			if _, ok := s.ByKey("x"); ok {
				t.Fatal("the ignored enqueue's key was indexed")
			}
		}},
		{"enqueue of a held key is a no-op", []Op{enq(1, 1000, "a", "k", pol3), enq(2, 1000, "a", "k", pol3)}, func(t *testing.T, s *State, j *Job) {
			if _, ok := s.Job(2); ok || s.NextID() != 2 {
				t.Fatalf("job 2 exists or NextID %d moved", s.NextID())
			}
		}},
		{"enqueue without spec or with id 0 is a no-op", []Op{enq(1, 1000, "a", "", pol3), {Kind: OpEnqueue, ID: 2}, {Kind: OpEnqueue, ID: 0, Spec: &Spec{}}}, func(t *testing.T, s *State, j *Job) {
			if s.Len() != 1 {
				t.Fatalf("len %d", s.Len())
			}
		}},
		{"start", []Op{enq(1, 1000, "a", "", pol3), start1}, func(t *testing.T, s *State, j *Job) {
			if j.State != Running || j.Started() != 1 || len(j.Attempts()) != 1 || j.Attempts()[0].N != 1 || j.Attempts()[0].StartedAt != 1000 || j.Attempts()[0].Ended {
				t.Fatalf("job %+v", j)
			}
			if !slices.Equal(s.Running(), []uint64{1}) {
				t.Fatalf("Running = %v", s.Running())
			}
		}},
		{"start with a wrong attempt number is a no-op", []Op{enq(1, 1000, "a", "", pol3), {Kind: OpStart, ID: 1, At: 1000, Attempt: 2}, {Kind: OpStart, ID: 1, Attempt: 0}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Pending || j.Started() != 0 {
				t.Fatalf("job %+v", j)
			}
		}},
		{"start of a running job is a no-op", []Op{enq(1, 1000, "a", "", pol3), start1, {Kind: OpStart, ID: 1, At: 1001, Attempt: 2}}, func(t *testing.T, s *State, j *Job) {
			if j.Started() != 1 {
				t.Fatalf("job %+v", j)
			}
		}},
		{"succeed", []Op{enq(1, 1000, "a", "", pol3), start1, {Kind: OpSucceed, ID: 1, At: 1100, Attempt: 1, Class: retry.Success, Output: []byte("ok")}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Succeeded || j.FinishedAt() != 1100 || !j.Attempts()[0].Ended || string(j.Attempts()[0].Output) != "ok" || len(s.Running()) != 0 {
				t.Fatalf("job %+v", j)
			}
		}},
		{"retry", []Op{enq(1, 1000, "a", "", pol3), start1, {Kind: OpRequeue, ID: 1, At: 1100, Due: 1300, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "503"}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Pending || j.Due != 1300 || j.FirstDue() != 1000 || j.Fails() != 1 || j.LastError() != "503" {
				t.Fatalf("job %+v", j)
			}
			if a := j.Attempts()[0]; !a.Ended || a.EndedAt != 1100 || a.Class != retry.Retryable || a.Error != "503" {
				t.Fatalf("attempt %+v", a)
			}
			if b := s.Breaker("a"); !slices.Equal(b.Fails, []int64{1100}) {
				t.Fatalf("breaker %+v", b)
			}
		}},
		{"fail from an attempt", []Op{enq(1, 1000, "a", "", pol3), start1, {Kind: OpFail, ID: 1, At: 1100, Attempt: 1, Class: retry.Permanent, Error: "permanent failure: 404"}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Failed || j.Reason() != "permanent failure: 404" || j.FinishedAt() != 1100 || j.Fails() != 1 {
				t.Fatalf("job %+v", j)
			}
			if !s.Breaker("a").IsZero() {
				t.Fatalf("a permanent failure counted against the breaker: %+v", s.Breaker("a"))
			}
		}},
		{"fail from admission", []Op{enq(1, 1000, "a", "", pol3), {Kind: OpFail, ID: 1, At: 5000, Error: "deadline passed"}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Failed || j.Reason() != "deadline passed" || j.Fails() != 0 || len(j.Attempts()) != 0 {
				t.Fatalf("job %+v", j)
			}
			if _, ok := s.NextDue(); ok {
				t.Fatal("a failed job is still due")
			}
		}},
		{"succeed or retry outside an attempt is a no-op", []Op{enq(1, 1000, "a", "", pol3), {Kind: OpSucceed, ID: 1, At: 1}, {Kind: OpRequeue, ID: 1, At: 1, Due: 7}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Pending || j.Due != 1000 {
				t.Fatalf("job %+v", j)
			}
		}},
		{"admission fail of a running job is a no-op", []Op{enq(1, 1000, "a", "", pol3), start1, {Kind: OpFail, ID: 1, At: 1, Error: "x"}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Running {
				t.Fatalf("job %+v", j)
			}
		}},
		{"outcome for a stale attempt is a no-op", []Op{enq(1, 1000, "a", "", pol3), start1,
			{Kind: OpRequeue, ID: 1, At: 1100, Due: 1100, Attempt: 1, Class: retry.Retryable, BreakerFailed: true},
			{Kind: OpStart, ID: 1, At: 1100, Attempt: 2},
			{Kind: OpSucceed, ID: 1, At: 1200, Attempt: 1},
			{Kind: OpSucceed, ID: 1, At: 1200, Attempt: 3}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Running || j.Started() != 2 || j.Attempts()[0].Class != retry.Retryable || j.Attempts()[1].Ended {
				t.Fatalf("job %+v", j)
			}
			if b := s.Breaker("a"); !slices.Equal(b.Fails, []int64{1100}) {
				t.Fatalf("a stale outcome fed the breaker: %+v", b)
			}
		}},
		{"defer", []Op{enq(1, 1000, "a", "", pol3), {Kind: OpDefer, ID: 1, At: 1000, Due: 1300}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Pending || j.Due != 1300 || j.FirstDue() != 1000 || j.Fails() != 0 {
				t.Fatalf("job %+v", j)
			}
			if due, _ := s.NextDue(); due != 1300 {
				t.Fatalf("NextDue = %d", due)
			}
		}},
		{"defer of a running job is a no-op", []Op{enq(1, 1000, "a", "", pol3), start1, {Kind: OpDefer, ID: 1, Due: 9}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Running || j.Due != 1000 {
				t.Fatalf("job %+v", j)
			}
		}},
		{"cancel pending", []Op{enq(1, 1000, "a", "k", pol3), {Kind: OpCancel, ID: 1, At: 1050, Error: "by hand"}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Cancelled || j.Reason() != "by hand" || j.FinishedAt() != 1050 {
				t.Fatalf("job %+v", j)
			}
			if _, ok := s.ByKey("k"); !ok {
				t.Fatal("a cancelled job dropped its key")
			}
		}},
		{"cancel running, then its outcome feeds only breaker and history", []Op{enq(1, 1000, "a", "", pol3), start1,
			{Kind: OpCancel, ID: 1, At: 1050, Error: "stop"},
			{Kind: OpRequeue, ID: 1, At: 1100, Due: 1200, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "503"}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Cancelled || j.Reason() != "stop" || j.Fails() != 0 || j.Due != 1000 || len(s.Running()) != 0 {
				t.Fatalf("job %+v", j)
			}
			if a := j.Attempts()[0]; !a.Ended || a.Error != "503" {
				t.Fatalf("attempt %+v", a)
			}
			if b := s.Breaker("a"); !slices.Equal(b.Fails, []int64{1100}) {
				t.Fatalf("breaker %+v", b)
			}
		}},
		{"cancel of a finished job is a no-op", []Op{enq(1, 1000, "a", "", pol3), {Kind: OpFail, ID: 1, At: 5, Error: "dead"}, {Kind: OpCancel, ID: 1, At: 6, Error: "x"}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Failed || j.Reason() != "dead" {
				t.Fatalf("job %+v", j)
			}
		}},
		{"revive a dead job", []Op{enq(1, 1000, "a", "", pol3), start1,
			{Kind: OpFail, ID: 1, At: 1100, Attempt: 1, Class: retry.Unsafe, BreakerFailed: true, Error: "unsafe"},
			{Kind: OpRetry, ID: 1, At: 2000, Due: 2500}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Pending || j.Due != 2500 || j.FirstDue() != 2500 || j.Fails() != 0 || j.Started() != 1 || j.Reason() != "" || j.FinishedAt() != 0 {
				t.Fatalf("job %+v", j)
			}
		}},
		{"revive of a pending or succeeded job is a no-op", []Op{enq(1, 1000, "a", "", pol3), {Kind: OpRetry, ID: 1, Due: 5},
			enq(2, 1000, "a", "", pol3), {Kind: OpStart, ID: 2, At: 1000, Attempt: 1}, {Kind: OpSucceed, ID: 2, At: 1001, Attempt: 1}, {Kind: OpRetry, ID: 2, Due: 5}}, func(t *testing.T, s *State, j *Job) {
			if j.Due != 1000 || mustJob(t, s, 2).State != Succeeded {
				t.Fatalf("job %+v", j)
			}
		}},
		{"revive a cancelled running job: the old attempt still lands in history", []Op{enq(1, 1000, "a", "", pol3), start1,
			{Kind: OpCancel, ID: 1, At: 1010},
			{Kind: OpRetry, ID: 1, At: 1020, Due: 1020},
			{Kind: OpStart, ID: 1, At: 1030, Attempt: 2},
			{Kind: OpSucceed, ID: 1, At: 1040, Attempt: 1, Class: retry.Success}}, func(t *testing.T, s *State, j *Job) {
			if j.State != Running || j.Started() != 2 || !j.Attempts()[0].Ended || j.Attempts()[1].Ended {
				t.Fatalf("job %+v", j)
			}
		}},
		{"ops on unknown ids and kinds are no-ops", []Op{enq(1, 1000, "a", "", pol3),
			{Kind: OpStart, ID: 9, Attempt: 1}, {Kind: OpSucceed, ID: 9, Attempt: 1}, {Kind: OpFail, ID: 9}, {Kind: OpDefer, ID: 9},
			{Kind: OpCancel, ID: 9}, {Kind: OpRetry, ID: 9}, {Kind: 0, ID: 1}, {Kind: 42, ID: 1}}, func(t *testing.T, s *State, j *Job) {
			if s.Len() != 1 || j.State != Pending || s.NextID() != 2 {
				t.Fatalf("job %+v", j)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestState()
			apply(t, s, tt.ops...)
			tt.check(t, s, mustJob(t, s, 1))
		})
	}
}

func TestAttemptHistoryBounded(t *testing.T) {
	t.Parallel()
	s := newTestState()
	apply(t, s, enq(1, 0, "a", "", retry.Policy{Attempts: 100}))
	for n := uint32(1); n <= MaxAttemptHistory+8; n++ {
		apply(t, s, Op{Kind: OpStart, ID: 1, At: int64(n), Attempt: n},
			Op{Kind: OpRequeue, ID: 1, At: int64(n), Due: int64(n), Attempt: n, Error: fmt.Sprint(n)})
	}
	j := mustJob(t, s, 1)
	if len(j.Attempts()) != MaxAttemptHistory || j.Attempts()[0].N != 9 || j.Attempts()[MaxAttemptHistory-1].N != MaxAttemptHistory+8 {
		t.Fatalf("history has %d attempts from %d to %d", len(j.Attempts()), j.Attempts()[0].N, j.Attempts()[len(j.Attempts())-1].N)
	}
	if j.Fails() != MaxAttemptHistory+8 {
		t.Fatalf("fails = %d", j.Fails())
	}
}

// TestBreakerInState drives a target's breaker through Start and outcome
// ops: it trips, defers, admits one probe, and the probe closes it.
func TestBreakerInState(t *testing.T) {
	t.Parallel()
	s := newTestState()
	apply(t, s, enq(1, 0, "t", "", pol3), enq(2, 0, "t", "", pol3), enq(3, 0, "t", "", pol3), enq(4, 0, "other", "", pol3))
	for _, id := range []uint64{1, 2} {
		op := s.Admit(id, 100)
		if op.Kind != OpStart {
			t.Fatalf("job %d: %+v, want a start", id, op)
		}
		apply(t, s, op)
	}
	apply(t, s, s.Settle(1, 1, retry.Retryable, -1, "e", nil, 110, 0), s.Settle(2, 1, retry.Unsafe, -1, "e", nil, 120, 0))
	if b := s.Breaker("t"); b.State != retry.Open || b.Until != 420 {
		t.Fatalf("breaker %+v, want open until 420", b)
	}
	op := s.Admit(3, 200)
	if op.Kind != OpDefer || op.Due != 420 || op.Attempt != 0 {
		t.Fatalf("Admit while open = %+v, want a defer to 420", op)
	}
	apply(t, s, op)
	if j := mustJob(t, s, 3); j.Fails() != 0 || j.Due != 420 {
		t.Fatalf("a deferred job counted a failure: %+v", j)
	}
	if op := s.Admit(4, 200); op.Kind != OpStart {
		t.Fatalf("another target was held back: %+v", op)
	}
	probe := s.Admit(3, 420)
	if probe.Kind != OpStart {
		t.Fatalf("after the cooldown: %+v, want a probe", probe)
	}
	apply(t, s, probe)
	if b := s.Breaker("t"); b.State != retry.HalfOpen || b.Busy != 1 {
		t.Fatalf("breaker %+v, want half-open with one probe", b)
	}
	// Job 1 is due again (retry), but the one probe is busy.
	if op := s.Admit(1, 5000); op.Kind != OpDefer || op.Due != 5300 {
		t.Fatalf("half-open full: %+v, want a defer to now + cooldown", op)
	}
	apply(t, s, s.Settle(3, 1, retry.Permanent, -1, "404", nil, 430, 0))
	if b := s.Breaker("t"); !b.IsZero() {
		t.Fatalf("a permanent failure of the probe did not close the breaker: %+v", b)
	}
	var seen []string
	s.Targets(func(target string, b retry.Breaker) bool { seen = append(seen, target); return true })
	if len(seen) != 0 {
		t.Fatalf("closed breakers are still listed: %v", seen)
	}
}

func TestAdmitDecisions(t *testing.T) {
	t.Parallel()
	dl := retry.Policy{Attempts: 2, BaseMS: 100, CapMS: 1000, DeadlineMS: 500}
	tests := []struct {
		name string
		ops  []Op
		now  int64
		want Op
	}{
		{"start", []Op{enq(1, 1000, "a", "", dl)}, 1000, Op{Kind: OpStart, ID: 1, At: 1000, Attempt: 1}},
		{"late before any attempt", []Op{enq(1, 1000, "a", "", dl)}, 1500, Op{Kind: OpFail, ID: 1, At: 1500, Error: "deadline passed before the first attempt"}},
		{"late after a failure", []Op{enq(1, 1000, "a", "", dl), {Kind: OpStart, ID: 1, At: 1000, Attempt: 1}, {Kind: OpRequeue, ID: 1, At: 1001, Due: 1100, Attempt: 1, Error: "503"}}, 1500,
			Op{Kind: OpFail, ID: 1, At: 1500, Error: "deadline passed: 503"}},
		{"spent", []Op{enq(1, 1000, "a", "", dl), {Kind: OpStart, ID: 1, At: 1000, Attempt: 1}, {Kind: OpRequeue, ID: 1, At: 1001, Due: 1001, Attempt: 1, Error: "a"},
			{Kind: OpStart, ID: 1, At: 1002, Attempt: 2}, {Kind: OpRequeue, ID: 1, At: 1003, Due: 1003, Attempt: 2, Error: "interrupted"}}, 1004,
			Op{Kind: OpFail, ID: 1, At: 1004, Error: "gave up after 2 attempts: interrupted"}},
		{"second attempt number", []Op{enq(1, 1000, "a", "", dl), {Kind: OpStart, ID: 1, At: 1000, Attempt: 1}, {Kind: OpRequeue, ID: 1, At: 1001, Due: 1001, Attempt: 1}}, 1001,
			Op{Kind: OpStart, ID: 1, At: 1001, Attempt: 2}},
		{"not pending", []Op{enq(1, 1000, "a", "", dl), {Kind: OpStart, ID: 1, At: 1000, Attempt: 1}}, 1000, Op{}},
		{"unknown", nil, 1000, Op{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestState()
			apply(t, s, tt.ops...)
			if d := opDiff(s.Admit(1, tt.now), tt.want); d != "" {
				t.Fatal(d)
			}
		})
	}
}

func TestAdmitDeferIsInTheFuture(t *testing.T) {
	t.Parallel()
	s := New(Config{Circuit: retry.Circuit{Threshold: 1, Probes: 1}}) // zero cooldown
	apply(t, s, enq(1, 0, "a", "", pol3), enq(2, 0, "a", "", pol3), enq(3, 0, "a", "", pol3))
	apply(t, s, s.Admit(1, 10))
	apply(t, s, s.Settle(1, 1, retry.Retryable, -1, "e", nil, 10, 0)) // opens until 10
	if b := s.Breaker("a"); b.State != retry.Open || b.Until != 10 {
		t.Fatalf("breaker %+v, want open until 10", b)
	}
	apply(t, s, s.Admit(2, 10)) // the probe
	if op := s.Admit(3, 10); op.Kind != OpDefer || op.Due != 11 {
		t.Fatalf("Admit with a busy probe and no cooldown = %+v, want a defer to now+1", op)
	}
}

func TestSettleDecisions(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Attempts: 2, BaseMS: 100, CapMS: 1000, DeadlineMS: 1000}
	running := []Op{enq(1, 1000, "a", "", p), {Kind: OpStart, ID: 1, At: 1000, Attempt: 1}}
	second := append(slices.Clone(running), Op{Kind: OpRequeue, ID: 1, At: 1010, Due: 1010, Attempt: 1, Error: "x"}, Op{Kind: OpStart, ID: 1, At: 1010, Attempt: 2})
	tests := []struct {
		name    string
		ops     []Op
		attempt uint32
		class   retry.Class
		after   int64
		err     string
		out     []byte
		now     int64
		want    Op
	}{
		{"success", running, 1, retry.Success, -1, "", []byte("ok"), 1100, Op{Kind: OpSucceed, ID: 1, At: 1100, Attempt: 1, Class: retry.Success, Output: []byte("ok")}},
		{"empty output is nil", running, 1, retry.Success, -1, "", []byte{}, 1100, Op{Kind: OpSucceed, ID: 1, At: 1100, Attempt: 1, Class: retry.Success}},
		{"retry with jitter", running, 1, retry.Retryable, -1, "503", nil, 1100, Op{Kind: OpRequeue, ID: 1, At: 1100, Due: 1150, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "503"}},
		{"retry after the server's wait", running, 1, retry.Retryable, 300, "429", nil, 1100, Op{Kind: OpRequeue, ID: 1, At: 1100, Due: 1400, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "429", HoldUntil: 1400}},
		{"deadline at the next try", running, 1, retry.Retryable, 900, "429", nil, 1100, Op{Kind: OpFail, ID: 1, At: 1100, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "deadline passed: 429", HoldUntil: 2000}},
		{"spent", second, 2, retry.Retryable, -1, "503", nil, 1100, Op{Kind: OpFail, ID: 1, At: 1100, Attempt: 2, Class: retry.Retryable, BreakerFailed: true, Error: "gave up after 2 attempts: 503"}},
		{"permanent", running, 1, retry.Permanent, -1, "404", nil, 1100, Op{Kind: OpFail, ID: 1, At: 1100, Attempt: 1, Class: retry.Permanent, Error: "permanent failure: 404"}},
		{"unsafe", running, 1, retry.Unsafe, -1, "reset", nil, 1100, Op{Kind: OpFail, ID: 1, At: 1100, Attempt: 1, Class: retry.Unsafe, BreakerFailed: true, Error: "unsafe failure, not retried: reset"}},
		{"unknown class counts as unsafe", running, 1, 0, -1, "", nil, 1100, Op{Kind: OpFail, ID: 1, At: 1100, Attempt: 1, Class: retry.Unsafe, BreakerFailed: true, Error: "unsafe failure, not retried"}},
		{"wrong attempt", running, 2, retry.Success, -1, "", nil, 1100, Op{}},
		{"ended attempt", second, 1, retry.Success, -1, "", nil, 1100, Op{}},
		{"unknown job", nil, 1, retry.Success, -1, "", nil, 1100, Op{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestState()
			apply(t, s, tt.ops...)
			got := s.Settle(1, tt.attempt, tt.class, tt.after, tt.err, tt.out, tt.now, 0)
			if d := opDiff(got, tt.want); d != "" {
				t.Fatal(d)
			}
			if tt.out != nil && len(tt.out) == 0 && got.Output != nil {
				t.Fatal("an empty output was kept as a non-nil slice")
			}
		})
	}
}

func TestOrphan(t *testing.T) {
	t.Parallel()
	s := newTestState()
	apply(t, s, enq(1, 1000, "a", "", retry.Policy{Attempts: 1}), enq(2, 1000, "a", "", pol3), Op{Kind: OpStart, ID: 1, At: 1000, Attempt: 1})
	want := Op{Kind: OpRequeue, ID: 1, At: 5000, Due: 1000, Attempt: 1, Error: "interrupted: the process stopped during attempt 1"}
	op := s.Orphan(1, 5000)
	if d := opDiff(op, want); d != "" {
		t.Fatal(d)
	}
	if d := opDiff(s.Orphan(2, 5000), Op{}); d != "" {
		t.Fatalf("orphan of a pending job: %s", d)
	}
	apply(t, s, op)
	// The only attempt is used up: the next admission fails it as spent.
	if got := s.Admit(1, 5000); got.Kind != OpFail || got.Error != "gave up after 1 attempts: interrupted: the process stopped during attempt 1" {
		t.Fatalf("Admit after the orphan = %+v", got)
	}
}

func TestDueOrderAndHold(t *testing.T) {
	t.Parallel()
	s := newTestState()
	apply(t, s, enq(3, 100, "a", "", pol3), enq(1, 200, "a", "", pol3), enq(2, 100, "a", "", pol3), enq(4, 50, "a", "", pol3))
	if due, ok := s.NextDue(); !ok || due != 50 {
		t.Fatalf("NextDue = %d, %v", due, ok)
	}
	if _, ok := s.PeekDue(49); ok {
		t.Fatal("a job is due before its due time")
	}
	var order []uint64
	for {
		j, ok := s.PeekDue(1000)
		if !ok {
			break
		}
		order = append(order, j.ID)
		s.Hold(j.ID)
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(order, []uint64{4, 2, 3, 1}) {
		t.Fatalf("due order %v, want (due, id) order [4 2 3 1]", order)
	}
	if _, ok := s.NextDue(); ok || s.Counts().Pending != 4 {
		t.Fatalf("held jobs: NextDue still set or pending count %d", s.Counts().Pending)
	}
	s.Hold(2) // already held: nothing happens
	// Ops apply to held jobs: start one, defer another, cancel a third.
	apply(t, s, Op{Kind: OpStart, ID: 2, At: 100, Attempt: 1}, Op{Kind: OpDefer, ID: 3, Due: 500}, Op{Kind: OpCancel, ID: 4})
	s.ReleaseHeld()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	order = order[:0]
	for j, ok := s.PeekDue(1000); ok; j, ok = s.PeekDue(1000) {
		order = append(order, j.ID)
		apply(t, s, Op{Kind: OpCancel, ID: j.ID})
	}
	if !slices.Equal(order, []uint64{1, 3}) {
		t.Fatalf("after release: %v, want [1 3]", order)
	}
	s.Hold(2) // running: nothing happens
	s.Hold(99)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestScan(t *testing.T) {
	t.Parallel()
	s := newTestState()
	for _, id := range []uint64{5, 1, 3, 9, 7} { // out of order ids insert in place
		apply(t, s, enq(id, 0, "a", "", pol3))
	}
	collect := func(after uint64, desc bool, limit int) []uint64 {
		var ids []uint64
		s.Scan(after, desc, func(j *Job) bool { ids = append(ids, j.ID); return len(ids) < limit })
		return ids
	}
	tests := []struct {
		after uint64
		desc  bool
		limit int
		want  []uint64
	}{
		{0, false, 10, []uint64{1, 3, 5, 7, 9}},
		{0, true, 10, []uint64{9, 7, 5, 3, 1}},
		{3, false, 10, []uint64{5, 7, 9}},
		{4, false, 2, []uint64{5, 7}},
		{7, true, 10, []uint64{5, 3, 1}},
		{6, true, 1, []uint64{5}},
		{100, true, 10, []uint64{9, 7, 5, 3, 1}},
		{9, false, 10, nil},
		{1, true, 10, nil},
	}
	for _, tt := range tests {
		if got := collect(tt.after, tt.desc, tt.limit); !slices.Equal(got, tt.want) {
			t.Errorf("Scan(%d, desc=%v, limit %d) = %v, want %v", tt.after, tt.desc, tt.limit, got, tt.want)
		}
	}
	if s.NextID() != 10 || s.Len() != 5 {
		t.Fatalf("NextID %d, Len %d", s.NextID(), s.Len())
	}
	for _, id := range []uint64{1, 3, 5, 7, 9} {
		mustJob(t, s, id)
	}
	for _, id := range []uint64{0, 2, 8, 10} {
		if _, ok := s.Job(id); ok {
			t.Fatalf("job %d found", id)
		}
	}
}

func TestCountsAndStrings(t *testing.T) {
	t.Parallel()
	s := newTestState()
	apply(t, s, enq(1, 0, "a", "", pol3), enq(2, 0, "a", "", pol3), enq(3, 0, "a", "", pol3), enq(4, 0, "a", "", pol3), enq(5, 0, "a", "", pol3),
		Op{Kind: OpStart, ID: 1, Attempt: 1}, Op{Kind: OpStart, ID: 2, Attempt: 1}, Op{Kind: OpSucceed, ID: 2, Attempt: 1},
		Op{Kind: OpFail, ID: 3, Error: "x"}, Op{Kind: OpCancel, ID: 4})
	if got, want := s.Counts(), (Counts{Pending: 1, Running: 1, Succeeded: 1, Failed: 1, Cancelled: 1}); got != want || got.Total() != 5 {
		t.Fatalf("Counts = %+v, want %+v", got, want)
	}
	names := []string{"pending", "running", "succeeded", "failed", "cancelled", "state(5)"}
	for i, want := range names {
		if got := JobState(i).String(); got != want {
			t.Errorf("JobState(%d) = %q, want %q", i, got, want)
		}
		if got := JobState(i).Finished(); got != (i >= 2 && i <= 4) {
			t.Errorf("JobState(%d).Finished() = %v", i, got)
		}
	}
}

func TestInterning(t *testing.T) {
	t.Parallel()
	s := newTestState()
	a, b := enq(1, 0, strings.Repeat("t", 8), "", pol3), enq(2, 0, strings.Repeat("t", 8), "", pol3)
	apply(t, s, a, b)
	j1, j2 := mustJob(t, s, 1), mustJob(t, s, 2)
	if j1.Spec == a.Spec {
		t.Fatal("Apply kept the caller's Spec instead of a copy")
	}
	if unsafe.StringData(j1.Spec.Target) != unsafe.StringData(j2.Spec.Target) {
		t.Fatal("equal targets are not shared")
	}
}

// TestEqualAndCheckFindDifferences makes sure the comparison and the
// invariant check used by the property test can fail.
func TestEqualAndCheckFindDifferences(t *testing.T) {
	t.Parallel()
	build := func() *State {
		s := newTestState()
		apply(t, s, enq(1, 0, "a", "k", pol3), enq(2, 0, "b", "", pol3), Op{Kind: OpStart, ID: 1, Attempt: 1},
			Op{Kind: OpRequeue, ID: 1, At: 5, Due: 9, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "e", Output: []byte("o")})
		return s
	}
	if ok, d := build().Equal(build()); !ok {
		t.Fatalf("equal states differ: %s", d)
	}
	mutations := []struct {
		name   string
		mutate func(s *State)
		want   string
	}{
		{"config", func(s *State) { s.cfg.Circuit.Probes = 9 }, "config"},
		{"next id", func(s *State) { s.nextID++ }, "next id"},
		{"counts", func(s *State) { s.counts.Failed++ }, "counts"},
		{"job count", func(s *State) { s.jobs = s.jobs[:1] }, "jobs"},
		{"due", func(s *State) { s.jobs[0].Due++ }, "times"},
		{"fails", func(s *State) { s.jobs[0].run().Fails++ }, "fails"},
		{"reason", func(s *State) { s.jobs[0].run().LastError = "other" }, "last error"},
		{"spec", func(s *State) { s.jobs[1].Spec = &Spec{Target: "c"} }, "spec"},
		{"history length", func(s *State) { s.jobs[0].run().Attempts = nil }, "attempts"},
		{"output", func(s *State) { s.jobs[0].Attempts()[0].Output = []byte("x") }, "attempt 1"},
		{"state", func(s *State) { s.jobs[1].State = Failed }, "state"},
		{"running", func(s *State) { s.running = append(s.running, s.jobs[1]) }, "running"},
		{"key", func(s *State) { s.keys["k"] = 2 }, "key"},
		{"key count", func(s *State) { s.keys["z"] = 2 }, "keys"},
		{"breaker", func(s *State) { s.breakers["a"] = retry.Breaker{Fails: []int64{6}} }, "breaker \"a\""},
		{"breaker count", func(s *State) { s.breakers["z"] = retry.Breaker{State: retry.Open} }, "breakers"},
	}
	for _, m := range mutations {
		s := build()
		m.mutate(s)
		if ok, d := build().Equal(s); ok || !strings.Contains(d, m.want) {
			t.Errorf("%s: Equal = %v, %q; want a difference mentioning %q", m.name, ok, d, m.want)
		}
	}
	breakages := []struct {
		name   string
		mutate func(s *State)
		want   string
	}{
		{"order", func(s *State) { s.jobs[0], s.jobs[1] = s.jobs[1], s.jobs[0] }, "out of order"},
		{"slot", func(s *State) {
			s.ids = []uint64{s.jobs[0].ID, s.jobs[1].ID}
			s.jobs[0], s.jobs[1] = s.jobs[1], s.jobs[0]
		}, "in the slot of id"},
		{"ids without holes", func(s *State) { s.ids = nil; s.holes = 1 }, "holes"},
		{"id past next", func(s *State) { s.nextID = 2 }, "out of order"},
		{"spec", func(s *State) { s.jobs[0].Spec = nil }, "no spec"},
		{"heap index", func(s *State) { s.jobs[0].index = 5 }, "index 5 is wrong"},
		{"pending outside the heap", func(s *State) { s.popPending(s.jobs[1]) }, "in heap false"},
		{"held and in the heap", func(s *State) { s.jobs[1].set(flagHeld, true) }, "in heap true, held true"},
		{"running outside the set", func(s *State) {
			s.popPending(s.jobs[1])
			s.jobs[1].State, s.counts = Running, Counts{Pending: 1, Running: 1}
		}, "not in the running set"},
		{"running at a wrong index", func(s *State) { s.jobs[1].State, s.counts = Running, Counts{Pending: 1, Running: 1} }, "(running): index"},
		{"finished but held", func(s *State) { s.popPending(s.jobs[1]); s.jobs[1].State = Failed; s.jobs[1].set(flagHeld, true) }, "failed but held"},
		{"counts", func(s *State) { s.counts.Pending++ }, "recount"},
		{"heap size", func(s *State) { s.q.def.wait.js = append(s.q.def.wait.js, s.jobs[0]) }, "in heaps 3"},
		{"running size", func(s *State) { s.running = append(s.running, s.jobs[0]) }, "running set 1"},
		{"heap order", func(s *State) { s.q.def.wait.js[0].Due = 100 }, "heap order"},
		{"key", func(s *State) { s.keys["k"] = 2 }, "maps to job 2"},
		{"key count", func(s *State) { s.keys["z"] = 2 }, "keys indexed"},
		{"zero breaker", func(s *State) { s.breakers["z"] = retry.Breaker{} }, "stored while zero"},
		{"history order", func(s *State) { s.jobs[0].Attempts()[0].N = 7 }, "out of order"},
		{"history size", func(s *State) { s.jobs[0].run().Attempts = make([]Attempt, MaxAttemptHistory+1) }, "keeps"},
		{"open attempt", func(s *State) {
			apply(t, s, Op{Kind: OpStart, ID: 2, Attempt: 1})
			s.jobs[1].Attempts()[0].Ended = true
		}, "not open"},
		{"fails", func(s *State) { s.jobs[0].run().Fails = -1 }, "fails"},
	}
	for _, b := range breakages {
		s := build()
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		b.mutate(s)
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: Check = %v; want an error mentioning %q", b.name, err, b.want)
		}
	}
}

// TestTargetLoad: TargetLoad and TargetLive count each target's pending
// (held ones included) and running jobs; a finished job is not counted.
func TestTargetLoad(t *testing.T) {
	t.Parallel()
	s := newTestState()
	apply(t, s, enq(1, 0, "a", "", pol3), enq(2, 0, "a", "", pol3), enq(3, 0, "b", "", pol3), enq(4, 0, "c", "", pol3),
		Op{Kind: OpStart, ID: 1, Attempt: 1}, Op{Kind: OpFail, ID: 4, Error: "x"})
	s.Hold(3)
	want := map[string]Counts{"a": {Pending: 1, Running: 1}, "b": {Pending: 1}}
	got := s.TargetLoad()
	if len(got) != len(want) {
		t.Fatalf("TargetLoad = %+v, want %+v", got, want)
	}
	for target, c := range want {
		if got[target] != c {
			t.Fatalf("TargetLoad[%q] = %+v, want %+v", target, got[target], c)
		}
	}
	for _, target := range []string{"a", "b", "c", "none"} {
		if p, r := s.TargetLive(target); p != want[target].Pending || r != want[target].Running {
			t.Fatalf("TargetLive(%q) = %d pending, %d running, want %+v", target, p, r, want[target])
		}
	}
	s.ReleaseHeld()
	if got := s.TargetLoad()["b"]; got != (Counts{Pending: 1}) {
		t.Fatalf("after release: %+v", got)
	}
}

func TestTargetsOrderAndStop(t *testing.T) {
	t.Parallel()
	s := newTestState()
	for i, target := range []string{"c", "a", "b"} {
		id := uint64(i + 1)
		apply(t, s, enq(id, 0, target, "", pol3), Op{Kind: OpStart, ID: id, Attempt: 1},
			Op{Kind: OpRequeue, ID: id, At: 5, Due: 5, Attempt: 1, Class: retry.Retryable, BreakerFailed: true})
	}
	var all, first []string
	s.Targets(func(target string, b retry.Breaker) bool {
		if !slices.Equal(b.Fails, []int64{5}) {
			t.Fatalf("breaker %q = %+v", target, b)
		}
		all = append(all, target)
		return true
	})
	s.Targets(func(target string, _ retry.Breaker) bool { first = append(first, target); return false })
	if !slices.Equal(all, []string{"a", "b", "c"}) || !slices.Equal(first, []string{"a"}) {
		t.Fatalf("Targets visited %v, then %v", all, first)
	}
	if _, ok := s.ByKey(""); ok {
		t.Fatal("the empty key is held")
	}
}

func TestSettleSaturatesDue(t *testing.T) {
	t.Parallel()
	s := newTestState()
	apply(t, s, enq(1, 0, "a", "", pol3), Op{Kind: OpStart, ID: 1, Attempt: 1})
	const end = int64(^uint64(0) >> 1)
	op := s.Settle(1, 1, retry.Retryable, 500, "e", nil, end-10, 0)
	if op.Kind != OpRequeue || op.Due != end {
		t.Fatalf("Settle near the end of time = %+v, want a retry at %d", op, end)
	}
}
