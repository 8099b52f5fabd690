package dashboard

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

func TestGroupDeferrals(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(int64(1_800_000_000+s), 0).UTC() }
	f := []runlog.BreakerFailure{{Job: 23, At: at(2)}, {Job: 19, At: at(1)}, {Job: 17, At: at(0)}, {Job: 19, At: at(0)}}
	g := groupDeferrals(runlog.Deferrals{Kept: true, Target: "partner:443", List: []runlog.Deferral{
		{At: at(10), After: f}, {At: at(20), After: f}, {At: at(30), After: f},
		{At: at(90), After: f[:1]},
	}})
	if len(g) != 2 || g[0].Count != 3 || !g[0].First.Equal(at(10)) || !g[0].Last.Equal(at(30)) || g[1].Count != 1 {
		t.Fatalf("groups %+v: want 3 deferrals after the same failures, then 1", g)
	}
	want := "by the breaker of partner:443, open since " + stamp(at(2)) + " after 4 failures of jobs 17, 19, 23"
	if g[0].Text != want {
		t.Errorf("text %q, want %q", g[0].Text, want)
	}
}

// TestDeferralsPage: a job deferred by an open breaker has a deferrals
// section on its page, loaded after it, that names the breaker and the
// jobs whose failures opened it.
func TestDeferralsPage(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	var failing []uint64
	for range 2 {
		failing = append(failing, b.enqueue("retry", runlog.Target("partner:443")))
	}
	// Five failures (of 3 attempts each at most: both jobs' failures)
	// open the breaker; the jobs still pending are deferred meanwhile.
	testwait.Until(t, "the breaker of partner:443 to open", func() (runlog.Stats, bool) {
		st, err := b.runner.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range st.Targets {
			if tg.Target == "partner:443" && tg.State == "open" {
				return st, true
			}
		}
		return st, false
	})
	held := b.enqueue("ok", runlog.Target("partner:443"))
	path := "/jobs/" + strconv.FormatUint(held, 10)
	if _, body := b.get(path); !strings.Contains(body, `hx-get="`+path+`/deferrals"`) {
		t.Fatalf("the job page does not load its deferrals")
	}
	body := testwait.Until(t, "the job to be deferred", func() (string, bool) {
		_, body := b.get(path + "/deferrals")
		return body, strings.Contains(body, "data-deferrals=")
	})
	for _, want := range []string{"by the breaker of partner:443", "after 5 failures of jobs " + strconv.FormatUint(failing[0], 10) + ", " + strconv.FormatUint(failing[1], 10)} {
		if !strings.Contains(body, want) {
			t.Errorf("the deferrals page lacks %q\n%s", want, body[strings.Index(body, `id="deferrals"`):])
		}
	}
}
