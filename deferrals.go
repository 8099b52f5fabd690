package runlog

import (
	"context"
	"time"

	"github.com/runlog/runlog/internal/store"
)

// Deferral is one deferral of a job by its target's breaker: the job was
// due, the breaker refused it, and its due time moved to Due.
type Deferral struct {
	At, Due time.Time
	// After are the failed attempts of the target's jobs that fed the
	// breaker before the deferral, newest first, at most the breaker's
	// Threshold: the failures that opened it (those of jobs enqueued before
	// the journal's oldest kept record are not known, so not listed).
	After []BreakerFailure
}

// BreakerFailure is a failed attempt that counted for a breaker.
type BreakerFailure struct {
	Job uint64
	At  time.Time
}

// Deferrals are what the store keeps of one job's deferrals.
type Deferrals struct {
	// Kept: the store keeps deferrals (the embedded journal, for the
	// records after its oldest kept snapshot); PostgreSQL only moves a
	// deferred job's due time, so nothing else is known there.
	Kept bool
	// Complete: every record since the job's enqueue was read; false when
	// a snapshot dropped the older ones (the deferrals before it are not
	// listed).
	Complete bool
	// Target is the job's target, whose breaker deferred it.
	Target string
	// List holds the deferrals, oldest first.
	List []Deferral
}

// Deferrals reads what the store keeps of job id's deferrals by its
// target's breaker. On the embedded store it reads the journal records on
// disk (a cost that grows with the journal since the oldest kept
// snapshot, up to Config.SnapshotBytes: a page shows it on demand); on
// PostgreSQL it answers Kept false. It fails with ErrNotFound.
func (r *Runner) Deferrals(ctx context.Context, id uint64) (Deferrals, error) {
	dr, ok := r.st.(store.DeferralReader)
	if !ok {
		if _, err := r.Job(ctx, id); err != nil {
			return Deferrals{}, err
		}
		return Deferrals{}, nil
	}
	log, err := dr.Deferrals(ctx, id, r.cfg.Breaker.Threshold)
	if err != nil {
		return Deferrals{}, mapErr(err)
	}
	out := Deferrals{Kept: true, Complete: log.Complete, Target: log.Target}
	for _, d := range log.Deferrals {
		pd := Deferral{At: time.UnixMilli(d.At), Due: time.UnixMilli(d.Due)}
		for _, f := range d.After {
			pd.After = append(pd.After, BreakerFailure{Job: f.ID, At: time.UnixMilli(f.At)})
		}
		out.List = append(out.List, pd)
	}
	return out, nil
}
