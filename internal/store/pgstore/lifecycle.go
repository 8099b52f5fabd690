package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// The endpoint lifecycle on PostgreSQL (state/lifecycle.go for the rule):
// a row of runlog_target_life per target whose lifecycle is not the zero
// one. An outcome batch reads every row in its first round trip (the
// table holds only the targets in trouble), runs state.LifeAfter and
// state.DisableRule over its recorded outcomes in batch order, as the
// embedded store applies them, and, only for a target whose lifecycle
// changes, takes the target's transaction-scoped advisory lock, reads its
// row again and writes it: the disable is in the same transaction as the
// outcome that caused it. The claim skips the jobs of disabled targets in
// its query (dueWhere), so they are held, not deferred again and again.

// disabledTargetSet is the SQL query of the disabled targets, for a
// NOT IN (see dueWhere).
const disabledTargetSet = `SELECT target FROM runlog_target_life WHERE disabled`

// lifeCols are the columns of a runlog_target_life row (scanLives).
const lifeCols = `target, failing, failing_since, disabled, disabled_at, reason`

// lifeLockSQL takes the transaction-scoped advisory lock of target $1's
// lifecycle: outcome batches and enables of one target serialize on it.
const lifeLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('runlog_target_life:' || $1::text, 0))`

// scanLives reads lifecycle rows and closes rows.
func scanLives(rows rowScanner) (map[string]state.TargetLife, error) {
	defer rows.Close()
	out := make(map[string]state.TargetLife)
	for rows.Next() {
		var (
			t string
			l state.TargetLife
		)
		if err := rows.Scan(&t, &l.Failing, &l.FailingSince, &l.Disabled, &l.DisabledAt, &l.Reason); err != nil {
			return nil, err
		}
		out[t] = l
	}
	return out, rows.Err()
}

// lifeStep is one recorded outcome of a target, for settleLife.
type lifeStep struct {
	op   *state.Op
	gone bool
}

// runLife applies the lifecycle rule to l for steps in order, under
// disableAfter, and returns the lifecycle after them with the disables
// they bring (at most one).
func runLife(l state.TargetLife, target string, steps []lifeStep, disableAfter int64) (state.TargetLife, []state.Op) {
	var dis []state.Op
	for _, st := range steps {
		l = state.LifeAfter(l, st.op)
		if d := state.DisableRule(l, target, st.op, st.gone, disableAfter); d.Kind != 0 {
			l = state.ApplyLife(l, d.Life, d.At)
			dis = append(dis, d)
		}
	}
	return l, dis
}

// settleLife applies the lifecycle rule to the recorded outcomes ops (nil
// where not recorded; targets[i] the target of ops[i], outs[i].Gone its
// gone flag) in tx, given lives, the rows read at the transaction's start
// (nil: read none), and returns the disables it wrote.
func (s *Store) settleLife(ctx context.Context, tx querier, ops []*state.Op, targets []string, outs []store.Outcome, lives map[string]state.TargetLife) ([]state.Op, error) {
	per := make(map[string][]lifeStep)
	for i, op := range ops {
		if op != nil {
			per[targets[i]] = append(per[targets[i]], lifeStep{op: op, gone: outs[i].Gone})
		}
	}
	var touch []string
	for t, steps := range per {
		if lives == nil {
			touch = append(touch, t)
			continue
		}
		l := lives[t]
		if n, dis := runLife(l, t, steps, s.opts.DisableAfterMS); n != l || len(dis) > 0 {
			touch = append(touch, t)
		}
	}
	if len(touch) == 0 {
		return nil, nil // the usual case: every target healthy, and stays so
	}
	slices.Sort(touch)
	b := &pgx.Batch{}
	for _, t := range touch {
		b.Queue(lifeLockSQL, t)
	}
	var fresh map[string]state.TargetLife
	b.Queue("SELECT "+lifeCols+" FROM runlog_target_life WHERE target = ANY($1)", touch).Query(func(rows pgx.Rows) error {
		var err error
		fresh, err = scanLives(rows)
		return err
	})
	if err := sendBatch(ctx, tx, b); err != nil {
		return nil, fmt.Errorf("read the targets' lifecycles: %w", err)
	}
	var disabled []state.Op
	w := &pgx.Batch{}
	for _, t := range touch {
		l := fresh[t]
		n, dis := runLife(l, t, per[t], s.opts.DisableAfterMS)
		disabled = append(disabled, dis...)
		if n != l {
			queueLifeWrite(w, t, n)
		}
	}
	if w.Len() > 0 {
		if err := sendBatch(ctx, tx, w); err != nil {
			return nil, fmt.Errorf("write the targets' lifecycles: %w", err)
		}
	}
	return disabled, nil
}

// queueLifeWrite queues in b the write of target's lifecycle l: its row,
// or no row for the zero one.
func queueLifeWrite(b *pgx.Batch, target string, l state.TargetLife) {
	if l.IsZero() {
		b.Queue("DELETE FROM runlog_target_life WHERE target = $1", target)
		return
	}
	b.Queue(`INSERT INTO runlog_target_life (`+lifeCols+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (target) DO UPDATE SET failing = $2, failing_since = $3, disabled = $4, disabled_at = $5, reason = $6`,
		target, l.Failing, l.FailingSince, l.Disabled, l.DisabledAt, l.Reason)
}

