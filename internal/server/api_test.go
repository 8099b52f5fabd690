package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
)

// bundle is what an API test works with: a real runner on a temporary
// journal behind the API, a client, and a loopback target whose /bad path
// answers 400, /fail 503 and every other path 200.
type bundle struct {
	runner *runlog.Runner
	api    *API
	srv    *httptest.Server
	client *Client
	target *httptest.Server
}

func setup(t *testing.T, cfg APIConfig) *bundle {
	t.Helper()
	b := &bundle{}
	b.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bad":
			http.Error(w, "bad", http.StatusBadRequest)
		case "/fail":
			http.Error(w, "try later", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(b.target.Close)
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	cmds := map[string]string{"true": truePath}
	cfg.Policy.Commands = cmds
	if cfg.Policy.Retry == (runlog.RetryPolicy{}) {
		cfg.Policy.Retry = runlog.RetryPolicy{Attempts: 2, Base: time.Millisecond, Cap: 2 * time.Millisecond}
	}
	metrics := NewMetrics(MetricsOptions{})
	b.runner, err = runlog.Open(t.TempDir(), runlog.Config{
		Concurrency: 4,
		Retry:       cfg.Policy.Retry,
		Handlers:    kinds.Handlers(kinds.Config{Commands: cmds}),
		Observer:    metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	metrics.Watch(b.runner)
	cfg.Metrics = metrics.Handler()
	b.api = NewAPI(b.runner, cfg)
	b.srv = httptest.NewServer(b.api)
	b.client = &Client{BaseURL: b.srv.URL, Token: cfg.Token}
	t.Cleanup(func() {
		b.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.runner.Close(ctx); err != nil {
			t.Errorf("runner Close: %v", err)
		}
	})
	return b
}

// call sends a raw request and returns the status and the decoded JSON body.
func (b *bundle) call(t *testing.T, method, path, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s %s: answer %q is not a JSON object: %v", method, path, data, err)
		}
	}
	return resp.StatusCode, out
}

// waitState waits until the job is in one of states and returns it.
func (b *bundle) waitState(t *testing.T, id uint64, states ...runlog.State) Job {
	t.Helper()
	return testwait.Until(t, fmt.Sprintf("job %d to be one of %v", id, states), func() (Job, bool) {
		j, err := b.client.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j, slices.Contains(states, j.State)
	})
}

func (b *bundle) countJobs(t *testing.T) int {
	t.Helper()
	s, err := b.runner.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.Pending + s.Running + s.Succeeded + s.Failed + s.Cancelled
}

func TestEnqueueGetAndHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	body := `{"kind":"http","url":"` + b.target.URL + `/ok","method":"PUT","headers":{"X-A":"1"},"body":"hi","key":"first","timeout":"5s","retry":{"attempts":3}}`
	status, out := b.call(t, "POST", "/v1/jobs", body)
	if status != http.StatusCreated {
		t.Fatalf("POST /v1/jobs = %d %v; want 201", status, out)
	}
	idf, ok := out["id"].(float64)
	if !ok || idf < 1 {
		t.Fatalf("answer %v has no numeric id", out)
	}
	id := uint64(idf)
	b.waitState(t, id, runlog.StateSucceeded)

	status, job := b.call(t, "GET", "/v1/jobs/"+strconv.FormatUint(id, 10), "")
	if status != http.StatusOK {
		t.Fatalf("GET job = %d", status)
	}
	for field, want := range map[string]any{
		"id": idf, "state": "succeeded", "kind": "http", "key": "first", "attempts": 1.0, "max_attempts": 3.0,
		"target": b.target.URL, "last_error": "", "reason": "", "timeout": "5s", // httptest URLs are scheme://ip:port
	} {
		if job[field] != want {
			t.Errorf("%s = %#v; want %#v", field, job[field], want)
		}
	}
	for _, field := range []string{"enqueued_at", "finished_at"} {
		s, _ := job[field].(string)
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			t.Errorf("%s = %v: %v", field, job[field], err)
		}
	}
	payload, _ := job["payload"].(map[string]any)
	if payload["url"] != b.target.URL+"/ok" || payload["method"] != "PUT" || payload["body"] != "hi" {
		t.Errorf("payload = %v", job["payload"])
	}
	hist, _ := job["history"].([]any)
	if len(hist) != 1 {
		t.Fatalf("history = %v; want one attempt", job["history"])
	}
	a := hist[0].(map[string]any)
	if a["n"] != 1.0 || a["outcome"] != "success" || !strings.HasPrefix(a["output"].(string), "200 OK") || a["started_at"] == nil || a["ended_at"] == nil {
		t.Errorf("attempt = %v", a)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	body := `{"kind":"http","url":"` + b.target.URL + `/x","key":"once","run_at":"2099-01-01T00:00:00Z"}`
	s1, o1 := b.call(t, "POST", "/v1/jobs", body)
	s2, o2 := b.call(t, "POST", "/v1/jobs", body)
	if s1 != http.StatusCreated || s2 != http.StatusOK || o1["id"] != o2["id"] || o2["existing"] != true {
		t.Fatalf("first %d %v, second %d %v; want 201 then 200 with the same id", s1, o1, s2, o2)
	}
	if n := b.countJobs(t); n != 1 {
		t.Fatalf("%d jobs stored; want 1", n)
	}
}

func TestRefusedRequestsStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{MaxBody: 4096, Policy: Policy{AllowHosts: []string{"127.0.0.1"}}})
	u := b.target.URL
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"malformed json", "POST", "/v1/jobs", `{"kind":"http",`, 400},
		{"not an object", "POST", "/v1/jobs", `"http"`, 400},
		{"unknown kind", "POST", "/v1/jobs", `{"kind":"smtp","url":"` + u + `"}`, 400},
		{"no kind", "POST", "/v1/jobs", `{"url":"` + u + `"}`, 400},
		{"exec unregistered", "POST", "/v1/jobs", `{"kind":"exec","command":"rm","args":["-rf","/"]}`, 400},
		{"exec path", "POST", "/v1/jobs", `{"kind":"exec","command":"/bin/true"}`, 400},
		{"ftp url", "POST", "/v1/jobs", `{"kind":"http","url":"ftp://127.0.0.1/x"}`, 400},
		{"file url", "POST", "/v1/jobs", `{"kind":"http","url":"file:///etc/passwd"}`, 400},
		{"relative url", "POST", "/v1/jobs", `{"kind":"http","url":"/hook"}`, 400},
		{"host not allowed", "POST", "/v1/jobs", `{"kind":"http","url":"http://localhost:1/x"}`, 400},
		{"bad duration", "POST", "/v1/jobs", `{"kind":"http","url":"` + u + `","timeout":"soon"}`, 400},
		{"metadata not strings", "POST", "/v1/jobs", `{"kind":"http","url":"` + u + `","metadata":{"n":1}}`, 400},
		{"metadata bad key", "POST", "/v1/jobs", `{"kind":"http","url":"` + u + `","metadata":{"a b":"v"}}`, 400},
		{"metadata value too long", "POST", "/v1/jobs", `{"kind":"http","url":"` + u + `","metadata":{"k":"` + strings.Repeat("v", 1025) + `"}}`, 400},
		{"oversize", "POST", "/v1/jobs", `{"kind":"http","url":"` + u + `","body":"` + strings.Repeat("x", 5000) + `"}`, 413},
		{"id not a number", "GET", "/v1/jobs/abc", "", 400},
		{"id negative", "GET", "/v1/jobs/-1", "", 400},
		{"id signed", "GET", "/v1/jobs/+1", "", 400},
		{"id float", "GET", "/v1/jobs/1e3", "", 400},
		{"id overflow", "GET", "/v1/jobs/18446744073709551616", "", 400},
		{"unknown id", "GET", "/v1/jobs/424242", "", 404},
		{"cancel unknown", "POST", "/v1/jobs/424242/cancel", "", 404},
		{"cancel bad id", "POST", "/v1/jobs/x/cancel", "", 400},
		{"cancel bad body", "POST", "/v1/jobs/1/cancel", `{"why":"x"}`, 400},
		{"cancel oversize", "POST", "/v1/jobs/1/cancel", `{"reason":"` + strings.Repeat("r", 5000) + `"}`, 413},
		{"retry unknown", "POST", "/v1/jobs/424242/retry", "", 404},
		{"wrong method", "PUT", "/v1/jobs", "", 405},
		{"wrong method on job", "PATCH", "/v1/jobs/1", "", 405},
		{"wrong method on batch", "DELETE", "/v1/jobs/batch", "", 405},
		{"no such path", "GET", "/v2/jobs", "", 404},
		{"bad state filter", "GET", "/v1/jobs?state=dead", "", 400},
		{"bad limit", "GET", "/v1/jobs?limit=0", "", 400},
		{"bad cursor", "GET", "/v1/jobs?after=x", "", 400},
		{"bad order", "GET", "/v1/jobs?order=random", "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out := b.call(t, tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("%s %s = %d %v; want %d", tc.method, tc.path, status, out, tc.status)
			}
			if msg, _ := out["error"].(string); msg == "" {
				t.Fatalf("error answer %v has no \"error\" message", out)
			}
		})
	}
	if n := b.countJobs(t); n != 0 {
		t.Fatalf("%d jobs stored by refused requests; want 0", n)
	}
	// Just under the limit is accepted.
	body := `{"kind":"http","url":"` + u + `","body":"` + strings.Repeat("x", 3900) + `"}`
	if status, out := b.call(t, "POST", "/v1/jobs", body); status != http.StatusCreated {
		t.Fatalf("a body under --max-body = %d %v; want 201", status, out)
	}
}

