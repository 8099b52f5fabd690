package state

import (
	"fmt"

	"github.com/runlog/runlog/retry"
)

// Kind is the kind of an op: one journal record each.
type Kind uint8

// The ops. The values are part of the record format and must never change.
const (
	// OpEnqueue adds a pending job: ID, At (when it was enqueued), Due,
	// Spec.
	OpEnqueue Kind = iota + 1
	// OpStart begins attempt Attempt of a due pending job at At; it also
	// runs the admission of the job's target breaker at At.
	OpStart
	// OpSucceed ends attempt Attempt with a success: the job succeeded.
	OpSucceed
	// OpFail makes the job dead (failed) with the reason Error. Attempt
	// is the attempt it ends, or 0 when admission refused a pending job
	// (deadline passed, attempts spent).
	OpFail
	// OpRequeue ends attempt Attempt with a failure that counts against the
	// job's budget and puts the job back in the queue: pending again at Due,
	// the automatic retry after a retryable failure. (Code 5; named OpRetry
	// before the manual retry took that name.)
	OpRequeue
	// OpDefer moves a pending job to Due because its target's breaker
	// refused it; no attempt is counted.
	OpDefer
	// OpCancel cancels a pending or running job with the reason Error.
	OpCancel
	// OpRetry makes a failed (or cancelled) job pending again at Due with a
	// fresh budget: the operator's retry (Runner.Retry, POST
	// /v1/jobs/{id}/retry, runlog retry ID). (Code 8; named OpRevive
	// before.)
	OpRetry
	// OpExpire drops, at At, every finished job whose retention (by the
	// op's Retention) has run out, and releases its idempotency key. ID is
	// 0: it is about no one job.
	OpExpire
	// OpQueue gives the queue Queue.Name the setting Queue (its
	// concurrency, whether it is paused). ID is 0. (Code 10.)
	OpQueue
	// OpSnooze ends attempt Attempt as the handler asked: the job is
	// pending again at Due with no failure counted (its retry budget is
	// unchanged) and no effect on its target's breaker but the release of
	// a half-open probe slot the attempt held. (Code 11.)
	OpSnooze
)

// OpSchedule changes a schedule (Op.Sched: create, update, pause, resume,
// delete, or skip ticks); ID is 0. (Codes 10-12 belong to queues and
// limits.)
const OpSchedule Kind = 13

// OpLimit sets, at At, the rate limit of Target at run time: Limit, which
// overrides the configured one; a zero Limit removes the limit (the
// target then has none, even if one is configured). ID is 0. (Code 12.)
const OpLimit Kind = 12

