package state

import "fmt"

// Benches: what a held target costs a claim.
//
// A claim holds a due job back when its target runs its per-target limit
// or its slow start's window is full (Planner's Held); every later job of
// that target is held in the same claim. Put back in the queue's heaps at
// the claim's end, a backlog of n due jobs of such a target would be
// walked again by every claim until it drains: n claims of n jobs each.
//
// Instead a held job moves to its target's bench in its queue: a heap of
// that target's due jobs in claim order (-priority, due, id), which stays
// across claims. Each queue keeps its benches in a heap by their first
// jobs, and PeekDue offers a bench's first job beside the queue's own, so
// that the claim order over all due jobs is the same as if no job were
// benched. HoldTarget benches a job and takes its target's benches out of
// their queues' bench heaps until ReleaseHeld: the rest of the claim does
// not look at them, and the next claim looks at the target's first job
// once. A job is benched once, however many claims pass it.
//
// A bench is layout, like the queue's two heaps: a benched job is pending
// and due; any op that changes it takes it off its bench (a deferral
// puts it back in its queue's waiting heap). After the clock steps back,
// a benched job that is no longer due goes back to the waiting heap
// (PeekDue). A snapshot and a replay start with no bench.

// bench is a held target's due jobs in one queue.
type bench struct {
	jobHeap
	q      *queue
	tb     *targetBenches // the target's benches, this one among them
	target string
	at     int // the bench's position in q.benches; -1 while out (blocked)
	prio   int // jobs on the bench whose priority is not 0
}

// targetBenches is a target's benches, one per queue it has jobs benched
// in, and whether a claim holds the target now (HoldTarget).
type targetBenches struct {
	bs      []*bench
	blocked bool
}

// benchHeap orders a queue's benches by their first jobs, in claim order.
type benchHeap []*bench

func (h benchHeap) less(i, k int) bool { return ClaimOrder(h[i].js[0], h[k].js[0]) }

func (h benchHeap) swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].at, h[k].at = i, k
}

func (h *benchHeap) push(b *bench) {
	b.at = len(*h)
	*h = append(*h, b)
	h.up(b.at)
}

func (h *benchHeap) remove(b *bench) {
	i, last := b.at, len(*h)-1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	b.at = -1
	if i != last {
		h.fix(i)
	}
}

