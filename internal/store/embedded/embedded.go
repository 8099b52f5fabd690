// Package embedded is the default store of runlog: the job state of package
// state, kept in memory, with every change journaled by package journal.
//
// # How a change happens
//
// All changes go through one serialization point (the store's mutex, in
// journal order): the store decides the ops with the pure functions of
// package state, applies them to the in-memory state, hands their encoded
// records to the journal's group commit with AppendAsync (which keeps call
// order), releases the lock and waits for the sync that covers them. Many
// callers (enqueuers, the dispatcher's claims, the workers' outcomes) are in
// that wait at once, so one fdatasync covers all of their records. The call
// returns, and the engine acts on it (answers the enqueue, runs the attempt,
// reports the outcome), only after that sync.
//
// Because ops are applied in the order they are journaled, replaying the
// journal gives exactly the live state. If a write or sync fails, the journal
// refuses every later append and so does the store: its in-memory state may
// then hold ops that never reached the disk, and it is never trusted again;
// reopen the store to get the durable truth back.
//
// # Two tiers
//
// Memory holds what scheduling needs: the pending and running jobs (with
// their payloads up to Options.PayloadCacheBytes), the breakers, the
// counts, and the finished jobs not yet copied to disk. Finished jobs go to
// the job table (table.go), a pebble database beside the journal, once
// their records are durable; the state then evicts them and goes on
// counting them by expiry partition. Payloads of pending jobs beyond the
// cache go to the table too. Reads look in memory first, then in the table;
// the snapshot holds only the memory tier. docs/snapshots.md says how the
// table is checkpointed with the snapshot and what open does after a crash.
package embedded

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

// Options configure Open.
type Options struct {
	Journal journal.Options
	State   state.Config
	// Now is the time (ms since the Unix epoch) used for the requeue of
	// attempts interrupted by a crash; required.
	Now int64
	// SnapshotBytes: a snapshot is written in the background once the
	// journal has grown since the last one by this many bytes or by the
	// last one's size, whichever is larger, and at Close. 0 means
	// DefaultSnapshotBytes; < 0 turns snapshots off.
	SnapshotBytes int64
	// KeepSnapshots is how many snapshots stay on disk, with the journal
	// from the oldest of them on; 0 means DefaultKeepSnapshots.
	KeepSnapshots int
	// Retention says how long finished jobs are kept; nil keeps them
	// forever. Expire applies it.
	Retention *state.Retention
	// Logf receives background errors (a failed snapshot); may be nil.
	Logf func(format string, args ...any)
	// TableFS is the filesystem of the job table (pebble's); nil means the
	// operating system's. Tests pass a crashable in-memory one.
	TableFS pebblevfs.FS
	// PayloadCacheBytes bounds the memory the payloads of pending and
	// running jobs take: each payload's bytes and the Spec of its own that
	// a job with its payload in memory keeps (about 200 bytes; a job whose
	// payload is in the table shares its Spec with jobs like it). The
	// payloads of jobs enqueued beyond it live in the job table and are
	// read back when the job starts. 0 means DefaultPayloadCacheBytes;
	// < 0 keeps every payload in memory.
	PayloadCacheBytes int64
}

// DefaultPayloadCacheBytes is the default of Options.PayloadCacheBytes.
// The cache is for the jobs about to run (a job due later has its payload
// in the table from its enqueue: spillAhead); a backlog beyond it costs a
// read of the table per start. The payloads in memory, those in transit
// to the table included (throttle), count twice in the peak RSS, as the
// collector lets the heap grow to twice what it holds.
const DefaultPayloadCacheBytes = 16 << 20

// Store is the embedded store. It implements store.Store.
type Store struct {
	mu        sync.Mutex
	st        *state.State // guarded by mu
	j         *journal.Journal
	snaps     *snapshotter
	retention *state.Retention
	failed    error // guarded by mu: first journal failure, sticky
	// appended is the sequence number of the last record handed to the
	// journal (durable or not yet): the last op the state reflects.
	appended uint64 // guarded by mu
	closed   bool   // guarded by mu
	// hits is the scratch of a search's key hits, reused from one List
	// to the next (guarded by mu): a prefix with thousands of finished
	// jobs spent a third of its time growing a new slice each call.
	hits []keyHit

	tbl *table
	sp  *spiller

	onDisabled atomic.Pointer[func(target, reason string)] // Notify.TargetDisabled
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.Failer      = (*Store)(nil)
	_ store.Snapshotter = (*Store)(nil)
)

