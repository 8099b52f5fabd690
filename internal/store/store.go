// Package store defines the storage boundary of the runlog engine: what the
// engine (dispatcher, pool, workers) asks of durable storage, and nothing more.
//
// Two implementations sit behind it: the embedded journal (package
// store/embedded, the default) and PostgreSQL. Every method that changes
// state returns only after the change is durable, so the engine can act on
// it: an enqueue is acknowledged, an attempt starts, an outcome is reported,
// only after its record reached stable storage.
//
// Decisions that replay depends on (which job starts, whether the breaker
// admits it, when a failed attempt runs again) are made inside the store, by
// the pure functions of package state, so that the embedded store can journal
// them and the PostgreSQL store can make them in one transaction.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// Errors a store returns. The public package maps them to its own sentinels.
var (
	// ErrNotFound: no job has that id (or it was dropped by retention).
	ErrNotFound = errors.New("store: job not found")
	// ErrFinished: the job already succeeded, failed or was cancelled.
	ErrFinished = errors.New("store: job already finished")
	// ErrNotFailed: only a failed or cancelled job can be retried by hand.
	ErrNotFailed = errors.New("store: job is not failed or cancelled")
	// ErrNotFinished: only a finished job (succeeded, failed, cancelled)
	// whose attempts have all ended can be discarded.
	ErrNotFinished = errors.New("store: job is not finished")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrNotDisabled: EnableTarget of a target that is not disabled.
	ErrNotDisabled = errors.New("store: target is not disabled")
)

// NewJob is one job to enqueue. Times are ms since the Unix epoch.
type NewJob struct {
	Spec state.Spec
	Due  int64
}

// Enqueued is the answer for one NewJob.
type Enqueued struct {
	ID       uint64
	Existing bool // the idempotency key was held by job ID; nothing was added
}

// Claim is an attempt that the store has durably started: the engine must run
// it and report its Outcome.
type Claim struct {
	ID        uint64
	Attempt   uint32
	Kind      string
	Target    string
	Payload   []byte
	TimeoutMS int64
	// Metadata is the job's metadata (state.Spec.Metadata).
	Metadata []state.Meta
	// Spilled is set by the embedded store, inside its Claim and Finish,
	// for a claim whose payload is still to be read from its job table;
	// the engine never sees it set.
	Spilled bool
}

// Outcome is how one claimed attempt ended.
type Outcome struct {
	ID      uint64
	Attempt uint32
	Class   retry.Class
	AfterMS int64 // the server's wait for a retryable failure; < 0 for none; the snooze's wait
	// Snooze: the handler asked for the job to run again after AfterMS ms,
	// with no failure counted (OpSnooze); Class is then ignored.
	Snooze bool
	Error  string
	Output []byte
	// Gone: the target answered that it no longer exists (an http 410):
	// the outcome disables it (state.DisableRule).
	Gone bool
	// Verdict is set by Finish, once it returns without an error, by a
	// store that knows what it recorded without a read (PostgreSQL): the
	// engine reads it to tell a retried job from one that died, instead of
	// asking for the job, a round trip for each failed outcome there. The
	// zero Verdict says nothing, and the engine asks.
	Verdict Verdict
}

// Verdict is what Finish recorded for one Outcome.
type Verdict struct {
	// Known: the outcome ended its attempt, and Died says what became of
	// the job. Not set for an outcome fenced off (its attempt no longer
	// this process's) or a second outcome of one attempt.
	Known bool
	// Died: the outcome failed the job for good (it is failed, and its
	// last attempt is the outcome's); Reason is then the job's reason.
	Died   bool
	Reason string
}

// VerdictOf returns the Verdict of an outcome of attempt that was recorded
// on job j, given j as it is after the outcome.
func VerdictOf(j *state.Job, attempt uint32) Verdict {
	if j.State == state.Failed && j.Started() == attempt {
		return Verdict{Known: true, Died: true, Reason: j.Reason()}
	}
	return Verdict{Known: true}
}

// Limits bound one Claim call.
type Limits struct {
	Max       int // attempts to start at most
	PerTarget int // attempts running per target at most; 0 = unlimited
	// Running reports how many attempts of a target run now (used with PerTarget).
	Running func(target string) int
	// Held, when not nil, is told how many due jobs the claim held back
	// (state.Planner's Held: a target at PerTarget, or in a slow start
	// whose window is full), once the claim is decided.
	Held func(n int)
}

