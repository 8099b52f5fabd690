package runlog_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// TestSnapshotOnDemand (issue 15): Runner.Snapshot, the one name of the act
// (Compact before), writes a snapshot of the durable state now and drops the
// journal segments it covers; the next Open starts from it and has every
// job. It is about the embedded journal, so it opens one under either
// RUNLOG_TEST_STORE.
func TestSnapshotOnDemand(t *testing.T) {
	dir := t.TempDir()
	cfg := runlog.Config{
		Handlers:      map[string]runlog.Handler{"k": runlog.Handle(func(context.Context, []byte) error { return nil })},
		Logger:        quietLogger(),
		SegmentSize:   64 << 10,
		SnapshotBytes: 1 << 40, // none in the background: only the one asked for
	}
	r, err := runlog.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	payload := []byte(strings.Repeat("x", 4<<10))
	var ids []uint64
	for range 100 { // about 400 KiB of journal: several 64 KiB segments
		id, err := r.Enqueue(ctx, "k", payload, runlog.RunIn(24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	segs := func() []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := segs()
	if snaps, _ := filepath.Glob(filepath.Join(dir, "*.snap")); len(before) < 4 || len(snaps) != 0 {
		t.Fatalf("before Snapshot: %d segments, snapshots %v; want at least 4 segments and no snapshot", len(before), snaps)
	}
	if err := r.Snapshot(ctx); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "*.snap"))
	if after := segs(); len(snaps) != 1 || len(after) > 2 {
		t.Fatalf("after Snapshot: snapshots %v and %d segments (of %d); want one snapshot and the covered segments dropped", snaps, len(after), len(before))
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r = openRunnerAt(t, dir, cfg)
	for _, id := range ids {
		if j, err := r.Job(ctx, id); err != nil || j.State != runlog.StatePending {
			t.Fatalf("job %d after reopening from the snapshot: %+v, %v", id, j, err)
		}
	}
}

// openRunnerAt opens the embedded journal in dir and closes it when the
// test ends.
func openRunnerAt(t *testing.T, dir string, cfg runlog.Config) *runlog.Runner {
	t.Helper()
	r, err := runlog.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}
