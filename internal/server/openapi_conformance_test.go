package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/runlog/runlog"
)

// TestOpenAPIConformance sends real requests to every endpoint (answers
// and errors) of a server with a token, and validates each request and
// answer against the OpenAPI document with kin-openapi's openapi3filter,
// so that the document and the server cannot drift apart.
func TestOpenAPIConformance(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI: %v", err)
	}
	doc.Servers = nil // match any host (the test server's port)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, APIConfig{Token: "s3cret"})
	ctx := context.Background()
	created, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/bad"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, created.ID, runlog.StateFailed)
	id := strconv.FormatUint(created.ID, 10)
	// A job that stays pending (due in an hour): a retry of it is a 409
	// whatever the retried failing job does meanwhile.
	later, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	pendingID := strconv.FormatUint(later.ID, 10)
	toDiscard, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	discardID := strconv.FormatUint(toDiscard.ID, 10)
	failedJob, err := b.client.Job(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	replayAll := `{"target":"` + failedJob.Target + `","since":"2000-01-01T00:00:00Z","state":"failed","dry_run":true}`
	// A target disabled by a 410 Gone (a receiver of its own: b.target
	// must stay enabled for the other cases).
	goneSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	defer goneSrv.Close()
	goneJob, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: goneSrv.URL + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, goneJob.ID, runlog.StateFailed)
	enableGone := `{"target":"` + goneSrv.URL + `"}`
	const auth = "Bearer s3cret"
	seen := map[string]bool{}
	for _, tc := range []struct {
		method, path, auth, body string
		status                   int
	}{
		{"GET", "/healthz", "", "", 200},
		{"POST", "/v1/jobs", auth, `{"kind":"http","url":"` + b.target.URL + `/"}`, 201},
		{"POST", "/v1/jobs", auth, `{"kind":"http","url":"` + b.target.URL + `/","key":"k"}`, 201},
		{"POST", "/v1/jobs", auth, `{"kind":"http","url":"` + b.target.URL + `/","key":"k"}`, 200},
		{"POST", "/v1/jobs", auth, `{"kind":"http"}`, 400},
		{"POST", "/v1/jobs", "", `{"kind":"http"}`, 401},
		{"POST", "/v1/jobs/batch", auth, `{"jobs":[{"kind":"http","url":"` + b.target.URL + `/"}]}`, 201},
		{"POST", "/v1/jobs/batch", auth, `{"jobs":[{"kind":"nope"}]}`, 400},
		{"GET", "/v1/jobs?state=failed&limit=1", auth, "", 200},
		{"GET", "/v1/jobs?state=bogus", auth, "", 400},
		{"GET", "/v1/jobs/" + id, auth, "", 200},
		{"GET", "/v1/jobs/999999", auth, "", 404},
		{"GET", "/v1/jobs/" + id, "Bearer wrong", "", 401},
		{"POST", "/v1/jobs/999999/cancel", auth, "", 404},
		{"POST", "/v1/jobs/" + id + "/cancel", auth, `{"reason":"x"}`, 409},
		{"POST", "/v1/jobs/" + id + "/replay", auth, "", 201},
		{"POST", "/v1/jobs/" + pendingID + "/replay", auth, "", 409},
		{"POST", "/v1/jobs/999999/replay", auth, "", 404},
		{"POST", "/v1/replay", auth, replayAll, 200},
		{"POST", "/v1/replay", auth, `{"target":"x"}`, 400},
		{"POST", "/v1/jobs/" + id + "/retry", auth, "", 200},
		{"POST", "/v1/jobs/" + pendingID + "/retry", auth, "", 409},
		{"POST", "/v1/jobs/999999/retry", auth, "", 404},
		{"DELETE", "/v1/jobs/" + discardID, auth, "", 409},
		{"POST", "/v1/jobs/" + discardID + "/cancel", auth, "", 200},
		{"DELETE", "/v1/jobs/" + discardID, auth, "", 204},
		{"DELETE", "/v1/jobs/" + discardID, auth, "", 404},
		{"DELETE", "/v1/jobs/" + discardID, "", "", 401},
		{"POST", "/v1/discard", auth, `{"state":"cancelled","dry_run":true}`, 200},
		{"POST", "/v1/discard", auth, `{"state":"cancelled","kind":"http"}`, 200},
		{"POST", "/v1/discard", auth, `{"state":"pending"}`, 400},
		{"POST", "/v1/discard", auth, `{}`, 400},
		{"GET", "/v1/targets", auth, "", 200},
		{"POST", "/v1/targets/enable", auth, enableGone, 200},
		{"POST", "/v1/targets/enable", auth, enableGone, 404},
		{"POST", "/v1/targets/enable", auth, `{"target":""}`, 400},
		{"POST", "/v1/targets/enable", "", enableGone, 401},
		{"GET", "/v1/stats", auth, "", 200},
		{"POST", "/v1/jobs", auth, `{"kind":"http","url":"` + b.target.URL + `/","queue":"mail","priority":-5}`, 201},
		{"POST", "/v1/jobs", auth, `{"kind":"http","url":"` + b.target.URL + `/","queue":"no spaces"}`, 400},
		{"POST", "/v1/jobs", auth, `{"kind":"http","url":"` + b.target.URL + `/","priority":1001}`, 400},
		{"GET", "/v1/queues", auth, "", 200},
		{"PUT", "/v1/queues/mail", auth, `{"concurrency":3}`, 200},
		{"PUT", "/v1/queues/mail", auth, `{"concurrency":3,"rate":50,"burst":5}`, 200},
		{"PUT", "/v1/queues/mail", auth, `{"rate":-1}`, 400},
		{"PUT", "/v1/limits", auth, `{"queue":"mail","rate":20,"burst":2}`, 200},
		{"PUT", "/v1/limits", auth, `{"queue":"mail","target":"http://x","rate":1}`, 400},
		{"GET", "/v1/queues", auth, "", 200},
		{"PUT", "/v1/limits", auth, `{"queue":"mail","rate":0}`, 200},
		{"PUT", "/v1/queues/mail", auth, `{"concurrency":-1}`, 400},
		{"PUT", "/v1/queues/mail", auth, `{}`, 400},
		{"POST", "/v1/queues/mail/pause", auth, "", 200},
		{"POST", "/v1/queues/default/resume", auth, "", 200},
		{"POST", "/v1/queues/mail/resume", auth, "", 200},
		{"POST", "/v1/queues/mail/pause", "", "", 401},
		{"GET", "/v1/openapi.yaml", auth, "", 200},
		{"GET", "/v1/openapi.yaml", "", "", 401},
		{"GET", "/metrics", auth, "", 200},
		{"GET", "/v1/backup", auth, "", 200},
		{"GET", "/v1/backup", "", "", 401},
		{"GET", "/metrics", "", "", 401},
		{"POST", "/v1/schedules", auth, `{"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Paris","job":{"kind":"http","url":"` + b.target.URL + `/"},"overlap":"skip","catch_up":"latest"}`, 201},
		{"POST", "/v1/schedules", auth, `{"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Paris","job":{"kind":"http","url":"` + b.target.URL + `/"},"overlap":"skip","catch_up":"latest"}`, 409},
		{"POST", "/v1/schedules", auth, `{"name":"x","cron":"0 3 * * *","timezone":"Mars/Base","job":{"kind":"http","url":"` + b.target.URL + `/"}}`, 400},
		{"GET", "/v1/schedules", auth, "", 200},
		{"GET", "/v1/schedules/nightly", auth, "", 200},
		{"GET", "/v1/schedules/nope", auth, "", 404},
		{"PATCH", "/v1/schedules/nightly", auth, `{"every":"1h"}`, 200},
		{"PATCH", "/v1/schedules/nightly", auth, `{"every":"10ms"}`, 400},
		{"POST", "/v1/schedules/nightly/pause", auth, "", 200},
		{"POST", "/v1/schedules/nightly/resume", auth, "", 200},
		{"POST", "/v1/schedules/nope/pause", auth, "", 404},
		{"GET", "/v1/jobs?schedule=nightly", auth, "", 200},
		{"DELETE", "/v1/schedules/nightly", auth, "", 204},
		{"DELETE", "/v1/schedules/nightly", auth, "", 404},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req, err := http.NewRequest(tc.method, b.srv.URL+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s %s: not in the document: %v", tc.method, tc.path, err)
			continue
		}
		seen[route.Operation.OperationID] = true
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		var reqBody []byte
		if tc.body != "" {
			reqBody = []byte(tc.body)
			req.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		if tc.status < 400 {
			if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
				t.Errorf("%s %s: the request does not match the document: %v", tc.method, tc.path, err)
			}
			if reqBody != nil {
				// The validation reads (and may rewrite) the body: send
				// the test's own bytes.
				req.Body = io.NopCloser(bytes.NewReader(reqBody))
				req.ContentLength = int64(len(reqBody))
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.status, data)
			continue
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		out.SetBodyBytes(data)
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			t.Errorf("%s %s: the %d answer does not match the document: %v\n%s", tc.method, tc.path, resp.StatusCode, err, data)
		}
	}
	// The check can fail: an answer the document does not allow is refused.
	req, _ := http.NewRequest("GET", b.srv.URL+"/v1/stats", nil)
	route, params, _ := router.FindRoute(req)
	bad := &openapi3filter.ResponseValidationInput{RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status: 200, Header: http.Header{"Content-Type": {"application/json"}}}
	bad.SetBodyBytes([]byte(`{"pending":"many"}`))
	if err := openapi3filter.ValidateResponse(ctx, bad); err == nil {
		t.Error("a stats answer with a string count passed the validation")
	}
	for _, op := range []string{"health", "enqueueJob", "enqueueJobs", "listJobs", "getJob", "cancelJob", "retryJob", "discardJob", "discardJobs", "replayJob", "replayJobs", "listTargets", "enableTarget", "getStats", "getOpenAPI", "getMetrics", "getBackup",
		"createSchedule", "listSchedules", "getSchedule", "updateSchedule", "deleteSchedule", "pauseSchedule", "resumeSchedule"} {
		if !seen[op] {
			t.Errorf("operation %s not exercised", op)
		}
	}
}
