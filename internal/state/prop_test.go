package state

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/runlog/runlog/retry"
	"pgregory.net/rapid"
)

// flight is an attempt the simulated engine has running.
type flight struct {
	id uint64
	n  uint32
}

// sim is a simulated engine: it decides with the State's decision
// functions, journals every op through the codec and applies it.
type sim struct {
	t        *rapid.T
	cfg      Config
	live     *State
	journal  [][]byte
	now      int64
	inFlight []flight
}

// step journals op (checking that it survives the codec), applies it to the
// live state and checks the invariants. A zero op is nothing to journal.
func (m *sim) step(op Op) {
	if op.Kind == 0 {
		return
	}
	b := Encode(nil, &op)
	dec, err := Decode(b)
	if err != nil {
		m.t.Fatalf("Decode(Encode(%+v)): %v", op, err)
	}
	if d := opDiff(dec, op); d != "" {
		m.t.Fatalf("Decode(Encode(op)) != op: %s", d)
	}
	m.journal = append(m.journal, b)
	m.live.Apply(&op)
	if op.Kind == OpStart {
		if j, ok := m.live.Job(op.ID); ok && j.State == Running && j.Started() == op.Attempt {
			m.inFlight = append(m.inFlight, flight{op.ID, op.Attempt})
		}
	}
	if err := m.live.Check(); err != nil {
		m.t.Fatalf("after %v of job %d: %v", op.Kind, op.ID, err)
	}
	m.checkModel()
	m.checkKinds(op.ID)
}

// checkKinds checks that the lookups by kind and by target give what a
// scan filtered by kind or target gives, in both orders, from the start
// and from id after, and that their counts are right.
func (m *sim) checkKinds(after uint64) {
	lookups := []struct {
		name   string
		values []string
		of     func(*Spec) string
		scan   func(string, uint64, bool, func(*Job) bool)
		count  func(string) int
	}{
		{"Kind", []string{"k", "j"}, func(sp *Spec) string { return sp.Kind }, m.live.KindScan, m.live.KindCount},
		{"Target", []string{"a", "b", "c"}, func(sp *Spec) string { return sp.Target }, m.live.TargetScan, m.live.TargetCount},
	}
	for _, l := range lookups {
		for _, v := range l.values {
			for _, desc := range []bool{false, true} {
				for _, from := range []uint64{0, after} {
					var want, got []uint64
					m.live.Scan(from, desc, func(j *Job) bool {
						if l.of(j.Spec) == v {
							want = append(want, j.ID)
						}
						return true
					})
					l.scan(v, from, desc, func(j *Job) bool {
						got = append(got, j.ID)
						return true
					})
					if !slices.Equal(got, want) {
						m.t.Fatalf("%sScan(%q, %d, desc %v) = %v, a scan gives %v", l.name, v, from, desc, got, want)
					}
				}
			}
			n := 0 // jobs held, those of dropped partitions not yet evicted included
			for _, j := range m.live.jobs {
				if j != nil && l.of(j.Spec) == v {
					n++
				}
			}
			if c := l.count(v); c != n {
				m.t.Fatalf("%sCount(%q) = %d, %d jobs held", l.name, v, c, n)
			}
		}
	}
}

// checkModel checks what the engine's promises need beyond Check.
func (m *sim) checkModel() {
	m.live.Scan(0, false, func(j *Job) bool {
		if j.State == Failed && j.Reason() == "" {
			m.t.Fatalf("job %d is dead without a reason", j.ID)
		}
		if j.Fails() > max(j.Spec.Policy.Attempts, 0) {
			m.t.Fatalf("job %d failed %d times, policy allows %d attempts", j.ID, j.Fails(), j.Spec.Policy.Attempts)
		}
		return true
	})
	c := m.cfg.Circuit
	m.live.Targets(func(target string, b retry.Breaker) bool {
		if b.State == retry.HalfOpen && b.Busy > c.Probes {
			m.t.Fatalf("breaker %q half-open with %d probes, limit %d", target, b.Busy, c.Probes)
		}
		if b.State == retry.Closed && len(b.Fails) >= c.Threshold {
			m.t.Fatalf("breaker %q closed with %d failures, threshold %d", target, len(b.Fails), c.Threshold)
		}
		return true
	})
}

