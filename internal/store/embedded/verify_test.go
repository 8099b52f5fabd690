package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/vfs"
)

// TestVersion1DirectoryOpens: a data directory written by the code before
// journal format version 2 and the marker (testdata/v1dir: a snapshot of 30
// jobs, then 70 more in version 1 segments, the active one preallocated)
// verifies clean, opens with its 100 jobs (keys included), takes new jobs,
// and reopens and verifies clean with them.
func TestVersion1DirectoryOpens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join("testdata", "v1dir")
	names, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{
		Journal: journal.Options{SegmentSize: 4096},
		State:   state.Config{Circuit: testCircuit},
		Now:     time.Now().UnixMilli(),
	}
	rep, err := Verify(vfs.OS{}, dir, opts)
	if err != nil || rep.Jobs != 100 || rep.Snapshot.Seq != 30 || rep.Journal.Torn != nil {
		t.Fatalf("Verify of the version 1 directory: %+v, %v; want 100 jobs from snapshot 30", rep, err)
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open of the version 1 directory: %v", err)
	}
	ctx := context.Background()
	for _, key := range []string{"job-0", "job-29", "job-30", "job-99"} {
		if _, ok := s.st.ByKey(key); !ok {
			t.Errorf("job %q is missing", key)
		}
	}
	if _, err := s.Enqueue(ctx, opts.Now, []store.NewJob{{Spec: state.Spec{Kind: "noop", Key: "new"}, Due: opts.Now}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(vfs.OS{}, dir, opts)
	if err != nil || rep.Jobs != 101 {
		t.Fatalf("Verify after new jobs: %+v, %v; want 101 jobs", rep, err)
	}
	s, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, _ := s.Stats(ctx); st.Counts.Total() != 101 {
		t.Fatalf("after reopening: %+v; want 101 jobs", st.Counts)
	}
}

// hookFS calls hook before each Open.
type hookFS struct {
	vfs.FS
	hook func(name string)
}

func (h hookFS) Open(name string) (vfs.File, error) {
	h.hook(name)
	return h.FS.Open(name)
}

// TestVerifyBesideAWriter: a rotation between Verify's listing of the
// segments and its reading of the newest one trims that segment below its
// preallocated size as it seals it; Verify must not call that damage.
func TestVerifyBesideAWriter(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	j, err := journal.Open("d", journal.Options{FS: m, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for range 5 {
		if _, err := j.Append(state.Encode(nil, &state.Op{Kind: state.OpEnqueue, ID: j.LastSeq() + 1, At: 1, Spec: &state.Spec{Kind: "noop"}})); err != nil {
			t.Fatal(err)
		}
	}
	newest := j.Segments()[0].Path
	rotated := false
	fsys := hookFS{FS: m, hook: func(name string) {
		if name == newest && !rotated {
			rotated = true
			if _, err := j.Rotate(); err != nil {
				t.Error(err)
			}
		}
	}}
	rep, err := Verify(fsys, "d", Options{State: state.Config{Circuit: testCircuit}})
	if !rotated {
		t.Fatal("the hook never rotated")
	}
	if err != nil || rep.Jobs != 5 {
		t.Fatalf("Verify beside a rotation: %+v, %v; want 5 jobs and no error", rep, err)
	}
}

// TestVerifyTableInUse: Verify of the directory of a store that is open
// (this process holds the table's lock) reports the table in use, unread,
// and no damage; an error of the table's open that only mentions a block
// or a permission is not taken for the lock (tableLocked), so that a
// damaged or unreadable table is reported, not skipped.
func TestVerifyTableInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := int64(1_700_000_000_000)
	s := openStore(t, dir, now)
	defer s.Close()
	fillStore(t, s, 300)
	if _, err := s.snaps.snapshot(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(vfs.OS{}, dir, Options{State: state.Config{Circuit: testCircuit}})
	if err != nil || !rep.TableInUse || rep.TableJobs != 0 {
		t.Fatalf("Verify beside the open store: %+v, %v; want the table in use, unread, and no error", rep, err)
	}
	for _, c := range []struct {
		err    error
		locked bool
	}{
		{fmt.Errorf("open LOCK: %w", syscall.EAGAIN), true},
		{errors.New("lock held by current process"), true},
		{errors.New("pebble/table: invalid table 000005: block checksum mismatch"), false},
		{fmt.Errorf("open LOCK: %w", syscall.EACCES), false},
		{fmt.Errorf("open MANIFEST: %w", os.ErrNotExist), false},
	} {
		if got := tableLocked(c.err); got != c.locked {
			t.Errorf("tableLocked(%q) = %v, want %v", c.err, got, c.locked)
		}
	}
}
