package runlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runlog/runlog/internal/walk"
)

// ErrNotReplayable: Replay takes only a finished job (succeeded, failed or
// cancelled); a pending or running job will still run.
var ErrNotReplayable = errors.New("runlog: only a finished job can be replayed")

// Replay re-sends a finished job (succeeded, failed or cancelled) as a new
// job, due now: the same kind, target, payload, retry policy, timeout and
// metadata, no idempotency key, linked to the original by its ReplayOf.
// The original is not changed. A job that is not finished is refused with
// ErrNotReplayable; one that retention dropped, with ErrNotFound.
func (r *Runner) Replay(ctx context.Context, id uint64) (uint64, error) {
	j, err := r.Job(ctx, id)
	if err != nil {
		return 0, err
	}
	if !finished(j.State) {
		return 0, fmt.Errorf("%w: job %d is %s", ErrNotReplayable, id, j.State)
	}
	res, err := r.EnqueueMany(ctx, []JobRequest{replayRequest(j)})
	if err != nil {
		return 0, err
	}
	return res[0].ID, nil
}

// finished reports whether st is an end state.
func finished(st State) bool {
	return st == StateSucceeded || st == StateFailed || st == StateCancelled
}

// replayRequest is the request that re-sends j.
func replayRequest(j Job) JobRequest {
	rp := j.Retry
	return JobRequest{
		Kind: j.Kind, Target: j.Target, Payload: j.Payload, Retry: &rp, Timeout: j.Timeout,
		Metadata: j.Metadata, replayOf: j.ID,
	}
}

// ReplayFilter selects the finished jobs that ReplayMatching re-sends.
type ReplayFilter struct {
	// Target is the target whose jobs are re-sent (required).
	Target string
	// Since keeps the jobs that finished at or after it (required).
	Since time.Time
	// State is StateSucceeded, StateFailed, StateCancelled, or "" for any
	// finished job.
	State State
	// DryRun counts the jobs and re-sends none.
	DryRun bool
}

// The bounds of one ReplayMatching call.
const (
	// MaxReplay is how many jobs one call re-sends at most.
	MaxReplay = 10_000
	// maxReplayScan is how many of the target's jobs one call looks at.
	maxReplayScan = 100_000
)

// ReplayResult is the answer of ReplayMatching.
type ReplayResult struct {
	// Count is how many jobs match (and, without DryRun, were re-sent).
	Count int
	// IDs are the new jobs, in the order of the originals' ids (newest
	// first); none with DryRun.
	IDs []uint64
}

// ReplayMatching re-sends every finished job of f.Target, in f.State (any
// finished state when empty), that finished at or after f.Since, as Replay
// does, with one durable write per 1 000 jobs; with f.DryRun it only
// counts them. It looks at the target's jobs newest first: more than
// MaxReplay matches, or more than 100 000 jobs of the target to look at,
// are refused with ErrInvalid before anything is re-sent, so that a
// request is never half done by a bound (give a later Since or a State).
func (r *Runner) ReplayMatching(ctx context.Context, f ReplayFilter) (ReplayResult, error) {
	if f.Target == "" || f.Since.IsZero() {
		return ReplayResult{}, fmt.Errorf("%w: a replay needs a target and a since time", ErrInvalid)
	}
	switch f.State {
	case "", StateSucceeded, StateFailed, StateCancelled:
	default:
		return ReplayResult{}, fmt.Errorf("%w: replay state %q: use succeeded, failed, cancelled or none for any finished job", ErrInvalid, f.State)
	}
	found, err := walk.Collect(ctx, MaxReplay, maxReplayScan, r.listPages(ListFilter{Target: f.Target, State: f.State}), func(j Job) bool {
		return finished(j.State) && !j.FinishedAt.Before(f.Since)
	})
	switch {
	case err != nil:
		return ReplayResult{}, err
	case found.Over:
		return ReplayResult{}, fmt.Errorf("%w: more than %d jobs of %s match; replay fewer at a time (a later since, or one state)", ErrInvalid, MaxReplay, f.Target)
	case found.Cut:
		return ReplayResult{}, fmt.Errorf("%w: %s has more than %d jobs to look at; replay fewer at a time (one state)", ErrInvalid, f.Target, maxReplayScan)
	}
	matches := make([]uint64, len(found.Items))
	for i, j := range found.Items {
		matches[i] = j.ID
	}
	res := ReplayResult{Count: len(matches)}
	if f.DryRun {
		return res, nil
	}
	for start := 0; start < len(matches); start += maxReplayBatch {
		batch := matches[start:min(start+maxReplayBatch, len(matches))]
		reqs := make([]JobRequest, 0, len(batch))
		for _, id := range batch {
			j, err := r.Job(ctx, id)
			if errors.Is(err, ErrNotFound) {
				continue // dropped by retention since it was listed
			}
			if err != nil {
				return res, err
			}
			reqs = append(reqs, replayRequest(j))
		}
		out, err := r.EnqueueMany(ctx, reqs)
		if err != nil {
			return res, err
		}
		for _, e := range out {
			res.IDs = append(res.IDs, e.ID)
		}
	}
	res.Count = len(res.IDs)
	return res, nil
}

// maxReplayBatch is how many replays one durable write adds.
const maxReplayBatch = 1000
