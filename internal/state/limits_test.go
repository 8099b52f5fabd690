package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/runlog/runlog/retry"
)

// claimAll runs one claim at now over s with the flows, applying each
// planned op, and returns them.
func claimAll(s *State, now int64, max int) []Op {
	p := NewPlanner(s.Circuit(), now, max, 0, nil)
	return claimWith(s, &p, now)
}

// claimWith runs the claim of p at now over s (State.Claim, with the flows
// if s has any), applying each planned op, and returns them.
func claimWith(s *State, p *Planner, now int64) []Op {
	if s.HasFlows() {
		p.WithFlows(s.Flow)
	}
	var ops []Op
	s.Claim(p, now, func(_ *Job, op Op) {
		s.Apply(&op)
		ops = append(ops, op)
	})
	return ops
}

func enqueueN(s *State, target string, n int, at int64) {
	for range n {
		id := s.NextID()
		s.Apply(&Op{Kind: OpEnqueue, ID: id, At: at, Due: at, Spec: &Spec{Kind: "k", Target: target, Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}})
	}
}

// TestFlowLimit: a limit set at run time (OpLimit) lets the burst start,
// defers the rest of a backlog each to its own future token (no attempt
// counted), starts them as their tokens come, and leaves other targets
// alone; removing it removes the flow.
func TestFlowLimit(t *testing.T) {
	t.Parallel()
	s := New(Config{Circuit: retry.DefaultCircuit()})
	s.Apply(&Op{Kind: OpLimit, At: 1000, Target: "t", Limit: retry.Limit{RateMilli: 100000, Burst: 3}})
	enqueueN(s, "t", 8, 1000)
	enqueueN(s, "free", 2, 1000)
	ops := claimAll(s, 1000, 100)
	var starts, dues []int64
	for _, op := range ops {
		j, _ := s.Job(op.ID)
		switch {
		case op.Kind == OpStart:
			starts = append(starts, int64(op.ID))
		case op.Kind == OpDefer && j.Spec.Target == "t":
			dues = append(dues, op.Due)
			if j.Fails() != 0 || j.Started() != 0 {
				t.Fatalf("deferred job %d counted an attempt", op.ID)
			}
		default:
			t.Fatalf("unexpected %+v", op)
		}
	}
	// 3 of t (the burst) and both of free start; 5 of t are spread over
	// the next 5 tokens, 10 ms apart.
	if len(starts) != 5 {
		t.Fatalf("started %v, want t's burst of 3 and both free jobs", starts)
	}
	want := []int64{1010, 1020, 1030, 1040, 1050}
	if len(dues) != len(want) {
		t.Fatalf("deferred to %v, want %v", dues, want)
	}
	for i := range want {
		if dues[i] != want[i] {
			t.Fatalf("deferred to %v, want %v", dues, want)
		}
	}
	fl, lim := s.Flow("t")
	if lim.RateMilli != 100000 || fl.Bucket.Tokens(lim, 1000) != 0 || fl.Reserved != 1050000 {
		t.Fatalf("flow %+v under %+v", fl, lim)
	}
	// Each deferred job starts when its token has come.
	for _, at := range want {
		got := claimAll(s, at, 100)
		if len(got) != 1 || got[0].Kind != OpStart {
			t.Fatalf("at %d: %+v, want one start", at, got)
		}
	}
	// Removed: nothing is kept once the bucket is full again.
	s.Apply(&Op{Kind: OpLimit, At: 2000, Target: "t"})
	if fl, lim := s.Flow("t"); !fl.IsZero() || !lim.IsZero() {
		t.Fatalf("after removal: flow %+v, limit %+v", fl, lim)
	}
}

// TestFlowLimitConfig: a configured default limits every target; OpLimit
// with rate 0 lifts it for one target (kept as an explicit "none"), and
// an expire drops flows whose bucket has refilled.
func TestFlowLimitConfig(t *testing.T) {
	t.Parallel()
	cfg := Config{Circuit: retry.DefaultCircuit(), Limits: &LimitConfig{Default: retry.Limit{RateMilli: 1000, Burst: 1}}}
	s := New(cfg)
	enqueueN(s, "a", 2, 0)
	enqueueN(s, "b", 2, 0)
	ops := claimAll(s, 0, 10)
	if n := countKind(ops, OpStart); n != 2 {
		t.Fatalf("%d starts under a default of 1/s burst 1 for two targets, want 2", n)
	}
	s.Apply(&Op{Kind: OpLimit, At: 0, Target: "b"})
	if fl, lim := s.Flow("b"); !fl.LimitSet || !lim.IsZero() {
		t.Fatalf("b after rate 0: flow %+v, limit %+v; want an explicit none", fl, lim)
	}
	s.Apply(&Op{Kind: OpExpire, At: 5000, Retention: &Retention{}})
	if _, ok := s.flows["a"]; ok {
		t.Fatalf("a's full bucket still kept after an expire: %+v", s.flows)
	}
	if _, ok := s.flows["b"]; !ok {
		t.Fatal("b's explicit none was dropped")
	}
}

