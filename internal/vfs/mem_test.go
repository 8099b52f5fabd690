package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func mustCreate(t *testing.T, fsys FS, name string, data []byte) File {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	return f
}

func fileBytes(t *testing.T, m *Mem, name string) []byte {
	t.Helper()
	b, err := m.ReadFile(name)
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", name, err)
	}
	return b
}

// TestMemCrashCloneKeepsOnlySynced walks the durability rules: bytes need
// Sync, names need SyncDir.
func TestMemCrashCloneKeepsOnlySynced(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		run       func(t *testing.T, m *Mem)
		wantFile  bool
		wantBytes string
	}{
		{"created, nothing synced", func(t *testing.T, m *Mem) {
			mustCreate(t, m, "d/f", []byte("abc"))
		}, false, ""},
		{"file synced, directory not", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abc"))
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}, false, ""},
		{"directory synced, file not", func(t *testing.T, m *Mem) {
			mustCreate(t, m, "d/f", []byte("abc"))
			if err := m.SyncDir("d"); err != nil {
				t.Fatal(err)
			}
		}, true, ""},
		{"both synced", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abc"))
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := m.SyncDir("d"); err != nil {
				t.Fatal(err)
			}
		}, true, "abc"},
		{"write after sync is lost", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abc"))
			f.Sync()
			m.SyncDir("d")
			f.Write([]byte("def"))
		}, true, "abc"},
		{"unsynced truncate is lost", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abcdef"))
			f.Sync()
			m.SyncDir("d")
			f.Truncate(2)
		}, true, "abcdef"},
		{"synced truncate then append", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abcdef"))
			f.Sync()
			m.SyncDir("d")
			f.Truncate(2)
			f.WriteAt([]byte("XY"), 2)
			f.Sync()
		}, true, "abXY"},
		{"unsynced remove is lost", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abc"))
			f.Sync()
			m.SyncDir("d")
			m.Remove("d/f")
		}, true, "abc"},
		{"synced remove", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abc"))
			f.Sync()
			m.SyncDir("d")
			m.Remove("d/f")
			m.SyncDir("d")
		}, false, ""},
		{"rename needs SyncDir", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/tmp", []byte("abc"))
			f.Sync()
			m.Rename("d/tmp", "d/f")
		}, false, ""},
		{"rename synced", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/tmp", []byte("abc"))
			f.Sync()
			m.Rename("d/tmp", "d/f")
			m.SyncDir("d")
		}, true, "abc"},
		{"failed sync forgets dirty bytes (fsyncgate)", func(t *testing.T, m *Mem) {
			f := mustCreate(t, m, "d/f", []byte("abc"))
			f.Sync()
			m.SyncDir("d")
			f.Write([]byte("def"))
			m.SetInjector(FailIf(func(op Op) bool { return op.Kind == OpSync }))
			if err := f.Sync(); !errors.Is(err, ErrInjected) {
				t.Fatalf("Sync = %v, want ErrInjected", err)
			}
			m.SetInjector(nil)
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}, true, "abc\x00\x00\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMem()
			if err := m.MkdirAll("d"); err != nil {
				t.Fatal(err)
			}
			tt.run(t, m)
			c := m.CrashClone(nil)
			got, err := c.ReadFile("d/f")
			if !tt.wantFile {
				if err == nil {
					t.Fatalf("file survived the crash with %q; want it gone", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("file lost in the crash: %v", err)
			}
			if string(got) != tt.wantBytes {
				t.Fatalf("after crash: %q, want %q", got, tt.wantBytes)
			}
		})
	}
}

// TestMemCrashCloneRandom checks that a random crash keeps every synced
// byte and otherwise only bytes that were written.
func TestMemCrashCloneRandom(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 200 {
		m := NewMem()
		m.MkdirAll("d")
		f := mustCreate(t, m, "d/f", nil)
		m.SyncDir("d")
		var live []byte
		synced := 0
		for range 1 + rng.IntN(10) {
			chunk := make([]byte, 1+rng.IntN(1500))
			for i := range chunk {
				chunk[i] = byte(1 + rng.IntN(255))
			}
			f.Write(chunk)
			live = append(live, chunk...)
			if rng.IntN(3) == 0 {
				f.Sync()
				synced = len(live)
			}
		}
		got := fileBytes(t, m.CrashClone(rng), "d/f")
		if len(got) < synced || !bytes.Equal(got[:synced], live[:synced]) {
			t.Fatalf("synced prefix of %d bytes not kept: got %d bytes", synced, len(got))
		}
		if len(got) > len(live) {
			t.Fatalf("crash grew the file to %d bytes beyond the %d written", len(got), len(live))
		}
		for i := synced; i < len(got); i++ {
			if got[i] != 0 && got[i] != live[i] {
				t.Fatalf("byte %d is %d, neither written (%d) nor zero", i, got[i], live[i])
			}
		}
	}
}

