package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
)

func TestStartRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		dir := t.TempDir()
		_, err := Start(Config{Dir: dir, Addr: addr})
		if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "--token") {
			t.Errorf("Start on %s without a token: %v; want ErrInsecure that names --token", addr, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("Start on %s refused but left %d files in the data directory", addr, len(entries))
		}
	}
	if _, err := Start(Config{Addr: "127.0.0.1:0"}); err == nil {
		t.Error("Start without a data directory must fail")
	}
}

func TestStartWithTokenBeyondLoopback(t *testing.T) {
	t.Parallel()
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "0.0.0.0:0", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	_, port, _ := net.SplitHostPort(srv.Addr())
	c := &Client{BaseURL: "http://127.0.0.1:" + port}
	var apiErr *APIError
	if _, err := c.Stats(context.Background()); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("no token: %v; want 401", err)
	}
	c.Token = "tok"
	if _, err := c.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestHeaderLimit(t *testing.T) {
	t.Parallel()
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	req, _ := http.NewRequest("GET", srv.URL()+"/v1/stats", nil)
	req.Header.Set("X-Big", strings.Repeat("h", 2*MaxHeaderBytes))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers = %d; want 431", resp.StatusCode)
	}
}

// TestGracefulShutdown (checklist 19): Shutdown waits for running attempts
// up to its deadline and then cuts them; those jobs are neither lost nor
// marked done, and run again after a restart.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	var (
		block atomic.Bool
		after atomic.Int64 // deliveries answered after the restart
	)
	block.Store(true)
	arrived := make(chan struct{}, 16)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if block.Load() {
			arrived <- struct{}{}
			<-r.Context().Done()
			return
		}
		after.Add(1)
	}))
	defer target.Close()
	dir := t.TempDir()
	srv, err := Start(Config{Dir: dir, Addr: "127.0.0.1:0", Runner: runlog.Config{
		Retry: runlog.RetryPolicy{Attempts: 5, Base: time.Millisecond, Cap: 2 * time.Millisecond},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{BaseURL: srv.URL()}
	ctx := context.Background()
	var ids []uint64
	for range 3 {
		created, err := c.Enqueue(ctx, JobRequest{Kind: "http", URL: target.URL + "/slow"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.ID)
	}
	for range 3 {
		<-arrived
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = srv.Shutdown(sctx)
	cancel()
	t.Logf("Shutdown with attempts in flight: %v", err)
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, err := c.Stats(ctx); err == nil {
		t.Fatal("the API still answers after Shutdown")
	}

	block.Store(false)
	r, err := runlog.Open(dir, runlog.Config{Handlers: kinds.Handlers(kinds.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	for _, id := range ids {
		testwait.Until(t, fmt.Sprintf("job %d to succeed after the restart", id), func() (runlog.Job, bool) {
			j, err := r.Job(ctx, id)
			if err != nil {
				t.Fatalf("job %d lost by the shutdown: %v", id, err)
			}
			if j.State == runlog.StateFailed || j.State == runlog.StateCancelled {
				t.Fatalf("job %d after restart: %s (%s)", id, j.State, j.LastError)
			}
			return j, j.State == runlog.StateSucceeded
		})
	}
	if n := after.Load(); n < int64(len(ids)) {
		t.Fatalf("%d deliveries after the restart; want every cut job (%d) delivered again", n, len(ids))
	}
}

// TestSlowHeadersCutOff (checklist 21): a client that trickles its request
// headers is disconnected after ReadHeaderTimeout.
func TestSlowHeadersCutOff(t *testing.T) {
	t.Parallel()
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", ReadHeaderTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /v1/stats HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	// Keep trickling header bytes; the server must close the connection
	// long before this loop ends.
	for i := range 200 {
		time.Sleep(50 * time.Millisecond) // under test: a client that trickles its header
		if _, err := io.WriteString(conn, "X-Slow-"+strconv.Itoa(i)+": 1\r\n"); err != nil {
			return // cut off
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return // closed by the server
		}
	}
	t.Fatal("a client trickling headers for 10 s was not cut off by a 200 ms ReadHeaderTimeout")
}

// TestDashboardMounted: runlog serve serves the dashboard at /, which does
// its own login with the same token, while the API keeps its bearer check.
func TestDashboardMounted(t *testing.T) {
	t.Parallel()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url, token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	for _, tc := range []struct {
		path, token string
		status      int
		contentType string
	}{
		{"/", "tok", 200, "text/html"},
		{"/jobs", "tok", 200, "text/html"},
		{"/", "", http.StatusSeeOther, ""}, // to the login page
		{"/v1/stats", "", 401, "application/json"},
		{"/v1/stats", "tok", 200, "application/json"},
		{"/v1/nothing", "tok", 404, "application/json"},
		{"/metrics", "", 401, "application/json"},
		{"/healthz", "", 200, "application/json"},
	} {
		resp := get(srv.URL()+tc.path, tc.token)
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.contentType) {
			t.Errorf("GET %s (token %q) = %d %s; want %d %s", tc.path, tc.token, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.contentType)
		}
	}

	plain, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", NoDashboard: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Shutdown(context.Background())
	if resp := get(plain.URL()+"/", ""); resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("without the dashboard GET / = %d %s; want a JSON 404", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestOversizeBodyDefaultLimit: a body over the default 1 MiB gets a 413
// (not a broken connection) and nothing is stored.
func TestOversizeBodyDefaultLimit(t *testing.T) {
	t.Parallel()
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	body := `{"kind":"http","url":"http://127.0.0.1:1/x","body":"` + strings.Repeat("x", 3<<20) + `"}`
	for range 3 {
		resp, err := http.Post(srv.URL()+"/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("3 MiB body = %d; want 413", resp.StatusCode)
		}
	}
	st, err := srv.Runner().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Pending + st.Running + st.Succeeded + st.Failed + st.Cancelled; n != 0 {
		t.Fatalf("%d jobs stored from oversize bodies", n)
	}
}
