package runlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// DefaultQueue is the name of the queue of the jobs that name none.
const DefaultQueue = "default"

// The bounds of a job's priority (JobRequest.Priority).
const (
	MinPriority = -1000
	MaxPriority = 1000
)

// maxQueueName bounds a queue's name, in bytes.
const maxQueueName = 64

// ValidQueueName reports why name cannot name a queue, or nil: a name is 1
// to 64 bytes of ASCII letters, digits, '_', '-', '.' and ':' ("" stands
// for DefaultQueue where a name is optional).
func ValidQueueName(name string) error {
	if name == "" || len(name) > maxQueueName {
		return fmt.Errorf("%w: queue name %q must be 1 to %d bytes", ErrInvalid, name, maxQueueName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':') {
			return fmt.Errorf("%w: queue name %q: byte %d (%q) is not a letter, digit, '_', '-', '.' or ':'", ErrInvalid, name, i, c)
		}
	}
	return nil
}

// storedQueue returns the name the stores keep for queue name ("" for the
// default queue), or an error saying what is wrong with it.
func storedQueue(name string) (string, error) {
	if name == "" || name == DefaultQueue {
		return "", nil
	}
	if err := ValidQueueName(name); err != nil {
		return "", err
	}
	return name, nil
}

// publicQueue returns the public name of a stored queue name.
func publicQueue(name string) string {
	if name == "" {
		return DefaultQueue
	}
	return name
}

// validPriority reports why p cannot be a job's priority, or nil.
func validPriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("%w: priority %d must be within %d to %d", ErrInvalid, p, MinPriority, MaxPriority)
	}
	return nil
}

// WithQueue puts the job in queue name (DefaultQueue when empty). See
// JobRequest.Queue.
func WithQueue(name string) EnqueueOption { return func(r *JobRequest) { r.Queue = name } }

// WithPriority sets the job's priority. See JobRequest.Priority.
func WithPriority(p int) EnqueueOption { return func(r *JobRequest) { r.Priority = p } }

// snoozeError is what Snooze returns.
type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return "snoozed for " + e.d.String() }

// Snooze, returned by a handler, ends its attempt and makes the job
// pending again d later (0 or less: at once), with no failure counted: the
// job's retry budget is unchanged and its target's breaker is not fed (a
// half-open probe slot the attempt held is released). The attempt stays in
// the job's history with the outcome "snoozed". The policy's deadline
// still counts from the job's first due time.
func Snooze(d time.Duration) error { return &snoozeError{d: max(d, 0)} }

// snoozed reports whether err asks for a snooze, and for how long.
func snoozed(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false // no errors.As: its target would escape, an allocation per attempt
	}
	var se *snoozeError
	if errors.As(err, &se) {
		return se.d, true
	}
	return 0, false
}

// QueueStats is one queue's setting and load.
type QueueStats struct {
	// Name is the queue's name (DefaultQueue for the default one).
	Name string
	// Concurrency bounds the queue's attempts in flight (0: only the
	// pool, Config.Concurrency, bounds them).
	Concurrency int
	// Paused: no attempt of the queue starts until it is resumed.
	Paused bool
	// Pending and Running count the queue's jobs.
	Pending, Running int
	// Limit is the queue's rate limit (the zero Limit: none), Tokens the
	// tokens its bucket holds now.
	Limit  Limit
	Tokens int
}

func queueStats(qi state.QueueInfo, now int64) QueueStats {
	qs := QueueStats{Name: publicQueue(qi.Name), Concurrency: qi.Concurrency, Paused: qi.Paused, Pending: qi.Pending, Running: qi.Running}
	if !qi.Limit.IsZero() {
		qs.Limit, qs.Tokens = fromLimit(qi.Limit), qi.Pace.Bucket.Tokens(qi.Limit, now)
	}
	return qs
}

// Queues returns every queue the runner knows, sorted by name: the default
// one always, the others while they have jobs pending or running or a
// setting (a concurrency or a pause).
func (r *Runner) Queues(ctx context.Context) ([]QueueStats, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	qs, err := r.st.Queues(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]QueueStats, len(qs))
	now := r.nowMS()
	for i, qi := range qs {
		out[i] = queueStats(qi, now)
	}
	return out, nil
}

// PauseQueue pauses the queue name: once it returns, no attempt of the
// queue starts (on any node of a PostgreSQL store) until ResumeQueue. Its
// jobs are still accepted; the attempts running go on to their end. The
// pause is durable: it holds across restarts.
func (r *Runner) PauseQueue(ctx context.Context, name string) (QueueStats, error) {
	paused := true
	return r.setQueue(ctx, name, nil, &paused, nil)
}