// replay folds the journal into a new state and compares it with the live
// one.
func (m *sim) replay() {
	s := New(m.cfg)
	for i, b := range m.journal {
		op, err := Decode(b)
		if err != nil {
			m.t.Fatalf("record %d: %v", i, err)
		}
		s.Apply(&op)
	}
	if ok, diff := m.live.Equal(s); !ok {
		m.t.Fatalf("replay of %d ops differs from live: %s", len(m.journal), diff)
	}
	if ok, diff := s.Equal(m.live); !ok {
		m.t.Fatalf("live differs from replay of %d ops: %s", len(m.journal), diff)
	}
	m.snapshotReplay()
	m.frozenSnapshot()
}

// snapshotReplay folds a random prefix of the journal, snapshots that
// state, restores it, and applies the rest: the result equals the live
// state (snapshot + tail = all history).
func (m *sim) snapshotReplay() {
	k := rapid.IntRange(0, len(m.journal)).Draw(m.t, "snapshotAt")
	s := New(m.cfg)
	for _, b := range m.journal[:k] {
		op, _ := Decode(b)
		s.Apply(&op)
	}
	body := s.AppendSnapshot(nil)
	restored, err := FromSnapshot(m.cfg, body)
	if err != nil {
		m.t.Fatalf("snapshot after %d ops: %v", k, err)
	}
	if err := restored.Check(); err != nil {
		m.t.Fatalf("restored snapshot after %d ops: %v", k, err)
	}
	if again := restored.AppendSnapshot(nil); !bytes.Equal(again, body) {
		m.t.Fatalf("snapshot after %d ops does not re-encode to the same bytes", k)
	}
	for _, b := range m.journal[k:] {
		op, _ := Decode(b)
		restored.Apply(&op)
	}
	if ok, diff := m.live.Equal(restored); !ok {
		m.t.Fatalf("snapshot after %d of %d ops + tail differs from live: %s", k, len(m.journal), diff)
	}
}

// frozenSnapshot freezes a state after a random prefix of the journal,
// applies the rest to it, and encodes the frozen state in random chunks:
// the bytes are those of a snapshot of the prefix alone, and thawing
// leaves the live state unharmed.
func (m *sim) frozenSnapshot() {
	k := rapid.IntRange(0, len(m.journal)).Draw(m.t, "freezeAt")
	prefix, live := New(m.cfg), New(m.cfg)
	for _, b := range m.journal[:k] {
		op, _ := Decode(b)
		prefix.Apply(&op)
		op2, _ := Decode(b)
		live.Apply(&op2)
	}
	want := prefix.AppendSnapshot(nil)
	f := live.Freeze()
	got := f.AppendHeader(nil)
	i := 0
	for _, b := range m.journal[k:] {
		op, _ := Decode(b)
		live.Apply(&op)
		if i < f.Len() {
			n := rapid.IntRange(0, f.Len()-i).Draw(m.t, "chunk")
			got = f.AppendJobs(got, i, i+n)
			i += n
		}
	}
	got = f.AppendJobs(got, i, f.Len())
	got = f.AppendTrailer(got)
	live.Thaw()
	if !bytes.Equal(got, want) {
		m.t.Fatalf("frozen after %d of %d ops: the snapshot differs from the prefix's", k, len(m.journal))
	}
	if ok, diff := m.live.Equal(live); !ok {
		m.t.Fatalf("frozen after %d of %d ops: the live state differs: %s", k, len(m.journal), diff)
	}
}

func (m *sim) anyID() uint64 {
	return rapid.Uint64Range(1, m.live.NextID()).Draw(m.t, "id")
}

