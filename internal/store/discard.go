package store

import (
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
