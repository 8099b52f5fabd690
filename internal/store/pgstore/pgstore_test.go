package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/embedded"
	"github.com/runlog/runlog/internal/store/storetest"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/retry"
)

// TestMain runs the tests on a throwaway server (or RUNLOG_TEST_POSTGRES_URL)
// and then checks that no store left a goroutine behind (listener,
// heartbeat, rescuer, poller, pool).
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind by closed stores:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var testCircuit = retry.Circuit{Threshold: 3, WindowMS: 1000, CooldownMS: 500, Probes: 1}

// testRetention keeps finished jobs briefly, so that random runs expire some.
var testRetention = &state.Retention{SucceededMS: 1500, CancelledMS: 800, FailedMS: 3000,
	PerKind: []state.KindRetention{{Kind: "keep", SucceededMS: 0, CancelledMS: 300, FailedMS: 0}}}

// openTest opens a store on a fresh database and closes it at the end.
func openTest(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	url := pgtest.URL(t)
	if opts.Circuit == (retry.Circuit{}) {
		opts.Circuit = testCircuit
	}
	opts.Migrate = true
	s, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, url
}

// jobView and view: the stores' shared comparison form (package storetest).
type jobView = storetest.JobView

var view = storetest.View

// dump lists every job, oldest first (in pages of 7, so that paging is
// compared too), then newest first, plus the targets and stats.
func dump(t testing.TB, s store.Store) (all []jobView, desc []uint64, targets []store.TargetInfo, st store.Stats) {
	t.Helper()
	ctx := context.Background()
	for _, oldest := range []bool{true, false} {
		var after uint64
		for {
			page, next, err := s.List(ctx, store.Filter{After: after, Limit: 7, Oldest: oldest})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page {
				if oldest {
					all = append(all, view(j))
				} else {
					desc = append(desc, j.ID)
				}
			}
			if next == 0 {
				break
			}
			after = next
		}
	}
	targets, err := s.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) == 0 {
		targets = nil
	}
	for i := range targets {
		if len(targets[i].Breaker.Fails) == 0 {
			targets[i].Breaker.Fails = nil
		}
	}
	if st, err = s.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	return all, desc, targets, st
}

// sameClaims fails rt unless the claims are equal (empty payloads alike).
func sameClaims(rt *rapid.T, what string, want, got []store.Claim) {
	if len(got) != len(want) {
		rt.Fatalf("%s: embedded %+v, postgres %+v", what, want, got)
	}
	for k := range got {
		g, w := got[k], want[k]
		if len(g.Payload) == 0 && len(w.Payload) == 0 {
			g.Payload, w.Payload = nil, nil
		}
		if !reflect.DeepEqual(g, w) {
			rt.Fatalf("%s %d: embedded %+v, postgres %+v", what, k, w, g)
		}
	}
}

// errClass names which store sentinel err is, for comparison.
func errClass(err error) string {
	for _, e := range []error{store.ErrNotFound, store.ErrFinished, store.ErrNotFailed, store.ErrClosed, store.ErrNotDisabled} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}

