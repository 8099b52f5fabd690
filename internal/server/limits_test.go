package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPutLimit: PUT /v1/limits sets a target's limit (200 with the limit),
// GET /v1/targets shows it with its tokens, "rate":0 removes it, and every
// bad body is refused with 400 saying what to fix, changing nothing.
func TestPutLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	const target = "http://127.0.0.1:9000"
	for _, tc := range []struct{ name, body, says string }{
		{"no target", `{"rate":100,"burst":10}`, "target is required"},
		{"no rate", `{"target":"` + target + `","burst":10}`, "rate is required"},
		{"negative rate", `{"target":"` + target + `","rate":-1}`, "between 0.001 and 1000000"},
		{"rate too small", `{"target":"` + target + `","rate":0.0001}`, "between 0.001"},
		{"rate too large", `{"target":"` + target + `","rate":2e6}`, "between 0.001 and 1000000"},
		{"burst without rate", `{"target":"` + target + `","rate":0,"burst":3}`, "without a rate"},
		{"burst too large", `{"target":"` + target + `","rate":1,"burst":1000001}`, "burst 1000001"},
		{"negative burst", `{"target":"` + target + `","rate":1,"burst":-1}`, "burst -1"},
		{"unknown field", `{"target":"` + target + `","rate":1,"brust":3}`, "unknown field"},
		{"rate not a number", `{"target":"` + target + `","rate":"fast"}`, "rate"},
		{"target too long", `{"target":"` + strings.Repeat("x", 1025) + `","rate":1}`, "at most 1024"},
		{"two objects", `{"target":"` + target + `","rate":1}{}`, "data after the object"},
	} {
		status, out := b.call(t, "PUT", "/v1/limits", tc.body, "Content-Type", "application/json")
		if msg, _ := out["error"].(string); status != http.StatusBadRequest || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %v; want 400 saying %q", tc.name, status, out, tc.says)
		}
	}
	if ts := b.targets(t); ts[target] != nil {
		t.Fatalf("refused requests left a target %v", ts[target])
	}
	status, out := b.call(t, "PUT", "/v1/limits", `{"target":"`+target+`","rate":100,"burst":10}`, "Content-Type", "application/json")
	if status != http.StatusOK || out["target"] != target || out["rate"] != 100.0 || out["burst"] != 10.0 {
		t.Fatalf("PUT /v1/limits: %d %v; want 200 with the limit", status, out)
	}
	tg := b.targets(t)[target]
	if tg == nil {
		t.Fatalf("GET /v1/targets does not list %s after its limit was set", target)
	}
	lim, _ := tg["limit"].(map[string]any)
	if lim["rate"] != 100.0 || lim["burst"] != 10.0 || tg["tokens"] != 10.0 || tg["ramp"] != nil {
		t.Fatalf("GET /v1/targets shows %v; want limit 100/10, 10 tokens, no ramp", tg)
	}
	if status, st := b.call(t, "GET", "/v1/stats", ""); status != http.StatusOK || st["limited_targets"] != 1.0 || st["held_targets"] != 0.0 || st["ramping_targets"] != 0.0 {
		t.Errorf("GET /v1/stats: %d %v; want one limited target", status, st)
	}
	resp, err := http.Get(b.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`runlog_target_rate_limit{target="` + target + `"} 100`, `runlog_target_tokens{target="` + target + `"} 10`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	status, out = b.call(t, "PUT", "/v1/limits", `{"target":"`+target+`","rate":0}`, "Content-Type", "application/json")
	if status != http.StatusOK || out["rate"] != 0.0 || out["burst"] != 0.0 {
		t.Fatalf("PUT rate 0: %d %v; want 200 with no limit", status, out)
	}
	if tg := b.targets(t)[target]; tg != nil && tg["limit"] != nil {
		t.Fatalf("after rate 0 GET /v1/targets shows %v", tg)
	}
}

// targets returns GET /v1/targets by target.
func (b *bundle) targets(t *testing.T) map[string]map[string]any {
	t.Helper()
	status, out := b.call(t, "GET", "/v1/targets", "")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/targets: %d %v", status, out)
	}
	m := map[string]map[string]any{}
	list, _ := out["targets"].([]any)
	for _, x := range list {
		tg, _ := x.(map[string]any)
		name, _ := tg["target"].(string)
		m[name] = tg
	}
	return m
}
