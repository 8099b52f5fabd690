package journal

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/vfs"
)

// fixture is the journal a process killed right after its last append
// returned leaves on a Mem: every record synced, the marker as Open and the
// rotations last wrote it (a crash is the only thing that leaves a torn
// tail, so the repair tests start from one).
type fixture struct {
	m    *vfs.Mem
	dir  string
	opts Options
	pos  []Position // of payload(0..n-1)
}

// newFixture writes n records, one group commit each, with the given
// segment size (preallocated unless noPrealloc), and keeps what a kill
// right after the last append would leave.
func newFixture(t testing.TB, n int, segSize int64, noPrealloc bool) fixture {
	t.Helper()
	f := fixture{m: vfs.NewMem(), dir: "j", opts: Options{SegmentSize: segSize, MaxRecordSize: 1 << 16, NoPreallocate: noPrealloc}}
	j := mustOpen(t, f.m, f.dir, f.opts)
	f.pos = writeRecords(t, j, n)
	killed := f.m.CrashClone(nil)
	mustClose(t, j)
	f.m = killed
	return f
}

// clone returns a copy of the fixture's filesystem.
func (f fixture) clone() *vfs.Mem { return f.m.CrashClone(nil) }

// lastSeg returns the index and bytes of the newest segment.
func (f fixture) lastSeg(t testing.TB) (uint64, []byte) {
	idx := f.pos[len(f.pos)-1].Segment
	data, err := f.m.ReadFile(segPath(f.dir, idx))
	if err != nil {
		t.Fatal(err)
	}
	return idx, data
}

// frameEnd is the offset just after record i's frame.
func (f fixture) frameEnd(i int) int64 { return f.pos[i].Offset + int64(frameSize(len(payload(i)))) }

// reopenAndAppend opens m, checks it holds exactly the first keep records,
// appends one more, reopens and checks again, and verifies.
func (f fixture) reopenAndAppend(t testing.TB, m *vfs.Mem, keep int) {
	t.Helper()
	j := mustOpen(t, m, f.dir, f.opts)
	checkRecords(t, readAll(t, j), f.pos[:keep])
	p, err := j.Append(payload(keep))
	if err != nil {
		t.Fatalf("Append after repair: %v", err)
	}
	if p.Seq != uint64(keep)+1 {
		t.Fatalf("appended record got seq %d; want %d", p.Seq, keep+1)
	}
	mustClose(t, j)
	j = mustOpen(t, m, f.dir, f.opts)
	want := append(append([]Position(nil), f.pos[:keep]...), p)
	checkRecords(t, readAll(t, j), want)
	mustClose(t, j)
	if rep := mustVerify(t, m, f.dir, f.opts); rep.Torn != nil || rep.Records != keep+1 {
		t.Fatalf("Verify after repair: %+v (torn %+v); want %d records, no torn tail", rep, rep.Torn, keep+1)
	}
}

// TestTruncateEveryOffset is checklist item 1: the newest segment cut at
// every byte offset keeps exactly the records wholly before the cut, then
// appending and reopening work.
func TestTruncateEveryOffset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		segSize    int64
		noPrealloc bool
	}{{"one segment", 1 << 20, true}, {"three segments", 400, true}, {"three preallocated segments", 400, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 40, tc.segSize, tc.noPrealloc)
			idx, data := f.lastSeg(t)
			if tc.segSize < 1<<20 && idx < 3 {
				t.Fatalf("fixture has %d segments; want 3", idx)
			}
			for k := 0; k <= len(data); k++ {
				m := f.clone()
				m.WriteFile(segPath(f.dir, idx), data[:k])
				keep := 0
				for keep < len(f.pos) && (f.pos[keep].Segment < idx || f.frameEnd(keep) <= int64(k)) {
					keep++
				}
				rep, err := Verify(m, f.dir, f.opts)
				if prealloc := f.opts.prealloc(); !tc.noPrealloc && k >= HeaderSize && int64(k) < prealloc {
					// A crash never shortens a preallocated segment: the
					// zeros were synced before it was published. (Cut
					// inside its header, the size it had is unknown.)
					wantCorrupt(t, err, segPath(f.dir, idx), int64(k))
					_, err = Open(f.dir, Options{FS: m, SegmentSize: f.opts.SegmentSize})
					wantCorrupt(t, err, segPath(f.dir, idx), int64(k))
					continue
				}
				if err != nil {
					t.Fatalf("cut at %d: Verify: %v", k, err)
				}
				end := int64(HeaderSize)
				if keep > 0 && f.pos[keep-1].Segment == idx {
					end = f.frameEnd(keep - 1)
				}
				clean := int64(k) >= end && allZero(data[end:k]) // a cut that leaves only zeros after the records is a clean end
				if rep.Records != keep || (rep.Torn == nil) != clean {
					t.Fatalf("cut at %d: Verify %+v torn %+v; want %d records", k, rep, rep.Torn, keep)
				}
				f.reopenAndAppend(t, m, keep)
				if rep.Torn != nil && k >= HeaderSize {
					want := bytes.TrimRight(data[rep.Torn.Offset:k], "\x00")
					broken, err := m.ReadFile(segPath(f.dir, idx) + ".broken")
					if err != nil || !bytes.Equal(broken, want) {
						t.Fatalf("cut at %d: .broken holds %x (%v); want the cut bytes without trailing zeros %x", k, broken, err, want)
					}
				}
			}
		})
	}
}

