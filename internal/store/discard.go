package store

import (
	"context"
	"fmt"

	"github.com/runlog/runlog/internal/state"
)

// NotFinishedError is a refused discard: it wraps ErrNotFinished and says
// why, and what to do.
type NotFinishedError struct {
	ID      uint64
	State   state.JobState
	Verdict state.DiscardVerdict
}

// Detail says why job ID cannot be discarded, and what to do.
func (e *NotFinishedError) Detail() string {
	if e.Verdict == state.DiscardAttemptOpen {
		return fmt.Sprintf("job %d was cancelled while running and its attempt has not ended yet; discard it once the attempt ends", e.ID)
	}
	return fmt.Sprintf("job %d is %v; cancel it first, then discard it", e.ID, e.State)
}

func (e *NotFinishedError) Error() string { return "store: " + e.Detail() }

// Unwrap returns ErrNotFinished.
func (e *NotFinishedError) Unwrap() error { return ErrNotFinished }

// DiscardError returns the error for a discard of job id, in state st,
// with verdict v (state.Discardable): a *NotFinishedError, or nil for
// state.DiscardOK.
func DiscardError(id uint64, st state.JobState, v state.DiscardVerdict) error {
	if v == state.DiscardOK {
		return nil
	}
	return &NotFinishedError{ID: id, State: st, Verdict: v}
}

// Failure is a failed attempt that counted for a breaker: its job and
// when it ended (ms).
type Failure struct {
	ID uint64
	At int64
}

// Deferral is one deferral of a job by its target's breaker: when (ms),
// the new due time, and the failures that fed the breaker before it,
// newest first.
type Deferral struct {
	At, Due int64
	After   []Failure
}

// DeferralLog is what a DeferralReader found for one job.
type DeferralLog struct {
	Target    string
	Deferrals []Deferral
	// Complete: every record since the job's enqueue was read (false when
	// the oldest kept ones came after it).
	Complete bool
}

// DeferralReader is a store that keeps every deferral as a record (the
// embedded journal, for the records still on disk): Deferrals returns a
// job's deferrals with, for each, up to threshold failures of its target
// before it. A store that keeps no deferral (PostgreSQL updates the due
// time in place) is not a DeferralReader.
type DeferralReader interface {
	Deferrals(ctx context.Context, id uint64, threshold int) (DeferralLog, error)
}
