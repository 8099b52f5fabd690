package journal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/vfs"
)

// ledger is what a workload knows about its records: which were
// acknowledged (the append returned nil), in which order all were attempted.
type ledger struct {
	acked     map[uint64]string // seq -> payload
	attempt   map[string]int    // payload -> attempt order
	next      int               // next payload number
	dropFloor uint64            // highest seq ever passed to DropBefore
	failed    bool              // the journal reported ErrFailed
	pad       int               // payloads get up to pad extra bytes
	batch     int               // batches hold up to batch records
}

func newLedger() *ledger {
	return &ledger{acked: map[uint64]string{}, attempt: map[string]int{}, pad: 20, batch: 4}
}

// recs makes n fresh, unique payloads and notes them as attempted.
func (l *ledger) recs(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		p := fmt.Sprintf("rec-%d-%s", l.next, strings.Repeat("x", l.next*7%(l.pad+1)))
		l.attempt[p] = l.next
		l.next++
		out[i] = []byte(p)
	}
	return out
}

// ack notes recs as acknowledged from first on.
func (l *ledger) ack(t testing.TB, first Position, recs [][]byte) {
	t.Helper()
	if l.failed {
		t.Fatalf("an append was acknowledged after the journal reported ErrFailed")
	}
	for i, r := range recs {
		l.acked[first.Seq+uint64(i)] = string(r)
	}
}

// result checks an append's outcome and records acknowledgements.
func (l *ledger) result(t testing.TB, j *Journal, first Position, recs [][]byte, err error) {
	t.Helper()
	if err == nil {
		l.ack(t, first, recs)
		return
	}
	if errors.Is(err, ErrFailed) {
		l.failed = true
	}
	if l.failed && !errors.Is(err, ErrFailed) {
		t.Fatalf("append on a failed journal returned %v; want ErrFailed", err)
	}
	if j.Err() != nil {
		l.failed = true
	}
}

// step runs one random operation of the workload against j.
func (l *ledger) step(t testing.TB, j *Journal, rng *rand.Rand) {
	t.Helper()
	switch k := rng.IntN(20); {
	case k < 8:
		recs := l.recs(1)
		pos, err := j.Append(recs[0])
		l.result(t, j, pos, recs, err)
	case k < 12:
		recs := l.recs(1 + rng.IntN(l.batch))
		pos, err := j.AppendBatch(recs)
		l.result(t, j, pos, recs, err)
	case k < 15:
		recs := l.recs(1 + rng.IntN(3))
		type answer struct {
			pos Position
			err error
		}
		ch := make(chan answer, 1)
		j.AppendAsync(recs, func(p Position, err error) { ch <- answer{p, err} })
		a := <-ch
		l.result(t, j, a.pos, recs, a.err)
	case k < 17:
		if _, err := j.Rotate(); err != nil && !errors.Is(err, ErrFailed) {
			t.Logf("Rotate: %v", err)
		}
		if j.Err() != nil {
			l.failed = true
		}
	case k < 19:
		seq := j.LastSeq() - min(j.LastSeq(), uint64(rng.IntN(4)))
		l.dropFloor = max(l.dropFloor, seq)
		_ = j.DropBefore(seq) // a failed removal loses nothing
	default:
		_ = j.Replay(0, func(Position, []byte) error { return nil })
	}
	if l.failed {
		_, err := j.Append([]byte("after failure"))
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("Append after the journal failed: %v; want ErrFailed", err)
		}
	}
}

// check opens the journal on fsys and asserts: it opens (no corruption),
// every acknowledged record not dropped is there with its payload, every
// record there was attempted, in attempt order, whole.
func (l *ledger) check(t testing.TB, fsys vfs.FS, dir string, opts Options, what string) {
	t.Helper()
	opts.FS = fsys
	j, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("%s: Open: %v", what, err)
	}
	defer j.Close()
	got := readAll(t, j)
	seen := map[uint64]bool{}
	prev := -1
	for i, e := range got {
		if i > 0 && e.pos.Seq != got[i-1].pos.Seq+1 {
			t.Fatalf("%s: seq %d follows %d", what, e.pos.Seq, got[i-1].pos.Seq)
		}
		order, ok := l.attempt[string(e.rec)]
		if !ok {
			t.Fatalf("%s: recovered record %q (seq %d) was never appended", what, e.rec, e.pos.Seq)
		}
		if order <= prev {
			t.Fatalf("%s: record %q recovered out of order", what, e.rec)
		}
		prev = order
		if want, ok := l.acked[e.pos.Seq]; ok && want != string(e.rec) {
			t.Fatalf("%s: seq %d holds %q; %q was acknowledged there", what, e.pos.Seq, e.rec, want)
		}
		seen[e.pos.Seq] = true
	}
	for seq, p := range l.acked {
		if seq >= l.dropFloor && !seen[seq] {
			t.Fatalf("%s: acknowledged record %q (seq %d) lost; recovered %d records", what, p, seq, len(got))
		}
	}
	if _, err := Verify(fsys, dir, opts); err != nil {
		t.Fatalf("%s: Verify after Open: %v", what, err)
	}
}

