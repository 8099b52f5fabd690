package journal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runlog/runlog/internal/vfs"
)

// Journal is an open journal directory. Its methods are safe for concurrent
// use. One goroutine, started by Open and stopped by Close, owns the active
// segment file and does every write and sync (see groupcommit.go).
type Journal struct {
	dir  string
	opts Options
	fs   vfs.FS
	lock io.Closer

	lastSeq  atomic.Uint64 // sequence number of the last durable record
	wake     chan struct{} // capacity 1: pending has work, or closed was set
	loopDone chan struct{} // closed when the commit goroutine exits
	dropMu   sync.Mutex    // serialises DropBefore

	mu      sync.Mutex
	segs    []segment  // oldest first; the last is active; guarded by mu
	pending []*request // guarded by mu
	closed  bool       // guarded by mu
	failErr error      // the sticky failure; guarded by mu

	// Owned by the commit goroutine.
	active    vfs.File
	activeIdx uint64        // index of the active segment
	loopErr   error         // the goroutine's copy of failErr
	size      int64         // durable size of the active segment
	nextSeq   uint64        // sequence number of the next record
	buf       []byte        // frames of the group being built
	bufRecs   int           // records in buf
	prep      chan prepared // the next segment being preallocated, or nil
	ready     vfs.File      // the next segment, preallocated (not published), or nil
	// activeFull says whether the active segment was preallocated (its
	// file is SegmentSize bytes long), so appends need no new room.
	activeFull bool
	// prepFailed is when preallocating the next segment last failed (zero:
	// it did not); rotateRetry is when a rollover whose segment could not
	// be created may try again.
	prepFailed  time.Time
	rotateRetry time.Time

	mark *marker // the marker (see mark.go); nil if it could not be opened
	// markKick, markStop and markDone drive markLoop (Options.MarkEvery);
	// nil without it.
	markKick, markStop, markDone chan struct{}
}

// prepared is a preallocated segment file, or why preparing it failed.
type prepared struct {
	f   vfs.File
	err error
}

// Open opens the journal in dir, creating the directory and a first segment
// if needed. It takes the directory's lock (ErrLocked if another process or
// another Open holds it), checks every segment, cuts off a torn tail of the
// newest one (saving the cut bytes to <segment>.broken), refuses any other
// damage with a *CorruptError, and starts the commit goroutine.
func Open(dir string, opts Options) (*Journal, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fsys := opts.FS
	dir = filepath.Clean(dir)
	if err := ensureDir(fsys, dir); err != nil {
		return nil, err
	}
	lockPath := filepath.Join(dir, lockName)
	lock, err := fsys.Lock(lockPath)
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("%w: %s is held by another process or another Open in this process; close that journal first", ErrLocked, lockPath)
		}
		return nil, fmt.Errorf("journal: lock %s: %w", lockPath, err)
	}
	j, err := open(fsys, dir, opts)
	if err != nil {
		lock.Close()
		return nil, err
	}
	j.lock = lock
	if opts.MarkEvery > 0 && j.mark != nil {
		j.markKick, j.markStop, j.markDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go j.markLoop(opts.MarkEvery)
	}
	go j.run()
	return j, nil
}

// kickMarker tells markLoop, if it runs, that records were made durable.
// Called by the commit goroutine; it never blocks.
func (j *Journal) kickMarker() {
	if j.markKick != nil {
		select {
		case j.markKick <- struct{}{}:
		default:
		}
	}
}

// markLoop rewrites the marker, after group commits, at most once per
// every and within every of the last one (Options.MarkEvery). It waits for
// a kick rather than polling. What it writes is true whenever it reads it:
// the newest segment in j.segs was durably created before it was added,
// and LastSeq counts only synced records.
func (j *Journal) markLoop(every time.Duration) {
	defer close(j.markDone)
	last := time.Now()
	for {
		select {
		case <-j.markStop:
			return
		case <-j.markKick:
		}
		if wait := every - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-j.markStop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		j.mu.Lock()
		idx, failed := j.segs[len(j.segs)-1].index, j.failErr != nil
		j.mu.Unlock()
		if !failed {
			_ = j.mark.write(idx, j.lastSeq.Load()+1) // best effort, as in rotate
		}
		last = time.Now()
	}
}

