package embedded

import (
	"context"
	"os"
	"path/filepath"
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
