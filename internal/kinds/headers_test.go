package kinds_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// refusedHeaders are the names a job may not set (issue 14 item 3), in the
// spellings a request may use.
var refusedHeaders = []string{
	"Host", "host", "HOST", "Connection", "keep-alive", "Proxy-Connection",
	"Proxy-Authorization", "proxy-authenticate", "TE", "te", "Trailer",
	"Transfer-Encoding", "upgrade", "Content-Length",
}

// hostRecorder is a target that records the Host header of every request
// and, if arrived is set, signals each arrival on it (without blocking).
type hostRecorder struct {
	mu      sync.Mutex
	hosts   []string
	arrived chan struct{}
}

func (h *hostRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.hosts = append(h.hosts, r.Host)
	h.mu.Unlock()
	select {
	case h.arrived <- struct{}{}:
	default:
	}
}

func (h *hostRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.hosts...)
}

func TestCheckHeadersRefusesHostAndHopByHop(t *testing.T) {
	t.Parallel()
	for _, name := range refusedHeaders {
		err := kinds.CheckHeaders(map[string]string{"X-Ok": "1", name: "evil.example"})
		if !errors.Is(err, kinds.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("header %q: err = %v; want ErrInvalid naming the header", name, err)
		}
		req := kinds.HTTPRequest{URL: "http://127.0.0.1:9/x", Headers: map[string]string{name: "v"}}
		if err := req.Validate(nil); !errors.Is(err, kinds.ErrInvalid) {
			t.Errorf("Validate with header %q: err = %v; want ErrInvalid", name, err)
		}
	}
	if err := kinds.CheckHeaders(map[string]string{"Content-Type": "application/json", "X-Hostname": "a", "Authorization": "Bearer t"}); err != nil {
		t.Errorf("ordinary headers refused: %v", err)
	}
}

// TestHostHeaderRefusedAtEnqueue: over real sockets, POST /v1/jobs with a
// Host (or hop-by-hop) job header answers 400 naming it and stores nothing;
// the target, which is on the allow-list, is never contacted with it.
func TestHostHeaderRefusedAtEnqueue(t *testing.T) {
	t.Parallel()
	rec := &hostRecorder{arrived: make(chan struct{}, 1)}
	target := httptest.NewServer(rec)
	defer target.Close()
	srv, err := server.Start(server.Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", AllowHosts: []string{"127.0.0.1"}, NoDashboard: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())

	post := func(headers map[string]string) (int, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"kind": "http", "url": target.URL + "/hook", "headers": headers})
		resp, err := http.Post(srv.URL()+"/v1/jobs", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, name := range refusedHeaders {
		code, body := post(map[string]string{name: "evil.example"})
		if code != http.StatusBadRequest || !strings.Contains(body, name) {
			t.Errorf("job header %q: %d %s; want 400 naming the header", name, code, body)
		}
	}
	batch := `{"jobs":[{"kind":"http","url":"` + target.URL + `/ok"},{"kind":"http","url":"` + target.URL + `/hook","headers":{"Host":"evil.example"}}]}`
	resp, err := http.Post(srv.URL()+"/v1/jobs/batch", "application/json", strings.NewReader(batch))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "jobs[1]") || !strings.Contains(string(b), "Host") {
		t.Errorf("batch with a Host job header: %d %s; want 400 naming jobs[1] and the header", resp.StatusCode, b)
	}
	st, err := srv.Runner().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending+st.Running+st.Succeeded+st.Failed+st.Cancelled != 0 {
		t.Fatalf("refused requests stored jobs: %+v", st)
	}

	// An ordinary header still goes through, and the target sees its own
	// host.
	if code, body := post(map[string]string{"X-Trace": "1"}); code != http.StatusCreated {
		t.Fatalf("ordinary job: %d %s", code, body)
	}
	testwait.Recv(t, rec.arrived, "the target to receive the ordinary job")
	want := strings.TrimPrefix(target.URL, "http://")
	if got := rec.seen(); len(got) != 1 || got[0] != want {
		t.Fatalf("target saw Host %q; want one request with Host %q", got, want)
	}
}

// TestHostHeaderRefusedAtDelivery: a job journaled with a Host header (as
// an older version accepted) fails permanently on its first attempt with a
// reason naming the header, and the target is never contacted.
func TestHostHeaderRefusedAtDelivery(t *testing.T) {
	t.Parallel()
	rec := &hostRecorder{}
	target := httptest.NewServer(rec)
	defer target.Close()
	r := openRunner(t, kinds.Config{AllowHosts: []string{"127.0.0.1"}})
	for _, name := range []string{"Host", "Transfer-Encoding", "Connection"} {
		// Runner.Enqueue does not run the kind's Validate: this is the job
		// as it sits in a journal written before the rule.
		id, err := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{
			URL: target.URL + "/hook", Headers: map[string]string{name: "evil.example"}})
		if err != nil {
			t.Fatal(err)
		}
		j := waitJob(t, r, id, finished)
		if j.State != runlog.StateFailed || j.Attempts != 1 || !strings.Contains(j.Reason, name) || !strings.Contains(j.Reason, "not contacted") {
			t.Errorf("job with header %q: %s after %d attempts, reason %q; want failed permanently at once, naming the header", name, j.State, j.Attempts, j.Reason)
		}
	}
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("the target was contacted with Host %q", got)
	}
}
