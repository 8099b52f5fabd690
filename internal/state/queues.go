package state

import (
	"fmt"
	"math"
	"slices"

	"github.com/runlog/runlog/retry"
)

// Queues. Every job belongs to one queue (Spec.Queue; "" is the default
// queue, named "default" outside the state). A queue has a setting, changed
// only by OpQueue and kept in snapshot section 1:
//
//   - Concurrency: at most this many attempts of the queue run at once
//     (0: no limit but the engine's pool). A claim holds back a due job of
//     a queue at its limit (Planner, QueueHeld).
//   - Paused: no attempt of the queue starts. Its jobs are still accepted,
//     stay pending, and are not looked at by a claim, nor counted by
//     NextDue; those running go on to their outcome.
//
// Inside the state each queue keeps its pending jobs in two heaps: waiting
// jobs by (due, id), and ready ones (due when a claim last looked) by
// (-priority, due, id). PeekDue moves the due waiting jobs to the ready
// heap before it answers, so that among the due jobs a higher priority
// comes first; while no pending job of the queue has a priority other than
// 0 (the usual case) the two orders agree, and PeekDue answers from the
// waiting heap alone. Which heap a job is in is layout, not state: replay
// and a snapshot may place it differently, and the answers are the same.

// QueueSetting is the setting of one queue: what OpQueue carries.
type QueueSetting struct {
	// Name is the queue's name; "" is the default queue.
	Name string
	// Concurrency bounds the queue's running attempts; 0 for no bound but
	// the engine's pool.
	Concurrency int
	// Paused stops the queue's jobs from starting.
	Paused bool
	// Limit is the queue's rate limit (queuepace.go); the zero Limit for
	// none.
	Limit retry.Limit
}

// QueueInfo is a queue's setting and load.
type QueueInfo struct {
	QueueSetting
	// Pending and Running count the queue's jobs in those states.
	Pending, Running int
	// Pace is the state of the queue's rate limit (the zero Pace without
	// one).
	Pace Pace
}

// queue is one queue inside the state: its setting, its pending jobs and
// counts.
type queue struct {
	set              QueueSetting
	wait, ready      jobHeap
	prio             int // jobs in wait or ready whose priority is not 0
	pending, running int
	held             bool // skipped by PeekDue until ReleaseHeld (HoldQueue)
	pace             Pace // the state of set.Limit (queuepace.go)
	// benches holds the benches of held targets (holdtarget.go) that no claim
	// blocks now, by their first jobs.
	benches benchHeap
}

// queueSet holds the queues: the default one always, the others while
// they have pending or running jobs or a setting other than the zero one.
type queueSet struct {
	def   queue
	named map[string]*queue
	held  []*queue // the queues HoldQueue took out, for ReleaseHeld
	// limited counts the queues with a rate limit: while 0, a start or
	// a defer looks at no queue's pace.
	limited int
}

// MaxQueueConcurrency is the largest concurrency a queue may have.
const MaxQueueConcurrency = math.MaxInt32

// queue returns the queue name, creating it if needed.
func (s *State) queue(name string) *queue {
	if name == "" {
		return &s.q.def
	}
	q := s.q.named[name]
	if q == nil {
		if s.q.named == nil {
			s.q.named = make(map[string]*queue)
		}
		q = &queue{set: QueueSetting{Name: name}, ready: jobHeap{kind: inReady}}
		s.q.named[name] = q
	}
	return q
}

// lookupQueue returns the queue name, or nil if the state has none.
func (s *State) lookupQueue(name string) *queue {
	if name == "" {
		return &s.q.def
	}
	return s.q.named[name]
}

// tidy forgets a named queue that has no jobs pending or running and the
// zero setting: the queues the state keeps follow the live work.
func (s *State) tidy(q *queue) {
	if q == &s.q.def || q.pending != 0 || q.running != 0 || q.held || !q.set.IsZero() {
		return
	}
	delete(s.q.named, q.set.Name)
}

// countQueue adds d jobs of queue name in state st (pending or running).
func (s *State) countQueue(name string, st JobState, d int) {
	q := s.queue(name)
	if st == Pending {
		q.pending += d
	} else {
		q.running += d
	}
	if d < 0 && name != "" {
		s.tidy(q)
	}
}

// pushPending puts pending job j in its queue's waiting heap.
func (s *State) pushPending(j *Job) {
	if s.park(j) {
		return // its target is disabled (lifecycle.go)
	}
	q := s.queue(j.Spec.Queue)
	q.wait.push(j)
	if j.Spec.Priority != 0 {
		q.prio++
	}
}

