package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/cpuclock"
	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/store/pgstore"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/postgres"
)

// TestEnqueueTx: a job enqueued in a transaction that rolls back does not
// exist; one whose transaction commits runs, woken by the commit's
// notification (the fallback poll is an hour); invalid requests are refused
// with the runner's sentinels; a key is held within the transaction.

// attemptsSQL is a job row's attempts as one JSON array, oldest first: its
// history column and then its latest attempt (schema version 3).
const attemptsSQL = "(history || CASE WHEN latest IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(latest::jsonb) END)"

func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	ran := make(chan uint64, 10)
	r, err := postgres.OpenWith(ctx, url, runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"k": runlog.Handle(func(ctx context.Context, _ []byte) error {
			info, _ := runlog.AttemptFrom(ctx)
			ran <- info.JobID
			return nil
		}),
	}}, postgres.Options{PollEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolled, err := postgres.EnqueueTx(ctx, tx, runlog.JobRequest{Kind: "k", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Job(ctx, rolled.ID); !errors.Is(err, runlog.ErrNotFound) {
		t.Fatalf("job of a rolled-back transaction: %v, want ErrNotFound", err)
	}

	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := postgres.EnqueueTx(ctx, tx, runlog.JobRequest{Kind: "k", Key: "once"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := postgres.EnqueueTx(ctx, tx, runlog.JobRequest{Kind: "k", Key: "once"})
	if err != nil || !again.Existing || again.ID != first.ID {
		t.Fatalf("same key in the same transaction: %+v %v, want the holder %d", again, err, first.ID)
	}
	for _, tc := range []struct {
		name string
		req  runlog.JobRequest
		want error
	}{
		{"no kind", runlog.JobRequest{}, runlog.ErrInvalid},
		{"payload too large", runlog.JobRequest{Kind: "k", Payload: make([]byte, 1<<20+1)}, runlog.ErrTooLarge},
		{"bad policy", runlog.JobRequest{Kind: "k", Retry: &runlog.RetryPolicy{Attempts: 0}}, runlog.ErrInvalid},
		{"negative timeout", runlog.JobRequest{Kind: "k", Timeout: -time.Second}, runlog.ErrInvalid},
		{"long key", runlog.JobRequest{Kind: "k", Key: strings.Repeat("x", 2000)}, runlog.ErrInvalid},
	} {
		if _, err := postgres.EnqueueTx(ctx, tx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id != first.ID {
			t.Fatalf("ran job %d, want %d (the rolled-back %d must never run)", id, first.ID, rolled.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the committed job did not run: the commit's notification did not wake the runner")
	}
	waitState(t, r, first.ID, runlog.StateSucceeded)
	if _, err := r.Job(ctx, rolled.ID); !errors.Is(err, runlog.ErrNotFound) {
		t.Fatalf("job of the rolled-back transaction after the commit of another: %v", err)
	}
}

// TestPostgresCancelOnOtherNode: cancelling, on one node, a job that runs on
// another cancels the attempt's context there.
func TestPostgresCancelOnOtherNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	causes := make(chan error, 1)
	cfg := runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"block": runlog.Handle(func(ctx context.Context, _ []byte) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}),
	}}
	a, err := postgres.OpenWith(ctx, url, cfg, postgres.Options{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	id := mustEnqueue(t, a, "block", nil)
	waitState(t, a, id, runlog.StateRunning)
	b, err := postgres.OpenWith(ctx, url, cfg, postgres.Options{Node: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if err := b.Cancel(ctx, id, "not needed"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if cause == nil || !strings.Contains(cause.Error(), "cancelled") {
			t.Fatalf("the attempt's context ended with %v, want the cancellation", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the attempt on node a was not cancelled by node b's Cancel")
	}
	j := waitState(t, b, id, runlog.StateCancelled)
	if j.Reason != "not needed" {
		t.Fatalf("reason %q", j.Reason)
	}
}

// Environment of a node child (TestPostgresNodeChild).
const (
	envNodeURL  = "RUNLOG_PGNODE_URL"
	envNodeName = "RUNLOG_PGNODE_NAME"
	envNodeJobs = "RUNLOG_PGNODE_JOBS"
	// envNodeLease is the child's lease in ms (default nodeLease).
	envNodeLease = "RUNLOG_PGNODE_LEASE_MS"
)

// nodeLease is the children's lease: short, so that rescue is quick.
const nodeLease = time.Second

// multiNodeLease is the lease of TestPostgresMultiNode's children. A live
// node whose heartbeats cannot renew its lease in time loses its jobs to a
// rescue by design (at-least-once); under the race detector with the other
// packages' tests beside it, heartbeats every 200 ms lagged past 1 s (seen
// in CI, on this code and the code before it), and the test took the rescue
// of a live node's job for a run by two live nodes. Three seconds keeps the
// check meaningful (a rescue of a live node's job is still an overlap) and
// away from the machine's load.
const multiNodeLease = 3 * time.Second

// sideSchema holds what the children's handlers record: live nodes, the
// attempts in progress per job and node, a begin/end log, and overlaps (an
// attempt that began while a live node ran the same job).
const sideSchema = `
CREATE TABLE mn_nodes (node text PRIMARY KEY, alive bool NOT NULL DEFAULT true, killed_at timestamptz);
CREATE TABLE mn_active (job bigint, node text, PRIMARY KEY (job, node));
CREATE TABLE mn_log (job bigint, node text, attempt int, event text, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE mn_overlaps (job bigint, node text, others bigint);`

// nodeOutcome is what the "work" handler does with job id: fail for good
// when id%7 == 0, fail once (retryably) when id%5 == 0, else succeed.
func nodeOutcome(id uint64, attempt int) error {
	switch {
	case id%7 == 0:
		return runlog.Permanent(errors.New("refused"))
	case id%5 == 0 && attempt == 1:
		return errors.New("flaky")
	}
	return nil
}

// TestPostgresNodeChild is the node process of the multi-node tests: it
// opens a runner on the database, enqueues its share of jobs (printing
// "ack <id>" once each is committed), and runs jobs until it is killed.
func TestPostgresNodeChild(t *testing.T) {
	t.Parallel()
	url := os.Getenv(envNodeURL)
	if url == "" {
		t.Skip("the node process of TestPostgresMultiNode and TestPostgresStaleNode; runs only as their child")
	}
	jobs, _ := strconv.Atoi(os.Getenv(envNodeJobs))
	if err := runNode(url, os.Getenv(envNodeName), jobs); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(2)
	}
}

// runNode is the node child's body; it returns only on failure.
// leaseOf is the lease an envNodeLease value names (nodeLease for none).
func leaseOf(ms string) time.Duration {
	if n, err := strconv.Atoi(ms); err == nil && n > 0 {
		return time.Duration(n) * time.Millisecond
	}
	return nodeLease
}

func runNode(url, name string, jobs int) error {
	ctx := context.Background()
	sideCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	// The bookkeeping must survive the kill of this process, not of the
	// server: no need to wait for its fsyncs.
	sideCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	sideCfg.MaxConns = 24
	side, err := pgxpool.NewWithConfig(ctx, sideCfg)
	if err != nil {
		return err
	}
	record := func(ctx context.Context, event string) error {
		info, _ := runlog.AttemptFrom(ctx)
		return nodeRecord(side, int64(info.JobID), info.Attempt, name, event)
	}
	cfg := runlog.Config{
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Concurrency: 16,
		Retry:       runlog.RetryPolicy{Attempts: 1000, Base: time.Millisecond, Cap: 5 * time.Millisecond},
		Breaker:     runlog.BreakerConfig{Threshold: 1 << 30, Window: time.Millisecond, Cooldown: time.Millisecond, Probes: 1},
		Handlers: map[string]runlog.Handler{
			"work": runlog.Handle(func(ctx context.Context, _ []byte) error {
				if err := record(ctx, "begin"); err != nil {
					return err
				}
				time.Sleep(time.Duration(5+rand.IntN(60)) * time.Millisecond) // under test: attempts in flight when a node is killed
				if err := record(ctx, "end"); err != nil {
					return err
				}
				info, _ := runlog.AttemptFrom(ctx)
				return nodeOutcome(info.JobID, info.Attempt)
			}),
			// slow ignores its context: 2 s on attempt 1, 3 s after.
			"slow": runlog.Handle(func(ctx context.Context, _ []byte) error {
				if err := record(ctx, "begin"); err != nil {
					return err
				}
				info, _ := runlog.AttemptFrom(ctx)
				time.Sleep(time.Duration(min(info.Attempt+1, 3)) * time.Second) // under test: a handler that outlives its lease
				return record(ctx, "end")
			}),
		},
	}
	r, err := postgres.OpenWith(ctx, url, cfg, postgres.Options{
		Node: name, Lease: leaseOf(os.Getenv(envNodeLease)), Heartbeat: 200 * time.Millisecond, RescueEvery: 200 * time.Millisecond, PollEvery: 500 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	for done := 0; done < jobs; {
		reqs := make([]runlog.JobRequest, min(1+rand.IntN(5), jobs-done))
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "work"}
		}
		res, err := r.EnqueueMany(ctx, reqs)
		if err != nil {
			return err
		}
		var b strings.Builder
		for _, e := range res {
			fmt.Fprintf(&b, "ack %d\n", e.ID)
		}
		os.Stdout.WriteString(b.String())
		done += len(reqs)
		// About 50 jobs/s per node, well below what the nodes run (even
		// under -race on a busy machine), so that a rescued job does not
		// queue behind a backlog.
		time.Sleep(time.Duration(40+rand.IntN(40)) * time.Millisecond) // under test: the enqueue rate
	}
	select {}
}

// nodeRecord logs a begin or end of an attempt; a begin also checks, under
// a per-job lock, whether a live node runs the job already.
func nodeRecord(side *pgxpool.Pool, job int64, attempt int, node, event string) error {
	ctx := context.Background()
	return pgx.BeginFunc(ctx, side, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", job); err != nil {
			return err
		}
		if event == "begin" {
			var others int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM mn_active a JOIN mn_nodes n USING (node)
				WHERE a.job = $1 AND a.node <> $2 AND n.alive`, job, node).Scan(&others); err != nil {
				return err
			}
			if others > 0 {
				if _, err := tx.Exec(ctx, "INSERT INTO mn_overlaps VALUES ($1, $2, $3)", job, node, others); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, "INSERT INTO mn_active VALUES ($1, $2) ON CONFLICT DO NOTHING", job, node); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, "DELETE FROM mn_active WHERE job = $1 AND node = $2", job, node); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO mn_log (job, node, attempt, event) VALUES ($1, $2, $3, $4)", job, node, attempt, event)
		return err
	})
}

// node is a running node child.
type node struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer // guarded by mu
}

// Write collects the child's stderr.
func (n *node) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stderr.Write(p)
}

// logs returns what the child wrote to stderr.
func (n *node) logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stderr.String()
}

// ackWriter collects the "ack <id>" lines of a child's stdout.
type ackWriter struct {
	mu   *sync.Mutex
	acks *[]int64
	part []byte
}

func (w *ackWriter) Write(p []byte) (int, error) {
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		if id, ok := strings.CutPrefix(string(w.part[:i]), "ack "); ok {
			if v, err := strconv.ParseInt(id, 10, 64); err == nil {
				w.mu.Lock()
				*w.acks = append(*w.acks, v)
				w.mu.Unlock()
			}
		}
		w.part = w.part[i+1:]
	}
}

// cluster starts and kills node children on one database.
type cluster struct {
	t   *testing.T
	url string
	// lease is the children's lease (nodeLease when zero).
	lease time.Duration
	db    *pgx.Conn
	mu    sync.Mutex
	acks  []int64 // guarded by mu
	all   []*node
}

// newCluster makes a fresh database with the side tables.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctx := context.Background()
	c := &cluster{t: t, url: pgtest.URL(t)}
	db, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	c.db = db
	if _, err := db.Exec(ctx, sideSchema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range c.all {
			c.stop(n)
		}
		db.Close(context.Background())
	})
	return c
}

// start starts a node child that enqueues jobs jobs.
func (c *cluster) start(name string, jobs int) *node {
	c.t.Helper()
	if _, err := c.db.Exec(context.Background(), "INSERT INTO mn_nodes (node) VALUES ($1)", name); err != nil {
		c.t.Fatal(err)
	}
	n := &node{name: name}
	n.cmd = exec.Command(os.Args[0], "-test.run=^TestPostgresNodeChild$", "-test.count=1")
	n.cmd.Env = append(os.Environ(), envNodeURL+"="+c.url, envNodeName+"="+name, envNodeJobs+"="+strconv.Itoa(jobs))
	if c.lease != 0 {
		n.cmd.Env = append(n.cmd.Env, envNodeLease+"="+strconv.FormatInt(c.lease.Milliseconds(), 10))
	}
	n.cmd.Stdout = &ackWriter{mu: &c.mu, acks: &c.acks}
	n.cmd.Stderr = n
	if err := n.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.all = append(c.all, n)
	return n
}

// whileRunning returns as soon as node n has begun an attempt that it has
// not ended, or after at most wait.
func (c *cluster) whileRunning(n *node, wait time.Duration) {
	for end := time.Now().Add(wait); time.Now().Before(end); {
		var running bool
		if err := c.db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM mn_log b WHERE b.node = $1 AND b.event = 'begin'
			AND NOT EXISTS (SELECT 1 FROM mn_log e WHERE e.job = b.job AND e.node = b.node AND e.attempt = b.attempt AND e.event = 'end'))`,
			n.name).Scan(&running); err != nil {
			c.t.Errorf("whether %s runs an attempt: %v", n.name, err)
			return
		}
		if running {
			return
		}
		time.Sleep(2 * time.Millisecond) // a poll of the node's log
	}
}

// kill kills a node with SIGKILL (it may be stopped) and marks it dead
// with the time of the kill, for the rescue check.
func (c *cluster) kill(n *node) { c.end(n, "clock_timestamp()") }

// stop kills a node at the end of a test: marked dead, with no kill time.
func (c *cluster) stop(n *node) { c.end(n, "NULL") }

// end kills a node with SIGKILL (it may be stopped) and marks it dead.
func (c *cluster) end(n *node, killedAt string) {
	if n.cmd.ProcessState != nil {
		return
	}
	n.cmd.Process.Kill()
	n.cmd.Wait()
	if _, err := c.db.Exec(context.Background(), "UPDATE mn_nodes SET alive = false, killed_at = "+killedAt+" WHERE node = $1", n.name); err != nil {
		c.t.Errorf("mark %s dead: %v", n.name, err)
	}
}

// acked returns the acknowledged job ids.
func (c *cluster) acked() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.acks...)
}

// waitDB polls a count query (real time) until it returns want.
func (c *cluster) waitDB(what string, want int, sql string, args ...any) {
	c.t.Helper()
	testwait.UntilWithin(c.t, 30*time.Second, fmt.Sprintf("%s to be %d", what, want), func() (int, bool) {
		var n int
		if err := c.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
			c.t.Fatalf("%s: %v", what, err)
		}
		return n, n == want
	})
}

// TestPostgresMultiNode runs three node processes on one database with a
// mixed workload (successes, permanent failures, a retry each fifth job)
// and kills one with SIGKILL mid-work, again and again, starting a new one
// each time. Then: no acknowledged job is lost, each is in the state its
// handler implies, no job ever began while a live node ran it, and every
// job a killed node was running began again on another node within the
// lease plus 2 s.
func TestPostgresMultiNode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("kills node processes for about 15 s")
	}
	c := newCluster(t)
	c.lease = multiNodeLease
	ctx := context.Background()
	const perNode = 400
	nodes := []*node{c.start("n0", perNode), c.start("n1", perNode), c.start("n2", perNode)}
	next := 3
	deadline := time.Now().Add(12 * time.Second)
	kills := 0
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(800+rand.IntN(1500)) * time.Millisecond) // under test: kills at random moments
		i := rand.IntN(len(nodes))
		// The kill lands while the node runs an attempt, if it starts one
		// within 3 s: on a loaded machine kills at random moments alone
		// can all miss the attempts, and leave the rescue untested.
		c.whileRunning(nodes[i], 3*time.Second)
		c.kill(nodes[i])
		kills++
		nodes[i] = c.start(fmt.Sprintf("n%d", next), perNode)
		next++
	}
	acks := c.acked()
	if len(acks) == 0 {
		t.Fatalf("no job was acknowledged; node logs:\n%s", nodes[0].logs())
	}
	c.waitDB("every acknowledged job to finish", len(acks),
		"SELECT count(*) FROM runlog_jobs WHERE id = ANY($1) AND state IN (2, 3)", acks)
	for _, n := range nodes {
		c.stop(n)
	}
	t.Logf("%d acknowledged jobs, %d kills", len(acks), kills)

	// Every acknowledged job exists, in the state its handler implies.
	rows, err := c.db.Query(ctx, "SELECT id, state, reason FROM runlog_jobs WHERE id = ANY($1)", acks)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var (
			id     int64
			st     int16
			reason string
		)
		if err := rows.Scan(&id, &st, &reason); err != nil {
			t.Fatal(err)
		}
		seen++
		wantFailed := id%7 == 0
		if wantFailed && (st != 3 || !strings.Contains(reason, "permanent failure: refused")) || !wantFailed && st != 2 {
			t.Errorf("job %d: state %d reason %q", id, st, reason)
		}
	}
	if rows.Err() != nil || seen != len(acks) {
		t.Fatalf("%d of %d acknowledged jobs found (%v)", seen, len(acks), rows.Err())
	}
	// No job began while a live node ran it.
	var overlaps int
	if err := c.db.QueryRow(ctx, "SELECT count(*) FROM mn_overlaps").Scan(&overlaps); err != nil || overlaps != 0 {
		t.Fatalf("%d attempts began while a live node ran the same job (%v)", overlaps, err)
	}
	// Every job a killed node was running began again elsewhere within the
	// lease plus 2 s of the kill.
	var late []string
	rows, err = c.db.Query(ctx, `
		SELECT b.job, b.node, (extract(epoch FROM n.killed_at) * 1000)::bigint, extract(epoch FROM (SELECT min(r.at) FROM mn_log r
			WHERE r.job = b.job AND r.event = 'begin' AND r.node <> b.node AND r.at > b.at) - n.killed_at)
		FROM mn_log b JOIN mn_nodes n ON n.node = b.node
		WHERE b.event = 'begin' AND NOT n.alive AND n.killed_at IS NOT NULL
		  AND b.at < n.killed_at
		  AND NOT EXISTS (SELECT 1 FROM mn_log e WHERE e.job = b.job AND e.node = b.node AND e.attempt = b.attempt AND e.event = 'end')`)
	if err != nil {
		t.Fatal(err)
	}
	type interrupted struct {
		job    int64
		owner  string
		killed int64 // ms since the epoch
		after  *float64
	}
	var orphans []interrupted
	for rows.Next() {
		var o interrupted
		if err := rows.Scan(&o.job, &o.owner, &o.killed, &o.after); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, o := range orphans {
		limit := (multiNodeLease + 2*time.Second).Seconds()
		if o.after != nil && *o.after <= limit {
			continue
		}
		var hist string
		c.db.QueryRow(ctx, "SELECT "+attemptsSQL+"::text FROM runlog_jobs WHERE id = $1", o.job).Scan(&hist)
		if s, ok := startedElsewhere(hist, o.owner, o.killed); ok && float64(s-o.killed)/1000 <= limit {
			// The store started it again in time, on a node killed in its
			// turn before the handler logged its begin.
			continue
		}
		if o.after == nil {
			late = append(late, fmt.Sprintf("job %d of %s: never ran again; history %s", o.job, o.owner, hist))
		} else {
			late = append(late, fmt.Sprintf("job %d of %s: ran again %.2f s after the kill at %d; history %s", o.job, o.owner, *o.after, o.killed, hist))
		}
	}
	if len(orphans) == 0 {
		t.Errorf("no kill interrupted a running attempt, so rescue went untested; make the workload heavier")
	}
	if len(late) > 0 {
		var logs strings.Builder
		for _, n := range c.all {
			if l := n.logs(); l != "" {
				fmt.Fprintf(&logs, "--- %s:\n%s", n.name, l[:min(len(l), 2000)])
			}
		}
		t.Fatalf("jobs of killed nodes not run again within %v: %v\nnode logs:\n%s", multiNodeLease+2*time.Second, late, logs.String())
	}
	t.Logf("%d attempts interrupted by kills, each run again in time", len(orphans))
}

