package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestQueueLimitAPI: PUT /v1/limits with "queue" and PUT /v1/queues/{name}
// with rate/burst set a queue's rate limit (200 with it), GET /v1/queues,
// /v1/stats and /metrics show it with its tokens, "rate":0 removes it and
// keeps the concurrency, and every bad body is a 400 that says what to
// fix, changing nothing.
func TestQueueLimitAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	queue := func(name string) map[string]any {
		t.Helper()
		st, list := b.call(t, "GET", "/v1/queues", "")
		if st != 200 {
			t.Fatalf("GET /v1/queues: %d %v", st, list)
		}
		for _, q := range list["queues"].([]any) {
			if q := q.(map[string]any); q["name"] == name {
				return q
			}
		}
		return nil
	}
	for _, tc := range []struct{ name, method, path, body, says string }{
		{"target and queue", "PUT", "/v1/limits", `{"target":"http://x","queue":"mail","rate":1}`, "not both"},
		{"bad queue name", "PUT", "/v1/limits", `{"queue":"a b","rate":1}`, "not a letter"},
		{"no rate", "PUT", "/v1/limits", `{"queue":"mail","burst":2}`, "rate is required"},
		{"negative rate", "PUT", "/v1/limits", `{"queue":"mail","rate":-1}`, "between 0.001 and 1000000"},
		{"burst without rate", "PUT", "/v1/limits", `{"queue":"mail","rate":0,"burst":3}`, "without a rate"},
		{"burst too large", "PUT", "/v1/limits", `{"queue":"mail","rate":1,"burst":1000001}`, "burst 1000001"},
		{"queue: negative rate", "PUT", "/v1/queues/mail", `{"rate":-1}`, "between 0.001"},
		{"queue: rate not a number", "PUT", "/v1/queues/mail", `{"rate":"fast"}`, "one JSON object"},
		{"queue: burst alone", "PUT", "/v1/queues/mail", `{"burst":3}`, "concurrency is required (or rate)"},
	} {
		st, out := b.call(t, tc.method, tc.path, tc.body, "Content-Type", "application/json")
		if msg, _ := out["error"].(string); st != http.StatusBadRequest || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %v; want 400 saying %q", tc.name, st, out, tc.says)
		}
	}
	if q := queue("mail"); q != nil {
		t.Fatalf("refused requests left queue mail %v", q)
	}
	st, out := b.call(t, "PUT", "/v1/limits", `{"queue":"mail","rate":100,"burst":10}`, "Content-Type", "application/json")
	if st != 200 || out["queue"] != "mail" || out["rate"] != 100.0 || out["burst"] != 10.0 || out["target"] != nil {
		t.Fatalf("PUT /v1/limits for a queue: %d %v; want 200 with the limit", st, out)
	}
	if q := queue("mail"); q == nil || q["rate"] != 100.0 || q["burst"] != 10.0 || q["tokens"] != 10.0 {
		t.Fatalf("GET /v1/queues shows mail as %v; want rate 100, burst 10, 10 tokens", q)
	}
	if st, q := b.call(t, "PUT", "/v1/queues/mail", `{"concurrency":3,"rate":2.5}`); st != 200 || q["concurrency"] != 3.0 || q["rate"] != 2.5 || q["burst"] != 1.0 {
		t.Fatalf("PUT /v1/queues/mail with a rate: %d %v; want concurrency 3, rate 2.5, burst 1", st, q)
	}
	if st, q := b.call(t, "PUT", "/v1/queues/mail", `{"concurrency":4}`); st != 200 || q["concurrency"] != 4.0 || q["rate"] != 2.5 {
		t.Fatalf("PUT /v1/queues/mail without a rate: %d %v; want the limit kept", st, q)
	}
	if st, q := b.call(t, "PUT", "/v1/limits", `{"queue":"default","rate":7}`); st != 200 || q["queue"] != "default" || q["rate"] != 7.0 {
		t.Fatalf("PUT /v1/limits for the default queue: %d %v", st, q)
	}
	_, stats := b.call(t, "GET", "/v1/stats", "")
	found := false
	for _, q := range stats["queues"].([]any) {
		if q := q.(map[string]any); q["name"] == "mail" && q["rate"] == 2.5 {
			found = true
		}
	}
	if !found {
		t.Errorf("GET /v1/stats queues %v: want mail at rate 2.5", stats["queues"])
	}
	resp, err := http.Get(b.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`runlog_queue_rate_limit{queue="mail"} 2.5`, `runlog_queue_tokens{queue="mail"} 1`, `runlog_queue_rate_limit{queue="default"} 7`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if st, q := b.call(t, "PUT", "/v1/limits", `{"queue":"mail","rate":0}`); st != 200 || q["rate"] != 0.0 {
		t.Fatalf("PUT /v1/limits rate 0 for a queue: %d %v", st, q)
	}
	if q := queue("mail"); q == nil || q["rate"] != 0.0 || q["burst"] != 0.0 || q["tokens"] != nil || q["concurrency"] != 4.0 {
		t.Fatalf("after rate 0 GET /v1/queues shows mail as %v; want no limit, concurrency 4", q)
	}
}
