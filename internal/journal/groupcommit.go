package journal

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/runlog/runlog/internal/vfs"
)

// Group commit. One goroutine (run) owns the active segment file. Callers
// append requests to j.pending under j.mu and wake it. Each round it takes
// every pending request, encodes their records into one buffer, writes the
// buffer with one write and makes it durable with one fdatasync, and only
// then answers each request of the group. Requests that arrive during the
// sync wait for the next round, so with many concurrent appenders one sync
// covers many records, and no appender is answered before the sync covering
// its record returned.
//
// A write or sync error makes the journal failed for good (fsyncgate: a
// failed fsync must not be retried, since the kernel may have dropped the
// dirty pages): the group and every later request get the failure, until
// the journal is closed and opened again, which trusts only what is on disk.

// maxRetainedBuf is the largest encoding buffer kept between groups.
const maxRetainedBuf = 16 << 20

// run is the commit goroutine.
func (j *Journal) run() {
	defer close(j.loopDone)
	defer j.dropPrepared()
	var batch []*request
	for {
		j.mu.Lock()
		batch, j.pending = j.pending, batch[:0]
		closed := j.closed
		j.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			<-j.wake
			continue
		}
		j.commit(batch)
		clear(batch)
		j.letReleasedJoin(len(batch))
	}
}

// letReleasedJoin lets the appenders just released (released of them) run
// before the next group is taken: most of them append again at once, and
// joining the next group instead of the one after it nearly doubles the
// records per sync under steady concurrency. It yields the processor while
// fewer than released requests are queued and the queue still grows, a
// bounded number of times; when no one is waiting it returns at once.
func (j *Journal) letReleasedJoin(released int) {
	if released < 2 {
		return
	}
	prev := 0
	for range 16 {
		runtime.Gosched()
		j.mu.Lock()
		n := len(j.pending)
		j.mu.Unlock()
		if n >= released || (n == prev && n > 0) {
			return
		}
		prev = n
	}
}

// commit writes the records of batch in order, in as few groups as segment
// rollovers allow, and answers every request.
func (j *Journal) commit(batch []*request) {
	g := 0 // first request of the group being built
	for i, r := range batch {
		switch {
		case r.err != nil || j.failed() != nil:
		case r.rotate:
			j.flush(batch[g:i])
			g = i + 1
			var err error
			if j.failed() == nil {
				err = j.rotate()
			}
			if j.failed() != nil {
				err = j.failed()
			}
			j.answer(r, Position{Seq: j.nextSeq}, err)
		default:
			if end := j.size + int64(len(j.buf)); end >= j.opts.SegmentSize && end > HeaderSize && !time.Now().Before(j.rotateRetry) {
				j.flush(batch[g:i])
				g = i
				if j.failed() == nil {
					if err := j.rotate(); err != nil && j.failed() == nil {
						// No room for a new segment: the active one grows
						// past SegmentSize until there is (or until a
						// write finds no room either).
						j.rotateRetry = time.Now().Add(prepareRetryDelay)
						j.warn(fmt.Errorf("%w; the active segment grows past %d bytes meanwhile", err, j.opts.SegmentSize))
					}
				}
				if j.failed() != nil {
					continue
				}
			}
			if len(r.recs) > 0 {
				r.pos = Position{Seq: j.nextSeq + uint64(j.bufRecs), Segment: j.activeIdx, Offset: j.size + int64(len(j.buf))}
			}
			for _, rec := range r.recs {
				j.buf = appendFrame(j.buf, rec, j.size)
			}
			j.bufRecs += len(r.recs)
		}
	}
	j.flush(batch[g:])
}

// failed returns the sticky failure. Only the commit goroutine sets it, so
// it reads its own copy without locking.
func (j *Journal) failed() error { return j.loopErr }

// flush writes and syncs the buffered group, then answers its requests.
func (j *Journal) flush(group []*request) {
	if len(j.buf) > 0 && j.failed() == nil {
		start := time.Now()
		_, err := j.active.WriteAt(j.buf, j.size)
		if err == nil {
			err = j.active.Sync()
		}
		if err != nil {
			// Name the segment: the file may still carry the temporary
			// name it was preallocated under.
			j.fail(fmt.Errorf("append to segment %s: %w", filepath.Join(j.dir, segName(j.activeIdx)), err))
		} else {
			j.size += int64(len(j.buf))
			j.nextSeq += uint64(j.bufRecs)
			j.mu.Lock()
			last := &j.segs[len(j.segs)-1]
			last.size = j.size
			last.records += uint64(j.bufRecs)
			j.mu.Unlock()
			j.lastSeq.Store(j.nextSeq - 1)
			j.maybePrepare()
			if j.opts.OnSync != nil {
				j.opts.OnSync(SyncInfo{Records: j.bufRecs, Bytes: len(j.buf), Duration: time.Since(start)})
			}
			j.kickMarker()
		}
	}
	failErr := j.failed()
	for _, r := range group {
		switch {
		case r.err != nil:
			j.answer(r, Position{}, r.err)
		case failErr != nil:
			j.answer(r, Position{}, failErr)
		default:
			j.answer(r, r.pos, nil)
		}
	}
	if cap(j.buf) > maxRetainedBuf {
		j.buf = nil
	}
	j.buf = j.buf[:0]
	j.bufRecs = 0
}

// answer completes r.
func (j *Journal) answer(r *request, pos Position, err error) {
	if r.done != nil {
		done := r.done
		putRequest(r)
		done(pos, err)
		return
	}
	r.pos, r.res = pos, err
	r.ch <- struct{}{}
}