// addPending is pushPending for a bulk build: the queues' heaps are out of
// order until orderPending. A queue's first job makes room for the more
// jobs to come (growing a slice of pointers while the collector runs is
// dear); orderPending gives back what they did not take.
func (s *State) addPending(j *Job, more uint64) {
	if s.park(j) {
		return
	}
	q := s.queue(j.Spec.Queue)
	if q.wait.js == nil {
		q.wait.js = make([]*Job, 0, more+1)
	}
	q.wait.add(j)
	if j.Spec.Priority != 0 {
		q.prio++
	}
}

// orderPending orders the queues' heaps after addPending.
func (s *State) orderPending() {
	s.q.def.wait.init()
	for _, q := range s.q.named {
		q.wait.init()
	}
}

// popPending takes pending job j out of its queue's heap; it must be in
// one.
func (s *State) popPending(j *Job) {
	if j.heap() == inBench {
		s.unbench(j)
		return
	}
	q := s.queue(j.Spec.Queue)
	if j.heap() == inReady {
		q.ready.remove(j)
	} else {
		q.wait.remove(j)
	}
	if j.Spec.Priority != 0 {
		q.prio--
	}
}

// first returns q's first job in claim order if one is due at now, moving
// the due waiting jobs to the ready heap when priorities make the orders
// differ.
func (q *queue) first(now int64) *Job {
	if q.prio == 0 && len(q.ready.js) == 0 {
		if len(q.wait.js) > 0 && q.wait.js[0].Due <= now {
			return q.wait.js[0]
		}
		return nil
	}
	for len(q.wait.js) > 0 && q.wait.js[0].Due <= now {
		q.ready.push(q.wait.pop())
	}
	// After the clock stepped back, a ready job may no longer be due: it
	// waits again.
	for len(q.ready.js) > 0 && q.ready.js[0].Due > now {
		q.wait.push(q.ready.pop())
	}
	if len(q.ready.js) > 0 {
		return q.ready.js[0]
	}
	return nil
}

// next returns the earliest due time among q's pending jobs in its heaps
// and its benches that no claim blocks. A ready or benched job was due
// when last looked at: after the clock stepped back, the answer may be
// later than the earliest (by at most the step).
func (q *queue) next() (int64, bool) {
	due, ok := q.nextQueued()
	if d, has := q.nextBenched(); has && (!ok || d < due) {
		due, ok = d, true
	}
	return due, ok
}

// nextQueued is next for the queue's own two heaps.
func (q *queue) nextQueued() (int64, bool) {
	switch {
	case len(q.ready.js) > 0 && len(q.wait.js) > 0:
		return min(q.ready.js[0].Due, q.wait.js[0].Due), true
	case len(q.ready.js) > 0:
		return q.ready.js[0].Due, true
	case len(q.wait.js) > 0:
		return q.wait.js[0].Due, true
	}
	return 0, false
}

// ClaimOrder reports whether a comes before b among due jobs: higher
// priority first, then (due, id).
func ClaimOrder(a, b *Job) bool {
	if a.Spec.Priority != b.Spec.Priority {
		return a.Spec.Priority > b.Spec.Priority
	}
	return a.Due < b.Due || (a.Due == b.Due && a.ID < b.ID)
}

// PeekDue returns the pending job that a claim takes first at now: among
// the jobs due at now (Due ≤ now) of the queues that are neither paused
// nor held (HoldQueue), the one of highest priority, then earliest due
// time, then lowest id; held jobs (Hold, HoldTarget) are skipped. It
// changes no job (it may move jobs between a queue's heaps and benches,
// which is layout).
func (s *State) PeekDue(now int64) (*Job, bool) {
	var best *Job
	if q := &s.q.def; !q.set.Paused && !q.held {
		best = s.firstOf(q, now)
	}
	for _, q := range s.q.named {
		if q.set.Paused || q.held {
			continue
		}
		if j := s.firstOf(q, now); j != nil && (best == nil || ClaimOrder(j, best)) {
			best = j
		}
	}
	return best, best != nil
}

// firstOf returns q's first due job in claim order at now, from its heaps
// or its benches that no claim blocks, or nil.
func (s *State) firstOf(q *queue, now int64) *Job {
	b := s.firstBenched(q, now) // first: it may put jobs back in q.wait
	j := q.first(now)
	if b != nil && (j == nil || ClaimOrder(b, j)) {
		return b
	}
	return j
}

// NextDue returns the earliest due time among the pending jobs that are not
// held, of the queues that are not paused, and false when there is none.
func (s *State) NextDue() (int64, bool) {
	due, ok := int64(0), false
	if !s.q.def.set.Paused {
		due, ok = s.q.def.next()
	}
	for _, q := range s.q.named {
		if q.set.Paused {
			continue
		}
		if d, has := q.next(); has && (!ok || d < due) {
			due, ok = d, true
		}
	}
	return due, ok
}

