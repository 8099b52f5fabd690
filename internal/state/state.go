package state

import (
	"hash/maphash"
	"math"
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
	// Retention is the retention in force until an OpExpire journals
	// another (see State): it places each finished job in its expiry
	// partition. nil keeps finished jobs forever.
	Retention *Retention
	// DisableAfterMS disables a target that has been failing this long
	// with no success (lifecycle.go); 0 never does. It is read when an
	// outcome is decided (State.Lifecycle): the disable it brings is
	// journaled, so replay does not depend on it.
	DisableAfterMS int64
	// Limits are the configured rate limits (nil for none): see
	// LimitConfig. Like Circuit, they are not journaled.
	Limits *LimitConfig
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
// are kept, with their Spec, for inspection, until a store that keeps them
// elsewhere (the embedded store's table) takes them out with Evict: the
// state then still counts them, by expiry partition, but no longer holds
// them (see Done and Evict).
//
// # Retention by partition
//
// When a job finishes, it is placed in the expiry partition PartOf gives:
// the end of the bucket its expiry time (finish time plus the retention of
// its kind and state, under the retention in force) falls in, buckets being
// a sixteenth of that retention wide. OpExpire at time t drops every
// partition that ends by t, whole: a finished job is kept at least its
// retention and at most a sixteenth of it longer, and expiry never walks
// the jobs the state no longer holds. The retention in force is the one
// the last OpExpire carried (Config.Retention before the first), so that
// replay places every job where the live state did.
type State struct {
	cfg  Config
	jobs []*Job // ascending by ID; nil where a job was evicted or dropped
	// ids are the ids of jobs, kept where jobs has a nil, while it has
	// one: nil while holes is 0 (a backlog of a million pending jobs does
	// not pay for a second million-entry slice; see idAt).
	ids        []uint64
	holes      int      // how many nils jobs holds
	q          queueSet // the queues, with the pending jobs (queues.go)
	held       []*Job
	benched    map[string]*targetBenches // held targets' due jobs, by target (holdtarget.go)
	blocked    []string                  // the targets HoldTarget blocked, for ReleaseHeld
	running    []*Job                    // unordered; a running job's index is its position
	keys       map[string]uint64
	breakers   map[string]retry.Breaker // only the non-zero ones
	flows      map[string]Flow          // only the non-zero ones (limits.go)
	names      *nameTable               // interned job kinds, targets and queues (compact.go)
	lastKind   string                   // the last kind and target interned: a fast path
	lastTarget string
	lastQueue  string
	shared     sharedSpecs // Specs shared by jobs (compact.go)
	nextID     uint64
	counts     Counts
	load       map[string]*Counts // pending and running jobs per target, maintained
	// lastLoad caches load[lastLoadTarget]: runs of one target are common.
	lastLoad       *Counts
	lastLoadTarget string
	// frozen, while a snapshot of the state as it was is being written,
	// keeps the first pre-change copy of each job an op changes.
	frozen *Frozen

	retention *Retention       // in force: the last OpExpire's, or the config's
	parts     map[int64]Counts // finished jobs retained, by partition end
	horizon   int64            // the time of the latest OpExpire
	// done lists the finished jobs whose attempts have all ended, in the
	// order they became so, for Done; a job in it has inDone set (entries
	// whose job left, or came back, are skipped).
	done []doneEntry
	// lingering lists finished jobs with an attempt still open (cancelled
	// while running), which stay until the attempt's outcome or their
	// partition's expiry.
	lingering []*Job
	seq       uint64 // the caller's tag for the ops it applies (SetSeq)
	retried   bool   // the last op was an OpRetry that applied
	discarded bool   // the last op was an OpDiscard that applied (discard.go)

	schedules map[string]*Schedule // by name (schedules.go)

	life     map[string]*targetLife // the targets failing or disabled (lifecycle.go)
	disabled int                    // how many of them are disabled

	look lookups // the jobs by kind and by key prefix (lookup.go)
}

// New returns an empty state.
func New(cfg Config) *State {
	return &State{
		cfg:       cfg,
		keys:      make(map[string]uint64),
		breakers:  make(map[string]retry.Breaker),
		flows:     make(map[string]Flow),
		names:     newNameTable(),
		load:      make(map[string]*Counts),
		nextID:    1,
		retention: cfg.Retention,
		parts:     make(map[int64]Counts),
		horizon:   math.MinInt64,
		q:         queueSet{def: queue{ready: jobHeap{kind: inReady}}},
		shared:    sharedSpecs{seed: maphash.MakeSeed()},
		look:      newLookups(),
	}
}

// PartForever is the partition of the finished jobs kept forever.
const PartForever = math.MaxInt64

// PartOf returns the expiry partition of a job of kind finished in state st
// at finishedAt under retention r (nil: forever): the end of the bucket of
// width ttl/16 (at least 1 ms) that its expiry time falls in, or
// PartForever.
func PartOf(r *Retention, kind string, st JobState, finishedAt int64) int64 {
	if r == nil {
		return PartForever
	}
	ttl := r.ttl(kind, st)
	if ttl <= 0 {
		return PartForever
	}
	w := max(ttl/16, 1)
	exp := finishedAt + ttl
	b := exp / w
	if exp%w < 0 {
		b--
	}
	return (b + 1) * w
}

// doneEntry is a job on the Done list: the tag of the op that put it there
// and the job's generation then.
type doneEntry struct {
	j   *Job
	seq uint64
	gen uint16
}

// live reports whether the entry is still the job's latest on the list.
func (e doneEntry) live() bool { return e.j.inDone() && e.j.gen == e.gen }

// SetSeq tags the ops applied from now on with seq (a journal sequence
// number, for the embedded store): a job that becomes archivable keeps the
// tag of the op that made it so (see Done).
func (s *State) SetSeq(seq uint64) { s.seq = seq }

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
	if s.frozen != nil && op.Kind != OpEnqueue && op.Kind != OpExpire && op.Kind != OpSchedule && op.Kind != OpTarget && op.Kind != OpLimit {
		// Every other op changes at most its own job (expire only drops
		// jobs from the live state, which the frozen one still holds).
		s.preserve(op.ID)
	}
	s.retried, s.discarded = false, false
	switch op.Kind {
	case OpEnqueue:
		s.enqueue(op)
	case OpStart, OpDefer, OpSucceed, OpFail, OpRequeue, OpSnooze:
		s.step(op)
	case OpQueue:
		s.applyQueue(op)
	case OpCancel:
		s.cancel(op)
	case OpRetry:
		s.retryJob(op)
	case OpExpire:
		s.expire(op)
	case OpSchedule:
		s.schedule(op)
	case OpTarget:
		s.applyTarget(op)
	case OpDiscard:
		s.discarded = s.discard(op)
	case OpLimit:
		s.limit(op)
	}
}

