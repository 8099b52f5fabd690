package runlog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// trace records the steps of attempts, safe for concurrent use.
type trace struct {
	mu    sync.Mutex
	steps []string
}

func (tr *trace) add(s string) {
	tr.mu.Lock()
	tr.steps = append(tr.steps, s)
	tr.mu.Unlock()
}

func (tr *trace) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.steps)
}

// named is middleware that records its name before and after the next step.
func named(tr *trace, name string) runlog.Middleware {
	return func(next runlog.AttemptFunc) runlog.AttemptFunc {
		return func(ctx context.Context, a runlog.AttemptInfo) error {
			tr.add(fmt.Sprintf("%s>%d/%d/%s/%s", name, a.JobID, a.Attempt, a.Kind, a.Target))
			err := next(ctx, a)
			tr.add(name + "<")
			return err
		}
	}
}

func TestMiddlewareWrapsEveryAttemptInOrder(t *testing.T) {
	t.Parallel()
	tr := &trace{}
	// permanentOnBadInput changes the outcome: a "bad input" error fails
	// the job at once instead of being retried.
	permanentOnBadInput := func(next runlog.AttemptFunc) runlog.AttemptFunc {
		return func(ctx context.Context, a runlog.AttemptInfo) error {
			err := next(ctx, a)
			if err != nil && strings.Contains(err.Error(), "bad input") {
				return runlog.Permanent(err)
			}
			return err
		}
	}
	r := openRunner(t, t.TempDir(), runlog.Config{
		Middleware: []runlog.Middleware{named(tr, "a"), named(tr, "b"), permanentOnBadInput},
		Handlers: map[string]runlog.Handler{
			"ok": runlog.Handle(func(ctx context.Context, _ []byte) error {
				if _, ok := runlog.AttemptFrom(ctx); !ok {
					return errors.New("the handler lost its attempt")
				}
				tr.add("handler")
				return nil
			}),
			"bad": runlog.Handle(func(context.Context, []byte) error { return errors.New("bad input") }),
		},
	})
	ctx := context.Background()
	id := mustEnqueue(t, r, "ok", nil, runlog.Target("t1"))
	waitState(t, r, id, runlog.StateSucceeded)
	want := []string{fmt.Sprintf("a>%d/1/ok/t1", id), fmt.Sprintf("b>%d/1/ok/t1", id), "handler", "b<", "a<"}
	if got := tr.get(); !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	bad := mustEnqueue(t, r, "bad", nil, fastRetry)
	j, err := r.Wait(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != runlog.StateFailed || j.Attempts != 1 {
		t.Fatalf("the middleware's Permanent was not applied: %s after %d attempts", j.State, j.Attempts)
	}
}

func TestMiddlewareMayNotCallNextOrLoseTheContext(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{}, 1)
	skip := func(next runlog.AttemptFunc) runlog.AttemptFunc {
		return func(ctx context.Context, a runlog.AttemptInfo) error {
			switch a.Kind {
			case "skipped":
				return nil // the handler does not run
			case "lost":
				return next(context.Background(), a)
			}
			return next(ctx, a)
		}
	}
	handler := runlog.Handle(func(context.Context, []byte) error { ran <- struct{}{}; return nil })
	r := openRunner(t, t.TempDir(), runlog.Config{
		Middleware: []runlog.Middleware{skip},
		Handlers:   map[string]runlog.Handler{"skipped": handler, "lost": handler},
	})
	ctx := context.Background()
	j, err := r.Wait(ctx, mustEnqueue(t, r, "skipped", nil))
	if err != nil || j.State != runlog.StateSucceeded {
		t.Fatalf("skipped: %+v %v", j, err)
	}
	j, err = r.Wait(ctx, mustEnqueue(t, r, "lost", nil, runlog.WithRetry(runlog.RetryPolicy{Attempts: 1, Base: time.Millisecond, Cap: time.Millisecond})))
	if err != nil || j.State != runlog.StateFailed || !strings.Contains(j.Reason, "derive it from the context") {
		t.Fatalf("lost context: %s %q %v", j.State, j.Reason, err)
	}
	select {
	case <-ran:
		t.Fatal("a handler ran")
	default:
	}
}

