package state

import (
	"fmt"
	"maps"
	"slices"

	"github.com/runlog/runlog/retry"
)

// A target's flow control (docs/semantics.md, "Flow control per target"):
// its rate limit (a token bucket, retry.Bucket), its own wait (a hold,
// from a Retry-After) and its slow start after an outage (retry.Ramp). All
// three are derived from the journaled ops, like the breaker, so that a
// restart resumes them and replay equals live; the PostgreSQL store keeps
// the same Flow in a row per target and applies the same FlowAfter.

// LimitConfig is the rate limits the engine is configured with: Default
// for every target, PerTarget overriding it. A limit set at run time
// (OpLimit) overrides both. It is not journaled: like the circuit, a
// change applies from then on.
type LimitConfig struct {
	// Default is the limit of every target not in PerTarget; the zero
	// Limit for none.
	Default retry.Limit
	// PerTarget holds the limits of some targets (the zero Limit: none).
	PerTarget map[string]retry.Limit
}

// For returns the configured limit of target (nil c: none).
func (c *LimitConfig) For(target string) retry.Limit {
	if c == nil {
		return retry.Limit{}
	}
	if l, ok := c.PerTarget[target]; ok {
		return l
	}
	return c.Default
}

// Flow is one target's flow control state. The zero Flow (no limit set at
// run time, a full bucket, no hold, no ramp) is not kept: a target without
// a limit costs nothing.
type Flow struct {
	// LimitSet: Limit was set at run time (OpLimit) and overrides the
	// configured one; a zero Limit then means no limit at all.
	LimitSet bool
	Limit    retry.Limit
	// Bucket is the token bucket, advanced by every start under a limit.
	Bucket retry.Bucket
	// Reserved is, in µs, the latest start time promised to a job that the
	// limit deferred: the next one is deferred at least one interval later,
	// so that a backlog is spread over the bucket's future tokens instead of
	// coming due all at once again.
	Reserved int64
	// Hold is when the target's own wait (a Retry-After) ends, in ms: no
	// job of the target starts before it. 0 for none.
	Hold int64
	// Ramp is the slow start after an outage.
	Ramp retry.Ramp
}

// IsZero reports whether f is the zero Flow.
func (f Flow) IsZero() bool {
	return !f.LimitSet && f.Limit == (retry.Limit{}) && f.Bucket == (retry.Bucket{}) && f.Reserved == 0 && f.Hold == 0 && f.Ramp.IsZero()
}

// LimitOf returns the limit in force for target with flow f: the one set at
// run time if any, else the configured one.
func LimitOf(c *LimitConfig, target string, f Flow) retry.Limit {
	if f.LimitSet {
		return f.Limit
	}
	return c.For(target)
}

// Settle returns f with what has run out at now dropped: a hold or a
// reservation at or before now, a bucket that is full at now (equal to the
// zero one). FlowAfter settles at every op of the target, and an expire
// settles every kept flow (State.FlowsRunOut says whether one changes);
// the PostgreSQL store applies the same at the same ops and expiries.
func (f Flow) Settle(now int64) Flow {
	if f.Hold <= now {
		f.Hold = 0
	}
	pc := Pace{f.Bucket, f.Reserved}.Settle(now)
	f.Bucket, f.Reserved = pc.Bucket, pc.Reserved
	return f
}

// FlowAfter returns the flow f of a target after op was applied to one of
// its jobs (or to the target, for OpLimit), under the limit in force lim
// (LimitOf, before op), circuit c, with the target's breaker before and
// after op; cfgLimit is the target's configured limit (LimitConfig.For),
// which decides whether OpLimit's removal is kept as an explicit "none".
// It is called only for an op that applied (Step's Change, or always for
// OpLimit). The rules:
//
//   - OpLimit sets the run-time limit (a zero Limit when no configured one
//     is left to override: no entry); a zero limit also empties the bucket
//     and the reservations.
//   - OpStart takes a token (retry.Bucket.Take) and a place in the ramp.
//   - OpDefer of a limited target reserves the slot it was deferred to:
//     Reserved = max(Reserved + interval, the bucket's next token, due − 999 µs).
//   - An outcome of an attempt frees its place in the ramp (widening it on
//     a success for the breaker); an outcome with a HoldUntil holds the
//     target until then (the later of two holds); the breaker opening ends
//     the ramp, and its closing after being half-open begins one.
//   - OpSnooze ends its attempt too: it frees the attempt's place in the
//     ramp, widening nothing (no breaker effect).
//
// Then what has run out at op.At is dropped (Settle).
func FlowAfter(f Flow, lim retry.Limit, c retry.Circuit, before, after retry.Breaker, op *Op, cfgLimit retry.Limit) Flow {
	switch {
	case op.Kind == OpLimit:
		f.Limit = op.Limit
		f.LimitSet = !op.Limit.IsZero() || !cfgLimit.IsZero()
		if op.Limit.IsZero() {
			f.Bucket, f.Reserved = retry.Bucket{}, 0
		}
	case op.Kind == OpStart:
		f.Bucket = f.Bucket.Take(lim, op.At)
		f.Ramp = f.Ramp.Start()
	case op.Kind == OpDefer:
		if !lim.IsZero() {
			f.Reserved = Pace{f.Bucket, f.Reserved}.Reserve(lim, op.At, op.Due).Reserved
		}
	case op.Kind == OpSnooze:
		f.Ramp = f.Ramp.End(c, false)
	case op.Kind.outcome():
		if op.HoldUntil > f.Hold {
			f.Hold = op.HoldUntil
		}
		if op.Attempt != 0 {
			f.Ramp = f.Ramp.End(c, op.Class != 0 && !op.BreakerFailed)
		}
		switch {
		case after.State == retry.Open:
			f.Ramp = retry.Ramp{}
		case before.State == retry.HalfOpen && after.State == retry.Closed:
			f.Ramp = retry.BeginRamp(c)
		}
	}
	return f.Settle(op.At)
}

