// Package runlog is a durable job runner that an application embeds: no
// server to run, a journal directory on local disk.
//
//	r, err := runlog.Open("./jobs", runlog.Config{
//		Handlers: map[string]runlog.Handler{
//			"email": runlog.Handle(func(ctx context.Context, m Email) error { return send(ctx, m) }),
//		},
//	})
//	id, err := r.Enqueue(ctx, "email", Email{To: "a@example.com"}, runlog.Key("welcome-42"))
//	...
//	err = r.Close(ctx)
//
// # Guarantees
//
// Durable means written to the journal and flushed with fdatasync (and the
// directory synced when a file is created or renamed). Every change of a job
// is one journal record, and nothing acts on a change before its record is
// durable: Enqueue returns the id only after the job's record is durable; an
// attempt starts only after its start record is durable; an outcome (success,
// a retry at a later time, death with the reason) is reported only after its
// record is durable. Many changes in flight share one fdatasync (group
// commit), so durability costs little per job.
//
// Delivery is at least once. If the process dies, Open replays the journal
// and gets back exactly the state after the last durable record; every
// attempt that was running is requeued, counted as a failed attempt, and runs
// again. A handler therefore gets the job id and attempt number (AttemptFrom)
// to deduplicate its effects downstream.
//
// Nothing is lost and nothing is silent: every job that is not cancelled runs
// until it succeeds, fails permanently, or spends its attempts or deadline,
// and a job that stops is kept in state "failed" with the reason, and can be
// retried by hand (Retry).
//
// # Scheduling
//
// Due jobs start in (due time, id) order as soon as the pool (Concurrency)
// has a free slot: one dispatcher sleeps until the next due time or a wake-up
// (an enqueue, an ended attempt); a slow attempt never delays another. Due
// times are wall-clock: with the system clock on Linux the dispatcher sleeps
// on the wall clock itself and never polls, so a step of the clock is
// noticed at once; otherwise it looks again every 10 s while a job waits in
// the future (see docs/semantics.md, "Wall-clock steps"). Each target (the
// downstream a job talks to; by default its kind) has a circuit breaker:
// after Threshold failures within Window it opens for Cooldown, and the jobs
// it holds back are deferred to when it may admit them again, with no
// attempt counted. Breaker transitions are derived from the
// journaled starts and outcomes, so a restart rebuilds every breaker exactly
// as it was.
package runlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/embedded"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

// Causes of an attempt's context cancellation.
var (
	errAttemptTimeout = errors.New("runlog: attempt timed out")
	errJobCancelled   = errors.New("runlog: job cancelled")
	errShutdown       = errors.New("runlog: runner shutting down")
)

// Runner runs the jobs of one journal directory. It is safe for concurrent
// use. Open one with Open; stop it with Close.
type Runner struct {
	cfg Config
	st  store.Store
	log *slog.Logger

	wake chan struct{} // capacity 1: a dispatcher wake-up is pending
	// wakeAt is the due time (ms) the dispatcher sleeps until, or
	// math.MaxInt64 while it is awake or has no timer: an enqueue wakes it
	// only for a job due before that (see dispatch).
	wakeAt   atomic.Int64
	stop     chan struct{} // closed by Close: start no more attempts
	stopOnce sync.Once

	dispatcherDone chan struct{}
	janitorDone    chan struct{}
	claims         sync.WaitGroup     // claims in flight
	outcomes       chan store.Outcome // capacity Concurrency: a send never blocks
	finishStop     chan struct{}      // closed by Close once no attempt can end anymore
	finishersDone  sync.WaitGroup
	workers        sync.WaitGroup

	base       context.Context // parent of every attempt's context
	cancelBase context.CancelCauseFunc

	mu            sync.Mutex
	closed        bool                // guarded by mu
	failure       error               // guarded by mu: the store failed; nothing runs anymore
	inflight      int                 // guarded by mu: slots taken (reserved by claims or running)
	targetBlocked bool                // guarded by mu: due jobs wait only for per-target slots
	running       map[uint64]*flight  // guarded by mu
	perTarget     map[string]int      // guarded by mu
	cancelEarly   map[uint64]struct{} // guarded by mu: cancelled before its flight registered
	shuttingDown  bool                // guarded by mu: Close gave up waiting; cancel every attempt

	// storeErrors counts the store's transient failures in a row (see
	// troubled); 0 while it answers.
	storeErrors atomic.Int32
}