// Open opens (or creates) the journal in dir, rebuilds the state from the
// newest intact snapshot plus the journal after it, and requeues every job
// that was running when the last process stopped, counted as a failed
// attempt of the job and not as a failure of its target (state.Orphan).
func Open(dir string, opts Options) (*Store, error) {
	if opts.Journal.FS == nil {
		opts.Journal.FS = vfs.OS{}
	}
	fsys := opts.Journal.FS
	if opts.State.Retention == nil {
		opts.State.Retention = opts.Retention
	}
	ck := &snapshotter{dir: dir, fsys: fsys, cfg: opts.State, logf: opts.Logf, keep: opts.KeepSnapshots}
	if ck.keep <= 0 {
		ck.keep = DefaultKeepSnapshots
	}
	switch {
	case opts.SnapshotBytes == 0:
		ck.threshold = DefaultSnapshotBytes
	case opts.SnapshotBytes > 0:
		ck.threshold = opts.SnapshotBytes
	}
	onSync := opts.Journal.OnSync
	var spill atomic.Pointer[spiller]
	opts.Journal.OnSync = func(si journal.SyncInfo) {
		ck.synced(si.Bytes)
		if sp := spill.Load(); sp != nil && sp.needSync.Load() {
			sp.signal()
		}
		if onSync != nil {
			onSync(si)
		}
	}
	j, err := journal.Open(dir, opts.Journal)
	if err != nil {
		return nil, err
	}
	// A crash may have left a half-written snapshot behind: never read it.
	// No complete snapshot is removed here: if the newest is damaged, an
	// older one (and the journal after it) may still be there to use.
	if err := snapshot.Clean(fsys, dir, math.MaxInt); err != nil {
		j.Close()
		return nil, err
	}
	var fx []effect
	st, version, last, base, _, err := rebuild(fsys, dir, opts.State, j.LastSeq(), j.Replay, func(seq uint64, op *state.Op, st *state.State) {
		fx = appendEffect(fx, seq, op, st)
	})
	if err != nil {
		j.Close()
		return nil, err
	}
	tfs := opts.TableFS
	if m, ok := fsys.(interface{ TableFS() pebblevfs.FS }); ok && tfs == nil {
		tfs = m.TableFS()
	}
	tbl, err := openTableFor(tfs, dir, st, base, version, opts.Logf)
	if err != nil {
		j.Close()
		return nil, err
	}
	s := &Store{st: st, j: j, snaps: ck, retention: opts.Retention, appended: last, tbl: tbl}
	s.sp = newSpiller(s, opts.PayloadCacheBytes, fx)
	s.sp.openedBelow = st.NextID()
	spill.Store(s.sp)
	ck.s = s
	ck.lastSeq = base.Seq
	if base.Path != "" {
		if fi, err := fsys.Stat(base.Path); err == nil {
			ck.lastSize = fi.Size()
		}
	}
	s.mu.Lock()
	s.sp.budgetLocked(last)
	s.mu.Unlock()
	go s.sp.run()
	var ops []state.Op
	for _, id := range st.Running() {
		ops = append(ops, st.Orphan(id, opts.Now))
	}
	if r := opts.Retention; r != nil && !sameRetention(st.Retention(), r) {
		// Put the configured retention in force, journaled, so that replay
		// places later finished jobs in the partitions this run does.
		ops = append(ops, state.Op{Kind: state.OpExpire, At: opts.Now, Retention: r})
	}
	if len(ops) > 0 {
		s.mu.Lock()
		wait := s.submitLocked(ops)
		s.mu.Unlock()
		if err := wait(); err != nil {
			s.abandon()
			return nil, fmt.Errorf("embedded: requeue interrupted attempts: %w", err)
		}
	}
	return s, nil
}

// abandon stops the spiller and closes the table and the journal of a
// store that failed to open.
func (s *Store) abandon() {
	s.sp.stop()
	s.tbl.close()
	s.j.Close()
}

// sameRetention reports whether a and b keep every kind and state alike.
func sameRetention(a, b *state.Retention) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.SucceededMS == b.SucceededMS && a.CancelledMS == b.CancelledMS && a.FailedMS == b.FailedMS && slices.Equal(a.PerKind, b.PerKind)
}

