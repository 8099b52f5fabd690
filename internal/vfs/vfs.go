// Package vfs is the small filesystem interface that runlog's durable storage
// (the journal and its snapshots, packages journal and snapshot) is written
// against.
//
// Two implementations ship with it:
//
//   - OS, the real filesystem. File.Sync is fdatasync(2); FS.SyncDir opens
//     the directory and fsyncs it; FS.Lock takes an exclusive flock(2).
//   - Mem, an in-memory filesystem for tests. It remembers which file bytes
//     and which directory entries were synced, so CrashClone can produce the
//     filesystem a power cut would leave behind, and it can fail the Nth
//     operation (or every operation matching a predicate) to walk every
//     error path of the code above it, or be given a capacity
//     (Mem.SetCapacity) to act as a disk that fills up (ENOSPC).
//
// Durability model, the same for both: a file's bytes are durable once
// File.Sync returned nil; a file's existence under a name (after Create,
// Rename or Remove) is durable once SyncDir of its directory returned nil.
// Code that needs a new file to survive a crash must therefore Sync the file
// and then SyncDir its directory.
package vfs

import (
	"errors"
	"io"
	"io/fs"
)

// FS is the set of filesystem operations durable storage needs. Paths are
// ordinary OS paths; implementations clean them.
type FS interface {
	// Create creates the named file for reading and writing, truncating it
	// if it exists. New files get mode 0600.
	Create(name string) (File, error)
	// Open opens the named file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	// Remove removes the named file.
	Remove(name string) error
	// Rename renames oldname to newname, replacing newname if it exists.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents with mode 0700.
	MkdirAll(dir string) error
	// List returns the names (not paths) of the entries of dir, sorted.
	List(dir string) ([]string, error)
	// Stat describes the named file.
	Stat(name string) (fs.FileInfo, error)
	// Lock takes an exclusive lock on the named file, creating it if
	// needed, without waiting. If another holder has it, the error wraps
	// ErrLocked. Closing the returned io.Closer releases the lock.
	Lock(name string) (io.Closer, error)
	// SyncDir makes the directory entries of dir durable (fsync of the
	// directory).
	SyncDir(dir string) error
}

// File is an open file.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Seeker
	io.Closer
	// Sync makes the file's data and size durable (fdatasync). After a
	// failed Sync the state of unsynced data is unknown: callers must not
	// retry and assume success.
	Sync() error
	// Truncate changes the size of the file.
	Truncate(size int64) error
	// Stat describes the file.
	Stat() (fs.FileInfo, error)
}

// ErrLocked is wrapped by FS.Lock when another holder has the lock.
var ErrLocked = errors.New("vfs: file is locked by another holder")
