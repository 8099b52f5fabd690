package runlog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// welcome is a typed job's payload: its type names its kind.
type welcome struct{ To string }

func (welcome) Kind() string { return "welcome" }

// invoice is a second typed payload, whose kind has no handler in the tests.
type invoice struct{ N int }

func (invoice) Kind() string { return "invoice" }

// badKind names the empty kind.
type badKind struct{}

func (badKind) Kind() string { return "" }

func TestTypedJobRunsWithItsValue(t *testing.T) {
	t.Parallel()
	got := make(chan welcome, 2)
	handlers := map[string]runlog.Handler{}
	runlog.AddHandler(handlers, func(ctx context.Context, w welcome) error {
		got <- w
		return nil
	})
	r := openRunner(t, t.TempDir(), runlog.Config{Handlers: handlers})
	ctx := context.Background()
	id, err := r.EnqueueArgs(ctx, welcome{To: "ada@example.com"}, runlog.Target("smtp"))
	if err != nil {
		t.Fatal(err)
	}
	if w := <-got; w.To != "ada@example.com" {
		t.Fatalf("handler got %+v", w)
	}
	j := waitState(t, r, id, runlog.StateSucceeded)
	if j.Kind != "welcome" || j.Target != "smtp" || string(j.Payload) != `{"To":"ada@example.com"}` {
		t.Fatalf("job %+v", j)
	}
	// The batch path takes the value too, and leaves the requests as they were.
	reqs := []runlog.JobRequest{{Args: welcome{To: "b@example.com"}}}
	res, err := r.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].Kind != "" || reqs[0].Payload != nil {
		t.Fatalf("EnqueueMany changed its request: %+v", reqs[0])
	}
	if w := <-got; w.To != "b@example.com" {
		t.Fatalf("handler got %+v", w)
	}
	waitState(t, r, res[0].ID, runlog.StateSucceeded)
}

func TestEnqueueRefusesWhatNoHandlerTakes(t *testing.T) {
	t.Parallel()
	handlers := map[string]runlog.Handler{"raw": runlog.Handle(noop)}
	runlog.AddHandler(handlers, func(context.Context, welcome) error { return nil })
	r := openRunner(t, t.TempDir(), runlog.Config{Handlers: handlers})
	ctx := context.Background()
	cases := []struct {
		name    string
		enqueue func() error
		want    error // nil: accepted
	}{
		{"typed value", func() error { _, err := r.EnqueueArgs(ctx, welcome{}); return err }, nil},
		{"typed value, no handler", func() error { _, err := r.EnqueueArgs(ctx, invoice{N: 1}); return err }, runlog.ErrUnknownKind},
		{"nil args", func() error { _, err := r.EnqueueArgs(ctx, nil); return err }, runlog.ErrInvalid},
		{"empty kind", func() error { _, err := r.EnqueueArgs(ctx, badKind{}); return err }, runlog.ErrInvalid},
		{"untyped, its type", func() error { _, err := r.Enqueue(ctx, "welcome", welcome{To: "x"}); return err }, nil},
		{"untyped, a pointer to its type", func() error { _, err := r.Enqueue(ctx, "welcome", &welcome{To: "x"}); return err }, nil},
		{"untyped, raw JSON", func() error { _, err := r.Enqueue(ctx, "welcome", []byte(`{"To":"x"}`)); return err }, nil},
		{"untyped, nil", func() error { _, err := r.Enqueue(ctx, "welcome", nil); return err }, nil},
		{"untyped, another type", func() error { _, err := r.Enqueue(ctx, "welcome", 42); return err }, runlog.ErrInvalid},
		{"untyped, another kind's type", func() error { _, err := r.Enqueue(ctx, "welcome", invoice{}); return err }, runlog.ErrInvalid},
		{"raw handler takes any value", func() error { _, err := r.Enqueue(ctx, "raw", map[string]int{"a": 1}); return err }, nil},
		{"args and a mismatched kind", func() error {
			_, err := r.EnqueueJob(ctx, runlog.JobRequest{Kind: "raw", Args: welcome{}})
			return err
		}, runlog.ErrInvalid},
		{"args and the same kind", func() error {
			_, err := r.EnqueueJob(ctx, runlog.JobRequest{Kind: "welcome", Args: welcome{}})
			return err
		}, nil},
		{"args and a payload", func() error {
			_, err := r.EnqueueJob(ctx, runlog.JobRequest{Args: welcome{}, Payload: []byte(`{}`)})
			return err
		}, runlog.ErrInvalid},
		{"args under a raw kind's handler", func() error {
			_, err := r.EnqueueJob(ctx, runlog.JobRequest{Args: invoice{}})
			return err
		}, runlog.ErrUnknownKind},
		{"a batch with one unknown typed job adds nothing", func() error {
			_, err := r.EnqueueMany(ctx, []runlog.JobRequest{{Args: welcome{}}, {Args: invoice{}}})
			return err
		}, runlog.ErrUnknownKind},
		{"RunAt and RunIn", func() error {
			_, err := r.EnqueueArgs(ctx, welcome{}, runlog.RunAt(time.Now()), runlog.RunIn(time.Hour))
			return err
		}, runlog.ErrInvalid},
		{"negative RunIn", func() error { _, err := r.EnqueueArgs(ctx, welcome{}, runlog.RunIn(-time.Second)); return err }, runlog.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.enqueue()
			if c.want == nil && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	// The refusal of another type names both types.
	_, err := r.Enqueue(ctx, "welcome", 42)
	if err == nil || !strings.Contains(err.Error(), "runlog_test.welcome") || !strings.Contains(err.Error(), "int") {
		t.Fatalf("refusal does not name the types: %v", err)
	}
}

func TestTypedHandlerUnderAnotherKindRefused(t *testing.T) {
	t.Parallel()
	_, err := runlog.Open(t.TempDir(), runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"email": runlog.HandleTyped(func(context.Context, welcome) error { return nil }),
	}})
	if !errors.Is(err, runlog.ErrInvalid) || !strings.Contains(err.Error(), `"welcome"`) {
		t.Fatalf("Open: %v, want ErrInvalid naming the kind", err)
	}
}

func TestAddHandlerPanicsOnMistakes(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, welcome) error { return nil }
	cases := []struct {
		name string
		add  func()
		want string
	}{
		{"nil map", func() { runlog.AddHandler(nil, ok) }, "needs a map"},
		{"twice", func() {
			hs := map[string]runlog.Handler{}
			runlog.AddHandler(hs, ok)
			runlog.AddHandler(hs, ok)
		}, "has a handler already"},
		{"empty kind", func() {
			runlog.AddHandler(map[string]runlog.Handler{}, func(context.Context, badKind) error { return nil })
		}, "empty kind"},
		{"nil func", func() { runlog.AddHandler[welcome](map[string]runlog.Handler{}, nil) }, "is nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				p := recover()
				if s, _ := p.(string); !strings.Contains(s, c.want) {
					t.Fatalf("panic %v, want one saying %q", p, c.want)
				}
			}()
			c.add()
		})
	}
}

func TestRunInUsesTheRunnersClock(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r := openRunner(t, t.TempDir(), runlog.Config{Clock: clock, Handlers: map[string]runlog.Handler{"k": runlog.Handle(noop)}})
	id := mustEnqueue(t, r, "k", nil, runlog.RunIn(time.Hour))
	j, err := r.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(time.Hour); !j.DueAt.Equal(want) {
		t.Fatalf("due %v, want %v (an hour on the runner's clock)", j.DueAt, want)
	}
}
