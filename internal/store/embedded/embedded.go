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
package embedded

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

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
}

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
	opts.Journal.OnSync = func(si journal.SyncInfo) {
		ck.synced(si.Bytes)
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
	st, last, base, _, err := rebuild(fsys, dir, opts.State, j.LastSeq(), j.Replay)
	if err != nil {
		j.Close()
		return nil, err
	}
	s := &Store{st: st, j: j, snaps: ck, retention: opts.Retention, appended: last}
	ck.s = s
	ck.lastSeq = base.Seq
	if base.Path != "" {
		if fi, err := fsys.Stat(base.Path); err == nil {
			ck.lastSize = fi.Size()
		}
	}
	var orphans []state.Op
	for _, id := range st.Running() {
		orphans = append(orphans, st.Orphan(id, opts.Now))
	}
	if len(orphans) > 0 {
		s.mu.Lock()
		wait := s.submitLocked(orphans)
		s.mu.Unlock()
		if err := wait(); err != nil {
			j.Close()
			return nil, fmt.Errorf("embedded: requeue interrupted attempts: %w", err)
		}
	}
	return s, nil
}

// submitLocked applies ops to the state and queues their records on the
// journal, in that order; the returned func waits until they are durable.
// s.mu must be held.
func (s *Store) submitLocked(ops []state.Op) func() error {
	for i := range ops {
		s.st.Apply(&ops[i])
	}
	return s.journalLocked(ops)
}

// usableLocked reports why the store cannot take changes, or nil.
func (s *Store) usableLocked() error {
	if s.closed {
		return store.ErrClosed
	}
	if s.failed != nil {
		return fmt.Errorf("embedded: the journal failed, so no change is accepted until the store is reopened: %w", s.failed)
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
			if id, ok := s.st.ByKey(spec.Key); ok {
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
	return claims, nil
}

// claimLocked decides and applies the starts (and the deferrals and
// failures) of due jobs within lim, by the claim rule of state.Planner,
// appending the ops to ops. s.mu must be held; the caller journals the ops.
func (s *Store) claimLocked(now int64, lim store.Limits, ops []state.Op) ([]store.Claim, []state.Op) {
	var claims []store.Claim
	p := state.NewPlanner(s.st.Circuit(), now, lim.Max, lim.PerTarget, lim.Running)
	for !p.Done() {
		job, ok := s.st.PeekDue(now)
		if !ok {
			break
		}
		op, v := p.Plan(state.FactsOf(job), job.Spec.Target, s.st.Breaker(job.Spec.Target))
		if v == state.Held {
			s.st.Hold(job.ID)
			continue
		}
		// Apply now so that the next PeekDue, and the next job's breaker,
		// see this decision; the records are journaled in the same order.
		ops = append(ops, op)
		s.st.Apply(&ops[len(ops)-1])
		if op.Kind == state.OpStart {
			claims = append(claims, store.Claim{
				ID: job.ID, Attempt: op.Attempt, Kind: job.Spec.Kind, Target: job.Spec.Target,
				Payload: job.Spec.Payload, TimeoutMS: job.Spec.TimeoutMS,
			})
		}
	}
	if p.Held() > 0 {
		s.st.ReleaseHeld()
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
	var buf []byte
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
		op := s.st.Settle(o.ID, o.Attempt, o.Class, o.AfterMS, o.Error, o.Output, now, rnd())
		if op.Kind == 0 {
			continue // the attempt is not open (a duplicate or fenced outcome): nothing to journal
		}
		ops = append(ops, op)
		s.st.Apply(&ops[len(ops)-1])
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
	return claims, nil
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, now int64, id uint64, reason string) (bool, error) {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return false, err
	}
	job, ok := s.st.Job(id)
	if !ok {
		s.mu.Unlock()
		return false, store.ErrNotFound
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

// Retry implements store.Store.
func (s *Store) Retry(ctx context.Context, now int64, id uint64) error {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	job, ok := s.st.Job(id)
	if !ok {
		s.mu.Unlock()
		return store.ErrNotFound
	}
	if job.State != state.Failed && job.State != state.Cancelled {
		s.mu.Unlock()
		return store.ErrNotFailed
	}
	wait := s.submitLocked([]state.Op{{Kind: state.OpRetry, ID: id, At: now, Due: now}})
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
	job, ok := s.st.Job(id)
	if !ok {
		return state.Job{}, store.ErrNotFound
	}
	return copyJob(job), nil
}

// readableLocked reports why the state cannot be read, or nil. After a
// journal failure the in-memory state may be ahead of the disk, so it is not
// shown.
func (s *Store) readableLocked() error {
	return s.usableLocked()
}

// copyJob copies a job out of the state so that it can be read without the lock.
func copyJob(j *state.Job) state.Job {
	c := *j
	c.Attempts = append([]state.Attempt(nil), j.Attempts...)
	return c
}

// List implements store.Store.
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
	var (
		out  []state.Job
		next uint64
	)
	digits := allDigits(f.Search)
	scanned := 0
	s.st.Scan(f.After, !f.Oldest, func(j *state.Job) bool {
		scanned++
		if !matches(j, &f, digits) {
			if scanned >= maxScan {
				// Bound the time the lock is held: the page ends here, and
				// its cursor resumes the scan after this job.
				next = j.ID
				return false
			}
			return true
		}
		if len(out) == limit {
			next = out[len(out)-1].ID
			return false
		}
		out = append(out, copyJob(j))
		return true
	})
	return out, next, nil
}

// maxScan bounds the jobs one List call looks at: a filter that matches
// few of many jobs returns a short (even empty) page with a cursor to go on,
// rather than holding the store's lock for a scan of every job.
var maxScan = 100_000

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
	if f.Search != "" && !strings.Contains(j.Spec.Key, f.Search) {
		if !digits {
			return false
		}
		var buf [20]byte
		if !strings.Contains(string(strconv.AppendUint(buf[:0], j.ID, 10)), f.Search) {
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
	st.OldestDue, st.HasDue = s.st.NextDue()
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
		out = append(out, store.TargetInfo{Target: target, Breaker: b, Pending: l.Pending, Running: l.Running})
		delete(load, target)
		return true
	})
	for target, l := range load {
		out = append(out, store.TargetInfo{Target: target, Pending: l.Pending, Running: l.Running})
	}
	slices.SortFunc(out, func(a, b store.TargetInfo) int { return strings.Compare(a.Target, b.Target) })
	return out, nil
}

// SetNotify implements store.Store: this store has no other writers, so it
// never calls n.
func (s *Store) SetNotify(n store.Notify) {}

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
	if c.Succeeded+c.Failed+c.Cancelled == 0 {
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
	var ckErr error
	if failed == nil && s.snaps.threshold > 0 {
		// No change can start now (closed is set), so the live state is
		// stable once the appends already queued are durable.
		_, ckErr = s.snaps.snapshotClosed(s.st)
	}
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
	return err
}
