package dashboard_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runlog/runlog/internal/testwait"
)

// TestBrowserSchedules drives the schedules page in headless Chromium
// against a real server: a schedule made through the API is listed with
// its timing and next tick, Pause and Resume buttons change it (as the API
// then says), and a 1 s schedule's last job links to a job it made.
func TestBrowserSchedules(t *testing.T) {
	bt := startBrowser(t)
	target := newE2ETarget(t)
	base := startDashboardServer(t)
	for _, body := range []string{
		`{"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Paris","job":{"kind":"http","url":"` + target.URL + `/ok/n"},"overlap":"skip"}`,
		`{"name":"fast","every":"1s","job":{"kind":"http","url":"` + target.URL + `/ok/f"}}`,
	} {
		res, err := http.Post(base+"/v1/schedules", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create schedule: %d", res.StatusCode)
		}
	}
	var fast struct {
		LastJob uint64 `json:"last_job"`
	}
	testwait.ForWithin(t, 20*time.Second, "the 1 s schedule made a job", func() bool {
		getJSON(t, base+"/v1/schedules/fast", &fast)
		return fast.LastJob != 0
	})

	tab := bt.tab()
	do, text, shot := tab.do, tab.text, tab.shot
	do("open the schedules page", chromedp.Navigate(base+"/schedules"), chromedp.WaitVisible(chromedp.CSS(`#schedules-table tr[data-schedule="nightly"]`)))
	if got := text(`tr[data-schedule="nightly"]`); !strings.Contains(got, "0 3 * * *") || !strings.Contains(got, "Europe/Paris") || !strings.Contains(got, "skip") {
		t.Errorf("the nightly row says %q", got)
	}
	if got := text(`tr[data-schedule="fast"]`); !strings.Contains(got, "every 1s") {
		t.Errorf("the fast row says %q", got)
	}
	shot("schedules")
	// Each click waits for the page that shows its change (the other
	// button), not for any #flash: the page before the click may show one.
	do("pause nightly", chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="resume"]`)))
	if got := text("#flash"); !strings.Contains(got, "nightly is paused") {
		t.Errorf("after pause the page says %q", got)
	}
	var sc struct{ Paused bool }
	getJSON(t, base+"/v1/schedules/nightly", &sc)
	if !sc.Paused {
		t.Fatal("the API says nightly is not paused after the click")
	}
	do("resume nightly", chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"] button[data-action="pause"]`)))
	if got := text("#flash"); !strings.Contains(got, "nightly is resumed") {
		t.Errorf("after resume the page says %q", got)
	}
	getJSON(t, base+"/v1/schedules/nightly", &sc)
	if sc.Paused {
		t.Fatal("the API says nightly is paused after resume")
	}
	do("open the fast schedule's last job", chromedp.Click(chromedp.CSS(`tr[data-schedule="fast"] td a`)), chromedp.WaitVisible(chromedp.CSS("#job-state")))
	shot("schedule-job")
}
