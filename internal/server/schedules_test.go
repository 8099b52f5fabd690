package server

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/testwait"
)

// TestScheduleContract drives POST/GET/PATCH/DELETE /v1/schedules… as the
// issue writes them: a 1 s schedule makes jobs that carry its name and tick,
// GET /v1/jobs?schedule= lists them, and every bad request is a 400 that
// says what is wrong (nothing is kept).
func TestScheduleContract(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	job := `{"kind":"http","url":"` + b.target.URL + `/"}`
	status, body := b.call(t, "POST", "/v1/schedules", `{"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Paris","job":`+job+`,"overlap":"skip","catch_up":"latest"}`)
	if status != 201 || body["name"] != "nightly" || body["overlap"] != "skip" || body["catch_up"] != "latest" || body["timezone"] != "Europe/Paris" {
		t.Fatalf("create = %d %v", status, body)
	}
	next, err := time.Parse(time.RFC3339, body["next"].(string))
	if err != nil {
		t.Fatalf("next %v: %v", body["next"], err)
	}
	if paris, _ := time.LoadLocation("Europe/Paris"); next.In(paris).Hour() != 3 || next.In(paris).Minute() != 0 || !next.After(time.Now()) {
		t.Fatalf("next tick %v is not the next 03:00 in Paris", next)
	}
	if status, body := b.call(t, "POST", "/v1/schedules", `{"name":"nightly","every":"1h","job":`+job+`}`); status != 409 || !strings.Contains(body["error"].(string), "exists") {
		t.Fatalf("repeated name = %d %v", status, body)
	}
	for _, c := range []struct{ body, says string }{
		{`{"name":"x","cron":"0 3 * *","job":` + job + `}`, "cron"},
		{`{"name":"x","cron":"0 3 * * *","timezone":"Europe/Pariss","job":` + job + `}`, "timezone \"Europe/Pariss\""},
		{`{"name":"x","every":"500ms","job":` + job + `}`, "1s"},
		{`{"name":"x","every":"soon","job":` + job + `}`, "every \"soon\""},
		{`{"name":"x","every":"1s","cron":"* * * * *","job":` + job + `}`, "not both"},
		{`{"name":"x","job":` + job + `}`, "give cron"},
		{`{"name":"x y","every":"1s","job":` + job + `}`, "letters, digits"},
		{`{"name":"` + strings.Repeat("n", 65) + `","every":"1s","job":` + job + `}`, "1 to 64"},
		{`{"every":"1s","job":` + job + `}`, "name is required"},
		{`{"name":"x","every":"1s"}`, "job is required"},
		{`{"name":"x","every":"1s","job":{"kind":"ftp"}}`, "unknown kind"},
		{`{"name":"x","every":"1s","job":{"kind":"http","url":"` + b.target.URL + `/","key":"k"}}`, "no key"},
		{`{"name":"x","every":"1s","job":` + job + `,"overlap":"sometimes"}`, "overlap"},
		{`{"name":"x","every":"1s","job":` + job + `,"catch_up":"never"}`, "catch_up"},
		{`{"name":"x","every":"1s","job":` + job + `,"color":"red"}`, "color"},
	} {
		status, body := b.call(t, "POST", "/v1/schedules", c.body)
		if status != 400 || !strings.Contains(body["error"].(string), c.says) {
			t.Errorf("POST %s = %d %v, want 400 saying %q", c.body, status, body, c.says)
		}
	}
	if _, body := b.call(t, "GET", "/v1/schedules", ""); len(body["schedules"].([]any)) != 1 {
		t.Fatalf("a refused schedule was kept: %v", body)
	}
	// A 1 s schedule: its jobs name it and their tick.
	status, body = b.call(t, "POST", "/v1/schedules", `{"name":"fast","every":"1s","job":`+job+`}`)
	if status != 201 || body["every"] != "1s" || body["catch_up"] != "latest" || body["overlap"] != "allow" {
		t.Fatalf("create every = %d %v", status, body)
	}
	jobs := testwait.Until(t, "two jobs of the 1 s schedule", func() ([]any, bool) {
		_, body := b.call(t, "GET", "/v1/jobs?schedule=fast&order=oldest", "")
		list := body["jobs"].([]any)
		return list, len(list) >= 2
	})
	first := jobs[0].(map[string]any)
	id := uint64(first["id"].(float64))
	_, one := b.call(t, "GET", "/v1/jobs/"+strconv.FormatUint(id, 10), "")
	tick, err := time.Parse(time.RFC3339, one["tick"].(string))
	if one["schedule"] != "fast" || err != nil || tick.IsZero() {
		t.Fatalf("the tick's job: %v", one)
	}
	if _, body := b.call(t, "GET", "/v1/jobs?schedule=nightly", ""); len(body["jobs"].([]any)) != 0 {
		t.Fatalf("jobs of a schedule that made none: %v", body)
	}
	if status, _ := b.call(t, "GET", "/v1/jobs?schedule=a%20b", ""); status != 400 {
		t.Fatalf("a bad schedule filter: %d", status)
	}
	// PATCH, pause, resume, delete.
	if status, body := b.call(t, "PATCH", "/v1/schedules/fast", `{"every":"1h","catch_up":"all"}`); status != 200 || body["every"] != "1h0m0s" || body["catch_up"] != "all" {
		t.Fatalf("patch = %d %v", status, body)
	}
	if status, body := b.call(t, "PATCH", "/v1/schedules/fast", `{"name":"other"}`); status != 400 || !strings.Contains(body["error"].(string), "renamed") {
		t.Fatalf("patch rename = %d %v", status, body)
	}
	if status, body := b.call(t, "POST", "/v1/schedules/fast/pause", ""); status != 200 || body["paused"] != true {
		t.Fatalf("pause = %d %v", status, body)
	}
	if status, body := b.call(t, "POST", "/v1/schedules/fast/resume", ""); status != 200 || body["paused"] != false {
		t.Fatalf("resume = %d %v", status, body)
	}
	if status, _ := b.call(t, "DELETE", "/v1/schedules/fast", ""); status != 204 {
		t.Fatalf("delete = %d", status)
	}
	for _, p := range []string{"GET /v1/schedules/fast", "POST /v1/schedules/fast/pause", "DELETE /v1/schedules/fast", "PATCH /v1/schedules/fast"} {
		m, path, _ := strings.Cut(p, " ")
		if status, _ := b.call(t, m, path, `{"every":"1s"}`); status != 404 {
			t.Errorf("%s of a deleted schedule = %d, want 404", p, status)
		}
	}
	if _, body := b.call(t, "GET", "/v1/jobs?schedule=fast", ""); len(body["jobs"].([]any)) < 2 {
		t.Fatalf("the jobs of a deleted schedule went: %v", body)
	}
}