// ensureDir creates dir if it does not exist and makes its entry durable.
func ensureDir(fsys vfs.FS, dir string) error {
	_, err := fsys.Stat(dir)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("journal: %w", err)
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("journal: create directory: %w", err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("journal: create directory: %w", err)
	}
	return nil
}

// open recovers dir (already locked) and prepares the active segment.
func open(fsys vfs.FS, dir string, opts Options) (*Journal, error) {
	rec, err := recoverDir(fsys, dir, opts.MaxRecordSize, true, nil)
	if err != nil {
		return nil, err
	}
	if err := removeFiles(fsys, dir, rec.tmps); err != nil {
		return nil, err
	}
	var f vfs.File
	activeFull := false
	if len(rec.segs) == 0 {
		if f, err = createSegment(fsys, dir, 1, 1, opts.prealloc()); err != nil {
			return nil, err
		}
		activeFull = opts.prealloc() > 0
		rec.segs = []segment{{index: 1, firstSeq: 1, size: HeaderSize, path: filepath.Join(dir, segName(1))}}
	}
	last := rec.segs[len(rec.segs)-1]
	if f == nil {
		if f, err = fsys.OpenReadWrite(last.path); err != nil {
			return nil, fmt.Errorf("journal: open active segment: %w", err)
		}
		// Records a crashed process wrote but never synced may still be in
		// the page cache, and were just counted: make them durable before
		// new frames claim (by their synced offset) that all before them is.
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("journal: sync active segment %s: %w", last.path, err)
		}
		if fi, err := f.Stat(); err == nil && opts.prealloc() > 0 && fi.Size() >= opts.prealloc() {
			activeFull = true
		}
	}
	j := &Journal{
		dir:        dir,
		opts:       opts,
		fs:         fsys,
		wake:       make(chan struct{}, 1),
		loopDone:   make(chan struct{}),
		segs:       rec.segs,
		active:     f,
		activeIdx:  last.index,
		activeFull: activeFull,
		size:       last.size,
		nextSeq:    last.firstSeq + last.records,
	}
	j.lastSeq.Store(j.nextSeq - 1)
	// Everything counted is durable now: let the marker say so, so that
	// losing it later is detected. A marker that cannot be written (say,
	// the disk is full and MARK does not exist yet) loses nothing; Open
	// goes on without it.
	if m, err := openMarker(fsys, dir, rec.mark, rec.hasMark); err == nil {
		j.mark = m
		_ = m.write(j.activeIdx, j.nextSeq)
	}
	return j, nil
}

// request is one call waiting for the commit goroutine.
type request struct {
	recs   [][]byte
	one    [1][]byte // backing array of recs for Append
	rotate bool
	err    error                 // if set, answer with it and write nothing
	done   func(Position, error) // AppendAsync's callback, or nil
	ch     chan struct{}         // signalled when answered, if done is nil
	pos    Position              // answer
	res    error                 // answer
}

var reqPool = sync.Pool{New: func() any { return &request{ch: make(chan struct{}, 1)} }}

func getRequest() *request { return reqPool.Get().(*request) }

func putRequest(r *request) {
	ch := r.ch
	*r = request{ch: ch}
	reqPool.Put(r)
}

// enqueue hands r to the commit goroutine. It refuses if the journal is
// closed, and if it is failed when r.done is nil (a synchronous caller gets
// the failure at once; AppendAsync gets it from the commit goroutine).
func (j *Journal) enqueue(r *request) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return fmt.Errorf("%w: open the journal again to append", ErrClosed)
	}
	if j.failErr != nil && r.done == nil {
		err := j.failErr
		j.mu.Unlock()
		return err
	}
	j.pending = append(j.pending, r)
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return nil
}

