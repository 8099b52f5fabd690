package state

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
)

// Equal reports whether s and o hold the same jobs, breakers, idempotency
// keys, next id and config, and if not, the first difference it found. It
// compares what the ops determine, not how it is laid out: the heap's
// internal order and the jobs held by Hold are not compared (a held job is
// pending either way). It is meant for tests (replay equals live).
func (s *State) Equal(o *State) (bool, string) {
	if s.cfg != o.cfg {
		return false, fmt.Sprintf("config %+v vs %+v", s.cfg, o.cfg)
	}
	if s.nextID != o.nextID {
		return false, fmt.Sprintf("next id %d vs %d", s.nextID, o.nextID)
	}
	if s.counts != o.counts {
		return false, fmt.Sprintf("counts %+v vs %+v", s.counts, o.counts)
	}
	if !retentionEqual(s.retention, o.retention) || s.horizon != o.horizon || !maps.Equal(s.parts, o.parts) {
		return false, fmt.Sprintf("retention %+v, horizon %d, partitions %v vs %+v, %d, %v", s.retention, s.horizon, s.parts, o.retention, o.horizon, o.parts)
	}
	a, b := s.kept(), o.kept()
	if len(a) != len(b) {
		return false, fmt.Sprintf("%d jobs vs %d", len(a), len(b))
	}
	for i := range a {
		if d := jobDiff(a[i], b[i]); d != "" {
			return false, fmt.Sprintf("job %d: %s", a[i].ID, d)
		}
	}
	if a, b := s.Running(), o.Running(); !slices.Equal(a, b) {
		return false, fmt.Sprintf("running %v vs %v", a, b)
	}
	if len(s.keys) != len(o.keys) {
		return false, fmt.Sprintf("%d keys vs %d", len(s.keys), len(o.keys))
	}
	for k, id := range s.keys {
		if oid, ok := o.keys[k]; !ok || oid != id {
			return false, fmt.Sprintf("key %q: job %d vs %d (present %v)", k, id, oid, ok)
		}
	}
	if ok, d := queuesEqual(s, o); !ok {
		return false, d
	}
	if len(s.breakers) != len(o.breakers) {
		return false, fmt.Sprintf("%d breakers vs %d", len(s.breakers), len(o.breakers))
	}
	for t, a := range s.breakers {
		b, ok := o.breakers[t]
		if !ok || a.State != b.State || a.Until != b.Until || a.Busy != b.Busy || !slices.Equal(a.Fails, b.Fails) {
			return false, fmt.Sprintf("breaker %q: %+v vs %+v (present %v)", t, a, b, ok)
		}
	}
	if ok, d := lifeEqual(s, o); !ok {
		return false, d
	}
	if a, b := s.schedulesSection(), o.schedulesSection(); !bytes.Equal(a, b) {
		return false, fmt.Sprintf("schedules % x vs % x", a, b)
	}
	if d := flowsDiff(s.flows, o.flows); d != "" {
		return false, d
	}
	return true, ""
}

// kept returns the jobs the state holds, in id order.
func (s *State) kept() []*Job {
	var out []*Job
	s.Scan(0, false, func(j *Job) bool { out = append(out, j); return true })
	return out
}

// retentionEqual reports whether a and b are the same retention (nil and
// the zero Retention both keep forever, but are told apart: PartOf places
// jobs alike under both).
func retentionEqual(a, b *Retention) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.SucceededMS == b.SucceededMS && a.CancelledMS == b.CancelledMS && a.FailedMS == b.FailedMS && slices.Equal(a.PerKind, b.PerKind)
}

