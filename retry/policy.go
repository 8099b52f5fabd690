package retry

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidPolicy is wrapped by Policy.Validate for a policy it rejects.
var ErrInvalidPolicy = errors.New("retry: invalid policy")

// Policy is how often and how patiently a job is tried.
//
// The zero Policy is invalid (Attempts 0); start from DefaultPolicy.
type Policy struct {
	// Attempts is the number of attempts a job may start, the first one
	// included. It must be 1 or more.
	Attempts int
	// BaseMS is the first backoff in ms (before jitter). It must be 0 or more.
	BaseMS int64
	// CapMS is the longest wait in ms of the backoff (a server-supplied
	// wait is not capped by it: see Wait). It must be BaseMS or more.
	CapMS int64
	// DeadlineMS, when above 0, is how many ms after the job's first due
	// time no attempt may start any more. 0 means no deadline.
	DeadlineMS int64
}

// DefaultPolicy returns the policy a job gets when it names none: 10
// attempts, a backoff from 500 ms doubling up to 30 s, and no deadline.
func DefaultPolicy() Policy {
	return Policy{Attempts: 10, BaseMS: 500, CapMS: 30000}
}

// Validate reports whether p can be used, and if not, what to change.
// The error wraps ErrInvalidPolicy.
func (p Policy) Validate() error {
	switch {
	case p.Attempts < 1:
		return fmt.Errorf("%w: Attempts is %d; set it to 1 or more (the first attempt counts)", ErrInvalidPolicy, p.Attempts)
	case p.BaseMS < 0:
		return fmt.Errorf("%w: BaseMS is %d; set it to 0 or more", ErrInvalidPolicy, p.BaseMS)
	case p.CapMS < p.BaseMS:
		return fmt.Errorf("%w: CapMS (%d) is below BaseMS (%d); set CapMS to BaseMS or more", ErrInvalidPolicy, p.CapMS, p.BaseMS)
	case p.DeadlineMS < 0:
		return fmt.Errorf("%w: DeadlineMS is %d; set it to 0 (no deadline) or more", ErrInvalidPolicy, p.DeadlineMS)
	}
	return nil
}

// Budget is what a job may still spend: attempts and time.
type Budget struct {
	// Left is how many attempts may still start, the next one included.
	Left int
	// Deadline is the time at or after which no attempt may start; it
	// applies only when HasDeadline is true.
	Deadline int64
	// HasDeadline says whether Deadline applies.
	HasDeadline bool
}

// BudgetFor returns the budget of a job under policy p that has failed
// fails attempts so far and was first due at firstDue: Left = Attempts − fails, never below 0, and a
// deadline at firstDue + DeadlineMS when the policy has one.
func BudgetFor(p Policy, fails int, firstDue int64) Budget {
	b := Budget{Left: max(p.Attempts-max(fails, 0), 0)}
	if p.DeadlineMS > 0 {
		b.Deadline = addSat(firstDue, p.DeadlineMS)
		b.HasDeadline = true
	}
	return b
}

// Delay returns the backoff before retry n (0 for the first retry):
// min(CapMS, BaseMS·2^n), doubled one step at a time so that it never
// passes CapMS and never overflows. A negative n counts as 0.
func Delay(p Policy, n int) int64 {
	d := min(p.BaseMS, p.CapMS)
	for i := 0; i < n && d > 0 && d < p.CapMS; i++ {
		if d > p.CapMS-d {
			return p.CapMS
		}
		d += d
	}
	return d
}

// Jitter returns the equal jitter of a delay d for the random value
// r: ⌊d/2⌋ + r mod (⌊d/2⌋+1), a wait in [⌊d/2⌋, 2⌊d/2⌋] (at most d) for
// every r. A negative d counts as 0.
func Jitter(d int64, r uint32) int64 {
	if d <= 0 {
		return 0
	}
	h := d / 2
	return h + int64(r)%(h+1)
}