// submitLocked applies ops to the state and queues their records on the
// journal, in that order; the returned func waits until they are durable.
// s.mu must be held.
func (s *Store) submitLocked(ops []state.Op) func() error {
	for i := range ops {
		s.applyLocked(&ops[i], s.appended+uint64(i)+1)
	}
	return s.journalLocked(ops)
}

// applyLocked applies op, which is to be journal record seq, to the state,
// and queues what it changes in the job table. s.mu must be held.
func (s *Store) applyLocked(op *state.Op, seq uint64) {
	s.st.SetSeq(seq)
	s.st.Apply(op)
	s.sp.appliedLocked(seq, op)
}

// usableLocked reports why the store cannot take changes, or nil.
func (s *Store) usableLocked() error {
	if s.closed {
		return store.ErrClosed
	}
	if s.failed != nil {
		return fmt.Errorf("embedded: the journal failed, so no change is accepted until the store is reopened: %w", s.failed)
	}
	if err := s.tbl.failedOpen(); err != nil {
		return fmt.Errorf("embedded: the job table failed, so no change is accepted until the store is reopened (the journal keeps every record): %w", err)
	}
	return nil
}

// Enqueue implements store.Store.
func (s *Store) Enqueue(ctx context.Context, now int64, jobs []store.NewJob) ([]store.Enqueued, error) {
	out := make([]store.Enqueued, len(jobs))
	ops := make([]state.Op, 0, len(jobs))
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	var batchKeys map[string]uint64
	for i := range jobs {
		spec := jobs[i].Spec
		if spec.Key != "" {
			id, ok, err := s.byKeyLocked(spec.Key)
			if err != nil {
				s.mu.Unlock()
				return nil, err
			}
			if ok {
				out[i] = store.Enqueued{ID: id, Existing: true}
				continue
			}
			if id, ok := batchKeys[spec.Key]; ok {
				out[i] = store.Enqueued{ID: id, Existing: true}
				continue
			}
		}
		id := s.st.NextID()
		if len(ops) > 0 {
			// NextID follows applied ops; ids within this batch are consecutive.
			id = ops[len(ops)-1].ID + 1
		}
		sp := spec
		ops = append(ops, state.Op{Kind: state.OpEnqueue, ID: id, At: now, Due: jobs[i].Due, Spec: &sp})
		out[i] = store.Enqueued{ID: id}
		if spec.Key != "" {
			if batchKeys == nil {
				batchKeys = make(map[string]uint64)
			}
			batchKeys[spec.Key] = id
		}
	}
	wait := s.submitLocked(ops)
	s.mu.Unlock()
	if err := wait(); err != nil {
		return nil, err
	}
	s.sp.throttle()
	return out, nil
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, now int64, lim store.Limits) ([]store.Claim, error) {
	if lim.Max <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	claims, ops := s.claimLocked(now, lim, nil)
	wait := s.journalLocked(ops)
	s.mu.Unlock()
	if err := wait(); err != nil {
		return nil, err
	}
	return claims, s.fillPayloads(claims)
}

// fillPayloads reads the payloads of claimed jobs that the table keeps.
// The payload of a running job stays in the table until the job finishes,
// which its claim comes before.
func (s *Store) fillPayloads(claims []store.Claim) error {
	for i := range claims {
		if claims[i].Payload != nil || !claims[i].Spilled {
			continue
		}
		p, err := s.tbl.payload(claims[i].ID)
		if err != nil {
			return err
		}
		if p == nil {
			return fmt.Errorf("embedded: the job table %s lost the payload of running job %d; restore the directory from a backup", s.tbl.path, claims[i].ID)
		}
		claims[i].Payload = p
	}
	return nil
}

// claimLocked decides and applies the starts (and the deferrals and
// failures) of due jobs within lim, by the claim rule of state.Planner,
// appending the ops to ops. s.mu must be held; the caller journals the ops.
func (s *Store) claimLocked(now int64, lim store.Limits, ops []state.Op) ([]store.Claim, []state.Op) {
	var claims []store.Claim
	p := state.NewPlanner(s.st.Circuit(), now, lim.Max, lim.PerTarget, lim.Running)
	p.SetQueues(s.st)
	p.SetTargets(s.st)
	if s.st.HasFlows() {
		p.WithFlows(s.st.Flow)
	}
	s.st.Claim(&p, now, func(job *state.Job, op state.Op) {
		// Apply now so that the next PeekDue, and the next job's breaker,
		// see this decision; the records are journaled in the same order.
		ops = append(ops, op)
		s.applyLocked(&ops[len(ops)-1], s.appended+uint64(len(ops)))
		if op.Kind == state.OpStart {
			claims = append(claims, store.Claim{
				ID: job.ID, Attempt: op.Attempt, Kind: job.Spec.Kind, Target: job.Spec.Target,
				Payload: job.Spec.Payload, TimeoutMS: job.Spec.TimeoutMS, Metadata: job.Spec.Metadata, Spilled: job.Spilled(),
			})
		}
	})
	if p.Held() > 0 && lim.Held != nil {
		lim.Held(p.Held())
	}
	return claims, ops
}