// wait enqueues r and waits for its answer.
func (j *Journal) wait(r *request) (Position, error) {
	if err := j.enqueue(r); err != nil {
		putRequest(r)
		return Position{}, err
	}
	<-r.ch
	pos, err := r.pos, r.res
	putRequest(r)
	return pos, err
}

// checkSize returns an ErrTooLarge error if a record of recs is too large.
func (j *Journal) checkSize(recs [][]byte) error {
	for i, rec := range recs {
		if len(rec) > j.opts.MaxRecordSize {
			return fmt.Errorf("%w: record %d of the call is %d bytes, the maximum is %d (Options.MaxRecordSize); nothing was written", ErrTooLarge, i, len(rec), j.opts.MaxRecordSize)
		}
	}
	return nil
}

// Append writes rec as the next record and returns once it is durable
// (written and fdatasynced), with its position. Concurrent appends share
// syncs. A record larger than Options.MaxRecordSize is refused with
// ErrTooLarge before anything is written. After a failed write or sync
// every append fails with ErrFailed until the journal is reopened.
func (j *Journal) Append(rec []byte) (Position, error) {
	if len(rec) > j.opts.MaxRecordSize {
		return Position{}, j.checkSize([][]byte{rec})
	}
	r := getRequest()
	r.one[0] = rec
	r.recs = r.one[:]
	return j.wait(r)
}

// AppendBatch writes recs as consecutive records, all in one group commit,
// and returns once all are durable, with the position of the first. If any
// record is too large, nothing is written (ErrTooLarge). An empty batch
// writes nothing and returns the zero Position.
func (j *Journal) AppendBatch(recs [][]byte) (Position, error) {
	if err := j.checkSize(recs); err != nil {
		return Position{}, err
	}
	r := getRequest()
	r.recs = recs
	return j.wait(r)
}

// AppendAsync queues recs (in call order relative to other Append* calls)
// and returns at once; done is called exactly once, from the commit
// goroutine, after the sync covering all of them returned, with the first
// record's position. err is non-nil if the write or sync failed, the
// journal is failed or closed, or a record is too large; then nothing of
// recs was written. (On a closed journal done runs on a new goroutine.)
// done must not block, and must not call Append, AppendBatch or Rotate
// (they wait for the commit goroutine that is running done). The caller
// must not modify recs until done is called.
func (j *Journal) AppendAsync(recs [][]byte, done func(first Position, err error)) {
	r := getRequest()
	r.recs, r.done = recs, done
	r.err = j.checkSize(recs)
	if err := j.enqueue(r); err != nil {
		putRequest(r)
		go done(Position{}, err)
	}
}

// Rotate seals the active segment and starts a new one, and returns the
// sequence number the next record will get. Queued appends before it are
// written to the old segment.
func (j *Journal) Rotate() (nextSeq uint64, err error) {
	r := getRequest()
	r.rotate = true
	pos, err := j.wait(r)
	return pos.Seq, err
}

// LastSeq returns the sequence number of the last durable record, 0 if
// there is none.
func (j *Journal) LastSeq() uint64 { return j.lastSeq.Load() }

// Segments describes the segment files, oldest first; the last is active.
func (j *Journal) Segments() []SegmentInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]SegmentInfo, len(j.segs))
	for i, s := range j.segs {
		out[i] = s.info()
	}
	return out
}

// DropBefore removes the sealed segments all of whose records have a
// sequence number below seq (typically because a snapshot covers them),
// oldest first, syncing the directory after each removal so a crash leaves
// a contiguous journal. The active segment is never removed; call Rotate
// first to make its records droppable.
func (j *Journal) DropBefore(seq uint64) error {
	j.dropMu.Lock()
	defer j.dropMu.Unlock()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return fmt.Errorf("%w: open the journal again to drop segments", ErrClosed)
	}
	n := 0
	for n+1 < len(j.segs) && j.segs[n+1].firstSeq <= seq {
		n++
	}
	victims := slices.Clone(j.segs[:n])
	j.segs = slices.Delete(j.segs, 0, n)
	j.mu.Unlock()
	for i, v := range victims {
		if err := j.fs.Remove(v.path); err != nil {
			// Keep the journal contiguous: the segments not removed stay
			// in use, so a later drop removes them first.
			j.mu.Lock()
			j.segs = append(victims[i:len(victims):len(victims)], j.segs...)
			j.mu.Unlock()
			return fmt.Errorf("journal: drop segment %s: %w", v.path, err)
		}
		if err := j.fs.SyncDir(j.dir); err != nil {
			j.mu.Lock()
			j.segs = append(victims[i+1:len(victims):len(victims)], j.segs...)
			j.mu.Unlock()
			return fmt.Errorf("journal: drop segment %s: sync directory: %w", v.path, err)
		}
	}
	return nil
}