// TestSameAsEmbedded drives this store and the embedded one side by side
// with the same random enqueues (keys, deadlines, due times), claims (with
// per-target limits), outcomes, cancels, revives and expiries: every
// answer, NextDue, and then every job (List in both orders, Job), breaker
// (Targets) and count (Stats), must be equal. Both stores decide by
// package state's code (state.Step, state.Planner); what this test holds
// to the embedded store is everything this store does in SQL around it,
// on random histories that the conformance suite's fixed cases do not
// reach: the rounds of a claim and the jobs it holds back, the fast and
// slow paths of outcomes, the history columns, keys, cancel, revive,
// retention, filters and paging.
func TestSameAsEmbedded(t *testing.T) {
	t.Parallel()
	// Targets failing for 1.5 s are disabled (the endpoint lifecycle).
	const disableAfter = 1500
	pg, _ := openTest(t, Options{Retention: testRetention, DisableAfterMS: disableAfter})
	ctx := context.Background()
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		// Each step is a transaction: fewer runs than rapid's default
		// keep the test within its time budget (-rapid.checks overrides).
		checks := "40"
		if testing.Short() {
			checks = "15"
		}
		f.Value.Set(checks)
		defer f.Value.Set(f.DefValue)
	}
	rapid.Check(t, func(rt *rapid.T) {
		// A fresh database state for each run.
		if _, err := pg.pool.Exec(ctx, "TRUNCATE runlog_jobs, runlog_breakers, runlog_target_life, runlog_flows, runlog_queues; ALTER SEQUENCE runlog_job_id RESTART"); err != nil {
			rt.Fatal(err)
		}
		pg.invalidate()
		now := int64(1_700_000_000_000)
		em, err := embedded.Open(t.TempDir(), embedded.Options{
			Journal:   journal.Options{SegmentSize: 64 << 10},
			State:     state.Config{Circuit: testCircuit, DisableAfterMS: disableAfter},
			Now:       now,
			Retention: testRetention,
		})
		if err != nil {
			rt.Fatal(err)
		}
		defer em.Close()
		stores := []store.Store{em, pg}
		var claimed []store.Claim
		targets := []string{"a", "b", "c"}
		steps := rapid.IntRange(1, 50).Draw(rt, "steps")
		for range steps {
			now += rapid.Int64Range(0, 700).Draw(rt, "dt")
			switch rapid.IntRange(0, 9).Draw(rt, "action") {
			case 0, 1:
				n := rapid.IntRange(1, 4).Draw(rt, "n")
				jobs := make([]store.NewJob, n)
				for i := range jobs {
					jobs[i] = store.NewJob{Due: now + rapid.Int64Range(-100, 1000).Draw(rt, "due"), Spec: state.Spec{
						Kind:      rapid.SampledFrom([]string{"k", "k", "keep"}).Draw(rt, "kind"),
						Target:    rapid.SampledFrom(targets).Draw(rt, "target"),
						Payload:   []byte(rapid.StringN(0, 8, -1).Draw(rt, "payload")),
						Key:       rapid.SampledFrom([]string{"", "", "x", "y"}).Draw(rt, "key"),
						Policy:    retry.Policy{Attempts: rapid.IntRange(1, 4).Draw(rt, "attempts"), BaseMS: 10, CapMS: 100, DeadlineMS: rapid.SampledFrom([]int64{0, 0, 2000}).Draw(rt, "deadline")},
						TimeoutMS: rapid.SampledFrom([]int64{0, 250}).Draw(rt, "timeout"),
						Queue:     rapid.SampledFrom([]string{"", "", "q"}).Draw(rt, "queue"),
					}}
				}
				var want []store.Enqueued
				for i, s := range stores {
					got, err := s.Enqueue(ctx, now, jobs)
					if err != nil {
						rt.Fatal(err)
					}
					if i == 0 {
						want = got
					} else if !reflect.DeepEqual(got, want) {
						rt.Fatalf("enqueue: embedded %+v, postgres %+v", want, got)
					}
				}
			case 2, 3:
				lim := store.Limits{Max: rapid.IntRange(1, 5).Draw(rt, "max"), PerTarget: rapid.IntRange(0, 2).Draw(rt, "perTarget")}
				running := map[string]int{}
				for _, c := range claimed {
					running[c.Target]++
				}
				lim.Running = func(t string) int { return running[t] }
				var want []store.Claim
				for i, s := range stores {
					got, err := s.Claim(ctx, now, lim)
					if err != nil {
						rt.Fatal(err)
					}
					if i == 0 {
						want = got
					} else {
						sameClaims(rt, "claim", want, got)
					}
				}
				claimed = append(claimed, want...)
			case 4:
				if len(claimed) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(claimed)-1).Draw(rt, "which")
				c := claimed[i]
				claimed = append(claimed[:i], claimed[i+1:]...)
				class := retry.Class(rapid.IntRange(int(retry.Success), int(retry.Unsafe)).Draw(rt, "class"))
				out := store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: class, AfterMS: rapid.SampledFrom([]int64{-1, -1, 50}).Draw(rt, "after"),
					Error: "e", Output: []byte(rapid.StringN(0, 4, -1).Draw(rt, "output"))}
				out.Gone = class == retry.Permanent && rapid.IntRange(0, 2).Draw(rt, "gone") == 0
				r := rapid.Uint32().Draw(rt, "r")
				lim := store.Limits{Max: rapid.IntRange(0, 2).Draw(rt, "reclaim")}
				var want []store.Claim
				for i, s := range stores {
					got, err := s.Finish(ctx, now, func() uint32 { return r }, []store.Outcome{out}, lim)
					if err != nil {
						rt.Fatal(err)
					}
					if i == 0 {
						want = got
					} else {
						sameClaims(rt, "finish's claim", want, got)
					}
				}
				claimed = append(claimed, want...)
			case 5:
				id := rapid.Uint64Range(1, 20).Draw(rt, "cancel")
				var want string
				var wantRunning bool
				for i, s := range stores {
					running, err := s.Cancel(ctx, now, id, "c")
					if i == 0 {
						want, wantRunning = errClass(err), running
					} else if errClass(err) != want || running != wantRunning {
						rt.Fatalf("cancel %d: embedded (%v, %s), postgres (%v, %s)", id, wantRunning, want, running, errClass(err))
					}
				}
			case 6:
				id := rapid.Uint64Range(1, 20).Draw(rt, "revive")
				var want string
				for i, s := range stores {
					err := s.Retry(ctx, now, id)
					if i == 0 {
						want = errClass(err)
					} else if errClass(err) != want {
						rt.Fatalf("revive %d: embedded %s, postgres %s", id, want, errClass(err))
					}
				}
			case 7:
				for _, s := range stores {
					if err := s.Expire(ctx, now); err != nil {
						rt.Fatal(err)
					}
				}
			case 9:
				// A queue's rate limit, slow enough to defer some jobs.
				name := rapid.SampledFrom([]string{"", "q"}).Draw(rt, "limitQueue")
				var lim retry.Limit
				if rapid.IntRange(0, 3).Draw(rt, "queueLimitNone") != 0 {
					lim = retry.Limit{RateMilli: rapid.Int64Range(100, 20_000).Draw(rt, "queueRate"), Burst: rapid.IntRange(1, 3).Draw(rt, "queueBurst")}
				}
				for _, s := range stores {
					if _, err := s.SetQueue(ctx, now, name, nil, nil, &lim); err != nil {
						rt.Fatal(err)
					}
				}
			case 8:
				target := rapid.SampledFrom(targets).Draw(rt, "enable")
				var want string
				for i, s := range stores {
					_, err := s.EnableTarget(ctx, now, target)
					if i == 0 {
						want = errClass(err)
					} else if errClass(err) != want {
						rt.Fatalf("enable %s: embedded %s, postgres %s", target, want, errClass(err))
					}
				}
			}
			ed, eok := em.NextDue()
			pd, pok := pg.NextDue()
			if eok != pok || ed != pd {
				// After a claim that held jobs back (per-target limit),
				// both say "due now", the embedded store with the held
				// job's due time, this one with now.
				if !(pok && eok && pd <= now && ed <= now) {
					rt.Fatalf("NextDue: embedded (%d, %v), postgres (%d, %v)", ed, eok, pd, pok)
				}
			}
		}
		ej, edesc, et, es := dump(t, em)
		pj, pdesc, pt, ps := dump(t, pg)
		if !reflect.DeepEqual(ej, pj) {
			for i := range min(len(ej), len(pj)) {
				if !reflect.DeepEqual(ej[i], pj[i]) {
					rt.Fatalf("job %d differs:\nembedded %+v\npostgres %+v", ej[i].Job.ID, ej[i], pj[i])
				}
			}
			rt.Fatalf("jobs differ: embedded has %d, postgres %d", len(ej), len(pj))
		}
		if !reflect.DeepEqual(edesc, pdesc) {
			rt.Fatalf("newest-first order differs: embedded %v, postgres %v", edesc, pdesc)
		}
		if !reflect.DeepEqual(et, pt) {
			rt.Fatalf("targets differ:\nembedded %+v\npostgres %+v", et, pt)
		}
		if es != ps {
			rt.Fatalf("stats differ: embedded %+v, postgres %+v", es, ps)
		}
		eq, err := em.Queues(ctx)
		if err != nil {
			rt.Fatal(err)
		}
		pq, err := pg.Queues(ctx)
		if err != nil {
			rt.Fatal(err)
		}
		if !reflect.DeepEqual(eq, pq) {
			rt.Fatalf("queues differ:\nembedded %+v\npostgres %+v", eq, pq)
		}
		for _, j := range ej {
			got, err := pg.Job(ctx, j.Job.ID)
			if err != nil || !reflect.DeepEqual(view(got), j) {
				rt.Fatalf("Job(%d) = %+v, %v; List showed %+v", j.Job.ID, view(got), err, j)
			}
		}
	})
}

