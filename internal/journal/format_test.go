package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/vfs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestEncodeFrame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rec      string
		synced   int64
		wantSize int
	}{
		{"", 40, 16},
		{"a", 40, 24},
		{"1234567", 56, 24},
		{"12345678", 96, 24},
		{"123456789", 96, 32},
	}
	for _, tt := range tests {
		f := appendFrame([]byte("prefix"), []byte(tt.rec), tt.synced)[len("prefix"):]
		if len(f) != tt.wantSize || frameSize(len(tt.rec)) != tt.wantSize {
			t.Errorf("frame of %q is %d bytes (frameSize %d); want %d", tt.rec, len(f), frameSize(len(tt.rec)), tt.wantSize)
			continue
		}
		if got := binary.LittleEndian.Uint32(f[0:4]); got != uint32(len(tt.rec)) {
			t.Errorf("length field %d; want %d", got, len(tt.rec))
		}
		if got := int64(binary.LittleEndian.Uint64(f[8:16])); got != tt.synced {
			t.Errorf("synced field %d; want %d", got, tt.synced)
		}
		if !allZero(f[16+len(tt.rec):]) {
			t.Errorf("padding of %q is not zero: %x", tt.rec, f)
		}
		p, synced, reason := checkFrame(f)
		if reason != "" || string(p) != tt.rec || synced != tt.synced {
			t.Errorf("checkFrame(frame of %q) = %q, %d, %q", tt.rec, p, synced, reason)
		}
	}
}

// seg builds segment bytes: a header for index 1 starting at seq 1, then
// the given parts.
func seg(parts ...[]byte) []byte {
	return bytes.Join(append([][]byte{appendHeader(nil, 1, 1)}, parts...), nil)
}

func frame(rec string, synced int64) []byte { return appendFrame(nil, []byte(rec), synced) }

// flip returns b with bit 0 of byte i inverted.
func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

