package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// TestServeSigterm (checklist 19): on SIGTERM a running attempt that ends
// within --shutdown-timeout finishes and is recorded; one that does not is
// cut, the server still exits 0, and the job runs again after a restart.
func TestServeSigterm(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan string, 4)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- r.URL.Path
		switch r.URL.Path {
		case "/short":
			time.Sleep(300 * time.Millisecond) // under test: an attempt that ends within --shutdown-timeout
		case "/stuck":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer target.Close()
	defer close(release)
	ctx := context.Background()

	for _, tc := range []struct {
		path, timeout string
		state         string
		attempts      int
	}{
		{"/short", "10s", "succeeded", 1},
		{"/stuck", "200ms", "pending", 1},
	} {
		dir := t.TempDir()
		p := startServe(t, dir, "--shutdown-timeout", tc.timeout, "--retry-base", "1ms", "--retry-cap", "2ms")
		created, err := p.client().Enqueue(ctx, server.JobRequest{Kind: "http", URL: target.URL + tc.path})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-arrived; got != tc.path {
			t.Fatalf("target got %s; want %s", got, tc.path)
		}
		if code := p.stop(t); code != 0 {
			t.Fatalf("%s: exit %d on SIGTERM\n%s", tc.path, code, p.output())
		}
		if tc.path == "/stuck" && !strings.Contains(p.output(), "cut short") {
			t.Errorf("%s: the logs do not say that running attempts were cut short\n%s", tc.path, p.output())
		}
		// Inspect the journal as the server left it, without running anything.
		p = startServe(t, dir, "--concurrency", "1", "--retry-base", "1h", "--retry-cap", "1h")
		j, err := p.client().Job(ctx, created.ID)
		if err != nil {
			t.Fatalf("%s: job lost: %v", tc.path, err)
		}
		if tc.path == "/short" && (string(j.State) != tc.state || j.Attempts != tc.attempts) {
			t.Errorf("%s: %s after %d attempts; want the attempt finished during shutdown: %s after %d", tc.path, j.State, j.Attempts, tc.state, tc.attempts)
		}
		if tc.path == "/stuck" && (j.State == "succeeded" || j.State == "failed" || j.Attempts < 1) {
			t.Errorf("%s: %s after %d attempts; want it not finished, to run again", tc.path, j.State, j.Attempts)
		}
		p.kill()
	}
}