func countKind(ops []Op, k Kind) int {
	n := 0
	for _, op := range ops {
		if op.Kind == k {
			n++
		}
	}
	return n
}

// TestFlowHold: a retryable outcome with a server wait holds its whole
// target: another due job of it is deferred to the hold's end (no attempt
// counted), other targets and the unnamed target are not held.
func TestFlowHold(t *testing.T) {
	t.Parallel()
	s := New(Config{Circuit: retry.DefaultCircuit()})
	enqueueN(s, "t", 1, 0)
	enqueueN(s, "", 1, 0)
	claimAll(s, 0, 10)
	enqueueN(s, "t", 1, 0)
	enqueueN(s, "u", 1, 0)
	enqueueN(s, "", 1, 0)
	for _, id := range []uint64{1, 2} {
		op := s.Settle(id, 1, retry.Retryable, 300_000, "429", nil, 100, 0)
		if op.HoldUntil != 300_100 || op.Due != 300_100 {
			t.Fatalf("settle of job %d: %+v, want a requeue held until 300100", id, op)
		}
		s.Apply(&op)
	}
	if fl, _ := s.Flow("t"); fl.Hold != 300_100 {
		t.Fatalf("t's flow %+v, want a hold until 300100", fl)
	}
	if fl, _ := s.Flow(""); !fl.IsZero() {
		t.Fatalf("the unnamed target got a flow %+v", fl)
	}
	ops := claimAll(s, 200, 10)
	got := map[uint64]Op{}
	for _, op := range ops {
		got[op.ID] = op
	}
	if op := got[3]; op.Kind != OpDefer || op.Due != 300_100 {
		t.Fatalf("t's other job: %+v, want deferred to the hold's end", op)
	}
	if got[4].Kind != OpStart || got[5].Kind != OpStart {
		t.Fatalf("u's and the unnamed job: %+v %+v, want started", got[4], got[5])
	}
	if j, _ := s.Job(3); j.Started() != 0 || j.Fails() != 0 {
		t.Fatalf("held job counted an attempt: %+v", j)
	}
	// The hold ends at its time and is then forgotten.
	s.Apply(&Op{Kind: OpExpire, At: 300_100, Retention: &Retention{}})
	if fl, _ := s.Flow("t"); !fl.IsZero() {
		t.Fatalf("flow %+v after the hold ended", fl)
	}
}

// TestFlowRamp: after an open breaker closes, its target runs 1 attempt at
// once, then 2, then 4 (one more per success), the rest held, until the
// window reaches SlowStart; a reopening ends the ramp.
func TestFlowRamp(t *testing.T) {
	t.Parallel()
	c := retry.Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 100, Probes: 1, SlowStart: 8}
	s := New(Config{Circuit: c})
	enqueueN(s, "t", 40, 0)
	ops := claimAll(s, 0, 1)
	s.Apply(ptr(s.Settle(ops[0].ID, 1, retry.Retryable, -1, "down", nil, 10, 0))) // opens until 110
	if br := s.Breaker("t"); br.State != retry.Open {
		t.Fatalf("breaker %+v, want open", br)
	}
	ops = claimAll(s, 110, 100) // the probe, the rest deferred
	var probe uint64
	for _, op := range ops {
		if op.Kind == OpStart {
			probe = op.ID
		}
	}
	if probe == 0 || countKind(ops, OpStart) != 1 {
		t.Fatalf("half-open claim: %d starts, want the one probe", countKind(ops, OpStart))
	}
	s.Apply(ptr(s.Settle(probe, 1, retry.Success, -1, "", nil, 120, 0)))
	if fl, _ := s.Flow("t"); fl.Ramp != (retry.Ramp{Window: 1}) {
		t.Fatalf("after the breaker closed: flow %+v, want a ramp of window 1", fl)
	}
	now := int64(210) // every deferred job is due (a full half-open breaker defers by its cooldown)
	var curve []int
	for round := 0; round < 10; round++ {
		ops := claimAll(s, now, 100)
		var started []Op
		for _, op := range ops {
			if op.Kind == OpStart {
				started = append(started, op)
			}
		}
		curve = append(curve, len(started))
		for _, op := range started {
			s.Apply(ptr(s.Settle(op.ID, op.Attempt, retry.Success, -1, "", nil, now+1, 0)))
		}
		now += 10
		if fl, _ := s.Flow("t"); fl.Ramp.IsZero() {
			break
		}
	}
	want := []int{1, 2, 4}
	if len(curve) != len(want) {
		t.Fatalf("attempts per round %v, want %v then the ramp over", curve, want)
	}
	for i := range want {
		if curve[i] != want[i] {
			t.Fatalf("attempts per round %v, want %v", curve, want)
		}
	}
}