// TestMemCrashClonePendingDirOpsInOrder checks that a random crash applies a
// prefix of the pending directory changes: a rename is atomic.
func TestMemCrashClonePendingDirOpsInOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for range 100 {
		m := NewMem()
		m.MkdirAll("d")
		f := mustCreate(t, m, "d/a.tmp", []byte("x"))
		f.Sync()
		m.Rename("d/a.tmp", "d/a")
		c := m.CrashClone(rng)
		names, err := c.List("d")
		if err != nil {
			t.Fatal(err)
		}
		key := filepath.Join(names...)
		switch key {
		case "", "a.tmp", "a":
		default:
			t.Fatalf("crash left %v; want nothing, a.tmp or a", names)
		}
		seen[key] = true
	}
	if len(seen) != 3 {
		t.Fatalf("over 100 crashes saw only %v; want all three states", seen)
	}
}

func TestMemInjection(t *testing.T) {
	t.Parallel()
	m := NewMem()
	m.MkdirAll("d")
	f := mustCreate(t, m, "d/f", nil)
	var seen []Op
	m.SetInjector(func(op Op) error {
		seen = append(seen, op)
		if op.Index == 2 {
			return ErrInjected
		}
		return nil
	})
	if _, err := f.Write([]byte("abcd")); err != nil {
		t.Fatal(err)
	}
	n, err := f.Write([]byte("efgh"))
	var pe *fs.PathError
	if !errors.Is(err, ErrInjected) || !errors.As(err, &pe) || pe.Op != "write" || pe.Path != "d/f" {
		t.Fatalf("second write: %v; want an *fs.PathError for write d/f wrapping ErrInjected", err)
	}
	if n != 2 {
		t.Fatalf("failed write stored %d bytes; want half (2)", n)
	}
	if got := fileBytes(t, m, "d/f"); string(got) != "abcdef" {
		t.Fatalf("file holds %q; want the short write abcdef", got)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	want := []Op{{OpWrite, "d/f", 1}, {OpWrite, "d/f", 2}, {OpSync, "d/f", 3}}
	if !slices.Equal(seen, want) {
		t.Fatalf("ops %v; want %v", seen, want)
	}
	if m.Ops() != 3 || m.Injected() != 1 {
		t.Fatalf("Ops %d Injected %d; want 3 and 1", m.Ops(), m.Injected())
	}
}

func TestInjectors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		inj  Injector
		fail []int64 // indexes among 1..6 that fail
	}{
		{"FailNth", FailNth(3), []int64{3}},
		{"FailFrom", FailFrom(4), []int64{4, 5, 6}},
		{"FailIf", FailIf(func(op Op) bool { return op.Index%2 == 0 }), []int64{2, 4, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			for i := int64(1); i <= 6; i++ {
				if err := tt.inj(Op{Kind: OpSync, Index: i}); err != nil {
					if !errors.Is(err, ErrInjected) {
						t.Fatalf("error %v is not ErrInjected", err)
					}
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tt.fail) {
				t.Fatalf("failed %v; want %v", got, tt.fail)
			}
		})
	}
}

