package runlog

import (
	"context"

	"github.com/runlog/runlog/internal/store/embedded"
)

// Cancel cancels a pending or running job: it never starts again, and a
// running attempt's context is cancelled. The reason is kept with the job.
// It fails with ErrNotFound or ErrFinished.
func (r *Runner) Cancel(ctx context.Context, id uint64, reason string) error {
	if err := r.usable(); err != nil {
		return err
	}
	if reason == "" {
		reason = "cancelled"
	}
	running, err := r.st.Cancel(ctx, r.nowMS(), id, reason)
	if err != nil {
		return mapErr(err)
	}
	if running {
		r.cancelAttempt(id)
	}
	return nil
}

// Retry makes a failed (or cancelled) job pending again, due now, with a
// fresh attempt budget and deadline. It fails with ErrNotFound or ErrNotFailed.
func (r *Runner) Retry(ctx context.Context, id uint64) error {
	if err := r.usable(); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.cancelEarly, id)
	r.mu.Unlock()
	if err := r.st.Revive(ctx, r.nowMS(), id); err != nil {
		return mapErr(err)
	}
	r.signal()
	return nil
}

// compactor is a store that can checkpoint its state (the embedded journal).
type compactor interface {
	Checkpoint() (embedded.CheckpointStats, error)
}

// Compact writes a snapshot of the durable state now and drops the journal
// segments it makes unneeded (the runner also does this by itself, in the
// background, every Config.SnapshotBytes of journal, and at Close). Dispatch
// goes on meanwhile: the snapshot is rebuilt from the journal, not copied
// from the live state. On a store with nothing to compact it does nothing.
func (r *Runner) Compact(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	c, ok := r.st.(compactor)
	if !ok {
		return nil
	}
	_, err := c.Checkpoint()
	return err
}
