package runlog

import (
	"context"
	"log/slog"
	"time"

	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// JobObserver is an Observer that is also told of jobs entering and
// leaving the queue and of breakers changing state (for counters such as
// the server's runlog_jobs_finished_total). The runner checks for it with a
// type assertion: an Observer need not implement it. Its methods are called
// from the runner's goroutines and must not block.
type JobObserver interface {
	Observer
	// JobsEnqueued is called once per enqueue call with the jobs it added
	// (not those whose key was already held), n of kind each.
	JobsEnqueued(kind string, n int)
	// JobFinished is called once a job has ended: succeeded, failed for
	// good (died) or cancelled.
	JobFinished(JobEvent)
	// BreakerChanged is called when a target's breaker is seen in a new
	// state (see BreakerEvent).
	BreakerChanged(BreakerEvent)
}

// JobEvent is a job that ended.
type JobEvent struct {
	ID           uint64
	Kind, Target string
	// State is StateSucceeded, StateFailed or StateCancelled.
	State State
	// Attempts is how many attempts the job had.
	Attempts int
	// Reason says why a failed or cancelled job ended.
	Reason string
}

// BreakerEvent is a breaker transition, as the runner saw it: it looks at
// the breakers once per BreakerWatchInterval after attempts ended (or when
// an open breaker's cooldown has passed), so a breaker that opened and
// closed again between two looks is not reported.
type BreakerEvent struct {
	Target string
	// From and To are "closed", "open" or "half-open".
	From, To string
	// OpenUntil is, when To is "open", when it admits probes.
	OpenUntil time.Time
}

// BreakerWatchInterval is how often, at most, the runner compares the
// breakers with what it saw last, to log and report transitions.
const BreakerWatchInterval = time.Second

// jobObserver returns the configured observer as a JobObserver, or nil.
func (r *Runner) jobObserver() JobObserver {
	jo, _ := r.cfg.Observer.(JobObserver)
	return jo
}

// ended is one attempt's outcome on its way to the finisher, with what the
// lifecycle logs and events need to know of its job.
type ended struct {
	store.Outcome
	kind, target string
	// took is how long the attempt ran (measured only when an Observer or
	// a subscription to ended attempts wants it).
	took time.Duration
	// cancelled: the job was cancelled while the attempt ran; Cancel has
	// reported its end already.
	cancelled bool
}

// finished reports the ends that a batch of outcomes, now durable, made
// known: successes, retries, and failures after which the job died (a
// permanent or unsafe outcome always; a retryable one when it was the last
// attempt the job had, which the outcome's Verdict says, or else the job,
// asked of the store). It tells the JobObserver, the log, the
// subscriptions and the Waits of the jobs, and costs nothing when none of
// them listens.
func (r *Runner) finished(batch []ended) {
	r.breakersDirty.Store(true)
	obs := r.jobObserver()
	logDeath := r.log.Enabled(context.Background(), slog.LevelWarn)
	subs := r.hub.mask.Load() & endedTypes
	waiting := r.hub.waiting.Load() > 0
	if obs == nil && !logDeath && subs == 0 && !waiting {
		return
	}
	// Dead or retried is asked of the store only by those who care.
	askDeath := obs != nil || logDeath || subs&(EventRetried.bit()|EventFailed.bit()) != 0
	for i := range batch {
		e := &batch[i]
		if waiting {
			r.hub.wake(e.ID)
		}
		if e.cancelled {
			continue
		}
		ev := JobEvent{ID: e.ID, Kind: e.kind, Target: e.target, Attempts: int(e.Attempt), Reason: e.Error}
		typ := EventRetried
		switch {
		case e.Snooze:
			ev.Reason = ""
		case e.Class == retry.Success:
			ev.State, typ = StateSucceeded, EventSucceeded
		case e.Class == retry.Permanent || e.Class == retry.Unsafe:
			ev.State, typ = StateFailed, EventFailed
		default:
			if !askDeath {
				continue
			}
			v := e.Verdict
			if !v.Known {
				// The store did not say (or did not record the
				// outcome): the job says.
				if j, err := r.st.Job(r.base, e.ID); err == nil {
					v = store.VerdictOf(&j, e.Attempt)
				}
			}
			if v.Died {
				ev.State, ev.Reason, typ = StateFailed, v.Reason, EventFailed
			}
		}
		if ev.State == StateFailed && logDeath {
			r.log.Warn("runlog: job failed for good", "id", ev.ID, "kind", ev.Kind, "target", ev.Target, "attempts", ev.Attempts, "reason", ev.Reason)
		}
		if obs != nil && ev.State != "" {
			obs.JobFinished(ev)
		}
		if subs&typ.bit() != 0 {
			msg := e.Error
			if typ == EventFailed {
				msg = ev.Reason
			}
			r.hub.emit(Event{Type: typ, At: r.cfg.Clock.Now(), JobID: e.ID, Kind: e.kind, Target: e.target,
				Attempt: int(e.Attempt), Outcome: outcomeName(&e.Outcome), Duration: e.took, Error: msg})
		}
	}
}

// breakerWatch compares the breakers with what it saw last, at most once
// per BreakerWatchInterval and only when attempts ended since the last look
// or an open breaker's cooldown has passed, and logs and reports each
// transition. It returns when the runner stops.
func (r *Runner) breakerWatch(done chan<- struct{}) {
	defer close(done)
	obs := r.jobObserver()
	logged := r.log.Enabled(context.Background(), slog.LevelInfo)
	// seen holds each target's breaker as last seen (retry.Breaker.At) and
	// the Until of its last opening, so that an opening is reported even
	// when the cooldown has passed before the look.
	type look struct {
		b     retry.Breaker
		until int64
	}
	seen := map[string]look{}
	nextUntil := int64(0) // the earliest Until of the open breakers seen; 0: none
	circuit := r.cfg.Breaker.circuit()
	for {
		// Real time, not Config.Clock: the look is no decision of the
		// runner's, and a test's fake clock need not drive it.
		timer := time.NewTimer(BreakerWatchInterval)
		select {
		case <-r.stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		if obs == nil && !logged && !r.hub.wants(EventBreaker) {
			// Nobody listens: no look (a subscriber that comes later is
			// told of the breakers that are not closed then).
			continue
		}
		now := r.nowMS()
		if !r.breakersDirty.Swap(false) && (nextUntil == 0 || now < nextUntil) {
			continue
		}
		targets, err := r.st.Targets(r.base)
		if err != nil {
			continue // the next look tries again; the store's trouble is logged where it matters
		}
		nextUntil = 0
		live := make(map[string]bool, len(targets))
		for _, t := range targets {
			live[t.Target] = true
			raw, old := t.Breaker, seen[t.Target]
			if raw.State == retry.Open && raw.Until != old.until {
				// A new opening (from closed, or a failed probe).
				r.breakerChanged(obs, t.Target, old.b, raw)
				old = look{b: raw, until: raw.Until}
			}
			b := raw.At(circuit, now)
			if b.State == retry.Open && (nextUntil == 0 || b.Until < nextUntil) {
				nextUntil = b.Until
			}
			if b.State != old.b.State {
				r.breakerChanged(obs, t.Target, old.b, b)
			}
			seen[t.Target] = look{b: b, until: old.until}
		}
		for target, old := range seen {
			if !live[target] {
				// The store keeps no breaker that is closed and clean.
				delete(seen, target)
				if old.b.State != retry.Closed {
					r.breakerChanged(obs, target, old.b, retry.Breaker{})
				}
			}
		}
	}
}

// breakerChanged logs and reports one transition.
func (r *Runner) breakerChanged(obs JobObserver, target string, from, to retry.Breaker) {
	ev := BreakerEvent{Target: target, From: from.State.String(), To: to.State.String()}
	switch to.State {
	case retry.Open:
		ev.OpenUntil = msTime(to.Until)
		r.log.Warn("runlog: breaker opened: jobs of this target wait until it half-opens", "target", target, "from", ev.From, "open_until", ev.OpenUntil)
	case retry.HalfOpen:
		r.log.Info("runlog: breaker half-open: probes go to the target", "target", target)
	case retry.Closed:
		r.log.Info("runlog: breaker closed: the target answers again", "target", target, "from", ev.From)
	}
	if obs != nil {
		obs.BreakerChanged(ev)
	}
	if r.hub.wants(EventBreaker) {
		r.hub.emit(Event{Type: EventBreaker, At: r.cfg.Clock.Now(), Target: target, Breaker: ev})
	}
}