// OldestDue returns the earliest due time among all pending jobs not held
// by Hold, paused queues included, and false when there is none: the
// queue's age for Stats. It costs O(ready jobs), as it reads every job of
// the ready heaps, whose order is not by due time: NextDue is the cheap
// one, for the dispatcher.
func (s *State) OldestDue() (int64, bool) {
	due, ok := int64(0), false
	look := func(q *queue) {
		for _, j := range q.ready.js {
			if !ok || j.Due < due {
				due, ok = j.Due, true
			}
		}
		for _, b := range q.benches {
			for _, j := range b.js {
				if !ok || j.Due < due {
					due, ok = j.Due, true
				}
			}
		}
		if len(q.wait.js) > 0 && (!ok || q.wait.js[0].Due < due) {
			due, ok = q.wait.js[0].Due, true
		}
	}
	look(&s.q.def)
	for _, q := range s.q.named {
		look(q)
	}
	return due, ok
}

// HoldQueue takes the queue name out of PeekDue until ReleaseHeld: the
// claim found it at its concurrency (or paused). It is not an op.
func (s *State) HoldQueue(name string) {
	q := s.lookupQueue(name)
	if q == nil || q.held {
		return
	}
	q.held = true
	s.q.held = append(s.q.held, q)
}

// releaseQueues ends every HoldQueue.
func (s *State) releaseQueues() {
	for i, q := range s.q.held {
		q.held = false
		s.tidy(q)
		s.q.held[i] = nil
	}
	s.q.held = s.q.held[:0]
}

// QueueRunning returns how many attempts of the queue name run now: what a
// claim's Planner compares with the queue's concurrency.
func (s *State) QueueRunning(name string) int {
	if q := s.lookupQueue(name); q != nil {
		return q.running
	}
	return 0
}

// Queue returns the setting and load of the queue name (the zero setting
// for a queue the state does not know).
func (s *State) Queue(name string) QueueInfo {
	if q := s.lookupQueue(name); q != nil {
		return QueueInfo{QueueSetting: q.set, Pending: q.pending, Running: q.running, Pace: q.pace}
	}
	return QueueInfo{QueueSetting: QueueSetting{Name: name}}
}