// TestBitFlipEveryOffset is checklist item 2: one flipped bit at every byte
// of every segment is a torn tail (repaired, nothing acknowledged before it
// lost) inside the newest record, and ErrCorrupt naming the file and offset
// anywhere else; never a wrong record.
func TestBitFlipEveryOffset(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 30, 300, false)
	last := len(f.pos) - 1
	for idx := uint64(1); idx <= f.pos[last].Segment; idx++ {
		path := segPath(f.dir, idx)
		data, err := f.m.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for off := range data {
			m := f.clone()
			m.WriteFile(path, flip8(data, off))
			inLast := idx == f.pos[last].Segment && int64(off) >= f.pos[last].Offset
			j, err := Open(f.dir, Options{FS: m, SegmentSize: f.opts.SegmentSize, MaxRecordSize: f.opts.MaxRecordSize})
			if inLast {
				if err != nil {
					t.Fatalf("flip in the newest record (%s byte %d): Open: %v; want a torn-tail repair", path, off, err)
				}
				mustClose(t, j)
				// Open took the lock; a fresh clone checks the result. A
				// flip in the preallocated zeros after the last record
				// loses nothing.
				keep := last
				if int64(off) >= f.frameEnd(last) {
					keep = last + 1
				}
				f.reopenAndAppend(t, m.CrashClone(nil), keep)
				continue
			}
			// The damaged frame starts at the last frame offset <= off.
			want := int64(0)
			for _, p := range f.pos {
				if p.Segment == idx && p.Offset <= int64(off) {
					want = p.Offset
				}
			}
			wantCorrupt(t, err, path, want)
			if _, verr := Verify(m, f.dir, f.opts); !errors.Is(verr, ErrCorrupt) {
				t.Fatalf("Verify of a flip at %s byte %d: %v; want ErrCorrupt", path, off, verr)
			}
		}
	}
}

// flip8 returns b with one bit of byte i inverted (which bit varies with i).
func flip8(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1 << (i % 8)
	return c
}

// TestZeroedSector is checklist item 3: a zeroed 512-byte sector inside
// the newest record is a torn write after a kill; one in an earlier
// record, with valid records after it, is corruption; and after a clean
// Close, whose marker names every record, the newest one zeroed is
// corruption too (issue 14 item 12).
func TestZeroedSector(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	opts := Options{}
	j := mustOpen(t, m, "j", opts)
	big := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 1500) }
	var pos []Position
	for i := range 4 {
		p, err := j.Append(big(i))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	killed := m.CrashClone(nil)
	mustClose(t, j)
	path := segPath("j", 1)
	data, _ := m.ReadFile(path)
	zeroIn := func(m *vfs.Mem, rec int) *vfs.Mem {
		c := m.CrashClone(nil)
		sector := (pos[rec].Offset/512 + 1) * 512 // a whole sector inside the record
		d := bytes.Clone(data)
		clear(d[sector : sector+512])
		c.WriteFile(path, d)
		return c
	}
	c := zeroIn(killed, 3)
	j = mustOpen(t, c, "j", opts)
	if got := readAll(t, j); len(got) != 3 {
		t.Fatalf("zeroed sector in the newest record: %d records kept; want 3", len(got))
	}
	mustClose(t, j)
	_, err := Open("j", Options{FS: zeroIn(killed, 1)})
	wantCorrupt(t, err, path, pos[1].Offset)
	_, err = Open("j", Options{FS: zeroIn(m, 3)})
	wantCorrupt(t, err, path, pos[3].Offset)
}

// TestGarbageAfterLastRecord is checklist item 4: zeros or garbage after the
// last record are cut, new appends are readable, and the old tail never
// comes back.
func TestGarbageAfterLastRecord(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	garbage := make([]byte, 1000)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	for name, tail := range map[string][]byte{"zeros": make([]byte, 4096), "garbage": garbage} {
		f := newFixture(t, 10, 1<<20, true)
		m := f.clone()
		_, data := f.lastSeg(t)
		m.WriteFile(segPath(f.dir, 1), append(bytes.Clone(data), tail...))
		f.reopenAndAppend(t, m, 10)
		after, _ := m.ReadFile(segPath(f.dir, 1))
		if name == "garbage" && bytes.Contains(after, tail[:64]) {
			t.Fatalf("the old tail is still in the segment")
		}
	}
}

// TestTornHeaderAfterDropIsCorrupt: when old segments were dropped, a torn
// header leaves no way to know the first sequence number: refuse.
func TestTornHeaderAfterDropIsCorrupt(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{})
	writeRecords(t, j, 3)
	next, err := j.Rotate()
	if err != nil || next != 4 {
		t.Fatalf("Rotate = %d, %v; want 4", next, err)
	}
	if err := j.DropBefore(next); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	m.WriteFile(segPath("j", 2), appendHeader(nil, 2, 4)[:20])
	_, err = Open("j", Options{FS: m})
	wantCorrupt(t, err, segPath("j", 2), 0)
}

