package runlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// logSink collects a JSON slog handler's lines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// find returns the records whose msg is msg and whose attributes include
// every pair of attrs (compared as text).
func (s *logSink) find(msg string, attrs ...string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(s.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != msg {
			continue
		}
		ok := true
		for i := 0; i+1 < len(attrs); i += 2 {
			v, _ := json.Marshal(rec[attrs[i]])
			if strings.Trim(string(v), `"`) != attrs[i+1] {
				ok = false
			}
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out
}

// jobEvents is a runlog.JobObserver that records what it is told.
type jobEvents struct {
	mu       sync.Mutex
	enqueued map[string]int
	finished []runlog.JobEvent
	breakers []runlog.BreakerEvent
}

func (o *jobEvents) AttemptFinished(runlog.AttemptEvent) {}
func (o *jobEvents) JournalSynced(runlog.SyncEvent)      {}
func (o *jobEvents) JobsEnqueued(kind string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.enqueued[kind] += n
}
func (o *jobEvents) JobFinished(e runlog.JobEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished = append(o.finished, e)
}
func (o *jobEvents) BreakerChanged(e runlog.BreakerEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.breakers = append(o.breakers, e)
}

// ended returns the event of job id's end, if there was one.
func (o *jobEvents) ended(id uint64) (runlog.JobEvent, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var last runlog.JobEvent
	n := 0
	for _, e := range o.finished {
		if e.ID == id {
			last, n = e, n+1
		}
	}
	return last, n
}

// sawBreaker reports whether target's breaker was reported going to state.
func (o *jobEvents) sawBreaker(target, to string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.breakers {
		if e.Target == target && e.To == to {
			return true
		}
	}
	return false
}

// TestLifecycleLogsAndEvents checks the logs and JobObserver events of a
// job's end (succeeded, died of a permanent failure, of its last retryable
// failure, of a panic, cancelled), of a panic (with the stack) and of a
// breaker opening, half-opening and closing.
func TestLifecycleLogsAndEvents(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	obs := &jobEvents{enqueued: map[string]int{}}
	r := openRunner(t, t.TempDir(), runlog.Config{
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Observer: obs,
		Breaker:  runlog.BreakerConfig{Threshold: 2, Window: time.Minute, Cooldown: 300 * time.Millisecond, Probes: 1},
		Handlers: map[string]runlog.Handler{
			"ok":    runlog.Handle(func(context.Context, []byte) error { return nil }),
			"perm":  runlog.Handle(func(context.Context, []byte) error { return runlog.Permanent(errors.New("bad input")) }),
			"flaky": runlog.Handle(func(context.Context, []byte) error { return errors.New("503 from api") }),
			"boom":  runlog.Handle(func(context.Context, []byte) error { panic("handler bug") }),
		},
	})
	ctx := context.Background()
	fast := runlog.WithRetry(runlog.RetryPolicy{Attempts: 2, Base: time.Millisecond, Cap: time.Millisecond})
	okID := mustEnqueue(t, r, "ok", nil, runlog.Target("web"))
	permID := mustEnqueue(t, r, "perm", nil, runlog.Target("web"))
	flakyID := mustEnqueue(t, r, "flaky", nil, runlog.Target("api"), fast)
	boomID := mustEnqueue(t, r, "boom", nil, runlog.Target("web"), runlog.WithRetry(runlog.RetryPolicy{Attempts: 1, Base: 1, Cap: 1}))
	laterID := mustEnqueue(t, r, "ok", nil, runlog.RunAt(time.Now().Add(time.Hour)))

	waitState(t, r, okID, runlog.StateSucceeded)
	waitState(t, r, permID, runlog.StateFailed)
	waitState(t, r, flakyID, runlog.StateFailed)
	waitState(t, r, boomID, runlog.StateFailed)
	if err := r.Cancel(ctx, laterID, "not needed"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		id     uint64
		state  runlog.State
		kind   string
		reason string
	}{
		{okID, runlog.StateSucceeded, "ok", ""},
		{permID, runlog.StateFailed, "perm", "bad input"},
		{flakyID, runlog.StateFailed, "flaky", "503 from api"},
		{boomID, runlog.StateFailed, "boom", "panic: handler bug"},
		{laterID, runlog.StateCancelled, "ok", "not needed"},
	} {
		e := testwait.Until(t, "the end of job "+want.kind, func() (runlog.JobEvent, bool) {
			e, n := obs.ended(want.id)
			return e, n > 0
		})
		if _, n := obs.ended(want.id); n != 1 || e.State != want.state || e.Kind != want.kind || !strings.Contains(e.Reason, want.reason) {
			t.Errorf("job %d (%s): %d end events, the last %+v; want one, %s, reason %q", want.id, want.kind, n, e, want.state, want.reason)
		}
		if want.state == runlog.StateFailed {
			if recs := logs.find("runlog: job failed for good", "id", itoa(want.id), "kind", want.kind); len(recs) != 1 || !strings.Contains(recs[0]["reason"].(string), want.reason) || recs[0]["target"] == "" {
				t.Errorf("job %d (%s): death logs %v", want.id, want.kind, recs)
			}
		}
	}
	if recs := logs.find("runlog: job failed for good"); len(recs) != 3 {
		t.Errorf("%d death logs, want 3 (a success or a cancel is no death)", len(recs))
	}
	obs.mu.Lock()
	if obs.enqueued["ok"] != 2 || obs.enqueued["perm"] != 1 || obs.enqueued["flaky"] != 1 || obs.enqueued["boom"] != 1 {
		t.Errorf("enqueued by kind: %v", obs.enqueued)
	}
	obs.mu.Unlock()

	// The panic: logged at error with the stack that raised it.
	recs := logs.find("runlog: handler panicked; the attempt counts as a retryable failure", "id", itoa(boomID), "kind", "boom", "panic", "handler bug")
	if len(recs) != 1 || recs[0]["level"] != "ERROR" || !strings.Contains(recs[0]["stack"].(string), "lifecycle_test.go") {
		t.Errorf("panic logs: %v", recs)
	}

	// api's two failures opened its breaker; past the cooldown it is seen
	// half-open, and a good probe closes it.
	testwait.For(t, "the breaker of api to be seen open, then half-open", func() bool { return obs.sawBreaker("api", "half-open") })
	if !obs.sawBreaker("api", "open") || len(logs.find("runlog: breaker opened: jobs of this target wait until it half-opens", "target", "api")) != 1 {
		t.Errorf("no open breaker reported or logged: %+v\n%s", obs.breakers, logs.buf.String())
	}
	probe := mustEnqueue(t, r, "ok", nil, runlog.Target("api"))
	waitState(t, r, probe, runlog.StateSucceeded)
	testwait.For(t, "the breaker of api to be seen closed", func() bool { return obs.sawBreaker("api", "closed") })
	if len(logs.find("runlog: breaker closed: the target answers again", "target", "api", "from", "half-open")) != 1 {
		t.Errorf("the closing is not logged:\n%s", logs.buf.String())
	}
}

// TestReplayIsLogged checks the log lines of an open: one before the
// replay, one after with the records read, the jobs and the time taken.
func TestReplayIsLogged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := runlog.Config{Logger: quietLogger(), SnapshotBytes: -1, Handlers: map[string]runlog.Handler{"ok": runlog.Handle(func(context.Context, []byte) error { return nil })}}
	r, err := runlog.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		mustEnqueue(t, r, "ok", nil, runlog.RunAt(time.Now().Add(time.Hour)))
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	r, err = runlog.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if len(logs.find("runlog: opening the journal: loading the newest snapshot and replaying the records after it", "dir", dir)) != 1 {
		t.Errorf("no line before the replay:\n%s", logs.buf.String())
	}
	recs := logs.find("runlog: journal open", "dir", dir, "records", "5", "jobs", "5", "pending", "5")
	if len(recs) != 1 || recs[0]["took"] == nil || recs[0]["bytes"].(float64) <= 0 {
		t.Errorf("the line after the replay: %v\n%s", recs, logs.buf.String())
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }
