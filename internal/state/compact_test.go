package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/runlog/runlog/retry"
)

// TestSpecsShared: jobs whose Spec holds nothing of their own share one;
// a payload, a key or metadata keeps a job's Spec its own; SpillPayload
// gives its job a Spec without the payload (shared when it can be) and
// leaves the old Spec as it was, for a reader that still holds it; a
// snapshot's decode shares as enqueue does.
func TestSpecsShared(t *testing.T) {
	pol := retry.DefaultPolicy()
	// The jobs of another priority are in a state of their own: in the
	// same one their shared Spec could take the slot of the first's in the
	// bounded table (compact.go), and the pointers below differ by chance.
	other := New(Config{Circuit: retry.DefaultCircuit()})
	other.Apply(&Op{Kind: OpEnqueue, ID: 1, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}})
	other.Apply(&Op{Kind: OpEnqueue, ID: 2, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol, Priority: 2}})
	if c0, _ := other.Job(1); c0.Spec == other.jobs[1].Spec {
		t.Error("a job of another priority shares the Spec of priority 0")
	}
	s := New(Config{Circuit: retry.DefaultCircuit()})
	enq := func(id uint64, sp Spec) *Job {
		t.Helper()
		s.Apply(&Op{Kind: OpEnqueue, ID: id, At: 1, Due: 10, Spec: &sp})
		j, ok := s.Job(id)
		if !ok {
			t.Fatalf("job %d not enqueued", id)
		}
		return j
	}
	a := enq(1, Spec{Kind: "k", Target: "t", Policy: pol})
	b := enq(2, Spec{Kind: "k", Target: "t", Policy: pol})
	if a.Spec != b.Spec {
		t.Error("two jobs without payload, key or metadata have their own Specs")
	}
	if k := enq(4, Spec{Kind: "k", Target: "t", Policy: pol, Key: "x"}); k.Spec == a.Spec {
		t.Error("a keyed job shares a Spec")
	}
	if m := enq(5, Spec{Kind: "k", Target: "t", Policy: pol, Metadata: []Meta{{"a", "b"}}}); m.Spec == a.Spec {
		t.Error("a job with metadata shares a Spec")
	}
	p := enq(6, Spec{Kind: "k", Target: "t", Policy: pol, Payload: []byte("p")})
	if p.Spec == a.Spec {
		t.Fatal("a job with a payload shares a Spec")
	}
	old := p.Spec
	if !s.SpillPayload(6) {
		t.Fatal("SpillPayload dropped nothing")
	}
	p, _ = s.Job(6)
	if !p.Spilled() || p.Spec.Payload != nil || p.Spec != a.Spec {
		t.Errorf("after SpillPayload: spilled %v, payload %q, shared %v; want spilled, none, shared", p.Spilled(), p.Spec.Payload, p.Spec == a.Spec)
	}
	if !bytes.Equal(old.Payload, []byte("p")) {
		t.Errorf("SpillPayload changed the old Spec in place: payload %q", old.Payload)
	}
	r, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, s.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := r.Job(1)
	r2, _ := r.Job(2)
	r6, _ := r.Job(6)
	if r1.Spec != r2.Spec || r6.Spec != r1.Spec {
		t.Error("the snapshot's decode gave jobs 1, 2 and 6 their own Specs")
	}
	if r4, _ := r.Job(4); r4.Spec == r1.Spec || r4.Spec.Key != "x" {
		t.Error("the snapshot's decode shared a keyed job's Spec")
	}
}

// TestNamesBounded: the table of interned names has a fixed size however
// many distinct names go through it, hands back equal strings, and shares
// one copy of a name among the jobs that use it.
func TestNamesBounded(t *testing.T) {
	tb := newNameTable()
	for i := range 10 * nameSlots {
		name := fmt.Sprintf("https://tenant-%d.example/hook", i)
		if got := tb.intern(strings.Clone(name)); got != name {
			t.Fatalf("intern(%q) = %q", name, got)
		}
		if got := tb.internBytes([]byte(name)); got != name {
			t.Fatalf("internBytes(%q) = %q", name, got)
		}
	}
	a := tb.intern(strings.Clone("partner"))
	b := tb.internBytes([]byte("partner"))
	c := tb.intern(strings.Clone("partner"))
	if unsafe.StringData(a) != unsafe.StringData(b) || unsafe.StringData(b) != unsafe.StringData(c) {
		t.Fatal("one name interned three times gave different copies")
	}
	if n := testing.AllocsPerRun(100, func() { tb.internBytes([]byte("partner")) }); n != 0 {
		t.Fatalf("internBytes of a held name allocates %v times", n)
	}
}

