package state

import (
	"fmt"
	"math"

	"github.com/runlog/runlog/retry"
)

// The decisions below are pure: they read the state and return the op the
// engine should journal and then Apply; they change nothing. A zero Op
// (Kind 0) means there is nothing to journal.

// Admit decides what happens to the pending job id at now, when it is due
// and the engine has a slot for it (the seed's admission): OpStart of
// attempt Started+1 when the policy and the target's breaker admit it;
// OpDefer to when the breaker may admit (at least now+1) when the breaker
// refuses, counting no attempt; OpFail when the policy deadline has passed
// ("deadline passed: <last error>") or no attempt is left ("gave up after
// N attempts: <last error>"). It returns a zero Op when id is not pending.
func (s *State) Admit(id uint64, now int64) Op {
	j := s.job(id)
	if j == nil || j.State != Pending {
		return Op{}
	}
	c := s.cfg.Circuit
	b := retry.BudgetFor(j.Spec.Policy, j.Fails, j.FirstDue)
	br, _, deny := retry.Admit(s.breakers[j.Spec.Target], c, b, now)
	op := Op{ID: id, At: now}
	switch deny {
	case retry.DenyNone:
		op.Kind, op.Attempt = OpStart, j.Started+1
	case retry.DenyOpen:
		// At least 1 ms later: a half-open breaker with a zero cooldown
		// would otherwise defer the job to now, again and again.
		op.Kind, op.Due = OpDefer, max(br.NextAdmit(c, now), addSat(now, 1))
	case retry.DenyLate:
		op.Kind = OpFail
		if j.Fails == 0 && j.LastError == "" {
			op.Error = "deadline passed before the first attempt"
		} else {
			op.Error = withError("deadline passed", j.LastError)
		}
	default:
		op.Kind = OpFail
		op.Error = withError(fmt.Sprintf("gave up after %d attempts", j.Fails), j.LastError)
	}
	return op
}

// Settle decides what follows attempt `attempt` of job id, which ended at
// now with class (the seed's plan): OpSucceed; OpRetry at now + the wait
// (the server's afterMS capped at the policy's cap when afterMS ≥ 0, else
// the jittered backoff drawn with r); or OpFail with the reason:
// "permanent failure: <err>", "unsafe failure, not retried: <err>",
// "gave up after N attempts: <err>" when no attempt is left, "deadline
// passed: <err>" when the deadline falls at or before the next try.
// BreakerFailed is set for a retryable or unsafe failure. A class that is
// not one of the four counts as Unsafe. It returns a zero Op when the
// attempt is not open (unknown job or attempt, or already ended).
//
// The attempt of a job cancelled while it ran is still open: its op feeds
// the target's breaker and the history when applied, and nothing else.
func (s *State) Settle(id uint64, attempt uint32, class retry.Class, afterMS int64, errText string, output []byte, now int64, r uint32) Op {
	j := s.job(id)
	if j == nil {
		return Op{}
	}
	if a := j.attempt(attempt); a == nil || a.Ended {
		return Op{}
	}
	if !class.Valid() {
		class = retry.Unsafe
	}
	op := Op{ID: id, At: now, Attempt: attempt, Class: class, BreakerFailed: class.BreakerFailed()}
	if len(output) > 0 {
		op.Output = output
	}
	p := j.Spec.Policy
	// The budget admission left when this attempt started: the failures
	// have not changed since.
	b := retry.BudgetFor(p, j.Fails, j.FirstDue)
	b.Left = max(b.Left-1, 0)
	wait, stop := retry.PlanAfter(class, afterMS, p, b, j.Fails, now, r)
	switch {
	case class == retry.Success:
		op.Kind = OpSucceed
	case !stop:
		op.Kind, op.Due, op.Error = OpRetry, addSat(now, wait), errText
	case class == retry.Permanent:
		op.Kind, op.Error = OpFail, withError("permanent failure", errText)
	case class == retry.Unsafe:
		op.Kind, op.Error = OpFail, withError("unsafe failure, not retried", errText)
	case b.Left == 0:
		op.Kind, op.Error = OpFail, withError(fmt.Sprintf("gave up after %d attempts", j.Fails+1), errText)
	default:
		op.Kind, op.Error = OpFail, withError("deadline passed", errText)
	}
	return op
}

// Orphan decides what happens to the job id found running when the journal
// is opened (its attempt died with the process, seed SPEC §1.3): OpRetry
// due at once (at its old due time, so that it goes before the jobs that
// queued behind it; the seed used now), counting one failure of the job, with class 0 (no outcome is
// known) and the error "interrupted: the process stopped during attempt N".
// A crash is not the target's fault, so it does not count against the
// breaker; a half-open probe slot the attempt held is released
// (retry.Breaker.Release), so the breaker cannot stay stuck half-open. When that used the
// last attempt, the next admission fails the job as spent. It returns a
// zero Op when id is not running.
func (s *State) Orphan(id uint64, now int64) Op {
	j := s.job(id)
	if j == nil || j.State != Running {
		return Op{}
	}
	// Due again at its old due time (it was due already, and the jobs
	// that queued behind it should not overtake work a crash cut short);
	// never later than now.
	return Op{
		Kind: OpRetry, ID: id, At: now, Due: min(j.Due, now), Attempt: j.Started,
		Class: 0, BreakerFailed: false, // no outcome is known: see Breaker.Release
		Error: fmt.Sprintf("interrupted: the process stopped during attempt %d", j.Started),
	}
}

func withError(reason, err string) string {
	if err == "" {
		return reason
	}
	return reason + ": " + err
}

// addSat returns a + b for b ≥ 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