// journalLocked queues the records of ops, which are already applied, on the
// journal's group commit (AppendAsync keeps call order, and s.mu is held, so
// journal order is apply order); the returned func waits until they are
// durable and makes a failure sticky for the store.
func (s *Store) journalLocked(ops []state.Op) func() error {
	if len(ops) == 0 {
		return func() error { return nil }
	}
	// One buffer of about the records' size: grown by appends, a batch of
	// large payloads would leave garbage of twice its size behind.
	size := 0
	for i := range ops {
		size += 128
		if sp := ops[i].Spec; sp != nil {
			size += len(sp.Payload) + len(sp.Key)
		}
	}
	buf := make([]byte, 0, size)
	ends := make([]int, len(ops))
	for i := range ops {
		buf = state.Encode(buf, &ops[i])
		ends[i] = len(buf)
	}
	recs := make([][]byte, len(ops))
	start := 0
	for i, end := range ends {
		recs[i] = buf[start:end:end]
		start = end
	}
	done := make(chan error, 1)
	s.appended += uint64(len(recs))
	s.j.AppendAsync(recs, func(_ journal.Position, err error) { done <- err })
	return func() error {
		err := <-done
		if err != nil {
			s.mu.Lock()
			if s.failed == nil {
				s.failed = err
			}
			s.mu.Unlock()
		}
		return err
	}
}

// Finish implements store.Store.
func (s *Store) Finish(ctx context.Context, now int64, rnd func() uint32, outs []store.Outcome, lim store.Limits) ([]store.Claim, error) {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	ops := make([]state.Op, 0, len(outs)+lim.Max)
	for _, o := range outs {
		var op state.Op
		if o.Snooze {
			op = s.st.Snooze(o.ID, o.Attempt, o.AfterMS, now)
		} else {
			op = s.st.Settle(o.ID, o.Attempt, o.Class, o.AfterMS, o.Error, o.Output, now, rnd())
		}
		if op.Kind == 0 {
			continue // the attempt is not open (a duplicate or fenced outcome): nothing to journal
		}
		ops = append(ops, op)
		s.applyLocked(&ops[len(ops)-1], s.appended+uint64(len(ops)))
		ops = s.lifecycleLocked(ops, o.Gone)
	}
	var claims []store.Claim
	if lim.Max > 0 {
		claims, ops = s.claimLocked(now, lim, ops)
	}
	wait := s.journalLocked(ops)
	s.mu.Unlock()
	if err := wait(); err != nil {
		return nil, err
	}
	s.notifyDisabled(ops)
	return claims, s.fillPayloads(claims)
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, now int64, id uint64, reason string) (bool, error) {
	job, err := s.lockJob(id)
	if err != nil {
		return false, err
	}
	if job.State != state.Pending && job.State != state.Running {
		s.mu.Unlock()
		return false, store.ErrFinished
	}
	running := job.State == state.Running
	wait := s.submitLocked([]state.Op{{Kind: state.OpCancel, ID: id, At: now, Error: reason}})
	s.mu.Unlock()
	return running, wait()
}

// lockJob takes s.mu, for a change to job id, and returns a copy of the
// job (see jobLocked); on an error (the store takes no changes, no such
// job) it releases the lock.
func (s *Store) lockJob(id uint64) (state.Job, error) {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return state.Job{}, err
	}
	job, err := s.jobLocked(id)
	if err != nil {
		s.mu.Unlock()
		return state.Job{}, err
	}
	return job, nil
}