func (m *sim) enqueue() {
	a := rapid.IntRange(1, 4).Draw(m.t, "attempts")
	base := rapid.Int64Range(0, 500).Draw(m.t, "base")
	p := retry.Policy{Attempts: a, BaseMS: base, CapMS: base + rapid.Int64Range(0, 2000).Draw(m.t, "capExtra")}
	if rapid.Bool().Draw(m.t, "hasDeadline") {
		p.DeadlineMS = rapid.Int64Range(1, 5000).Draw(m.t, "deadline")
	}
	key := rapid.SampledFrom([]string{"", "", "k1", "k2", "k3"}).Draw(m.t, "key")
	id := m.live.NextID()
	if rapid.IntRange(0, 9).Draw(m.t, "dupID") == 0 {
		id = m.anyID() // usually an existing id: a no-op
	}
	_, existed := m.live.Job(id)
	m.step(Op{Kind: OpEnqueue, ID: id, At: m.now, Due: m.now + rapid.Int64Range(-100, 2000).Draw(m.t, "dueIn"),
		Spec: &Spec{
			// Mostly one kind: the state keeps no kind list while its jobs
			// are all of one (lookup.go), and makes one when another joins.
			Kind: rapid.SampledFrom([]string{"k", "k", "k", "k", "j"}).Draw(m.t, "kind"), Target: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(m.t, "target"),
			Payload: []byte(rapid.StringN(0, 8, -1).Draw(m.t, "payload")), Key: key, Policy: p,
			TimeoutMS: rapid.Int64Range(0, 1000).Draw(m.t, "timeout"),
			Queue:     rapid.SampledFrom([]string{"", "", "q1", "q2"}).Draw(m.t, "queue"),
			Priority:  rapid.SampledFrom([]int32{0, 0, 0, 1, -1, 5}).Draw(m.t, "priority"),
		}})
	if _, now := m.live.Job(id); now && !existed {
		// The id of a job that an expire dropped while its cancelled
		// attempt still ran, taken again. The engine never does this (it
		// enqueues at NextID, which only grows, also across snapshots);
		// the old attempt's flight no longer names a job of this state.
		m.inFlight = slices.DeleteFunc(m.inFlight, func(f flight) bool { return f.id == id })
	}
}

