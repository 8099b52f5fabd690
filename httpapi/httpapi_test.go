package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/httpapi"
)

// Welcome is the application's typed job.
type Welcome struct {
	To string `json:"to"`
}

func (Welcome) Kind() string { return "welcome" }

// mounted starts an application that mounts the API at /runlog/ over a
// real socket; got receives the welcome jobs its handler runs.
func mounted(t *testing.T, opts httpapi.Options) (*runlog.Runner, string, chan Welcome) {
	t.Helper()
	got := make(chan Welcome, 4)
	handlers := map[string]runlog.Handler{}
	runlog.AddHandler(handlers, func(_ context.Context, w Welcome) error { got <- w; return nil })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := runlog.Open(t.TempDir(), runlog.Config{Logger: quiet, Handlers: handlers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	opts.Logger = quiet
	mux := http.NewServeMux()
	mux.Handle("/runlog/", httpapi.New(r, opts))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return r, srv.URL, got
}

// call sends a request and returns the status, a header and the body.
func call(t *testing.T, method, url, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func TestMountedAPI(t *testing.T) {
	t.Parallel()
	r, base, got := mounted(t, httpapi.Options{Token: "s3cret", BasePath: "/runlog"})
	auth := []string{"Authorization", "Bearer s3cret"}
	code, hdr, body := call(t, "POST", base+"/runlog/v1/jobs", `{"kind":"welcome","payload":{"to":"ada@example.com"},"key":"welcome-ada"}`, auth...)
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	var created struct{ ID uint64 }
	if err := json.Unmarshal([]byte(body), &created); err != nil {
		t.Fatal(err)
	}
	if loc := hdr.Get("Location"); loc != "/runlog/v1/jobs/1" || created.ID != 1 {
		t.Fatalf("Location %q, id %d", loc, created.ID)
	}
	if w := <-got; w.To != "ada@example.com" {
		t.Fatalf("the handler got %+v", w)
	}
	if j, err := r.Wait(context.Background(), created.ID); err != nil || j.State != runlog.StateSucceeded || j.Key != "welcome-ada" {
		t.Fatalf("job %+v %v", j, err)
	}
	if code, _, body := call(t, "GET", base+"/runlog/v1/jobs/1", "", auth...); code != 200 || !strings.Contains(body, `"state":"succeeded"`) {
		t.Fatalf("GET job: %d %s", code, body)
	}

	cases := []struct {
		name, method, path, body string
		hdr                      []string
		want                     int
		says                     string
	}{
		{"health needs no token", "GET", "/runlog/healthz", "", nil, 200, `"ok"`},
		{"no token", "GET", "/runlog/v1/jobs", "", nil, 401, "token"},
		{"outside the base", "GET", "/v1/jobs", "", auth, 404, ""},
		{"unknown kind", "POST", "/runlog/v1/jobs", `{"kind":"invoice","payload":{}}`, auth, 400, "invoice"},
		{"http fields on an app kind", "POST", "/runlog/v1/jobs", `{"kind":"welcome","url":"http://x"}`, auth, 400, "takes its payload in payload"},
		{"payload on an http job", "POST", "/runlog/v1/jobs", `{"kind":"http","url":"http://x","payload":{}}`, auth, 400, "payload belongs to"},
		{"payload of another type", "POST", "/runlog/v1/jobs", `{"kind":"welcome","payload":[1]}`, auth, 201, ""},
		{"not JSON", "POST", "/runlog/v1/jobs", `kind=welcome`, append([]string{"Content-Type", "text/plain"}, auth...), 415, "JSON"},
		{"cross-site", "POST", "/runlog/v1/jobs", `{"kind":"welcome","payload":{}}`, append([]string{"Sec-Fetch-Site", "cross-site"}, auth...), 403, "cross-site"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := call(t, c.method, base+c.path, c.body, c.hdr...)
			if code != c.want || !strings.Contains(body, c.says) {
				t.Fatalf("%d %s, want %d saying %q", code, body, c.want, c.says)
			}
		})
	}
}

func TestMountedAPIReadOnly(t *testing.T) {
	t.Parallel()
	_, base, _ := mounted(t, httpapi.Options{ReadOnly: true, BasePath: "/runlog/"})
	if code, _, body := call(t, "POST", base+"/runlog/v1/jobs", `{"kind":"welcome","payload":{}}`); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Fatalf("enqueue on a read-only API: %d %s", code, body)
	}
	if code, _, body := call(t, "GET", base+"/runlog/v1/stats", ""); code != 200 {
		t.Fatalf("stats: %d %s", code, body)
	}
}
