package storetest

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// HeldJob is a job FillHeld made: its id, its number in the fill (its
// kind, target and key follow from it) and the state it left it in.
type HeldJob struct {
	ID    uint64
	N     int
	State state.JobState
}

// Kind is the job's kind: k0 to k4.
func (h HeldJob) Kind() string { return "k" + strconv.Itoa(h.N%5) }

// Target is the job's target: t-done for one job in a thousand (each
// runs, in a full batch: a target with no job pending), else t0 to t6.
func (h HeldJob) Target() string {
	if h.N%1000 == 1 {
		return "t-done"
	}
	return "t" + strconv.Itoa(h.N%7)
}

// Key is the job's idempotency key: key-N on every tenth job, else "".
func (h HeldJob) Key() string {
	if h.N%10 != 0 {
		return ""
	}
	return "key-" + strconv.Itoa(h.N)
}

// HeldFill says how FillHeld fills a store.
type HeldFill struct {
	// N is the number of jobs.
	N int
	// From and To are the times (ms since the Unix epoch) of the first and
	// the last batch; the batches between are spread evenly, so that the
	// finished jobs fall in as many retention partitions as a store that
	// ran that long holds.
	From, To int64
	// Settle, when not nil, is called after every batch but the last: the
	// embedded store's waits until the finished jobs are in its table.
	Settle func() error
}

// heldBatch is how many jobs FillHeld enqueues at once.
const heldBatch = 5000

// PendingAfter is how long after HeldFill.To the jobs FillHeld leaves
// pending are due: a runner whose clock stands at To runs none of them.
const PendingAfter = int64(24 * time.Hour / time.Millisecond)

// FillHeld makes f.N jobs in mixed states through s's API, in batches of
// 5000, and returns them in id order. Kinds k0-k4, targets t0-t6 and
// t-done, a key on every tenth (HeldJob). Nine in ten of a batch are due at once and
// run: one in four of those fails for good, the others succeed; the rest
// are due PendingAfter after f.To and stay pending, but for every 37th of
// the batch, cancelled.
func FillHeld(tb testing.TB, s store.Store, f HeldFill) []HeldJob {
	tb.Helper()
	ctx := context.Background()
	out := make([]HeldJob, 0, f.N)
	batches := (f.N + heldBatch - 1) / heldBatch
	policy := retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}
	for b := range batches {
		now := f.From
		if batches > 1 {
			now += (f.To - f.From) * int64(b) / int64(batches-1)
		}
		done := b * heldBatch
		m := min(heldBatch, f.N-done)
		run := m * 9 / 10
		jobs := make([]store.NewJob, m)
		for i := range jobs {
			h := HeldJob{N: done + i}
			jobs[i] = store.NewJob{Due: now, Spec: state.Spec{Kind: h.Kind(), Target: h.Target(), Key: h.Key(), Payload: []byte("p"), Policy: policy}}
			if i >= run {
				jobs[i].Due = f.To + PendingAfter
			}
		}
		res, err := s.Enqueue(ctx, now, jobs)
		if err != nil {
			tb.Fatal(err)
		}
		first := len(out)
		for i, r := range res {
			out = append(out, HeldJob{ID: r.ID, N: done + i, State: state.Pending})
		}
		mine := out[first:]
		index := func(id uint64) int {
			i, ok := slices.BinarySearchFunc(mine, id, func(h HeldJob, id uint64) int { return cmp.Compare(h.ID, id) })
			if !ok {
				tb.Fatalf("the store answered with job %d, which this batch did not enqueue", id)
			}
			return i
		}
		cs, err := s.Claim(ctx, now, store.Limits{Max: run})
		if err != nil {
			tb.Fatal(err)
		}
		outs := make([]store.Outcome, 0, len(cs))
		for i, c := range cs {
			class, st := retry.Success, state.Succeeded
			if i%4 == 1 {
				class, st = retry.Permanent, state.Failed
			}
			outs = append(outs, store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: class, AfterMS: -1, Error: "x"})
			mine[index(c.ID)].State = st
		}
		if _, err := s.Finish(ctx, now, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
			tb.Fatal(err)
		}
		for i := 0; i < len(mine); i += 37 {
			if mine[i].State == state.Pending {
				if _, err := s.Cancel(ctx, now, mine[i].ID, "c"); err != nil {
					tb.Fatal(err)
				}
				mine[i].State = state.Cancelled
			}
		}
		if f.Settle != nil && b < batches-1 {
			if err := f.Settle(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return out
}