// dispatch starts, defers or fails due jobs like the engine does, holding
// some of them to look past.
func (m *sim) dispatch() {
	// The claim rule, as the stores apply it (the flows included).
	// A per-target limit holds whole targets (HoldTarget), whose benches
	// stay across claims: PeekDue must still give the model's first job.
	perTarget := rapid.IntRange(0, 2).Draw(m.t, "perTarget")
	p := NewPlanner(m.cfg.Circuit, m.now, 4, perTarget, func(target string) int { return m.live.TargetLoad()[target].Running })
	p.SetQueues(m.live)
	p.SetTargets(m.live)
	if m.live.HasFlows() || rapid.Bool().Draw(m.t, "withFlows") {
		p.WithFlows(m.live.Flow)
	}
	heldQueues, heldTargets := map[string]bool{}, map[string]bool{}
	for range rapid.IntRange(1, 4).Draw(m.t, "claims") {
		want := m.firstDue(heldQueues, heldTargets)
		j, ok := m.live.PeekDue(m.now)
		if !ok {
			if want != nil {
				m.t.Fatalf("PeekDue found nothing, job %d is due first", want.ID)
			}
			break
		}
		if want != j {
			m.t.Fatalf("PeekDue gave job %d (queue %q, priority %d, due %d), job %d (queue %q, priority %d, due %d) comes first", j.ID, j.Spec.Queue, j.Spec.Priority, j.Due, want.ID, want.Spec.Queue, want.Spec.Priority, want.Due)
		}
		if rapid.IntRange(0, 3).Draw(m.t, "hold") == 0 {
			m.live.Hold(j.ID)
			continue
		}
		fl, lim := m.live.Flow(j.Spec.Target)
		op, v := p.Plan(FactsOf(j), j.Spec.Target, m.live.Breaker(j.Spec.Target))
		if v == QueueHeld {
			m.live.HoldQueue(j.Spec.Queue)
			heldQueues[j.Spec.Queue] = true
			continue
		}
		if v == Held {
			if fl.Ramp.Admits() && perTarget == 0 {
				m.t.Fatalf("job %d held with room in its ramp %+v", j.ID, fl.Ramp)
			}
			m.live.HoldTarget(j.ID)
			heldTargets[j.Spec.Target] = true
			if err := m.live.Check(); err != nil {
				m.t.Fatalf("after HoldTarget(%d): %v", j.ID, err)
			}
			continue
		}
		if v != Planned {
			break
		}
		if op.Kind == OpStart && m.live.TargetDisabled(j.Spec.Target) {
			m.t.Fatalf("job %d of disabled target %q starts", j.ID, j.Spec.Target)
		}
		if q := m.live.Queue(j.Spec.Queue); op.Kind == OpStart && (q.Paused || (q.Concurrency > 0 && q.Running >= q.Concurrency)) {
			m.t.Fatalf("job %d starts in queue %+v", j.ID, q)
		}
		if q := m.live.Queue(j.Spec.Queue); op.Kind == OpStart && !q.Pace.Bucket.Admits(q.Limit, m.now) {
			m.t.Fatalf("job %d started at %d against its queue's rate limit %+v", j.ID, m.now, q)
		}
		if op.Kind == OpStart {
			if fl.Hold != 0 && fl.Hold > m.now || !fl.Bucket.Admits(lim, m.now) || !fl.Ramp.Admits() {
				m.t.Fatalf("job %d of target %q started at %d against its flow %+v under %+v", j.ID, j.Spec.Target, m.now, fl, lim)
			}
			p := j.Spec.Policy
			if p.DeadlineMS > 0 && j.FirstDue()+p.DeadlineMS <= m.now {
				m.t.Fatalf("job %d started at %d, deadline %d", j.ID, m.now, j.FirstDue()+p.DeadlineMS)
			}
		}
		fails := j.Fails()
		m.step(op)
		if op.Kind == OpDefer && j.Fails() != fails {
			m.t.Fatalf("a defer counted a failure for job %d", j.ID)
		}
	}
	m.live.ReleaseHeld()
	if err := m.live.Check(); err != nil {
		m.t.Fatalf("after ReleaseHeld: %v", err)
	}
}

// firstDue returns the job a claim should take first, by scanning every
// job: due, pending, not held, not on the bench of a target held in this
// claim (its other jobs are offered, and held in turn), of a queue neither
// paused nor held, highest
// priority, then earliest due, then lowest id.
func (m *sim) firstDue(heldQueues, heldTargets map[string]bool) *Job {
	var best *Job
	m.live.Scan(0, false, func(j *Job) bool {
		if j.State != Pending || j.held() || j.Due > m.now || heldQueues[j.Spec.Queue] || (heldTargets[j.Spec.Target] && j.heap() == inBench) || m.live.Queue(j.Spec.Queue).Paused {
			return true
		}
		if best == nil || ClaimOrder(j, best) {
			best = j
		}
		return true
	})
	return best
}

// setQueue journals a random setting of a random queue.
func (m *sim) setQueue() {
	m.step(QueueOp(QueueSetting{
		Name:        rapid.SampledFrom([]string{"", "q1", "q2"}).Draw(m.t, "queueName"),
		Concurrency: rapid.IntRange(0, 2).Draw(m.t, "concurrency"),
		Paused:      rapid.IntRange(0, 2).Draw(m.t, "paused") == 0,
		Limit:       drawLimit(m.t, "queueLimit"),
	}, m.now))
}

