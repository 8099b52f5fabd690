package embedded

import (
	"context"
	"errors"
	"github.com/runlog/runlog/internal/store/storetest"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

var testCircuit = retry.Circuit{Threshold: 3, WindowMS: 1000, CooldownMS: 500, Probes: 1}

func openStore(t testing.TB, dir string, now int64) *Store {
	t.Helper()
	s, err := Open(dir, Options{
		Journal:       journal.Options{SegmentSize: 4 << 10, NoPreallocate: true},
		SnapshotBytes: 3 << 10, // snapshots and segment drops happen during the tests
		State:         state.Config{Circuit: testCircuit},
		Now:           now,
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// jobView and view: the stores' shared comparison form (package storetest).
type jobView = storetest.JobView

var view = storetest.View

// dump lists every job, oldest first, plus the targets.
func dump(t testing.TB, s *Store) ([]jobView, []store.TargetInfo) {
	t.Helper()
	ctx := context.Background()
	var all []jobView
	var after uint64
	for {
		page, next, err := s.List(ctx, store.Filter{After: after, Limit: 7, Oldest: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page {
			all = append(all, view(j))
		}
		if next == 0 {
			break
		}
		after = next
	}
	targets, err := s.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return all, targets
}

// TestReplayEqualsLive drives the store with random enqueues, claims,
// outcomes, cancels and revives, then closes and reopens it: the jobs and
// breakers after replay equal the ones before.
func TestReplayEqualsLive(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		now := int64(1_700_000_000_000)
		s := openStore(t, dir, now)
		ctx := context.Background()
		var claimed []store.Claim
		rnd := func() uint32 { return rapid.Uint32().Draw(rt, "r") }
		targets := []string{"a", "b", "c"}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			now += rapid.Int64Range(0, 700).Draw(rt, "dt")
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1:
				n := rapid.IntRange(1, 4).Draw(rt, "n")
				jobs := make([]store.NewJob, n)
				for i := range jobs {
					jobs[i] = store.NewJob{Due: now + rapid.Int64Range(-100, 1000).Draw(rt, "due"), Spec: state.Spec{
						Kind:    "k",
						Target:  rapid.SampledFrom(targets).Draw(rt, "target"),
						Payload: []byte(rapid.StringN(0, 8, -1).Draw(rt, "payload")),
						Key:     rapid.SampledFrom([]string{"", "", "x", "y"}).Draw(rt, "key"),
						Policy:  retry.Policy{Attempts: rapid.IntRange(1, 4).Draw(rt, "attempts"), BaseMS: 10, CapMS: 100, DeadlineMS: rapid.SampledFrom([]int64{0, 0, 2000}).Draw(rt, "deadline")},
					}}
				}
				if _, err := s.Enqueue(ctx, now, jobs); err != nil {
					rt.Fatal(err)
				}
			case 2:
				cs, err := s.Claim(ctx, now, store.Limits{Max: rapid.IntRange(1, 5).Draw(rt, "max")})
				if err != nil {
					rt.Fatal(err)
				}
				claimed = append(claimed, cs...)
			case 3:
				if len(claimed) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(claimed)-1).Draw(rt, "which")
				c := claimed[i]
				claimed = append(claimed[:i], claimed[i+1:]...)
				class := retry.Class(rapid.IntRange(int(retry.Success), int(retry.Unsafe)).Draw(rt, "class"))
				out := store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: class, AfterMS: -1, Error: "e"}
				more, err := s.Finish(ctx, now, rnd, []store.Outcome{out}, store.Limits{Max: rapid.IntRange(0, 2).Draw(rt, "reclaim")})
				if err != nil {
					rt.Fatal(err)
				}
				claimed = append(claimed, more...)
			case 4:
				id := rapid.Uint64Range(1, 20).Draw(rt, "cancel")
				if _, err := s.Cancel(ctx, now, id, "c"); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrFinished) {
					rt.Fatal(err)
				}
			case 5:
				id := rapid.Uint64Range(1, 20).Draw(rt, "revive")
				if err := s.Retry(ctx, now, id); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrNotFailed) {
					rt.Fatal(err)
				}
			}
		}
		// Finish what runs, so that reopening has no attempt to requeue.
		for _, c := range claimed {
			if _, err := s.Finish(ctx, now, rnd, []store.Outcome{{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}}, store.Limits{}); err != nil {
				rt.Fatal(err)
			}
		}
		liveJobs, liveTargets := dump(t, s)
		liveStats, _ := s.Stats(ctx)
		if err := s.Close(); err != nil {
			rt.Fatal(err)
		}
		s2 := openStore(t, dir, now)
		defer s2.Close()
		jobs, gotTargets := dump(t, s2)
		stats, _ := s2.Stats(ctx)
		if !reflect.DeepEqual(liveJobs, jobs) {
			rt.Fatalf("jobs differ after replay:\nlive   %+v\nreplay %+v", liveJobs, jobs)
		}
		if !reflect.DeepEqual(liveTargets, gotTargets) {
			rt.Fatalf("targets differ after replay:\nlive   %+v\nreplay %+v", liveTargets, gotTargets)
		}
		if liveStats != stats {
			rt.Fatalf("stats differ: live %+v replay %+v", liveStats, stats)
		}
	})
}

