package harness_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runlog/runlog/bench/internal/harness"
	"github.com/runlog/runlog/bench/internal/harness/harnesstest"
)

func open(t *testing.T, o harnesstest.MemoryOptions) harness.Driver {
	t.Helper()
	d, err := harnesstest.Memory(o)(t.Context(), harness.Config{Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

func TestRunW1(t *testing.T) {
	tests := []struct {
		name      string
		o         harnesstest.MemoryOptions
		wantDup   int
		wantBatch bool
	}{
		{"correct", harnesstest.MemoryOptions{}, 0, true},
		{"no batch", harnesstest.MemoryOptions{NoBatch: true}, 0, false},
		{"duplicates are caught", harnesstest.MemoryOptions{Duplicate: 10}, 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r harness.Result
			err := harness.RunW1(t.Context(), open(t, tt.o), harness.W1Params{N: 100, Concurrency: 4, BatchSize: 30, Limit: 10 * time.Second}, &r)
			if err != nil {
				t.Fatal(err)
			}
			if r.N != 100 || r.Missing != 0 || r.Duplicates != tt.wantDup {
				t.Fatalf("N %d missing %d duplicates %d; want 100, 0, %d", r.N, r.Missing, r.Duplicates, tt.wantDup)
			}
			if (r.EnqueueBatchRate > 0) != tt.wantBatch || r.EnqueueRate <= 0 || r.ProcessRate <= 0 || r.WallSeconds <= 0 {
				t.Fatalf("rates %+v: want enqueue, processing, wall and batch=%v", r, tt.wantBatch)
			}
		})
	}
}

func TestRunW3CountsAttempts(t *testing.T) {
	var r harness.Result
	err := harness.RunW3(t.Context(), open(t, harnesstest.MemoryOptions{Duplicate: 5}), harness.W3Params{N: 50, Concurrency: 4, BatchSize: 10, Limit: 10 * time.Second, Settle: 10 * time.Millisecond}, &r)
	if err != nil {
		t.Fatal(err)
	}
	// Every 5th job runs a 4th time after its success: a duplicate and an
	// extra attempt each.
	if r.Completed != 50 || r.Missing != 0 || r.Duplicates != 10 || r.ExtraAttempts != 10 {
		t.Fatalf("completed %d missing %d duplicates %d extra %d; want 50, 0, 10, 10", r.Completed, r.Missing, r.Duplicates, r.ExtraAttempts)
	}
}

// stuck never runs a job.
type stuck struct{ harness.Driver }

func (stuck) Start(context.Context, harness.Handler) error { return nil }

func TestRunW1ReportsADrainThatNeverEnds(t *testing.T) {
	var r harness.Result
	err := harness.RunW1(t.Context(), stuck{open(t, harnesstest.MemoryOptions{})}, harness.W1Params{N: 10, Concurrency: 2, BatchSize: 5, Limit: 50 * time.Millisecond}, &r)
	if err == nil {
		t.Fatal("RunW1 succeeded though no job ran")
	}
}

func TestRunW2(t *testing.T) {
	var r harness.Result
	err := harness.RunW2(t.Context(), open(t, harnesstest.MemoryOptions{}), harness.W2Params{Duration: 200 * time.Millisecond, Producers: 2, Concurrency: 4, Outstanding: 8}, &r)
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed == 0 || r.CompleteRate <= 0 || r.P99Millis < r.P50Millis || r.Outstanding != 8 || r.Producers != 2 {
		t.Fatalf("W2 result %+v", r)
	}
}

// failing fails every enqueue.
type failing struct{ harness.Driver }

var errDown = errors.New("down")

func (failing) Enqueue(context.Context, harness.Payload) error { return errDown }

func TestEnqueueErrorsSurface(t *testing.T) {
	var r harness.Result
	err := harness.RunW1(t.Context(), failing{open(t, harnesstest.MemoryOptions{})}, harness.W1Params{N: 10, Concurrency: 2, BatchSize: 5, Limit: time.Second}, &r)
	if !errors.Is(err, errDown) {
		t.Fatalf("RunW1 = %v, want the enqueue error", err)
	}
	err = harness.RunW2(t.Context(), failing{open(t, harnesstest.MemoryOptions{})}, harness.W2Params{Duration: time.Second, Producers: 2, Concurrency: 2, Outstanding: 4}, &r)
	if !errors.Is(err, errDown) {
		t.Fatalf("RunW2 = %v, want the enqueue error", err)
	}
}
