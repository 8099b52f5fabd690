package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// chromiumPath finds Debian's chromium (or RUNLOG_CHROMIUM).
func chromiumPath() string {
	if p := os.Getenv("RUNLOG_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// e2eTarget is the downstream the e2e jobs call: /ok/N answers 200, /bad/N
// answers 400 (a permanent failure) until fixed is set, then 200.
type e2eTarget struct {
	*httptest.Server
	fixed atomic.Bool
}

func newE2ETarget(t *testing.T) *e2eTarget {
	tg := &e2eTarget{}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/bad/") && !tg.fixed.Load() {
			http.Error(w, "bad request: order "+strings.TrimPrefix(r.URL.Path, "/bad/")+" is not known here", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(tg.Close)
	return tg
}

// startDashboardServer gives the e2e test a runlog server with the dashboard
// at / and the API at /v1/: the real binary ("runlog serve") when the
// command mounts the dashboard, else server.Start in the test.
func startDashboardServer(t *testing.T) string {
	if base, ok := startBinary(t); ok {
		return base
	}
	return startServer(t, server.Config{}).URL()
}

// startBinary builds ./cmd/runlog and runs "runlog serve" if the command
// mounts this package (go list says whether it imports it); ok is false
// when it does not, or RUNLOG_E2E_INPROCESS is set (no build: quicker).
func startBinary(t *testing.T) (base string, ok bool) {
	if os.Getenv("RUNLOG_E2E_INPROCESS") != "" {
		return "", false
	}
	const cmdPkg = "github.com/runlog/runlog/cmd/runlog"
	deps, err := exec.Command("go", "list", "-deps", cmdPkg).Output()
	if err != nil || !strings.Contains(string(deps), "github.com/runlog/runlog/internal/dashboard\n") {
		t.Logf("runlog serve does not mount the dashboard: testing server.Start in the test")
		return "", false
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "runlog")
	if out, err := exec.Command("go", "build", "-o", bin, cmdPkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", cmdPkg, err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", "--data", filepath.Join(dir, "data"), "--addr", addr)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("runlog serve logs:\n%s", logs.String())
		}
	})
	base = "http://" + addr
	testwait.ForWithin(t, 20*time.Second, "runlog serve answers /healthz", func() bool {
		res, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	t.Logf("testing the dashboard of the real binary (%s serve)", bin)
	return base, true
}

// apiStats is GET /v1/stats.
type apiStats struct {
	Pending, Running, Succeeded, Failed, Cancelled int
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestBrowser drives the dashboard in headless Chromium against a real
// server: the counts shown match the API's, a failed job is opened and
// retried by a click, and it runs again and succeeds. It saves a PNG of each
// page to RUNLOG_SCREENSHOTS (or a temporary directory).
func TestBrowser(t *testing.T) {
	bt := startBrowser(t)

	target := newE2ETarget(t)
	base := startDashboardServer(t)

	// Six jobs that succeed and three that the target refuses (400).
	enqueue := func(path, key string, runAt time.Time) uint64 {
		req := map[string]any{
			"kind": "http", "url": target.URL + path, "method": "POST", "key": key,
			"headers": map[string]string{"Content-Type": "application/json"},
			"body":    fmt.Sprintf(`{"order":%q,"amount":42}`, key),
			"retry":   map[string]any{"attempts": 3, "base": "10ms", "cap": "50ms"},
		}
		if !runAt.IsZero() {
			req["run_at"] = runAt.Format(time.RFC3339)
		}
		body, _ := json.Marshal(req)
		res, err := http.Post(base+"/v1/jobs", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var c struct{ ID uint64 }
		if res.StatusCode != http.StatusCreated {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("enqueue %s: %d %s", path, res.StatusCode, b)
		}
		if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
			t.Fatalf("enqueue %s: %v", path, err)
		}
		return c.ID
	}
	for i := range 6 {
		enqueue(fmt.Sprintf("/ok/%d", i), fmt.Sprintf("order-ok-%d", i), time.Time{})
	}
	for i := range 3 {
		enqueue(fmt.Sprintf("/bad/%d", i), fmt.Sprintf("order-bad-%d", i), time.Time{})
	}
	var st apiStats
	testwait.ForWithin(t, 20*time.Second, "6 jobs succeeded and 3 failed", func() bool {
		getJSON(t, base+"/v1/stats", &st)
		return st.Succeeded == 6 && st.Failed == 3
	})

	tab := bt.tab()
	ctx, do, text, textIs, shot := tab.ctx, tab.do, tab.text, tab.textIs, tab.shot

	// Overview: the counts are the API's.
	do("open the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-count="failed"]`)))
	getJSON(t, base+"/v1/stats", &st)
	for state, want := range map[string]int{"pending": st.Pending, "running": st.Running, "succeeded": st.Succeeded, "failed": st.Failed, "cancelled": st.Cancelled} {
		if got := text(fmt.Sprintf(`[data-count=%q]`, state)); got != strconv.Itoa(want) {
			t.Errorf("overview shows %s %s, the API says %d", got, state, want)
		}
	}
	do("show the refresh control", chromedp.WaitVisible(chromedp.CSS("#pause-refresh")))
	shot("overview")
	// The overview refreshes itself (htmx, every 5 s): a job enqueued now
	// (due in an hour) shows up without a reload.
	later := enqueue("/ok/later", "order-later", time.Now().Add(time.Hour))
	testwait.ForWithin(t, 15*time.Second, "the overview refreshes to 1 pending job", func() bool { return textIs(`[data-count="pending"]`, "1") })
	if _, err := http.Post(fmt.Sprintf("%s/v1/jobs/%d/cancel", base, later), "application/json", strings.NewReader(`{"reason":"e2e"}`)); err != nil {
		t.Fatal(err)
	}
	// The pause control is remembered by the browser.
	do("pause auto-refresh", chromedp.Click(chromedp.CSS("#pause-refresh")))
	paused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.getItem("runlog.refreshPaused")`))
	if err != nil || paused != "1" {
		t.Errorf("pausing stored %q (%v), want \"1\"", paused, err)
	}
	do("resume auto-refresh", chromedp.Click(chromedp.CSS("#pause-refresh")))
	getJSON(t, base+"/v1/stats", &st)

	do("open the jobs page", chromedp.Navigate(base+"/jobs"), chromedp.WaitVisible(chromedp.CSS("#jobs-table")))
	rows, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#jobs-table tbody tr[data-job]")))
	if err != nil || len(rows) != 10 {
		t.Errorf("jobs page lists %d jobs (%v), want 10", len(rows), err)
	}
	shot("jobs")

	do("open the targets page", chromedp.Navigate(base+"/targets"), chromedp.WaitVisible(chromedp.CSS("#targets-table")))
	shot("targets")

	// Failed: open a failed job, retry it once the target accepts it.
	do("open the failed page", chromedp.Navigate(base+"/failed"), chromedp.WaitVisible(chromedp.CSS("#jobs-table")))
	shot("failed")
	do("open a failed job", chromedp.Click(chromedp.CSS("#jobs-table tbody tr[data-job] td a")), chromedp.WaitVisible(chromedp.CSS("#retry-button")))
	if got := text("#job-state"); got != "failed" {
		t.Fatalf("the job opened from the failed page is %q", got)
	}
	if got := text("#job-reason"); !strings.Contains(got, "400") {
		t.Errorf("the failed job's reason %q does not name the 400", got)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	id, err := strconv.ParseUint(loc[strings.LastIndex(loc, "/")+1:], 10, 64)
	if err != nil {
		t.Fatalf("job page URL %q: %v", loc, err)
	}
	shot("job")

	target.fixed.Store(true)
	do("click retry", chromedp.Click(chromedp.CSS("#retry-button")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); !strings.Contains(got, "will run again") {
		t.Errorf("after retry the page says %q", got)
	}
	// The page refreshes itself while the job is pending or running.
	testwait.ForWithin(t, 20*time.Second, "the job page shows the retried job succeeded", func() bool { return textIs("#job-state", "succeeded") })
	attempts, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#timeline li[data-attempt]")))
	if err != nil || len(attempts) != 2 {
		t.Errorf("the job page shows %d attempts (%v), want 2 (the refused one and the retry)", len(attempts), err)
	}
	shot("job-retried")

	var j struct {
		State   string
		History []struct{ Outcome string }
	}
	getJSON(t, fmt.Sprintf("%s/v1/jobs/%d", base, id), &j)
	if j.State != "succeeded" || len(j.History) != 2 || j.History[1].Outcome != "success" {
		t.Errorf("the API says job %d is %s with %+v, want succeeded on its second attempt", id, j.State, j.History)
	}
	getJSON(t, base+"/v1/stats", &st)
	if st.Succeeded != 7 || st.Failed != 2 {
		t.Errorf("after the retry the API counts %d succeeded, %d failed; want 7, 2", st.Succeeded, st.Failed)
	}

	// The other two: one by its row's button, the last by ticking all.
	do("open the failed page again", chromedp.Navigate(base+"/failed"), chromedp.WaitVisible(chromedp.CSS("#select-all")))
	do("retry a row", chromedp.Click(chromedp.CSS("button[data-retry]")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); !strings.Contains(got, "will run again") {
		t.Errorf("after a row's retry the page says %q", got)
	}
	testwait.ForWithin(t, 20*time.Second, "one job is left failed", func() bool {
		getJSON(t, base+"/v1/stats", &st)
		return st.Failed == 1
	})
	do("open the failed page once more", chromedp.Navigate(base+"/failed"), chromedp.WaitVisible(chromedp.CSS("#select-all")))
	do("select all and retry", chromedp.Click(chromedp.CSS("#select-all")), chromedp.Click(chromedp.CSS("#bulk-retry")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); got != "Retried 1 job." {
		t.Errorf("after the bulk retry the page says %q, want \"Retried 1 job.\"", got)
	}
	testwait.ForWithin(t, 20*time.Second, "every job succeeded", func() bool {
		getJSON(t, base+"/v1/stats", &st)
		return st.Succeeded == 9 && st.Failed == 0
	})
	do("overview after the retries", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-count="failed"]`)))
	if got := text(`[data-count="failed"]`); got != "0" {
		t.Errorf("overview shows %s failed after the retries, want 0", got)
	}
}

// tab is a headless Chromium tab for a test. Every console error (a script
// error, a refused Content-Security-Policy, a failed request) fails the
// test at its end.
type tab struct {
	t     *testing.T
	ctx   context.Context
	shots string // where shot saves PNGs

	mu     sync.Mutex
	errors []string // guarded by mu
	allow  []string // guarded by mu: substrings of expected console errors
}

// expectConsole lets console errors that contain substr pass (e.g. the 401
// of a refused login).
func (tb *tab) expectConsole(substr string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.allow = append(tb.allow, substr)
}

// newTab starts Chromium (headless, no sandbox: CI runs as root) with a
// fresh profile; everything the test does in it must end within 45 s.
func newTab(t *testing.T, chromium, shots string) *tab {
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser); err != nil { // starts the browser
		t.Fatalf("start chromium %s: %v", chromium, err)
	}
	ctx, cancel := context.WithTimeout(browser, 45*time.Second)
	tb := &tab{t: t, ctx: ctx, shots: shots}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				tb.mu.Lock()
				tb.errors = append(tb.errors, m.Text)
				tb.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		tb.mu.Lock()
		defer tb.mu.Unlock()
	next:
		for _, e := range tb.errors {
			for _, a := range tb.allow {
				if strings.Contains(e, a) {
					continue next
				}
			}
			t.Errorf("browser console: %s", e)
		}
	})
	t.Cleanup(cancel)
	return tb
}

