package state

import (
	"fmt"
	"slices"
	"time"
)

// The endpoint lifecycle. A target (an endpoint the jobs are delivered
// to) is disabled when it answered "gone" (an http 410) or has failed for
// Config.DisableAfterMS with no success between; its jobs are then kept
// pending and not attempted until it is enabled by hand. Unlike the
// breaker, nothing enables it on its own.
//
// The state of a target's lifecycle is a TargetLife, kept only while it
// is not the zero one (the target is failing or disabled):
//
//   - An outcome of an attempt (Step's rule, LifeAfter) starts the
//     target's failing run at its time when it counts against the breaker
//     (BreakerFailed) and none runs, and ends the run when it is a
//     success. Nothing else changes the run but an OpTarget.
//   - OpTarget (code 16) disables the target (with a reason) or enables
//     it (which also ends its failing run, so that the next failure starts
//     a fresh one). A disable is decided by DisableRule from the outcome
//     that causes it and journaled right after that outcome, in the same
//     write; the enable is the operator's.
//
// Snapshot section 4 keeps every non-zero TargetLife. The embedded state
// keeps the pending jobs of a disabled target out of its queues' heaps
// (parked), so that PeekDue and NextDue never see them; the PostgreSQL
// claim leaves them out of its query. Planner holds them too, should one
// be offered (TargetHeld).

// OpTarget disables or enables a target (Op.Life); ID is 0. (Code 16.)
const OpTarget Kind = 16

// TargetLife is the lifecycle state of one target.
type TargetLife struct {
	// Failing is set while the target's latest outcome that counted was a
	// failure against the breaker; FailingSince is when the first failure
	// of that run happened (ms since the Unix epoch).
	Failing      bool
	FailingSince int64
	// Disabled is set while the target is disabled, since DisabledAt, for
	// Reason.
	Disabled   bool
	DisabledAt int64
	Reason     string
}

// IsZero reports whether l is the zero TargetLife (not kept).
func (l TargetLife) IsZero() bool { return l == TargetLife{} }

// TargetChange is the body of an OpTarget.
type TargetChange struct {
	// Target is the target the change is about.
	Target string
	// Disable disables the target with Reason; false enables it.
	Disable bool
	// Reason says why the target is disabled (Disable only).
	Reason string
}

// GoneReason starts the reason of a disable by a gone answer
// (DisableRule).
const GoneReason = "the target answered gone"

// MaxTargetReason bounds the reason an OpTarget carries, in bytes.
const MaxTargetReason = 1024

// LifeAfter returns the lifecycle l of the target of outcome op after op
// is applied: a success ends the failing run, a failure that counts
// against the breaker starts one at op.At if none runs. Interrupted
// attempts (class 0), snoozes and other ops leave l as it is.
func LifeAfter(l TargetLife, op *Op) TargetLife {
	if !op.Kind.outcome() || op.Attempt == 0 || op.Class == 0 {
		return l
	}
	switch {
	case op.Kind == OpSucceed:
		l.Failing, l.FailingSince = false, 0
	case op.BreakerFailed && !l.Failing:
		l.Failing, l.FailingSince = true, op.At
	}
	return l
}

// DisableRule decides whether outcome op, just applied to a target whose
// lifecycle is now l, disables it: when the attempt answered gone (a
// permanent "this endpoint no longer exists", goneErr its error text), or
// when the target has been failing for afterMS or more (afterMS > 0) as
// of op.At. It returns the OpTarget to journal with the outcome, in the
// same write, or a zero Op. A target already disabled is not disabled
// again.
func DisableRule(l TargetLife, target string, op *Op, gone bool, afterMS int64) Op {
	if l.Disabled || !op.Kind.outcome() || op.Attempt == 0 || op.Class == 0 {
		return Op{}
	}
	var reason string
	switch {
	case gone:
		reason = withError(GoneReason, op.Error)
	case afterMS > 0 && l.Failing && op.At-l.FailingSince >= afterMS:
		reason = fmt.Sprintf("failing for %v since %s with no success",
			time.Duration(op.At-l.FailingSince)*time.Millisecond,
			time.UnixMilli(l.FailingSince).UTC().Format(time.RFC3339))
	default:
		return Op{}
	}
	return TargetOp(target, true, reason, op.At)
}

// TargetOp returns the OpTarget that disables (with reason, bounded to
// MaxTargetReason bytes) or enables target at now.
func TargetOp(target string, disable bool, reason string, now int64) Op {
	if !disable {
		reason = ""
	}
	if len(reason) > MaxTargetReason {
		reason = reason[:MaxTargetReason]
	}
	return Op{Kind: OpTarget, At: now, Life: &TargetChange{Target: target, Disable: disable, Reason: reason}}
}

// ApplyLife returns the lifecycle l after OpTarget change at at: disabled
// since at with its reason, or enabled with no failing run.
func ApplyLife(l TargetLife, c *TargetChange, at int64) TargetLife {
	if c.Disable {
		if l.Disabled {
			return l
		}
		l.Disabled, l.DisabledAt, l.Reason = true, at, c.Reason
		return l
	}
	return TargetLife{}
}

