package state

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runlog/runlog/retry"
)

// TestDisableRule is the rule's table: what an outcome does to a target's
// failing run, and when it disables the target.
func TestDisableRule(t *testing.T) {
	t.Parallel()
	fail := func(at int64) Op {
		return Op{Kind: OpRequeue, ID: 1, At: at, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "http 503"}
	}
	perm := Op{Kind: OpFail, ID: 1, At: 50, Attempt: 1, Class: retry.Permanent, Error: "http 410 Gone"}
	ok := Op{Kind: OpSucceed, ID: 1, At: 60, Attempt: 1, Class: retry.Success}
	failing := TargetLife{Failing: true, FailingSince: 10}
	for _, tt := range []struct {
		name    string
		l       TargetLife
		op      Op
		gone    bool
		after   int64
		want    TargetLife // LifeAfter
		disable string     // the reason DisableRule gives, "" for none
	}{
		{"first failure starts the run", TargetLife{}, fail(10), false, 100, failing, ""},
		{"a later failure keeps its start", failing, fail(50), false, 100, failing, ""},
		{"failing for less than the bound", failing, fail(109), false, 100, failing, ""},
		{"failing for the bound", failing, fail(110), false, 100, failing, "failing for 100ms since 1970-01-01T00:00:00Z with no success"},
		{"bound 0 never disables", failing, fail(1 << 40), false, 0, failing, ""},
		{"a success ends the run", failing, ok, false, 100, TargetLife{}, ""},
		{"a permanent failure is not the target's fault", TargetLife{}, perm, false, 100, TargetLife{}, ""},
		{"gone disables at once", TargetLife{}, perm, true, 0, TargetLife{}, "the target answered gone: http 410 Gone"},
		{"already disabled", TargetLife{Disabled: true, Reason: "x"}, perm, true, 0, TargetLife{Disabled: true, Reason: "x"}, ""},
		{"an interrupted attempt changes nothing", failing, Op{Kind: OpRequeue, ID: 1, At: 500, Attempt: 1}, true, 100, failing, ""},
		{"admission failing a job is no outcome", failing, Op{Kind: OpFail, ID: 1, At: 500, Class: retry.Permanent}, true, 100, failing, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := LifeAfter(tt.l, &tt.op)
			if got != tt.want {
				t.Fatalf("LifeAfter = %+v, want %+v", got, tt.want)
			}
			op := DisableRule(got, "t", &tt.op, tt.gone, tt.after)
			switch {
			case tt.disable == "" && op.Kind != 0:
				t.Fatalf("DisableRule = %+v, want none", op.Life)
			case tt.disable != "" && (op.Kind != OpTarget || !op.Life.Disable || op.Life.Target != "t" || op.Life.Reason != tt.disable || op.At != tt.op.At):
				t.Fatalf("DisableRule = %+v %+v, want a disable of t with %q", op, op.Life, tt.disable)
			}
		})
	}
}

// lifeState is a state with target "gone" disabled (two pending jobs
// parked, one running), target "bad" failing, and target "ok" fine.
func lifeState() *State {
	s := New(Config{Circuit: retry.DefaultCircuit(), DisableAfterMS: 1000})
	pol := retry.Policy{Attempts: 5, BaseMS: 10, CapMS: 100}
	apply := func(op Op) { s.Apply(&op) }
	targets := []string{"", "gone", "gone", "gone", "bad", "ok"}
	for id := uint64(1); id <= 5; id++ {
		apply(Op{Kind: OpEnqueue, ID: id, At: 10, Due: 10, Spec: &Spec{Kind: "http", Target: targets[id], Policy: pol}})
	}
	apply(Op{Kind: OpStart, ID: 1, At: 20, Attempt: 1})
	apply(Op{Kind: OpStart, ID: 4, At: 20, Attempt: 1})
	apply(Op{Kind: OpRequeue, ID: 4, At: 30, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "http 503", Due: 40})
	apply(Op{Kind: OpStart, ID: 2, At: 20, Attempt: 1})
	out := Op{Kind: OpFail, ID: 2, At: 50, Attempt: 1, Class: retry.Permanent, Error: "permanent failure: http 410 Gone"}
	apply(out)
	apply(s.Lifecycle(&out, true))
	return s
}