// Queues returns every queue the state knows (the default one always, the
// others while they have jobs pending or running or a setting), sorted by
// name ("" first).
func (s *State) Queues() []QueueInfo {
	out := []QueueInfo{s.Queue("")}
	for _, q := range s.q.named {
		out = append(out, QueueInfo{QueueSetting: q.set, Pending: q.pending, Running: q.running, Pace: q.pace})
	}
	slices.SortFunc(out[1:], func(a, b QueueInfo) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// applyQueue sets the setting of the queue op.Queue names.
func (s *State) applyQueue(op *Op) {
	qs := op.Queue
	if qs == nil || qs.Concurrency < 0 || qs.Concurrency > MaxQueueConcurrency || qs.Limit.Validate() != nil {
		return
	}
	q := s.queue(qs.Name)
	s.setQueue(q, *qs)
	s.tidy(q)
}

// QueueOp returns the op that gives the queue name the setting set at now.
func QueueOp(set QueueSetting, now int64) Op {
	return Op{Kind: OpQueue, At: now, Queue: &set}
}

// queueSection returns the body of snapshot section 1, the settings of the
// queues whose setting is not the zero one, or nil when there is none:
//
//	uvarint n, then n times, by ascending name: string name, uvarint
//	concurrency, byte paused (0 or 1)
func (s *State) queueSection() []byte {
	var sets []QueueSetting
	for _, qi := range s.Queues() {
		if !qi.QueueSetting.IsZero() {
			sets = append(sets, qi.QueueSetting)
		}
	}
	if len(sets) == 0 {
		return nil
	}
	dst := putUvarint(nil, uint64(len(sets)))
	for i := range sets {
		dst = putQueueSetting(dst, &sets[i])
	}
	return dst
}

// readQueueSection reads the body queueSection wrote.
func (s *State) readQueueSection(d *decoder) {
	n := d.uvarint("queues")
	if d.err == nil && (n == 0 || n > uint64(d.left())/3) {
		d.failAt("%d queue settings in %d bytes", n, d.left())
		return
	}
	prev := ""
	for i := uint64(0); d.err == nil && i < n; i++ {
		qs := d.queueSetting()
		if d.err != nil {
			return
		}
		if i > 0 && qs.Name <= prev {
			d.failAt("queue %q after %q: not in ascending order", qs.Name, prev)
			return
		}
		if qs.IsZero() {
			d.failAt("queue %q with the zero setting written", qs.Name)
			return
		}
		prev = qs.Name
		s.setQueue(s.queue(qs.Name), qs)
	}
}

// queueSetting reads a string name, uvarint concurrency and byte flags
// (bit 0 paused, bit 1 a rate limit follows: uvarint rate, uvarint burst).
// A record written before queues had rate limits has flags 0 or 1.
func (d *decoder) queueSetting() QueueSetting {
	var qs QueueSetting
	qs.Name = d.string("queue name")
	c := d.uvarint("concurrency")
	if d.err == nil && c > MaxQueueConcurrency {
		d.failAt("queue concurrency %d above %d", c, MaxQueueConcurrency)
	}
	qs.Concurrency = int(c)
	switch p := d.byte("paused"); {
	case d.err != nil:
	case p&^(queuePaused|queueLimited) != 0:
		d.failAt("queue flags %#x", p)
	default:
		qs.Paused = p&queuePaused != 0
		if p&queueLimited != 0 {
			qs.Limit = d.queueLimit(qs.Name)
		}
	}
	return qs
}

// putQueueSetting appends what queueSetting reads.
func putQueueSetting(dst []byte, qs *QueueSetting) []byte {
	dst = putString(dst, qs.Name)
	dst = putUvarint(dst, uint64(max(qs.Concurrency, 0)))
	if qs.Limit.IsZero() {
		return append(dst, boolByte(qs.Paused))
	}
	dst = append(dst, boolByte(qs.Paused)|queueLimited)
	return putQueueLimit(dst, qs.Limit)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// checkQueues checks the queues' heaps and counts against the jobs
// (Check): every heap in order with right indexes, and each queue's
// pending and running counts and priority count equal to a recount.
func (s *State) checkQueues() error {
	type tally struct{ pending, running, inHeaps, benched, prio int }
	want := map[*queue]*tally{}
	t := func(q *queue) *tally {
		if want[q] == nil {
			want[q] = &tally{}
		}
		return want[q]
	}
	for _, j := range s.jobs {
		if j == nil || (j.State != Pending && j.State != Running) {
			continue
		}
		q := s.lookupQueue(j.Spec.Queue)
		if q == nil {
			return fmt.Errorf("job %d: its queue %q is unknown", j.ID, j.Spec.Queue)
		}
		c := t(q)
		if j.State == Running {
			c.running++
			continue
		}
		c.pending++
		if j.index >= 0 && j.heap() == inBench {
			c.benched++
		} else if j.index >= 0 {
			c.inHeaps++
			h := &q.wait
			if j.heap() == inReady {
				h = &q.ready
			}
			if int(j.index) >= len(h.js) || h.js[j.index] != j {
				return fmt.Errorf("job %d: index %d is wrong (heap %d)", j.ID, j.index, j.heap())
			}
			if j.Spec.Priority != 0 {
				c.prio++
			}
		}
	}
	all := []*queue{&s.q.def}
	for name, q := range s.q.named {
		if name == "" || q.set.Name != name {
			return fmt.Errorf("queue %q filed as %q", q.set.Name, name)
		}
		all = append(all, q)
	}
	benched := map[*queue]int{}
	for _, tb := range s.benched {
		for _, b := range tb.bs {
			benched[b.q] += len(b.js)
		}
	}
	for _, q := range all {
		c := t(q)
		if benched[q] != c.benched {
			return fmt.Errorf("queue %q: %d jobs on benches, %d benched jobs", q.set.Name, benched[q], c.benched)
		}
		if q.pending != c.pending || q.running != c.running || q.prio != c.prio || len(q.wait.js)+len(q.ready.js) != c.inHeaps {
			return fmt.Errorf("queue %q: pending %d, running %d, priorities %d, in heaps %d; recount %+v",
				q.set.Name, q.pending, q.running, q.prio, len(q.wait.js)+len(q.ready.js), *c)
		}
		if q != &s.q.def && !q.held && q.pending == 0 && q.running == 0 && q.set == (QueueSetting{Name: q.set.Name}) {
			return fmt.Errorf("queue %q kept with nothing in it", q.set.Name)
		}
		for _, h := range []*jobHeap{&q.wait, &q.ready} {
			for i := 1; i < len(h.js); i++ {
				if h.less(h.js[i], h.js[(i-1)/2]) {
					return fmt.Errorf("queue %q: heap order broken at %d (job %d)", q.set.Name, i, h.js[i].ID)
				}
			}
		}
	}
	return s.checkBenches()
}

// queuesEqual compares the queue settings of two states (Equal).
func queuesEqual(a, b *State) (bool, string) {
	x, y := a.queueSection(), b.queueSection()
	if string(x) != string(y) {
		return false, fmt.Sprintf("queue settings %v vs %v", a.Queues(), b.Queues())
	}
	if x, y := a.paceSection(), b.paceSection(); string(x) != string(y) {
		return false, fmt.Sprintf("queue paces %v vs %v", a.Queues(), b.Queues())
	}
	return true, ""
}
