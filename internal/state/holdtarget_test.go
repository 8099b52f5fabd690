package state

import (
	"slices"
	"testing"

	"github.com/runlog/runlog/retry"
)

// TestHeldTargetBenched: a target at its per-target limit with a backlog
// of due jobs is walked once, not once per claim: each job is held once,
// when a claim first offers it (it is benched), and a later claim offers
// the target's first benched job only, where putting the held jobs back
// after each claim made every claim hold the whole backlog again (n
// claims of n jobs). The starts keep claim order, across the
// bench and the queue (the other target's jobs interleave by due time),
// and a job deferred off the bench waits in its queue again.
func TestHeldTargetBenched(t *testing.T) {
	s := New(Config{})
	pol := retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}
	const n = 1000
	for i := range n {
		target := "slow"
		if i%10 == 9 {
			target = "fast"
		}
		apply(t, s, Op{Kind: OpEnqueue, ID: s.NextID(), At: 1, Due: int64(1 + i), Spec: &Spec{Kind: "k", Target: target, Policy: pol}})
	}
	now := int64(n + 10)
	var started []uint64
	claim := func() int {
		load := s.TargetLoad() // the planner counts the claim's own starts
		p := NewPlanner(s.Circuit(), now, 4, 2, func(target string) int { return load[target].Running })
		s.Claim(&p, now, func(j *Job, op Op) {
			s.Apply(&op)
			if op.Kind == OpStart {
				started = append(started, j.ID)
			}
		})
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		return p.Held()
	}
	// Jobs 1 and 2 start, then the slow target is held; jobs 10, 20 of
	// the fast one start between its held ones, up to the claim's 4.
	if held := claim(); held != 16 || !slices.Equal(started, []uint64{1, 2, 10, 20}) {
		t.Fatalf("first claim started %v and held %d jobs, want [1 2 10 20] and the 16 between", started, held)
	}
	// Defer a benched job: it leaves the bench for its queue's waiting heap.
	apply(t, s, Op{Kind: OpDefer, ID: 3, At: now, Due: now + 1_000_000})
	if j, _ := s.Job(3); j.heap() != inWait {
		t.Fatalf("deferred benched job 3 is in heap %d, want the waiting heap", j.heap())
	}
	claims, heldTotal := 1, 16
	for s.Counts().Running > 0 {
		for _, id := range s.Running() {
			j, _ := s.Job(id)
			apply(t, s, Op{Kind: OpSucceed, ID: id, At: now, Attempt: j.Started()})
		}
		now++
		held := claim()
		claims++
		heldTotal += held
	}
	// Each slow job is held once when first offered, and each claim
	// holds the first benched job once more: at most 900 + claims.
	if heldTotal > 900+claims {
		t.Fatalf("%d claims held %d jobs in all, want at most %d: a benched job was walked again", claims, heldTotal, 900+claims)
	}
	if len(started) != n-1 || s.Counts().Pending != 1 {
		t.Fatalf("%d started, %d pending; want %d started, job 3 pending", len(started), s.Counts().Pending, n-1)
	}
	// Claim order: the starts of each target ascend.
	var slow, fast []uint64
	for _, id := range started {
		if j, _ := s.Job(id); j.Spec.Target == "slow" {
			slow = append(slow, id)
		} else {
			fast = append(fast, id)
		}
	}
	if !slices.IsSorted(slow) || !slices.IsSorted(fast) {
		t.Fatal("a target's starts are out of claim order")
	}
	if len(fast) != 100 || fast[0] != 10 {
		t.Fatalf("fast target: %d starts from %v, want 100 from job 10", len(fast), fast[:1])
	}
	if _, ok := s.PeekDue(now + 2_000_000); !ok {
		t.Fatal("the deferred job is not offered once due")
	}
	if len(s.benched) != 0 {
		t.Fatalf("%d targets keep benches after the backlog drained", len(s.benched))
	}
	t.Logf("%d claims held %d jobs after the first", claims, heldTotal)
}

// TestBenchClockStepBack: after the clock steps back, a benched job no
// longer due is not offered; it waits in its queue until due again.
func TestBenchClockStepBack(t *testing.T) {
	s := New(Config{})
	pol := retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}
	for i := range 3 {
		apply(t, s, Op{Kind: OpEnqueue, ID: s.NextID(), At: 1, Due: int64(100 + 100*i), Spec: &Spec{Kind: "k", Target: "t", Policy: pol}})
	}
	p := NewPlanner(s.Circuit(), 1000, 4, 1, nil)
	s.Claim(&p, 1000, func(_ *Job, op Op) { s.Apply(&op) })
	if j, _ := s.Job(3); j.heap() != inBench {
		t.Fatalf("job 3 is in heap %d, want benched", j.heap())
	}
	apply(t, s, Op{Kind: OpSucceed, ID: 1, At: 1000, Attempt: 1})
	if j, ok := s.PeekDue(150); ok {
		t.Fatalf("PeekDue(150) = job %d, want none (jobs 2 and 3 are due at 200 and 300)", j.ID)
	}
	for _, id := range []uint64{2, 3} {
		if j, _ := s.Job(id); j.heap() != inWait {
			t.Fatalf("job %d, no longer due, is in heap %d, want the waiting heap", id, j.heap())
		}
	}
	if due, ok := s.NextDue(); !ok || due != 200 {
		t.Fatalf("NextDue = %d, %v; want 200", due, ok)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
