package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// The targets' flow control (state.Flow) lives in runlog_flows, one row per
// target that had one. A transaction that may change a target's flow locks
// its row (FOR UPDATE, in target order, after the breakers), keeps it in
// the target's breakerRow (flow, flowOrig, flowLocked), applies
// state.FlowAfter to it op by op as the embedded store does, and writes it
// back with its breakers (queueBreakerWrites).

// flowCols are the columns of a flow, in the order readFlows scans them.
const flowCols = "target, limit_set, rate_milli, burst, tat, reserved, hold, ramp_window, ramp_busy"

// nonZeroFlowWhere selects the flows that are not the zero one (none
// unless a target has a limit, a hold or a ramp).
const nonZeroFlowWhere = "limit_set OR rate_milli <> 0 OR tat <> 0 OR reserved <> 0 OR hold <> 0 OR ramp_window <> 0 OR ramp_busy <> 0"

// nonZeroFlowsSQL reads every flow that is not the zero one.
const nonZeroFlowsSQL = "SELECT " + flowCols + " FROM runlog_flows WHERE " + nonZeroFlowWhere

// lockFlowsSQL locks and reads the flows of targets $1 in target order.
const lockFlowsSQL = "SELECT " + flowCols + ` FROM runlog_flows
	WHERE target = ANY($1) ORDER BY target COLLATE "C" FOR UPDATE`

// readFlows reads flow rows and closes rows.
func readFlows(rows rowScanner) (map[string]state.Flow, error) {
	defer rows.Close()
	out := make(map[string]state.Flow)
	for rows.Next() {
		var (
			t            string
			f            state.Flow
			burst, w, bz int32
		)
		if err := rows.Scan(&t, &f.LimitSet, &f.Limit.RateMilli, &burst, &f.Bucket.TAT, &f.Reserved, &f.Hold, &w, &bz); err != nil {
			return nil, err
		}
		f.Limit.Burst, f.Ramp = int(burst), retry.Ramp{Window: int(w), Busy: int(bz)}
		out[t] = f
	}
	return out, rows.Err()
}

// flowsNeeded returns the targets among ts whose flows a transaction must
// lock: those with a flow (nonZero), or a configured limit, or for which
// extra says so.
func (s *Store) flowsNeeded(ts []string, nonZero map[string]state.Flow, extra func(t string) bool) []string {
	var need []string
	for _, t := range ts {
		if _, ok := nonZero[t]; ok || !s.opts.Limits.For(t).IsZero() || (extra != nil && extra(t)) {
			need = append(need, t)
		}
	}
	slices.Sort(need)
	return slices.Compact(need)
}

// changedSince returns whether the breaker of a target, as the transaction
// locked it (brs), differs from the one the unlocked first read saw
// (nonZero, where a missing target had the zero breaker): a transaction
// that changed it committed in between, and may have changed the target's
// flow with it (a slow start begins as a breaker closes), which the
// unlocked read of the flows then missed. Such a flow must be locked and
// read again: else a claim that waited for the breaker's lock would see
// the breaker closed and no ramp, and start the whole backlog.
func changedSince(brs map[string]*breakerRow, nonZero map[string]retry.Breaker) func(t string) bool {
	return func(t string) bool {
		br := brs[t]
		return br != nil && br.locked && !sameBreaker(br.orig, nonZero[t])
	}
}

