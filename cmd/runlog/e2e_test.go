package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// recorder is a loopback target that counts deliveries per job id and
// answers by path: /ok 200, /flaky 503 (with Retry-After) to the first two
// deliveries of a job then 200, /bad 400, /gone always 503.
//
// With a key (newSignedRecorder), every delivery must be signed with it: one
// that is not gets 401 and is counted in badSigs, and so is a job whose
// deliveries carry more than one webhook-id.
type recorder struct {
	mu      sync.Mutex
	count   map[uint64]int
	srv     *httptest.Server
	key     []byte
	msgIDs  map[uint64]string
	badSigs int
}

func newRecorder(t *testing.T) *recorder { return newSignedRecorder(t, nil) }

func newSignedRecorder(t *testing.T, key []byte) *recorder {
	rec := &recorder{count: map[uint64]int{}, key: key, msgIDs: map[uint64]string{}}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, err := strconv.ParseUint(r.Header.Get(kinds.HeaderJobID), 10, 64)
		if err != nil {
			http.Error(w, "no job id", http.StatusBadRequest)
			return
		}
		if rec.key != nil {
			msgID := r.Header.Get("webhook-id")
			ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
			want := string(kinds.AppendSignature(nil, rec.key, msgID, ts, string(body)))
			rec.mu.Lock()
			first, seen := rec.msgIDs[id]
			if !seen {
				rec.msgIDs[id] = msgID
			}
			bad := msgID == "" || r.Header.Get("webhook-signature") != want || seen && first != msgID
			if bad {
				rec.badSigs++
			}
			rec.mu.Unlock()
			if bad {
				http.Error(w, "bad signature", http.StatusUnauthorized)
				return
			}
		}
		rec.mu.Lock()
		rec.count[id]++
		n := rec.count[id]
		rec.mu.Unlock()
		switch r.URL.Path {
		case "/flaky":
			if n <= 2 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case "/bad":
			w.WriteHeader(http.StatusBadRequest)
		case "/gone":
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) deliveries(id uint64) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.count[id]
}

// waitAllFinished polls until the server has nothing pending or running.
func waitAllFinished(t *testing.T, c *server.Client) server.Stats {
	t.Helper()
	return testwait.UntilWithin(t, 60*time.Second, "every job to finish", func() (server.Stats, bool) {
		s, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Pending+s.Running == 0
	})
}

