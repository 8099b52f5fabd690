package state

import (
	"testing"

	"github.com/runlog/runlog/retry"
)

// TestExpireDropsExactlyWhatRanOut: retention by state, a per-kind
// override, key release, and counts. A job is kept at least its retention
// and dropped with its partition, at most a sixteenth of it later: the
// succeeded and cancelled jobs (finished at 100, kept 1000) expire at 1100
// into the bucket of width 62 that ends at 1116; the failed one (5000)
// into the bucket of width 312 that ends at 5304; the short kind's (10)
// into the 1 ms bucket that ends at 111.
func TestExpireDropsExactlyWhatRanOut(t *testing.T) {
	t.Parallel()
	r := &Retention{SucceededMS: 1000, CancelledMS: 1000, FailedMS: 5000, PerKind: []KindRetention{{Kind: "short", SucceededMS: 10}}}
	s := New(Config{Circuit: retry.DefaultCircuit(), Retention: r})
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
	for id, want := range map[uint64]int64{1: 1116, 2: 5304, 3: 1116, 4: 111} {
		if j, _ := s.Job(id); j.Part() != want {
			t.Fatalf("job %d in partition %d, want %d", id, j.Part(), want)
		}
	}

	// At the partition's end a job has expired; one ms before, it has not.
	cases := []struct {
		at   int64
		kept []uint64
	}{
		{110, []uint64{1, 2, 3, 4, 5}},
		{111, []uint64{1, 2, 3, 5}},
		{1115, []uint64{1, 2, 3, 5}},
		{1116, []uint64{2, 5}},
		{5303, []uint64{2, 5}},
		{5304, []uint64{5}},
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
	// Retention <= 0 keeps forever (once an expire puts it in force).
	s.Apply(&Op{Kind: OpExpire, At: 6000, Retention: &Retention{}})
	run(6, 200, OpSucceed)
	if j, _ := s.Job(6); j.Part() != PartForever {
		t.Fatalf("job 6 in partition %d under a zero retention", j.Part())
	}
	s.Apply(&Op{Kind: OpExpire, At: 1 << 50, Retention: &Retention{}})
	if _, ok := s.Job(6); !ok {
		t.Fatal("a zero retention dropped a job")
	}
}

// TestOrphanOfAProbeFreesTheBreaker: a crash during the only half-open probe
// neither opens nor closes the breaker, but frees the probe slot, so the
// next due job can probe (the breaker never stays stuck half-open), and the
// crash is no failure of the target.
func TestOrphanOfAProbeFreesTheBreaker(t *testing.T) {
	t.Parallel()
	c := retry.Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 100, Probes: 1}
	s := New(Config{Circuit: c})
	pol := retry.Policy{Attempts: 5, BaseMS: 1, CapMS: 1}
	for id := uint64(1); id <= 2; id++ {
		s.Apply(&Op{Kind: OpEnqueue, ID: id, Due: 0, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}})
	}
	step := func(op Op) { s.Apply(&op) }
	step(s.Admit(1, 0))
	step(s.Settle(1, 1, retry.Retryable, -1, "503", nil, 10, 0)) // opens until 110
	if b := s.Breaker("t"); b.State != retry.Open {
		t.Fatalf("breaker %+v", b)
	}
	probe := s.Admit(2, 200) // half-open: job 2 is the probe
	if probe.Kind != OpStart {
		t.Fatalf("probe: %+v", probe)
	}
	step(probe)
	step(s.Orphan(2, 300)) // the process died during the probe
	b := s.Breaker("t")
	if b.State != retry.HalfOpen || b.Busy != 0 {
		t.Fatalf("after an interrupted probe the breaker is %+v, want half-open with the slot free", b)
	}
	j, _ := s.Job(2)
	if j.Fails() != 1 || j.State != Pending || j.Attempts()[0].Class != 0 || !j.Attempts()[0].Ended {
		t.Fatalf("interrupted job %+v", j)
	}
	if op := s.Admit(2, 300); op.Kind != OpStart {
		t.Fatalf("next probe was not admitted: %+v", op)
	}
}