// Retry implements store.Store.
func (s *Store) Retry(ctx context.Context, now int64, id uint64) error {
	job, err := s.lockJob(id)
	if err != nil {
		return err
	}
	if job.State != state.Failed && job.State != state.Cancelled {
		s.mu.Unlock()
		return store.ErrNotFailed
	}
	// The record carries the job as it finished, payload included, so
	// that its replay needs nothing the table holds.
	img := job
	if img.Spilled() {
		p, err := s.tbl.payloadOf(&img)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		sp := *img.Spec
		sp.Payload = p
		img.Spec = &sp
		img.SetSpilled(false)
	}
	wait := s.submitLocked([]state.Op{{Kind: state.OpRetry, ID: id, At: now, Due: now, Image: &img}})
	s.mu.Unlock()
	return wait()
}

// NextDue implements store.Store.
func (s *Store) NextDue() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.NextDue()
}

// Job implements store.Store.
func (s *Store) Job(ctx context.Context, id uint64) (state.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readableLocked(); err != nil {
		return state.Job{}, err
	}
	j, err := s.jobLocked(id)
	if err != nil || !j.Spilled() {
		return j, err
	}
	p, err := s.tbl.payloadOf(&j)
	if err != nil {
		return state.Job{}, err
	}
	sp := *j.Spec
	sp.Payload = p
	j.Spec = &sp
	j.SetSpilled(false)
	return j, nil
}

// jobLocked returns a copy of job id from memory, or from the table. A job
// in memory with a spilled payload comes back with Spilled set and no
// payload. s.mu must be held.
func (s *Store) jobLocked(id uint64) (state.Job, error) {
	if job, ok := s.st.Job(id); ok {
		return copyJob(job), nil
	}
	if s.sp.discardingLocked(id) {
		return state.Job{}, store.ErrNotFound
	}
	parts, _ := s.st.Parts()
	j, err := s.tbl.finished(id, parts)
	if err != nil {
		return state.Job{}, err
	}
	if j == nil {
		return state.Job{}, store.ErrNotFound
	}
	return *j, nil
}

// byKeyLocked returns the id of the job that holds key, in memory or in the
// table. s.mu must be held.
func (s *Store) byKeyLocked(key string) (uint64, bool, error) {
	if id, ok := s.st.ByKey(key); ok {
		return id, true, nil
	}
	parts, _ := s.st.Parts()
	if len(parts) == 0 {
		return 0, false, nil
	}
	id, ok, err := s.tbl.byKey(key, parts)
	if ok && s.sp.discardingLocked(id) {
		return 0, false, err
	}
	return id, ok, err
}

// readableLocked reports why the state cannot be read, or nil. After a
// journal failure the in-memory state may be ahead of the disk, so it is not
// shown.
func (s *Store) readableLocked() error {
	return s.usableLocked()
}

// copyJob copies a job out of the state so that it can be read without the lock.
func copyJob(j *state.Job) state.Job {
	c := j.Clone()
	sp := *j.Spec // the state may drop a spilled payload in place
	c.Spec = &sp
	return c
}

// List implements store.Store. It merges the jobs in memory (pending,
// running, and finished ones not yet evicted), which it scans, with the
// finished jobs of the table, which it reads through the index of the most
// selective filter; a job in memory hides its older copy in the table. A
// page is short only at the end of the matches. The search matches a
// job's decimal id or a prefix of its key: in the table a point read and a
// range of each partition's key index.
func (s *Store) List(ctx context.Context, f store.Filter) ([]state.Job, uint64, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readableLocked(); err != nil {
		return nil, 0, err
	}
	digits := allDigits(f.Search)
	mem := s.listMemoryLocked(&f, limit+1, digits)
	var disk []state.Job
	if f.State == "" || f.State == "succeeded" || f.State == "failed" || f.State == "cancelled" {
		var err error
		if disk, err = s.listTableLocked(&f, limit+1, digits); err != nil {
			return nil, 0, err
		}
	}
	out := mergeByID(mem, disk, !f.Oldest, limit+1)
	var next uint64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	for i := range out {
		if out[i].Spilled() {
			p, err := s.tbl.payloadOf(&out[i])
			if err != nil {
				return nil, 0, err
			}
			sp := *out[i].Spec
			sp.Payload = p
			out[i].Spec = &sp
			out[i].SetSpilled(false)
		}
	}
	return out, next, nil
}