// TestServeEndToEnd builds the binary, runs `runlog serve`, enqueues http
// jobs against a local target and checks that each ends as its target
// implies; it also drives the client subcommands against that server.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	p := startServe(t, t.TempDir(), "--retry-attempts", "4", "--retry-base", "2ms", "--retry-cap", "10ms",
		"--breaker-threshold", "100000")
	c := p.client()
	ctx := context.Background()
	type want struct {
		state    string
		attempts int
	}
	wants := map[string]want{"/ok": {"succeeded", 1}, "/flaky": {"succeeded", 3}, "/bad": {"failed", 1}, "/gone": {"failed", 4}}
	ids := map[uint64]string{}
	for i := range 20 {
		for path := range wants {
			created, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: rec.srv.URL + path, Body: strconv.Itoa(i)})
			if err != nil {
				t.Fatal(err)
			}
			ids[created.ID] = path
		}
	}
	// One more through the CLI.
	env := []string{"RUNLOG_SERVER=" + p.url}
	code, out, errOut := runCLI(t, env, "enqueue", "--url", rec.srv.URL+"/ok", "--key", "cli-1", "--header", "X-From: cli")
	if code != 0 {
		t.Fatalf("runlog enqueue exit %d: %s", code, errOut)
	}
	cliID, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("runlog enqueue printed %q; want the id", out)
	}
	ids[cliID] = "/ok"
	if code, out2, _ := runCLI(t, env, "enqueue", "--url", rec.srv.URL+"/ok", "--key", "cli-1"); code != 0 || out2 != out {
		t.Fatalf("same key again: exit %d, printed %q; want the same id %q", code, out2, out)
	}

	waitAllFinished(t, c)
	for id, path := range ids {
		j, err := c.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		w := wants[path]
		if string(j.State) != w.state || j.Attempts != w.attempts || rec.deliveries(id) != w.attempts {
			t.Errorf("job %d (%s): %s after %d attempts, %d deliveries; want %s after %d", id, path, j.State, j.Attempts, rec.deliveries(id), w.state, w.attempts)
		}
	}

	// The client subcommands.
	code, out, errOut = runCLI(t, env, "job", strconv.FormatUint(cliID, 10), "-o", "json")
	var j server.Job
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.ID != cliID || j.State != "succeeded" || len(j.History) != 1 {
		t.Errorf("runlog job: exit %d, %q %s", code, out, errOut)
	}
	code, out, _ = runCLI(t, env, "jobs", "--state", "failed", "--limit", "1000")
	if code != 0 || strings.Count(out, " failed ") != 40 {
		t.Errorf("runlog jobs --state failed: exit %d, %d failed rows\n%s", code, strings.Count(out, " failed "), out)
	}
	code, out, _ = runCLI(t, env, "stats", "-o", "json")
	var st server.Stats
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Succeeded != 41 || st.Failed != 40 {
		t.Errorf("runlog stats: exit %d, %q", code, out)
	}
	// Which targets the engine lists (those whose breaker has history) is
	// its business; the command must print its table.
	code, out, _ = runCLI(t, env, "targets")
	if code != 0 || !strings.HasPrefix(out, "TARGET") {
		t.Errorf("runlog targets: exit %d, %q", code, out)
	}
	var failedID uint64
	for id, path := range ids {
		if path == "/bad" {
			failedID = id
			break
		}
	}
	if code, out, errOut = runCLI(t, env, "retry", strconv.FormatUint(failedID, 10)); code != 0 || !strings.Contains(out, "job ") {
		t.Errorf("runlog retry: exit %d, %q %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, env, "enqueue", "--url", rec.srv.URL+"/ok", "--run-in", "1h")
	if code != 0 {
		t.Fatalf("runlog enqueue --run-in 1h: exit %d, %q %s", code, out, errOut)
	}
	later := strings.TrimSpace(out)
	if code, out, errOut = runCLI(t, env, "cancel", later, "--reason", "no longer needed"); code != 0 || !strings.Contains(out, "cancelled") {
		t.Errorf("runlog cancel: exit %d, %q %s", code, out, errOut)
	}
	if code, _, errOut = runCLI(t, env, "cancel", later); code != 1 || !strings.Contains(errOut, "409") {
		t.Errorf("runlog cancel of a finished job: exit %d, %s; want 1 and the 409", code, errOut)
	}
	if code, _, _ = runCLI(t, env, "job", "x"); code != exitUsage {
		t.Errorf("runlog job x: exit %d; want %d", code, exitUsage)
	}
	if code, _, errOut = runCLI(t, env, "enqueue", "--url", "ftp://example.com/"); code != 1 || !strings.Contains(errOut, "400") {
		t.Errorf("runlog enqueue of an ftp URL: exit %d, %s; want 1 and the 400", code, errOut)
	}

	if code := p.stop(t); code != 0 {
		t.Fatalf("runlog serve exit %d on SIGTERM\n%s", code, p.output())
	}
	if !strings.Contains(p.output(), "runlog stopped") {
		t.Errorf("no graceful stop in the logs:\n%s", p.output())
	}
}

func TestServeRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, _, errOut := runCLI(t, nil, "serve", "--data", dir, "--addr", "0.0.0.0:0")
	if code != exitFailure || !strings.Contains(errOut, "without a token") {
		t.Fatalf("serve on 0.0.0.0 without a token: exit %d, %s", code, errOut)
	}
}

func TestServeAuth(t *testing.T) {
	rec := newRecorder(t)
	t.Setenv("RUNLOG_TOKEN", "t0ken")
	p := startServe(t, t.TempDir())
	t.Setenv("RUNLOG_TOKEN", "")
	c := p.client()
	ctx := context.Background()
	if _, err := c.Stats(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v; want 401", err)
	}
	c.Token = "t0ken"
	if _, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: rec.srv.URL + "/ok"}); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, []string{"RUNLOG_SERVER=" + p.url, "RUNLOG_TOKEN=t0ken"}, "stats"); code != 0 {
		t.Fatalf("runlog stats with RUNLOG_TOKEN: exit %d %s", code, errOut)
	}
	if code, _, _ := runCLI(t, []string{"RUNLOG_SERVER=" + p.url, "RUNLOG_TOKEN=wrong"}, "stats"); code != 1 {
		t.Fatalf("runlog stats with a wrong token: exit %d; want 1", code)
	}
}