// TestMetadataInAPI checks that a job's metadata given to POST /v1/jobs
// (single and batch) is shown by GET /v1/jobs/{id}, and left out for a job
// without it.
func TestMetadataInAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	u := b.target.URL
	status, out := b.call(t, "POST", "/v1/jobs", `{"kind":"http","url":"`+u+`","metadata":{"tenant":"acme","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`)
	if status != http.StatusCreated {
		t.Fatalf("POST = %d %v", status, out)
	}
	id := uint64(out["id"].(float64))
	status, out = b.call(t, "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"http","url":"`+u+`","metadata":{"tenant":"initech"}},{"kind":"http","url":"`+u+`"}]}`)
	if status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("POST batch = %d %v", status, out)
	}
	jobs := out["jobs"].([]any)
	want := map[uint64]map[string]any{
		id: {"tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		uint64(jobs[0].(map[string]any)["id"].(float64)): {"tenant": "initech"},
		uint64(jobs[1].(map[string]any)["id"].(float64)): nil,
	}
	for id, w := range want {
		status, j := b.call(t, "GET", fmt.Sprintf("/v1/jobs/%d", id), "")
		if status != http.StatusOK {
			t.Fatalf("GET job %d = %d", id, status)
		}
		got, has := j["metadata"].(map[string]any)
		if w == nil && has || w != nil && !reflect.DeepEqual(got, w) {
			t.Fatalf("job %d shows metadata %v (present %v), want %v", id, j["metadata"], has, w)
		}
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{Token: "s3cret"})
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/healthz", "", 200},
		{"/healthz", "Bearer wrong", 200},
		{"/v1/stats", "", 401},
		{"/v1/stats", "Bearer wrong", 401},
		{"/v1/stats", "Bearer s3cre", 401},
		{"/v1/stats", "Bearer s3cret2", 401},
		{"/v1/stats", "Basic s3cret", 401},
		{"/v1/stats", "s3cret", 401},
		{"/v1/stats", "Bearer s3cret", 200},
		{"/v1/stats", "bearer s3cret", 200},
		{"/v1/jobs", "", 401},
		{"/v1/targets", "", 401},
		{"/v1/openapi.yaml", "", 401},
		{"/metrics", "", 401},
		{"/metrics", "Bearer s3cret", 200},
		{"/healthz/", "", 401},
		{"/healthzz", "", 401},
		{"/v1/healthz", "", 401},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		if status, out := b.call(t, "GET", tc.path, "", hdr...); status != tc.status {
			t.Errorf("GET %s with %q = %d %v; want %d", tc.path, tc.auth, status, out, tc.status)
		}
	}
	status, _ := b.call(t, "POST", "/v1/jobs", `{"kind":"http","url":"`+b.target.URL+`"}`)
	if status != http.StatusUnauthorized || b.countJobs(t) != 0 {
		t.Fatalf("unauthenticated POST = %d, %d jobs stored; want 401 and none", status, b.countJobs(t))
	}
	if _, err := b.client.Enqueue(context.Background(), JobRequest{Kind: "http", URL: b.target.URL}); err != nil {
		t.Fatalf("the client with the token: %v", err)
	}
}

func TestCancelAndRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	ctx := context.Background()
	later, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/ok", RunAt: "2099-01-01T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/jobs/" + strconv.FormatUint(later.ID, 10)
	if status, out := b.call(t, "POST", path+"/retry", ""); status != http.StatusConflict {
		t.Errorf("retry of a pending job = %d %v; want 409", status, out)
	}
	status, out := b.call(t, "POST", path+"/cancel", `{"reason":"not needed"}`)
	if status != http.StatusOK || out["state"] != "cancelled" || out["reason"] != "not needed" {
		t.Fatalf("cancel = %d %v; want 200, cancelled with the reason", status, out)
	}
	if status, out := b.call(t, "POST", path+"/cancel", ""); status != http.StatusConflict {
		t.Errorf("second cancel = %d %v; want 409", status, out)
	}

	bad, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/bad"})
	if err != nil {
		t.Fatal(err)
	}
	j := b.waitState(t, bad.ID, runlog.StateFailed)
	if j.Attempts != 1 || !strings.Contains(j.LastError, "400") {
		t.Fatalf("a 400 must fail at once: %+v", j)
	}
	path = "/v1/jobs/" + strconv.FormatUint(bad.ID, 10)
	if status, out := b.call(t, "POST", path+"/cancel", ""); status != http.StatusConflict {
		t.Errorf("cancel of a failed job = %d %v; want 409", status, out)
	}
	if status, out := b.call(t, "POST", path+"/retry", ""); status != http.StatusOK {
		t.Fatalf("retry of a failed job = %d %v; want 200", status, out)
	}
	j = b.waitState(t, bad.ID, runlog.StateFailed)
	if j.Attempts < 2 || len(j.History) < 2 {
		t.Fatalf("the retried job did not run again: %+v", j)
	}

	ok, err := b.client.Enqueue(ctx, JobRequest{Kind: "exec", Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, ok.ID, runlog.StateSucceeded)
	var apiErr *APIError
	if _, err := b.client.Retry(ctx, ok.ID); !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Errorf("retry of a succeeded job: %v; want 409", err)
	}
}

