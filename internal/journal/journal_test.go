package journal

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/vfs"
)

// TestTooLarge: a record above MaxRecordSize is refused before anything is
// written, in every append form, and the journal stays usable.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	opts := Options{MaxRecordSize: 100}
	j := mustOpen(t, m, "j", opts)
	want := writeRecords(t, j, 2)
	size := j.Segments()[0].Size
	big := make([]byte, 101)
	if _, err := j.Append(big); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "101 bytes") {
		t.Fatalf("Append of 101 bytes: %v; want ErrTooLarge with the size", err)
	}
	if _, err := j.AppendBatch([][]byte{[]byte("ok"), big}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("AppendBatch with one oversized record: %v; want ErrTooLarge", err)
	}
	ch := make(chan error, 1)
	j.AppendAsync([][]byte{big}, func(_ Position, err error) { ch <- err })
	if err := <-ch; !errors.Is(err, ErrTooLarge) {
		t.Fatalf("AppendAsync of an oversized record: %v; want ErrTooLarge", err)
	}
	if got := j.Segments()[0].Size; got != size || j.Err() != nil {
		t.Fatalf("after refusals: size %d (was %d), Err %v; want nothing written and no failure", got, size, j.Err())
	}
	if _, err := j.Append(make([]byte, 100)); err != nil {
		t.Fatalf("Append of exactly MaxRecordSize: %v", err)
	}
	mustClose(t, j)
	j = mustOpen(t, m, "j", opts)
	got := readAll(t, j)
	checkRecords(t, got[:2], want)
	if len(got) != 3 || len(got[2].rec) != 100 {
		t.Fatalf("after reopen: %d records; want the 2 small ones and the 100-byte one", len(got))
	}
	mustClose(t, j)
}

// spyFS records, per file, how far it was written and how far synced,
// and slows each sync down like a disk would.
type spyFS struct {
	vfs.FS
	syncDelay time.Duration
	mu        sync.Mutex
	written   map[string]int64 // guarded by mu
	synced    map[string]int64 // guarded by mu
	syncs     atomic.Int64
}

type spyFile struct {
	vfs.File
	fs   *spyFS
	name string
}

func (s *spyFS) OpenReadWrite(name string) (vfs.File, error) {
	return s.wrap(s.FS.OpenReadWrite(name))
}

func (s *spyFS) Create(name string) (vfs.File, error) {
	return s.wrap(s.FS.Create(name))
}

// wrap spies on f under the name of the segment it is or will become.
func (s *spyFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return &spyFile{File: f, fs: s, name: strings.TrimSuffix(st.Name(), ".tmp")}, nil
}

func (f *spyFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	f.fs.mu.Lock()
	f.fs.written[f.name] = max(f.fs.written[f.name], off+int64(n))
	f.fs.mu.Unlock()
	return n, err
}

func (f *spyFile) Sync() error {
	f.fs.mu.Lock()
	covered := f.fs.written[f.name] // a sync covers what was written before it began
	f.fs.mu.Unlock()
	time.Sleep(f.fs.syncDelay) // under test: a slow fsync
	err := f.File.Sync()
	if err == nil {
		f.fs.syncs.Add(1)
		f.fs.mu.Lock()
		f.fs.synced[f.name] = max(f.fs.synced[f.name], covered)
		f.fs.mu.Unlock()
	}
	return err
}

// TestGroupCommitSpy is checklist item 14: with 64 concurrent appenders,
// every Append returns only after a sync that covers its whole frame
// returned, and there are fewer syncs than appends.
func TestGroupCommitSpy(t *testing.T) {
	t.Parallel()
	spy := &spyFS{FS: vfs.NewMem(), syncDelay: time.Millisecond, written: map[string]int64{}, synced: map[string]int64{}}
	j := mustOpen(t, spy, "j", Options{SegmentSize: 8 << 10})
	const workers, each = 64, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rec := []byte(fmt.Sprintf("w%d-%d", w, i))
				pos, err := j.Append(rec)
				if err != nil {
					t.Error(err)
					return
				}
				end := pos.Offset + int64(frameSize(len(rec)))
				spy.mu.Lock()
				synced := spy.synced[segName(pos.Segment)]
				spy.mu.Unlock()
				if synced < end {
					t.Errorf("Append of seq %d returned with its segment synced to %d; its frame ends at %d", pos.Seq, synced, end)
				}
			}
		}()
	}
	wg.Wait()
	mustClose(t, j)
	appends := int64(workers * each)
	if s := spy.syncs.Load(); s >= appends {
		t.Fatalf("%d syncs for %d appends; group commit should share syncs", s, appends)
	} else {
		t.Logf("%d appends, %d syncs (%.1f records per sync)", appends, s, float64(appends)/float64(s))
	}
}

