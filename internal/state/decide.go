package state

import (
	"fmt"
	"math"

	"github.com/runlog/runlog/retry"
)

// The decisions below are pure: they read the state and return the op the
// engine should journal and then Apply; they change nothing. A zero Op
// (Kind 0) means there is nothing to journal.
//
// Each method looks the job up and calls the per-job decision (AdmitJob,
// SettleJob, OrphanJob) on its Facts: the PostgreSQL store, which keeps jobs
// in rows, calls the same functions on the facts of a row, so both stores
// decide by one rule.

// Facts are what the per-job decisions read of a job.
type Facts struct {
	ID        uint64
	Policy    retry.Policy
	Due       int64 // the due time of the job (of its interrupted attempt, for OrphanJob)
	FirstDue  int64 // the due time at enqueue (or the last retry by hand): the policy deadline counts from it
	Fails     int
	Started   uint32 // attempts ever started
	LastError string
	Queue     string // the job's queue ("" the default one)
}

// FactsOf returns the facts of job j.
func FactsOf(j *Job) Facts {
	return Facts{ID: j.ID, Policy: j.Spec.Policy, Due: j.Due, FirstDue: j.FirstDue(), Fails: j.Fails(), Started: j.Started(), LastError: j.LastError(), Queue: j.Spec.Queue}
}

// Admit decides what happens to the pending job id at now, when it is due
// and the engine has a slot for it: AdmitJob under its target's breaker. It
// returns a zero Op when id is not pending.
func (s *State) Admit(id uint64, now int64) Op {
	j := s.job(id)
	if j == nil || j.State != Pending {
		return Op{}
	}
	return AdmitJob(FactsOf(j), s.breakers[j.Spec.Target], s.cfg.Circuit, now)
}

// AdmitJob decides what happens to the pending job f at now, when it is
// due and the engine has a slot for it, under its
// target's breaker br: OpStart of attempt Started+1 when the policy and
// the breaker admit it; OpDefer to when the breaker may admit (at least
// now+1) when the breaker refuses, counting no attempt; OpFail when the
// policy deadline has passed ("deadline passed: <last error>") or no
// attempt is left ("gave up after N attempts: <last error>").
func AdmitJob(f Facts, br retry.Breaker, c retry.Circuit, now int64) Op {
	b := retry.BudgetFor(f.Policy, f.Fails, f.FirstDue)
	nb, _, deny := retry.Admit(br, c, b, now)
	op := Op{ID: f.ID, At: now}
	switch deny {
	case retry.DenyNone:
		op.Kind, op.Attempt = OpStart, f.Started+1
	case retry.DenyOpen:
		// At least 1 ms later: a half-open breaker with a zero cooldown
		// would otherwise defer the job to now, again and again.
		op.Kind, op.Due = OpDefer, max(nb.NextAdmit(c, now), addSat(now, 1))
	case retry.DenyLate:
		op.Kind = OpFail
		if f.Fails == 0 && f.LastError == "" {
			op.Error = "deadline passed before the first attempt"
		} else {
			op.Error = withError("deadline passed", f.LastError)
		}
	default:
		op.Kind = OpFail
		op.Error = withError(fmt.Sprintf("gave up after %d attempts", f.Fails), f.LastError)
	}
	return op
}

// Settle decides what follows attempt `attempt` of job id, which ended at
// now with class: SettleJob. It returns a zero Op when the attempt is not
// open (unknown job or attempt, or already ended).
//
// The attempt of a job cancelled while it ran is still open: its op feeds
// the target's breaker and the history when applied, and nothing else.
func (s *State) Settle(id uint64, attempt uint32, class retry.Class, afterMS int64, errText string, output []byte, now int64, r uint32) Op {
	j := s.job(id)
	if j == nil {
		return Op{}
	}
	if !j.AttemptOpen(attempt) {
		return Op{}
	}
	return SettleJob(FactsOf(j), attempt, class, afterMS, errText, output, now, r)
}

