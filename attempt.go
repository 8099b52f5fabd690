package runlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// Causes of an attempt's context cancellation.
var (
	errAttemptTimeout = errors.New("runlog: attempt timed out")
	errJobCancelled   = errors.New("runlog: job cancelled")
	errShutdown       = errors.New("runlog: runner shutting down")
)

// cancelAttempt cancels the context of job id's attempt, if one runs here, or
// marks it to be cancelled as soon as its flight registers.
func (r *Runner) cancelAttempt(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.running[id]; ok {
		f.cancel(errJobCancelled)
	} else {
		r.cancelEarly[id] = struct{}{}
	}
}

// cancelAll cancels every running attempt, and every one that starts later.
func (r *Runner) cancelAll(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shuttingDown = true
	for _, f := range r.running {
		f.cancel(cause)
	}
}

// timeoutFor picks the attempt timeout: the job's, the kind's, the runner's.
func (r *Runner) timeoutFor(c store.Claim, h Handler) time.Duration {
	if c.TimeoutMS > 0 {
		return time.Duration(c.TimeoutMS) * time.Millisecond
	}
	if h != nil && h.timeout() > 0 {
		return h.timeout()
	}
	return r.cfg.Timeout
}

// startAttempt runs one claimed attempt in its own goroutine.
func (r *Runner) startAttempt(c store.Claim) {
	h := r.cfg.Handlers[c.Kind]
	timeout := r.timeoutFor(c, h)
	ac := &attemptCtx{info: AttemptInfo{JobID: c.ID, Attempt: int(c.Attempt), Kind: c.Kind, Target: c.Target}, metadata: metadataMap(c.Metadata), h: h, payload: c.Payload}
	// Not derived from a shared parent: thousands of attempts a second
	// would contend on its children map. Close cancels them one by one.
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), attemptKey{}, ac))
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, timeout, errAttemptTimeout)

	r.mu.Lock()
	r.running[c.ID] = &flight{cancel: cancel}
	r.perTarget[c.Target]++
	if _, ok := r.cancelEarly[c.ID]; ok {
		delete(r.cancelEarly, c.ID)
		cancel(errJobCancelled)
	}
	if r.shuttingDown {
		cancel(errShutdown)
	}
	r.mu.Unlock()
	if r.hub.wants(EventStarted) {
		r.hub.emit(Event{Type: EventStarted, At: r.cfg.Clock.Now(), JobID: c.ID, Kind: c.Kind, Target: c.Target, Attempt: int(c.Attempt)})
	}

	r.workers.add()
	r.goroutines.run(func() {
		defer r.workers.done()
		began := time.Now()
		err := r.runHandler(ctx, h, c, ac.info)
		cause := context.Cause(ctx)
		cancelTimeout()
		cancel(nil)
		e := ended{Outcome: store.Outcome{ID: c.ID, Attempt: c.Attempt, Output: ac.output()}, kind: c.Kind, target: c.Target}
		out := &e.Outcome
		out.Class, out.AfterMS, out.Error = classify(err)
		out.Gone = out.Class == retry.Permanent && isGone(err)
		out.AfterMS = min(out.AfterMS, r.cfg.MaxRetryAfter.Milliseconds())
		if d, ok := snoozed(err); ok {
			out.Class, out.Snooze, out.AfterMS = 0, true, d.Milliseconds()
		}
		report := true
		if err != nil && ctx.Err() != nil {
			switch {
			case errors.Is(cause, errAttemptTimeout):
				out.Class, out.AfterMS, out.Snooze = retry.Retryable, -1, false
				out.Error = fmt.Sprintf("attempt timed out after %v: %s", timeout, out.Error)
			case errors.Is(cause, errJobCancelled):
				// Not the target's fault: the job was cancelled.
				out.Class, out.AfterMS, out.Snooze = retry.Permanent, -1, false
				out.Error = "cancelled while running: " + out.Error
				e.cancelled = true
			case errors.Is(cause, errShutdown):
				// Not recorded: the next Open requeues the attempt.
				report = false
			}
		}

		r.mu.Lock()
		if !report {
			r.inflight--
		}
		r.unblockLocked()
		delete(r.running, c.ID)
		if r.perTarget[c.Target]--; r.perTarget[c.Target] <= 0 {
			delete(r.perTarget, c.Target)
		}
		r.mu.Unlock()

		if !report {
			r.signal()
			return
		}
		if obs := r.cfg.Observer; obs != nil || r.hub.mask.Load()&endedTypes != 0 {
			e.took = time.Since(began)
			if obs != nil {
				obs.AttemptFinished(AttemptEvent{Kind: c.Kind, Target: c.Target, Outcome: outcomeName(out), Duration: e.took})
			}
		}
		if r.async {
			// The store records outcomes apart from claims: the slot is
			// free once the outcome is queued for the next batch (the
			// store keeps the attempt's lease until it is recorded). The
			// queue holds Concurrency outcomes, so a slow store holds
			// back the slots, not memory.
			//
			// The dispatcher is not woken for the slot: the finisher that
			// takes the outcome starts jobs on the free slots in its
			// transaction, at no extra commit, and wakes the dispatcher
			// once it has. Woken here, the dispatcher spent a claim (a
			// transaction and its WAL flush) on one or two slots for each
			// ending attempt: W1 at 16 slots, 596 claims of 2.9 jobs
			// besides the outcome batches, 20-40 % slower than one batch
			// per refill (8 claims and 332 batches for 5 000 jobs now).
			r.queued.Add(1)
			r.outcomes <- e
			r.release(1)
			return
		}
		// The slot goes with the outcome: the finisher reuses it for the next
		// due job in the same durable write as the outcome.
		r.outcomes <- e // never blocks: capacity Concurrency >= attempts in flight
	})
}

// runHandler runs the attempt through the middleware (if any) to the
// handler, turning a panic into a retryable failure with the stack in the
// reason, and logging it.
func (r *Runner) runHandler(ctx context.Context, h Handler, c store.Claim, info AttemptInfo) (err error) {
	if h == nil {
		return Permanent(fmt.Errorf("no handler is registered for kind %q; register one in Config.Handlers and retry the job", c.Kind))
	}
	defer func() {
		if p := recover(); p != nil {
			err = panicked(r.log, info, p)
		}
	}()
	if r.attempt != nil {
		return r.attempt(ctx, info)
	}
	return h.run(ctx, c.Payload)
}

// workerCount counts the attempts whose goroutine runs, for Close to wait
// for. Not a sync.WaitGroup: a finisher starts the attempts it claimed
// while Close may already wait (a claim in flight when Close began), and a
// WaitGroup's Add from zero must not race with its Wait. Close waits until
// the count is zero; an attempt started after that is cancelled by Close
// and runs again after the next Open, as one that ignored cancellation.
type workerCount struct {
	n        atomic.Int64
	draining atomic.Bool
	idle     chan struct{} // capacity 1: a wake-up for wait
	initOnce sync.Once
}

// init makes the wake-up channel once.
func (w *workerCount) init() { w.initOnce.Do(func() { w.idle = make(chan struct{}, 1) }) }

// add counts an attempt in.
func (w *workerCount) add() { w.n.Add(1) }

// done counts an attempt out, waking wait when it was the last.
func (w *workerCount) done() {
	if w.n.Add(-1) == 0 && w.draining.Load() {
		w.init()
		select {
		case w.idle <- struct{}{}:
		default:
		}
	}
}

// wait returns once no attempt runs.
func (w *workerCount) wait() {
	w.init()
	w.draining.Store(true)
	for w.n.Load() != 0 {
		<-w.idle
	}
}