// TestRotationOrder is checklist item 11's order check: a new segment's
// header is synced before the rename that publishes it, the directory is
// synced after the rename, and only then is a record written to it.
func TestRotationOrder(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{})
	writeRecords(t, j, 1)
	var ops []string
	var mu sync.Mutex
	m.SetInjector(func(op vfs.Op) error {
		mu.Lock()
		ops = append(ops, op.Kind.String()+" "+op.Path)
		mu.Unlock()
		return nil
	})
	if _, err := j.Rotate(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append([]byte("in the new segment")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	tmp, seg := segPath("j", 2)+".tmp", segPath("j", 2)
	order := []string{"create " + tmp, "write " + tmp, "sync " + tmp, "rename " + tmp, "syncdir j", "write " + seg, "sync " + seg}
	next := 0
	for _, op := range ops {
		if next < len(order) && op == order[next] {
			next++
		}
	}
	if next != len(order) {
		t.Fatalf("rotation did %q; want these in order: %q", ops, order)
	}
}

func TestRotateDropReplay(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{})
	writeRecords(t, j, 3) // seq 1-3 in segment 1
	if next, err := j.Rotate(); err != nil || next != 4 {
		t.Fatalf("Rotate = %d, %v; want 4", next, err)
	}
	if _, err := j.AppendBatch([][]byte{[]byte("d"), []byte("e")}); err != nil { // seq 4-5 in segment 2
		t.Fatal(err)
	}
	if next, _ := j.Rotate(); next != 6 {
		t.Fatalf("second Rotate = %d; want 6", next)
	}
	segs := j.Segments()
	if len(segs) != 3 || segs[1].FirstSeq != 4 || segs[2].FirstSeq != 6 || segs[2].Size != HeaderSize {
		t.Fatalf("Segments = %+v", segs)
	}
	if err := j.DropBefore(5); err != nil { // segment 2 holds seq 4 < 5... and 5: kept
		t.Fatal(err)
	}
	if got := j.Segments(); len(got) != 2 || got[0].Index != 2 {
		t.Fatalf("after DropBefore(5): %+v; want segments 2 and 3", got)
	}
	if _, err := m.Stat(segPath("j", 1)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("segment 1 still on disk: %v", err)
	}
	if err := j.DropBefore(100); err != nil {
		t.Fatal(err)
	}
	if got := j.Segments(); len(got) != 1 || got[0].Index != 3 {
		t.Fatalf("DropBefore(100) left %+v; want only the active segment 3", got)
	}
	err := j.Replay(2, func(Position, []byte) error { return nil })
	if !errors.Is(err, ErrDropped) {
		t.Fatalf("Replay(2) after dropping: %v; want ErrDropped", err)
	}
	if _, err := j.Append([]byte("f")); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, j)
	if len(got) != 1 || got[0].pos.Seq != 6 || string(got[0].rec) != "f" || j.LastSeq() != 6 {
		t.Fatalf("after drops: %+v, LastSeq %d; want only seq 6", got, j.LastSeq())
	}
	// The kept segments still open after a restart, sequence numbers intact.
	mustClose(t, j)
	j = mustOpen(t, m, "j", Options{})
	if p, err := j.Append([]byte("g")); err != nil || p.Seq != 7 {
		t.Fatalf("after reopen: Append = %+v, %v; want seq 7", p, err)
	}
	mustClose(t, j)
}

