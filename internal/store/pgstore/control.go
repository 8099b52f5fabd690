package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// Cancel implements store.Store. running is true only when the attempt
// runs on this node (the engine cancels it); an attempt on another node is
// cancelled there, through a runlog_cancel notification.
func (s *Store) Cancel(ctx context.Context, now int64, id uint64, reason string) (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	var running bool
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		running = false
		var (
			st   int16
			node string
		)
		err := tx.QueryRow(ctx, "SELECT state, node FROM runlog_jobs WHERE id = $1 FOR UPDATE", int64(id)).Scan(&st, &node)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		js := state.JobState(st)
		if js != state.Pending && js != state.Running {
			return store.ErrFinished
		}
		if _, err := tx.Exec(ctx, "UPDATE runlog_jobs SET state = "+cancelledCode+", finished_at = $2, reason = $3, lease_until = NULL WHERE id = $1",
			int64(id), now, reason); err != nil {
			return err
		}
		if js == state.Running && node != s.opts.Node {
			_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", chanCancel, cancelPayload(id, node))
			return err
		}
		running = js == state.Running
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("pgstore: cancel job %d: %w", id, err)
	}
	s.invalidate()
	return running, nil
}

// Retry implements store.Store.
func (s *Store) Retry(ctx context.Context, now int64, id uint64) error {
	if err := s.usable(); err != nil {
		return err
	}
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		var st int16
		err := tx.QueryRow(ctx, "SELECT state FROM runlog_jobs WHERE id = $1 FOR UPDATE", int64(id)).Scan(&st)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if js := state.JobState(st); js != state.Failed && js != state.Cancelled {
			return store.ErrNotFailed
		}
		if _, err := tx.Exec(ctx, `UPDATE runlog_jobs SET state = `+pendingCode+`, due = $2, first_due = $2, fails = 0,
			finished_at = 0, reason = '', last_error = '' WHERE id = $1`, int64(id), now); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, '')", chanWake)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: retry job %d: %w", id, err)
	}
	s.invalidate()
	return nil
}
