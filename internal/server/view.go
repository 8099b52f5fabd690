package server

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

// Job is the JSON form of a job in the API (GET /v1/jobs/{id}, and the items
// of GET /v1/jobs, which leave out History). Times are RFC 3339 and left out
// when zero.
type Job struct {
	ID          uint64          `json:"id"`
	State       runlog.State    `json:"state"`
	Kind        string          `json:"kind"`
	Target      string          `json:"target"`
	Key         string          `json:"key"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	LastError   string          `json:"last_error"`
	Reason      string          `json:"reason"`
	EnqueuedAt  time.Time       `json:"enqueued_at,omitzero"`
	DueAt       time.Time       `json:"due_at,omitzero"`
	FinishedAt  time.Time       `json:"finished_at,omitzero"`
	Timeout     string          `json:"timeout,omitempty"`
	Retry       *Retry          `json:"retry,omitempty"`
	Payload     json.RawMessage `json:"payload"`
	// Metadata is the job's string metadata; left out when it has none.
	Metadata map[string]string `json:"metadata,omitempty"`
	// ReplayOf is the job this one re-sends (POST /v1/jobs/{id}/replay);
	// left out when it is none.
	ReplayOf uint64    `json:"replay_of,omitempty"`
	History  []Attempt `json:"history,omitzero"`
	Queue    string    `json:"queue"`
	Priority int       `json:"priority"`
	// Schedule and Tick name the schedule and tick that made the job.
	Schedule string    `json:"schedule,omitempty"`
	Tick     time.Time `json:"tick,omitzero"`
}

// Retry is the JSON form of a job's retry policy; durations are Go duration
// strings.
type Retry struct {
	Attempts int    `json:"attempts"`
	Base     string `json:"base"`
	Cap      string `json:"cap"`
	Deadline string `json:"deadline,omitempty"`
}

// Attempt is the JSON form of one attempt in a job's history.
type Attempt struct {
	N         int       `json:"n"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	Outcome   string    `json:"outcome"`
	Error     string    `json:"error"`
	// Output is what the attempt recorded; for an http delivery, the
	// status line and the first bytes of the body (Delivery has the rest).
	Output string `json:"output"`
	// Delivery is the delivery log of an http attempt: status, a bounded
	// set of response headers, the first bytes of the body, the duration
	// and the remote address.
	Delivery *kinds.Delivery `json:"delivery,omitempty"`
}

// JobList is the answer of GET /v1/jobs. Next is the cursor of the next page
// (pass it as ?after=), empty on the last page.
type JobList struct {
	Jobs []Job  `json:"jobs"`
	Next string `json:"next"`
}

// Created is the answer of POST /v1/jobs: 201 with Existing false for a new
// job, 200 with Existing true when the idempotency key was already held.
type Created struct {
	ID       uint64 `json:"id"`
	Existing bool   `json:"existing"`
}

// CreatedBatch is the answer of POST /v1/jobs/batch: one item per job, in
// the order of the request.
type CreatedBatch struct {
	Jobs []Created `json:"jobs"`
}

// Stats is the answer of GET /v1/stats.
type Stats struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	PoolSize  int `json:"pool_size"`
	// InFlight is how many attempts are running now.
	InFlight int `json:"in_flight"`
	// OldestDue is the due time of the oldest pending job that is due.
	OldestDue time.Time `json:"oldest_due,omitzero"`
	// QueueLagSeconds is how long that job has waited past its due time.
	QueueLagSeconds float64 `json:"queue_lag_seconds"`
	Targets         int     `json:"targets"`
	// Queues are the queues with their settings and counts.
	Queues []Queue `json:"queues"`
	// LimitedTargets, HeldTargets and RampingTargets count the targets
	// with a rate limit in force, held by their own wait (Retry-After),
	// and in a slow start after an outage (GET /v1/targets has each).
	LimitedTargets int `json:"limited_targets"`
	HeldTargets    int `json:"held_targets"`
	RampingTargets int `json:"ramping_targets"`
}

// Target is one item of GET /v1/targets: a target's breaker and its jobs.
type Target struct {
	Target         string    `json:"target"`
	State          string    `json:"state"`
	OpenUntil      time.Time `json:"open_until,omitzero"`
	RecentFailures int       `json:"recent_failures"`
	ProbesInFlight int       `json:"probes_in_flight"`
	Pending        int       `json:"pending"`
	Running        int       `json:"running"`
	// Signing says how deliveries to the target are signed: "own" (its
	// secrets, every one listed in Secrets), "default" (the server's
	// --signing-secret-file) or "none".
	Signing string `json:"signing"`
	// Secrets are the target's own secrets: ids and creation times, never
	// the secrets.
	Secrets []SecretInfo `json:"secrets"`
	// Disabled is set while the target is disabled (it answered 410 Gone,
	// or failed for --disable-after): its jobs are kept, not attempted,
	// until POST /v1/targets/enable; since DisabledAt, for DisabledReason.
	Disabled       bool      `json:"disabled"`
	DisabledReason string    `json:"disabled_reason,omitempty"`
	DisabledAt     time.Time `json:"disabled_at,omitzero"`
	// FailingSince is when the target's current run of failures began.
	FailingSince time.Time `json:"failing_since,omitzero"`
	// The target's flow control: its rate limit and tokens, its own wait
	// (hold_until) and its slow start after an outage (ramp).
	targetFlow
}

