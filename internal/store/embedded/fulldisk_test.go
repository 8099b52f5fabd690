package embedded

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

// TestFailedBackgroundSnapshotBacksOff (issue 14 item 9): a background
// snapshot that finds no room is tried again after another SnapshotBytes of
// journal, not at every sync (each try fills what room is left on the disk
// before it fails, and the log said "next try after more writes").
func TestFailedBackgroundSnapshotBacksOff(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	var tries, failures atomic.Int64
	m.SetInjector(func(op vfs.Op) error {
		if op.Kind == vfs.OpCreate && strings.HasSuffix(op.Path, ".snap.tmp") {
			tries.Add(1)
			return syscall.ENOSPC
		}
		return nil
	})
	const threshold = 4 << 10
	s, err := Open(memDir, Options{
		Journal:       journal.Options{FS: m, SegmentSize: 64 << 10, NoPreallocate: true},
		State:         state.Config{Circuit: testCircuit},
		Now:           1,
		SnapshotBytes: threshold,
		Logf: func(format string, args ...any) {
			if strings.Contains(format, "background snapshot failed") {
				failures.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var journalBytes int64
	for i := range 400 {
		jobs := []store.NewJob{{Due: 1 << 40, Spec: state.Spec{Kind: "k", Payload: []byte("payload-payload-payload"), Policy: retry.Policy{Attempts: 1}}}}
		if _, err := s.Enqueue(ctx, int64(i), jobs); err != nil {
			t.Fatal(err)
		}
		s.snaps.wait() // a try started by this enqueue's sync ends first
	}
	s.snaps.wait()
	for _, seg := range s.j.Segments() {
		journalBytes += seg.Size
	}
	max := journalBytes/threshold + 1
	if n := tries.Load(); n == 0 || n > max {
		t.Fatalf("%d background snapshot tries for %d journal bytes; want 1 to %d (one per %d bytes)", n, journalBytes, max, threshold)
	}
	if failures.Load() != tries.Load() {
		t.Errorf("%d tries, %d logged failures; want each logged", tries.Load(), failures.Load())
	}
	t.Logf("%d tries for %d journal bytes", tries.Load(), journalBytes)
	m.SetInjector(nil)
	if err := s.Close(); err != nil {
		t.Fatalf("Close once there is room: %v", err)
	}
}
