package embedded

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/vfs"
)

// rebuild is the check Open and Verify share, so that the two cannot
// drift: it rebuilds the state of dir from its newest intact snapshot and
// the journal records after it (read with replay), and checks that the two
// fit: the journal, which ends at record journalLast, must hold every
// record after the snapshot, and the snapshot must not cover records the
// journal never reached. It returns the state, the last record applied, the
// snapshot used and the damaged snapshots skipped. A directory that does
// not fit is an error wrapping journal.ErrCorrupt that says what to do.
func rebuild(fsys vfs.FS, dir string, cfg state.Config, journalLast uint64,
	replay func(from uint64, fn func(journal.Position, []byte) error) error, onOp opHook) (*state.State, byte, uint64, snapshot.Info, []error, error) {
	st, v, last, base, damaged, err := loadStateV(fsys, dir, cfg, 0, replay, onOp)
	if err != nil {
		return nil, 0, 0, base, damaged, err
	}
	if base.Seq > journalLast {
		return nil, 0, 0, base, damaged, fmt.Errorf("%w: %s: snapshot %s covers records up to %d, but the journal ends at record %d: the segment files that held records %d to %d (and maybe later ones) were deleted or cut; restore the directory from a backup",
			journal.ErrCorrupt, dir, base.Path, base.Seq, journalLast, journalLast+1, base.Seq)
	}
	if last < journalLast {
		return nil, 0, 0, base, damaged, fmt.Errorf("%w: %s: the journal ends at record %d, but only records up to %d could be read after snapshot %d; restore the directory from a backup",
			journal.ErrCorrupt, dir, journalLast, last, base.Seq)
	}
	return st, v, last, base, damaged, nil
}

// VerifyReport is what Verify found in a directory.
type VerifyReport struct {
	// Journal is the journal's own report (segments, records, a torn tail
	// that opening would cut off).
	Journal journal.Report
	// Snapshot is the snapshot Open would start from (zero if none).
	Snapshot snapshot.Info
	// Damaged lists the damaged snapshots Open would skip: it can, because
	// the journal still holds every record after the older state it uses
	// instead, but the files are damaged and should be looked at.
	Damaged []error
	// Jobs is how many jobs the rebuilt state counts (those the job table
	// keeps included).
	Jobs int
	// TableJobs is how many finished jobs the job table holds, every one
	// of them read (pebble checks each block's checksum) and decoded.
	TableJobs int
	// TableInUse is set when the job table is open in a running process,
	// which locks it: it was not read (stop the server to check it).
	TableInUse bool
}

// Verify checks the directory dir as Open does, without locking it or
// changing anything: every segment of the journal (journal.Verify), then
// the snapshots and the journal after the newest intact one, rebuilt into a
// state with the same function Open uses, so that Verify fails exactly when
// Open would. A torn tail of the newest segment, which Open cuts off, is
// reported in Journal.Torn and is not an error. Damage is an error wrapping
// journal.ErrCorrupt (a *journal.CorruptError when it is in one segment
// file) that says what to do. Verify needs about the memory Open needs,
// since it rebuilds the state.
//
// Verify takes no lock, so it can run beside a server; a rotation, snapshot
// or drop between its reads can make a healthy directory look damaged (a
// segment trimmed as it is sealed, a snapshot removed as a newer one
// replaces it), so damage found while the directory's segment or snapshot
// files changed under it is checked again, up to three times in all.
func Verify(fsys vfs.FS, dir string, opts Options) (VerifyReport, error) {
	if fsys == nil {
		fsys = vfs.OS{}
	}
	for try := 1; ; try++ {
		before := fileNames(fsys, dir)
		rep, err := verifyOnce(fsys, dir, opts)
		if err == nil || !errors.Is(err, journal.ErrCorrupt) || try == 3 || fileNames(fsys, dir) == before {
			return rep, err
		}
	}
}

