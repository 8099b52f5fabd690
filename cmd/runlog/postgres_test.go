package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/store/pgstore"
	"github.com/runlog/runlog/internal/testwait"
)

// TestMigrateAndServeOnPostgres: `runlog migrate` creates the schema, and a
// server started on --postgres delivers http jobs like the embedded one.
func TestMigrateAndServeOnPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	var out, errb bytes.Buffer
	if code := run([]string{"migrate", "--postgres", url}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "schema at version") {
		t.Fatalf("migrate: exit %d: %s%s", code, out.String(), errb.String())
	}
	if code := run([]string{"migrate"}, &out, &errb); code != exitUsage {
		t.Fatalf("migrate without --postgres: exit %d", code)
	}

	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "bad") {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer target.Close()
	var f serveFlags
	fs := newFlagSet("serve", "", &errb)
	f.register(fs)
	if _, err := parse(fs, []string{"--postgres", url, "--addr", "127.0.0.1:0", "--data", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config(quietServeLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	c := &server.Client{BaseURL: srv.URL()}
	ctx := context.Background()
	good, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: target.URL + "/ok"})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: target.URL + "/bad"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[uint64]string{good.ID: "succeeded", bad.ID: "failed"} {
		testwait.UntilWithin(t, 30*time.Second, fmt.Sprintf("job %d to be %s", id, want), func() (string, bool) {
			j, err := c.Job(ctx, id)
			return fmt.Sprintf("%+v %v", j, err), err == nil && string(j.State) == want
		})
	}

	// The dashboard, the metrics and the stats read the same store: each
	// page answers 200 and shows the jobs (no token was set, so no login).
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s on PostgreSQL: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	ids := func(page string, want ...uint64) {
		t.Helper()
		for _, id := range want {
			if !strings.Contains(page, "/jobs/"+strconv.FormatUint(id, 10)) {
				t.Fatalf("dashboard page does not link job %d:\n%s", id, page)
			}
		}
	}
	ids(get("/jobs"), good.ID, bad.ID)
	ids(get("/failed"), bad.ID)
	if page := get("/jobs/" + strconv.FormatUint(bad.ID, 10)); !strings.Contains(page, "400") {
		t.Fatalf("failed job's page does not show the target's answer:\n%s", page)
	}
	get("/")
	get("/targets")
	if m := get("/metrics"); !strings.Contains(m, "runlog_") {
		t.Fatalf("metrics on PostgreSQL:\n%s", m)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Succeeded < 1 || st.Failed < 1 {
		t.Fatalf("stats on PostgreSQL: %+v %v", st, err)
	}
}

// quietServeLogger drops the server's logs.
func quietServeLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestServerOnPostgresNeedsNoDir (issue 15): server.Config.Dir says it is
// required unless Postgres is set, and it is: a server on PostgreSQL starts
// without a data directory and creates none.
func TestServerOnPostgresNeedsNoDir(t *testing.T) {
	url := pgtest.URL(t)
	t.Chdir(t.TempDir())
	srv, err := server.Start(server.Config{Postgres: url, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("Start on PostgreSQL without Dir: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left, err := os.ReadDir("."); err != nil || len(left) != 0 {
		t.Fatalf("a server on PostgreSQL left %v in its working directory (%v)", left, err)
	}
	if _, err := server.Start(server.Config{Addr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("Start with neither Dir nor Postgres: %v, want an error naming --data", err)
	}
}

// TestServeNodeIDAndLease: `serve --postgres --node-id N --lease L` runs
// as node N with lease L: killed with SIGKILL while an attempt runs and
// started again under the same id, it requeues that attempt at once ("node
// N restarted") instead of waiting for its hour-long lease, and the job
// runs again. Unsafe leases and the flags without --postgres are refused
// with the reason.
func TestServeNodeIDAndLease(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	var calls atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			arrived <- struct{}{}
			select { // the first delivery hangs until its server is killed
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
	}))
	defer target.Close()
	defer close(release)

	args := []string{"--postgres", url, "--node-id", "web-1", "--lease", "1h", "--retry-base", "1ms", "--retry-cap", "1ms"}
	first := startServe(t, t.TempDir(), args...)
	ctx := context.Background()
	job, err := first.client().Enqueue(ctx, server.JobRequest{Kind: "http", URL: target.URL + "/hang"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the job was not delivered\n%s", first.output())
	}
	first.kill()
	second := startServe(t, t.TempDir(), args...)
	c := second.client()
	j := testwait.UntilWithin(t, 30*time.Second, "the restarted node to run the job again", func() (server.Job, bool) {
		j, err := c.Job(ctx, job.ID)
		return j, err == nil && j.State == "succeeded"
	})
	if len(j.History) != 2 || !strings.Contains(j.History[0].Error, "node web-1 restarted") {
		t.Fatalf("job after the restart: %+v\n%s", j, second.output())
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--postgres", url, "--lease", "200ms"}, "Lease 200ms is below 300ms"},
		{[]string{"--postgres", url, "--lease", "1s", "--heartbeat", "500ms"}, "set Heartbeat between 100ms and 333.333333ms"},
		{[]string{"--postgres", url, "--heartbeat", "10ms"}, "Heartbeat 10ms with Lease 5s is unsafe"},
		{[]string{"--node-id", "web-1"}, "--node-id applies to a PostgreSQL store only"},
		{[]string{"--lease", "2s"}, "--lease applies to a PostgreSQL store only"},
		{[]string{"--postgres", url, "--node-id", "a\nb"}, "a node id is at most 200 bytes of printable UTF-8"},
	} {
		code, _, stderr := runCLI(t, nil, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}, c.args...)...)
		if code == exitOK || !strings.Contains(stderr, c.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want a failure saying %q", c.args, code, stderr, c.want)
		}
	}
}

// TestMigratePlan: `migrate --plan` lists what migrate would apply, how
// each step runs and whether running nodes must stop, and changes
// nothing; after `migrate` it has nothing to apply.
func TestMigratePlan(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	for range 2 { // the second run sees the same: the first changed nothing
		var out, errb bytes.Buffer
		if code := run([]string{"migrate", "--plan", "--postgres", url}, &out, &errb); code != exitOK {
			t.Fatalf("migrate --plan: exit %d: %s", code, errb.String())
		}
		for _, want := range []string{
			fmt.Sprintf("database at schema version 0; migrate would apply %d migration(s), to version %[1]d", pgstore.SchemaVersion()),
			"5 0005_expiry_index.sql\n  runlog schema, version 5: retention that does not scan.",
			"runs statement by statement outside a transaction",
			"runs in one transaction",
			"verdict: creates the schema",
			"nothing was changed",
		} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("migrate --plan does not say %q:\n%s", want, out.String())
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"migrate", "--postgres", url}, &out, &errb); code != exitOK {
		t.Fatalf("migrate: exit %d: %s", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"migrate", "--plan", "--postgres", url}, &out, &errb); code != exitOK || !strings.Contains(out.String(), fmt.Sprintf("database at schema version %d: nothing to apply", pgstore.SchemaVersion())) {
		t.Fatalf("migrate --plan after migrate: exit %d: %s%s", code, out.String(), errb.String())
	}
}