// Replay calls fn for every durable record with a sequence number of at
// least fromSeq, in order; rec is valid only during the call. It may run
// while appends go on: it sees the records durable when it started. A
// fromSeq of 0 means every record still kept; a fromSeq below the oldest
// kept record (other than 0) fails with ErrDropped. An error from fn stops
// the replay and is returned.
func (j *Journal) Replay(fromSeq uint64, fn func(pos Position, rec []byte) error) error {
	began := time.Now()
	segs, files, err := j.openForReplay(fromSeq)
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var info ReplayInfo
	for i, s := range segs {
		res, err := scanSegment(files[i], s.size, j.opts.MaxRecordSize, func(seq uint64, off int64, rec []byte) error {
			if seq < fromSeq {
				return nil
			}
			info.Records++
			info.Bytes += int64(len(rec))
			return fn(Position{Seq: seq, Segment: s.index, Offset: off}, rec)
		})
		var ce *CorruptError
		if errors.As(err, &ce) && ce.File == "" {
			ce.File = s.path
			return ce
		}
		if err != nil {
			return err
		}
		if res.end != s.size || res.records != s.records {
			return &CorruptError{File: s.path, Offset: res.end, Reason: fmt.Sprintf("committed data changed on disk while open: %s", res.tornReason)}
		}
	}
	if j.opts.OnReplay != nil {
		info.Duration = time.Since(began)
		j.opts.OnReplay(info)
	}
	return nil
}

// openForReplay picks the segments holding records from fromSeq on and
// opens them while holding mu, so DropBefore cannot remove them first.
func (j *Journal) openForReplay(fromSeq uint64) ([]segment, []vfs.File, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil, nil, fmt.Errorf("%w: open the journal again to replay", ErrClosed)
	}
	if oldest := j.segs[0].firstSeq; fromSeq != 0 && fromSeq < oldest {
		return nil, nil, fmt.Errorf("%w: replay from sequence number %d asked for, but the oldest record kept is %d; replay from the snapshot that covers them", ErrDropped, fromSeq, oldest)
	}
	start := 0
	for start+1 < len(j.segs) && j.segs[start+1].firstSeq <= fromSeq {
		start++
	}
	segs := slices.Clone(j.segs[start:])
	segs[len(segs)-1].records = j.segs[len(j.segs)-1].records
	files := make([]vfs.File, 0, len(segs))
	for _, s := range segs {
		f, err := j.fs.Open(s.path)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, nil, fmt.Errorf("journal: replay: %w", err)
		}
		files = append(files, f)
	}
	return segs, files, nil
}

// Err returns the sticky failure that stops appends, or nil.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.failErr
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Close waits for queued appends to complete, closes the active segment and
// releases the lock. Appends that arrive after Close started fail with
// ErrClosed. Close is idempotent: later calls return nil.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		<-j.loopDone
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	<-j.loopDone
	if j.markStop != nil {
		close(j.markStop)
		<-j.markDone
	}
	if j.loopErr == nil {
		// The commit goroutine has stopped; every record it counted is
		// durable. Best effort, as in rotate.
		_ = j.mark.write(j.activeIdx, j.nextSeq)
	}
	_ = j.mark.close()
	err := j.active.Close()
	if lerr := j.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("journal: close: %w", err)
	}
	return nil
}
