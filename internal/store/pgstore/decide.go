package pgstore

import (
	"fmt"
	"math"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// This file mirrors, for one job row and its target's breaker, the decisions
// (state.State.Admit, Settle, Orphan) and their effect (state.State.Apply) of
// package state, built on the same retry functions, so that this store and
// the embedded one make the same decisions for the same history. The
// side-by-side property test (TestSameAsEmbedded) holds them to that.

// attempt is one entry of a job's history as stored in its history column:
// state.Attempt plus the node that ran it (for fencing).
type attempt struct {
	N         uint32      `json:"n"`
	StartedAt int64       `json:"s"`
	EndedAt   int64       `json:"e,omitempty"`
	Class     retry.Class `json:"c,omitempty"`
	Ended     bool        `json:"d,omitempty"`
	Error     string      `json:"err,omitempty"`
	Output    []byte      `json:"out,omitempty"`
	Node      string      `json:"node"`
}

// jobRow is a job as read from runlog_jobs.
type jobRow struct {
	id         uint64
	st         state.JobState
	spec       state.Spec
	due        int64
	firstDue   int64
	enqueuedAt int64
	finishedAt int64
	fails      int
	started    uint32
	lastError  string
	reason     string
	hist       []attempt
	node       string
}

// toJob converts r to the engine's view.
func (r *jobRow) toJob() state.Job {
	spec := r.spec
	j := state.Job{
		ID: r.id, Spec: &spec, Due: r.due, FirstDue: r.firstDue, EnqueuedAt: r.enqueuedAt,
		FinishedAt: r.finishedAt, Fails: r.fails, LastError: r.lastError, Reason: r.reason,
		Started: r.started, State: r.st,
	}
	for _, a := range r.hist {
		j.Attempts = append(j.Attempts, state.Attempt{
			N: a.N, StartedAt: a.StartedAt, EndedAt: a.EndedAt, Class: a.Class,
			Ended: a.Ended, Error: a.Error, Output: a.Output,
		})
	}
	return j
}

// open returns attempt n of the history if it has not ended, else nil.
func (r *jobRow) open(n uint32) *attempt {
	for i := len(r.hist) - 1; i >= 0; i-- {
		if r.hist[i].N == n {
			if r.hist[i].Ended {
				return nil
			}
			return &r.hist[i]
		}
	}
	return nil
}

// admit is state.State.Admit for the pending job r under breaker br.
func admit(r *jobRow, br retry.Breaker, c retry.Circuit, now int64) state.Op {
	b := retry.BudgetFor(r.spec.Policy, r.fails, r.firstDue)
	nb, _, deny := retry.Admit(br, c, b, now)
	op := state.Op{ID: r.id, At: now}
	switch deny {
	case retry.DenyNone:
		op.Kind, op.Attempt = state.OpStart, r.started+1
	case retry.DenyOpen:
		op.Kind, op.Due = state.OpDefer, max(nb.NextAdmit(c, now), addSat(now, 1))
	case retry.DenyLate:
		op.Kind = state.OpFail
		if r.fails == 0 && r.lastError == "" {
			op.Error = "deadline passed before the first attempt"
		} else {
			op.Error = withError("deadline passed", r.lastError)
		}
	default:
		op.Kind = state.OpFail
		op.Error = withError(fmt.Sprintf("gave up after %d attempts", r.fails), r.lastError)
	}
	return op
}

// settle is state.State.Settle for attempt n of r, which must be open.
func settle(r *jobRow, n uint32, class retry.Class, afterMS int64, errText string, output []byte, now int64, rnd uint32) state.Op {
	if !class.Valid() {
		class = retry.Unsafe
	}
	op := state.Op{ID: r.id, At: now, Attempt: n, Class: class, BreakerFailed: class.BreakerFailed()}
	if len(output) > 0 {
		op.Output = output
	}
	p := r.spec.Policy
	b := retry.BudgetFor(p, r.fails, r.firstDue)
	b.Left = max(b.Left-1, 0)
	wait, stop := retry.PlanAfter(class, afterMS, p, b, r.fails, now, rnd)
	switch {
	case class == retry.Success:
		op.Kind = state.OpSucceed
	case !stop:
		op.Kind, op.Due, op.Error = state.OpRetry, addSat(now, wait), errText
	case class == retry.Permanent:
		op.Kind, op.Error = state.OpFail, withError("permanent failure", errText)
	case class == retry.Unsafe:
		op.Kind, op.Error = state.OpFail, withError("unsafe failure, not retried", errText)
	case b.Left == 0:
		op.Kind, op.Error = state.OpFail, withError(fmt.Sprintf("gave up after %d attempts", r.fails+1), errText)
	default:
		op.Kind, op.Error = state.OpFail, withError("deadline passed", errText)
	}
	return op
}

// orphan is state.State.Orphan for the running job r whose node stopped
// renewing its lease (or closed without finishing the attempt): a retry due
// at once, at its old due time (never later than now), counting one failure
// of the job and none of its target.
func orphan(r *jobRow, now int64, why string) state.Op {
	return state.Op{
		Kind: state.OpRetry, ID: r.id, At: now, Due: min(r.due, now), Attempt: r.started,
		Class: 0, BreakerFailed: false, // no outcome is known: see retry.Breaker.Release
		Error: fmt.Sprintf("interrupted: %s during attempt %d", why, r.started),
	}
}

// apply is state.State.Apply of op to r and its target's breaker *br, for
// the ops a claim, an outcome or a rescue makes (start, defer, and the
// outcome ops). node is the node that starts the attempt of an OpStart.
func apply(r *jobRow, br *retry.Breaker, c retry.Circuit, op *state.Op, node string) {
	switch op.Kind {
	case state.OpStart:
		*br, _ = br.Admit(c, op.At)
		r.st = state.Running
		r.started++
		r.node = node
		r.hist = addAttempt(r.hist, attempt{N: op.Attempt, StartedAt: op.At, Node: node})
	case state.OpDefer:
		r.due = op.Due
	case state.OpSucceed, state.OpFail, state.OpRetry:
		if op.Attempt == 0 {
			// Only admission fails a job outside an attempt.
			r.st, r.finishedAt, r.reason = state.Failed, op.At, op.Error
			return
		}
		a := r.open(op.Attempt)
		if a == nil {
			return
		}
		if op.Class == 0 {
			*br = br.Release() // interrupted: the target is not to blame
		} else {
			*br = br.Done(c, op.At, op.BreakerFailed)
		}
		a.Ended, a.EndedAt, a.Class, a.Error, a.Output = true, op.At, op.Class, op.Error, op.Output
		if r.st != state.Running || op.Attempt != r.started {
			return
		}
		switch op.Kind {
		case state.OpSucceed:
			r.st, r.finishedAt, r.reason = state.Succeeded, op.At, ""
		case state.OpFail:
			r.fails++
			r.lastError = op.Error
			r.st, r.finishedAt, r.reason = state.Failed, op.At, op.Error
		case state.OpRetry:
			r.fails++
			r.lastError = op.Error
			r.due = op.Due
			r.st = state.Pending
		}
	}
}

// addAttempt appends a to the history, dropping the oldest beyond
// state.MaxAttemptHistory.
func addAttempt(h []attempt, a attempt) []attempt {
	if len(h) >= state.MaxAttemptHistory {
		h = append(h[:0:0], h[len(h)-state.MaxAttemptHistory+1:]...)
	}
	return append(h, a)
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
