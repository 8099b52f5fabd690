package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// TestReplayAPI checks the replay contract: POST /v1/jobs/{id}/replay is a
// 201 with the new job ("id", "replay_of") that runs, the original
// unchanged; a body is refused; POST /v1/replay counts with dry_run, then
// re-sends and answers the new ids; bad filters are 400s that add nothing.
func TestReplayAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	status, out := b.call(t, "POST", "/v1/jobs", `{"kind":"http","url":"`+b.target.URL+`/bad","key":"k1","metadata":{"tenant":"acme"}}`)
	if status != http.StatusCreated {
		t.Fatalf("POST = %d %v", status, out)
	}
	orig := uint64(out["id"].(float64))
	before := b.waitState(t, orig, runlog.StateFailed)

	status, out = b.call(t, "POST", fmt.Sprintf("/v1/jobs/%d/replay", orig), "")
	if status != http.StatusCreated || out["replay_of"] != float64(orig) || out["key"] != "" || out["target"] != before.Target ||
		out["metadata"].(map[string]any)["tenant"] != "acme" {
		t.Fatalf("replay = %d %v; want 201 with replay_of %d, no key, the same target and metadata", status, out, orig)
	}
	replay := uint64(out["id"].(float64))
	if j := b.waitState(t, replay, runlog.StateFailed); j.Attempts != before.Attempts {
		t.Fatalf("the replay ran %d attempts, the original %d", j.Attempts, before.Attempts)
	}
	if after := b.waitState(t, orig, runlog.StateFailed); after.Attempts != before.Attempts || after.ReplayOf != 0 {
		t.Fatalf("the original changed: %+v", after)
	}
	if status, _ := b.call(t, "POST", fmt.Sprintf("/v1/jobs/%d/replay", orig), `{"x":1}`, "Content-Type", "application/json"); status != http.StatusBadRequest {
		t.Fatalf("replay with a body = %d, want 400", status)
	}

	body := `{"target":"` + before.Target + `","since":"` + since + `","state":"failed","dry_run":true}`
	status, out = b.call(t, "POST", "/v1/replay", body, "Content-Type", "application/json")
	if status != http.StatusOK || out["count"] != float64(2) || out["ids"] != nil {
		t.Fatalf("dry run = %d %v; want a count of 2 (the original and its replay) and no ids", status, out)
	}
	n := b.countJobs(t)
	body = `{"target":"` + before.Target + `","since":"` + since + `","state":"any"}`
	status, out = b.call(t, "POST", "/v1/replay", body, "Content-Type", "application/json")
	if status != http.StatusOK || out["count"] != float64(2) || len(out["ids"].([]any)) != 2 {
		t.Fatalf("replay = %d %v; want 2 new ids", status, out)
	}
	if got := b.countJobs(t); got != n+2 {
		t.Fatalf("%d jobs after re-sending 2, want %d", got, n+2)
	}
	for _, bad := range []string{`{"since":"` + since + `"}`, `{"target":"x"}`, `{"target":"x","since":"yesterday"}`,
		`{"target":"x","since":"` + since + `","state":"pending"}`, `{"target":"x","since":"` + since + `","extra":1}`} {
		if status, out := b.call(t, "POST", "/v1/replay", bad, "Content-Type", "application/json"); status != http.StatusBadRequest {
			t.Errorf("POST /v1/replay %s = %d %v, want 400", bad, status, out)
		}
	}
	if got := b.countJobs(t); got != n+2 {
		t.Fatalf("refused replays added jobs: %d, want %d", got, n+2)
	}
}