// jobDiff returns the first difference between two jobs, or "".
func jobDiff(a, b *Job) string {
	switch {
	case a.ID != b.ID:
		return fmt.Sprintf("id %d vs %d", a.ID, b.ID)
	case a.State != b.State:
		return fmt.Sprintf("state %v vs %v", a.State, b.State)
	case a.Due != b.Due || a.FirstDue() != b.FirstDue() || a.EnqueuedAt != b.EnqueuedAt || a.FinishedAt() != b.FinishedAt():
		return fmt.Sprintf("times (due %d, first %d, enqueued %d, finished %d) vs (%d, %d, %d, %d)",
			a.Due, a.FirstDue(), a.EnqueuedAt, a.FinishedAt(), b.Due, b.FirstDue(), b.EnqueuedAt, b.FinishedAt())
	case (a.Run == nil) != (b.Run == nil):
		return fmt.Sprintf("run %+v vs %+v", a.Run, b.Run)
	case a.Part() != b.Part():
		return fmt.Sprintf("partition %d vs %d", a.Part(), b.Part())
	case a.Fails() != b.Fails() || a.Started() != b.Started():
		return fmt.Sprintf("fails/started %d/%d vs %d/%d", a.Fails(), a.Started(), b.Fails(), b.Started())
	case a.LastError() != b.LastError() || a.Reason() != b.Reason():
		return fmt.Sprintf("last error/reason %q/%q vs %q/%q", a.LastError(), a.Reason(), b.LastError(), b.Reason())
	case !specEqual(a.Spec, b.Spec):
		return fmt.Sprintf("spec %+v vs %+v", a.Spec, b.Spec)
	case len(a.Attempts()) != len(b.Attempts()):
		return fmt.Sprintf("%d attempts vs %d", len(a.Attempts()), len(b.Attempts()))
	}
	for i := range a.Attempts() {
		x, y := a.Attempts()[i], b.Attempts()[i]
		if x.N != y.N || x.StartedAt != y.StartedAt || x.EndedAt != y.EndedAt || x.Class != y.Class ||
			x.Ended != y.Ended || x.Error != y.Error || !bytes.Equal(x.Output, y.Output) {
			return fmt.Sprintf("attempt %d: %+v vs %+v", x.N, x, y)
		}
	}
	return ""
}

func specEqual(a, b *Spec) bool {
	return a.Kind == b.Kind && a.Target == b.Target && bytes.Equal(a.Payload, b.Payload) &&
		a.Key == b.Key && a.Policy == b.Policy && a.TimeoutMS == b.TimeoutMS &&
		a.Queue == b.Queue && a.Priority == b.Priority && a.Schedule == b.Schedule && a.Tick == b.Tick &&
		slices.Equal(a.Metadata, b.Metadata) && a.ReplayOf == b.ReplayOf
}

