package postgres_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/postgres"
)

// lockJobRow takes, in a transaction of its own on the database at url,
// the row lock of job id, which the outcome's UPDATE then waits for; the
// returned func rolls it back.
func lockJobRow(t *testing.T, url string, id uint64) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM runlog_jobs WHERE id = $1 FOR UPDATE", int64(id)); err != nil {
		t.Fatal(err)
	}
	return func() {
		tx.Rollback(ctx)
		conn.Close(ctx)
	}
}

// waitOutcomeBlocked waits until a session of the database at url waits
// for a row lock: the outcome batch that lockJobRow holds back.
func waitOutcomeBlocked(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testwait.UntilWithin(t, 30*time.Second, "the outcome batch to wait for the row lock", func() (int, bool) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE 'UPDATE runlog_jobs j SET state = u.state%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n, n > 0
	})
}

// TestAsyncOutcomesPoolBound: on PostgreSQL a slot is free once its
// handler returns, before its outcome is recorded. While the outcome of
// job A cannot be recorded (its row is locked by the test), the other
// jobs keep running on the slots, never more at once than the pool's
// Concurrency; once A's row is free, every job succeeds, each run once.
func TestAsyncOutcomesPoolBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	const conc = 3
	var (
		cur, peak, ran atomic.Int32
		aStarted       = make(chan uint64, 1)
		aGo            = make(chan struct{})
	)
	work := func(context.Context, []byte) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond) // under test: handlers that overlap
		ran.Add(1)
		return nil
	}
	r, err := postgres.Open(ctx, url, runlog.Config{
		Logger:      quietLogger(),
		Concurrency: conc,
		Handlers: map[string]runlog.Handler{
			"a": runlog.Handle(func(ctx context.Context, _ []byte) error {
				info, _ := runlog.AttemptFrom(ctx)
				aStarted <- info.JobID
				<-aGo
				return work(ctx, nil)
			}),
			"w": runlog.Handle(work),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	a := mustEnqueue(t, r, "a", nil)
	<-aStarted
	unlock := lockJobRow(t, url, a)
	defer unlock()
	close(aGo)
	waitOutcomeBlocked(t, url)
	const more = 60
	reqs := make([]runlog.JobRequest, more)
	for i := range reqs {
		reqs[i] = runlog.JobRequest{Kind: "w"}
	}
	res, err := r.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	// Other jobs run while A's outcome waits: the slot A held is free.
	testwait.UntilWithin(t, 30*time.Second, "jobs to run while A's outcome is held back", func() (int32, bool) {
		n := ran.Load()
		return n, n >= 1+conc
	})
	if j, err := r.Job(ctx, a); err != nil || j.State != runlog.StateRunning {
		t.Fatalf("job A while its row is locked: %+v %v (its outcome should not be recorded yet)", j, err)
	}
	unlock()
	for _, e := range res {
		waitState(t, r, e.ID, runlog.StateSucceeded)
	}
	waitState(t, r, a, runlog.StateSucceeded)
	if p := peak.Load(); p > conc {
		t.Fatalf("%d handlers ran at once with Concurrency %d", p, conc)
	}
	if n := ran.Load(); n != more+1 {
		t.Fatalf("%d handler runs for %d jobs", n, more+1)
	}
}

// envAsyncURL is the database of the child of TestAsyncOutcomeLostWithNode.
const envAsyncURL = "RUNLOG_ASYNCNODE_URL"

// asyncGate is the advisory lock the child's handler waits for: the
// parent holds it until it has locked the job's row.
const asyncGate = 7161

// TestAsyncOutcomeLostWithNode: a node killed (SIGKILL) after its handler
// returned and before its outcome's batch committed loses the outcome, not
// the job: once its lease expires, another node requeues the attempt and
// runs the job again (at least once), and it succeeds there.
func TestAsyncOutcomeLostWithNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	if _, err := postgres.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	side, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close(ctx)
	if _, err := side.Exec(ctx, "CREATE TABLE an_log (job bigint, node text, event text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Exec(ctx, "SELECT pg_advisory_lock($1)", asyncGate); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAsyncNodeChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envAsyncURL+"="+url)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	count := func(event, node string) int {
		var n int
		if err := side.QueryRow(ctx, "SELECT count(*) FROM an_log WHERE event = $1 AND node = $2", event, node).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testwait.UntilWithin(t, 60*time.Second, "the child's handler to begin", func() (string, bool) {
		return logs.String(), count("begin", "child") == 1
	})
	var id uint64
	if err := side.QueryRow(ctx, "SELECT job FROM an_log WHERE event = 'begin'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	unlock := lockJobRow(t, url, id)
	defer unlock()
	if _, err := side.Exec(ctx, "SELECT pg_advisory_unlock($1)", asyncGate); err != nil {
		t.Fatal(err)
	}
	testwait.UntilWithin(t, 30*time.Second, "the child's handler to return", func() (string, bool) {
		return logs.String(), count("returned", "child") == 1
	})
	waitOutcomeBlocked(t, url)
	cmd.Process.Kill()
	cmd.Wait()
	unlock()

	var reran atomic.Int32
	r, err := postgres.OpenWith(ctx, url, runlog.Config{
		Logger: quietLogger(),
		Handlers: map[string]runlog.Handler{"gated": runlog.Handle(func(context.Context, []byte) error {
			reran.Add(1)
			return nil
		})},
	}, postgres.Options{Node: "rescuer", RescueEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	j := testwait.UntilWithin(t, 30*time.Second, "the job to be rescued and run again", func() (runlog.Job, bool) {
		j, err := r.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j, j.State == runlog.StateSucceeded
	})
	if reran.Load() != 1 || len(j.History) != 2 || !strings.Contains(j.History[0].Error, "node child stopped renewing its lease") {
		t.Fatalf("job after the kill: %+v, run again %d times\nchild:\n%s", j, reran.Load(), logs.String())
	}
}

// TestAsyncNodeChild is the node of TestAsyncOutcomeLostWithNode: it
// enqueues one "gated" job, whose handler logs its begin, waits for the
// parent's advisory lock, logs that it returns and succeeds; the parent
// kills it before the outcome is recorded.
func TestAsyncNodeChild(t *testing.T) {
	url := os.Getenv(envAsyncURL)
	if url == "" {
		t.Skip("the node process of TestAsyncOutcomeLostWithNode; runs only as its child")
	}
	ctx := context.Background()
	side, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	logEvent := func(ctx context.Context, event string) error {
		info, _ := runlog.AttemptFrom(ctx)
		_, err := side.Exec(ctx, "INSERT INTO an_log VALUES ($1, 'child', $2)", int64(info.JobID), event)
		return err
	}
	r, err := postgres.OpenWith(ctx, url, runlog.Config{
		Concurrency: 4,
		Handlers: map[string]runlog.Handler{"gated": runlog.Handle(func(ctx context.Context, _ []byte) error {
			if err := logEvent(ctx, "begin"); err != nil {
				return err
			}
			conn, err := side.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", asyncGate); err != nil {
				return err
			}
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", asyncGate); err != nil {
				return err
			}
			return logEvent(ctx, "returned")
		})},
	}, postgres.Options{Node: "child", Lease: time.Second, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enqueue(ctx, "gated", nil); err != nil {
		t.Fatal(err)
	}
	select {} // until killed
}
