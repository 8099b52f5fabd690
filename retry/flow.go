package retry

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidLimit is wrapped by Limit.Validate for a limit it rejects.
var ErrInvalidLimit = errors.New("retry: invalid rate limit")

// The bounds of a Limit.
const (
	// MaxRateMilli is the highest rate: 1,000,000 attempts per second (one
	// every microsecond, the bucket's resolution).
	MaxRateMilli = 1_000_000_000
	// MaxBurst is the largest burst.
	MaxBurst = 1_000_000
)

// Limit is a target's rate limit: a token bucket that holds up to Burst
// tokens and gains RateMilli/1000 tokens per second; each attempt takes
// one. The zero Limit is no limit.
type Limit struct {
	// RateMilli is the rate in thousandths of an attempt per second (100
	// attempts per second is 100000), 1 to MaxRateMilli; 0 for no limit.
	RateMilli int64
	// Burst is how many tokens the bucket holds, 1 to MaxBurst: how many
	// attempts may start at once after a quiet time.
	Burst int
}

// IsZero reports whether l is no limit.
func (l Limit) IsZero() bool { return l.RateMilli == 0 }

// Validate reports whether l can be used, and if not, what to change. The
// zero Limit (no limit) is valid. The error wraps ErrInvalidLimit.
func (l Limit) Validate() error {
	switch {
	case l.RateMilli == 0 && l.Burst == 0:
		return nil
	case l.RateMilli < 1 || l.RateMilli > MaxRateMilli:
		return fmt.Errorf("%w: rate %g per second; set it between 0.001 and %d per second (0 removes the limit)", ErrInvalidLimit, float64(l.RateMilli)/1000, MaxRateMilli/1000)
	case l.Burst < 1 || l.Burst > MaxBurst:
		return fmt.Errorf("%w: burst %d; set it between 1 and %d", ErrInvalidLimit, l.Burst, MaxBurst)
	}
	return nil
}

// Interval returns the time one token takes to come back, in
// microseconds (at least 1): 10⁹/RateMilli, rounded down.
func (l Limit) Interval() int64 {
	if l.RateMilli <= 0 {
		return 1
	}
	return max(int64(1e9)/l.RateMilli, 1)
}

// tolerance returns how far ahead of a time the bucket's TAT may be while
// a token is still left: (Burst-1) intervals.
func (l Limit) tolerance() int64 {
	return mulSat(int64(max(l.Burst, 1)-1), l.Interval())
}

// Bucket is the state of a target's token bucket, kept as the generic cell
// rate algorithm keeps it: TAT, the theoretical arrival time, in
// microseconds since the Unix epoch, is when the bucket will be full again
// less one token; at t the bucket holds min(Burst, Burst - (TAT - t) /
// Interval) tokens. The zero Bucket (any TAT at or before now) is full. A
// Bucket is a value: Take returns a new one.
//
//	tokens(t)   = Burst                                 when TAT ≤ t
//	            = ⌊(t + (Burst-1)·I + I − TAT) / I⌋     otherwise, ≥ 0
//	admits at t ⟺ TAT − (Burst-1)·I ≤ t ⟺ tokens(t) ≥ 1
//	Take at t:    TAT ← max(TAT, t) + I
//
// Over any span of d ms the bucket admits at most Burst + ⌊d·1000/I⌋
// attempts.
type Bucket struct {
	// TAT is the theoretical arrival time in µs since the Unix epoch.
	TAT int64
}

// micros returns ms in microseconds, saturating.
func micros(ms int64) int64 { return mulSat(ms, 1000) }

// Admits reports whether the bucket has a token at now (ms) under l. The
// zero Limit admits always.
func (b Bucket) Admits(l Limit, now int64) bool {
	if l.IsZero() {
		return true
	}
	return b.TAT-l.tolerance() <= micros(now)
}