// micros returns ms in µs, saturating.
func micros(ms int64) int64 {
	switch {
	case ms > 9_223_372_036_854_775:
		return 1<<63 - 1
	case ms < -9_223_372_036_854_775:
		return -1 << 63
	}
	return ms * 1000
}

// FlowVerdict is what the flow of a target makes of a due job that the
// policy and the breaker admit.
type FlowVerdict uint8

// The verdicts of AdmitFlow.
const (
	// FlowAdmit: the job may start.
	FlowAdmit FlowVerdict = iota
	// FlowHold: the ramp is full; the job stays pending, untouched
	// (Planner's Held).
	FlowHold
	// FlowDefer: the target holds (Retry-After) or its bucket has no
	// token; the job is deferred to the returned time, no attempt counted.
	FlowDefer
)

// AdmitFlow decides, for a due job of a target with flow f under limit
// lim at now: FlowHold while the ramp has no room; FlowDefer to the hold's
// end while the target holds; FlowDefer to the next free slot (the later
// of the bucket's next token and Reserved + one interval, rounded up to
// the ms) when the bucket is empty; else FlowAdmit.
func AdmitFlow(f Flow, lim retry.Limit, now int64) (FlowVerdict, int64) {
	if !f.Ramp.Admits() {
		return FlowHold, 0
	}
	if f.Hold != 0 && f.Hold > now {
		return FlowDefer, f.Hold
	}
	if ok, due := (Pace{f.Bucket, f.Reserved}).Admit(lim, now); !ok {
		return FlowDefer, due
	}
	return FlowAdmit, 0
}

// flowStep applies op's effect on the flow of target, after Step applied
// it (breaker before and after). It costs nothing (no lookup) when no
// flow is kept, no limit is configured and op neither holds nor closes a
// breaker.
func (s *State) flowStep(target string, before, after retry.Breaker, op *Op) {
	if len(s.flows) == 0 && s.cfg.Limits == nil && op.HoldUntil == 0 && before.State != retry.HalfOpen {
		return
	}
	if op.HoldUntil != 0 && target == "" {
		op2 := *op
		op2.HoldUntil = 0 // the unnamed target is not held: it is no one downstream
		op = &op2
	}
	f := s.flows[target]
	cfg := s.cfg.Limits.For(target)
	s.setFlow(target, FlowAfter(f, LimitOf(s.cfg.Limits, target, f), s.cfg.Circuit, before, after, op, cfg))
}

// limit applies OpLimit.
func (s *State) limit(op *Op) {
	if op.Limit.Validate() != nil {
		return
	}
	t := s.intern(op.Target, &s.lastTarget)
	f := s.flows[t]
	s.setFlow(t, FlowAfter(f, LimitOf(s.cfg.Limits, t, f), s.cfg.Circuit, retry.Breaker{}, retry.Breaker{}, op, s.cfg.Limits.For(t)))
}

func (s *State) setFlow(target string, f Flow) {
	if f.IsZero() {
		delete(s.flows, target)
		return
	}
	s.flows[target] = f
}

// settleFlows drops, at an expire at now, what has run out in every flow,
// so that targets gone quiet are not kept.
func (s *State) settleFlows(now int64) {
	for t, f := range s.flows {
		s.setFlow(t, f.Settle(now))
	}
}

// FlowsRunOut reports whether an expire at now would change a kept flow
// (Settle): the embedded store then journals an expire even with no
// finished job to drop, so that both stores settle the flows at each
// expiry.
func (s *State) FlowsRunOut(now int64) bool {
	for _, f := range s.flows {
		if f.Settle(now) != f {
			return true
		}
	}
	return false
}

