package pgstore

import (
	"encoding/base64"
	"strconv"

	"github.com/runlog/runlog/internal/jsonscan"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// The decisions for a job row are package state's per-job decisions
// (state.AdmitJob, SettleJob, OrphanJob) on the row's facts, and the
// breaker's change is state.BreakerAfter, so this store and the embedded one
// decide by the same code. This file holds what is this store's own: the
// rows, and the effect of an op on a row (apply, the row-level counterpart
// of state.State.Apply). The side-by-side property test
// (TestSameAsEmbedded) and TestDecideMirrorsState hold the two to the same
// results.

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

// appendAttempt appends a as JSON (the attempt type's encoding/json field
// names, omitting the same empty fields) without reflection: every start
// and every outcome writes one (FuzzAppendAttempt holds it to decoding
// back to a).
func appendAttempt(b []byte, a attempt) []byte {
	b = append(b, `{"n":`...)
	b = strconv.AppendUint(b, uint64(a.N), 10)
	b = append(b, `,"s":`...)
	b = strconv.AppendInt(b, a.StartedAt, 10)
	if a.EndedAt != 0 {
		b = append(b, `,"e":`...)
		b = strconv.AppendInt(b, a.EndedAt, 10)
	}
	if a.Class != 0 {
		b = append(b, `,"c":`...)
		b = strconv.AppendUint(b, uint64(a.Class), 10)
	}
	if a.Ended {
		b = append(b, `,"d":true`...)
	}
	if a.Error != "" {
		b = append(b, `,"err":`...)
		b = jsonscan.AppendString(b, a.Error)
	}
	if len(a.Output) > 0 {
		b = append(b, `,"out":"`...)
		b = base64.StdEncoding.AppendEncode(b, a.Output)
		b = append(b, '"')
	}
	b = append(b, `,"node":`...)
	b = jsonscan.AppendString(b, a.Node)
	return append(b, '}')
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

// facts returns what the per-job decisions of package state (AdmitJob,
// SettleJob, OrphanJob) read of r.
func (r *jobRow) facts() state.Facts {
	return state.Facts{ID: r.id, Policy: r.spec.Policy, Due: r.due, FirstDue: r.firstDue, Fails: r.fails, Started: r.started, LastError: r.lastError}
}

// apply is state.State.Apply of op to r and its target's breaker *br, for
// the ops a claim, an outcome or a rescue makes (start, defer, and the
// outcome ops). node is the node that starts the attempt of an OpStart. A
// nil br leaves the breaker to the caller; apply reports whether op feeds
// the breaker (state.BreakerAfter), which it does when it starts an attempt
// or ends an open one.
func apply(r *jobRow, br *retry.Breaker, c retry.Circuit, op *state.Op, node string) (feedsBreaker bool) {
	switch op.Kind {
	case state.OpStart:
		if br != nil {
			*br = state.BreakerAfter(*br, c, op)
		}
		r.st = state.Running
		r.started++
		r.node = node
		r.hist = addAttempt(r.hist, attempt{N: op.Attempt, StartedAt: op.At, Node: node})
		return true
	case state.OpDefer:
		r.due = op.Due
	case state.OpSucceed, state.OpFail, state.OpRetry:
		if op.Attempt == 0 {
			// Only admission fails a job outside an attempt.
			r.st, r.finishedAt, r.reason = state.Failed, op.At, op.Error
			return false
		}
		a := r.open(op.Attempt)
		if a == nil {
			return false
		}
		if br != nil {
			*br = state.BreakerAfter(*br, c, op)
		}
		a.Ended, a.EndedAt, a.Class, a.Error, a.Output = true, op.At, op.Class, op.Error, op.Output
		if r.st != state.Running || op.Attempt != r.started {
			return true
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
		return true
	}
	return false
}

// addAttempt appends a to the history, dropping the oldest beyond
// state.MaxAttemptHistory.
func addAttempt(h []attempt, a attempt) []attempt {
	if len(h) >= state.MaxAttemptHistory {
		h = append(h[:0:0], h[len(h)-state.MaxAttemptHistory+1:]...)
	}
	return append(h, a)
}