// expire sets the retention in force to op.Retention (nil: keep forever)
// and drops every partition that ends by op.At, with the jobs of those
// partitions the state still holds.
func (s *State) expire(op *Op) {
	r := op.Retention
	if r == nil {
		r = &Retention{}
	}
	s.retention = r
	s.horizon = max(s.horizon, op.At)
	s.settleFlows(op.At)
	for p, c := range s.parts {
		if p <= op.At {
			s.counts.Succeeded -= c.Succeeded
			s.counts.Failed -= c.Failed
			s.counts.Cancelled -= c.Cancelled
			delete(s.parts, p)
		}
	}
	kept := s.done[:0]
	for _, e := range s.done {
		switch j := e.j; {
		case !e.live():
		case j.Part() <= op.At:
			j.set(flagInDone, false)
			s.remove(j)
		default:
			kept = append(kept, e)
		}
	}
	clear(s.done[len(kept):])
	s.done = kept
	lk := s.lingering[:0]
	for _, j := range s.lingering {
		switch {
		case !j.State.Finished() || j.inDone() || j.openAttempt(j.Started()) == nil || s.job(j.ID) != j:
		case j.Part() <= op.At:
			s.remove(j)
		default:
			lk = append(lk, j)
		}
	}
	clear(s.lingering[len(lk):])
	s.lingering = lk
}

