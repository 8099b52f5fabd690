package journal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fuzzMaxRecord is the record limit the fuzz target decodes with.
const fuzzMaxRecord = 4096

// FuzzDecode is checklist item 6: arbitrary bytes as a segment never panic
// the decoder, never make it allocate beyond the window and MaxRecordSize,
// every record it returns re-encodes to the bytes it came from, and the
// records are a prefix of the input.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	v2, err := os.ReadFile(filepath.Join("testdata", "v2.seg"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v2)
	f.Add(appendHeaderSized(nil, 1, 1, 4096)) // a preallocated header
	f.Fuzz(func(t *testing.T, data []byte) {
		var frames [][]byte
		var decodeErr error
		alloc := allocBytes(func() {
			_, decodeErr = scanSegment(bytes.NewReader(data), int64(len(data)), fuzzMaxRecord, func(seq uint64, off int64, rec []byte) error {
				n := frameSize(len(rec))
				if len(rec) > fuzzMaxRecord || off+int64(n) > int64(len(data)) {
					t.Fatalf("record of %d bytes at %d does not fit the input", len(rec), off)
				}
				frames = append(frames, data[off:off+int64(n)])
				return nil
			})
		})
		if limit := uint64(4*(windowSize+fuzzMaxRecord) + 64<<10); alloc > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes (limit %d)", len(data), alloc, limit)
		}
		if decodeErr != nil && !isCorrupt(decodeErr) {
			t.Fatalf("decoding from memory failed with %v; want only corruption errors", decodeErr)
		}
		off := int64(HeaderSize)
		for _, fr := range frames {
			rec, synced, reason := checkFrame(fr)
			if reason != "" {
				t.Fatalf("returned frame does not check: %s", reason)
			}
			if again := appendFrame(nil, rec, synced); !bytes.Equal(again, fr) {
				t.Fatalf("record re-encodes to %x; the input held %x", again, fr)
			}
			if !bytes.Equal(data[off:off+int64(len(fr))], fr) {
				t.Fatalf("records are not a prefix of the input")
			}
			off += int64(len(fr))
		}
	})
}

func isCorrupt(err error) bool {
	_, ok := err.(*CorruptError)
	return ok
}

// fuzzSeeds are the committed seed inputs: the golden segment and damaged
// copies of it.
func fuzzSeeds() [][]byte {
	golden, err := os.ReadFile(filepath.Join("testdata", "v1.seg"))
	if err != nil {
		panic(err)
	}
	huge := bytes.Clone(golden)
	huge[HeaderSize+3] = 0x7f // a length of about 2 GiB
	return [][]byte{
		golden,
		golden[:HeaderSize],
		golden[:len(golden)-5],
		flip(golden, HeaderSize+20),
		flip(golden, 100),
		append(bytes.Clone(golden), make([]byte, 64)...),
		huge,
		{},
	}
}

// TestWriteFuzzCorpus writes the seed corpus under testdata/fuzz/FuzzDecode
// when run with -update.
func TestWriteFuzzCorpus(t *testing.T) {
	t.Parallel()
	if !*update {
		t.Skip("run with -update to rewrite the committed fuzz corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range fuzzSeeds() {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
