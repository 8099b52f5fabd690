package journal

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/runlog/runlog/internal/vfs"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomised tests (0: pick one and print it)")

// testSeed returns the seed for a randomised test and logs it.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	return seed
}

// iterations is how many rounds a randomised test runs: the value of the
// environment variable env if set, else short in -short mode, else normal.
func iterations(env string, short, normal int) int {
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return short
	}
	return normal
}

// payload is the deterministic content of test record i: lengths from 0 to
// 20 bytes so that every padding size occurs.
func payload(i int) []byte {
	s := "r" + strconv.Itoa(i) + "-abcdefghijklmnopqrstuvwxyz"
	return []byte(s[:i%21])
}

// entry is a record as Replay or Scan delivers it.
type entry struct {
	pos Position
	rec []byte
}

// readAll replays every record of j.
func readAll(t testing.TB, j *Journal) []entry {
	t.Helper()
	var out []entry
	if err := j.Replay(0, func(pos Position, rec []byte) error {
		out = append(out, entry{pos, bytes.Clone(rec)})
		return nil
	}); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return out
}

// mustOpen opens a journal. With the default 64 MiB segment size it turns
// preallocation off, to keep test filesystems small.
func mustOpen(t testing.TB, fsys vfs.FS, dir string, opts Options) *Journal {
	t.Helper()
	opts.FS = fsys
	if opts.SegmentSize == 0 {
		opts.NoPreallocate = true
	}
	j, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j
}

func mustClose(t testing.TB, j *Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// writeRecords appends payload(0..n-1) one Append each (one group commit
// per record) and returns their positions.
func writeRecords(t testing.TB, j *Journal, n int) []Position {
	t.Helper()
	pos := make([]Position, n)
	for i := range n {
		p, err := j.Append(payload(i))
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		pos[i] = p
	}
	return pos
}

// checkRecords asserts that got holds exactly payload(i) at positions
// want[i] for i < len(want).
func checkRecords(t testing.TB, got []entry, want []Position) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("recovered %d records; want %d", len(got), len(want))
	}
	for i, e := range got {
		if e.pos != want[i] || !bytes.Equal(e.rec, payload(i)) {
			t.Fatalf("record %d is %+v %q; want %+v %q", i, e.pos, e.rec, want[i], payload(i))
		}
	}
}

// mustVerify runs Verify and fails on any error.
func mustVerify(t testing.TB, fsys vfs.FS, dir string, opts Options) Report {
	t.Helper()
	rep, err := Verify(fsys, dir, opts)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// segPath is the path of segment idx in dir.
func segPath(dir string, idx uint64) string { return filepath.Join(dir, segName(idx)) }

// wantCorrupt asserts err is a *CorruptError about file at offset.
func wantCorrupt(t testing.TB, err error, file string, offset int64) {
	t.Helper()
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
		t.Fatalf("error %v; want a *CorruptError", err)
	}
	if ce.File != file || ce.Offset != offset {
		t.Fatalf("corruption reported in %s at %d; want %s at %d (%v)", ce.File, ce.Offset, file, offset, err)
	}
	if msg := err.Error(); !bytes.Contains([]byte(msg), []byte(fmt.Sprintf("%s at offset %d", file, offset))) {
		t.Fatalf("message %q does not name the file and offset", msg)
	}
}
