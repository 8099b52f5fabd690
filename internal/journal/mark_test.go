package journal

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/internal/vfs"
)

// TestAcknowledgedLossIsDetected is issue 14 item 12: records that were
// durable and then cut off at a record boundary, zeroed, or lost with their
// whole segment file look like a clean end to the segment format; the
// marker (and, for a preallocated segment, its recorded size) makes Open
// refuse them with an error naming the file and saying to run verify, and
// Verify says corrupt.
func TestAcknowledgedLossIsDetected(t *testing.T) {
	t.Parallel()
	type build struct {
		segSize    int64
		noPrealloc bool
		kill       bool // stop without Close: the marker is as Open and the rotations left it
		rotate     bool // Rotate after the records, as a checkpoint at Close does
	}
	tests := []struct {
		name   string
		b      build
		damage func(t *testing.T, m *vfs.Mem, pos []Position) (file string, offset int64)
	}{
		{"newest segment cut at a record boundary after Close", build{1 << 20, true, false, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			return cutAt(t, m, pos[len(pos)-5])
		}},
		{"preallocated newest segment cut at a record boundary after a kill", build{1 << 16, false, true, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			return cutAt(t, m, pos[len(pos)-5])
		}},
		{"newest records zeroed after Close", build{1 << 16, false, false, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			p := pos[len(pos)-5]
			path := segPath("j", p.Segment)
			data, _ := m.ReadFile(path)
			clear(data[p.Offset:])
			m.WriteFile(path, data)
			return path, p.Offset
		}},
		{"newest segment deleted after a kill", build{400, true, true, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			path := segPath("j", pos[len(pos)-1].Segment)
			if err := m.Remove(path); err != nil {
				t.Fatal(err)
			}
			return path, 0
		}},
		{"newest segment deleted after Rotate and Close, preallocated", build{1 << 16, false, false, true}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			// The segment before it was sealed short by the Rotate: the
			// missing file is what is reported, not that one's size.
			path := segPath("j", pos[len(pos)-1].Segment+1)
			if err := m.Remove(path); err != nil {
				t.Fatal(err)
			}
			return path, 0
		}},
		{"only segment deleted after Close", build{1 << 20, true, false, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			path := segPath("j", 1)
			if err := m.Remove(path); err != nil {
				t.Fatal(err)
			}
			return path, 0
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := vfs.NewMem()
			opts := Options{SegmentSize: tt.b.segSize, NoPreallocate: tt.b.noPrealloc}
			j := mustOpen(t, m, "j", opts)
			pos := writeRecords(t, j, 40)
			if tt.b.rotate {
				if _, err := j.Rotate(); err != nil {
					t.Fatal(err)
				}
			}
			if tt.b.kill {
				killed := m.CrashClone(nil)
				mustClose(t, j)
				m = killed
			} else {
				mustClose(t, j)
			}
			file, offset := tt.damage(t, m, pos)
			opts.FS = m
			_, err := Verify(m, "j", opts)
			wantCorrupt(t, err, file, offset)
			_, err = Open("j", opts)
			wantCorrupt(t, err, file, offset)
			if !strings.Contains(err.Error(), "runlog journal verify") {
				t.Fatalf("Open's error does not say to run verify: %v", err)
			}
			if _, err := m.Stat(segPath("j", 1)); tt.name == "only segment deleted after Close" && err == nil {
				t.Fatalf("Open created a new segment in a damaged directory")
			}
		})
	}
}

func cutAt(t *testing.T, m *vfs.Mem, p Position) (string, int64) {
	t.Helper()
	path := segPath("j", p.Segment)
	data, err := m.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m.WriteFile(path, data[:p.Offset])
	return path, p.Offset
}