// testFS runs the same behaviour checks against any FS.
func testFS(t *testing.T, fsys FS, dir string) {
	sub := filepath.Join(dir, "a", "b")
	if err := fsys.MkdirAll(sub); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, fsys, filepath.Join(sub, "f"), []byte("hello world"))
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 6); err != nil || string(buf) != "world" {
		t.Fatalf("ReadAt = %q, %v", buf, err)
	}
	if _, err := f.WriteAt([]byte("W"), 6); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(7); err != nil {
		t.Fatal(err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 7 {
		t.Fatalf("Stat = %v, %v; want size 7", st, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(f)
	if err != nil || string(all) != "hello W" {
		t.Fatalf("ReadAll = %q, %v", all, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Rename(filepath.Join(sub, "f"), filepath.Join(sub, "g")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(sub); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, fsys, filepath.Join(sub, "h"), nil).Close()
	names, err := fsys.List(sub)
	if err != nil || !slices.Equal(names, []string{"g", "h"}) {
		t.Fatalf("List = %v, %v; want [g h]", names, err)
	}
	if _, err := fsys.Open(filepath.Join(sub, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of renamed-away file: %v; want ErrNotExist", err)
	}
	rw, err := fsys.OpenReadWrite(filepath.Join(sub, "g"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.WriteAt([]byte("!"), 7); err != nil {
		t.Fatal(err)
	}
	rw.Close()
	if st, err := fsys.Stat(filepath.Join(sub, "g")); err != nil || st.Size() != 8 || st.IsDir() {
		t.Fatalf("Stat = %v, %v; want an 8-byte file", st, err)
	}
	if err := fsys.Remove(filepath.Join(sub, "g")); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Stat(filepath.Join(sub, "g")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v; want ErrNotExist", err)
	}
	lockPath := filepath.Join(dir, "LOCK")
	l, err := fsys.Lock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Lock(lockPath); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: %v; want ErrLocked", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := fsys.Lock(lockPath)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	l2.Close()
}

func TestMemBehaviour(t *testing.T) {
	t.Parallel()
	testFS(t, NewMem(), "root")
}

func TestOSBehaviour(t *testing.T) {
	t.Parallel()
	testFS(t, OS{}, t.TempDir())
}

// TestMemGapsReadAsZeros: writing past the end, or growing with Truncate,
// after a shrink never shows the old bytes again.
func TestMemGapsReadAsZeros(t *testing.T) {
	t.Parallel()
	m := NewMem()
	m.MkdirAll("d")
	f := mustCreate(t, m, "d/f", []byte("0123456789"))
	f.Truncate(2)
	f.WriteAt([]byte("X"), 5)
	if got := fileBytes(t, m, "d/f"); string(got) != "01\x00\x00\x00X" {
		t.Fatalf("after shrink and write past the end: %q", got)
	}
	f.Truncate(1)
	f.Truncate(4)
	if got := fileBytes(t, m, "d/f"); string(got) != "0\x00\x00\x00" {
		t.Fatalf("after shrink and grow: %q", got)
	}
	f.Sync()
	m.SyncDir("d")
	if got := fileBytes(t, m.CrashClone(nil), "d/f"); string(got) != "0\x00\x00\x00" {
		t.Fatalf("after sync and crash: %q", got)
	}
}

// TestMemCapacity checks the full disk that SetCapacity models: growth past
// the capacity stores what fits and fails with ENOSPC, overwrites need no
// room, a failed growing Truncate changes nothing, and removing a file
// frees its bytes.
func TestMemCapacity(t *testing.T) {
	t.Parallel()
	m := NewMem()
	if err := m.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	m.SetCapacity(100)
	a, err := m.Create("/d/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(make([]byte, 60), 0); err != nil {
		t.Fatalf("write within capacity: %v", err)
	}
	b, err := m.Create("/d/b")
	if err != nil {
		t.Fatal(err)
	}
	n, err := b.WriteAt(bytes.Repeat([]byte{1}, 50), 0)
	if n != 40 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past capacity = %d, %v; want 40, ENOSPC", n, err)
	}
	if got := m.Free(); got != 0 {
		t.Fatalf("Free = %d; want 0", got)
	}
	if _, err := a.WriteAt(bytes.Repeat([]byte{2}, 60), 0); err != nil {
		t.Fatalf("overwrite on a full disk: %v", err)
	}
	if err := a.Truncate(70); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("growing Truncate on a full disk = %v; want ENOSPC", err)
	}
	if fi, _ := a.Stat(); fi.Size() != 60 {
		t.Fatalf("size after failed Truncate = %d; want 60", fi.Size())
	}
	if n, err := b.WriteAt([]byte{1}, 90); n != 0 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write beyond the end on a full disk = %d, %v; want 0, ENOSPC", n, err)
	}
	if fi, _ := b.Stat(); fi.Size() != 40 {
		t.Fatalf("size after failed write = %d; want 40 (no gap grown)", fi.Size())
	}
	a.Close()
	if err := m.Remove("/d/a"); err != nil {
		t.Fatal(err)
	}
	if got := m.Free(); got != 60 {
		t.Fatalf("Free after remove = %d; want 60", got)
	}
	if _, err := b.WriteAt(make([]byte, 50), 40); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
}

// TestOSLockAfterAChildReleases: a lock released here but still held
// through a child process that inherited its descriptor (as every child is
// between fork and exec) is taken once the child lets go, not refused.
// The child here holds it on purpose for 200 ms (ExtraFiles), where a real
// fork holds it until its exec.
func TestOSLockAfterAChildReleases(t *testing.T) {
	t.Parallel()
	lockPath := filepath.Join(t.TempDir(), "LOCK")
	l, err := OS{}.Lock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "0.2")
	child.ExtraFiles = []*os.File{l.(*os.File)}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	l.Close() // released here; the child's copy still holds it
	l2, err := OS{}.Lock(lockPath)
	if err != nil {
		t.Fatalf("Lock while a child held the released lock for 200 ms: %v; want it taken once the child let go", err)
	}
	l2.Close()
}
