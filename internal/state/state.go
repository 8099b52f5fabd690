package state

import (
	"slices"
	"sort"

	"github.com/runlog/runlog/retry"
)

// Config is what the state machine needs besides the ops. It is not
// journaled: the engine passes the same Config to every New, and a change
// applies to the breakers from then on.
type Config struct {
	// Circuit configures every target's breaker. It should pass
	// Circuit.Validate; the engine checks that.
	Circuit retry.Circuit
}

// Counts is how many jobs are in each state.
type Counts struct {
	Pending, Running, Succeeded, Failed, Cancelled int
}

// Total returns the number of jobs.
func (c Counts) Total() int {
	return c.Pending + c.Running + c.Succeeded + c.Failed + c.Cancelled
}

func (c *Counts) add(s JobState, d int) {
	switch s {
	case Pending:
		c.Pending += d
	case Running:
		c.Running += d
	case Succeeded:
		c.Succeeded += d
	case Failed:
		c.Failed += d
	case Cancelled:
		c.Cancelled += d
	}
}

// State is the state of every job and every target's breaker: a pure fold
// of the ops. It is not safe for concurrent use; one goroutine owns it.
//
// Jobs are kept in id order; the pending ones are also in a heap ordered by
// (due time, id), which is the order PeekDue hands them out. Finished jobs
// are kept, with their Spec, for inspection.
type State struct {
	cfg        Config
	jobs       []*Job // ascending by ID
	heap       pendingHeap
	held       []*Job
	running    []*Job // unordered; a running job's index is its position
	keys       map[string]uint64
	breakers   map[string]retry.Breaker // only the non-zero ones
	names      map[string]string        // interned job kinds and targets
	lastKind   string                   // the last kind and target interned: a fast path
	lastTarget string
	nextID     uint64
	counts     Counts
	load       map[string]*Counts // pending and running jobs per target, maintained
	// lastLoad caches load[lastLoadTarget]: runs of one target are common.
	lastLoad       *Counts
	lastLoadTarget string
	// frozen, while a snapshot of the state as it was is being written,
	// keeps the first pre-change copy of each job an op changes.
	frozen *Frozen
}

// New returns an empty state.
func New(cfg Config) *State {
	return &State{
		cfg:      cfg,
		keys:     make(map[string]uint64),
		breakers: make(map[string]retry.Breaker),
		names:    make(map[string]string),
		load:     make(map[string]*Counts),
		nextID:   1,
	}
}

// Apply applies op. It is deterministic: the result depends only on the
// state and op, so replaying the journal rebuilds the live state. An op
// that does not fit the state is a no-op: an unknown kind or id, an
// enqueue of an id that exists or of a key another job holds, a start of a
// job that is not pending or with an attempt number other than Started+1,
// an outcome for an attempt that is not open, a defer of a job that is not
// pending, a cancel of a finished job, a retry by hand of a job that is
// not failed or cancelled.
//
// Starts, defers and outcomes are Step on the job and its target's
// breaker (the rules the PostgreSQL store applies to its rows too), plus
// the state's upkeep of its due heap, running set and counts. OpStart
// starts the job even if its target's breaker would now refuse it
// (possible on replay under a changed Config): the journal is the truth.
// Enqueues are cheapest in ascending id order (as NextID hands them out);
// an id below the largest is inserted in O(jobs).
//
// Apply copies op.Spec but shares its Payload, and keeps op.Output: the
// caller must not modify those bytes afterwards.
func (s *State) Apply(op *Op) {
	if s.frozen != nil && op.Kind != OpEnqueue && op.Kind != OpExpire {
		// Every other op changes at most its own job (expire only drops
		// jobs from the live state, which the frozen one still holds).
		s.preserve(op.ID)
	}
	switch op.Kind {
	case OpEnqueue:
		s.enqueue(op)
	case OpStart, OpDefer, OpSucceed, OpFail, OpRequeue:
		s.step(op)
	case OpCancel:
		s.cancel(op)
	case OpRetry:
		s.retryJob(op)
	case OpExpire:
		s.expire(op)
	}
}

// expire drops the finished jobs whose retention ran out by op.At.
func (s *State) expire(op *Op) {
	r := op.Retention
	if r == nil {
		return
	}
	kept := s.jobs[:0]
	for _, j := range s.jobs {
		if j.State.Finished() {
			if ttl := r.ttl(j.Spec.Kind, j.State); ttl > 0 && j.FinishedAt <= op.At-ttl {
				if k := j.Spec.Key; k != "" && s.keys[k] == j.ID {
					delete(s.keys, k)
				}
				s.count(j.Spec.Target, j.State, -1)
				continue
			}
		}
		kept = append(kept, j)
	}
	clear(s.jobs[len(kept):])
	s.jobs = kept
}

// jobAlloc puts a job and its Spec in one allocation.
type jobAlloc struct {
	job  Job
	spec Spec
}

