package runlog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// EventType says what an Event reports.
type EventType uint8

// The types of events. The job events are sent once the change they report
// is durable.
const (
	// EventEnqueued: a job was added (not sent when its key was held
	// already and nothing was added).
	EventEnqueued EventType = iota + 1
	// EventStarted: an attempt started (its start is durable).
	EventStarted
	// EventSucceeded: an attempt succeeded; the job is done.
	EventSucceeded
	// EventRetried: an attempt failed and the job is pending again, for
	// its next attempt after the backoff.
	EventRetried
	// EventFailed: an attempt failed and the job is dead (state failed):
	// a permanent or unsafe failure, or the last attempt its policy
	// allowed. A job that dies with no attempt ending (its deadline passed
	// before it could start, or another PostgreSQL node ran it) sends no
	// event here; Runner.Wait sees that end too.
	EventFailed
	// EventCancelled: the job was cancelled (Runner.Cancel).
	EventCancelled
	// EventBreaker: a target's breaker changed state (Event.Breaker), as
	// the runner saw it (see BreakerEvent).
	EventBreaker
	eventTypes = iota + 1 // one more than the last type
)

// eventNames are the types' names, by type.
var eventNames = [...]string{"", "enqueued", "started", "succeeded", "retried", "failed", "cancelled", "breaker"}

// String returns the type's name: "enqueued", "started", "succeeded",
// "retried", "failed", "cancelled" or "breaker".
func (t EventType) String() string {
	if int(t) < len(eventNames) && t != 0 {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// bit is the type's bit in a mask of types.
func (t EventType) bit() uint32 { return 1 << t }

// endedTypes are the types an ended attempt reports.
const endedTypes = 1<<EventSucceeded | 1<<EventRetried | 1<<EventFailed

// Event is one thing that happened to a job or a breaker.
type Event struct {
	Type EventType
	// At is when the runner sent it, on its clock (Config.Clock).
	At time.Time
	// JobID, Kind and Target name the job (Target alone for EventBreaker).
	JobID        uint64
	Kind, Target string
	// Attempt is the number of the attempt that started or ended
	// (EventStarted, EventSucceeded, EventRetried, EventFailed; for a job
	// cancelled, the attempts it had); 0 for EventEnqueued.
	Attempt int
	// Outcome is how the attempt ended: "success", "retryable",
	// "permanent" or "unsafe" (EventSucceeded, EventRetried, EventFailed);
	// "" otherwise.
	Outcome string
	// Duration is how long the attempt ran (the events of an ended
	// attempt).
	Duration time.Duration
	// Error is the attempt's error, or why the job failed or was
	// cancelled.
	Error string
	// Breaker is the transition of an EventBreaker.
	Breaker BreakerEvent
}

// DefaultEventBuffer is the buffer of a Subscription that asks for none.
const DefaultEventBuffer = 1024

// Subscription receives the runner's events of the types it asked for, in
// a buffered channel. The runner never waits for a subscriber: an event
// that finds the buffer full is dropped (the newest is lost, the buffered
// ones are kept) and counted by Dropped. A subscriber that must not miss an
// end reconciles with Runner.Job or Runner.List, or waits with
// Runner.Wait, which does not depend on events.
//
// Events are sent from the runner's goroutines as things happen, so the
// events of different jobs interleave. Those of one job come in order with
// two exceptions, both from a busy runner starting the job at once: its
// first EventStarted may come before its EventEnqueued, and the start of
// its next attempt before the EventRetried of the last one. An attempt's
// end always comes after its start; order one job's events by Attempt.
type Subscription struct {
	h       *hub
	ch      chan Event
	mask    uint32
	dropped atomic.Uint64
	once    sync.Once
}

// Events returns the channel of events. It is closed by Close and when the
// runner closes.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Dropped returns how many events found the buffer full and were lost.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close stops the subscription and closes its channel; the events still
// buffered can be read. It is idempotent.
func (s *Subscription) Close() { s.h.remove(s) }

// Subscribe returns a subscription to the events of the given types (all of
// them when none is given), with a buffer of that many events (<= 0:
// DefaultEventBuffer). See Subscription for the drop policy. With no
// subscription, the runner builds no event.
func (r *Runner) Subscribe(buffer int, types ...EventType) *Subscription {
	if buffer <= 0 {
		buffer = DefaultEventBuffer
	}
	s := &Subscription{h: &r.hub, ch: make(chan Event, buffer)}
	for _, t := range types {
		if t > 0 && t < eventTypes {
			s.mask |= t.bit()
		}
	}
	if s.mask == 0 {
		s.mask = 1<<eventTypes - 2 // every type
	}
	r.hub.add(s)
	return s
}

// hub holds the subscriptions and the waiters of a runner.
type hub struct {
	// mask is the union of the subscriptions' types: a place that could
	// send an event looks at it (one atomic load) and builds nothing when
	// no subscription wants the type.
	mask    atomic.Uint32
	waiting atomic.Int32 // len(waits)

	mu     sync.RWMutex
	subs   []*Subscription            // guarded by mu
	waits  map[uint64][]chan struct{} // guarded by mu: Wait calls by job id
	closed bool                       // guarded by mu: the runner closed
}

// wants reports whether a subscription wants events of type t.
func (h *hub) wants(t EventType) bool { return h.mask.Load()&t.bit() != 0 }

func (h *hub) add(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.once.Do(func() { close(s.ch) })
		return
	}
	h.subs = append(h.subs, s)
	h.mask.Store(h.mask.Load() | s.mask)
}

func (h *hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var mask uint32
	kept := h.subs[:0]
	for _, o := range h.subs {
		if o != s {
			kept = append(kept, o)
			mask |= o.mask
		}
	}
	clear(h.subs[len(kept):])
	h.subs = kept
	h.mask.Store(mask)
	s.once.Do(func() { close(s.ch) })
}

// emit sends ev to every subscription that wants its type, dropping it
// where the buffer is full.
func (h *hub) emit(ev Event) {
	bit := ev.Type.bit()
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, s := range h.subs {
		if s.mask&bit == 0 {
			continue
		}
		select {
		case s.ch <- ev:
		default:
			s.dropped.Add(1)
		}
	}
}

// close ends every subscription (the runner closed).
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, s := range h.subs {
		s.once.Do(func() { close(s.ch) })
	}
	h.subs = nil
	h.mask.Store(0)
}