func TestListFiltersAndPaging(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	ctx := context.Background()
	future := "2099-01-01T00:00:00Z"
	ids := map[uint64]bool{}
	for i := range 5 {
		c, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/a", Key: "order-" + strconv.Itoa(i), RunAt: future})
		if err != nil {
			t.Fatal(err)
		}
		ids[c.ID] = true
	}
	for range 2 {
		c, err := b.client.Enqueue(ctx, JobRequest{Kind: "exec", Command: "true", RunAt: future})
		if err != nil {
			t.Fatal(err)
		}
		ids[c.ID] = true
	}
	target, _ := kinds.HTTPTarget(b.target.URL)
	for _, tc := range []struct {
		q    ListQuery
		want int
	}{
		{ListQuery{}, 7},
		{ListQuery{Kind: "exec"}, 2},
		{ListQuery{Kind: "http"}, 5},
		{ListQuery{Target: target}, 5},
		{ListQuery{Target: "exec:true"}, 2},
		{ListQuery{Q: "order-3"}, 1},
		{ListQuery{State: "pending"}, 7},
		{ListQuery{State: "succeeded"}, 0},
		{ListQuery{Kind: "http", Order: "oldest"}, 5},
	} {
		l, err := b.client.List(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Jobs) != tc.want {
			t.Errorf("List(%+v) = %d jobs; want %d", tc.q, len(l.Jobs), tc.want)
		}
		for _, j := range l.Jobs {
			if j.History != nil {
				t.Errorf("list items carry no history; job %d has %v", j.ID, j.History)
			}
		}
	}
	seen := map[uint64]bool{}
	q := ListQuery{Limit: 3}
	pages := 0
	for {
		l, err := b.client.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, j := range l.Jobs {
			if seen[j.ID] || !ids[j.ID] {
				t.Fatalf("page %d: job %d repeated or unknown", pages, j.ID)
			}
			seen[j.ID] = true
		}
		if l.Next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		q.After = l.Next
	}
	if len(seen) != 7 || pages != 3 {
		t.Fatalf("paging by 3 saw %d jobs in %d pages; want 7 in 3", len(seen), pages)
	}
	status, out := b.call(t, "GET", "/v1/jobs?limit=100000", "")
	if status != http.StatusOK || len(out["jobs"].([]any)) != 7 {
		t.Errorf("an over-large limit is clamped, not refused: %d", status)
	}
}

func TestTargetsStatsMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	ctx := context.Background()
	c, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/ok"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, c.ID, runlog.StateSucceeded)
	// Two retryable failures: the target is known to its breaker, still closed.
	c, err = b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/fail"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, c.ID, runlog.StateFailed)
	if _, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/later", RunAt: "2099-01-01T00:00:00Z"}); err != nil {
		t.Fatal(err)
	}
	st, err := b.client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Succeeded != 1 || st.Failed != 1 || st.Pending != 1 || st.PoolSize != 4 {
		t.Errorf("stats = %+v; want 1 succeeded, 1 failed, 1 pending, pool 4", st)
	}
	tl, err := b.client.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := kinds.HTTPTarget(b.target.URL)
	found := false
	for _, tg := range tl.Targets {
		if tg.Target == want {
			found = true
			if tg.State != "closed" || tg.RecentFailures != 2 || tg.Pending != 1 {
				t.Errorf("target %+v; want closed with 2 recent failures and 1 pending job", tg)
			}
		}
	}
	if !found {
		t.Errorf("targets %+v do not list %s", tl.Targets, want)
	}
	resp, err := http.Get(b.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, line := range []string{
		`runlog_jobs{state="succeeded"} 1`,
		`runlog_jobs{state="failed"} 1`,
		`runlog_attempts_total{kind="http",outcome="retryable",target="` + want + `"} 2`,
		`runlog_breaker_recent_failures{target="` + want + `"} 2`,
		`runlog_jobs{state="pending"} 1`,
		`runlog_attempts_total{kind="http",outcome="success",target="` + want + `"} 1`,
		`runlog_breaker_state{state="closed",target="` + want + `"} 1`,
		`runlog_journal_sync_seconds_count `,
		`runlog_journal_batch_records_bucket`,
		`runlog_queue_lag_seconds `,
		`runlog_pool_size 4`,
		`runlog_attempts_in_flight 0`,
	} {
		if !bytes.Contains(text, []byte(line)) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	if status, _ := b.call(t, "GET", "/healthz", ""); status != http.StatusOK {
		t.Fatalf("healthz = %d; want 200", status)
	}
	b.api.SetAccepting(false)
	if status, _ := b.call(t, "GET", "/healthz", ""); status != http.StatusServiceUnavailable {
		t.Fatalf("healthz while shutting down = %d; want 503", status)
	}
}

// TestOpenAPIDocumentsEveryRoute: each route the API serves is a path of
// the OpenAPI document, and each documented path is served.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	resp, err := http.Get(b.srv.URL + "/v1/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(doc, []byte("openapi: 3.")) {
		t.Fatalf("GET /v1/openapi.yaml = %d %.40q", resp.StatusCode, doc)
	}
	documented := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	inPaths := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			inPaths = true
		case inPaths && len(line) > 0 && line[0] != ' ':
			inPaths = false
		case inPaths && strings.HasPrefix(line, "  /") && strings.HasSuffix(line, ":"):
			documented[strings.TrimSuffix(strings.TrimSpace(line), ":")] = true
		}
	}
	served := []string{"/healthz", "/v1/jobs", "/v1/jobs/batch", "/v1/jobs/{id}", "/v1/jobs/{id}/cancel", "/v1/jobs/{id}/retry",
		"/v1/jobs/{id}/replay", "/v1/replay", "/v1/discard", "/v1/targets", "/v1/targets/secrets", "/v1/targets/enable", "/v1/stats", "/v1/openapi.yaml", "/metrics", "/v1/backup",
		"/v1/queues", "/v1/queues/{name}", "/v1/queues/{name}/pause", "/v1/queues/{name}/resume",
		"/v1/schedules", "/v1/schedules/{name}", "/v1/schedules/{name}/pause", "/v1/schedules/{name}/resume", "/v1/limits"}
	for _, p := range served {
		if !documented[p] {
			t.Errorf("route %s is not in openapi.yaml", p)
		}
		delete(documented, p)
	}
	for p := range documented {
		t.Errorf("openapi.yaml documents %s, which the API does not serve", p)
	}
	for _, p := range served {
		probe := strings.ReplaceAll(p, "{id}", "1")
		if status, _ := b.call(t, "GET", probe, ""); status == http.StatusNotFound && !strings.Contains(p, "{") {
			t.Errorf("documented path %s answers 404", p)
		}
	}
}

