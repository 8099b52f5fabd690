package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests drive a started server over real sockets (issue 14, items 1,
// 2, 5, 6 and 7).

// startTest starts a server on a free loopback port (or cfg.Addr) and
// stops it at the end of the test.
func startTest(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// answer is one HTTP answer as a client read it.
type answer struct {
	status int
	header http.Header
	body   string
	close  bool // the server said Connection: close
}

// errorText returns the "error" of a JSON error body, failing the test if
// the body is not one.
func (a answer) errorText(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Error == "" || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
		t.Fatalf("answer %d is not a JSON error (Content-Type %q): %q", a.status, a.header.Get("Content-Type"), a.body)
	}
	return e.Error
}

// send makes one request on a new connection to srv; host, when not
// empty, is the Host header.
func send(t *testing.T, srv *Server, method, path, host string, header map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = nil, 0
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b), resp.Close}
}

// raw writes raw on a new connection to srv and reads n answers (fewer if
// the server closes the connection); it fails if the server takes more than
// 5 s.
func raw(t *testing.T, srv *Server, data string, n int) []answer {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, data); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var out []answer
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%q: no answer within 5 s", data)
			}
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, answer{resp.StatusCode, resp.Header, string(b), resp.Close})
	}
	return out
}

// jobCount is how many jobs the server holds.
func jobCount(t *testing.T, srv *Server) int {
	t.Helper()
	st, err := srv.Runner().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Pending + st.Running + st.Succeeded + st.Failed + st.Cancelled
}

// laterJob is a valid job request due in an hour (nothing runs it).
func laterJob(extra string) string {
	return `{"kind":"http","url":"http://127.0.0.1:9/x","run_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"` + extra + `}`
}

var jsonHeader = map[string]string{"Content-Type": "application/json"}

// TestHostCheck (item 1): a DNS-rebinding page (Host evil.example:PORT)
// gets 421 on every path (API reads and writes, dashboard, metrics) while
// the listen address, localhost, loopback IPs and the operator's
// --hostname names are served.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{Hostnames: []string{"Jobs.Example.com."}})
	_, port, _ := net.SplitHostPort(srv.Addr())
	id := send(t, srv, "POST", "/v1/jobs", "", jsonHeader, laterJob(""))
	if id.status != 201 {
		t.Fatalf("POST /v1/jobs: %d %s", id.status, id.body)
	}
	var created Created
	_ = json.Unmarshal([]byte(id.body), &created)
	jobPath := "/v1/jobs/" + strconv.FormatUint(created.ID, 10)
	for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port, "127.0.0.1.evil.example", "[::2]:" + port} {
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/jobs"}, {"GET", jobPath}, {"GET", "/"}, {"GET", "/jobs"}, {"GET", "/metrics"},
			{"POST", jobPath + "/cancel"}, {"GET", "/v1/stats"},
		} {
			a := send(t, srv, c.method, c.path, host, map[string]string{"Origin": "http://" + host}, "")
			if a.status != http.StatusMisdirectedRequest || !strings.Contains(a.errorText(t), "--hostname") {
				t.Errorf("%s %s with Host %s: %d %q; want 421 naming --hostname", c.method, c.path, host, a.status, a.body)
			}
		}
	}
	if j, _ := srv.Runner().Job(context.Background(), created.ID); j.State != "pending" {
		t.Fatalf("the job is %s after refused cancels; want pending", j.State)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "127.0.0.2:" + port, "[::1]:" + port, "jobs.example.com:" + port, "jobs.example.com.", "localhost:1"} {
		if a := send(t, srv, "GET", "/v1/stats", host, nil, ""); a.status != 200 {
			t.Errorf("GET /v1/stats with Host %s: %d %s; want 200", host, a.status, a.body)
		}
		if a := send(t, srv, "GET", "/", host, nil, ""); a.status != 200 {
			t.Errorf("GET / with Host %s: %d; want the dashboard", host, a.status)
		}
	}
	// HTTP/1.0 without a Host is no browser's; it is refused as well.
	if a := raw(t, srv, "GET /v1/stats HTTP/1.0\r\n\r\n", 1); len(a) != 1 || a[0].status != 421 {
		t.Errorf("HTTP/1.0 without Host: %+v; want 421", a)
	}
}

