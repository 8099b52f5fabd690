package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// TestRetriesKnown: an outcome batch's retries go without a NOTIFY only
// when every one was recorded by the one UPDATE and its claim stopped at
// its limit before a pending job due strictly earlier than all of them.
func TestRetriesKnown(t *testing.T) {
	fast := func(earliest int64) *fastSettle { return &fastSettle{requeued: true, earliest: earliest} }
	tests := []struct {
		name string
		res  claimResult
		fast *fastSettle
		slow bool
		want bool
	}{
		{"a job due earlier waits", claimResult{more: true, next: 90}, fast(100), false, true},
		{"the job that waits is due with them", claimResult{more: true, next: 100}, fast(100), false, false},
		{"the job that waits is due after one", claimResult{more: true, next: 101}, fast(100), false, false},
		{"the claim took every due job", claimResult{exhausted: true, next: 90, hasNext: true}, fast(100), false, false},
		{"no claim", claimResult{}, fast(100), false, false},
		{"a retry was decided on its row", claimResult{more: true, next: 90}, fast(100), true, false},
		{"no retry by the UPDATE", claimResult{more: true, next: 90}, &fastSettle{}, true, false},
	}
	for _, tt := range tests {
		if got := retriesKnown(tt.res, tt.fast, tt.slow); got != tt.want {
			t.Errorf("%s: retriesKnown = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRetryWakesOtherNodes: a retry that no job due earlier waits before
// (the batch's claim took every due job) is announced to the other nodes,
// whose cached next due time does not know it.
func TestRetryWakesOtherNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := openTest(t, Options{Node: "a", PollEvery: time.Hour})
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+chanWake); err != nil {
		t.Fatal(err)
	}
	// announced waits for node a's next NOTIFY.
	announced := func(what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			n, err := listener.WaitForNotification(wctx)
			if err != nil {
				t.Fatalf("no NOTIFY from node a after %s: %v", what, err)
			}
			if n.Payload == "a" {
				return
			}
		}
	}
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 100, CapMS: 100}}
	if _, err := a.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}}); err != nil {
		t.Fatal(err)
	}
	announced("its enqueue")
	cs, err := a.Claim(ctx, 1000, store.Limits{Max: 1})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	outs := []store.Outcome{{ID: cs[0].ID, Attempt: 1, Class: retry.Retryable, AfterMS: -1, Error: "boom"}}
	more, err := a.Finish(ctx, 1010, func() uint32 { return 7 }, outs, store.Limits{Max: 1})
	if err != nil || len(more) != 0 {
		t.Fatalf("Finish: %v %v (the retry is not due yet)", more, err)
	}
	announced("the retry")
}

// TestClaimDoesNotWaitForAClosedBreaker: a claim admits jobs of a target
// whose breaker has failures but is closed without locking the breaker's
// row (admission leaves a closed breaker as it is), so it does not queue
// behind a transaction that holds the row, as an outcome batch of the
// target's failures does until its commit.
func TestClaimDoesNotWaitForAClosedBreaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := openTest(t, Options{Node: "a", PollEvery: time.Hour})
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 3, BaseMS: 100, CapMS: 100}}
	if _, err := s.Enqueue(ctx, 1000, []store.NewJob{{Spec: spec, Due: 1000}, {Spec: spec, Due: 2000}}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, 1000, store.Limits{Max: 1})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	outs := []store.Outcome{{ID: cs[0].ID, Attempt: 1, Class: retry.Retryable, AfterMS: -1, Error: "boom"}}
	if _, err := s.Finish(ctx, 1010, func() uint32 { return 7 }, outs, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	ts, err := s.Targets(ctx)
	if err != nil || len(ts) != 1 || ts[0].Breaker.State != retry.Closed || len(ts[0].Breaker.Fails) != 1 {
		t.Fatalf("the target's breaker after one failure: %+v %v, want closed with one failure (threshold %d)", ts, err, testCircuit.Threshold)
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM runlog_breakers WHERE target = 't' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := s.Claim(cctx, 2000, store.Limits{Max: 2})
	if err != nil {
		t.Fatalf("a claim while another transaction holds the closed breaker's row: %v (it waited for the lock)", err)
	}
	if len(got) != 2 {
		t.Fatalf("claimed %+v, want the retry and the second job", got)
	}
}
