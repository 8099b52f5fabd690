package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/state"
)

// effect is a change to the job table that an op makes besides the
// evictions the spiller does on its own: the deletion of a finished job's
// keys when a retry by hand takes it back or a discard removes it (image;
// a discard also deletes a payload spilled before the job finished), or
// the range deletion of the partitions an expire dropped (dropAt).
type effect struct {
	seq     uint64
	image   *state.Job
	discard bool
	dropAt  int64
}

// appendEffect appends the table change of op, journal record seq, which
// was just applied to st, if it makes one.
func appendEffect(fx []effect, seq uint64, op *state.Op, st *state.State) []effect {
	switch {
	case op.Kind == state.OpRetry && st.RetryApplied() && op.Image != nil:
		return append(fx, effect{seq: seq, image: op.Image})
	case op.Kind == state.OpExpire:
		return append(fx, effect{seq: seq, dropAt: op.At})
	case op.Kind == state.OpDiscard && st.DiscardApplied():
		return append(fx, effect{seq: seq, image: op.Image, discard: true})
	}
	return fx
}

// cachedCost is what a payload p kept in memory costs the cache: its
// bytes, and the job's own Spec that holds it (a job whose payload is
// spilled can share its Spec with others, state's compact.go). A backlog
// of small payloads is bounded by its jobs' count as much as by its bytes.
func cachedCost(p []byte) int64 {
	if len(p) == 0 {
		return 0
	}
	return int64(len(p)) + specBytes
}

// specBytes is the size of a Spec.
const specBytes = int64(unsafe.Sizeof(state.Spec{}))

// spillAhead is how far ahead of its enqueue a job may be due and still
// keep its payload in memory (within the cache's budget): the cache is for
// the jobs about to run. The payload of a job due later (a delayed job, a
// backlog scheduled for when a partner is back) goes to the table at once,
// so that its job can share its Spec with others (state's compact.go) and
// a backlog costs memory by its count, not by its bytes.
const spillAhead = int64(10 * time.Second / time.Millisecond)

// payloadSpill asks for the payload of pending job id, enqueued by record
// seq, to move to the table; cost is its cachedCost when it was queued.
type payloadSpill struct {
	seq, id uint64
	cost    int64
}

