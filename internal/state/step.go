package state

import "github.com/runlog/runlog/retry"

// Change is what Step did to one job: the upkeep a store does around it
// (State.Apply moves the job between its pending heap and its running set
// and recounts; the PostgreSQL store writes the row's new columns).
type Change struct {
	// Applied is false when op did not fit the job and changed nothing.
	Applied bool
	// From and To are the job's state before and after.
	From, To JobState
	// Started: op began an attempt, appended to the job's Attempts (the
	// oldest dropped beyond MaxAttemptHistory).
	Started bool
	// Fed: op fed the target's breaker (BreakerAfter): it began an attempt
	// or ended an open one.
	Fed bool
}

// Step applies op to job j and its target's breaker *br: the per-job part
// of State.Apply for OpStart, OpDefer, OpSnooze and the outcome ops
// (OpSucceed, OpFail, OpRequeue), which both stores run (the embedded store through
// Apply, the PostgreSQL store on the rows it reads). Other kinds change
// nothing. The rules:
//
//   - OpStart begins attempt op.Attempt of a pending job only if it is
//     Started+1: the job runs, its breaker takes an admission even if it
//     would now refuse (the journal is the truth on replay).
//   - OpDefer moves a pending job to op.Due.
//   - OpSnooze ends an open attempt like an outcome with no class (the
//     breaker only releases a probe slot the attempt held; the job's
//     failures do not change) and makes the job pending at op.Due.
//   - An outcome with Attempt 0 is admission failing a pending job.
//   - An outcome of an attempt ends it only while it is open (AttemptOpen):
//     the attempt's end goes into the history and feeds the breaker, even
//     for a job cancelled meanwhile, but it changes the job's state only
//     when the job runs that very attempt (the latest).
//
// A nil br leaves the breaker to the caller, who applies BreakerAfter(op)
// when the Change says Fed. Step keeps op.Output in the history: the
// caller must not modify those bytes afterwards.
func Step(j *Job, br *retry.Breaker, c retry.Circuit, op *Op) Change {
	ch := Change{From: j.State, To: j.State}
	switch op.Kind {
	case OpStart:
		if j.State != Pending || op.Attempt == 0 || op.Attempt != j.Started()+1 {
			return ch
		}
		feed(br, c, op)
		j.State = Running
		j.run().Started++
		j.addAttempt(Attempt{N: op.Attempt, StartedAt: op.At})
		ch.Started, ch.Fed = true, true
	case OpDefer:
		if j.State != Pending {
			return ch
		}
		j.setDue(op.Due)
	case OpSnooze:
		a := j.openAttempt(op.Attempt)
		if a == nil {
			return ch
		}
		feed(br, c, op)
		ch.Fed = true
		a.Ended, a.EndedAt, a.Error = true, op.At, SnoozedError
		if j.State == Running && op.Attempt == j.Started() {
			j.Due = op.Due
			j.State = Pending
		}
	case OpSucceed, OpFail, OpRequeue:
		if op.Attempt == 0 {
			// Only admission fails a job outside an attempt.
			if op.Kind != OpFail || j.State != Pending {
				return ch
			}
			j.finish(Failed, op.At, op.Error)
			break
		}
		a := j.openAttempt(op.Attempt)
		if a == nil {
			return ch
		}
		// Every attempt that ends feeds its target's breaker, even one
		// whose job was cancelled meanwhile, and its history. Interrupted
		// (a crash, class 0): the target is not to blame, but a half-open
		// probe slot it held is free again.
		feed(br, c, op)
		ch.Fed = true
		a.Ended, a.EndedAt, a.Class, a.Error, a.Output = true, op.At, op.Class, op.Error, op.Output
		if j.State != Running || op.Attempt != j.Started() {
			break
		}
		switch op.Kind {
		case OpSucceed:
			j.finish(Succeeded, op.At, "")
		case OpFail:
			r := j.run()
			r.Fails++
			r.LastError = op.Error
			j.finish(Failed, op.At, op.Error)
		case OpRequeue:
			r := j.run()
			r.Fails++
			r.LastError = op.Error
			j.Due = op.Due
			j.State = Pending
		}
	default:
		return ch
	}
	ch.Applied, ch.To = true, j.State
	return ch
}

// feed applies op to *br, if br is not nil.
func feed(br *retry.Breaker, c retry.Circuit, op *Op) {
	if br != nil {
		*br = BreakerAfter(*br, c, op)
	}
}

// finish ends the job in state st at at, with reason.
func (j *Job) finish(st JobState, at int64, reason string) {
	r := j.run()
	j.State, r.FinishedAt, r.Reason = st, at, reason
}

// openAttempt returns attempt n from the history if it has not ended, else
// nil: an outcome is recorded only for an open attempt.
func (j *Job) openAttempt(n uint32) *Attempt {
	if a := j.attempt(n); a != nil && !a.Ended {
		return a
	}
	return nil
}

// AttemptOpen reports whether attempt n of j is in its history and has
// not ended: the only attempts an outcome may end (Step, Settle).
func (j *Job) AttemptOpen(n uint32) bool { return j.openAttempt(n) != nil }
