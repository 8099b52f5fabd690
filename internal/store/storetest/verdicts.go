package storetest

import (
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// verdictCases check the Verdicts that Finish sets on outcomes.
var verdictCases = []struct {
	name string
	run  func(t *testing.T, open Opener)
}{
	{"Verdicts", func(t *testing.T, open Opener) { Verdicts(t, openDefault(t, open), false) }},
}

// Verdicts records, in one Finish on s, outcomes that end their jobs in
// every way (a success, a retry, a snooze, attempts spent, a permanent
// failure, the attempt of a job cancelled while it ran), a stale outcome
// (an attempt never started) and a second outcome of one attempt, and
// checks the Verdict each was given: none for the last two; for the others
// none, or what the job says after (store.VerdictOf), all or none of them
// known. With known, a store must give every recorded outcome its
// verdict.
func Verdicts(t *testing.T, s store.Store, known bool) {
	t.Helper()
	one := spec("k", "")
	one.Policy = policy(1)
	ok := enqueueOne(t, s, T0, T0, spec("k", ""))
	again := enqueueOne(t, s, T0, T0, spec("k", ""))
	snoozed := enqueueOne(t, s, T0, T0, spec("k", ""))
	spent := enqueueOne(t, s, T0, T0, one)
	permanent := enqueueOne(t, s, T0, T0, spec("k", ""))
	cancelled := enqueueOne(t, s, T0, T0, one)
	cs := claim(t, s, T0, all)
	if len(cs) != 6 {
		t.Fatalf("claimed %v, want the 6 jobs", ids(cs))
	}
	by := make(map[uint64]store.Claim)
	for _, c := range cs {
		by[c.ID] = c
	}
	if _, err := s.Cancel(ctx, T0+1, cancelled, "not needed"); err != nil {
		t.Fatal(err)
	}
	stale := by[ok]
	stale.Attempt = 2
	snooze := outcome(by[snoozed], 0, "")
	snooze.Snooze, snooze.AfterMS = true, 50
	outs := []store.Outcome{
		outcome(by[ok], retry.Success, ""),
		outcome(by[again], retry.Retryable, "boom"),
		snooze,
		outcome(by[spent], retry.Retryable, "boom"),
		outcome(by[permanent], retry.Permanent, "bad request"),
		outcome(by[cancelled], retry.Retryable, "context canceled"),
		outcome(stale, retry.Success, ""),
		outcome(by[again], retry.Success, "a second outcome of one attempt"),
	}
	const recorded = 6 // the first six; the last two are not
	if _, err := s.Finish(ctx, T0+10, fixedRandom, outs, store.Limits{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	for _, o := range outs[recorded:] {
		if o.Verdict != (store.Verdict{}) {
			t.Errorf("job %d attempt %d: an outcome that was not recorded has the verdict %+v, want none", o.ID, o.Attempt, o.Verdict)
		}
	}
	wantDied := map[uint64]string{spent: "gave up after 1 attempts: boom", permanent: "permanent failure: bad request"}
	given := 0
	for _, o := range outs[:recorded] {
		if !o.Verdict.Known {
			if o.Verdict != (store.Verdict{}) {
				t.Errorf("job %d: the verdict %+v is not known but says something", o.ID, o.Verdict)
			}
			continue
		}
		given++
		j := job(t, s, o.ID)
		if want := store.VerdictOf(&j, o.Attempt); o.Verdict != want {
			t.Errorf("job %d (%v, reason %q): verdict %+v, want %+v", o.ID, j.State, j.Reason(), o.Verdict, want)
		}
		if reason, died := wantDied[o.ID]; o.Verdict.Died != died || died && !strings.Contains(o.Verdict.Reason, reason) {
			t.Errorf("job %d: verdict %+v, want died %v with reason %q", o.ID, o.Verdict, died, reason)
		}
	}
	if given != 0 && given != recorded || known && given != recorded {
		t.Errorf("%d of the %d recorded outcomes have a verdict, want all (known %v) or none", given, recorded, known)
	}
	wantState(t, s, cancelled, state.Cancelled)
	wantState(t, s, again, state.Pending)
}