// listMemoryLocked returns up to limit jobs in memory that pass f, after its
// cursor in its order. A filter on a finished or the running state, or on
// a target with no job pending or running, looks only at those jobs (a
// few, beside a backlog of pending ones); a search reads the ordered keys
// (searchMemoryLocked); a kind or a target filter reads that kind's or
// target's jobs in id order (the fewer of the two); otherwise the jobs are
// scanned in id order.
func (s *Store) listMemoryLocked(f *store.Filter, limit int, digits bool) []state.Job {
	var mem []state.Job
	var some func(func(*state.Job) bool)
	switch f.State {
	case "succeeded", "failed", "cancelled":
		some = s.st.Finished
	case "running":
		some = s.st.RunningJobs
	}
	if some == nil && f.Target != "" {
		if p, r := s.st.TargetLive(f.Target); p == 0 && r == 0 {
			// Only finished jobs not yet copied out can match: a
			// scan would walk the whole backlog for none.
			some = s.st.Finished
		}
	}
	if some == nil && f.Search != "" {
		some = s.searchMemoryLocked(f.Search, digits)
	}
	if some == nil {
		// The smaller of the kind's and the target's id lists, or a scan.
		scan := s.st.Scan
		switch {
		case f.Kind != "" && (f.Target == "" || s.st.KindCount(f.Kind) <= s.st.TargetCount(f.Target)):
			scan = func(after uint64, desc bool, fn func(*state.Job) bool) { s.st.KindScan(f.Kind, after, desc, fn) }
		case f.Target != "":
			scan = func(after uint64, desc bool, fn func(*state.Job) bool) { s.st.TargetScan(f.Target, after, desc, fn) }
		}
		scan(f.After, !f.Oldest, func(j *state.Job) bool {
			if matches(j, f, digits) {
				mem = append(mem, copyJob(j))
			}
			return len(mem) < limit
		})
		return mem
	}
	var picked []*state.Job
	some(func(j *state.Job) bool {
		if matches(j, f, digits) && (f.After == 0 || (f.Oldest && j.ID > f.After) || (!f.Oldest && j.ID < f.After)) {
			picked = append(picked, j)
		}
		return true
	})
	slices.SortFunc(picked, func(a, b *state.Job) int {
		if f.Oldest {
			return cmp.Compare(a.ID, b.ID)
		}
		return cmp.Compare(b.ID, a.ID)
	})
	picked = slices.CompactFunc(picked, func(a, b *state.Job) bool { return a.ID == b.ID })
	for _, j := range picked[:min(len(picked), limit)] {
		mem = append(mem, copyJob(j))
	}
	return mem
}

// listTableLocked returns up to limit finished jobs of the table that pass
// f, after its cursor in its order, leaving out those memory holds.
func (s *Store) listTableLocked(f *store.Filter, limit int, digits bool) ([]state.Job, error) {
	parts, _ := s.st.Parts()
	if len(parts) == 0 {
		return nil, nil
	}
	// A job memory holds hides its copy in the table; a discarded one
	// hides it until the spiller deletes it.
	inMemory := func(id uint64) bool { _, ok := s.st.Job(id); return ok || s.sp.discardingLocked(id) }
	if f.Search == "" {
		return s.tbl.list(tableQuery{state: f.State, kind: f.Kind, target: f.Target, schedule: f.Schedule, after: f.After, desc: !f.Oldest, limit: limit, skip: inMemory}, parts)
	}
	// A search is a range of the key index and, for digits, a point read
	// by id; only the records of the page are read, taken from the hits
	// in order off a heap (a prefix may have many thousand hits), and only
	// those are looked up in memory.
	keep := func(id uint64) bool { return f.After == 0 || f.Oldest && id > f.After || !f.Oldest && id < f.After }
	hits, err := s.tbl.byKeyPrefix(s.hits[:0], f.Search, parts, keep)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cap(hits) <= maxSearchScratch {
			s.hits = hits[:0]
		}
	}()
	if digits {
		if id, err := strconv.ParseUint(f.Search, 10, 64); err == nil && id != 0 && keep(id) {
			hits = append(hits, keyHit{id: id, part: math.MinInt64}) // partition unknown: look in all
		}
	}
	h := &hitHeap{hits: hits, desc: !f.Oldest}
	heap.Init(h)
	var out []state.Job
	last := uint64(0)
	for len(out) < limit && h.Len() > 0 {
		hit := heap.Pop(h).(keyHit)
		if hit.id == last || inMemory(hit.id) {
			continue
		}
		last = hit.id
		var j *state.Job
		var err error
		if hit.part == math.MinInt64 {
			j, err = s.tbl.finished(hit.id, parts)
		} else {
			j, err = s.tbl.record(hit.id, hit.part)
		}
		if err != nil {
			return nil, err
		}
		if j == nil || !matches(j, f, digits) {
			continue
		}
		out = append(out, *j)
	}
	return out, nil
}