// startedElsewhere returns, from a job's attempt history (attemptsSQL, as
// text), when its first attempt on a node other than owner started after
// killed (ms since the epoch). The handlers' begin rows in mn_log miss an
// attempt whose node is killed between the store's start and the
// handler's first statement; the history the store keeps does not.
func startedElsewhere(hist, owner string, killed int64) (int64, bool) {
	var attempts []struct {
		Start int64  `json:"s"`
		Node  string `json:"node"`
	}
	if json.Unmarshal([]byte(hist), &attempts) != nil {
		return 0, false
	}
	var first int64
	for _, a := range attempts {
		if a.Node != owner && a.Start > killed && (first == 0 || a.Start < first) {
			first = a.Start
		}
	}
	return first, first != 0
}

// TestPostgresStaleNode pauses a node (SIGSTOP) past its lease while it runs
// a job; another node rescues the job and runs it again; the paused node,
// resumed (SIGCONT) while the other one still runs the job, finishes its
// attempt, but its outcome is fenced off: the job's history shows attempt 1
// interrupted and attempt 2 succeeded on the other node, and the stale node
// keeps running (its Finish was dropped, not failed).
func TestPostgresStaleNode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("pauses a node past its lease for 3 s")
	}
	c := newCluster(t)
	// The lease of TestPostgresMultiNode, for the same reason: with 1 s,
	// node b's own heartbeats lagged past its lease under -race and load
	// (seen once), and b's attempt was rescued too.
	c.lease = multiNodeLease
	ctx := context.Background()
	a := c.start("a", 0)
	// Wait for a's schema migrations, then enqueue in the test's own
	// transaction.
	c.waitDB("node a to migrate", 1, "SELECT count(*) FROM pg_tables WHERE tablename = 'runlog_schema_migrations'")
	c.waitDB("node a to migrate", 1, "SELECT count(*) FROM runlog_schema_migrations WHERE version = $1", pgstore.SchemaVersion())
	var res runlog.EnqueueResult
	err := pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		var err error
		res, err = postgres.EnqueueTx(ctx, tx, runlog.JobRequest{Kind: "slow"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c.waitDB("node a to begin the job", 1, "SELECT count(*) FROM mn_log WHERE job = $1 AND node = 'a' AND event = 'begin'", int64(res.ID))
	b := c.start("b", 0)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c.waitDB("node b to begin the rescued job", 1, "SELECT count(*) FROM mn_log WHERE job = $1 AND node = 'b' AND event = 'begin'", int64(res.ID))
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.waitDB("node a to end its stale attempt", 1, "SELECT count(*) FROM mn_log WHERE job = $1 AND node = 'a' AND event = 'end'", int64(res.ID))
	c.waitDB("the job to succeed", 1, "SELECT count(*) FROM runlog_jobs WHERE id = $1 AND state = 2", int64(res.ID))

	var hist []byte
	if err := c.db.QueryRow(ctx, "SELECT "+attemptsSQL+" FROM runlog_jobs WHERE id = $1", int64(res.ID)).Scan(&hist); err != nil {
		t.Fatal(err)
	}
	var attempts []struct {
		N     int    `json:"n"`
		Class int    `json:"c"`
		Ended bool   `json:"d"`
		Error string `json:"err"`
		Node  string `json:"node"`
	}
	if err := json.Unmarshal(hist, &attempts); err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 2 ||
		attempts[0].Node != "a" || !attempts[0].Ended || attempts[0].Class == 1 || !strings.Contains(attempts[0].Error, "node a stopped renewing its lease") ||
		attempts[1].Node != "b" || attempts[1].Class != 1 || !attempts[1].Ended {
		t.Fatalf("history %s: want attempt 1 by a interrupted (not its success), attempt 2 by b succeeded", hist)
	}
	testwait.For(t, "node a to log the fenced outcome", func() bool { return strings.Contains(a.logs(), "outcome dropped") })
	if err := a.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the stale node exited: %v\n%s", err, a.logs())
	}
	if strings.Contains(a.logs(), "level=ERROR") {
		t.Fatalf("the stale node's runner failed:\n%s", a.logs())
	}
	_ = b
}

