package runlog

import (
	"context"
	"errors"
	"io"

	"github.com/runlog/runlog/internal/store"
)

// ErrNoBackup is returned by Backup on a runner whose store is not a
// journal directory (PostgreSQL): back that database up with PostgreSQL's
// own tools (pg_dump, or a base backup with WAL archiving).
var ErrNoBackup = errors.New("runlog: this runner's store is PostgreSQL, which runlog does not copy: back the database up with pg_dump or a base backup")

// ErrBackupRunning is returned by Backup while another backup of the same
// runner runs: one at a time.
var ErrBackupRunning = store.ErrBackupRunning

// Backup copies the runner's data directory while it runs, without pausing
// dispatch: it hands every file of a directory that opens to the runner's
// state as of one durable journal record (the sequence number returned) to
// emit, with its path relative to the copy's root (slash-separated), its
// size and its bytes; emit must read exactly size bytes. Every change
// acknowledged before Backup was called is in the copy. The steps (a
// snapshot, a checkpoint of the job table, the journal sealed at a durable
// record) are in docs/operations.md; runlog backup DIR DEST writes the
// files into DEST.
func (r *Runner) Backup(ctx context.Context, emit func(name string, size int64, rd io.Reader) error) (uint64, error) {
	if err := r.usable(); err != nil {
		return 0, err
	}
	b, ok := r.st.(store.Backuper)
	if !ok {
		return 0, ErrNoBackup
	}
	return b.Backup(func(name string, size int64, rd io.Reader) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return emit(name, size, rd)
	})
}
