package runlogtest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/runlogtest"
)

// Welcome is a typed job's payload.
type Welcome struct {
	To string `json:"to"`
}

func (Welcome) Kind() string { return "welcome" }

func TestRunReportsTheOutcome(t *testing.T) {
	t.Parallel()
	var seen runlog.AttemptInfo
	h := runlog.HandleTyped(func(ctx context.Context, w Welcome) error {
		seen, _ = runlog.AttemptFrom(ctx)
		runlog.RecordOutput(ctx, []byte("sent to "+w.To))
		switch w.To {
		case "":
			return runlog.Permanent(errors.New("no address"))
		case "busy":
			return runlog.RetryAfter(time.Minute, errors.New("429"))
		case "down":
			return errors.New("503")
		case "charged":
			return runlog.Unsafe(errors.New("maybe sent"))
		case "boom":
			panic("nil map")
		}
		return nil
	})
	cases := []struct {
		name        string
		payload     any
		wantOutcome string
		wantAfter   time.Duration
		wantErr     string
		wantOutput  string
	}{
		{"success", Welcome{To: "ada@example.com"}, "success", -time.Millisecond, "", "sent to ada@example.com"},
		{"raw JSON", []byte(`{"to":"raw"}`), "success", -time.Millisecond, "", "sent to raw"},
		{"permanent", Welcome{}, "permanent", -time.Millisecond, "no address", "sent to "},
		{"retry after", Welcome{To: "busy"}, "retryable", time.Minute, "429", "sent to busy"},
		{"retryable", Welcome{To: "down"}, "retryable", -time.Millisecond, "503", "sent to down"},
		{"unsafe", Welcome{To: "charged"}, "unsafe", -time.Millisecond, "maybe sent", "sent to charged"},
		{"panic", Welcome{To: "boom"}, "retryable", -time.Millisecond, "panic: nil map", "sent to boom"},
		{"payload of another shape", []byte(`[1,2]`), "permanent", -time.Millisecond, "does not decode", ""},
		{"payload that does not encode", make(chan int), "permanent", -time.Millisecond, "unsupported type", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := runlogtest.Run(t.Context(), h, c.payload, runlog.AttemptInfo{JobID: 7, Attempt: 3})
			if res.Outcome != c.wantOutcome || res.RetryAfter != c.wantAfter || res.Output != c.wantOutput {
				t.Fatalf("result %+v, want outcome %s after %v output %q", res, c.wantOutcome, c.wantAfter, c.wantOutput)
			}
			if c.wantErr == "" && res.Err != nil || c.wantErr != "" && (res.Err == nil || !strings.Contains(res.Err.Error(), c.wantErr)) {
				t.Fatalf("err %v, want one saying %q", res.Err, c.wantErr)
			}
		})
	}
	// The attempt's info: the given fields, the handler's kind, the target
	// defaulted to the kind.
	runlogtest.Run(t.Context(), h, Welcome{To: "x"}, runlog.AttemptInfo{JobID: 7, Attempt: 3})
	if want := (runlog.AttemptInfo{JobID: 7, Attempt: 3, Kind: "welcome", Target: "welcome"}); seen != want {
		t.Fatalf("the handler saw %+v, want %+v", seen, want)
	}
}

func TestContextIsAnAttempt(t *testing.T) {
	t.Parallel()
	ctx := runlogtest.Context(t.Context(), runlog.AttemptInfo{Target: "smtp"})
	info, ok := runlog.AttemptFrom(ctx)
	if want := (runlog.AttemptInfo{JobID: 1, Attempt: 1, Kind: "test", Target: "smtp"}); !ok || info != want {
		t.Fatalf("AttemptFrom: %+v %v, want %+v", info, ok, want)
	}
	runlog.RecordOutput(ctx, []byte("a"))
	runlog.RecordOutput(ctx, []byte("b"))
	if got := runlogtest.Output(ctx); got != "ab" {
		t.Fatalf("output %q", got)
	}
	if got := runlogtest.Output(t.Context()); got != "" {
		t.Fatalf("output of a plain context %q", got)
	}
}

// TestWithMetadata checks that a handler run by Run or called with Context
// sees the metadata given with WithMetadata, and none without it.
func TestWithMetadata(t *testing.T) {
	t.Parallel()
	md := map[string]string{"tenant": "acme"}
	var seen map[string]string
	h := runlog.Handle(func(ctx context.Context, _ []byte) error {
		seen = runlog.MetadataFrom(ctx)
		return nil
	})
	if res := runlogtest.Run(runlogtest.WithMetadata(t.Context(), md), h, nil, runlog.AttemptInfo{}); res.Err != nil || !maps.Equal(seen, md) {
		t.Fatalf("Run: %v, the handler saw metadata %v; want %v", res.Err, seen, md)
	}
	if got := runlog.MetadataFrom(runlogtest.Context(runlogtest.WithMetadata(t.Context(), md), runlog.AttemptInfo{})); !maps.Equal(got, md) {
		t.Fatalf("Context: metadata %v, want %v", got, md)
	}
	if runlogtest.Run(t.Context(), h, nil, runlog.AttemptInfo{}); seen != nil {
		t.Fatalf("without WithMetadata the handler saw %v", seen)
	}
	if got := runlog.MetadataFrom(t.Context()); got != nil {
		t.Fatalf("MetadataFrom outside an attempt = %v", got)
	}
}