// TestRetrySpilledInMemory: a retry by hand of a finished job that memory
// still holds with its payload spilled gives the job back the payload the
// op's image carries. The store's table keeps a finished job's payload in
// its record, which the retry deletes there: before, the job came back
// pending, still marked spilled, with its payload nowhere (found by the
// embedded store's two-tier property test, seed 12869502883082607885).
func TestRetrySpilledInMemory(t *testing.T) {
	s := New(Config{Circuit: retry.DefaultCircuit()})
	sp := Spec{Kind: "k", Target: "t", Policy: retry.DefaultPolicy(), Payload: []byte("payload")}
	s.Apply(&Op{Kind: OpEnqueue, ID: 1, At: 1, Due: 10, Spec: &sp})
	if !s.SpillPayload(1) {
		t.Fatal("SpillPayload dropped nothing")
	}
	s.Apply(&Op{Kind: OpCancel, ID: 1, At: 2, Error: "by hand"})
	j, _ := s.Job(1)
	if j.State != Cancelled || !j.Spilled() {
		t.Fatalf("after the cancel: %v, spilled %v; want cancelled, spilled", j.State, j.Spilled())
	}
	img := *j
	withPayload := *j.Spec
	withPayload.Payload = []byte("payload")
	img.Spec = &withPayload
	img.SetSpilled(false)
	s.Apply(&Op{Kind: OpRetry, ID: 1, At: 3, Due: 3, Image: &img})
	j, _ = s.Job(1)
	if j.State != Pending || j.Spilled() || string(j.Spec.Payload) != "payload" {
		t.Fatalf("after the retry: %v, spilled %v, payload %q; want pending with its payload in memory", j.State, j.Spilled(), j.Spec.Payload)
	}
}