func (s *State) enqueue(op *Op) {
	if op.Spec == nil || op.ID == 0 {
		return
	}
	if op.Spec.Key != "" {
		if _, held := s.keys[op.Spec.Key]; held {
			return
		}
	}
	i, found := s.search(op.ID)
	if found {
		return
	}
	a := &jobAlloc{spec: *op.Spec}
	a.spec.Kind = s.intern(a.spec.Kind, &s.lastKind)
	a.spec.Target = s.intern(a.spec.Target, &s.lastTarget)
	j := &a.job
	*j = Job{ID: op.ID, Spec: &a.spec, Due: op.Due, FirstDue: op.Due, EnqueuedAt: op.At, index: -1}
	if i == len(s.jobs) {
		s.jobs = append(s.jobs, j)
	} else {
		s.jobs = slices.Insert(s.jobs, i, j)
	}
	if op.Spec.Key != "" {
		s.keys[op.Spec.Key] = op.ID
	}
	s.nextID = max(s.nextID, op.ID+1)
	s.heap.push(j)
	s.count(a.spec.Target, Pending, 1)
}

// intern returns the state's copy of name, so that jobs share one string per
// kind and target; *last caches the previous answer for runs of equal names.
func (s *State) intern(name string, last *string) string {
	if name == *last {
		return *last
	}
	v, ok := s.names[name]
	if !ok {
		s.names[name] = name
		v = name
	}
	*last = v
	return v
}

// step applies a start, defer or outcome op: Step on the job and its
// target's breaker, then the upkeep around the job (the pending heap, the
// running set, the counts).
func (s *State) step(op *Op) {
	j := s.job(op.ID)
	if j == nil {
		return
	}
	target := j.Spec.Target
	br := s.breakers[target]
	ch := Step(j, &br, s.cfg.Circuit, op)
	if !ch.Applied {
		return
	}
	if ch.Fed {
		s.setBreaker(target, br)
	}
	if ch.From == ch.To {
		if op.Kind == OpDefer && j.index >= 0 {
			s.heap.fix(int(j.index)) // a held job is placed when released
		}
		return
	}
	switch ch.From {
	case Pending:
		s.unqueue(j)
	case Running:
		s.stopRunning(j)
	}
	s.count(target, ch.From, -1)
	s.count(target, ch.To, 1)
	switch ch.To {
	case Running:
		j.index = int32(len(s.running))
		s.running = append(s.running, j)
	case Pending:
		s.heap.push(j)
	}
}

func (s *State) cancel(op *Op) {
	j := s.job(op.ID)
	if j == nil {
		return
	}
	switch j.State {
	case Pending:
		s.unqueue(j)
	case Running:
		// The attempt stays open: its outcome still feeds the breaker and
		// the history when it arrives.
		s.stopRunning(j)
	default:
		return
	}
	s.finish(j, Cancelled, op.At, op.Error)
}

func (s *State) retryJob(op *Op) {
	j := s.job(op.ID)
	if j == nil || (j.State != Failed && j.State != Cancelled) {
		return
	}
	s.setState(j, Pending)
	j.Due, j.FirstDue, j.Fails = op.Due, op.Due, 0
	j.FinishedAt, j.Reason, j.LastError = 0, "", ""
	s.heap.push(j)
}

func (s *State) finish(j *Job, st JobState, at int64, reason string) {
	s.setState(j, st)
	j.FinishedAt, j.Reason = at, reason
}

func (s *State) setState(j *Job, st JobState) {
	s.count(j.Spec.Target, j.State, -1)
	s.count(j.Spec.Target, st, 1)
	j.State = st
}

// stopRunning takes a running job out of the running set.
func (s *State) stopRunning(j *Job) {
	i, last := j.index, int32(len(s.running)-1)
	s.running[i] = s.running[last]
	s.running[i].index = i
	s.running[last] = nil
	s.running = s.running[:last]
	j.index = -1
}

// unqueue takes a pending job out of the heap or the held set.
func (s *State) unqueue(j *Job) {
	if j.index >= 0 {
		s.heap.remove(j)
	}
	j.held = false
}

func (s *State) setBreaker(target string, br retry.Breaker) {
	if br.IsZero() {
		delete(s.breakers, target)
		return
	}
	s.breakers[target] = br
}

// search returns where id is or would be in s.jobs.
func (s *State) search(id uint64) (int, bool) {
	n := len(s.jobs)
	if n == 0 || s.jobs[n-1].ID < id {
		return n, false
	}
	i := sort.Search(n, func(i int) bool { return s.jobs[i].ID >= id })
	return i, i < n && s.jobs[i].ID == id
}

// job returns the job with id, or nil. Ids are dense when the engine uses
// NextID, so the direct index hits; otherwise it binary-searches.
func (s *State) job(id uint64) *Job {
	if len(s.jobs) == 0 {
		return nil
	}
	if k := id - s.jobs[0].ID; k < uint64(len(s.jobs)) && s.jobs[k].ID == id {
		return s.jobs[k]
	}
	if i, ok := s.search(id); ok {
		return s.jobs[i]
	}
	return nil
}

// NextID returns the id the next enqueue should carry: one more than the
// largest id seen, from 1.
func (s *State) NextID() uint64 { return s.nextID }