// TestFilters: List's filters and search select the same jobs as the
// embedded store's.
func TestFilters(t *testing.T) {
	t.Parallel()
	pg, _ := openTest(t, Options{})
	em, err := embedded.Open(t.TempDir(), embedded.Options{State: state.Config{Circuit: testCircuit}, Now: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	ctx := context.Background()
	var jobs []store.NewJob
	for i := range 30 {
		jobs = append(jobs, store.NewJob{Due: 1000 + int64(i%3), Spec: state.Spec{
			Kind: []string{"mail", "sms"}[i%2], Target: []string{"t1", "t2", "t3"}[i%3],
			Key: []string{"", "order-1" + string(rune('0'+i%10)), "%_x"}[i%3], Policy: retry.DefaultPolicy(),
		}})
	}
	for _, s := range []store.Store{em, pg} {
		if _, err := s.Enqueue(ctx, 1000, jobs); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, 1000, store.Limits{Max: 4}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Cancel(ctx, 1000, 9, "no"); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []store.Filter{
		{}, {State: "pending"}, {State: "running"}, {State: "cancelled"}, {State: "bogus"},
		{Kind: "sms"}, {Target: "t2", Oldest: true}, {Search: "1"}, {Search: "order-13"}, {Search: "%_"},
		{Search: "_"}, {Kind: "mail", Search: "2", Limit: 2}, {After: 10, Limit: 3}, {After: 10, Oldest: true, Limit: 3},
	} {
		var want, got []uint64
		for i, s := range []store.Store{em, pg} {
			page, next, err := s.List(ctx, f)
			if err != nil {
				t.Fatalf("%+v: %v", f, err)
			}
			ids := []uint64{next}
			for _, j := range page {
				ids = append(ids, j.ID)
			}
			if i == 0 {
				want = ids
			} else {
				got = ids
			}
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("List(%+v): embedded [next ids...] %v, postgres %v", f, want, got)
		}
	}
}

// TestFencing: an outcome from a node whose attempt was rescued is dropped,
// and the rescued attempt counts as a failure that another node may retry.
func TestFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := openTest(t, Options{Node: "a", Lease: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond, RescueEvery: time.Hour})
	b, err := Open(ctx, url, Options{Node: "b", Circuit: testCircuit, RescueEvery: time.Hour, Now: func() int64 { return 1500 }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}
	if _, err := a.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := a.Claim(ctx, 1000, store.Limits{Max: 1})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	// Node a stops heartbeating (as if paused): forget its attempt.
	a.mu.Lock()
	delete(a.inflight, cs[0].ID)
	a.mu.Unlock()
	// Before the lease ends nothing is rescued.
	if n, err := b.Rescue(ctx); err != nil || n != 0 {
		t.Fatalf("rescue before expiry: %d %v", n, err)
	}
	// The lease ends on the database clock: rescue until it finds the job.
	n := testwait.Until(t, "the expired lease to be rescued", func() (int, bool) {
		n, err := b.Rescue(ctx)
		if err != nil {
			t.Fatalf("rescue: %v", err)
		}
		return n, n != 0
	})
	if n != 1 {
		t.Fatalf("rescue after expiry: %d", n)
	}
	j, _ := b.Job(ctx, cs[0].ID)
	if j.State != state.Pending || j.Fails() != 1 || !strings.Contains(j.LastError(), "node a stopped renewing its lease") {
		t.Fatalf("rescued job: %+v", j)
	}
	// The breaker is what package state's orphan rule makes of the same
	// history.
	ref := state.New(state.Config{Circuit: testCircuit})
	ref.Apply(&state.Op{Kind: state.OpEnqueue, ID: cs[0].ID, At: 1000, Due: 1000, Spec: &spec})
	for _, decide := range []func() state.Op{func() state.Op { return ref.Admit(cs[0].ID, 1000) }, func() state.Op { return ref.Orphan(cs[0].ID, 1500) }} {
		op := decide()
		ref.Apply(&op)
	}
	want := []store.TargetInfo{{Target: "t", Breaker: ref.Breaker("t"), Pending: 1}}
	if len(want[0].Breaker.Fails) == 0 {
		want[0].Breaker.Fails = nil
	}
	if got, _ := b.Targets(ctx); !reflect.DeepEqual(got, want) {
		t.Fatalf("breakers after the rescue: %+v, want %+v (package state's orphan rule)", got, want)
	}
	// Node b runs it again.
	cs2, err := b.Claim(ctx, 2000, store.Limits{Max: 1})
	if err != nil || len(cs2) != 1 || cs2[0].Attempt != 2 {
		t.Fatalf("claim on b: %v %v", cs2, err)
	}
	// Node a's late success is fenced off, and so is a success for b's
	// attempt reported by a.
	late := []store.Outcome{{ID: cs[0].ID, Attempt: 1, Class: retry.Success, AfterMS: -1}, {ID: cs[0].ID, Attempt: 2, Class: retry.Success, AfterMS: -1}}
	if _, err := a.Finish(ctx, 2100, func() uint32 { return 0 }, late, store.Limits{}); err != nil {
		t.Fatalf("a fenced Finish must not fail: %v", err)
	}
	for _, o := range late {
		if o.Verdict != (store.Verdict{}) {
			t.Errorf("the fenced outcome of attempt %d has the verdict %+v, want none (the engine then asks for the job)", o.Attempt, o.Verdict)
		}
	}
	if j, _ = b.Job(ctx, cs[0].ID); j.State != state.Running || !j.Attempts()[0].Ended || j.Attempts()[0].Class == retry.Success {
		t.Fatalf("after a's late outcome: %+v", j)
	}
	if _, err := b.Finish(ctx, 2200, func() uint32 { return 0 }, []store.Outcome{{ID: cs[0].ID, Attempt: 2, Class: retry.Success, AfterMS: -1}}, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if j, _ = b.Job(ctx, cs[0].ID); j.State != state.Succeeded || j.FinishedAt() != 2200 {
		t.Fatalf("after b's outcome: %+v", j)
	}
}

// TestVerdictsKnown: the PostgreSQL store gives every outcome it records
// its Verdict (the suite's case accepts a store that gives none), decided
// on the flight's facts (the one UPDATE) or on the row (a job cancelled
// while it ran), so that the engine need not read each failed job back.
func TestVerdictsKnown(t *testing.T) {
	t.Parallel()
	s, _ := openTest(t, Options{})
	storetest.Verdicts(t, s, true)
}

// TestCloseRequeues: attempts a node started and never finished are
// requeued by its Close, at once, as failed attempts.
func TestCloseRequeues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := openTest(t, Options{Node: "a", Now: func() int64 { return 5000 }})
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}
	if _, err := a.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}, {Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	if cs, err := a.Claim(ctx, 1000, store.Limits{Max: 2}); err != nil || len(cs) != 2 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Job(ctx, 1); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Job after Close: %v, want ErrClosed", err)
	}
	b, err := Open(ctx, url, Options{Circuit: testCircuit})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for id := uint64(1); id <= 2; id++ {
		j, err := b.Job(ctx, id)
		if err != nil || j.State != state.Pending || j.Fails() != 1 || j.Due != 1000 || !strings.Contains(j.LastError(), "node a closed") {
			t.Fatalf("job %d after Close: %+v %v", id, j, err)
		}
	}
}

// TestMigrate: migrations apply once, concurrently, and Open without
// Migrate refuses a database that lacks them.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	if _, err := Open(ctx, url, Options{}); !errors.Is(err, ErrSchemaOld) {
		t.Fatalf("Open on an empty database: %v, want ErrSchemaOld", err)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			v, err := Migrate(ctx, url)
			if err == nil && v != SchemaVersion() {
				err = errors.New("wrong version")
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM runlog_schema_migrations").Scan(&n); err != nil || n != SchemaVersion() {
		t.Fatalf("runlog_schema_migrations rows: %d %v", n, err)
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO runlog_schema_migrations (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Migrate(ctx, url); !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("Migrate on a newer schema: %v, want ErrSchemaNewer", err)
	}
	if _, err := Open(ctx, url, Options{}); !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("Open on a newer schema: %v, want ErrSchemaNewer", err)
	}
}

