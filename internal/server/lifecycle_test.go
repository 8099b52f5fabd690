package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// TestTargetLifecycleAPI: a receiver that answers 410 Gone is shown
// disabled, with its reason, by GET /v1/targets and counted in /metrics;
// its next job is accepted and held; POST /v1/targets/enable enables it
// (200 with the target), and again answers 404; bad bodies answer 400.
func TestTargetLifecycleAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	var gone atomic.Bool
	gone.Store(true)
	var hits atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if gone.Load() {
			w.WriteHeader(http.StatusGone)
		}
	}))
	defer recv.Close()
	ctx := context.Background()
	first, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: recv.URL + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	if j := b.waitState(t, first.ID, runlog.StateFailed); j.Attempts != 1 || !strings.Contains(j.Reason, "410") {
		t.Fatalf("job to a 410 receiver: %d attempts, reason %q", j.Attempts, j.Reason)
	}
	fj, err := b.client.Job(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	target := fj.Target
	status, list := b.call(t, "GET", "/v1/targets", "")
	if status != 200 {
		t.Fatalf("GET /v1/targets: %d", status)
	}
	var tv map[string]any
	for _, x := range list["targets"].([]any) {
		if m := x.(map[string]any); m["target"] == target {
			tv = m
		}
	}
	if tv == nil || tv["disabled"] != true || !strings.Contains(tv["disabled_reason"].(string), "410") || tv["disabled_at"] == nil {
		t.Fatalf("GET /v1/targets shows %s as %v, want disabled with its reason", target, tv)
	}
	held, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: recv.URL + "/hook"})
	if err != nil {
		t.Fatalf("an enqueue to a disabled target was refused: %v", err)
	}
	// Held: a job enqueued after it, to a target that is not disabled,
	// ends first, and the held one has not reached the receiver.
	other, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, other.ID, runlog.StateSucceeded)
	if j, _ := b.client.Job(ctx, held.ID); j.State != runlog.StatePending || j.Attempts != 0 || hits.Load() != 1 {
		t.Fatalf("held job %s after %d attempts, receiver hit %d times", j.State, j.Attempts, hits.Load())
	}
	metrics := scrape(t, b.srv.URL)
	for _, want := range []string{"runlog_targets_disabled 1", `runlog_target_transitions_total{reason="gone",to="disabled"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	for body, want := range map[string]int{
		`{"target":""}`:                      400,
		`{"target":"x","extra":1}`:           400,
		`not json`:                           400,
		`{"target":"http://nobody.invalid"}`: 404,
		`{"target":"` + b.target.URL + `"}`:  404,
	} {
		if status, out := b.call(t, "POST", "/v1/targets/enable", body, "Content-Type", "application/json"); status != want || out["error"] == nil {
			t.Errorf("POST /v1/targets/enable %s: %d %v, want %d with an error", body, status, out, want)
		}
	}
	gone.Store(false)
	// The path is taken off, as targets are listed by origin.
	status, out := b.call(t, "POST", "/v1/targets/enable", `{"target":"`+recv.URL+`/hook"}`, "Content-Type", "application/json")
	if status != 200 || out["target"] != target || out["disabled"] != false {
		t.Fatalf("POST /v1/targets/enable: %d %v", status, out)
	}
	b.waitState(t, held.ID, runlog.StateSucceeded)
	if status, _ := b.call(t, "POST", "/v1/targets/enable", `{"target":"`+target+`"}`, "Content-Type", "application/json"); status != 404 {
		t.Fatalf("a second enable: %d, want 404", status)
	}
	testwait.For(t, "the enable counted", func() bool {
		m := scrape(t, b.srv.URL)
		return strings.Contains(m, `runlog_target_transitions_total{reason="manual",to="enabled"} 1`) && strings.Contains(m, "runlog_targets_disabled 0")
	})
}