// hitHeap orders key hits by id, the largest first when desc
// (container/heap).
type hitHeap struct {
	hits []keyHit
	desc bool
}

func (h *hitHeap) Len() int { return len(h.hits) }
func (h *hitHeap) Less(i, j int) bool {
	if h.desc {
		return h.hits[i].id > h.hits[j].id
	}
	return h.hits[i].id < h.hits[j].id
}
func (h *hitHeap) Swap(i, j int) { h.hits[i], h.hits[j] = h.hits[j], h.hits[i] }
func (h *hitHeap) Push(x any)    { h.hits = append(h.hits, x.(keyHit)) }
func (h *hitHeap) Pop() any {
	x := h.hits[len(h.hits)-1]
	h.hits = h.hits[:len(h.hits)-1]
	return x
}

// mergeByID merges two lists of jobs sorted by id (descending when desc)
// into one of at most n, keeping a's copy of an id both hold.
func mergeByID(a, b []state.Job, desc bool, n int) []state.Job {
	out := make([]state.Job, 0, min(n, len(a)+len(b)))
	for len(out) < n && (len(a) > 0 || len(b) > 0) {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0].ID == b[0].ID:
			if len(b) > 0 && a[0].ID == b[0].ID {
				b = b[1:]
			}
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || (a[0].ID > b[0].ID) != desc:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a = append(out, a[0]), a[1:]
		}
	}
	return out
}

// matches reports whether job j passes filter f; digits is whether
// f.Search could be part of a decimal id.
func matches(j *state.Job, f *store.Filter, digits bool) bool {
	if f.State != "" && j.State.String() != f.State {
		return false
	}
	if f.Kind != "" && j.Spec.Kind != f.Kind {
		return false
	}
	if f.Target != "" && j.Spec.Target != f.Target {
		return false
	}
	if f.Schedule != "" && j.Spec.Schedule != f.Schedule {
		return false
	}
	if f.Search != "" && !strings.HasPrefix(j.Spec.Key, f.Search) {
		if !digits {
			return false
		}
		var buf [20]byte
		if string(strconv.AppendUint(buf[:0], j.ID, 10)) != f.Search {
			return false
		}
	}
	return true
}

// allDigits reports whether s is made of decimal digits only.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Stats implements store.Store.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readableLocked(); err != nil {
		return store.Stats{}, err
	}
	st := store.Stats{Counts: s.st.Counts()}
	st.OldestDue, st.HasDue = s.st.OldestDue()
	return st, nil
}

// Targets implements store.Store.
func (s *Store) Targets(ctx context.Context) ([]store.TargetInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readableLocked(); err != nil {
		return nil, err
	}
	// Every target with a breaker that remembers something, or with jobs
	// pending or running; a closed breaker with no history is not stored.
	load := s.st.TargetLoad()
	out := make([]store.TargetInfo, 0, len(load))
	s.st.Targets(func(target string, b retry.Breaker) bool {
		l := load[target]
		out = append(out, store.TargetInfo{Target: target, Breaker: b, Pending: l.Pending, Running: l.Running, Life: s.st.Life(target)})
		delete(load, target)
		return true
	})
	s.st.Lives(func(target string, life state.TargetLife) {
		if !s.st.Breaker(target).IsZero() {
			return // listed above
		}
		l := load[target]
		out = append(out, store.TargetInfo{Target: target, Pending: l.Pending, Running: l.Running, Life: life})
		delete(load, target)
	})
	for target, l := range load {
		out = append(out, store.TargetInfo{Target: target, Pending: l.Pending, Running: l.Running})
	}
	out = s.withFlowsLocked(out)
	slices.SortFunc(out, func(a, b store.TargetInfo) int { return strings.Compare(a.Target, b.Target) })
	return out, nil
}

// SetNotify implements store.Store: this store has no other writers, so it
// calls only n.TargetDisabled.
func (s *Store) SetNotify(n store.Notify) {
	if n.TargetDisabled != nil {
		s.onDisabled.Store(&n.TargetDisabled)
	}
}