// do runs steps, failing the test with what on error.
func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, steps...); err != nil {
		tb.t.Fatalf("%s: %v", what, err)
	}
}

// text returns the visible text of the first element matching sel.
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		tb.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// textIs is for polling a part of the page that htmx replaces now and then:
// a node swapped out between the lookup and the read is a miss, not an
// error.
func (tb *tab) textIs(sel, want string) bool {
	s, err := chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS(sel)))
	return err == nil && strings.TrimSpace(s) == want
}

// shot saves a PNG of the whole page as dashboard-NAME.png.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(tb.shots, "dashboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("screenshot: %s", path)
}

// TestBrowserLogin logs in to a dashboard behind a token in a real browser
// (the session cookie is SameSite=Strict), retries a job through htmx with
// the CSRF header, and logs out.
func TestBrowserLogin(t *testing.T) {
	bt := startBrowser(t)
	const token = "e2e-secret-token"
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer refusing.Close()
	srv := startServer(t, server.Config{Token: token})
	r := srv.Runner()
	ctx := context.Background()
	res, err := r.EnqueueJob(ctx, runlog.JobRequest{Kind: "http", Payload: []byte(`{"url":"` + refusing.URL + `/x","method":"POST"}`)})
	if err != nil {
		t.Fatal(err)
	}
	testwait.ForWithin(t, 20*time.Second, "the job failed", func() bool {
		j, err := r.Job(ctx, res.ID)
		return err == nil && j.State == runlog.StateFailed
	})

	tb := bt.tab()
	tb.expectConsole("status of 401") // the refused login
	page := fmt.Sprintf("%s/jobs/%d", srv.URL(), res.ID)
	tb.do("open a job page without a session", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#token")))
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil || !strings.Contains(loc, "/login?next=") {
		t.Fatalf("without a session the browser is at %q (%v), want the login page", loc, err)
	}
	tb.do("log in with a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "guess"), chromedp.Click(chromedp.CSS("#login-button")),
		chromedp.WaitVisible(chromedp.CSS(".alert")))
	tb.do("log in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#login-button")),
		chromedp.WaitVisible(chromedp.CSS("#retry-button")))
	if loc, _ := chromedp.Run(tb.ctx, chromedp.Location()); loc != page {
		t.Errorf("after the login the browser is at %q, want the page it asked for, %s", loc, page)
	}
	tb.do("retry", chromedp.Click(chromedp.CSS("#retry-button")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	testwait.ForWithin(t, 20*time.Second, "the retried job failed again", func() bool {
		j, err := r.Job(ctx, res.ID)
		return err == nil && j.State == runlog.StateFailed && len(j.History) == 2
	})
	tb.do("log out", chromedp.Click(chromedp.CSS("header form button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	tb.do("a page after logging out", chromedp.Navigate(srv.URL()+"/failed"), chromedp.WaitVisible(chromedp.CSS("#token")))
}