// Job returns the job with id. The Job is a read-only view.
func (s *State) Job(id uint64) (*Job, bool) {
	j := s.job(id)
	return j, j != nil
}

// ByKey returns the id of the job that holds the idempotency key. A key
// stays held for as long as its job is kept, finished or not.
func (s *State) ByKey(key string) (uint64, bool) {
	if key == "" {
		return 0, false
	}
	id, ok := s.keys[key]
	return id, ok
}

// NextDue returns the earliest due time among the pending jobs that are not
// held, and false when there is none.
func (s *State) NextDue() (int64, bool) {
	if len(s.heap) == 0 {
		return 0, false
	}
	return s.heap[0].Due, true
}

// PeekDue returns the pending job that comes first in (due time, id) order
// if it is due at now (Due ≤ now), skipping held jobs. It does not change
// the state.
func (s *State) PeekDue(now int64) (*Job, bool) {
	if len(s.heap) == 0 || s.heap[0].Due > now {
		return nil, false
	}
	return s.heap[0], true
}

// Hold takes the pending job id out of the due order until ReleaseHeld, so
// that PeekDue and NextDue look past it; the engine uses it to skip a job
// whose target is at its concurrency limit. It is not an op and is not
// journaled. A held job is still Pending (and counted so): ops apply to it
// as usual, and a Defer of a held job takes effect when it is released.
// Hold of a job that is not pending, or already held, does nothing.
func (s *State) Hold(id uint64) {
	j := s.job(id)
	if j == nil || j.State != Pending || j.index < 0 {
		return
	}
	s.heap.remove(j)
	j.held = true
	s.held = append(s.held, j)
}

// ReleaseHeld puts every held job that is still pending back in the due
// order.
func (s *State) ReleaseHeld() {
	for i, j := range s.held {
		if j.held {
			j.held = false
			if j.State == Pending && j.index < 0 {
				s.heap.push(j)
			}
		}
		s.held[i] = nil
	}
	s.held = s.held[:0]
}

// Running returns the ids of the running jobs, ascending.
func (s *State) Running() []uint64 {
	ids := make([]uint64, 0, len(s.running))
	for _, j := range s.running {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	return ids
}

// Circuit returns the breaker configuration the state applies ops under,
// for the claim's Planner.
func (s *State) Circuit() retry.Circuit { return s.cfg.Circuit }

// Breaker returns the breaker of target (the zero Breaker, closed with no
// failures, for a target it has not seen fail).
func (s *State) Breaker(target string) retry.Breaker { return s.breakers[target] }

// Targets calls fn for each target whose breaker is not the zero Breaker,
// in sorted order, until fn returns false. The breakers must not be
// modified (their Fails arrays are shared with the state).
func (s *State) Targets(fn func(target string, b retry.Breaker) bool) {
	names := make([]string, 0, len(s.breakers))
	for t := range s.breakers {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		if !fn(t, s.breakers[t]) {
			return
		}
	}
}

// TargetLoad returns, per target, how many jobs are pending (held ones
// included) and running; only the Pending and Running fields are set, and
// targets with neither are absent. The counts are maintained as jobs change
// state, so it costs O(targets), not a walk of the jobs.
func (s *State) TargetLoad() map[string]Counts {
	load := make(map[string]Counts, len(s.load))
	for t, c := range s.load {
		if c.Pending != 0 || c.Running != 0 {
			load[t] = Counts{Pending: c.Pending, Running: c.Running}
		}
	}
	return load
}

// count adds d jobs of target in state st to the counts, overall and per
// target.
func (s *State) count(target string, st JobState, d int) {
	s.counts.add(st, d)
	if st != Pending && st != Running {
		return
	}
	c := s.lastLoad
	if c == nil || s.lastLoadTarget != target {
		c = s.load[target]
		if c == nil {
			c = &Counts{}
			s.load[target] = c
		}
		s.lastLoad, s.lastLoadTarget = c, target
	}
	c.add(st, d)
	if c.Pending == 0 && c.Running == 0 {
		delete(s.load, target)
		s.lastLoad = nil
	}
}

// Counts returns how many jobs are in each state, in O(1).
func (s *State) Counts() Counts { return s.counts }

// Len returns the number of jobs.
func (s *State) Len() int { return len(s.jobs) }

// Scan calls fn for jobs in id order until fn returns false: ascending from
// the first id above afterID, or, when desc, descending from the last id
// below afterID. afterID 0 starts at the first (or last) job. Each call
// costs O(log n) to find the start, then O(1) per job. fn must not apply
// ops.
func (s *State) Scan(afterID uint64, desc bool, fn func(*Job) bool) {
	if desc {
		i := len(s.jobs) - 1
		if afterID != 0 {
			k, _ := s.search(afterID)
			i = k - 1
		}
		for ; i >= 0; i-- {
			if !fn(s.jobs[i]) {
				return
			}
		}
		return
	}
	i := 0
	if afterID != 0 {
		i = sort.Search(len(s.jobs), func(i int) bool { return s.jobs[i].ID > afterID })
	}
	for ; i < len(s.jobs); i++ {
		if !fn(s.jobs[i]) {
			return
		}
	}
}
