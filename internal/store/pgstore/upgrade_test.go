package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/retry"
)

// worker runs jobs on one node until stop: it enqueues one, claims up to
// four and settles them as successes, counting what it settled.
type worker struct {
	s    *Store
	done atomic.Int64
	errs chan error
	stop chan struct{}
	wg   sync.WaitGroup
}

// startWorker starts a worker on s.
func startWorker(s *Store) *worker {
	w := &worker{s: s, errs: make(chan error, 1), stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx := context.Background()
		spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			now := time.Now().UnixMilli()
			if _, err := s.Enqueue(ctx, now, []store.NewJob{{Spec: spec, Due: now}}); err != nil {
				w.errs <- err
				return
			}
			cs, err := s.Claim(ctx, now, store.Limits{Max: 4})
			if err != nil {
				w.errs <- err
				return
			}
			outs := make([]store.Outcome, len(cs))
			for i, c := range cs {
				outs[i] = store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}
			}
			if _, err := s.Finish(ctx, now, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
				w.errs <- err
				return
			}
			w.done.Add(int64(len(cs)))
		}
	}()
	return w
}

// progress waits until the worker settled n more jobs than it had.
func (w *worker) progress(t *testing.T, what string, n int64) {
	t.Helper()
	from := w.done.Load()
	testwait.UntilWithin(t, 30*time.Second, what, func() (int64, bool) {
		select {
		case err := <-w.errs:
			t.Fatalf("%s: the node failed: %v", what, err)
		default:
		}
		d := w.done.Load() - from
		return d, d >= n
	})
}

// halt stops the worker and reports its error, if any.
func (w *worker) halt(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	select {
	case err := <-w.errs:
		t.Fatalf("node failed: %v", err)
	default:
	}
}

// TestRollingUpgrade runs a node of build N (the embedded migrations) and a node of build N+1 (one more migration, an expand step
// that adds a column) on one database with jobs flowing on both: N+1
// migrates while N works, N goes on and opens again after the migration,
// and both settle jobs throughout. Then a contract step (N+2 drops the
// column, compatible only with itself) is applied once N has stopped, and
// builds N and N+1 are refused on it with the version they would need.
// Plan describes the expand step as online and the contract step as one
// that needs the older nodes stopped.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	base, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	n5 := len(base)
	expand := migration{version: n5 + 1, name: "test_expand.sql", sql: "ALTER TABLE runlog_jobs ADD COLUMN IF NOT EXISTS upgrade_note text", compatibleFrom: n5}
	contract := migration{version: n5 + 2, name: "test_contract.sql", sql: "ALTER TABLE runlog_jobs DROP COLUMN upgrade_note", compatibleFrom: n5 + 2}
	buildN := base
	buildN1 := append(append([]migration{}, base...), expand)
	buildN2 := append(append([]migration{}, buildN1...), contract)
	open := func(node string, ms []migration) (*Store, error) {
		return Open(ctx, url, Options{Node: node, Circuit: testCircuit, Migrate: true, migrations: ms, Logger: quietLogger()})
	}

	// Plan on a database one version behind: the embedded newest version is
	// online (compatible with the one before).
	if _, err := migrateKnown(ctx, url, base[:n5-1]); err != nil {
		t.Fatal(err)
	}
	have, steps, err := Plan(ctx, url)
	if err != nil || have != n5-1 || len(steps) != 1 || steps[0].Version != n5 || steps[0].CompatibleFrom > have {
		t.Fatalf("Plan at version %d: %d %+v %v", n5-1, have, steps, err)
	}

	a, err := open("n", buildN)
	if err != nil {
		t.Fatal(err)
	}
	var all []*worker // every worker, for the final count
	start := func(s *Store) *worker {
		w := startWorker(s)
		all = append(all, w)
		return w
	}
	wa := start(a)
	wa.progress(t, "build N to settle jobs", 20)
	b, err := open("n+1", buildN1) // applies the expand step while N works
	if err != nil {
		t.Fatalf("build N+1 opening (and migrating) while N runs: %v", err)
	}
	defer b.Close()
	wb := start(b)
	wa.progress(t, "build N to settle jobs after the expand step", 20)
	wb.progress(t, "build N+1 to settle jobs", 20)
	// N restarts mid-upgrade: it opens on the newer schema.
	wa.halt(t)
	a.Close()
	if a, err = open("n", buildN); err != nil {
		t.Fatalf("build N opening on schema %d: %v", n5+1, err)
	}
	wa = start(a)
	wa.progress(t, "build N, restarted, to settle jobs", 20)
	wb.progress(t, "build N+1 to settle jobs beside it", 20)
	wa.halt(t)
	a.Close()

	// The contract step: N+2, with N stopped.
	c, err := open("n+2", buildN2)
	if err != nil {
		t.Fatalf("build N+2: %v", err)
	}
	wb.halt(t)
	b.Close()
	wc := start(c)
	wc.progress(t, "build N+2 to settle jobs", 20)
	wc.halt(t)
	for _, old := range []struct {
		name string
		ms   []migration
	}{{"N", buildN}, {"N+1", buildN1}} {
		_, err := open("late", old.ms)
		if want := fmt.Sprintf("needs a build for schema %d or later", n5+2); !errors.Is(err, ErrSchemaNewer) || !strings.Contains(err.Error(), want) {
			t.Fatalf("build %s on the contracted schema: %v, want ErrSchemaNewer saying %q", old.name, err, want)
		}
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, w := range all {
		total += w.done.Load()
	}
	if st.Counts.Running != 0 || st.Counts.Failed != 0 || int64(st.Counts.Succeeded) < total {
		t.Fatalf("after the upgrade: %+v, %d jobs settled by the workers", st.Counts, total)
	}
	c.Close()
}