// gone reports whether finished job j belongs to a partition that was
// dropped: it is no longer counted, and is not shown.
func (s *State) gone(j *Job) bool { return j.State.Finished() && j.Part() <= s.horizon }

// remove takes j out of the jobs and the key index. It does not recount.
func (s *State) remove(j *Job) {
	if k := j.Spec.Key; k != "" && s.keys[k] == j.ID {
		delete(s.keys, k)
	}
	i, ok := s.search(j.ID)
	if !ok || s.jobs[i] != j {
		return
	}
	if s.ids == nil {
		s.ids = make([]uint64, len(s.jobs), cap(s.jobs))
		for k, j := range s.jobs {
			s.ids[k] = j.ID
		}
	}
	s.jobs[i] = nil
	s.holes++
	s.removed(j)
	if s.holes > 64 && s.holes > len(s.jobs)/2 {
		s.compact()
	}
}

// compact drops the holes from jobs and ids.
func (s *State) compact() {
	k := 0
	for i, j := range s.jobs {
		if j != nil {
			s.jobs[k], s.ids[k] = j, s.ids[i]
			k++
		}
	}
	clear(s.jobs[k:])
	s.jobs, s.ids = s.jobs[:k], nil
	s.holes = 0
}

// finished accounts for j having just reached end state st: its partition,
// the counts, and, when no attempt of it is still open, Done.
func (s *State) finished(j *Job) {
	// A job that finishes into a partition already dropped (its clock is
	// behind the last expire's) waits for the next expire.
	j.run().Part = max(PartOf(s.retention, j.Spec.Kind, j.State, j.FinishedAt()), s.horizon+1)
	c := s.parts[j.Part()]
	c.add(j.State, 1)
	s.parts[j.Part()] = c
	s.archivable(j)
}

// archivable puts finished job j on the Done list once none of its
// attempts is open any more (a job cancelled while running waits for its
// attempt's outcome, which still feeds the breaker and the history); a job
// whose partition was dropped meanwhile is removed instead.
func (s *State) archivable(j *Job) {
	if j.inDone() || !j.State.Finished() {
		return
	}
	if j.openAttempt(j.Started()) != nil {
		s.lingering = append(s.lingering, j)
		return
	}
	if s.gone(j) {
		s.remove(j)
		return
	}
	j.set(flagInDone, true)
	j.gen++
	s.done = append(s.done, doneEntry{j: j, seq: s.seq, gen: j.gen})
}

// Done calls fn for the finished jobs the state holds whose attempts have
// all ended, oldest first, each with the tag (SetSeq) of the op that put it
// on the list and a token for Evict, until fn returns false: the jobs a
// store that keeps finished jobs elsewhere may copy out and then evict.
// The jobs must not be modified.
func (s *State) Done(fn func(j *Job, seq uint64, token uint16) bool) {
	for _, e := range s.done {
		if e.live() && !fn(e.j, e.seq, e.gen) {
			return
		}
	}
}

// Finished calls fn for every finished job the state holds (on the Done
// list, or with an attempt still open), in no order, until fn returns
// false. It costs O(those jobs), not O(all jobs).
func (s *State) Finished(fn func(*Job) bool) {
	for _, e := range s.done {
		if e.live() && !fn(e.j) {
			return
		}
	}
	for _, j := range s.lingering {
		if j.State.Finished() && !j.inDone() && j.openAttempt(j.Started()) != nil && s.job(j.ID) == j && !fn(j) {
			return
		}
	}
}

// RunningJobs calls fn for every running job, in no order.
func (s *State) RunningJobs(fn func(*Job) bool) {
	for _, j := range s.running {
		if !fn(j) {
			return
		}
	}
}

// DoneLen returns how many entries the Done list holds (an upper bound on
// its jobs).
func (s *State) DoneLen() int { return len(s.done) }

