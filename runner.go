package runlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/embedded"
	"github.com/runlog/runlog/internal/vfs"
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

	schedWake chan struct{} // wakes the schedule loop (schedules.go)
	schedDone chan struct{} // closed when the schedule loop ended

	dispatcherDone chan struct{}
	janitorDone    chan struct{}
	claims         sync.WaitGroup // claims in flight
	outcomes       chan ended     // capacity Concurrency: a send never blocks
	finishStop     chan struct{}  // closed by Close once no attempt can end anymore
	finishersDone  sync.WaitGroup
	workers        workerCount // attempts whose goroutine runs
	goroutines     attemptGoroutines
	// async: the store records outcomes apart from claims
	// (store.AsyncOutcomes); a slot is freed when its handler returns.
	async bool
	// finishers is how many finishers run; finishing how many of them
	// are inside a store call.
	finishers int
	finishing atomic.Int32
	// queued counts the outcomes queued and not yet in a store call.
	queued atomic.Int32

	base       context.Context // parent of every attempt's context
	cancelBase context.CancelCauseFunc

	mu            sync.Mutex
	closed        bool                // guarded by mu
	failure       error               // guarded by mu: the store failed; nothing runs anymore
	inflight      int                 // guarded by mu: slots taken (reserved by claims or running)
	targetBlocked bool                // guarded by mu: due jobs wait only for per-target slots
	freed         uint64              // guarded by mu: events that may free a target's or queue's slot (unblockLocked)
	bounded       bool                // guarded by mu: a queue had a concurrency at boundedAt - 1s (queuesBounded)
	boundedAt     time.Time           // guarded by mu
	claiming      int                 // guarded by mu: claims in flight (counted when async)
	running       map[uint64]*flight  // guarded by mu
	perTarget     map[string]int      // guarded by mu
	cancelEarly   map[uint64]struct{} // guarded by mu: cancelled before its flight registered
	shuttingDown  bool                // guarded by mu: Close gave up waiting; cancel every attempt

	// storeErrors counts the store's transient failures in a row (see
	// troubled); 0 while it answers.
	storeErrors atomic.Int32
	// attempt and enqueue are Config.Middleware and
	// Config.EnqueueMiddleware chained, or nil without middleware.
	attempt AttemptFunc
	enqueue EnqueueFunc

	// hub holds the event subscriptions and the Waits.
	hub hub

	// breakersDirty: attempts ended since the breaker watch last looked.
	breakersDirty atomic.Bool
	watchDone     chan struct{} // closed when breakerWatch returns
}

// flight is one attempt in progress.
type flight struct {
	cancel context.CancelCauseFunc
}

// DefaultSegmentSize is the journal's segment size unless
// Config.SegmentSize says otherwise: 16 MiB. Offline tools that rewrite a
// data directory (`runlog journal snapshot`) use it too, so that a directory
// keeps one segment size.
const DefaultSegmentSize = 16 << 20

// Open opens the journal in dir (creating it if needed), replays it,
// requeues every attempt that was running when the last process stopped
// (counted as a failed attempt), and starts running due jobs.
//
// A directory is used by one process at a time: a second Open of the same
// directory fails with an error naming the lock file.
//
// Open takes no context, unlike postgres.Open, which dials a server: it
// does local work only (the lock, the newest snapshot, the replay of the
// journal after it), which a cancelled context could only cut short into
// a failed open with nothing to show for it. Its time follows the jobs
// held, not all history (Config.SnapshotBytes).
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
	var replayed journal.ReplayInfo
	jopts.OnReplay = func(ri journal.ReplayInfo) {
		replayed.Records += ri.Records
		replayed.Bytes += ri.Bytes
	}
	began := time.Now()
	cfg.Logger.Info("runlog: opening the journal: loading the newest snapshot and replaying the records after it", "dir", dir)
	st, err := embedded.Open(dir, embedded.Options{
		Journal:       jopts,
		State:         state.Config{Circuit: cfg.Breaker.circuit(), DisableAfterMS: cfg.disableAfterMS(), Limits: cfg.limitConfig()},
		Now:           cfg.Clock.Now().UnixMilli(),
		SnapshotBytes: cfg.SnapshotBytes,
		KeepSnapshots: cfg.KeepSnapshots,
		Retention:     cfg.Retention.rules(),
		Logf:          func(format string, args ...any) { cfg.Logger.Error(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, fmt.Errorf("runlog: open %s: %w", dir, err)
	}
	if err := applyQueues(st, cfg); err != nil {
		st.Close()
		return nil, err
	}
	if cfg.Logger.Enabled(context.Background(), slog.LevelInfo) {
		attrs := []any{"dir", dir, "records", replayed.Records, "bytes", replayed.Bytes, "took", time.Since(began).Round(time.Millisecond)}
		if s, err := st.Stats(context.Background()); err == nil {
			attrs = append(attrs, "jobs", s.Counts.Total(), "pending", s.Counts.Pending)
		}
		cfg.Logger.Info("runlog: journal open", attrs...)
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
		outcomes:       make(chan ended, cfg.Concurrency),
		watchDone:      make(chan struct{}),
		finishStop:     make(chan struct{}),
		running:        make(map[uint64]*flight),
		perTarget:      make(map[string]int),
		cancelEarly:    make(map[uint64]struct{}),
	}
	if f, ok := chain(cfg.Middleware, callHandler); ok {
		r.attempt = f
	}
	if f, ok := chain(cfg.EnqueueMiddleware, r.enqueueMany); ok {
		r.enqueue = f
	}
	r.base, r.cancelBase = context.WithCancelCause(context.Background())
	r.schedWake, r.schedDone = make(chan struct{}, 1), make(chan struct{})
	st.SetNotify(store.Notify{Wake: r.unblock, CancelAttempt: r.cancelAttempt, Schedules: r.signalSchedules, TargetDisabled: r.targetDisabled})
	// One finisher for the journal: one batch per sync, it carries every
	// outcome that ended during the last one. A store whose outcome batches
	// are independent transactions says how many may run side by side.
	finishers := 1
	if f, ok := st.(store.ConcurrentFinisher); ok {
		finishers = max(f.Finishers(cfg.Concurrency), 1)
	}
	if a, ok := st.(store.AsyncOutcomes); ok {
		r.async = a.AsyncOutcomes()
	}
	r.finishers = finishers
	r.finishersDone.Add(finishers)
	for range finishers {
		go r.finisher()
	}
	r.wakeAt.Store(math.MaxInt64)
	go r.dispatch()
	go r.janitor()
	go r.breakerWatch(r.watchDone)
	if sch, ok := st.(store.Scheduler); ok {
		go r.scheduleLoop(sch)
	} else {
		close(r.schedDone)
	}
	return r
}

// nowMS is the current time in ms since the Unix epoch.
func (r *Runner) nowMS() int64 { return r.cfg.Clock.Now().UnixMilli() }

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
	<-r.watchDone
	<-r.schedDone

	done := make(chan struct{})
	go func() { r.workers.wait(); close(done) }()
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
	r.goroutines.release()
	close(r.finishStop)
	r.finishersDone.Wait()
	r.cancelAll(errShutdown)
	r.cancelBase(errShutdown)
	defer r.hub.close()
	if err := r.st.Close(); err != nil {
		return err
	}
	if waitErr != nil {
		return fmt.Errorf("runlog: close: stopped waiting for running attempts (they run again after the next Open): %w", waitErr)
	}
	return nil
}
