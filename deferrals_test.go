package runlog_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// TestDeferrals: once two failures open a target's breaker, a job of that
// target is deferred; Deferrals lists its deferrals, each with the two
// failed jobs that opened the breaker (the embedded journal keeps them;
// PostgreSQL keeps none and says so).
func TestDeferrals(t *testing.T) {
	t.Parallel()
	r := openRunner(t, t.TempDir(), runlog.Config{
		Breaker: runlog.BreakerConfig{Threshold: 2, Window: time.Minute, Cooldown: time.Hour, Probes: 1},
		Retry:   runlog.RetryPolicy{Attempts: 1, Base: time.Millisecond, Cap: time.Millisecond},
		Handlers: map[string]runlog.Handler{"call": runlog.Handle(func(context.Context, []byte) error {
			return errors.New("503")
		})},
	})
	ctx := context.Background()
	target := runlog.Target("https://partner.example:443")
	var failed []uint64
	for range 2 {
		id := mustEnqueue(t, r, "call", nil, target)
		waitState(t, r, id, runlog.StateFailed)
		failed = append(failed, id)
	}
	other := mustEnqueue(t, r, "call", nil, runlog.Target("https://elsewhere.example"))
	waitState(t, r, other, runlog.StateFailed)
	held := mustEnqueue(t, r, "call", nil, target)
	if os.Getenv(envTestStore) == "postgres" {
		d, err := r.Deferrals(ctx, held)
		if err != nil || d.Kept {
			t.Fatalf("Deferrals on PostgreSQL: %+v, %v; want Kept false", d, err)
		}
		return
	}
	d := testwait.Until(t, "the job to be deferred", func() (runlog.Deferrals, bool) {
		d, err := r.Deferrals(ctx, held)
		if err != nil {
			t.Fatal(err)
		}
		return d, len(d.List) > 0
	})
	if !d.Kept || !d.Complete || d.Target != "https://partner.example:443" {
		t.Fatalf("deferrals %+v: want kept, complete, of the partner's target", d)
	}
	first := d.List[0]
	var ids []uint64
	for _, f := range first.After {
		ids = append(ids, f.Job)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, failed) || !first.Due.After(first.At) {
		t.Fatalf("the deferral %+v names jobs %v; want the failures that opened the breaker, %v, and a later due time", first, ids, failed)
	}
	if _, err := r.Deferrals(ctx, 424242); !errors.Is(err, runlog.ErrNotFound) {
		t.Fatalf("Deferrals of an unknown job: %v, want ErrNotFound", err)
	}
}
