package embedded

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/vfs"
)

// DefaultKeepSnapshots is how many snapshots stay on disk by default: one,
// and the journal after it, so that disk use stays under twice the newest
// snapshot. With more, the journal is kept from the oldest of them on, and
// a damaged newest snapshot is replaced by an older one plus the journal
// after it; with one, Open refuses a damaged snapshot with an error that
// says so (restore from a backup).
const DefaultKeepSnapshots = 1

// DefaultSnapshotBytes is how many journal bytes since the last snapshot
// trigger the next one, at least (see Options.SnapshotBytes).
const DefaultSnapshotBytes = 64 << 20

// errStop ends a replay early.
var errStop = errors.New("stop")

// loadState rebuilds the state as of journal record upTo (0: the last one):
// the newest intact snapshot at or below upTo, then the journal records
// after it. replay reads the journal (from a sequence number); it is
// Journal.Replay for an open journal or a Scan for a closed one. It returns
// the state, the sequence number of the last record applied, the
// snapshot it started from and the errors of the damaged snapshots it
// skipped. Damage (a record that is not an op, records that neither the
// journal nor a snapshot holds) wraps journal.ErrCorrupt.
func loadState(fsys vfs.FS, dir string, cfg state.Config, upTo uint64,
	replay func(from uint64, fn func(journal.Position, []byte) error) error, onOp opHook) (*state.State, uint64, snapshot.Info, []error, error) {
	st, _, last, base, damaged, err := loadStateV(fsys, dir, cfg, upTo, replay, onOp)
	return st, last, base, damaged, err
}

// opHook is told of each op replayed after the snapshot, with its record's
// sequence number, once it is applied to st.
type opHook func(seq uint64, op *state.Op, st *state.State)

// versionReader remembers the first byte read through it: a snapshot
// body's version.
type versionReader struct {
	r io.Reader
	v byte
	n int
}

func (v *versionReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	if v.n == 0 && n > 0 {
		v.v = p[0]
	}
	v.n += n
	return n, err
}

