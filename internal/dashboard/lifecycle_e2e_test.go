package dashboard_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/runlog/runlog/internal/testwait"
)

// TestBrowserTargetEnable drives the targets page in headless Chromium
// against a real server: a receiver that answered 410 Gone is shown
// disabled with its reason and an Enable button; the click enables it (as
// the API then says) and its held job is delivered.
func TestBrowserTargetEnable(t *testing.T) {
	bt := startBrowser(t)
	var gone atomic.Bool
	gone.Store(true)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gone.Load() {
			w.WriteHeader(http.StatusGone)
		}
	}))
	defer recv.Close()
	base := startDashboardServer(t)
	enqueue := func() uint64 {
		t.Helper()
		res, err := http.Post(base+"/v1/jobs", "application/json", bytes.NewReader([]byte(`{"kind":"http","url":"`+recv.URL+`/hook"}`)))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct{ ID uint64 }
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("enqueue: %d %v", res.StatusCode, err)
		}
		return out.ID
	}
	type target struct {
		Target         string
		Disabled       bool
		DisabledReason string `json:"disabled_reason"`
		Pending        int
	}
	targetOf := func() target {
		var list struct{ Targets []target }
		getJSON(t, base+"/v1/targets", &list)
		for _, tg := range list.Targets {
			if strings.HasPrefix(recv.URL, tg.Target) {
				return tg
			}
		}
		return target{}
	}
	enqueue()
	testwait.ForWithin(t, 20*time.Second, "the 410 disabled the target", func() bool { return targetOf().Disabled })
	held := enqueue()
	tg := targetOf()

	tab := bt.tab()
	do, text, shot := tab.do, tab.text, tab.shot
	row := `tr[data-target="` + tg.Target + `"]`
	do("open the targets page", chromedp.Navigate(base+"/targets"), chromedp.WaitVisible(chromedp.CSS(row+` [data-disabled]`)))
	if got := text(row + ` [data-disabled-reason]`); !strings.Contains(got, "410") {
		t.Errorf("the disabled target's reason says %q", got)
	}
	shot("targets-disabled")
	gone.Store(false)
	do("enable the target", chromedp.Click(chromedp.CSS(row+` button[data-action="enable"]`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); !strings.Contains(got, "is enabled") {
		t.Errorf("after the click the page says %q", got)
	}
	if targetOf().Disabled {
		t.Fatal("the API says the target is still disabled after the click")
	}
	testwait.ForWithin(t, 20*time.Second, "the held job delivered", func() bool {
		var j struct{ State string }
		getJSON(t, base+"/v1/jobs/"+strconv.FormatUint(held, 10), &j)
		return j.State == "succeeded"
	})
	do("reload the targets page", chromedp.Navigate(base+"/targets"), chromedp.WaitVisible(chromedp.CSS(row+` [data-lifecycle]`)))
	if got := text(row + ` [data-lifecycle]`); strings.Contains(got, "disabled") {
		t.Errorf("after the enable the row says %q", got)
	}
	shot("targets-enabled")
}
