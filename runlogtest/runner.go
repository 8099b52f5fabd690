package runlogtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// DrainTimeout bounds one Drain: a job still due or running after it
// fails the test (a handler that never returns, say).
const DrainTimeout = 20 * time.Second

// Runner is a real runlog.Runner on a temporary journal and a fake Clock,
// for a test: the code under test gets Runner.Runner, and the test drives
// time with Advance and Drain and checks what was enqueued.
type Runner struct {
	// Runner is the runner itself: give it to the code under test.
	*runlog.Runner
	// Clock is the runner's clock (Config.Clock).
	Clock *Clock

	t  testing.TB
	mu sync.Mutex
	// enqueued is every job enqueued so far, in order.
	enqueued []Enqueued // guarded by mu
}

// Enqueued is a job that was enqueued through a Runner: the request as the
// runner got it (Args resolved into Kind and Payload) and its result.
type Enqueued struct {
	runlog.JobRequest
	// ID is the job's id; Existing says its key was held by job ID and
	// nothing was added.
	ID       uint64
	Existing bool
}

// NewRunner opens a runner with cfg on a temporary directory of t, with a
// new Clock (cfg.Clock must be nil) and, unless cfg.Logger is set, no
// logs; it is closed when the test ends. Every enqueue through it is
// recorded (an enqueue middleware after cfg's). It fails t if the runner
// does not open.
func NewRunner(t testing.TB, cfg runlog.Config) *Runner {
	t.Helper()
	if cfg.Clock != nil {
		t.Fatal("runlogtest.NewRunner: leave Config.Clock nil; the runner gets a runlogtest.Clock (Runner.Clock)")
	}
	r := &Runner{Clock: NewClock(), t: t}
	cfg.Clock = r.Clock
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.EnqueueMiddleware = append(cfg.EnqueueMiddleware[:len(cfg.EnqueueMiddleware):len(cfg.EnqueueMiddleware)], r.record)
	rr, err := runlog.Open(t.TempDir(), cfg)
	if err != nil {
		t.Fatalf("runlogtest.NewRunner: %v", err)
	}
	r.Runner = rr
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
		defer cancel()
		if err := rr.Close(ctx); err != nil {
			t.Errorf("runlogtest: closing the runner: %v", err)
		}
	})
	return r
}

// record is the enqueue middleware that notes every enqueue that was
// accepted.
func (r *Runner) record(next runlog.EnqueueFunc) runlog.EnqueueFunc {
	return func(ctx context.Context, reqs []runlog.JobRequest) ([]runlog.EnqueueResult, error) {
		res, err := next(ctx, reqs)
		if err != nil {
			return res, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, req := range reqs {
			if req.Args != nil {
				req.Kind = req.Args.Kind()
				req.Payload, _ = json.Marshal(req.Args) // it encoded for the enqueue
			}
			r.enqueued = append(r.enqueued, Enqueued{JobRequest: req, ID: res[i].ID, Existing: res[i].Existing})
		}
		return res, nil
	}
}

// Drain runs the jobs that are due until none is due on the clock and
// none is running: every job due now has ended or waits for a later time
// (a retry's backoff, a breaker's cooldown, its RunAt). It fails the test
// after DrainTimeout. Call it from the test's goroutine.
func (r *Runner) Drain() {
	r.t.Helper()
	sub := r.Subscribe(64)
	defer sub.Close()
	poll := time.NewTicker(2 * time.Millisecond) // a breaker's deferral sends no event
	defer poll.Stop()
	deadline := time.NewTimer(DrainTimeout)
	defer deadline.Stop()
	for {
		st, err := r.Stats(context.Background())
		if err != nil {
			r.t.Fatalf("runlogtest: Drain: %v", err)
		}
		if st.Running == 0 && st.InFlight == 0 && (st.Pending == 0 || st.OldestDue.After(r.Clock.Now())) {
			return
		}
		select {
		case <-sub.Events():
		case <-poll.C:
		case <-deadline.C:
			r.t.Fatalf("runlogtest: Drain: after %v, %d jobs still run and %d are due; does a handler ignore its context?", DrainTimeout, st.Running, st.Pending)
		}
	}
}

// Advance moves the clock forward by d, then drains (see Drain).
func (r *Runner) Advance(d time.Duration) {
	r.t.Helper()
	r.Clock.Advance(d)
	r.Drain()
}

// Enqueued returns every job enqueued through the runner so far, in order.
func (r *Runner) Enqueued() []Enqueued {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Enqueued(nil), r.enqueued...)
}