func (m *sim) settle() {
	if len(m.inFlight) == 0 {
		return
	}
	i := rapid.IntRange(0, len(m.inFlight)-1).Draw(m.t, "flight")
	f := m.inFlight[i]
	m.inFlight = slices.Delete(m.inFlight, i, i+1)
	if rapid.IntRange(0, 4).Draw(m.t, "snooze") == 0 {
		j, _ := m.live.Job(f.id)
		op := m.live.Snooze(f.id, f.n, rapid.Int64Range(-5, 2000).Draw(m.t, "snoozeFor"), m.now)
		if j == nil || op.Kind == 0 {
			return // an expire dropped the job, cancelled while it ran
		}
		// Only the running job's latest attempt moves it; any other (the
		// job was cancelled while it ran, perhaps retried and claimed
		// again) just ends, and the job stays as it was.
		fails, st, moves := j.Fails(), j.State, j.State == Running && f.n == j.Started()
		m.step(op)
		if j.Fails() != fails || moves && (j.State != Pending || j.Due < m.now) || !moves && j.State != st {
			m.t.Fatalf("snooze of job %d: fails %d -> %d, state %v -> %v, due %d at %d", f.id, fails, j.Fails(), st, j.State, j.Due, m.now)
		}
		return
	}
	class := retry.Class(rapid.IntRange(int(retry.Success), int(retry.Unsafe)).Draw(m.t, "class"))
	after := rapid.Int64Range(-1, 3000).Draw(m.t, "after")
	out := []byte(rapid.StringN(0, 4, -1).Draw(m.t, "output"))
	op := m.live.Settle(f.id, f.n, class, after, "err", out, m.now, rapid.Uint32().Draw(m.t, "r"))
	if op.Kind == 0 {
		if _, ok := m.live.Job(f.id); !ok {
			return // an expire dropped the job, cancelled while it ran
		}
		m.t.Fatalf("Settle of the open attempt %d of job %d returned nothing", f.n, f.id)
	}
	m.step(op)
	// A 410-like answer: a permanent failure that says the target is gone.
	gone := class == retry.Permanent && rapid.IntRange(0, 2).Draw(m.t, "gone") == 0
	j, _ := m.live.Job(f.id)
	life := m.live.Lifecycle(&op, gone)
	m.step(life)
	if j != nil && (gone || life.Kind != 0) && !m.live.TargetDisabled(j.Spec.Target) {
		m.t.Fatalf("target %q of job %d not disabled after %v (gone %v)", j.Spec.Target, f.id, op.Kind, gone)
	}
	if j != nil && class == retry.Success && m.live.Life(j.Spec.Target).Failing {
		m.t.Fatalf("target %q still failing after a success", j.Spec.Target)
	}
}

// setTarget journals a disable or an enable of a random target by hand.
func (m *sim) setTarget() {
	t := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(m.t, "lifeTarget")
	disable := rapid.Bool().Draw(m.t, "disable")
	m.step(TargetOp(t, disable, "by test", m.now))
	if m.live.TargetDisabled(t) != disable {
		m.t.Fatalf("target %q: disabled %v after an op that sets %v", t, m.live.TargetDisabled(t), disable)
	}
	if !disable && !m.live.Life(t).IsZero() {
		m.t.Fatalf("target %q enabled but its lifecycle is %+v", t, m.live.Life(t))
	}
}

// restart simulates a crash and reopen: the attempts in flight die, the
// journal is replayed, and each running job is requeued as an orphan.
func (m *sim) restart() {
	m.inFlight = m.inFlight[:0]
	m.replay()
	for _, id := range m.live.Running() {
		m.step(m.live.Orphan(id, m.now))
	}
	if len(m.live.Running()) != 0 {
		m.t.Fatalf("jobs still running after the orphan requeue: %v", m.live.Running())
	}
}

