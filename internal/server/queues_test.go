package server

import (
	"fmt"
	"strings"
	"testing"
)

// TestQueuesAPI: POST /v1/jobs takes queue and priority and GET
// /v1/jobs/{id} shows them (the default queue by its name); the queue
// endpoints pause, resume and bound a queue and list it with its counts;
// bad names, priorities and concurrencies are 400s that say what to fix,
// and store nothing.
func TestQueuesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	later := `"run_at":"2099-01-01T00:00:00Z"`
	url := b.target.URL + "/ok"
	st, created := b.call(t, "POST", "/v1/jobs", `{"kind":"http","url":"`+url+`","queue":"mail","priority":-7,`+later+`}`)
	if st != 201 {
		t.Fatalf("POST with queue and priority: %d %v", st, created)
	}
	st, j := b.call(t, "GET", fmt.Sprintf("/v1/jobs/%v", created["id"]), "")
	if st != 200 || j["queue"] != "mail" || j["priority"] != float64(-7) {
		t.Fatalf("GET job: %d queue %v priority %v", st, j["queue"], j["priority"])
	}
	_, created = b.call(t, "POST", "/v1/jobs", `{"kind":"http","url":"`+url+`",`+later+`}`)
	if _, j = b.call(t, "GET", fmt.Sprintf("/v1/jobs/%v", created["id"]), ""); j["queue"] != "default" || j["priority"] != float64(0) {
		t.Fatalf("a job without queue or priority shows queue %v priority %v", j["queue"], j["priority"])
	}
	st, batch := b.call(t, "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"http","url":"`+url+`","queue":"bulk","priority":3,`+later+`}]}`)
	if st != 201 {
		t.Fatalf("batch: %d %v", st, batch)
	}
	id := batch["jobs"].([]any)[0].(map[string]any)["id"]
	if _, j = b.call(t, "GET", fmt.Sprintf("/v1/jobs/%v", id), ""); j["queue"] != "bulk" || j["priority"] != float64(3) {
		t.Fatalf("a batch job shows queue %v priority %v", j["queue"], j["priority"])
	}

	st, q := b.call(t, "POST", "/v1/queues/mail/pause", "")
	if st != 200 || q["name"] != "mail" || q["paused"] != true {
		t.Fatalf("pause: %d %v", st, q)
	}
	st, q = b.call(t, "PUT", "/v1/queues/mail", `{"concurrency":2}`)
	if st != 200 || q["concurrency"] != float64(2) || q["paused"] != true {
		t.Fatalf("put: %d %v", st, q)
	}
	st, list := b.call(t, "GET", "/v1/queues", "")
	if st != 200 {
		t.Fatalf("GET /v1/queues: %d", st)
	}
	byName := map[string]map[string]any{}
	for _, e := range list["queues"].([]any) {
		m := e.(map[string]any)
		byName[m["name"].(string)] = m
	}
	mail := byName["mail"]
	if mail == nil || mail["paused"] != true || mail["concurrency"] != float64(2) || mail["counts"].(map[string]any)["pending"] != float64(1) {
		t.Fatalf("GET /v1/queues: mail is %v (all %v)", mail, list)
	}
	if d := byName["default"]; d == nil || d["counts"].(map[string]any)["pending"] != float64(1) {
		t.Fatalf("GET /v1/queues: default is %v", d)
	}
	if st, q = b.call(t, "POST", "/v1/queues/mail/resume", ""); st != 200 || q["paused"] != false {
		t.Fatalf("resume: %d %v", st, q)
	}
	if _, stats := b.call(t, "GET", "/v1/stats", ""); len(stats["queues"].([]any)) != 3 {
		t.Fatalf("GET /v1/stats queues: %v", stats["queues"])
	}

	long := strings.Repeat("q", 65)
	for _, tc := range []struct{ method, path, body, says string }{
		{"POST", "/v1/jobs", `{"kind":"http","url":"` + url + `","queue":"a b"}`, "queue"},
		{"POST", "/v1/jobs", `{"kind":"http","url":"` + url + `","queue":"` + long + `"}`, "1 to 64 bytes"},
		{"POST", "/v1/jobs", `{"kind":"http","url":"` + url + `","priority":1001}`, "priority 1001"},
		{"POST", "/v1/jobs", `{"kind":"http","url":"` + url + `","priority":-1001}`, "priority -1001"},
		{"POST", "/v1/jobs", `{"kind":"http","url":"` + url + `","priority":1.5}`, "priority"},
		{"POST", "/v1/jobs", `{"kind":"http","url":"` + url + `","priority":"high"}`, "priority"},
		{"POST", "/v1/jobs/batch", `{"jobs":[{"kind":"http","url":"` + url + `","queue":"é"}]}`, "jobs[0]"},
		{"PUT", "/v1/queues/mail", `{"concurrency":-1}`, "concurrency -1"},
		{"PUT", "/v1/queues/mail", `{"concurrency":2000000}`, "concurrency 2000000"},
		{"PUT", "/v1/queues/mail", `{}`, "concurrency is required"},
		{"PUT", "/v1/queues/mail", `{"concurrency":1,"paused":true}`, "one JSON object"},
		{"PUT", "/v1/queues/" + long, `{"concurrency":1}`, "1 to 64 bytes"},
		{"POST", "/v1/queues/a%20b/pause", "", "not a letter"},
	} {
		st, body := b.call(t, tc.method, tc.path, tc.body)
		msg, _ := body["error"].(string)
		if st != 400 || !strings.Contains(msg, tc.says) {
			t.Errorf("%s %s %s: %d %q, want 400 mentioning %q", tc.method, tc.path, tc.body, st, msg, tc.says)
		}
	}
	if _, list = b.call(t, "GET", "/v1/queues", ""); len(list["queues"].([]any)) != 3 {
		t.Errorf("the refused requests added queues: %v", list)
	}
}
