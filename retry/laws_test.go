package retry

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func genPolicy(t *rapid.T) Policy {
	base := rapid.Int64Range(0, 1<<40).Draw(t, "base")
	return Policy{
		Attempts:   rapid.IntRange(1, 50).Draw(t, "attempts"),
		BaseMS:     base,
		CapMS:      rapid.Int64Range(base, math.MaxInt64).Draw(t, "cap"),
		DeadlineMS: rapid.Int64Range(0, 1<<40).Draw(t, "deadline"),
	}
}

func genCircuit(t *rapid.T) Circuit {
	return Circuit{
		Threshold:  rapid.IntRange(1, 6).Draw(t, "threshold"),
		WindowMS:   rapid.Int64Range(0, 2000).Draw(t, "window"),
		CooldownMS: rapid.Int64Range(0, 2000).Draw(t, "cooldown"),
		Probes:     rapid.IntRange(1, 4).Draw(t, "probes"),
	}
}

// TestLawsBackoff checks delay_le_cap, the doubling, jitter_floor,
// jitter_ceiling and wait_le_cap for any valid policy.
func TestLawsBackoff(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		n := rapid.IntRange(0, 200).Draw(t, "n")
		r := rapid.Uint32().Draw(t, "r")
		d := Delay(p, n)
		if d < 0 || d > p.CapMS {
			t.Fatalf("Delay = %d outside [0, cap %d]", d, p.CapMS)
		}
		if next := Delay(p, n+1); next != d && next != min(2*d, p.CapMS) && !(d > p.CapMS-d && next == p.CapMS) {
			t.Fatalf("Delay(%d) = %d then Delay(%d) = %d: not a doubling capped at %d", n, d, n+1, next, p.CapMS)
		}
		j := Jitter(d, r)
		if j < d/2 || j > 2*(d/2) {
			t.Fatalf("Jitter(%d, %d) = %d outside [%d, %d]", d, r, j, d/2, 2*(d/2))
		}
		after := rapid.Int64Range(-1, math.MaxInt64).Draw(t, "after")
		if w := Wait(p, n, after, r); after >= 0 && w != after || after < 0 && (w < 0 || w > p.CapMS) {
			t.Fatalf("Wait(after %d) = %d: want the server's wait as is, or the backoff within [0, cap %d]", after, w, p.CapMS)
		}
	})
}

// TestLawsTrace drives a few jobs that share one breaker through random
// outcomes and times, and checks the budget and breaker laws on the
// way: attempts started ≤ Attempts and each admission takes exactly one
// attempt, a denial none (budget_step_exact, budget_bound); no admission at
// or after the deadline (deadline_denies); no wait planned past the budget
// or the deadline (plan_spent_stops, plan_late_stops); never more than
// Probes probes while half-open (probe_limit); a closed breaker never holds
// Threshold failures.
func TestLawsTrace(t *testing.T) {
	t.Parallel()
	type job struct {
		first, due    int64
		fails, starts int
		running, done bool
		budget        Budget
	}
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		c := genCircuit(t)
		now := rapid.Int64Range(0, 1<<40).Draw(t, "first")
		jobs := make([]job, rapid.IntRange(1, 4).Draw(t, "jobs"))
		for i := range jobs {
			jobs[i].first, jobs[i].due = now, now
		}
		var br Breaker
		steps := rapid.IntRange(1, 100).Draw(t, "steps")
		for range steps {
			now += rapid.Int64Range(0, 1500).Draw(t, "dt")
			j := &jobs[rapid.IntRange(0, len(jobs)-1).Draw(t, "job")]
			switch {
			case j.done:
				continue
			case j.running:
				class := Class(rapid.IntRange(int(Success), int(Unsafe)).Draw(t, "class"))
				br = br.Done(c, now, class.BreakerFailed())
				j.running = false
				w, stop := PlanAfter(class, rapid.Int64Range(-1, 5000).Draw(t, "after"), p, j.budget, j.fails, now, rapid.Uint32().Draw(t, "r"))
				if stop {
					j.done = true
					continue
				}
				if class != Retryable || j.budget.Left <= 0 || (j.budget.HasDeadline && j.budget.Deadline <= now+w) {
					t.Fatalf("planned a wait of %d after %v with budget %+v at %d", w, class, j.budget, now)
				}
				j.fails++
				j.due = now + w
			case j.due <= now:
				before := BudgetFor(p, j.fails, j.first)
				nbr, after, d := Admit(br, c, before, now)
				br = nbr
				switch d {
				case DenyNone:
					if before.HasDeadline && before.Deadline <= now {
						t.Fatalf("admitted at %d with deadline %d", now, before.Deadline)
					}
					if after.Left != before.Left-1 {
						t.Fatalf("admission took %d attempts, want 1", before.Left-after.Left)
					}
					j.starts++
					j.running, j.budget = true, after
				case DenyOpen:
					if after != before {
						t.Fatalf("denial changed the budget %+v → %+v", before, after)
					}
					j.due = br.NextAdmit(c, now)
					if j.due < now || (br.State == Open && j.due <= now) {
						t.Fatalf("deferred to %d at %d", j.due, now)
					}
				default:
					j.done = true
				}
			}
			if br.State == HalfOpen && br.Busy > c.Probes {
				t.Fatalf("half-open with %d probes busy, limit %d", br.Busy, c.Probes)
			}
			if br.State == Closed && len(br.Fails) >= c.Threshold {
				t.Fatalf("closed with %d failures, threshold %d", len(br.Fails), c.Threshold)
			}
			if j.starts > p.Attempts {
				t.Fatalf("started %d attempts, policy allows %d", j.starts, p.Attempts)
			}
		}
	})
}