// stale applies an op that does not fit the state and checks it changed
// nothing for its job.
func (m *sim) stale() {
	id := m.anyID()
	j, ok := m.live.Job(id)
	if !ok {
		op := Op{Kind: Kind(rapid.IntRange(int(OpStart), int(OpRetry)).Draw(m.t, "kind")), ID: id + m.live.NextID(), At: m.now}
		if op.Kind == OpStart || op.Kind.outcome() {
			op.Attempt = 1
		}
		counts := m.live.Counts()
		m.step(op)
		if m.live.Counts() != counts {
			m.t.Fatalf("%v of an unknown job changed the counts", op.Kind)
		}
		return
	}
	before := j.Clone()
	counts := m.live.Counts()
	var op Op
	switch rapid.IntRange(0, 3).Draw(m.t, "staleKind") {
	case 0: // a start with the wrong number
		op = Op{Kind: OpStart, ID: id, At: m.now, Attempt: j.Started() + 2}
	case 1: // an outcome for an attempt that never started
		op = Op{Kind: OpSucceed, ID: id, At: m.now, Attempt: j.Started() + 1, Class: retry.Success}
	case 2: // a second outcome for an ended attempt
		if len(j.Attempts()) == 0 || !j.Attempts()[0].Ended {
			return
		}
		op = Op{Kind: OpRequeue, ID: id, At: m.now, Due: m.now, Attempt: j.Attempts()[0].N, Class: retry.Retryable, BreakerFailed: true}
	case 3: // an enqueue of an existing id
		op = Op{Kind: OpEnqueue, ID: id, At: m.now, Due: m.now, Spec: &Spec{Target: "z", Policy: retry.Policy{Attempts: 1}}}
	}
	m.step(op)
	if d := jobDiff(&before, j); d != "" || m.live.Counts() != counts {
		m.t.Fatalf("stale %v changed job %d: %s", op.Kind, id, d)
	}
}

// discard journals an OpDiscard of a random job, as a store would (with the
// job's image), or of a job the state does not hold: a finished job whose
// attempts have ended leaves the state, its count and its key; any other
// discard changes nothing.
func (m *sim) discard() {
	id := m.anyID()
	j, ok := m.live.Job(id)
	op := Op{Kind: OpDiscard, ID: id, At: m.now}
	if !ok {
		// A job the state does not hold (the sim evicts none): never
		// enqueued, or dropped with its partition, which ends by the
		// horizon.
		op.Image = &Job{ID: id, State: Failed, Run: &Run{Part: m.live.Horizon()}, Spec: &Spec{Kind: "k"}}
		counts := m.live.Counts()
		m.step(op)
		if m.live.Counts() != counts {
			m.t.Fatalf("discard of job %d, which the state does not hold, changed the counts", id)
		}
		return
	}
	op.Image = DiscardImage(j)
	if !op.Image.State.Finished() {
		// A stale image (the store checks the job it holds, not the op's
		// image): the record says finished, the state knows better.
		op.Image.State = Failed
	}
	counts, verdict, key := m.live.Counts(), Discardable(j), j.Spec.Key
	before := *j
	m.step(op)
	_, still := m.live.Job(id)
	if verdict != DiscardOK {
		if !still || m.live.Counts() != counts || jobDiff(&before, j) != "" {
			m.t.Fatalf("discard of job %d (%v, verdict %d) changed it", id, before.State, verdict)
		}
		return
	}
	want := counts
	want.add(before.State, -1)
	if still || m.live.Counts() != want {
		m.t.Fatalf("discard of job %d (%v): still held %v, counts %+v, want %+v", id, before.State, still, m.live.Counts(), want)
	}
	if _, held := m.live.ByKey(key); key != "" && held {
		m.t.Fatalf("discard of job %d kept its key %q", id, key)
	}
}