// targetLife is a target's lifecycle in the state, with its parked jobs
// while it is disabled.
type targetLife struct {
	TargetLife
	parked map[*Job]struct{}
}

// Life returns the lifecycle of target (the zero one for a target that is
// neither failing nor disabled).
func (s *State) Life(target string) TargetLife {
	if l := s.life[target]; l != nil {
		return l.TargetLife
	}
	return TargetLife{}
}

// Lives calls fn for each target whose lifecycle is not the zero one, in
// sorted order.
func (s *State) Lives(fn func(target string, l TargetLife)) {
	for _, t := range slices.Sorted(mapKeys(s.life)) {
		fn(t, s.life[t].TargetLife)
	}
}

// TargetDisabled reports whether target is disabled: the check a claim's
// Planner makes (TargetView).
func (s *State) TargetDisabled(target string) bool {
	l := s.life[target]
	return l != nil && l.Disabled
}

// Disabled returns how many targets are disabled.
func (s *State) Disabled() int { return s.disabled }

// Lifecycle returns the OpTarget that outcome op, just applied, brings
// (DisableRule under the state's Config.DisableAfterMS), or a zero Op.
func (s *State) Lifecycle(op *Op, gone bool) Op {
	j := s.job(op.ID)
	if j == nil {
		return Op{}
	}
	return DisableRule(s.Life(j.Spec.Target), j.Spec.Target, op, gone, s.cfg.DisableAfterMS)
}

// setLife stores l as target's lifecycle, parking or unparking the
// target's pending jobs when it becomes disabled or enabled.
func (s *State) setLife(target string, l TargetLife) {
	old := s.life[target]
	was := old != nil && old.Disabled
	if l.IsZero() && old == nil {
		return
	}
	if old == nil {
		if s.life == nil {
			s.life = make(map[string]*targetLife)
		}
		old = &targetLife{}
		s.life[target] = old
	}
	old.TargetLife = l
	switch {
	case l.Disabled && !was:
		s.disabled++
		s.parkTarget(target)
	case !l.Disabled && was:
		s.disabled--
		s.unparkTarget(old)
	}
	if l.IsZero() {
		delete(s.life, target)
	}
}

// applyTarget applies an OpTarget.
func (s *State) applyTarget(op *Op) {
	c := op.Life
	if c == nil || c.Target == "" {
		return
	}
	s.setLife(c.Target, ApplyLife(s.Life(c.Target), c, op.At))
}

// feedLife applies outcome op of a job of target to the target's
// lifecycle (LifeAfter).
func (s *State) feedLife(target string, op *Op) {
	l := s.Life(target)
	if n := LifeAfter(l, op); n != l {
		s.setLife(target, n)
	}
}

// park reports whether pending job j must be parked (its target is
// disabled) and parks it if so: out of the heaps, held, in its target's
// parked set.
func (s *State) park(j *Job) bool {
	if s.disabled == 0 {
		return false
	}
	l := s.life[j.Spec.Target]
	if l == nil || !l.Disabled {
		return false
	}
	if l.parked == nil {
		l.parked = make(map[*Job]struct{})
	}
	j.set(flagHeld|flagParked, true)
	l.parked[j] = struct{}{}
	return true
}

// unpark takes pending job j out of its target's parked set.
func (s *State) unpark(j *Job) {
	if l := s.life[j.Spec.Target]; l != nil {
		delete(l.parked, j)
	}
	j.set(flagHeld|flagParked, false)
}

// parkTarget parks the pending jobs of target, which was just disabled:
// O(jobs held in memory), a rare op.
func (s *State) parkTarget(target string) {
	for _, j := range s.jobs {
		if j == nil || j.State != Pending || j.Spec.Target != target || j.parked() {
			continue
		}
		if j.index >= 0 {
			s.popPending(j)
		}
		s.park(j)
	}
}

// unparkTarget puts the parked jobs of l back in their queues' heaps.
func (s *State) unparkTarget(l *targetLife) {
	js := make([]*Job, 0, len(l.parked))
	for j := range l.parked {
		js = append(js, j)
	}
	// In id order, so that the heaps' layout does not depend on map order.
	slices.SortFunc(js, func(a, b *Job) int { return cmpID(a.ID, b.ID) })
	l.parked = nil
	for _, j := range js {
		j.set(flagHeld|flagParked, false)
		if j.State == Pending && j.index < 0 {
			s.pushPending(j)
		}
	}
}

