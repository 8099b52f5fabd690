package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

const memDir = "/data"

// openMem opens a store on fsys with tiny segments and no automatic
// snapshots (the tests call Checkpoint).
func openMem(t testing.TB, fsys vfs.FS, now int64) (*Store, error) {
	t.Helper()
	return openMemKeep(t, fsys, now, 0)
}

// openMemKeep is openMem keeping keep snapshots (0: the default).
func openMemKeep(t testing.TB, fsys vfs.FS, now int64, keep int) (*Store, error) {
	t.Helper()
	return Open(memDir, Options{
		Journal:       journal.Options{FS: fsys, SegmentSize: 2 << 10, NoPreallocate: true},
		State:         state.Config{Circuit: testCircuit},
		Now:           now,
		SnapshotBytes: -1,
		KeepSnapshots: keep,
	})
}

// workload enqueues, runs and finishes jobs, and returns how many were
// enqueued; every call that returned nil is acknowledged.
func workload(t testing.TB, s *Store, rng *rand.Rand, now int64, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		jobs := []store.NewJob{{Due: now, Spec: state.Spec{Kind: "k", Target: fmt.Sprint("t", i%3), Payload: []byte("payload-payload-payload"), Policy: retry.Policy{Attempts: 3, BaseMS: 1, CapMS: 1}}}}
		if _, err := s.Enqueue(ctx, now, jobs); err != nil {
			t.Fatal(err)
		}
		cs, err := s.Claim(ctx, now, store.Limits{Max: rng.IntN(3)})
		if err != nil {
			t.Fatal(err)
		}
		var outs []store.Outcome
		for _, c := range cs {
			outs = append(outs, store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Class(1 + rng.IntN(3)), AfterMS: -1, Error: "e"})
		}
		if _, err := s.Finish(ctx, now, rng.Uint32, outs, store.Limits{}); err != nil {
			t.Fatal(err)
		}
		now++
	}
}

// mustDump lists every job of s (see dump).
func mustDump(t testing.TB, s *Store) []jobView {
	jobs, _ := dump(t, s)
	return jobs
}

func TestCheckpointDropsSegmentsAndReopens(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMem()
	s, err := openMem(t, fsys, 1000)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3 {
		workload(t, s, rng, 1000, 60)
		st, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if st.Seq == 0 || st.Jobs == 0 {
			t.Fatalf("checkpoint wrote nothing: %+v", st)
		}
	}
	live := mustDump(t, s)
	segs := s.j.Segments()
	infos, _ := snapshot.List(fsys, memDir)
	if len(infos) != DefaultKeepSnapshots {
		t.Fatalf("%d snapshots kept, want %d", len(infos), DefaultKeepSnapshots)
	}
	if segs[0].FirstSeq > infos[len(infos)-1].Seq+1 {
		t.Fatalf("journal starts at %d but the older snapshot covers only up to %d", segs[0].FirstSeq, infos[1].Seq)
	}
	if segs[0].FirstSeq == 1 {
		t.Fatalf("no segment was dropped: %+v", segs)
	}
	s.Close()
	s2, err := openMem(t, fsys, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := mustDump(t, s2); !reflect.DeepEqual(live, got) {
		t.Fatalf("state after snapshot+tail differs from live")
	}
}

// TestCorruptSnapshotFallsBack: with two snapshots kept, a damaged newest
// snapshot is detected by its checksum and the older one plus the journal
// gives the same state; with every snapshot damaged and the journal
// dropped, Open refuses clearly.
func TestCorruptSnapshotFallsBack(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMem()
	s, err := openMemKeep(t, fsys, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3 {
		workload(t, s, rng, 1000, 50)
		if _, err := s.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	workload(t, s, rng, 1000, 10) // a tail after the newest snapshot
	live := mustDump(t, s)
	s.j.Close() // a crash: no final snapshot
	infos, _ := snapshot.List(fsys, memDir)

	for _, damage := range []string{"flip", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			clone := fsys.CrashClone(nil)
			b, _ := clone.ReadFile(infos[0].Path)
			if damage == "flip" {
				b[len(b)/2] ^= 0x10
			} else {
				b = b[:len(b)-3]
			}
			clone.WriteFile(infos[0].Path, b)
			s2, err := openMemKeep(t, clone, 1000, 2)
			if err != nil {
				t.Fatalf("open with a damaged newest snapshot: %v", err)
			}
			defer s2.Close()
			if got := mustDump(t, s2); !reflect.DeepEqual(live, got) {
				t.Fatal("fallback state differs from live")
			}
		})
	}
	t.Run("all damaged", func(t *testing.T) {
		clone := fsys.CrashClone(nil)
		for _, in := range infos {
			b, _ := clone.ReadFile(in.Path)
			b[20] ^= 1
			clone.WriteFile(in.Path, b)
		}
		_, err := openMemKeep(t, clone, 1000, 2)
		if err == nil || !errors.Is(err, journal.ErrDropped) || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("open with every snapshot damaged: %v", err)
		}
	})
}

// TestCorruptSnapshotRefusedWithOneKept: with the default of one snapshot
// kept, a damaged snapshot is never loaded and Open says why and what to
// do, whatever the damage.
func TestCorruptSnapshotRefusedWithOneKept(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMem()
	s, err := openMem(t, fsys, 1000)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2 {
		workload(t, s, rng, 1000, 50)
		if _, err := s.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	workload(t, s, rng, 1000, 10)
	s.j.Close()
	infos, _ := snapshot.List(fsys, memDir)
	if len(infos) != 1 {
		t.Fatalf("%d snapshots on disk, want 1", len(infos))
	}
	good, _ := fsys.ReadFile(infos[0].Path)
	for i := 0; i < len(good); i += 1 + len(good)/50 {
		clone := fsys.CrashClone(nil)
		b := bytes.Clone(good)
		b[i] ^= 0x04
		clone.WriteFile(infos[0].Path, b)
		_, err := openMem(t, clone, 1000)
		if err == nil || !errors.Is(err, journal.ErrDropped) || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "backup") {
			t.Fatalf("byte %d flipped: open = %v", i, err)
		}
	}
}

// TestSnapshotTriggerGrowsWithSnapshot: a background snapshot starts once
// the journal has grown by the threshold or by the newest snapshot's size,
// whichever is larger.
func TestSnapshotTriggerGrowsWithSnapshot(t *testing.T) {
	t.Parallel()
	c := &snapshotter{threshold: 100, lastSize: 1000}
	c.synced(500)
	if c.running || c.pending != 500 {
		t.Fatalf("started at 500 journal bytes with a 1000-byte snapshot: running %v", c.running)
	}
	c.mu.Lock()
	c.lastSize = 10 // below the threshold: the threshold rules
	c.pending = 0
	c.mu.Unlock()
	c.synced(99)
	if c.running {
		t.Fatal("started below the threshold")
	}
	off := &snapshotter{threshold: 0}
	off.synced(1 << 30)
	if off.running {
		t.Fatal("started with snapshots off")
	}
}

// TestCrashAtEveryStepOfCheckpoint fails, then crashes, at every filesystem
// operation of a checkpoint (snapshot write, sync, rename, directory sync,
// clean, rotate, segment removal): reopening always gives the acknowledged
// state, and no temporary file is ever loaded.
func TestCrashAtEveryStepOfCheckpoint(t *testing.T) {
	t.Parallel()
	for n := int64(1); ; n++ {
		fsys := vfs.NewMem()
		s, err := openMem(t, fsys, 1000)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		workload(t, s, rng, 1000, 40)
		if _, err := s.Snapshot(); err != nil {
			t.Fatal(err)
		}
		workload(t, s, rng, 1000, 40)
		live := mustDump(t, s) // everything above was acknowledged
		fsys.SetInjector(vfs.FailNth(n))
		_, ckErr := s.Snapshot()
		injected := fsys.Injected() > 0
		for i, rng := range []*rand.Rand{nil, rand.New(rand.NewPCG(uint64(n), 7))} {
			clone := fsys.CrashClone(rng)
			s2, err := openMem(t, clone, 1000)
			if err != nil {
				t.Fatalf("op %d crash %d: reopen: %v (checkpoint error: %v)", n, i, err, ckErr)
			}
			if got := mustDump(t, s2); !reflect.DeepEqual(live, got) {
				t.Fatalf("op %d crash %d: reopened state differs from the acknowledged one", n, i)
			}
			names, _ := clone.List(memDir)
			for _, name := range names {
				if strings.HasSuffix(name, ".tmp") {
					t.Fatalf("op %d: a temporary file survived reopening: %s", n, filepath.Join(memDir, name))
				}
			}
			s2.Close()
		}
		fsys.SetInjector(nil)
		if !injected {
			if ckErr != nil {
				t.Fatalf("no fault injected, yet the checkpoint failed: %v", ckErr)
			}
			t.Logf("a checkpoint takes %d filesystem operations; a crash at each was survived", n-1)
			return
		}
	}
}

