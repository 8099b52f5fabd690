package store

import (
	"errors"
	"io"
)

// ErrBackupRunning is returned by Backuper.Backup while another backup of
// the same store runs: one at a time (each holds a checkpoint of the job
// table on disk while it copies).
var ErrBackupRunning = errors.New("a backup of this store is already running: wait for it to end and try again")

// Backuper is a store that can copy its data, while it runs, into a
// directory that opens to its state as of one durable journal record (the
// embedded journal): Backup hands every file of the copy to emit (its path
// relative to the copy's root, slash-separated, its size and its bytes)
// and returns that record's sequence number; every change acknowledged
// before Backup was called is in the copy. A PostgreSQL store is backed up
// with PostgreSQL's own tools and is not a Backuper.
type Backuper interface {
	Backup(emit func(name string, size int64, r io.Reader) error) (uint64, error)
}