// flight is one attempt in progress.
type flight struct {
	cancel context.CancelCauseFunc
}

// DefaultSegmentSize is the journal's segment size unless
// Config.SegmentSize says otherwise: 16 MiB. Offline tools that rewrite a
// data directory (`runlog journal compact`) use it too, so that a directory
// keeps one segment size.
const DefaultSegmentSize = 16 << 20

// Open opens the journal in dir (creating it if needed), replays it,
// requeues every attempt that was running when the last process stopped
// (counted as a failed attempt), and starts running due jobs.
//
// A directory is used by one process at a time: a second Open of the same
// directory fails with an error naming the lock file.
func Open(dir string, cfg Config) (*Runner, error) { return openFS(dir, cfg, nil) }

// openFS is Open on the filesystem fsys (nil: the real one); tests pass an
// in-memory one.
func openFS(dir string, cfg Config, fsys vfs.FS) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	jopts := journal.Options{
		FS:            fsys,
		SegmentSize:   cfg.SegmentSize,
		MaxRecordSize: cfg.MaxPayload + 64<<10,
		OnWarning: func(err error) {
			cfg.Logger.Warn("runlog: the journal goes on, but free disk space now", "err", err)
		},
		// Records older than a second are then named by the journal's
		// marker, so cutting or zeroing them later is detected on open.
		MarkEvery: time.Second,
	}
	if obs := cfg.Observer; obs != nil {
		jopts.OnSync = func(si journal.SyncInfo) {
			obs.JournalSynced(SyncEvent{Records: si.Records, Bytes: si.Bytes, Duration: si.Duration})
		}
	}
	st, err := embedded.Open(dir, embedded.Options{
		Journal:       jopts,
		State:         state.Config{Circuit: cfg.Breaker.circuit()},
		Now:           cfg.Clock.Now().UnixMilli(),
		SnapshotBytes: cfg.SnapshotBytes,
		KeepSnapshots: cfg.KeepSnapshots,
		Retention:     cfg.Retention.rules(),
		Logf:          func(format string, args ...any) { cfg.Logger.Error(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, fmt.Errorf("runlog: open %s: %w", dir, err)
	}
	return start(st, cfg), nil
}

// start wraps an opened store in a Runner and starts its goroutines.
func start(st store.Store, cfg Config) *Runner {
	r := &Runner{
		cfg:            cfg,
		st:             st,
		log:            cfg.Logger,
		wake:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
		dispatcherDone: make(chan struct{}),
		janitorDone:    make(chan struct{}),
		outcomes:       make(chan store.Outcome, cfg.Concurrency),
		finishStop:     make(chan struct{}),
		running:        make(map[uint64]*flight),
		perTarget:      make(map[string]int),
		cancelEarly:    make(map[uint64]struct{}),
	}
	r.base, r.cancelBase = context.WithCancelCause(context.Background())
	st.SetNotify(store.Notify{Wake: r.signal, CancelAttempt: r.cancelAttempt})
	// One finisher for the journal: one batch per sync, it carries every
	// outcome that ended during the last one. A store whose outcome batches
	// are independent transactions says how many may run side by side.
	finishers := 1
	if f, ok := st.(interface{ Finishers(concurrency int) int }); ok {
		finishers = max(f.Finishers(cfg.Concurrency), 1)
	}
	r.finishersDone.Add(finishers)
	for range finishers {
		go r.finisher()
	}
	r.wakeAt.Store(math.MaxInt64)
	go r.dispatch()
	go r.janitor()
	return r
}

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

// nowMS is the current time in ms since the Unix epoch.
func (r *Runner) nowMS() int64 { return r.cfg.Clock.Now().UnixMilli() }

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
func (r *Runner) reserve() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.targetBlocked {
		return 0
	}
	n := r.cfg.Concurrency - r.inflight
	r.inflight += max(n, 0)
	return n
}

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

// fail records that the store failed for good: the runner starts nothing
// more.
func (r *Runner) fail(err error) {
	r.mu.Lock()
	if r.failure == nil {
		r.failure = err
		r.log.Error("runlog: the journal failed; no job starts or changes until the runner is reopened", "err", err)
	}
	r.mu.Unlock()
	r.stopDispatch()
}

// stopDispatch stops the dispatcher (idempotent).
func (r *Runner) stopDispatch() {
	r.stopOnce.Do(func() { close(r.stop) })
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
	claims, err := r.st.Claim(r.base, now, store.Limits{Max: n, PerTarget: r.cfg.TargetConcurrency, Running: r.targetRunning})
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
	if len(claims) < n && r.cfg.TargetConcurrency > 0 {
		if next, ok := r.st.NextDue(); ok && next <= now {
			// The due jobs left are held back by their targets' limits.
			r.mu.Lock()
			r.targetBlocked = true
			r.mu.Unlock()
		}
	}
	for _, c := range claims {
		r.startAttempt(c)
	}
	r.signal()
}

// janitor drops expired finished jobs: once at start, then every
// retentionInterval, until the runner stops.
func (r *Runner) janitor() {
	defer close(r.janitorDone)
	for {
		if err := r.st.Expire(r.base, r.nowMS()); err != nil && !errors.Is(err, store.ErrClosed) {
			if !r.transient(err) {
				r.fail(err)
				return
			}
			r.log.Warn("runlog: dropping expired jobs failed; trying again at the next interval", "err", err, "interval", retentionInterval)
		}
		timer, stop := r.cfg.Clock.NewTimer(retentionInterval)
		select {
		case <-r.stop:
			stop()
			return
		case <-timer:
		}
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
	ac := &attemptCtx{info: AttemptInfo{JobID: c.ID, Attempt: int(c.Attempt), Kind: c.Kind, Target: c.Target}}
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

	r.workers.Add(1)
	go func() {
		defer r.workers.Done()
		began := time.Now()
		err := runHandler(ctx, h, c)
		cause := context.Cause(ctx)
		cancelTimeout()
		cancel(nil)
		out := store.Outcome{ID: c.ID, Attempt: c.Attempt, Output: ac.output()}
		out.Class, out.AfterMS, out.Error = classify(err)
		report := true
		if err != nil && ctx.Err() != nil {
			switch {
			case errors.Is(cause, errAttemptTimeout):
				out.Class, out.AfterMS = retry.Retryable, -1
				out.Error = fmt.Sprintf("attempt timed out after %v: %s", timeout, out.Error)
			case errors.Is(cause, errJobCancelled):
				// Not the target's fault: the job was cancelled.
				out.Class, out.AfterMS = retry.Permanent, -1
				out.Error = "cancelled while running: " + out.Error
			case errors.Is(cause, errShutdown):
				// Not recorded: the next Open requeues the attempt.
				report = false
			}
		}

		r.mu.Lock()
		if !report {
			r.inflight--
		}
		r.targetBlocked = false
		delete(r.running, c.ID)
		if r.perTarget[c.Target]--; r.perTarget[c.Target] <= 0 {
			delete(r.perTarget, c.Target)
		}
		r.mu.Unlock()

		if !report {
			r.signal()
			return
		}
		if obs := r.cfg.Observer; obs != nil {
			obs.AttemptFinished(AttemptEvent{Kind: c.Kind, Target: c.Target, Outcome: out.Class.String(), Duration: time.Since(began)})
		}
		// The slot goes with the outcome: the finisher reuses it for the next
		// due job in the same durable write as the outcome.
		r.outcomes <- out // never blocks: capacity Concurrency >= attempts in flight
	}()
}

// runHandler calls the handler, turning a panic into a retryable failure with
// the stack in the reason.
func runHandler(ctx context.Context, h Handler, c store.Claim) (err error) {
	if h == nil {
		return Permanent(fmt.Errorf("no handler is registered for kind %q; register one in Config.Handlers and retry the job", c.Kind))
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h.run(ctx, c.Payload)
}

// maxFinishBatch bounds the outcomes settled by one store call.
const maxFinishBatch = 1024

// finisher settles ended attempts in batches: while one batch waits for its
// sync, the outcomes that end meanwhile gather for the next.
func (r *Runner) finisher() {
	defer r.finishersDone.Done()
	batch := make([]store.Outcome, 0, 64)
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
func (r *Runner) gather(batch *[]store.Outcome) {
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
func (r *Runner) settle(batch []store.Outcome) {
	if len(batch) == 0 {
		return
	}
	lim := store.Limits{Max: len(batch), PerTarget: r.cfg.TargetConcurrency, Running: r.targetRunning}
	select {
	case <-r.stop:
		lim.Max = 0
	default:
	}
	var claims []store.Claim
	for {
		var err error
		claims, err = r.st.Finish(r.base, r.nowMS(), r.cfg.Rand, batch, lim)
		if err == nil {
			r.answered()
			break
		}
		if !r.transient(err) {
			r.release(len(batch))
			if !errors.Is(err, store.ErrClosed) {
				r.fail(err)
			}
			return
		}
		// Recording the outcomes again is safe: an outcome whose attempt
		// has ended already (the first try committed after all) is a
		// no-op. Once Close has begun, one more try is all there is: the
		// attempts of outcomes left unrecorded are requeued by the store
		// (PostgreSQL: when their lease expires), counted as failed.
		select {
		case <-r.stop:
			if lim.Max == 0 {
				r.release(len(batch))
				r.log.Warn("runlog: outcomes not recorded at close; their attempts run again once the store requeues them", "outcomes", len(batch), "err", err)
				return
			}
			lim.Max = 0
		default:
		}
		r.troubled("finish", err)
	}
	r.release(len(batch) - len(claims))
	for _, c := range claims {
		r.startAttempt(c)
	}
	r.signal() // slots may be free, and a retry may be due soon
}

// usable reports why the runner takes no request, or nil.
func (r *Runner) usable() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.failure != nil {
		return fmt.Errorf("runlog: the journal failed, so the runner takes no more changes; Close it and Open it again: %w", r.failure)
	}
	return nil
}

// Err returns why the runner stopped working, or nil while it works: its
// store failed for good (the embedded journal after a write or fdatasync
// error such as a full disk), so every change is refused and no job
// starts. A PostgreSQL server that cannot be reached is not such a
// failure: the runner backs off and goes on once it answers. The failure is permanent
// for this Runner and it does not recover by itself: fix the cause (free
// disk space), Close the runner and Open it again; every job that was
// acknowledged is kept. A health check should report the runner unhealthy
// while Err is not nil. Close does not set it.
func (r *Runner) Err() error {
	r.mu.Lock()
	failure := r.failure
	r.mu.Unlock()
	if failure == nil {
		if f, ok := r.st.(store.Failer); ok {
			failure = f.Err()
		}
	}
	if failure != nil {
		return fmt.Errorf("runlog: the store failed, so the runner takes no more changes; fix the cause, then close and open it again: %w", failure)
	}
	return nil
}

// Close stops the runner: it starts no more attempts, waits for the running
// ones until ctx ends (then cancels them: they are requeued by the next
// Open), records the outcomes of those that ended, and closes the journal.
// Close is idempotent; later calls return nil.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()

	r.stopDispatch()
	<-r.dispatcherDone
	<-r.janitorDone

	done := make(chan struct{})
	go func() { r.workers.Wait(); close(done) }()
	var waitErr error
	select {
	case <-done:
	case <-ctx.Done():
		waitErr = ctx.Err()
		r.cancelAll(errShutdown)
		// Handlers should return promptly once their context is cancelled;
		// one that does not is abandoned and its job runs again after Open.
		select {
		case <-done:
		case <-time.After(time.Second):
			r.log.Warn("runlog: some handlers ignored cancellation at Close; their jobs run again after the next Open")
		}
	}
	close(r.finishStop)
	r.finishersDone.Wait()
	r.cancelAll(errShutdown)
	r.cancelBase(errShutdown)
	if err := r.st.Close(); err != nil {
		return err
	}
	if waitErr != nil {
		return fmt.Errorf("runlog: close: stopped waiting for running attempts (they run again after the next Open): %w", waitErr)
	}
	return nil
}

// compactor is a store that can checkpoint its state (the embedded journal).
type compactor interface {
	Checkpoint() (embedded.CheckpointStats, error)
}

// Compact writes a snapshot of the durable state now and drops the journal
// segments it makes unneeded (the runner also does this by itself, in the
// background, every Config.SnapshotBytes of journal, and at Close). Dispatch
// goes on meanwhile: the snapshot is rebuilt from the journal, not copied
// from the live state. On a store with nothing to compact it does nothing.
func (r *Runner) Compact(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	c, ok := r.st.(compactor)
	if !ok {
		return nil
	}
	_, err := c.Checkpoint()
	return err
}
