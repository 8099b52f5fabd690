package retry

import (
	"errors"
	"fmt"
)

// ErrInvalidCircuit is wrapped by Circuit.Validate for a circuit it rejects.
var ErrInvalidCircuit = errors.New("retry: invalid circuit")

// Circuit configures a breaker.
//
// The zero Circuit is invalid (Threshold and Probes 0); start from
// DefaultCircuit.
type Circuit struct {
	// Threshold is how many failures, each inside WindowMS of the newest,
	// open the circuit. It must be 1 or more.
	// A closed breaker keeps the times of up to Threshold-1 recent failures
	// and copies them on each failure, so a huge Threshold with a long
	// window costs time per failure; to switch a breaker off, pair a huge
	// Threshold with a tiny WindowMS.
	Threshold int
	// WindowMS is how long a failure keeps counting, in ms. 0 or more.
	WindowMS int64
	// CooldownMS is how long the circuit stays open, in ms. 0 or more.
	CooldownMS int64
	// Probes is how many attempts a half-open circuit admits at once. It
	// must be 1 or more: with 0 a half-open circuit would admit nothing and
	// deny every attempt forever.
	Probes int
	// SlowStart is the window at which the slow start after an outage
	// ends (see Ramp): when the breaker closes after being open, its
	// target may run 1 attempt at once, one more per success, until
	// SlowStart. 0 or 1: no slow start, every attempt is admitted at once.
	SlowStart int
}

// DefaultCircuit returns the circuit a target gets unless configured: open
// after 5 failures within 60 s, stay open 30 s, then admit 1 probe; once
// closed again, ramp up from 1 attempt at once to 32.
func DefaultCircuit() Circuit {
	return Circuit{Threshold: 5, WindowMS: 60000, CooldownMS: 30000, Probes: 1, SlowStart: 32}
}

// Validate reports whether c can be used, and if not, what to change. The
// error wraps ErrInvalidCircuit.
func (c Circuit) Validate() error {
	switch {
	case c.Threshold < 1:
		return fmt.Errorf("%w: Threshold is %d; set it to 1 or more", ErrInvalidCircuit, c.Threshold)
	case c.WindowMS < 0:
		return fmt.Errorf("%w: WindowMS is %d; set it to 0 or more", ErrInvalidCircuit, c.WindowMS)
	case c.CooldownMS < 0:
		return fmt.Errorf("%w: CooldownMS is %d; set it to 0 or more", ErrInvalidCircuit, c.CooldownMS)
	case c.Probes < 1:
		return fmt.Errorf("%w: Probes is %d; set it to 1 or more, or a half-open circuit would deny every attempt forever", ErrInvalidCircuit, c.Probes)
	case c.SlowStart < 0:
		return fmt.Errorf("%w: SlowStart is %d; set it to 0 or more (0 or 1: no slow start)", ErrInvalidCircuit, c.SlowStart)
	}
	return nil
}

// BreakerState is the state of a breaker.
type BreakerState uint8

// The states of a breaker. The zero value is Closed.
const (
	// Closed admits every attempt and remembers recent failures.
	Closed BreakerState = iota
	// Open denies every attempt until its Until time.
	Open
	// HalfOpen admits up to Circuit.Probes probes; the first to end
	// decides between Closed and Open.
	HalfOpen
)

// String returns "closed", "open" or "half-open", or "state(N)".
func (s BreakerState) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Breaker is the circuit breaker of one target: a value, updated by
// Admit and Done, which return a new Breaker and never modify the
// receiver (nor its Fails array).
//
// The zero Breaker is closed with no failures.
type Breaker struct {
	// State is closed, open or half-open.
	State BreakerState
	// Fails holds, while closed, the times of the failures since the last
	// success that are still inside the window, newest first.
	Fails []int64
	// Until is, while open, the time from which the breaker admits probes.
	Until int64
	// Busy is, while half-open, the number of probes admitted.
	Busy int
}

