package state

import (
	"bytes"
	"errors"
	"strings"
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
	s.Apply(&Op{Kind: OpRequeue, ID: 1, At: 30, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "503", Output: []byte("busy"), Due: 40})
	s.Apply(&Op{Kind: OpStart, ID: 2, At: 20, Attempt: 1})
	s.Apply(&Op{Kind: OpCancel, ID: 3, At: 20, Error: "no"})
	s.Apply(&Op{Kind: OpEnqueue, ID: 6, At: 10, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol,
		Queue: "bulk", Priority: 3, Schedule: "nightly", Tick: 10}})
	// An enable by hand ends the failing run the requeue began, so that
	// the sample has no snapshot section (lifecycle.go).
	enable := TargetOp("t", false, "", 40)
	s.Apply(&enable)
	return s
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
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

// TestSnapshotSections checks the version 3 body's sections part: a state
// without sections is written as version 2; a section this build does not
// know is refused as newer; an empty or unordered sections part is refused.
func TestSnapshotSections(t *testing.T) {
	t.Parallel()
	cfg := Config{Circuit: retry.DefaultCircuit()}
	v2 := sampleState().AppendSnapshot(nil)
	if v2[0] != 2 {
		t.Fatalf("a state without sections is written in version %d, want 2", v2[0])
	}
	v3 := func(tail ...byte) []byte {
		b := append([]byte{sectionsVersion}, v2[1:]...)
		return append(b, tail...)
	}
	tests := []struct {
		name  string
		b     []byte
		want  string
		newer bool
	}{
		{"no sections part", v3(), "sections", false},
		{"zero sections", v3(0), "0 sections", false},
		{"unknown section", v3(1, 7, 0), "snapshot section 7", true},
		{"section cut", v3(1, 7, 5, 1), "section body", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSnapshot(cfg, tt.b)
			if !errors.Is(err, ErrBadOp) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromSnapshot = %v; want ErrBadOp mentioning %q", err, tt.want)
			}
			if errors.Is(err, ErrNewerFormat) != tt.newer {
				t.Fatalf("errors.Is(err, ErrNewerFormat) = %v, want %v", !tt.newer, tt.newer)
			}
		})
	}
}

func FuzzFromSnapshot(f *testing.F) {
	f.Add(sampleState().AppendSnapshot(nil))
	f.Add(New(Config{}).AppendSnapshot(nil))
	f.Add(scheduledState().AppendSnapshot(nil))
	f.Add(flowState().AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, b)
		if err != nil {
			return
		}
		if err := s.Check(); err != nil {
			t.Fatalf("accepted a snapshot that breaks an invariant: %v", err)
		}
		again := s.AppendSnapshot(nil)
		if b[0] >= 2 && !bytes.Equal(again, b) {
			t.Fatalf("accepted snapshot does not re-encode to its bytes")
		}
		// A version 1 body is read into today's state: its re-encoding (a
		// version 2 body) must read back to an equal state.
		r, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, again)
		if err != nil {
			t.Fatalf("the re-encoding of an accepted snapshot is refused: %v", err)
		}
		if ok, diff := s.Equal(r); !ok {
			t.Fatalf("the re-encoding of an accepted snapshot reads back differently: %s", diff)
		}
	})
}

// TestFromSnapshotReaderMatches: streaming the body through a reader that
// returns a few bytes at a time gives the same state as decoding it whole,
// and a cut body fails the same way.
func TestFromSnapshotReaderMatches(t *testing.T) {
	t.Parallel()
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

// pieceWriter records the pieces written to it and fails after failAfter
// of them (never, if negative).
type pieceWriter struct {
	buf       bytes.Buffer
	pieces    int
	failAfter int
}

func (w *pieceWriter) Write(p []byte) (int, error) {
	if w.failAfter >= 0 && w.pieces >= w.failAfter {
		return 0, errors.New("disk full")
	}
	w.pieces++
	return w.buf.Write(p)
}

// TestWriteSnapshotStreams: WriteSnapshot writes the bytes AppendSnapshot
// returns, in several pieces for a large state, and stops at the first
// write error, returning it.
func TestWriteSnapshotStreams(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	payload := bytes.Repeat([]byte("x"), 100)
	for id := uint64(1); id <= 10_000; id++ {
		s.Apply(&Op{Kind: OpEnqueue, ID: id, At: 10, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Payload: payload}})
	}
	want := s.AppendSnapshot(nil)
	w := &pieceWriter{failAfter: -1}
	n, err := s.WriteSnapshot(w)
	if err != nil || n != int64(len(want)) || !bytes.Equal(w.buf.Bytes(), want) {
		t.Fatalf("WriteSnapshot = %d, %v; equal to AppendSnapshot: %v", n, err, bytes.Equal(w.buf.Bytes(), want))
	}
	if w.pieces < len(want)/(snapshotChunk+64<<10) || w.pieces < 3 {
		t.Fatalf("%d bytes written in %d pieces: not streamed", len(want), w.pieces)
	}
	failing := &pieceWriter{failAfter: 2}
	if _, err := s.WriteSnapshot(failing); err == nil || err.Error() != "disk full" {
		t.Fatalf("a failing writer: err = %v", err)
	}
	if failing.pieces != 2 {
		t.Fatalf("WriteSnapshot went on after a failed write: %d pieces", failing.pieces)
	}
	empty := &pieceWriter{failAfter: -1}
	if _, err := New(Config{}).WriteSnapshot(empty); err != nil || !bytes.Equal(empty.buf.Bytes(), New(Config{}).AppendSnapshot(nil)) {
		t.Fatalf("empty state: %v", err)
	}
}
