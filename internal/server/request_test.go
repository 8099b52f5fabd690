package server

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

var testPolicy = Policy{
	Commands: map[string]string{"resize": "/usr/bin/true"},
	Retry:    runlog.RetryPolicy{Attempts: 10, Base: 500 * time.Millisecond, Cap: 30 * time.Second},
}

func TestDecodeJobRequest(t *testing.T) {
	t.Parallel()
	runAt := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		body string
		want runlog.JobRequest
	}{
		{
			name: "http minimal",
			body: `{"kind":"http","url":"https://Example.com/hook"}`,
			want: runlog.JobRequest{Kind: "http", Target: "https://example.com:443",
				Payload: []byte(`{"url":"https://Example.com/hook","method":"POST"}`)},
		},
		{
			name: "http full",
			body: `{"kind":"http","url":"http://127.0.0.1:9000/x?a=<b>","method":"put","headers":{"X-A":"1"},"body":"{\"n\":1}",
				"key":"k1","run_at":"2030-01-02T03:04:05Z","target":"partner","timeout":"30s",
				"retry":{"attempts":8,"base":"20ms","cap":"200ms","deadline":"10m"}}`,
			want: runlog.JobRequest{Kind: "http", Target: "partner", Key: "k1", RunAt: runAt, Timeout: 30 * time.Second,
				Retry:   &runlog.RetryPolicy{Attempts: 8, Base: 20 * time.Millisecond, Cap: 200 * time.Millisecond, Deadline: 10 * time.Minute},
				Payload: []byte(`{"url":"http://127.0.0.1:9000/x?a=<b>","method":"PUT","headers":{"X-A":"1"},"body":"{\"n\":1}"}`)},
		},
		{
			name: "partial retry keeps defaults",
			body: `{"kind":"http","url":"http://h/","retry":{"attempts":3}}`,
			want: runlog.JobRequest{Kind: "http", Target: "http://h:80",
				Retry:   &runlog.RetryPolicy{Attempts: 3, Base: 500 * time.Millisecond, Cap: 30 * time.Second},
				Payload: []byte(`{"url":"http://h/","method":"POST"}`)},
		},
		{
			name: "exec",
			body: `{"kind":"exec","command":"resize","args":["-w","100"],"stdin":"img"}`,
			want: runlog.JobRequest{Kind: "exec", Target: "exec:resize",
				Payload: []byte(`{"command":"resize","args":["-w","100"],"stdin":"img"}`)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeJobRequest([]byte(tc.body), testPolicy)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\n\tpayload %s\nwant %+v\n\tpayload %s", got, got.Payload, tc.want, tc.want.Payload)
			}
		})
	}
}

func TestDecodeJobRequestRefuses(t *testing.T) {
	t.Parallel()
	pol := testPolicy
	pol.AllowHosts = []string{"allowed.example"}
	for _, tc := range []struct{ name, body, says string }{
		{"empty", ``, "not a valid job request"},
		{"not json", `kind=http`, "not a valid job request"},
		{"array", `[]`, "not a valid job request"},
		{"two objects", `{"kind":"http","url":"http://allowed.example/"} {}`, "after the job object"},
		{"unknown field", `{"kind":"http","url":"http://allowed.example/","urll":"x"}`, "unknown field"},
		{"no kind", `{"url":"http://allowed.example/"}`, "kind is required"},
		{"unknown kind", `{"kind":"smtp","url":"http://allowed.example/"}`, "unknown kind"},
		{"no url", `{"kind":"http"}`, "url is required"},
		{"ftp", `{"kind":"http","url":"ftp://allowed.example/"}`, "only http and https"},
		{"file", `{"kind":"http","url":"file:///etc/passwd"}`, "only http and https"},
		{"not allowed", `{"kind":"http","url":"http://other.example/"}`, "allow-list"},
		{"bad header", `{"kind":"http","url":"http://allowed.example/","headers":{"X":"a\r\nB: c"}}`, "control character"},
		{"exec field on http", `{"kind":"http","url":"http://allowed.example/","command":"resize"}`, "belong to exec"},
		{"http field on exec", `{"kind":"exec","command":"resize","url":"http://allowed.example/"}`, "belong to http"},
		{"unregistered", `{"kind":"exec","command":"rm","args":["-rf","/"]}`, "not registered"},
		{"path as command", `{"kind":"exec","command":"/bin/sh"}`, "not registered"},
		{"no command", `{"kind":"exec"}`, "command is required"},
		{"run_at", `{"kind":"http","url":"http://allowed.example/","run_at":"tomorrow"}`, "RFC 3339"},
		{"timeout", `{"kind":"http","url":"http://allowed.example/","timeout":"30"}`, "not a duration"},
		{"timeout zero", `{"kind":"http","url":"http://allowed.example/","timeout":"0s"}`, "above 0"},
		{"timeout huge", `{"kind":"http","url":"http://allowed.example/","timeout":"48h"}`, "at most"},
		{"retry attempts", `{"kind":"http","url":"http://allowed.example/","retry":{"attempts":-1}}`, "retry.attempts"},
		{"retry base", `{"kind":"http","url":"http://allowed.example/","retry":{"base":"-1s"}}`, "negative"},
		{"retry order", `{"kind":"http","url":"http://allowed.example/","retry":{"base":"1m","cap":"1s"}}`, "above retry.cap"},
		{"retry unknown", `{"kind":"http","url":"http://allowed.example/","retry":{"tries":3}}`, "unknown field"},
		{"long key", `{"kind":"http","url":"http://allowed.example/","key":"` + strings.Repeat("k", 513) + `"}`, "key is 513 bytes"},
		{"wrong type", `{"kind":"http","url":7}`, "not a valid job request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeJobRequest([]byte(tc.body), pol)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v; want ErrBadRequest saying %q", err, tc.says)
			}
		})
	}
}

