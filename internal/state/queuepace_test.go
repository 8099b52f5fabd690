package state

import (
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/runlog/runlog/retry"
)

// claimQueues is claimAll with the queues' settings in force.
func claimQueues(s *State, now int64, max int) []Op {
	p := NewPlanner(s.Circuit(), now, max, 0, nil)
	p.SetQueues(s)
	return claimWith(s, &p, now)
}

func enqueueIn(s *State, queue, target string, n int, at int64) {
	for range n {
		id := s.NextID()
		s.Apply(&Op{Kind: OpEnqueue, ID: id, At: at, Due: at, Spec: &Spec{Kind: "k", Target: target, Queue: queue, Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}})
	}
}

// TestQueueLimit: a queue's rate limit lets its burst start, spreads the
// rest of its backlog over its future tokens (deferred, no attempt
// counted), whatever their targets, leaves other queues alone, survives a
// snapshot and replay, and its removal frees the queue at once.
func TestQueueLimit(t *testing.T) {
	t.Parallel()
	s := New(Config{Circuit: retry.DefaultCircuit()})
	set := QueueOp(QueueSetting{Name: "mail", Limit: retry.Limit{RateMilli: 100000, Burst: 2}}, 1000)
	s.Apply(&set)
	enqueueIn(s, "mail", "a", 3, 1000)
	enqueueIn(s, "mail", "b", 3, 1000)
	enqueueIn(s, "", "a", 2, 1000)
	var starts []uint64
	var dues []int64
	for _, op := range claimQueues(s, 1000, 100) {
		j, _ := s.Job(op.ID)
		switch {
		case op.Kind == OpStart:
			starts = append(starts, op.ID)
		case op.Kind == OpDefer && j.Spec.Queue == "mail":
			dues = append(dues, op.Due)
			if j.Fails() != 0 || j.Started() != 0 {
				t.Fatalf("deferred job %d counted an attempt", op.ID)
			}
		default:
			t.Fatalf("unexpected %+v", op)
		}
	}
	if len(starts) != 4 {
		t.Fatalf("started %v, want mail's burst of 2 and both default jobs", starts)
	}
	if want := []int64{1010, 1020, 1030, 1040}; !slices.Equal(dues, want) {
		t.Fatalf("deferred to %v, want %v", dues, want)
	}
	q := s.Queue("mail")
	if q.Pace == (Pace{}) || q.Pace.Bucket.Admits(q.Limit, 1000) {
		t.Fatalf("mail's pace %v after its burst", q.Pace)
	}
	// At 1010 exactly one job is due and its token has come.
	if ops := claimQueues(s, 1010, 100); len(ops) != 1 || ops[0].Kind != OpStart {
		t.Fatalf("claim at 1010: %+v, want one start", ops)
	}
	// The pace is kept in snapshot section 5.
	r, err := FromSnapshot(s.cfg, s.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	if ok, diff := s.Equal(r); !ok {
		t.Fatal(diff)
	}
	if r.Queue("mail").Pace != q.Pace.Take(q.Limit, 1010).Settle(1010) {
		t.Fatalf("pace after a snapshot %v", r.Queue("mail").Pace)
	}
	// Removing the limit drops the pace: the deferred jobs start when due.
	unset := QueueOp(QueueSetting{Name: "mail"}, 1011)
	s.Apply(&unset)
	if q := s.Queue("mail"); q.Pace != (Pace{}) || !q.Limit.IsZero() || s.paceSection() != nil {
		t.Fatalf("mail after its limit was removed: %+v", q)
	}
	if ops := claimQueues(s, 1040, 100); len(ops) != 3 {
		t.Fatalf("claim at 1040 without the limit: %+v, want 3 starts", ops)
	}
}

// TestPaceAfterOwnDeferral: a queue's reservation moves only for the
// queue's own deferral, never for a job its target's breaker (or flow)
// deferred elsewhere in time; a start takes a token.
func TestPaceAfterOwnDeferral(t *testing.T) {
	t.Parallel()
	lim := retry.Limit{RateMilli: 1000, Burst: 1} // 1/s
	empty := Pace{}.Take(lim, 1000)               // next token at 2000
	for _, tt := range []struct {
		name string
		p    Pace
		op   Op
		want Pace
	}{
		{"start takes a token", Pace{}, Op{Kind: OpStart, At: 1000}, Pace{Bucket: retry.Bucket{TAT: 2_000_000}}},
		{"own deferral reserves", empty, Op{Kind: OpDefer, At: 1500, Due: 2000}, Pace{Bucket: empty.Bucket, Reserved: 2_000_000}},
		{"breaker's deferral does not", empty, Op{Kind: OpDefer, At: 1500, Due: 31500}, empty},
		{"a deferral with tokens left does not", Pace{}, Op{Kind: OpDefer, At: 1500, Due: 2000}, Pace{}},
		{"a full bucket is dropped", empty, Op{Kind: OpDefer, At: 5000, Due: 9000}, Pace{}},
	} {
		if got := PaceAfter(tt.p, lim, &tt.op); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if got := PaceAfter(empty, retry.Limit{}, &Op{Kind: OpStart, At: 1}); got != (Pace{}) {
		t.Errorf("no limit: %v", got)
	}
}

// TestPaceSection pins snapshot section 5 and refuses what the encoder
// would not write.
func TestPaceSection(t *testing.T) {
	t.Parallel()
	s := New(Config{Circuit: retry.DefaultCircuit()})
	set := QueueOp(QueueSetting{Name: "q", Limit: retry.Limit{RateMilli: 1000, Burst: 1}}, 1000)
	s.Apply(&set)
	enqueueIn(s, "q", "t", 2, 1000)
	claimQueues(s, 1000, 10)
	if got, want := hex.EncodeToString(s.paceSection()), "01"+"0171"+"8092f401"+"8092f401"; got != want {
		t.Fatalf("pace section %s, want %s", got, want)
	}
	body := s.AppendSnapshot(nil)
	head := New(s.cfg)
	head.Apply(&set)
	withPaces := func(sec ...byte) []byte {
		b := s.AppendSnapshot(nil)
		i := len(b) - len(s.paceSection()) - 3 // tag, length, then the body
		if b[i+1] != sectionPaces {
			t.Fatalf("section 5 not last: % x", b)
		}
		b = append(b[:i+1:i+1], sectionPaces, byte(len(sec)))
		return append(b, sec...)
	}
	if _, err := FromSnapshot(s.cfg, body); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		sec  []byte
		want string
	}{
		{"no paces", []byte{0}, "0 queue paces"},
		{"queue without a limit", []byte{1, 1, 'r', 2, 0}, "without a rate limit"},
		{"zero pace", []byte{1, 1, 'q', 0, 0}, "the zero one"},
		{"unordered", []byte{2, 1, 'q', 2, 0, 0, 2, 0}, "not in ascending order"},
		{"trailing", []byte{1, 1, 'q', 2, 0, 9}, "trailing"},
	} {
		if _, err := FromSnapshot(s.cfg, withPaces(tt.sec...)); !errors.Is(err, ErrBadOp) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: FromSnapshot = %v; want ErrBadOp mentioning %q", tt.name, err, tt.want)
		}
	}
}