func TestReplayFromAndStop(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{SegmentSize: 200})
	defer mustClose(t, j)
	pos := writeRecords(t, j, 30)
	var seqs []uint64
	stop := errors.New("stop")
	err := j.Replay(12, func(p Position, rec []byte) error {
		if !bytes.Equal(rec, payload(int(p.Seq)-1)) || p != pos[p.Seq-1] {
			t.Fatalf("Replay gave %+v %q; want %+v %q", p, rec, pos[p.Seq-1], payload(int(p.Seq)-1))
		}
		seqs = append(seqs, p.Seq)
		if p.Seq == 20 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || len(seqs) != 9 || seqs[0] != 12 {
		t.Fatalf("Replay(12) stopped at 20: %v after %v", err, seqs)
	}
}

// TestConcurrentUse runs appends of every kind, replays, rotations and drops
// at once (for -race) and checks that each replay sees contiguous records.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	j := mustOpen(t, vfs.NewMem(), "j", Options{SegmentSize: 1024})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				rec := []byte(fmt.Sprintf("w%d-%d", w, i))
				switch i % 3 {
				case 0:
					_, err := j.Append(rec)
					check(t, err)
				case 1:
					_, err := j.AppendBatch([][]byte{rec, rec})
					check(t, err)
				default:
					done := make(chan error, 1)
					j.AppendAsync([][]byte{rec}, func(_ Position, err error) { done <- err })
					check(t, <-done)
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				var prev uint64
				err := j.Replay(0, func(p Position, _ []byte) error {
					if prev != 0 && p.Seq != prev+1 {
						return fmt.Errorf("seq %d after %d", p.Seq, prev)
					}
					prev = p.Seq
					return nil
				})
				if err != nil && !errors.Is(err, ErrDropped) {
					t.Error(err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			_, err := j.Rotate()
			check(t, err)
			check(t, j.DropBefore(j.LastSeq()/2))
		}
	}()
	wg.Wait()
	mustClose(t, j)
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

// TestCloseCompletesQueued: Close waits for queued async appends, which
// complete; later calls get ErrClosed; Close is idempotent.
func TestCloseCompletesQueued(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{})
	var calls atomic.Int64
	var firsts sync.Map
	for i := range 100 {
		j.AppendAsync([][]byte{payload(i)}, func(p Position, err error) {
			if err != nil {
				t.Errorf("queued append %d: %v", i, err)
			}
			if _, dup := firsts.LoadOrStore(i, p); dup {
				t.Errorf("done of append %d called twice", i)
			}
			calls.Add(1)
		})
	}
	mustClose(t, j)
	if calls.Load() != 100 {
		t.Fatalf("%d done calls after Close; want 100", calls.Load())
	}
	// Async calls are written in call order.
	for i := range 100 {
		p, _ := firsts.Load(i)
		if p.(Position).Seq != uint64(i)+1 {
			t.Fatalf("append %d got seq %d; want %d (call order)", i, p.(Position).Seq, i+1)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := j.Append([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v; want ErrClosed", err)
	}
	if _, err := j.Rotate(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Rotate after Close: %v; want ErrClosed", err)
	}
	if err := j.Replay(0, func(Position, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Replay after Close: %v; want ErrClosed", err)
	}
	if err := j.DropBefore(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("DropBefore after Close: %v; want ErrClosed", err)
	}
	ch := make(chan error, 1)
	j.AppendAsync([][]byte{[]byte("x")}, func(_ Position, err error) { ch <- err })
	if err := <-ch; !errors.Is(err, ErrClosed) {
		t.Fatalf("AppendAsync after Close: %v; want ErrClosed", err)
	}
}

func TestOnSyncAndEmptyBatch(t *testing.T) {
	t.Parallel()
	var recs, bytesN atomic.Int64
	opts := Options{OnSync: func(s SyncInfo) {
		recs.Add(int64(s.Records))
		bytesN.Add(int64(s.Bytes))
	}}
	j := mustOpen(t, vfs.NewMem(), "j", opts)
	defer mustClose(t, j)
	if p, err := j.AppendBatch(nil); err != nil || p != (Position{}) {
		t.Fatalf("empty AppendBatch = %+v, %v; want the zero Position", p, err)
	}
	writeRecords(t, j, 5)
	if _, err := j.AppendBatch([][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	for i := range 5 {
		want += int64(frameSize(len(payload(i))))
	}
	want += 2 * int64(frameSize(1))
	if recs.Load() != 7 || bytesN.Load() != want {
		t.Fatalf("OnSync saw %d records, %d bytes; want 7 and %d", recs.Load(), bytesN.Load(), want)
	}
	if j.LastSeq() != 7 || j.Dir() != "j" {
		t.Fatalf("LastSeq %d Dir %q", j.LastSeq(), j.Dir())
	}
}

// TestScanAndVerify: the read-only inspection functions report records,
// a torn tail (without repairing it) and corruption.
func TestScanAndVerify(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 20, 256, false)
	rep := mustVerify(t, f.m, f.dir, f.opts)
	last := f.pos[len(f.pos)-1]
	if rep.Records != 20 || rep.FirstSeq != 1 || rep.LastSeq != 20 || rep.Segments != int(last.Segment) || rep.Torn != nil {
		t.Fatalf("Verify = %+v", rep)
	}
	var got []entry
	if err := Scan(f.m, f.dir, f.opts, func(p Position, rec []byte) error {
		got = append(got, entry{p, bytes.Clone(rec)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, f.pos)
	// A torn tail is reported, not repaired.
	m := f.clone()
	_, data := f.lastSeg(t)
	path := segPath(f.dir, last.Segment)
	end := f.frameEnd(len(f.pos) - 1)
	torn := append(bytes.Clone(data[:end]), 1, 2, 3)
	torn = append(torn, data[min(len(torn), len(data)):]...) // the preallocated zeros stay
	m.WriteFile(path, torn)
	rep = mustVerify(t, m, f.dir, f.opts)
	if rep.Torn == nil || rep.Torn.File != path || rep.Torn.Offset != end || rep.Torn.Bytes != int64(len(torn))-end || rep.Records != 20 {
		t.Fatalf("Verify of a torn tail = %+v %+v", rep, rep.Torn)
	}
	if after, _ := m.ReadFile(path); !bytes.Equal(after, torn) {
		t.Fatalf("Verify changed the segment")
	}
	// Corruption stops Scan after the records before it.
	m = f.clone()
	first, _ := f.m.ReadFile(segPath(f.dir, 1))
	m.WriteFile(segPath(f.dir, 1), flip(first, int(f.pos[2].Offset)+20))
	n := 0
	err := Scan(m, f.dir, f.opts, func(Position, []byte) error { n++; return nil })
	wantCorrupt(t, err, segPath(f.dir, 1), f.pos[2].Offset)
	if n != 2 {
		t.Fatalf("Scan delivered %d records before the damage; want 2", n)
	}
	// An empty or missing directory.
	if rep, err := Verify(vfs.NewMem(), ".", Options{}); err != nil || rep.Records != 0 {
		t.Fatalf("Verify of an empty directory = %+v, %v", rep, err)
	}
}

func TestMissingSegmentIsCorrupt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 30, 200, false)
	m := f.clone()
	m.Remove(segPath(f.dir, 2))
	_, err := Open(f.dir, Options{FS: m})
	wantCorrupt(t, err, segPath(f.dir, 2), 0)
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{SegmentSize: -1}, {MaxRecordSize: -1}, {MaxRecordSize: 1<<30 + 1}} {
		o.FS = vfs.NewMem()
		if _, err := Open("j", o); err == nil || !strings.Contains(err.Error(), "Options.") {
			t.Errorf("Open with %+v: %v; want an error naming the option", o, err)
		}
	}
}

func TestIgnoresOtherFiles(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	m.MkdirAll("j")
	for _, name := range []string{"00000000000000000001.snap", "notes.txt", "1.seg", "00000000000000000009.seg.broken"} {
		m.WriteFile("j/"+name, []byte("not a segment"))
	}
	m.WriteFile("j/00000000000000000003.seg.tmp", []byte("half a rotation"))
	j := mustOpen(t, m, "j", Options{})
	writeRecords(t, j, 2)
	mustClose(t, j)
	if _, err := m.Stat("j/00000000000000000003.seg.tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("leftover .seg.tmp not removed: %v", err)
	}
	if _, err := m.Stat("j/notes.txt"); err != nil {
		t.Fatalf("an unrelated file was touched: %v", err)
	}
}

// TestPreallocation: new segments are zero-filled to SegmentSize, the next
// one is prepared in the background and published on rotation with the same
// order of syncs, a sealed segment loses its unused zeros, and no prepared
// file outlives Close.
func TestPreallocation(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	opts := Options{SegmentSize: 1024}
	j := mustOpen(t, m, "j", opts)
	size := func(name string) int64 {
		st, err := m.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	if got := size(segPath("j", 1)); got != 1024 {
		t.Fatalf("new segment is %d bytes; want 1024 (preallocated)", got)
	}
	var ops []string
	var mu sync.Mutex
	m.SetInjector(func(op vfs.Op) error {
		mu.Lock()
		ops = append(ops, op.Kind.String()+" "+op.Path)
		mu.Unlock()
		return nil
	})
	want := writeRecords(t, j, 30) // past half of the segment: the next one is prepared
	if _, err := j.Rotate(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append([]byte("in the new segment")); err != nil {
		t.Fatal(err)
	}
	segs := j.Segments()
	for _, s := range segs[:len(segs)-1] {
		if got := size(s.Path); got != s.Size {
			t.Fatalf("sealed segment %s is %d bytes; want its committed %d", s.Path, got, s.Size)
		}
	}
	last := segs[len(segs)-1]
	if got := size(last.Path); got != 1024 {
		t.Fatalf("active segment is %d bytes; want 1024", got)
	}
	tmp, seg := last.Path+".tmp", last.Path
	order := []string{"create " + tmp, "write " + tmp, "sync " + tmp, "write " + tmp, "sync " + tmp, "rename " + tmp, "syncdir j", "write " + seg, "sync " + seg}
	mu.Lock()
	next := 0
	for _, op := range ops {
		if next < len(order) && op == order[next] {
			next++
		}
	}
	mu.Unlock()
	if next != len(order) {
		t.Fatalf("publishing a prepared segment did %q; want these in order: %q", ops, order)
	}
	for range 20 { // start preparing segment 4, then close while it may run
		if _, err := j.Append(make([]byte, 30)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, j)
	names, _ := m.List("j")
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") {
			t.Fatalf("prepared file %s left after Close (files %v)", n, names)
		}
	}
	j = mustOpen(t, m, "j", opts)
	defer mustClose(t, j)
	got := readAll(t, j)
	checkRecords(t, got[:30], want)
	if len(got) != 51 {
		t.Fatalf("reopened journal has %d records; want 51", len(got))
	}
	if rep := mustVerify(t, m, "j", opts); rep.Torn != nil {
		t.Fatalf("Verify reports the preallocated zeros as torn: %+v", rep.Torn)
	}
}

// TestOnReplay checks that a replay to the end reports the records and
// bytes it passed on, and that one stopped early reports nothing.
func TestOnReplay(t *testing.T) {
	t.Parallel()
	var got []ReplayInfo
	j := mustOpen(t, vfs.NewMem(), "j", Options{SegmentSize: 200, OnReplay: func(ri ReplayInfo) { got = append(got, ri) }})
	defer mustClose(t, j)
	writeRecords(t, j, 30)
	var bytes int64
	for i := 11; i < 30; i++ {
		bytes += int64(len(payload(i)))
	}
	if err := j.Replay(12, func(Position, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Records != 19 || got[0].Bytes != bytes || got[0].Duration <= 0 {
		t.Fatalf("OnReplay after Replay(12) of 30 records: %+v; want 19 records, %d bytes", got, bytes)
	}
	stop := errors.New("stop")
	if err := j.Replay(1, func(Position, []byte) error { return stop }); !errors.Is(err, stop) || len(got) != 1 {
		t.Fatalf("a stopped replay: %v, OnReplay calls %+v", err, got)
	}
}