// RequireEnqueued fails the test unless a job of kind was enqueued with
// payload (compared as JSON values, so field order and spacing do not
// matter; nil matches any payload) and the options opts set (each field
// an option sets must be equal: Target, Key, RunAt, RunIn, WithRetry,
// Timeout; the others are not compared). It returns the first such job.
func (r *Runner) RequireEnqueued(kind string, payload any, opts ...runlog.EnqueueOption) Enqueued {
	r.t.Helper()
	if e, ok := r.find(kind, payload, opts); ok {
		return e
	}
	r.t.Fatalf("runlogtest: no job of kind %q with payload %s and options %s was enqueued; enqueued: %s",
		kind, show(payload), showOptions(opts), r.describe())
	return Enqueued{}
}

// RequireEnqueuedArgs is RequireEnqueued for a typed job: its kind and
// payload are args'.
func (r *Runner) RequireEnqueuedArgs(args runlog.JobArgs, opts ...runlog.EnqueueOption) Enqueued {
	r.t.Helper()
	return r.RequireEnqueued(args.Kind(), args, opts...)
}

// RequireNotEnqueued fails the test if a job of kind was enqueued.
func (r *Runner) RequireNotEnqueued(kind string) {
	r.t.Helper()
	for _, e := range r.Enqueued() {
		if e.Kind == kind {
			r.t.Fatalf("runlogtest: a job of kind %q was enqueued (id %d, payload %s)", kind, e.ID, e.Payload)
		}
	}
}

// find returns the first recorded job that matches.
func (r *Runner) find(kind string, payload any, opts []runlog.EnqueueOption) (Enqueued, bool) {
	var want runlog.JobRequest
	for _, o := range opts {
		o(&want)
	}
	matches := func([]byte) bool { return true }
	if payload != nil {
		wantRaw := rawOf(payload)
		wantJSON, err := jsonValue(payload)
		if err != nil && wantRaw == nil {
			r.t.Fatalf("runlogtest: the expected payload: %v", err)
		}
		matches = func(got []byte) bool {
			if err == nil {
				if g, gerr := jsonValue(got); gerr == nil {
					return reflect.DeepEqual(g, wantJSON)
				}
			}
			return wantRaw != nil && bytes.Equal(got, wantRaw) // not JSON: the bytes
		}
	}
	for _, e := range r.Enqueued() {
		if e.Kind == kind && optionsMatch(want, e.JobRequest) && matches(e.Payload) {
			return e, true
		}
	}
	return Enqueued{}, false
}

// optionsMatch reports whether got has every field that want sets.
func optionsMatch(want, got runlog.JobRequest) bool {
	switch {
	case want.Target != "" && want.Target != got.Target,
		want.Key != "" && want.Key != got.Key,
		!want.RunAt.IsZero() && !want.RunAt.Equal(got.RunAt),
		want.Delay != 0 && want.Delay != got.Delay,
		want.Timeout != 0 && want.Timeout != got.Timeout,
		want.Retry != nil && (got.Retry == nil || *want.Retry != *got.Retry):
		return false
	}
	return true
}

// jsonValue decodes the JSON of v (raw bytes, or a value to encode) into
// plain values for comparison.
func jsonValue(v any) (any, error) {
	raw := rawOf(v)
	if raw == nil {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%T does not encode as JSON: %w", v, err)
		}
		raw = b
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// rawOf returns v's bytes when it is raw bytes, else nil.
func rawOf(v any) []byte {
	switch p := v.(type) {
	case []byte:
		return p
	case json.RawMessage:
		return p
	}
	return nil
}

// show renders an expected payload.
func show(v any) string {
	if v == nil {
		return "(any)"
	}
	if raw := rawOf(v); raw != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// showOptions renders the fields opts set.
func showOptions(opts []runlog.EnqueueOption) string {
	var want runlog.JobRequest
	for _, o := range opts {
		o(&want)
	}
	return describeRequest(want)
}

// describeRequest renders the options of a request that are set.
func describeRequest(q runlog.JobRequest) string {
	var parts []string
	add := func(name string, v any) { parts = append(parts, fmt.Sprintf("%s=%v", name, v)) }
	if q.Target != "" {
		add("target", q.Target)
	}
	if q.Key != "" {
		add("key", q.Key)
	}
	if !q.RunAt.IsZero() {
		add("run_at", q.RunAt)
	}
	if q.Delay != 0 {
		add("run_in", q.Delay)
	}
	if q.Timeout != 0 {
		add("timeout", q.Timeout)
	}
	if q.Retry != nil {
		add("retry", *q.Retry)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// describe lists what was enqueued, for a failure message.
func (r *Runner) describe() string {
	es := r.Enqueued()
	if len(es) == 0 {
		return "nothing"
	}
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n\t%d %s %s %s", e.ID, e.Kind, e.Payload, describeRequest(e.JobRequest))
	}
	return b.String()
}
