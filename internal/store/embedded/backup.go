package embedded

import (
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/vfs"
)

// backupTmp is the subdirectory of a store's directory where Backup makes
// the job table's checkpoint (hard links of its immutable files) while it
// copies it out; it is removed afterwards, and a leftover one (a crash in
// the middle of a backup) is removed by the next backup.
const backupTmp = "backup.tmp"

var _ store.Backuper = (*Store)(nil)

// backups holds the stores a backup runs on (one at a time per store: it
// has one checkpoint directory).
var backups sync.Map

// Backup copies, while the store runs, a directory that opens to the state
// as of one durable journal record (the returned sequence number): every
// change acknowledged before Backup was called is in it. It hands each file
// to emit, with its path relative to the copy's root (slash-separated;
// "table/..." for the job table), its size and its bytes; emit must read
// exactly size bytes. An error from emit ends the backup and is returned.
//
// The protocol, in the store's own coordination:
//
//  1. write a snapshot (unless snapshots are off), so that the copy replays
//     little when it is opened;
//  2. take the snapshotter's lock, so that no snapshot is published and no
//     journal segment dropped until the files are open;
//  3. checkpoint the job table (pebble's Checkpoint: a consistent view of
//     its flushed files, hard-linked into DIR/backup.tmp). Every snapshot
//     on disk was published after a flush of the table that made durable
//     everything it relies on, so the checkpoint holds that; it may hold
//     more, derived only from records durable when it was taken (the
//     spiller writes nothing before its records are durable);
//  4. rotate the journal: the rotation returns once every record queued
//     before it is durable, and seals the segment that holds them; the
//     copy's journal is the sealed segments, up to the last record before
//     the rotation, which is at least every record the table reflects;
//  5. open every snapshot and sealed segment, then release the lock: an
//     open file stays readable after a later drop removes its name.
//
// The copy holds no MARK (the marker may name the segment the rotation
// started, which the copy does not hold) and no LOCK; opening it creates
// both. The copy is what a crash right after the rotation would leave,
// less the active segment: the open rebuilds the state from the newest
// snapshot and the journal after it, and the table is at least as far as
// that snapshot needs and no further than the journal (docs/snapshots.md).
func (s *Store) Backup(emit func(name string, size int64, r io.Reader) error) (uint64, error) {
	if _, busy := backups.LoadOrStore(s, true); busy {
		return 0, store.ErrBackupRunning
	}
	defer backups.Delete(s)
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	// Close waits for this (it sets closed under s.mu, then waits), so
	// the table and the journal stay open until the backup ends.
	s.snaps.wg.Add(1)
	s.mu.Unlock()
	defer s.snaps.wg.Done()

	if s.snaps.threshold > 0 {
		if _, err := s.snaps.snapshot(); err != nil {
			return 0, fmt.Errorf("embedded: backup: write a snapshot first: %w", err)
		}
	}
	files, seq, err := s.openBackupFiles()
	defer func() {
		for _, f := range files {
			f.close()
		}
		tmp := filepath.Join(s.snaps.dir, backupTmp)
		if rerr := s.tbl.fs.RemoveAll(tmp); rerr != nil && s.snaps.logf != nil {
			s.snaps.logf("runlog: backup: remove %s: %v (remove it by hand; the next backup also does)", tmp, rerr)
		}
	}()
	if err != nil {
		return 0, err
	}
	for _, f := range files {
		var r io.Reader = io.NewSectionReader(f.r, 0, f.size)
		if f.pad > 0 {
			r = io.MultiReader(r, io.LimitReader(zeros{}, f.pad))
		}
		if err := emit(f.name, f.size+f.pad, r); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// backupFile is one open file of a backup.
type backupFile struct {
	name  string // relative to the copy's root, slash-separated
	size  int64
	pad   int64 // zero bytes emitted after the file's size bytes
	r     io.ReaderAt
	close func() error
}

// openBackupFiles does steps 2 to 5 of Backup: it returns the files of the
// copy, open, and the last record the copy holds.
func (s *Store) openBackupFiles() (files []backupFile, seq uint64, err error) {
	c := s.snaps
	c.work.Lock()
	defer c.work.Unlock()
	defer func() {
		if err != nil {
			for _, f := range files {
				f.close()
			}
			files = nil
		}
	}()
	tmp := filepath.Join(c.dir, backupTmp)
	tfs := s.tbl.fs
	if err := tfs.RemoveAll(tmp); err != nil {
		return nil, 0, fmt.Errorf("embedded: backup: remove the leftover %s: %w", tmp, err)
	}
	if err := s.tbl.db.Checkpoint(tmp); err != nil {
		return nil, 0, fmt.Errorf("embedded: backup: checkpoint the job table into %s: %w", tmp, err)
	}
	next, err := s.j.Rotate()
	if err != nil {
		return nil, 0, fmt.Errorf("embedded: backup: seal the journal's active segment: %w", err)
	}
	seq = next - 1

	infos, err := snapshot.List(c.fsys, c.dir)
	if err != nil {
		return nil, 0, err
	}
	for _, in := range infos {
		if in.Seq > seq {
			continue // cannot happen under the lock; never copy one the journal does not reach
		}
		f, err := openJournalFile(c.fsys, in.Path)
		if err != nil {
			return files, 0, err
		}
		files = append(files, f)
	}
	newest := -1
	for _, sg := range s.j.Segments() {
		if sg.FirstSeq > seq {
			continue // the segment the rotation started, and any after it
		}
		f, err := openJournalFile(c.fsys, sg.Path)
		if err != nil {
			return files, 0, err
		}
		files = append(files, f)
		newest = len(files) - 1
	}
	if newest >= 0 {
		// The sealed segment is the copy's newest: padded with zeros to
		// its preallocated size, it reads as an active segment's free
		// space (a newest segment shorter than that reads as cut).
		f := &files[newest]
		pre, err := journal.PreallocSize(f.r)
		if err != nil {
			return files, 0, fmt.Errorf("embedded: backup: %s: %w", f.name, err)
		}
		f.pad = max(0, pre-f.size)
	}
	err = walkTable(tfs, tmp, "", func(rel string, f pebblevfs.File, size int64) {
		files = append(files, backupFile{name: tableDir + "/" + rel, size: size, r: f, close: f.Close})
	})
	return files, seq, err
}

// openJournalFile opens a snapshot or segment file of the journal's
// filesystem for a backup.
func openJournalFile(fsys vfs.FS, path string) (backupFile, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return backupFile{}, fmt.Errorf("embedded: backup: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return backupFile{}, fmt.Errorf("embedded: backup: %w", err)
	}
	return backupFile{name: filepath.Base(path), size: fi.Size(), r: f, close: f.Close}, nil
}

// walkTable opens every file under dir (on the table's filesystem), in
// name order, and passes it with its path relative to dir.
func walkTable(tfs pebblevfs.FS, dir, rel string, fn func(rel string, f pebblevfs.File, size int64)) error {
	names, err := tfs.List(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Errorf("embedded: backup: list the table's checkpoint: %w", err)
	}
	slices.Sort(names)
	for _, name := range names {
		r := name
		if rel != "" {
			r = rel + "/" + name
		}
		path := filepath.Join(dir, filepath.FromSlash(r))
		fi, err := tfs.Stat(path)
		if err != nil {
			return fmt.Errorf("embedded: backup: %w", err)
		}
		if fi.IsDir() {
			if err := walkTable(tfs, dir, r, fn); err != nil {
				return err
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		f, err := tfs.Open(path)
		if err != nil {
			return fmt.Errorf("embedded: backup: %w", err)
		}
		fn(r, f, fi.Size())
	}
	return nil
}

// BackupName reports whether name (slash-separated, relative to a copy's
// root) is a file a backup may hold: a snapshot, a journal segment or a
// file of the job table, never a path that leaves the root. Restoring
// code checks every name it is given with it.
func BackupName(name string) bool {
	if !fs.ValidPath(name) || name == "." || strings.Contains(name, "\\") {
		return false
	}
	dir, base, nested := strings.Cut(name, "/")
	if nested {
		return dir == tableDir && base != ""
	}
	return strings.HasSuffix(name, ".seg") || (strings.HasPrefix(name, "snap-") && strings.HasSuffix(name, ".snap"))
}