// ResumeQueue resumes the paused queue name: its due jobs start at once,
// without waiting for a poll.
func (r *Runner) ResumeQueue(ctx context.Context, name string) (QueueStats, error) {
	paused := false
	return r.setQueue(ctx, name, nil, &paused, nil)
}

// SetQueueConcurrency bounds the attempts of queue name in flight at once
// to n (0: no bound but the pool), durably. On a PostgreSQL store the
// bound holds across the nodes.
func (r *Runner) SetQueueConcurrency(ctx context.Context, name string, n int) (QueueStats, error) {
	return r.SetQueueSetting(ctx, name, &n, nil, nil)
}

// setQueue changes the setting of queue name and wakes the dispatcher.
func (r *Runner) setQueue(ctx context.Context, name string, conc *int, paused *bool, limit *retry.Limit) (QueueStats, error) {
	q, err := storedQueue(name)
	if err != nil {
		return QueueStats{}, err
	}
	if err := r.usable(); err != nil {
		return QueueStats{}, err
	}
	now := r.nowMS()
	qi, err := r.st.SetQueue(ctx, now, q, conc, paused, limit)
	if err != nil {
		return QueueStats{}, mapErr(err)
	}
	r.unblock()
	return queueStats(qi, now), nil
}

// unblock lets the dispatcher claim again, even if due jobs waited for
// their targets' or queues' slots: a queue's setting changed, or another
// node's attempt of a bounded queue ended.
func (r *Runner) unblock() {
	r.mu.Lock()
	r.unblockLocked()
	r.mu.Unlock()
	r.signal()
}

// unblockLocked clears targetBlocked (an attempt ended, a batch of
// outcomes was applied, a queue's setting changed, the store woke the
// runner) and counts the event in r.freed, so
// that a claim in flight, which may have seen the slot still taken, does
// not set targetBlocked again when it returns: with nothing left running
// to clear it, due jobs would wait for good. r.mu must be held.
func (r *Runner) unblockLocked() {
	r.targetBlocked = false
	r.freed++
}

// applyQueues gives each queue of cfg.QueueConcurrency its concurrency,
// where the store holds another.
func applyQueues(st store.Store, cfg Config) error {
	if err := applyQueueLimits(st, cfg); err != nil {
		return err
	}
	if len(cfg.QueueConcurrency) == 0 {
		return nil
	}
	ctx := context.Background()
	qs, err := st.Queues(ctx)
	if err != nil {
		return err
	}
	have := make(map[string]int, len(qs))
	for _, qi := range qs {
		have[qi.Name] = qi.Concurrency
	}
	for name, n := range cfg.QueueConcurrency {
		q, _ := storedQueue(name) // validated
		if have[q] == n {
			continue
		}
		if _, err := st.SetQueue(ctx, cfg.Clock.Now().UnixMilli(), q, &n, nil, nil); err != nil {
			return fmt.Errorf("runlog: set the concurrency of queue %q (Config.QueueConcurrency): %w", name, err)
		}
	}
	return nil
}

// validQueueConcurrency checks Config.QueueConcurrency.
func validQueueConcurrency(m map[string]int) error {
	for name, n := range m {
		if _, err := storedQueue(name); err != nil {
			return fmt.Errorf("QueueConcurrency: %w", err)
		}
		if n < 0 || n > state.MaxQueueConcurrency {
			return fmt.Errorf("%w: QueueConcurrency[%q] %d must be within 0 to %d", ErrInvalid, name, n, state.MaxQueueConcurrency)
		}
	}
	return nil
}

// outcomeName names how an attempt ended, for observers and events:
// "snoozed", or its class.
func outcomeName(o *store.Outcome) string {
	if o.Snooze {
		return "snoozed"
	}
	return o.Class.String()
}

// queuesBounded reports whether a queue may hold due jobs back at its
// concurrency (one had a concurrency at the last look; looked at again at
// most once a second): then a claim that leaves due jobs behind waits for
// an attempt to end.
func (r *Runner) queuesBounded() bool {
	now := time.Now()
	r.mu.Lock()
	if now.Before(r.boundedAt) {
		b := r.bounded
		r.mu.Unlock()
		return b
	}
	r.mu.Unlock()
	qs, err := r.st.Queues(r.base)
	bounded := err != nil // unknown: wait for an attempt's end, as if bounded
	for _, qi := range qs {
		bounded = bounded || qi.Concurrency > 0
	}
	r.mu.Lock()
	r.bounded, r.boundedAt = bounded, now.Add(time.Second)
	r.mu.Unlock()
	return bounded
}
