package state

import "github.com/runlog/runlog/retry"

// maxDecisionsPerClaim bounds the deferrals and failures one claim makes,
// so that a flood of due jobs behind an open breaker cannot make one claim
// unbounded; the next claim decides the rest.
const maxDecisionsPerClaim = 4096

// Verdict is what a Planner made of one due job.
type Verdict uint8

// The verdicts of Planner.Plan.
const (
	// Planned: the returned op (OpStart, OpDefer or OpFail) is the job's;
	// the caller journals it and applies it (Apply, or Step on a row)
	// before it plans the next job.
	Planned Verdict = iota + 1
	// Held: the job's target runs its per-target limit already, or its
	// slow start's window is full; the job stays pending, untouched. It
	// holds the whole target: no later job of the target is planned in
	// this claim (each would be Held too).
	Held
	// Stopped: the claim is complete (Max starts, or the bound of
	// decisions reached); neither this job nor any after it is decided.
	Stopped
	// QueueHeld: the job's queue is paused or runs its concurrency
	// already; the job stays pending, untouched, and no job of its queue
	// is offered again in this claim.
	QueueHeld
	// TargetHeld: the job's target is disabled (lifecycle.go); the job
	// stays pending, untouched, until the target is enabled by hand.
	TargetHeld
)

// TargetView is what a claim knows of the targets' lifecycles.
type TargetView interface {
	TargetDisabled(target string) bool
}

// QueueView is what a claim knows of the queues: each one's setting, its
// rate limit's pace as the ops planned so far left it, and how many of its
// attempts run now, the claim's own starts included (the
// embedded store's state counts them as it applies each start; the
// PostgreSQL claim adds its starts to the count it read).
type QueueView interface {
	Queue(name string) QueueInfo
}

// Planner is the claim rule both stores follow: offered the due jobs in
// claim order (higher priority first, then (due time, id)), with their targets' breakers as they stand when
// each is offered, it starts, defers or fails each (AdmitJob), holds back
// a job whose target has PerTarget attempts running (those running before
// the claim plus those it starts) or whose target's slow start has its
// window full (WithFlows), and the jobs of a paused queue or of a queue at
// its concurrency (SetQueues), then, for a job the breaker admits, applies
// its target's flow control (AdmitFlow: deferred while the target holds or
// its bucket is empty), then its queue's rate limit (Pace.Admit: deferred
// to the queue's next free slot while its bucket is empty; QueueView's
// QueueInfo carries the queue's limit and pace), and stops once it has started Max
// attempts or made 4096 deferrals and failures. It changes nothing: the
// caller applies each planned op, so that the next job sees its effect on
// the breaker. A PostgreSQL claim that reads its due rows in rounds feeds
// one Planner every round; it keeps its counts.
type Planner struct {
	c              retry.Circuit
	now            int64
	max, perTarget int
	running        func(target string) int
	starts         int
	decisions      int
	held           int
	byTarget       map[string]int // starts per target, when perTarget > 0
	queues         QueueView      // nil: every queue unpaused, unbounded
	targets        TargetView     // nil: no target disabled
	// flow, when not nil, returns a target's flow control state and the
	// limit in force, as it stands when a job is offered (WithFlows).
	flow func(target string) (Flow, retry.Limit)
}

// WithFlows makes the planner apply the targets' flow control (AdmitFlow:
// the ramp, the hold, the rate limit) after the breaker has admitted a
// job: flow returns a target's Flow and limit in force, as the ops planned
// so far left them. A store with no flow kept and no limit configured
// (State.HasFlows) need not call it.
func (p *Planner) WithFlows(flow func(target string) (Flow, retry.Limit)) {
	p.flow = flow
}

// SetTargets makes the planner hold back the jobs of disabled targets, as
// v tells.
func (p *Planner) SetTargets(v TargetView) { p.targets = v }

// SetQueues makes the planner hold back the jobs of paused queues and of
// queues at their concurrency, as v tells.
func (p *Planner) SetQueues(v QueueView) { p.queues = v }

