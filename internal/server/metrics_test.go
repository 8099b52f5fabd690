package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// scrape returns the text of GET /metrics.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

// labelValues returns the values the label takes in the series of metric.
func labelValues(text, metric, label string) map[string]bool {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `\{[^}]*\b` + label + `="([^"]*)"`)
	out := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

// sample returns the value of the one series whose line starts with
// prefix (metric name and labels, as exposed).
func sample(t *testing.T, text, prefix string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, prefix+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in\n%s", prefix, text)
	return 0
}

// promtool returns the path of promtool, skipping the test when it is not
// installed outside CI (.ci/run installs Debian's prometheus package).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is missing: .ci/run installs it (Debian package prometheus)")
		}
		t.Skip("promtool is not installed (apt-get install prometheus)")
	}
	return p
}

// TestMetricsBoundedTargets runs 3,000 jobs on 3,000 targets through a
// real server and checks the exposition with promtool check metrics, the
// bound of the target label (the 20 busiest, the rest in target="other"),
// and the new counters and gauges.
func TestMetricsBoundedTargets(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer target.Close()
	const limit, targets = 20, 3000
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", MetricsTargets: limit, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	c := &Client{BaseURL: srv.URL()}
	ctx := context.Background()
	// target-0 gets 30 extra jobs, so it must keep its name.
	var reqs []JobRequest
	for i := range targets {
		reqs = append(reqs, JobRequest{Kind: "http", URL: target.URL + "/", Target: fmt.Sprintf("target-%d", i)})
	}
	for range 30 {
		reqs = append(reqs, JobRequest{Kind: "http", URL: target.URL + "/", Target: "target-0"})
	}
	for len(reqs) > 0 {
		n := min(len(reqs), MaxBatch)
		if _, err := c.EnqueueBatch(ctx, reqs[:n]); err != nil {
			t.Fatal(err)
		}
		reqs = reqs[n:]
	}
	testwait.UntilWithin(t, 2*time.Minute, "every job to succeed", func() (Stats, bool) {
		s, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Succeeded == targets+30
	})
	scrape(t, srv.URL()) // the first scrape picks the busiest targets
	// target-0, the busiest, now counts under its own name.
	more := make([]JobRequest, 5)
	for i := range more {
		more[i] = JobRequest{Kind: "http", URL: target.URL + "/", Target: "target-0"}
	}
	if _, err := c.EnqueueBatch(ctx, more); err != nil {
		t.Fatal(err)
	}
	testwait.UntilWithin(t, time.Minute, "the last jobs to succeed", func() (Stats, bool) {
		s, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Succeeded == targets+35
	})
	// The finished counter follows the durable end by a moment.
	text := testwait.Until(t, "every end to be counted", func() (string, bool) {
		text := scrape(t, srv.URL())
		return text, strings.Contains(text, fmt.Sprintf(`runlog_jobs_finished_total{kind="http",state="succeeded"} %d`+"\n", targets+35))
	})

	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}

	for _, metric := range []string{"runlog_attempts_total", "runlog_breaker_state", "runlog_target_jobs"} {
		got := labelValues(text, metric, "target")
		if len(got) > limit+1 || (metric == "runlog_attempts_total" && (!got[OtherTarget] || !got["target-0"])) {
			t.Errorf("%s: %d target values (want at most %d, with target-0 and %q): %v", metric, len(got), limit+1, OtherTarget, got)
		}
	}
	var attempts float64
	for _, line := range regexp.MustCompile(`(?m)^runlog_attempts_total\{.*\} (\S+)$`).FindAllStringSubmatch(text, -1) {
		v, _ := strconv.ParseFloat(line[1], 64)
		attempts += v
	}
	// Series of targets that lost their name at the pick are dropped (and
	// their counts with them), so the sum is at most every attempt.
	if attempts > targets+35 || attempts < 5 {
		t.Errorf("runlog_attempts_total sums to %v; want at most %d", attempts, targets+35)
	}
	if v := sample(t, text, `runlog_attempts_total{kind="http",outcome="success",target="target-0"}`); v < 5 {
		t.Errorf("target-0 counts %v attempts under its name, want at least the 5 since it was picked", v)
	}
	if v := sample(t, text, `runlog_jobs_enqueued_total{kind="http"}`); v != targets+35 {
		t.Errorf("runlog_jobs_enqueued_total = %v", v)
	}
	if v := sample(t, text, `runlog_jobs_finished_total{kind="http",state="succeeded"}`); v != targets+35 {
		t.Errorf("runlog_jobs_finished_total{succeeded} = %v", v)
	}
	if v := sample(t, text, `runlog_http_request_duration_seconds_count{code="201",method="POST",route="/v1/jobs/batch"}`); v != 5 {
		t.Errorf("batch requests observed: %v, want 5", v)
	}
	if !regexp.MustCompile(`(?m)^runlog_build_info\{commit="[^"]+",goversion="go1\.[^"]+",version="[^"]+"\} 1$`).MatchString(text) {
		t.Errorf("no runlog_build_info in\n%s", text)
	}
	if v := sample(t, text, "runlog_journal_bytes"); v <= 0 {
		t.Errorf("runlog_journal_bytes = %v", v)
	}
	sample(t, text, "runlog_snapshot_bytes")
	sample(t, text, `runlog_breakers{state="open"}`)
}

