package runlog

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// Config configures a Runner. The zero value of every field takes the
// default written next to it; Open applies the defaults, then validates.
type Config struct {
	// Concurrency bounds the attempts in flight at once (the pool).
	// Defaults to 64.
	Concurrency int
	// TargetConcurrency bounds the attempts in flight per target.
	// Defaults to 0: unlimited.
	TargetConcurrency int
	// QueueConcurrency bounds the attempts in flight of the queues it
	// names (by name, DefaultQueue for the default one), inside the
	// pool: at open, each named queue gets its concurrency (durably, as
	// Runner.SetQueueConcurrency would), replacing the one it had. Queues
	// it does not name keep theirs (none by default: only the pool
	// bounds them).
	QueueConcurrency map[string]int
	// Retry is the policy of jobs that do not give their own. It is stored
	// with each job when it is enqueued, so a later change applies to new
	// jobs only. Defaults to 10 attempts, base 500ms, cap 30s, no deadline.
	Retry RetryPolicy
	// Breaker configures the circuit breaker kept per target.
	// Defaults to threshold 5 failures within 1m, cooldown 30s, 1 probe,
	// then a slow start up to 32 attempts at once.
	Breaker BreakerConfig
	// DisableAfter disables a target that has failed this long with no
	// success in between (failures that count against its breaker); its
	// jobs are then kept pending and not attempted until
	// Runner.EnableTarget. Defaults to DefaultDisableAfter (5 days); < 0
	// never disables for failing time (a Gone answer still disables).
	DisableAfter time.Duration
	// RateLimit is the rate limit of every target not in Limits (see
	// Limit). Defaults to none.
	RateLimit Limit
	// Limits holds the rate limits of some targets, overriding RateLimit
	// (a zero Limit: none for that target). Runner.SetLimit overrides both
	// at run time.
	Limits map[string]Limit
	// QueueLimits holds the rate limits of the queues it names (by name,
	// DefaultQueue for the default one): each attempt of the queue takes a
	// token, and a job that finds none is deferred, no attempt counted. At
	// open, each named queue gets its limit durably, as
	// Runner.SetQueueLimit would, replacing the one it had (a zero Limit
	// removes it); queues it does not name keep theirs.
	QueueLimits map[string]Limit
	// MaxRetryAfter bounds the wait a target asks for (an HTTP
	// Retry-After, RetryAfter): the job, and every job of its target, waits
	// that long, up to this bound, whatever the retry policy's Cap.
	// Defaults to DefaultMaxRetryAfter (24h).
	MaxRetryAfter time.Duration
	// Timeout is the attempt timeout of jobs and kinds that give none.
	// Defaults to 1m.
	Timeout time.Duration
	// MaxPayload bounds a job's payload in bytes. Defaults to 1 MiB.
	MaxPayload int
	// Handlers maps each job kind to the handler that runs it; build them
	// with Handle, or add typed ones with AddHandler. Enqueue refuses kinds
	// that have no handler.
	Handlers map[string]Handler
	// Middleware wraps every attempt, the first outermost (see Middleware;
	// LogAttempts and RecoverPanics are built in). A panic anywhere in it
	// is recovered by the runner as a retryable failure. Defaults to none,
	// which costs nothing.
	Middleware []Middleware
	// EnqueueMiddleware wraps every enqueue, the first outermost (see
	// EnqueueMiddleware). Defaults to none, which costs nothing.
	EnqueueMiddleware []EnqueueMiddleware
	// Logger receives the runner's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every attempt and journal sync (metrics).
	Observer Observer
	// SegmentSize is the size at which the journal starts a new segment
	// file (each new segment is zero-filled ahead of use, so that a sync
	// flushes data, not metadata). Defaults to DefaultSegmentSize.
	SegmentSize int64
	// Retention says how long finished jobs stay inspectable (and hold
	// their idempotency keys). Defaults to 24h for succeeded and cancelled
	// jobs and 7 days for failed ones.
	Retention Retention
	// SnapshotBytes: once the journal has grown since the last snapshot by
	// this many bytes, or by that snapshot's size if it is larger, a
	// snapshot of the whole state is written in the background and the
	// journal segments it covers are dropped, so disk use and open time
	// follow the jobs held, not all history. One is also written at Close.
	// Defaults to 64 MiB; < 0 turns snapshots off.
	SnapshotBytes int64
	// KeepSnapshots is how many snapshots stay on disk, with the journal
	// from the oldest of them on. Defaults to 1: disk use stays under about
	// twice the snapshot, and a damaged snapshot makes Open refuse (restore
	// from a backup). With 2 or more, Open falls back past a damaged newest
	// snapshot, and `runlog journal state --at` reaches further back, at the
	// cost of the extra snapshots and journal on disk.
	KeepSnapshots int
	// Clock is the time source; tests inject a fake one. Defaults to the
	// system clock.
	Clock Clock
	// Rand is the random source of the retry jitter. Defaults to math/rand/v2.
	Rand func() uint32
}

