package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// Finish implements store.Store: in one transaction it records the outcomes
// and then claims up to lim.Max due jobs as Claim does, for the slots the
// finished attempts held. An outcome is recorded only if its attempt is
// still open and was started by this node (fencing): an attempt that was
// rescued after this node missed its lease has ended already, and its late
// outcome is logged and dropped.
func (s *Store) Finish(ctx context.Context, now int64, rnd func() uint32, outs []store.Outcome, lim store.Limits) ([]store.Claim, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	// One draw per outcome, in order, as the embedded store does; drawn
	// once, so that a transaction that runs again decides the same.
	rs := make([]uint32, len(outs))
	for i := range outs {
		rs[i] = rnd()
	}
	gen := s.dueGen()
	var (
		fenced   []store.Outcome
		requeued bool
		res      claimResult
	)
	err := s.inTx(ctx, true, func(tx pgx.Tx) error {
		var (
			err error
			brs = make(map[string]*breakerRow)
		)
		res = claimResult{}
		fenced, requeued, err = s.settleTx(ctx, tx, now, rs, outs, brs)
		if err != nil || lim.Max <= 0 {
			return err
		}
		res, err = s.claimTx(ctx, tx, now, lim, brs)
		return err
	})
	s.mu.Lock()
	for _, o := range outs {
		delete(s.inflight, o.ID)
	}
	s.mu.Unlock()
	if err != nil {
		s.invalidate()
		return nil, fmt.Errorf("pgstore: finish: %w", err)
	}
	switch {
	case lim.Max > 0:
		s.claimed(gen, res)
	case requeued:
		// A retry is pending again; successes and deaths leave the
		// pending jobs, and so the next due time, as they were.
		s.invalidate()
	}
	for _, o := range fenced {
		s.log.Warn("pgstore: outcome dropped: the attempt is no longer this node's (its lease expired and it was requeued, or the job is gone)",
			"job", o.ID, "attempt", o.Attempt, "class", o.Class.String(), "node", s.opts.Node)
	}
	return res.claims, nil
}

// settleTx records outcomes in tx (rs holds one random draw per outcome)
// and returns the fenced-off ones and whether a job became pending again.
// The breakers it reads (and writes) are added to brs.
func (s *Store) settleTx(ctx context.Context, tx pgx.Tx, now int64, rs []uint32, outs []store.Outcome, brs map[string]*breakerRow) (fenced []store.Outcome, requeued bool, err error) {
	if len(outs) == 0 {
		return nil, false, nil
	}
	ids := make([]int64, len(outs))
	for i := range outs {
		ids[i] = int64(outs[i].ID)
	}
	rows, err := queryRows(ctx, tx, "SELECT "+jobColsNoPayload+" FROM runlog_jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE", ids)
	if err != nil {
		return nil, false, err
	}
	byID := make(map[uint64]*jobRow, len(rows))
	targets := make([]string, len(rows))
	for i, r := range rows {
		byID[r.id] = r
		targets[i] = r.spec.Target
	}
	mayFail := make(map[string]bool)
	for _, o := range outs {
		if r := byID[o.ID]; r != nil && (!o.Class.Valid() || o.Class.BreakerFailed()) {
			mayFail[r.spec.Target] = true
		}
	}
	if err := s.loadBreakers(ctx, tx, targets, mayFail, brs); err != nil {
		return nil, false, err
	}
	changed := make(map[*jobRow]bool)
	for i, o := range outs {
		r := byID[o.ID]
		var a *attempt
		if r != nil {
			a = r.open(o.Attempt)
		}
		if a == nil || a.Node != s.opts.Node {
			fenced = append(fenced, o)
			continue
		}
		op := state.SettleJob(r.facts(), o.Attempt, o.Class, o.AfterMS, o.Error, o.Output, now, rs[i])
		apply(r, &brs[r.spec.Target].b, s.opts.Circuit, &op, "")
		changed[r] = true
	}
	requeued, err = s.writeRows(ctx, tx, rows, changed, brs)
	return fenced, requeued, err
}