// Flow returns the flow of target (the zero Flow if none is kept) and the
// limit in force for it.
func (s *State) Flow(target string) (Flow, retry.Limit) {
	f := s.flows[target]
	return f, LimitOf(s.cfg.Limits, target, f)
}

// HasFlows reports whether any flow is kept or a limit configured: if
// not, no target has a limit, hold or ramp, and the claim need not look.
func (s *State) HasFlows() bool { return len(s.flows) > 0 || s.cfg.Limits != nil }

// Flows calls fn for each kept flow, in target order, with the limit in
// force, until fn returns false.
func (s *State) Flows(fn func(target string, f Flow, lim retry.Limit) bool) {
	for _, t := range slices.Sorted(maps.Keys(s.flows)) {
		f := s.flows[t]
		if !fn(t, f, LimitOf(s.cfg.Limits, t, f)) {
			return
		}
	}
}

// The snapshot section of the flows (tag sectionFlows):
//
//	uvarint  n (1 or more), then per flow in ascending target order:
//	string   target
//	byte     flags (bit 0: a limit set at run time)
//	         uvarint rate (thousandths per second), uvarint burst, if bit 0
//	varint   bucket TAT (µs), varint reserved (µs), varint hold (ms)
//	uvarint  ramp window, uvarint ramp busy
const sectionFlows = 2

// flowSection returns the flows' section, or false when none is kept.
func (s *State) flowSection() (section, bool) {
	if len(s.flows) == 0 {
		return section{}, false
	}
	var b []byte
	b = putUvarint(b, uint64(len(s.flows)))
	for _, t := range slices.Sorted(maps.Keys(s.flows)) {
		f := s.flows[t]
		b = putString(b, t)
		if f.LimitSet {
			b = append(b, 1)
			b = putUvarint(b, uint64(f.Limit.RateMilli))
			b = putUvarint(b, uint64(f.Limit.Burst))
		} else {
			b = append(b, 0)
		}
		b = putVarint(b, f.Bucket.TAT)
		b = putVarint(b, f.Reserved)
		b = putVarint(b, f.Hold)
		b = putUvarint(b, uint64(f.Ramp.Window))
		b = putUvarint(b, uint64(f.Ramp.Busy))
	}
	return section{tag: sectionFlows, body: b}, true
}

// readFlows reads the flows' section.
func (s *State) readFlows(d *decoder) {
	n := d.uvarint("flows")
	if d.err == nil && (n == 0 || n > uint64(d.left())/7) {
		d.failAt("%d flows cannot fit in %d bytes", n, d.left())
	}
	prev := ""
	for i := uint64(0); d.err == nil && i < n; i++ {
		t := d.string("target")
		if d.err == nil && i > 0 && t <= prev {
			d.failAt("flow targets not in ascending order at %q", t)
		}
		prev = t
		var f Flow
		switch flags := d.byte("flow flags"); {
		case d.err != nil:
		case flags&^1 != 0:
			d.newer("flow of %q: unknown flags %#x", t, flags)
		case flags == 1:
			rate, burst := d.uvarint("rate"), d.uvarint("burst")
			if d.err == nil && (rate > retry.MaxRateMilli || burst > retry.MaxBurst) {
				d.failAt("flow of %q: limit out of range", t)
			}
			f.LimitSet, f.Limit = true, retry.Limit{RateMilli: int64(rate), Burst: int(burst)}
		}
		f.Bucket.TAT, f.Reserved, f.Hold = d.varint("bucket"), d.varint("reserved"), d.varint("hold")
		w, busy := d.uvarint("ramp window"), d.uvarint("ramp busy")
		if d.err != nil {
			return
		}
		f.Ramp = retry.Ramp{Window: int(min(w, 1<<31)), Busy: int(min(busy, 1<<31))}
		if f.IsZero() || f.Limit.Validate() != nil || w > 1<<31-1 || busy > 1<<31-1 || f.Ramp.Window == 0 && f.Ramp.Busy != 0 {
			d.failAt("flow of %q: bad record %+v", t, f)
			return
		}
		s.flows[s.intern(t, &s.lastTarget)] = f
	}
}

// flowsDiff returns the first difference between two states' flows, or "".
func flowsDiff(a, b map[string]Flow) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d flows vs %d", len(a), len(b))
	}
	for t, f := range a {
		if g, ok := b[t]; !ok || f != g {
			return fmt.Sprintf("flow %q: %+v vs %+v (present %v)", t, f, g, ok)
		}
	}
	return ""
}

// Limits returns the configured rate limits (nil for none).
func (s *State) Limits() *LimitConfig { return s.cfg.Limits }
