package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/server"
)

// TestMigrateAndServeOnPostgres: `runlog migrate` creates the schema, and a
// server started on --postgres delivers http jobs like the embedded one.
func TestMigrateAndServeOnPostgres(t *testing.T) {
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
		deadline := time.Now().Add(30 * time.Second)
		for {
			j, err := c.Job(ctx, id)
			if err == nil && string(j.State) == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d: %+v %v, want %s", id, j, err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// quietServeLogger drops the server's logs.
func quietServeLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
