package runlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// The endpoint lifecycle: a target that answered gone (Gone, an http 410)
// or has failed for Config.DisableAfter with no success is disabled. Its
// jobs are kept pending and are not attempted (nor deferred again and
// again: held, as a paused queue's are) until EnableTarget; an enqueue to
// it is still accepted. Unlike the breaker, nothing enables it on its own.

// DefaultDisableAfter is Config.DisableAfter's default: a target failing
// for 5 days with no success is disabled.
const DefaultDisableAfter = 5 * 24 * time.Hour

// ErrTargetNotDisabled: EnableTarget of a target that is not disabled
// (or that the runner does not know).
var ErrTargetNotDisabled = errors.New("runlog: target is not disabled")

// Gone marks err as the target's answer that it no longer exists (an http
// 410 Gone): the job fails now, as with Permanent, and the target is
// disabled: its other jobs are kept pending, not attempted, until
// Runner.EnableTarget.
func Gone(err error) error {
	return &outcomeError{class: retry.Permanent, after: -1, err: err, gone: true}
}

// isGone reports whether a handler's error is Gone.
func isGone(err error) bool {
	var oe *outcomeError
	return errors.As(err, &oe) && oe.gone
}

// TargetObserver is an Observer that is also told of targets disabled and
// enabled (for the server's runlog_target_transitions_total). The runner
// checks for it with a type assertion. Its method must not block.
type TargetObserver interface {
	TargetChanged(TargetEvent)
}

// TargetEvent is a target disabled (by an outcome) or enabled (by hand).
type TargetEvent struct {
	Target string
	// Disabled is true for a disable, false for an enable.
	Disabled bool
	// Reason says why the target was disabled.
	Reason string
	// Gone is set for a disable by a gone answer, clear for one by the
	// failing time.
	Gone bool
}

// EnableTarget enables the disabled target: its held jobs are attempted
// again at once, and its failing time starts afresh. It returns the
// target, or ErrTargetNotDisabled.
func (r *Runner) EnableTarget(ctx context.Context, target string) (TargetStats, error) {
	if err := r.usable(); err != nil {
		return TargetStats{}, err
	}
	t, err := r.st.EnableTarget(ctx, r.nowMS(), target)
	if errors.Is(err, store.ErrNotDisabled) {
		return TargetStats{}, fmt.Errorf("%w: %q (GET /v1/targets or runlog targets lists the disabled ones)", ErrTargetNotDisabled, target)
	}
	if err != nil {
		return TargetStats{}, mapErr(err)
	}
	r.unblock()
	r.log.Info("runlog: target enabled by hand; its held jobs are attempted again", "target", target, "pending", t.Pending)
	if o, ok := r.cfg.Observer.(TargetObserver); ok {
		o.TargetChanged(TargetEvent{Target: target})
	}
	return targetStats(t, r.cfg.Breaker.circuit(), r.nowMS()), nil
}

// Targets returns every target the runner knows (with a breaker that
// remembers something, jobs pending or running, a failing time or a
// disable), sorted by name.
func (r *Runner) Targets(ctx context.Context) ([]TargetStats, error) {
	ts, err := r.st.Targets(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	now, c := r.nowMS(), r.cfg.Breaker.circuit()
	out := make([]TargetStats, len(ts))
	for i, t := range ts {
		out[i] = targetStats(t, c, now)
	}
	return out, nil
}

// targetDisabled is the store's Notify.TargetDisabled: it logs the disable
// and tells the observer.
func (r *Runner) targetDisabled(target, reason string) {
	if o, ok := r.cfg.Observer.(TargetObserver); ok {
		o.TargetChanged(TargetEvent{Target: target, Disabled: true, Reason: reason, Gone: isGoneReason(reason)})
	}
	r.log.Warn("runlog: target disabled: its jobs are kept and not attempted until it is enabled by hand (runlog target enable, POST /v1/targets/enable)",
		"target", target, "reason", reason)
}

// isGoneReason reports whether a disable's reason is a gone answer's
// (state.DisableRule writes it so).
func isGoneReason(reason string) bool { return strings.HasPrefix(reason, state.GoneReason) }

// disableAfterMS converts Config.DisableAfter for the stores: 0 (never)
// for a negative one.
func (c Config) disableAfterMS() int64 {
	if c.DisableAfter < 0 {
		return 0
	}
	return c.DisableAfter.Milliseconds()
}
