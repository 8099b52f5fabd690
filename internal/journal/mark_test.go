package journal

import (
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/vfs"
)

// TestAcknowledgedLossIsDetected is issue 14 item 12: records that were
// durable and then cut off at a record boundary, zeroed, or lost with their
// whole segment file look like a clean end to the segment format; the
// marker (and, for a preallocated segment, its recorded size) makes Open
// refuse them with an error naming the file and saying to run verify, and
// Verify says corrupt.
func TestAcknowledgedLossIsDetected(t *testing.T) {
	type build struct {
		segSize    int64
		noPrealloc bool
		kill       bool // stop without Close: the marker is as Open and the rotations left it
	}
	tests := []struct {
		name   string
		b      build
		damage func(t *testing.T, m *vfs.Mem, pos []Position) (file string, offset int64)
	}{
		{"newest segment cut at a record boundary after Close", build{1 << 20, true, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			return cutAt(t, m, pos[len(pos)-5])
		}},
		{"preallocated newest segment cut at a record boundary after a kill", build{1 << 16, false, true}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			return cutAt(t, m, pos[len(pos)-5])
		}},
		{"newest records zeroed after Close", build{1 << 16, false, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			p := pos[len(pos)-5]
			path := segPath("j", p.Segment)
			data, _ := m.ReadFile(path)
			clear(data[p.Offset:])
			m.WriteFile(path, data)
			return path, p.Offset
		}},
		{"newest segment deleted after a kill", build{400, true, true}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
			path := segPath("j", pos[len(pos)-1].Segment)
			if err := m.Remove(path); err != nil {
				t.Fatal(err)
			}
			return path, 0
		}},
		{"only segment deleted after Close", build{1 << 20, true, false}, func(t *testing.T, m *vfs.Mem, pos []Position) (string, int64) {
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