// BenchmarkPostgresW1 is W1 on PostgreSQL (fsync and synchronous_commit
// on): 20 k no-op jobs (50-byte payload) enqueued in batches of 1000 due an
// hour ahead of a fake clock, then processed at concurrency 256 per node (RUNLOG_BENCH_SLOTS) by
// one node, or by two nodes (runners in this process) sharing the queue,
// timed from open to the last completion. Beside the rate it reports the
// CPU a job cost over that time, the machine's (PostgreSQL's included) and
// this process's (cpuclock): on a shared machine the rate moves with the
// other work, the CPU a job costs much less.
func BenchmarkPostgresW1(b *testing.B) {
	for _, nodes := range []int{1, 2} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchPostgresW1(b, nodes) })
	}
}

// benchPostgresW1 runs W1 with the given number of nodes.
func benchPostgresW1(b *testing.B, nodes int) {
	const n = 20_000
	ctx := context.Background()
	for range b.N {
		url := pgtest.URL(b)
		clock := fixedClock{time.UnixMilli(1_700_000_000_000)}
		cfg := runlog.Config{Logger: quietLogger(), Concurrency: benchSlots(b), Clock: clock, Handlers: map[string]runlog.Handler{"noop": runlog.Handle(noop)},
			Breaker: runlog.BreakerConfig{Threshold: 1 << 30, Window: time.Second, Cooldown: time.Second, Probes: 1}}
		r, err := postgres.Open(ctx, url, cfg)
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload50, RunAt: clock.Now().Add(time.Hour)}
		}
		start := time.Now()
		for range n / len(reqs) {
			if _, err := r.EnqueueMany(ctx, reqs); err != nil {
				b.Fatal(err)
			}
		}
		enq := time.Since(start)
		r.Close(ctx)

		var done atomic.Int64
		all := make(chan struct{})
		cfg.Handlers = map[string]runlog.Handler{"noop": runlog.Handle(func(context.Context, []byte) error {
			if done.Add(1) == n {
				close(all)
			}
			return nil
		})}
		cfg.Clock = nil
		cpu0, cpuOK := cpuclock.Read()
		start = time.Now()
		runners := make([]*runlog.Runner, nodes)
		for i := range runners {
			if runners[i], err = postgres.Open(ctx, url, cfg); err != nil {
				b.Fatal(err)
			}
		}
		<-all
		proc := time.Since(start)
		cpu1, cpuEnd := cpuclock.Read()
		for _, r := range runners {
			r.Close(ctx)
		}
		if got := done.Load(); got != n {
			b.Fatalf("%d attempts for %d jobs: a job ran twice", got, n)
		}
		b.ReportMetric(n/enq.Seconds(), "enqueue-jobs/s")
		b.ReportMetric(n/proc.Seconds(), "jobs/s")
		if cpuOK && cpuEnd {
			machine, node := cpu0.PerJob(cpu1, n)
			b.ReportMetric(machine, "machine-cpu-us/job")
			b.ReportMetric(node, "node-cpu-us/job")
		}
	}
}

