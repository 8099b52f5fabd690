package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// triageServer starts a server (in the test) and a target that answers
// /ok/N 200, /bad/N 400 and /gone/N 410, and enqueues jobs of each: 4
// refused with 400, 2 with 410, 3 that succeed and 2 due in an hour. It
// returns the server's URL and the ids of the 410 jobs.
func triageServer(t *testing.T) (base string, gone []uint64) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/bad/"):
			http.Error(w, "order "+strings.TrimPrefix(r.URL.Path, "/bad/")+" is not known here", http.StatusBadRequest)
		case strings.HasPrefix(r.URL.Path, "/gone/"):
			http.Error(w, "gone", http.StatusGone)
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(target.Close)
	base = startServer(t, server.Config{}).URL()
	for i := range 4 {
		postJob(t, base, target.URL+fmt.Sprintf("/bad/%d", 1000+i), time.Time{})
	}
	for i := range 2 {
		// A 410 disables its target (the endpoint lifecycle): each gone
		// job has a receiver of its own, so that no job waits behind
		// another's disable.
		g := httptest.NewServer(target.Config.Handler)
		t.Cleanup(g.Close)
		gone = append(gone, postJob(t, base, g.URL+fmt.Sprintf("/gone/%d", i), time.Time{}))
	}
	for i := range 3 {
		postJob(t, base, target.URL+fmt.Sprintf("/ok/%d", i), time.Time{})
	}
	for i := range 2 {
		postJob(t, base, target.URL+fmt.Sprintf("/ok/later-%d", i), time.Now().Add(time.Hour))
	}
	testwait.ForWithin(t, 20*time.Second, "6 jobs failed and 3 succeeded", func() bool {
		var st apiStats
		getJSON(t, base+"/v1/stats", &st)
		return st.Failed == 6 && st.Succeeded == 3
	})
	return base, gone
}

// postJob enqueues an http job to url through the API.
func postJob(t *testing.T, base, url string, runAt time.Time) uint64 {
	t.Helper()
	req := map[string]any{"kind": "http", "url": url, "body": `{"n":1}`}
	if !runAt.IsZero() {
		req["run_at"] = runAt.UTC().Format(time.RFC3339)
	}
	body, _ := json.Marshal(req)
	res, err := http.Post(base+"/v1/jobs", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var c struct{ ID uint64 }
	if res.StatusCode != http.StatusCreated || json.NewDecoder(res.Body).Decode(&c) != nil {
		t.Fatalf("enqueue %s: %d", url, res.StatusCode)
	}
	return c.ID
}

// TestBrowserTriage drives the triage in headless Chromium: the state tabs
// show the API's counts and filter the list, the list refreshes itself,
// the failed page groups the failures by reason with counts and retries a
// whole group from its button, and a job's page shows its timeline.
func TestBrowserTriage(t *testing.T) {
	bt := startBrowser(t)
	base, gone := triageServer(t)
	tb := bt.tab()
	ctx := tb.ctx

	// Tabs: the counts are the API's; a tab filters the list.
	tb.do("open the jobs page", chromedp.Navigate(base+"/jobs"), chromedp.WaitVisible(chromedp.CSS("#state-tabs")))
	var st apiStats
	getJSON(t, base+"/v1/stats", &st)
	for tab, want := range map[string]int{"all": 11, "pending": st.Pending, "running": st.Running, "succeeded": st.Succeeded, "failed": st.Failed, "cancelled": st.Cancelled} {
		if got := tb.text(fmt.Sprintf(`[data-tab-count=%q]`, tab)); got != strconv.Itoa(want) {
			t.Errorf("tab %s shows %s, the API says %d", tab, got, want)
		}
	}
	tb.do("click the pending tab", chromedp.Click(chromedp.CSS(`[data-tab="pending"]`)), chromedp.WaitVisible(chromedp.CSS(`[data-tab="pending"][aria-current="page"]`)))
	rows := func() int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#jobs-table tbody tr[data-job]").length`))
		if err != nil {
			return -1
		}
		return n
	}
	if n := rows(); n != 2 {
		t.Errorf("the pending tab lists %d jobs, want 2", n)
	}
	// The list refreshes itself: a job enqueued now shows up without a reload.
	postJob(t, base, "http://127.0.0.1:9/later", time.Now().Add(time.Hour))
	testwait.ForWithin(t, 15*time.Second, "the pending list refreshes to 3 jobs", func() bool { return rows() == 3 })
	if got := tb.text(`[data-tab-count="pending"]`); got != "3" {
		t.Errorf("after the refresh the pending tab counts %s, want 3", got)
	}

	// Triage: the failures grouped by reason, the largest group first.
	tb.do("open the failed page", chromedp.Navigate(base+"/failed"), chromedp.WaitVisible(chromedp.CSS("#groups")))
	groups, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('[data-groups="reason"] tr[data-group]')).map(r => r.querySelector("[data-group-count]").textContent + " " + r.dataset.group)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || !strings.HasPrefix(groups[0], "4 ") || !strings.Contains(groups[0], "HTTP 400") || !strings.HasPrefix(groups[1], "2 ") || !strings.Contains(groups[1], "HTTP 410") {
		t.Errorf("reason groups %q, want 4 of HTTP 400 then 2 of HTTP 410", groups)
	}
	tb.shot("failed-triage")
	// Retry the whole 410 group from its button (confirming the dialog),
	// once their targets, disabled by the 410s, are enabled again.
	for _, id := range gone {
		enableTargetOf(t, base, id)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(window.confirm = () => true, true)`)); err != nil {
		t.Fatal(err)
	}
	tb.do("retry the 410 group",
		chromedp.Click(chromedp.CSS(`[data-groups="reason"] tr:nth-child(2) button[data-retry-group]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := tb.text("#flash"); got != "Retried 2 jobs." {
		t.Errorf("after the group retry the page says %q, want \"Retried 2 jobs.\"", got)
	}
	for _, id := range gone {
		testwait.ForWithin(t, 20*time.Second, fmt.Sprintf("job %d to fail again", id), func() bool {
			var j struct {
				State   string
				History []struct{ Outcome string }
			}
			getJSON(t, fmt.Sprintf("%s/v1/jobs/%d", base, id), &j)
			return j.State == "failed" && len(j.History) == 2
		})
	}

	// The timeline of a retried job: enqueued, the attempt, the retry by
	// hand, the second attempt with its delivery log, the end.
	tb.do("open a retried job", chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", base, gone[0])), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	events, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#timeline li")).map(li => li.dataset.event)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"enqueued", "attempt", "retried", "attempt", "finished"}; strings.Join(events, ",") != strings.Join(want, ",") {
		t.Errorf("timeline %v, want %v", events, want)
	}
	if got := tb.text(`#timeline li[data-attempt="2"] .delivery-status`); !strings.Contains(got, "410") {
		t.Errorf("the second attempt's delivery log says %q, want the 410", got)
	}
	if body := tb.text("main"); strings.Contains(body, "fix the request") {
		t.Error("a failed job's page says to fix the request")
	}
	tb.shot("job-timeline")
}

