package embedded

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

// answers is everything a store tells about its jobs: every page of every
// filter in both orders, each job by id, the stats and the targets.
type answers struct {
	Lists   map[string][]jobView
	ByID    map[uint64]jobView
	Missing []uint64
	Stats   store.Stats
	Targets []store.TargetInfo
	Queues  []state.QueueInfo
}

// answersDiff returns the first difference between a (live) and b, or "".
func answersDiff(a, b answers) string {
	for name, l := range a.Lists {
		if !reflect.DeepEqual(l, b.Lists[name]) {
			o := b.Lists[name]
			for i := range min(len(l), len(o)) {
				if !reflect.DeepEqual(l[i], o[i]) {
					return fmt.Sprintf("List %s, entry %d:\nlive  %+v\nother %+v", name, i, l[i], o[i])
				}
			}
			return fmt.Sprintf("List %s:\nlive  %s\nother %s", name, ids(l), ids(o))
		}
	}
	for id, j := range a.ByID {
		if !reflect.DeepEqual(j, b.ByID[id]) {
			return fmt.Sprintf("Job(%d):\nlive  %+v\nother %+v", id, j, b.ByID[id])
		}
	}
	if !slices.Equal(a.Missing, b.Missing) {
		return fmt.Sprintf("missing: live %v, other %v", a.Missing, b.Missing)
	}
	if a.Stats != b.Stats {
		return fmt.Sprintf("stats: live %+v, other %+v", a.Stats, b.Stats)
	}
	if !reflect.DeepEqual(a.Targets, b.Targets) {
		return fmt.Sprintf("targets: live %+v, other %+v", a.Targets, b.Targets)
	}
	if !reflect.DeepEqual(a.Queues, b.Queues) {
		return fmt.Sprintf("queues: live %+v, other %+v", a.Queues, b.Queues)
	}
	return ""
}

func ids(js []jobView) string {
	var b strings.Builder
	for _, j := range js {
		fmt.Fprintf(&b, "%d:%v ", j.Job.ID, j.Job.State)
	}
	return b.String()
}

func tierFilters() map[string]store.Filter {
	fs := map[string]store.Filter{"all": {}}
	for _, st := range []string{"pending", "running", "succeeded", "failed", "cancelled"} {
		fs["state="+st] = store.Filter{State: st}
	}
	for _, k := range []string{"k1", "k2"} {
		fs["kind="+k] = store.Filter{Kind: k}
	}
	for _, t := range []string{"a", "b"} {
		fs["target="+t] = store.Filter{Target: t}
	}
	fs["failed+k1"] = store.Filter{State: "failed", Kind: "k1"}
	fs["key=x"] = store.Filter{Search: "x"}
	fs["key=xy"] = store.Filter{Search: "xy"}
	fs["pending+k2"] = store.Filter{State: "pending", Kind: "k2"}
	fs["k1+key=x"] = store.Filter{Kind: "k1", Search: "x"}
	for _, sc := range []string{"s1", "s2"} {
		fs["schedule="+sc] = store.Filter{Schedule: sc}
	}
	fs["succeeded+s1"] = store.Filter{State: "succeeded", Schedule: "s1"}
	return fs
}