// TestOrphansRequeuedAsFailedAttempts: an attempt running when the store
// closed (a crash) is requeued at reopen, counting one failure.
func TestOrphansRequeuedAsFailedAttempts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s := openStore(t, dir, 1000)
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 2, BaseMS: 1, CapMS: 1}}
	if _, err := s.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, 1000, store.Limits{Max: 10})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	s.Close()

	s = openStore(t, dir, 2000)
	j, err := s.Job(ctx, cs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != state.Pending || j.Fails() != 1 || j.Due != 1000 {
		t.Fatalf("orphan after reopen: %+v", j)
	}
	// The second (last) attempt is interrupted too: the next claim fails
	// the job as spent, with the reason, never silently.
	if cs, err = s.Claim(ctx, 2000, store.Limits{Max: 10}); err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	s.Close()
	s = openStore(t, dir, 3000)
	defer s.Close()
	if cs, err = s.Claim(ctx, 3000, store.Limits{Max: 10}); err != nil || len(cs) != 0 {
		t.Fatalf("claim of a spent job: %v %v", cs, err)
	}
	j, _ = s.Job(ctx, j.ID)
	if j.State != state.Failed || !strings.Contains(j.Reason(), "interrupted") {
		t.Fatalf("spent orphan: state %v reason %q", j.State, j.Reason())
	}
}

// TestPerTargetLimit: a target at its limit does not block other targets.
func TestPerTargetLimit(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), 1000)
	defer s.Close()
	ctx := context.Background()
	var jobs []store.NewJob
	for i := range 6 {
		target := "busy"
		if i >= 4 {
			target = "free"
		}
		jobs = append(jobs, store.NewJob{Due: 1000, Spec: state.Spec{Kind: "k", Target: target, Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}})
	}
	if _, err := s.Enqueue(ctx, 1000, jobs); err != nil {
		t.Fatal(err)
	}
	running := map[string]int{"busy": 1}
	cs, err := s.Claim(ctx, 1000, store.Limits{Max: 10, PerTarget: 2, Running: func(t string) int { return running[t] }})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, c := range cs {
		got[c.Target]++
	}
	if got["busy"] != 1 || got["free"] != 2 {
		t.Fatalf("claimed per target %v, want busy 1 and free 2", got)
	}
	// The held jobs are still pending and due.
	if due, ok := s.NextDue(); !ok || due != 1000 {
		t.Fatalf("held jobs lost from the queue: %d %v", due, ok)
	}
}

// TestDuplicateOutcomeIsIgnored: an outcome reported twice for one attempt
// records nothing the second time, and the journal stays readable.
func TestDuplicateOutcomeIsIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s := openStore(t, dir, 1000)
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}
	if _, err := s.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, 1000, store.Limits{Max: 1})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	out := store.Outcome{ID: cs[0].ID, Attempt: cs[0].Attempt, Class: retry.Success, AfterMS: -1}
	rnd := func() uint32 { return 0 }
	for range 2 {
		if _, err := s.Finish(ctx, 1001, rnd, []store.Outcome{out}, store.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = openStore(t, dir, 2000)
	defer s.Close()
	j, err := s.Job(ctx, cs[0].ID)
	if err != nil || j.State != state.Succeeded || len(j.Attempts()) != 1 {
		t.Fatalf("after a duplicate outcome and reopen: %+v %v", j, err)
	}
}