// TestHostCheckEverywhereAddress: a server on 0.0.0.0 (with its token)
// answers to any IP literal and to the machine's host name, and to other
// names only when given with --hostname.
func TestHostCheckEverywhereAddress(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{Addr: "0.0.0.0:0", Token: "tok", Hostnames: []string{"jobs.internal"}})
	_, port, _ := net.SplitHostPort(srv.Addr())
	auth := map[string]string{"Authorization": "Bearer tok"}
	name, _ := os.Hostname()
	for host, want := range map[string]int{
		"192.0.2.7:" + port: 200, "[2001:db8::1]:" + port: 200, "127.0.0.1:" + port: 200,
		name + ":" + port: 200, "jobs.internal": 200, "evil.example:" + port: 421,
	} {
		if a := send(t, srv, "GET", "/v1/stats", host, auth, ""); a.status != want {
			t.Errorf("GET /v1/stats with Host %s: %d %s; want %d", host, a.status, a.body, want)
		}
	}
	if _, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Hostnames: []string{"http://x.example/"}}); err == nil || !strings.Contains(err.Error(), "--hostname") {
		t.Errorf("a --hostname with a scheme: %v; want an error naming --hostname", err)
	}
}

// TestCrossSiteWritesRefused (item 1): the writes a browser sends from
// another site without a preflight are refused with 403 and change nothing:
// text/plain posts, form posts, cancels, whether the browser says so with
// Sec-Fetch-Site (cross-site, or same-site: a page on another localhost
// port) or only with Origin. The server's own pages (same-origin) and
// clients that are not browsers are served.
func TestCrossSiteWritesRefused(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{})
	_, port, _ := net.SplitHostPort(srv.Addr())
	self := "http://127.0.0.1:" + port
	created := send(t, srv, "POST", "/v1/jobs", "", jsonHeader, laterJob(""))
	var c Created
	_ = json.Unmarshal([]byte(created.body), &c)
	cancel := "/v1/jobs/" + strconv.FormatUint(c.ID, 10) + "/cancel"
	for _, h := range []map[string]string{
		{"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Content-Type": "application/json", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Content-Type": "application/json", "Origin": "http://localhost:8080", "Sec-Fetch-Site": "same-site"},
		{"Content-Type": "application/json", "Origin": "http://evil.example"},
		{"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"},
		{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"},
	} {
		for _, path := range []string{"/v1/jobs", "/v1/jobs/batch", cancel, "/login", "/jobs/" + strconv.FormatUint(c.ID, 10) + "/cancel"} {
			a := send(t, srv, "POST", path, "", h, laterJob(""))
			if a.status != http.StatusForbidden || !strings.Contains(a.errorText(t), "cross-site") {
				t.Errorf("POST %s %v: %d %q; want a JSON 403", path, h, a.status, a.body)
			}
		}
	}
	if n := jobCount(t, srv); n != 1 {
		t.Fatalf("%d jobs after refused cross-site posts; want 1", n)
	}
	if j, _ := srv.Runner().Job(context.Background(), c.ID); j.State != "pending" {
		t.Fatalf("the job is %s after refused cancels; want pending", j.State)
	}
	for _, h := range []map[string]string{
		{"Content-Type": "application/json", "Origin": self, "Sec-Fetch-Site": "same-origin"},
		{"Content-Type": "application/json", "Origin": self},
		{"Content-Type": "application/json", "Sec-Fetch-Site": "none"},
		{"Content-Type": "application/json"},
	} {
		if a := send(t, srv, "POST", "/v1/jobs", "", h, laterJob("")); a.status != 201 {
			t.Errorf("POST /v1/jobs %v: %d %s; want 201", h, a.status, a.body)
		}
	}
	// Reads stay open to other sites' requests (the browser keeps their
	// answers from the page); DNS rebinding is TestHostCheck's.
	if a := send(t, srv, "GET", "/v1/stats", "", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, ""); a.status != 200 {
		t.Errorf("cross-site GET: %d", a.status)
	}
}

// TestAPIWritesNeedJSON (item 1): an API write with a body must say
// Content-Type: application/json (parameters allowed), else 415 and
// nothing is stored; a cancel or retry without a body needs none.
func TestAPIWritesNeedJSON(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{})
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", "text/json"} {
		for _, path := range []string{"/v1/jobs", "/v1/jobs/batch", "/v1/jobs/1/cancel"} {
			h := map[string]string{}
			if ct != "" {
				h["Content-Type"] = ct
			}
			a := send(t, srv, "POST", path, "", h, laterJob(""))
			if a.status != http.StatusUnsupportedMediaType || !strings.Contains(a.errorText(t), "application/json") {
				t.Errorf("POST %s with Content-Type %q: %d %q; want a JSON 415", path, ct, a.status, a.body)
			}
		}
	}
	if n := jobCount(t, srv); n != 0 {
		t.Fatalf("%d jobs stored from non-JSON posts", n)
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
		if a := send(t, srv, "POST", "/v1/jobs", "", map[string]string{"Content-Type": ct}, laterJob("")); a.status != 201 {
			t.Errorf("Content-Type %q: %d %s; want 201", ct, a.status, a.body)
		}
	}
	if a := send(t, srv, "POST", "/v1/jobs/1/cancel", "", nil, ""); a.status != 200 {
		t.Errorf("cancel without a body or Content-Type: %d %s; want 200", a.status, a.body)
	}
}

