package journal

import (
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
			if j.failed() == nil {
				j.rotate()
			}
			j.answer(r, Position{Seq: j.nextSeq}, j.failed())
		default:
			if end := j.size + int64(len(j.buf)); end >= j.opts.SegmentSize && end > HeaderSize {
				j.flush(batch[g:i])
				g = i
				if j.failed() == nil {
					j.rotate()
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
			j.fail(err)
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

// maybePrepare starts preallocating the next segment in the background once
// the active one is half full.
func (j *Journal) maybePrepare() {
	size := j.opts.prealloc()
	if size == 0 || j.prep != nil || j.size < j.opts.SegmentSize/2 {
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

// dropPrepared waits for a segment being prepared and deletes it (it has no
// header yet; Open would remove it anyway).
func (j *Journal) dropPrepared() {
	if j.prep == nil {
		return
	}
	p := <-j.prep
	j.prep = nil
	if p.err == nil {
		p.f.Close()
		_ = j.fs.Remove(filepath.Join(j.dir, segName(j.activeIdx+1)) + ".tmp")
	}
}

// newSegment returns the durably created segment next, starting at
// j.nextSeq: the prepared one if there is one, else a new one.
func (j *Journal) newSegment(next uint64) (vfs.File, error) {
	if j.prep != nil {
		p := <-j.prep
		j.prep = nil
		if p.err == nil {
			if err := publishSegment(j.fs, j.dir, p.f, next, j.nextSeq); err != nil {
				p.f.Close()
				return nil, err
			}
			return p.f, nil
		}
		// Preparing failed; try once more, in line, and let that error count.
	}
	return createSegment(j.fs, j.dir, next, j.nextSeq, j.opts.prealloc())
}

// rotate seals the active segment (it is already durable) and makes a new,
// durably created one active.
func (j *Journal) rotate() {
	next := j.activeIdx + 1
	f, err := j.newSegment(next)
	if err != nil {
		j.fail(err)
		return
	}
	// The old segment's data was synced by the last flush; cutting its
	// unused preallocated zeros, and closing it, cannot lose anything.
	_ = j.active.Truncate(j.size)
	_ = j.active.Close()
	j.active = f
	j.activeIdx = next
	j.size = HeaderSize
	j.mu.Lock()
	j.segs = append(j.segs, segment{index: next, firstSeq: j.nextSeq, size: HeaderSize, path: filepath.Join(j.dir, segName(next))})
	j.mu.Unlock()
	// The new segment is durably created and every record before it is
	// durable: the marker may name both (a failure only leaves it behind).
	_ = j.mark.write(next, j.nextSeq)
}