// TestDisabledTargetHeld checks that a disabled target's jobs are kept
// pending and never offered, including one enqueued after the disable and
// the running one that comes back, and that the enable puts them back.
func TestDisabledTargetHeld(t *testing.T) {
	t.Parallel()
	s := lifeState()
	if !s.TargetDisabled("gone") || s.Disabled() != 1 || !strings.Contains(s.Life("gone").Reason, "410") {
		t.Fatalf("gone: %+v, %d disabled", s.Life("gone"), s.Disabled())
	}
	if l := s.Life("bad"); !l.Failing || l.FailingSince != 30 || l.Disabled {
		t.Fatalf("bad: %+v", l)
	}
	s.Apply(&Op{Kind: OpEnqueue, ID: 6, At: 60, Due: 60, Spec: &Spec{Kind: "http", Target: "gone", Policy: retry.Policy{Attempts: 1}}})
	s.Apply(&Op{Kind: OpRequeue, ID: 1, At: 70, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Due: 70})
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	var offered []uint64
	for {
		j, ok := s.PeekDue(1 << 40)
		if !ok {
			break
		}
		offered = append(offered, j.ID)
		s.Apply(&Op{Kind: OpCancel, ID: j.ID, At: 80})
	}
	if len(offered) != 2 || offered[0] != 5 || offered[1] != 4 {
		t.Fatalf("offered %v, want [5 4] (the jobs of gone held)", offered)
	}
	if _, ok := s.NextDue(); ok {
		t.Fatal("NextDue sees the held jobs of a disabled target")
	}
	if c := s.Counts(); c.Pending != 3 {
		t.Fatalf("pending %d, want the 3 jobs of gone kept", c.Pending)
	}
	p := NewPlanner(s.Circuit(), 100, 10, 0, nil)
	p.SetTargets(s)
	if _, v := p.Plan(Facts{ID: 1}, "gone", retry.Breaker{}); v != TargetHeld {
		t.Fatalf("Planner verdict %v for a disabled target's job", v)
	}
	en := TargetOp("gone", false, "", 90)
	s.Apply(&en)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if s.TargetDisabled("gone") || !s.Life("gone").IsZero() {
		t.Fatalf("after the enable: %+v", s.Life("gone"))
	}
	if j, ok := s.PeekDue(1 << 40); !ok || j.Spec.Target != "gone" {
		t.Fatalf("after the enable, PeekDue = %v, %v", j, ok)
	}
}

// TestLifeSnapshot round-trips section 4, pins its bytes, and refuses bad
// bodies.
func TestLifeSnapshot(t *testing.T) {
	t.Parallel()
	s := lifeState()
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
	if j, ok := r.PeekDue(1 << 40); ok && j.Spec.Target == "gone" {
		t.Fatalf("a disabled target's job %d offered after a snapshot", j.ID)
	}
	got := hex.EncodeToString(body)
	path := filepath.Join("testdata", "snapshot-life.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestLifeSnapshot -update to write it)", err)
	}
	if strings.TrimSpace(string(want)) != got {
		t.Fatalf("the snapshot with target lifecycles changed:\n got %s\nwant %s", got, want)
	}

	v2 := sampleState().AppendSnapshot(nil)
	withSection := func(sec ...byte) []byte {
		b := append([]byte{sectionsVersion}, v2[1:]...)
		b = append(b, 1, sectionLife, byte(len(sec)))
		return append(b, sec...)
	}
	for _, tt := range []struct {
		name string
		sec  []byte
		want string
	}{
		{"none", []byte{0}, "0 target lifecycles"},
		{"flags", []byte{1, 1, 'a', 4, 0, 0, 0}, "lifecycle flags"},
		{"zero", []byte{1, 1, 'a', 0, 0, 0, 0}, "zero lifecycle"},
		{"unordered", []byte{2, 1, 'b', 1, 2, 0, 0, 1, 'a', 1, 2, 0, 0}, "ascending"},
		{"empty target", []byte{1, 0, 1, 2, 0, 0}, "ascending"},
		{"time without its flag", []byte{1, 1, 'a', 2, 2, 0, 0}, "without its flag"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSnapshot(s.cfg, withSection(tt.sec...))
			if !errors.Is(err, ErrBadOp) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromSnapshot = %v; want ErrBadOp mentioning %q", err, tt.want)
			}
		})
	}
}

// TestTargetOpDecode refuses target ops Encode would not write.
func TestTargetOpDecode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		op   Op
		want string
	}{
		{"no target", Op{Kind: OpTarget, At: 1, Life: &TargetChange{Disable: true}}, "no target"},
		{"enable with a reason", Op{Kind: OpTarget, At: 1, Life: &TargetChange{Target: "t", Reason: "x"}}, "with a reason"},
		{"long reason", Op{Kind: OpTarget, At: 1, Life: &TargetChange{Target: "t", Disable: true, Reason: strings.Repeat("x", MaxTargetReason+1)}}, "reason of"},
		{"job id", Op{Kind: OpTarget, ID: 3, At: 1, Life: &TargetChange{Target: "t"}}, "job id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(Encode(nil, &tt.op))
			if !errors.Is(err, ErrBadOp) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v; want ErrBadOp mentioning %q", err, tt.want)
			}
		})
	}
	b := Encode(nil, &Op{Kind: OpTarget, At: 1, Life: &TargetChange{Target: "t", Disable: true}})
	b[len(b)-2] = 2 // the disable byte
	if _, err := Decode(b); err == nil || !strings.Contains(err.Error(), "disable flag 2") {
		t.Fatalf("Decode of disable flag 2 = %v", err)
	}
}

// FuzzLifeSection feeds snapshots with target lifecycles to FromSnapshot:
// an accepted one keeps the invariants (a disabled target's jobs parked)
// and encodes back to its bytes.
func FuzzLifeSection(f *testing.F) {
	f.Add(lifeState().AppendSnapshot(nil))
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
