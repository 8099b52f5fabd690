package state

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/runlog/runlog/retry"
)

// queuedState is sampleState with two queue settings.
func queuedState() *State {
	s := sampleState()
	for _, qs := range []QueueSetting{{Name: "mail", Paused: true}, {Name: "bulk", Concurrency: 3}, {Name: "", Concurrency: 2, Paused: true}} {
		op := QueueOp(qs, 1)
		s.Apply(&op)
	}
	return s
}

// TestQueueSection pins snapshot section 1 byte for byte (3 queues: "" at
// concurrency 2 paused, "bulk" at 3, "mail" paused), reads it back,
// and refuses what the encoder would not write.
func TestQueueSection(t *testing.T) {
	t.Parallel()
	s := queuedState()
	if got, want := hex.EncodeToString(s.queueSection()), "03"+"000201"+"0462756c6b0300"+"046d61696c0001"; got != want {
		t.Fatalf("queue section %s, want %s", got, want)
	}
	body := s.AppendSnapshot(nil)
	if body[0] != sectionsVersion {
		t.Fatalf("a state with queue settings is written as version %d", body[0])
	}
	r, err := FromSnapshot(s.cfg, body)
	if err != nil {
		t.Fatal(err)
	}
	if ok, diff := s.Equal(r); !ok {
		t.Fatal(diff)
	}
	if q := r.Queue("mail"); !q.Paused || q.Concurrency != 0 {
		t.Fatalf("mail after a snapshot: %+v", q)
	}
	v2 := sampleState().AppendSnapshot(nil)
	withSection := func(sec ...byte) []byte {
		b := append([]byte{sectionsVersion}, v2[1:]...)
		b = append(b, 1, sectionQueues, byte(len(sec)))
		return append(b, sec...)
	}
	for _, tt := range []struct {
		name string
		sec  []byte
		want string
	}{
		{"no queues", []byte{0}, "0 queue settings"},
		{"flags 4", []byte{1, 1, 'q', 0, 4}, "queue flags 0x4"},
		{"limit of burst 0", []byte{1, 1, 'q', 0, 2, 1, 0}, "is not a limit"},
		{"zero setting", []byte{1, 1, 'q', 0, 0}, "zero setting"},
		{"unordered", []byte{2, 1, 'b', 1, 0, 1, 'a', 1, 0}, "not in ascending order"},
		{"concurrency too large", []byte{1, 1, 'q', 0x80, 0x80, 0x80, 0x80, 0x08, 0}, "above"},
		{"trailing", []byte{1, 1, 'q', 1, 0, 9}, "trailing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSnapshot(s.cfg, withSection(tt.sec...))
			if !errors.Is(err, ErrBadOp) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromSnapshot = %v; want ErrBadOp mentioning %q", err, tt.want)
			}
		})
	}
}

// TestQueuesFollowLiveWork: a named queue is kept while it has jobs or a
// setting, and forgotten after.
func TestQueuesFollowLiveWork(t *testing.T) {
	t.Parallel()
	s := New(Config{Circuit: retry.DefaultCircuit()})
	apply := func(op Op) {
		t.Helper()
		s.Apply(&op)
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	apply(Op{Kind: OpEnqueue, ID: 1, At: 1, Due: 1, Spec: &Spec{Kind: "k", Queue: "q", Priority: 2, Policy: retry.Policy{Attempts: 1}}})
	if qs := s.Queues(); len(qs) != 2 || qs[1].Name != "q" || qs[1].Pending != 1 {
		t.Fatalf("queues with one job in q: %+v", qs)
	}
	apply(QueueOp(QueueSetting{Name: "q", Paused: true}, 2))
	if _, ok := s.PeekDue(5); ok {
		t.Fatal("PeekDue offers a job of a paused queue")
	}
	if _, ok := s.NextDue(); ok {
		t.Fatal("NextDue counts a paused queue's job")
	}
	if d, ok := s.OldestDue(); !ok || d != 1 {
		t.Fatalf("OldestDue %d %v: a paused queue's job is still the oldest", d, ok)
	}
	apply(Op{Kind: OpCancel, ID: 1, At: 3})
	if qs := s.Queues(); len(qs) != 2 || !qs[1].Paused || qs[1].Pending != 0 {
		t.Fatalf("a paused queue without jobs: %+v", qs)
	}
	apply(QueueOp(QueueSetting{Name: "q"}, 4))
	if qs := s.Queues(); len(qs) != 1 {
		t.Fatalf("a queue with no jobs and the zero setting is kept: %+v", qs)
	}
	if got := s.AppendSnapshot(nil); got[0] != sectionsVersion-1 {
		t.Fatalf("a state whose queues all have the zero setting is written as version %d", got[0])
	}
}

func FuzzQueueSection(f *testing.F) {
	f.Add(queuedState().AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, b)
		if err != nil {
			return
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		if again := s.AppendSnapshot(nil); b[0] >= 2 && !bytes.Equal(again, b) {
			t.Fatal("an accepted snapshot does not re-encode to its bytes")
		}
	})
}