func TestRunnerDrainsAndAdvances(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := map[string]int{}
	handlers := map[string]runlog.Handler{}
	runlog.AddHandler(handlers, func(ctx context.Context, w Welcome) error {
		mu.Lock()
		defer mu.Unlock()
		calls[w.To]++
		if w.To == "flaky" && calls[w.To] < 3 {
			return errors.New("503")
		}
		return nil
	})
	r := runlogtest.NewRunner(t, runlog.Config{Handlers: handlers})
	ctx := t.Context()
	flaky, err := r.EnqueueArgs(ctx, Welcome{To: "flaky"}, runlog.WithRetry(runlog.RetryPolicy{Attempts: 5, Base: time.Minute, Cap: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	later, err := r.EnqueueArgs(ctx, Welcome{To: "later"}, runlog.RunIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	state := func(id uint64) (runlog.State, int) {
		t.Helper()
		j, err := r.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State, j.Attempts
	}
	r.Drain()
	if s, n := state(flaky); s != runlog.StatePending || n != 1 {
		t.Fatalf("after Drain: flaky %s after %d attempts, want pending after 1", s, n)
	}
	if s, n := state(later); s != runlog.StatePending || n != 0 {
		t.Fatalf("after Drain: later %s after %d attempts", s, n)
	}
	r.Advance(time.Minute) // the backoff is jittered into [30s, 1m]
	if s, n := state(flaky); s != runlog.StatePending || n != 2 {
		t.Fatalf("after a minute: flaky %s after %d attempts, want pending after 2", s, n)
	}
	r.Advance(time.Minute)
	if s, n := state(flaky); s != runlog.StateSucceeded || n != 3 {
		t.Fatalf("after two minutes: flaky %s after %d attempts, want succeeded after 3", s, n)
	}
	if s, _ := state(later); s != runlog.StatePending {
		t.Fatalf("later ran early: %s", s)
	}
	r.Advance(time.Hour)
	if s, _ := state(later); s != runlog.StateSucceeded {
		t.Fatalf("after an hour: later %s", s)
	}
}

// signUp is code under test: it enqueues a welcome email and a raw audit job.
func signUp(ctx context.Context, r *runlog.Runner, email string) error {
	if _, err := r.EnqueueArgs(ctx, Welcome{To: email}, runlog.Key("welcome-"+email), runlog.RunIn(time.Minute)); err != nil {
		return err
	}
	_, err := r.Enqueue(ctx, "audit", []byte(`{"event": "signup", "n": 1}`), runlog.Target("audit-log"))
	return err
}

// fakeTB records a failure instead of failing the real test.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// failure runs check against a Runner that reports to a fakeTB, and
// returns the failure it reported ("" if none).
func failure(r *runlogtest.Runner, check func(*runlogtest.Runner)) string {
	f := &fakeTB{}
	probe := runlogtest.Reporting(r, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(probe)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func TestRequireEnqueued(t *testing.T) {
	t.Parallel()
	handlers := map[string]runlog.Handler{"audit": runlog.Handle(func(context.Context, []byte) error { return nil })}
	runlog.AddHandler(handlers, func(context.Context, Welcome) error { return nil })
	r := runlogtest.NewRunner(t, runlog.Config{Handlers: handlers})
	if err := signUp(t.Context(), r.Runner, "ada@example.com"); err != nil {
		t.Fatal(err)
	}
	e := r.RequireEnqueuedArgs(Welcome{To: "ada@example.com"}, runlog.Key("welcome-ada@example.com"), runlog.RunIn(time.Minute))
	if e.ID == 0 || e.Existing {
		t.Fatalf("enqueued %+v", e)
	}
	r.RequireEnqueued("audit", map[string]any{"n": 1, "event": "signup"}, runlog.Target("audit-log")) // JSON-equal, any order
	r.RequireEnqueued("audit", nil)
	r.RequireNotEnqueued("invoice")

	cases := []struct {
		name  string
		check func(*runlogtest.Runner)
		want  string
	}{
		{"another payload", func(p *runlogtest.Runner) { p.RequireEnqueuedArgs(Welcome{To: "bob@example.com"}) }, `no job of kind "welcome" with payload {"to":"bob@example.com"}`},
		{"another key", func(p *runlogtest.Runner) {
			p.RequireEnqueuedArgs(Welcome{To: "ada@example.com"}, runlog.Key("other"))
		}, "key=other"},
		{"another delay", func(p *runlogtest.Runner) {
			p.RequireEnqueuedArgs(Welcome{To: "ada@example.com"}, runlog.RunIn(time.Hour))
		}, "run_in=1h0m0s"},
		{"another target", func(p *runlogtest.Runner) { p.RequireEnqueued("audit", nil, runlog.Target("x")) }, "target=x"},
		{"another kind", func(p *runlogtest.Runner) { p.RequireEnqueued("invoice", nil) }, `no job of kind "invoice"`},
		{"not enqueued, but it was", func(p *runlogtest.Runner) { p.RequireNotEnqueued("audit") }, `a job of kind "audit" was enqueued`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := failure(r, c.check)
			if !strings.Contains(got, c.want) {
				t.Fatalf("failure %q, want one saying %q", got, c.want)
			}
		})
	}
	// The failure lists what was enqueued.
	if got := failure(r, func(p *runlogtest.Runner) { p.RequireEnqueued("invoice", nil) }); !strings.Contains(got, "welcome {\"to\":\"ada@example.com\"} {key=welcome-ada@example.com run_in=1m0s}") {
		t.Fatalf("failure does not list the jobs: %q", got)
	}
}
