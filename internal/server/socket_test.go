package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestEnqueueOverSocketAnswersAsHandler: POST /v1/jobs on the running
// server (its listener, limits and connection checks) answers every request
// as its handler does under httptest: the same status, error text and
// headers, and the same stored effect; chunked bodies are bounded like the
// others.
func TestEnqueueOverSocketAnswersAsHandler(t *testing.T) {
	t.Parallel()
	const maxBody = 4 << 10
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Token: "tok", MaxBody: maxBody})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	ref := httptest.NewServer(srv.Handler()) // net/http, the same API and runner
	defer ref.Close()

	type answer struct {
		status int
		body   map[string]any
		header http.Header
	}
	post := func(base, token, body string, chunked bool) answer {
		t.Helper()
		var r io.Reader = strings.NewReader(body)
		if chunked {
			r = io.MultiReader(strings.NewReader(body)) // no length known: chunked
		}
		req, _ := http.NewRequest("POST", base+"/v1/jobs", r)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", body[:min(len(body), 60)], err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		a := answer{status: resp.StatusCode, header: resp.Header}
		if err := json.Unmarshal(raw, &a.body); err != nil {
			t.Fatalf("answer %d is not JSON: %q", resp.StatusCode, raw)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		return a
	}
	runAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	job := `{"kind":"http","url":"http://127.0.0.1:9/x","run_at":"` + runAt + `"}`
	big := `{"kind":"http","url":"http://127.0.0.1:9/x","body":"` + strings.Repeat("x", maxBody) + `"}`
	for _, c := range []struct {
		name, token, body string
		status            int
	}{
		// Four requests with a wrong token (two paths, chunked or not): the
		// limiter of wrong tokens (internal/authlimit) lets an address
		// send five before it answers 429, and a missing token counts.
		{"wrong token", "nope", job, 401},
		{"created", "tok", job, 201},
		{"malformed", "tok", `{"kind":`, 400},
		{"unknown kind", "tok", `{"kind":"ftp","url":"http://x/"}`, 400},
		{"unknown field", "tok", `{"kind":"http","url":"http://x/","color":"red"}`, 400},
		{"exec unregistered", "tok", `{"kind":"exec","command":"rm"}`, 400},
		{"bad run_at", "tok", `{"kind":"http","url":"http://x/","run_at":"tomorrow"}`, 400},
		{"oversize", "tok", big, 413},
	} {
		for _, chunked := range []bool{false, true} {
			fast := post(srv.URL(), c.token, c.body, chunked)
			want := post(ref.URL, c.token, c.body, chunked)
			if fast.status != c.status || want.status != c.status {
				t.Fatalf("%s (chunked %v): fast %d, net/http %d; want %d", c.name, chunked, fast.status, want.status, c.status)
			}
			if c.status >= 400 {
				if fast.body["error"] != want.body["error"] {
					t.Fatalf("%s (chunked %v): fast says %q, net/http %q", c.name, chunked, fast.body["error"], want.body["error"])
				}
				if c.status == 401 && fast.header.Get("WWW-Authenticate") != want.header.Get("WWW-Authenticate") {
					t.Fatalf("%s: WWW-Authenticate %q vs %q", c.name, fast.header.Get("WWW-Authenticate"), want.header.Get("WWW-Authenticate"))
				}
				continue
			}
			id, _ := fast.body["id"].(float64)
			if fast.body["existing"] != false || id == 0 || fast.header.Get("Location") != "/v1/jobs/"+jsonNumber(id) {
				t.Fatalf("%s: answer %v, Location %q", c.name, fast.body, fast.header.Get("Location"))
			}
		}
	}
	// An idempotency key: the same job from either path, found again.
	keyed := `{"kind":"http","url":"http://127.0.0.1:9/x","key":"order-7","run_at":"` + runAt + `"}`
	first := post(srv.URL(), "tok", keyed, false)
	again := post(srv.URL(), "tok", keyed, false)
	viaRef := post(ref.URL, "tok", keyed, false)
	if first.status != 201 || again.status != 200 || viaRef.status != 200 ||
		again.body["id"] != first.body["id"] || viaRef.body["id"] != first.body["id"] || again.body["existing"] != true {
		t.Fatalf("key: first %v %v, again %v %v, via net/http %v %v", first.status, first.body, again.status, again.body, viaRef.status, viaRef.body)
	}
	st, err := srv.Runner().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// "created" on both paths, plain and chunked, and the keyed job.
	if st.Pending != 5 {
		t.Fatalf("%d jobs pending; want 5 (nothing stored from a refused request)", st.Pending)
	}
}

func jsonNumber(f float64) string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(uint64(f))
	return strings.TrimSpace(b.String())
}
