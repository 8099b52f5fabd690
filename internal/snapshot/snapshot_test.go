package snapshot

import (
	"bytes"
	"errors"
	"flag"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/vfs"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestGolden(t *testing.T) {
	t.Parallel()
	got := Encode(42, []byte("runlog snapshot body"))
	path := filepath.Join("testdata", "v1.snap")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the snapshot format changed:\ngot  %x\nwant %x", got, want)
	}
	seq, body, err := Decode(want)
	if err != nil || seq != 42 || string(body) != "runlog snapshot body" {
		t.Fatalf("decode golden: %d %q %v", seq, body, err)
	}
}

// TestEveryDamageDetected flips each bit of a snapshot and cuts it at every
// length: Decode refuses every one, never returning a wrong body.
func TestEveryDamageDetected(t *testing.T) {
	t.Parallel()
	good := Encode(7, []byte("the whole durable state"))
	for i := range good {
		for bit := range 8 {
			b := bytes.Clone(good)
			b[i] ^= 1 << bit
			if _, _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("bit %d of byte %d flipped: err = %v", bit, i, err)
			}
		}
	}
	for n := range len(good) {
		if _, _, err := Decode(good[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d: err = %v", n, err)
		}
	}
}

func TestLoadFallsBackPastDamage(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMem()
	dir := "/data"
	if err := fsys.MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{10, 20, 30} {
		if _, err := Write(fsys, dir, seq, []byte{byte(seq)}); err != nil {
			t.Fatal(err)
		}
	}
	// Damage the newest: Load uses 20 and reports 30.
	newest := filepath.Join(dir, Name(30))
	b, _ := fsys.ReadFile(newest)
	b[len(b)-1] ^= 0xff
	if err := fsys.WriteFile(newest, b); err != nil {
		t.Fatal(err)
	}
	l := load(t, fsys, dir)
	if l.info.Seq != 20 || !bytes.Equal(l.body, []byte{20}) || len(l.damaged) != 1 || !strings.Contains(l.damaged[0].Error(), Name(30)) {
		t.Fatalf("load: %+v", l)
	}
	// upTo skips the newer ones without calling them damaged.
	if in, damaged, err := Newest(fsys, dir, 15, func(*Body) error { return nil }); err != nil || in.Seq != 10 || len(damaged) != 0 {
		t.Fatalf("Newest up to 15: %+v, %v, %v", in, damaged, err)
	}
	// A snapshot its user rejects is damaged too.
	if in, damaged, err := Newest(fsys, dir, 0, func(b *Body) error {
		if b.Seq == 20 {
			return errors.New("does not decode")
		}
		return nil
	}); err != nil || in.Seq != 10 || len(damaged) != 2 {
		t.Fatalf("Newest with 20 rejected: %+v, %v, %v", in, damaged, err)
	}
	// Clean keeps the newest two names and removes the rest.
	if err := Clean(fsys, dir, 2); err != nil {
		t.Fatal(err)
	}
	infos, _ := List(fsys, dir)
	if len(infos) != 2 || infos[0].Seq != 30 || infos[1].Seq != 20 {
		t.Fatalf("after Clean: %+v", infos)
	}
}

// TestWriteCrashAtEveryStep fails, then crashes, at every filesystem
// operation of a Write: the directory then holds either the old snapshot
// alone or the new one complete, and Load never reads a temporary file.
func TestWriteCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	newBody := []byte("new state")
	testCrashAtEveryStep(t, newBody, func(fsys vfs.FS, dir string) error {
		_, err := Write(fsys, dir, 2, newBody)
		return err
	})
}

// TestWriterCrashAtEveryStep is the same for a body streamed in pieces,
// long enough that the Writer syncs along the way.
func TestWriterCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	newBody := bytes.Repeat([]byte("streamed state "), (2*SyncEvery+5)/15+1)
	testCrashAtEveryStep(t, newBody, func(fsys vfs.FS, dir string) error {
		w, err := Create(fsys, dir, 2)
		if err != nil {
			return err
		}
		for rest := newBody; len(rest) > 0; {
			n := min(len(rest), 300<<10)
			if _, err := w.Write(rest[:n]); err != nil {
				w.Abort()
				return err
			}
			rest = rest[n:]
		}
		_, err = w.Commit()
		return err
	})
}

