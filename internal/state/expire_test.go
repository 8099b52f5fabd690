package state

import (
	"testing"

	"github.com/runlog/runlog/retry"
)

// TestExpireDropsExactlyWhatRanOut: retention by state, a per-kind
// override, key release, and counts.
func TestExpireDropsExactlyWhatRanOut(t *testing.T) {
	s := New(Config{Circuit: retry.DefaultCircuit()})
	pol := retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}
	enq := func(id uint64, kind, key string) {
		s.Apply(&Op{Kind: OpEnqueue, ID: id, At: 0, Due: 0, Spec: &Spec{Kind: kind, Target: "t", Key: key, Policy: pol}})
	}
	run := func(id uint64, at int64, end Kind) {
		s.Apply(&Op{Kind: OpStart, ID: id, At: at, Attempt: 1})
		class := retry.Success
		if end == OpFail {
			class = retry.Permanent
		}
		s.Apply(&Op{Kind: end, ID: id, At: at, Attempt: 1, Class: class})
	}
	enq(1, "k", "a") // succeeded at 100
	enq(2, "k", "")  // failed at 100
	enq(3, "k", "")  // cancelled at 100
	enq(4, "short", "")
	enq(5, "k", "") // pending
	run(1, 100, OpSucceed)
	run(2, 100, OpFail)
	s.Apply(&Op{Kind: OpCancel, ID: 3, At: 100, Error: "no"})
	run(4, 100, OpSucceed)
	r := &Retention{SucceededMS: 1000, CancelledMS: 1000, FailedMS: 5000, PerKind: []KindRetention{{Kind: "short", SucceededMS: 10}}}

	// Exactly at the boundary a job has expired; one ms before, it has not.
	cases := []struct {
		at   int64
		kept []uint64
	}{
		{109, []uint64{1, 2, 3, 4, 5}},
		{110, []uint64{1, 2, 3, 5}},
		{1099, []uint64{1, 2, 3, 5}},
		{1100, []uint64{2, 5}},
		{5100, []uint64{5}},
	}
	for _, c := range cases {
		s.Apply(&Op{Kind: OpExpire, At: c.at, Retention: r})
		var got []uint64
		s.Scan(0, false, func(j *Job) bool { got = append(got, j.ID); return true })
		if len(got) != len(c.kept) {
			t.Fatalf("at %d kept %v, want %v", c.at, got, c.kept)
		}
		for i := range got {
			if got[i] != c.kept[i] {
				t.Fatalf("at %d kept %v, want %v", c.at, got, c.kept)
			}
		}
		if err := s.Check(); err != nil {
			t.Fatalf("at %d: %v", c.at, err)
		}
	}
	if _, ok := s.ByKey("a"); ok {
		t.Fatal("the expired job's key is still held")
	}
	if c := s.Counts(); c.Total() != 1 || c.Pending != 1 {
		t.Fatalf("counts after expiry: %+v", c)
	}
	// The key is free again: a new job may take it.
	enq(6, "k", "a")
	if id, ok := s.ByKey("a"); !ok || id != 6 {
		t.Fatalf("key after re-enqueue: %d %v", id, ok)
	}
	// Retention <= 0 keeps forever.
	run(6, 200, OpSucceed)
	s.Apply(&Op{Kind: OpExpire, At: 1 << 50, Retention: &Retention{}})
	if _, ok := s.Job(6); !ok {
		t.Fatal("a zero retention dropped a job")
	}
}