func TestDecodeSegment(t *testing.T) {
	t.Parallel()
	a, b := frame("alpha", 40), frame("bravo", 64)
	hugeLen := bytes.Clone(a)
	binary.LittleEndian.PutUint32(hugeLen[0:4], 1<<31-1)
	future := frame("x", 4096)
	badVersion := appendHeader(nil, 1, 1)
	binary.LittleEndian.PutUint32(badVersion[8:12], Version+1)
	binary.LittleEndian.PutUint32(badVersion[32:36], crc32c(badVersion[:32]))
	tests := []struct {
		name        string
		data        []byte
		wantRecs    []string
		wantEnd     int64
		wantTorn    string // substring of the torn reason, "" if clean
		wantCorrupt int64  // offset, -1 if not corrupt
		wantShort   bool
	}{
		{"header only", seg(), nil, 40, "", -1, false},
		{"two records", seg(a, b), []string{"alpha", "bravo"}, 88, "", -1, false},
		{"empty record", seg(frame("", 40)), []string{""}, 56, "", -1, false},
		{"stray bytes", seg(a, []byte{1, 2, 3}), []string{"alpha"}, 64, "stray", -1, false},
		{"partial frame", seg(a, b[:20]), []string{"alpha"}, 64, "past the end", -1, false},
		{"bad crc in last", seg(a, flip(b, 20)), []string{"alpha"}, 64, "checksum", -1, false},
		{"zeroed last is a clean end", seg(a, make([]byte, 24)), []string{"alpha"}, 64, "", -1, false},
		{"preallocated zeros are a clean end", seg(a, make([]byte, 4096)), []string{"alpha"}, 64, "", -1, false},
		{"zeros then garbage", seg(a, make([]byte, 4096), []byte{9}), []string{"alpha"}, 64, "zeroed", -1, false},
		{"length past end", seg(hugeLen), nil, 40, "exceeds", -1, false},
		{"synced offset in the future", seg(a, future), []string{"alpha"}, 64, "synced offset", -1, false},
		{"damage before a later group", seg(flip(a, 20), b), nil, 40, "", 40, false},
		{"damage inside the last group", seg(flip(a, 20), frame("bravo", 40)), nil, 40, "checksum", -1, false},
		{"zeroed middle before a later group", seg(make([]byte, 24), b), nil, 40, "", 40, false},
		{"bad magic", flip(seg(a), 0), nil, 0, "", 0, false},
		{"bad header crc", flip(seg(a), 33), nil, 0, "", 0, false},
		{"unknown version", append(badVersion, a...), nil, 0, "", 0, false},
		{"short header", seg()[:30], nil, 0, "shorter", -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			res, err := scanSegment(bytes.NewReader(tt.data), int64(len(tt.data)), 1024, func(seq uint64, off int64, rec []byte) error {
				if seq != uint64(len(got))+1 {
					t.Errorf("record %q has seq %d; want %d", rec, seq, len(got)+1)
				}
				got = append(got, string(rec))
				return nil
			})
			if tt.wantCorrupt >= 0 {
				var ce *CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Offset != tt.wantCorrupt {
					t.Fatalf("err %v; want corruption at %d", err, tt.wantCorrupt)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if strings.Join(got, ",") != strings.Join(tt.wantRecs, ",") {
				t.Errorf("records %q; want %q", got, tt.wantRecs)
			}
			if res.shortHeader != tt.wantShort {
				t.Errorf("shortHeader %v; want %v", res.shortHeader, tt.wantShort)
			}
			if !tt.wantShort && res.end != tt.wantEnd {
				t.Errorf("end %d; want %d", res.end, tt.wantEnd)
			}
			if (tt.wantTorn == "") != (res.tornReason == "") || !strings.Contains(res.tornReason, tt.wantTorn) {
				t.Errorf("torn reason %q; want one containing %q", res.tornReason, tt.wantTorn)
			}
		})
	}
}

// TestHostileLengthAllocatesLittle is checklist item 5: a length field
// claiming far more than the file holds must not be allocated.
func TestHostileLengthAllocatesLittle(t *testing.T) {
	// Not parallel: allocBytes reads the process-wide allocation count.
	data := seg(frame("alpha", 40))
	binary.LittleEndian.PutUint32(data[40:44], 1<<30)
	var res scanResult
	b := allocBytes(func() { res, _ = scanSegment(bytes.NewReader(data), int64(len(data)), 1<<30, nil) })
	if b > 64<<10 {
		t.Fatalf("decoding a frame that claims 1 GiB allocated %d bytes", b)
	}
	if res.tornReason == "" || res.records != 0 {
		t.Fatalf("a frame claiming 1 GiB in a %d-byte file decoded as %+v; want a torn tail", len(data), res)
	}
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// allocBytes returns how many bytes fn allocated on the heap.
func allocBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// goldenRecords is the fixed record set of the golden segment.
func goldenRecords() [][]byte {
	return [][]byte{[]byte(""), []byte("a"), []byte("enqueue job-1"), []byte("exactly8"), bytes.Repeat([]byte{0xff}, 33)}
}

// buildGolden writes the golden journal: the records one Append each, then
// three more in one AppendBatch (they share a synced offset).
func buildGolden(t *testing.T) []byte {
	m := vfs.NewMem()
	j := mustOpen(t, m, "j", Options{})
	for _, r := range goldenRecords() {
		if _, err := j.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.AppendBatch([][]byte{[]byte("b1"), []byte("b2"), []byte("b3")}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	data, err := m.ReadFile(segPath("j", 1))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestGolden is checklist item 7: the bytes of a fixed journal never change
// (run with -update to rewrite testdata/v2.seg after a deliberate format
// change, which also needs a new Version), and the file opens.
func TestGolden(t *testing.T) {
	t.Parallel()
	golden := filepath.Join("testdata", "v2.seg")
	got := buildGolden(t)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run `go test -run TestGolden -update` to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("segment bytes changed:\n got %x\nwant %x\nThe on-disk format must not change; if this is a deliberate new format version, rerun with -update", got, want)
	}
	m := vfs.NewMem()
	m.MkdirAll("old")
	m.WriteFile(segPath("old", 1), want)
	j := mustOpen(t, m, "old", Options{})
	defer mustClose(t, j)
	var recs []string
	for _, e := range readAll(t, j) {
		recs = append(recs, string(e.rec))
	}
	var wantRecs []string
	for _, r := range goldenRecords() {
		wantRecs = append(wantRecs, string(r))
	}
	wantRecs = append(wantRecs, "b1", "b2", "b3")
	if strings.Join(recs, "|") != strings.Join(wantRecs, "|") {
		t.Fatalf("golden file replays %q; want %q", recs, wantRecs)
	}
}

// TestVersion1StillOpens: a segment written by the version 1 code
// (testdata/v1.seg, committed before version 2 existed) opens and replays,
// takes new records (its header, which does not say whether it was
// preallocated, is kept), and the next segment is version 2.
func TestVersion1StillOpens(t *testing.T) {
	t.Parallel()
	old, err := os.ReadFile(filepath.Join("testdata", "v1.seg"))
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(old[8:12]); v != 1 {
		t.Fatalf("testdata/v1.seg has version %d", v)
	}
	m := vfs.NewMem()
	m.MkdirAll("old")
	m.WriteFile(segPath("old", 1), old)
	j := mustOpen(t, m, "old", Options{})
	var recs []string
	for _, e := range readAll(t, j) {
		recs = append(recs, string(e.rec))
	}
	var want []string
	for _, r := range goldenRecords() {
		want = append(want, string(r))
	}
	want = append(want, "b1", "b2", "b3")
	if strings.Join(recs, "|") != strings.Join(want, "|") {
		t.Fatalf("v1 segment replays %q; want %q", recs, want)
	}
	if _, err := j.Append([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Rotate(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append([]byte("in v2")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	j = mustOpen(t, m, "old", Options{})
	got := readAll(t, j)
	mustClose(t, j)
	if len(got) != len(want)+2 || string(got[len(got)-1].rec) != "in v2" {
		t.Fatalf("after appends: %d records", len(got))
	}
	first, _ := m.ReadFile(segPath("old", 1))
	second, _ := m.ReadFile(segPath("old", 2))
	if v1, v2 := binary.LittleEndian.Uint32(first[8:12]), binary.LittleEndian.Uint32(second[8:12]); v1 != 1 || v2 != Version {
		t.Fatalf("segment versions %d and %d; want 1 (kept) and %d", v1, v2, Version)
	}
}