// fataler is what collect needs of a test: a *testing.T, or a *rapid.T
// (so that rapid records the failing seed and shrinks it).
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func collect(t fataler, s *Store, maxID uint64) answers {
	t.Helper()
	ctx := context.Background()
	a := answers{Lists: map[string][]jobView{}, ByID: map[uint64]jobView{}}
	// The lookups a filtered List reads (the jobs by kind, the ordered
	// keys) equal a scan of the jobs in memory: Check compares them.
	s.mu.Lock()
	err := s.st.Check()
	s.mu.Unlock()
	if err != nil {
		t.Fatalf("the state in memory: %v", err)
	}
	for name, f := range tierFilters() {
		for _, oldest := range []bool{true, false} {
			f := f
			f.Oldest, f.Limit = oldest, 3
			var all []jobView
			for pages := 0; ; pages++ {
				page, next, err := s.List(ctx, f)
				if err != nil {
					t.Fatalf("List %s: %v", name, err)
				}
				if len(page) == 0 && next != 0 {
					t.Fatalf("List %s: an empty page with a cursor", name)
				}
				for _, j := range page {
					all = append(all, view(j))
				}
				if next == 0 {
					break
				}
				if len(page) < f.Limit {
					t.Fatalf("List %s: a short page (%d) before the end", name, len(page))
				}
				f.After = next
			}
			key := name
			if !oldest {
				key += " newest"
			}
			a.Lists[key] = all
		}
	}
	for id := uint64(1); id <= maxID; id++ {
		j, err := s.Job(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			a.Missing = append(a.Missing, id)
		case err != nil:
			t.Fatalf("Job(%d): %v", id, err)
		default:
			a.ByID[id] = view(j)
		}
	}
	// Every filtered walk (through the lookups) is the walk of all jobs
	// (a scan) filtered here.
	for name, f := range tierFilters() {
		for _, order := range []string{"", " newest"} {
			var want []jobView
			for _, j := range a.Lists["all"+order] {
				job := j.Job
				job.Spec = &j.Spec
				if f := f; matches(&job, &f, allDigits(f.Search)) {
					want = append(want, j)
				}
			}
			if got := a.Lists[name+order]; !reflect.DeepEqual(got, want) {
				t.Fatalf("List %s%s: %s, the filtered walk of all jobs %s", name, order, ids(got), ids(want))
			}
		}
	}
	for name, l := range a.Lists {
		for _, j := range l {
			if _, ok := a.ByID[j.Job.ID]; !ok {
				t.Fatalf("List %s shows job %d, which Job does not find", name, j.Job.ID)
			}
		}
	}
	if a.Stats, err = s.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Targets, err = s.Targets(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Queues, err = s.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestTwoTiersReplayEqualsLive drives the two-tier store with random
// enqueues (payloads over a tiny cache, so they spill), claims, outcomes,
// cancels, retries by hand of evicted jobs, expiries, checkpoints, and
// waits for the spiller; at a random point it clones the filesystems (the
// journal's and the table's) as a crash would leave them. The clone, and
// the live store closed and reopened, answer every List, Job and Stats
// exactly as the live store did when the clone was taken (or closed).
func TestTwoTiersReplayEqualsLive(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewMem()
		now := int64(1_700_000_000_000)
		ret := &state.Retention{SucceededMS: 3000, CancelledMS: 2000, FailedMS: 8000}
		disableAfter := rapid.SampledFrom([]int64{0, 500, 3000}).Draw(rt, "disableAfter")
		opts := func(fsys vfs.FS, now int64) Options {
			return Options{
				Journal:           journal.Options{FS: fsys, SegmentSize: 4 << 10, NoPreallocate: true},
				SnapshotBytes:     rapid.SampledFrom([]int64{-1, 2 << 10, 8 << 10}).Draw(rt, "snapshotBytes"),
				State:             state.Config{Circuit: testCircuit, DisableAfterMS: disableAfter},
				Retention:         ret,
				PayloadCacheBytes: rapid.SampledFrom([]int64{-1, 16, 1 << 20}).Draw(rt, "cache"),
				Now:               now,
			}
		}
		s, err := Open("/data", opts(mem, now))
		if err != nil {
			rt.Fatal(err)
		}
		ctx := context.Background()
		var claimed []store.Claim
		var maxID uint64
		rnd := func() uint32 { return rapid.Uint32().Draw(rt, "r") }
		finishAll := func() {
			for _, c := range claimed {
				if _, err := s.Finish(ctx, now, rnd, []store.Outcome{{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}}, store.Limits{}); err != nil {
					rt.Fatal(err)
				}
			}
			claimed = nil
		}
		var crashed *vfs.Mem
		var atCrash answers
		crashAt := rapid.IntRange(0, 80).Draw(rt, "crashAt")
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for step := range steps {
			if step == crashAt {
				finishAll()
				atCrash = collect(rt, s, maxID)
				crashed = mem.CrashClone(rand.New(rand.NewPCG(uint64(step), 7)))
			}
			now += rapid.Int64Range(0, 900).Draw(rt, "dt")
			switch rapid.IntRange(0, 14).Draw(rt, "action") {
			case 0, 1:
				n := rapid.IntRange(1, 4).Draw(rt, "n")
				jobs := make([]store.NewJob, n)
				for i := range jobs {
					jobs[i] = store.NewJob{Due: now + rapid.Int64Range(-100, 1000).Draw(rt, "due"), Spec: state.Spec{
						Kind:     rapid.SampledFrom([]string{"k1", "k2"}).Draw(rt, "kind"),
						Target:   rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "target"),
						Payload:  []byte(rapid.StringN(0, 40, -1).Draw(rt, "payload")),
						Key:      rapid.SampledFrom([]string{"", "", "", "x", "y", "xy"}).Draw(rt, "key"),
						Policy:   retry.Policy{Attempts: rapid.IntRange(1, 3).Draw(rt, "attempts"), BaseMS: 10, CapMS: 100},
						Queue:    rapid.SampledFrom([]string{"", "", "q"}).Draw(rt, "queue"),
						Priority: rapid.SampledFrom([]int32{0, 0, 3, -3}).Draw(rt, "priority"),
					}}
				}
				got, err := s.Enqueue(ctx, now, jobs)
				if err != nil {
					rt.Fatal(err)
				}
				for _, e := range got {
					maxID = max(maxID, e.ID)
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
				// A server's wait holds the job's whole target (a flow).
				out := store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: class, AfterMS: rapid.SampledFrom([]int64{-1, -1, 0, 500}).Draw(rt, "after"), Error: "e"}
				out.Gone = class == retry.Permanent && rapid.IntRange(0, 2).Draw(rt, "gone") == 0
				if rapid.IntRange(0, 3).Draw(rt, "snooze") == 0 {
					out = store.Outcome{ID: c.ID, Attempt: c.Attempt, Snooze: true, AfterMS: rapid.Int64Range(0, 500).Draw(rt, "snoozeFor")}
				}
				more, err := s.Finish(ctx, now, rnd, []store.Outcome{out}, store.Limits{Max: rapid.IntRange(0, 2).Draw(rt, "reclaim")})
				if err != nil {
					rt.Fatal(err)
				}
				claimed = append(claimed, more...)
			case 4:
				id := rapid.Uint64Range(1, maxID+1).Draw(rt, "cancel")
				if _, err := s.Cancel(ctx, now, id, "c"); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrFinished) {
					rt.Fatal(err)
				}
			case 5:
				id := rapid.Uint64Range(1, maxID+1).Draw(rt, "retry")
				if err := s.Retry(ctx, now, id); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrNotFailed) {
					rt.Fatal(err)
				}
			case 6:
				if err := s.Expire(ctx, now); err != nil {
					rt.Fatal(err)
				}
			case 7:
				if _, err := s.Snapshot(); err != nil {
					rt.Fatal(err)
				}
			case 8:
				if err := s.settle(); err != nil {
					rt.Fatal(err)
				}
			case 9:
				conc, paused := rapid.IntRange(0, 2).Draw(rt, "concurrency"), rapid.Bool().Draw(rt, "paused")
				var lim *retry.Limit
				if rapid.Bool().Draw(rt, "setQueueLimit") {
					// Slow enough that the limit defers some of the due jobs.
					lim = &retry.Limit{}
					if rapid.IntRange(0, 3).Draw(rt, "queueLimitNone") != 0 {
						*lim = retry.Limit{RateMilli: rapid.Int64Range(100, 50_000).Draw(rt, "queueRate"), Burst: rapid.IntRange(1, 3).Draw(rt, "queueBurst")}
					}
				}
				if _, err := s.SetQueue(ctx, now, rapid.SampledFrom([]string{"", "q"}).Draw(rt, "setQueue"), &conc, &paused, lim); err != nil {
					rt.Fatal(err)
				}
			case 10:
				// A schedule change; a create of a name that exists, or a
				// change of one that does not, is refused and changes nothing.
				c := state.ScheduleChange{
					Action: state.ScheduleAction(rapid.IntRange(int(state.SchedCreate), int(state.SchedDelete)).Draw(rt, "schedAction")),
					Name:   rapid.SampledFrom([]string{"s1", "s2"}).Draw(rt, "schedName"),
				}
				if c.Action == state.SchedCreate || c.Action == state.SchedUpdate {
					c.Def = &state.ScheduleDef{EveryMS: rapid.Int64Range(1000, 3000).Draw(rt, "every"),
						CatchUp: state.CatchUp(rapid.IntRange(0, 2).Draw(rt, "catchUp")), Overlap: state.Overlap(rapid.IntRange(0, 1).Draw(rt, "overlap")),
						Job: state.Spec{Kind: "k1", Target: "a", Payload: []byte("tick"), Policy: retry.Policy{Attempts: 2, BaseMS: 10, CapMS: 100}}}
				}
				if _, err := s.ChangeSchedule(ctx, now, c); err != nil && !errors.Is(err, store.ErrScheduleExists) && !errors.Is(err, store.ErrScheduleNotFound) {
					rt.Fatal(err)
				}
			case 11:
				if _, _, _, err := s.Tick(ctx, now); err != nil {
					rt.Fatal(err)
				}
				maxID = max(maxID, s.st.NextID()-1)
			case 12:
				if _, err := s.EnableTarget(ctx, now, rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "enable")); err != nil && !errors.Is(err, store.ErrNotDisabled) {
					rt.Fatal(err)
				}
			case 13:
				// A discard, of a job in memory or in the table; an
				// unfinished or unknown one is refused.
				id := rapid.Uint64Range(1, maxID+1).Draw(rt, "discard")
				if err := s.Discard(ctx, now, id); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrNotFinished) {
					rt.Fatal(err)
				}
			case 14:
				l := retry.Limit{}
				if rapid.Bool().Draw(rt, "limited") {
					l = retry.Limit{RateMilli: rapid.Int64Range(500, 50_000).Draw(rt, "rate"), Burst: rapid.IntRange(1, 3).Draw(rt, "burst")}
				}
				if err := s.SetLimit(ctx, now, rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "limitTarget"), l); err != nil {
					rt.Fatal(err)
				}
			}
		}
		finishAll()
		live := collect(rt, s, maxID)
		if err := s.Close(); err != nil {
			rt.Fatal(err)
		}
		s2, err := Open("/data", opts(mem, now))
		if err != nil {
			rt.Fatal(err)
		}
		again := collect(rt, s2, maxID)
		s2.Close()
		if d := answersDiff(live, again); d != "" {
			rt.Fatalf("after close and reopen: %s", d)
		}
		if crashed == nil {
			return
		}
		s3, err := Open("/data", opts(crashed, now))
		if err != nil {
			rt.Fatalf("open after a crash at step %d: %v", crashAt, err)
		}
		defer s3.Close()
		if d := answersDiff(atCrash, collect(rt, s3, uint64(len(atCrash.ByID)+len(atCrash.Missing)))); d != "" {
			rt.Fatalf("after a crash at step %d: %s", crashAt, d)
		}
	})
}