// Evict takes job id out of the state if it is on the Done list with the
// token Done gave (it did not come back and finish again since it was
// copied out): the state goes on counting it in its partition, and a retry
// by hand brings it back from the image its OpRetry carries. It is not an
// op and is not journaled; it reports whether the job was evicted.
func (s *State) Evict(id uint64, token uint16) bool {
	j := s.job(id)
	if j == nil || !j.inDone() || j.gen != token {
		return false
	}
	j.set(flagInDone, false)
	s.remove(j)
	if len(s.done) > 0 && !s.done[0].live() {
		k := 0
		for k < len(s.done) && !s.done[k].live() {
			s.done[k] = doneEntry{}
			k++
		}
		s.done = s.done[k:]
	}
	return true
}

// SpillPayload drops the payload of live job id from the state, which then
// marks it Spilled: the caller keeps it elsewhere from now on, durably
// before the call (a frozen state encodes the job as it finds it then,
// payload and flag together). The job gets a new Spec without the payload
// (shared with other jobs when it can be, see compact.go); the old one is
// not changed. It is not an op; it reports whether it dropped anything.
func (s *State) SpillPayload(id uint64) bool {
	j := s.job(id)
	if j == nil || j.State.Finished() || j.Spilled() || len(j.Spec.Payload) == 0 {
		return false
	}
	j.Spec = s.withoutPayload(j.Spec)
	j.SetSpilled(true)
	return true
}

// RetryApplied reports whether the last op applied was an OpRetry that
// made a job pending again.
func (s *State) RetryApplied() bool { return s.retried }

// Retention returns the retention in force (nil: forever).
func (s *State) Retention() *Retention { return s.retention }

// Parts returns the expiry partitions that hold finished jobs, ascending,
// with how many jobs of each end state each holds.
func (s *State) Parts() ([]int64, []Counts) {
	ends := make([]int64, 0, len(s.parts))
	for p := range s.parts {
		ends = append(ends, p)
	}
	slices.Sort(ends)
	counts := make([]Counts, len(ends))
	for i, p := range ends {
		counts[i] = s.parts[p]
	}
	return ends, counts
}

// Horizon returns the time of the latest OpExpire: every partition ending
// by it was dropped.
func (s *State) Horizon() int64 { return s.horizon }

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
	sp := s.ownSpec(op.Spec)
	j := &Job{ID: op.ID, Spec: sp, Due: op.Due, EnqueuedAt: op.At, index: -1}
	s.insert(i, j)
	if op.Spec.Key != "" {
		s.keys[op.Spec.Key] = op.ID
	}
	s.nextID = max(s.nextID, op.ID+1)
	s.pushPending(j)
	s.count(sp, Pending, 1)
	if sp.Schedule != "" {
		s.scheduleTick(j)
	}
}

// insert puts j at position i of jobs (where search placed its id),
// reusing the hole its id left if there is one.
func (s *State) insert(i int, j *Job) {
	switch {
	case i < len(s.ids) && s.ids[i] == j.ID:
		s.jobs[i] = j
		s.holes--
	case i == len(s.jobs):
		s.jobs = append(s.jobs, j)
		if s.ids != nil {
			s.ids = append(s.ids, j.ID)
		}
	default:
		s.jobs = slices.Insert(s.jobs, i, j)
		if s.ids != nil {
			s.ids = slices.Insert(s.ids, i, j.ID)
		}
	}
	s.added(j)
}