func TestLogAttemptsAndRecoverPanics(t *testing.T) {
	t.Parallel()
	var sink logSink
	logger := slog.New(slog.NewJSONHandler(&sink, nil))
	calls := 0
	r := openRunner(t, t.TempDir(), runlog.Config{
		Middleware: []runlog.Middleware{runlog.LogAttempts(logger), runlog.RecoverPanics(logger)},
		Handlers: map[string]runlog.Handler{"boom": runlog.Handle(func(context.Context, []byte) error {
			calls++
			if calls == 1 {
				panic("nil map")
			}
			return nil
		})},
	})
	id := mustEnqueue(t, r, "boom", nil, fastRetry, runlog.Target("t"))
	j, err := r.Wait(context.Background(), id)
	if err != nil || j.State != runlog.StateSucceeded || j.Attempts != 2 {
		t.Fatalf("job %+v %v", j, err)
	}
	if !strings.Contains(j.History[0].Error, "panic: nil map") || j.History[0].Outcome != "retryable" {
		t.Fatalf("first attempt %+v", j.History[0])
	}
	failed, succeeded := sink.find("runlog: attempt failed"), sink.find("runlog: attempt succeeded")
	panics := sink.find("runlog: handler panicked; the attempt counts as a retryable failure")
	if len(panics) != 1 || len(failed) != 1 || len(succeeded) != 1 {
		t.Fatalf("%d panic lines, %d failed and %d succeeded attempt lines", len(panics), len(failed), len(succeeded))
	}
	first, second := failed[0], succeeded[0]
	if first["level"] != "WARN" || first["outcome"] != "retryable" || !strings.Contains(fmt.Sprint(first["err"]), "panic: nil map") ||
		first["id"] != float64(id) || first["attempt"] != float64(1) || first["kind"] != "boom" || first["target"] != "t" {
		t.Fatalf("failed attempt's line %v", first)
	}
	if second["level"] != "INFO" || second["outcome"] != "success" || second["attempt"] != float64(2) {
		t.Fatalf("succeeded attempt's line %v", second)
	}
}

func TestEnqueueMiddleware(t *testing.T) {
	t.Parallel()
	var seen []runlog.EnqueueResult
	var mu sync.Mutex
	// stamp gives every job without a target the target "default" (on a
	// copy), refuses kind "forbidden" and notes the results.
	stamp := func(next runlog.EnqueueFunc) runlog.EnqueueFunc {
		return func(ctx context.Context, reqs []runlog.JobRequest) ([]runlog.EnqueueResult, error) {
			reqs = slices.Clone(reqs)
			for i := range reqs {
				if reqs[i].Kind == "forbidden" {
					return nil, fmt.Errorf("request %d: kind forbidden is not enqueued here", i)
				}
				if reqs[i].Target == "" {
					reqs[i].Target = "default"
				}
			}
			res, err := next(ctx, reqs)
			mu.Lock()
			seen = append(seen, res...)
			mu.Unlock()
			return res, err
		}
	}
	handlers := map[string]runlog.Handler{"ok": runlog.Handle(noop), "forbidden": runlog.Handle(noop)}
	runlog.AddHandler(handlers, func(context.Context, welcome) error { return nil })
	r := openRunner(t, t.TempDir(), runlog.Config{EnqueueMiddleware: []runlog.EnqueueMiddleware{stamp}, Handlers: handlers})
	ctx := context.Background()
	reqs := []runlog.JobRequest{{Kind: "ok", Delay: time.Hour}, {Args: welcome{To: "x"}, Target: "smtp", Delay: time.Hour}}
	res, err := r.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].Target != "" {
		t.Fatal("the caller's request was changed")
	}
	for i, want := range []string{"default", "smtp"} {
		j, err := r.Job(ctx, res[i].ID)
		if err != nil || j.Target != want {
			t.Fatalf("job %d: target %q (%v), want %q", i, j.Target, err, want)
		}
	}
	id := mustEnqueue(t, r, "ok", nil, runlog.RunIn(time.Hour)) // Enqueue comes through it too
	mu.Lock()
	if len(seen) != 3 || seen[2].ID != id {
		t.Fatalf("the middleware saw %v", seen)
	}
	mu.Unlock()
	if _, err := r.Enqueue(ctx, "forbidden", nil); err == nil || !strings.Contains(err.Error(), "forbidden is not enqueued") {
		t.Fatalf("refusal: %v", err)
	}
	st, err := r.Stats(ctx)
	if err != nil || st.Pending != 3 {
		t.Fatalf("pending %d (%v), want 3", st.Pending, err)
	}
}

func TestNilMiddlewareRefused(t *testing.T) {
	t.Parallel()
	for _, cfg := range []runlog.Config{{Middleware: []runlog.Middleware{nil}}, {EnqueueMiddleware: []runlog.EnqueueMiddleware{nil}}} {
		cfg.Logger = quietLogger()
		if _, err := runlog.Open(t.TempDir(), cfg); !errors.Is(err, runlog.ErrInvalid) {
			t.Fatalf("Open: %v, want ErrInvalid", err)
		}
	}
}