// fileNames lists the segment and snapshot files of dir, the files a
// running server creates and removes, as one string ("" if dir cannot be
// listed).
func fileNames(fsys vfs.FS, dir string) string {
	names, err := fsys.List(dir)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, n := range names {
		if strings.HasSuffix(n, ".seg") || strings.HasSuffix(n, ".snap") {
			b.WriteString(n)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// verifyOnce is one pass of Verify.
func verifyOnce(fsys vfs.FS, dir string, opts Options) (VerifyReport, error) {
	jopts := opts.Journal
	jopts.FS = fsys
	var rep VerifyReport
	var err error
	if rep.Journal, err = journal.Verify(fsys, dir, jopts); err != nil {
		return rep, err
	}
	scan := scanReplay(fsys, dir, jopts)
	oldest := rep.Journal.OldestSeq
	replay := func(from uint64, fn func(journal.Position, []byte) error) error {
		if from != 0 && from < oldest {
			// As Journal.Replay: the records before the oldest segment are gone.
			return fmt.Errorf("%w: replay from sequence number %d asked for, but the oldest record kept is %d", journal.ErrDropped, from, oldest)
		}
		return scan(from, fn)
	}
	st, _, _, base, damaged, err := rebuild(fsys, dir, opts.State, rep.Journal.NextSeq-1, replay, nil)
	rep.Snapshot, rep.Damaged = base, damaged
	if err != nil {
		return rep, err
	}
	rep.Jobs = st.Counts().Total()
	rep.TableJobs, rep.TableInUse, err = verifyTable(opts.TableFS, fsys, dir, st, base)
	return rep, err
}

// verifyTable reads the whole job table of dir, as state st (rebuilt from
// snapshot base) relies on it: every key (pebble checks each block's
// checksum), every record decoded, and in each expiry partition at least
// the jobs st counts there but does not hold. It returns how many records
// it read, or that the table is locked by a running process. Damage wraps
// journal.ErrCorrupt.
func verifyTable(tfs pebblevfs.FS, fsys vfs.FS, dir string, st *state.State, base snapshot.Info) (int, bool, error) {
	if tfs == nil {
		if m, ok := fsys.(interface{ TableFS() pebblevfs.FS }); ok {
			tfs = m.TableFS()
		} else {
			tfs = pebblevfs.Default
		}
	}
	path := filepath.Join(dir, tableDir)
	held, all := finishedHeld(st), st.Counts()
	needed := all.Succeeded + all.Failed + all.Cancelled - held
	if base.Path == "" {
		return 0, false, nil // open rebuilds the table from the journal
	}
	if names, err := tfs.List(path); len(names) == 0 || err != nil {
		if needed > 0 {
			return 0, false, fmt.Errorf("%w: %s: snapshot %s relies on the job table %s for %d finished jobs, but the table is gone; restore the directory from a backup", journal.ErrCorrupt, dir, base.Path, path, needed)
		}
		return 0, false, nil
	}
	o, cache := tableOptions(tfs, nil, true)
	db, err := pebble.Open(path, o)
	cache.Unref()
	if err != nil {
		if tableLocked(err) {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("%w: %v", journal.ErrCorrupt, tableError(path, err))
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", journal.ErrCorrupt, tableError(path, err))
	}
	defer it.Close()
	inTable := make(map[int64]state.Counts)
	records := 0
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 18 || k[0] != 'p' || k[9] != tagRecord {
			continue
		}
		j, err := state.DecodeJob(it.Value())
		if err != nil {
			return records, false, fmt.Errorf("%w: the job table %s holds a bad record (key %x): %v; restore the directory from a backup", journal.ErrCorrupt, path, k, err)
		}
		records++
		if _, ok := st.Job(j.ID); ok {
			continue // memory's copy wins
		}
		c := inTable[j.Part()]
		switch j.State {
		case state.Succeeded:
			c.Succeeded++
		case state.Failed:
			c.Failed++
		case state.Cancelled:
			c.Cancelled++
		}
		inTable[j.Part()] = c
	}
	if err := it.Error(); err != nil {
		return records, false, fmt.Errorf("%w: %v", journal.ErrCorrupt, tableError(path, err))
	}
	ends, counts := st.Parts()
	heldIn := make(map[int64]int)
	st.Scan(0, false, func(j *state.Job) bool {
		if j.State.Finished() {
			heldIn[j.Part()]++
		}
		return true
	})
	for i, end := range ends {
		c, t := counts[i], inTable[end]
		if have, want := t.Succeeded+t.Failed+t.Cancelled+heldIn[end], c.Succeeded+c.Failed+c.Cancelled; have < want {
			return records, false, fmt.Errorf("%w: the job table %s lost %d of the %d finished jobs of expiry partition %d; restore the directory from a backup", journal.ErrCorrupt, path, want-have, want, end)
		}
	}
	return records, false, nil
}

// tableLocked reports whether err, from opening the job table, says that
// a process holds its lock: another one (fcntl's EAGAIN) or this one (pebble's "lock held by current process"). Not any error whose
// text holds "lock": a corrupt block's error does ("block"), and a
// verify must report it, not take the table for in use.
func tableLocked(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "lock held by current process")
}