// TestReplayEqualsLive is the property the journal relies on: for random
// sequences of ops made by the decision functions, random outcomes and
// times, and random cancels, revives, enqueues with keys, restarts and
// stale ops, every op survives Encode/Decode, the invariants hold after
// every op, and folding the decoded journal from an empty state gives a
// state Equal to the live one.
func TestReplayEqualsLive(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{Circuit: retry.Circuit{
			Threshold:  rapid.IntRange(1, 4).Draw(t, "threshold"),
			WindowMS:   rapid.Int64Range(0, 3000).Draw(t, "window"),
			CooldownMS: rapid.Int64Range(0, 2000).Draw(t, "cooldown"),
			Probes:     rapid.IntRange(1, 3).Draw(t, "probes"),
			SlowStart:  rapid.IntRange(0, 4).Draw(t, "slowStart"),
		}, DisableAfterMS: rapid.SampledFrom([]int64{0, 1, 500, 4000}).Draw(t, "disableAfter")}
		if rapid.Bool().Draw(t, "configLimits") {
			cfg.Limits = &LimitConfig{Default: drawLimit(t, "default"), PerTarget: map[string]retry.Limit{"b": drawLimit(t, "limitB")}}
		}
		// Times start above 0 and stay there (at most 200 steps of 50 ms
		// back): 0 is the "none" of a tick (Spec.Tick, TickPlan.Skip), as it
		// is of wall-clock times, which are ms since 1970.
		m := &sim{t: t, cfg: cfg, live: New(cfg), now: rapid.Int64Range(1<<20, 1<<41).Draw(t, "start")}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 18).Draw(t, "action") {
			case 0, 1:
				m.enqueue()
			case 2, 3, 4:
				m.dispatch()
			case 5, 6:
				m.settle()
			case 7:
				m.step(Op{Kind: OpCancel, ID: m.anyID(), At: m.now, Error: "cancelled by test"})
			case 8:
				m.step(Op{Kind: OpRetry, ID: m.anyID(), At: m.now, Due: m.now + rapid.Int64Range(0, 500).Draw(t, "reviveIn")})
			case 9:
				// Mostly forward; sometimes the wall clock steps back.
				m.now += rapid.Int64Range(-50, 3000).Draw(t, "dt")
			case 10:
				m.restart()
			case 11:
				m.stale()
			case 12:
				r := &Retention{
					SucceededMS: rapid.Int64Range(0, 3000).Draw(t, "keepSucceeded"),
					CancelledMS: rapid.Int64Range(0, 3000).Draw(t, "keepCancelled"),
					FailedMS:    rapid.Int64Range(0, 3000).Draw(t, "keepFailed"),
				}
				if rapid.Bool().Draw(t, "perKind") {
					r.PerKind = []KindRetention{{Kind: "k", SucceededMS: rapid.Int64Range(0, 3000).Draw(t, "keepA")}}
				}
				m.step(Op{Kind: OpExpire, At: m.now, Retention: r})
			case 13:
				m.setQueue()
			case 14:
				m.scheduleChange()
			case 15:
				m.tick()
			case 16:
				m.setTarget()
			case 17:
				m.discard()
			case 18:
				m.step(Op{Kind: OpLimit, At: m.now, Target: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "limitTarget"), Limit: drawLimit(t, "limit")})
			}
		}
		m.replay()
	})
}

// drawLimit draws a rate limit, the zero one (none) among them.
func drawLimit(t *rapid.T, label string) retry.Limit {
	if rapid.IntRange(0, 3).Draw(t, label+"None") == 0 {
		return retry.Limit{}
	}
	return retry.Limit{RateMilli: rapid.Int64Range(1, 5_000_000).Draw(t, label+"Rate"), Burst: rapid.IntRange(1, 4).Draw(t, label+"Burst")}
}

// TestReplayLongRun runs one long seeded sequence, so that attempt
// histories overflow and breakers cycle many times.
func TestReplayLongRun(t *testing.T) {
	t.Parallel()
	n := 15
	if testing.Short() {
		n = 3
	}
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{Circuit: retry.Circuit{Threshold: 2, WindowMS: 1000, CooldownMS: 200, Probes: 2}, DisableAfterMS: 3000}
		m := &sim{t: t, cfg: cfg, live: New(cfg), now: 1_700_000_000_000}
		for i := range n * 10 {
			m.enqueue()
			if i%31 == 30 {
				m.setTarget()
			}
			for range 3 {
				m.dispatch()
				m.settle()
				m.now += rapid.Int64Range(0, 400).Draw(t, "dt")
			}
			if i%97 == 0 {
				m.restart()
			}
		}
		m.replay()
		if m.live.Len() == 0 {
			t.Fatal("no job was enqueued")
		}
	})
}