// runWorkload opens a journal on m and runs steps steps; failures are fine.
func runWorkload(t testing.TB, m *vfs.Mem, opts Options, seed uint64, steps int) *ledger {
	t.Helper()
	l := newLedger()
	opts.FS = m
	j, err := Open("j", opts)
	if err != nil {
		return l
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	for range steps {
		l.step(t, j, rng)
	}
	j.Close()
	return l
}

// TestFailNthOperation is checklist items 8 and 9: every filesystem
// operation of a scripted workload (appends, batches, async appends,
// rollovers, rotations, drops, replays) is failed in turn, once and for
// good. Nothing acknowledged is lost, appends after a failed write or sync
// get ErrFailed, and reopening (on the live filesystem or after a crash)
// recovers the acknowledged records plus possibly some whose append
// failed, never a partial one.
func TestFailNthOperation(t *testing.T) {
	t.Parallel()
	opts := Options{SegmentSize: 256, MaxRecordSize: 1024}
	const seed, steps = 42, 60
	base := vfs.NewMem()
	runWorkload(t, base, opts, seed, steps)
	total := base.Ops()
	t.Logf("the workload makes %d filesystem operations", total)
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	for _, mode := range []struct {
		name string
		inj  func(int64) vfs.Injector
	}{{"once", vfs.FailNth}, {"persistent", vfs.FailFrom}} {
		t.Run(mode.name, func(t *testing.T) {
			for n := int64(1); n <= total; n++ {
				m := vfs.NewMem()
				m.SetInjector(mode.inj(n))
				l := runWorkload(t, m, opts, seed, steps)
				if m.Injected() == 0 {
					t.Fatalf("op %d of %d was never reached", n, total)
				}
				what := fmt.Sprintf("fail op %d (%s)", n, mode.name)
				l.check(t, m.CrashClone(nil), "j", opts, what+", crash")
				l.check(t, m.CrashClone(rng), "j", opts, what+", random crash")
				m.SetInjector(nil)
				l.check(t, m, "j", opts, what+", reopen")
			}
		})
	}
}

// TestFailedSyncIsSticky is checklist item 8 on its own: the append whose
// fdatasync fails gets ErrFailed, and so does every later one, even though
// a later sync would "succeed"; after reopening only synced records exist.
func TestFailedSyncIsSticky(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{})
	want := writeRecords(t, j, 3)
	syncs := 0
	m.SetInjector(vfs.FailIf(func(op vfs.Op) bool {
		if op.Kind != vfs.OpSync {
			return false
		}
		syncs++
		return syncs == 2
	}))
	if _, err := j.Append(payload(3)); err != nil {
		t.Fatalf("first append under the injector: %v", err)
	}
	want = append(want, Position{Seq: 4, Segment: 1, Offset: want[2].Offset + int64(frameSize(len(payload(2))))})
	_, err := j.Append([]byte("lost"))
	if !errors.Is(err, ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("append whose sync failed: %v; want ErrFailed wrapping the cause", err)
	}
	for range 3 {
		if _, err := j.Append([]byte("refused")); !errors.Is(err, ErrFailed) {
			t.Fatalf("later append: %v; want ErrFailed", err)
		}
	}
	if _, err := j.AppendBatch([][]byte{[]byte("x")}); !errors.Is(err, ErrFailed) {
		t.Fatalf("later batch: %v; want ErrFailed", err)
	}
	ch := make(chan error, 1)
	j.AppendAsync([][]byte{[]byte("x")}, func(_ Position, err error) { ch <- err })
	if err := <-ch; !errors.Is(err, ErrFailed) {
		t.Fatalf("later async append: %v; want ErrFailed", err)
	}
	if !errors.Is(j.Err(), ErrFailed) || j.LastSeq() != 4 {
		t.Fatalf("Err %v LastSeq %d; want ErrFailed and 4", j.Err(), j.LastSeq())
	}
	if msg := j.Err().Error(); !containsAll(msg, "close the journal and open it again") {
		t.Fatalf("failure message %q does not say what to do", msg)
	}
	mustClose(t, j)
	m.SetInjector(nil)
	c := m.CrashClone(nil)
	j = mustOpen(t, c, "j", Options{})
	checkRecords(t, readAll(t, j), want)
	mustClose(t, j)
}

// TestRandomCrashClones is checklist items 10 and 11: power cuts at random
// moments of random workloads. The disk freezes at a random operation (it
// and every later one fail, so what was not synced by then never will be),
// then the crash keeps only synced bytes and directory entries, or also a
// random part of the rest, with holes. Groups span several 512-byte blocks,
// so a crash can keep a later block of a group and lose an earlier one.
// Every acknowledged record survives and the journal always opens; no
// record is partial. Set RUNLOG_CRASH_ITERS for a longer run.
func TestRandomCrashClones(t *testing.T) {
	t.Parallel()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	opts := Options{SegmentSize: 4096, MaxRecordSize: 1024}
	for it := range iterations("RUNLOG_CRASH_ITERS", 50, 300) {
		m := vfs.NewMem()
		m.SetInjector(vfs.FailFrom(1 + rng.Int64N(400)))
		l := newLedger()
		l.pad, l.batch = 300, 12
		opts.FS = m
		j, err := Open("j", opts)
		if err == nil {
			for range 1 + rng.IntN(60) {
				l.step(t, j, rng)
			}
			j.Close()
		}
		what := fmt.Sprintf("iteration %d (seed %d)", it, seed)
		l.check(t, m.CrashClone(nil), "j", opts, what+", crash")
		l.check(t, m.CrashClone(rng), "j", opts, what+", random crash")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