// TestDamagedTableIsNeverSilent: bytes flipped in one of the table's
// files make the read that meets them fail with the table named and the
// remedy (never a job silently missing), and Verify reports the damage.
func TestDamagedTableIsNeverSilent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, 1000)
	ctx := context.Background()
	var jobs []store.NewJob
	for i := range 3000 {
		p := make([]byte, 64)
		for k := range p {
			p[k] = byte(i*31 + k*7)
		}
		jobs = append(jobs, store.NewJob{Due: 1000, Spec: state.Spec{Kind: "k", Target: "t", Payload: p, Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}})
	}
	if _, err := s.Enqueue(ctx, 1000, jobs); err != nil {
		t.Fatal(err)
	}
	for {
		cs, err := s.Claim(ctx, 1001, store.Limits{Max: 500})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			break
		}
		outs := make([]store.Outcome, len(cs))
		for i, c := range cs {
			outs[i] = store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}
		}
		if _, err := s.Finish(ctx, 1002, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, tableDir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no table file written")
	}
	b, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 4; i < len(b)/4+64; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(ssts[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(nil, dir, Options{State: state.Config{Circuit: testCircuit}}); !errors.Is(err, journal.ErrCorrupt) || !strings.Contains(err.Error(), "restore the directory from a backup") {
		t.Fatalf("Verify of a damaged table: %v", err)
	}
	s2, err := Open(dir, Options{Journal: journal.Options{SegmentSize: 4 << 10, NoPreallocate: true}, State: state.Config{Circuit: testCircuit}, Now: 2000})
	if err != nil {
		if !strings.Contains(err.Error(), tableDir) {
			t.Fatalf("Open refused without naming the table: %v", err)
		}
		return
	}
	defer s2.Close()
	var listErr error
	seen := 0
	var after uint64
	for {
		page, next, err := s2.List(ctx, store.Filter{After: after, Limit: 100, Oldest: true})
		if err != nil {
			listErr = err
			break
		}
		seen += len(page)
		if next == 0 {
			break
		}
		after = next
	}
	if listErr == nil {
		t.Fatalf("listing a damaged table gave %d of 3000 jobs and no error", seen)
	}
	if !strings.Contains(listErr.Error(), filepath.Join(dir, tableDir)) || !strings.Contains(listErr.Error(), "restore the directory from a backup") {
		t.Fatalf("the error names neither the table nor the remedy: %v", listErr)
	}
}