// loadStateV is loadState that also returns the version of the snapshot
// body it started from (0 if none).
func loadStateV(fsys vfs.FS, dir string, cfg state.Config, upTo uint64,
	replay func(from uint64, fn func(journal.Position, []byte) error) error, onOp opHook) (*state.State, byte, uint64, snapshot.Info, []error, error) {
	infos, err := snapshot.List(fsys, dir)
	if err != nil {
		return nil, 0, 0, snapshot.Info{}, nil, err
	}
	st := state.New(cfg)
	var version byte
	// Streamed: the body and the state it builds are never both in memory
	// (a snapshot of 1 M jobs is about 100 MB).
	base, damaged, err := snapshot.Newest(fsys, dir, upTo, func(body *snapshot.Body) error {
		vr := &versionReader{r: body}
		loaded, err := state.FromSnapshotReader(cfg, vr, body.Size)
		if err == nil {
			st, version = loaded, vr.v
		}
		return err
	})
	if err != nil {
		return nil, 0, 0, snapshot.Info{}, nil, err
	}
	last := base.Seq
	err = replay(base.Seq+1, func(pos journal.Position, rec []byte) error {
		if upTo != 0 && pos.Seq > upTo {
			return errStop
		}
		op, err := state.Decode(rec)
		if err != nil {
			return fmt.Errorf("%w: %s: record %d (segment %d, offset %d) is not a runlog op: %w; its checksum is right, so it was written by another program or version: restore the directory from a backup", journal.ErrCorrupt, dir, pos.Seq, pos.Segment, pos.Offset, err)
		}
		st.SetSeq(pos.Seq)
		st.Apply(&op)
		if onOp != nil {
			onOp(pos.Seq, &op, st)
		}
		last = pos.Seq
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	if upTo != 0 && len(infos) > 0 && upTo < infos[len(infos)-1].Seq && (err != nil || last < upTo) {
		// Time travel to before what the kept snapshots cover.
		oldest := infos[len(infos)-1].Seq
		return nil, 0, 0, base, damaged, fmt.Errorf("embedded: %s no longer holds record %d: the journal before its oldest snapshot (record %d) was dropped when that snapshot was written; positions from %d on can be rebuilt (keep more snapshots to reach further back)", dir, upTo, oldest, oldest)
	}
	if errors.Is(err, journal.ErrDropped) {
		why := "no snapshot covers them (was a snapshot or the oldest segment file deleted?)"
		if len(damaged) > 0 {
			why = fmt.Sprintf("the snapshots that covered them are damaged (%v)", errors.Join(damaged...))
		}
		return nil, 0, 0, base, damaged, fmt.Errorf("%w: %s: the journal no longer holds the records after %d and %s; the jobs they held cannot be rebuilt: restore the directory from a backup: %w", journal.ErrCorrupt, dir, base.Seq, why, err)
	}
	if err != nil {
		return nil, 0, 0, base, damaged, err
	}
	if upTo != 0 && last < upTo {
		return nil, 0, 0, base, damaged, fmt.Errorf("embedded: %s holds records up to %d only, not %d", dir, last, upTo)
	}
	return st, version, last, base, damaged, nil
}

// snapshotter writes snapshots in the background and drops the journal
// segments they make unneeded. It freezes the live state (see snapshot)
// and holds the store's lock only to freeze it and to encode each chunk of
// a thousand jobs, so dispatch is never paused for the length of a
// snapshot.
type snapshotter struct {
	s         *Store
	dir       string
	fsys      vfs.FS
	cfg       state.Config
	threshold int64 // journal bytes that trigger a snapshot, at least
	keep      int   // snapshots kept on disk
	logf      func(format string, args ...any)

	mu       sync.Mutex
	pending  int64  // guarded by mu: journal bytes since the last snapshot
	lastSize int64  // guarded by mu: the size of the newest snapshot
	lastSeq  uint64 // guarded by mu: the record the newest snapshot covers
	running  bool   // guarded by mu: a background snapshot is in progress
	err      error  // guarded by mu: the last snapshot's error

	wg   sync.WaitGroup
	work sync.Mutex // one snapshot at a time
}

// synced counts bytes made durable and starts a snapshot once they reach
// the threshold or the size of the newest snapshot, whichever is larger
// (Redis's rule for rewriting its append-only file): a state that holds
// many jobs is not rewritten whole for every few megabytes of journal, so
// the bytes written for snapshots stay proportional to the journal's, and
// the journal kept beside a snapshot is never much larger than it. It runs
// on the journal's commit goroutine, so it only starts one.
func (c *snapshotter) synced(bytes int) {
	c.mu.Lock()
	c.pending += int64(bytes)
	start := c.threshold > 0 && c.pending >= max(c.threshold, c.lastSize) && !c.running
	if start {
		c.running = true
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if start {
		go func() {
			defer c.wg.Done()
			_, err := c.snapshot()
			c.mu.Lock()
			c.running = false
			if err != nil {
				// Try again after another threshold of journal bytes, as
				// the log line says, not at the next sync: on a full disk
				// each try fills what room is left before it fails.
				c.pending = 0
			}
			c.mu.Unlock()
			if err != nil && c.logf != nil {
				c.logf("runlog: background snapshot failed (the journal keeps every record; next try after more writes): %v", err)
			}
		}()
	}
}

// snapshot writes a snapshot of the state and drops what it makes
// unneeded. Calls are serialized.
//
// No second state is built: the live state is frozen under the store's
// lock (a copy of its slice of job pointers and its breakers; ops applied
// meanwhile keep a pre-change copy of each job they touch), encoded in
// chunks with the lock taken per chunk, and published only once the journal
// is durable up to the last record the frozen state reflects. Building a
// second state of a million jobs cost seconds of CPU and hundreds of
// megabytes, and the garbage collection it set off stalled dispatch by up
// to 113 ms (BenchmarkSnapshotPause).
func (c *snapshotter) snapshot() (store.SnapshotStats, error) {
	c.work.Lock()
	defer c.work.Unlock()
	began := time.Now()
	s := c.s
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return store.SnapshotStats{}, c.fail(err)
	}
	seq := s.appended
	c.mu.Lock()
	unchanged := seq == c.lastSeq
	if unchanged {
		c.pending = 0
	}
	c.mu.Unlock()
	if unchanged {
		s.mu.Unlock()
		return store.SnapshotStats{}, nil
	}
	f := s.st.Freeze()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.st.Thaw()
		s.mu.Unlock()
	}()
	w, err := snapshot.Create(c.fsys, c.dir, seq)
	if err != nil {
		return store.SnapshotStats{}, c.fail(err)
	}
	size, err := writeFrozen(w, f, &s.mu)
	if err == nil {
		err = c.awaitDurable(seq)
	}
	if err == nil {
		// The table must hold, durably, every job the frozen state evicted.
		err = s.sp.checkpoint(seq, false)
	}
	if err != nil {
		w.Abort()
		return store.SnapshotStats{}, c.fail(err)
	}
	return c.publish(w, seq, size, f.Jobs(), began)
}

// frozenChunk is how many jobs writeFrozen encodes per hold of the lock.
const frozenChunk = 1024

// writeFrozen encodes f into w, taking mu (which serializes the state's
// ops) for each chunk of jobs, and returns the body's size.
func writeFrozen(w io.Writer, f *state.Frozen, mu *sync.Mutex) (int64, error) {
	var n int64
	buf := f.AppendHeader(make([]byte, 0, 512<<10))
	for i := 0; i < f.Len(); i += frozenChunk {
		mu.Lock()
		buf = f.AppendJobs(buf, i, min(i+frozenChunk, f.Len()))
		mu.Unlock()
		if len(buf) >= 256<<10 {
			m, err := w.Write(buf)
			n += int64(m)
			if err != nil {
				return n, err
			}
			buf = buf[:0]
		}
	}
	buf = f.AppendTrailer(buf)
	m, err := w.Write(buf)
	return n + int64(m), err
}

// awaitDurable waits until the journal is durable up to record seq, so that
// a snapshot never covers a record a crash could lose. It gives up if the
// store fails or closes meanwhile.
func (c *snapshotter) awaitDurable(seq uint64) error {
	for wait := 50 * time.Microsecond; c.s.j.LastSeq() < seq; wait = min(2*wait, 10*time.Millisecond) {
		c.s.mu.Lock()
		err := c.s.usableLocked()
		c.s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("embedded: snapshot of record %d abandoned: %w", seq, err)
		}
		time.Sleep(wait)
	}
	return nil
}