// Take returns the bucket after an attempt started at now (ms) under l,
// whether or not it had a token (a journaled start is the truth on
// replay). Under the zero Limit the bucket does not change.
func (b Bucket) Take(l Limit, now int64) Bucket {
	if l.IsZero() {
		return b
	}
	return Bucket{TAT: addSat(max(b.TAT, micros(now)), l.Interval())}
}

// NextAdmit returns the first ms at or after now at which the bucket will
// have a token under l, if no attempt takes one before.
func (b Bucket) NextAdmit(l Limit, now int64) int64 {
	if b.Admits(l, now) {
		return now
	}
	t := b.TAT - l.tolerance() // µs, > now·1000
	return max((t+999)/1000, now)
}

// Tokens returns how many whole tokens the bucket holds at now under l (0
// under the zero Limit: there is no bucket).
func (b Bucket) Tokens(l Limit, now int64) int {
	if l.IsZero() {
		return 0
	}
	t := micros(now)
	if b.TAT <= t {
		return l.Burst
	}
	n := (t + l.tolerance() + l.Interval() - b.TAT) / l.Interval()
	return int(min(max(n, 0), int64(l.Burst)))
}

// Full reports whether the bucket is full at now: then it behaves as the
// zero Bucket, and need not be kept.
func (b Bucket) Full(now int64) bool { return b.TAT <= micros(now) }

// Ramp is a target's slow start after an outage: while Window is above 0,
// at most Window of the target's attempts run at once (Busy counts those
// admitted since the ramp began that have not ended), and each success
// widens the window by one, which doubles it per round of attempts: 1, 2,
// 4, 8, … in flight. It ends (the zero Ramp: no bound) when Window reaches
// Circuit.SlowStart. A Ramp is a value: its methods return a new one.
//
//	breaker closes after being open (half-open → closed)  → {Window 1}
//	admission, Busy < Window                               → Busy+1
//	admission, Busy ≥ Window                               → refused (held)
//	an attempt ends                                        → Busy−1 (not below 0)
//	  and it is a success for the breaker                  → Window+1;
//	                                                          zero once Window ≥ SlowStart
//	breaker opens                                          → zero
type Ramp struct {
	// Window is how many attempts may run at once; 0 when not ramping.
	Window int
	// Busy is how many attempts admitted during the ramp have not ended.
	Busy int
}

// IsZero reports whether r is the zero Ramp: no ramp.
func (r Ramp) IsZero() bool { return r.Window == 0 && r.Busy == 0 }

// BeginRamp returns the ramp of a target whose breaker just closed after
// being open under c: a window of 1, or the zero Ramp when c.SlowStart is
// 1 or less (no slow start).
func BeginRamp(c Circuit) Ramp {
	if c.SlowStart <= 1 {
		return Ramp{}
	}
	return Ramp{Window: 1}
}

// Admits reports whether the ramp admits one more attempt now.
func (r Ramp) Admits() bool { return r.Window == 0 || r.Busy < r.Window }

// Start returns the ramp after an attempt of its target started (even one
// it would refuse: a journaled start is the truth on replay).
func (r Ramp) Start() Ramp {
	if r.Window > 0 {
		r.Busy++
	}
	return r
}

// End returns the ramp after an attempt of its target ended under c;
// success is whether the breaker counts it as a success (an interrupted
// attempt, with no outcome, is neither: it only frees its place).
func (r Ramp) End(c Circuit, success bool) Ramp {
	if r.Window == 0 {
		return r
	}
	r.Busy = max(r.Busy-1, 0)
	if success {
		r.Window++
		if r.Window >= c.SlowStart {
			return Ramp{}
		}
	}
	return r
}

// mulSat returns a·b for a, b ≥ 0, saturating at math.MaxInt64 (and at
// math.MinInt64 for a negative a).
func mulSat(a, b int64) int64 {
	if b == 0 || a == 0 {
		return 0
	}
	if a > 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	if a < 0 && a < math.MinInt64/b {
		return math.MinInt64
	}
	return a * b
}