// notifyDisabled tells the engine of the disables, committed.
func (s *Store) notifyDisabled(ops []state.Op) {
	if len(ops) == 0 {
		return
	}
	s.mu.Lock()
	fn := s.notify.TargetDisabled
	s.mu.Unlock()
	if fn == nil {
		return
	}
	for _, op := range ops {
		fn(op.Life.Target, op.Life.Reason) // the engine logs it
	}
}

// EnableTarget implements store.Store: in one transaction, under the
// target's lifecycle lock, it deletes the row of the disabled target; the
// nodes are woken, as the target's held jobs may start now.
func (s *Store) EnableTarget(ctx context.Context, now int64, target string) (store.TargetInfo, error) {
	if err := s.usable(); err != nil {
		return store.TargetInfo{}, err
	}
	info := store.TargetInfo{Target: target}
	err := s.inTx(ctx, true, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lifeLockSQL, target); err != nil {
			return err
		}
		var disabled bool
		err := tx.QueryRow(ctx, "SELECT disabled FROM runlog_target_life WHERE target = $1", target).Scan(&disabled)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !disabled) {
			return store.ErrNotDisabled
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM runlog_target_life WHERE target = $1", target); err != nil {
			return err
		}
		brs, err := scanBreakers(ctx, tx, breakersOfSQL, []string{target})
		if err != nil {
			return err
		}
		info.Breaker = brs[target]
		return tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = `+pendingCode+`), count(*) FILTER (WHERE state = `+runningCode+`)
			FROM runlog_jobs WHERE target = $1 AND state IN (`+pendingCode+`, `+runningCode+`)`, target).Scan(&info.Pending, &info.Running)
	})
	if errors.Is(err, store.ErrNotDisabled) {
		return store.TargetInfo{}, err
	}
	if err != nil {
		return store.TargetInfo{}, fmt.Errorf("pgstore: enable target %q: %w", target, err)
	}
	s.mu.Lock()
	delete(s.disabled, target)
	s.mu.Unlock()
	s.invalidate()
	s.wake()
	s.wakeNodes()
	return info, nil
}

// addLives adds the lifecycle rows to the targets of Targets.
func (s *Store) addLives(ctx context.Context, byTarget map[string]*store.TargetInfo) error {
	rows, err := s.pool.Query(ctx, "SELECT "+lifeCols+" FROM runlog_target_life")
	if err != nil {
		return fmt.Errorf("pgstore: target lifecycles: %w", err)
	}
	lives, err := scanLives(rows)
	if err != nil {
		return fmt.Errorf("pgstore: target lifecycles: %w", err)
	}
	for t, l := range lives {
		ti, ok := byTarget[t]
		if !ok {
			ti = &store.TargetInfo{Target: t}
			byTarget[t] = ti
		}
		ti.Life = l
	}
	return nil
}

// noteDisabled records the targets disabled as an outcome batch saw them:
// those its first round trip read (lives, nil when it read none) and
// those it disabled.
func (s *Store) noteDisabled(lives map[string]state.TargetLife, disabled []state.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lives != nil {
		clear(s.disabled)
		for t, l := range lives {
			if l.Disabled {
				s.setDisabledLocked(t)
			}
		}
	}
	for _, op := range disabled {
		s.setDisabledLocked(op.Life.Target)
	}
}

func (s *Store) setDisabledLocked(target string) {
	if s.disabled == nil {
		s.disabled = make(map[string]bool)
	}
	s.disabled[target] = true
}

// dueAddedTo is dueAdded for a job of target. For a target this node saw
// disabled it drops the cached next due time instead (the next NextDue
// asks the database, which leaves held jobs out): a job held there must
// not make the dispatcher claim in vain, and a set gone stale (enabled on
// another node meanwhile) must not hide a due job. Another node's
// disable, not seen here yet, costs one claim that finds nothing.
func (s *Store) dueAddedTo(target string, due int64) {
	s.mu.Lock()
	held := s.disabled[target]
	s.mu.Unlock()
	if held {
		s.invalidate()
		return
	}
	s.dueAdded(due)
}
