package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// Discard implements store.Store: it locks the job's row, applies
// state.Discardable to it and deletes it, which frees its key (the unique
// index holds the rows' keys).
func (s *Store) Discard(ctx context.Context, now int64, id uint64) error {
	if err := s.usable(); err != nil {
		return err
	}
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		r, err := scanRow(tx.QueryRow(ctx, "SELECT "+jobCols+" FROM runlog_jobs WHERE id = $1 FOR UPDATE", int64(id)))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		j := r.toJob()
		if err := store.DiscardError(id, j.State, state.Discardable(&j)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DELETE FROM runlog_jobs WHERE id = $1", int64(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: discard job %d: %w", id, err)
	}
	return nil
}
