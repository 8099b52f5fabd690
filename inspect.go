package runlog

import (
	"context"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// State is where a job is in its life.
type State string

// The states of a job.
const (
	// StatePending: waiting for its due time or a free slot.
	StatePending State = "pending"
	// StateRunning: an attempt is in flight.
	StateRunning State = "running"
	// StateSucceeded: an attempt succeeded.
	StateSucceeded State = "succeeded"
	// StateFailed: dead, no more automatic attempts (permanent failure,
	// attempts or deadline spent); kept with the reason, can be retried.
	StateFailed State = "failed"
	// StateCancelled: cancelled by hand, with the reason.
	StateCancelled State = "cancelled"
)

// Job is a copy of one job as the runner holds it.
type Job struct {
	ID      uint64
	Kind    string
	Target  string
	Key     string
	State   State
	Payload []byte
	// Attempts is the number of attempts started so far.
	Attempts int
	// MaxAttempts is the policy's attempt budget.
	MaxAttempts int
	// LastError is the error of the last failed attempt.
	LastError string
	// Reason says why the job failed or was cancelled.
	Reason string
	// EnqueuedAt, DueAt and FinishedAt are zero when they do not apply.
	EnqueuedAt, DueAt, FinishedAt time.Time
	// Timeout is the job's own attempt timeout (0: the kind's or runner's).
	Timeout time.Duration
	// Retry is the policy stored with the job.
	Retry RetryPolicy
	// Metadata is the job's metadata (JobRequest.Metadata); nil for none.
	Metadata map[string]string
	// ReplayOf is the job this one re-sends (Runner.Replay); 0 for none.
	ReplayOf uint64
	// History holds the job's attempts, oldest first (the most recent ones
	// when there were many).
	History []Attempt
	// Queue is the job's queue (DefaultQueue for the default one).
	Queue string
	// Priority is the job's priority (higher starts first).
	Priority int
	// Schedule names the schedule whose tick made the job, and Tick is
	// that tick; "" and zero for a job enqueued by hand.
	Schedule string
	Tick     time.Time
}

// Attempt is one attempt of a job.
type Attempt struct {
	N         int
	StartedAt time.Time
	EndedAt   time.Time // zero while running
	// Outcome is "success", "retryable", "permanent", "unsafe",
	// "interrupted" (the process stopped during the attempt), or "" while
	// running.
	Outcome string
	Error   string
	Output  string
}

// msTime converts ms since the epoch to a time; 0 is the zero time.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// publicJob converts a stored job.
func publicJob(j *state.Job) Job {
	out := Job{
		ID:          j.ID,
		Kind:        j.Spec.Kind,
		Target:      j.Spec.Target,
		Key:         j.Spec.Key,
		State:       State(j.State.String()),
		Payload:     j.Spec.Payload,
		Attempts:    int(j.Started()),
		MaxAttempts: j.Spec.Policy.Attempts,
		LastError:   j.LastError(),
		Reason:      j.Reason(),
		EnqueuedAt:  msTime(j.EnqueuedAt),
		FinishedAt:  msTime(j.FinishedAt()),
		Timeout:     time.Duration(j.Spec.TimeoutMS) * time.Millisecond,
		Retry:       fromPolicy(j.Spec.Policy),
		Metadata:    metadataMap(j.Spec.Metadata),
		ReplayOf:    j.Spec.ReplayOf,
		Queue:       publicQueue(j.Spec.Queue),
		Priority:    int(j.Spec.Priority),
		Schedule:    j.Spec.Schedule,
		Tick:        msTime(j.Spec.Tick),
	}
	if j.State == state.Pending {
		out.DueAt = msTime(j.Due)
	}
	for _, a := range j.Attempts() {
		pa := Attempt{N: int(a.N), StartedAt: msTime(a.StartedAt), Error: a.Error, Output: string(a.Output)}
		if a.Ended {
			pa.EndedAt = msTime(a.EndedAt)
			pa.Outcome = a.Class.String()
			if a.Class == 0 {
				pa.Outcome = "interrupted"
				if a.Error == state.SnoozedError {
					pa.Outcome = "snoozed"
				}
			}
		}
		out.History = append(out.History, pa)
	}
	return out
}

// Job returns a copy of the job with that id, or ErrNotFound.
func (r *Runner) Job(ctx context.Context, id uint64) (Job, error) {
	j, err := r.st.Job(ctx, id)
	if err != nil {
		return Job{}, mapErr(err)
	}
	return publicJob(&j), nil
}

// ListFilter selects jobs for List. Zero fields match everything.
type ListFilter struct {
	State  State
	Kind   string
	Target string
	// Search matches a job whose decimal id it is, or whose idempotency
	// key starts with it (a prefix: the stores answer it from an index).
	Search string
	// After is the cursor: Page.Next of the previous page; 0 starts.
	After uint64
	// Limit is the page size: default 50, at most 1000.
	Limit int
	// Oldest lists the oldest jobs first; the default is newest first.
	Oldest bool
	// Schedule selects the jobs the named schedule made.
	Schedule string
}

// Page is one page of List.
type Page struct {
	Jobs []Job
	// Next is the cursor of the next page; 0 when there is none. A page
	// may hold fewer jobs than the limit, even none, and still have a next
	// one: one call looks at a bounded number of jobs (100 000 in the
	// embedded store), so a filter that matches few of many jobs is paged.
	Next uint64
}

// maxPage bounds a List page.
const maxPage = 1000

// List returns one page of the jobs that match f.
func (r *Runner) List(ctx context.Context, f ListFilter) (Page, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, maxPage)
	jobs, next, err := r.st.List(ctx, store.Filter{
		State: string(f.State), Kind: f.Kind, Target: f.Target, Search: f.Search,
		After: f.After, Limit: limit, Oldest: f.Oldest, Schedule: f.Schedule,
	})
	if err != nil {
		return Page{}, mapErr(err)
	}
	p := Page{Jobs: make([]Job, len(jobs)), Next: next}
	for i := range jobs {
		p.Jobs[i] = publicJob(&jobs[i])
	}
	return p, nil
}

