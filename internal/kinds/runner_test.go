package kinds_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
)

// openRunner opens a runner with the built-in kinds on a fresh journal and
// small retry settings; the breaker is set high enough never to interfere.
func openRunner(t *testing.T, cfg kinds.Config) *runlog.Runner {
	t.Helper()
	r, err := runlog.Open(t.TempDir(), runlog.Config{
		Concurrency: 8,
		Retry:       runlog.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond},
		Breaker:     runlog.BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Millisecond, Probes: 1},
		Handlers:    kinds.Handlers(cfg),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// waitJob waits until pred holds for the job and returns it.
func waitJob(t *testing.T, r *runlog.Runner, id uint64, pred func(runlog.Job) bool) runlog.Job {
	t.Helper()
	return testwait.Until(t, fmt.Sprintf("job %d to get there", id), func() (runlog.Job, bool) {
		j, err := r.Job(context.Background(), id)
		if err != nil {
			t.Fatalf("Job(%d): %v", id, err)
		}
		return j, pred(j)
	})
}

func finished(j runlog.Job) bool {
	return j.State == runlog.StateSucceeded || j.State == runlog.StateFailed || j.State == runlog.StateCancelled
}

func TestHTTPKindOutcomes(t *testing.T) {
	t.Parallel()
	var (
		mu         sync.Mutex
		seen       = map[string][]*http.Request{} // path -> requests
		redirected bool
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mu.Lock()
		seen[r.URL.Path] = append(seen[r.URL.Path], r)
		mu.Unlock()
		attempt := r.Header.Get(kinds.HeaderAttempt)
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, "fine: "+string(body))
		case "/bad":
			http.Error(w, "no such thing", http.StatusBadRequest)
		case "/flaky":
			if attempt == "1" {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case "/throttled":
			if attempt == "1" {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
		case "/down":
			w.WriteHeader(http.StatusBadGateway)
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/elsewhere":
			mu.Lock()
			redirected = true
			mu.Unlock()
		case "/slow":
			<-r.Context().Done()
		case "/big":
			_, _ = io.WriteString(w, strings.Repeat("x", 10<<10))
		}
	}))
	defer target.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + ln.Addr().String() + "/nobody"
	ln.Close()

	r := openRunner(t, kinds.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		path     string
		url      string
		timeout  time.Duration
		state    runlog.State
		attempts int
	}{
		{path: "/ok", state: runlog.StateSucceeded, attempts: 1},
		{path: "/bad", state: runlog.StateFailed, attempts: 1},
		{path: "/flaky", state: runlog.StateSucceeded, attempts: 2},
		{path: "/throttled", state: runlog.StateSucceeded, attempts: 2},
		{path: "/down", state: runlog.StateFailed, attempts: 3},
		{path: "/redirect", state: runlog.StateFailed, attempts: 1},
		{path: "/slow", timeout: 300 * time.Millisecond, state: runlog.StateFailed, attempts: 3}, // long enough to reach the target on a loaded machine
		{path: "/big", state: runlog.StateSucceeded, attempts: 1},
		{path: "closed port", url: closedURL, state: runlog.StateFailed, attempts: 3},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			u := tc.url
			if u == "" {
				u = target.URL + tc.path
			}
			opts := []runlog.EnqueueOption{}
			if tc.timeout > 0 {
				opts = append(opts, runlog.Timeout(tc.timeout))
			}
			id, err := r.Enqueue(ctx, kinds.KindHTTP, kinds.HTTPRequest{
				URL: u, Method: "PUT", Body: "payload-" + tc.path,
				Headers: map[string]string{"X-Custom": "yes"},
			}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, r, id, finished)
			if j.State != tc.state || j.Attempts != tc.attempts {
				t.Fatalf("state %s after %d attempts; want %s after %d (last error %q)", j.State, j.Attempts, tc.state, tc.attempts, j.LastError)
			}
			if len(j.History) != tc.attempts {
				t.Fatalf("history has %d attempts; want %d", len(j.History), tc.attempts)
			}
			if tc.url != "" {
				return
			}
			mu.Lock()
			reqs := seen[tc.path]
			mu.Unlock()
			if len(reqs) != tc.attempts {
				t.Fatalf("target saw %d deliveries; want %d", len(reqs), tc.attempts)
			}
			for i, req := range reqs {
				if got := req.Header.Get(kinds.HeaderJobID); got != strconv.FormatUint(id, 10) {
					t.Errorf("delivery %d: %s = %q; want %d", i, kinds.HeaderJobID, got, id)
				}
				if got := req.Header.Get(kinds.HeaderAttempt); got != strconv.Itoa(i+1) {
					t.Errorf("delivery %d: %s = %q; want %d", i, kinds.HeaderAttempt, got, i+1)
				}
				if req.Method != "PUT" || req.Header.Get("X-Custom") != "yes" {
					t.Errorf("delivery %d: method %s, X-Custom %q", i, req.Method, req.Header.Get("X-Custom"))
				}
				if b, _ := io.ReadAll(req.Body); string(b) != "payload-"+tc.path {
					t.Errorf("delivery %d: body %q", i, b)
				}
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if redirected {
		t.Error("the http kind followed a redirect; a 3xx must be the target's answer")
	}
	// Outputs: the delivery log of each attempt.
	jobs, err := r.List(ctx, runlog.ListFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(target.Listener.Addr().String())
	for _, j := range jobs.Jobs {
		out := j.History[len(j.History)-1].Output
		d, ok := kinds.DecodeDelivery([]byte(out))
		if strings.Contains(string(j.Payload), "/nobody") {
			if !ok || d.Status != 0 || d.Error == "" {
				t.Errorf("closed port: delivery log %+v (%v) of %q", d, ok, out)
			}
			continue
		}
		if !ok || d.RemoteAddr != "127.0.0.1:"+port || d.DurationMS <= 0 || (d.Status != 0 && d.Headers["Date"] == "") {
			t.Errorf("%s: delivery log %+v (%v) of %q; want the remote address, a duration and the headers", j.Payload, d, ok, out)
			continue
		}
		switch {
		case strings.Contains(string(j.Payload), "/ok"):
			if d.Status != 200 || d.StatusLine != "200 OK" || d.Body != "fine: payload-/ok" || d.BodyTruncated || !strings.HasPrefix(d.Text(), "200 OK\n") {
				t.Errorf("/ok delivery log %+v", d)
			}
		case strings.Contains(string(j.Payload), "/big"):
			if len(d.Body) != 1024 || !d.BodyTruncated || !strings.HasPrefix(d.Body, "xxx") {
				t.Errorf("/big delivery log keeps %d bytes of the body, truncated %v; want the first KiB, truncated", len(d.Body), d.BodyTruncated)
			}
		case strings.Contains(string(j.Payload), "/bad"):
			if d.Status != 400 || !strings.HasPrefix(d.Body, "no such thing") || j.History[0].Outcome != "permanent" {
				t.Errorf("/bad delivery log %+v, outcome %q", d, j.History[0].Outcome)
			}
		}
	}
}

func TestHTTPKindAllowListAtDelivery(t *testing.T) {
	t.Parallel()
	hit := make(chan struct{}, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- struct{}{} }))
	defer target.Close()
	r := openRunner(t, kinds.Config{AllowHosts: []string{"only.example"}})
	id, err := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: target.URL})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, r, id, finished)
	if j.State != runlog.StateFailed || j.Attempts != 1 {
		t.Fatalf("a host off the allow-list must fail permanently: %s after %d attempts", j.State, j.Attempts)
	}
	select {
	case <-hit:
		t.Fatal("the target was contacted although it is not on the allow-list")
	default:
	}
}

