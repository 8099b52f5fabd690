package state

import (
	"fmt"
	"maps"
	"slices"

	"github.com/runlog/runlog/retry"
)

// A queue's rate limit (docs/semantics.md, "Rate limit per queue"): a token
// bucket of the queue's attempts, set in its QueueSetting (OpQueue) and
// driven by the same rule as a target's (Pace): every start of one of the
// queue's jobs takes a token, and a job the planner defers because the
// queue's bucket is empty reserves its slot. Its state, the queue's Pace,
// is derived from the journaled starts and defers only, so a restart does
// not refill it and replay equals live; the PostgreSQL store keeps it in
// the queue's row and applies the same PaceAfter.

// The flag bits of a queue setting's record (OpQueue, snapshot section 1).
const (
	queuePaused  = 1 // the queue is paused
	queueLimited = 2 // a rate limit follows: uvarint rate, uvarint burst
)

// IsZero reports whether qs is the zero setting of its queue: no
// concurrency, no pause, no rate limit.
func (qs QueueSetting) IsZero() bool {
	return qs.Concurrency == 0 && !qs.Paused && qs.Limit.IsZero()
}

// queueLimit reads a queue's rate limit: uvarint rate, uvarint burst, not
// the zero limit.
func (d *decoder) queueLimit(name string) retry.Limit {
	rate, burst := d.uvarint("rate"), d.uvarint("burst")
	if d.err != nil {
		return retry.Limit{}
	}
	if rate > retry.MaxRateMilli || burst > retry.MaxBurst {
		d.failAt("rate limit of queue %q out of range", name)
		return retry.Limit{}
	}
	l := retry.Limit{RateMilli: int64(rate), Burst: int(burst)}
	if l.IsZero() || l.Validate() != nil {
		d.failAt("rate limit of queue %q: rate %d, burst %d is not a limit", name, rate, burst)
		return retry.Limit{}
	}
	return l
}

// putQueueLimit appends what queueLimit reads.
func putQueueLimit(dst []byte, l retry.Limit) []byte {
	dst = putUvarint(dst, uint64(l.RateMilli))
	return putUvarint(dst, uint64(l.Burst))
}

// setQueue gives q the setting qs: a queue that loses its rate limit loses
// its pace too.
func (s *State) setQueue(q *queue, qs QueueSetting) {
	if q.set.Limit.IsZero() != qs.Limit.IsZero() {
		if qs.Limit.IsZero() {
			s.q.limited--
		} else {
			s.q.limited++
		}
	}
	if qs.Limit.IsZero() {
		q.pace = Pace{}
	}
	q.set = qs
}

// PaceAfter returns the pace p of a queue with limit lim after op, a start
// or a defer of one of its jobs that applied:
//
//   - OpStart takes a token (Pace.Take);
//   - OpDefer reserves its slot (Pace.Reserve) when it is the queue's own
//     deferral: the bucket had no token at op.At and op.Due is the slot
//     Pace.Admit gives then. A job deferred for another reason (its
//     target's breaker, hold or limit) moves no reservation of the queue.
//
// Then what has run out at op.At is dropped (Pace.Settle). A queue without
// a limit keeps the zero Pace.
func PaceAfter(p Pace, lim retry.Limit, op *Op) Pace {
	if lim.IsZero() {
		return Pace{}
	}
	switch op.Kind {
	case OpStart:
		p = p.Take(lim, op.At)
	case OpDefer:
		if ok, due := p.Admit(lim, op.At); !ok && due == op.Due {
			p = p.Reserve(lim, op.At, op.Due)
		}
	}
	return p.Settle(op.At)
}

// paceStep applies op, a start or defer of a job of queue name that
// applied, to the queue's pace. It costs one comparison while no queue has
// a rate limit.
func (s *State) paceStep(name string, op *Op) {
	if s.q.limited == 0 || (op.Kind != OpStart && op.Kind != OpDefer) {
		return
	}
	if q := s.lookupQueue(name); q != nil && !q.set.Limit.IsZero() {
		q.pace = PaceAfter(q.pace, q.set.Limit, op)
	}
}

// The snapshot section of the queues' paces (tag sectionPaces), after the
// queues' settings (section 1), which it needs:
//
//	uvarint  n (1 or more), then per queue whose pace is not the zero one,
//	         in ascending name order:
//	string   name ("" for the default queue)
//	varint   bucket TAT (µs), varint reserved (µs)
const sectionPaces = 5

// paceSection returns the body of the paces' section, or nil when every
// pace is the zero one.
func (s *State) paceSection() []byte {
	if s.q.limited == 0 {
		return nil
	}
	paces := map[string]Pace{}
	if s.q.def.pace != (Pace{}) {
		paces[""] = s.q.def.pace
	}
	for name, q := range s.q.named {
		if q.pace != (Pace{}) {
			paces[name] = q.pace
		}
	}
	if len(paces) == 0 {
		return nil
	}
	dst := putUvarint(nil, uint64(len(paces)))
	for _, name := range slices.Sorted(maps.Keys(paces)) {
		dst = putString(dst, name)
		dst = putVarint(dst, paces[name].Bucket.TAT)
		dst = putVarint(dst, paces[name].Reserved)
	}
	return dst
}

// readPaceSection reads the body paceSection wrote.
func (s *State) readPaceSection(d *decoder) {
	n := d.uvarint("queue paces")
	if d.err == nil && (n == 0 || n > uint64(d.left())/3) {
		d.failAt("%d queue paces in %d bytes", n, d.left())
		return
	}
	prev := ""
	for i := uint64(0); d.err == nil && i < n; i++ {
		name := d.string("queue name")
		var p Pace
		p.Bucket.TAT, p.Reserved = d.varint("bucket"), d.varint("reserved")
		if d.err != nil {
			return
		}
		if i > 0 && name <= prev {
			d.failAt("queue pace %q after %q: not in ascending order", name, prev)
			return
		}
		prev = name
		q := s.lookupQueue(name)
		if q == nil || q.set.Limit.IsZero() || p == (Pace{}) {
			d.failAt("queue %q: a pace %+v without a rate limit, or the zero one", name, p)
			return
		}
		q.pace = p
	}
}

// String formats a queue's pace for test failures.
func (p Pace) String() string { return fmt.Sprintf("{TAT %d, reserved %d}", p.Bucket.TAT, p.Reserved) }
