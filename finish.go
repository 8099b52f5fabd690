package runlog

import (
	"errors"
	"runtime"
	"time"

	"github.com/runlog/runlog/internal/store"
)

// maxFinishBatch bounds the outcomes settled by one store call.
const maxFinishBatch = 1024

// finisher settles ended attempts in batches: while one batch waits for its
// sync, the outcomes that end meanwhile gather for the next.
func (r *Runner) finisher() {
	defer r.finishersDone.Done()
	batch := make([]ended, 0, 64)
	for {
		select {
		case o := <-r.outcomes:
			batch = append(batch, o)
		case <-r.finishStop:
			for {
				select {
				case o := <-r.outcomes:
					batch = append(batch, o)
					continue
				default:
				}
				break
			}
			r.settle(batch)
			return
		}
		r.gather(&batch)
		r.settle(batch)
		batch = batch[:0]
	}
}

// gatherWindow is how long a finisher waits for more outcomes while attempts
// are still running, so that one sync covers the attempts that end together
// instead of one sync for the first and another for the rest.
var gatherWindow = 200 * time.Microsecond

// gather adds to batch the outcomes that arrive within the gather window
// (only while other attempts run, which may end in it).
func (r *Runner) gather(batch *[]ended) {
	deadline := time.Now().Add(gatherWindow)
	for len(*batch) < maxFinishBatch {
		select {
		case o := <-r.outcomes:
			*batch = append(*batch, o)
			continue
		default:
		}
		r.mu.Lock()
		running := len(r.running)
		r.mu.Unlock()
		if running == 0 || !time.Now().Before(deadline) {
			return
		}
		runtime.Gosched()
	}
}

// settle records a batch of outcomes and, in the same durable write, starts
// due jobs on the slots those attempts held (none once the runner stops).
// With a store that records outcomes apart (async), the attempts freed
// their slots already: it records the outcomes only.
func (r *Runner) settle(batch []ended) {
	if len(batch) == 0 {
		return
	}
	outs := make([]store.Outcome, len(batch))
	for i := range batch {
		outs[i] = batch[i].Outcome
	}
	held := len(batch) // the slots the batch's attempts hold
	stopping := false
	select {
	case <-r.stop:
		stopping = true
	default:
	}
	if r.async && !stopping {
		// The attempts freed their slots already; the batch's
		// transaction starts jobs on as many of the slots free now, as a
		// claim would, at no extra commit (and sees the retries it
		// records). Not more: a batch the database holds back holds its
		// reserved slots with it.
		held = r.reserveFree(len(batch))
	} else if r.async {
		held = 0
	}
	lim := store.Limits{Max: held, PerTarget: r.cfg.TargetConcurrency, Running: r.targetRunning}
	if stopping {
		lim.Max = 0
	}
	// finishing counts this finisher as waiting for the store until the
	// store call returns (not until its attempts started: the outcomes
	// that end meanwhile are the next batch's to take, see reserve).
	r.finishing.Add(1)
	claims, ok := r.record(outs, lim, held)
	r.finishing.Add(-1)
	if !ok {
		return
	}
	for i := range batch {
		batch[i].Verdict = outs[i].Verdict
	}
	r.release(held - len(claims))
	// The outcomes are applied now: a slow start's window has grown (or
	// its places freed) only now, so jobs held back may start: the next
	// claim looks again (the clearing at each attempt's end came before).
	// Through unblockLocked, so that a claim in flight, which may have
	// seen the window full, does not set targetBlocked when it returns:
	// the attempts this batch started could then be the only ones left,
	// and nothing would clear it while they run.
	r.mu.Lock()
	r.unblockLocked()
	r.mu.Unlock()
	// The ends first, so that a retried job's end is reported before its
	// next attempt (claimed in the same write) starts.
	r.finished(batch)
	for _, c := range claims {
		r.startAttempt(c)
	}
	r.signal() // slots may be free, and a retry may be due soon
}

// record makes the store record batch (and claim within lim), trying again
// while it fails transiently; !ok when it gave up, the held slots released.
func (r *Runner) record(batch []store.Outcome, lim store.Limits, held int) (claims []store.Claim, ok bool) {
	if r.async {
		r.queued.Add(-int32(len(batch)))
	}
	for {
		claims, err := r.st.Finish(r.base, r.nowMS(), r.cfg.Rand, batch, lim)
		if err == nil {
			r.answered()
			return claims, true
		}
		if !r.transient(err) {
			r.release(held)
			if !errors.Is(err, store.ErrClosed) {
				r.fail(err)
			}
			return nil, false
		}
		// Recording the outcomes again is safe: an outcome whose attempt
		// has ended already (the first try committed after all) is a
		// no-op. Once Close has begun, one more try is all there is: the
		// attempts of outcomes left unrecorded are requeued by the store
		// (PostgreSQL: when their lease expires), counted as failed.
		select {
		case <-r.stop:
			if lim.Max == 0 {
				r.release(held)
				r.log.Warn("runlog: outcomes not recorded at close; their attempts run again once the store requeues them", "outcomes", len(batch), "err", err)
				return nil, false
			}
			lim.Max = 0
		default:
		}
		r.troubled("finish", err)
	}
}

// transient reports whether err, from a store call, leaves the store
// usable: true unless the store is closed or reports a permanent failure
// (store.Failer, as the embedded journal does after a failed write or
// fsync). A PostgreSQL server that cannot be reached for a while is
// transient: the runner backs off and asks again.
func (r *Runner) transient(err error) bool {
	if errors.Is(err, store.ErrClosed) {
		return false
	}
	if f, ok := r.st.(store.Failer); ok && f.Err() != nil {
		return false
	}
	return true
}

// Backoff of the store calls that failed transiently (troubled).
const (
	storeBackoffMin = 50 * time.Millisecond
	storeBackoffMax = 5 * time.Second
)

// troubled logs a transient failure of the store call what (the first of a
// run at Warn) and waits, doubling from storeBackoffMin up to
// storeBackoffMax with each failure in a row, or until the dispatcher
// stops.
func (r *Runner) troubled(what string, err error) {
	n := r.storeErrors.Add(1)
	if n == 1 {
		r.log.Warn("runlog: the store did not answer; retrying with backoff (no job is lost: what was not recorded is done again)", "call", what, "err", err)
	} else {
		r.log.Debug("runlog: the store still does not answer", "call", what, "failures", n, "err", err)
	}
	d := storeBackoffMax
	if n < 20 {
		d = min(storeBackoffMin<<(n-1), storeBackoffMax)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.stop:
	}
}

// answered notes that a store call succeeded, ending a run of failures.
func (r *Runner) answered() {
	if r.storeErrors.Load() == 0 {
		return
	}
	if n := r.storeErrors.Swap(0); n > 0 {
		r.log.Info("runlog: the store answers again", "failures", n)
	}
}