// String returns the op's name ("enqueue", "start", …) or "kind(N)".
func (k Kind) String() string {
	switch k {
	case OpEnqueue:
		return "enqueue"
	case OpStart:
		return "start"
	case OpSucceed:
		return "succeed"
	case OpFail:
		return "fail"
	case OpRequeue:
		return "requeue"
	case OpDefer:
		return "defer"
	case OpCancel:
		return "cancel"
	case OpRetry:
		return "retry"
	case OpExpire:
		return "expire"
	case OpQueue:
		return "queue"
	case OpSnooze:
		return "snooze"
	case OpSchedule:
		return "schedule"
	case OpTarget:
		return "target"
	case OpDiscard:
		return "discard"
	case OpLimit:
		return "limit"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// jobless reports whether ops of kind k are about no one job (ID 0).
func (k Kind) jobless() bool {
	return k == OpExpire || k == OpQueue || k == OpLimit || k == OpSchedule || k == OpTarget
}

// outcome reports whether k ends an attempt with a class (OpSnooze ends
// one without).
func (k Kind) outcome() bool { return k == OpSucceed || k == OpFail || k == OpRequeue }

// Op is one state change, the unit the engine journals before applying it.
// Fields a kind does not use are zero (and are not encoded).
type Op struct {
	// Kind is what the op does.
	Kind Kind
	// ID is the job's id (1 or more).
	ID uint64
	// At is when the op happened, in ms since the Unix epoch: the enqueue
	// time, the start's now, the outcome's time, the cancel time.
	At int64
	// Due is the job's new due time: for OpEnqueue, OpRequeue (the next
	// try), OpDefer (when the breaker may admit), OpRetry and OpSnooze.
	Due int64
	// Attempt is, for OpStart, the attempt it begins (attempts started
	// so far + 1); for an outcome op, the attempt it ends, or 0 for an
	// OpFail that is not tied to an attempt.
	Attempt uint32
	// Spec is the job's definition, for OpEnqueue only. Apply keeps the
	// pointer: the caller must not modify it afterwards.
	Spec *Spec
	// Class is, for outcome ops, how the attempt ended (0 when the op is
	// not tied to an attempt).
	Class retry.Class
	// BreakerFailed is, for outcome ops, whether the attempt counts as a
	// failure for its target's breaker.
	BreakerFailed bool
	// Error is the reason of OpFail and OpCancel and the error text of
	// OpRequeue.
	Error string
	// Output is, for outcome ops, the attempt's output, already bounded
	// by the caller. Apply keeps it: the caller must not modify it
	// afterwards.
	Output []byte
	// Retention is, for OpExpire only, how long finished jobs are kept.
	Retention *Retention
	// Queue is, for OpQueue only, the queue's new setting.
	Queue *QueueSetting
	// HoldUntil is, for outcome ops, when the target's own wait ends (the
	// server's Retry-After): no job of the target starts before it. 0 for
	// none.
	HoldUntil int64
	// Target and Limit are, for OpLimit only, the target and its limit.
	Target string
	Limit  retry.Limit
	// Image is, for OpRetry only, the job as it was when it finished
	// (spec, payload, history, partition): what a store that evicted the
	// job needs to bring it back, so that replay never depends on what the
	// store kept elsewhere. Nil in records written before version 2.
	Image *Job
	// Sched is, for OpSchedule only, the schedule change.
	Sched *ScheduleChange
	// Life is, for OpTarget only, the disable or enable of a target.
	Life *TargetChange
}

// Retention says how long finished jobs are kept after they finished, by
// their state, with overrides per job kind. A duration <= 0 keeps forever.
// The engine journals it in each OpExpire, so that replay drops exactly
// what the live state dropped, whatever the configuration is later.
type Retention struct {
	SucceededMS, CancelledMS, FailedMS int64
	// PerKind overrides the durations for some kinds; sorted by Kind, each
	// kind at most once.
	PerKind []KindRetention
}

// KindRetention is the retention of one job kind.
type KindRetention struct {
	Kind                               string
	SucceededMS, CancelledMS, FailedMS int64
}

// ttl returns how long a finished job in state st of kind is kept.
func (r *Retention) ttl(kind string, st JobState) int64 {
	s, c, f := r.SucceededMS, r.CancelledMS, r.FailedMS
	for i := range r.PerKind {
		if r.PerKind[i].Kind == kind {
			k := &r.PerKind[i]
			s, c, f = k.SucceededMS, k.CancelledMS, k.FailedMS
			break
		}
	}
	switch st {
	case Succeeded:
		return s
	case Cancelled:
		return c
	case Failed:
		return f
	}
	return 0
}

// Spec is what a job is: its definition, fixed at enqueue.
type Spec struct {
	// Kind names the handler that runs the job.
	Kind string
	// Target names the downstream the job talks to; one breaker per
	// target.
	Target string
	// Payload is the job's input, opaque to runlog.
	Payload []byte
	// Key is the idempotency key; "" for none.
	Key string
	// Policy is the job's retry policy.
	Policy retry.Policy
	// TimeoutMS bounds one attempt, in ms; 0 for none.
	TimeoutMS int64

	// The fields below are the spec's extension (see SpecExt): each is
	// encoded only when it is not zero, so a spec that leaves them zero is
	// written exactly as before they existed.

	// Queue names the job's queue; "" is the default queue, whose public
	// name is "default" (callers store "default" as "").
	Queue string
	// Priority orders the due jobs of one queue: a higher priority starts
	// first; 0 by default.
	Priority int32
	// Schedule names the schedule whose tick made the job; "" for a job
	// enqueued by hand.
	Schedule string
	// Tick is the time (ms since the Unix epoch) of the schedule's tick
	// that made the job; 0 when Schedule is "".
	Tick int64
	// Metadata is the job's string metadata (a trace context, a tenant),
	// sorted by key, each key once; nil for none. Apply keeps the slice:
	// the caller must not modify it afterwards.
	Metadata []Meta
	// ReplayOf is the id of the finished job this job re-sends (a replay:
	// Runner.Replay, POST /v1/jobs/{id}/replay); 0 for none.
	ReplayOf uint64
}

// Meta is one entry of a job's metadata.
type Meta struct {
	Key, Value string
}

// HasExt reports whether any of the spec's extension fields is set: only
// then does its encoding carry an extension block.
func (sp *Spec) HasExt() bool {
	return sp.Queue != "" || sp.Priority != 0 || sp.Schedule != "" || sp.Tick != 0 || len(sp.Metadata) > 0 || sp.ReplayOf != 0
}