// intern returns the state's copy of name, so that jobs share one string per
// kind and target; *last caches the previous answer for runs of equal names.
func (s *State) intern(name string, last *string) string {
	if name == *last {
		return *last
	}
	v := s.names.intern(name)
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
	before := br
	ch := Step(j, &br, s.cfg.Circuit, op)
	if !ch.Applied {
		return
	}
	if ch.Fed {
		s.setBreaker(target, br)
		s.feedLife(target, op)
	}
	s.flowStep(target, before, br, op)
	s.paceStep(j.Spec.Queue, op)
	if ch.From == ch.To {
		if op.Kind == OpDefer && j.index >= 0 {
			// A held job is placed when released.
			s.popPending(j)
			s.pushPending(j)
		}
		if j.State.Finished() {
			s.archivable(j) // the last open attempt of a cancelled job ended
		}
		return
	}
	switch ch.From {
	case Pending:
		s.unqueue(j)
	case Running:
		s.stopRunning(j)
	}
	s.count(j.Spec, ch.From, -1)
	s.count(j.Spec, ch.To, 1)
	switch ch.To {
	case Running:
		j.index = int32(len(s.running))
		s.running = append(s.running, j)
	case Pending:
		s.pushPending(j)
	default:
		s.finished(j)
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
	s.finished(j)
}

func (s *State) retryJob(op *Op) {
	j := s.job(op.ID)
	if j == nil {
		j = s.revive(op)
	}
	if j == nil || (j.State != Failed && j.State != Cancelled) || s.gone(j) {
		return
	}
	if img := op.Image; j.Spilled() && img != nil && img.Spec != nil && len(img.Spec.Payload) > 0 {
		// The job's payload is in the store's table, where a finished
		// job's moves into its record, which this retry's table change
		// deletes. The record carries the payload: the job holds it
		// again, as a job revived from the image does, so that live and
		// replay agree whether or not the job was evicted first.
		sp := *j.Spec
		sp.Payload = img.Spec.Payload
		j.Spec = s.ownSpec(&sp)
		j.SetSpilled(false)
	}
	c := s.parts[j.Part()]
	c.add(j.State, -1)
	if c == (Counts{}) {
		delete(s.parts, j.Part())
	} else {
		s.parts[j.Part()] = c
	}
	j.set(flagInDone, false)
	s.setState(j, Pending)
	j.Due = op.Due
	if j.Run != nil {
		j.Run.FirstDue = op.Due
	}
	if r := j.Run; r != nil {
		r.Fails, r.Part, r.FinishedAt, r.Reason, r.LastError = 0, 0, 0, "", ""
		j.tidy()
	}
	s.pushPending(j)
	s.retried = true
}

// revive puts back the evicted job that op.Image describes, as it was when
// it finished, for a retry by hand; nil if the op carries no usable image.
// The job is still counted in its partition, so nothing is recounted here.
func (s *State) revive(op *Op) *Job {
	img := op.Image
	if img == nil || img.ID != op.ID || img.Spec == nil || !img.State.Finished() || img.ID >= s.nextID {
		return nil
	}
	if _, ok := s.parts[img.Part()]; !ok || img.Part() <= s.horizon {
		return nil // expired (or never finished here)
	}
	i, found := s.search(img.ID)
	if found {
		return nil
	}
	j := new(Job)
	*j = img.Clone()
	j.Spec, j.index = s.ownSpec(img.Spec), -1
	j.set(flagHeld|flagInDone|flagSpilled, false)
	s.insert(i, j)
	if k := j.Spec.Key; k != "" {
		s.keys[k] = j.ID
	}
	return j
}

func (s *State) finish(j *Job, st JobState, at int64, reason string) {
	s.setState(j, st)
	r := j.run()
	r.FinishedAt, r.Reason = at, reason
}

func (s *State) setState(j *Job, st JobState) {
	s.count(j.Spec, j.State, -1)
	s.count(j.Spec, st, 1)
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
		s.popPending(j)
	}
	if j.parked() {
		s.unpark(j)
	}
	j.set(flagHeld, false)
}

func (s *State) setBreaker(target string, br retry.Breaker) {
	if br.IsZero() {
		delete(s.breakers, target)
		return
	}
	s.breakers[target] = br
}

// search returns where id is or would be in s.jobs, and whether a job the
// state holds has it.
func (s *State) search(id uint64) (int, bool) {
	n := len(s.jobs)
	if n == 0 || s.idAt(n-1) < id {
		return n, false
	}
	i := sort.Search(n, func(i int) bool { return s.idAt(i) >= id })
	return i, i < n && s.idAt(i) == id && s.jobs[i] != nil
}

