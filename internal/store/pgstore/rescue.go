package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
)

// maxRequeue bounds the attempts one rescue requeues; the next scan takes
// the rest.
const maxRequeue = 1000

// Rescue requeues, as failed attempts (state.OrphanJob: one failure of
// the job, none of its target), up to
// maxRequeue running attempts whose lease expired on the database clock,
// whichever node started them, and returns how many. Every node runs it
// every RescueEvery.
func (s *Store) Rescue(ctx context.Context) (int, error) {
	n, err := s.requeue(ctx, "state = "+runningCode+" AND lease_until < now()", nil, "")
	if n > 0 {
		s.wake()
	}
	return n, err
}

// requeue requeues the running attempts that match where (with args) as
// failed attempts, each with the error "interrupted: <why> during attempt
// N"; an empty why says that the attempt's node stopped renewing its lease.
func (s *Store) requeue(ctx context.Context, where string, args []any, why string) (int, error) {
	var n int
	err := s.inTx(ctx, true, func(tx pgx.Tx) error {
		rows, err := queryRows(ctx, tx, "SELECT "+jobColsNoPayload+" FROM runlog_jobs WHERE "+where+
			fmt.Sprintf(" ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED", maxRequeue), args...)
		if err != nil {
			return err
		}
		n = len(rows)
		if n == 0 {
			return nil
		}
		targets := make([]string, len(rows))
		mayFail := make(map[string]bool)
		for i, r := range rows {
			targets[i] = r.spec.Target
			mayFail[r.spec.Target] = true // an orphan may free a half-open probe slot
		}
		brs := make(map[string]*breakerRow)
		if err := s.loadBreakers(ctx, tx, targets, mayFail, brs, nil); err != nil {
			return err
		}
		now := s.opts.Now()
		changed := make(map[*jobRow]bool, len(rows))
		for _, r := range rows {
			w := why
			if w == "" {
				w = fmt.Sprintf("node %s stopped renewing its lease", r.node)
			}
			op := state.OrphanJob(r.facts(), now, w)
			r.step(&brs[r.spec.Target].b, s.opts.Circuit, &op, "")
			changed[r] = true
		}
		_, err = s.writeRows(ctx, tx, rows, changed, brs)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.invalidate()
	}
	return n, nil
}
