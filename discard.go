package runlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/runlog/runlog/internal/walk"
)

// ErrNotFinished: Discard takes only a finished job (succeeded, failed or
// cancelled) whose attempts have all ended; cancel a pending or running
// job first.
var ErrNotFinished = errors.New("runlog: job is not finished")

// notFinishedError is ErrNotFinished with the reason for one job: its
// text names the job, its state and what to do.
type notFinishedError string

func (e notFinishedError) Error() string        { return "runlog: " + string(e) }
func (e notFinishedError) Is(target error) bool { return target == ErrNotFinished }

// Discard removes a finished job (succeeded, failed or cancelled) for
// good, before its retention ends; its idempotency key is free again. A
// pending or running job is refused with ErrNotFinished (cancel it first),
// as is a job cancelled while running until its attempt has ended; an
// unknown one with ErrNotFound.
func (r *Runner) Discard(ctx context.Context, id uint64) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := r.st.Discard(ctx, r.nowMS(), id); err != nil {
		return mapErr(err)
	}
	r.log.Info("runlog: job discarded", "id", id)
	return nil
}

// DiscardFilter selects the finished jobs that DiscardMatching removes.
// At least one of State, Kind and Target must be set.
type DiscardFilter struct {
	// State is StateSucceeded, StateFailed, StateCancelled, or "" for any
	// finished job.
	State State
	// Kind and Target select the jobs of that kind, of that target.
	Kind, Target string
	// DryRun counts the jobs and removes none.
	DryRun bool
}

// MaxDiscard is how many jobs one DiscardMatching call removes at most.
const MaxDiscard = 10_000

// maxDiscardScan is how many jobs one DiscardMatching call looks at.
const maxDiscardScan = 100_000

// DiscardResult is the answer of DiscardMatching.
type DiscardResult struct {
	// Count is how many jobs match (and, without DryRun, were discarded).
	Count int
	// Skipped counts the jobs that matched but were gone, or no longer
	// finished, by the time their turn came.
	Skipped int
}

// DiscardMatching discards every finished job that f selects, as Discard
// does; with f.DryRun it only counts them. More than MaxDiscard matches,
// or more than 100 000 jobs to look at, are refused with ErrInvalid before
// anything is discarded, so that a request is never half done by a bound
// (narrow the filter).
func (r *Runner) DiscardMatching(ctx context.Context, f DiscardFilter) (DiscardResult, error) {
	switch f.State {
	case "", StateSucceeded, StateFailed, StateCancelled:
	default:
		return DiscardResult{}, fmt.Errorf("%w: discard state %q: use succeeded, failed, cancelled or none for any finished job", ErrInvalid, f.State)
	}
	if f.State == "" && f.Kind == "" && f.Target == "" {
		return DiscardResult{}, fmt.Errorf("%w: a discard by filter needs a state, a kind or a target", ErrInvalid)
	}
	lf := ListFilter{State: f.State, Kind: f.Kind, Target: f.Target}
	res, err := walk.Collect(ctx, MaxDiscard, maxDiscardScan, r.listPages(lf), func(j Job) bool { return finished(j.State) })
	if err != nil {
		return DiscardResult{}, err
	}
	switch {
	case res.Over:
		return DiscardResult{}, fmt.Errorf("%w: more than %d finished jobs match; discard fewer at a time (a state, a kind or a target)", ErrInvalid, MaxDiscard)
	case res.Cut:
		return DiscardResult{}, fmt.Errorf("%w: more than %d jobs match the filter to look at; discard fewer at a time (a state, a kind or a target)", ErrInvalid, maxDiscardScan)
	}
	out := DiscardResult{Count: len(res.Items)}
	if f.DryRun {
		return out, nil
	}
	for _, j := range res.Items {
		err := r.Discard(ctx, j.ID)
		switch {
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrNotFinished):
			out.Skipped++ // retried, or dropped by retention, since it was listed
		case err != nil:
			return out, err
		}
	}
	out.Count -= out.Skipped
	return out, nil
}

// listPages is the runner's List as a walk.Page over f (newest first
// unless f.Oldest), its jobs without their payloads and histories: a walk
// keeps up to thousands of them, and needs their other fields only.
func (r *Runner) listPages(f ListFilter) walk.Page[Job] {
	return func(ctx context.Context, after uint64, limit int) ([]Job, uint64, error) {
		f.After, f.Limit = after, limit
		p, err := r.List(ctx, f)
		for i := range p.Jobs {
			p.Jobs[i].Payload, p.Jobs[i].History = nil, nil
		}
		return p.Jobs, p.Next, err
	}
}