// idAt returns the id of jobs[i] (a job's or a hole's).
func (s *State) idAt(i int) uint64 {
	if s.ids != nil {
		return s.ids[i]
	}
	return s.jobs[i].ID
}

// job returns the job with id, or nil. Ids are dense when the engine uses
// NextID, so the direct index hits; otherwise it binary-searches.
func (s *State) job(id uint64) *Job {
	if len(s.jobs) == 0 {
		return nil
	}
	if k := id - s.idAt(0); k < uint64(len(s.jobs)) && s.idAt(int(k)) == id {
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

// Job returns the job with id, if the state holds it (not evicted, not in
// a dropped partition). The Job is a read-only view.
func (s *State) Job(id uint64) (*Job, bool) {
	j := s.job(id)
	if j == nil || s.gone(j) {
		return nil, false
	}
	return j, true
}

// ByKey returns the id of the job that holds the idempotency key, among
// the jobs the state holds. A key stays held for as long as its job is
// kept, finished or not (the keys of evicted jobs are the evicting store's
// to look up).
func (s *State) ByKey(key string) (uint64, bool) {
	if key == "" {
		return 0, false
	}
	id, ok := s.keys[key]
	if ok {
		if j := s.job(id); j != nil && s.gone(j) {
			return 0, false
		}
	}
	return id, ok
}

// Hold takes the pending job id out of the due order until ReleaseHeld, so
// that PeekDue and NextDue look past it; the engine uses it to skip a job
// whose target is disabled (HoldTarget is for a target at its limit). It
// is not an op and is not
// journaled. A held job is still Pending (and counted so): ops apply to it
// as usual, and a Defer of a held job takes effect when it is released.
// Hold of a job that is not pending, or already held, does nothing.
func (s *State) Hold(id uint64) {
	j := s.job(id)
	if j == nil || j.State != Pending || j.index < 0 {
		return
	}
	s.popPending(j)
	j.set(flagHeld, true)
	s.held = append(s.held, j)
}

// ReleaseHeld puts every held job that is still pending back in the due
// order, and ends every HoldQueue and HoldTarget (a benched job stays on
// its bench, which PeekDue offers again).
func (s *State) ReleaseHeld() {
	s.releaseQueues()
	s.releaseTargets()
	for i, j := range s.held {
		if j.held() && !j.parked() {
			j.set(flagHeld, false)
			if j.State == Pending && j.index < 0 {
				s.pushPending(j)
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

// TargetLive returns how many jobs of target are pending (held ones
// included) and running, in O(1).
func (s *State) TargetLive(target string) (pending, running int) {
	if c := s.load[target]; c != nil {
		return c.Pending, c.Running
	}
	return 0, 0
}

// count adds d jobs of spec sp in state st to the counts, overall, per
// target and per queue.
func (s *State) count(sp *Spec, st JobState, d int) {
	s.counts.add(st, d)
	if st != Pending && st != Running {
		return
	}
	s.countQueue(sp.Queue, st, d)
	target := sp.Target
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

// Len returns the number of jobs the state holds.
func (s *State) Len() int { return len(s.jobs) - s.holes }

// Scan calls fn for the jobs the state holds in id order until fn returns
// false: ascending from the first id above afterID, or, when desc,
// descending from the last id below afterID. afterID 0 starts at the first
// (or last) job. Each call costs O(log n) to find the start, then O(1) per
// job. fn must not apply ops.
func (s *State) Scan(afterID uint64, desc bool, fn func(*Job) bool) {
	if desc {
		i := len(s.jobs) - 1
		if afterID != 0 {
			k, _ := s.search(afterID)
			i = k - 1
		}
		for ; i >= 0; i-- {
			if j := s.jobs[i]; j != nil && !s.gone(j) && !fn(j) {
				return
			}
		}
		return
	}
	i := 0
	if afterID != 0 {
		i = sort.Search(len(s.jobs), func(i int) bool { return s.idAt(i) > afterID })
	}
	for ; i < len(s.jobs); i++ {
		if j := s.jobs[i]; j != nil && !s.gone(j) && !fn(j) {
			return
		}
	}
}
