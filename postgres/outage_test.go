package postgres_test

import (
	"bytes"
	"context"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/postgres"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPostgresOutage: while jobs run, the database refuses connections and
// every connection of the node is cut; once it accepts them again the
// runner goes on by itself (it had stopped for good at the first failed
// claim or finish), every job succeeds, Err stays nil and enqueues work.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	// The outage is made from the server's admin database: a database
	// cannot refuse connections to itself.
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	side, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close(ctx)
	var (
		mu   sync.Mutex
		runs = map[uint64]int{}
	)
	logs := &syncBuffer{}
	r, err := postgres.Open(ctx, url, runlog.Config{
		Logger:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Concurrency: 8,
		Handlers: map[string]runlog.Handler{"work": runlog.Handle(func(ctx context.Context, _ []byte) error {
			info, _ := runlog.AttemptFrom(ctx)
			mu.Lock()
			runs[info.JobID]++
			mu.Unlock()
			time.Sleep(time.Millisecond) // under test: attempts in flight when the database goes away
			return nil
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	const jobs = 400
	reqs := make([]runlog.JobRequest, jobs)
	for i := range reqs {
		reqs[i] = runlog.JobRequest{Kind: "work"}
	}
	res, err := r.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	ran := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(runs)
	}
	testwait.For(t, "the first jobs to run", func() bool { return ran() >= 40 })

	if _, err := side.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	if _, err := side.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the runner to log that the store did not answer", func() bool {
		return strings.Contains(logs.String(), "the store did not answer")
	})
	// A few failed tries with backoff (each one after the first is logged
	// at debug level) before the database comes back.
	testwait.For(t, "three more failed tries of the store", func() bool {
		return strings.Count(logs.String(), "the store still does not answer") >= 3
	})
	if _, err := side.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}

	for _, e := range res {
		waitState(t, r, e.ID, runlog.StateSucceeded)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("Err after the outage: %v", err)
	}
	id := mustEnqueue(t, r, "work", nil)
	waitState(t, r, id, runlog.StateSucceeded)
	if !strings.Contains(logs.String(), "the store answers again") {
		t.Errorf("no log line says the store answers again:\n%s", logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range res {
		if runs[e.ID] == 0 {
			t.Errorf("job %d succeeded without running", e.ID)
		}
	}
}
