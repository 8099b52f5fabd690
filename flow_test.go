package runlog_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// TestSlowStartCurve is the slow start test: 10 k jobs deferred
// behind an open breaker; when it closes, the target's attempts in flight
// follow the ramp, 1, 2, 4, 8, 16 per round (each attempt held until the
// round is released), never more than the window the runner shows, then
// the whole pool once the window reaches SlowStart (32). The curve is
// logged.
func TestSlowStartCurve(t *testing.T) {
	t.Parallel()
	var (
		healthy  atomic.Bool
		inflight atomic.Int32
		started  atomic.Int32 // attempts of healthy handlers begun
		ended    atomic.Int32 // and returned
		mu       sync.Mutex
		gate     = make(chan struct{})
	)
	round := func() chan struct{} { mu.Lock(); defer mu.Unlock(); return gate }
	r := openRunner(t, t.TempDir(), runlog.Config{
		Concurrency: 64,
		Breaker:     runlog.BreakerConfig{Threshold: 2, Window: time.Minute, Cooldown: 100 * time.Millisecond, Probes: 1, SlowStart: 32},
		Handlers: map[string]runlog.Handler{
			"k": runlog.Handle(func(ctx context.Context, _ []byte) error {
				if !healthy.Load() {
					return errors.New("503")
				}
				g := round()
				started.Add(1)
				inflight.Add(1)
				defer ended.Add(1)
				defer inflight.Add(-1)
				select {
				case <-g:
				case <-ctx.Done():
				}
				return nil
			}),
		},
	})
	ctx := context.Background()
	slow := runlog.WithRetry(runlog.RetryPolicy{Attempts: 2, Base: time.Hour, Cap: time.Hour})
	for range 2 {
		id := mustEnqueue(t, r, "k", nil, runlog.Target("api"), slow)
		testwait.For(t, "a failure", func() bool { j, _ := r.Job(ctx, id); return j.Attempts == 1 && j.State == runlog.StatePending })
	}
	target := func() runlog.TargetStats {
		st, err := r.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ts := range st.Targets {
			if ts.Target == "api" {
				return ts
			}
		}
		return runlog.TargetStats{}
	}
	// Open, or half-open already when the check comes more than the
	// cooldown (100 ms) after the second failure (a loaded machine).
	if ts := target(); ts.State != "open" && ts.State != "half-open" {
		t.Fatalf("after 2 failures the breaker is %q", ts.State)
	}
	reqs := make([]runlog.JobRequest, 10_000)
	for i := range reqs {
		reqs[i] = runlog.JobRequest{Kind: "k", Target: "api"}
	}
	if _, err := r.EnqueueMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	healthy.Store(true)
	// The probe runs alone.
	testwait.For(t, "the probe", func() bool { return inflight.Load() == 1 })
	release := func() {
		mu.Lock()
		close(gate)
		gate = make(chan struct{})
		mu.Unlock()
	}
	release()
	testwait.For(t, "the breaker to close with a ramp", func() bool { ts := target(); return ts.State == "closed" && ts.RampWindow > 0 })
	var curve []int
	for len(curve) < 8 {
		type seen struct {
			Curve                []int
			Window, Busy, Flight int
			Pending, Running     int
		}
		// The attempts in flight are read before the window: the window
		// only grows during the ramp, so n never exceeds it unless the
		// ramp let too many start (read after, a window read just before
		// a round's outcomes were recorded would pass for that round).
		got := testwait.Until(t, "the round's attempts to start", func() (seen, bool) {
			n := int(inflight.Load())
			ts := target()
			window := ts.RampWindow
			if window == 0 {
				window = 64 // the ramp is over: the pool bounds it
			}
			return seen{curve, window, ts.RampInFlight, n, ts.Pending, ts.Running}, n >= window
		})
		n, window := got.Flight, got.Window
		if n > window {
			t.Fatalf("%d attempts in flight with a window of %d (curve so far %v)", n, window, curve)
		}
		curve = append(curve, n)
		if target().RampWindow == 0 {
			break
		}
		begun := started.Load()
		release()
		// Every attempt of this round has returned (the next round's
		// may have begun already: the window grows with each success).
		testwait.For(t, "the round to end", func() bool { return ended.Load() >= begun })
	}
	// The last gate stays open: an attempt that starts from now on (the
	// finisher refills the slots of those released here) must not wait
	// for a release that never comes, or Close waits for it until its
	// deadline.
	mu.Lock()
	close(gate)
	mu.Unlock()
	t.Logf("attempts in flight per round after the outage: %v", curve)
	if want := []int{1, 2, 4, 8, 16, 64}; !slices.Equal(curve, want) {
		t.Fatalf("attempts in flight per round %v, want %v", curve, want)
	}
}

// EnvLimit60s, set to 1, makes TestRateLimitRealClock run the full
// test: 60 s of wall-clock time, 20 k jobs, the total checked too.
const EnvLimit60s = "RUNLOG_TEST_LIMIT_60S"