// TestExpire: finished jobs past retention (by state, and by kind where a
// kind overrides it) are deleted and their keys released; pending and
// recent ones stay.
func TestExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := (24 * time.Hour).Milliseconds()
	s, _ := openTest(t, Options{Retention: &state.Retention{
		SucceededMS: day, CancelledMS: day, FailedMS: 7 * day,
		PerKind: []state.KindRetention{{Kind: "audit", SucceededMS: 0, CancelledMS: day, FailedMS: day}},
	}})
	spec := func(kind, key string) state.Spec {
		return state.Spec{Kind: kind, Target: "t", Key: key, Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}
	}
	jobs := []store.NewJob{
		{Spec: spec("k", "done"), Due: 0}, {Spec: spec("k", "dead"), Due: 0}, {Spec: spec("k", "late"), Due: 0},
		{Spec: spec("audit", "kept"), Due: 0}, {Spec: spec("k", "wait"), Due: 10 * day},
	}
	if _, err := s.Enqueue(ctx, 0, jobs); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, 0, store.Limits{Max: 4})
	if err != nil || len(cs) != 4 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	ok := func(id uint64, class retry.Class) store.Outcome {
		return store.Outcome{ID: id, Attempt: 1, Class: class, AfterMS: -1}
	}
	if _, err := s.Finish(ctx, 0, func() uint32 { return 0 }, []store.Outcome{ok(1, retry.Success), ok(2, retry.Permanent), ok(4, retry.Success)}, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, 2*day, func() uint32 { return 0 }, []store.Outcome{ok(3, retry.Success)}, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		now  int64
		gone []uint64
	}{
		// A job expires at the end of the ttl/16-wide bucket its expiry
		// time falls in (state.PartOf).
		{day - 1, nil},
		{day + day/16 - 1, nil},
		{day + day/16, []uint64{1}},
		{3*day - 1, nil}, // job 3 finished at day 2 and is kept a day
		{3*day + day/16, []uint64{3}},
		{7*day + 7*day/16, []uint64{2}},
		{100 * day, nil}, // job 4's kind keeps successes forever; job 5 is pending
	} {
		if err := s.Expire(ctx, tc.now); err != nil {
			t.Fatalf("Expire(%d): %v", tc.now, err)
		}
		for _, id := range tc.gone {
			if _, err := s.Job(ctx, id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("job %d after Expire(%d): %v", id, tc.now, err)
			}
		}
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Counts.Total() != 2 || st.Counts.Succeeded != 1 || st.Counts.Pending != 1 {
		t.Fatalf("stats after expiry: %+v %v", st, err)
	}
	// The keys are free again; the kept jobs' keys are still held.
	res, err := s.Enqueue(ctx, 100*day, []store.NewJob{{Spec: spec("k", "done"), Due: 0}, {Spec: spec("k", "wait"), Due: 0}, {Spec: spec("k", "kept"), Due: 0}})
	if err != nil || res[0].Existing || !res[1].Existing || res[1].ID != 5 || !res[2].Existing || res[2].ID != 4 {
		t.Fatalf("enqueue after retention: %+v %v", res, err)
	}
}

