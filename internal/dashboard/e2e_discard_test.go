package dashboard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// TestBrowserDiscard discards in headless Chromium: one failed job from
// its page's Discard button, then a whole group of failures from the
// failed page's discard button (each confirming the dialog); the API then
// no longer finds those jobs, and the failed count drops by as many.
func TestBrowserDiscard(t *testing.T) {
	bt := startBrowser(t)
	base, gone := triageServer(t)
	tb := bt.tab()
	ctx := tb.ctx
	jobGone := func(id uint64) bool {
		res, err := http.Get(fmt.Sprintf("%s/v1/jobs/%d", base, id))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode == http.StatusNotFound
	}
	failedIDs := func() []uint64 {
		var list struct{ Jobs []struct{ ID uint64 } }
		getJSON(t, base+"/v1/jobs?state=failed&limit=100", &list)
		var ids []uint64
		for _, j := range list.Jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	if n := len(failedIDs()); n != 6 {
		t.Fatalf("%d failed jobs listed, want 6", n)
	}

	// One job, from its page.
	tb.do("open a failed job", chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", base, gone[0])), chromedp.WaitVisible(chromedp.CSS("#discard-button")))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(window.confirm = () => true, true)`)); err != nil {
		t.Fatal(err)
	}
	tb.do("discard it", chromedp.Click(chromedp.CSS("#discard-button")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got, want := tb.text("#flash"), fmt.Sprintf("Job %d is discarded.", gone[0]); got != want {
		t.Errorf("after the discard the page says %q, want %q", got, want)
	}
	if !jobGone(gone[0]) {
		t.Errorf("job %d is still found after its discard", gone[0])
	}

	// A whole group: the four refused with HTTP 400, the largest group.
	tb.do("open the failed page", chromedp.Navigate(base+"/failed"), chromedp.WaitVisible(chromedp.CSS("#groups")))
	first := `[data-groups="reason"] tr[data-group]:first-child`
	if got := tb.text(first + " [data-group-count]"); got != "4" {
		t.Fatalf("the first reason group counts %s, want the 4 jobs refused with HTTP 400", got)
	}
	before := failedIDs()
	tb.shot("failed-discard")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(window.confirm = () => true, true)`)); err != nil {
		t.Fatal(err)
	}
	tb.do("discard the HTTP 400 group", chromedp.Click(chromedp.CSS(first+" button[data-discard-group]")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := tb.text("#flash"); got != "Discarded 4 jobs." {
		t.Errorf("after the group discard the page says %q, want \"Discarded 4 jobs.\"", got)
	}
	after := failedIDs()
	if len(after) != 1 || after[0] != gone[1] {
		t.Errorf("failed jobs left %v, want only job %d (the other 410)", after, gone[1])
	}
	for _, id := range before {
		if id != gone[1] && !jobGone(id) {
			t.Errorf("job %d of the discarded group is still found", id)
		}
	}
	var st apiStats
	getJSON(t, base+"/v1/stats", &st)
	if st.Failed != 1 {
		t.Errorf("the API counts %d failed jobs after the discards, want 1", st.Failed)
	}
}

// TestBrowserDeferrals opens, in headless Chromium, the page of a job that
// its target's open breaker deferred: the page loads its deferrals after
// it and says "Deferred N× by the breaker of TARGET, open since … after 5
// failures of jobs …", naming the jobs whose failures opened it.
func TestBrowserDeferrals(t *testing.T) {
	bt := startBrowser(t)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/down/") {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(recv.Close)
	base := startServer(t, server.Config{}).URL()
	var failing []uint64
	for i := range 5 {
		failing = append(failing, postJob(t, base, fmt.Sprintf("%s/down/%d", recv.URL, i), time.Time{}))
	}
	type target struct{ Target, State string }
	var tg target
	testwait.ForWithin(t, 20*time.Second, "five failures to open the receiver's breaker", func() bool {
		var list struct{ Targets []target }
		getJSON(t, base+"/v1/targets", &list)
		for _, x := range list.Targets {
			if x.Target == recv.URL && x.State == "open" {
				tg = x
				return true
			}
		}
		return false
	})
	held := postJob(t, base, recv.URL+"/ok/held", time.Time{})
	page := fmt.Sprintf("%s/jobs/%d", base, held)
	testwait.ForWithin(t, 20*time.Second, fmt.Sprintf("job %d to be deferred by the open breaker", held), func() bool {
		res, err := http.Get(page + "/deferrals")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return strings.Contains(string(b), "data-deferrals=")
	})

	tb := bt.tab()
	tb.do("open the deferred job", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#deferrals-list li[data-deferrals]")))
	got := tb.text("#deferrals-list li[data-deferrals]")
	if !strings.HasPrefix(got, "Deferred ") || !strings.Contains(got, "× by the breaker of "+tg.Target+", open since ") {
		t.Errorf("the deferral says %q, want \"Deferred N× by the breaker of %s, open since …\"", got, tg.Target)
	}
	for _, id := range failing {
		if !strings.Contains(got, fmt.Sprint(id)) {
			t.Errorf("the deferral %q does not name job %d, whose failure opened the breaker", got, id)
		}
	}
	if !strings.Contains(got, "after 5 failures of jobs ") {
		t.Errorf("the deferral %q does not say the 5 failures that opened the breaker", got)
	}
	tb.shot("job-deferrals")
}