func (h benchHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h benchHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h benchHeap) down(i int) bool {
	start, n := i, len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.less(r, c) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

// HoldTarget holds back the pending job id because its target is held
// (Planner's Held): the job moves to its target's bench, and the target's
// benches leave PeekDue and NextDue until ReleaseHeld. It is not an op and
// is not journaled; the job stays pending and counted. HoldTarget of a
// job that is not pending, or that no heap holds, does nothing.
func (s *State) HoldTarget(id uint64) {
	j := s.job(id)
	if j == nil || j.State != Pending || j.index < 0 {
		return
	}
	tb := s.targetBenches(j.Spec.Target)
	if j.heap() != inBench {
		s.popPending(j)
		s.benchOf(tb, j, true).push(j)
	}
	if tb.blocked {
		return
	}
	tb.blocked = true
	s.blocked = append(s.blocked, j.Spec.Target)
	for _, b := range tb.bs {
		if b.at >= 0 {
			b.q.benches.remove(b)
		}
	}
}

// targetBenches returns target's benches, making them if needed.
func (s *State) targetBenches(target string) *targetBenches {
	tb := s.benched[target]
	if tb == nil {
		if s.benched == nil {
			s.benched = make(map[string]*targetBenches)
		}
		tb = &targetBenches{}
		s.benched[target] = tb
	}
	return tb
}

// benchOf returns the bench of tb in j's queue, made if create is set
// (and then never nil); nil if it has none.
func (s *State) benchOf(tb *targetBenches, j *Job, create bool) *bench {
	q := s.queue(j.Spec.Queue)
	for _, b := range tb.bs {
		if b.q == q {
			return b
		}
	}
	if !create {
		return nil
	}
	b := &bench{jobHeap: jobHeap{kind: inBench}, q: q, tb: tb, target: j.Spec.Target, at: -1}
	tb.bs = append(tb.bs, b)
	return b
}

// push benches j, keeping the queue's bench heap in order (a new bench
// joins it unless its target is blocked).
func (b *bench) push(j *Job) {
	b.jobHeap.push(j)
	if j.Spec.Priority != 0 {
		b.prio++
	}
	switch {
	case b.at >= 0:
		b.q.benches.fix(b.at)
	case !b.tb.blocked:
		b.q.benches.push(b)
	}
}

// unbench takes benched job j off its bench, dropping the bench if it is
// left empty.
func (s *State) unbench(j *Job) {
	tb := s.benched[j.Spec.Target]
	b := s.benchOf(tb, j, false)
	b.remove(j)
	if j.Spec.Priority != 0 {
		b.prio--
	}
	if len(b.js) > 0 {
		if b.at >= 0 {
			b.q.benches.fix(b.at)
		}
		return
	}
	if b.at >= 0 {
		b.q.benches.remove(b)
	}
	for i, x := range tb.bs {
		if x == b {
			tb.bs = append(tb.bs[:i], tb.bs[i+1:]...)
			break
		}
	}
	if len(tb.bs) == 0 && !tb.blocked {
		delete(s.benched, j.Spec.Target)
	}
}

// releaseTargets ends every HoldTarget: the benches go back in their
// queues' bench heaps, and stay.
func (s *State) releaseTargets() {
	for i, t := range s.blocked {
		s.blocked[i] = ""
		tb := s.benched[t]
		if tb == nil || !tb.blocked {
			continue
		}
		tb.blocked = false
		if len(tb.bs) == 0 {
			delete(s.benched, t)
			continue
		}
		for _, b := range tb.bs {
			b.q.benches.push(b)
		}
	}
	s.blocked = s.blocked[:0]
}

// firstBenched returns the first job in claim order of q's benches that
// are not blocked, or nil. A bench whose first job is no longer due at now
// (the clock stepped back) gives its jobs that are not due back to the
// queue's waiting heap first.
func (s *State) firstBenched(q *queue, now int64) *Job {
	for len(q.benches) > 0 {
		b := q.benches[0]
		if b.js[0].Due <= now {
			return b.js[0]
		}
		var late []*Job
		for _, j := range b.js {
			if j.Due > now {
				late = append(late, j)
			}
		}
		for _, j := range late {
			s.popPending(j)
			s.pushPending(j)
		}
	}
	return nil
}

// nextBenched returns the earliest due time among the jobs on q's benches
// that are not blocked.
func (q *queue) nextBenched() (int64, bool) {
	due, ok := int64(0), false
	for _, b := range q.benches {
		d := b.js[0].Due
		if b.prio > 0 {
			for _, j := range b.js {
				d = min(d, j.Due)
			}
		}
		if !ok || d < due {
			due, ok = d, true
		}
	}
	return due, ok
}

// checkBenches checks the benches (Check): each bench non-empty, in order,
// with its jobs' indexes and its priority count right, in its queue's
// bench heap unless its target is blocked, and the bench heaps in order.
func (s *State) checkBenches() error {
	inHeap := map[*bench]bool{}
	check := func(q *queue) error {
		for i, b := range q.benches {
			if b.at != i || b.q != q {
				return fmt.Errorf("queue %q: bench of %q at %d says %d", q.set.Name, b.target, i, b.at)
			}
			if i > 0 && q.benches.less(i, (i-1)/2) {
				return fmt.Errorf("queue %q: bench heap order broken at %d", q.set.Name, i)
			}
			inHeap[b] = true
		}
		return nil
	}
	if err := check(&s.q.def); err != nil {
		return err
	}
	for _, q := range s.q.named {
		if err := check(q); err != nil {
			return err
		}
	}
	for t, tb := range s.benched {
		if len(tb.bs) == 0 && !tb.blocked {
			return fmt.Errorf("target %q: kept with no bench", t)
		}
		for _, b := range tb.bs {
			if b.target != t || len(b.js) == 0 {
				return fmt.Errorf("target %q: a bench of %q with %d jobs", t, b.target, len(b.js))
			}
			if inHeap[b] == tb.blocked {
				return fmt.Errorf("target %q: bench in its queue's heap %v, blocked %v", t, inHeap[b], tb.blocked)
			}
			prio := 0
			for i, j := range b.js {
				if j.heap() != inBench || int(j.index) != i || j.Spec.Target != t || s.queue(j.Spec.Queue) != b.q || j.State != Pending {
					return fmt.Errorf("target %q: job %d on its bench is %v in heap %d at %d (bench position %d)", t, j.ID, j.State, j.heap(), j.index, i)
				}
				if i > 0 && b.less(j, b.js[(i-1)/2]) {
					return fmt.Errorf("target %q: bench order broken at %d (job %d)", t, i, j.ID)
				}
				if j.Spec.Priority != 0 {
					prio++
				}
			}
			if prio != b.prio {
				return fmt.Errorf("target %q: bench counts %d priorities, holds %d", t, b.prio, prio)
			}
		}
	}
	return nil
}
