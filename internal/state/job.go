package state

import (
	"fmt"
	"slices"

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
// read-only views: callers must not modify a Job, its Spec, its Run or its
// attempts, and must not keep them across a later Apply if they need a
// stable copy (Clone makes one).
//
// A Job is 48 bytes: a backlog of a million pending jobs costs a million
// of them. What only a job that has started, finished or been deferred
// needs is in its Run, which a pending job never started nor deferred
// leaves nil; read it through the accessors (FirstDue, Started, Fails,
// LastError, Reason, Attempts, FinishedAt, Part), which give what a job
// without one has. The layout's flags share one byte (jobFlags).
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
	// EnqueuedAt is when the job was enqueued.
	EnqueuedAt int64
	// Run is what the job's attempts, deferrals and end left: nil while it
	// has neither started, been deferred nor finished (and after a retry
	// by hand of a job that never started). The state changes it in place.
	Run *Run
	// index is the job's position in the pending heap while it is pending
	// (-1 while held), in the running set while it is running, else -1.
	index int32
	// gen counts the job's entries on the Done list, so that Evict can
	// tell the version copied out from a later one.
	gen uint16
	// State is where the job is.
	State JobState
	// flags are the job's marks: spilled, held, parked, on the Done list,
	// and the kind of heap it is in.
	flags jobFlags
}

// jobFlags packs a Job's marks into one byte.
type jobFlags uint8

const (
	// flagSpilled marks a job whose payload the store keeps outside the
	// state (Spec.Payload is then nil): it is not state, and no op sets it.
	flagSpilled jobFlags = 1 << iota
	// flagHeld marks a pending job taken out of the heap by Hold, or
	// parked.
	flagHeld
	// flagParked marks a pending job of a disabled target, held until the
	// target is enabled (lifecycle.go).
	flagParked
	// flagInDone marks a job on the Done list.
	flagInDone
	// heapShift is where the job's heapKind (two bits) starts: the kind of
	// heap a pending job with an index is in (see jobHeap).
	heapShift = iota
)

// set sets or clears f in j's flags.
func (j *Job) set(f jobFlags, on bool) {
	if on {
		j.flags |= f
	} else {
		j.flags &^= f
	}
}

// Spilled reports whether the store keeps the job's payload outside the
// state (Spec.Payload is then nil): it is not state, and no op sets it.
func (j *Job) Spilled() bool { return j.flags&flagSpilled != 0 }

// SetSpilled marks or unmarks the job's payload as kept outside the state,
// for a store's copy of a job (the state sets its own jobs' mark).
func (j *Job) SetSpilled(on bool) { j.set(flagSpilled, on) }

// held reports whether the job is a pending job taken out of the heap by
// Hold, or parked.
func (j *Job) held() bool { return j.flags&flagHeld != 0 }

// parked reports whether the job is a pending job of a disabled target,
// held until the target is enabled.
func (j *Job) parked() bool { return j.flags&flagParked != 0 }

// inDone reports whether the job is on the Done list.
func (j *Job) inDone() bool { return j.flags&flagInDone != 0 }

// heap returns the kind of heap the job is in, while pending with an index.
func (j *Job) heap() heapKind { return heapKind(j.flags >> heapShift) }

// setHeap records the kind of heap the job is in.
func (j *Job) setHeap(k heapKind) {
	j.flags = j.flags&(1<<heapShift-1) | jobFlags(k)<<heapShift
}

// Run is the part of a job that only a job that has started, been
// deferred or finished needs (see Job).
type Run struct {
	// FirstDue is the due time the policy deadline counts from: the
	// enqueue's due time, or that of the last retry by hand (a job without
	// a Run has not been deferred: its FirstDue is its Due).
	FirstDue int64
	// Started is the number of attempts ever started.
	Started uint32
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
	// FinishedAt is when the job reached its end state (0 while it has
	// not).
	FinishedAt int64
	// Part is, for a finished job, the expiry partition it is counted in
	// (PartOf); 0 otherwise.
	Part int64
}

// noRun is the Run of a job that has none, for the accessors: never
// written.
var noRun Run

// view returns j's Run for reading: noRun when it has none.
func (j *Job) view() *Run {
	if j.Run == nil {
		return &noRun
	}
	return j.Run
}

// FirstDue returns the due time the policy deadline counts from: the
// enqueue's due time, or that of the last retry by hand.
func (j *Job) FirstDue() int64 {
	if j.Run == nil {
		return j.Due
	}
	return j.Run.FirstDue
}

// Started returns the number of attempts ever started.
func (j *Job) Started() uint32 { return j.view().Started }

// setDue makes d the job's due time, keeping its FirstDue: a job gets a
// Run to hold it when they part, and drops it when they meet again with
// nothing else in it (a deferral back to the first due time).
func (j *Job) setDue(d int64) {
	if j.Run == nil && d != j.Due {
		j.run()
	}
	j.Due = d
	j.tidy()
}

// Fails returns the number of failed attempts since the enqueue or the
// last retry by hand: what the retry budget counts.
func (j *Job) Fails() int { return j.view().Fails }

// LastError returns the error of the most recent failed attempt.
func (j *Job) LastError() string { return j.view().LastError }

// Reason returns why the job failed or was cancelled.
func (j *Job) Reason() string { return j.view().Reason }

// Attempts returns the history of the most recent attempts, oldest first,
// at most MaxAttemptHistory.
func (j *Job) Attempts() []Attempt { return j.view().Attempts }

// FinishedAt returns when the job reached its end state (0 while it has
// not).
func (j *Job) FinishedAt() int64 { return j.view().FinishedAt }

// Part returns, for a finished job, the expiry partition it is counted in
// (PartOf); 0 otherwise.
func (j *Job) Part() int64 { return j.view().Part }

// zero reports whether r holds nothing that a job of due time due without
// a Run does not read: such a job holds none (tidy), so that every way to a
// state, replay and a snapshot's decode included, gives the same.
func (r *Run) zero(due int64) bool {
	return r.FirstDue == due && r.Started == 0 && r.Fails == 0 && r.LastError == "" && r.Reason == "" && len(r.Attempts) == 0 && r.FinishedAt == 0 && r.Part == 0
}

// tidy drops j's Run if it holds nothing.
func (j *Job) tidy() {
	if j.Run != nil && j.Run.zero(j.Due) {
		j.Run = nil
	}
}

// run returns j's Run, giving it one if it has none (with what the
// accessors read without one), for a change.
func (j *Job) run() *Run {
	if j.Run == nil {
		j.Run = &Run{FirstDue: j.Due}
	}
	return j.Run
}

// Clone returns a copy of j that shares nothing the state changes in
// place: its Run and attempt history are its own (its Spec, never changed
// in place, is shared).
func (j *Job) Clone() Job {
	c := *j
	if j.Run != nil {
		r := *j.Run
		r.Attempts = slices.Clone(r.Attempts)
		c.Run = &r
	}
	return c
}

// attempt returns the job's attempt n from its history, or nil.
func (j *Job) attempt(n uint32) *Attempt {
	for i := len(j.Attempts()) - 1; i >= 0; i-- {
		if j.Attempts()[i].N == n {
			return &j.Attempts()[i]
		}
	}
	return nil
}

// addAttempt appends attempt a to the history, dropping the oldest beyond
// MaxAttemptHistory.
func (j *Job) addAttempt(a Attempt) {
	r := j.run()
	if len(r.Attempts) < MaxAttemptHistory {
		r.Attempts = append(r.Attempts, a)
		return
	}
	copy(r.Attempts, r.Attempts[1:])
	r.Attempts[len(r.Attempts)-1] = a
}