// loadFlows locks the flows of targets (whose breakers brs holds already)
// that it has not locked yet, creating the missing rows outside tx first
// as loadBreakers does.
func (s *Store) loadFlows(ctx context.Context, tx querier, targets []string, brs map[string]*breakerRow) error {
	var need []string
	for _, t := range targets {
		if br := brs[t]; br != nil && !br.flowLocked {
			need = append(need, t)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO runlog_flows (target) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", need); err != nil {
		return fmt.Errorf("pgstore: create flow rows: %w", err)
	}
	rows, err := tx.Query(ctx, lockFlowsSQL, need)
	if err != nil {
		return fmt.Errorf("pgstore: lock flows: %w", err)
	}
	m, err := readFlows(rows)
	if err != nil {
		return fmt.Errorf("pgstore: lock flows: %w", err)
	}
	for _, t := range need {
		f, ok := m[t]
		if !ok {
			return fmt.Errorf("pgstore: the flow row of target %q vanished while it was being locked; was runlog_flows changed by hand?", t)
		}
		br := brs[t]
		br.flow, br.flowOrig, br.flowLocked = f, f, true
	}
	return nil
}

// flowOf returns, for the planner, the flow of target as the transaction
// holds it and the limit in force.
func (s *Store) flowOf(brs map[string]*breakerRow) func(string) (state.Flow, retry.Limit) {
	return func(t string) (state.Flow, retry.Limit) {
		var f state.Flow
		if br := brs[t]; br != nil {
			f = br.flow
		}
		return f, state.LimitOf(s.opts.Limits, t, f)
	}
}

// feedFlow applies op, which changed target's breaker from before to
// br.b, to the target's flow if the transaction locked it.
func (s *Store) feedFlow(target string, br *breakerRow, before retry.Breaker, op *state.Op) {
	if !br.flowLocked {
		return
	}
	cfg := s.opts.Limits.For(target)
	if op.HoldUntil != 0 && target == "" {
		o := *op
		o.HoldUntil = 0 // the unnamed target is not held (as state.flowStep)
		op = &o
	}
	br.flow = state.FlowAfter(br.flow, state.LimitOf(s.opts.Limits, target, br.flow), s.opts.Circuit, before, br.b, op, cfg)
}

// queueFlowWrite queues the write of br's flow if it changed.
func queueFlowWrite(b *pgx.Batch, t string, br *breakerRow) {
	if !br.flowLocked || br.flow == br.flowOrig {
		return
	}
	f := br.flow
	b.Queue(`UPDATE runlog_flows SET limit_set = $2, rate_milli = $3, burst = $4, tat = $5, reserved = $6, hold = $7,
			ramp_window = $8, ramp_busy = $9 WHERE target = $1`,
		t, f.LimitSet, f.Limit.RateMilli, int32(f.Limit.Burst), f.Bucket.TAT, f.Reserved, f.Hold, int32(f.Ramp.Window), int32(f.Ramp.Busy))
	br.flowOrig = f
}

// SetLimit implements store.Store: the row of target, locked, takes the
// OpLimit (state.FlowAfter) in one transaction.
func (s *Store) SetLimit(ctx context.Context, now int64, target string, lim retry.Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	err := s.inTx(ctx, true, func(tx pgx.Tx) error {
		brs := map[string]*breakerRow{target: {}}
		if err := s.loadFlows(ctx, tx, []string{target}, brs); err != nil {
			return err
		}
		br := brs[target]
		op := state.Op{Kind: state.OpLimit, At: now, Target: target, Limit: lim}
		br.flow = state.FlowAfter(br.flow, state.LimitOf(s.opts.Limits, target, br.flow), s.opts.Circuit, retry.Breaker{}, retry.Breaker{}, &op, s.opts.Limits.For(target))
		var b pgx.Batch
		queueFlowWrite(&b, target, br)
		return sendBatch(ctx, tx, &b)
	})
	if err != nil {
		return fmt.Errorf("pgstore: set limit: %w", err)
	}
	return nil
}

// flowTargets adds to the targets' infos their flows and limits in force,
// and the targets that have only a flow or a configured limit.
func (s *Store) flowTargets(ctx context.Context, byTarget map[string]*store.TargetInfo, info func(string) *store.TargetInfo) error {
	rows, err := s.pool.Query(ctx, nonZeroFlowsSQL)
	if err != nil {
		return fmt.Errorf("pgstore: targets' flows: %w", err)
	}
	flows, err := readFlows(rows)
	if err != nil {
		return fmt.Errorf("pgstore: targets' flows: %w", err)
	}
	for t := range flows {
		info(t)
	}
	if c := s.opts.Limits; c != nil {
		for t := range c.PerTarget {
			info(t)
		}
	}
	for t, ti := range byTarget {
		ti.Flow = flows[t]
		ti.Limit = state.LimitOf(s.opts.Limits, t, ti.Flow)
	}
	return nil
}

// settleFlows settles, at an expiry at now, every kept flow (state.Flow's
// Settle), as the embedded store's expire does: what has run out (a hold,
// a reservation, a full bucket) is dropped, so that both stores keep the
// same flows and decide the same later. The rows to change are found
// without a lock; only they are locked (SKIP LOCKED: a row that a claim or
// an outcome holds is settled by that transaction's own ops).
func (s *Store) settleFlows(ctx context.Context, now int64) error {
	rows, err := s.pool.Query(ctx, nonZeroFlowsSQL)
	if err != nil {
		return fmt.Errorf("pgstore: read flows to settle: %w", err)
	}
	flows, err := readFlows(rows)
	if err != nil {
		return fmt.Errorf("pgstore: read flows to settle: %w", err)
	}
	var run []string
	for t, f := range flows {
		if f.Settle(now) != f {
			run = append(run, t)
		}
	}
	if len(run) == 0 {
		return nil
	}
	slices.Sort(run)
	err = s.inTx(ctx, true, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT "+flowCols+` FROM runlog_flows
			WHERE target = ANY($1) ORDER BY target COLLATE "C" FOR UPDATE SKIP LOCKED`, run)
		if err != nil {
			return err
		}
		m, err := readFlows(rows)
		if err != nil {
			return err
		}
		var b pgx.Batch
		for t, f := range m {
			br := &breakerRow{flow: f.Settle(now), flowOrig: f, flowLocked: true}
			queueFlowWrite(&b, t, br)
		}
		return sendBatch(ctx, tx, &b)
	})
	if err != nil {
		return fmt.Errorf("pgstore: settle flows: %w", err)
	}
	return nil
}
