package pgstore

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// TestDecideMirrorsState runs random claims, outcomes and orphan rescues of
// a few jobs on two targets through package state (Admit, Settle, Orphan,
// Apply) and through this store's path (the per-job decisions on a row's
// facts, then apply on rows and breakers): every decision and every
// resulting job and breaker must be equal. It needs no database, so it covers far more histories than
// TestSameAsEmbedded; that test covers the SQL around the decisions.
func TestDecideMirrorsState(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := retry.Circuit{
			Threshold: rapid.IntRange(1, 3).Draw(rt, "threshold"), WindowMS: rapid.Int64Range(0, 1000).Draw(rt, "window"),
			CooldownMS: rapid.Int64Range(0, 800).Draw(rt, "cooldown"), Probes: rapid.IntRange(1, 2).Draw(rt, "probes"),
		}
		st := state.New(state.Config{Circuit: c})
		now := int64(1_000_000)
		n := rapid.IntRange(1, 4).Draw(rt, "jobs")
		rows := make([]*jobRow, n)
		for i := range rows {
			spec := state.Spec{
				Kind: "k", Target: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "target"),
				Policy: retry.Policy{Attempts: rapid.IntRange(1, 5).Draw(rt, "attempts"), BaseMS: 10, CapMS: 200,
					DeadlineMS: rapid.SampledFrom([]int64{0, 1500}).Draw(rt, "deadline")},
			}
			id := uint64(i + 1)
			st.Apply(&state.Op{Kind: state.OpEnqueue, ID: id, At: now, Due: now, Spec: &spec})
			rows[i] = &jobRow{id: id, st: state.Pending, spec: spec, due: now, firstDue: now, enqueuedAt: now}
		}
		brs := map[string]*retry.Breaker{"a": {}, "b": {}}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			now += rapid.Int64Range(0, 400).Draw(rt, "dt")
			r := rows[rapid.IntRange(0, n-1).Draw(rt, "job")]
			br := brs[r.spec.Target]
			var want, got state.Op
			switch rapid.IntRange(0, 2).Draw(rt, "action") {
			case 0:
				if r.st != state.Pending || r.due > now {
					continue
				}
				want, got = st.Admit(r.id, now), state.AdmitJob(r.facts(), *br, c, now)
			case 1:
				if r.started == 0 {
					continue
				}
				attempt := r.started - uint32(rapid.IntRange(0, 1).Draw(rt, "older"))
				if attempt == 0 || r.open(attempt) == nil {
					continue
				}
				class := retry.Class(rapid.IntRange(0, 5).Draw(rt, "class"))
				after := rapid.SampledFrom([]int64{-1, 0, 50, 5000}).Draw(rt, "after")
				rnd := rapid.Uint32().Draw(rt, "r")
				want = st.Settle(r.id, attempt, class, after, "e", []byte("o"), now, rnd)
				got = state.SettleJob(r.facts(), attempt, class, after, "e", []byte("o"), now, rnd)
			case 2:
				if r.st != state.Running {
					continue
				}
				want = st.Orphan(r.id, now)
				got = state.OrphanJob(r.facts(), now, "the process stopped")
			}
			if !reflect.DeepEqual(want, got) {
				rt.Fatalf("decision for job %d: state %+v, mirror %+v", r.id, want, got)
			}
			st.Apply(&want)
			apply(r, br, c, &got, "n")
			j, _ := st.Job(r.id)
			if gj := r.toJob(); !sameJob(*j, gj) {
				rt.Fatalf("job %d after %v:\nstate  %+v\nmirror %+v", r.id, want.Kind, *j, gj)
			}
			if sb := st.Breaker(r.spec.Target); !sameBreaker(sb, *br) {
				rt.Fatalf("breaker %s after %v: state %+v, mirror %+v", r.spec.Target, want.Kind, sb, *br)
			}
		}
	})
}

// sameJob compares the exported fields of two jobs.
func sameJob(a, b state.Job) bool {
	norm := func(j state.Job) state.Job {
		c := state.Job{ID: j.ID, Due: j.Due, FirstDue: j.FirstDue, EnqueuedAt: j.EnqueuedAt, FinishedAt: j.FinishedAt,
			Fails: j.Fails, LastError: j.LastError, Reason: j.Reason, Started: j.Started, State: j.State}
		for _, a := range j.Attempts {
			if len(a.Output) == 0 {
				a.Output = nil
			}
			c.Attempts = append(c.Attempts, a)
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b)) && reflect.DeepEqual(*a.Spec, *b.Spec)
}