// TestJobCompact: a Job is 48 bytes; a pending job never started nor
// deferred holds no Run (its FirstDue is its Due, it started none), one
// that started, was deferred (its Due moved, its FirstDue kept) or finished
// does, and a retry by hand of a job that never started drops it again; the
// flags packed in one byte keep each other; a snapshot's decode and a
// replay of the same ops give the same (Equal compares whether each job has
// a Run).
func TestJobCompact(t *testing.T) {
	if n := unsafe.Sizeof(Job{}); n > 48 {
		t.Fatalf("a Job is %d bytes, want at most 48", n)
	}
	pol := retry.DefaultPolicy()
	ops := []Op{
		{Kind: OpEnqueue, ID: 1, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}},
		{Kind: OpEnqueue, ID: 2, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}},
		{Kind: OpEnqueue, ID: 3, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}},
		{Kind: OpEnqueue, ID: 4, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}},
		{Kind: OpEnqueue, ID: 5, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}},
		{Kind: OpEnqueue, ID: 6, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}},
		{Kind: OpStart, ID: 2, At: 11, Attempt: 1},
		{Kind: OpCancel, ID: 3, At: 12, Error: "by hand"},
		{Kind: OpCancel, ID: 4, At: 12, Error: "by hand"},
		{Kind: OpRetry, ID: 4, At: 13, Due: 20},
		{Kind: OpDefer, ID: 5, At: 11, Due: 30},
		{Kind: OpDefer, ID: 6, At: 11, Due: 30},
		{Kind: OpCancel, ID: 6, At: 12, Error: "by hand"},
		{Kind: OpRetry, ID: 6, At: 13, Due: 40},
		{Kind: OpEnqueue, ID: 7, At: 1, Due: 10, Spec: &Spec{Kind: "k", Target: "t", Policy: pol}},
		{Kind: OpDefer, ID: 7, At: 11, Due: 30},
		{Kind: OpDefer, ID: 7, At: 12, Due: 10},
	}
	live := New(Config{Circuit: retry.DefaultCircuit()})
	for i := range ops {
		live.Apply(&ops[i])
	}
	for _, c := range []struct {
		id       uint64
		run      bool
		due      int64
		firstDue int64
		started  uint32
	}{
		{1, false, 10, 10, 0},
		{2, true, 10, 10, 1},
		{3, true, 10, 10, 0},
		{4, false, 20, 20, 0},
		{5, true, 30, 10, 0},  // deferred: the deadline still counts from 10
		{6, false, 40, 40, 0}, // deferred, then retried by hand: nothing left to hold
		{7, false, 10, 10, 0}, // deferred, then back to its first due time
	} {
		j, ok := live.Job(c.id)
		if !ok || (j.Run != nil) != c.run || j.Due != c.due || j.FirstDue() != c.firstDue || j.Started() != c.started {
			t.Errorf("job %d (%v): Run %v, due %d, first due %d, started %d; want Run %v, %d, %d, %d",
				c.id, j.State, j.Run != nil, j.Due, j.FirstDue(), j.Started(), c.run, c.due, c.firstDue, c.started)
		}
	}
	if j, _ := live.Job(4); j.State != Pending || j.Reason() != "" || j.FinishedAt() != 0 || j.Part() != 0 {
		t.Errorf("job 4 after its retry: %v, reason %q, finished at %d, partition %d", j.State, j.Reason(), j.FinishedAt(), j.Part())
	}
	// The packed flags: each set and cleared alone, the heap's kind beside
	// them.
	var j Job
	for _, k := range []heapKind{inBench, inReady, inWait, inBench} {
		j.setHeap(k)
		for _, f := range []jobFlags{flagSpilled, flagHeld, flagParked, flagInDone} {
			j.set(f, true)
			if j.flags&f == 0 || j.heap() != k {
				t.Fatalf("flag %#x set in heap %d: flags %#x, heap %d", f, k, j.flags, j.heap())
			}
		}
		j.set(flagHeld|flagInDone, false)
		if !j.Spilled() || j.held() || !j.parked() || j.inDone() || j.heap() != k {
			t.Fatalf("after clearing held and inDone: flags %#x, heap %d", j.flags, j.heap())
		}
		j.SetSpilled(false)
		j.set(flagParked, false)
		if j.flags != jobFlags(k)<<heapShift {
			t.Fatalf("all cleared in heap %d: flags %#x", k, j.flags)
		}
	}
	replay := New(Config{Circuit: retry.DefaultCircuit()})
	for i := range ops {
		replay.Apply(&ops[i])
	}
	snap, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, live.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*State{"replay": replay, "snapshot": snap} {
		if ok, d := live.Equal(s); !ok {
			t.Errorf("%s differs from live: %s", name, d)
		}
	}
}

// TestSnapshotDecodeOrder: a snapshot's decode, which allocates its jobs in
// chunks and orders each queue's heap once at the end, hands out the
// pending jobs in the order the live state does: jobs of random due times
// and priorities in three queues, some started, some finished, across
// more than one chunk.
func TestSnapshotDecodeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pol := retry.Policy{Attempts: 3, BaseMS: 10, CapMS: 100}
	live := New(Config{Circuit: retry.DefaultCircuit()})
	n := uint64(jobChunk + jobChunk/2)
	for id := uint64(1); id <= n; id++ {
		sp := &Spec{Kind: "k", Target: "t", Policy: pol, Queue: []string{"", "q1", "q2"}[rng.IntN(3)], Priority: int32(rng.IntN(3))}
		live.Apply(&Op{Kind: OpEnqueue, ID: id, At: 1, Due: 1 + rng.Int64N(10_000), Spec: sp})
		switch rng.IntN(10) {
		case 0:
			live.Apply(&Op{Kind: OpStart, ID: id, At: 2, Attempt: 1})
		case 1:
			live.Apply(&Op{Kind: OpCancel, ID: id, At: 2, Error: "by hand"})
		}
	}
	restored, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, live.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	if ok, d := live.Equal(restored); !ok {
		t.Fatalf("the decode differs from live: %s", d)
	}
	for k := 0; ; k++ {
		a, okA := live.PeekDue(20_000)
		b, okB := restored.PeekDue(20_000)
		if okA != okB || okA && a.ID != b.ID {
			t.Fatalf("claim %d: live gives job %v (%v), the decode job %v (%v)", k, a, okA, b, okB)
		}
		if !okA {
			break
		}
		start := Op{Kind: OpStart, ID: a.ID, At: 3, Attempt: a.Started() + 1}
		for _, s := range []*State{live, restored} {
			s.Apply(&start)
		}
	}
}