// TargetList is the answer of GET /v1/targets.
type TargetList struct {
	Targets []Target `json:"targets"`
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}

// jobView converts j; withHistory adds its attempts.
func jobView(j runlog.Job, withHistory bool) Job {
	v := Job{
		ID: j.ID, State: j.State, Kind: j.Kind, Target: j.Target, Key: j.Key,
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		LastError: j.LastError, Reason: j.Reason,
		EnqueuedAt: j.EnqueuedAt, DueAt: j.DueAt, FinishedAt: j.FinishedAt,
		Payload: payloadJSON(j.Payload), Metadata: j.Metadata, ReplayOf: j.ReplayOf,
		Queue: j.Queue, Priority: j.Priority,
	}
	v.Schedule, v.Tick = j.Schedule, j.Tick
	if j.Timeout > 0 {
		v.Timeout = j.Timeout.String()
	}
	if j.Retry != (runlog.RetryPolicy{}) {
		v.Retry = &Retry{Attempts: j.Retry.Attempts, Base: j.Retry.Base.String(), Cap: j.Retry.Cap.String()}
		if j.Retry.Deadline > 0 {
			v.Retry.Deadline = j.Retry.Deadline.String()
		}
	}
	if withHistory {
		v.History = make([]Attempt, 0, len(j.History))
		for _, a := range j.History {
			at := Attempt{N: a.N, StartedAt: a.StartedAt, EndedAt: a.EndedAt, Outcome: a.Outcome, Error: a.Error, Output: a.Output}
			if d, ok := kinds.DecodeDelivery([]byte(a.Output)); ok {
				at.Delivery, at.Output = &d, d.Text()
			}
			v.History = append(v.History, at)
		}
	}
	return v
}

// payloadJSON returns a payload as JSON: as is when it is JSON (every job
// the API enqueued), else as a JSON string.
func payloadJSON(p []byte) json.RawMessage {
	if len(p) > 0 && json.Valid(p) {
		return p
	}
	s, _ := json.Marshal(string(p))
	return s
}

func statsView(s runlog.Stats, now time.Time) Stats {
	v := Stats{
		Pending: s.Pending, Running: s.Running, Succeeded: s.Succeeded,
		Failed: s.Failed, Cancelled: s.Cancelled, PoolSize: s.PoolSize, InFlight: s.InFlight,
		OldestDue: s.OldestDue, QueueLagSeconds: queueLag(s.OldestDue, now).Seconds(),
		Targets: len(s.Targets), Queues: queuesView(s.Queues).Queues,
	}
	for _, t := range s.Targets {
		if t.Limit != (runlog.Limit{}) {
			v.LimitedTargets++
		}
		if !t.HoldUntil.IsZero() {
			v.HeldTargets++
		}
		if t.RampWindow > 0 {
			v.RampingTargets++
		}
	}
	return v
}

// queueLag is how long the oldest due job has waited.
func queueLag(oldestDue, now time.Time) time.Duration {
	if oldestDue.IsZero() || oldestDue.After(now) {
		return 0
	}
	return now.Sub(oldestDue)
}

// targetsView lists the targets of s (those with jobs or a breaker) and
// those that have secrets of their own, in that order.
func targetsView(s runlog.Stats, secrets map[string][]SecretInfo, hasDefault bool) TargetList {
	v := TargetList{Targets: make([]Target, 0, len(s.Targets))}
	signing := func(t string) string {
		switch {
		case len(secrets[t]) > 0:
			return "own"
		case hasDefault:
			return "default"
		}
		return "none"
	}
	listed := make(map[string]bool, len(s.Targets))
	for _, t := range s.Targets {
		listed[t.Target] = true
		v.Targets = append(v.Targets, Target{
			Target: t.Target, State: t.State, OpenUntil: t.OpenUntil, RecentFailures: t.RecentFailures,
			ProbesInFlight: t.ProbesInFlight, Pending: t.Pending, Running: t.Running,
			Signing: signing(t.Target), Secrets: orEmpty(secrets[t.Target]),
			targetFlow: flowView(t),
		})
		lifeFields(&v.Targets[len(v.Targets)-1], t)
	}
	var rest []string
	for t := range secrets {
		if !listed[t] {
			rest = append(rest, t)
		}
	}
	slices.Sort(rest)
	for _, t := range rest {
		v.Targets = append(v.Targets, Target{Target: t, State: "closed", Signing: signing(t), Secrets: secrets[t]})
	}
	return v
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func cursor(next uint64) string {
	if next == 0 {
		return ""
	}
	return strconv.FormatUint(next, 10)
}
