package journal

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/vfs"
)

// fullDiskSeg is the segment size of the full-disk tests.
const fullDiskSeg = 64 << 10

// kib is the content of record i of the full-disk tests: 1 KiB.
func kib(i int) []byte {
	return []byte(fmt.Sprintf("%-1024d", i))
}

// TestFullDiskPreallocationFails fills a disk that holds the active segment
// and half of another: preallocating the next segment finds no room. The
// journal must go on through the rest of the active segment and a rotation
// (to a segment that is not preallocated), leave no partial file eating the
// space, fail only once a write really finds no room, and keep every
// acknowledged record.
func TestFullDiskPreallocationFails(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	const dir = "/j"
	m.SetCapacity(fullDiskSeg + fullDiskSeg/2)
	warned := make(chan error, 100)
	opts := Options{FS: m, SegmentSize: fullDiskSeg, OnWarning: func(err error) {
		select {
		case warned <- err:
		default:
		}
	}}
	j, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	// Through the active segment and into the next one: a full disk for a
	// preallocation must not fail the journal.
	for {
		pos, err := j.Append(kib(acked))
		if err != nil {
			t.Fatalf("Append %d (%d bytes free): %v", acked, m.Free(), err)
		}
		acked++
		if pos.Segment == 2 {
			break
		}
	}
	select {
	case err := <-warned:
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "free disk space") {
			t.Errorf("warning = %v; want ENOSPC and what to do", err)
		}
	default:
		t.Error("no warning that the next segment could not be preallocated")
	}
	if names := dataFiles(m, dir); len(names) != 3 { // LOCK and two segments
		t.Errorf("files after the rotation: %v; want LOCK and two segments (no temporary file left)", names)
	}
	if fi, err := m.Stat(segPath(dir, 2)); err != nil || fi.Size() >= fullDiskSeg {
		t.Errorf("segment 2: %v, %v; want a segment that is not preallocated", fi, err)
	}
	// Now the disk runs out for real: the journal fails, saying why.
	for {
		_, err := j.Append(kib(acked))
		if err != nil {
			if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append on a full disk = %v; want ErrFailed wrapping ENOSPC", err)
			}
			break
		}
		acked++
		if acked > 1000 {
			t.Fatal("the disk never filled")
		}
	}
	if j.Err() == nil {
		t.Error("Err() = nil after a write found no room")
	}
	_ = j.Close()
	m.SetCapacity(0) // the operator frees space
	j = mustOpen(t, m, dir, Options{SegmentSize: fullDiskSeg})
	defer mustClose(t, j)
	got := readAll(t, j)
	if len(got) != acked {
		t.Fatalf("recovered %d records; want the %d acknowledged", len(got), acked)
	}
	for i, e := range got {
		if !bytes.Equal(e.rec, kib(i)) {
			t.Fatalf("record %d = %.20q; want %.20q", i, e.rec, kib(i))
		}
	}
	if _, err := j.Append(kib(acked)); err != nil {
		t.Fatalf("Append after freeing space and reopening: %v", err)
	}
}

// TestFullDiskRotate asks for a rotation on a disk with no room at all but
// in the active (preallocated) segment: the rotation fails, the journal
// does not, and appends go on in the active segment.
func TestFullDiskRotate(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	const dir = "/j"
	m.SetCapacity(fullDiskSeg)
	j := mustOpen(t, m, dir, Options{SegmentSize: fullDiskSeg})
	for i := range 10 {
		if _, err := j.Append(kib(i)); err != nil {
			t.Fatal(err)
		}
	}
	next, err := j.Rotate()
	if err == nil || errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Rotate on a full disk = %v; want an ENOSPC error that does not fail the journal", err)
	}
	if next != 11 {
		t.Errorf("Rotate's next sequence number = %d; want 11", next)
	}
	if err := j.Err(); err != nil {
		t.Fatalf("Err() after a rotation found no room = %v; want nil", err)
	}
	if names := dataFiles(m, dir); len(names) != 2 {
		t.Errorf("files: %v; want LOCK and one segment (no temporary file left)", names)
	}
	pos, err := j.Append(kib(10))
	if err != nil || pos.Segment != 1 {
		t.Fatalf("Append after the failed rotation = %+v, %v; want it in segment 1", pos, err)
	}
	mustClose(t, j)
	j = mustOpen(t, m, dir, Options{SegmentSize: fullDiskSeg})
	defer mustClose(t, j)
	if got := readAll(t, j); len(got) != 11 {
		t.Fatalf("recovered %d records; want 11", len(got))
	}
}

// TestFullDiskPreallocationRetried frees space after a preallocation failed:
// the journal tries again and the next segment is preallocated after all.
func TestFullDiskPreallocationRetried(t *testing.T) {
	d := prepareRetryDelay
	defer func() { prepareRetryDelay = d }()
	prepareRetryDelay = 0
	m := vfs.NewMem()
	const dir = "/j"
	m.SetCapacity(fullDiskSeg + fullDiskSeg/2)
	warned := make(chan error, 100)
	j := mustOpen(t, m, dir, Options{SegmentSize: fullDiskSeg, OnWarning: func(err error) {
		select {
		case warned <- err:
		default:
		}
	}})
	defer mustClose(t, j)
	freed := false
	for i := 0; ; i++ {
		pos, err := j.Append(kib(i))
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		if pos.Segment == 2 {
			break
		}
		if freed {
			continue
		}
		// The preparation of segment 2 starts once segment 1 is half full
		// and fails in the background; its failure is taken (and warned
		// about) by a later append. Past three quarters, give it time, so
		// that segment 1 does not fill before the failure is seen.
		wait := time.Duration(0)
		if pos.Offset > fullDiskSeg*3/4 {
			wait = 50 * time.Millisecond
		}
		select {
		case <-warned:
			m.SetCapacity(0)
			freed = true
		case <-time.After(wait):
		}
	}
	if !freed {
		t.Fatal("the preallocation never failed")
	}
	fi, err := m.Stat(filepath.Join(dir, segName(2)))
	if err != nil || fi.Size() != fullDiskSeg {
		t.Fatalf("segment 2: %v, %v; want it preallocated to %d bytes once space was freed", fi, err, fullDiskSeg)
	}
}

// dataFiles lists dir without the marker (MARK), which every journal has.
func dataFiles(m *vfs.Mem, dir string) []string {
	names, _ := m.List(dir)
	var out []string
	for _, n := range names {
		if n != markName {
			out = append(out, n)
		}
	}
	return out
}
