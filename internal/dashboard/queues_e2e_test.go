package dashboard_test

import (
	"bytes"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runlog/runlog/internal/testwait"
)

// TestBrowserQueues drives the queues and targets pages in headless
// Chromium against a real server: a queue is listed with its load, the
// Pause button pauses it (as GET /v1/queues then says) and Resume resumes
// it, the queue form sets its concurrency and rate limit, and the targets
// page's form sets a target's rate limit and removes it (rate 0), each as
// the API then shows.
func TestBrowserQueues(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test: skipped in -short mode")
	}
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("chromium is not installed: apt-get install -y chromium (.ci/run installs it) or set RUNLOG_CHROMIUM")
	}
	shots := os.Getenv("RUNLOG_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	target := newE2ETarget(t)
	base := startDashboardServer(t)
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	res, err := http.Post(base+"/v1/jobs", "application/json", bytes.NewReader([]byte(`{"kind":"http","url":"`+target.URL+`/ok/q","queue":"mail","run_at":"`+later+`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("enqueue: %d", res.StatusCode)
	}
	type queue struct {
		Name        string
		Concurrency int
		Paused      bool
		Rate        float64
		Burst       int
	}
	mail := func() queue {
		t.Helper()
		var list struct{ Queues []queue }
		getJSON(t, base+"/v1/queues", &list)
		for _, q := range list.Queues {
			if q.Name == "mail" {
				return q
			}
		}
		t.Fatalf("GET /v1/queues lacks mail: %+v", list.Queues)
		return queue{}
	}

	tab := newTab(t, chromium, shots)
	do, text, shot := tab.do, tab.text, tab.shot
	row := `#queues-table tr[data-queue="mail"]`
	do("open the queues page", chromedp.Navigate(base+"/queues"), chromedp.WaitVisible(chromedp.CSS(row)))
	if got := text(row); !strings.Contains(got, "mail") || !strings.Contains(got, "running") {
		t.Errorf("the mail row says %q", got)
	}
	shot("queues")
	do("pause mail", chromedp.Click(chromedp.CSS(row+` button[data-action="pause"]`)), chromedp.WaitVisible(chromedp.CSS(row+` button[data-action="resume"]`)))
	if q := mail(); !q.Paused {
		t.Fatalf("the API says mail is not paused after the click: %+v", q)
	}
	if got := text("#flash"); !strings.Contains(got, "mail is paused") {
		t.Errorf("after pause the page says %q", got)
	}
	do("resume mail", chromedp.Click(chromedp.CSS(row+` button[data-action="resume"]`)), chromedp.WaitVisible(chromedp.CSS(row+` button[data-action="pause"]`)))
	if q := mail(); q.Paused {
		t.Fatalf("the API says mail is paused after resume: %+v", q)
	}
	do("set mail's concurrency and rate limit",
		chromedp.SendKeys(chromedp.CSS(`#queue-form input[name="queue"]`), "mail"),
		chromedp.SendKeys(chromedp.CSS(`#queue-form input[name="concurrency"]`), "3"),
		chromedp.SendKeys(chromedp.CSS(`#queue-form input[name="rate"]`), "50"),
		chromedp.SendKeys(chromedp.CSS(`#queue-form input[name="burst"]`), "5"),
		chromedp.Click(chromedp.CSS(`#queue-form button[data-action="set-queue"]`)),
		chromedp.WaitVisible(chromedp.CSS(row+` td[data-limit="50"]`)))
	testwait.ForWithin(t, 10*time.Second, "the API shows mail's new setting", func() bool {
		q := mail()
		return q.Concurrency == 3 && q.Rate == 50 && q.Burst == 5
	})
	if got := text(row + " [data-limit]"); !strings.Contains(got, "50/s, burst 5") {
		t.Errorf("mail's rate limit cell says %q", got)
	}
	shot("queues-limited")

	type targetLimit struct {
		Target string
		Limit  *struct {
			Rate  float64
			Burst int
		}
	}
	limitOf := func() *targetLimit {
		var list struct{ Targets []targetLimit }
		getJSON(t, base+"/v1/targets", &list)
		for i := range list.Targets {
			if list.Targets[i].Target == target.URL {
				return &list.Targets[i]
			}
		}
		return nil
	}
	do("set a target's rate limit", chromedp.Navigate(base+"/targets"), chromedp.WaitVisible(chromedp.CSS("#target-limit-form")),
		chromedp.SendKeys(chromedp.CSS(`#target-limit-form input[name="target"]`), target.URL),
		chromedp.SendKeys(chromedp.CSS(`#target-limit-form input[name="rate"]`), "20"),
		chromedp.SendKeys(chromedp.CSS(`#target-limit-form input[name="burst"]`), "2"),
		chromedp.Click(chromedp.CSS(`#target-limit-form button[data-action="set-limit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#targets-table tr[data-target="`+target.URL+`"] td[data-limit="20"]`)))
	testwait.ForWithin(t, 10*time.Second, "the API shows the target's limit", func() bool {
		tl := limitOf()
		return tl != nil && tl.Limit != nil && tl.Limit.Rate == 20 && tl.Limit.Burst == 2
	})
	shot("targets-limited")
	do("remove the target's rate limit",
		chromedp.SendKeys(chromedp.CSS(`#target-limit-form input[name="target"]`), target.URL),
		chromedp.SendKeys(chromedp.CSS(`#target-limit-form input[name="rate"]`), "0"),
		chromedp.Click(chromedp.CSS(`#target-limit-form button[data-action="set-limit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#targets-table tr[data-target="`+target.URL+`"] td[data-limit="0"]`)))
	testwait.ForWithin(t, 10*time.Second, "the API shows no limit for the target", func() bool {
		tl := limitOf()
		return tl == nil || tl.Limit == nil
	})
}
