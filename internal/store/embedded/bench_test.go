package embedded

import (
	"context"
	"fmt"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// BenchmarkClaim times one Claim of 16 due jobs on 4 targets (its
// decisions, its journal records and their fdatasync) and counts its
// allocations; the enqueue before it and the outcomes after it are not
// timed. Unlimited starts all 16; PerTarget2 starts 2 per target and holds
// the other 8 back (a Finish outside the timer then takes them).
func BenchmarkClaim(b *testing.B) {
	for _, bc := range []struct {
		name      string
		perTarget int
	}{{"Unlimited", 0}, {"PerTarget2", 2}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(b.TempDir(), Options{SnapshotBytes: -1, State: state.Config{Circuit: retry.DefaultCircuit()}, Now: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			jobs := make([]store.NewJob, 16)
			for i := range jobs {
				jobs[i] = store.NewJob{Due: 1, Spec: state.Spec{Kind: "k", Target: fmt.Sprintf("t%d", i%4), Payload: make([]byte, 50), Policy: retry.DefaultPolicy()}}
			}
			settle := func(now int64, cs []store.Claim, lim store.Limits) []store.Claim {
				outs := make([]store.Outcome, len(cs))
				for i, c := range cs {
					outs[i] = store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}
				}
				more, err := s.Finish(ctx, now, func() uint32 { return 0 }, outs, lim)
				if err != nil {
					b.Fatal(err)
				}
				return more
			}
			lim := store.Limits{Max: 16, PerTarget: bc.perTarget, Running: func(string) int { return 0 }}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now := int64(10 + 2*i)
				b.StopTimer()
				if _, err := s.Enqueue(ctx, now, jobs); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cs, err := s.Claim(ctx, now, lim)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if want := 16 - 8*min(bc.perTarget, 1); len(cs) != want {
					b.Fatalf("claimed %d, want %d", len(cs), want)
				}
				if more := settle(now+1, cs, store.Limits{Max: 16}); len(more) > 0 {
					settle(now+1, more, store.Limits{})
				}
				b.StartTimer()
			}
		})
	}
}