// Filter selects jobs for List.
type Filter struct {
	State  string // "" = any
	Kind   string
	Target string
	Search string // the decimal id, or a prefix of the key
	After  uint64 // cursor: the last id of the previous page, 0 = start
	Limit  int
	Oldest bool // ascending ids; default newest first
	// Schedule selects the jobs the named schedule made ("" any).
	Schedule string
}

// TargetInfo is one target's breaker, load and flow control.
type TargetInfo struct {
	Target  string
	Breaker retry.Breaker
	Pending int
	Running int
	// Life is the target's lifecycle: whether it is disabled, and since
	// when it has been failing.
	Life state.TargetLife
	// Flow is the target's flow control state (rate limit set at run
	// time, bucket, hold, slow start ramp); Limit the rate limit in force
	// (the zero Limit: none).
	Flow  state.Flow
	Limit retry.Limit
}

// Stats are the store's counts, maintained, never recomputed by scanning jobs.
type Stats struct {
	Counts    state.Counts
	OldestDue int64 // due time of the earliest pending job; 0 if none
	HasDue    bool
}

// Notify is how a store tells the engine about changes that did not come
// through this engine's own calls (another node enqueued a job, or cancelled
// a job that runs here). The embedded store, which has no other writers,
// never calls them. Both funcs must not block.
type Notify struct {
	// Wake: jobs may have become due; look again.
	Wake func()
	// CancelAttempt: job id, running here, was cancelled elsewhere; cancel
	// its attempt's context.
	CancelAttempt func(id uint64)
	// Schedules: a schedule was changed elsewhere; look at the schedules
	// again (nil: nobody listens).
	Schedules func()
	// TargetDisabled: an outcome this store recorded disabled target for
	// reason, durably (nil: nobody listens). Called after the write,
	// outside the store's locks.
	TargetDisabled func(target, reason string)
}

// Failer is a store whose failures can be permanent: the embedded journal,
// after a failed write or fdatasync, takes no more changes until it is
// reopened. Err reports that failure, or nil. An error from a store that is
// not a Failer, or while its Err is nil, is transient (a PostgreSQL server
// unreachable for a while): the engine backs off and calls again, which is
// safe because every change is recorded at most once (an outcome of an
// attempt that already ended is a no-op).
type Failer interface {
	Err() error
}

// ConcurrentFinisher is a store whose Finish calls are independent
// transactions, so that the engine may run several side by side (the
// PostgreSQL store). Finishers says how many, for a pool of concurrency
// slots; the engine runs at least one. A store that is not a
// ConcurrentFinisher gets one finisher: the embedded journal carries every
// outcome that ended during one fdatasync in the next batch, and a second
// batch would only wait behind it.
type ConcurrentFinisher interface {
	Finishers(concurrency int) int
}

// AsyncOutcomes is a store whose outcomes need not share a durable write
// with the claim of the next attempts (PostgreSQL: an outcome batch and a
// claim are transactions of their own either way, and each slot waiting
// for its outcome's commit before it runs again bounds the throughput of
// few slots). AsyncOutcomes reports whether the engine should use it:
// then a slot is freed when its attempt's handler returns, the outcomes
// are recorded in background batches by Finish with Limits.Max 0, and
// slots are filled by Claim alone. The store must keep an attempt whose
// outcome is not recorded yet as its own (renew its lease) until Finish
// records it, and, if the process dies first, requeue it as it requeues
// any attempt left running: delivery stays at least once. A store that is
// not an AsyncOutcomes (the embedded journal, whose outcome and next
// start share one fdatasync) frees a slot only once its outcome is
// durable, in the write that starts the next attempt on it.
type AsyncOutcomes interface {
	AsyncOutcomes() bool
}

// SnapshotStats describe one snapshot written by a Snapshotter.
type SnapshotStats struct {
	Seq      uint64        // the last journal record it covers (0: nothing new, none written)
	Bytes    int           // size of the snapshot body
	Jobs     int           // jobs in it
	Duration time.Duration // freeze + write + drop
}

