package runlog

import (
	"context"

	"github.com/runlog/runlog/internal/store"
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
	r.hub.wake(id)
	obs := r.jobObserver()
	if obs != nil || r.hub.wants(EventCancelled) {
		ev := JobEvent{ID: id, State: StateCancelled, Reason: reason}
		if j, err := r.st.Job(ctx, id); err == nil {
			ev.Kind, ev.Target, ev.Attempts = j.Spec.Kind, j.Spec.Target, int(j.Started())
		}
		if obs != nil {
			obs.JobFinished(ev)
		}
		if r.hub.wants(EventCancelled) {
			r.hub.emit(Event{Type: EventCancelled, At: r.cfg.Clock.Now(), JobID: id, Kind: ev.Kind, Target: ev.Target, Attempt: ev.Attempts, Error: reason})
		}
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
	if err := r.st.Retry(ctx, r.nowMS(), id); err != nil {
		return mapErr(err)
	}
	r.signal()
	return nil
}

// Snapshot writes a snapshot of the durable state now and drops the journal
// segments it covers, so that the next Open replays little (the runner also
// does this by itself, in the background, every Config.SnapshotBytes of
// journal, and at Close). Dispatch goes on meanwhile: the live state is
// frozen, not stopped, while it is written (see docs/snapshots.md). On a
// store that is not a journal (PostgreSQL) there is nothing to snapshot and
// it does nothing.
func (r *Runner) Snapshot(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	sn, ok := r.st.(store.Snapshotter)
	if !ok {
		return nil
	}
	_, err := sn.Snapshot()
	return err
}
