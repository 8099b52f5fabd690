package state

import (
	"fmt"

	"github.com/runlog/runlog/retry"
)

// JobState is where a job is in its life.
type JobState uint8

// The states of a job. A job is in exactly one of them. The values are
// frozen: snapshots and the PostgreSQL store's rows hold them
// (TestStoredValuesFrozen); a new state takes a new value.
const (
	// Pending: waiting for its due time, a free slot or its breaker.
	Pending JobState = iota
	// Running: an attempt is in progress.
	Running
	// Succeeded: an attempt succeeded.
	Succeeded
	// Failed: dead; no more automatic attempts. Reason says why. A retry
	// by hand (OpRetry) makes it pending again.
	Failed
	// Cancelled: cancelled by hand, with a reason. A retry by hand (OpRetry)
	// makes it pending again.
	Cancelled
)

// String returns "pending", "running", "succeeded", "failed",
// "cancelled", or "state(N)".
func (s JobState) String() string {
	switch s {
	case Pending:
		return "pending"
	case Running:
		return "running"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Finished reports whether s is an end state: succeeded, failed or
// cancelled.
func (s JobState) Finished() bool { return s >= Succeeded && s <= Cancelled }

// MaxAttemptHistory is how many attempts a job's history keeps: the most
// recent ones.
const MaxAttemptHistory = 32

// Attempt is one run of a job's work, as recorded in its history.
type Attempt struct {
	// N is the attempt's number, from 1; it keeps growing across retries by
	// hand.
	N uint32
	// StartedAt and EndedAt are when it started and, once Ended, ended.
	StartedAt, EndedAt int64
	// Class is how it ended (0 while it has not).
	Class retry.Class
	// Ended is whether its outcome was recorded.
	Ended bool
	// Error is the error text or reason its outcome op carried.
	Error string
	// Output is the attempt's output as the caller bounded it.
	Output []byte
}

// Job is the state of one job. The State hands out pointers to its jobs as
// read-only views: callers must not modify a Job, its Spec or its
// Attempts, and must not keep them across a later Apply if they need a
// stable copy.
type Job struct {
	// ID is the job's id, from 1.
	ID uint64
	// Spec is the job's definition (kept after it finishes, for
	// inspection). Kind and Target strings are shared between jobs, and so
	// is the whole Spec of jobs that hold nothing of their own in it (no
	// payload in memory, no key, no metadata: compact.go); the state never
	// changes a Spec in place, it gives the job another.
	Spec *Spec
	// Due is when the job may next start (pending), or last became due.
	Due int64
	// FirstDue is the due time the policy deadline counts from: the
	// enqueue's due time, or that of the last retry by hand.
	FirstDue int64
	// EnqueuedAt is when the job was enqueued.
	EnqueuedAt int64
	// FinishedAt is when the job reached its end state (0 while it has
	// not).
	FinishedAt int64
	// Fails is the number of failed attempts since the enqueue or the last
	// retry by hand: what the retry budget counts.
	Fails int
	// LastError is the error of the most recent failed attempt.
	LastError string
	// Reason is why the job failed or was cancelled.
	Reason string
	// Attempts is the history of the most recent attempts, oldest first,
	// at most MaxAttemptHistory.
	Attempts []Attempt
	// Started is the number of attempts ever started.
	Started uint32
	// Part is, for a finished job, the expiry partition it is counted in
	// (PartOf); 0 otherwise.
	Part int64
	// Spilled marks a job whose payload the store keeps outside the state
	// (Spec.Payload is then nil): it is not state, and no op sets it.
	Spilled bool
	// index is the job's position in the pending heap while it is pending
	// (-1 while held), in the running set while it is running, else -1.
	index int32
	// State is where the job is.
	State JobState
	// held marks a pending job taken out of the heap by Hold, or parked.
	held bool
	// parked marks a pending job of a disabled target, held until the
	// target is enabled (lifecycle.go).
	parked bool
	// ready marks a pending job in its queue's ready heap (see queue).
	ready bool
	// inDone marks a job on the Done list.
	inDone bool
	// gen counts the job's entries on the Done list, so that Evict can
	// tell the version copied out from a later one.
	gen uint16
}

// attempt returns the job's attempt n from its history, or nil.
func (j *Job) attempt(n uint32) *Attempt {
	for i := len(j.Attempts) - 1; i >= 0; i-- {
		if j.Attempts[i].N == n {
			return &j.Attempts[i]
		}
	}
	return nil
}

// addAttempt appends attempt a to the history, dropping the oldest beyond
// MaxAttemptHistory.
func (j *Job) addAttempt(a Attempt) {
	if len(j.Attempts) < MaxAttemptHistory {
		j.Attempts = append(j.Attempts, a)
		return
	}
	copy(j.Attempts, j.Attempts[1:])
	j.Attempts[len(j.Attempts)-1] = a
}
