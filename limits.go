package runlog

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// Limit is a target's rate limit: a token bucket of Burst tokens that
// refills at Rate tokens per second; each attempt of the target takes one,
// and a job that finds none is deferred to its token, no attempt counted.
// The zero Limit is no limit.
type Limit struct {
	// Rate is in attempts per second, 0.001 to 1,000,000 (kept to the
	// thousandth); 0 for no limit.
	Rate float64
	// Burst is how many attempts may start at once after a quiet time,
	// 1 to 1,000,000; 0 takes 1.
	Burst int
}

// DefaultMaxRetryAfter is the default of Config.MaxRetryAfter.
const DefaultMaxRetryAfter = 24 * time.Hour

// limit converts l to the retry package's form, with its defaults, or says
// what to change.
func (l Limit) limit() (retry.Limit, error) {
	if l.Rate == 0 {
		if l.Burst != 0 {
			return retry.Limit{}, fmt.Errorf("%w: a burst of %d without a rate; give a rate above 0, or neither to remove the limit", ErrInvalid, l.Burst)
		}
		return retry.Limit{}, nil
	}
	if math.IsNaN(l.Rate) || l.Rate < 0.001 || l.Rate > retry.MaxRateMilli/1000 {
		return retry.Limit{}, fmt.Errorf("%w: rate %v per second; give one between 0.001 and %d (0 removes the limit)", ErrInvalid, l.Rate, retry.MaxRateMilli/1000)
	}
	rl := retry.Limit{RateMilli: int64(math.Round(l.Rate * 1000)), Burst: max(l.Burst, 1)}
	if l.Burst < 0 {
		rl.Burst = l.Burst
	}
	if err := rl.Validate(); err != nil {
		return retry.Limit{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return rl, nil
}

// fromLimit converts a stored limit back.
func fromLimit(l retry.Limit) Limit {
	if l.IsZero() {
		return Limit{}
	}
	return Limit{Rate: float64(l.RateMilli) / 1000, Burst: l.Burst}
}

// limitConfig returns the configured limits in the state's form (nil for
// none); c was validated.
func (c Config) limitConfig() *state.LimitConfig {
	if c.RateLimit == (Limit{}) && len(c.Limits) == 0 {
		return nil
	}
	lc := &state.LimitConfig{}
	lc.Default, _ = c.RateLimit.limit()
	if len(c.Limits) > 0 {
		lc.PerTarget = make(map[string]retry.Limit, len(c.Limits))
		for t, l := range c.Limits {
			lc.PerTarget[t], _ = l.limit()
		}
	}
	return lc
}

// validateLimits reports the first invalid limit of c.
func (c Config) validateLimits() error {
	// The field first, then the reason limit gives (after ErrInvalid's
	// text), as validate words the other fields' errors.
	reason := func(err error) string { return strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ") }
	if _, err := c.RateLimit.limit(); err != nil {
		return fmt.Errorf("%w: RateLimit: %s", ErrInvalid, reason(err))
	}
	for t, l := range c.Limits {
		if _, err := l.limit(); err != nil {
			return fmt.Errorf("%w: Limits[%q]: %s", ErrInvalid, t, reason(err))
		}
	}
	if c.MaxRetryAfter < 0 {
		return fmt.Errorf("%w: MaxRetryAfter %v must be >= 0", ErrInvalid, c.MaxRetryAfter)
	}
	return nil
}

// SetLimit sets the rate limit of target from now on, durably (a journaled
// op, or a row every PostgreSQL node shares), overriding Config.Limits and
// Config.RateLimit; the zero Limit removes it, and the target then has no
// limit at all. It survives restarts; the bucket's state is derived from
// the attempts started, so a restart does not refill it.
func (r *Runner) SetLimit(ctx context.Context, target string, l Limit) error {
	rl, err := l.limit()
	if err != nil {
		return err
	}
	if err := r.st.SetLimit(ctx, r.nowMS(), target, rl); err != nil {
		return mapErr(err)
	}
	r.signal() // a lifted limit lets held jobs start
	return nil
}

// flowStats fills in the flow control fields of ts from f under lim at now.
func flowStats(ts *TargetStats, f state.Flow, lim retry.Limit, now int64) {
	ts.Limit = fromLimit(lim)
	if !lim.IsZero() {
		ts.Tokens = f.Bucket.Tokens(lim, now)
	}
	if f.Hold > now {
		ts.HoldUntil = msTime(f.Hold)
	}
	ts.RampWindow, ts.RampInFlight = f.Ramp.Window, f.Ramp.Busy
}