// noOverflow is true when the page is no wider than the window.
// (Without mobile emulation, which would zoom a wide page out to fit and
// so widen innerWidth: the window stays 390 px, checked too.)
const noOverflow = `window.innerWidth === 390 && document.documentElement.scrollWidth <= window.innerWidth`

// TestBrowserPhoneAndDark checks every page at a phone's width (390 px: no
// horizontal overflow) and in dark mode (the system's prefers-color-scheme:
// a dark background and light text).
func TestBrowserPhoneAndDark(t *testing.T) {
	bt := startBrowser(t)
	base, gone := triageServer(t)
	tb := bt.tab()
	ctx := tb.ctx
	pages := []string{"/", "/jobs", "/jobs?state=failed", "/failed", "/targets", fmt.Sprintf("/jobs/%d", gone[0])}

	tb.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait))
	for _, p := range pages {
		tb.do("open "+p, chromedp.Navigate(base+p), chromedp.WaitVisible(chromedp.CSS("main")))
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](noOverflow))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			w, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
			t.Errorf("%s at 390 px is %d px wide: it overflows", p, w)
		}
		if p == "/failed" {
			tb.shot("phone-failed")
		}
	}
	// The check can fail: a page made wider than the window is caught.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.body.appendChild(Object.assign(document.createElement("div"), {style: "width: 600px; height: 1px"})), true)`)); err != nil {
		t.Fatal(err)
	}
	if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](noOverflow)); err != nil || ok {
		t.Errorf("a 600 px element at 390 px was not seen as overflow (%v)", err)
	}

	tb.do("desktop viewport and dark mode", chromedp.EmulateViewport(1280, 900),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
			})
			return err
		}))
	luminance := `(function (c) { const m = getComputedStyle(c).match(/\d+/g).map(Number); return (0.2126*m[0] + 0.7152*m[1] + 0.0722*m[2]) / 255; })`
	for _, p := range pages {
		tb.do("open "+p+" dark", chromedp.Navigate(base+p), chromedp.WaitVisible(chromedp.CSS("main")))
		bg, err := chromedp.Run(ctx, chromedp.Evaluate[float64](strings.Replace(luminance, "getComputedStyle(c)", "getComputedStyle(c).backgroundColor", 1)+`(document.documentElement)`))
		if err != nil {
			t.Fatal(err)
		}
		fg, err := chromedp.Run(ctx, chromedp.Evaluate[float64](strings.Replace(luminance, "getComputedStyle(c)", "getComputedStyle(c).color", 1)+`(document.querySelector("main"))`))
		if err != nil {
			t.Fatal(err)
		}
		if bg > 0.2 || fg < 0.6 {
			t.Errorf("%s in dark mode: background luminance %.2f, text %.2f; want a dark background and light text", p, bg, fg)
		}
		switch p {
		case "/failed":
			tb.shot("dark-failed")
		case "/":
			tb.shot("dark-overview")
		}
	}
}

// enableTargetOf enables the target of job id (disabled by its 410)
// through the API.
func enableTargetOf(t *testing.T, base string, id uint64) {
	t.Helper()
	var j struct{ Target string }
	getJSON(t, fmt.Sprintf("%s/v1/jobs/%d", base, id), &j)
	res, err := http.Post(base+"/v1/targets/enable", "application/json", strings.NewReader(`{"target":"`+j.Target+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("enable the target %s of job %d: %d", j.Target, id, res.StatusCode)
	}
}