// testCrashAtEveryStep fails, once each, every filesystem operation of
// write (which stores newBody as snapshot 2 over an older snapshot 1), then
// crashes: the directory then holds the old or the new snapshot, whole,
// and never a stray temporary file after Clean.
func testCrashAtEveryStep(t *testing.T, newBody []byte, write func(vfs.FS, string) error) {
	for n := int64(1); ; n++ {
		fsys := vfs.NewMem()
		dir := "/data"
		fsys.MkdirAll(dir)
		if _, err := Write(fsys, dir, 1, []byte("old")); err != nil {
			t.Fatal(err)
		}
		fsys.SyncDir(dir)
		fsys.SetInjector(vfs.FailNth(n))
		werr := write(fsys, dir)
		injected := fsys.Injected() > 0
		for _, rng := range []*rand.Rand{nil, rand.New(rand.NewPCG(uint64(n), 1))} {
			clone := fsys.CrashClone(rng)
			l := load(t, clone, dir)
			switch {
			case l.info.Seq == 2 && bytes.Equal(l.body, newBody):
			case l.info.Seq == 1 && string(l.body) == "old":
				if werr == nil && rng == nil {
					t.Fatalf("op %d: Write succeeded but a crash lost the new snapshot", n)
				}
			default:
				t.Fatalf("op %d: loaded %+v", n, l)
			}
			if err := Clean(clone, dir, 2); err != nil {
				t.Fatalf("op %d: clean: %v", n, err)
			}
			names, _ := clone.List(dir)
			for _, name := range names {
				if strings.HasSuffix(name, tmpSuffix) {
					t.Fatalf("op %d: Clean left %s", n, name)
				}
			}
		}
		if !injected {
			if werr != nil {
				t.Fatalf("no fault injected but Write failed: %v", werr)
			}
			return // every step of Write has been failed once
		}
	}
}

// TestOpenBodyStreamsAndRefusesDamage: the streaming open returns the body
// of an intact file and refuses every bit flip and cut.
func TestOpenBodyStreamsAndRefusesDamage(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMem()
	fsys.MkdirAll("/d")
	good := Encode(9, []byte("streamed body"))
	fsys.WriteFile("/d/s", good)
	b, err := OpenBody(fsys, "/d/s")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(b)
	b.Close()
	if b.Seq != 9 || b.Size != len("streamed body") || string(got) != "streamed body" {
		t.Fatalf("body: seq %d size %d %q", b.Seq, b.Size, got)
	}
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x04
		fsys.WriteFile("/d/s", bad)
		if b, err := OpenBody(fsys, "/d/s"); err == nil {
			b.Close()
			t.Fatalf("a flip at byte %d was accepted", i)
		}
		fsys.WriteFile("/d/s", good[:i])
		if b, err := OpenBody(fsys, "/d/s"); err == nil {
			b.Close()
			t.Fatalf("a cut at %d was accepted", i)
		}
	}
}

// TestWriterStreamsTheSameBytes: a body written in pieces of any size gives
// the same file as Encode of the whole body (the header written last, the
// checksum combined from its parts).
func TestWriterStreamsTheSameBytes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{0, 1, 100, SyncEvery - 1, SyncEvery, 3*SyncEvery + 17} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		fsys := vfs.NewMem()
		fsys.MkdirAll("/d")
		w, err := Create(fsys, "/d", 9)
		if err != nil {
			t.Fatal(err)
		}
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(200<<10))
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if w.Size() != int64(size) {
			t.Fatalf("Size = %d, want %d", w.Size(), size)
		}
		path, err := w.Commit()
		if err != nil {
			t.Fatal(err)
		}
		got, err := fsys.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, Encode(9, body)) {
			t.Fatalf("size %d: the streamed file differs from Encode", size)
		}
	}
}

func TestCRC32Combine(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		b := make([]byte, rng.IntN(5000))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		cut := 0
		if len(b) > 0 {
			cut = rng.IntN(len(b) + 1)
		}
		got := crc32Combine(crc32.Checksum(b[:cut], crcTable), crc32.Checksum(b[cut:], crcTable), int64(len(b)-cut))
		if want := crc32.Checksum(b, crcTable); got != want {
			t.Fatalf("len %d cut %d: combined %08x, want %08x", len(b), cut, got, want)
		}
	}
}

// loaded is what load found.
type loaded struct {
	info    Info
	body    []byte
	damaged []error
}

// load reads the newest intact snapshot of dir whole, as Open would use it.
func load(t *testing.T, fsys vfs.FS, dir string) loaded {
	t.Helper()
	var l loaded
	var err error
	l.info, l.damaged, err = Newest(fsys, dir, 0, func(b *Body) (rerr error) {
		l.body, rerr = io.ReadAll(b)
		return rerr
	})
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	return l
}