// Stats are the runner's counts of jobs by state, its pool and its targets.
type Stats struct {
	Pending, Running, Succeeded, Failed, Cancelled int
	// PoolSize is Config.Concurrency; InFlight the attempts running now.
	PoolSize, InFlight int
	// OldestDue is the due time of the earliest pending job (queue lag is
	// now minus OldestDue when it is in the past); zero if none is pending.
	OldestDue time.Time
	// Targets lists every target with its breaker.
	Targets []TargetStats
	// Queues lists every queue with its setting and load (Runner.Queues).
	Queues []QueueStats
}

// TargetStats is one target's breaker and load.
type TargetStats struct {
	Target string
	// State is "closed", "open" or "half-open".
	State string
	// OpenUntil is when an open breaker half-opens.
	OpenUntil time.Time
	// RecentFailures counts the failures within the window (closed).
	RecentFailures int
	// ProbesInFlight counts half-open probes running.
	ProbesInFlight int
	// Pending and Running count the target's jobs.
	Pending, Running int
	// Disabled is set while the target is disabled (Runner.EnableTarget),
	// since DisabledAt, for DisabledReason.
	Disabled       bool
	DisabledReason string
	DisabledAt     time.Time
	// FailingSince is when the target's current run of failures began
	// (zero while it is not failing): Config.DisableAfter counts from it.
	FailingSince time.Time
	// Limit is the rate limit in force (the zero Limit: none), Tokens the
	// tokens its bucket holds now.
	Limit  Limit
	Tokens int
	// HoldUntil is when the target's own wait (a Retry-After) ends; zero
	// when it does not hold.
	HoldUntil time.Time
	// RampWindow is, during a slow start after an outage, how many
	// attempts may run at once (0: no slow start); RampInFlight how many
	// admitted during it run.
	RampWindow, RampInFlight int
}

// Stats returns the counts by state, the pool and every target's breaker.
func (r *Runner) Stats(ctx context.Context) (Stats, error) {
	s, err := r.st.Stats(ctx)
	if err != nil {
		return Stats{}, mapErr(err)
	}
	targets, err := r.st.Targets(ctx)
	if err != nil {
		return Stats{}, mapErr(err)
	}
	r.mu.Lock()
	inflight := r.inflight
	r.mu.Unlock()
	out := Stats{
		Pending: s.Counts.Pending, Running: s.Counts.Running, Succeeded: s.Counts.Succeeded,
		Failed: s.Counts.Failed, Cancelled: s.Counts.Cancelled,
		PoolSize: r.cfg.Concurrency, InFlight: inflight,
	}
	if s.HasDue {
		out.OldestDue = msTime(s.OldestDue)
	}
	if out.Queues, err = r.Queues(ctx); err != nil {
		return Stats{}, err
	}
	now, circuit := r.nowMS(), r.cfg.Breaker.circuit()
	for _, t := range targets {
		out.Targets = append(out.Targets, targetStats(t, circuit, now))
	}
	return out, nil
}

// targetStats converts a store's target, its breaker as it stands at now
// (retry.Breaker.At: an open breaker past its cooldown is half-open).
func targetStats(t store.TargetInfo, c retry.Circuit, now int64) TargetStats {
	b := t.Breaker.At(c, now)
	ts := TargetStats{Target: t.Target, State: b.State.String(), Pending: t.Pending, Running: t.Running}
	if l := t.Life; l.Disabled {
		ts.Disabled, ts.DisabledReason, ts.DisabledAt = true, l.Reason, msTime(l.DisabledAt)
	}
	if l := t.Life; l.Failing {
		ts.FailingSince = msTime(l.FailingSince)
	}
	switch b.State {
	case retry.Open:
		ts.OpenUntil = msTime(b.Until)
	case retry.HalfOpen:
		ts.ProbesInFlight = b.Busy
	case retry.Closed:
		ts.RecentFailures = len(b.Fails)
	}
	flowStats(&ts, t.Flow, t.Limit, now)
	return ts
}
