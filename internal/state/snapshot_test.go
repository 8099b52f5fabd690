package state

import (
	"bytes"
	"testing"
	"testing/iotest"

	"github.com/runlog/runlog/retry"
)

// sampleState is a small state with a job in every state, a history, a key
// and an open breaker.
func sampleState() *State {
	s := New(Config{Circuit: retry.Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 500, Probes: 1}})
	pol := retry.Policy{Attempts: 3, BaseMS: 10, CapMS: 100}
	for id := uint64(1); id <= 5; id++ {
		s.Apply(&Op{Kind: OpEnqueue, ID: id, At: 10, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Key: string(rune('a' + id)), Payload: []byte("p"), Policy: pol}})
	}
	s.Apply(&Op{Kind: OpStart, ID: 1, At: 20, Attempt: 1})
	s.Apply(&Op{Kind: OpRetry, ID: 1, At: 30, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "503", Output: []byte("busy"), Due: 40})
	s.Apply(&Op{Kind: OpStart, ID: 2, At: 20, Attempt: 1})
	s.Apply(&Op{Kind: OpCancel, ID: 3, At: 20, Error: "no"})
	return s
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := sampleState()
	body := s.AppendSnapshot(nil)
	r, err := FromSnapshot(s.cfg, body)
	if err != nil {
		t.Fatal(err)
	}
	if ok, diff := s.Equal(r); !ok {
		t.Fatal(diff)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	// Every truncation is refused, never a panic or a shorter state.
	for n := range len(body) {
		if _, err := FromSnapshot(s.cfg, body[:n]); err == nil {
			t.Fatalf("a snapshot cut at %d of %d bytes was accepted", n, len(body))
		}
	}
}

func FuzzFromSnapshot(f *testing.F) {
	f.Add(sampleState().AppendSnapshot(nil))
	f.Add(New(Config{}).AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, b)
		if err != nil {
			return
		}
		if err := s.Check(); err != nil {
			t.Fatalf("accepted a snapshot that breaks an invariant: %v", err)
		}
		if again := s.AppendSnapshot(nil); !bytes.Equal(again, b) {
			t.Fatalf("accepted snapshot does not re-encode to its bytes")
		}
	})
}

// TestFromSnapshotReaderMatches: streaming the body through a reader that
// returns a few bytes at a time gives the same state as decoding it whole,
// and a cut body fails the same way.
func TestFromSnapshotReaderMatches(t *testing.T) {
	s := sampleState()
	body := s.AppendSnapshot(nil)
	r, err := FromSnapshotReader(s.cfg, iotest.OneByteReader(bytes.NewReader(body)), len(body))
	if err != nil {
		t.Fatal(err)
	}
	if ok, diff := s.Equal(r); !ok {
		t.Fatal(diff)
	}
	for n := range len(body) {
		if _, err := FromSnapshotReader(s.cfg, bytes.NewReader(body[:n]), n); err == nil {
			t.Fatalf("a body cut at %d of %d bytes was accepted", n, len(body))
		}
		if _, err := FromSnapshotReader(s.cfg, bytes.NewReader(body[:n]), len(body)); err == nil {
			t.Fatalf("a reader that ends at %d of %d bytes was accepted", n, len(body))
		}
	}
}
