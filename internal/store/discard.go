package store

import (
	"fmt"

	"github.com/runlog/runlog/internal/state"
)

// DiscardError returns the error for a refused discard of job id with
// verdict v (state.Discardable), which wraps ErrNotFinished, or nil for
// state.DiscardOK.
func DiscardError(id uint64, st state.JobState, v state.DiscardVerdict) error {
	switch v {
	case state.DiscardUnfinished:
		return fmt.Errorf("%w: job %d is %v; cancel it first, then discard it", ErrNotFinished, id, st)
	case state.DiscardAttemptOpen:
		return fmt.Errorf("%w: job %d was cancelled while running and its attempt has not ended yet; discard it once the attempt ends", ErrNotFinished, id)
	}
	return nil
}
