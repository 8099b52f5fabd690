package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
)

// bundle is what setup gives a test: a runner with the test kinds, its
// recorder and the dashboard over it.
type bundle struct {
	t       testing.TB
	runner  *runlog.Runner
	rec     *Recorder
	handler http.Handler
	opts    Options

	sessionID string // the session of b.session, made on first use
}

// testKinds are the kinds of the test runner: "ok" succeeds, "bad" fails
// permanently, "retry" fails retryably (its target's breaker counts it), "slow"
// runs until cancelled, "http" is the built-in http kind.
func testKinds() map[string]runlog.Handler {
	return map[string]runlog.Handler{
		kinds.KindHTTP: kinds.HTTP(kinds.Config{}),
		"ok":           runlog.Handle(func(ctx context.Context, p []byte) error { return nil }),
		"bad": runlog.Handle(func(ctx context.Context, p []byte) error {
			return runlog.Permanent(errors.New("400 Bad Request: the target refused the payload"))
		}),
		"retry": runlog.Handle(func(ctx context.Context, p []byte) error { return errors.New("503 Service Unavailable") }),
		"slow": runlog.Handle(func(ctx context.Context, p []byte) error {
			<-ctx.Done()
			return ctx.Err()
		}),
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// setup opens a runner in a temporary directory and builds the dashboard
// with opts (Recorder and Logger filled in when nil).
func setup(t testing.TB, opts Options) *bundle {
	t.Helper()
	rec := opts.Recorder
	if rec == nil {
		rec = NewRecorder()
		opts.Recorder = rec
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	r, err := runlog.Open(t.TempDir(), runlog.Config{
		Handlers:      testKinds(),
		Observer:      rec,
		Logger:        opts.Logger,
		Retry:         runlog.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond},
		SnapshotBytes: -1,
	})
	if err != nil {
		t.Fatalf("open runner: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close runner: %v", err)
		}
	})
	return &bundle{t: t, runner: r, rec: rec, handler: New(r, opts), opts: opts}
}

// enqueue adds a job and returns its id.
func (b *bundle) enqueue(kind string, opts ...runlog.EnqueueOption) uint64 {
	b.t.Helper()
	id, err := b.runner.Enqueue(context.Background(), kind, []byte(`{"n":1}`), opts...)
	if err != nil {
		b.t.Fatalf("enqueue %s: %v", kind, err)
	}
	return id
}

// waitState waits until job id is in state s (the runner works in the
// background) and returns it.
func (b *bundle) waitState(id uint64, s runlog.State) runlog.Job {
	b.t.Helper()
	return testwait.Until(b.t, fmt.Sprintf("job %d to be %s", id, s), func() (runlog.Job, bool) {
		j, err := b.runner.Job(context.Background(), id)
		if err != nil {
			b.t.Fatalf("job %d: %v", id, err)
		}
		return j, j.State == s
	})
}

// get requests path with the given headers and returns the response and
// its body.
func (b *bundle) get(path string, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.do(req)
}

// post sends a form to path; the CSRF token is added unless form has one
// (an empty "csrf" value sends none).
func (b *bundle) post(path string, form url.Values, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form[csrfField]; !ok {
		form.Set(csrfField, b.csrf())
	} else if form.Get(csrfField) == "" {
		form.Del(csrfField)
	}
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.do(req)
}

func (b *bundle) do(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	w := httptest.NewRecorder()
	b.handler.ServeHTTP(w, req)
	res := w.Result()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// h is the dashboard handler under test.
func (b *bundle) h() *handler { return b.handler.(*handler) }

// session returns the Cookie header of a logged-in browser (one session
// per bundle, started on first use).
func (b *bundle) session() string {
	if b.sessionID == "" {
		b.sessionID = b.h().auth.newSession()
	}
	return sessionCookie + "=" + b.sessionID
}

// csrf returns the CSRF token of b.session's pages (the server's one
// without a token).
func (b *bundle) csrf() string {
	a := b.h().auth
	if !a.token {
		return a.anonCSRF
	}
	b.session()
	s := a.lookup(b.sessionID)
	if s == nil {
		b.t.Fatalf("the test's session %s has ended", b.sessionID)
	}
	return s.csrf
}

// csrfOf returns the CSRF token a page's forms carry.
func csrfOf(t testing.TB, body string) string {
	t.Helper()
	const field = `name="csrf" value="`
	i := strings.Index(body, field)
	if i < 0 {
		t.Fatalf("the page has no CSRF field:\n%s", body)
	}
	v, _, _ := strings.Cut(body[i+len(field):], `"`)
	if v == "" {
		t.Fatalf("the page's CSRF field is empty:\n%s", body)
	}
	return v
}
