package dashboard_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/dashboard"
	"github.com/runlog/runlog/internal/testwait"
)

// app is an application that mounts the dashboard next to its own routes,
// over a real socket.
type app struct {
	t      *testing.T
	runner *runlog.Runner
	srv    *httptest.Server
	client *http.Client
}

func newApp(t *testing.T, opts dashboard.Options) *app {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := runlog.Open(t.TempDir(), runlog.Config{Logger: quiet, Handlers: map[string]runlog.Handler{
		"ok":  runlog.Handle(func(context.Context, []byte) error { return nil }),
		"bad": runlog.Handle(func(context.Context, []byte) error { return runlog.Permanent(errors.New("refused")) }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	opts.Logger = quiet
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the app's home") })
	mux.Handle("/admin/jobs/", dashboard.New(r, opts))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &app{t: t, runner: r, srv: srv, client: &http.Client{Jar: jar}}
}

// do sends a request (following redirects) and returns the status, the
// final path and the body.
func (a *app) do(method, path string, form url.Values, hdr ...string) (int, string, string) {
	a.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, a.srv.URL+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := a.client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Request.URL.Path, string(b)
}

// csrf returns the CSRF token of a page's forms.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field in the page:\n%s", page)
	}
	return m[1]
}

func TestMountedDashboard(t *testing.T) {
	t.Parallel()
	a := newApp(t, dashboard.Options{Token: "s3cret", BasePath: "/admin/jobs"})
	ctx := context.Background()
	ok, _ := a.runner.Enqueue(ctx, "ok", nil)
	bad, _ := a.runner.Enqueue(ctx, "bad", nil)
	for _, id := range []uint64{ok, bad} {
		if _, err := a.runner.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, body := a.do("GET", "/", nil); code != 200 || body != "the app's home" {
		t.Fatalf("the app's own route: %d %q", code, body)
	}
	// The login page, under the base; then back to the page asked for.
	code, path, body := a.do("GET", "/admin/jobs/failed", nil)
	if code != 200 || path != "/admin/jobs/login" || !strings.Contains(body, `action="/admin/jobs/login"`) {
		t.Fatalf("without a session: %d at %s", code, path)
	}
	code, path, body = a.do("POST", "/admin/jobs/login", url.Values{"token": {"s3cret"}, "next": {"/failed"}})
	if code != 200 || path != "/admin/jobs/failed" || !strings.Contains(body, "refused") {
		t.Fatalf("after login: %d at %s\n%s", code, path, body)
	}
	// The charts count the attempts that ended (fed by Subscribe).
	testwait.For(t, "the overview's chart to count both attempts", func() bool {
		_, _, overview := a.do("GET", "/admin/jobs/", nil)
		succeeded, failed := 0, 0
		for _, m := range regexp.MustCompile(`(\d+) succeeded, (\d+) failed`).FindAllStringSubmatch(overview, -1) {
			s, _ := strconv.Atoi(m[1])
			f, _ := strconv.Atoi(m[2])
			succeeded, failed = succeeded+s, failed+f
		}
		return succeeded == 1 && failed == 1
	})
	// An action from the page: retried, and sent back under the base.
	code, path, _ = a.do("POST", "/admin/jobs/jobs/"+strconv.FormatUint(bad, 10)+"/retry",
		url.Values{"csrf": {csrf(t, body)}, "back": {"/failed"}}, "Origin", a.srv.URL)
	if code != 200 || path != "/admin/jobs/failed" {
		t.Fatalf("retry: %d at %s", code, path)
	}
	testwait.For(t, "the retried job to run again", func() bool {
		j, err := a.runner.Job(ctx, bad)
		return err == nil && j.Attempts == 2 && j.State == runlog.StateFailed
	})
	// The same action from another site is refused.
	code, _, _ = a.do("POST", "/admin/jobs/jobs/"+strconv.FormatUint(bad, 10)+"/retry",
		url.Values{"csrf": {csrf(t, body)}}, "Sec-Fetch-Site", "cross-site")
	if code != http.StatusForbidden {
		t.Fatalf("cross-site retry: %d, want 403", code)
	}
}

func TestMountedDashboardReadOnly(t *testing.T) {
	t.Parallel()
	a := newApp(t, dashboard.Options{Token: "s3cret", ReadOnly: true, BasePath: "/admin/jobs"})
	id, _ := a.runner.Enqueue(context.Background(), "ok", nil, runlog.RunIn(time.Hour))
	a.do("POST", "/admin/jobs/login", url.Values{"token": {"s3cret"}})
	code, _, page := a.do("GET", "/admin/jobs/jobs/"+strconv.FormatUint(id, 10), nil)
	if code != 200 || strings.Contains(page, "/cancel") || !strings.Contains(page, "read-only") {
		t.Fatalf("read-only job page: %d, has a cancel action: %v", code, strings.Contains(page, "/cancel"))
	}
	code, _, body := a.do("POST", "/admin/jobs/jobs/"+strconv.FormatUint(id, 10)+"/cancel",
		url.Values{"csrf": {csrf(t, page)}, "reason": {"x"}}, "Origin", a.srv.URL)
	if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Fatalf("cancel on a read-only dashboard: %d, want 403 saying read-only", code)
	}
}