// FuzzDecodeJobRequest: the decoder never panics; what it accepts is a job
// of a known kind with a target, whose payload is the JSON of that kind's
// request and passes the kind's own validation again.
func FuzzDecodeJobRequest(f *testing.F) {
	for _, s := range []string{
		`{"kind":"http","url":"https://example.com/hook"}`,
		`{"kind":"http","url":"http://[::1]:8080/x","method":"patch","headers":{"A":"b"},"body":"x","key":"k","run_at":"2030-01-02T03:04:05.123+02:00","timeout":"1.5s","retry":{"attempts":2,"base":"1ms","cap":"2ms","deadline":"1h"}}`,
		`{"kind":"exec","command":"resize","args":["a","b"],"stdin":"in"}`,
		`{"kind":"exec","command":"resize","target":"t"}`,
		`{"kind":"http","url":"ftp://x"}`,
		`{"kind":"http","url":"http://x/","headers":{"Runlog-Job-Id":"1"}}`,
		`{}`, `null`, `[]`, `{"kind":"http","url":"http://x/"}{}`, `{"kind":"http","url":"http://x/","retry":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeJobRequest(data, testPolicy)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if req.Target == "" {
			t.Fatal("accepted a job without a target")
		}
		switch req.Kind {
		case kinds.KindHTTP:
			var hr kinds.HTTPRequest
			if err := json.Unmarshal(req.Payload, &hr); err != nil {
				t.Fatalf("payload %q is not an http request: %v", req.Payload, err)
			}
			if err := hr.Validate(testPolicy.AllowHosts); err != nil {
				t.Fatalf("payload %q fails validation at delivery: %v", req.Payload, err)
			}
		case kinds.KindExec:
			var er kinds.ExecRequest
			if err := json.Unmarshal(req.Payload, &er); err != nil {
				t.Fatalf("payload %q is not an exec request: %v", req.Payload, err)
			}
			if err := er.Validate(testPolicy.Commands); err != nil {
				t.Fatalf("payload %q fails validation at delivery: %v", req.Payload, err)
			}
		default:
			t.Fatalf("accepted kind %q", req.Kind)
		}
		if req.Retry != nil && (req.Retry.Attempts < 1 || req.Retry.Base < 0 || req.Retry.Cap < req.Retry.Base) {
			t.Fatalf("accepted retry policy %+v", *req.Retry)
		}
		if req.Timeout < 0 || req.Timeout > maxTimeout {
			t.Fatalf("accepted timeout %v", req.Timeout)
		}
	})
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7070", true}, {"127.0.0.2:80", true}, {"localhost:0", true}, {"[::1]:7070", true},
		{"0.0.0.0:7070", false}, {":7070", false}, {"[::]:7070", false}, {"192.168.1.5:7070", false},
		{"example.com:7070", false}, {"garbage", false}, {"10.0.0.1:1", false},
	} {
		if got := IsLoopback(tc.addr); got != tc.want {
			t.Errorf("IsLoopback(%q) = %v; want %v", tc.addr, got, tc.want)
		}
	}
}