const script = `#!/bin/sh
echo "job=$RUNLOG_JOB_ID attempt=$RUNLOG_ATTEMPT token=${RUNLOG_TOKEN:-none} args=$*"
case "$1" in
  ok) cat; exit 0 ;;
  tempfail) exit 75 ;;
  fail) echo oops >&2; exit 3 ;;
  flaky) [ "$RUNLOG_ATTEMPT" -ge 2 ] && exit 0; exit 75 ;;
  loud) i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; exit 0 ;;
  sleep) echo $$ > "$2"; exec sleep 60 ;;
esac
exit 9
`

func TestExecKind(t *testing.T) {
	t.Setenv("RUNLOG_TOKEN", "secret-token")
	dir := t.TempDir()
	path := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := openRunner(t, kinds.Config{Commands: map[string]string{"job": path}})
	ctx := context.Background()
	for _, tc := range []struct {
		args     []string
		state    runlog.State
		attempts int
		output   string
	}{
		{[]string{"ok", "x y"}, runlog.StateSucceeded, 1, "token=none args=ok x y\nhello stdin"},
		{[]string{"tempfail"}, runlog.StateFailed, 3, "attempt=3"},
		{[]string{"fail"}, runlog.StateFailed, 1, "oops"},
		{[]string{"flaky"}, runlog.StateSucceeded, 2, "attempt=2"},
		{[]string{"loud"}, runlog.StateSucceeded, 1, "earlier bytes dropped]"},
		{[]string{"other"}, runlog.StateFailed, 1, "args=other"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			id, err := r.Enqueue(ctx, kinds.KindExec, kinds.ExecRequest{Command: "job", Args: tc.args, Stdin: "hello stdin"})
			if err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, r, id, finished)
			if j.State != tc.state || j.Attempts != tc.attempts {
				t.Fatalf("state %s after %d attempts; want %s after %d (last error %q)", j.State, j.Attempts, tc.state, tc.attempts, j.LastError)
			}
			out := j.History[len(j.History)-1].Output
			if !strings.Contains(out, tc.output) {
				t.Errorf("output %q; want it to contain %q", out, tc.output)
			}
			if tc.args[0] == "loud" {
				if !strings.HasSuffix(out, "line 1999\n") {
					t.Errorf("a long output must keep its end; got %q", out)
				}
			} else if !strings.Contains(out, "job="+strconv.FormatUint(id, 10)+" attempt=") {
				t.Errorf("output %q lacks RUNLOG_JOB_ID and RUNLOG_ATTEMPT", out)
			}
			if len(out) > 4<<10 {
				t.Errorf("output is %d bytes; want at most 4 KiB", len(out))
			}
		})
	}
}

func TestExecKindCancelKillsProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pid")
	r := openRunner(t, kinds.Config{Commands: map[string]string{"job": path}})
	ctx := context.Background()
	id, err := r.Enqueue(ctx, kinds.KindExec, kinds.ExecRequest{Command: "job", Args: []string{"sleep", pidFile}})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	waitJob(t, r, id, func(runlog.Job) bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	if err := r.Cancel(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, r, id, finished)
	if j.State != runlog.StateCancelled {
		t.Fatalf("state %s; want cancelled", j.State)
	}
	waitJob(t, r, id, func(runlog.Job) bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	})
}