// TestFencingStaleFlight: a node whose attempt was rescued (its lease ran
// out on the database clock while it still held the attempt, as a paused
// node does) and handed to another node reports its outcome decided on the
// facts it kept since the claim: the outcome is fenced off by the row's
// state, and the other node's attempt and the rescue's record stand.
func TestFencingStaleFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := openTest(t, Options{Node: "a", Lease: 3 * time.Hour, Heartbeat: time.Hour, RescueEvery: time.Hour})
	b, err := Open(ctx, url, Options{Node: "b", Circuit: testCircuit, RescueEvery: time.Hour, Now: func() int64 { return 1500 }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}
	if _, err := a.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}, {Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := a.Claim(ctx, 1000, store.Limits{Max: 2})
	if err != nil || len(cs) != 2 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	stale, kept := cs[0], cs[1]
	// The lease of the first attempt runs out; a still holds its flight.
	if _, err := a.pool.Exec(ctx, "UPDATE runlog_jobs SET lease_until = now() - interval '1 second' WHERE id = $1", int64(stale.ID)); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Rescue(ctx); err != nil || n != 1 {
		t.Fatalf("rescue: %d %v", n, err)
	}
	cs2, err := b.Claim(ctx, 2000, store.Limits{Max: 1})
	if err != nil || len(cs2) != 1 || cs2[0].ID != stale.ID || cs2[0].Attempt != 2 {
		t.Fatalf("claim on b: %v %v", cs2, err)
	}
	// a reports both: a failure of the rescued attempt (fenced) and a
	// success of the attempt it still holds (recorded).
	outs := []store.Outcome{
		{ID: stale.ID, Attempt: 1, Class: retry.Retryable, AfterMS: -1, Error: "late"},
		{ID: kept.ID, Attempt: 1, Class: retry.Success, AfterMS: -1},
	}
	if _, err := a.Finish(ctx, 2100, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
		t.Fatalf("Finish with a fenced outcome must not fail: %v", err)
	}
	j, err := b.Job(ctx, stale.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != state.Running || j.Fails() != 1 || len(j.Attempts()) != 2 || j.Attempts()[1].Ended ||
		!strings.Contains(j.Attempts()[0].Error, "node a stopped renewing its lease") {
		t.Fatalf("the rescued job after a's late outcome: %+v", j)
	}
	if j, _ := a.Job(ctx, kept.ID); j.State != state.Succeeded || j.FinishedAt() != 2100 || !j.Attempts()[0].Ended || j.Attempts()[0].Class != retry.Success {
		t.Fatalf("the job a still held: %+v", j)
	}
	// The fenced failure did not count against the breaker.
	if ts, _ := b.Targets(ctx); len(ts) != 1 || len(ts[0].Breaker.Fails) != 0 {
		t.Fatalf("breakers: %+v", ts)
	}
}

// TestMigrationMovesLatestAttempt: migration 3 moves the latest attempt of
// each job written by a version-2 node from the end of history to the
// latest column, and the job reads back with the same attempts.
func TestMigrationMovesLatestAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE runlog_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:2] {
		if _, err := conn.Exec(ctx, m.sql); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO runlog_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			t.Fatal(err)
		}
	}
	// Job 1 ran twice (attempt 1 failed, attempt 2 runs); job 2 never ran.
	if _, err := conn.Exec(ctx, `INSERT INTO runlog_jobs (id, state, kind, target, payload, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at, fails, started, last_error, history, node)
		VALUES (1, 1, 'k', 't', '\x7b7d', 5, 10, 100, 0, 0, 20, 10, 5, 1, 2, 'boom', '[{"n":1,"s":10,"e":12,"c":2,"d":true,"err":"boom","node":"a"},{"n":2,"s":20,"node":"b"}]', 'b'),
		       (2, 0, 'k', 't', '\x7b7d', 5, 10, 100, 0, 0, 20, 20, 5, 0, 0, '', '[]', '')`); err != nil {
		t.Fatal(err)
	}
	if v, err := Migrate(ctx, url); err != nil || v != SchemaVersion() {
		t.Fatalf("Migrate = %d, %v", v, err)
	}
	var hist, latest *string
	if err := conn.QueryRow(ctx, "SELECT history::text, latest FROM runlog_jobs WHERE id = 1").Scan(&hist, &latest); err != nil {
		t.Fatal(err)
	}
	if latest == nil || !strings.Contains(*latest, `"n": 2`) || strings.Contains(*hist, `"n": 2`) {
		t.Fatalf("after migration: history %v, latest %v; want attempt 2 moved to latest", *hist, latest)
	}
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := s.Job(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []state.Attempt{{N: 1, StartedAt: 10, EndedAt: 12, Class: retry.Retryable, Ended: true, Error: "boom"}, {N: 2, StartedAt: 20}}
	if !reflect.DeepEqual(j.Attempts(), want) {
		t.Fatalf("job 1 attempts after migration: %+v, want %+v", j.Attempts(), want)
	}
	if j, err := s.Job(ctx, 2); err != nil || len(j.Attempts()) != 0 {
		t.Fatalf("job 2 after migration: %+v, %v", j.Attempts(), err)
	}
}

