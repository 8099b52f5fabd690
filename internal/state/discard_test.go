package state

import (
	"testing"

	"github.com/runlog/runlog/retry"
)

// finishedState returns a state holding job 1 (key "k1") failed and job 2
// running.
func finishedState(t *testing.T) *State {
	t.Helper()
	s := New(Config{Circuit: retry.Circuit{Threshold: 5, Probes: 1}, Retention: &Retention{FailedMS: 1000, SucceededMS: 1000, CancelledMS: 1000}})
	pol := retry.Policy{Attempts: 1}
	s.Apply(&Op{Kind: OpEnqueue, ID: 1, At: 10, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Key: "k1", Payload: []byte("p"), Policy: pol}})
	s.Apply(&Op{Kind: OpEnqueue, ID: 2, At: 10, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}})
	s.Apply(&Op{Kind: OpStart, ID: 1, At: 20, Attempt: 1})
	s.Apply(&Op{Kind: OpFail, ID: 1, At: 30, Attempt: 1, Class: retry.Permanent, Error: "permanent failure: 404"})
	s.Apply(&Op{Kind: OpStart, ID: 2, At: 20, Attempt: 1})
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	t.Run("held", func(t *testing.T) {
		s := finishedState(t)
		j, _ := s.Job(1)
		s.Apply(&Op{Kind: OpDiscard, ID: 1, At: 40, Image: DiscardImage(j)})
		if !s.DiscardApplied() {
			t.Fatal("the discard of a failed job did not apply")
		}
		if _, ok := s.Job(1); ok {
			t.Fatal("job 1 is still held")
		}
		if _, ok := s.ByKey("k1"); ok {
			t.Fatal("the key of job 1 is still held")
		}
		if c := s.Counts(); c.Failed != 0 || c.Running != 1 {
			t.Fatalf("counts %+v, want none failed, 1 running", c)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		// The key is free: a new job takes it.
		s.Apply(&Op{Kind: OpEnqueue, ID: 3, At: 50, Due: 50, Spec: &Spec{Kind: "k", Key: "k1", Policy: retry.Policy{Attempts: 1}}})
		if id, ok := s.ByKey("k1"); !ok || id != 3 {
			t.Fatalf("key k1 is held by %d (%v), want job 3", id, ok)
		}
	})
	t.Run("evicted", func(t *testing.T) {
		s := finishedState(t)
		j, _ := s.Job(1)
		img := DiscardImage(j)
		var token uint16
		s.Done(func(j *Job, _ uint64, tk uint16) bool { token = tk; return false })
		if !s.Evict(1, token) {
			t.Fatal("job 1 was not evicted")
		}
		s.Apply(&Op{Kind: OpDiscard, ID: 1, At: 40, Image: img})
		if !s.DiscardApplied() || s.Counts().Failed != 0 {
			t.Fatalf("the discard of an evicted job: applied %v, counts %+v", s.DiscardApplied(), s.Counts())
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		// A second record of it (never written by a store) finds nothing
		// to uncount.
		s.Apply(&Op{Kind: OpDiscard, ID: 1, At: 41, Image: img})
		if s.DiscardApplied() {
			t.Fatal("a second discard of job 1 applied")
		}
	})
	t.Run("refused", func(t *testing.T) {
		s := finishedState(t)
		j2, _ := s.Job(2)
		if v := Discardable(j2); v != DiscardUnfinished {
			t.Fatalf("Discardable(running) = %d, want DiscardUnfinished", v)
		}
		img := DiscardImage(j2)
		img.State = Failed
		s.Apply(&Op{Kind: OpDiscard, ID: 2, At: 40, Image: img})
		if s.DiscardApplied() {
			t.Fatal("the discard of a running job applied")
		}
		// Cancelled while running: the attempt is still open.
		s.Apply(&Op{Kind: OpCancel, ID: 2, At: 41, Error: "stop"})
		j2, _ = s.Job(2)
		if v := Discardable(j2); v != DiscardAttemptOpen {
			t.Fatalf("Discardable(cancelled, attempt open) = %d, want DiscardAttemptOpen", v)
		}
		s.Apply(&Op{Kind: OpDiscard, ID: 2, At: 42, Image: DiscardImage(j2)})
		if _, ok := s.Job(2); !ok || s.DiscardApplied() {
			t.Fatal("a cancelled job with its attempt open was discarded")
		}
		s.Apply(&Op{Kind: OpRequeue, ID: 2, At: 43, Attempt: 1, Class: retry.Retryable, Due: 50})
		j2, _ = s.Job(2)
		if v := Discardable(j2); v != DiscardOK {
			t.Fatalf("Discardable after the attempt ended = %d, want DiscardOK", v)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	})
}