func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	ctx := context.Background()
	job := func(key string) string {
		return `{"kind":"http","url":"` + b.target.URL + `/ok","key":"` + key + `","run_at":"2099-01-01T00:00:00Z"}`
	}
	for _, tc := range []struct{ name, body, says string }{
		{"invalid job", `{"jobs":[` + job("a") + `,{"kind":"http","url":"ftp://x/"}]}`, "jobs[1]"},
		{"empty", `{"jobs":[]}`, "1 to 1000"},
		{"not a batch", `[` + job("a") + `]`, "not a valid batch"},
		{"too many", `{"jobs":[` + strings.TrimSuffix(strings.Repeat(`{"kind":"exec","command":"true"},`, MaxBatch+1), ",") + `]}`, "1 to 1000"},
	} {
		status, out := b.call(t, "POST", "/v1/jobs/batch", tc.body)
		if msg, _ := out["error"].(string); status != http.StatusBadRequest || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %v; want 400 saying %q", tc.name, status, out, tc.says)
		}
	}
	if n := b.countJobs(t); n != 0 {
		t.Fatalf("refused batches stored %d jobs", n)
	}
	first, err := b.client.Enqueue(ctx, JobRequest{Kind: "exec", Command: "true", Key: "held", RunAt: "2099-01-01T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.client.EnqueueBatch(ctx, []JobRequest{
		{Kind: "http", URL: b.target.URL + "/ok", Key: "b1"},
		{Kind: "exec", Command: "true", Key: "held"},
		{Kind: "http", URL: b.target.URL + "/ok", Key: "b1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Jobs) != 3 || got.Jobs[0].Existing || !got.Jobs[1].Existing || got.Jobs[1].ID != first.ID ||
		!got.Jobs[2].Existing || got.Jobs[2].ID != got.Jobs[0].ID {
		t.Fatalf("batch answer %+v; want a new job, the held key's job, and the first again", got.Jobs)
	}
	if n := b.countJobs(t); n != 2 {
		t.Fatalf("%d jobs stored; want 2", n)
	}
	b.waitState(t, got.Jobs[0].ID, runlog.StateSucceeded)
}