// TestTokenNeverLogged (item 2): a request with the right bearer token and
// a header holding a control character gets 400, and nothing the server
// logs (at any level) holds the token.
func TestTokenNeverLogged(t *testing.T) {
	t.Parallel()
	const token = "s3cr3t-t0ken-4-logs"
	var logs lockedBuffer
	srv := startTest(t, Config{Token: token, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for _, req := range []string{
		"GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + "\r\nX-Trace: a\x01b\r\n\r\n",
		"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + "\r\nX-Trace: a\x01b\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + "\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{\"a\":",
		"GET /v1/stats HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer " + token + "\n\n",
	} {
		a := raw(t, srv, req, 1)
		if len(a) != 1 || a[0].status != 400 {
			t.Errorf("%q: %+v; want 400", req, a)
		}
	}
	_ = srv.Shutdown(context.Background())
	if strings.Contains(logs.String(), token) {
		t.Fatalf("the token is in the server's log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "runlog serving") {
		t.Fatalf("the log was not captured: %q", logs.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestKeysDifferingInBytesDoNotCollide (item 5): keys (and any string) in
// invalid UTF-8 or with a lone surrogate escape, which encoding/json would
// turn into U+FFFD, get 400 on the single and the batch path, so that
// "bin-\xff" never answers as the job of "bin-\xfe"; valid surrogate pairs
// are text and are stored.
func TestKeysDifferingInBytesDoNotCollide(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{})
	for _, key := range []string{"bin-\xff", "bin-\xfe", `bin-\udcff`, `bin-\udcfe`, `bin-\ud800`, `bin-\ud800x`, `bin-\ud800\u0041`, `\udbff\udbff`} {
		single := laterJob(`,"key":"` + key + `"`)
		a := send(t, srv, "POST", "/v1/jobs", "", jsonHeader, single)
		if a.status != 400 || !strings.Contains(a.errorText(t), "UTF") {
			t.Errorf("key %q: %d %q; want 400 naming UTF-8/UTF-16", key, a.status, a.body)
		}
		b := send(t, srv, "POST", "/v1/jobs/batch", "", jsonHeader, `{"jobs":[`+laterJob("")+`,`+single+`]}`)
		if b.status != 400 {
			t.Errorf("batch with key %q: %d %s; want 400", key, b.status, b.body)
		}
		// In another string too (the fast decoder's fields and the std path's).
		c := send(t, srv, "POST", "/v1/jobs", "", jsonHeader, laterJob(`,"headers":{"X":"`+key+`"}`))
		if c.status != 400 {
			t.Errorf("header value %q: %d %s; want 400", key, c.status, c.body)
		}
	}
	if n := jobCount(t, srv); n != 0 {
		t.Fatalf("%d jobs stored from refused keys", n)
	}
	ids := map[string]bool{}
	for _, key := range []string{`bin-\ud83d\ude00`, "bin-\U0001F600x", `bin-\u00ff`, `bin-\u00fe`} {
		a := send(t, srv, "POST", "/v1/jobs", "", jsonHeader, laterJob(`,"key":"`+key+`"`))
		if a.status != 201 {
			t.Fatalf("key %q: %d %s; want 201", key, a.status, a.body)
		}
		ids[a.body] = true
	}
	if len(ids) != 4 {
		t.Fatalf("4 distinct keys gave %d jobs", len(ids))
	}
}

// TestTrailingDataRefused (item 6): data after the JSON value is a 400 on
// the single-job path (fast decoder or not), as on the batch path and in a
// cancel's reason, and nothing is stored.
func TestTrailingDataRefused(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{})
	for _, tail := range []string{"}", "]", " }}}", ",", "{}", " x", "\n}"} {
		for _, body := range []string{
			`{"kind":"http","url":"http://127.0.0.1:9/x"}` + tail,
			laterJob(`,"body":"\u00e9"`) + tail, // not the fast decoder's
			`{"kind":"http","url":"http://127.0.0.1:9/x","retry":{"attempts":1e0}}` + tail,
		} {
			if a := send(t, srv, "POST", "/v1/jobs", "", jsonHeader, body); a.status != 400 || a.errorText(t) == "" {
				t.Errorf("POST /v1/jobs %q: %d %s; want 400", body, a.status, a.body)
			}
		}
		if a := send(t, srv, "POST", "/v1/jobs/batch", "", jsonHeader, `{"jobs":[`+laterJob("")+`]}`+tail); a.status != 400 {
			t.Errorf("batch with %q after it: %d %s; want 400", tail, a.status, a.body)
		}
	}
	if n := jobCount(t, srv); n != 0 {
		t.Fatalf("%d jobs stored from bodies with trailing data", n)
	}
	created := send(t, srv, "POST", "/v1/jobs", "", jsonHeader, laterJob("")+" \n")
	if created.status != 201 {
		t.Fatalf("white space after the object: %d %s; want 201", created.status, created.body)
	}
	var c Created
	_ = json.Unmarshal([]byte(created.body), &c)
	cancel := "/v1/jobs/" + strconv.FormatUint(c.ID, 10) + "/cancel"
	if a := send(t, srv, "POST", cancel, "", jsonHeader, `{"reason":"x"}}`); a.status != 400 {
		t.Errorf("cancel with trailing data: %d %s; want 400", a.status, a.body)
	}
	if j, _ := srv.Runner().Job(context.Background(), c.ID); j.State != "pending" {
		t.Fatalf("job %s after a refused cancel; want pending", j.State)
	}
}

// TestMalformedRequestsRefused (item 7): what net/http alone would serve
// (HTTP/1.2, Transfer-Encoding with Content-Length, bare LF line endings)
// or answer in plain text (CONNECT as a 500 before) is refused at once with
// a JSON error, stores nothing, and closes the connection; what net/http
// refuses itself (HTTP/3.0, a control character in a header, a missing
// Host) is refused too, in net/http's plain text.
func TestMalformedRequestsRefused(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{})
	job := laterJob("")
	cl := strconv.Itoa(len(job))
	chunked := strconv.FormatInt(int64(len(job)), 16) + "\r\n" + job + "\r\n0\r\n\r\n"
	for _, c := range []struct {
		name, req string
		status    int
		json      bool
	}{
		{"HTTP/1.2", "GET /v1/stats HTTP/1.2\r\nHost: 127.0.0.1\r\n\r\n", 505, true},
		{"HTTP/1.2 POST", "POST /v1/jobs HTTP/1.2\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " + cl + "\r\n\r\n" + job, 505, true},
		{"TE+CL", "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: " + cl + "\r\n\r\n" + chunked, 400, true},
		{"CL+TE", "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4\r\ntransfer-encoding: chunked\r\n\r\n" + chunked, 400, true},
		{"bare LF", "POST /v1/jobs HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\nContent-Length: " + cl + "\n\n" + job, 400, true},
		{"one bare LF", "GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\nX-A: b\r\n\r\n", 400, true},
		{"CONNECT", "CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n", 405, true},
		{"HTTP/3.0", "GET /v1/stats HTTP/3.0\r\nHost: 127.0.0.1\r\n\r\n", 505, false},
		{"control character", "GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trace: a\x01b\r\n\r\n", 400, false},
		{"no Host", "GET /v1/stats HTTP/1.1\r\n\r\n", 400, false},
	} {
		start := time.Now()
		// A valid request after it on the same connection must not be served.
		a := raw(t, srv, c.req+"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "+cl+"\r\n\r\n"+job, 2)
		if len(a) == 0 || a[0].status != c.status {
			t.Errorf("%s: %+v; want %d", c.name, a, c.status)
			continue
		}
		if c.json {
			a[0].errorText(t)
		}
		if len(a) > 1 && a[1].status < 400 {
			t.Errorf("%s: the request after it on the connection was served: %d %s", c.name, a[1].status, a[1].body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: answered after %v", c.name, d)
		}
	}
	if n := jobCount(t, srv); n != 0 {
		t.Fatalf("%d jobs stored from malformed requests", n)
	}
}

// TestKeepAliveAfterBodies: requests with bodies pipelined on one
// connection are all served (strictConn follows Content-Length bodies,
// which may hold anything, bare LFs included); a chunked request is served
// and its connection closed after the answer.
func TestKeepAliveAfterBodies(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{})
	job := laterJob(`,"body":"` + "a\\nb" + `"`)
	weird := "{\"kind\":\"http\",\n\"url\":\"http://127.0.0.1:9/x\",\n\"run_at\":\"2030-01-01T00:00:00Z\"}\n"
	var pipelined string
	for _, b := range []string{job, weird, job, weird} {
		pipelined += "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + b
	}
	// A refused request whose body the server never reads: net/http
	// discards the body and the next request is still found.
	pipelined += "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(weird)) + "\r\n\r\n" + weird
	pipelined += "GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	a := raw(t, srv, pipelined, 6)
	if len(a) != 6 {
		t.Fatalf("%d answers to 6 pipelined requests: %+v", len(a), a)
	}
	for i, want := range []int{201, 201, 201, 201, 415, 200} {
		if a[i].status != want {
			t.Fatalf("pipelined request %d: %d %s; want %d", i, a[i].status, a[i].body, want)
		}
	}
	chunked := strconv.FormatInt(int64(len(job)), 16) + "\r\n" + job + "\r\n0\r\n\r\n"
	a = raw(t, srv, "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked, 1)
	if len(a) != 1 || a[0].status != 201 || !a[0].close {
		t.Fatalf("chunked request: %+v; want 201 and Connection: close", a)
	}
	if n := jobCount(t, srv); n != 5 {
		t.Fatalf("%d jobs; want 5", n)
	}
}

// TestErrorBodiesAreJSON (item 7): the API's refusals are JSON
// {"error": ...}: 404, 405, 413, 415, 400, 421, 403.
func TestErrorBodiesAreJSON(t *testing.T) {
	t.Parallel()
	srv := startTest(t, Config{MaxBody: 1 << 10, NoDashboard: true})
	for _, c := range []struct {
		method, path, host string
		header             map[string]string
		body               string
		status             int
	}{
		{"GET", "/nothing", "", nil, "", 404},
		{"DELETE", "/v1/jobs", "", nil, "", 405},
		{"POST", "/v1/jobs", "", jsonHeader, laterJob(`,"body":"` + strings.Repeat("x", 2<<10) + `"`), 413},
		{"POST", "/v1/jobs", "", map[string]string{"Content-Type": "text/plain"}, laterJob(""), 415},
		{"POST", "/v1/jobs", "", jsonHeader, "{", 400},
		{"GET", "/v1/stats", "evil.example", nil, "", 421},
		{"POST", "/v1/jobs", "", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, laterJob(""), 403},
		{"GET", "/v1/jobs/x", "", nil, "", 400},
	} {
		a := send(t, srv, c.method, c.path, c.host, c.header, c.body)
		if a.status != c.status {
			t.Errorf("%s %s: %d %s; want %d", c.method, c.path, a.status, a.body, c.status)
			continue
		}
		a.errorText(t)
	}
}

// TestRequestContextCancelledWhenClientLeaves (item 7): the server's
// request contexts end when the client closes its connection mid-request
// (once the body is read, as every API handler does first).
func TestRequestContextCancelledWhenClientLeaves(t *testing.T) {
	t.Parallel()
	started, cancelled := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // as every API handler does first
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := newHTTPServer(h, Config{ReadHeaderTimeout: DefaultReadHeaderTimeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go func() { _ = hs.Serve(strictListener{ln}) }()
	defer hs.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	<-started
	conn.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the request context was not cancelled 5 s after the client left")
	}
}