func cmpID(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// lifeSection returns the body of snapshot section 4, the targets whose
// lifecycle is not the zero one, or nil when there is none:
//
//	uvarint n, then n times, by ascending target: string target, byte
//	flags (bit 0 failing, bit 1 disabled), varint failing since, varint
//	disabled at, string reason
func (s *State) lifeSection() []byte {
	if len(s.life) == 0 {
		return nil
	}
	dst := putUvarint(nil, uint64(len(s.life)))
	s.Lives(func(t string, l TargetLife) {
		dst = putString(dst, t)
		var f byte
		if l.Failing {
			f |= 1
		}
		if l.Disabled {
			f |= 2
		}
		dst = append(dst, f)
		dst = putVarint(dst, l.FailingSince)
		dst = putVarint(dst, l.DisabledAt)
		dst = putString(dst, l.Reason)
	})
	return dst
}

// readLifeSection reads the body lifeSection wrote. The jobs come before
// the sections in a snapshot: the pending jobs of a disabled target are
// parked here.
func (s *State) readLifeSection(d *decoder) {
	n := d.uvarint("targets")
	if d.err == nil && (n == 0 || n > uint64(d.left())/5) {
		d.failAt("%d target lifecycles in %d bytes", n, d.left())
		return
	}
	prev := ""
	for i := uint64(0); d.err == nil && i < n; i++ {
		t := d.string("target")
		f := d.byte("lifecycle flags")
		var l TargetLife
		l.FailingSince, l.DisabledAt = d.varint("failing since"), d.varint("disabled at")
		l.Reason = d.string("reason")
		if d.err != nil {
			return
		}
		l.Failing, l.Disabled = f&1 != 0, f&2 != 0
		switch {
		case f&^3 != 0:
			d.failAt("target %q: lifecycle flags %#x", t, f)
		case t == "" || (i > 0 && t <= prev):
			d.failAt("target %q after %q: not in ascending order", t, prev)
		case l.IsZero():
			d.failAt("target %q with the zero lifecycle written", t)
		case (!l.Failing && l.FailingSince != 0) || (!l.Disabled && (l.DisabledAt != 0 || l.Reason != "")):
			d.failAt("target %q: a time or reason without its flag (flags %#x)", t, f)
		case len(l.Reason) > MaxTargetReason:
			d.failAt("target %q: reason of %d bytes", t, len(l.Reason))
		}
		if d.err != nil {
			return
		}
		prev = t
		s.setLife(t, l)
	}
}

// putTargetChange appends an OpTarget's body: string target, byte disable
// (0, 1), string reason.
func putTargetChange(dst []byte, c *TargetChange) []byte {
	if c == nil {
		c = &TargetChange{}
	}
	dst = putString(dst, c.Target)
	dst = append(dst, boolByte(c.Disable))
	return putString(dst, c.Reason)
}

// targetChange reads what putTargetChange wrote.
func (d *decoder) targetChange() *TargetChange {
	c := &TargetChange{Target: d.string("target")}
	switch b := d.byte("disable"); {
	case d.err != nil:
	case b > 1:
		d.failAt("disable flag %d", b)
	default:
		c.Disable = b == 1
	}
	c.Reason = d.string("reason")
	if d.err == nil {
		switch {
		case c.Target == "":
			d.failAt("a target op with no target")
		case !c.Disable && c.Reason != "":
			d.failAt("an enable of %q with a reason", c.Target)
		case len(c.Reason) > MaxTargetReason:
			d.failAt("a reason of %d bytes (at most %d)", len(c.Reason), MaxTargetReason)
		}
	}
	return c
}

// checkLife checks the lifecycles against the jobs (Check): no zero one
// kept, the disabled count right, every pending job of a disabled target
// parked and no other job parked.
func (s *State) checkLife() error {
	n := 0
	for t, l := range s.life {
		if l.IsZero() {
			return fmt.Errorf("target %q: zero lifecycle kept", t)
		}
		if l.Disabled {
			n++
		} else if len(l.parked) > 0 {
			return fmt.Errorf("target %q: enabled with %d parked jobs", t, len(l.parked))
		}
		for j := range l.parked {
			if !j.parked() || j.State != Pending || j.Spec.Target != t || s.job(j.ID) != j {
				return fmt.Errorf("target %q: parked job %d is %v (parked %v)", t, j.ID, j.State, j.parked())
			}
		}
	}
	if n != s.disabled {
		return fmt.Errorf("%d targets disabled, %d counted", n, s.disabled)
	}
	for _, j := range s.jobs {
		if j == nil || j.State != Pending {
			if j != nil && j.parked() {
				return fmt.Errorf("job %d is %v but parked", j.ID, j.State)
			}
			continue
		}
		if s.TargetDisabled(j.Spec.Target) != j.parked() {
			return fmt.Errorf("job %d of target %q: parked %v, disabled %v", j.ID, j.Spec.Target, j.parked(), s.TargetDisabled(j.Spec.Target))
		}
	}
	return nil
}

// lifeEqual compares the lifecycles of two states (Equal).
func lifeEqual(a, b *State) (bool, string) {
	if x, y := a.lifeSection(), b.lifeSection(); string(x) != string(y) {
		return false, fmt.Sprintf("target lifecycles % x vs % x", x, y)
	}
	return true, ""
}