// TestBreakerStateAfterCooldown: an open breaker whose cooldown has passed
// is exported as half-open (it admits the next probe), not as open; and
// its opening is counted as a transition.
func TestBreakerStateAfterCooldown(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer down.Close()
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Runner: runlog.Config{Breaker: runlog.BreakerConfig{Threshold: 1, Window: time.Minute, Cooldown: 500 * time.Millisecond, Probes: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	c := &Client{BaseURL: srv.URL()}
	ctx := context.Background()
	id, err := c.Enqueue(ctx, JobRequest{Kind: "http", URL: down.URL + "/", Target: "down", Retry: &RetryRequest{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the job to fail", func() (Job, bool) {
		j, err := c.Job(ctx, id.ID)
		return j, err == nil && j.State == "failed"
	})
	testwait.Until(t, "the breaker to be exported", func() (string, bool) {
		text := scrape(t, srv.URL())
		return text, strings.Contains(text, `runlog_breaker_state{state="open",target="down"} 1`) || strings.Contains(text, `runlog_breaker_state{state="half-open",target="down"} 1`)
	})
	// Read once: the cooldown may pass between a scrape and this call
	// (500 ms), so the check is on what this one answer says.
	if tl, err := c.Targets(ctx); err == nil && len(tl.Targets) == 1 && tl.Targets[0].State == "open" && tl.Targets[0].OpenUntil.IsZero() {
		t.Errorf("open breaker without open_until in /v1/targets: %+v", tl.Targets[0])
	}
	text := testwait.Until(t, "the cooldown to pass", func() (string, bool) {
		text := scrape(t, srv.URL())
		return text, strings.Contains(text, `runlog_breaker_state{state="half-open",target="down"} 1`)
	})
	if !strings.Contains(text, `runlog_breaker_state{state="open",target="down"} 0`) {
		t.Errorf("past the cooldown the breaker is still exported open:\n%s", text)
	}
	if tl, err := c.Targets(ctx); err != nil || tl.Targets[0].State != "half-open" || !tl.Targets[0].OpenUntil.IsZero() {
		t.Errorf("/v1/targets past the cooldown: %+v %v", tl, err)
	}
	testwait.Until(t, "the opening to be counted", func() (string, bool) {
		text := scrape(t, srv.URL())
		return text, strings.Contains(text, `runlog_breaker_transitions_total{from="closed",to="open"} 1`) &&
			strings.Contains(text, `runlog_jobs_finished_total{kind="http",state="failed"} 1`)
	})
}

func TestRouteLabels(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/v1/jobs": "/v1/jobs", "/v1/jobs/12": "/v1/jobs/{id}", "/v1/jobs/12/retry": "/v1/jobs/{id}/retry",
		"/v1/jobs/12/cancel": "/v1/jobs/{id}/cancel", "/v1/jobs/x": "unknown", "/v1/jobs/12/delete": "unknown",
		"/v1/nope": "unknown", "/": "dashboard", "/jobs/5": "dashboard", "/healthz": "/healthz", "/metrics": "/metrics",
		"/v1/jobs/batch": "/v1/jobs/batch", "/v1/openapi.yaml": "/v1/openapi.yaml",
		"/v1/schedules": "/v1/schedules", "/v1/schedules/nightly": "/v1/schedules/{name}",
		"/v1/schedules/nightly/pause": "/v1/schedules/{name}/pause", "/v1/schedules/a b": "unknown", "/v1/schedules/x/run": "unknown",
	} {
		if got := route(path); got != want {
			t.Errorf("route(%q) = %q, want %q", path, got, want)
		}
	}
	if method("BREW") != "other" || method("GET") != "GET" {
		t.Error("method labels")
	}
}