// snapshotClosed snapshots the live state of a store that takes no more
// changes: no second copy of the state is built. It first waits, with a
// rotation queued behind every append, until all applied ops are durable.
func (c *snapshotter) snapshotClosed(st *state.State) (store.SnapshotStats, error) {
	c.work.Lock()
	defer c.work.Unlock()
	began := time.Now()
	next, err := c.s.j.Rotate()
	if err != nil && c.s.j.Err() != nil {
		return store.SnapshotStats{}, c.fail(err)
	}
	// A rotation that found no room for a new segment (a full disk) leaves
	// the journal usable and still answers after every queued append: the
	// snapshot is written all the same, and the active segment, covered
	// records and all, goes with a later drop.
	c.mu.Lock()
	unchanged := next-1 == c.lastSeq
	c.mu.Unlock()
	if unchanged {
		return store.SnapshotStats{}, nil
	}
	if err := c.s.sp.checkpoint(next-1, true); err != nil {
		return store.SnapshotStats{}, c.fail(err)
	}
	return c.write(st, next-1, began)
}

// write stores st, which covers journal records up to last, as a snapshot,
// keeps the newest c.keep and drops the segments before the oldest.
func (c *snapshotter) write(st *state.State, last uint64, began time.Time) (store.SnapshotStats, error) {
	w, err := snapshot.Create(c.fsys, c.dir, last)
	if err != nil {
		return store.SnapshotStats{}, c.fail(err)
	}
	size, err := st.WriteSnapshot(w)
	if err != nil {
		w.Abort()
		return store.SnapshotStats{}, c.fail(err)
	}
	return c.publish(w, last, size, st.Len(), began)
}