// fail makes the journal failed for good.
func (j *Journal) fail(cause error) {
	if j.loopErr != nil {
		return
	}
	j.loopErr = fmt.Errorf("%w: a write or sync failed, so nothing after the last durable record (sequence number %d) can be trusted; appends are refused: close the journal and open it again: %w",
		ErrFailed, j.nextSeq-1, cause)
	j.mu.Lock()
	j.failErr = j.loopErr
	j.mu.Unlock()
}

// prepareRetryDelay is how long the journal waits, after preallocating the
// next segment failed (typically for want of disk space), before it tries
// again, and after creating a segment at rotation failed, before a rollover
// tries again. A variable so that tests can shorten it.
var prepareRetryDelay = 5 * time.Second

// warn reports a failure the journal works on despite (Options.OnWarning).
func (j *Journal) warn(err error) {
	if j.opts.OnWarning != nil {
		j.opts.OnWarning(err)
	}
}

// maybePrepare starts preallocating the next segment in the background once
// the active one is half full, and collects the result of a preparation
// that has ended. A preparation that failed (a full disk) does not fail the
// journal: the active segment still has room. It is retried after
// prepareRetryDelay, and the rotation meanwhile falls back to a segment
// that is not preallocated (see newSegment). Nothing is prepared in the
// background while the active segment is not preallocated itself: its
// appends take their room from the free space, which a preparation would
// fill for a while; its rotation tries to preallocate in line instead.
func (j *Journal) maybePrepare() {
	if j.prep != nil {
		select {
		case p := <-j.prep:
			j.prep = nil
			j.prepared(p)
		default:
		}
		return
	}
	size := j.opts.prealloc()
	if size == 0 || !j.activeFull || j.ready != nil || j.size < j.opts.SegmentSize/2 {
		return
	}
	if !j.prepFailed.IsZero() && time.Since(j.prepFailed) < prepareRetryDelay {
		return
	}
	ch := make(chan prepared, 1)
	j.prep = ch
	fsys, dir, next := j.fs, j.dir, j.activeIdx+1
	go func() {
		f, err := prepareSegment(fsys, dir, next, size)
		ch <- prepared{f, err}
	}()
}

// prepared takes the result of a background preparation.
func (j *Journal) prepared(p prepared) {
	if p.err != nil {
		j.prepFailed = time.Now()
		j.warn(fmt.Errorf("%w; appends go on in the active segment (%d of %d bytes used) and the next one will not be preallocated; free disk space", p.err, j.size, j.opts.SegmentSize))
		return
	}
	j.prepFailed = time.Time{}
	j.ready = p.f
}

// dropPrepared waits for a segment being prepared and deletes it, and a
// prepared one (they have no header yet; Open would remove them anyway).
func (j *Journal) dropPrepared() {
	if j.prep != nil {
		p := <-j.prep
		j.prep = nil
		if p.err == nil {
			j.ready = p.f
		}
	}
	if j.ready != nil {
		j.ready.Close()
		j.ready = nil
		_ = j.fs.Remove(filepath.Join(j.dir, segName(j.activeIdx+1)) + ".tmp")
	}
}

// newSegment returns the durably created segment next, starting at
// j.nextSeq, and whether it is preallocated: the prepared one if there is
// one, else a new one, preallocated in line if there is room (the commit
// goroutine is the only writer of the journal meanwhile, so filling the
// disk for a moment takes no room an append needs), else one that starts
// empty and grows as it is written. An error wrapping errNotCreated left
// nothing behind: the active segment stays in use. Any other error (the
// directory could not be synced after the rename) fails the journal.
func (j *Journal) newSegment(next uint64) (vfs.File, bool, error) {
	if j.prep != nil {
		p := <-j.prep
		j.prep = nil
		j.prepared(p)
	}
	if f := j.ready; f != nil {
		j.ready = nil
		if err := publishSegment(j.fs, j.dir, f, next, j.nextSeq); err != nil {
			f.Close()
			if errors.Is(err, errNotCreated) {
				_ = j.fs.Remove(filepath.Join(j.dir, segName(next)) + ".tmp")
			}
			return nil, false, err
		}
		return f, true, nil
	}
	size := j.opts.prealloc()
	f, err := createSegment(j.fs, j.dir, next, j.nextSeq, size)
	if err != nil && size > 0 && errors.Is(err, errNotCreated) {
		j.prepFailed = time.Now()
		f, err = createSegment(j.fs, j.dir, next, j.nextSeq, 0)
		return f, false, err
	}
	return f, size > 0, err
}

// rotate seals the active segment (it is already durable) and makes a new,
// durably created one active. If no segment could be created and nothing
// was left behind, it returns the error and the active segment stays
// active, the journal usable; any other error fails the journal.
func (j *Journal) rotate() error {
	next := j.activeIdx + 1
	f, full, err := j.newSegment(next)
	if err != nil {
		if errors.Is(err, errNotCreated) {
			return fmt.Errorf("journal: no new segment could be created, so segment %d stays active and nothing was lost: %w", j.activeIdx, err)
		}
		j.fail(err)
		return err
	}
	// The old segment's data was synced by the last flush; cutting its
	// unused preallocated zeros, and closing it, cannot lose anything.
	_ = j.active.Truncate(j.size)
	_ = j.active.Close()
	j.active = f
	j.activeIdx = next
	j.activeFull = full
	j.size = HeaderSize
	j.mu.Lock()
	j.segs = append(j.segs, segment{index: next, firstSeq: j.nextSeq, size: HeaderSize, path: filepath.Join(j.dir, segName(next))})
	j.mu.Unlock()
	// The new segment is durably created and every record before it is
	// durable: the marker may name both (a failure only leaves it behind).
	_ = j.mark.write(next, j.nextSeq)
	return nil
}
