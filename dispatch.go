package runlog

import (
	"errors"
	"math"
	"runtime"
	"time"

	"github.com/runlog/runlog/internal/store"
)

// signal wakes the dispatcher; it never blocks.
func (r *Runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// reserve takes every free slot of the pool for one claim and returns how
// many it took; 0 when none is free, or when due jobs wait only for targets
// at their limit (an ending attempt clears that).
//
// With a store that records outcomes apart (async), at most
// maxAsyncClaims claims are in flight: the slots that free meanwhile wait
// for the next, so that one claim fills many instead of one claim (a
// transaction and its WAL flush) per ended attempt.
func (r *Runner) reserve() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.targetBlocked || (r.async && (r.claiming >= maxAsyncClaims || r.finisherComing())) {
		return 0
	}
	n := r.cfg.Concurrency - r.inflight
	if n > 0 {
		r.inflight += n
		if r.async {
			r.claiming++
		}
	}
	return n
}

// reserveFree takes up to max free slots of the pool (none while due jobs
// wait only for targets at their limit) and returns how many it took.
func (r *Runner) reserveFree(max int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.targetBlocked {
		return 0
	}
	n := min(r.cfg.Concurrency-r.inflight, max)
	if n <= 0 {
		return 0
	}
	r.inflight += n
	return n
}

// gatherSlots adds to a claim of n slots, with a store that records
// outcomes apart (async), the slots that free within the gather window
// while handlers still run: attempts that end together then start their
// successors in one claim, not one claim each. It returns the new n.
func (r *Runner) gatherSlots(n int) int {
	deadline := time.Now().Add(gatherWindow)
	for {
		n += r.reserveFree(r.cfg.Concurrency)
		r.mu.Lock()
		running := len(r.running)
		r.mu.Unlock()
		if running == 0 || n >= r.cfg.Concurrency || !time.Now().Before(deadline) {
			return n
		}
		runtime.Gosched()
	}
}

// finisherComing reports, with a store that records outcomes apart
// (async), whether a finisher is about to take queued outcomes: it starts
// jobs on the free slots in the same transaction, so the dispatcher leaves
// them to it rather than spend a claim's commit on them. Once it has
// settled it signals the dispatcher, which claims what is left.
func (r *Runner) finisherComing() bool {
	return r.queued.Load() > 0 && r.finishing.Load() < int32(r.finishers)
}

// maxAsyncClaims bounds the claims in flight with a store that records
// outcomes apart from claims: two, so that one is being decided and sent
// while the other waits for its commit.
const maxAsyncClaims = 2

// release gives back n reserved slots that no attempt used.
func (r *Runner) release(n int) {
	if n == 0 {
		return
	}
	r.mu.Lock()
	r.inflight -= n
	r.mu.Unlock()
}

// targetRunning reports the attempts of target in flight.
func (r *Runner) targetRunning(target string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.perTarget[target]
}

// stepBound bounds one wait of the dispatcher when it has no wall-clock
// timer (not Linux, a timerfd refused, or a Config.Clock of the caller's):
// due times are wall-clock but timers run on the monotonic clock, so a
// forward step of the wall clock past a due time is noticed within
// stepBound. Waking early only costs one look at the queue, and only while
// a job is pending in the future.
const stepBound = 10 * time.Second