// publish commits the snapshot w, which covers journal records up to last,
// keeps the newest c.keep snapshots and drops the segments before the
// oldest.
func (c *snapshotter) publish(w *snapshot.Writer, last uint64, size int64, jobs int, began time.Time) (store.SnapshotStats, error) {
	if _, err := w.Commit(); err != nil {
		return store.SnapshotStats{}, c.fail(err)
	}
	c.mu.Lock()
	c.lastSeq, c.pending, c.lastSize, c.err = last, 0, size, nil
	c.mu.Unlock()
	if err := snapshot.Clean(c.fsys, c.dir, c.keep); err != nil {
		return store.SnapshotStats{}, c.fail(err)
	}
	infos, err := snapshot.List(c.fsys, c.dir)
	if err != nil {
		return store.SnapshotStats{}, c.fail(err)
	}
	if len(infos) >= c.keep {
		// Keep every record after the oldest kept snapshot: it is the
		// fallback if a newer one is ever damaged. The active segment is
		// not rotated for this: a rotation that finds no segment prepared
		// creates one in line, on the journal's commit goroutine (a pause
		// of tens of milliseconds); the active segment, covered records
		// and all, goes with a later drop. (At Close the journal was just
		// rotated.)
		if err := c.s.j.DropBefore(infos[len(infos)-1].Seq + 1); err != nil {
			return store.SnapshotStats{}, c.fail(err)
		}
	}
	return store.SnapshotStats{Seq: last, Bytes: int(size), Jobs: jobs, Duration: time.Since(began)}, nil
}

// fail records a snapshot error and returns it.
func (c *snapshotter) fail(err error) error {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	return err
}

// wait waits for a background snapshot to end.
func (c *snapshotter) wait() { c.wg.Wait() }

// Snapshot writes a snapshot of the durable state now (waiting for one in
// progress) and drops the journal segments it makes unneeded.
func (s *Store) Snapshot() (store.SnapshotStats, error) {
	return s.snaps.snapshot()
}

// StateAt rebuilds, read-only and without taking the lock, the state of the
// journal in dir as it was right after record seq (time travel): the newest
// intact snapshot at or below seq, then the journal up to seq. seq 0 means
// the last record.
func StateAt(fsys vfs.FS, dir string, cfg state.Config, jopts journal.Options, seq uint64) (*state.State, uint64, error) {
	if fsys == nil {
		fsys = vfs.OS{}
	}
	jopts.FS = fsys
	st, last, _, _, err := loadState(fsys, dir, cfg, seq, scanReplay(fsys, dir, jopts), nil)
	return st, last, err
}

// scanReplay is Journal.Replay for a journal that is not open: it reads the
// records of dir from a sequence number on with journal.Scan, and fails
// with journal.ErrDropped, as Replay does, when asked for records before
// the oldest one kept.
func scanReplay(fsys vfs.FS, dir string, jopts journal.Options) func(uint64, func(journal.Position, []byte) error) error {
	return func(from uint64, fn func(journal.Position, []byte) error) error {
		first := true
		return journal.Scan(fsys, dir, jopts, func(pos journal.Position, rec []byte) error {
			if first {
				first = false
				if from != 0 && pos.Seq > from {
					return fmt.Errorf("%w: replay from sequence number %d asked for, but the oldest record kept is %d", journal.ErrDropped, from, pos.Seq)
				}
			}
			if pos.Seq < from {
				return nil
			}
			return fn(pos, rec)
		})
	}
}