// insertDue inserts pending jobs with ids from to last straight in SQL,
// each due at its id, of target and queue.
func insertDue(t *testing.T, s *Store, from, last int, target, queue string) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO runlog_jobs (id, state, kind, target, payload, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at, queue)
		SELECT g, 0, 'k', $3, '\x7b7d', 3, 10, 100, 0, 0, g, g, g, $4 FROM generate_series($1::bigint, $2::bigint) g`, from, last, target, queue); err != nil {
		t.Fatal(err)
	}
}

// TestClaimWalksTheDueIndex: on a table the planner knows nothing about
// (never analyzed) and 20 k due jobs, the claim's statements, as a claim
// round sends them, are planned as walks of a due index that stop at their
// limit, not as a scan of every due row and a sort: dueSQL of its queue's
// range of runlog_jobs_queue_due, plainDueSQL of runlog_jobs_due.
func TestClaimWalksTheDueIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	insertDue(t, s, 1, 20000, "", "")
	plan := func(b *pgx.Batch, sql string) string {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var lines []string
		b.Queue("EXPLAIN "+sql, int64(1<<40), []string{}, 129, []string{}).Query(func(rows pgx.Rows) error {
			var err error
			lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	for _, c := range []struct{ name, sql, index string }{{"dueSQL", dueSQL, "runlog_jobs_queue_due"}, {"plainDueSQL", plainDueSQL, "runlog_jobs_due"}} {
		var naive pgx.Batch
		t.Logf("%s, plan without the claim's setting:\n%s", c.name, plan(&naive, c.sql))
		var claim pgx.Batch
		claim.Queue("SELECT " + claimPlans) // as a claim's first statement sets it (queueLockSharedSQL)
		if p := plan(&claim, c.sql); strings.Contains(p, "Sort") || !strings.Contains(p, c.index+" on") {
			t.Fatalf("%s: the claim would sort the due jobs, or not walk %s:\n%s", c.name, c.index, p)
		}
	}
}

// TestClaimPlanOneTarget: with statistics that say every pending job has
// the same target and queue (one webhook endpoint, the default queue), the
// generic plans of the claim's statements, sorts allowed, still walk a due
// index and stop at their limit: the planner once took "target <> ALL(an
// array it cannot see)" for nearly no row and planned a scan of every due
// row and a sort (see dueWhere).
func TestClaimPlanOneTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	insertDue(t, s, 1, 40000, "http://one.example", "")
	if _, err := s.pool.Exec(ctx, "ANALYZE runlog_jobs"); err != nil {
		t.Fatal(err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, prepare, execute, index string }{
		{"dueSQL", "(bigint, text[], int, text[]) AS " + dueSQL, "(100000, '{}', 129, '{}')", "runlog_jobs_queue_due"},
		{"plainDueSQL", "(bigint, text[], int, text[]) AS " + plainDueSQL, "(100000, '{}', 129, '{}')", "runlog_jobs_due"},
		{"nextDueSQL", "(bigint) AS " + nextDueSQL, "(5)", "runlog_jobs_queue_due"},
	} {
		name := strings.ToLower(c.name)
		if _, err := conn.Exec(ctx, "PREPARE "+name+c.prepare); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+c.execute)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(lines, "\n"); strings.Contains(p, "Sort") || strings.Contains(p, "Seq Scan on runlog_jobs") || !strings.Contains(p, c.index+" on") {
			t.Fatalf("%s, generic plan with one target: it sorts or scans the due jobs instead of walking %s:\n%s", c.name, c.index, p)
		}
	}
}

// TestClaimSkipsHeldQueues: 20 000 due jobs in a paused queue and 20 000 in
// a queue the claim holds back ($4, as a queue at its concurrency is) cost
// the claim's statement one index probe each, not a walk past their jobs:
// the generic plan (the one a pooled connection runs after five claims)
// touches a few dozen buffers where a walk touches thousands, and the
// claim starts the default queue's jobs behind them.
func TestClaimSkipsHeldQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	if _, err := s.pool.Exec(ctx, `INSERT INTO runlog_jobs (id, state, kind, target, payload, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at, queue)
		SELECT g, 0, 'k', '', '\x7b7d', 3, 10, 100, 0, 0, g, g, g, CASE WHEN g % 2 = 0 THEN 'paused' ELSE 'full' END FROM generate_series(1, 40000) g`); err != nil {
		t.Fatal(err)
	}
	insertDue(t, s, 40001, 40005, "", "")
	if _, err := s.pool.Exec(ctx, "ANALYZE runlog_jobs"); err != nil {
		t.Fatal(err)
	}
	paused := true
	if _, err := s.SetQueue(ctx, 1, "paused", nil, &paused, nil); err != nil {
		t.Fatal(err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{"PREPARE claimdue(bigint, text[], int, text[]) AS " + dueSQL, "SET plan_cache_mode = force_generic_plan", "BEGIN", "SELECT " + claimPlans} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(ctx, "ROLLBACK")
	var out []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claimdue(100000, '{}', 129, '{full}')").Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan struct {
			Rows int `json:"Actual Rows"`
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN's JSON: %v\n%s", err, out)
	}
	p := plans[0].Plan
	if p.Rows != 5 || p.Hit+p.Read > 200 {
		t.Fatalf("the claim's statement read %d rows through %d buffers; want the default queue's 5 through a few dozen:\n%s", p.Rows, p.Hit+p.Read, out)
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// The whole claim: "full" bounded to one attempt, so that after its
	// first job the claim holds it back and reads on in the default queue.
	one := 1
	if _, err := s.SetQueue(ctx, 2, "full", &one, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, 100000, store.Limits{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, c := range got {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if want := []uint64{1, 40001, 40002, 40003, 40004, 40005}; !slices.Equal(ids, want) {
		t.Fatalf("claimed %v, want %v", ids, want)
	}
}

// TestOutcomeOfEarlierAttemptKeepsLease: the late outcome of attempt 1 of
// a job cancelled, revived and running attempt 2 on this node ends attempt
// 1 only; the node keeps attempt 2 in flight and its heartbeat goes on
// renewing attempt 2's lease (else a rescue would run the job twice).
func TestOutcomeOfEarlierAttemptKeepsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{Lease: time.Second, Heartbeat: 100 * time.Millisecond, RescueEvery: time.Hour})
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}
	out, err := s.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	id := out[0].ID
	first, err := s.Claim(ctx, 1000, store.Limits{Max: 1})
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v", first, err)
	}
	if _, err := s.Cancel(ctx, 1001, id, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, 1002, id); err != nil {
		t.Fatal(err)
	}
	second, err := s.Claim(ctx, 1002, store.Limits{Max: 1})
	if err != nil || len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("second claim: %v %v", second, err)
	}
	if _, err := s.Finish(ctx, 1003, func() uint32 { return 0 }, []store.Outcome{{ID: id, Attempt: 1, Class: retry.Success, AfterMS: -1}}, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	f, ok := s.inflight[id]
	s.mu.Unlock()
	if !ok || f.attempt() != 2 {
		t.Fatalf("after the outcome of attempt 1 the node's flight of job %d is %+v (%v), want attempt 2", id, f, ok)
	}
	lease := func() time.Time {
		var at time.Time
		if err := s.pool.QueryRow(ctx, "SELECT lease_until FROM runlog_jobs WHERE id = $1", int64(id)).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	was := lease()
	testwait.For(t, "the heartbeat to renew attempt 2's lease", func() bool { return lease().After(was) })
}

// TestClaimTxPlans: every statement of a claim's path on runlog_jobs,
// planned as a claim's transaction plans it (claimPlans: a generic plan at
// the first execution, which the connection then keeps) while the table
// holds 50 jobs, finds its rows through an index: no sequential scan of the
// jobs, no hash or merge join, no sort, so that the plan a connection keeps
// stays right as the table grows. (Without the settings that forbid them,
// the start's UPDATE planned so was a hash join over a sequential scan,
// which W2's connections kept as the table grew: 7-12 ms a claim.)
func TestClaimTxPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	insertDue(t, s, 1, 50, "", "")
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{"BEGIN", fmt.Sprintf("SELECT pg_advisory_xact_lock_shared(%d), %s", queueLock, claimPlans)} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(ctx, "ROLLBACK")
	for _, c := range []struct{ name, sql, args, index string }{
		{"due", dueSQL, "(100000, '{}', 129, '{}')", "runlog_jobs_queue_due"},
		{"plaindue", plainDueSQL, "(100000, '{}', 129, '{}')", "runlog_jobs_due"},
		{"nextdue", nextDueSQL, "(5)", "runlog_jobs_queue_due"},
		{"start", startSQL, `('{51,52}', '{1,1}', 'n', 5000, 9, '{"{}","{}"}')`, "runlog_jobs_pkey"},
		{"settle", settleFastSQL, `('{51,52}', '{1,1}', '{2,2}', '{0,0}', '{0,0}', '{0,0}', '{"",""}', '{"",""}', '{"{}","{}"}', 'n', '{1,1}')`, "runlog_jobs_pkey"},
		{"defer", deferSQL, "(51, 7)", "runlog_jobs_pkey"},
		{"fail", failSQL, "(51, 7, 'r')", "runlog_jobs_pkey"},
		{"rows", settleRowsSQL, "('{51,52}')", "runlog_jobs_pkey"},
	} {
		if _, err := conn.Exec(ctx, "PREPARE "+c.name+" AS "+c.sql); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+c.name+c.args)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p := strings.Join(lines, "\n")
		for _, bad := range []string{"Seq Scan on runlog_jobs", "Hash Join", "Merge Join", "Sort"} {
			if strings.Contains(p, bad) {
				t.Fatalf("%s, planned as a claim's transaction plans it: %s, not an index:\n%s", c.name, bad, p)
			}
		}
		if !strings.Contains(p, c.index+" on") {
			t.Fatalf("%s: %s not used:\n%s", c.name, c.index, p)
		}
	}
}