// SettleJob decides what follows the open attempt `attempt` of job f, which
// ended at now with class: OpSucceed; OpRequeue at now +
// the wait (the server's afterMS when afterMS ≥ 0, which the engine
// bounds, else the jittered backoff drawn with r); or OpFail with the reason:
// "permanent failure: <err>", "unsafe failure, not retried: <err>", "gave
// up after N attempts: <err>" when no attempt is left, "deadline passed:
// <err>" when the deadline falls at or before the next try. BreakerFailed
// is set for a retryable or unsafe failure; HoldUntil is now + afterMS for
// a retryable failure with a server wait, which holds its whole target
// until then, whatever becomes of the job. A class that is not one of the
// four counts as Unsafe. The caller checks that the attempt is open.
func SettleJob(f Facts, attempt uint32, class retry.Class, afterMS int64, errText string, output []byte, now int64, r uint32) Op {
	if !class.Valid() {
		class = retry.Unsafe
	}
	op := Op{ID: f.ID, At: now, Attempt: attempt, Class: class, BreakerFailed: class.BreakerFailed()}
	if len(output) > 0 {
		op.Output = output
	}
	p := f.Policy
	// The budget admission left when this attempt started: the failures
	// have not changed since.
	b := retry.BudgetFor(p, f.Fails, f.FirstDue)
	b.Left = max(b.Left-1, 0)
	wait, stop := retry.PlanAfter(class, afterMS, p, b, f.Fails, now, r)
	if class == retry.Retryable && afterMS >= 0 {
		// The target asked to wait: no job of it starts before (FlowAfter).
		op.HoldUntil = max(addSat(now, afterMS), 1)
	}
	switch {
	case class == retry.Success:
		op.Kind = OpSucceed
	case !stop:
		op.Kind, op.Due, op.Error = OpRequeue, addSat(now, wait), errText
	case class == retry.Permanent:
		op.Kind, op.Error = OpFail, withError("permanent failure", errText)
	case class == retry.Unsafe:
		op.Kind, op.Error = OpFail, withError("unsafe failure, not retried", errText)
	case b.Left == 0:
		op.Kind, op.Error = OpFail, withError(fmt.Sprintf("gave up after %d attempts", f.Fails+1), errText)
	default:
		op.Kind, op.Error = OpFail, withError("deadline passed", errText)
	}
	return op
}

// SnoozedError is the error text of a snoozed attempt in its job's
// history.
const SnoozedError = "snoozed"

// SnoozeJob returns the op that ends the open attempt `attempt` of job
// id, whose handler asked, at now, to run the job again afterMS ms later
// (0 or more; a negative wait counts as 0): OpSnooze due at now + afterMS.
// The caller checks that the attempt is open.
func SnoozeJob(id uint64, attempt uint32, afterMS, now int64) Op {
	return Op{Kind: OpSnooze, ID: id, At: now, Attempt: attempt, Due: addSat(now, max(afterMS, 0))}
}

// Snooze is SnoozeJob for job id of the state; a zero Op when the attempt
// is not open.
func (s *State) Snooze(id uint64, attempt uint32, afterMS, now int64) Op {
	j := s.job(id)
	if j == nil || !j.AttemptOpen(attempt) {
		return Op{}
	}
	return SnoozeJob(id, attempt, afterMS, now)
}

// Orphan decides what happens to the job id found running when the journal
// is opened (its attempt died with the process): OrphanJob
// with the error "interrupted: the process stopped during attempt N". It
// returns a zero Op when id is not running.
func (s *State) Orphan(id uint64, now int64) Op {
	j := s.job(id)
	if j == nil || j.State != Running {
		return Op{}
	}
	return OrphanJob(FactsOf(j), now, "the process stopped")
}

// OrphanJob decides what happens to the running job f whose attempt died
// without an outcome (its process stopped, or its node stopped renewing
// the lease; why says which): OpRequeue due at once (at its old due time, so
// that it goes before the jobs that queued behind it),
// counting one failure of the job, with class 0 (no outcome is known) and
// the error "interrupted: <why> during attempt N". A crash is not the
// target's fault, so it does not count against the breaker; a half-open
// probe slot the attempt held is released (BreakerAfter), so the breaker
// cannot stay stuck half-open. When that used the last attempt, the next
// admission fails the job as spent.
func OrphanJob(f Facts, now int64, why string) Op {
	// Due again at its old due time (it was due already, and the jobs
	// that queued behind it should not overtake work a crash cut short);
	// never later than now.
	return Op{
		Kind: OpRequeue, ID: f.ID, At: now, Due: min(f.Due, now), Attempt: f.Started,
		Class: 0, BreakerFailed: false, // no outcome is known: see Breaker.Release
		Error: fmt.Sprintf("interrupted: %s during attempt %d", why, f.Started),
	}
}

// BreakerAfter returns the target's breaker br after op is applied: a start
// takes an admission (a half-open probe slot), an outcome of an attempt
// feeds the breaker (Done), and an interrupted attempt (class 0) only
// releases the probe slot it held. Other ops leave br as it is. The caller
// applies an outcome only to an open attempt.
func BreakerAfter(br retry.Breaker, c retry.Circuit, op *Op) retry.Breaker {
	switch {
	case op.Kind == OpStart:
		br, _ = br.Admit(c, op.At)
	case op.Kind == OpSnooze:
		br = br.Release()
	case op.Kind.outcome() && op.Attempt != 0:
		if op.Class == 0 {
			br = br.Release()
		} else {
			br = br.Done(c, op.At, op.BreakerFailed)
		}
	}
	return br
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