// RetryPolicy is how often and how patiently a job is retried.
type RetryPolicy struct {
	// Attempts is the number of attempts, the first one included (>= 1).
	Attempts int
	// Base is the first backoff; each retry doubles it, up to Cap. The wait
	// is jittered into [d/2, d].
	Base time.Duration
	// Cap is the longest wait of the backoff between attempts (a server's
	// Retry-After is bounded by Config.MaxRetryAfter instead).
	Cap time.Duration
	// Deadline, if not 0, is how long after its first due time a job may
	// still start an attempt; past it the job fails.
	Deadline time.Duration
}

// BreakerConfig configures the circuit breaker of each target.
type BreakerConfig struct {
	// Threshold failures, each within Window of the newest, open the circuit.
	Threshold int
	// Window is how long a failure counts towards Threshold.
	Window time.Duration
	// Cooldown is how long the circuit stays open before it half-opens.
	Cooldown time.Duration
	// Probes is how many attempts a half-open circuit lets through at once
	// (>= 1); the first to end closes or reopens it.
	Probes int
	// SlowStart is where the slow start after an outage ends: once the
	// circuit closes again, its target runs 1 attempt at once, one more
	// per success (1, 2, 4, … per round), until SlowStart. 0 takes 32; a
	// negative value (or 1) turns the slow start off.
	SlowStart int
}

// Retention is how long finished jobs are kept after they finish. A zero
// duration takes the default; a negative one keeps those jobs forever.
type Retention struct {
	Succeeded, Cancelled, Failed time.Duration
	// PerKind overrides the durations of some job kinds (its zero fields
	// take the runner's values).
	PerKind map[string]Retention
}

// retentionInterval is how often finished jobs are checked for expiry.
const retentionInterval = time.Minute

// rules converts the retention to the journaled form, in ms (0: forever).
func (r Retention) rules() *state.Retention {
	ms := func(d time.Duration) int64 {
		if d < 0 {
			return 0
		}
		return max(d.Milliseconds(), 1)
	}
	out := &state.Retention{SucceededMS: ms(r.Succeeded), CancelledMS: ms(r.Cancelled), FailedMS: ms(r.Failed)}
	kinds := make([]string, 0, len(r.PerKind))
	for k := range r.PerKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		o := r.PerKind[k]
		o.PerKind = nil
		if o.Succeeded == 0 {
			o.Succeeded = r.Succeeded
		}
		if o.Cancelled == 0 {
			o.Cancelled = r.Cancelled
		}
		if o.Failed == 0 {
			o.Failed = r.Failed
		}
		out.PerKind = append(out.PerKind, state.KindRetention{Kind: k, SucceededMS: ms(o.Succeeded), CancelledMS: ms(o.Cancelled), FailedMS: ms(o.Failed)})
	}
	return out
}

// Observer is told of what the runner does, for metrics. Its methods are
// called from the runner's goroutines and must not block.
type Observer interface {
	// AttemptFinished is called once per attempt that ended.
	AttemptFinished(AttemptEvent)
	// JournalSynced is called once per group commit of the journal.
	JournalSynced(SyncEvent)
}

// AttemptEvent describes one ended attempt.
type AttemptEvent struct {
	Kind, Target string
	// Outcome is "success", "retryable", "permanent" or "unsafe".
	Outcome  string
	Duration time.Duration
}

// SyncEvent describes one group commit: how many records and bytes one
// fdatasync made durable, and how long the write and sync took.
type SyncEvent struct {
	Records, Bytes int
	Duration       time.Duration
}