func ExampleState_Admit() {
	s := New(Config{Circuit: retry.DefaultCircuit()})
	enqueue := Op{Kind: OpEnqueue, ID: s.NextID(), At: 1000, Due: 1000, Spec: &Spec{
		Kind: "webhook", Target: "https://example.com:443", Policy: retry.Policy{Attempts: 2, BaseMS: 500, CapMS: 30000},
	}}
	s.Apply(&enqueue)
	for now := int64(1000); ; {
		j, ok := s.PeekDue(now)
		if !ok {
			now, _ = s.NextDue()
			continue
		}
		op := s.Admit(j.ID, now)
		s.Apply(&op)
		fmt.Printf("%d: %v", now, op.Kind)
		if op.Kind != OpStart {
			fmt.Println(":", op.Error)
			return
		}
		op = s.Settle(j.ID, op.Attempt, retry.Retryable, -1, "503 Service Unavailable", nil, now+20, 7)
		s.Apply(&op)
		fmt.Printf(", then %v: %s\n", op.Kind, j.State)
		if j.State != Pending {
			fmt.Println("reason:", j.Reason())
			return
		}
	}
	// Output:
	// 1000: start, then requeue: pending
	// 1277: start, then fail: failed
	// reason: gave up after 2 attempts: 503 Service Unavailable
}

// scheduleChange draws one schedule change among a few names, some of which
// do not fit the state (a create of a name that exists, a change of one that
// does not): those are no-ops.
func (m *sim) scheduleChange() {
	c := &ScheduleChange{
		Action: ScheduleAction(rapid.IntRange(int(SchedCreate), int(SchedSkip)).Draw(m.t, "schedAction")),
		Name:   rapid.SampledFrom([]string{"a", "b", "c"}).Draw(m.t, "schedName"),
	}
	switch c.Action {
	case SchedCreate, SchedUpdate:
		def := &ScheduleDef{
			Overlap: Overlap(rapid.IntRange(0, 1).Draw(m.t, "overlap")),
			CatchUp: CatchUp(rapid.IntRange(0, 2).Draw(m.t, "catchUp")),
			Job:     Spec{Kind: "k", Target: "a", Policy: retry.Policy{Attempts: rapid.IntRange(1, 3).Draw(m.t, "schedAttempts")}},
		}
		if rapid.Bool().Draw(m.t, "cron") {
			def.Cron = rapid.SampledFrom([]string{"* * * * * *", "*/2 * * * * *", "0 * * * * *"}).Draw(m.t, "cronExpr")
		} else {
			def.EveryMS = rapid.Int64Range(1000, 4000).Draw(m.t, "every")
		}
		c.Def = def
	case SchedSkip:
		c.Tick = m.now + rapid.Int64Range(-2000, 2000).Draw(m.t, "skipTo")
	}
	m.step(Op{Kind: OpSchedule, At: m.now, Sched: c})
}

// tick deals with every schedule's due ticks as the store does, and checks
// that no tick of a schedule has two jobs.
func (m *sim) tick() {
	var ops []Op
	m.live.Schedules(func(sc *Schedule) bool {
		ops = append(ops, m.live.TickOps(sc, m.now, m.live.NextID()+uint64(len(ops)))...)
		return true
	})
	for _, op := range ops {
		m.step(op)
	}
	m.live.Schedules(func(sc *Schedule) bool {
		if t, ok := sc.Next(); ok && t <= m.now && !sc.Paused {
			m.t.Fatalf("schedule %q has tick %d due at %d after its ticks were dealt with", sc.Name, t, m.now)
		}
		return true
	})
	type tick struct {
		name string
		at   int64
	}
	seen := make(map[tick]uint64)
	m.live.Scan(0, false, func(j *Job) bool {
		if j.Spec.Schedule != "" {
			k := tick{j.Spec.Schedule, j.Spec.Tick}
			if other, dup := seen[k]; dup {
				m.t.Fatalf("tick %d of schedule %q made jobs %d and %d", k.at, k.name, other, j.ID)
			}
			seen[k] = j.ID
		}
		return true
	})
}