// TestRateLimitRealClock is the rate limit test on a runner and the
// system clock: a limit of 100/s with a burst of 10 set through
// Runner.SetLimit, a backlog far above it, a restart half way: the starts
// (each attempt's start time, as the runner recorded it) of every window
// of 1 s lie within 110. With RUNLOG_TEST_LIMIT_60S=1 it
// runs 60 s over 20 k jobs and checks the total is within 5 % of 6,000
// (otherwise 4 s over 2 k jobs, the bound only: the total depends on the
// machine keeping up, which a test must not assert).
func TestRateLimitRealClock(t *testing.T) {
	t.Parallel()
	rateLimitRealClock(t, func(r *runlog.Runner) error {
		return r.SetLimit(context.Background(), "api", runlog.Limit{Rate: 100, Burst: 10})
	}, func(int) runlog.JobRequest { return runlog.JobRequest{Kind: "k", Target: "api"} })
}

// rateLimitRealClock runs TestRateLimitRealClock's test with the limit
// that setLimit sets on the runner, over the jobs of req (by their index).
func rateLimitRealClock(t *testing.T, setLimit func(*runlog.Runner) error, req func(i int) runlog.JobRequest) {
	jobs, span := 2_000, 4*time.Second
	long := os.Getenv(EnvLimit60s) == "1"
	if long {
		jobs, span = 20_000, 60*time.Second
	}
	dir := t.TempDir()
	var (
		mu  sync.Mutex
		ran []runlog.AttemptInfo
	)
	cfg := runlog.Config{
		Concurrency: 64,
		Logger:      quietLogger(),
		Handlers: map[string]runlog.Handler{"k": runlog.Handle(func(ctx context.Context, _ []byte) error {
			info, _ := runlog.AttemptFrom(ctx)
			mu.Lock()
			ran = append(ran, info)
			mu.Unlock()
			return nil
		})},
	}
	if os.Getenv(envTestStore) == "postgres" {
		t.Skip("the restart reopens the journal directory")
	}
	ctx := context.Background()
	r, err := runlog.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := setLimit(r); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := 0; i < jobs; i += 1000 {
		reqs := make([]runlog.JobRequest, min(1000, jobs-i))
		for k := range reqs {
			reqs[k] = req(i + k)
		}
		if _, err := r.EnqueueMany(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	<-time.After(time.Until(began.Add(span / 2)))
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err = runlog.Open(dir, cfg); err != nil {
		t.Fatal(err)
	}
	<-time.After(time.Until(began.Add(span)))
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err = runlog.Open(dir, cfg); err != nil { // to read the attempts; nothing is due under the limit yet
		t.Fatal(err)
	}
	defer r.Close(ctx)
	mu.Lock()
	seen := slices.Clone(ran)
	mu.Unlock()
	var starts []time.Time
	for _, a := range seen {
		j, err := r.Job(ctx, a.JobID)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range j.History {
			if h.N == a.Attempt && h.StartedAt.Before(began.Add(span)) {
				starts = append(starts, h.StartedAt)
			}
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	j, worst := 0, 0
	for i := range starts {
		for starts[i].Sub(starts[j]) >= time.Second {
			j++
		}
		worst = max(worst, i-j+1)
	}
	t.Logf("%d starts in %v; at most %d in a window of 1 s", len(starts), span, worst)
	if worst > 110 {
		t.Errorf("%d attempts started within 1 s; the limit of 100/s with a burst of 10 allows 110", worst)
	}
	if long {
		if n := float64(len(starts)); n < 6000*0.95 || n > 6000*1.05 {
			t.Errorf("%d attempts started in 60 s; want 6,000 ± 5 %%", len(starts))
		}
	}
}

// TestLimitConfig: invalid configured limits are refused by Open with
// ErrInvalid, a bad limit by SetLimit too, and Stats shows the limit in
// force and its tokens for configured and run-time limits.
func TestLimitConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []runlog.Config{
		{RateLimit: runlog.Limit{Rate: -1}},
		{RateLimit: runlog.Limit{Burst: 3}},
		{Limits: map[string]runlog.Limit{"x": {Rate: 1, Burst: -2}}},
		{Limits: map[string]runlog.Limit{"x": {Rate: 2e6}}},
		{MaxRetryAfter: -time.Second},
	} {
		if _, err := runlog.Open(t.TempDir(), cfg); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("Open with %+v: %v, want ErrInvalid", cfg, err)
		}
	}
	r := openRunner(t, t.TempDir(), runlog.Config{
		Handlers: map[string]runlog.Handler{"k": runlog.Handle(noop)},
		Limits:   map[string]runlog.Limit{"a": {Rate: 2.5, Burst: 4}},
	})
	ctx := context.Background()
	if err := r.SetLimit(ctx, "b", runlog.Limit{Rate: 0.0001}); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("SetLimit of 0.0001/s: %v, want ErrInvalid", err)
	}
	if err := r.SetLimit(ctx, "b", runlog.Limit{Rate: 7}); err != nil {
		t.Fatal(err)
	}
	st, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]runlog.TargetStats{}
	for _, ts := range st.Targets {
		got[ts.Target] = ts
	}
	if a := got["a"]; a.Limit != (runlog.Limit{Rate: 2.5, Burst: 4}) || a.Tokens != 4 {
		t.Errorf("configured target a: %+v", a)
	}
	if b := got["b"]; b.Limit != (runlog.Limit{Rate: 7, Burst: 1}) || b.Tokens != 1 {
		t.Errorf("run-time target b: %+v", b)
	}
}
