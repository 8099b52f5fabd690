package state

import (
	"testing"

	"github.com/runlog/runlog/retry"
)

// TestPlanner: the claim rule on its own. Starts stop at Max; a target
// at its per-target limit (attempts running before the claim plus the
// claim's own starts) has its jobs held, which counts neither as a start
// nor as a decision; deferrals and failures stop the claim at 4096.
func TestPlanner(t *testing.T) {
	t.Parallel()
	c := retry.Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 1000, Probes: 1}
	pol := retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}
	f := func(id uint64) Facts { return Facts{ID: id, Policy: pol, Due: 100, FirstDue: 100} }
	running := map[string]int{"a": 1}
	p := NewPlanner(c, 100, 3, 2, func(target string) int { return running[target] })
	var got []string
	for i, target := range []string{"a", "a", "b", "a", "b", "b"} {
		op, v := p.Plan(f(uint64(i+1)), target, retry.Breaker{})
		switch v {
		case Planned:
			if op.Kind != OpStart || op.ID != uint64(i+1) || op.Attempt != 1 || op.At != 100 {
				t.Fatalf("job %d: planned %+v, want its start", i+1, op)
			}
			got = append(got, "start "+target)
		case Held:
			got = append(got, "held "+target)
		case Stopped:
			got = append(got, "stop")
		}
	}
	want := []string{"start a", "held a", "start b", "held a", "start b", "stop"}
	if len(got) != len(want) {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("verdicts %v, want %v", got, want)
		}
	}
	if p.Starts() != 3 || p.Held() != 2 || !p.Done() {
		t.Errorf("starts %d, held %d, done %v; want 3, 2, true", p.Starts(), p.Held(), p.Done())
	}

	open, _ := retry.Breaker{}.Admit(c, 0)
	open = open.Done(c, 50, true) // one failure opens it until 1050
	p = NewPlanner(c, 100, 10, 0, nil)
	for i := range maxDecisionsPerClaim {
		op, v := p.Plan(f(uint64(i+1)), "down", open)
		if v != Planned || op.Kind != OpDefer || op.Due != 1050 {
			t.Fatalf("decision %d behind an open breaker: %+v %v, want a defer to 1050", i+1, op, v)
		}
	}
	if _, v := p.Plan(f(1_000_000), "up", retry.Breaker{}); v != Stopped {
		t.Errorf("after %d deferrals a job of a healthy target got %v, want Stopped", maxDecisionsPerClaim, v)
	}
}

// TestPlannerRampHoldsTarget: a slow start whose window is full holds its
// whole target, before the breaker's decision: a job past its deadline is
// held, not failed, so that a job held once means every later job of its
// target is held in the claim (the PostgreSQL claim then selects none of
// its rows again); with room in the window the same job fails.
func TestPlannerRampHoldsTarget(t *testing.T) {
	t.Parallel()
	c := retry.Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 1000, Probes: 1, SlowStart: 8}
	pol := retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1, DeadlineMS: 50}
	late := Facts{ID: 1, Policy: pol, Due: 100, FirstDue: 0} // its deadline (50) has passed at 100
	for _, tc := range []struct {
		ramp retry.Ramp
		want Verdict
		kind Kind
	}{
		{retry.Ramp{Window: 2, Busy: 2}, Held, 0},
		{retry.Ramp{Window: 2, Busy: 1}, Planned, OpFail},
		{retry.Ramp{}, Planned, OpFail},
	} {
		p := NewPlanner(c, 100, 10, 0, nil)
		p.WithFlows(func(string) (Flow, retry.Limit) { return Flow{Ramp: tc.ramp}, retry.Limit{} })
		op, v := p.Plan(late, "t", retry.Breaker{})
		if v != tc.want || op.Kind != tc.kind {
			t.Errorf("ramp %+v: %v %+v, want %v of kind %v", tc.ramp, v, op, tc.want, tc.kind)
		}
	}
}