// addWaiter registers a Wait for job id; wake signals ch.
func (h *hub) addWaiter(id uint64) chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waits == nil {
		h.waits = make(map[uint64][]chan struct{})
	}
	h.waits[id] = append(h.waits[id], ch)
	h.waiting.Add(1)
	return ch
}

func (h *hub) removeWaiter(id uint64, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	chs := h.waits[id]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i], chs[i+1:]...)
			h.waiting.Add(-1)
			break
		}
	}
	if len(chs) == 0 {
		delete(h.waits, id)
	} else {
		h.waits[id] = chs
	}
}

// wake tells the Waits of job id that it may have ended (they look).
func (h *hub) wake(id uint64) {
	if h.waiting.Load() == 0 {
		return
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, ch := range h.waits[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// WaitPoll is how often Wait looks at its job besides being told of its
// attempts' ends: it sees this way the ends that no attempt here reported
// (a job that failed at its due time because its deadline had passed, or
// one run, cancelled or retried by another node on PostgreSQL).
const WaitPoll = time.Second

// Wait waits until job id has ended (succeeded, failed or cancelled) and
// returns it; a job that ended before the call is returned at once. It
// fails with ErrNotFound for an unknown job, with ctx's error (and the job
// as last seen) when ctx ends first, and with ErrClosed when the runner closes first. It does not
// depend on Subscribe and loses no end. A failed job is returned with a
// nil error: its State and Reason say how it ended.
func (r *Runner) Wait(ctx context.Context, id uint64) (Job, error) {
	ch := r.hub.addWaiter(id)
	defer r.hub.removeWaiter(id, ch)
	var poll *time.Ticker
	for {
		j, err := r.Job(ctx, id)
		if err != nil {
			return Job{}, err
		}
		switch j.State {
		case StateSucceeded, StateFailed, StateCancelled:
			return j, nil
		}
		if poll == nil {
			poll = time.NewTicker(WaitPoll)
			defer poll.Stop()
		}
		select {
		case <-ch:
		case <-poll.C:
		case <-ctx.Done():
			return j, fmt.Errorf("runlog: wait for job %d (still %s): %w", id, j.State, context.Cause(ctx))
		case <-r.stop:
			if err := r.usable(); err != nil {
				return Job{}, err
			}
			return Job{}, ErrClosed
		}
	}
}
