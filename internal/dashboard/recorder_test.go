package dashboard

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/runlog/runlog"
)

// manualClock is a clock the test moves.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// start is a minute boundary.
var start = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func TestRecorder(t *testing.T) {
	t.Parallel()
	clk := &manualClock{t: start}
	r := newRecorder(clk.now)
	ev := func(target, outcome string) {
		r.AttemptFinished(runlog.AttemptEvent{Kind: "http", Target: target, Outcome: outcome, Duration: time.Millisecond})
	}
	ev("a", "success")
	ev("a", "success")
	ev("b", "retryable")
	ev("b", "mystery") // not an outcome runlog defines: ignored
	r.JournalSynced(runlog.SyncEvent{Records: 3})
	clk.advance(90 * time.Second) // 09:01:30
	ev("a", "permanent")
	ev("a", "unsafe")

	tests := []struct {
		name   string
		series []Minute
		last   Minute // the current minute (09:01)
		prev   Minute // 09:00
	}{
		{"overall", r.LastHour(), Minute{Permanent: 1, Unsafe: 1}, Minute{Succeeded: 2, Retryable: 1}},
		{"a", r.TargetLastHour("a"), Minute{Permanent: 1, Unsafe: 1}, Minute{Succeeded: 2}},
		{"b", r.TargetLastHour("b"), Minute{}, Minute{Retryable: 1}},
		{"unknown", r.TargetLastHour("zzz"), Minute{}, Minute{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.series) != SeriesMinutes {
				t.Fatalf("%d minutes, want %d", len(tt.series), SeriesMinutes)
			}
			last, prev := tt.series[SeriesMinutes-1], tt.series[SeriesMinutes-2]
			if want := start.Add(time.Minute); !last.Start.Equal(want) {
				t.Errorf("last minute starts %v, want %v", last.Start, want)
			}
			tt.last.Start, tt.prev.Start = last.Start, prev.Start
			if last != tt.last || prev != tt.prev {
				t.Errorf("last two minutes %+v %+v, want %+v %+v", prev, last, tt.prev, tt.last)
			}
			for i, m := range tt.series {
				if want := start.Add(time.Duration(i-SeriesMinutes+2) * time.Minute); !m.Start.Equal(want) {
					t.Fatalf("minute %d starts %v, want %v", i, m.Start, want)
				}
			}
		})
	}
	if got := r.LastHour()[SeriesMinutes-1].Failed(); got != 2 {
		t.Errorf("Failed() = %d, want 2", got)
	}
	targets := r.Targets()
	slices.Sort(targets)
	if !slices.Equal(targets, []string{"a", "b"}) {
		t.Errorf("Targets() = %v, want [a b]", targets)
	}

	// An hour later, 09:00 has left the window, 09:01 is the oldest minute.
	clk.advance(59 * time.Minute)
	s := r.LastHour()
	if s[0] != (Minute{Start: start.Add(time.Minute), Permanent: 1, Unsafe: 1}) {
		t.Errorf("oldest minute after an hour: %+v", s[0])
	}
	if got := r.TargetLastHour("b"); slices.ContainsFunc(got, func(m Minute) bool { return m.Retryable > 0 }) {
		t.Error("a count older than an hour is still in the series")
	}
	if got := r.Targets(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Targets() an hour later = %v, want [a]", got)
	}
	// The ring slot of 09:01 is reused for 10:01: old counts must not leak.
	clk.advance(time.Minute)
	ev("a", "success")
	s = r.TargetLastHour("a")
	if s[SeriesMinutes-1] != (Minute{Start: start.Add(61 * time.Minute), Succeeded: 1}) {
		t.Errorf("reused slot: %+v", s[SeriesMinutes-1])
	}
}

func TestRecorderBoundsTargets(t *testing.T) {
	t.Parallel()
	clk := &manualClock{t: start}
	r := newRecorder(clk.now)
	for i := range MaxRecordedTargets + 5 {
		r.AttemptFinished(runlog.AttemptEvent{Target: fmt.Sprint(i), Outcome: "success"})
	}
	if n := len(r.Targets()); n != MaxRecordedTargets {
		t.Errorf("%d targets kept, want the bound %d", n, MaxRecordedTargets)
	}
	if got := r.LastHour()[SeriesMinutes-1].Succeeded; got != MaxRecordedTargets+5 {
		t.Errorf("overall counted %d, want every attempt (%d)", got, MaxRecordedTargets+5)
	}
}

// TestRecorderModel checks the ring buffers against a plain list of events:
// for any sequence of events and clock steps, each minute of LastHour and
// TargetLastHour holds exactly the events of that minute, for the minutes of
// the last hour.
func TestRecorderModel(t *testing.T) {
	t.Parallel()
	outcomes := []string{"success", "retryable", "permanent", "unsafe"}
	rapid.Check(t, func(t *rapid.T) {
		clk := &manualClock{t: start}
		r := newRecorder(clk.now)
		type event struct {
			at      time.Time
			target  string
			outcome string
		}
		var events []event
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			if rapid.Bool().Draw(t, "tick") {
				clk.advance(time.Duration(rapid.Int64Range(0, int64(30*time.Minute)).Draw(t, "step")))
				continue
			}
			e := event{at: clk.now(), target: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "target"), outcome: rapid.SampledFrom(outcomes).Draw(t, "outcome")}
			events = append(events, e)
			r.AttemptFinished(runlog.AttemptEvent{Target: e.target, Outcome: e.outcome})
		}
		model := func(target string) []Minute {
			cur := clk.now().Truncate(time.Minute)
			out := make([]Minute, SeriesMinutes)
			for i := range out {
				out[i].Start = cur.Add(time.Duration(i-SeriesMinutes+1) * time.Minute)
			}
			for _, e := range events {
				i := SeriesMinutes - 1 - int(cur.Sub(e.at.Truncate(time.Minute))/time.Minute)
				if i < 0 || target != "" && e.target != target {
					continue
				}
				switch e.outcome {
				case "success":
					out[i].Succeeded++
				case "retryable":
					out[i].Retryable++
				case "permanent":
					out[i].Permanent++
				case "unsafe":
					out[i].Unsafe++
				}
			}
			return out
		}
		if got, want := r.LastHour(), model(""); !slices.Equal(got, want) {
			t.Fatalf("LastHour\n got %v\nwant %v", got, want)
		}
		for _, target := range []string{"a", "b", "c"} {
			if got, want := r.TargetLastHour(target), model(target); !slices.Equal(got, want) {
				t.Fatalf("TargetLastHour(%s)\n got %v\nwant %v", target, got, want)
			}
		}
	})
}

func TestRecorderConcurrent(t *testing.T) {
	t.Parallel()
	r := NewRecorder()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 1000 {
				r.AttemptFinished(runlog.AttemptEvent{Target: fmt.Sprint(g % 3), Outcome: "success"})
			}
		})
	}
	wg.Wait()
	total := 0
	for _, m := range r.LastHour() {
		total += m.Succeeded
	}
	if total != 8000 {
		t.Errorf("counted %d of 8000 concurrent events", total)
	}
}