// spiller copies what the state no longer needs in memory to the job
// table, in the background, once the journal records it depends on are
// durable: finished jobs (then evicted from the state), the table changes
// of retries and expiries (in journal order, before the evictions of the
// same round), and payloads beyond the cache. Every write is idempotent,
// so a crash that loses the table's unflushed writes, or keeps writes the
// last snapshot does not know of, is repaired by replay (docs/snapshots.md).
type spiller struct {
	s      *Store
	budget int64 // payload bytes kept in memory; < 0: no bound

	resident int64          // guarded by s.mu: the cachedCost of the payloads in memory
	effects  []effect       // guarded by s.mu: not yet committed, by seq
	payloads []payloadSpill // guarded by s.mu: not yet done, by seq
	queued   int64          // guarded by s.mu: the cost of payloads (see spillQueueBytes)
	cond     *sync.Cond     // on s.mu: broadcast after every round
	stopped  bool           // guarded by s.mu
	force    bool           // guarded by s.mu: someone waits for the spiller
	ops      uint64         // guarded by s.mu: ops applied (is the store quiet?)
	armed    atomic.Bool    // the spiller's timer runs for finished jobs waiting
	steady   atomic.Bool    // the store stayed busy through its last loaded round, since no quiet one: copy each full batch
	// throttled counts the enqueues throttle held (tests read it).
	throttled uint64 // guarded by s.mu
	// gate, when set (tests), is received from before each round: a test
	// holds the spiller back with it.
	gate atomic.Pointer[chan struct{}]
	// needSync is set while the spiller has work waiting for the journal
	// to make its records durable: only then does a sync wake it.
	needSync atomic.Bool
	// openedBelow is the next id when the store opened: a job below it may
	// have had its payload written to the table by an earlier process even
	// if memory holds it (a crash before the checkpoint that knew), so its
	// spill deletes that copy; a job enqueued since is spilled only if
	// memory says so.
	openedBelow uint64
	// discarding holds the ids of the discards among effects: jobs gone
	// from the state whose table keys are not deleted yet, which reads
	// must not show (guarded by s.mu).
	discarding map[uint64]struct{}

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

// spillBatch is how many finished jobs one round copies at most, and
// spillBatchBytes about how many payload bytes it writes at most: a batch
// is in memory whole, twice over while the table takes it.
const (
	spillBatch      = 4096
	spillBatchBytes = 4 << 20
)

// The spiller copies finished jobs out when the store is quiet, so that
// a burst of short jobs is not slowed by table writes in its midst (on a
// machine of few cores they take CPU from the dispatch) and the table gets
// large batches: once no op was applied for spillQuiet, or spillMaxDelay
// after the first of them waited, or once spillMax of them wait; and at
// once when someone waits on it (a checkpoint, a throttled enqueue,
// settle) or a retry, an expiry or a payload over the cache is queued.
//
// Once the store stayed busy through a round (one its load called for, not
// a quiet one nor one someone asked for), the load is steady, not a
// burst: the writes cannot be put off past it, and waiting for spillMax
// only keeps tens of thousands of finished jobs in memory, which the
// collector scans at every cycle (W2 on tmpfs: 0.88 s of GC CPU in 10 s
// against 0.49 s with each batch copied as it fills, and 20.7 against
// 17.2 µs of machine CPU per job). So the spiller then copies each batch
// as soon as it is full (spillBatch), until a quiet round ends the steady
// load.
const (
	spillQuiet    = 50 * time.Millisecond
	spillMaxDelay = 2 * time.Second
	spillMax      = 64 << 10
)

func newSpiller(s *Store, budget int64, fx []effect) *spiller {
	if budget == 0 {
		budget = DefaultPayloadCacheBytes
	}
	sp := &spiller{s: s, budget: budget, effects: fx, discarding: make(map[uint64]struct{}), wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	for _, e := range fx {
		if e.discard {
			sp.discarding[e.image.ID] = struct{}{}
		}
	}
	sp.cond = sync.NewCond(&s.mu)
	return sp
}

// maxDone bounds the finished jobs memory holds while the spiller copies
// them out: beyond it enqueues wait (throttle).
const maxDone = 256 << 10

// spillQueueBytes bounds the cachedCost of the payloads queued for the
// table (beyond it enqueues wait): a backlog of jobs due later (spillAhead)
// sends every payload there, and a queue bounded only by the cache let
// such a burst hold the whole cache in payloads and private Specs on
// their way out, which the collector then doubled in the peak RSS. One
// round's worth keeps the spiller's next batch ready.
const spillQueueBytes = spillBatchBytes

// throttle holds an enqueuer while memory holds more than the spiller
// keeps up with: payloads over the cache with spills queued, more than
// spillQueueBytes of payloads queued for the table, or more than maxDone
// finished jobs not yet copied out. Producers then go at the table's pace,
// and memory stays bounded by the configuration, not by the backlog.
func (sp *spiller) throttle() {
	s := sp.s
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only for what the spiller can relieve: queued payload spills, or
	// finished jobs to copy out (payloads of jobs enqueued under the
	// budget stay until their jobs finish).
	if s.failed == nil && !sp.stopped && sp.overLocked() {
		sp.throttled++
	}
	for s.failed == nil && !sp.stopped && sp.overLocked() {
		sp.hurryLocked()
		sp.cond.Wait()
	}
}

// overLocked reports whether memory holds more than throttle lets it.
// s.mu must be held.
func (sp *spiller) overLocked() bool {
	return sp.budget >= 0 && len(sp.payloads) > 0 && (sp.resident > sp.budget || sp.queued > spillQueueBytes) ||
		sp.s.st.DoneLen() > maxDone
}

// hurry wakes the spiller for work now. s.mu must be held.
func (sp *spiller) hurryLocked() {
	sp.force = true
	sp.signal()
}

// signal wakes the spiller if it sleeps.
func (sp *spiller) signal() {
	select {
	case sp.wake <- struct{}{}:
	default:
	}
}

// appliedLocked accounts for op, journal record seq, just applied to the
// state. s.mu must be held.
func (sp *spiller) appliedLocked(seq uint64, op *state.Op) {
	st := sp.s.st
	sp.ops++
	urgent := false
	switch op.Kind {
	case state.OpEnqueue:
		if n := cachedCost(op.Spec.Payload); n > 0 {
			sp.resident += n
			if sp.budget >= 0 && (sp.resident > sp.budget || op.Due-op.At > spillAhead) {
				sp.payloads = append(sp.payloads, payloadSpill{seq: seq, id: op.ID, cost: n})
				sp.queued += n
				urgent = true
			}
		}
	case state.OpRetry, state.OpExpire, state.OpDiscard:
		n := len(sp.effects)
		sp.effects = appendEffect(sp.effects, seq, op, st)
		urgent = len(sp.effects) > n
		if op.Kind == state.OpRetry && urgent && op.Image != nil {
			sp.resident += cachedCost(op.Image.Spec.Payload)
		}
		if op.Kind == state.OpDiscard && urgent {
			sp.discarding[op.ID] = struct{}{}
		}
	}
	// Wake the spiller only when there is something for it: urgent work,
	// the first finished job to wait (to arm its timer), or enough
	// finished jobs to copy out however busy the store is; not at every op
	// or sync.
	switch d := st.DoneLen(); {
	case urgent, d == 1 && !sp.armed.Load(), d%spillBatch == 0 && (d >= spillMax || sp.steady.Load()):
		sp.signal()
	}
}

// budgetLocked recounts the payload bytes in memory (after open) and, if
// they are over the budget, queues the spill of the newest pending jobs'
// until they are not; seq is a durable record. s.mu must be held.
func (sp *spiller) budgetLocked(seq uint64) {
	sp.resident = 0
	sp.s.st.Scan(0, false, func(j *state.Job) bool {
		sp.resident += cachedCost(j.Spec.Payload)
		return true
	})
	over := sp.resident - sp.budget
	if sp.budget < 0 || over <= 0 {
		return
	}
	sp.s.st.Scan(0, true, func(j *state.Job) bool {
		if j.State == state.Pending && len(j.Spec.Payload) > 0 {
			n := cachedCost(j.Spec.Payload)
			sp.payloads = append(sp.payloads, payloadSpill{seq: seq, id: j.ID, cost: n})
			sp.queued += n
			over -= n
		}
		return over > 0
	})
	sp.signal()
}

// readiness is what the spiller's loop needs to know of the store.
type readiness struct {
	urgent  bool   // someone waits, or effects or payloads are queued
	waiting int    // finished jobs in memory
	ops     uint64 // ops applied so far
}

// ready reports the spiller's work (see readiness) and clears force.
func (sp *spiller) ready() readiness {
	s := sp.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r := readiness{urgent: sp.force || len(sp.effects) > 0 || len(sp.payloads) > 0, waiting: s.st.DoneLen(), ops: sp.ops}
	sp.force = false
	return r
}

// run is the spiller's goroutine. While finished jobs wait and nothing is
// urgent, its timer looks every spillQuiet whether an op was applied
// since it last looked (see spillQuiet).
func (sp *spiller) run() {
	defer close(sp.done)
	timer := time.NewTimer(spillQuiet)
	timer.Stop()
	armed := false
	var since time.Time // when the finished jobs waiting were first seen
	var opsAtArm uint64
	for {
		timedOut := false
		select {
		case <-sp.quit:
			return
		case <-sp.wake:
		case <-timer.C:
			armed, timedOut = false, true
		}
		r := sp.ready()
		switch {
		case r.waiting == 0:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		quiet := timedOut && r.waiting > 0 && r.ops == opsAtArm
		batch := spillMax
		if sp.steady.Load() {
			batch = spillBatch
		}
		// A round the load calls for (a full batch, or the delay run out
		// while ops kept coming), not one someone asked for (urgent: a
		// checkpoint of an idle store says nothing of its load).
		loaded := !quiet && (r.waiting >= batch || timedOut && r.waiting > 0 && time.Since(since) >= spillMaxDelay)
		now := r.urgent || loaded || quiet
		if !now {
			if r.waiting > 0 && !armed {
				timer.Reset(spillQuiet)
				armed, opsAtArm = true, r.ops
			}
			sp.armed.Store(armed)
			continue
		}
		for {
			more, err := sp.round()
			if err != nil {
				err = fmt.Errorf("embedded: writing the job table failed, so no change is accepted until the store is reopened (the journal keeps every record): %w", err)
				sp.s.fail(err)
				if l := sp.s.snaps.logf; l != nil {
					l("runlog: %v", err)
				}
				sp.s.mu.Lock()
				sp.cond.Broadcast()
				sp.s.mu.Unlock()
				return
			}
			if !more {
				break
			}
		}
		if quiet || loaded {
			sp.steady.Store(loaded)
		}
		since = time.Time{}
		sp.armed.Store(armed)
	}
}

// stop ends the spiller's goroutine and wakes whoever waits on it.
func (sp *spiller) stop() {
	sp.once.Do(func() {
		close(sp.quit)
		<-sp.done
		sp.s.mu.Lock()
		sp.stopped = true
		sp.cond.Broadcast()
		sp.s.mu.Unlock()
	})
}

// spillJob is a finished job copied out of the state, with the tag the
// state gave it.
type spillJob struct {
	job   state.Job
	token uint16
}

// round does one batch of the spiller's work and reports whether more of
// it is ready.
func (sp *spiller) round() (bool, error) {
	s := sp.s
	if g := sp.gate.Load(); g != nil {
		<-*g
	}
	durable := s.j.LastSeq()
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return false, nil
	}
	nfx := 0
	for nfx < len(sp.effects) && sp.effects[nfx].seq <= durable {
		nfx++
	}
	fx := sp.effects[:nfx:nfx]
	var jobs []spillJob
	s.st.Done(func(j *state.Job, seq uint64, token uint16) bool {
		if seq > durable || len(jobs) == spillBatch {
			return false
		}
		jobs = append(jobs, spillJob{job: j.Clone(), token: token})
		return true
	})
	npl, nb := 0, 0
	var pays [][]byte
	for npl < len(sp.payloads) && sp.payloads[npl].seq <= durable && npl < spillBatch && nb < spillBatchBytes {
		var p []byte
		if j, ok := s.st.Job(sp.payloads[npl].id); ok && !j.State.Finished() && !j.Spilled() {
			p = j.Spec.Payload
		}
		pays = append(pays, p)
		nb += len(p)
		npl++
	}
	pls := sp.payloads[:npl:npl]
	waitSync := nfx < len(sp.effects) || npl < len(sp.payloads) || s.st.DoneLen() > len(jobs) && len(jobs) < spillBatch
	s.mu.Unlock()
	sp.needSync.Store(waitSync)
	if nfx == 0 && len(jobs) == 0 && npl == 0 {
		return false, nil
	}
	b := s.tbl.db.NewBatch()
	defer b.Close()
	for _, e := range fx {
		if e.image != nil {
			deleteFinished(b, e.image)
			if e.discard {
				b.Delete(payloadKey(e.image.ID), nil)
			}
		} else {
			dropParts(b, e.dropAt)
		}
	}
	puts := make([]finishedPut, len(jobs))
	for i := range jobs {
		j := &jobs[i].job
		puts[i] = finishedPut{j: j, payload: j.Spec.Payload}
		if j.Spilled() {
			p, err := s.tbl.payloadOf(j)
			if err != nil {
				return false, err
			}
			puts[i].payload = p
		}
	}
	putFinished(b, puts)
	for i := range jobs {
		// A finished job's spilled payload moves into its record.
		if j := &jobs[i].job; j.Spilled() || j.ID < sp.openedBelow {
			b.Delete(payloadKey(j.ID), nil)
		}
	}
	for i, pl := range pls {
		if pays[i] != nil {
			b.Set(payloadKey(pl.id), pays[i], nil)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, tableError(s.tbl.path, err)
	}
	s.mu.Lock()
	for _, e := range fx {
		if e.discard {
			delete(sp.discarding, e.image.ID)
		}
	}
	sp.effects = sp.effects[nfx:]
	for i := range jobs {
		j := &jobs[i].job
		if s.st.Evict(j.ID, jobs[i].token) && !j.Spilled() {
			sp.resident -= cachedCost(j.Spec.Payload)
		}
	}
	for i, pl := range pls {
		if pays[i] != nil && s.st.SpillPayload(pl.id) {
			sp.resident -= cachedCost(pays[i])
		}
	}
	for _, pl := range pls {
		sp.queued -= pl.cost
	}
	sp.payloads = sp.payloads[npl:]
	sp.cond.Broadcast()
	more := len(jobs) == spillBatch || npl == spillBatch || nb >= spillBatchBytes
	s.mu.Unlock()
	return more, nil
}

// checkpoint makes the table durable with every change of the records up
// to seq that the snapshot of the state as of seq relies on: it waits
// until the spiller committed the effects of those records (evictions need
// no wait: a job not yet evicted is in the snapshot), then flushes the
// table. The journal must be durable up to seq. With last set the spiller
// is stopped before the flush: the snapshot that follows encodes the live
// state, not a frozen one, so nothing may be evicted after the flush.
func (sp *spiller) checkpoint(seq uint64, last bool) error {
	s := sp.s
	s.mu.Lock()
	for len(sp.effects) > 0 && sp.effects[0].seq <= seq && s.failed == nil && !sp.stopped {
		sp.hurryLocked()
		sp.cond.Wait()
	}
	err := s.failed
	stopped := sp.stopped && len(sp.effects) > 0 && sp.effects[0].seq <= seq
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if stopped {
		return errors.New("embedded: the job table's writer stopped before the checkpoint")
	}
	if last {
		sp.stop()
	}
	return s.tbl.flush()
}

// openTableFor opens the job table of dir for state st, rebuilt from
// snapshot base of body version v. A table is rebuilt from scratch (the
// old one removed) when no version 2 snapshot relies on it: with no
// snapshot the journal holds every record, and a version 1 snapshot holds
// every job. A state that counts jobs it does not hold needs the table.
func openTableFor(fsys pebblevfs.FS, dir string, st *state.State, base snapshot.Info, v byte, logf func(string, ...any)) (*table, error) {
	if fsys == nil {
		fsys = pebblevfs.Default
	}
	path := filepath.Join(dir, tableDir)
	if base.Path == "" || v < 2 {
		if err := fsys.RemoveAll(path); err != nil {
			return nil, fmt.Errorf("embedded: remove the job table %s to rebuild it: %w", path, err)
		}
	} else if held, all := finishedHeld(st), st.Counts(); held < all.Succeeded+all.Failed+all.Cancelled {
		if names, err := fsys.List(path); len(names) == 0 || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("embedded: %s: snapshot %s relies on the job table %s for %d finished jobs, but the table is gone; restore the directory from a backup", dir, base.Path, path, all.Succeeded+all.Failed+all.Cancelled-held)
		}
	}
	return openTable(fsys, dir, logf)
}

// finishedHeld counts the finished jobs st holds in memory.
func finishedHeld(st *state.State) int {
	n := 0
	st.Scan(0, false, func(j *state.Job) bool {
		if j.State.Finished() {
			n++
		}
		return true
	})
	return n
}

// settle waits until the spiller has copied out every finished job and
// payload it can and committed every effect: what tests and benchmarks
// use to see the two tiers at rest. It returns the store's failure, if
// any.
func (s *Store) settle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.failed == nil && !s.sp.stopped {
		busy := len(s.sp.effects) > 0 || len(s.sp.payloads) > 0
		s.st.Done(func(*state.Job, uint64, uint16) bool { busy = true; return false })
		if !busy {
			break
		}
		s.sp.hurryLocked()
		s.sp.cond.Wait()
	}
	return s.failed
}