// TestCrashDuringRepair is checklist item 16: a failure or crash at any
// step of Open's repair, then a plain Open, gives the same journal as an
// uninterrupted repair, and a .broken copy of the cut bytes survives.
func TestCrashDuringRepair(t *testing.T) {
	t.Parallel()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	tail := []byte("a torn write that never finished ....")
	for _, prealloc := range []bool{false, true} {
		f := newFixture(t, 12, 1<<12, !prealloc)
		_, data := f.lastSeg(t)
		end := f.frameEnd(11)
		damaged := append(bytes.Clone(data[:end]), tail...)
		if prealloc { // the torn bytes sit inside the preallocated zeros
			damaged = bytes.Clone(data)
			copy(damaged[end:], tail)
		}
		for n := int64(1); ; n++ {
			m := f.clone()
			m.WriteFile(segPath(f.dir, 1), damaged)
			m.SetInjector(vfs.FailNth(n))
			j, err := Open(f.dir, withFS(f.opts, m))
			if err == nil {
				j.Close()
				if m.Injected() == 0 {
					break // the whole Open ran without reaching op n
				}
			}
			for _, crash := range []*vfs.Mem{m.CrashClone(nil), m.CrashClone(rng)} {
				f.reopenAndAppend(t, crash, 12)
				names, _ := crash.List(f.dir)
				found := false
				for _, name := range names {
					if strings.Contains(name, ".broken") {
						b, _ := crash.ReadFile(filepath.Join(f.dir, name))
						found = found || bytes.Equal(b, tail)
					}
				}
				if !found {
					t.Fatalf("preallocated %v, failure at op %d: no .broken file holds the cut bytes (files %v)", prealloc, n, names)
				}
			}
		}
	}
}

// withFS returns o using fsys.
func withFS(o Options, fsys vfs.FS) Options {
	o.FS = fsys
	return o
}

// TestOpenSyncsWhatItReads: records a killed process wrote but never synced
// are still in the page cache when the journal is reopened; Open counts
// them, so it must make them durable before new frames claim (by their
// synced offset) that everything before them is. Otherwise a power cut
// during the next group commit could keep the new frames and lose the old
// ones, and the next Open would call an ordinary crash corruption.
func TestOpenSyncsWhatItReads(t *testing.T) {
	t.Parallel()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	f := newFixture(t, 3, 1<<20, true)
	_, data := f.lastSeg(t)
	for it := range 100 {
		m := f.clone()
		// The killed process's last group: written, never synced.
		seg, err := m.OpenReadWrite(segPath(f.dir, 1))
		if err != nil {
			t.Fatal(err)
		}
		var group []byte
		for i := range 4 {
			group = appendFrame(group, bytes.Repeat([]byte{byte('k' + i)}, 700), int64(len(data)))
		}
		if _, err := seg.WriteAt(group, int64(len(data))); err != nil {
			t.Fatal(err)
		}
		seg.Close()
		j := mustOpen(t, m, f.dir, f.opts)
		if n := len(readAll(t, j)); n != 7 {
			t.Fatalf("reopened journal has %d records; want 3 synced + 4 from the page cache", n)
		}
		// The disk freezes during the next group commit's sync.
		m.SetInjector(vfs.FailIf(func(op vfs.Op) bool { return op.Kind == vfs.OpSync }))
		if _, err := j.Append(bytes.Repeat([]byte{'n'}, 700)); !errors.Is(err, ErrFailed) {
			t.Fatalf("append on a frozen disk: %v; want ErrFailed", err)
		}
		j.Close()
		crash := m.CrashClone(rng)
		j, err = Open(f.dir, Options{FS: crash})
		if err != nil {
			t.Fatalf("iteration %d (seed %d): Open after a power cut: %v", it, seed, err)
		}
		if n := len(readAll(t, j)); n < 7 {
			t.Fatalf("iteration %d: %d records after the power cut; the 7 read by the previous Open were made durable by it", it, n)
		}
		mustClose(t, j)
	}
}

// TestRepairKeepsPreallocation: torn bytes followed by preallocated zeros
// are zeroed, not truncated, so the segment keeps its preallocated size.
func TestRepairKeepsPreallocation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 5, 4096, false)
	_, data := f.lastSeg(t)
	end := f.frameEnd(4)
	torn := bytes.Clone(data)
	copy(torn[end:], "half of a group commit")
	m := f.clone()
	m.WriteFile(segPath(f.dir, 1), torn)
	f.reopenAndAppend(t, m, 5)
	after, _ := m.ReadFile(segPath(f.dir, 1))
	if len(after) != len(data) {
		t.Fatalf("repaired segment is %d bytes; want the preallocated %d", len(after), len(data))
	}
	broken, _ := m.ReadFile(segPath(f.dir, 1) + ".broken")
	if string(broken) != "half of a group commit" {
		t.Fatalf(".broken holds %q", broken)
	}
}