// dispatch is the dispatcher: whenever a job is due and the pool has free
// slots, it reserves them and starts a claim, which runs the attempts once
// their start records are durable; then it sleeps until the next due time or
// a wake-up (an enqueue, an ended attempt, a finished claim). It does not
// wait for a claim's sync before looking again, so claims overlap and share
// group commits with everything else in flight.
//
// Every wake-up compares the due times with the wall clock afresh. With the
// system clock on Linux the sleep is a timerfd on the wall clock (see
// wallTimer): it fires when the wall clock reaches the next due time, or at
// once when the clock is stepped, with no periodic wake-up. Otherwise the
// sleep is bounded by stepBound.
func (r *Runner) dispatch() {
	defer close(r.dispatcherDone)
	var wall *wallTimer
	if _, ok := r.cfg.Clock.(systemClock); ok {
		if t, err := newWallTimer(); err == nil {
			wall = t
		} else {
			r.log.Debug("runlog: no wall-clock timer; a clock step is noticed within "+stepBound.String(), "err", err)
		}
	}
	defer func() {
		if wall != nil {
			wall.close()
		}
	}()
	for {
		// Awake, every enqueue signals. Asleep until next, only an enqueue
		// of a job due before next, or due already by the wall clock, does
		// (jobs scheduled for later need no look now). No wake-up is lost:
		// an enqueue applies its jobs before it reads wakeAt, and the
		// dispatcher sets wakeAt to next only after it read next; an
		// enqueue that read the old value signalled.
		r.wakeAt.Store(math.MaxInt64)
		var (
			timer  <-chan time.Time
			wallC  <-chan struct{}
			future bool
		)
		stopTimer := func() bool { return false }
		if next, ok := r.st.NextDue(); ok {
			now := r.nowMS()
			if next <= now {
				if n := r.reserve(); n > 0 {
					r.claims.Add(1)
					go r.claim(now, n)
				}
				// Otherwise due work waits for a free slot, which an ending
				// attempt signals.
			} else {
				future = true
				r.wakeAt.Store(next)
				if wall != nil {
					if err := wall.arm(next); err != nil {
						r.log.Warn("runlog: the wall-clock timer failed; a clock step is now noticed within "+stepBound.String(), "err", err)
						wall.close()
						wall = nil
					} else {
						wallC = wall.C()
					}
				}
				if wall == nil {
					timer, stopTimer = r.cfg.Clock.NewTimer(min(time.Duration(next-now)*time.Millisecond, stepBound))
				}
			}
		}
		if !future && wall != nil {
			wall.disarm() // nothing to wake for but a signal
		}
		select {
		case <-r.stop:
			stopTimer()
			r.claims.Wait()
			return
		case <-r.wake:
		case <-timer:
		case <-wallC:
		}
		stopTimer()
	}
}

// claim starts up to n due jobs on n reserved slots.
func (r *Runner) claim(now int64, n int) {
	defer r.claims.Done()
	if r.async {
		defer func() {
			r.mu.Lock()
			r.claiming--
			r.mu.Unlock()
		}()
	}
	if r.async {
		n = r.gatherSlots(n)
	}
	held := 0
	r.mu.Lock()
	freed := r.freed
	r.mu.Unlock()
	claims, err := r.st.Claim(r.base, now, store.Limits{Max: n, PerTarget: r.cfg.TargetConcurrency, Running: r.targetRunning, Held: func(k int) { held = k }})
	if err != nil {
		if r.transient(err) {
			// The slots stay reserved while the claim backs off, so that
			// an unreachable database is not asked again at once.
			r.troubled("claim", err)
			r.release(n)
			r.signal()
			return
		}
		r.release(n)
		if !errors.Is(err, store.ErrClosed) {
			r.fail(err)
		}
		return
	}
	r.answered()
	r.release(n - len(claims))
	if bounded := len(claims) < n && (r.cfg.TargetConcurrency > 0 || r.queuesBounded()); len(claims) < n && (bounded || held > 0) {
		if next, ok := r.st.NextDue(); ok && next <= now {
			// The due jobs left are held back by their targets' or
			// queues' limits (TargetConcurrency, a queue's concurrency or
			// a slow start's window), which an ending attempt lifts: wait
			// for one rather than claim again at once, unless a slot freed
			// while the claim ran (the store may have seen it taken
			// still). A slow start holds jobs only while attempts run;
			// with none running here (they run on other nodes) there is
			// no ending attempt to wait for.
			r.mu.Lock()
			if r.freed == freed && (bounded || r.inflight > 0) {
				r.targetBlocked = true
			}
			r.mu.Unlock()
		}
	}
	for _, c := range claims {
		r.startAttempt(c)
	}
	r.signal()
}
