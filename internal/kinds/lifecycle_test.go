package kinds_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
)

// syncBuffer is a log sink safe for the runner's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// targetEvents records the runner's TargetChanged calls.
type targetEvents struct {
	mu  sync.Mutex
	evs []runlog.TargetEvent
}

func (o *targetEvents) AttemptFinished(runlog.AttemptEvent) {}
func (o *targetEvents) JournalSynced(runlog.SyncEvent)      {}
func (o *targetEvents) TargetChanged(e runlog.TargetEvent) {
	o.mu.Lock()
	o.evs = append(o.evs, e)
	o.mu.Unlock()
}

func (o *targetEvents) list() []runlog.TargetEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]runlog.TargetEvent(nil), o.evs...)
}

// TestHTTPKindGoneDisablesTarget: a receiver that answers 410 Gone fails
// its job at once and disables its target (logged, observed, listed);
// the target's next job is accepted and kept pending, not delivered,
// while other targets are delivered; enabled by hand, it is delivered.
func TestHTTPKindGoneDisablesTarget(t *testing.T) {
	t.Parallel()
	var okHits atomic.Int32
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusGone)
			return
		}
		okHits.Add(1)
	}))
	defer gone.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()

	logs := &syncBuffer{}
	obs := &targetEvents{}
	r, err := runlog.Open(t.TempDir(), runlog.Config{
		Concurrency: 4,
		Retry:       runlog.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond},
		Breaker:     runlog.BreakerConfig{Threshold: 1000, Window: time.Minute, Cooldown: time.Millisecond, Probes: 1},
		Handlers:    kinds.Handlers(kinds.Config{}),
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
		Observer:    obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx := context.Background()
	target, err := kinds.HTTPTarget(gone.URL + "/gone")
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(url string) uint64 {
		t.Helper()
		tg, err := kinds.HTTPTarget(url)
		if err != nil {
			t.Fatal(err)
		}
		id, err := r.Enqueue(ctx, kinds.KindHTTP, kinds.HTTPRequest{URL: url, Method: "POST", Body: "{}"}, runlog.Target(tg))
		if err != nil {
			t.Fatalf("Enqueue to %s: %v", url, err)
		}
		return id
	}

	first := enqueue(gone.URL + "/gone")
	j := waitJob(t, r, first, finished)
	if j.State != runlog.StateFailed || j.Attempts != 1 || !strings.Contains(j.Reason, "410") {
		t.Fatalf("job to a gone receiver: %s after %d attempts (%q), want failed after 1", j.State, j.Attempts, j.Reason)
	}
	ts := targetOf(t, r, target)
	if !ts.Disabled || !strings.Contains(ts.DisabledReason, "410") || ts.DisabledAt.IsZero() {
		t.Fatalf("target after a 410: %+v", ts)
	}
	// The log line and the observer follow the write's fdatasync: the
	// state shows the disable as soon as it is applied.
	testwait.For(t, "the log line of the disable", func() bool {
		return strings.Contains(logs.String(), "target disabled") && strings.Contains(logs.String(), target)
	})
	if evs := obs.list(); len(evs) != 1 || !evs[0].Disabled || !evs[0].Gone || evs[0].Target != target {
		t.Fatalf("observer saw %+v", evs)
	}

	// Accepted, and held: the job enqueued later to another target is
	// delivered, and the held one has still not been attempted.
	held := enqueue(gone.URL + "/ok")
	after := enqueue(other.URL + "/x")
	if j := waitJob(t, r, after, finished); j.State != runlog.StateSucceeded {
		t.Fatalf("job to another target: %s (%q)", j.State, j.LastError)
	}
	if j, _ := r.Job(ctx, held); j.State != runlog.StatePending || j.Attempts != 0 || okHits.Load() != 0 {
		t.Fatalf("held job %s after %d attempts, %d deliveries; want pending, none", j.State, j.Attempts, okHits.Load())
	}
	st, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ts := range st.Targets {
		found = found || (ts.Target == target && ts.Disabled && ts.Pending == 1)
	}
	if !found {
		t.Fatalf("Stats.Targets does not show %s disabled with 1 pending: %+v", target, st.Targets)
	}

	if _, err := r.EnableTarget(ctx, other.URL); !errors.Is(err, runlog.ErrTargetNotDisabled) {
		t.Fatalf("EnableTarget of a target that is not disabled: %v", err)
	}
	en, err := r.EnableTarget(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if en.Disabled || en.Target != target {
		t.Fatalf("EnableTarget answered %+v", en)
	}
	if j := waitJob(t, r, held, finished); j.State != runlog.StateSucceeded || okHits.Load() != 1 {
		t.Fatalf("held job after the enable: %s, %d deliveries", j.State, okHits.Load())
	}
	if !strings.Contains(logs.String(), "target enabled") {
		t.Fatalf("no log line of the enable:\n%s", logs.String())
	}
	if evs := obs.list(); len(evs) != 2 || evs[1].Disabled {
		t.Fatalf("observer saw %+v", evs)
	}
}

// targetOf returns target as Runner.Targets lists it.
func targetOf(t *testing.T, r *runlog.Runner, target string) runlog.TargetStats {
	t.Helper()
	ts, err := r.Targets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ts {
		if s.Target == target {
			return s
		}
	}
	t.Fatalf("target %s not listed in %+v", target, ts)
	return runlog.TargetStats{}
}
