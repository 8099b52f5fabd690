package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/retry"
)

// TestHTTPRetryDefaults: an http job without a retry object gets the
// webhook schedule, a partial retry object fills from it, and exec jobs
// keep the server's other default.
func TestHTTPRetryDefaults(t *testing.T) {
	t.Parallel()
	p := testPolicy
	p.HTTPRetry = DefaultHTTPRetry
	for _, tc := range []struct {
		body string
		want *runlog.RetryPolicy
	}{
		{`{"kind":"http","url":"http://h/"}`, &DefaultHTTPRetry},
		{`{"kind":"http","url":"http://h/","retry":{"attempts":3}}`, &runlog.RetryPolicy{Attempts: 3, Base: DefaultHTTPRetry.Base, Cap: DefaultHTTPRetry.Cap}},
		{`{"kind":"http","url":"http://h/","retry":{"attempts":2,"base":"1s","cap":"2s"}}`, &runlog.RetryPolicy{Attempts: 2, Base: time.Second, Cap: 2 * time.Second}},
		{`{"kind":"exec","command":"resize"}`, nil},
		{`{"kind":"exec","command":"resize","retry":{"attempts":3}}`, &runlog.RetryPolicy{Attempts: 3, Base: testPolicy.Retry.Base, Cap: testPolicy.Retry.Cap}},
	} {
		got, err := DecodeJobRequest([]byte(tc.body), p)
		if err != nil {
			t.Fatal(err)
		}
		if (got.Retry == nil) != (tc.want == nil) || got.Retry != nil && *got.Retry != *tc.want {
			t.Errorf("%s: retry %+v; want %+v", tc.body, got.Retry, tc.want)
		}
	}
}

// TestDefaultHTTPRetrySchedule: the default schedule of http jobs spans
// about a day whatever the jitter draws (at least 12 h, at most 36 h), and
// its backoff stays below the cap, which is the Retry-After bound.
func TestDefaultHTTPRetrySchedule(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Attempts: DefaultHTTPRetry.Attempts, BaseMS: DefaultHTTPRetry.Base.Milliseconds(), CapMS: DefaultHTTPRetry.Cap.Milliseconds()}
	var lo, hi int64 // the shortest and the longest the jitter can make it
	for n := range p.Attempts - 1 {
		d := retry.Delay(p, n)
		if d >= p.CapMS {
			t.Errorf("wait %d reaches the cap (%d ms): the cap would bound the backoff, not only Retry-After", n, p.CapMS)
		}
		lo += retry.Jitter(d, 0)
		hi += d
	}
	short, long := time.Duration(lo)*time.Millisecond, time.Duration(hi)*time.Millisecond
	if short < 12*time.Hour || long > 36*time.Hour {
		t.Errorf("the schedule spans %v to %v; want about a day", short, long)
	}
	t.Logf("%d attempts over %v to %v", p.Attempts, short, long)
}

// TestRetryAfterBeyondBackoff: under the default http policy a target's
// Retry-After of an hour is honoured (not cut to a backoff step), and one
// of two days is cut to the bound, 24 h; each holds its whole target until
// then (GET /v1/targets shows hold_until).
func TestRetryAfterBeyondBackoff(t *testing.T) {
	t.Parallel()
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	c := &Client{BaseURL: srv.URL()}
	ctx := context.Background()
	for after, want := range map[string]time.Duration{"3600": time.Hour, "172800": kinds.MaxRetryAfter} {
		// A receiver (a target) per case: the first case's hold would
		// hold the second's job.
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", r.URL.Query().Get("after"))
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer recv.Close()
		created, err := c.Enqueue(ctx, JobRequest{Kind: "http", URL: recv.URL + "/?after=" + after})
		if err != nil {
			t.Fatal(err)
		}
		j := testwait.Until(t, "the first attempt to end", func() (Job, bool) {
			j, err := c.Job(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			return j, j.State == runlog.StatePending && len(j.History) == 1 && !j.History[0].EndedAt.IsZero()
		})
		if got := j.DueAt.Sub(j.History[0].EndedAt); got < want-time.Second || got > want+time.Second {
			t.Errorf("Retry-After %s: due %v after the attempt; want %v", after, got, want)
		}
		if j.MaxAttempts != DefaultHTTPRetry.Attempts {
			t.Errorf("max_attempts %d; want the default http policy's %d", j.MaxAttempts, DefaultHTTPRetry.Attempts)
		}
		ts, err := c.Targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held := false
		for _, tg := range ts.Targets {
			if tg.Target == j.Target {
				held = tg.HoldUntil.Equal(j.DueAt)
			}
		}
		if !held {
			t.Errorf("Retry-After %s: GET /v1/targets %+v does not show %s held until %v", after, ts.Targets, j.Target, j.DueAt)
		}
	}
}