// NewPlanner returns the planner of one claim at now under circuit c: at
// most max starts, at most perTarget attempts running per target (0 for
// no limit), running(target) telling how many ran before the claim (nil
// for none).
func NewPlanner(c retry.Circuit, now int64, max, perTarget int, running func(target string) int) Planner {
	return Planner{c: c, now: now, max: max, perTarget: perTarget, running: running}
}

// Done reports whether the claim is complete: a job offered now would be
// Stopped.
func (p *Planner) Done() bool {
	return p.starts >= p.max || p.decisions >= maxDecisionsPerClaim
}

// Plan decides the due job f of target, whose breaker is br now, and
// returns its op when the verdict is Planned.
func (p *Planner) Plan(f Facts, target string, br retry.Breaker) (Op, Verdict) {
	if p.Done() {
		return Op{}, Stopped
	}
	var q QueueInfo
	if p.queues != nil {
		if q = p.queues.Queue(f.Queue); q.Paused || (q.Concurrency > 0 && q.Running >= q.Concurrency) {
			p.held++
			return Op{}, QueueHeld
		}
	}
	if p.targets != nil && p.targets.TargetDisabled(target) {
		p.held++
		return Op{}, TargetHeld
	}
	if p.perTarget > 0 {
		n := p.byTarget[target]
		if p.running != nil {
			n += p.running(target)
		}
		if n >= p.perTarget {
			p.held++
			return Op{}, Held
		}
	}
	var (
		fl  Flow
		lim retry.Limit
	)
	if p.flow != nil {
		// The ramp holds the whole target, like PerTarget: before the
		// breaker's decision, so that a job held once means every later
		// job of its target is held in this claim too (the PostgreSQL
		// claim then leaves the target out of its next rounds).
		if fl, lim = p.flow(target); !fl.Ramp.Admits() {
			p.held++
			return Op{}, Held
		}
	}
	op := AdmitJob(f, br, p.c, p.now)
	if op.Kind == OpStart && p.flow != nil {
		if v, due := AdmitFlow(fl, lim, p.now); v == FlowDefer {
			op = Op{Kind: OpDefer, ID: f.ID, At: p.now, Due: due}
		}
	}
	if op.Kind == OpStart && !q.Limit.IsZero() {
		// The queue's rate limit, last: only a job that would start takes
		// a token, or is deferred to the queue's next free slot.
		if ok, due := q.Pace.Admit(q.Limit, p.now); !ok {
			op = Op{Kind: OpDefer, ID: f.ID, At: p.now, Due: due}
		}
	}
	if op.Kind != OpStart {
		p.decisions++
		return op, Planned
	}
	p.starts++
	if p.perTarget > 0 {
		if p.byTarget == nil {
			p.byTarget = make(map[string]int)
		}
		p.byTarget[target]++
	}
	return op, Planned
}

// Starts returns how many starts the planner made.
func (p *Planner) Starts() int { return p.starts }

// Held returns how many jobs the planner held back.
func (p *Planner) Held() int { return p.held }

// Claim walks the jobs due at now through p in claim order (PeekDue), the
// one claim loop of the embedded store: each job that p plans is handed
// to apply with its op, and apply must apply the op to s (the store
// journals it too) before the walk offers the next job, so that the next
// job sees its effect. A held job is left pending where it is — its
// target's benched (HoldTarget), a disabled target's job held (Hold), a
// queue held (HoldQueue) — until the walk ends with ReleaseHeld. The walk
// stops when p is Done or no job is due.
func (s *State) Claim(p *Planner, now int64, apply func(j *Job, op Op)) {
	for !p.Done() {
		j, ok := s.PeekDue(now)
		if !ok {
			break
		}
		op, v := p.Plan(FactsOf(j), j.Spec.Target, s.Breaker(j.Spec.Target))
		switch v {
		case Held:
			s.HoldTarget(j.ID)
		case TargetHeld:
			s.Hold(j.ID)
		case QueueHeld:
			s.HoldQueue(j.Spec.Queue)
		case Planned:
			apply(j, op)
		}
	}
	s.ReleaseHeld()
}