// Clock is the runner's source of time. Due times are wall-clock; waits use
// the clock's timers, which run on elapsed time. So that a step of Now is
// noticed, the dispatcher sleeps on a Clock other than the default one at
// most 10 s at a time while a job waits in the future.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a func
	// that stops the timer.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// systemClock is the real clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.Retry == (RetryPolicy{}) {
		c.Retry = RetryPolicy{Attempts: 10, Base: 500 * time.Millisecond, Cap: 30 * time.Second}
	}
	if c.Breaker == (BreakerConfig{}) {
		c.Breaker = BreakerConfig{Threshold: 5, Window: time.Minute, Cooldown: 30 * time.Second, Probes: 1}
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if c.Retention.Succeeded == 0 {
		c.Retention.Succeeded = 24 * time.Hour
	}
	if c.Retention.Cancelled == 0 {
		c.Retention.Cancelled = 24 * time.Hour
	}
	if c.Retention.Failed == 0 {
		c.Retention.Failed = 7 * 24 * time.Hour
	}
	if c.Timeout == 0 {
		c.Timeout = time.Minute
	}
	if c.DisableAfter == 0 {
		c.DisableAfter = DefaultDisableAfter
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = 1 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = DefaultSegmentSize
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Rand == nil {
		c.Rand = rand.Uint32
	}
	return c
}

// validate reports the first invalid field of a defaulted config.
func (c Config) validate() error {
	if c.Concurrency < 0 {
		return fmt.Errorf("%w: Concurrency %d must be >= 0", ErrInvalid, c.Concurrency)
	}
	if c.TargetConcurrency < 0 {
		return fmt.Errorf("%w: TargetConcurrency %d must be >= 0", ErrInvalid, c.TargetConcurrency)
	}
	if err := validQueueLimits(c.QueueLimits); err != nil {
		return err
	}
	if err := validQueueConcurrency(c.QueueConcurrency); err != nil {
		return err
	}
	if err := c.Retry.policy().Validate(); err != nil {
		return fmt.Errorf("%w: Retry: %v", ErrInvalid, err)
	}
	if err := c.Breaker.circuit().Validate(); err != nil {
		return fmt.Errorf("%w: Breaker: %v", ErrInvalid, err)
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: Timeout %v must be >= 0", ErrInvalid, c.Timeout)
	}
	if c.MaxPayload < 0 {
		return fmt.Errorf("%w: MaxPayload %d must be >= 0", ErrInvalid, c.MaxPayload)
	}
	for i, m := range c.Middleware {
		if m == nil {
			return fmt.Errorf("%w: Middleware[%d] is nil", ErrInvalid, i)
		}
	}
	for i, m := range c.EnqueueMiddleware {
		if m == nil {
			return fmt.Errorf("%w: EnqueueMiddleware[%d] is nil", ErrInvalid, i)
		}
	}
	for kind, h := range c.Handlers {
		if kind == "" {
			return fmt.Errorf("%w: a handler is registered for the empty kind", ErrInvalid)
		}
		if h == nil {
			return fmt.Errorf("%w: the handler of kind %q is nil", ErrInvalid, kind)
		}
		if b := h.boundKind(); b != "" && b != kind {
			return fmt.Errorf("%w: a handler of kind %q (HandleTyped of %v) is registered under kind %q; register it under %q or use AddHandler", ErrInvalid, b, h.argsType(), kind, b)
		}
	}
	return nil
}

// policy converts p to the retry package's milliseconds.
func (p RetryPolicy) policy() retry.Policy {
	return retry.Policy{
		Attempts:   p.Attempts,
		BaseMS:     p.Base.Milliseconds(),
		CapMS:      p.Cap.Milliseconds(),
		DeadlineMS: p.Deadline.Milliseconds(),
	}
}

// fromPolicy converts a stored policy back.
func fromPolicy(p retry.Policy) RetryPolicy {
	return RetryPolicy{
		Attempts: p.Attempts,
		Base:     time.Duration(p.BaseMS) * time.Millisecond,
		Cap:      time.Duration(p.CapMS) * time.Millisecond,
		Deadline: time.Duration(p.DeadlineMS) * time.Millisecond,
	}
}

// circuit converts b to the retry package's milliseconds.
func (b BreakerConfig) circuit() retry.Circuit {
	return retry.Circuit{
		Threshold:  b.Threshold,
		WindowMS:   b.Window.Milliseconds(),
		CooldownMS: b.Cooldown.Milliseconds(),
		Probes:     b.Probes,
		SlowStart:  b.slowStart(),
	}
}

// slowStart returns the circuit's SlowStart: 32 for 0, none (0) below 0.
func (b BreakerConfig) slowStart() int {
	switch {
	case b.SlowStart == 0:
		return retry.DefaultCircuit().SlowStart
	case b.SlowStart < 0:
		return 0
	}
	return b.SlowStart
}