// Check verifies the state's invariants and returns the first one broken:
// jobs in strictly ascending id order below NextID; each job in exactly one
// of pending (in the heap or held), running (in the running set) or
// finished; the counts equal a recount; the queues' heaps in order with
// every entry's index right (checkQueues); the key index naming exactly the jobs with a
// key; no zero breaker stored; attempt histories bounded, in order, with a
// running job's attempt Started open. It costs O(jobs) and is meant for
// tests.
func (s *State) Check() error {
	var recount Counts
	keyed, held := 0, 0
	inParts := make(map[int64]Counts)
	if s.ids != nil && len(s.ids) != len(s.jobs) || s.ids == nil && s.holes != 0 {
		return fmt.Errorf("%d ids for %d job slots, %d holes", len(s.ids), len(s.jobs), s.holes)
	}
	holes := 0
	for i, j := range s.jobs {
		id := s.idAt(i)
		if id == 0 || id >= s.nextID || (i > 0 && s.idAt(i-1) >= id) {
			return fmt.Errorf("job %d out of order (index %d, next id %d)", id, i, s.nextID)
		}
		if j == nil {
			holes++
			continue
		}
		if j.ID != id {
			return fmt.Errorf("job %d in the slot of id %d", j.ID, id)
		}
		if j.Spec == nil {
			return fmt.Errorf("job %d has no spec", j.ID)
		}
		if j.Run != nil && j.Run.zero(j.Due) {
			return fmt.Errorf("job %d holds an empty Run (a job that holds nothing of one keeps none)", j.ID)
		}
		if j.State.Finished() {
			if s.gone(j) {
				return fmt.Errorf("job %d is held in partition %d, dropped at %d", j.ID, j.Part(), s.horizon)
			}
			c := inParts[j.Part()]
			c.add(j.State, 1)
			inParts[j.Part()] = c
		} else {
			recount.add(j.State, 1)
			if j.Part() != 0 {
				return fmt.Errorf("job %d is %v in partition %d", j.ID, j.State, j.Part())
			}
		}
		if j.held() {
			held++
		}
		if err := s.checkIndex(j); err != nil {
			return err
		}
		if j.Spec.Key != "" {
			keyed++
			if s.keys[j.Spec.Key] != j.ID {
				return fmt.Errorf("job %d: key %q maps to job %d", j.ID, j.Spec.Key, s.keys[j.Spec.Key])
			}
		}
		if err := checkAttempts(j); err != nil {
			return err
		}
	}
	if holes != s.holes {
		return fmt.Errorf("%d holes counted, %d found", s.holes, holes)
	}
	for p, c := range inParts {
		all, ok := s.parts[p]
		if !ok || c.Succeeded > all.Succeeded || c.Failed > all.Failed || c.Cancelled > all.Cancelled {
			return fmt.Errorf("partition %d: %+v held, %+v counted", p, c, all)
		}
	}
	for p, c := range s.parts {
		if p <= s.horizon || c == (Counts{}) {
			return fmt.Errorf("partition %d (%+v) kept past horizon %d or empty", p, c, s.horizon)
		}
		recount.Succeeded += c.Succeeded
		recount.Failed += c.Failed
		recount.Cancelled += c.Cancelled
	}
	if recount != s.counts {
		return fmt.Errorf("counts %+v, recount %+v", s.counts, recount)
	}
	load := make(map[string]Counts)
	for _, j := range s.jobs {
		if j != nil && (j.State == Pending || j.State == Running) {
			c := load[j.Spec.Target]
			c.add(j.State, 1)
			load[j.Spec.Target] = c
		}
	}
	if got := s.TargetLoad(); !maps.Equal(got, load) || len(s.load) != len(load) {
		return fmt.Errorf("per-target load %v, recount %v", got, load)
	}
	if len(s.running) != s.counts.Running {
		return fmt.Errorf("running set %d; counts %+v (held %d)", len(s.running), s.counts, held)
	}
	if err := s.checkQueues(); err != nil {
		return err
	}
	if err := s.checkLife(); err != nil {
		return err
	}
	if keyed != len(s.keys) {
		return fmt.Errorf("%d keyed jobs, %d keys indexed", keyed, len(s.keys))
	}
	if err := s.checkLookups(); err != nil {
		return err
	}
	for t, b := range s.breakers {
		if b.IsZero() {
			return fmt.Errorf("breaker %q stored while zero", t)
		}
	}
	return nil
}

// checkIndex checks that j is in the heap or held when pending, in the
// running set when running, and nowhere else.
func (s *State) checkIndex(j *Job) error {
	var set []*Job
	switch j.State {
	case Pending:
		if j.held() == (j.index >= 0) {
			return fmt.Errorf("job %d is pending but in heap %v, held %v", j.ID, j.index >= 0, j.held())
		}
	case Running:
		set = s.running
	}
	if j.State == Pending {
		return nil // the queue's heaps are checked by checkQueues
	}
	if j.index < 0 {
		if j.State == Running {
			return fmt.Errorf("job %d is running but not in the running set", j.ID)
		}
		if j.held() && j.State != Pending {
			return fmt.Errorf("job %d is %v but held", j.ID, j.State)
		}
		return nil
	}
	if int(j.index) >= len(set) || set[j.index] != j {
		return fmt.Errorf("job %d (%v): index %d is wrong", j.ID, j.State, j.index)
	}
	return nil
}

func checkAttempts(j *Job) error {
	if len(j.Attempts()) > MaxAttemptHistory {
		return fmt.Errorf("job %d keeps %d attempts, limit %d", j.ID, len(j.Attempts()), MaxAttemptHistory)
	}
	for i, a := range j.Attempts() {
		if a.N == 0 || a.N > j.Started() || (i > 0 && j.Attempts()[i-1].N >= a.N) {
			return fmt.Errorf("job %d: attempt %d out of order (started %d)", j.ID, a.N, j.Started())
		}
	}
	if j.State == Running {
		if a := j.attempt(j.Started()); a == nil || a.Ended {
			return fmt.Errorf("job %d is running but attempt %d is not open", j.ID, j.Started())
		}
	}
	if j.Fails() < 0 {
		return fmt.Errorf("job %d has %d fails", j.ID, j.Fails())
	}
	return nil
}
