package dashboard

import (
	"fmt"
	"time"

	"github.com/runlog/runlog"
)

// event is one step of a job's timeline.
type event struct {
	Kind string    // enqueued, wait, attempt, held, due, finished, dropped, retried
	At   time.Time // zero when it has no time of its own (a wait)
	Text string
	// Attempt is set for an attempt: its row, delivery log and all.
	Attempt *attemptView
	Bad     bool // shown as a failure
}

// timeline tells a job's story from what the engine keeps: the enqueue,
// every attempt kept in the history (with the wait before it: the queue,
// a backoff, a breaker), a retry by hand where the history shows one (an
// attempt after a permanent or unsafe outcome, which is never retried by
// itself), then the end, or what the job waits for now.
func timeline(j runlog.Job, attempts []attemptView, breaker *runlog.TargetStats, now time.Time) []event {
	var out []event
	if !j.EnqueuedAt.IsZero() {
		out = append(out, event{Kind: "enqueued", At: j.EnqueuedAt, Text: "Enqueued"})
	}
	if len(attempts) > 0 && attempts[0].N > 1 {
		out = append(out, event{Kind: "dropped", Text: fmt.Sprintf("Attempts 1 to %d are not kept (the history keeps the most recent ones).", attempts[0].N-1)})
	}
	prevEnd := j.EnqueuedAt
	prevOutcome := ""
	for i := range attempts {
		a := &attempts[i]
		switch {
		case prevOutcome == "permanent" || prevOutcome == "unsafe":
			out = append(out, event{Kind: "retried", Text: "Run again by hand (a retry: a fresh attempt budget)"})
		case !prevEnd.IsZero() && a.StartedAt.Sub(prevEnd) >= time.Second:
			why := "in the queue"
			if i > 0 || (len(attempts) > 0 && attempts[0].N > 1) {
				why = "backoff before the next attempt (or its breaker, or the pool)"
			}
			out = append(out, event{Kind: "wait", Text: fmt.Sprintf("Waited %s: %s", human(a.StartedAt.Sub(prevEnd)), why)})
		}
		text := fmt.Sprintf("Attempt %d started", a.N)
		bad := false
		if a.Running {
			text += fmt.Sprintf(", running for %s", human(a.Duration))
		} else {
			text += fmt.Sprintf(", ended %s after %s", a.Outcome, human(a.Duration))
			bad = a.Outcome != "success"
		}
		out = append(out, event{Kind: "attempt", At: a.StartedAt, Text: text, Attempt: a, Bad: bad})
		prevEnd, prevOutcome = a.EndedAt, a.Outcome
	}
	switch j.State {
	case runlog.StatePending:
		if breaker != nil && breaker.State == "open" && breaker.OpenUntil.After(now) {
			out = append(out, event{Kind: "held", At: breaker.OpenUntil, Text: fmt.Sprintf("Held: the breaker of %s is open until then; the job waits for it", j.Target), Bad: true})
		} else if breaker != nil && breaker.State == "half-open" {
			out = append(out, event{Kind: "held", Text: fmt.Sprintf("The breaker of %s is half-open: attempts wait for its probe to succeed", j.Target)})
		}
		if j.DueAt.After(now) {
			out = append(out, event{Kind: "due", At: j.DueAt, Text: "Next attempt due"})
		} else if !j.DueAt.IsZero() {
			out = append(out, event{Kind: "due", At: j.DueAt, Text: "Due since then: waiting for a free worker (or its target's limits)"})
		}
	case runlog.StateSucceeded, runlog.StateFailed, runlog.StateCancelled:
		text := "Finished: " + string(j.State)
		if j.Reason != "" {
			text += ": " + j.Reason
		}
		out = append(out, event{Kind: "finished", At: j.FinishedAt, Text: text, Bad: j.State != runlog.StateSucceeded})
	}
	return out
}