// TestStateAtTimeTravel rebuilds past states from snapshot + journal, back
// to the oldest kept snapshot; a position before it is refused with a
// reason.
func TestStateAtTimeTravel(t *testing.T) {
	t.Parallel()
	for _, keep := range []int{3, 1} {
		t.Run(fmt.Sprint("keep ", keep), func(t *testing.T) { testStateAtTimeTravel(t, keep) })
	}
}

func testStateAtTimeTravel(t *testing.T, keep int) {
	dir := t.TempDir()
	s, err := Open(dir, Options{
		Journal:       journal.Options{SegmentSize: 4 << 10, NoPreallocate: true},
		SnapshotBytes: -1,
		KeepSnapshots: keep,
		State:         state.Config{Circuit: testCircuit},
		Now:           1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var seqs []uint64
	for i := range 5 {
		jobs := []store.NewJob{{Due: 1000, Spec: state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}}}
		if _, err := s.Enqueue(ctx, 1000, jobs); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s.j.LastSeq())
		if i == 2 {
			// Sealed, the segment of records 1-3 can be dropped once a
			// snapshot covers them.
			if _, err := s.j.Rotate(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close() // no snapshot at Close: SnapshotBytes < 0
	for i, seq := range seqs {
		st, last, err := StateAt(nil, dir, state.Config{Circuit: testCircuit}, journal.Options{}, seq)
		if keep == 1 && i < 2 {
			// Writing the one snapshot kept dropped what came before it.
			if err == nil || !strings.Contains(err.Error(), "was dropped when that snapshot was written") {
				t.Fatalf("at %d, before the only snapshot: %v", seq, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("at %d: %v", seq, err)
		}
		if last != seq || st.Len() != i+1 {
			t.Fatalf("at %d: last %d, %d jobs, want %d", seq, last, st.Len(), i+1)
		}
	}
	if _, _, err := StateAt(nil, dir, state.Config{Circuit: testCircuit}, journal.Options{}, seqs[4]+100); err == nil {
		t.Fatal("a position past the end was accepted")
	}
}

// TestFailedSyncStopsWrites: after a failed fdatasync the store refuses every
// change (and every read of its possibly ahead-of-disk state) until it is
// reopened, and reopening gives back exactly the acknowledged jobs.
func TestFailedSyncStopsWrites(t *testing.T) {
	t.Parallel()
	fsys := vfs.NewMem()
	s, err := openMem(t, fsys, 1000)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := state.Spec{Kind: "k", Target: "t", Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}
	acked, err := s.Enqueue(ctx, 1000, []store.NewJob{{Due: 5000, Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	fsys.SetInjector(func(op vfs.Op) error {
		if op.Kind == vfs.OpSync {
			return vfs.ErrInjected
		}
		return nil
	})
	if _, err := s.Enqueue(ctx, 1000, []store.NewJob{{Due: 5000, Spec: spec}}); err == nil {
		t.Fatal("an enqueue whose sync failed was acknowledged")
	}
	fsys.SetInjector(nil) // the disk "recovers": the store must not
	if _, err := s.Enqueue(ctx, 1000, []store.NewJob{{Due: 5000, Spec: spec}}); err == nil || !strings.Contains(err.Error(), "reopen") {
		t.Fatalf("enqueue after a failed sync: %v", err)
	}
	if _, err := s.Claim(ctx, 9000, store.Limits{Max: 1}); err == nil {
		t.Fatal("claim after a failed sync succeeded")
	}
	if _, err := s.Job(ctx, acked[0].ID); err == nil {
		t.Fatal("the possibly ahead-of-disk state was still readable")
	}
	s.Close()
	s2, err := openMem(t, fsys.CrashClone(nil), 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Job(ctx, acked[0].ID); err != nil {
		t.Fatalf("acknowledged job lost: %v", err)
	}
	if c, _ := s2.Stats(ctx); c.Counts.Pending != 1 {
		t.Fatalf("after reopen %d jobs are pending, want exactly the acknowledged one", c.Counts.Pending)
	}
}