// Snapshotter is a store that can write a snapshot of its durable state on
// demand (the embedded journal): Snapshot writes one, waiting for one in
// progress, and drops the journal segments it covers. A store whose state is
// not a replayed journal (PostgreSQL) has nothing to snapshot and is not a
// Snapshotter.
type Snapshotter interface {
	Snapshot() (SnapshotStats, error)
}

// Store is the durable side of the engine. Implementations are safe for
// concurrent use.
type Store interface {
	// Enqueue makes the jobs durable and answers their ids, in order. A job
	// whose key is already held answers the holder's id with Existing set.
	Enqueue(ctx context.Context, now int64, jobs []NewJob) ([]Enqueued, error)
	// Claim starts the due jobs (due <= now) that the limits and breakers
	// admit, in (due time, id) order, and returns them once their start is
	// durable. Jobs that the breaker denies are deferred, jobs past their
	// deadline or budget fail, both durably and without being returned.
	Claim(ctx context.Context, now int64, lim Limits) ([]Claim, error)
	// Finish records the outcomes of claimed attempts (success, a retry at a
	// later due time, or death with the reason) and, in the same durable
	// write, claims up to lim.Max due jobs as Claim does (the engine reuses
	// the slots the finished attempts held); it returns once durable. It
	// may set each outcome's Verdict.
	Finish(ctx context.Context, now int64, rnd func() uint32, outs []Outcome, lim Limits) ([]Claim, error)
	// Cancel cancels a pending or running job; running reports whether an
	// attempt of it is in flight (the engine then cancels the attempt).
	Cancel(ctx context.Context, now int64, id uint64, reason string) (running bool, err error)
	// Retry makes a failed or cancelled job pending again, due now, with a
	// fresh budget.
	Retry(ctx context.Context, now int64, id uint64) error
	// Discard removes a finished job for good, before its retention ends,
	// and frees its idempotency key (state.Discardable is the rule): a
	// pending or running job, or one cancelled while running whose attempt
	// has not ended, is refused with ErrNotFinished.
	Discard(ctx context.Context, now int64, id uint64) error
	// NextDue reports the earliest due time among pending jobs.
	NextDue() (int64, bool)
	// Job returns a copy of one job.
	Job(ctx context.Context, id uint64) (state.Job, error)
	// List returns one page of jobs matching f, and the cursor of the next
	// (0 when there is none). A page may be short, even empty, with a
	// cursor: a store may bound the jobs one call looks at.
	List(ctx context.Context, f Filter) ([]state.Job, uint64, error)
	// Stats returns the counts by state and the queue's oldest due time.
	Stats(ctx context.Context) (Stats, error)
	// Targets returns every known target with its breaker, load and flow
	// control.
	Targets(ctx context.Context) ([]TargetInfo, error)
	// SetLimit durably sets, at now, the rate limit of target at run time,
	// overriding the configured one; the zero Limit removes it (the target
	// then has no limit). lim must pass Validate.
	SetLimit(ctx context.Context, now int64, target string, lim retry.Limit) error
	// Expire drops the finished jobs whose retention ran out by now (and
	// releases their idempotency keys).
	Expire(ctx context.Context, now int64) error
	// Queues returns every queue the store knows (the default one, named
	// "", always; the others while they have jobs pending or running or a
	// setting other than the zero one), sorted by name.
	Queues(ctx context.Context) ([]state.QueueInfo, error)
	// SetQueue changes the setting of the queue name: its concurrency when
	// concurrency is not nil, whether it is paused when paused is not nil,
	// its rate limit when limit is not nil (the zero Limit removes it, and
	// the queue's bucket with it).
	// It returns once the change is durable and in force: no attempt of a
	// queue paused by it starts after it returns (on PostgreSQL, on any
	// node), and a queue it resumes starts its due jobs without waiting
	// for a poll.
	SetQueue(ctx context.Context, now int64, name string, concurrency *int, paused *bool, limit *retry.Limit) (state.QueueInfo, error)
	// EnableTarget enables the disabled target by hand: its held jobs are
	// offered to claims again and its failing run starts afresh. It
	// returns the target once the change is durable, or ErrNotDisabled.
	EnableTarget(ctx context.Context, now int64, target string) (TargetInfo, error)
	// SetNotify installs the engine's callbacks; called once, before any
	// other method.
	SetNotify(n Notify)
	// Close releases the store. Running attempts that were never finished
	// are requeued (as failed attempts) when the store is opened again.
	Close() error
}