// Admit reports whether the breaker admits an attempt at now, and returns
// the breaker after that admission:
//
//	closed                       → closed, admitted
//	open, now < Until            → open, denied
//	open, now ≥ Until            → half-open with 1 probe busy, admitted
//	half-open, Busy < Probes     → half-open with Busy+1, admitted
//	half-open, Busy ≥ Probes     → unchanged, denied
//
// (With Probes < 1, which Circuit.Validate rejects, an open breaker past
// Until becomes half-open with 0 probes and denies.)
func (b Breaker) Admit(c Circuit, now int64) (Breaker, bool) {
	switch b.State {
	case Open:
		if now < b.Until {
			return b, false
		}
		if c.Probes < 1 {
			return Breaker{State: HalfOpen}, false
		}
		return Breaker{State: HalfOpen, Busy: 1}, true
	case HalfOpen:
		if b.Busy >= c.Probes {
			return b, false
		}
		b.Busy++
		return b, true
	}
	return b, true
}

// Release ends an attempt that has no outcome (its process stopped while
// it ran, so nothing is known about the target): a half-open breaker frees
// the probe slot it held, so that another probe can go; in any other state
// nothing changes. The attempt counts neither as a success nor as a failure
// of the target.
func (b Breaker) Release() Breaker {
	if b.State == HalfOpen && b.Busy > 0 {
		b.Busy--
	}
	return b
}

// Done returns the breaker after an attempt ended at now, failed or not
// as follows:
//
//	closed, success     → closed with no failures
//	closed, failure     → now + the failures still inside the window;
//	                      open until now + CooldownMS once Threshold are kept
//	open, anything      → unchanged (a late result is ignored)
//	half-open, success  → closed with no failures
//	half-open, failure  → open until now + CooldownMS
//
// The window keeps the leading failures t with now < t + WindowMS and
// drops the rest from the first expired one (the list is newest first).
func (b Breaker) Done(c Circuit, now int64, failed bool) Breaker {
	switch b.State {
	case Open:
		return b
	case HalfOpen:
		if failed {
			return Breaker{State: Open, Until: addSat(now, c.CooldownMS)}
		}
		return Breaker{}
	}
	if !failed {
		return Breaker{}
	}
	kept := 0
	for kept < len(b.Fails) && now < addSat(b.Fails[kept], c.WindowMS) {
		kept++
	}
	if kept+1 >= c.Threshold {
		return Breaker{State: Open, Until: addSat(now, c.CooldownMS)}
	}
	fails := make([]int64, 0, kept+1)
	fails = append(fails, now)
	fails = append(fails, b.Fails[:kept]...)
	return Breaker{Fails: fails}
}

// NextAdmit returns when an attempt the breaker denied at now should be
// tried again: Until while open, now + CooldownMS
// otherwise (a full half-open breaker; a closed one never denies).
//
// It is not named Until because that is the field it reads.
func (b Breaker) NextAdmit(c Circuit, now int64) int64 {
	if b.State == Open {
		return b.Until
	}
	return addSat(now, c.CooldownMS)
}

// At returns the breaker as it stands at now, for display: an open breaker
// whose Until has passed is half-open with no probe busy (the next Admit
// half-opens it), and a closed one keeps only the failures still inside the
// window. The breaker that decides is still b: At changes nothing.
func (b Breaker) At(c Circuit, now int64) Breaker {
	switch b.State {
	case Open:
		if now >= b.Until {
			return Breaker{State: HalfOpen}
		}
	case Closed:
		kept := 0
		for kept < len(b.Fails) && now < addSat(b.Fails[kept], c.WindowMS) {
			kept++
		}
		if kept < len(b.Fails) {
			b.Fails = b.Fails[:kept:kept]
		}
	}
	return b
}

// IsZero reports whether b is the zero Breaker: closed with no failures.
// A map of breakers need not keep those.
func (b Breaker) IsZero() bool {
	return b.State == Closed && len(b.Fails) == 0 && b.Until == 0 && b.Busy == 0
}
