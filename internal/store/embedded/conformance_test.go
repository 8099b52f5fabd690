package embedded

import (
	"testing"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/storetest"
)

// TestConformance holds the embedded store to the contract both stores
// share (package storetest), on a real directory with small segments and
// snapshots so that rotation and snapshots happen inside the cases.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) (store.Store, func(*testing.T) store.Store) {
		dir := t.TempDir()
		openDir := func(t *testing.T) store.Store {
			s, err := Open(dir, Options{
				Journal:       journal.Options{SegmentSize: 4 << 10, NoPreallocate: true},
				SnapshotBytes: 3 << 10,
				State:         state.Config{Circuit: cfg.Circuit, DisableAfterMS: cfg.DisableAfterMS, Limits: cfg.Limits},
				Retention:     cfg.Retention,
				Now:           storetest.T0,
			})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return openDir(t), openDir
	})
}