// TestMarkerSurvivesTornWrites: a crash while a marker slot is rewritten
// leaves the other slot, and a crash while MARK is first created leaves no
// marker; neither is damage.
func TestMarkerSurvivesTornWrites(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{SegmentSize: 200})
	writeRecords(t, j, 20) // rotations rewrite the marker
	mustClose(t, j)
	cur, ok, err := readMark(m, "j")
	if err != nil || !ok || cur.nextSeq != 21 {
		t.Fatalf("marker %+v %v %v; want next seq 21", cur, ok, err)
	}
	data, _ := m.ReadFile("j/" + markName)
	older := int64((cur.gen+1)%2) * markSlotGap
	for _, c := range []struct {
		name string
		data []byte
		gen  uint64 // generation of the marker read, 0 for none
	}{
		{"older slot torn", append(append(append([]byte(nil), data[:older]...), 0xff, 0xee), data[older+2:]...), cur.gen},
		{"newest slot torn", func() []byte {
			d := append([]byte(nil), data...)
			d[int64(cur.gen%2)*markSlotGap+30] ^= 1
			return d
		}(), cur.gen - 1},
		{"file of zeros", make([]byte, len(data)), 0},
		{"empty file", nil, 0},
	} {
		c2 := m.CrashClone(nil)
		c2.WriteFile("j/"+markName, c.data)
		got, ok, err := readMark(c2, "j")
		if err != nil || ok != (c.gen != 0) || got.gen != c.gen {
			t.Fatalf("%s: marker %+v %v %v; want generation %d", c.name, got, ok, err, c.gen)
		}
		jj, err := Open("j", Options{FS: c2, SegmentSize: 200})
		if err != nil {
			t.Fatalf("%s: Open: %v", c.name, err)
		}
		if n := len(readAll(t, jj)); n != 20 {
			t.Fatalf("%s: %d records", c.name, n)
		}
		mustClose(t, jj)
		if got, ok, _ := readMark(c2, "j"); !ok || got.nextSeq != 21 {
			t.Fatalf("%s: after Open and Close the marker is %+v %v", c.name, got, ok)
		}
	}
}

// TestTornGroupPastPreallocatedSize: a torn last group that had grown the
// newest segment past its preallocated size is cut without making the file
// shorter than that size, so the next Open does not take the repair for a
// cut file.
func TestTornGroupPastPreallocatedSize(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	opts := Options{SegmentSize: 4096, MaxRecordSize: 1 << 16}
	j := mustOpen(t, m, "j", opts)
	if _, err := j.Append(make([]byte, 3000)); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{7}, 3000) // starts below 4096, ends past it
	p, err := j.Append(big)
	if err != nil {
		t.Fatal(err)
	}
	killed := m.CrashClone(nil)
	mustClose(t, j)
	path := segPath("j", p.Segment)
	data, _ := killed.ReadFile(path)
	if p.Segment != 1 || int64(len(data)) <= opts.SegmentSize {
		t.Fatalf("the second record is in segment %d, which is %d bytes; want segment 1 grown past %d", p.Segment, len(data), opts.SegmentSize)
	}
	data[len(data)-100] ^= 1 // the last group, torn by the kill
	killed.WriteFile(path, data)
	// The marker names only what Open found, so this is a torn tail.
	opts.FS = killed
	for round := range 2 {
		j, err := Open("j", opts)
		if err != nil {
			t.Fatalf("Open %d: %v", round+1, err)
		}
		if n := len(readAll(t, j)); n != 1 {
			t.Fatalf("Open %d: %d records; want 1", round+1, n)
		}
		mustClose(t, j)
	}
	if after, _ := killed.ReadFile(path); int64(len(after)) != opts.SegmentSize {
		t.Fatalf("after the repair the segment is %d bytes; want its preallocated %d", len(after), opts.SegmentSize)
	}
}

// TestMarkEvery: with Options.MarkEvery the marker follows the appends
// without a Close or a rotation, so records zeroed after a kill are
// detected; without it, the same damage after the last marker cannot be
// told from a clean end (the documented limit).
func TestMarkEvery(t *testing.T) {
	t.Parallel()
	for _, every := range []time.Duration{0, 10 * time.Millisecond} {
		m := vfs.NewMem()
		opts := Options{SegmentSize: 1 << 16, MarkEvery: every}
		j := mustOpen(t, m, "j", opts)
		pos := writeRecords(t, j, 30)
		if every > 0 {
			// Wait for the marker to name the last record (an event, polled).
			testwait.ForWithin(t, 10*time.Second, fmt.Sprintf("MarkEvery %v: the marker to name record 30", every), func() bool {
				cur, ok, _ := readMark(m, "j")
				return ok && cur.nextSeq == 31
			})
		}
		killed := m.CrashClone(nil)
		mustClose(t, j)
		p := pos[25]
		path := segPath("j", p.Segment)
		data, _ := killed.ReadFile(path)
		clear(data[p.Offset:])
		killed.WriteFile(path, data)
		opts.FS = killed
		j2, err := Open("j", opts)
		if every == 0 {
			if err != nil {
				t.Fatalf("MarkEvery 0: %v; want the loss after the last marker to go unseen", err)
			}
			if n := len(readAll(t, j2)); n != 25 {
				t.Fatalf("MarkEvery 0: %d records", n)
			}
			mustClose(t, j2)
			continue
		}
		wantCorrupt(t, err, path, p.Offset)
	}
}