// benchSlots is BenchmarkPostgresW1's concurrency per node: 256, or
// RUNLOG_BENCH_SLOTS (W1 at 16 slots is the workload most sensitive to
// the statements of each claim's transaction).
func benchSlots(b *testing.B) int {
	v := os.Getenv("RUNLOG_BENCH_SLOTS")
	if v == "" {
		return 256
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("RUNLOG_BENCH_SLOTS=%q: want a positive number of slots", v)
	}
	return n
}

// ExampleOpen runs jobs from a PostgreSQL database that several
// processes share. (Not run by go test: it needs a server.)
func ExampleOpen() {
	ctx := context.Background()
	r, err := postgres.Open(ctx, "postgres://runlog@localhost:5432/app", runlog.Config{
		Handlers: map[string]runlog.Handler{
			"email": runlog.Handle(func(ctx context.Context, to string) error {
				info, _ := runlog.AttemptFrom(ctx)
				fmt.Println("send to", to, "attempt", info.Attempt)
				return nil
			}),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close(ctx)
	id, err := r.Enqueue(ctx, "email", "a@example.com", runlog.Key("welcome-42"))
	fmt.Println(id, err)
}

// ExampleEnqueueTx enqueues a job in the application's own transaction: the
// job exists if and only if the order does.
func ExampleEnqueueTx() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://runlog@localhost:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES (42)"); err != nil {
			return err
		}
		_, err := postgres.EnqueueTx(ctx, tx, runlog.JobRequest{Kind: "email", Payload: []byte(`"a@example.com"`), Key: "order-42"})
		return err
	})
	fmt.Println(err)
}