// Expire implements store.Store: it journals an OpExpire with the store's
// retention, dropping the finished jobs whose retention ran out by now.
func (s *Store) Expire(ctx context.Context, now int64) error {
	if s.retention == nil {
		return nil
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	c := s.st.Counts()
	if c.Succeeded+c.Failed+c.Cancelled == 0 && !s.st.FlowsRunOut(now) {
		s.mu.Unlock()
		return nil
	}
	wait := s.submitLocked([]state.Op{{Kind: state.OpExpire, At: now, Retention: s.retention}})
	s.mu.Unlock()
	return wait()
}

// Close implements store.Store. It is idempotent. After a clean run it
// writes a snapshot first, so that the next Open replays little.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	failed := s.failed
	s.mu.Unlock()
	s.snaps.wait()
	s.tbl.beginClose()
	var ckErr error
	if failed == nil && s.snaps.threshold > 0 {
		// No change can start now (closed is set), so the live state is
		// stable once the appends already queued are durable.
		_, ckErr = s.snaps.snapshotClosed(s.st)
	}
	s.sp.stop()
	tblErr := s.tbl.close()
	err := s.j.Close()
	if errors.Is(err, journal.ErrClosed) {
		err = nil
	}
	if err == nil && ckErr != nil && (errors.Is(ckErr, syscall.ENOSPC) || errors.Is(ckErr, syscall.EDQUOT)) {
		// The snapshot only makes the next Open faster: every record is
		// durable in the journal, so a full disk does not make a clean stop
		// fail.
		if s.snaps.logf != nil {
			s.snaps.logf("runlog: final snapshot skipped, the disk is full (every record is in the journal, which the next open replays; free disk space): %v", ckErr)
		}
		ckErr = nil
	}
	if err == nil && ckErr != nil {
		err = fmt.Errorf("embedded: closed, but the final snapshot failed (the journal keeps every record): %w", ckErr)
	}
	if tblErr != nil && s.tbl.failedOpen() == nil && s.tbl.failure() != nil {
		// The table failed during the final checkpoint (a full disk):
		// the checkpoint before it stays good and the journal keeps every
		// record since, so the stop is still clean.
		if s.snaps.logf != nil {
			s.snaps.logf("runlog: the job table could not be closed cleanly (the next open replays the journal into it): %v", tblErr)
		}
		tblErr = nil
	}
	if err == nil && tblErr != nil {
		err = tableError(s.tbl.path, tblErr)
	}
	return err
}

// Err returns why the store takes no more changes because its journal
// failed (a write or fdatasync error, such as a full disk), or nil while it
// is usable. The failure is permanent for this Store: close it, fix the
// cause and open the directory again.
func (s *Store) Err() error {
	s.mu.Lock()
	err := s.failed
	s.mu.Unlock()
	if err == nil {
		err = s.j.Err()
	}
	if err == nil {
		err = s.tbl.failedOpen()
	}
	return err
}

// fail makes err the store's sticky failure (the first one wins).
func (s *Store) fail(err error) {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.mu.Unlock()
}

// Queues implements store.Store.
func (s *Store) Queues(ctx context.Context) ([]state.QueueInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readableLocked(); err != nil {
		return nil, err
	}
	return s.st.Queues(), nil
}

// SetQueue implements store.Store: it journals an OpQueue with the queue's
// new setting. The claims that follow it in the journal see it, and a
// claim cannot interleave (both hold s.mu while they apply).
func (s *Store) SetQueue(ctx context.Context, now int64, name string, concurrency *int, paused *bool, limit *retry.Limit) (state.QueueInfo, error) {
	if concurrency != nil && (*concurrency < 0 || *concurrency > state.MaxQueueConcurrency) {
		return state.QueueInfo{}, fmt.Errorf("embedded: queue concurrency %d out of range 0-%d", *concurrency, state.MaxQueueConcurrency)
	}
	if limit != nil {
		if err := limit.Validate(); err != nil {
			return state.QueueInfo{}, fmt.Errorf("embedded: rate limit of queue %q: %w", name, err)
		}
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return state.QueueInfo{}, err
	}
	set := s.st.Queue(name).QueueSetting
	if concurrency != nil {
		set.Concurrency = *concurrency
	}
	if paused != nil {
		set.Paused = *paused
	}
	if limit != nil {
		set.Limit = *limit
	}
	wait := s.submitLocked([]state.Op{state.QueueOp(set, now)})
	info := s.st.Queue(name)
	s.mu.Unlock()
	return info, wait()
}