// TestFlowRampSnooze: a snoozed attempt frees its place in the ramp, and
// widens nothing: with every place taken by attempts that snoozed, the
// target's due jobs would otherwise be held for good.
func TestFlowRampSnooze(t *testing.T) {
	t.Parallel()
	c := retry.Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 100, Probes: 1, SlowStart: 8}
	s := New(Config{Circuit: c})
	enqueueN(s, "t", 5, 0)
	ops := claimAll(s, 0, 1)
	s.Apply(ptr(s.Settle(ops[0].ID, 1, retry.Retryable, -1, "down", nil, 10, 0))) // opens until 110
	ops = claimAll(s, 110, 100)
	for _, op := range ops {
		if op.Kind == OpStart {
			s.Apply(ptr(s.Settle(op.ID, op.Attempt, retry.Success, -1, "", nil, 120, 0)))
		}
	}
	now := int64(210)
	for round := range 3 {
		ops := claimAll(s, now, 100)
		if n := countKind(ops, OpStart); n != 1 {
			t.Fatalf("round %d: %d starts in a ramp of window 1, want 1 (flow %+v)", round, n, first(s.Flow("t")))
		}
		for _, op := range ops {
			if op.Kind == OpStart {
				s.Apply(ptr(SnoozeJob(op.ID, op.Attempt, 0, now+1)))
			}
		}
		if fl, _ := s.Flow("t"); fl.Ramp != (retry.Ramp{Window: 1}) {
			t.Fatalf("round %d: after the snooze the flow is %+v, want a ramp of window 1, none busy", round, fl)
		}
		now += 10
	}
}

func first[A, B any](a A, _ B) A { return a }

func ptr(op Op) *Op { return &op }

// TestFlowSnapshot: flows go into section 2 of a version 3 snapshot and
// read back equal; a cut or corrupt section is refused.
func TestFlowSnapshot(t *testing.T) {
	t.Parallel()
	s := flowState()
	body := s.AppendSnapshot(nil)
	if body[0] != 3 {
		t.Fatalf("a state with flows is written in version %d, want 3", body[0])
	}
	r, err := FromSnapshot(s.cfg, body)
	if err != nil {
		t.Fatal(err)
	}
	if ok, diff := s.Equal(r); !ok {
		t.Fatal(diff)
	}
	for n := range len(body) {
		if _, err := FromSnapshot(s.cfg, body[:n]); err == nil {
			t.Fatalf("a snapshot cut at %d of %d bytes was accepted", n, len(body))
		}
	}
	sec, _ := s.flowSection()
	bad := append([]byte(nil), sec.body...)
	bad[1+1+len("a")] = 4 // the first flow's flags byte
	d := &decoder{b: bad}
	New(s.cfg).readFlows(d)
	if !errors.Is(d.err, ErrNewerFormat) || !strings.Contains(d.err.Error(), "unknown flags") {
		t.Fatalf("unknown flow flags: %v", d.err)
	}
}

// flowState is a state with a limited target, a held one and a ramping one.
func flowState() *State {
	s := New(Config{Circuit: retry.Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 100, Probes: 1, SlowStart: 4}})
	s.Apply(&Op{Kind: OpLimit, At: 0, Target: "a", Limit: retry.Limit{RateMilli: 500, Burst: 2}})
	enqueueN(s, "a", 3, 0)
	enqueueN(s, "b", 1, 0)
	claimAll(s, 0, 10)
	s.Apply(ptr(s.Settle(4, 1, retry.Retryable, 5000, "503", nil, 1, 0)))
	return s
}