// Wait returns how long to wait before retry n: the server-supplied wait
// after when it is 0 or more (not capped at CapMS: a target that asks for
// five minutes is called again after five minutes; the caller bounds it,
// runlog at Config.MaxRetryAfter), else the jittered backoff
// Jitter(Delay(p, n), r). A negative after means the server gave none.
func Wait(p Policy, n int, after int64, r uint32) int64 {
	if after >= 0 {
		return after
	}
	return Jitter(Delay(p, n), r)
}

// Class is how an attempt ended.
type Class uint8

// The outcomes of an attempt. The zero Class is none of them: it marks an
// attempt that has not ended, or a record not tied to an attempt.
const (
	// Success: the work is done.
	Success Class = iota + 1
	// Retryable: the attempt failed and another try can help.
	Retryable
	// Permanent: the attempt failed and another try would fail the same
	// way. The target answered, so it counts as a breaker success.
	Permanent
	// Unsafe: the attempt failed in a way that must not be repeated (the
	// work may have had its effect). It counts as a breaker failure.
	Unsafe
)

// String returns "success", "retryable", "permanent" or "unsafe", or
// "class(N)" for any other value.
func (c Class) String() string {
	switch c {
	case Success:
		return "success"
	case Retryable:
		return "retryable"
	case Permanent:
		return "permanent"
	case Unsafe:
		return "unsafe"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Valid reports whether c is one of Success, Retryable, Permanent, Unsafe.
func (c Class) Valid() bool { return c >= Success && c <= Unsafe }

// BreakerFailed reports whether an attempt that ended with class c counts
// as a failure for its target's breaker: a retryable or unsafe failure
// does; a success or a permanent failure (the target answered) does not.
func (c Class) BreakerFailed() bool { return c == Retryable || c == Unsafe }

// Deny is why an admission was refused.
type Deny uint8

// The results of Admit.
const (
	// DenyNone: the attempt is admitted.
	DenyNone Deny = iota
	// DenyLate: the deadline is at or before now.
	DenyLate
	// DenySpent: no attempt is left.
	DenySpent
	// DenyOpen: the breaker does not admit now.
	DenyOpen
)

// String returns "none", "late", "spent" or "open", or "deny(N)".
func (d Deny) String() string {
	switch d {
	case DenyNone:
		return "none"
	case DenyLate:
		return "late"
	case DenySpent:
		return "spent"
	case DenyOpen:
		return "open"
	}
	return fmt.Sprintf("deny(%d)", uint8(d))
}

// Admit decides whether an attempt may start at now. It
// checks the deadline first (DenyLate), then the attempts left (DenySpent),
// then the breaker br under circuit c (DenyOpen). Only an admitted attempt
// takes one attempt from the budget; a denial returns b unchanged. The
// returned breaker is br after its admission and must be kept even on a
// denial.
func Admit(br Breaker, c Circuit, b Budget, now int64) (Breaker, Budget, Deny) {
	if b.HasDeadline && b.Deadline <= now {
		return br, b, DenyLate
	}
	if b.Left <= 0 {
		b.Left = 0
		return br, b, DenySpent
	}
	br, ok := br.Admit(c, now)
	if !ok {
		return br, b, DenyOpen
	}
	b.Left--
	return br, b, DenyNone
}

// PlanAfter decides what follows an attempt that ended at now with class.
// b is the budget Admit left when the attempt started, n the job's
// failures before this attempt, after the server-supplied wait (negative
// for none) and r the random value for jitter.
//
// Any class other than Retryable stops. A retryable failure stops when no
// attempt is left or when the deadline falls at or before now + wait;
// otherwise it returns the wait and stop = false. waitMS is 0 when stop is
// true.
func PlanAfter(class Class, after int64, p Policy, b Budget, n int, now int64, r uint32) (waitMS int64, stop bool) {
	if class != Retryable || b.Left <= 0 {
		return 0, true
	}
	w := Wait(p, n, after, r)
	if b.HasDeadline && b.Deadline <= addSat(now, w) {
		return 0, true
	}
	return w, false
}

// addSat returns a + b for b >= 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
